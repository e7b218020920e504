// `ropekit decay`: RoFormer's long-term decay bound against relative distance, one curve per model
// (and per layer type), as CSV and as an SVG chart drawn by PLplot.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <filesystem>
#include <fstream>

#include "cli.hpp"
#include "plot.hpp"
#include "ropekit/analysis.hpp"
#include "ropekit/error.hpp"
#include "ropekit/plan.hpp"

namespace ropekit::cli {
namespace {

struct DecayOptions {
  std::vector<std::string> configs, presets;
  std::int64_t max_distance = 8192;
  std::optional<std::int64_t> seq_len;
  std::string csv, svg;
};

struct Curve {
  std::string label;
  std::vector<double> bound;
};

// "llama-3.1-8b", or for a config.json the name of its directory (models ship as DIR/config.json).
std::string label_of_config(const std::string& path) {
  const std::filesystem::path p(path);
  if (p.stem() == "config" && p.has_parent_path() && !p.parent_path().filename().empty()) {
    return p.parent_path().filename().string();
  }
  return p.stem().string();
}

void add_curves(const ModelPositions& model, const std::string& label, const DecayOptions& o, std::vector<Curve>& out) {
  const std::vector<const LayerPositions*> rope = model.rope_groups();
  if (rope.empty()) throw Error(fmt::format("{}: the model has no RoPE layers: no decay bound to draw", model.source));
  for (const LayerPositions* g : rope) {
    const LayerPositions& layer = *g;
    const Plan plan = make_plan(layer.spec, o.seq_len);
    const std::string name = rope.size() > 1 ? fmt::format("{} ({})", label, layer.layer_type) : label;
    out.push_back({name, decay_bound(plan, o.max_distance)});
  }
}

}  // namespace

void add_decay(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand(
      "decay", "RoFormer's long-term decay bound (1/(d/2))·Σ|S_j| against relative distance, one curve per model");
  auto o = std::make_shared<DecayOptions>();
  cmd->add_option("--config", o->configs, "Hugging Face config.json (repeatable)");
  cmd->add_option("--preset", o->presets, "a built-in preset (repeatable; ropekit presets lists them)");
  cmd->add_option("--max-distance", o->max_distance, "largest relative distance (default 8192)")
      ->check(in_range(std::int64_t{1}, std::int64_t{1} << 24));
  cmd->add_option(
         "--seq-len", o->seq_len,
         fmt::format("current sequence length (dynamic NTK, LongRoPE); default: {}", ModelOptions::kInitialPlan))
      ->check(in_range(std::int64_t{1}, kPositionLimit - 1));
  cmd->add_option("--csv", o->csv, "write distance and one column per curve");
  cmd->add_option("--svg", o->svg, "draw the curves (log distance axis) with PLplot");
  cmd->callback([io, o] {
    if (o->configs.empty() && o->presets.empty()) throw Error("decay: give at least one --config or --preset");
    if (o->csv.empty() && o->svg.empty()) throw Error("decay: give --csv FILE, --svg FILE or both");
    require_plots(o->svg);
    std::vector<Curve> curves;
    for (const std::string& path : o->configs) {
      const ModelPositions model = read_config_file(path);
      print_warnings(model, io.err);
      add_curves(model, label_of_config(path), *o, curves);
    }
    for (const std::string& name : o->presets) add_curves(read_preset(name), name, *o, curves);

    if (!o->csv.empty()) {
      std::ofstream csv(o->csv);
      if (!csv) throw Error(fmt::format("--csv {}: cannot write this file", o->csv));
      csv << "distance";
      for (const Curve& c : curves) csv << ',' << '"' << c.label << '"';
      csv << '\n';
      for (std::int64_t r = 0; r <= o->max_distance; ++r) {
        csv << r;
        for (const Curve& c : curves) fmt::print(csv, ",{:.9g}", c.bound[std::size_t(r)]);
        csv << '\n';
      }
      if (!csv) throw Error(fmt::format("--csv {}: write failed", o->csv));
    }
    if (!o->svg.empty()) {
      Chart chart{"RoFormer long-term decay bound by relative distance",
                  "relative distance",
                  "(1/(d/2)) Σ|S#dj#u|",
                  true,
                  false,
                  {},
                  {}};
      for (const Curve& c : curves) {
        Series s{c.label, {}, {}};
        for (std::int64_t r = 1; r <= o->max_distance; ++r) {
          s.x.push_back(double(r));
          s.y.push_back(c.bound[std::size_t(r)]);
        }
        chart.series.push_back(std::move(s));
      }
      write_svg(chart, o->svg);
    }
    fmt::print(io.out, "decay: {} curve(s) up to distance {}{}{}\n", curves.size(), o->max_distance,
               o->csv.empty() ? "" : fmt::format(", csv {}", o->csv),
               o->svg.empty() ? "" : fmt::format(", svg {}", o->svg));
  });
}

}  // namespace ropekit::cli
