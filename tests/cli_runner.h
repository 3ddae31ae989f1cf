// Running the forge binary (FORGE_BINARY) from tests: exit code, stdout and stderr, and
// stdout parsed as JSON. Shared by the test_cli*.cpp files.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace forge::test {

struct CliResult {
  int code = -1;  // exit status; 128 + signal when killed by one
  std::string out, err;
};

/// A whole file's bytes ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Runs a shell command line (stdin from /dev/null); its exit code (128 + signal when
/// killed), stdout and stderr.
inline CliResult run_shell(const std::string& command) {
  static std::atomic<int> counter{0};
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir());
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const std::filesystem::path out = dir / ("forge_cli_out_" + tag);
  const std::filesystem::path err = dir / ("forge_cli_err_" + tag);
  const std::string cmd = command + " > " + out.string() + " 2> " + err.string() + " < /dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  if (status != -1 && WIFEXITED(status))
    r.code = WEXITSTATUS(status);
  else if (status != -1 && WIFSIGNALED(status))
    r.code = 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

/// Runs `<shell_prefix> env <env> forge <args>` through the shell, capturing stdout and
/// stderr in temp files. `env` ("NAME=value ...") is set for forge only; `shell_prefix` runs
/// in the same shell first (e.g. "ulimit -f 64;"). FORGE_NUM_THREADS is removed first, so
/// that the caller's environment cannot change what a test sees; tests that want it pass it
/// in `env`.
inline CliResult run_forge(const std::string& args, const std::string& env = "",
                           const std::string& shell_prefix = "") {
  return run_shell(shell_prefix + " env -u FORGE_NUM_THREADS " + env + " " FORGE_BINARY " " + args);
}

/// Parses stdout as JSON, failing the test (not crashing it) when it is not; an empty
/// object then.
inline nlohmann::json parse_json(const CliResult& r) {
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not JSON (" << e.what() << "):\n"
                  << r.out << "\nstderr:\n"
                  << r.err;
    return nlohmann::json::object();
  }
}

}  // namespace forge::test
