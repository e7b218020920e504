#include "plot.hpp"

#include <fmt/format.h>
#include <plplot/plplot.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "ropekit/error.hpp"

namespace ropekit::cli {

void write_svg(const Chart& chart, const std::string& path) {
  {
    // PLplot exits the process when it cannot open its output; find out first.
    std::ofstream probe(path);
    if (!probe) throw Error(fmt::format("--svg {}: cannot write this file", path));
  }
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min, y_min = x_min, y_max = -x_min;
  std::vector<std::vector<PLFLT>> xs, ys;
  for (const Series& s : chart.series) {
    std::vector<PLFLT> x, y;
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (chart.log_x && !(s.x[i] > 0.0)) continue;
      if (chart.log_y && !(s.y[i] > 0.0)) continue;
      x.push_back(chart.log_x ? std::log10(s.x[i]) : s.x[i]);
      y.push_back(chart.log_y ? std::log10(s.y[i]) : s.y[i]);
      x_min = std::min(x_min, x.back());
      x_max = std::max(x_max, x.back());
      y_min = std::min(y_min, y.back());
      y_max = std::max(y_max, y.back());
    }
    xs.push_back(std::move(x));
    ys.push_back(std::move(y));
  }
  if (!(x_max > x_min)) x_max = x_min + 1.0;
  if (!chart.log_y) y_min = std::min(0.0, y_min);
  if (!(y_max > y_min)) y_max = y_min + 1.0;
  // Linear axes start at 0 with 5% headroom; log axes span the data with a twentieth of a decade.
  const double y_top = chart.log_y ? y_max + 0.05 : y_max * 1.05;
  if (chart.log_y) y_min -= 0.05;

  plsdev("svg");
  plsfnam(path.c_str());
  plscolbg(255, 255, 255);  // white background, black axes
  plscol0(15, 0, 0, 0);
  plspage(0, 0, 960, 600, 0, 0);
  plinit();
  plcol0(15);
  plenv(x_min, x_max, y_min, y_top, 0, (chart.log_x ? 10 : 0) + (chart.log_y ? 20 : 0));
  pllab(chart.x_label.c_str(), chart.y_label.c_str(), chart.title.c_str());
  // cmap0 colours 1..14 minus the pale ones; cycled.
  const std::vector<PLINT> palette = {1, 3, 9, 2, 8, 13, 10, 4, 12, 5};
  std::vector<PLINT> opts, colours, styles;
  std::vector<PLFLT> widths;
  std::vector<const char*> labels;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const PLINT colour = palette[i % palette.size()];
    plcol0(colour);
    plwidth(1.5);
    plline(PLINT(xs[i].size()), xs[i].data(), ys[i].data());
    opts.push_back(PL_LEGEND_LINE);
    colours.push_back(colour);
    styles.push_back(1);
    widths.push_back(1.5);
    labels.push_back(chart.series[i].label.c_str());
  }
  PLFLT legend_width = 0, legend_height = 0;
  const std::vector<PLINT> text_colours(labels.size(), 15);
  pllegend(&legend_width, &legend_height, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
           PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE, 0.02, 0.02, 0.08, 0, 15, 1, 0, 0,
           PLINT(labels.size()), opts.data(), 1.0, 0.8, 2.0, 0.0, text_colours.data(), labels.data(), nullptr, nullptr,
           nullptr, nullptr, colours.data(), styles.data(), widths.data(), nullptr, nullptr, nullptr, nullptr);
  plend();
}

}  // namespace ropekit::cli
