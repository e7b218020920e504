// Shared by the config.json and GGUF readers: turns one plan per layer into ModelPositions' groups.
#pragma once

#include <vector>

#include "ropekit/model_positions.hpp"

namespace ropekit::detail {

// The most layers a config.json or GGUF may declare. Real models have at most a few hundred; the
// bound keeps hostile files from making the readers build millions of per-layer plans.
inline constexpr int kMaxLayers = 4096;

// Layers whose plans are equal (everything but `layers`) share a group, in first-use order. A plan
// that differs from an existing group of the same layer_type is named after what differs
// ("full_attention_nope"; "" becomes "rope" / "nope" / ...). `per_layer` holds one plan per layer when
// `indexed`; otherwise (no layer count in the config) one plan per kind of layer, and the groups'
// `layers` stay empty. Fills out.groups, out.layer_types and out.num_layers.
void assemble_groups(ModelPositions& out, const std::vector<LayerPositions>& per_layer, bool indexed);

}  // namespace ropekit::detail
