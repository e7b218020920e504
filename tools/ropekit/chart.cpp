// `ropekit chart`: the lab's charts from its CSV — the table's PPL by target position (ropekit eval --csv,
// python -m ropekit.lab eval --csv) or the passkey grids (ropekit passkey --csv, python -m ropekit.lab passkey
// --csv) — drawn exactly as `ropekit eval --svg` and `ropekit passkey --svg` draw them from a run.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "lab_charts.hpp"
#include "plot.hpp"
#include "ropekit/error.hpp"

namespace ropekit::cli {
namespace {

struct ChartCliOptions {
  std::string csv, svg, title;
  std::optional<std::int64_t> trained_length;
};

constexpr std::string_view kEvalHeader = "method,N,scale,bucket_lo,bucket_hi,tokens,mean_nll,ppl";
constexpr std::string_view kPasskeyHeader = "method,length,scale,depth,keys,retrieved,accuracy";

double number(const std::string& text, const std::string& path, std::size_t line, std::string_view column) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v)) {
    throw Error(fmt::format("--csv {}: line {}: {} = \"{}\": not a number", path, line, column, text));
  }
  return v;
}

void run_chart(const ChartCliOptions& o) {
  require_plots(o.svg);
  const std::vector<std::vector<std::string>> records = read_csv(o.csv);
  if (records.empty()) throw Error(fmt::format("--csv {}: empty", o.csv));
  std::string header;
  for (std::size_t i = 0; i < records[0].size(); ++i) header += (i ? "," : "") + records[0][i];
  const bool eval = header == kEvalHeader, passkey = header == kPasskeyHeader;
  if (!eval && !passkey) {
    throw Error(fmt::format("--csv {}: header \"{}\" is neither the lab's table ({}) nor its passkey grid ({})", o.csv,
                            header, kEvalHeader, kPasskeyHeader));
  }
  std::vector<std::string> methods;
  std::vector<EvalRow> rows;
  std::vector<PasskeyCell> cells;
  std::optional<std::int64_t> l0 = o.trained_length;
  std::int64_t longest = 0;
  for (std::size_t i = 1; i < records.size(); ++i) {
    const auto& r = records[i];
    if (r.size() == 1 && r[0].empty()) continue;  // a blank line
    if (r.size() != 7u + (eval ? 1u : 0u)) {
      throw Error(fmt::format("--csv {}: line {}: {} fields where the header has {}", o.csv, i + 1, r.size(),
                              records[0].size()));
    }
    if (std::find(methods.begin(), methods.end(), r[0]) == methods.end()) methods.push_back(r[0]);
    const auto length = std::int64_t(number(r[1], o.csv, i + 1, eval ? "N" : "length"));
    const double scale = number(r[2], o.csv, i + 1, "scale");
    // L0 from a row read past it (s = N / L0 there); else the longest length (the chart's marker then sits at it).
    if (!l0 && scale > 1) l0 = std::int64_t(std::llround(double(length) / scale));
    longest = std::max(longest, length);
    if (eval) {
      rows.push_back({r[0], length, scale, std::int64_t(number(r[3], o.csv, i + 1, "bucket_lo")),
                      std::int64_t(number(r[4], o.csv, i + 1, "bucket_hi")),
                      std::int64_t(number(r[5], o.csv, i + 1, "tokens")), number(r[6], o.csv, i + 1, "mean_nll"),
                      number(r[7], o.csv, i + 1, "ppl")});
    } else {
      cells.push_back({r[0], length, scale, number(r[3], o.csv, i + 1, "depth"),
                       std::int64_t(number(r[4], o.csv, i + 1, "keys")),
                       std::int64_t(number(r[5], o.csv, i + 1, "retrieved"))});
    }
  }
  if (methods.empty()) throw Error(fmt::format("--csv {}: no rows", o.csv));
  const std::string title = o.title.empty() ? std::filesystem::path(o.csv).stem().string() : o.title;
  if (eval) {
    write_svg(eval_chart(rows, methods, l0.value_or(longest), title), o.svg);
  } else {
    write_heatmaps_svg(passkey_heatmaps(cells, methods, l0.value_or(longest), title),
                       int(std::min<std::size_t>(3, methods.size())), o.svg);
  }
}

}  // namespace

void add_chart(CLI::App& app, Streams) {
  auto* cmd = app.add_subcommand("chart",
                                 "draw the lab's chart from its CSV: the table's PPL by target position (eval) or the "
                                 "passkey grids (passkey), as their --svg draws them");
  auto o = std::make_shared<ChartCliOptions>();
  cmd->add_option("--csv", o->csv, "a CSV of `ropekit eval`/`passkey` or `python -m ropekit.lab eval`/`passkey`")
      ->required();
  cmd->add_option("--svg", o->svg, "the SVG to write (PLplot)")->required();
  cmd->add_option("--title", o->title, "the model's name in the title (default: the CSV's file name)");
  cmd->add_option("--trained-length", o->trained_length,
                  "L0 (default: from a row read past it, N / scale; else the longest length)")
      ->check(in_range(std::int64_t{1}, std::int64_t{1} << 47));
  cmd->callback([o] { run_chart(*o); });
}

}  // namespace ropekit::cli
