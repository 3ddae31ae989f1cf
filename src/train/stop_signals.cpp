// forge/run_dir.h: SIGINT/SIGTERM as "finish the step, save, exit"; a second one exits now.
#include <unistd.h>

#include <csignal>

#include "forge/run_dir.h"

namespace forge::train {
namespace {

volatile std::sig_atomic_t g_signal = 0;

void write_stderr(const char* s) {  // async-signal-safe
  size_t n = 0;
  while (s[n] != '\0') ++n;
  [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, s, n);
}

void on_stop_signal(int sig) {
  if (g_signal != 0) {
    write_stderr("\nforge train: second signal: exiting now (the last checkpoint is intact)\n");
    ::_exit(128 + sig);
  }
  g_signal = sig;
  write_stderr(
      "\nforge train: finishing this step, then saving a checkpoint (signal again to quit "
      "at once)\n");
}

}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_signal; }

}  // namespace forge::train
