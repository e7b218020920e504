// Vision encoders' axial RoPE (ropekit/position_ids.hpp: vision_position_ids, VisionRope) against Hugging Face's own
// modules. Part of position_ids_test (one executable: tests/CMakeLists.txt).
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
      EXPECT_EQ(pos, golden::flat_streams(c["positions"]));
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
