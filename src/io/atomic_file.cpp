#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "forge/error.h"

namespace forge::io {

namespace {

/// Removes "<path>.tmp.<pid>" files of processes that no longer exist: what a writer killed
/// mid-write (SIGKILL, power loss) left. A live process's temp file is its write in progress
/// and stays. Best effort: errors are ignored.
void remove_dead_writers_temp_files(const std::string& path) {
#ifndef __EMSCRIPTEN__  // no other processes there
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
  }
#else
  (void)path;
#endif
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, const char* context)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())), context_(context) {
  remove_dead_writers_temp_files(path_);
  do {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0)
    throw Error(ErrorKind::Io,
                context_ + ": " + path_ + ": cannot create " + tmp_ + ": " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what) {
  const std::string reason = std::strerror(errno);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw Error(ErrorKind::Io, context_ + ": " + path_ + ": " + what + ": " + reason);
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) throw Error(ErrorKind::Io, context_ + ": " + path_ + ": write after failure");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // Large writes in 1 GiB pieces: Linux caps one write() near 2 GiB anyway.
    const size_t chunk = bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30);
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    if (w == 0) {
      errno = ENOSPC;  // a zero-byte write of a non-empty buffer: treat as a full disk
      fail("write failed");
    }
    p += w;
    bytes -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error(ErrorKind::Io, context_ + ": " + path_ + ": commit after failure");
  if (::fsync(fd_) != 0) fail("fsync failed");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close failed");  // NFS reports deferred write errors here
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot rename " + tmp_);
  committed_ = true;
  // Persist the rename itself; best effort (some filesystems refuse to fsync folders).
  const auto slash = path_.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace forge::io
