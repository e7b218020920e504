// The runner's own kernels (lab/kernels.hpp) on every SIMD target ropekit lists, against long double at the bounds
// their header states, and run on the target the library's calls run on (ropekit::set_simd_target).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "lab/kernels.hpp"
#include "ropekit/cpu.hpp"
#include "targets.hpp"

namespace {

class LabKernels : public targets::PerTarget {};
ROPEKIT_PER_TARGET(LabKernels);

TEST_P(LabKernels, LogSumExpWithinItsBoundOfLongDouble) {
  std::mt19937 rng(7);
  for (const std::size_t n : {1u, 2u, 7u, 15u, 16u, 17u, 63u, 64u, 65u, 1000u, 32000u, 128256u}) {
    for (const float spread : {0.5f, 8.0f, 30.0f, 200.0f}) {
      std::uniform_real_distribution<float> value(-spread, spread);
      std::vector<float> row(n);
      for (float& x : row) x = value(rng) + 12.0f;
      long double max = row[0];
      for (float x : row) max = std::max(max, static_cast<long double>(x));
      long double sum = 0;
      for (float x : row) sum += std::exp(static_cast<long double>(x) - max);
      const double exact = static_cast<double>(max + std::log(sum));
      EXPECT_NEAR(ropekit::lab::log_sum_exp(row), exact, 1e-5) << "n = " << n << ", spread = " << spread;
    }
  }
  // One dominant logit, the rest far below it (their exp underflows): exactly the maximum.
  std::vector<float> peaked(1000, -1e30f);
  peaked[417] = 3.5f;
  EXPECT_EQ(ropekit::lab::log_sum_exp(peaked), 3.5);
}

TEST_P(LabKernels, MatvecRowsWithinTheDotProductBound) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const std::size_t in : {1u, 5u, 16u, 31u, 33u, 288u, 768u}) {
    const std::size_t out = 37;
    std::vector<float> w(out * in), x(in);
    for (float& v : w) v = value(rng);
    for (float& v : x) v = value(rng);
    for (const bool accumulate : {false, true}) {
      std::vector<float> y(out, 0.25f);
      const std::size_t first = 3, last = 30;
      ropekit::lab::matvec_rows(w.data(), x.data(), y.data(), in, first, last, accumulate);
      // n products and sums in float32 (fused or not): |error| ≤ γ_{n+1} Σ|w||x| (+ the accumulate's rounding).
      const double gamma = double(in + 2) * 0x1p-24 / (1 - double(in + 2) * 0x1p-24);
      for (std::size_t o = 0; o < out; ++o) {
        if (o < first || o >= last) {
          EXPECT_EQ(y[o], 0.25f) << "row " << o << " is outside [first, last)";
          continue;
        }
        long double exact = accumulate ? 0.25L : 0.0L, magnitude = accumulate ? 0.25L : 0.0L;
        for (std::size_t i = 0; i < in; ++i) {
          exact += static_cast<long double>(w[o * in + i]) * x[i];
          magnitude += std::abs(static_cast<long double>(w[o * in + i]) * x[i]);
        }
        EXPECT_LE(std::abs(static_cast<double>(y[o] - exact)), gamma * static_cast<double>(magnitude))
            << "in = " << in << ", row " << o << (accumulate ? ", accumulating" : "");
      }
    }
  }
}

// The kernels follow set_simd_target (issue 62): a dot product's bits depend on the vector width (the lanes' partial
// sums are added in another order), so the products of one matrix on every target give more than one set of bits
// when targets of different widths are listed — one set whatever the restriction when the kernels chose a target of
// their own — and each target gives its own bits again when chosen again.
TEST(LabKernelsTargets, FollowTheLibrarysTarget) {
  const std::vector<std::string> names = ropekit::simd_targets();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const std::size_t in = 4099, out = 16;
  std::vector<float> w(out * in), x(in);
  for (float& v : w) v = value(rng);
  for (float& v : x) v = value(rng);
  const auto product = [&](const std::string& target) {
    ropekit::set_simd_target(target);
    std::vector<float> y(out);
    ropekit::lab::matvec_rows(w.data(), x.data(), y.data(), in, 0, out, false);
    std::vector<float> row(x);
    const double lse = ropekit::lab::log_sum_exp(row);
    ropekit::set_simd_target("");
    std::string bits(reinterpret_cast<const char*>(y.data()), y.size() * sizeof(float));
    bits.append(reinterpret_cast<const char*>(&lse), sizeof lse);
    return bits;
  };
  std::set<std::string> distinct;
  for (const std::string& t : names) {
    const std::string first = product(t);
    EXPECT_EQ(product(t), first) << t << " chosen twice";
    distinct.insert(first);
  }
  // SCALAR (or EMU128: Highway's portable targets) beside a wider one: two widths at least.
  const bool portable =
      std::any_of(names.begin(), names.end(), [](const std::string& n) { return n == "SCALAR" || n == "EMU128"; });
  if (!portable || names.size() < 2) GTEST_SKIP() << "one vector width among this CPU's targets";
  EXPECT_GE(distinct.size(), 2u) << "every target gave the same bits: the kernels ignore set_simd_target";
  EXPECT_EQ(product(""), product(names.front())) << "the default is the best target";
}

}  // namespace
