// `ropekit inspect`: the effective plan of a model, pair by pair — what a user needs to see to know
// whether a scaling setting took effect (the project's pitfalls notes, #27).
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>
#include <cmath>

#include "cli.hpp"
#include "ropekit/analysis.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/variants.hpp"

namespace ropekit::cli {
namespace {

// The variant's fields as its description names them (ropekit/variants.hpp), then what the plan made of
// them at this length.
std::string describe_scaling(const Spec& spec, const Plan& plan) {
  std::vector<std::string> parts;
  for_each_field(spec.scaling, [&](const FieldInfo& field, const FieldValue& value) {
    if (const auto* list = std::get_if<std::vector<double>>(&value)) {
      parts.push_back(fmt::format("{} ({} values)", field.label, list->size()));
      return;
    }
    std::visit(
        [&](const auto& v) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(v)>, std::monostate> &&
                        !std::is_same_v<std::decay_t<decltype(v)>, std::vector<double>>) {
            parts.push_back(fmt::format("{} {}", field.label, v));
          }
        },
        value);
  });
  if (std::holds_alternative<scaling::Yarn>(spec.scaling)) {
    parts.push_back(fmt::format("ramp over pairs [{}, {}]", plan.yarn_low, plan.yarn_high));
  } else if (std::holds_alternative<scaling::LongRope>(spec.scaling)) {
    parts.push_back(fmt::format("using the {} factors", plan.uses_long_factors ? "long" : "short"));
  }
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ", "));
}

void print_layer(std::ostream& out, const ModelPositions& model, const LayerPositions& layer,
                 std::optional<std::int64_t> seq_len) {
  const Spec& spec = layer.spec;
  const Plan plan = make_plan(spec, seq_len);
  const std::int64_t context = original_context(spec, model.max_position_embeddings);
  const PairMap map = make_pair_map(spec);

  if (!layer.layer_type.empty())
    fmt::print(out, "layer type    {} (layers {})\n", layer.layer_type, layer_ranges(layer.layers));
  fmt::print(out, "rope_type     {}: {}\n", rope_type_name(spec.scaling), describe_scaling(spec, plan));
  fmt::print(out, "formula       {}\n", variant_info(spec.scaling).formula);
  fmt::print(out, "pairing       {}   head_dim {}   rotary_dim {}   base {}\n", to_string(spec.pairing), spec.head_dim,
             spec.rotary_dim, spec.base);
  if (layer.rope_offset > 0 || layer.qk_head_dim != spec.head_dim) {
    fmt::print(out, "rope slice    lanes [{}, {}) of each {}-lane q/k head\n", layer.rope_offset,
               layer.rope_offset + spec.head_dim, layer.qk_head_dim);
  }
  if (spec.mrope) {
    fmt::print(out, "m-rope        {} sections t/h/w = {}/{}/{} pairs\n",
               spec.mrope->layout == MRopeLayout::Interleaved ? "interleaved" : "sectioned", spec.mrope->sections[0],
               spec.mrope->sections[1], spec.mrope->sections[2]);
  }
  if (layer.indexer) {
    const IndexerRope& ix = *layer.indexer;
    fmt::print(out,
               "indexer rope  the sparse-attention indexer rotates lanes [{}, {}) of each {}-lane indexer head with "
               "these angles, {} pairing\n",
               ix.rope_offset, ix.rope_offset + ix.spec.head_dim, ix.qk_head_dim, to_string(ix.spec.pairing));
  }
  if (spec.axial) {
    fmt::print(out, "axial         {} axes of {} pairs, frequencies {}\n", spec.axial->sections.size(),
               fmt::join(spec.axial->sections, "/"),
               spec.axial->frequencies == AxialFrequencies::Strided ? "strided (one list dealt round-robin)"
                                                                    : "per axis (restarting)");
  }
  fmt::print(out, "cos_sin_scale {:.9g}   softmax_scale_mult {:.9g}   current length {}\n", plan.cos_sin_scale,
             plan.softmax_scale_mult, seq_len ? fmt::format("{}", *seq_len) : "(initial plan)");
  fmt::print(out, "turns are counted over {}\n\n",
             context > 0 ? fmt::format("the original context of {} tokens", context) : "(no context length given)");
  fmt::print(out, "{:>5}  {:>11}  {:>14}  {:>14}  {:>12}  {:>9}  {}\n", "pair", "lanes", "inv_freq", "wavelength",
             "turns", "divisor", "band");
  const char* axis_names[] = {"t", "h", "w"};
  for (const PairBand& b : pair_bands(spec, plan, context)) {
    std::string lanes =
        fmt::format("{},{}", map.lane_a[b.pair] + layer.rope_offset, map.lane_b[b.pair] + layer.rope_offset);
    if (spec.mrope) lanes += fmt::format(" {}", axis_names[map.axis[b.pair]]);
    if (spec.axial) lanes += fmt::format(" a{}", map.axis[b.pair]);
    fmt::print(out, "{:>5}  {:>11}  {:>14.7e}  {:>14.6g}  {:>12.6g}  {:>9.5g}  {}\n", b.pair, lanes, b.inv_freq,
               b.wavelength, b.turns, b.divisor, to_string(b.band));
  }
}

}  // namespace

void add_inspect(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand("inspect", "show a model's RoPE plan pair by pair: frequency, wavelength, band");
  auto opts = std::make_shared<ModelOptions>();
  opts->add_to(*cmd);
  cmd->callback([io, opts] {
    const ModelPositions model = opts->load();
    // The layers first: a --layer the model does not have is an error before anything reaches stdout.
    const std::vector<const LayerPositions*> selected = opts->selected_layers(model);
    print_warnings(model, io.err);
    // The per-layer story first (one line per group of layers with one plan), then each selected
    // RoPE group pair by pair.
    fmt::print(io.out, "model         {} ({}{})   {} layers\n", model.source,
               model.model_type.empty() ? "?" : model.model_type,
               model.family.empty() ? "" : fmt::format(", family {}", model.family),
               model.num_layers > 0 ? fmt::format("{}", model.num_layers) : "?");
    for (const LayerPositions& g : model.groups) fmt::print(io.out, "  {}\n", describe_group(model, g));
    for (const LayerPositions* g : selected) {
      if (g->encoding != PositionEncoding::Rope) continue;
      fmt::print(io.out, "\n");
      print_layer(io.out, model, *g, opts->seq_len);
    }
  });
}

}  // namespace ropekit::cli
