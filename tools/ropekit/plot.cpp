// Line charts with PLplot's SVG driver (plot.hpp). Axes are drawn by hand — ticks, labels and grid at the
// values axis_ticks picks — because PLplot's own logarithmic axes label only whole decades (a PPL axis from
// 2 to 50 showed one label, 10¹).
#include "plot.hpp"

#include <fmt/format.h>
#if ROPEKIT_HAVE_PLPLOT
#include <plplot/plplot.h>
#endif

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "ropekit/error.hpp"

namespace ropekit::cli {
#if ROPEKIT_HAVE_PLPLOT
namespace {

// Okabe & Ito's colour-blind-safe palette (without its yellow, unreadable on white), then a grey; series
// past it repeat the colours with dashed lines. Each series also gets its own marker (Hershey glyphs:
// circle, square, triangle, diamond, filled square, filled triangle, inverted triangle, plus, cross, star).
constexpr int kColours[][3] = {{0, 0, 0},    {230, 159, 0}, {86, 180, 233},  {0, 158, 115},
                               {213, 94, 0}, {0, 114, 178}, {204, 121, 167}, {120, 120, 120}};
constexpr int kPalette = 8;
constexpr PLINT kFirstColour = 1;  // cmap0 entries 1 … 8
constexpr PLINT kGrid = 9, kMarker = 10, kInk = 15;
constexpr const char* kGlyphs[] = {"#(840)", "#(841)", "#(842)", "#(843)", "#(851)",
                                   "#(852)", "#(854)", "#(845)", "#(846)", "#(847)"};

void set_colours() {
  plscmap0n(16);
  plscol0(0, 255, 255, 255);  // background
  for (int i = 0; i < kPalette; ++i) plscol0(kFirstColour + i, kColours[i][0], kColours[i][1], kColours[i][2]);
  plscol0(kGrid, 225, 225, 225);
  plscol0(kMarker, 90, 90, 90);
  plscol0(kInk, 0, 0, 0);
}

std::string tick_label(double v) {
  if (v >= 1 && v == std::floor(v) && v < 1e9) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{:g}", v);
}

double to_axis(double v, bool log) { return log ? std::log10(v) : v; }

struct Extent {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

// Draws one chart in the viewport [left, right] × [bottom, top] of the current (sub)page.
void draw_panel(const Chart& chart, double left, double right, double bottom, double top) {
  Extent x, y;
  for (const Series& s : chart.series) {
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if ((chart.log_x && !(s.x[i] > 0)) || (chart.log_y && !(s.y[i] > 0))) continue;
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      x.add(s.x[i]);
      y.add(s.y[i]);
    }
  }
  for (const VerticalMarker& m : chart.markers) {
    if (!chart.log_x || m.x > 0) x.add(m.x);
  }
  if (!(x.hi >= x.lo)) x = {1, 2};
  if (!(y.hi >= y.lo)) y = {1, 2};
  if (!chart.log_y) y.lo = std::min(0.0, y.lo);
  // World coordinates: the data with a margin (a twentieth of the span; log axes in decades).
  double x0 = to_axis(x.lo, chart.log_x), x1 = to_axis(x.hi, chart.log_x);
  double y0 = to_axis(y.lo, chart.log_y), y1 = to_axis(y.hi, chart.log_y);
  if (!(x1 > x0)) x1 = x0 + 1;
  if (!(y1 > y0)) y1 = y0 + 1;
  const double dx = (x1 - x0) * 0.04, dy = (y1 - y0) * 0.06;
  x0 -= dx, x1 += dx, y1 += dy;
  if (chart.log_y || y0 != 0) y0 -= dy;

  plvpor(left, right, bottom, top);
  plwind(x0, x1, y0, y1);
  const std::vector<double> xt = axis_ticks(x.lo, x.hi, chart.log_x, true, chart.max_ticks);
  const std::vector<double> yt = axis_ticks(y.lo, y.hi, chart.log_y, false, chart.max_ticks);
  // Grid, then the frame, the ticks and their labels.
  plcol0(kGrid);
  plwidth(0.5);
  for (double v : xt) pljoin(to_axis(v, chart.log_x), y0, to_axis(v, chart.log_x), y1);
  for (double v : yt) pljoin(x0, to_axis(v, chart.log_y), x1, to_axis(v, chart.log_y));
  plcol0(kInk);
  plwidth(1.0);
  plbox("bc", 0, 0, "bc", 0, 0);
  for (double v : xt) {
    const double a = to_axis(v, chart.log_x);
    pljoin(a, y0, a, y0 + (y1 - y0) * 0.015);
    plmtex("b", 1.4, (a - x0) / (x1 - x0), 0.5, tick_label(v).c_str());
  }
  for (double v : yt) {
    const double a = to_axis(v, chart.log_y);
    pljoin(x0, a, x0 + (x1 - x0) * 0.01, a);
    plmtex("lv", 0.6, (a - y0) / (y1 - y0), 1.0, tick_label(v).c_str());
  }
  plmtex("b", 3.0, 0.5, 0.5, chart.x_label.c_str());
  plmtex("l", 4.2, 0.5, 0.5, chart.y_label.c_str());
  // Markers: dashed verticals, each labelled just above the frame.
  plcol0(kMarker);
  pllsty(2);
  plschr(0, 0.65);
  for (const VerticalMarker& m : chart.markers) {
    if (chart.log_x && !(m.x > 0)) continue;
    const double a = to_axis(m.x, chart.log_x);
    pljoin(a, y0, a, y1);
    plmtex("t", 0.4, (a - x0) / (x1 - x0), 0.5, m.label.c_str());
  }
  plschr(0, 0.85);
  pllsty(1);
  // Series: a line through the points and a marker at each.
  std::vector<PLINT> opts, colours, styles, symbol_colours, symbol_numbers;
  std::vector<PLFLT> widths, symbol_scales;
  std::vector<const char*> labels, symbols;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    std::vector<PLFLT> px, py;
    for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k) {
      if ((chart.log_x && !(s.x[k] > 0)) || (chart.log_y && !(s.y[k] > 0))) continue;
      if (!std::isfinite(s.x[k]) || !std::isfinite(s.y[k])) continue;
      px.push_back(to_axis(s.x[k], chart.log_x));
      py.push_back(to_axis(s.y[k], chart.log_y));
    }
    const PLINT colour = kFirstColour + PLINT(i % kPalette);
    const PLINT style = i < kPalette ? 1 : 2;
    const char* glyph = kGlyphs[i % std::size(kGlyphs)];
    plcol0(colour);
    pllsty(style);
    plwidth(1.8);
    if (px.size() > 1) plline(PLINT(px.size()), px.data(), py.data());
    // Markers at every point of a short series; on a long one (a decay curve of thousands of points)
    // at 16 points evenly spaced along the axis, offset per series so that markers do not pile up.
    std::vector<PLFLT> mx, my;
    if (px.size() <= 32) {
      mx = px, my = py;
    } else {
      const double step = (px.back() - px.front()) / 16;
      double next = px.front() + step * (0.5 + 0.37 * double(i % 3)) / 1.5;
      for (std::size_t k = 0; k < px.size(); ++k) {
        if (px[k] >= next) {
          mx.push_back(px[k]), my.push_back(py[k]);
          next += step;
        }
      }
    }
    plssym(0, 0.9);
    if (!mx.empty()) plstring(PLINT(mx.size()), mx.data(), my.data(), glyph);
    pllsty(1);
    opts.push_back(PL_LEGEND_LINE | PL_LEGEND_SYMBOL);
    colours.push_back(colour);
    styles.push_back(style);
    widths.push_back(1.8);
    symbol_colours.push_back(colour);
    symbol_scales.push_back(0.9);
    symbol_numbers.push_back(1);
    symbols.push_back(glyph);
    labels.push_back(s.label.c_str());
  }
  plwidth(1.0);
  // The title centred over the whole panel (a long one does not fit over the data alone).
  plcol0(kInk);
  plvpor(0.0, 1.0, bottom, top);
  plmtex("t", 2.0, 0.5, 0.5, chart.title.c_str());
  plvpor(left, right, bottom, top);
  plwind(x0, x1, y0, y1);
  if (labels.empty()) return;
  PLFLT legend_width = 0, legend_height = 0;
  const std::vector<PLINT> text_colours(labels.size(), kInk);
  pllegend(&legend_width, &legend_height, PL_LEGEND_BACKGROUND, PL_POSITION_OUTSIDE | PL_POSITION_RIGHT, 0.03, 0.0,
           0.06, 0, kInk, 1, 0, 0, PLINT(labels.size()), opts.data(), 1.0, 0.8, 2.2, 0.0, text_colours.data(),
           labels.data(), nullptr, nullptr, nullptr, nullptr, colours.data(), styles.data(), widths.data(),
           symbol_colours.data(), symbol_scales.data(), symbol_numbers.data(), symbols.data());
}

void open_svg(const std::string& path, PLINT width, PLINT height) {
  {
    // PLplot exits the process when it cannot open its output; find out first.
    std::ofstream probe(path);
    if (!probe) throw Error(fmt::format("--svg {}: cannot write this file", path));
  }
  plsdev("svg");
  plsfnam(path.c_str());
  set_colours();
  plspage(0, 0, width, height, 0, 0);
}

void set_text_size() { plschr(0, 0.85); }

// The data's right edge (a fraction of the panel): the legend beside it needs room for its longest label.
double data_right_edge(const Chart& chart, double widest, double per_char) {
  std::size_t chars = 0;
  for (const Series& s : chart.series) chars = std::max(chars, s.label.size());
  return std::clamp(widest - per_char * double(chars), 0.45, widest - 0.12);
}

}  // namespace
#endif

std::vector<double> axis_ticks(double lo, double hi, bool log, bool powers_of_two, int max_ticks) {
  std::vector<double> ticks;
  if (!(hi >= lo) || !std::isfinite(lo) || !std::isfinite(hi)) return ticks;
  if (log) {
    if (!(lo > 0)) return ticks;
    if (powers_of_two) {
      for (double v = std::exp2(std::floor(std::log2(lo))); v <= hi * (1 + 1e-12); v *= 2) {
        if (v >= lo * (1 - 1e-12)) ticks.push_back(v);
      }
    } else {
      // Each decade from its integer exponent (repeated × 10 drifts off 1e-5 and the like).
      for (int k = int(std::floor(std::log10(lo))); std::pow(10.0, k) <= hi; ++k) {
        const double decade = std::pow(10.0, k);
        for (double m : {1.0, 2.0, 5.0}) {
          const double v = m * decade;
          if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12)) ticks.push_back(v);
        }
      }
    }
    // A span too narrow for two such ticks (PPL 2.1 to 2.4): its ends.
    if (ticks.size() < 2) ticks = {lo, hi};
    // Too many 1-2-5 ticks for the panel: the decades alone (1, 10, 100 … stay readable), then every other one.
    if (!powers_of_two && ticks.size() > std::size_t(std::max(2, max_ticks))) {
      std::vector<double> decades;
      for (double v : ticks) {
        if (std::fabs(v / std::pow(10.0, std::round(std::log10(v))) - 1) < 1e-9) decades.push_back(v);
      }
      if (decades.size() >= 2) ticks.swap(decades);
    }
    while (ticks.size() > std::size_t(std::max(2, max_ticks))) {
      std::vector<double> thinned;
      for (std::size_t i = 0; i < ticks.size(); i += 2) thinned.push_back(ticks[i]);
      ticks.swap(thinned);
    }
    return ticks;
  }
  if (hi == lo) return {lo};
  const double raw = (hi - lo) / 6;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push_back(v == 0 ? 0 : v);
  return ticks;
}

#if ROPEKIT_HAVE_PLPLOT
bool plots_available() { return true; }

void write_svg(const Chart& chart, const std::string& path) {
  open_svg(path, 1100, 620);
  plinit();
  set_text_size();
  pladv(0);
  draw_panel(chart, 0.09, data_right_edge(chart, 0.90, 0.0105), 0.13, 0.90);
  plend();
}

void write_heatmaps_svg(const std::vector<Heatmap>& panels, int columns, const std::string& path) {
  const int cols = std::max(1, columns);
  const int rows = std::max(1, int((panels.size() + std::size_t(cols) - 1) / std::size_t(cols)));
  open_svg(path, PLINT(520 * cols), PLINT(400 * rows + 40));
  plssub(cols, rows);
  // cmap1: white at 0 through light blue to dark blue at 1 (accuracy; readable in grey, colour-blind safe).
  const PLFLT at[] = {0.0, 0.5, 1.0}, r[] = {1.0, 0.55, 0.03}, g[] = {1.0, 0.75, 0.19}, b[] = {1.0, 0.90, 0.42};
  plscmap1n(256);
  plscmap1l(1, 3, at, r, g, b, nullptr);
  plinit();
  set_text_size();
  for (const Heatmap& h : panels) {
    pladv(0);
    const auto nc = PLFLT(std::max<std::size_t>(1, h.columns.size()));
    const auto nr = PLFLT(std::max<std::size_t>(1, h.rows.size()));
    plvpor(0.16, 0.90, 0.16, 0.86);
    plwind(0, nc, 0, nr);
    for (std::size_t i = 0; i < h.values.size(); ++i) {
      for (std::size_t j = 0; j < h.values[i].size(); ++j) {
        const double v = h.values[i][j];
        PLFLT x[] = {PLFLT(j), PLFLT(j + 1), PLFLT(j + 1), PLFLT(j)},
              y[] = {PLFLT(i), PLFLT(i), PLFLT(i + 1), PLFLT(i + 1)};
        if (std::isfinite(v)) {
          plcol1(std::clamp(v, 0.0, 1.0));
          plfill(4, x, y);
        }
        if (i < h.text.size() && j < h.text[i].size()) {
          plcol0(std::isfinite(v) && v > 0.6 ? 0 : kInk);  // white text on the dark cells
          plptex(PLFLT(j) + 0.5, PLFLT(i) + 0.4, 1, 0, 0.5, h.text[i][j].c_str());
        }
      }
    }
    plcol0(kInk);
    plbox("bc", 0, 0, "bc", 0, 0);
    for (std::size_t j = 0; j < h.columns.size(); ++j)
      plmtex("b", 1.4, (PLFLT(j) + 0.5) / nc, 0.5, h.columns[j].c_str());
    for (std::size_t i = 0; i < h.rows.size(); ++i) plmtex("lv", 0.6, (PLFLT(i) + 0.5) / nr, 1.0, h.rows[i].c_str());
    plmtex("b", 3.0, 0.5, 0.5, h.x_label.c_str());
    plmtex("l", 4.2, 0.5, 0.5, h.y_label.c_str());
    plvpor(0.0, 1.0, 0.16, 0.86);
    plmtex("t", 2.0, 0.5, 0.5, h.title.c_str());
  }
  plend();
}

void write_svg(const std::vector<Chart>& panels, int columns, const std::string& path) {
  const int cols = std::max(1, columns);
  const int rows = std::max(1, int((panels.size() + std::size_t(cols) - 1) / std::size_t(cols)));
  open_svg(path, PLINT(640 * cols), PLINT(420 * rows + 40));
  plssub(cols, rows);
  plinit();
  set_text_size();
  for (const Chart& chart : panels) {
    pladv(0);
    draw_panel(chart, 0.14, data_right_edge(chart, 0.86, 0.02), 0.16, 0.86);
  }
  plend();
}
#endif

void require_plots(const std::string& path) {
  if (!path.empty() && !plots_available())
    throw Error(fmt::format("--svg {}: this ropekit was built without PLplot (libplplot-dev); use --csv", path));
}

#if !ROPEKIT_HAVE_PLPLOT
// Builds without PLplot (the aarch64 cross build: Debian's libplplot-dev is not co-installable across
// architectures) keep every command but the plots; asking for one is an error, never a silent no-op.
bool plots_available() { return false; }

void write_svg(const Chart&, const std::string& path) { require_plots(path); }

void write_svg(const std::vector<Chart>&, int, const std::string& path) { require_plots(path); }

void write_heatmaps_svg(const std::vector<Heatmap>&, int, const std::string& path) { require_plots(path); }
#endif

}  // namespace ropekit::cli
