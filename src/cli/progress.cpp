#include "cli/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace forge::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string printf_string(const char* fmt, auto... args) {
  char buf[256];
  const int n = std::snprintf(buf, sizeof buf, fmt, args...);
  return n < 0 ? std::string()
               : std::string(buf, std::min<size_t>(static_cast<size_t>(n), sizeof buf - 1));
}

/// Columns of the terminal behind `out`, or 80 when it cannot be told.
int terminal_columns(std::FILE* out) {
  winsize w{};
  if (::ioctl(fileno(out), TIOCGWINSZ, &w) == 0 && w.ws_col >= 20) return w.ws_col;
  return 80;
}

/// A figure for messages: "nan" / "inf" / "-inf" spelled the same on every libc.
std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return printf_string("%.4g", v);
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  // Beyond ~100 days the figure means nothing; cap it rather than print a huge number.
  const auto s = static_cast<long long>(std::min(seconds, 1e7) + 0.5);
  if (s < 60) return printf_string("%llds", s);
  if (s < 3600) return printf_string("%lldm%02llds", s / 60, s % 60);
  return printf_string("%lldh%02lldm", s / 3600, (s % 3600) / 60);
}

std::string Progress::line(const ProgressStep& s, int64_t total_steps, double eta_s) {
  const int width = static_cast<int>(std::to_string(total_steps).size());
  // Non-finite figures as "nan"/"inf" (glibc would print "-nan" for some NaNs).
  auto fixed = [](double v, const char* fmt) {
    return std::isfinite(v) ? printf_string(fmt, v) : number(v);
  };
  return printf_string("step %*lld/%lld | loss %s | lr %.3e | norm %s | %.0f tok/s | ETA %s", width,
                       static_cast<long long>(s.step), static_cast<long long>(total_steps),
                       fixed(s.loss, "%.4f").c_str(), s.lr, fixed(s.grad_norm, "%.3f").c_str(),
                       s.tok_s, format_duration(eta_s).c_str());
}

Progress::Progress(int64_t total_steps, int64_t first_step, std::FILE* out, bool tty,
                   double interval_s)
    : out_(out),
      tty_(tty),
      total_(total_steps),
      first_(first_step),
      interval_s_(interval_s),
      // About 20 lines over a run in a log, whatever its length.
      every_(std::max<int64_t>(1, (total_steps - first_step) / 20)),
      start_(Clock::now()),
      last_print_(start_) {}

void Progress::step(const ProgressStep& s) {
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int64_t done = s.step - first_;
  const double eta =
      done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - s.step) : -1.0;
  current_ = line(s, total_, eta);
  current_step_ = s.step;
  if (s.skipped)
    note(printf_string(
        "warning: step %lld skipped: loss %s, grad norm %s (not finite); no "
        "update was made",
        static_cast<long long>(s.step), number(s.loss).c_str(), number(s.grad_norm).c_str()));
  if (tty_) {
    // At most ~20 redraws a second: fast steps would otherwise flood the terminal.
    if (!drawn_ || s.step == total_ ||
        std::chrono::duration<double>(now - last_print_).count() >= 0.05) {
      draw();
      last_print_ = now;
    }
    return;
  }
  const bool due = s.step == first_ + 1 || s.step == total_ || s.step % every_ == 0 ||
                   std::chrono::duration<double>(now - last_print_).count() >= interval_s_;
  if (due) {
    std::fprintf(out_, "%s\n", current_.c_str());
    std::fflush(out_);
    last_print_ = now;
  }
}

void Progress::draw() {
  const int cols = terminal_columns(out_);
  std::string text = current_;
  // A bar in front when there is room: [#####-----] for the fraction of steps done.
  const int bar = std::min(30, cols - static_cast<int>(text.size()) - 4);
  if (bar >= 10 && total_ > 0) {
    const int fill =
        static_cast<int>(static_cast<double>(bar) * static_cast<double>(current_step_) /
                         static_cast<double>(total_));
    text = "[" + std::string(static_cast<size_t>(fill), '#') +
           std::string(static_cast<size_t>(bar - fill), '-') + "] " + text;
  }
  if (static_cast<int>(text.size()) >= cols) text.resize(static_cast<size_t>(cols - 1));
  std::fprintf(out_, "\r%s\x1b[K", text.c_str());
  std::fflush(out_);
  drawn_ = true;
}

void Progress::note(const std::string& text) {
  if (tty_ && drawn_) std::fprintf(out_, "\r\x1b[K");
  std::fprintf(out_, "%s\n", text.c_str());
  if (tty_ && drawn_)
    draw();
  else
    std::fflush(out_);
}

void Progress::finish() {
  if (tty_ && drawn_) std::fprintf(out_, "\n");
  drawn_ = false;
  std::fflush(out_);
}

}  // namespace forge::cli
