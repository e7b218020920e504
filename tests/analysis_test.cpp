// Analysis: RoFormer's decay bound against a direct long-double sum; verify() on every variant.
#include <gtest/gtest.h>

#include <complex>

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
  longrope.scaling = scaling::LongRope{std::vector<double>(48, 1.0), std::vector<double>(48, 3.5), 4096, 32.0, std::nullopt};
  specs.push_back(longrope);
  for (const Spec& spec : specs) {
    for (const std::optional<std::int64_t> length : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{100000}}) {
      for (const Check& c : verify(spec, length)) {
        EXPECT_TRUE(c.passed) << rope_type_name(spec.scaling) << " " << c.name << ": " << c.figure << " > " << c.bound;
        EXPECT_FALSE(c.skipped);
      }
    }
  }
}

TEST(Verify, HfCompatAnglesWouldFailTheAccuracyBound) {
  // The table check reports HF's float32 angles next to ropekit's: at p = 2^31 − 1 they are far off.
  for (const Check& c : verify(llama())) {
    if (c.name != "table_accuracy") continue;
    const double hf = std::stod(c.detail.substr(c.detail.rfind(' ') + 1));
    EXPECT_GT(hf, 100 * c.bound) << c.detail;
  }
}

}  // namespace
