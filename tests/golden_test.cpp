// Golden vectors from Hugging Face transformers (tests/data/golden/hf, README there).
//
//   inv_freq            within 2 float32 ulp of HF's float32 values, every entry of every file
//   attention_scaling   within 1e-6 relative
//   e2e cos/sin, q/k    HfCompat mode fed HF's float32 inv_freq: cos/sin within 6e-8, q/k within 5e-7 of HF (relative
//   to
//                       the pair's magnitude); with ropekit's own plan, in both angle modes, the
//                       difference to HF is bounded by HF's own float32 angle error, computed per
//                       element; Accurate mode against the __float128 oracle: within 1e-6.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <cmath>

#include "golden.hpp"
#include "oracle.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using nlohmann::json;

class InvFreqGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(InvFreqGolden, EveryEntryMatchesHuggingFace) {
  const json file = golden::load(GetParam());
  ASSERT_GT(file["entries"].size(), 0u);
  std::int64_t worst_ulp = 0, values = 0, exact = 0;
  for (const json& entry : file["entries"]) {
    SCOPED_TRACE(entry["id"].get<std::string>());
    const ropekit::Spec spec = golden::spec_of(entry);
    const ropekit::Plan plan = ropekit::make_plan(spec, golden::seq_len_of(entry));
    const auto expected = entry["inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(plan.inv_freq.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const std::int64_t ulp =
          golden::ulp_distance(static_cast<float>(plan.inv_freq[i]), static_cast<float>(expected[i]));
      worst_ulp = std::max(worst_ulp, ulp);
      ++values;
      exact += ulp == 0;
      EXPECT_LE(ulp, 2) << "pair " << i << ": ropekit " << plan.inv_freq[i] << ", HF " << expected[i];
    }
    const double scaling = entry["attention_scaling"].get<double>();
    EXPECT_NEAR(plan.cos_sin_scale, scaling, 1e-6 * std::abs(scaling));
  }
  RecordProperty("worst_ulp", static_cast<int>(worst_ulp));
  std::printf("%s: %zu entries, %lld of %lld inv_freq values bit-identical, worst %lld ulp\n", GetParam(),
              file["entries"].size(), static_cast<long long>(exact), static_cast<long long>(values),
              static_cast<long long>(worst_ulp));
}

INSTANTIATE_TEST_SUITE_P(AllVariants, InvFreqGolden,
                         ::testing::Values("default.json", "linear.json", "dynamic.json", "yarn.json", "longrope.json",
                                           "llama3.json", "proportional.json"));

// One e2e call: q/k of shape (1, heads, seq, head_dim) = BHSD, positions, HF's outputs.
struct E2eCall {
  ropekit::Spec spec;
  std::vector<std::int64_t> positions;
  std::vector<float> q, k, q_embed, k_embed, cos, sin;  // cos/sin: (seq, rotary_dim)
  std::vector<double> hf_inv_freq;
  double hf_scaling;
  std::int64_t heads, seq;
};

std::vector<E2eCall> load_e2e() {
  const json file = golden::load("e2e.json");
  std::vector<E2eCall> calls;
  for (const json& entry : file["entries"]) {
    for (const json& call : entry["calls"]) {
      E2eCall c;
      c.spec = golden::spec_of(entry);
      // HF's cos table is (batch, seq, rotary_dim): the reader must have found the same width.
      EXPECT_EQ(c.spec.rotary_dim, call["cos"]["shape"][2].get<int>()) << entry["id"];
      c.positions = call["position_ids"][0].get<std::vector<std::int64_t>>();
      c.q = call["q"]["data"].get<std::vector<float>>();
      c.k = call["k"]["data"].get<std::vector<float>>();
      const json& out = call["outputs"]["apply_rotary_pos_emb"];
      c.q_embed = out["q_embed"]["data"].get<std::vector<float>>();
      c.k_embed = out["k_embed"]["data"].get<std::vector<float>>();
      c.cos = call["cos"]["data"].get<std::vector<float>>();
      c.sin = call["sin"]["data"].get<std::vector<float>>();
      c.hf_inv_freq = call["inv_freq_used"].get<std::vector<double>>();
      c.hf_scaling = call["attention_scaling_used"].get<double>();
      c.heads = call["q"]["shape"][1].get<std::int64_t>();
      c.seq = call["q"]["shape"][2].get<std::int64_t>();
      calls.push_back(std::move(c));
    }
  }
  return calls;
}

struct Rotated {
  std::vector<float> q, k;
};

Rotated rotate(const ropekit::Rope& rope, const E2eCall& c) {
  Rotated r{c.q, c.k};
  const int d = c.spec.head_dim;
  rope.apply({.q = ropekit::bhsd(r.q.data(), ropekit::DType::F32, 1, c.seq, c.heads, d),
              .k = ropekit::bhsd(r.k.data(), ropekit::DType::F32, 1, c.seq, c.heads, d),
              .positions = ropekit::positions(c.positions)});
  return r;
}

// Magnitude of the rotated pair lane i belongs to (HF layout: rotate_half pairs).
double pair_norm(const std::vector<float>& x, std::size_t row, int i, int rotary_dim) {
  if (i >= rotary_dim) return std::abs(x[row + i]);
  const int half = rotary_dim / 2;
  const int a = i % half;
  return std::hypot(double(x[row + a]), double(x[row + a + half]));
}

TEST(E2eGolden, PlansMatchHuggingFaceInvFreq) {
  for (const E2eCall& c : load_e2e()) {
    const ropekit::Plan plan = ropekit::make_plan(c.spec);
    ASSERT_EQ(plan.inv_freq.size(), c.hf_inv_freq.size());
    for (std::size_t i = 0; i < plan.inv_freq.size(); ++i) {
      EXPECT_LE(golden::ulp_distance(float(plan.inv_freq[i]), float(c.hf_inv_freq[i])), 2) << i;
    }
    EXPECT_NEAR(plan.cos_sin_scale, c.hf_scaling, 1e-6);
  }
}

// HfCompat, fed HF's own float32 inv_freq: the angle HF forms is reproduced, so cos/sin agree to
// libm-vs-torch trig rounding and the rotated q/k to float32 rounding at every position.
//   cos/sin  ≤ 6e-8 (numerics.md): one float32 ulp of a value below 1 (2^-24 = 5.96e-8) — ours is the
//            correctly rounded cos of HF's float32 angle, torch's may be one ulp away;
//   q/k      ≤ 5e-7 of the pair's norm: the cos/sin difference (≤ 6e-8 on each of two products,
//            ≤ 8.5e-8·‖pair‖), HF's three float32 roundings (q·cos, rotate_half(q)·sin, their sum:
//            ≤ 3·2^-24·√2·‖pair‖ = 2.5e-7·‖pair‖) and ours (fma: ≤ 2·2^-24·‖pair‖ = 1.2e-7·‖pair‖)
//            sum to ≤ 4.6e-7·‖pair‖ (measured: 0.3 of it).
TEST(E2eGolden, HfCompatWithHfInvFreqReproducesHf) {
  constexpr double kCosSinTolerance = 6e-8, kRotatedTolerance = 5e-7;
  double worst_qk_ratio = 0;
  for (const E2eCall& c : load_e2e()) {
    ropekit::Plan plan = ropekit::make_plan(c.spec);
    plan.inv_freq = c.hf_inv_freq;
    const ropekit::Rope rope(c.spec, plan, ropekit::AngleMode::HfCompat);
    const int rd = c.spec.rotary_dim, half = rd / 2;
    const auto table = rope.table(c.positions.back() + 1);
    double worst_cs = 0;
    for (std::size_t s = 0; s < c.positions.size(); ++s) {
      for (int i = 0; i < rd; ++i) {
        const double ours_c = table->cos_row(c.positions[s])[i % half] * float(plan.cos_sin_scale);
        const double ours_s = table->sin_row(c.positions[s])[i % half] * float(plan.cos_sin_scale);
        worst_cs = std::max({worst_cs, std::abs(ours_c - c.cos[s * rd + i]), std::abs(ours_s - c.sin[s * rd + i])});
        EXPECT_LE(std::abs(ours_c - c.cos[s * rd + i]), kCosSinTolerance * plan.cos_sin_scale)
            << "position " << c.positions[s] << " lane " << i;
        EXPECT_LE(std::abs(ours_s - c.sin[s * rd + i]), kCosSinTolerance * plan.cos_sin_scale)
            << "position " << c.positions[s] << " lane " << i;
      }
    }
    const Rotated r = rotate(rope, c);
    double worst_qk = 0;
    const int d = c.spec.head_dim;
    for (std::size_t row = 0; row < c.q.size(); row += d) {
      for (int i = 0; i < d; ++i) {
        const double tol_q = kRotatedTolerance * pair_norm(c.q_embed, row, i, rd);
        const double tol_k = kRotatedTolerance * pair_norm(c.k_embed, row, i, rd);
        worst_qk = std::max(worst_qk, std::abs(double(r.q[row + i]) - c.q_embed[row + i]));
        worst_qk_ratio = std::max({worst_qk_ratio, std::abs(double(r.q[row + i]) - c.q_embed[row + i]) / tol_q,
                                   std::abs(double(r.k[row + i]) - c.k_embed[row + i]) / tol_k});
        EXPECT_LE(std::abs(double(r.q[row + i]) - c.q_embed[row + i]), tol_q) << row / d << " " << i;
        EXPECT_LE(std::abs(double(r.k[row + i]) - c.k_embed[row + i]), tol_k) << row / d << " " << i;
      }
    }
    std::printf("hf_compat with HF inv_freq, %s d=%d: max |cos/sin diff| %.3g, max |q diff| %.3g\n",
                std::string(ropekit::rope_type_name(c.spec.scaling)).c_str(), rd, worst_cs, worst_qk);
  }
  std::printf("worst q/k difference: %.3f of the tolerance\n", worst_qk_ratio);
}

// ropekit's own plan, both angle modes: the only difference to HF allowed is HF's own angle error
// (its float32 product, ≤ half an ulp of p·ω) plus the float32 inv_freq difference times p.
TEST(E2eGolden, OwnPlanDiffersFromHfOnlyByHfAngleError) {
  for (const ropekit::AngleMode mode : {ropekit::AngleMode::Accurate, ropekit::AngleMode::HfCompat}) {
    for (const E2eCall& c : load_e2e()) {
      const ropekit::Rope rope(c.spec, mode);
      const Rotated r = rotate(rope, c);
      const int d = c.spec.head_dim, rd = c.spec.rotary_dim, half = rd / 2;
      for (std::int64_t h = 0; h < c.heads; ++h) {
        for (std::int64_t s = 0; s < c.seq; ++s) {
          const std::size_t row = static_cast<std::size_t>((h * c.seq + s) * d);
          const double p = double(c.positions[s]);
          for (int i = 0; i < d; ++i) {
            double angle_bound = 0;
            if (i < rd) {
              const int j = i % half;
              const float hf_angle = float(p) * float(c.hf_inv_freq[j]);
              const double hf_rounding = 0.5 * std::abs(std::nextafter(hf_angle, INFINITY) - hf_angle);
              // HF's product rounding, the ω difference times p, and in HfCompat our own product
              // rounding (another half ulp) plus the float32 rounding of our ω.
              angle_bound = p * std::abs(rope.plan().inv_freq[j] - c.hf_inv_freq[j]) + hf_rounding +
                            (mode == ropekit::AngleMode::HfCompat
                                 ? 0.5 * std::abs(std::nextafter(hf_angle, INFINITY) - hf_angle) +
                                       p * std::abs(double(float(rope.plan().inv_freq[j])) - rope.plan().inv_freq[j])
                                 : 0.0);
            }
            const double tol = (1e-5 + angle_bound) * pair_norm(c.q_embed, row, i, rd);
            EXPECT_LE(std::abs(double(r.q[row + i]) - c.q_embed[row + i]), tol)
                << ropekit::to_string(mode) << " head " << h << " position " << p << " lane " << i;
            const double tol_k = (1e-5 + angle_bound) * pair_norm(c.k_embed, row, i, rd);
            EXPECT_LE(std::abs(double(r.k[row + i]) - c.k_embed[row + i]), tol_k);
          }
        }
      }
    }
  }
}

// Accurate angles against the __float128 oracle on the golden models' own plans and positions.
TEST(E2eGolden, AccurateTableMatchesOracle) {
  for (const E2eCall& c : load_e2e()) {
    const ropekit::Rope rope(c.spec);
    const auto table = rope.table(c.positions.back() + 1);
    double worst = 0;
    for (std::int64_t p : c.positions) {
      for (int j = 0; j < c.spec.num_pairs(); ++j) {
        double oc, os;
        oracle::cos_sin(p, rope.plan().inv_freq[j], &oc, &os);
        worst = std::max({worst, std::abs(table->cos_row(p)[j] - oc), std::abs(table->sin_row(p)[j] - os)});
      }
    }
    EXPECT_LE(worst, 1e-6);
  }
}

}  // namespace

// HunYuan's NTK-alpha rotary as Hugging Face runs it (hunyuan_alpha.json, scripts/golden_hunyuan.py): the α base
// at initialisation and below max_position_embeddings, HF's dynamic NTK on the unscaled base past it — its
// module's inv_freq after each forward, within 2 float32 ulp of the plan ropekit forms at that length.
TEST(HunyuanGolden, NtkAlphaFollowsTheModuleAtEveryStage) {
  const json file = golden::load("hunyuan_alpha.json");
  ASSERT_EQ(file["entries"].size(), 2u);
  for (const json& entry : file["entries"]) {
    const ropekit::ModelPositions model = ropekit::read_config(entry["config"].dump());
    const ropekit::Spec& spec = model.layer().spec;
    ASSERT_TRUE(std::holds_alternative<ropekit::scaling::HunyuanAlpha>(spec.scaling)) << entry["config"].dump();
    for (const json& stage : entry["stages"]) {
      const std::optional<std::int64_t> length =
          stage["seq_len"].is_null() ? std::nullopt : std::optional<std::int64_t>(stage["seq_len"].get<std::int64_t>());
      const ropekit::Plan plan = ropekit::make_plan(spec, length);
      const auto expected = stage["inv_freq"].get<std::vector<double>>();
      ASSERT_EQ(plan.inv_freq.size(), expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_LE(golden::ulp_distance(float(plan.inv_freq[i]), float(expected[i])), 2)
            << stage["stage"] << " pair " << i << ": ropekit " << plan.inv_freq[i] << ", HF " << expected[i];
      }
    }
    // The jump past max_position_embeddings is reported; alpha is read, so never listed as an ignored key (the
    // config's beta_fast, mscale ... are: HunYuan's rotary reads none of them).
    int jump = 0;
    for (const std::string& w : model.warnings) {
      jump += w.find("without alpha") != std::string::npos;
      if (w.find("unrecognized") != std::string::npos) {
        EXPECT_EQ(w.find("alpha"), std::string::npos) << w;
      }
    }
    EXPECT_EQ(jump, 1);
  }
}
