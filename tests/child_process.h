// The forge binary (FORGE_BINARY) as a child process that a test signals or kills: start it
// in the background, wait for it with a deadline.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace forge::test {

/// Starts forge with `args` in the background (stdout to `out`, by default /dev/null; stderr
/// to `err`); returns its pid. A non-empty `wrapper` (a command and its arguments, e.g.
/// setpriv's) runs forge: wrapper... FORGE_BINARY args...
inline pid_t spawn_forge(const std::vector<std::string>& args, const std::filesystem::path& err,
                         const std::vector<std::string>& wrapper = {},
                         const std::filesystem::path& out = "/dev/null") {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(out.c_str(), "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    std::vector<char*> argv;
    for (const std::string& w : wrapper) argv.push_back(const_cast<char*>(w.c_str()));
    argv.push_back(const_cast<char*>(FORGE_BINARY));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

/// What makes a child unprivileged enough for file permissions to bind it: nothing for a
/// normal user; for root, setpriv (util-linux) as nobody (uid/gid 65534), whose writes a
/// folder's mode can refuse.
inline std::vector<std::string> unprivileged_wrapper() {
  if (::geteuid() != 0) return {};
  return {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"};
}

/// Splits a command line at spaces (the tests' arguments hold none).
inline std::vector<std::string> split_args(const std::string& line) {
  std::vector<std::string> args;
  std::istringstream in(line);
  for (std::string a; in >> a;) args.push_back(a);
  return args;
}

/// Waits for the child; its exit code, 128 + signal, or -1 after `seconds` (then it is
/// killed).
inline int wait_for(pid_t pid, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace forge::test
