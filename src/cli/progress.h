// The training progress display on stderr: step/steps, loss, learning rate, grad norm,
// tokens/s and the estimated time left.
//
// On a terminal it is one line redrawn in place (\r, a bar sized to the terminal's width);
// otherwise (a log file, a pipe) it prints a plain line for the first and last step, every
// `every` steps and whenever `interval_s` seconds have passed since the last line, so logs
// stay short but a stalled run is still visible. Other messages (validation loss, samples,
// warnings) go through note(), which keeps them from being drawn over by the bar.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace forge::cli {

/// "45s", "3m12s", "2h05m" (whole seconds; "?" for a negative or non-finite value).
std::string format_duration(double seconds);

/// One step's figures for the display.
struct ProgressStep {
  int64_t step = 0;  // 1-based, of `steps` in the whole run (resumed runs continue counting)
  double loss = 0, lr = 0, grad_norm = 0, tok_s = 0;
  bool skipped = false;
};

class Progress {
 public:
  /// total_steps: the run's last step; first_step: the step this process starts after (a
  /// resumed run's checkpoint step), so the ETA counts only the steps this process times.
  /// tty: redraw in place (normally isatty(fileno(out))).
  Progress(int64_t total_steps, int64_t first_step, std::FILE* out, bool tty,
           double interval_s = 10.0);
  /// Shows a finished step (a skipped one also prints a warning line).
  void step(const ProgressStep& s);
  /// Prints a whole line (or several) without breaking the bar.
  void note(const std::string& text);
  /// Ends the bar's line (terminal) so later output starts on a fresh line.
  void finish();

  /// The text of the status line for `s` with `eta_s` seconds left, without a bar.
  static std::string line(const ProgressStep& s, int64_t total_steps, double eta_s);

 private:
  void draw();
  std::FILE* out_;
  bool tty_;
  int64_t total_, first_;
  double interval_s_;
  int64_t every_;
  std::chrono::steady_clock::time_point start_, last_print_;  // last_print_: line or redraw
  std::string current_;  // the last status line (redrawn after a note)
  int64_t current_step_ = 0;
  bool drawn_ = false;  // a bar is on the terminal's current line
};

}  // namespace forge::cli
