// ropekit/position_ids.hpp — which position each token gets, beyond one text stream: packed sequences
// (positions restarting per document), the tokens and positions a context-parallel rank holds (contiguous,
// zig-zag and striped sharding, of one sequence or of a packed batch), and speculative decoding (verify
// windows, draft trees and the cache entries to drop after verification). Pure index arithmetic, exact;
// each function says which reference it equals (tests/position_ids_test.cpp transcribes those definitions as
// independent oracles). A rank's cos/sin needs no global table: Rope::cos_sin(positions(cp_positions(...))).
//
//   auto pos = ropekit::packed_positions(cu_seqlens);                         // 0 1 2 | 0 1 | 0 1 2 3
//   auto mine = ropekit::cp_positions_packed(cu_seqlens, {.size = 2, .rank = 1});  // zig-zag, per document
//   auto depth = ropekit::tree_positions(parents, last_accepted_position);    // a draft tree's positions
//
// Errors (ropekit::Error naming the argument and the value): cu_seqlens empty, not starting at 0 or
// decreasing; an offset per document of the wrong count or negative; a CP size below 1, a rank outside
// [0, size), a stripe below 1, a sequence (or document) length the sharding cannot split evenly; a parent
// outside [−1, i) (which is also what rules out cycles), an accepted list that is not a path from the root.
// Positions must stay below 2^47 (ropekit's position range).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace ropekit {

// ---- Packed sequences --------------------------------------------------------------------------------------

// Token t of document d (cu_seqlens[d] ≤ t < cu_seqlens[d + 1]) gets t − cu_seqlens[d] + start_offsets[d]
// (start_offsets empty: 0) — flash-attention's varlen layout, and the position ids a packed batch needs so
// that every document starts at 0 (or where its own cache ends). Empty documents (equal entries) are allowed.
std::vector<std::int64_t> packed_positions(std::span<const std::int64_t> cu_seqlens,
                                           std::span<const std::int64_t> start_offsets = {});

// The cu_seqlens of documents that end at an end-of-document token (the token belongs to the document it
// ends; a last document without one ends at the sequence's end): Megatron-LM's reset_position_ids, whose
// positions are packed_positions of this.
std::vector<std::int64_t> cu_seqlens_from_eod(std::span<const std::int64_t> tokens, std::int64_t eod);

// ---- Context parallelism -----------------------------------------------------------------------------------

enum class CpSharding {
  Contiguous,  // rank r holds [r·L/size, (r+1)·L/size); L divisible by size
  ZigZag,   // 2·size chunks of L/(2·size); rank r holds chunks r and 2·size−1−r (Megatron-LM, TransformerEngine)
  Striped,  // token t on rank (t / stripe) mod size, in order (striped attention); L divisible by size·stripe
};

struct CpShard {
  int size = 1;
  int rank = 0;
  CpSharding sharding = CpSharding::ZigZag;
  std::int64_t stripe = 1;  // Striped only: tokens per stripe
};

// The global token indices rank `shard.rank` holds, in its local order, for one sequence of seq_len tokens.
// ZigZag equals Megatron-LM's get_batch_on_this_cp_rank (bshd: the sequence viewed as 2·size chunks, chunks
// [rank, 2·size−1−rank] selected).
std::vector<std::int64_t> cp_indices(std::int64_t seq_len, const CpShard& shard);

// The same for a packed batch (THD): every document split on its own, the rank's parts concatenated in document
// order. ZigZag equals TransformerEngine's thd_get_partitioned_indices (each document length divisible by
// 2·size, as it requires; pad the documents, i.e. pass cu_seqlens_padded).
std::vector<std::int64_t> cp_indices_packed(std::span<const std::int64_t> cu_seqlens, const CpShard& shard);

// The positions of the tokens cp_indices gives: start + index.
std::vector<std::int64_t> cp_positions(std::int64_t seq_len, const CpShard& shard, std::int64_t start = 0);
// The positions of the tokens cp_indices_packed gives: packed_positions(cu_seqlens, start_offsets) at them.
std::vector<std::int64_t> cp_positions_packed(std::span<const std::int64_t> cu_seqlens, const CpShard& shard,
                                              std::span<const std::int64_t> start_offsets = {});

// ---- Speculative decoding ----------------------------------------------------------------------------------

// A verify window: `count` tokens after `cached` tokens at positions cached … cached + count − 1 (the last
// accepted token and the drafts, read in one forward).
std::vector<std::int64_t> verify_positions(std::int64_t cached, std::int64_t count);

// A draft tree (EAGLE / Medusa): node i's parent is parents[i] (−1: a child of the root, the token at
// root_position; otherwise an earlier node, so the array is in topological order and has no cycle). Node i's
// position is root_position + its depth (a root child has depth 1): the position the token has if its branch
// is accepted, so accepted keys never need re-rotation.
std::vector<std::int64_t> tree_positions(std::span<const std::int64_t> parents, std::int64_t root_position);

// The tree attention mask, row-major [n × n]: 1 where node i may see node j (j is i or an ancestor of i).
// Every node also sees the whole cache before the tree (not part of the mask).
std::vector<std::uint8_t> tree_mask(std::span<const std::int64_t> parents);

// After verification: `accepted` lists the accepted nodes from a root child down (each the parent of the
// next; may be empty). With the tree's tokens appended to a cache at slots base_slot + i, the slot ranges
// [first, last) to erase, last range first (each erase leaves the earlier ranges where they were), after
// which the accepted nodes sit at base_slot, base_slot + 1, … in path order with the positions
// tree_positions gave them: exactly the cache that appending the accepted tokens one by one would hold
// (KvCache::erase / PagedKvCache::erase; no key is re-rotated).
std::vector<std::pair<std::int64_t, std::int64_t>> rejected_slot_ranges(std::span<const std::int64_t> parents,
                                                                        std::span<const std::int64_t> accepted,
                                                                        std::int64_t base_slot);

// ---- M-RoPE position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V) -----------------------------------------

enum class MropeFamily { Qwen2Vl, Qwen25Vl, Qwen3Vl, Glm4v };

// Where the text after an image or video continues; the two rules Hugging Face has had.
enum class MropeRule {
  // transformers ≥ 5 (get_rope_index grouping mm_token_type_ids; pinned: v5.15.0): at the item's start
  // + max(h, w) / merge — the temporal extent is not counted. Qwen2.5-VL's video time step is
  // tokens_per_second × int(second_per_grid_t): a fractional interval is truncated first (0.5 s → 0).
  TokenTypes,
  // transformers ≤ 4.57 and the engines that copied it (scanning for vision_start): at the item's largest
  // position + 1, the temporal one included. Qwen2.5-VL's time step there: frame index × second_per_grid_t ×
  // tokens_per_second, second_per_grid_t cast to an integer first as that code does (see docs/positions.md).
  TokenScan,
};
// The name until 2026-11-29, kept for one version (the C API and Python call it the rule: docs/conventions.md).
using MropeIndexing [[deprecated("renamed MropeRule")]] = MropeRule;

struct VisionGrid {
  std::int64_t t = 1, h = 1, w = 1;  // patches before the spatial merge (image_grid_thw / video_grid_thw rows)
};

struct MropeInput {
  std::int64_t batch = 1, seq = 0;
  // [batch × seq] row-major: 0 text, 1 image, 2 video (the processor's mm_token_type_ids); vision_start/end
  // tokens are text.
  std::span<const std::int32_t> token_types;
  std::span<const std::uint8_t> attention_mask;  // [batch × seq], 0 = padding; empty: no padding
  std::span<const VisionGrid> image_grids;       // in order of appearance, over the whole batch
  std::span<const VisionGrid> video_grids;
  std::span<const double> second_per_grid_ts;  // Qwen2.5-VL: one per video (empty: 1 each)
  std::int64_t spatial_merge_size = 2;         // vision_config.spatial_merge_size
  std::int64_t tokens_per_second = 2;          // Qwen2.5-VL vision_config.tokens_per_second
};

struct MropePositionIds {
  // [3 × batch × seq] (t, h, w rows); padding tokens get 0 (TokenTypes) or 1 (TokenScan), as each release does.
  std::vector<std::int64_t> positions;
  // Per sequence, the decode offset: max position + 1 − the unpadded length (TokenTypes) or − seq, the padded
  // length (TokenScan: transformers 4.57's rope_deltas, whose text-only path also counts the padding's 1s).
  std::vector<std::int64_t> deltas;
};

// Hugging Face's get_rope_index for `family`, bit for bit (tests/data/mrope/: golden outputs of transformers'
// own functions, made by scripts/golden_mrope.py). Qwen3-VL and GLM-4V split every video into its frames
// (t = 1 each, timestamps in the text between them), as their get_rope_index does. Text-only input gives
// three equal rows. GLM-4V is available with TokenTypes only (its 4.x rule scans other tokens). Errors: token_types /
// attention_mask of the wrong size or a type outside {0, 1, 2}; a vision run whose token count is not t·(h/m)·(w/m) of
// its grid, grids left over or missing, a merge size that does not divide h and w, a grid dimension below 1, a negative
// or non-finite second_per_grid_t.
MropePositionIds mrope_position_ids(MropeFamily family, MropeRule rule, const MropeInput& input);
// The same into the caller's buffers (an engine's position tensor): positions [3 × batch × seq], deltas [batch];
// nothing allocated for the output. Errors as above, and buffers of another size; on an error the buffers may
// hold partial output.
void mrope_position_ids(MropeFamily family, MropeRule rule, const MropeInput& input, std::span<std::int64_t> positions,
                        std::span<std::int64_t> deltas);

// Decoding after a multimodal prompt: the positions of `count` new tokens at cache positions cached … (all
// three rows equal), each cache position + delta — Hugging Face's arange(past, past + n) + rope_deltas.
std::vector<std::int64_t> mrope_decode_positions(std::int64_t delta, std::int64_t cached, std::int64_t count);

// ---- Vision encoders (axial RoPE, Spec::axial) -------------------------------------------------------------
//
// Each returns stream-major coordinates, one stream per axis of the encoder's axial Spec (axial_positions(ids,
// axes) views them), for the patch tokens in the order the encoder holds them. Exact integer arithmetic, equal to
// the named Hugging Face function (tests/data/vision/: its own outputs, made by scripts/golden_vision.py). At most
// kMaxVisionTokens tokens per call. Errors (ropekit::Error naming the argument and value): a grid dimension below
// 1, a merge size below 1 or not dividing h and w, too many tokens, a window smaller than one merged patch, a
// Pixtral image larger than max_patches_per_side.
inline constexpr std::int64_t kMaxVisionTokens = std::int64_t{1} << 24;

// Qwen2-VL / Qwen2.5-VL / Qwen3-VL / GLM-4V ViT: transformers.vision_utils.get_vision_position_ids — per grid
// (t, h, w) the patches in block-major order over m×m merge blocks, (h, w) coordinates repeated for every
// frame. Streams: h, w — or t, h, w with include_temporal (MiniMax-M3-VL's encoder).
std::vector<std::int64_t> vision_position_ids(std::span<const VisionGrid> grids, std::int64_t spatial_merge_size,
                                              bool include_temporal = false);

// Qwen2.5-VL's window attention: transformers.vision_utils.get_vision_window_index. window_index orders the merged
// patches (groups of m² tokens) window by window; cu_window_seqlens are the windows' token boundaries (empty
// windows dropped, as torch.unique_consecutive does). The encoder holds its tokens — and their positions — in that
// order: window_order(vision_position_ids(...), 2, index, m²).
struct VisionWindows {
  std::vector<std::int64_t> window_index;
  std::vector<std::int64_t> cu_window_seqlens;
};
VisionWindows vision_window_index(std::span<const VisionGrid> grids, std::int64_t spatial_merge_size,
                                  std::int64_t window_size, std::int64_t patch_size);
// Stream-major positions (axes streams of n tokens) reordered in groups of `unit` tokens: group g of the output is
// group window_index[g] of the input — HF's reshape(n / unit, unit, -1)[window_index]. Errors: n not a multiple
// of unit, an index outside [0, n / unit) or a count other than n / unit.
std::vector<std::int64_t> window_order(std::span<const std::int64_t> positions, int axes,
                                       std::span<const std::int64_t> window_index, std::int64_t unit);

// Pixtral: position_ids_in_meshgrid — per image of h × w patches (VisionGrid::t ignored, must be 1), row-major,
// coordinates (row, column); HF flattens them to row · max_patches_per_side + column (the same angles: its
// table's row holds the two axes' angles). Rows and columns must be below max_patches_per_side
// (vision_config image_size / patch_size), the extent of HF's table.
std::vector<std::int64_t> pixtral_position_ids(std::span<const VisionGrid> images, std::int64_t max_patches_per_side);

// Llama 4's vision tower: Llama4VisionRotaryEmbedding — the side × side patches row-major, then the class token;
// coordinates (column + 1, row + 1) for patches and (0, 0) for the class token (HF masks its angles to 0).
// side = vision_config image_size / patch_size.
std::vector<std::int64_t> llama4_vision_position_ids(std::int64_t patches_per_side);

}  // namespace ropekit
