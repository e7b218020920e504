// Line charts written with PLplot's SVG driver (the CLI's only plotting need): labelled ticks at
// readable values (1-2-5 on logarithmic value axes, powers of two on logarithmic position axes), dashed
// vertical markers (a trained length, a method's window), the Okabe–Ito colour-blind-safe palette with a
// distinct marker per series, and the legend beside the data, never over it.
#pragma once

#include <string>
#include <vector>

namespace ropekit::cli {

struct Series {
  std::string label;
  std::vector<double> x, y;
};

// A dashed vertical line at x, labelled at the top of the plot.
struct VerticalMarker {
  double x = 0;
  std::string label;
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_x = false;  // x values must then be > 0 (others are left out); ticks at powers of two
  bool log_y = false;  // likewise for y; ticks at 1, 2, 5 × 10^k
  std::vector<Series> series;
  std::vector<VerticalMarker> markers;
  int max_ticks = 12;  // per axis (a small panel: fewer, so that labels do not run together)
};

// Writes `chart` to `path` as SVG (one panel). Throws ropekit::Error if the file cannot be written.
// Whether this build has PLplot; without it write_svg throws ropekit::Error naming the path.
bool plots_available();
// Throws write_svg's error for `path` up front (a command checks its --svg options before its work, not after an
// hour of it); nothing where the path is empty or PLplot is built in.
void require_plots(const std::string& path);
void write_svg(const Chart& chart, const std::string& path);
// Several charts as panels of one SVG, `columns` across (the attention probe: one panel per method); each
// panel's title says what it shows.
void write_svg(const std::vector<Chart>& panels, int columns, const std::string& path);

// A grid of values in [0, 1] drawn as coloured cells (passkey accuracy: rows lengths, columns depths), each cell
// labelled with its text; one panel per heatmap, a shared colour bar.
struct Heatmap {
  std::string title, x_label, y_label;
  std::vector<std::string> columns, rows;      // tick labels, left to right and bottom to top
  std::vector<std::vector<double>> values;     // [row][column], in [0, 1]; NaN: an empty cell
  std::vector<std::vector<std::string>> text;  // [row][column], written in the cell
};
// Several heatmaps as panels of one SVG, `columns` across, on one colour scale (white 0 → dark blue 1: the
// long-context papers' passkey grids). Throws as write_svg.
void write_heatmaps_svg(const std::vector<Heatmap>& panels, int columns, const std::string& path);

// The tick values a chart's axis gets for data spanning [lo, hi] (exposed for tests): log axes — powers of
// two (positions) or 1-2-5 steps (values) inside the span, thinned to at most max_ticks; linear axes — a 1-2-5
// step giving 4 to 10 ticks.
std::vector<double> axis_ticks(double lo, double hi, bool log, bool powers_of_two, int max_ticks = 12);

}  // namespace ropekit::cli
