// `forge plot DIR [-o FILE]`: draws (or redraws) a training run's loss curve from its
// metrics.jsonl at any time, e.g. while `forge train` is still running in another terminal
// (forge train itself writes DIR/loss.svg at every checkpoint and at the end).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/loss_plot.h"
#include "forge/error.h"
#include "forge/run_dir.h"

namespace forge::cli {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, "plot: " + what);
}

struct PlotArgs {
  std::string dir;
  std::string output;  // default: DIR/loss.svg
};

int run_plot(const PlotArgs& a) {
  const fs::path metrics_path = fs::path(a.dir) / "metrics.jsonl";
  std::ifstream f(metrics_path, std::ios::binary);
  if (!f)
    fail(ErrorKind::Io, "cannot read " + metrics_path.string() + " (not a forge train folder?)");
  LossPoints train, val;
  std::string line;
  int64_t line_no = 0, last_step = -1;
  while (std::getline(f, line)) {
    ++line_no;
    nlohmann::json rec;
    try {
      rec = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      // The last line of a running (or killed) run may be cut short: ignore only that one.
      if (f.peek() == EOF) break;
      fail(ErrorKind::Format,
           metrics_path.string() + ":" + std::to_string(line_no) + ": not a JSON object");
    }
    if (!rec.is_object() || !rec.contains("step") || !rec["step"].is_number_integer())
      fail(ErrorKind::Format,
           metrics_path.string() + ":" + std::to_string(line_no) + ": no integer \"step\"");
    const int64_t step = rec["step"].get<int64_t>();
    if (step <= last_step)
      fail(ErrorKind::Format, metrics_path.string() + ":" + std::to_string(line_no) + ": step " +
                                  std::to_string(step) + " does not follow step " +
                                  std::to_string(last_step));
    last_step = step;
    if (rec.contains("loss") && rec["loss"].is_number())
      train.emplace_back(static_cast<double>(step), rec["loss"].get<double>());
    if (rec.contains("val_loss") && rec["val_loss"].is_number())
      val.emplace_back(static_cast<double>(step), rec["val_loss"].get<double>());
  }
  if (train.empty() && val.empty())
    fail(ErrorKind::Format, metrics_path.string() + " holds no losses yet");
  const fs::path out = a.output.empty() ? fs::path(a.dir) / "loss.svg" : fs::path(a.output);
  std::error_code ec;
  const std::string title =
      "forge train: " + fs::absolute(a.dir, ec).lexically_normal().filename().string();
  const std::string svg = loss_plot_svg(train, val, title);
  train::write_file_atomic(out.string(), svg, "plot");
  std::printf("plot: wrote %s (%zu train and %zu validation points)\n", out.c_str(), train.size(),
              val.size());
  return 0;
}

}  // namespace

void register_plot(CLI::App& app, Action& action) {
  CLI::App* cmd =
      app.add_subcommand("plot", "Draw a training run's loss curve (SVG) from its metrics.jsonl");
  auto a = std::make_shared<PlotArgs>();
  cmd->add_option("dir", a->dir, "The forge train output folder")->required();
  cmd->add_option("-o,--output", a->output, "SVG file to write (default: DIR/loss.svg)");
  cmd->callback([&action, a] { action = [a] { return run_plot(*a); }; });
}

}  // namespace forge::cli
