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

}  // namespace ropekit
