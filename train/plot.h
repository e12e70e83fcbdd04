#pragma once
// A loss curve as a standalone SVG (no scripts, no fonts to fetch), from metrics.csv.

#include <string>
#include <utility>
#include <vector>

namespace seqtape {

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (step, value)
};

// Log-scale y axis when every value is > 0 and they span more than a factor 20.
std::string loss_curve_svg(const std::vector<Series>& series, const std::string& title);

// Reads metrics.csv (as written by the trainer) into train and valid loss series.
std::vector<Series> read_loss_series(const std::string& metrics_csv);

}  // namespace seqtape
