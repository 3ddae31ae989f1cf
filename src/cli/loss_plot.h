// The loss curve of a training run as a stand-alone SVG file (hand-written: no plotting
// dependency): train loss as a line, validation loss as a line with markers, against the
// step, with ticked and labelled axes, a grid and a legend.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace forge::cli {

/// (step, loss) points in step order. Non-finite losses (skipped steps) are left out.
using LossPoints = std::vector<std::pair<double, double>>;

/// Tick positions for an axis over [lo, hi]: multiples of 1, 2 or 5 x 10^k, about `target`
/// of them, covering the range (the first tick <= lo, the last >= hi). lo == hi gets a unit
/// range around it.
std::vector<double> nice_ticks(double lo, double hi, int target);

/// The SVG text. Train series longer than `max_points` are drawn as means of consecutive
/// groups of steps (the legend then says so), so a long run's file stays small.
std::string loss_plot_svg(const LossPoints& train, const LossPoints& val, const std::string& title,
                          size_t max_points = 2000);

}  // namespace forge::cli
