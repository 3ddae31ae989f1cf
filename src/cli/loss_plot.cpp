#include "cli/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace forge::cli {
namespace {

// Canvas and plot area, in SVG user units (pixels).
constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 78, kRight = 24, kTop = 44, kBottom = 58;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;
constexpr const char* kTrainColor = "#1f77b4";
constexpr const char* kValColor = "#d62728";

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// A coordinate with two decimals (enough at this size, and keeps the file small).
std::string coord(double v) { return fmt("%.2f", v); }

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

/// A tick label: as many decimals as the tick spacing needs, no more.
std::string tick_label(double v, double spacing) {
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(spacing) - 1e-9)), 0, 8);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::abs(v) < spacing * 1e-9 ? 0.0 : v);
  return buf;
}

LossPoints finite_only(const LossPoints& in) {
  LossPoints out;
  for (const auto& [x, y] : in)
    if (std::isfinite(x) && std::isfinite(y)) out.emplace_back(x, y);
  return out;
}

/// Means of consecutive groups of `group` points (the last group may be shorter).
LossPoints group_means(const LossPoints& in, size_t group) {
  LossPoints out;
  for (size_t i = 0; i < in.size(); i += group) {
    const size_t end = std::min(in.size(), i + group);
    double sx = 0, sy = 0;
    for (size_t j = i; j < end; ++j) {
      sx += in[j].first;
      sy += in[j].second;
    }
    const double n = static_cast<double>(end - i);
    out.emplace_back(sx / n, sy / n);
  }
  return out;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0.0, 1.0};
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    lo -= 0.5;
    hi += 0.5;
  }
  target = std::max(target, 2);
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  const double first = std::floor(lo / step + 1e-9) * step;
  const double last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> ticks;
  // Computed from an integer index so that no rounding error accumulates.
  const auto n = static_cast<int64_t>(std::llround((last - first) / step));
  for (int64_t i = 0; i <= n; ++i) ticks.push_back(first + static_cast<double>(i) * step);
  return ticks;
}

std::string loss_plot_svg(const LossPoints& train_in, const LossPoints& val_in,
                          const std::string& title, size_t max_points) {
  const LossPoints val = finite_only(val_in);
  LossPoints train = finite_only(train_in);
  size_t group = 1;
  if (max_points > 0 && train.size() > max_points) {
    group = (train.size() + max_points - 1) / max_points;
    train = group_means(train, group);
  }

  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  double ymin = xmin, ymax = -xmin;
  for (const LossPoints* s : {static_cast<const LossPoints*>(&train), &val})
    for (const auto& [x, y] : *s) {
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  if (!std::isfinite(xmin)) xmin = xmax = ymin = ymax = 0;  // no data: an empty frame
  const std::vector<double> xt = nice_ticks(xmin, xmax, 8), yt = nice_ticks(ymin, ymax, 6);
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * kPlotW; };
  auto py = [&](double y) { return kTop + kPlotH - (y - y0) / (y1 - y0) * kPlotH; };

  std::string s;
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + coord(kWidth) + "\" height=\"" +
       coord(kHeight) + "\" viewBox=\"0 0 " + coord(kWidth) + " " + coord(kHeight) +
       "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + coord(kWidth / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
       xml_escape(title) + "</text>\n";

  // Grid and ticks.
  s += "<g class=\"x-ticks\" stroke=\"#e0e0e0\">\n";
  for (double t : xt)
    s += "<line x1=\"" + coord(px(t)) + "\" y1=\"" + coord(kTop) + "\" x2=\"" + coord(px(t)) +
         "\" y2=\"" + coord(kTop + kPlotH) + "\"/>\n";
  s += "</g>\n<g class=\"y-ticks\" stroke=\"#e0e0e0\">\n";
  for (double t : yt)
    s += "<line x1=\"" + coord(kLeft) + "\" y1=\"" + coord(py(t)) + "\" x2=\"" +
         coord(kLeft + kPlotW) + "\" y2=\"" + coord(py(t)) + "\"/>\n";
  s += "</g>\n<g class=\"x-labels\" text-anchor=\"middle\">\n";
  const double xs = xt.size() > 1 ? xt[1] - xt[0] : 1.0, ys = yt.size() > 1 ? yt[1] - yt[0] : 1.0;
  for (double t : xt)
    s += "<text x=\"" + coord(px(t)) + "\" y=\"" + coord(kTop + kPlotH + 18) + "\">" +
         tick_label(t, xs) + "</text>\n";
  s += "</g>\n<g class=\"y-labels\" text-anchor=\"end\">\n";
  for (double t : yt)
    s += "<text x=\"" + coord(kLeft - 8) + "\" y=\"" + coord(py(t) + 4) + "\">" +
         tick_label(t, ys) + "</text>\n";
  s += "</g>\n";
  // Frame and axis titles.
  s += "<rect x=\"" + coord(kLeft) + "\" y=\"" + coord(kTop) + "\" width=\"" + coord(kPlotW) +
       "\" height=\"" + coord(kPlotH) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  s += "<text x=\"" + coord(kLeft + kPlotW / 2) + "\" y=\"" + coord(kHeight - 14) +
       "\" text-anchor=\"middle\">step</text>\n";
  s += "<text transform=\"translate(20 " + coord(kTop + kPlotH / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">loss (nats per token)</text>\n";

  // The series.
  auto polyline = [&](const LossPoints& pts, const char* color, const char* cls) {
    if (pts.empty()) return;
    s += std::string("<polyline class=\"") + cls + "\" fill=\"none\" stroke=\"" + color +
         "\" stroke-width=\"1.5\" points=\"";
    for (size_t i = 0; i < pts.size(); ++i)
      s += (i ? " " : "") + coord(px(pts[i].first)) + "," + coord(py(pts[i].second));
    s += "\"/>\n";
  };
  polyline(train, kTrainColor, "train");
  polyline(val, kValColor, "val");
  s += std::string("<g class=\"val-markers\" fill=\"") + kValColor + "\">\n";
  for (const auto& [x, y] : val)
    s += "<circle cx=\"" + coord(px(x)) + "\" cy=\"" + coord(py(y)) + "\" r=\"3\"/>\n";
  s += "</g>\n";

  // Legend, top right inside the plot.
  const std::string train_name =
      group > 1 ? "train (mean of every " + std::to_string(group) + " steps)" : "train";
  const double lx = kLeft + kPlotW - 250, ly = kTop + 10;
  s += "<g class=\"legend\">\n<rect x=\"" + coord(lx) + "\" y=\"" + coord(ly) +
       "\" width=\"240\" height=\"46\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#999\"/>\n";
  s += "<line x1=\"" + coord(lx + 10) + "\" y1=\"" + coord(ly + 15) + "\" x2=\"" + coord(lx + 34) +
       "\" y2=\"" + coord(ly + 15) + "\" stroke=\"" + kTrainColor + "\" stroke-width=\"2\"/>\n";
  s +=
      "<text x=\"" + coord(lx + 42) + "\" y=\"" + coord(ly + 19) + "\">" + train_name + "</text>\n";
  s += "<line x1=\"" + coord(lx + 10) + "\" y1=\"" + coord(ly + 33) + "\" x2=\"" + coord(lx + 34) +
       "\" y2=\"" + coord(ly + 33) + "\" stroke=\"" + kValColor + "\" stroke-width=\"2\"/>\n";
  s += "<circle cx=\"" + coord(lx + 22) + "\" cy=\"" + coord(ly + 33) + "\" r=\"3\" fill=\"" +
       kValColor + "\"/>\n";
  s += "<text x=\"" + coord(lx + 42) + "\" y=\"" + coord(ly + 37) + "\">validation</text>\n";
  s += "</g>\n</svg>\n";
  return s;
}

}  // namespace forge::cli
