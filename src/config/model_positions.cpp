// ModelPositions' accessors, QueryScaling's formulas, and the grouping both readers share.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "config/positions_builder.hpp"
#include "ropekit/error.hpp"
#include "ropekit/model_positions.hpp"

namespace ropekit {

std::string_view encoding_name(PositionEncoding e) {
  switch (e) {
    case PositionEncoding::Rope: return "rope";
    case PositionEncoding::None: return "none";
    case PositionEncoding::Alibi: return "alibi";
    case PositionEncoding::Learned: return "learned";
  }
  return "?";
}

// Each formula as its reference writes it, in double (the references use float32 tensors).
double QueryScaling::factor(std::int64_t position) const {
  const double p = double(position);
  switch (kind) {
    case Kind::None: return 1.0;
    case Kind::LogN:  // modeling_qwen.py: math.log(i, seq_length) if i > seq_length else 1, i = p + 1
      return p + 1.0 > double(length) ? std::log(p + 1.0) / std::log(double(length)) : 1.0;
    case Kind::Llama4:  // modeling_llama4.py: log1p(floor((p + 1) / floor_scale)) * attn_scale + 1
      return std::log1p(std::floor((p + 1.0) / floor_scale)) * scale + 1.0;
    case Kind::Beta:  // modeling_ministral3.py get_llama_4_attn_scale
      return 1.0 + scale * std::log(1.0 + std::floor(p / double(length)));
  }
  return 1.0;
}

std::string QueryScaling::formula() const {
  switch (kind) {
    case Kind::None: return "";
    case Kind::LogN: return fmt::format("ln(p + 1) / ln({0}) when p + 1 > {0}, else 1", length);
    case Kind::Llama4: return fmt::format("1 + {}·ln(1 + floor((p + 1) / {}))", scale, floor_scale);
    case Kind::Beta: return fmt::format("1 + {}·ln(1 + floor(p / {}))", scale, length);
  }
  return "";
}

namespace {
std::string names_of(const ModelPositions& m) {
  std::vector<std::string> names;
  for (const LayerPositions& g : m.groups) names.push_back(g.layer_type.empty() ? "\"\"" : g.layer_type);
  return fmt::format("{}", fmt::join(names, ", "));
}
}  // namespace

const LayerPositions& ModelPositions::layer(std::string_view layer_type) const {
  if (groups.empty()) throw Error(fmt::format("{}: the model has no layer groups", source));
  if (layer_type.empty()) {
    if (groups.size() == 1) return groups.front();
    const std::vector<const LayerPositions*> rope = rope_groups();
    if (rope.size() == 1) return *rope.front();
    throw Error(fmt::format("{}: the model has several layer types ({}): choose one with --layer-type or --layer",
                            source, names_of(*this)));
  }
  for (const LayerPositions& g : groups) {
    if (g.layer_type == layer_type) return g;
  }
  throw Error(
      fmt::format("{}: layer type = {}: not in this model (layer types: {})", source, layer_type, names_of(*this)));
}

const LayerPositions& ModelPositions::at_layer(int index) const {
  if (num_layers <= 0) {
    throw Error(fmt::format("{}: layer = {}: the config gives no layer count (num_hidden_layers)", source, index));
  }
  if (index < 0 || index >= num_layers) {
    throw Error(fmt::format("{}: layer = {}: out of range, the model has {} layers (0 to {})", source, index,
                            num_layers, num_layers - 1));
  }
  for (const LayerPositions& g : groups) {
    for (int l : g.layers) {
      if (l == index) return g;
    }
  }
  throw Error(fmt::format("{}: layer = {}: in no group", source, index));  // assemble_groups covers all
}

std::vector<const LayerPositions*> ModelPositions::rope_groups() const {
  std::vector<const LayerPositions*> out;
  for (const LayerPositions& g : groups) {
    if (g.encoding == PositionEncoding::Rope) out.push_back(&g);
  }
  return out;
}

namespace detail {

namespace {
// Equal in everything but `layers` (compared without copying when neither lists layers: the readers
// pass one plan per layer, and groups gain their layers only after every layer found its group).
bool same_plan(const LayerPositions& a, const LayerPositions& b) {
  if (a.layers.empty() && b.layers.empty()) return a == b;
  LayerPositions x = a, y = b;
  x.layers.clear();
  y.layers.clear();
  return x == y;
}

std::string variant_name(const LayerPositions& g) {
  if (!g.attention) return g.layer_type.empty() ? "no_attention" : g.layer_type;
  // A DSA layer that runs its indexer (GLM-5: the others reuse the previous top-k) is named after it.
  const std::string enc = std::string(g.encoding == PositionEncoding::None ? "nope" : encoding_name(g.encoding)) +
                          (g.indexer ? "_indexer" : "");
  return g.layer_type.empty() ? enc : fmt::format("{}_{}", g.layer_type, enc);
}
}  // namespace

void assemble_groups(ModelPositions& out, const std::vector<LayerPositions>& per_layer, bool indexed) {
  out.groups.clear();
  out.layer_types.clear();
  std::vector<std::size_t> group_of;
  for (std::size_t i = 0; i < per_layer.size(); ++i) {
    const LayerPositions& plan = per_layer[i];
    std::size_t g = 0;
    while (g < out.groups.size() && !same_plan(out.groups[g], plan)) ++g;
    if (g == out.groups.size()) {
      out.groups.push_back(plan);
      out.groups.back().layers.clear();
    }
    group_of.push_back(g);
  }
  if (indexed) {
    for (std::size_t i = 0; i < per_layer.size(); ++i) out.groups[group_of[i]].layers.push_back(int(i));
  }
  // Distinct plans under one name: the later ones are named after what differs.
  for (std::size_t g = 0; g < out.groups.size(); ++g) {
    for (std::size_t h = 0; h < g; ++h) {
      if (out.groups[h].layer_type != out.groups[g].layer_type) continue;
      std::string name = variant_name(out.groups[g]);
      for (int n = 2; [&] {
             for (const LayerPositions& o : out.groups) {
               if (&o != &out.groups[g] && o.layer_type == name) return true;
             }
             return false;
           }();
           ++n) {
        name = fmt::format("{}_{}", variant_name(out.groups[g]), n);
      }
      out.groups[g].layer_type = name;
      break;
    }
  }
  // With several groups, an unnamed one is named after its encoding.
  if (out.groups.size() > 1) {
    for (LayerPositions& g : out.groups) {
      if (g.layer_type.empty()) g.layer_type = variant_name(g);
    }
  }
  if (indexed) {
    out.num_layers = int(per_layer.size());
    for (std::size_t g : group_of) out.layer_types.push_back(out.groups[g].layer_type);
  }
}

}  // namespace detail
}  // namespace ropekit
