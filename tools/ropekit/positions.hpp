// `ropekit positions`: a JSON description of a batch → its position ids (ropekit/position_ids.hpp). The
// parser is separate so that the fuzzer (tests/fuzz/positions_fuzz.cpp) runs exactly what the CLI runs.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace ropekit::cli {

struct PositionIds {
  std::vector<std::int64_t> shape;   // e.g. {3, batch, seq} for M-RoPE, {n} for the others
  std::vector<std::int64_t> values;  // C order
  std::vector<std::int64_t> deltas;  // M-RoPE's rope_deltas (empty otherwise)
  // "vision" with Qwen2.5-VL's window attention: the window order the positions are in, and the windows' bounds.
  std::vector<std::int64_t> window_index, cu_window_seqlens;
};

// Kinds: "mrope" (family, rule, mm_token_type_ids, attention_mask, image_grid_thw, video_grid_thw,
// second_per_grid_ts, spatial_merge_size, tokens_per_second), "packed" (cu_seqlens, start_offsets), "cp"
// (seq_len or cu_seqlens, cp_size, cp_rank, sharding, stripe, start, start_offsets), "tree" (parents,
// root_position), "vision" (config: the model's config.json or its vision_config; grid_thw: one (t, h, w) row per
// image or video, t = 1 for Pixtral — none for Llama 4's fixed grid) giving [axes, n] patch coordinates in the
// encoder's order (ropekit/position_ids.hpp, read_vision_config). Errors: ropekit::Error naming the key and the value
// (unknown keys included).
PositionIds positions_from_json(std::string_view json, std::string_view origin);

}  // namespace ropekit::cli
