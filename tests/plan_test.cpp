// Plan semantics per variant: the worked numbers of the project's formula notes (formulas.md) and
// the bug reports collected in its pitfalls notes, each computed independently here.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

Spec half_spec(int d, double base, Scaling scaling = scaling::None{}) {
  return {.head_dim = d, .rotary_dim = d, .base = base, .pairing = Pairing::Half, .scaling = scaling};
}

double exact_inv(double base, int i, int d) { return std::pow(base, -2.0 * i / d); }

TEST(Plan, DefaultIsBaseToTheMinusTwoIOverD) {
  const Plan plan = make_plan(half_spec(128, 500000.0));
  ASSERT_EQ(plan.inv_freq.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    // The float32 reference value is within an ulp of the exact one for power-of-two d.
    EXPECT_NEAR(plan.inv_freq[i], exact_inv(500000.0, i, 128), 1.2e-7 * exact_inv(500000.0, i, 128));
  }
  EXPECT_EQ(plan.cos_sin_scale, 1.0);
  EXPECT_EQ(plan.softmax_scale_mult, 1.0);
}

TEST(Plan, LinearDividesEveryFrequency) {
  const Plan base = make_plan(half_spec(64, 10000.0));
  const Plan linear = make_plan(half_spec(64, 10000.0, scaling::Linear{4.0}));
  for (std::size_t i = 0; i < base.inv_freq.size(); ++i) {
    EXPECT_EQ(linear.inv_freq[i], base.inv_freq[i] / 4.0);  // exact: power-of-two factor
  }
}

TEST(Plan, FixedNtkChangesTheBase) {
  const double f = 4.0;
  const Plan ntk = make_plan(half_spec(128, 10000.0, scaling::Ntk{f}));
  const double base = 10000.0 * std::pow(f, 128.0 / 126.0);
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(ntk.inv_freq[i], exact_inv(base, i, 128), 2.4e-7 * exact_inv(base, i, 128));
  }
  EXPECT_EQ(ntk.inv_freq[0], 1.0);  // the highest frequency never changes
}

TEST(Plan, DynamicNtkIsContinuousMonotoneAndNeverNaN) {
  const Spec spec = half_spec(128, 10000.0, scaling::DynamicNtk{2.0, 4096});
  const Plan initial = make_plan(spec);
  EXPECT_EQ(initial.inv_freq, make_plan(half_spec(128, 10000.0)).inv_freq);
  // Below and at max_position_embeddings the base is unchanged (HF clamps the length).
  for (std::int64_t len : {1, 100, 4095, 4096}) {
    EXPECT_EQ(make_plan(spec, len).inv_freq, initial.inv_freq) << len;
    EXPECT_FALSE(needs_rerotation(initial, make_plan(spec, len)));
  }
  // Past it the base grows with the length: every frequency but the first shrinks.
  Plan previous = initial;
  for (std::int64_t len : {4097, 5000, 8192, 32768, 1 << 20}) {
    const Plan next = make_plan(spec, len);
    EXPECT_TRUE(needs_rerotation(previous, next)) << len;
    EXPECT_EQ(next.inv_freq[0], 1.0);
    for (int i = 1; i < 64; ++i) {
      EXPECT_TRUE(std::isfinite(next.inv_freq[i]));
      EXPECT_LT(next.inv_freq[i], previous.inv_freq[i]) << "len " << len << " pair " << i;
    }
    previous = next;
  }
  // At twice the length with factor 2: base' = base·(2·2 − 1)^(128/126).
  const double base = 10000.0 * std::pow(3.0, 128.0 / 126.0);
  const Plan at_8192 = make_plan(spec, 8192);
  for (int i = 0; i < 64; ++i) {
    EXPECT_NEAR(at_8192.inv_freq[i], exact_inv(base, i, 128), 2.4e-7 * exact_inv(base, i, 128));
  }
}

TEST(Plan, YarnAttentionFactorPrecedence) {
  auto yarn = [](double f, std::optional<double> af, std::optional<double> m, std::optional<double> mad) {
    return make_plan(half_spec(128, 10000.0,
                               scaling::Yarn{.factor = f,
                                             .original_max_position_embeddings = 4096,
                                             .attention_factor = af,
                                             .mscale = m,
                                             .mscale_all_dim = mad}));
  };
  EXPECT_NEAR(yarn(2, {}, {}, {}).cos_sin_scale, 1.0693147, 1e-7);
  EXPECT_NEAR(yarn(4, {}, {}, {}).cos_sin_scale, 1.1386294, 1e-7);
  EXPECT_NEAR(yarn(128, {}, {}, {}).cos_sin_scale, 0.1 * std::log(128.0) + 1, 1e-15);  // 1.4852
  // Explicit attention_factor wins, applied exactly once (vLLM #46280, SGLang #33558).
  EXPECT_EQ(yarn(64, 1.0, {}, {}).cos_sin_scale, 1.0);
  EXPECT_EQ(yarn(64, 1.0, 1.0, 0.5).cos_sin_scale, 1.0);
  // A lone mscale is ignored (HF); a zero mscale_all_dim counts as unset.
  EXPECT_NEAR(yarn(4, {}, 0.707, {}).cos_sin_scale, 1.1386294, 1e-7);
  EXPECT_NEAR(yarn(4, {}, 1.0, 0.0).cos_sin_scale, 1.1386294, 1e-7);
  EXPECT_EQ(yarn(4, {}, 1.0, 0.0).softmax_scale_mult, 1.0);
}

TEST(Plan, DeepSeekMscaleSplitsCosSinScaleAndSoftmaxScale) {
  auto deepseek = [](double f, double m, double mad) {
    return make_plan({.head_dim = 64,
                      .rotary_dim = 64,
                      .base = 10000.0,
                      .pairing = Pairing::Interleaved,
                      .scaling = scaling::Yarn{
                          .factor = f, .original_max_position_embeddings = 4096, .mscale = m, .mscale_all_dim = mad}});
  };
  const Plan v3 = deepseek(40, 1.0, 1.0);
  EXPECT_EQ(v3.cos_sin_scale, 1.0);
  EXPECT_NEAR(v3.softmax_scale_mult, 1.8738542, 1e-7);  // (0.1·ln 40 + 1)²
  const Plan v2_lite = deepseek(40, 0.707, 0.707);
  EXPECT_EQ(v2_lite.cos_sin_scale, 1.0);
  const double m = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_NEAR(v2_lite.softmax_scale_mult, m * m, 1e-12);  // ≈ 1.59
  EXPECT_NEAR(v2_lite.softmax_scale_mult, 1.59, 0.005);
}

TEST(Plan, YarnCorrectionRangeTruncatedOrNot) {
  auto range = [](int d, double base, std::int64_t l0, bool truncate) {
    const Plan p = make_plan(
        half_spec(d, base, scaling::Yarn{.factor = 4, .original_max_position_embeddings = l0, .truncate = truncate}));
    return std::pair{p.yarn_low, p.yarn_high};
  };
  EXPECT_EQ(range(128, 1e6, 32768, true), (std::pair{23.0, 40.0}));
  EXPECT_NEAR(range(128, 1e6, 32768, false).first, 23.596, 1e-3);
  EXPECT_NEAR(range(128, 1e6, 32768, false).second, 39.651, 1e-3);
  EXPECT_EQ(range(64, 1e4, 4096, true), (std::pair{10.0, 23.0}));
  // gpt-oss (truncate false, head_dim 64, theta 150000): vLLM #27722.
  const auto gpt_oss = range(64, 150000.0, 4096, false);
  EXPECT_NEAR(gpt_oss.first, 8.0928, 1e-4);
  EXPECT_NEAR(gpt_oss.second, 17.398, 1e-3);
}

TEST(Plan, YarnRampKeepsHighAndInterpolatesLowFrequencies) {
  const double f = 16;
  const Plan yarn =
      make_plan(half_spec(128, 10000.0, scaling::Yarn{.factor = f, .original_max_position_embeddings = 4096}));
  const Plan plain = make_plan(half_spec(128, 10000.0));
  for (int i = 0; i < 64; ++i) {
    if (i <= yarn.yarn_low) {
      EXPECT_EQ(yarn.inv_freq[i], plain.inv_freq[i]) << i;
    } else if (i >= yarn.yarn_high) {
      EXPECT_NEAR(yarn.inv_freq[i], plain.inv_freq[i] / f, 1.2e-7 * plain.inv_freq[i] / f) << i;
    } else {
      EXPECT_LT(yarn.inv_freq[i], plain.inv_freq[i]) << i;
      EXPECT_GT(yarn.inv_freq[i], plain.inv_freq[i] / f) << i;
    }
  }
}

TEST(Plan, Llama3BandsFollowWavelength) {
  const Plan l3 = make_plan(half_spec(128, 500000.0, scaling::Llama3{8, 1, 4, 8192}));
  const Plan plain = make_plan(half_spec(128, 500000.0));
  int kept = 0, interpolated = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double wavelen = 2 * std::numbers::pi / plain.inv_freq[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(l3.inv_freq[i], plain.inv_freq[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_NEAR(l3.inv_freq[i], plain.inv_freq[i] / 8, 1.2e-7 * plain.inv_freq[i] / 8);
      ++interpolated;
    } else {
      const double smooth = (8192.0 / wavelen - 1) / 3;
      const double expected = (1 - smooth) * plain.inv_freq[i] / 8 + smooth * plain.inv_freq[i];
      EXPECT_NEAR(l3.inv_freq[i], expected, 1e-5 * expected);  // float32 smoothing, see plan.cpp
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(interpolated, 0);
  EXPECT_GT(blended, 0);
}

TEST(Plan, LongRopeSwitchesStrictlyPastTheOriginalLength) {
  std::vector<double> short_f(48), long_f(48);
  for (int i = 0; i < 48; ++i) {
    short_f[i] = 1.0 + 0.02 * i;
    long_f[i] = 1.0 + 1.3 * i;
  }
  const Spec spec{.head_dim = 96,
                  .rotary_dim = 96,
                  .base = 10000.0,
                  .pairing = Pairing::Half,
                  .scaling = scaling::LongRope{short_f, long_f, 4096, 32.0, std::nullopt}};
  const Plan init = make_plan(spec), at_4096 = make_plan(spec, 4096), at_4097 = make_plan(spec, 4097);
  EXPECT_FALSE(init.uses_long_factors);
  EXPECT_FALSE(at_4096.uses_long_factors);
  EXPECT_TRUE(at_4097.uses_long_factors);
  EXPECT_FALSE(needs_rerotation(init, at_4096));
  EXPECT_TRUE(needs_rerotation(at_4096, at_4097));
  // Phi-3-mini-128k magnitude: sqrt(1 + ln 32 / ln 4096), the same for both factor sets.
  EXPECT_NEAR(at_4097.cos_sin_scale, 1.1902381, 1e-7);
  EXPECT_EQ(at_4096.cos_sin_scale, at_4097.cos_sin_scale);
  for (int i = 0; i < 48; ++i) {
    const double expected = 1.0 / (long_f[i] * std::pow(10000.0, 2.0 * i / 96));
    EXPECT_NEAR(at_4097.inv_freq[i], expected, 5e-7 * expected);
  }
}

TEST(Plan, ProportionalZeroPadsThePairsItDoesNotRotate) {
  const Spec spec{.head_dim = 128,
                  .rotary_dim = 128,
                  .base = 1e6,
                  .pairing = Pairing::Half,
                  .scaling = scaling::Proportional{0.25, 8.0}};
  const Plan plan = make_plan(spec);
  for (int i = 0; i < 64; ++i) {
    if (i < 16) {
      const double expected = std::pow(1e6, -2.0 * i / 128) / 8;
      EXPECT_NEAR(plan.inv_freq[i], expected, 1.2e-7 * expected);
    } else {
      EXPECT_EQ(plan.inv_freq[i], 0.0);
    }
  }
}

// Gemma 3: sliding-attention layers use base 1e4 unscaled, full-attention layers base 1e6 with
// linear factor 8 — two Specs, one per layer type (pitfalls #26).
TEST(Plan, Gemma3LayerTypesAreTwoSpecs) {
  const Plan local = make_plan(half_spec(256, 10000.0));
  const Plan global = make_plan(half_spec(256, 1e6, scaling::Linear{8.0}));
  for (int i = 0; i < 128; ++i) {
    EXPECT_NEAR(local.inv_freq[i], exact_inv(1e4, i, 256), 1.2e-7 * exact_inv(1e4, i, 256));
    EXPECT_NEAR(global.inv_freq[i], exact_inv(1e6, i, 256) / 8, 1.2e-7 * exact_inv(1e6, i, 256) / 8);
  }
}

TEST(Plan, PartialRotaryUsesRotaryDimInTheExponent) {
  const Plan plan = make_plan({.head_dim = 256, .rotary_dim = 64, .base = 10000.0, .pairing = Pairing::Half});
  ASSERT_EQ(plan.inv_freq.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(plan.inv_freq[i], exact_inv(1e4, i, 64), 1.2e-7 * exact_inv(1e4, i, 64));
  }
}

TEST(Plan, RopeTypeNames) {
  EXPECT_EQ(rope_type_name(scaling::None{}), "default");
  EXPECT_EQ(rope_type_name(scaling::Yarn{}), "yarn");
  EXPECT_EQ(rope_type_name(scaling::LongRope{}), "longrope");
  EXPECT_EQ(to_string(Pairing::Half), "half");
  EXPECT_EQ(to_string(Pairing::Interleaved), "interleaved");
}

}  // namespace
