// Engines' cos/sin caches: ropekit's export within its derived bound of the __float128 oracle,
// imported caches rotating with exactly their own coefficients (ropekit's, or Hugging Face's float32
// angles), the checker finding a planted error and a float32-angle cache's drift, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "expect_error.hpp"
#include "oracle.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

Spec spec_of(Pairing pairing, Scaling scaling = scaling::None{}, int d = 64) {
  return {.head_dim = d, .rotary_dim = d, .base = 10000.0, .pairing = pairing, .scaling = scaling};
}

Spec yarn(Pairing pairing) {  // cos_sin_scale = 0.1·ln(8) + 1 ≠ 1: the magnitude is in the cache
  return spec_of(pairing, scaling::Yarn{.factor = 8.0, .original_max_position_embeddings = 512});
}

std::vector<float> exported(const Rope& rope, std::int64_t n) {
  std::vector<float> cache(static_cast<std::size_t>(n * rope.spec().rotary_dim));
  export_cos_sin_cache(rope, n, cache);
  return cache;
}

TEST(CosSinCache, ExportIsWithinItsBoundOfTheExactAngles) {
  for (const Spec& spec : {spec_of(Pairing::Half), yarn(Pairing::Interleaved)}) {
    const Rope rope(spec);
    const double m = rope.plan().cos_sin_scale;
    const double mf = static_cast<float>(m);
    const double bound = 6e-8 * mf + std::abs(m - mf) + std::ldexp(mf, -24);  // the header's derivation
    std::vector<std::int64_t> rows = {0, 1, 2, 1000, 4095};
    const std::int64_t n = 4096;
    const std::vector<float> cache = exported(rope, n);
    const int pairs = spec.rotary_dim / 2;
    double worst = 0.0;
    for (std::int64_t p = 0; p < n; p += 7) {
      for (int j = 0; j < pairs; ++j) {
        double c, s;
        oracle::cos_sin(p, rope.plan().inv_freq[j], &c, &s);
        worst = std::max(
            {worst, std::abs(cache[p * 2 * pairs + j] - m * c), std::abs(cache[p * 2 * pairs + pairs + j] - m * s)});
      }
    }
    std::printf("%s: export worst %.3g, bound %.3g\n", std::string(rope_type_name(spec.scaling)).c_str(), worst, bound);
    EXPECT_LE(worst, bound);
    // The checker agrees with the oracle.
    const CosSinCacheReport report = check_cos_sin_cache(rope, cache, n);
    EXPECT_LE(report.max_error, report.accurate_bound);
    EXPECT_NEAR(report.accurate_bound, bound, 1e-20);
    EXPECT_EQ(report.first_position_over, -1);
  }
}

// Rotating with an imported copy of ropekit's own cache is bit for bit rotating with ropekit's
// table, the magnitude included once (YaRN), for Forward and Backward; Inverse undoes Forward.
TEST(CosSinCache, ImportedOwnCacheRotatesBitForBit) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
    for (const Spec& spec : {spec_of(pairing), yarn(pairing)}) {
      const Rope rope(spec);
      const std::int64_t n = 3000;
      const auto table = import_cos_sin_cache(rope, exported(rope, n), n);
      EXPECT_TRUE(table->is_external());
      EXPECT_EQ(table->included_magnitude(), rope.plan().cos_sin_scale);
      std::vector<std::int64_t> pos = {0, 1, 17, 511, 512, 2999, 1234};
      std::vector<float> x(pos.size() * 3 * 64);
      for (float& v : x) v = u(rng);
      for (Direction dir : {Direction::Forward, Direction::Backward}) {
        std::vector<float> own = x, theirs = x;
        rope.apply(
            {.q = bshd(own.data(), DType::F32, 1, pos.size(), 3, 64), .positions = positions(pos), .direction = dir});
        rope.apply(
            {.q = bshd(theirs.data(), DType::F32, 1, pos.size(), 3, 64), .positions = positions(pos), .direction = dir},
            table);
        EXPECT_EQ(own, theirs) << static_cast<int>(dir);
      }
      std::vector<float> y = x;
      const RotateArgs fwd{.q = bshd(y.data(), DType::F32, 1, pos.size(), 3, 64), .positions = positions(pos)};
      rope.apply(fwd, table);
      RotateArgs inv = fwd;
      inv.direction = Direction::Inverse;
      rope.prepare(inv, table).run();
      double worst = 0.0, norm = 0.0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        worst = std::max(worst, static_cast<double>(std::abs(y[i] - x[i])));
        norm = std::max(norm, static_cast<double>(std::abs(x[i])));
      }
      EXPECT_LE(worst, 4 * 3e-7 * norm * std::sqrt(2.0));  // two rotations, each within the call's bound
    }
  }
}

// An engine's cache made with Hugging Face's float32 angles (here: the HfCompat Rope's export) is
// honoured exactly: rotating with it is rotating as HF does.
TEST(CosSinCache, ImportedHfCacheRotatesAsHf) {
  const Spec spec = yarn(Pairing::Half);
  const Rope accurate(spec), hf(spec, AngleMode::HfCompat);
  const std::int64_t n = 70000;
  const auto table = import_cos_sin_cache(accurate, exported(hf, n), n);
  std::vector<std::int64_t> pos = {5, 65000, 69999, 40000};
  std::vector<float> x(pos.size() * 2 * 64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<float> want = x, got = x;
  hf.apply({.q = bshd(want.data(), DType::F32, 1, pos.size(), 2, 64), .positions = positions(pos)});
  accurate.apply({.q = bshd(got.data(), DType::F32, 1, pos.size(), 2, 64), .positions = positions(pos)}, table);
  EXPECT_EQ(got, want);
}

// apply(args, const Table&), the table argument's second spelling until 2026-11-29, is kept for one version
// (deprecated): the same call as apply(args, shared_ptr) and prepare(args, table).run().
TEST(CosSinCache, TheDeprecatedTableReferenceIsTheSameCall) {
  const Rope rope(yarn(Pairing::Half));
  const auto table = rope.table(4096);
  std::vector<std::int64_t> pos = {0, 17, 4095};
  std::vector<float> x(pos.size() * 2 * 64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i));
  std::vector<float> by_ptr = x, by_ref = x, prepared = x;
  rope.apply({.q = bshd(by_ptr.data(), DType::F32, 1, pos.size(), 2, 64), .positions = positions(pos)}, table);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  rope.apply({.q = bshd(by_ref.data(), DType::F32, 1, pos.size(), 2, 64), .positions = positions(pos)}, *table);
#pragma GCC diagnostic pop
  rope.prepare({.q = bshd(prepared.data(), DType::F32, 1, pos.size(), 2, 64), .positions = positions(pos)}, table)
      .run();
  EXPECT_NE(by_ptr, x);
  EXPECT_EQ(by_ref, by_ptr);
  EXPECT_EQ(prepared, by_ptr);
}

TEST(CosSinCache, CheckerFindsAPlantedError) {
  const Rope rope(yarn(Pairing::Half));
  const std::int64_t n = 1000;
  std::vector<float> cache = exported(rope, n);
  const int pairs = 32;
  cache[777 * 2 * pairs + pairs + 5] += 1e-4f;  // position 777, pair 5, sin
  const CosSinCacheReport r = check_cos_sin_cache(rope, cache, n);
  EXPECT_EQ(r.worst_position, 777);
  EXPECT_EQ(r.worst_pair, 5);
  EXPECT_TRUE(r.worst_is_sin);
  EXPECT_NEAR(r.max_error, 1e-4, 2 * r.accurate_bound + 1e-11);  // the float32 add rounds too
  EXPECT_EQ(r.first_position_over, 777);
  cache[2 * 2 * pairs] = std::numeric_limits<float>::quiet_NaN();  // position 2, pair 0, cos
  const CosSinCacheReport nan = check_cos_sin_cache(rope, cache, n);
  EXPECT_TRUE(std::isinf(nan.max_error));
  EXPECT_EQ(nan.worst_position, 2);
  EXPECT_EQ(nan.first_position_over, 2);
}

// A float32-angle cache drifts with the position: the checker says where it passes a tolerance, and
// that position's error, recomputed here with the __float128 oracle, is indeed past it while every
// earlier row is within it.
TEST(CosSinCache, CheckerLocatesTheDriftOfFloat32Angles) {
  const Spec spec = spec_of(Pairing::Half, scaling::None{}, 8);
  const Rope hf(spec, AngleMode::HfCompat);
  const std::int64_t n = 200000;
  const std::vector<float> cache = exported(hf, n);
  const CosSinCacheReport r = check_cos_sin_cache(hf, cache, n, 1e-5);
  std::printf("float32 angles: first position over 1e-5: %lld; max error %.3g at %lld\n",
              static_cast<long long>(r.first_position_over), r.max_error, static_cast<long long>(r.worst_position));
  ASSERT_GT(r.first_position_over, 0);
  // The float32 angle float32(p·ω) is within half an ulp (2^-24 relative) of p·ω; pair 0 (ω = 1) is
  // exact below 2^24, so the drift is at most 2^-24·n·ω_1 (+ the rounding of cos/sin): ≈ 1.2e-3.
  EXPECT_EQ(hf.plan().inv_freq[0], 1.0);
  EXPECT_LE(r.max_error, std::ldexp(static_cast<double>(n) * hf.plan().inv_freq[1], -24) + 1e-7);
  EXPECT_GT(r.max_error, 1e-4);
  auto row_error = [&](std::int64_t p) {
    double worst = 0.0;
    for (int j = 0; j < 4; ++j) {
      double c, s;
      oracle::cos_sin(p, hf.plan().inv_freq[j], &c, &s);
      worst = std::max({worst, std::abs(cache[p * 8 + j] - c), std::abs(cache[p * 8 + 4 + j] - s)});
    }
    return worst;
  };
  EXPECT_GT(row_error(r.first_position_over), 1e-5);
  for (std::int64_t p = 0; p < r.first_position_over; p += 1 + p / 64) EXPECT_LE(row_error(p), 1e-5) << p;
}

// M-RoPE reads the same rows with each pair's stream: its export equals the plain spec's.
TEST(CosSinCache, MropeExportsThePlainRows) {
  Spec plain = spec_of(Pairing::Half, scaling::None{}, 32);
  Spec mrope = plain;
  mrope.mrope = MRope{.sections = {4, 6, 6}};
  EXPECT_EQ(exported(Rope(mrope), 300), exported(Rope(plain), 300));
}

TEST(CosSinCache, BadInput) {
  const Rope rope(spec_of(Pairing::Half));
  std::vector<float> cache = exported(rope, 10);
  EXPECT_ERROR(import_cos_sin_cache(rope, cache, 11), "640 values", "11 positions", "rotary_dim 64");
  EXPECT_ERROR(check_cos_sin_cache(rope, std::span(cache).first(639), 10), "639 values");
  EXPECT_ERROR(export_cos_sin_cache(rope, -1, cache), "num_positions = -1");
  EXPECT_ERROR(check_cos_sin_cache(rope, cache, 10, 0.0), "tolerance = 0");
  cache[3 * 64 + 40] = std::numeric_limits<float>::infinity();
  EXPECT_ERROR(import_cos_sin_cache(rope, cache, 10), "position 3 pair 8", "inf");
  cache[3 * 64 + 40] = 0.0f;
  const auto table = import_cos_sin_cache(rope, cache, 10);
  std::vector<float> q(64, 1.0f);
  const std::vector<std::int64_t> beyond = {10};
  EXPECT_ERROR(rope.apply({.q = bshd(q.data(), DType::F32, 1, 1, 1, 64), .positions = positions(beyond)}, table),
               "position 10", "[0, 10)");
  EXPECT_EQ(q, std::vector<float>(64, 1.0f));
  EXPECT_ERROR(Table(*table, 20), "cannot be grown");
  const Rope other(yarn(Pairing::Half));
  const std::vector<std::int64_t> inside = {3};
  EXPECT_ERROR(other.apply({.q = bshd(q.data(), DType::F32, 1, 1, 1, 64), .positions = positions(inside)}, table),
               "other frequencies");
}

}  // namespace
