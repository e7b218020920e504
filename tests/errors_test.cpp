// Bad input: one test per class, each checking that ropekit::Error names the field and the value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "expect_error.hpp"
#include "rope/views.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

Spec good() { return {.head_dim = 64, .rotary_dim = 64, .base = 10000.0, .pairing = Pairing::Half}; }

Spec with(Scaling s) {
  Spec spec = good();
  spec.scaling = std::move(s);
  return spec;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(BadSpec, RotaryDimOddTooLargeOrZero) {
  Spec s = good();
  s.rotary_dim = 63;
  EXPECT_ERROR(s.validate(), "spec.rotary_dim = 63", "even");
  s.rotary_dim = 66;
  EXPECT_ERROR(s.validate(), "spec.rotary_dim = 66", "spec.head_dim = 64");
  s.rotary_dim = 0;
  EXPECT_ERROR(s.validate(), "spec.rotary_dim = 0");
  s = good();
  s.head_dim = -4;
  EXPECT_ERROR(s.validate(), "spec.head_dim = -4");
}

TEST(BadSpec, PairingNeverSet) {
  Spec s{.head_dim = 64, .rotary_dim = 64, .base = 1e4};
  EXPECT_ERROR(s.validate(), "spec.pairing");
}

TEST(BadSpec, BaseNonPositiveNaNInfiniteOrOne) {
  for (double base : {0.0, -10.0, kNaN, kInf, 1.0}) {
    Spec s = good();
    s.base = base;
    EXPECT_ERROR(s.validate(), "spec.base");
  }
  Spec s = good();
  s.base = -10.0;
  EXPECT_ERROR(s.validate(), "spec.base = -10");
}

TEST(BadSpec, FactorsNonPositiveNaNOrInfinite) {
  for (double f : {0.0, -2.0, kNaN, kInf}) {
    EXPECT_ERROR(make_plan(with(scaling::Linear{f})), "linear.factor");
    EXPECT_ERROR(make_plan(with(scaling::Ntk{f})), "ntk.factor");
    EXPECT_ERROR(make_plan(with(scaling::DynamicNtk{f, 4096})), "dynamic.factor");
    EXPECT_ERROR(make_plan(with(scaling::Yarn{.factor = f, .original_max_position_embeddings = 4096})), "yarn.factor");
    EXPECT_ERROR(make_plan(with(scaling::Llama3{f, 1, 4, 8192})), "llama3.factor");
    EXPECT_ERROR(make_plan(with(scaling::Proportional{1.0, f})), "proportional.factor");
  }
  EXPECT_ERROR(make_plan(with(scaling::Linear{-2.0})), "linear.factor = -2");
  EXPECT_ERROR(make_plan(with(scaling::Yarn{.factor = 4, .original_max_position_embeddings = 4096, .beta_fast = kNaN})),
               "yarn.beta_fast");
  EXPECT_ERROR(make_plan(with(scaling::Yarn{
                   .factor = 4, .original_max_position_embeddings = 4096, .beta_fast = 1, .beta_slow = 32})),
               "yarn.beta_fast = 1", "yarn.beta_slow = 32");
  EXPECT_ERROR(make_plan(with(scaling::Yarn{.factor = 4, .original_max_position_embeddings = 0})),
               "yarn.original_max_position_embeddings = 0");
  EXPECT_ERROR(
      make_plan(with(scaling::Yarn{.factor = 4, .original_max_position_embeddings = 4096, .attention_factor = -1.0})),
      "yarn.attention_factor = -1");
  EXPECT_ERROR(make_plan(with(scaling::Llama3{8, 4, 1, 8192})), "llama3.high_freq_factor = 1",
               "llama3.low_freq_factor = 4");
  EXPECT_ERROR(make_plan(with(scaling::DynamicNtk{2, -1})), "dynamic.max_position_embeddings = -1");
  EXPECT_ERROR(make_plan(with(scaling::Proportional{1.5, 1})), "proportional.partial_rotary_factor = 1.5");
  Spec tiny = with(scaling::Ntk{2});
  tiny.head_dim = tiny.rotary_dim = 2;
  EXPECT_ERROR(make_plan(tiny), "spec.rotary_dim = 2", "ntk");
}

TEST(BadSpec, LongRopeFactorListsOfTheWrongLengthOrValue) {
  const std::vector<double> ok(32, 1.0), short_list(31, 1.0);
  EXPECT_ERROR(make_plan(with(scaling::LongRope{short_list, ok, 4096, 32, std::nullopt})),
               "longrope.short_factor has 31 entries", "32");
  EXPECT_ERROR(make_plan(with(scaling::LongRope{ok, std::vector<double>(40, 1.0), 4096, 32, std::nullopt})),
               "longrope.long_factor has 40 entries");
  std::vector<double> bad = ok;
  bad[5] = kNaN;
  EXPECT_ERROR(make_plan(with(scaling::LongRope{ok, bad, 4096, 32, std::nullopt})), "longrope.long_factor[5]");
  bad[5] = -1.0;
  EXPECT_ERROR(make_plan(with(scaling::LongRope{bad, ok, 4096, 32, std::nullopt})), "longrope.short_factor[5] = -1");
}

TEST(BadSpec, MropeSectionsThatDoNotSumToHalfTheRotaryDim) {
  Spec s = good();
  s.mrope = MRope{{8, 12, 13}, MRopeLayout::Sectioned};
  EXPECT_ERROR(s.validate(), "spec.mrope.sections = [8, 12, 13]", "sum to 33", "rotary_dim/2 = 32");
  s.mrope = MRope{{16, 16}, MRopeLayout::Interleaved};
  EXPECT_ERROR(s.validate(), "spec.mrope.sections has 2 entries");
  s.mrope = MRope{{40, -4, -4}, MRopeLayout::Sectioned};
  EXPECT_ERROR(s.validate(), "spec.mrope.sections[1] = -4");
}

TEST(BadPlan, CurrentLengthAndForeignPlans) {
  EXPECT_ERROR(make_plan(good(), 0), "current_length = 0");
  EXPECT_ERROR(make_plan(good(), -5), "current_length = -5");
  Plan p = make_plan(good());
  p.inv_freq.pop_back();
  EXPECT_ERROR(Rope(good(), p, AngleMode::Accurate), "plan.inv_freq has 31 entries");
  p = make_plan(good());
  p.cos_sin_scale = kNaN;
  EXPECT_ERROR(Rope(good(), p, AngleMode::Accurate), "plan.cos_sin_scale");
}

struct Buffers {
  std::vector<float> q = std::vector<float>(4 * 2 * 64, 1.0f);
  std::vector<float> k = std::vector<float>(4 * 1 * 64, 1.0f);
  std::vector<std::int64_t> pos = {0, 1, 2, 3};
  RotateArgs args() {
    return {.q = bshd(q.data(), DType::F32, 1, 4, 2, 64),
            .k = bshd(k.data(), DType::F32, 1, 4, 1, 64),
            .positions = positions(pos)};
  }
};

TEST(BadPositions, NegativeTooLargeMiscountedOrMissing) {
  const Rope rope(good());
  Buffers b;
  b.pos[2] = -3;
  EXPECT_ERROR(rope.apply(b.args()), "positions[2] = -3");
  b.pos[2] = std::int64_t{1} << 50;
  EXPECT_ERROR(rope.apply(b.args()), "positions[2] = 1125899906842624", "2^47");
  b.pos = {0, 1, 2};
  EXPECT_ERROR(rope.apply(b.args()), "positions.count = 3", "batch x seq = 4");
  Buffers c;
  RotateArgs a = c.args();
  a.positions.data = nullptr;
  EXPECT_ERROR(rope.apply(a), "positions.data is null");
  a = c.args();
  a.positions.axes = 3;
  EXPECT_ERROR(rope.apply(a), "positions.axes = 3");
  // M-RoPE needs three streams: a (count) vector of text positions is refused (vLLM #18407).
  Spec m = good();
  m.mrope = MRope{{16, 8, 8}, MRopeLayout::Sectioned};
  EXPECT_ERROR(Rope(m).apply(c.args()), "positions.axes = 1", "M-RoPE");
  const std::int64_t odd[] = {1, 2, 3, 4};
  EXPECT_ERROR(mrope_positions(std::span<const std::int64_t>(odd)), "4 values");
}

TEST(BadPositions, OutsideAnExplicitTable) {
  const Rope rope(good());
  const auto table = std::make_shared<const Table>(rope.plan(), AngleMode::Accurate, 3);
  Buffers b;
  EXPECT_ERROR(rope.apply(b.args(), table), "position 3 is outside the table", "[0, 3)");
  const auto hf = std::make_shared<const Table>(rope.plan(), AngleMode::HfCompat, 10);
  EXPECT_ERROR(rope.apply(b.args(), hf), "angle mode");
  EXPECT_ERROR(rope.apply(b.args(), std::shared_ptr<const Table>()), "table is null");
  const auto other = std::make_shared<const Table>(make_plan(with(scaling::Linear{2})), AngleMode::Accurate, 10);
  EXPECT_ERROR(rope.apply(b.args(), other), "other frequencies");
}

TEST(BadViews, ShapeMismatchesBetweenQKAndOutputs) {
  const Rope rope(good());
  Buffers b;
  RotateArgs a = b.args();
  a.k.seq = 3;
  EXPECT_ERROR(rope.apply(a), "k has batch 1 x seq 3", "q has batch 1 x seq 4");
  std::vector<float> out(4 * 2 * 64);
  a = b.args();
  a.q_out = bshd(out.data(), DType::F32, 1, 4, 1, 64);
  EXPECT_ERROR(rope.apply(a), "q_out shape [1, 4, 1]", "q shape [1, 4, 2]");
  a.q_out = bshd(out.data(), DType::BF16, 1, 4, 2, 64);
  EXPECT_ERROR(rope.apply(a), "q_out.dtype = bfloat16", "q.dtype = float32");
  a = b.args();
  a.q = Heads{};
  a.q_out = bshd(out.data(), DType::F32, 1, 4, 2, 64);
  EXPECT_ERROR(rope.apply(a), "q_out.data is set but q is empty");
}

// view_extent sums the three dimensions in 128 bits and only a view that may fail is checked dimension by
// dimension: at the limit (int64 max / 8 elements, so that bytes fit), one element past it, sums whose
// terms fit but whose total does not, products past 2^64, and random views around the limit against a
// plain 128-bit sum.
TEST(BadViews, ExtentAtAndPastTheLimit) {
  constexpr std::int64_t kLimit = std::numeric_limits<std::int64_t>::max() / 8;
  const auto view = [](std::int64_t batch, std::int64_t batch_stride, std::int64_t seq, std::int64_t seq_stride,
                       std::int64_t heads, std::int64_t head_stride) {
    return Heads{nullptr, DType::F32, batch, seq, heads, batch_stride, seq_stride, head_stride};
  };
  EXPECT_EQ(detail::view_extent(view(1, 0, 1, 0, 2, kLimit - 64), "q", 64), kLimit);
  EXPECT_ERROR(detail::view_extent(view(1, 0, 1, 0, 2, kLimit - 63), "q", 64),
               "q.heads = 2 with q.head_stride = 1152921504606846912: the view's extent overflows");
  const std::int64_t half = std::int64_t{1} << 59;  // each term fits; batch + seq does not
  EXPECT_ERROR(detail::view_extent(view(2, half, 2, half, 2, half), "k", 64), "k.seq = 2 with k.seq_stride");
  EXPECT_ERROR(detail::view_extent(view(std::int64_t{1} << 40, std::int64_t{1} << 40, 1, 0, 1, 0), "q", 64),
               "q.batch = 1099511627776");
  EXPECT_ERROR(detail::view_extent(view(1, 0, 3, -1, 1, 0), "v", 64), "v.seq_stride = -1");
  EXPECT_EQ(detail::view_extent(view(0, -0, 5, 64, 0, 7), "q", 64), 4 * 64 + 64);  // empty batch: extent still formed

  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::int64_t f[6];
    for (auto& x : f) {
      const int bits = 1 + static_cast<int>(rng() % 63);  // magnitudes below 2^1 … 2^63, some negative
      x = static_cast<std::int64_t>(rng() >> (64 - bits)) - (rng() % 16 == 0 ? 1 : 0) * (std::int64_t{1} << 20);
    }
    const Heads v = view(f[0], f[1], f[2], f[3], f[4], f[5]);
    const bool negative = f[0] < 0 || f[1] < 0 || f[2] < 0 || f[3] < 0 || f[4] < 0 || f[5] < 0;
    __extension__ typedef __int128 I;
    I sum = 64;
    for (int d = 0; d < 3; ++d) {
      if (f[2 * d] > 1) sum += I(f[2 * d] - 1) * f[2 * d + 1];
    }
    if (negative || sum > kLimit) {
      EXPECT_THROW(detail::view_extent(v, "q", 64), Error) << i;
    } else {
      EXPECT_EQ(detail::view_extent(v, "q", 64), static_cast<std::int64_t>(sum)) << i;
    }
  }
}

TEST(BadViews, NegativeOverflowingNullOrOverlapping) {
  const Rope rope(good());
  Buffers b;
  RotateArgs a = b.args();
  a.q.seq_stride = -128;
  EXPECT_ERROR(rope.apply(a), "q.seq_stride = -128");
  a = b.args();
  a.q.heads = -2;
  EXPECT_ERROR(rope.apply(a), "q.heads = -2");
  a = b.args();
  a.q.batch = std::int64_t{1} << 40;
  a.q.batch_stride = std::int64_t{1} << 40;
  EXPECT_ERROR(rope.apply(a), "overflows");
  a = b.args();
  a.q.data = nullptr;
  EXPECT_ERROR(rope.apply(a), "q.data is null");
  a = b.args();
  a.q.head_stride = 32;  // heads overlap: rows of 64 lanes 32 apart
  EXPECT_ERROR(rope.apply(a), "rows overlap");
  a = b.args();
  a.k = bshd(b.q.data() + 64, DType::F32, 1, 4, 1, 64);  // k inside q: would rotate twice
  EXPECT_ERROR(rope.apply(a), "q and k share memory");
  a = b.args();
  a.q_out = bshd(b.q.data() + 1, DType::F32, 1, 4, 2, 64);  // partial alias of the input
  EXPECT_ERROR(rope.apply(a), "share memory");
  a = b.args();
  a.q.dtype = static_cast<DType>(9);
  EXPECT_ERROR(rope.apply(a), "q.dtype = 9");
  a = b.args();
  a.direction = static_cast<Direction>(7);
  EXPECT_ERROR(rope.apply(a), "direction = 7");
}

TEST(BadViews, NegativeThreadCount) {
  const Rope rope(good());
  std::vector<float> q(64);
  const std::vector<std::int64_t> pos = {0};
  EXPECT_ERROR(rope.apply({.q = bshd(q.data(), DType::F32, 1, 1, 1, 64), .positions = positions(pos), .threads = -1}),
               "threads = -1");
  EXPECT_ERROR(set_default_threads(0), "threads = 0");
  EXPECT_ERROR(set_simd_target("NEON9"), "simd target = \"NEON9\"");
}

TEST(BadViews, NothingToRotateIsNotAnError) {
  const Rope rope(good());
  EXPECT_NO_THROW(rope.apply(RotateArgs{}));
}

}  // namespace
