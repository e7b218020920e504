// apply: every variant, dtype, direction and angle source against the double-precision oracle
// (tests/oracle.hpp), with guard regions around and between the rows; and the algebraic
// properties of RoPE (relative position, inverse, transpose, norms, layout equivalences).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "expect_error.hpp"
#include "oracle.hpp"
#include "rope/call_shape.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

struct Case {
  const char* name;
  Spec spec;
  std::optional<std::int64_t> length;
};

std::vector<Case> cases() {
  std::vector<double> short_f(64), long_f(64);
  for (int i = 0; i < 64; ++i) {
    short_f[i] = 1.0 + 0.03 * i;
    long_f[i] = 1.0 + 0.9 * i;
  }
  auto half = [](int head, int rot, double base, Scaling s = scaling::None{}) {
    return Spec{.head_dim = head, .rotary_dim = rot, .base = base, .pairing = Pairing::Half, .scaling = s};
  };
  return {
      {"default_half", half(128, 128, 1e4), {}},
      {"default_interleaved", {.head_dim = 64, .rotary_dim = 64, .base = 5e5, .pairing = Pairing::Interleaved}, {}},
      {"partial_half_32_of_128", half(128, 32, 1e4), {}},
      {"partial_interleaved_64_of_80",
       {.head_dim = 80, .rotary_dim = 64, .base = 1e4, .pairing = Pairing::Interleaved},
       {}},
      {"odd_tail_72", half(72, 72, 1e4), {}},
      {"linear", half(96, 96, 1e4, scaling::Linear{4}), {}},
      {"ntk", half(128, 128, 1e4, scaling::Ntk{2}), {}},
      {"dynamic", half(128, 128, 1e4, scaling::DynamicNtk{2, 4096}), 20000},
      {"yarn", half(128, 128, 1e6, scaling::Yarn{.factor = 16, .original_max_position_embeddings = 4096}), {}},
      {"llama3", half(128, 128, 5e5, scaling::Llama3{8, 1, 4, 8192}), {}},
      {"longrope", half(128, 128, 1e4, scaling::LongRope{short_f, long_f, 4096, 32, std::nullopt}), 8192},
      {"proportional", half(128, 128, 1e6, scaling::Proportional{0.5, 8}), {}},
      {"mrope_sectioned",
       {.head_dim = 128,
        .rotary_dim = 128,
        .base = 1e6,
        .pairing = Pairing::Half,
        .mrope = MRope{{16, 24, 24}, MRopeLayout::Sectioned}},
       {}},
      {"mrope_interleaved",
       {.head_dim = 128,
        .rotary_dim = 128,
        .base = 5e6,
        .pairing = Pairing::Half,
        .mrope = MRope{{24, 20, 20}, MRopeLayout::Interleaved}},
       {}},
  };
}

double load(DType dt, const std::uint8_t* p) {
  if (dt == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return dt == DType::BF16 ? bf16_to_float(h) : f16_to_float(h);
}

void store(DType dt, std::uint8_t* p, double v) {
  if (dt == DType::F32) {
    const float f = float(v);
    std::memcpy(p, &f, 4);
    return;
  }
  const std::uint16_t h = dt == DType::BF16 ? float_to_bf16(float(v)) : float_to_f16(float(v));
  std::memcpy(p, &h, 2);
}

// A strided [batch, seq, heads, head_dim] tensor inside a larger buffer: gaps between heads,
// between tokens, and guard bytes before and after, all filled with random values so that any
// stray write shows.
struct Strided {
  DType dtype;
  int head_dim;
  std::int64_t batch, seq, heads, offset, head_stride, seq_stride, batch_stride;
  std::vector<std::uint8_t> bytes;

  Strided(DType dt, std::int64_t b, std::int64_t s, std::int64_t h, int d, std::mt19937& rng, bool head_major = false)
      : dtype(dt), head_dim(d), batch(b), seq(s), heads(h), offset(13) {
    if (head_major) {  // BHSD-like with gaps
      seq_stride = d + 3;
      head_stride = s * seq_stride + 5;
      batch_stride = h * head_stride + 7;
    } else {  // BSHD-like with gaps
      head_stride = d + 3;
      seq_stride = h * head_stride + 5;
      batch_stride = s * seq_stride + 7;
    }
    const std::int64_t elements = offset + b * batch_stride + 29;
    bytes.resize(static_cast<std::size_t>(elements * element_size(dt)));
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::int64_t i = 0; i < elements; ++i) store(dt, ptr(i), normal(rng));
  }
  std::uint8_t* ptr(std::int64_t element) { return bytes.data() + element * element_size(dtype); }
  std::int64_t index(std::int64_t b, std::int64_t s, std::int64_t h, int lane) const {
    return offset + b * batch_stride + s * seq_stride + h * head_stride + lane;
  }
  double at(std::int64_t b, std::int64_t s, std::int64_t h, int lane) { return load(dtype, ptr(index(b, s, h, lane))); }
  std::vector<double> row(std::int64_t b, std::int64_t s, std::int64_t h) {
    std::vector<double> r(head_dim);
    for (int i = 0; i < head_dim; ++i) r[i] = at(b, s, h, i);
    return r;
  }
  Heads view() { return {ptr(offset), dtype, batch, seq, heads, batch_stride, seq_stride, head_stride}; }
  bool in_view(std::int64_t element) const {
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t s = 0; s < seq; ++s)
        for (std::int64_t h = 0; h < heads; ++h) {
          const std::int64_t first = index(b, s, h, 0);
          if (element >= first && element < first + head_dim) return true;
        }
    return false;
  }
};

double ulp_of(DType dt, double x) {
  if (dt == DType::F32 || x == 0.0) return 0.0;
  const int mantissa = dt == DType::BF16 ? 7 : 10;
  return std::ldexp(1.0, std::ilogb(x) - mantissa);
}

oracle::Dir to_oracle(Direction d) {
  return d == Direction::Forward   ? oracle::Dir::Forward
         : d == Direction::Inverse ? oracle::Dir::Inverse
                                   : oracle::Dir::Backward;
}

// Positions: large, shuffled, with duplicates; for M-RoPE three streams.
std::vector<std::int64_t> make_positions(std::int64_t tokens, int axes, std::mt19937& rng,
                                         std::int64_t max_position = std::int64_t{1} << 40) {
  const std::vector<std::int64_t> pool = {0,     1,      5,       999,     4095,   4096,
                                          30000, 131071, 1 << 20, 1000000, 123457, 2147483647};
  std::vector<std::int64_t> p(static_cast<std::size_t>(tokens * axes));
  for (auto& v : p) {
    do v = pool[rng() % pool.size()];
    while (v > max_position);
  }
  return p;
}

TEST(ApplyOracle, EveryVariantDtypeDirectionAndAngleSource) {
  std::mt19937 rng(7);
  for (const Case& c : cases()) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      for (Direction dir : {Direction::Forward, Direction::Inverse, Direction::Backward}) {
        for (int variant = 0; variant < 4; ++variant) {  // bit 0: out of place; bit 1: on the fly
          SCOPED_TRACE(::testing::Message()
                       << c.name << " dtype " << to_string(dt) << " dir " << int(dir) << " variant " << variant);
          const bool out_of_place = variant & 1, on_the_fly = variant & 2;
          const Rope rope(c.spec, AngleMode::Accurate, c.length);
          const int d = c.spec.head_dim;
          const int axes = c.spec.mrope ? 3 : 1;
          Strided q(dt, 2, 3, 4, d, rng), k(dt, 2, 3, 1, d, rng, /*head_major=*/true);
          Strided q_out(dt, 2, 3, 4, d, rng), k_out(dt, 2, 3, 1, d, rng);
          const std::vector<std::uint8_t> q_before = q.bytes, k_before = k.bytes;
          const std::vector<std::uint8_t> qo_before = q_out.bytes, ko_before = k_out.bytes;
          std::vector<std::int64_t> pos64 = make_positions(6, axes, rng);
          std::vector<std::int32_t> pos32(pos64.begin(), pos64.end());
          const Positions positions_view = axes == 3
                                               ? (variant == 1 ? mrope_positions(std::span<const std::int32_t>(pos32))
                                                               : mrope_positions(std::span<const std::int64_t>(pos64)))
                                               : (variant == 1 ? positions(std::span<const std::int32_t>(pos32))
                                                               : positions(std::span<const std::int64_t>(pos64)));
          RotateArgs args{.q = q.view(), .k = k.view(), .positions = positions_view, .direction = dir};
          if (out_of_place) {
            args.q_out = q_out.view();
            args.k_out = k_out.view();
          }
          if (on_the_fly)
            rope.apply_on_the_fly(args);
          else
            rope.apply(args);

          const double m = dir == Direction::Inverse ? 1.0 / rope.plan().cos_sin_scale : rope.plan().cos_sin_scale;
          auto check = [&](Strided& in_before, Strided& result, std::int64_t b, std::int64_t s, std::int64_t h) {
            const std::int64_t token = b * 3 + s;
            std::int64_t p[3];
            for (int a = 0; a < axes; ++a) p[a] = pos64[a * 6 + token];
            const std::vector<double> x = in_before.row(b, s, h);
            const std::vector<double> want = oracle::rotate(c.spec, rope.plan(), x, p, to_oracle(dir));
            for (int i = 0; i < d; ++i) {
              const double got = result.at(b, s, h, i);
              if (i >= c.spec.rotary_dim) {
                ASSERT_EQ(got, x[i]) << "pass-through lane " << i;
                continue;
              }
              const int half = c.spec.rotary_dim / 2;
              const int pair_index = c.spec.pairing == Pairing::Interleaved ? i / 2 : i % half;
              const auto [la, lb] = oracle::lanes(c.spec, pair_index);
              const double pair = std::hypot(x[la], x[lb]);
              const double tol = 3e-7 * m * pair + 0.5 * ulp_of(dt, std::max(std::abs(want[i]), std::abs(got))) + 1e-30;
              ASSERT_LE(std::abs(got - want[i]), tol)
                  << "token " << token << " head " << h << " lane " << i << " position " << p[0];
            }
          };
          // Reference inputs: the original buffers (in place overwrote q and k).
          Strided q_in = q, k_in = k;
          q_in.bytes = q_before;
          k_in.bytes = k_before;
          for (std::int64_t b = 0; b < 2; ++b)
            for (std::int64_t s = 0; s < 3; ++s) {
              for (std::int64_t h = 0; h < 4; ++h) check(q_in, out_of_place ? q_out : q, b, s, h);
              check(k_in, out_of_place ? k_out : k, b, s, 0);
            }
          // Guards: nothing outside the written rows changed, and inputs of out-of-place calls
          // are untouched.
          auto guards_intact = [](Strided& t, const std::vector<std::uint8_t>& before, bool written) {
            const std::int64_t esize = element_size(t.dtype);
            for (std::int64_t e = 0; e * esize < std::int64_t(before.size()); ++e) {
              if (written && t.in_view(e)) continue;
              if (std::memcmp(t.ptr(e), before.data() + e * esize, esize) != 0) return false;
            }
            return true;
          };
          EXPECT_TRUE(guards_intact(q, q_before, !out_of_place));
          EXPECT_TRUE(guards_intact(k, k_before, !out_of_place));
          EXPECT_TRUE(guards_intact(q_out, qo_before, out_of_place));
          EXPECT_TRUE(guards_intact(k_out, ko_before, out_of_place));
        }
      }
    }
  }
}

// Rotate contiguous float32 rows [tokens, heads, d] in place with one position stream (or three).
std::vector<float> rotate_rows(const Rope& rope, std::vector<float> x, std::int64_t heads,
                               const std::vector<std::int64_t>& pos, Direction dir = Direction::Forward) {
  const int d = rope.spec().head_dim;
  const std::int64_t tokens = std::int64_t(x.size()) / (heads * d);
  rope.apply({.q = bshd(x.data(), DType::F32, 1, tokens, heads, d),
              .positions = rope.spec().mrope ? mrope_positions(std::span<const std::int64_t>(pos))
                                             : positions(std::span<const std::int64_t>(pos)),
              .direction = dir});
  return x;
}

std::vector<float> random_row(int n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

std::vector<std::int64_t> streams(std::int64_t p, int axes) { return std::vector<std::int64_t>(axes, p); }

TEST(ApplyProperties, LogitsDependOnlyOnRelativePosition) {
  std::mt19937 rng(11);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Rope rope(c.spec, AngleMode::Accurate, c.length);
    const int d = c.spec.head_dim, axes = c.spec.mrope ? 3 : 1;
    const std::vector<float> q = random_row(d, rng), k = random_row(d, rng);
    const double scale2 = rope.plan().cos_sin_scale * rope.plan().cos_sin_scale;
    const double bound = 1e-6 * std::sqrt(dot(q, q) * dot(k, k)) * scale2;
    for (std::int64_t rel : {0, 1, 7, 1000}) {
      const double reference =
          dot(rotate_rows(rope, q, 1, streams(rel, axes)), rotate_rows(rope, k, 1, streams(0, axes)));
      for (std::int64_t shift : {1, 4096, 65537, 1 << 20, 1000000}) {
        const double shifted =
            dot(rotate_rows(rope, q, 1, streams(rel + shift, axes)), rotate_rows(rope, k, 1, streams(shift, axes)));
        EXPECT_NEAR(shifted, reference, bound) << "m - n = " << rel << ", shift " << shift;
      }
    }
  }
}

TEST(ApplyProperties, InverseUndoesForwardAndBackwardIsTheTranspose) {
  std::mt19937 rng(12);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Rope rope(c.spec, AngleMode::Accurate, c.length);
    const int d = c.spec.head_dim, axes = c.spec.mrope ? 3 : 1;
    const double m = rope.plan().cos_sin_scale;
    for (std::int64_t p : {0, 3, 4097, 1 << 20, 2000000000}) {
      const std::vector<float> x = random_row(d, rng), y = random_row(d, rng);
      const auto fwd = rotate_rows(rope, x, 1, streams(p, axes));
      const auto back = rotate_rows(rope, fwd, 1, streams(p, axes), Direction::Inverse);
      for (int i = 0; i < d; ++i) EXPECT_NEAR(back[i], x[i], 1e-6 * std::sqrt(dot(x, x))) << i;
      // <F x, y> == <x, B y>
      const auto by = rotate_rows(rope, y, 1, streams(p, axes), Direction::Backward);
      EXPECT_NEAR(dot(fwd, y), dot(x, by), 1e-6 * m * std::sqrt(dot(x, x) * dot(y, y)));
      // Norm: the rotary lanes [0, rotary_dim) scale by m, the pass-through lanes keep theirs.
      double rotary_sq = 0, pass_sq = 0;
      for (int i = 0; i < d; ++i) (i < c.spec.rotary_dim ? rotary_sq : pass_sq) += double(x[i]) * x[i];
      EXPECT_NEAR(std::sqrt(dot(fwd, fwd)), std::sqrt(m * m * rotary_sq + pass_sq),
                  1e-6 * std::max(m, 1.0) * std::sqrt(dot(x, x)))
          << "position " << p;
    }
  }
}

TEST(ApplyProperties, NormPreservedWhenScaleIsOne) {
  std::mt19937 rng(13);
  const Rope rope({.head_dim = 128, .rotary_dim = 64, .base = 1e4, .pairing = Pairing::Half});
  for (std::int64_t p : {0, 77, 1 << 20, 2147483647}) {
    const auto x = random_row(128, rng);
    const auto y = rotate_rows(rope, x, 1, {p});
    EXPECT_NEAR(dot(y, y), dot(x, x), 1e-6 * dot(x, x));
    for (int i = 64; i < 128; ++i) EXPECT_EQ(y[i], x[i]);  // pass-through lanes bit-identical
  }
}

TEST(ApplyLayouts, BshdBhsdAndPackedGiveIdenticalBits) {
  std::mt19937 rng(14);
  const Rope rope({.head_dim = 64, .rotary_dim = 64, .base = 1e4, .pairing = Pairing::Half});
  const std::int64_t B = 2, S = 5, H = 3, D = 64;
  const std::vector<float> logical = random_row(int(B * S * H * D), rng);  // [b][s][h][d]
  std::vector<std::int64_t> pos(B * S);
  std::iota(pos.begin(), pos.end(), 100);
  std::vector<float> bshd_buf = logical, bhsd_buf(logical.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < D; ++i)
          bhsd_buf[((b * H + h) * S + s) * D + i] = logical[((b * S + s) * H + h) * D + i];
  rope.apply({.q = bshd(bshd_buf.data(), DType::F32, B, S, H, D), .positions = positions(pos)});
  rope.apply({.q = bhsd(bhsd_buf.data(), DType::F32, B, S, H, D), .positions = positions(pos)});
  std::vector<float> packed = logical;  // batch folded into tokens
  rope.apply({.q = bshd(packed.data(), DType::F32, 1, B * S, H, D), .positions = positions(pos)});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < D; ++i) {
          const float v = bshd_buf[((b * S + s) * H + h) * D + i];
          ASSERT_EQ(v, bhsd_buf[((b * H + h) * S + s) * D + i]);
          ASSERT_EQ(v, packed[((b * S + s) * H + h) * D + i]);
        }
}

TEST(ApplyLayouts, TableAndOnTheFlyAndPositionTypesAgreeBitwise) {
  std::mt19937 rng(15);
  for (const Case& c : cases()) {
    for (AngleMode mode : {AngleMode::Accurate, AngleMode::HfCompat}) {
      const Rope rope(c.spec, mode, c.length);
      const int d = c.spec.head_dim, axes = c.spec.mrope ? 3 : 1;
      const auto x = random_row(d * 7, rng);
      // Below 2^17 so that the explicit table stays small.
      const std::vector<std::int64_t> pos = make_positions(7, axes, rng, 131071);
      std::vector<std::int32_t> pos32(pos.begin(), pos.end());
      auto a = x, b = x, t = x;
      const Heads va = bshd(a.data(), DType::F32, 1, 7, 1, d), vb = bshd(b.data(), DType::F32, 1, 7, 1, d);
      rope.apply_on_the_fly(
          {.q = va, .positions = axes == 3 ? mrope_positions(std::span<const std::int64_t>(pos)) : positions(pos)});
      rope.apply({.q = vb,
                  .positions = axes == 3 ? mrope_positions(std::span<const std::int32_t>(pos32))
                                         : positions(std::span<const std::int32_t>(pos32))});
      const auto table = rope.table(*std::max_element(pos.begin(), pos.end()) + 1);
      rope.apply({.q = bshd(t.data(), DType::F32, 1, 7, 1, d),
                  .positions = axes == 3 ? mrope_positions(std::span<const std::int64_t>(pos)) : positions(pos)},
                 table);
      EXPECT_EQ(a, b) << c.name;
      EXPECT_EQ(a, t) << c.name;
    }
  }
}

// M-RoPE with t = h = w (text tokens) is plain 1-D RoPE, in both layouts.
TEST(ApplyLayouts, MropeTextTokensEqualOneDimensionalRope) {
  std::mt19937 rng(16);
  for (MRopeLayout layout : {MRopeLayout::Sectioned, MRopeLayout::Interleaved}) {
    Spec spec{.head_dim = 128, .rotary_dim = 128, .base = 1e6, .pairing = Pairing::Half};
    const Rope plain(spec);
    spec.mrope = MRope{{16, 24, 24}, layout};
    const Rope mrope(spec);
    const auto x = random_row(128 * 4, rng);
    const std::vector<std::int64_t> pos = {0, 17, 4096, 70000};
    std::vector<std::int64_t> three;
    for (int a = 0; a < 3; ++a) three.insert(three.end(), pos.begin(), pos.end());
    EXPECT_EQ(rotate_rows(plain, x, 1, pos), rotate_rows(mrope, x, 1, three));
  }
}

// rope_interleaved(P·x) == P·rope_half(x), P moving lane j → 2j and j + d/2 → 2j + 1: the weight
// permutation llama.cpp applies to HF checkpoints (pitfalls #14), here with partial rotary.
TEST(ApplyLayouts, InterleavedIsHalfUnderTheLanePermutation) {
  std::mt19937 rng(17);
  const int d = 96, rd = 64;
  const Rope half({.head_dim = d, .rotary_dim = rd, .base = 1e4, .pairing = Pairing::Half});
  const Rope inter({.head_dim = d, .rotary_dim = rd, .base = 1e4, .pairing = Pairing::Interleaved});
  auto permute = [&](const std::vector<float>& x) {
    std::vector<float> y = x;
    for (int j = 0; j < rd / 2; ++j) {
      y[2 * j] = x[j];
      y[2 * j + 1] = x[j + rd / 2];
    }
    return y;
  };
  for (std::int64_t p : {1, 1000, 1 << 20}) {
    const auto x = random_row(d, rng);
    EXPECT_EQ(rotate_rows(inter, permute(x), 1, {p}), permute(rotate_rows(half, x, 1, {p})));
  }
}

// bf16/fp16 storage rotates like float32 up to one storage rounding, at large positions too
// (HF #29496: low-precision angles alias positions).
TEST(ApplyDtypes, HalfPrecisionStorageMatchesFloat32UpToOneRounding) {
  std::mt19937 rng(18);
  const Rope rope({.head_dim = 128, .rotary_dim = 128, .base = 5e5, .pairing = Pairing::Half});
  for (DType dt : {DType::BF16, DType::F16}) {
    for (std::int64_t p : {1000, 30000, 130000, 1000000}) {
      const auto x = random_row(128, rng);
      std::vector<std::uint16_t> h(128);
      std::vector<float> xf(128);
      for (int i = 0; i < 128; ++i) {
        h[i] = dt == DType::BF16 ? float_to_bf16(x[i]) : float_to_f16(x[i]);
        xf[i] = dt == DType::BF16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
      }
      const std::int64_t pos[] = {p};
      rope.apply({.q = bshd(h.data(), dt, 1, 1, 1, 128), .positions = positions(pos)});
      const auto yf = rotate_rows(rope, xf, 1, {p});
      for (int i = 0; i < 128; ++i) {
        const std::uint16_t expected = dt == DType::BF16 ? float_to_bf16(yf[i]) : float_to_f16(yf[i]);
        EXPECT_EQ(h[i], expected) << "lane " << i << " position " << p;
      }
    }
  }
}

}  // namespace

// Rope::cos_sin gives the coefficients a call multiplies by: rotating a pair (1, 0) forward writes
// (c, s) exactly (fma(1, c, −0·s) = c, fma(0, c, 1·s) = s), so the two must agree bit for bit — for
// the table and the on-the-fly source, a magnitude ≠ 1, M-RoPE's per-pair streams and both pairings.
TEST(CosSin, EqualsTheCoefficientsApplyRotatesWith) {
  const Spec yarn{.head_dim = 64,
                  .rotary_dim = 48,
                  .base = 1e4,
                  .pairing = Pairing::Interleaved,
                  .scaling = scaling::Yarn{.factor = 4, .original_max_position_embeddings = 2048}};
  Spec mrope{.head_dim = 64, .rotary_dim = 64, .base = 1e6, .pairing = Pairing::Half};
  mrope.mrope = MRope{.sections = {8, 12, 12}};
  for (const Spec& spec : {yarn, mrope}) {
    const Rope rope(spec);
    const int axes = spec.mrope ? 3 : 1;
    const std::vector<std::int64_t> stream = {0, 1, 7, 4095, 123456789, 5, 1LL << 40};
    std::vector<std::int64_t> pos;
    for (int a = 0; a < axes; ++a)
      for (const std::int64_t p : stream) pos.push_back(p + a * 3);
    const Positions positions{pos.data(), IndexType::I64, static_cast<std::int64_t>(stream.size()), axes};
    const std::int64_t tokens = positions.count, pairs = spec.num_pairs();
    std::vector<float> c(tokens * pairs), s(tokens * pairs);
    rope.cos_sin(positions, c, s);
    const PairMap map = make_pair_map(spec);
    std::vector<float> unit(tokens * spec.head_dim, 0.0f);
    for (std::int64_t t = 0; t < tokens; ++t)
      for (int j = 0; j < pairs; ++j) unit[t * spec.head_dim + map.lane_a[j]] = 1.0f;
    for (const bool on_the_fly : {false, true}) {
      std::vector<float> x = unit;
      const RotateArgs args{.q = bshd(x.data(), DType::F32, 1, tokens, 1, spec.head_dim), .positions = positions};
      on_the_fly ? rope.apply_on_the_fly(args) : rope.apply(args);
      for (std::int64_t t = 0; t < tokens; ++t) {
        for (int j = 0; j < pairs; ++j) {
          ASSERT_EQ(x[t * spec.head_dim + map.lane_a[j]], c[t * pairs + j]) << "token " << t << " pair " << j;
          ASSERT_EQ(x[t * spec.head_dim + map.lane_b[j]], s[t * pairs + j]) << "token " << t << " pair " << j;
        }
      }
    }
  }
  const Rope rope(yarn);
  std::vector<std::int64_t> pos = {1, 2};
  std::vector<float> small(2 * 24 - 1), enough(2 * 24);
  EXPECT_THROW(rope.cos_sin(positions(pos), small, enough), Error);
  pos[1] = -1;
  EXPECT_THROW(rope.cos_sin(positions(pos), enough, enough), Error);
}

namespace {

// q, k and v as slices of one fused projection [tokens, (q + 2·kv) heads × d] (vLLM's qkv.split):
// their extents interleave token by token but their rows do not, so q and k rotate in place there —
// bit for bit as in separate buffers, v untouched. A k slice reaching into q's heads is still refused.
TEST(ApplyLayouts, FusedQkvSlicesRotateInPlace) {
  using namespace ropekit;
  const Spec spec{.head_dim = 64, .rotary_dim = 64, .base = 10000.0, .pairing = Pairing::Half};
  const Rope rope(spec);
  constexpr std::int64_t tokens = 5, qh = 4, kvh = 2, d = 64, width = (qh + 2 * kvh) * d;
  std::vector<float> qkv(tokens * width);
  for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(0.1f * float(i));
  const std::vector<std::int64_t> pos = {3, 4, 5, 6, 1000};
  const auto slice = [&](float* base, std::int64_t first_head, std::int64_t heads) {
    return Heads{.data = base + first_head * d,
                 .dtype = DType::F32,
                 .batch = 1,
                 .seq = tokens,
                 .heads = heads,
                 .batch_stride = tokens * width,
                 .seq_stride = width,
                 .head_stride = d};
  };
  std::vector<float> q(tokens * qh * d), k(tokens * kvh * d);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::copy_n(qkv.begin() + t * width, qh * d, q.begin() + t * qh * d);
    std::copy_n(qkv.begin() + t * width + qh * d, kvh * d, k.begin() + t * kvh * d);
  }
  const std::vector<float> before = qkv;
  rope.apply({.q = slice(qkv.data(), 0, qh), .k = slice(qkv.data(), qh, kvh), .positions = positions(pos)});
  rope.apply({.q = bshd(q.data(), DType::F32, 1, tokens, qh, d),
              .k = bshd(k.data(), DType::F32, 1, tokens, kvh, d),
              .positions = positions(pos)});
  for (std::int64_t t = 0; t < tokens; ++t) {
    EXPECT_TRUE(std::equal(q.begin() + t * qh * d, q.begin() + (t + 1) * qh * d, qkv.begin() + t * width)) << t;
    EXPECT_TRUE(std::equal(k.begin() + t * kvh * d, k.begin() + (t + 1) * kvh * d, qkv.begin() + t * width + qh * d))
        << t;
    EXPECT_TRUE(std::equal(before.begin() + t * width + (qh + kvh) * d, before.begin() + (t + 1) * width,
                           qkv.begin() + t * width + (qh + kvh) * d))
        << "v of token " << t << " was written";
  }
  // k starting inside q's last head: its rows meet q's.
  EXPECT_ERROR(rope.apply({.q = slice(qkv.data(), 0, qh),
                           .k = Heads{.data = qkv.data() + qh * d - 32,
                                      .dtype = DType::F32,
                                      .batch = 1,
                                      .seq = tokens,
                                      .heads = kvh,
                                      .batch_stride = tokens * width,
                                      .seq_stride = width,
                                      .head_stride = d},
                           .positions = positions(pos)}),
               "q and k share memory");
  // Slices wider than the token stride would reach the next token: refused too.
  EXPECT_ERROR(
      rope.apply({.q = slice(qkv.data(), 0, qh + 3), .k = slice(qkv.data(), qh + 3, kvh), .positions = positions(pos)}),
      "share memory");
}

// RotateCall::set_positions: a decode step moves a prepared call to new positions. Each step must give the
// bits a fresh prepare at those positions gives, whatever the angle source: inside the call's table,
// beyond it (on the fly), M-RoPE's three streams; a caller's table refuses positions outside it; bad
// positions throw and leave the call as it was.
// A view carries its width: lanes() gives the rope slice of wider heads (MLA: 64 rope lanes after 128
// nope lanes of a 192-lane head), which rotates exactly as a separate 64-lane tensor and leaves the
// other lanes alone; a call that reads more lanes than a view states, and a slice outside the view,
// are refused naming the field.
TEST(ApplyLayouts, LanesSliceRotatesLikeASeparateTensor) {
  const Rope rope(Spec{.head_dim = 64, .rotary_dim = 64, .base = 1e4, .pairing = Pairing::Interleaved});
  const std::int64_t seq = 5, heads = 3;
  std::vector<float> full(std::size_t(seq * heads * 192)), part(std::size_t(seq * heads * 64));
  for (std::size_t i = 0; i < full.size(); ++i) full[i] = std::sin(0.01f * float(i));
  for (std::int64_t t = 0; t < seq * heads; ++t) {
    std::copy_n(full.begin() + t * 192 + 128, 64, part.begin() + t * 64);
  }
  const std::vector<float> before = full;
  std::vector<std::int64_t> pos(static_cast<std::size_t>(seq));
  std::iota(pos.begin(), pos.end(), 100);
  const Heads wide = bshd(full.data(), DType::F32, 1, seq, heads, 192);
  EXPECT_EQ(wide.head_dim, 192);
  const Heads slice = lanes(wide, 128, 64);
  EXPECT_EQ(slice.head_dim, 64);
  rope.apply({.q = slice, .positions = positions(pos)});
  rope.apply({.q = bshd(part.data(), DType::F32, 1, seq, heads, 64), .positions = positions(pos)});
  for (std::int64_t t = 0; t < seq * heads; ++t) {
    for (int l = 0; l < 192; ++l) {
      const float want = l < 128 ? before[std::size_t(t * 192 + l)] : part[std::size_t(t * 64 + l - 128)];
      ASSERT_EQ(full[std::size_t(t * 192 + l)], want) << "row " << t << " lane " << l;
    }
  }
  EXPECT_ERROR(lanes(wide, 160, 64), "lanes: [160, 224)", "192 lanes");
  EXPECT_ERROR(lanes(wide, -1, 64), "first = -1");
  EXPECT_ERROR(rope.apply({.q = lanes(wide, 0, 32), .positions = positions(pos)}), "q.head_dim = 32", "reads 64 lanes");
}

TEST(ApplyCall, SetPositionsGivesTheBitsOfAFreshPrepare) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (const Case& c : cases()) {
    if (c.name != std::string("default_half") && c.name != std::string("default_interleaved") &&
        c.name != std::string("yarn") && c.name != std::string("mrope_sectioned")) {
      continue;
    }
    const Rope rope(c.spec, AngleMode::Accurate, c.length);
    const int axes = rope.pair_map().num_axes;
    const std::int64_t d = c.spec.head_dim, qh = 4, kh = 2;
    // One token too: a decode step's kernel is chosen at prepare (OneTokenRows) and must follow the angle source
    // from the table to on the fly and back.
    for (const std::int64_t tokens : {3, 1}) {
      for (DType dt : {DType::F32, DType::BF16}) {
        const std::int64_t es = element_size(dt);
        std::vector<std::uint8_t> q0(std::size_t(tokens * qh * d * es)), k0(std::size_t(tokens * kh * d * es));
        for (auto* buffer : {&q0, &k0}) {
          for (std::size_t i = 0; i < buffer->size() / std::size_t(es); ++i) {
            const float x = normal(rng);
            if (dt == DType::F32) {
              std::memcpy(buffer->data() + 4 * i, &x, 4);
            } else {
              const std::uint16_t h = float_to_bf16(x);
              std::memcpy(buffer->data() + 2 * i, &h, 2);
            }
          }
        }
        std::vector<std::uint8_t> q = q0, k = k0, q_want = q0, k_want = k0;
        const auto args_for = [&](std::vector<std::uint8_t>& qb, std::vector<std::uint8_t>& kb,
                                  const std::vector<std::int64_t>& pos) {
          return RotateArgs{.q = bshd(qb.data(), dt, 1, tokens, qh, d),
                            .k = bshd(kb.data(), dt, 1, tokens, kh, d),
                            .positions = axes == 3 ? mrope_positions(pos) : positions(pos)};
        };
        const auto pick = [&](std::int64_t lo, std::int64_t hi) {
          std::vector<std::int64_t> pos(std::size_t(tokens * axes));
          for (auto& p : pos) p = std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
          return pos;
        };
        std::vector<std::int64_t> first = pick(0, 50);
        RotateCall call = rope.prepare(args_for(q, k, first));
        ASSERT_NE(call.job().table, nullptr) << c.name;
        // In the table, far beyond it (2^40: on the fly), back inside; each time from the same inputs.
        for (const auto& [lo, hi] : {std::pair<std::int64_t, std::int64_t>{0, 200},
                                     {std::int64_t{1} << 40, (std::int64_t{1} << 40) + 9},
                                     {1, 7}}) {
          const std::vector<std::int64_t> pos = pick(lo, hi);
          q = q0, k = k0, q_want = q0, k_want = k0;
          call.set_positions(axes == 3 ? mrope_positions(pos) : positions(pos));
          EXPECT_EQ(call.job().table == nullptr, lo >= (std::int64_t{1} << 40)) << c.name;
          call.run();
          rope.prepare(args_for(q_want, k_want, pos)).run();
          EXPECT_EQ(q, q_want) << c.name << " " << to_string(dt) << " " << tokens << " tokens, positions from " << lo;
          EXPECT_EQ(k, k_want) << c.name << " " << to_string(dt) << " " << tokens << " tokens, positions from " << lo;
        }
        // A call prepared on the fly stays on the fly.
        RotateCall otf = rope.prepare_on_the_fly(args_for(q, k, first));
        const std::vector<std::int64_t> pos = pick(0, 100);
        q = q0, k = k0, q_want = q0, k_want = k0;
        otf.set_positions(axes == 3 ? mrope_positions(pos) : positions(pos));
        EXPECT_EQ(otf.job().table, nullptr);
        otf.run();
        rope.prepare(args_for(q_want, k_want, pos)).run();
        EXPECT_EQ(q, q_want) << c.name;
      }
    }
  }
}

TEST(ApplyCall, SetPositionsRefusesBadPositionsAndLeavesTheCall) {
  const Rope rope(Spec{.head_dim = 64, .rotary_dim = 64, .base = 1e4, .pairing = Pairing::Half});
  std::vector<float> q(2 * 3 * 64, 0.5f), k(2 * 1 * 64, 0.25f);
  const std::vector<std::int64_t> start = {5, 6};
  const RotateArgs args{.q = bshd(q.data(), DType::F32, 1, 2, 3, 64),
                        .k = bshd(k.data(), DType::F32, 1, 2, 1, 64),
                        .positions = positions(start)};
  RotateCall call = rope.prepare(args, std::make_shared<const Table>(rope.plan(), AngleMode::Accurate, 100));
  const std::vector<std::int64_t> in_table = {98, 99}, outside = {99, 100}, negative = {3, -1}, one = {7},
                                  huge = {0, std::int64_t{1} << 47};
  const std::vector<std::int32_t> in_table32 = {1, 2};
  call.set_positions(positions(in_table));
  call.set_positions(positions(in_table32));
  EXPECT_ERROR(call.set_positions(positions(outside)), "position 100 is outside the table", "[0, 100)");
  EXPECT_ERROR(call.set_positions(positions(negative)), "positions[1] = -1");
  EXPECT_ERROR(call.set_positions(positions(huge)), "positions[1] = 140737488355328");
  EXPECT_ERROR(call.set_positions(positions(one)), "positions.count = 1", "2");
  EXPECT_ERROR(call.set_positions(Positions{nullptr, IndexType::I64, 2, 1}), "positions.data is null");
  const std::vector<std::int64_t> six(6, 1);
  EXPECT_ERROR(call.set_positions(mrope_positions(six)), "positions.axes = 3");
  // The failed calls changed nothing: the call still rotates at 1, 2 (the last good positions).
  std::vector<float> q_want = q, k_want = k;
  call.run();
  rope.apply({.q = bshd(q_want.data(), DType::F32, 1, 2, 3, 64),
              .k = bshd(k_want.data(), DType::F32, 1, 2, 1, 64),
              .positions = positions(in_table32)});
  EXPECT_EQ(q, q_want);
  EXPECT_EQ(k, k_want);
  RotateCall empty;
  EXPECT_ERROR(empty.set_positions(positions(in_table)), "the call is empty");
}

}  // namespace
