// Analysis: RoFormer's decay bound against a direct long-double sum; verify() on every variant.
#include <gtest/gtest.h>

#include <complex>

#include "analysis/verify_checks.hpp"
#include "expect_error.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

Spec llama(int d = 128) { return {.head_dim = d, .rotary_dim = d, .base = 10000.0, .pairing = Pairing::Half}; }

TEST(DecayBound, MatchesTheDefinitionSummedInLongDouble) {
  const Plan plan = make_plan(llama());
  const std::vector<double> got = decay_bound(plan, 5000);
  ASSERT_EQ(got.size(), 5001u);
  EXPECT_EQ(got[0], (64 + 1) / 2.0);  // S_j = j at r = 0: (1/64)·Σ j
  for (const std::int64_t r : {1, 2, 17, 100, 999, 4096, 5000}) {
    std::complex<long double> partial = 0;
    long double total = 0;
    for (std::size_t k = 0; k < plan.inv_freq.size(); ++k) {
      partial += std::polar(1.0L, static_cast<long double>(r) * static_cast<long double>(plan.inv_freq[k]));
      total += std::abs(partial);
    }
    EXPECT_NEAR(got[r], double(total / 64), 64 * 2e-9) << "r = " << r;
  }
}

TEST(DecayBound, DecaysWithDistanceAndScalingStretchesIt) {
  // RoFormer Fig. 2: the bound falls with relative distance. Linear interpolation by 8 slows every
  // frequency down, so at a given distance its bound is that of distance/8 unscaled.
  const auto mean = [](const std::vector<double>& v, std::size_t a, std::size_t b) {
    double s = 0;
    for (std::size_t i = a; i < b; ++i) s += v[i];
    return s / double(b - a);
  };
  const std::vector<double> plain = decay_bound(make_plan(llama()), 8000);
  EXPECT_LT(mean(plain, 1000, 1100), 0.5 * mean(plain, 10, 20));
  Spec pi = llama();
  pi.scaling = scaling::Linear{8.0};
  const std::vector<double> stretched = decay_bound(make_plan(pi), 8000);
  for (const std::size_t r : {80u, 800u, 8000u}) EXPECT_NEAR(stretched[r], plain[r / 8], 1e-6) << r;
}

TEST(DecayBound, BadInput) {
  EXPECT_ERROR(decay_bound(make_plan(llama()), -1), "max_distance = -1");
  EXPECT_ERROR(decay_bound(make_plan(llama()), (std::int64_t{1} << 24) + 1), "2^24");
  EXPECT_ERROR(decay_bound(Plan{}, 10), "no rotated pairs");
}

TEST(Verify, EveryCheckPassesForEveryVariant) {
  std::vector<Spec> specs;
  specs.push_back(llama());
  Spec gptj = llama(256);
  gptj.rotary_dim = 64;
  gptj.pairing = Pairing::Interleaved;
  specs.push_back(gptj);
  Spec yarn = llama();
  yarn.scaling = scaling::Yarn{.factor = 4.0, .original_max_position_embeddings = 32768};
  specs.push_back(yarn);
  Spec l3 = llama();
  l3.base = 500000.0;
  l3.scaling = scaling::Llama3{8.0, 1.0, 4.0, 8192};
  specs.push_back(l3);
  Spec dyn = llama(64);
  dyn.scaling = scaling::DynamicNtk{2.0, 2048};
  specs.push_back(dyn);
  Spec longrope = llama(96);
  longrope.scaling =
      scaling::LongRope{std::vector<double>(48, 1.0), std::vector<double>(48, 3.5), 4096, 32.0, std::nullopt};
  specs.push_back(longrope);
  for (const Spec& spec : specs) {
    for (const std::optional<std::int64_t> length :
         {std::optional<std::int64_t>{}, std::optional<std::int64_t>{100000}}) {
      for (const Check& c : verify(spec, length)) {
        EXPECT_TRUE(c.passed) << rope_type_name(spec.scaling) << " " << c.name << ": " << c.figure << " > " << c.bound;
        EXPECT_FALSE(c.skipped);
      }
    }
  }
}

// Every check, fed a broken implementation, says FAIL with a figure above its bound: so no check can
// pass by construction. The broken inputs are modest errors (one ulp, a bf16 rounding, a magnitude
// applied twice), all below 1e9, so a bound loosened to let them through fails this test too.
void expect_fails(const Check& c) {
  EXPECT_FALSE(c.passed) << c.name << ": " << c.figure << " <= " << c.bound;
  EXPECT_GT(c.figure, c.bound) << c.name;
  EXPECT_LT(c.figure, 1e9) << c.name << ": a broken input this far off would not show a loosened bound";
  std::printf("%-24s broken input: %.3g (bound %.3g)\n", c.name.c_str(), c.figure, c.bound);
}

TEST(Verify, EveryCheckFailsOnABrokenImplementation) {
  using detail::VerifyOps;
  Spec spec = llama();
  spec.scaling = scaling::Yarn{.factor = 4.0, .original_max_position_embeddings = 32768};  // magnitude 1.139
  const Rope rope(spec);
  const VerifyOps good = detail::library_ops(rope);
  const float m = float(rope.plan().cos_sin_scale);

  // Hugging Face's float32 angles: the logits drift with the offset, and the angles are far off at 2^31.
  const Rope hf(spec, rope.plan(), AngleMode::HfCompat);
  VerifyOps hf_angles = good;
  hf_angles.rotate = detail::library_ops(hf).rotate;
  expect_fails(detail::check_relative_position(rope, hf_angles));
  expect_fails(detail::check_table_accuracy(rope, hf_angles));

  VerifyOps otf_off = good;  // on-the-fly angles one ulp off in one element
  otf_off.rotate = [good](const auto& x, const auto& p, Direction dir, bool on_the_fly) {
    std::vector<float> y = good.rotate(x, p, dir, on_the_fly);
    if (on_the_fly) y[5] = std::nextafter(y[5], INFINITY);
    return y;
  };
  expect_fails(detail::check_on_the_fly_equals_table(rope, otf_off));

  VerifyOps no_divide = good;  // Inverse computed as Backward: the magnitude is not divided out
  no_divide.rotate = [good](const auto& x, const auto& p, Direction dir, bool on_the_fly) {
    return good.rotate(x, p, dir == Direction::Inverse ? Direction::Backward : dir, on_the_fly);
  };
  expect_fails(detail::check_inverse_roundtrip(rope, no_divide));

  VerifyOps twice = good;  // the magnitude applied twice
  twice.rotate = [good, m](const auto& x, const auto& p, Direction dir, bool on_the_fly) {
    std::vector<float> y = good.rotate(x, p, dir, on_the_fly);
    for (float& e : y) e *= m;
    return y;
  };
  expect_fails(detail::check_magnitude_once(rope, twice));

  VerifyOps lossy = good;  // shifted keys rounded through bf16
  lossy.shifted_keys = [good](const auto& k, const auto& p, const auto& deltas) {
    std::vector<float> y = good.shifted_keys(k, p, deltas);
    if (!deltas.empty()) {
      for (float& e : y) e = bf16_to_float(float_to_bf16(e));
    }
    return y;
  };
  expect_fails(detail::check_k_shift(rope, lossy));

  VerifyOps fused_off = good;  // one output one ulp off
  fused_off.fused_attention = [good](const AttentionArgs& args) {
    std::vector<float> y = good.fused_attention(args);
    y[17] = std::nextafter(y[17], INFINITY);
    return y;
  };
  expect_fails(detail::check_fused_attention(rope, fused_off));
}

}  // namespace
