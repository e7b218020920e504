// Position ids beyond one text stream (ropekit/position_ids.hpp) for Python: sequences in, NumPy int64 arrays
// out. Argument names follow the references' (cu_seqlens, cp_size, cp_rank).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.hpp"
#include "ropekit/error.hpp"
#include "ropekit/position_ids.hpp"

namespace py = pybind11;

namespace ropekit::python {
namespace {

py::array_t<std::int64_t> to_array(const std::vector<std::int64_t>& v) {
  return py::array_t<std::int64_t>(py::ssize_t(v.size()), v.data());
}

CpSharding sharding_of(const std::string& name) {
  if (name == "contiguous") return CpSharding::Contiguous;
  if (name == "zigzag") return CpSharding::ZigZag;
  if (name == "striped") return CpSharding::Striped;
  throw Error("sharding = \"" + name + "\": one of contiguous, zigzag, striped");
}

CpShard shard_of(int cp_size, int cp_rank, const std::string& sharding, std::int64_t stripe) {
  return {.size = cp_size, .rank = cp_rank, .sharding = sharding_of(sharding), .stripe = stripe};
}

MropeFamily family_of(const std::string& name) {
  if (name == "qwen2_vl") return MropeFamily::Qwen2Vl;
  if (name == "qwen2_5_vl") return MropeFamily::Qwen25Vl;
  if (name == "qwen3_vl") return MropeFamily::Qwen3Vl;
  if (name == "glm4v") return MropeFamily::Glm4v;
  throw Error("family = \"" + name + "\": one of qwen2_vl, qwen2_5_vl, qwen3_vl, glm4v");
}

std::vector<VisionGrid> grids_of(
    const std::optional<py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>>& a, const char* name) {
  std::vector<VisionGrid> out;
  if (!a) return out;
  if (a->ndim() == 1 && a->shape(0) == 3) return {{a->at(0), a->at(1), a->at(2)}};  // one grid
  if (a->ndim() != 2 || a->shape(1) != 3) throw Error(std::string(name) + ": must have shape (n, 3)");
  for (py::ssize_t i = 0; i < a->shape(0); ++i) out.push_back({a->at(i, 0), a->at(i, 1), a->at(i, 2)});
  return out;
}

std::vector<std::int64_t> or_empty(const std::optional<std::vector<std::int64_t>>& v) {
  return v ? *v : std::vector<std::int64_t>{};
}

std::vector<double> or_empty_d(const std::optional<std::vector<double>>& v) { return v ? *v : std::vector<double>{}; }

}  // namespace

void bind_positions(py::module_& m) {
  using I32 = py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>;
  using I64 = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;
  m.def(
      "mrope_position_ids",
      [](const std::string& family, const I32& mm_token_type_ids, std::optional<I32> attention_mask,
         std::optional<I64> image_grid_thw, std::optional<I64> video_grid_thw,
         std::optional<std::vector<double>> second_per_grid_ts, std::int64_t spatial_merge_size,
         std::int64_t tokens_per_second, const std::string& rule) {
        if (mm_token_type_ids.ndim() != 2) throw Error("mm_token_type_ids: must have shape (batch, seq)");
        MropeRule indexing;
        if (rule == "token_types") {
          indexing = MropeRule::TokenTypes;
        } else if (rule == "token_scan") {
          indexing = MropeRule::TokenScan;
        } else {
          throw Error("rule = \"" + rule + "\": token_types (transformers 5) or token_scan (4.57)");
        }
        const std::int64_t batch = mm_token_type_ids.shape(0), seq = mm_token_type_ids.shape(1);
        std::vector<std::uint8_t> mask;
        if (attention_mask) {
          if (attention_mask->ndim() != 2 || attention_mask->shape(0) != batch || attention_mask->shape(1) != seq) {
            throw Error("attention_mask: must have the shape of mm_token_type_ids");
          }
          for (py::ssize_t i = 0; i < attention_mask->size(); ++i) mask.push_back(attention_mask->data()[i] != 0);
        }
        const std::vector<VisionGrid> images = grids_of(image_grid_thw, "image_grid_thw");
        const std::vector<VisionGrid> videos = grids_of(video_grid_thw, "video_grid_thw");
        const std::vector<double> seconds = or_empty_d(second_per_grid_ts);
        const MropePositionIds r = mrope_position_ids(
            family_of(family), indexing,
            {.batch = batch,
             .seq = seq,
             .token_types = std::span<const std::int32_t>(mm_token_type_ids.data(), std::size_t(batch * seq)),
             .attention_mask = mask,
             .image_grids = images,
             .video_grids = videos,
             .second_per_grid_ts = seconds,
             .spatial_merge_size = spatial_merge_size,
             .tokens_per_second = tokens_per_second});
        py::array_t<std::int64_t> positions({py::ssize_t(3), py::ssize_t(batch), py::ssize_t(seq)});
        std::copy(r.positions.begin(), r.positions.end(), positions.mutable_data());
        return py::make_tuple(positions, to_array(r.deltas));
      },
      py::arg("family"), py::arg("mm_token_type_ids"), py::kw_only(), py::arg("attention_mask") = py::none(),
      py::arg("image_grid_thw") = py::none(), py::arg("video_grid_thw") = py::none(),
      py::arg("second_per_grid_ts") = py::none(), py::arg("spatial_merge_size") = 2, py::arg("tokens_per_second") = 2,
      py::arg("rule") = "token_types",
      "Hugging Face's get_rope_index: (position_ids [3, batch, seq], rope_deltas [batch]).");
  m.def(
      "mrope_decode_positions",
      [](std::int64_t delta, std::int64_t cached, std::int64_t count) {
        return to_array(mrope_decode_positions(delta, cached, count));
      },
      py::arg("delta"), py::arg("cached"), py::arg("count"),
      "Decoding after a multimodal prompt: int64 [3, count] positions of count new tokens after `cached`, each "
      "cache position + delta (HF's arange(past, past + n) + rope_deltas)");
  // Vision encoders: stream-major [axes, n] int64 coordinates (HF's get_vision_position_ids returns the transpose,
  // (n, 2)); Rope.apply / cos_sin of the encoder's Rope (vision_rope) take them as they are.
  auto streams = [](const std::vector<std::int64_t>& v, py::ssize_t axes) {
    py::array_t<std::int64_t> out({axes, py::ssize_t(v.size()) / axes});
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
  };
  m.def(
      "vision_position_ids",
      [streams](const I64& grid_thw, std::int64_t spatial_merge_size, bool include_temporal) {
        const std::vector<VisionGrid> grids = grids_of(grid_thw, "grid_thw");
        return streams(vision_position_ids(grids, spatial_merge_size, include_temporal), include_temporal ? 3 : 2);
      },
      py::arg("grid_thw"), py::arg("spatial_merge_size"), py::kw_only(), py::arg("include_temporal") = false,
      "transformers.vision_utils.get_vision_position_ids as [2, n] (h, w) streams ([3, n] t, h, w with "
      "include_temporal): patches block-major over the merge blocks.");
  m.def(
      "vision_window_index",
      [](const I64& grid_thw, std::int64_t spatial_merge_size, std::int64_t window_size, std::int64_t patch_size) {
        const std::vector<VisionGrid> grids = grids_of(grid_thw, "grid_thw");
        const VisionWindows w = ropekit::vision_window_index(grids, spatial_merge_size, window_size, patch_size);
        return py::make_tuple(to_array(w.window_index), to_array(w.cu_window_seqlens));
      },
      py::arg("grid_thw"), py::arg("spatial_merge_size"), py::arg("window_size"), py::arg("patch_size"),
      "Qwen2.5-VL's get_vision_window_index: (window_index, cu_window_seqlens).");
  m.def(
      "window_order",
      [streams](const I64& positions, const std::vector<std::int64_t>& window_index, std::int64_t unit) {
        if (positions.ndim() != 2) throw Error("positions: must have shape (axes, n)");
        const auto axes = positions.shape(0);
        const std::vector<std::int64_t> out =
            window_order(std::span<const std::int64_t>(positions.data(), std::size_t(positions.size())),
                         static_cast<int>(axes), window_index, unit);
        return streams(out, axes);
      },
      py::arg("positions"), py::arg("window_index"), py::arg("unit"),
      "[axes, n] positions reordered in groups of `unit` tokens by window_index (HF's reshape(...)[window_index]).");
  m.def(
      "pixtral_position_ids",
      [streams](const std::vector<std::pair<std::int64_t, std::int64_t>>& image_patches,
                std::int64_t max_patches_per_side) {
        std::vector<VisionGrid> images;
        for (const auto& [h, w] : image_patches) images.push_back({1, h, w});
        return streams(pixtral_position_ids(images, max_patches_per_side), 2);
      },
      py::arg("image_patches"), py::arg("max_patches_per_side"),
      "Pixtral's position_ids_in_meshgrid as [2, n] (row, column) streams; image_patches: (h, w) per image.");
  m.def(
      "llama4_vision_position_ids",
      [streams](std::int64_t patches_per_side) { return streams(llama4_vision_position_ids(patches_per_side), 2); },
      py::arg("patches_per_side"),
      "Llama 4's vision grid as [2, side² + 1] (column + 1, row + 1) streams, the class token last at (0, 0).");
  m.def(
      "packed_positions",
      [](const std::vector<std::int64_t>& cu_seqlens, std::optional<std::vector<std::int64_t>> start_offsets) {
        return to_array(packed_positions(cu_seqlens, or_empty(start_offsets)));
      },
      py::arg("cu_seqlens"), py::arg("start_offsets") = py::none(),
      "Positions of a packed batch: each document restarts at 0 (or at its start offset).");
  m.def(
      "cu_seqlens_from_eod",
      [](const std::vector<std::int64_t>& tokens, std::int64_t eod) {
        return to_array(cu_seqlens_from_eod(tokens, eod));
      },
      py::arg("tokens"), py::arg("eod"),
      "Document boundaries at end-of-document tokens (Megatron's reset_position_ids).");
  m.def(
      "cp_indices",
      [](std::int64_t seq_len, int cp_size, int cp_rank, const std::string& sharding, std::int64_t stripe,
         std::optional<std::vector<std::int64_t>> cu_seqlens) {
        const CpShard s = shard_of(cp_size, cp_rank, sharding, stripe);
        return to_array(cu_seqlens ? cp_indices_packed(*cu_seqlens, s) : cp_indices(seq_len, s));
      },
      py::arg("seq_len") = 0, py::kw_only(), py::arg("cp_size"), py::arg("cp_rank"), py::arg("sharding") = "zigzag",
      py::arg("stripe") = 1, py::arg("cu_seqlens") = py::none(),
      "The global token indices a context-parallel rank holds (per document when cu_seqlens is given).");
  m.def(
      "cp_positions",
      [](std::int64_t seq_len, int cp_size, int cp_rank, const std::string& sharding, std::int64_t stripe,
         std::int64_t start, std::optional<std::vector<std::int64_t>> cu_seqlens,
         std::optional<std::vector<std::int64_t>> start_offsets) {
        const CpShard s = shard_of(cp_size, cp_rank, sharding, stripe);
        return to_array(cu_seqlens ? cp_positions_packed(*cu_seqlens, s, or_empty(start_offsets))
                                   : cp_positions(seq_len, s, start));
      },
      py::arg("seq_len") = 0, py::kw_only(), py::arg("cp_size"), py::arg("cp_rank"), py::arg("sharding") = "zigzag",
      py::arg("stripe") = 1, py::arg("start") = 0, py::arg("cu_seqlens") = py::none(),
      py::arg("start_offsets") = py::none(), "The positions of the tokens a context-parallel rank holds.");
  m.def(
      "verify_positions",
      [](std::int64_t cached, std::int64_t count) { return to_array(verify_positions(cached, count)); },
      py::arg("cached"), py::arg("count"),
      "A speculative verify window: positions cached … cached + count - 1 (the last accepted token and the drafts)");
  m.def(
      "tree_positions",
      [](const std::vector<std::int64_t>& parents, std::int64_t root_position) {
        return to_array(tree_positions(parents, root_position));
      },
      py::arg("parents"), py::arg("root_position"),
      "Draft-tree positions: root_position + depth (parents[i] in [-1, i)).");
  m.def(
      "tree_mask",
      [](const std::vector<std::int64_t>& parents) {
        const std::vector<std::uint8_t> mask = tree_mask(parents);
        const auto n = py::ssize_t(parents.size());
        py::array_t<bool> out({n, n});
        for (py::ssize_t i = 0; i < n * n; ++i) out.mutable_data()[i] = mask[std::size_t(i)] != 0;
        return out;
      },
      py::arg("parents"), "[n, n] booleans: node i sees node j (j is i or an ancestor).");
  m.def(
      "rejected_slot_ranges",
      [](const std::vector<std::int64_t>& parents, const std::vector<std::int64_t>& accepted, std::int64_t base_slot) {
        return rejected_slot_ranges(parents, accepted, base_slot);
      },
      py::arg("parents"), py::arg("accepted"), py::arg("base_slot"),
      "The [first, last) cache slot ranges to erase after verification, last first.");
}

}  // namespace ropekit::python
