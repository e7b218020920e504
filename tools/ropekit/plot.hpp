// A line chart written with PLplot's SVG driver (the CLI's only plotting need).
#pragma once

#include <string>
#include <vector>

namespace ropekit::cli {

struct Series {
  std::string label;
  std::vector<double> x, y;
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_x = false;  // x values must then be > 0 (others are left out)
  bool log_y = false;  // likewise for y
  std::vector<Series> series;
};

// Writes `chart` to `path` as SVG. Throws ropekit::Error if the file cannot be written.
void write_svg(const Chart& chart, const std::string& path);

}  // namespace ropekit::cli
