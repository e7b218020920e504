// Position ids beyond one text stream (ropekit/position_ids.hpp) against the references' own definitions,
// transcribed here as independent oracles:
//   Megatron-LM  megatron/training/utils.py get_ltor_masks_and_position_ids (reset_position_ids; commit
//                00caa53af30912914981c86f39db123961678bbd) and get_batch_on_this_cp_rank (bshd: view the
//                sequence as 2·cp chunks, index_select [cp_rank, 2·cp − cp_rank − 1]);
//   TransformerEngine  transformer_engine/pytorch/csrc/extensions/attention.cu thd_partition_indices_kernel
//                (per local token: its document from cu_seqlens / world_size, offset = rank in the first
//                half, (world_size − 1)·2 − rank in the second);
// and brute force for the draft trees (depth by walking parents; the cache after erasing = the cache
// appended one accepted token at a time).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "expect_error.hpp"
#include "golden.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using ropekit::CpShard;
using ropekit::CpSharding;
using V = std::vector<std::int64_t>;

// Megatron-LM's reset_position_ids: positions[b, i+1:] -= i + 1 − prev_index at every EOD index i.
V megatron_reset_positions(const V& tokens, std::int64_t eod) {
  V pos(tokens.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::int64_t prev = 0;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] != eod) continue;
    for (std::size_t j = i + 1; j < tokens.size(); ++j) pos[j] -= std::int64_t(i) + 1 - prev;
    prev = std::int64_t(i) + 1;
  }
  return pos;
}

// Megatron-LM's get_batch_on_this_cp_rank on one sequence: chunk c of 2·cp holds [c·L/(2cp), (c+1)·L/(2cp)).
V megatron_zigzag(std::int64_t length, int cp, int rank) {
  const std::int64_t chunk = length / (2 * cp);
  V out;
  for (const std::int64_t c : {std::int64_t(rank), std::int64_t(2 * cp - rank - 1)}) {
    for (std::int64_t j = 0; j < chunk; ++j) out.push_back(c * chunk + j);
  }
  return out;
}

// TransformerEngine's thd_partition_indices_kernel, one thread per local token.
V te_thd_partitioned_indices(const V& cu_seqlens, int world_size, int rank) {
  const std::size_t batch = cu_seqlens.size() - 1;
  V cu_s(batch + 1);
  for (std::size_t i = 0; i <= batch; ++i) cu_s[i] = cu_seqlens[i] / world_size;
  const std::int64_t total_tokens = cu_seqlens.back();
  V out(std::size_t(total_tokens / world_size));
  for (std::int64_t token_id = 0; token_id < total_tokens / world_size; ++token_id) {
    // binary_search(token_id, cu_s, batch + 1): the last i in [0, batch) with cu_s[i] <= token_id.
    std::size_t left = 1, right = batch;
    while (left < right) {
      const std::size_t mid = (left + right) / 2;
      if (cu_s[mid] <= token_id) {
        left = mid + 1;
      } else {
        right = mid;
      }
    }
    const std::size_t seq_id = left - 1;
    const std::int64_t seq_len = cu_s[seq_id + 1] - cu_s[seq_id];
    std::int64_t index = token_id - cu_s[seq_id];
    const std::int64_t offset = index < seq_len / 2 ? rank : (world_size - 1) * 2 - rank;
    index += cu_s[seq_id] * world_size + seq_len / 2 * offset;
    out[std::size_t(token_id)] = index;
  }
  return out;
}

TEST(PackedPositions, RestartPerDocumentWithOffsets) {
  EXPECT_EQ(ropekit::packed_positions(V{0, 3, 5, 9}), (V{0, 1, 2, 0, 1, 0, 1, 2, 3}));
  EXPECT_EQ(ropekit::packed_positions(V{0, 3, 3, 5}, V{10, 7, 100}), (V{10, 11, 12, 100, 101}));
  EXPECT_EQ(ropekit::packed_positions(V{0}), V{});
}

TEST(PackedPositions, EodDocumentsAreMegatronsResetPositionIds) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    V tokens(static_cast<std::size_t>(rng() % 40));
    for (auto& t : tokens) t = std::int64_t(rng() % 5);  // eod = 0, about one token in five
    EXPECT_EQ(ropekit::packed_positions(ropekit::cu_seqlens_from_eod(tokens, 0)), megatron_reset_positions(tokens, 0))
        << "trial " << trial;
  }
}

TEST(ContextParallel, ZigZagIsMegatronsAndTransformerEnginesSplit) {
  for (int cp : {1, 2, 3, 4, 8}) {
    for (std::int64_t length : {std::int64_t(2 * cp), std::int64_t(16 * cp), std::int64_t(2 * cp * 37)}) {
      V all;
      for (int rank = 0; rank < cp; ++rank) {
        const V mine = ropekit::cp_indices(length, {.size = cp, .rank = rank});
        EXPECT_EQ(mine, megatron_zigzag(length, cp, rank)) << "cp " << cp << " rank " << rank << " L " << length;
        all.insert(all.end(), mine.begin(), mine.end());
      }
      std::sort(all.begin(), all.end());
      V iota(static_cast<std::size_t>(length));
      std::iota(iota.begin(), iota.end(), 0);
      EXPECT_EQ(all, iota) << "the ranks together hold every token once";
    }
  }
  std::mt19937 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    const int cp = 1 + int(rng() % 4);
    V cu{0};
    for (std::size_t d = 0, docs = 1 + rng() % 6; d < docs; ++d) cu.push_back(cu.back() + 2 * cp * (1 + rng() % 5));
    for (int rank = 0; rank < cp; ++rank) {
      EXPECT_EQ(ropekit::cp_indices_packed(cu, {.size = cp, .rank = rank}), te_thd_partitioned_indices(cu, cp, rank))
          << "trial " << trial << " rank " << rank;
    }
  }
}

TEST(ContextParallel, ContiguousAndStripedShards) {
  EXPECT_EQ(ropekit::cp_indices(12, {.size = 3, .rank = 1, .sharding = CpSharding::Contiguous}), (V{4, 5, 6, 7}));
  EXPECT_EQ(ropekit::cp_indices(12, {.size = 3, .rank = 1, .sharding = CpSharding::Striped}), (V{1, 4, 7, 10}));
  EXPECT_EQ(ropekit::cp_indices(12, {.size = 3, .rank = 2, .sharding = CpSharding::Striped, .stripe = 2}),
            (V{4, 5, 10, 11}));
  // Every sharding: the ranks partition the tokens; a packed batch shards each document on its own.
  const V cu{0, 12, 24, 36};
  for (const CpSharding sharding : {CpSharding::Contiguous, CpSharding::ZigZag, CpSharding::Striped}) {
    V all;
    for (int rank = 0; rank < 3; ++rank) {
      const CpShard shard{.size = 3, .rank = rank, .sharding = sharding, .stripe = 2};
      const V mine = ropekit::cp_indices_packed(cu, shard);
      ASSERT_EQ(mine.size(), 12u);
      for (std::size_t d = 0; d < 3; ++d) {
        const V one = ropekit::cp_indices(12, shard);
        for (std::size_t j = 0; j < 4; ++j) EXPECT_EQ(mine[d * 4 + j], cu[d] + one[j]);
      }
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all.size(), 36u);
    EXPECT_TRUE(std::adjacent_find(all.begin(), all.end()) == all.end());
  }
}

TEST(ContextParallel, PositionsAndCosSinOfOneRankWithoutTheGlobalTable) {
  const V cu{0, 8, 24, 32};
  const V offsets{100, 0, 7};
  const V global = ropekit::packed_positions(cu, offsets);
  const CpShard shard{.size = 2, .rank = 1};
  const V indices = ropekit::cp_indices_packed(cu, shard);
  const V mine = ropekit::cp_positions_packed(cu, shard, offsets);
  ASSERT_EQ(mine.size(), indices.size());
  for (std::size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i], global[std::size_t(indices[i])]);
  EXPECT_EQ(ropekit::cp_positions(8, {.size = 2, .rank = 0}, 1000), (V{1000, 1001, 1006, 1007}));
  // The rank's cos/sin straight from its positions are the global ones at its tokens, bit for bit.
  const ropekit::Rope rope(
      ropekit::Spec{.head_dim = 64, .rotary_dim = 64, .base = 500000, .pairing = ropekit::Pairing::Half});
  const std::size_t half = 32;
  std::vector<float> cos_all(global.size() * half), sin_all(global.size() * half);
  rope.cos_sin(ropekit::positions(std::span<const std::int64_t>(global)), cos_all, sin_all);
  std::vector<float> cos_mine(mine.size() * half), sin_mine(mine.size() * half);
  rope.cos_sin(ropekit::positions(std::span<const std::int64_t>(mine)), cos_mine, sin_mine);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    for (std::size_t p = 0; p < half; ++p) {
      EXPECT_EQ(cos_mine[i * half + p], cos_all[std::size_t(indices[i]) * half + p]);
      EXPECT_EQ(sin_mine[i * half + p], sin_all[std::size_t(indices[i]) * half + p]);
    }
  }
}

TEST(SpeculativeDecoding, TreePositionsAndMaskByBruteForce) {
  EXPECT_EQ(ropekit::verify_positions(41, 4), (V{41, 42, 43, 44}));
  std::mt19937 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    V parents(static_cast<std::size_t>(1 + rng() % 24));
    for (std::size_t i = 0; i < parents.size(); ++i) parents[i] = std::int64_t(rng() % (i + 1)) - 1;
    const V pos = ropekit::tree_positions(parents, 57);
    const std::vector<std::uint8_t> mask = ropekit::tree_mask(parents);
    const std::size_t n = parents.size();
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t depth = 0;
      std::vector<std::uint8_t> ancestors(n, 0);
      for (std::int64_t a = std::int64_t(i); a >= 0; a = parents[std::size_t(a)]) {
        ++depth;
        ancestors[std::size_t(a)] = 1;
      }
      EXPECT_EQ(pos[i], 57 + depth);
      for (std::size_t j = 0; j < n; ++j) EXPECT_EQ(mask[i * n + j], ancestors[j]) << i << " sees " << j;
    }
  }
}

// Appending a draft tree to a cache, then erasing what rejected_slot_ranges says, leaves exactly the cache that
// appending the accepted tokens one at a time would: the same keys (bit for bit), values and positions.
TEST(SpeculativeDecoding, ErasingRejectedNodesLeavesTheLinearCache) {
  const ropekit::Rope rope(
      ropekit::Spec{.head_dim = 16, .rotary_dim = 16, .base = 10000, .pairing = ropekit::Pairing::Interleaved});
  const V parents{-1, -1, 0, 0, 1, 2, 3, 5, 2};  // two root children; a path 0 → 2 → 5 → 7
  const V accepted{0, 2, 5, 7};
  const std::int64_t cached = 5;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  const auto random_rows = [&](std::size_t rows) {
    std::vector<float> v(rows * 16);
    for (float& x : v) x = normal(rng);
    return v;
  };
  const std::vector<float> prefix_k = random_rows(cached), prefix_v = random_rows(cached);
  const std::vector<float> tree_k = random_rows(parents.size()), tree_v = random_rows(parents.size());
  const auto view = [](const std::vector<float>& v, std::size_t first, std::size_t count) {
    return ropekit::bshd(const_cast<float*>(v.data()) + first * 16, ropekit::DType::F32, 1, std::int64_t(count), 1, 16);
  };
  V prefix_pos(static_cast<std::size_t>(cached));
  std::iota(prefix_pos.begin(), prefix_pos.end(), 0);
  ropekit::KvCache tree_cache(rope, {.capacity = 64, .kv_heads = 1});
  tree_cache.append(rope, view(prefix_k, 0, cached), view(prefix_v, 0, cached), ropekit::positions(prefix_pos));
  const V tree_pos = ropekit::tree_positions(parents, cached - 1);
  tree_cache.append(rope, view(tree_k, 0, parents.size()), view(tree_v, 0, parents.size()),
                    ropekit::positions(tree_pos));
  for (const auto& [first, last] : ropekit::rejected_slot_ranges(parents, accepted, cached))
    tree_cache.erase(first, last);

  ropekit::KvCache linear(rope, {.capacity = 64, .kv_heads = 1});
  linear.append(rope, view(prefix_k, 0, cached), view(prefix_v, 0, cached), ropekit::positions(prefix_pos));
  for (std::size_t a = 0; a < accepted.size(); ++a) {
    const V at{cached + std::int64_t(a)};
    const auto node = std::size_t(accepted[a]);
    linear.append(rope, view(tree_k, node, 1), view(tree_v, node, 1), ropekit::positions(at));
  }
  ASSERT_EQ(tree_cache.size(), linear.size());
  for (std::int64_t s = 0; s < linear.size(); ++s) EXPECT_EQ(tree_cache.position(s), linear.position(s));
  const auto* kt = static_cast<const float*>(tree_cache.keys().data);
  const auto* kl = static_cast<const float*>(linear.keys().data);
  const auto* vt = static_cast<const float*>(tree_cache.values().data);
  const auto* vl = static_cast<const float*>(linear.values().data);
  for (std::int64_t i = 0; i < linear.size() * 16; ++i) {
    EXPECT_EQ(kt[i], kl[i]) << "key float " << i;
    EXPECT_EQ(vt[i], vl[i]) << "value float " << i;
  }
  // Nothing accepted: every tree slot goes, in one range.
  EXPECT_EQ(ropekit::rejected_slot_ranges(parents, V{}, cached),
            (std::vector<std::pair<std::int64_t, std::int64_t>>{{cached, cached + std::int64_t(parents.size())}}));
}

TEST(PositionIds, BadInputIsAnErrorNamingTheValue) {
  EXPECT_ERROR(ropekit::packed_positions(V{}), "cu_seqlens is empty");
  EXPECT_ERROR(ropekit::packed_positions(V{1, 4}), "cu_seqlens[0] = 1");
  EXPECT_ERROR(ropekit::packed_positions(V{0, 4, 3}), "cu_seqlens[2] = 3", "must not decrease");
  EXPECT_ERROR(ropekit::packed_positions(V{0, 4}, V{1, 2}), "start_offsets has 2 values", "one per document (1)");
  EXPECT_ERROR(ropekit::packed_positions(V{0, 4}, V{-1}), "start_offsets[0] = -1");
  EXPECT_ERROR(ropekit::cp_indices(16, {.size = 0}), "cp size = 0");
  EXPECT_ERROR(ropekit::cp_indices(16, {.size = 2, .rank = 2}), "cp rank = 2", "[0, size = 2)");
  EXPECT_ERROR(ropekit::cp_indices(16, {.size = 2, .rank = -1}), "cp rank = -1");
  EXPECT_ERROR(ropekit::cp_indices(10, {.size = 2, .rank = 0}), "seq_len = 10", "zig-zag", "multiple of 4");
  EXPECT_ERROR(ropekit::cp_indices(10, {.size = 3, .sharding = CpSharding::Contiguous}), "seq_len = 10",
               "multiple of 3");
  EXPECT_ERROR(ropekit::cp_indices(12, {.size = 2, .sharding = CpSharding::Striped, .stripe = 0}), "stripe = 0");
  EXPECT_ERROR(ropekit::cp_indices(-4, {.size = 2}), "seq_len = -4");
  EXPECT_ERROR(ropekit::cp_indices(16, {.size = 2, .sharding = static_cast<CpSharding>(7)}), "sharding = 7");
  EXPECT_ERROR(ropekit::cp_indices_packed(V{0, 8, 14}, {.size = 2}), "document 1's length", "= 6", "multiple of 4");
  EXPECT_ERROR(ropekit::cp_positions(8, {.size = 2}, -3), "start = -3");
  EXPECT_ERROR(ropekit::verify_positions(-1, 3), "cached = -1");
  EXPECT_ERROR(ropekit::tree_positions(V{-1, 1}, 0), "parents[1] = 1", "cycle");
  EXPECT_ERROR(ropekit::tree_positions(V{-1, -2}, 0), "parents[1] = -2");
  EXPECT_ERROR(ropekit::tree_mask(V{2, -1, 0}), "parents[0] = 2");
  EXPECT_ERROR(ropekit::tree_positions(V{-1}, -5), "root_position = -5");
  EXPECT_ERROR(ropekit::rejected_slot_ranges(V{-1, 0, 0}, V{0, 1, 2}, 0), "accepted[2] = 2", "has parent 0, not 1");
  EXPECT_ERROR(ropekit::rejected_slot_ranges(V{-1, 0}, V{1}, 0), "accepted[0] = 1", "not -1");
  EXPECT_ERROR(ropekit::rejected_slot_ranges(V{-1, 0}, V{5}, 0), "accepted[0] = 5", "not a node");
}

}  // namespace
