// What the file-format tests share (safetensors, GGUF): a file's raw bytes, and a write that
// runs out of room: a full disk simulated with RLIMIT_FSIZE.
#pragma once

#include <signal.h>
#include <sys/resource.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "forge/error.h"

namespace forge::test {

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Runs `write` with files limited to 64 KiB (writes past it fail with EFBIG once SIGXFSZ is
/// ignored; both are restored after). Returns the message of the Error(Io) it threw, or ""
/// when it threw none (or another kind).
inline std::string io_error_past_file_limit(const std::function<void()>& write) {
  rlimit saved{};
  if (::getrlimit(RLIMIT_FSIZE, &saved) != 0) return "";
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 64 << 10;
  std::string msg;
  if (::setrlimit(RLIMIT_FSIZE, &small) == 0) {
    try {
      write();
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Io) msg = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
  }
  ::signal(SIGXFSZ, old_handler);
  return msg;
}

}  // namespace forge::test
