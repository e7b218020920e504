// M-RoPE's position ids (ropekit/position_ids.hpp: mrope_position_ids) against Hugging Face's get_rope_index, and the
// text M-RoPE of the GLM-4V / Qwen3-VL families against their modeling files. Part of position_ids_test (one
// executable: tests/CMakeLists.txt).
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

using V = std::vector<std::int64_t>;

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
    const V pos = golden::flat_streams(c["positions"]);
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
