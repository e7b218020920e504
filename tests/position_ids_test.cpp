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

// ---- M-RoPE position ids against Hugging Face's get_rope_index (tests/data/mrope/, scripts/golden_mrope.py) ----

namespace mrope_golden {

ropekit::MropeFamily family_of(const std::string& name) {
  if (name == "qwen2_vl") return ropekit::MropeFamily::Qwen2Vl;
  if (name == "qwen2_5_vl") return ropekit::MropeFamily::Qwen25Vl;
  if (name == "qwen3_vl") return ropekit::MropeFamily::Qwen3Vl;
  return ropekit::MropeFamily::Glm4v;
}

void expect_golden(const std::string& file, ropekit::MropeRule indexing, std::size_t expected_cases) {
  std::ifstream in(std::string(ROPEKIT_REPO_DIR) + "/tests/data/mrope/" + file);
  ASSERT_TRUE(in) << file;
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_EQ(golden["cases"].size(), expected_cases);
  for (const auto& c : golden["cases"]) {
    const std::string where = c["family"].get<std::string>() + " " + c["name"].get<std::string>();
    const auto& ids = c["input_ids"];
    ropekit::MropeInput input;
    input.batch = std::int64_t(ids.size());
    input.seq = std::int64_t(ids[0].size());
    std::vector<std::int32_t> types;
    std::vector<std::uint8_t> mask;
    for (std::size_t b = 0; b < ids.size(); ++b) {
      for (std::size_t t = 0; t < ids[b].size(); ++t) {
        types.push_back(c["token_types"][b][t].get<std::int32_t>());
        mask.push_back(c["attention_mask"][b][t].get<std::uint8_t>());
      }
    }
    std::vector<ropekit::VisionGrid> images, videos;
    for (const auto& g : c["image_grid_thw"]) images.push_back({g[0], g[1], g[2]});
    for (const auto& g : c["video_grid_thw"]) videos.push_back({g[0], g[1], g[2]});
    const std::vector<double> seconds = c["second_per_grid_ts"].get<std::vector<double>>();
    input.token_types = types;
    input.attention_mask = mask;
    input.image_grids = images;
    input.video_grids = videos;
    input.second_per_grid_ts = seconds;
    input.spatial_merge_size = golden["provenance"]["spatial_merge_size"];
    input.tokens_per_second = golden["provenance"]["tokens_per_second"];
    const ropekit::MropePositionIds got =
        ropekit::mrope_position_ids(family_of(c["family"].get<std::string>()), indexing, input);
    std::vector<std::int64_t> want;
    for (const auto& row : c["positions"]) {
      for (const auto& b : row) {
        for (const auto& p : b) want.push_back(p.get<std::int64_t>());
      }
    }
    EXPECT_EQ(got.positions, want) << where;
    EXPECT_EQ(got.deltas, c["deltas"].get<std::vector<std::int64_t>>()) << where;
  }
}

}  // namespace mrope_golden

TEST(MropePositionIds, EqualTransformers5GetRopeIndexBitForBit) {
  mrope_golden::expect_golden("token_types.json", ropekit::MropeRule::TokenTypes, 24);
}

TEST(MropePositionIds, EqualTransformers457GetRopeIndexBitForBit) {
  mrope_golden::expect_golden("token_scan.json", ropekit::MropeRule::TokenScan, 18);
}

// The two rules differ where the issue says users are bitten: text after a video restarts after the largest
// (temporal) position in 4.57, after max(h, w) in 5; a 0.5 s interval is truncated to 0 in both.
TEST(MropePositionIds, TheTwoRulesAndDecoding) {
  const std::vector<std::int32_t> types{0, 2, 2, 2, 2, 2, 2, 2, 2, 0};
  const std::vector<ropekit::VisionGrid> video{{2, 4, 4}};
  ropekit::MropeInput input{.batch = 1, .seq = 10, .token_types = types, .video_grids = video};
  const auto t5 = ropekit::mrope_position_ids(ropekit::MropeFamily::Qwen2Vl, ropekit::MropeRule::TokenTypes, input);
  const auto t4 = ropekit::mrope_position_ids(ropekit::MropeFamily::Qwen2Vl, ropekit::MropeRule::TokenScan, input);
  EXPECT_EQ(t5.positions[9], 3);  // 1 + max(2, 2)
  EXPECT_EQ(t4.positions[9], 3);  // largest of t (2), h, w (2) + 1 = 3
  const std::vector<double> half{0.5};
  input.second_per_grid_ts = half;
  const auto q25 = ropekit::mrope_position_ids(ropekit::MropeFamily::Qwen25Vl, ropekit::MropeRule::TokenTypes, input);
  for (int t = 1; t <= 8; ++t) EXPECT_EQ(q25.positions[std::size_t(t)], 1) << "time truncated to 0 s";
  EXPECT_EQ(ropekit::mrope_decode_positions(-3, 10, 3), (V{7, 8, 9}));
  // Into the caller's buffers: the same values; buffers of another size are an error.
  V positions(30, -9), deltas(1, -9);
  ropekit::mrope_position_ids(ropekit::MropeFamily::Qwen25Vl, ropekit::MropeRule::TokenTypes, input, positions, deltas);
  EXPECT_EQ(positions, q25.positions);
  EXPECT_EQ(deltas, q25.deltas);
  V short_buffer(29);
  EXPECT_ERROR(ropekit::mrope_position_ids(ropekit::MropeFamily::Qwen25Vl, ropekit::MropeRule::TokenTypes, input,
                                           short_buffer, deltas),
               "positions has 29 values", "need 3 × batch × seq = 30");
}

TEST(MropePositionIds, BadInputIsAnErrorNamingTheValue) {
  const std::vector<std::int32_t> types{0, 1, 1, 1, 1, 1, 1, 0};
  const std::vector<ropekit::VisionGrid> image{{1, 4, 6}}, odd{{1, 5, 6}}, two{{1, 4, 6}, {1, 4, 6}};
  const auto run = [](ropekit::MropeInput in, ropekit::MropeFamily f = ropekit::MropeFamily::Qwen2Vl) {
    return ropekit::mrope_position_ids(f, ropekit::MropeRule::TokenTypes, in);
  };
  EXPECT_ERROR(run({.batch = 1, .seq = 8, .token_types = types, .image_grids = odd}), "image_grids[0] = (1, 5, 6)",
               "spatial_merge_size = 2");
  EXPECT_ERROR(run({.batch = 1, .seq = 8, .token_types = types, .image_grids = two}), "grids are left over");
  EXPECT_ERROR(run({.batch = 1, .seq = 8, .token_types = types}), "image 0 of only 0");
  EXPECT_ERROR(run({.batch = 1, .seq = 7, .token_types = types, .image_grids = image}), "token_types has 8 values");
  const std::vector<std::int32_t> short_run{0, 1, 1, 1, 0};
  EXPECT_ERROR(run({.batch = 1, .seq = 5, .token_types = short_run, .image_grids = image}), "3 tokens", "holds 6");
  const std::vector<std::int32_t> bad_type{0, 3};
  EXPECT_ERROR(run({.batch = 1, .seq = 2, .token_types = bad_type}), "token_types[1] = 3");
  const std::vector<std::int32_t> video_types{0, 2, 2, 2, 2, 2, 2, 0};
  const std::vector<double> negative{-1.0}, nan{std::nan("")};
  EXPECT_ERROR(
      run({.batch = 1, .seq = 8, .token_types = video_types, .video_grids = image, .second_per_grid_ts = negative},
          ropekit::MropeFamily::Qwen25Vl),
      "second_per_grid_ts[0] = -1");
  EXPECT_ERROR(run({.batch = 1, .seq = 8, .token_types = video_types, .video_grids = image, .second_per_grid_ts = nan},
                   ropekit::MropeFamily::Qwen25Vl),
               "second_per_grid_ts[0] = nan");
  EXPECT_ERROR(run({.batch = 1, .seq = 8, .token_types = video_types, .video_grids = image, .second_per_grid_ts = nan}),
               "only qwen2_5_vl");
  const std::vector<std::uint8_t> none(8, 0);
  EXPECT_ERROR(run({.batch = 1, .seq = 8, .token_types = types, .attention_mask = none, .image_grids = image}),
               "sequence 0 has no token");
  EXPECT_ERROR(ropekit::mrope_position_ids(ropekit::MropeFamily::Glm4v, ropekit::MropeRule::TokenScan,
                                           {.batch = 1, .seq = 8, .token_types = types, .image_grids = image}),
               "glm4v with the token-scanning rule");
  EXPECT_ERROR(ropekit::mrope_position_ids(ropekit::MropeFamily::Qwen2Vl, static_cast<ropekit::MropeRule>(7),
                                           {.batch = 1, .seq = 8, .token_types = types, .image_grids = image}),
               "rule = 7", "not an MropeRule");
  EXPECT_ERROR(ropekit::mrope_decode_positions(-20, 10, 3), "delta = -20");
  // MropeIndexing, the rule's name until 2026-11-29, is the same type for one version (deprecated).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  static_assert(std::is_same_v<ropekit::MropeIndexing, ropekit::MropeRule>);
#pragma GCC diagnostic pop
}

// ---- Vision encoders' axial RoPE against Hugging Face's own modules (tests/data/vision/, scripts/golden_vision.py)
//
// For each family: read_vision_config of the case's config, the position function (exact), the plan's per-pair
// inv_freq (within plan.hpp's 2 float32 ulp of the module's), cos/sin of an HfCompat Rope at those positions
// (table.hpp: within 6e-8 of HF's float32 cos/sin when inv_freq is HF's), and q rotated by Rope::apply against the
// family's apply function (float32 arithmetic both: within 5e-7 of |q|, as the text golden tests).
namespace vision_golden {

std::vector<ropekit::VisionGrid> grids_of(const nlohmann::json& c) {
  std::vector<ropekit::VisionGrid> grids;
  for (const auto& g : c["grids"])
    grids.push_back({g[0].get<std::int64_t>(), g[1].get<std::int64_t>(), g[2].get<std::int64_t>()});
  return grids;
}

V flat(const nlohmann::json& streams) {
  V out;
  for (const auto& s : streams) {
    for (const auto& x : s) out.push_back(x.get<std::int64_t>());
  }
  return out;
}

V positions_of(const ropekit::VisionRope& vr, const nlohmann::json& c) {
  using ropekit::VisionFamily;
  switch (vr.family) {
    case VisionFamily::Pixtral: return ropekit::pixtral_position_ids(grids_of(c), vr.patches_per_side);
    case VisionFamily::Llama4: return ropekit::llama4_vision_position_ids(vr.patches_per_side);
    default: {
      const auto grids = grids_of(c);
      V pos = ropekit::vision_position_ids(grids, vr.spatial_merge_size);
      if (vr.family != VisionFamily::Qwen25Vl) return pos;
      const auto windows = ropekit::vision_window_index(grids, vr.spatial_merge_size, vr.window_size, vr.patch_size);
      EXPECT_EQ(windows.window_index, c["window_index"].get<V>());
      EXPECT_EQ(windows.cu_window_seqlens, c["cu_window_seqlens"].get<V>());
      return ropekit::window_order(pos, 2, windows.window_index, vr.spatial_merge_size * vr.spatial_merge_size);
    }
  }
}

}  // namespace vision_golden

TEST(VisionRope, EqualsHuggingFacesModulesPerFamily) {
  std::ifstream in(std::string(ROPEKIT_REPO_DIR) + "/tests/data/vision/vision_rope.json");
  ASSERT_TRUE(in) << "tests/data/vision/vision_rope.json";
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_EQ(golden["cases"].size(), 6u);
  for (const auto& c : golden["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const ropekit::VisionRope vr = ropekit::read_vision_config(c["config"].dump());
    EXPECT_EQ(std::string(ropekit::to_string(vr.family)), c["name"].get<std::string>());
    const ropekit::Spec& spec = vr.spec;
    ASSERT_TRUE(spec.axial.has_value());
    const int pairs = spec.num_pairs();

    const V pos = vision_golden::positions_of(vr, c);
    if (c.contains("window_index")) {
      // HF reorders the rotary angles, not the ids: the angles at our reordered ids are checked below.
    } else {
      EXPECT_EQ(pos, vision_golden::flat(c["positions"]));
    }
    const auto n = static_cast<std::int64_t>(pos.size() / 2);

    const ropekit::Plan plan = ropekit::make_plan(spec);
    const auto inv = c["inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(inv.size(), static_cast<std::size_t>(pairs));
    for (int j = 0; j < pairs; ++j) {
      EXPECT_LE(golden::ulp_distance(float(plan.inv_freq[j]), float(inv[j])), 2) << "pair " << j;
    }

    const ropekit::Rope rope(spec, plan, ropekit::AngleMode::HfCompat);
    std::vector<float> cos(static_cast<std::size_t>(n * pairs)), sin(cos.size());
    rope.cos_sin(ropekit::axial_positions(std::span<const std::int64_t>(pos), 2), cos, sin);
    const auto hf_cos = c["cos"].get<std::vector<float>>(), hf_sin = c["sin"].get<std::vector<float>>();
    ASSERT_EQ(hf_cos.size(), cos.size());
    double worst = 0;
    for (std::size_t i = 0; i < cos.size(); ++i) {
      worst = std::max({worst, std::fabs(double(cos[i]) - hf_cos[i]), std::fabs(double(sin[i]) - hf_sin[i])});
    }
    EXPECT_LE(worst, 6e-8);

    std::vector<float> q = c["q"].get<std::vector<float>>();
    const auto expected = c["q_embed"].get<std::vector<float>>();
    const int heads = c["heads"].get<int>();
    ASSERT_EQ(q.size(), static_cast<std::size_t>(n * heads * spec.head_dim));
    std::vector<float> k = q;
    rope.apply({.q = ropekit::bshd(q.data(), ropekit::DType::F32, 1, n, heads, spec.head_dim),
                .k = ropekit::bshd(k.data(), ropekit::DType::F32, 1, n, heads, spec.head_dim),
                .positions = ropekit::axial_positions(std::span<const std::int64_t>(pos), 2)});
    double err = 0;
    for (std::size_t i = 0; i < q.size(); ++i) {
      err = std::max(err, std::fabs(double(q[i]) - expected[i]) / std::max(1.0, std::fabs(double(expected[i]))));
    }
    EXPECT_LE(err, 5e-7);
  }
}

// The axes are M-RoPE-like sections the kernels already run: every SIMD target equals the scalar reference through
// Rope::apply, and a rotation by axial positions equals rotating each axis's section alone by its own stream.
TEST(VisionRope, AxialSectionsRotateByTheirOwnStream) {
  ropekit::Spec spec{.head_dim = 24, .rotary_dim = 24, .base = 100.0, .pairing = ropekit::Pairing::Half};
  spec.axial = ropekit::Axial{{2, 4, 6}, ropekit::AxialFrequencies::PerAxis};
  const ropekit::Plan plan = ropekit::make_plan(spec);
  // PerAxis: each section restarts at the full frequency 1 (base^0), and follows base^(-2i/(2·s)).
  EXPECT_EQ(plan.inv_freq[0], 1.0);
  EXPECT_EQ(plan.inv_freq[2], 1.0);
  EXPECT_EQ(plan.inv_freq[6], 1.0);
  EXPECT_NEAR(plan.inv_freq[1], std::pow(100.0, -0.5), 1e-7);
  EXPECT_NEAR(plan.inv_freq[7], std::pow(100.0, -2.0 / 12), 1e-7);
  const ropekit::Rope rope(spec, plan, ropekit::AngleMode::Accurate);
  const std::int64_t n = 5;
  const V pos = {0, 1, 2, 3, 4, /* axis 1 */ 7, 0, 3, 9, 1, /* axis 2 */ 100, 5, 0, 2, 6};
  std::vector<float> cos(static_cast<std::size_t>(n * 12)), sin(cos.size());
  rope.cos_sin(ropekit::axial_positions(std::span<const std::int64_t>(pos), 3), cos, sin);
  // One-axis reference: the same plan with every stream at one axis's positions.
  for (int axis = 0; axis < 3; ++axis) {
    V same;
    for (int a = 0; a < 3; ++a) same.insert(same.end(), pos.begin() + axis * n, pos.begin() + (axis + 1) * n);
    std::vector<float> c1(cos.size()), s1(cos.size());
    rope.cos_sin(ropekit::axial_positions(std::span<const std::int64_t>(same), 3), c1, s1);
    const int first = axis == 0 ? 0 : axis == 1 ? 2 : 6, last = axis == 0 ? 2 : axis == 1 ? 6 : 12;
    for (std::int64_t t = 0; t < n; ++t) {
      for (int j = first; j < last; ++j) {
        EXPECT_EQ(cos[t * 12 + j], c1[t * 12 + j]);
        EXPECT_EQ(sin[t * 12 + j], s1[t * 12 + j]);
      }
    }
  }
  // Strided (Pixtral): two equal axes dealt round-robin from one list over rotary_dim.
  spec.axial = ropekit::Axial{{6, 6}, ropekit::AxialFrequencies::Strided};
  const ropekit::Plan strided = ropekit::make_plan(spec);
  spec.axial.reset();
  const ropekit::Plan global = ropekit::make_plan(spec);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(strided.inv_freq[i], global.inv_freq[2 * i]);
    EXPECT_EQ(strided.inv_freq[6 + i], global.inv_freq[2 * i + 1]);
  }
}

TEST(VisionRope, BadInputIsAnErrorNamingTheValue) {
  using ropekit::VisionGrid;
  const std::vector<VisionGrid> odd = {{1, 4, 6}, {1, 3, 4}};
  EXPECT_ERROR(ropekit::vision_position_ids(odd, 2), "grids[1] = (1, 3, 4)", "spatial_merge_size = 2");
  EXPECT_ERROR(ropekit::vision_position_ids(std::vector<VisionGrid>{{0, 2, 2}}, 2), "grids[0] = (0, 2, 2)");
  EXPECT_ERROR(ropekit::vision_position_ids(std::vector<VisionGrid>{{1, 2, 2}}, 0), "spatial_merge_size = 0");
  EXPECT_ERROR(ropekit::vision_position_ids(std::vector<VisionGrid>{{1 << 12, 1 << 12, 2}}, 2), "kMaxVisionTokens");
  EXPECT_ERROR(ropekit::vision_window_index(std::vector<VisionGrid>{{1, 4, 4}}, 2, 20, 14), "window_size = 20");
  EXPECT_ERROR(ropekit::window_order(V{0, 1, 2, 3, 0, 1, 2, 3}, 2, V{1, 2}, 2), "window_index[1] = 2");
  EXPECT_ERROR(ropekit::window_order(V{0, 1, 2, 0, 1, 2}, 2, V{0}, 2), "3 tokens", "unit = 2");
  EXPECT_ERROR(ropekit::pixtral_position_ids(std::vector<VisionGrid>{{1, 9, 2}}, 8), "images[0] = (1, 9, 2)",
               "max_patches_per_side = 8");
  EXPECT_ERROR(ropekit::llama4_vision_position_ids(0), "patches_per_side = 0");
  EXPECT_ERROR(ropekit::read_vision_config(R"({"model_type": "llama"})"), "model_type \"llama\"");
  EXPECT_ERROR(ropekit::read_vision_config(R"({"model_type": "qwen2_vl", "vision_config": {"num_heads": 16}})"),
               "vision_config.embed_dim");
  EXPECT_ERROR(ropekit::read_vision_config(
                   R"({"model_type": "qwen3_vl", "vision_config": {"hidden_size": 90, "num_heads": 3}})"),
               "head_dim 30", "multiple of 4");
  EXPECT_ERROR(ropekit::read_vision_config(
                   R"({"model_type": "pixtral", "hidden_size": 64, "num_attention_heads": 4, "image_size": 64,
                       "patch_size": 8, "rope_parameters": {"rope_type": "yarn"}})"),
               "rope_parameters.rope_type");
  ropekit::Spec spec{.head_dim = 16, .rotary_dim = 16, .base = 1e4, .pairing = ropekit::Pairing::Half};
  spec.axial = ropekit::Axial{{4, 3}};
  EXPECT_ERROR(spec.validate(), "spec.axial.sections = [4, 3]", "sum to 7");
  spec.axial = ropekit::Axial{{5, 3}, ropekit::AxialFrequencies::Strided};
  EXPECT_ERROR(spec.validate(), "strided", "same number of pairs");
  spec.axial = ropekit::Axial{{4, 4}};
  spec.mrope = ropekit::MRope{{4, 2, 2}};
  EXPECT_ERROR(spec.validate(), "spec.axial and spec.mrope");
  spec.mrope.reset();
  spec.scaling = ropekit::scaling::Linear{2.0};
  EXPECT_ERROR(spec.validate(), "spec.scaling = linear", "axial");
  spec.scaling = ropekit::scaling::None{};
  std::vector<std::int64_t> three(9, 0);
  EXPECT_ERROR(ropekit::axial_positions(std::span<const std::int64_t>(three), 2), "9 values", "2 streams");
  EXPECT_ERROR(ropekit::axial_positions(std::span<const std::int64_t>(three), 9), "axes = 9");
  // A KV cache keeps one position per token.
  EXPECT_ERROR(ropekit::KvCache(ropekit::Rope(spec), {.capacity = 8, .kv_heads = 1, .head_dim = 16}), "axial");
}

// The text M-RoPE of the GLM-4V family through the model table (tests/data/mrope/glm_text_rotary.json,
// scripts/golden_glm_mrope.py): GLM-4V and GLM-OCR apply Qwen2-VL's sections to GPT-J pairs, GLM-4.5V to NeoX pairs,
// Qwen3-VL interleaves the sections over NeoX pairs. q rotated by ropekit (HF's angles) at three distinct streams
// is within 5e-7 of the family's own apply_rotary_pos_emb; with the other pairing it is not.
TEST(MropeModels, GlmAndQwen3VlTextRotaryEqualTheirModelingFiles) {
  std::ifstream in(std::string(ROPEKIT_REPO_DIR) + "/tests/data/mrope/glm_text_rotary.json");
  ASSERT_TRUE(in);
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_EQ(golden["cases"].size(), 4u);
  for (const auto& c : golden["cases"]) {
    SCOPED_TRACE(c["model_type"].get<std::string>());
    const ropekit::ModelPositions model = ropekit::read_config(c["config"].dump());
    for (const std::string& w : model.warnings) EXPECT_EQ(w.find("read as a Llama"), std::string::npos) << w;
    const ropekit::Spec spec = model.layer().spec;
    ASSERT_TRUE(spec.mrope.has_value());
    const bool gptj = c["model_type"] == "glm4v" || c["model_type"] == "glm_ocr";
    EXPECT_EQ(spec.pairing, gptj ? ropekit::Pairing::Interleaved : ropekit::Pairing::Half);
    const V pos = vision_golden::flat(c["positions"]);
    const auto n = static_cast<std::int64_t>(pos.size() / 3);
    const int heads = c["heads"].get<int>();
    const auto expected = c["q_embed"].get<std::vector<float>>();
    auto rotate = [&](const ropekit::Spec& s) {
      std::vector<float> q = c["q"].get<std::vector<float>>(), k = q;
      ropekit::Rope(s, ropekit::AngleMode::HfCompat)
          .apply({.q = ropekit::bshd(q.data(), ropekit::DType::F32, 1, n, heads, s.head_dim),
                  .k = ropekit::bshd(k.data(), ropekit::DType::F32, 1, n, heads, s.head_dim),
                  .positions = ropekit::mrope_positions(std::span<const std::int64_t>(pos))});
      double err = 0;
      for (std::size_t i = 0; i < q.size(); ++i) {
        err = std::max(err, std::fabs(double(q[i]) - expected[i]) / std::max(1.0, std::fabs(double(expected[i]))));
      }
      return err;
    };
    EXPECT_LE(rotate(spec), 5e-7);
    ropekit::Spec other = spec;
    other.pairing = gptj ? ropekit::Pairing::Half : ropekit::Pairing::Interleaved;
    EXPECT_GT(rotate(other), 1e-2);
  }
}
