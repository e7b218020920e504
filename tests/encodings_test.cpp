// Sinusoidal, learned, ALiBi and T5 encodings against values computed here by other routes.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "ropekit/encodings.hpp"
#include "ropekit/error.hpp"

namespace {

using namespace ropekit;

TEST(Sinusoidal, MatchesLongDoubleFormulaWithinOneFloatRounding) {
  // Oracle: the paper's formula in long double (64-bit significand; p·ω at p = 2^20 keeps ~1e-13).
  const std::vector<std::int64_t> positions = {0, 1, 2, 7, 100, 1000, 4095, 65536, 1 << 20};
  for (const int dim : {2, 8, 64, 512}) {
    std::vector<float> out(positions.size() * dim);
    sinusoidal_encoding(positions, dim, out);
    double worst = 0.0;
    for (std::size_t t = 0; t < positions.size(); ++t) {
      for (int i = 0; i < dim / 2; ++i) {
        const long double angle = static_cast<long double>(positions[t]) / std::pow(10000.0L, 2.0L * i / dim);
        worst = std::max(worst, double(std::fabs(out[t * dim + 2 * i] - std::sin(angle))));
        worst = std::max(worst, double(std::fabs(out[t * dim + 2 * i + 1] - std::cos(angle))));
      }
    }
    EXPECT_LE(worst, 6e-8) << "dim " << dim;
  }
}

TEST(Sinusoidal, KnownValues) {
  std::vector<float> out(4);
  const std::vector<std::int64_t> zero = {0};
  sinusoidal_encoding(zero, 4, out);
  EXPECT_EQ(out, (std::vector<float>{0.0f, 1.0f, 0.0f, 1.0f}));
  const std::vector<std::int64_t> one = {1};
  sinusoidal_encoding(one, 4, out);
  EXPECT_EQ(out[0], float(std::sin(1.0)));
  EXPECT_EQ(out[1], float(std::cos(1.0)));
  EXPECT_EQ(out[2], float(std::sin(0.01)));  // 10000^(−2/4) = 1/100
  EXPECT_EQ(out[3], float(std::cos(0.01)));
}

TEST(Sinusoidal, BadInput) {
  std::vector<float> out(6);
  const std::vector<std::int64_t> p = {0, 1};
  EXPECT_THROW(sinusoidal_encoding(p, 3, out), Error);  // odd dim
  EXPECT_THROW(sinusoidal_encoding(p, 0, out), Error);
  EXPECT_THROW(sinusoidal_encoding(p, 4, out), Error);  // out too small
  std::vector<float> out8(8);
  EXPECT_THROW(sinusoidal_encoding(p, 4, out8, 1.0), Error);  // base
  const std::vector<std::int64_t> negative = {-1, 0};
  EXPECT_THROW(sinusoidal_encoding(negative, 4, out8), Error);
}

TEST(Learned, LooksUpRowsAndRejectsPositionsPastTheEnd) {
  std::vector<float> weights(5 * 3);
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = float(i) * 0.5f;
  const LearnedPositionTable table(weights, 3);
  EXPECT_EQ(table.num_positions(), 5);
  std::vector<float> out(6);
  const std::vector<std::int64_t> p = {4, 0};
  table.lookup(p, out);
  EXPECT_EQ(out, (std::vector<float>{6.0f, 6.5f, 7.0f, 0.0f, 0.5f, 1.0f}));
  const std::vector<std::int64_t> past = {1, 5};
  try {
    table.lookup(past, out);
    FAIL() << "position 5 of a 5-row table was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("positions[1] = 5"), std::string::npos) << e.what();
  }
  const std::vector<std::int64_t> negative = {-1, 0};
  EXPECT_THROW(table.lookup(negative, out), Error);
  EXPECT_THROW(LearnedPositionTable(std::vector<float>(7), 3), Error);
  EXPECT_THROW(LearnedPositionTable(std::vector<float>(), 3), Error);
  EXPECT_THROW(LearnedPositionTable(std::vector<float>(6), 0), Error);
}

TEST(Alibi, PowerOfTwoHeadsAreThePapersGeometricSequence) {
  // Press et al.: for 8 heads, 1/2, 1/4, ..., 1/256.
  const std::vector<float> s8 = alibi_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s8[h], std::ldexp(1.0f, -(h + 1))) << h;
  // 16 heads: start 2^(−1/2), ratio 2^(−1/2).
  const std::vector<float> s16 = alibi_slopes(16);
  for (int h = 0; h < 16; ++h) EXPECT_EQ(s16[h], float(std::pow(std::sqrt(0.5), h + 1))) << h;
  EXPECT_EQ(alibi_slopes(1), std::vector<float>{1.0f / 256.0f});
}

TEST(Alibi, OtherHeadCountsFollowTheInterleavingRule) {
  // Independent route (ggml's form of the same rule): n = 2^floor(log2 H), m0 = 2^(−8/n),
  // m1 = 2^(−4/n); head h < n: m0^(h+1), else m1^(2(h−n)+1).
  for (const int heads : {3, 5, 6, 12, 20, 40, 96}) {
    const std::vector<float> s = alibi_slopes(heads);
    ASSERT_EQ(int(s.size()), heads);
    const int n = 1 << int(std::floor(std::log2(double(heads))));
    const double m0 = std::pow(2.0, -8.0 / n), m1 = std::pow(2.0, -4.0 / n);
    for (int h = 0; h < heads; ++h) {
      const double want = h < n ? std::pow(m0, h + 1) : std::pow(m1, 2 * (h - n) + 1);
      EXPECT_NEAR(s[h], want, want * 1.2e-7) << heads << " heads, head " << h;
    }
  }
  // BLOOM's 12 heads, first extra slope: 2^(−0.5).
  EXPECT_FLOAT_EQ(alibi_slopes(12)[8], float(std::sqrt(0.5)));
  EXPECT_THROW(alibi_slopes(0), Error);
  EXPECT_THROW(alibi_slopes(8, 0.0), Error);
}

TEST(Alibi, BiasIsMinusSlopeTimesDistance) {
  EXPECT_EQ(alibi_bias(0.25f, 10, 10), 0.0f);
  EXPECT_EQ(alibi_bias(0.25f, 10, 6), -1.0f);
  EXPECT_EQ(alibi_bias(0.25f, 6, 10), -1.0f);
}

// T5 bucket by searching the real-valued boundaries max_exact · (max_distance/max_exact)^(k/steps).
int t5_oracle(int num_buckets, int max_distance, bool bidirectional, std::int64_t rel) {
  int offset = 0;
  std::int64_t n;
  if (bidirectional) {
    num_buckets /= 2;
    if (rel > 0) offset = num_buckets;
    n = rel < 0 ? -rel : rel;
  } else {
    n = rel < 0 ? -rel : 0;
  }
  const int exact = num_buckets / 2;
  if (n < exact) return offset + int(n);
  const int steps = num_buckets - exact;
  int k = 0;
  while (k + 1 < steps &&
         double(exact) * std::pow(double(max_distance) / exact, double(k + 1) / steps) <= double(n) + 1e-9) {
    ++k;
  }
  return offset + exact + k;
}

TEST(T5, BucketsMatchTheBoundarySearch) {
  for (const bool bidirectional : {true, false}) {
    for (const auto& [buckets, distance] :
         {std::pair{32, 128}, std::pair{16, 64}, std::pair{64, 1000}, std::pair{8, 20}}) {
      const T5Buckets b{buckets, distance, bidirectional};
      for (std::int64_t rel = -3000; rel <= 3000; ++rel) {
        ASSERT_EQ(t5_bucket(b, rel), t5_oracle(buckets, distance, bidirectional, rel))
            << buckets << "/" << distance << (bidirectional ? " bidirectional" : " causal") << " rel " << rel;
      }
    }
  }
}

TEST(T5, KnownValuesOfTheDefaultConfiguration) {
  const T5Buckets enc{32, 128, true};
  EXPECT_EQ(t5_bucket(enc, 0), 0);
  EXPECT_EQ(t5_bucket(enc, -1), 1);
  EXPECT_EQ(t5_bucket(enc, 1), 17);
  EXPECT_EQ(t5_bucket(enc, -7), 7);
  EXPECT_EQ(t5_bucket(enc, -8), 8);
  EXPECT_EQ(t5_bucket(enc, -16), 10);  // 8 + 8·log(2)/log(16)
  EXPECT_EQ(t5_bucket(enc, -127), 15);
  EXPECT_EQ(t5_bucket(enc, -100000), 15);
  EXPECT_EQ(t5_bucket(enc, 100000), 31);
  const T5Buckets dec{32, 128, false};
  EXPECT_EQ(t5_bucket(dec, 5), 0);  // later keys share bucket 0
  EXPECT_EQ(t5_bucket(dec, -15), 15);
  EXPECT_EQ(t5_bucket(dec, -16), 16);
  EXPECT_EQ(t5_bucket(dec, -32), 21);  // 16 + 16·log(2)/log(8) = 21.33
  EXPECT_EQ(t5_bucket(dec, -1000), 31);
}

TEST(T5, BadConfigurations) {
  EXPECT_THROW(t5_bucket(T5Buckets{2, 128, true}, 0), Error);
  EXPECT_THROW(t5_bucket(T5Buckets{1, 128, false}, 0), Error);
  EXPECT_THROW(t5_bucket(T5Buckets{32, 8, true}, 0), Error);  // max_distance within the exact range
}

}  // namespace
