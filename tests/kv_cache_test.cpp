// KV cache, on every SIMD target: keys stored rotated, K-shift as a pure rotation (also under YaRN and
// after 1000 shifts), bf16 and fp16 storage, re-rotation on a plan change, and bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "attention_oracle.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"
#include "ropekit/ropekit.hpp"
#include "targets.hpp"

namespace {

using namespace ropekit;

constexpr double kEps = 0x1p-24;  // float32 unit roundoff

class KvCacheTest : public targets::PerTarget {};
ROPEKIT_PER_TARGET(KvCacheTest);

Spec llama(int d = 64) { return {.head_dim = d, .rotary_dim = d, .base = 10000.0, .pairing = Pairing::Half}; }
Spec yarn(int d = 64) {
  Spec s = llama(d);
  s.scaling = scaling::Yarn{.factor = 16.0, .original_max_position_embeddings = 4096};  // magnitude 1.277
  return s;
}

std::vector<std::int64_t> iota(std::int64_t n, std::int64_t first = 0) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[i] = first + i;
  return p;
}

struct Tokens {
  std::int64_t n, heads;
  int d;
  std::vector<float> k, v;
  Tokens(std::int64_t n_, std::int64_t heads_, int d_, std::uint32_t seed)
      : n(n_),
        heads(heads_),
        d(d_),
        k(attn_oracle::normal(std::size_t(n_ * heads_ * d_), seed)),
        v(attn_oracle::normal(std::size_t(n_ * heads_ * d_), seed + 7)) {}
  Heads kv(std::vector<float>& x, std::int64_t first = 0, std::int64_t count = -1) {
    return bshd(x.data() + first * heads * d, DType::F32, 1, count < 0 ? n - first : count, heads, d);
  }
};

// Worst |cached − oracle| over all pairs, in units of ε · m · |pair| (m = cos_sin_scale), against
// m · R(position) k in double.
double worst_pair_error(const ropekit::KvCache& cache, const Spec& spec, const Plan& plan, const Tokens& t,
                        const std::vector<std::int64_t>& source_token) {
  const Heads keys = cache.keys();
  const auto* stored = static_cast<const float*>(keys.data);
  double worst = 0.0;
  for (std::int64_t slot = 0; slot < cache.size(); ++slot) {
    const std::int64_t pos = cache.position(slot);
    for (std::int64_t h = 0; h < t.heads; ++h) {
      const float* src = t.k.data() + (source_token[slot] * t.heads + h) * t.d;
      const std::vector<double> x(src, src + t.d);
      const std::vector<double> want = oracle::rotate(spec, plan, x, &pos);
      const float* got = stored + (slot * t.heads + h) * t.d;
      for (int j = 0; j < spec.rotary_dim / 2; ++j) {
        const auto [a, b] = oracle::lanes(spec, j);
        const double norm = std::hypot(x[a], x[b]) * plan.cos_sin_scale;
        const double err = std::hypot(got[a] - want[a], got[b] - want[b]);
        worst = std::max(worst, err / (kEps * std::max(norm, 1e-30)));
      }
    }
  }
  return worst;
}

TEST_P(KvCacheTest, AppendStoresKeysRotatedExactlyAsApply) {
  const Rope rope(yarn());
  Tokens t(100, 2, 64, 1);
  ropekit::KvCache cache(rope, {.capacity = 128, .kv_heads = 2});
  const auto pos = iota(100, 7);
  cache.append(rope, t.kv(t.k, 0, 60), t.kv(t.v, 0, 60), positions(std::span(pos).first(60)));
  cache.append(rope, t.kv(t.k, 60), t.kv(t.v, 60), positions(std::span(pos).subspan(60)));
  ASSERT_EQ(cache.size(), 100);
  std::vector<float> rotated(t.k.size());
  RotateArgs args;
  args.k = t.kv(t.k);
  args.k_out = t.kv(rotated);
  args.positions = positions(pos);
  rope.apply(args);
  EXPECT_EQ(std::memcmp(cache.keys().data, rotated.data(), rotated.size() * 4), 0);
  EXPECT_EQ(std::memcmp(cache.values().data, t.v.data(), t.v.size() * 4), 0);  // values never rotate
  EXPECT_EQ(cache.position(99), 106);
}

TEST_P(KvCacheTest, AttentionOverTheCacheEqualsFusedAttention) {
  const Rope rope(yarn());
  Tokens t(200, 2, 64, 2);
  ropekit::KvCache cache(rope, {.capacity = 256, .kv_heads = 2});
  const auto kpos = iota(200);
  cache.append(rope, t.kv(t.k), t.kv(t.v), positions(kpos));
  std::vector<float> q = attn_oracle::normal(5 * 8 * 64, 3);
  const auto qpos = iota(5, 195);
  std::vector<float> via_cache(5 * 8 * 64), fused(5 * 8 * 64);
  attention(rope, bshd(q.data(), DType::F32, 1, 5, 8, 64), positions(qpos), cache,
            bshd(via_cache.data(), DType::F32, 1, 5, 8, 64));
  AttentionArgs args;
  args.q = bshd(q.data(), DType::F32, 1, 5, 8, 64);
  args.k = t.kv(t.k);
  args.v = t.kv(t.v);
  args.out = bshd(fused.data(), DType::F32, 1, 5, 8, 64);
  args.q_positions = positions(qpos);
  args.k_positions = positions(kpos);
  attention(rope, args);
  EXPECT_EQ(std::memcmp(via_cache.data(), fused.data(), fused.size() * 4), 0);
}

// An engine's own cos/sin cache (here Hugging Face's float32-angle YaRN cache, imported) drives the keys
// a cache stores and the queries attention rotates on load: attention over the cache equals the fused
// attention over the raw keys with the same table, bit for bit — with plain storage, with ReRoPE's
// unrotated keys (whose far regime then reads the table's row 0 rather than the keys as stored), and over
// a paged cache whose two sequences' pages interleave. Without the table the output differs.
TEST_P(KvCacheTest, ExternalCosSinCacheDrivesTheCacheAndAttention) {
  const Spec spec = yarn();
  const Rope rope(spec), hf(spec, AngleMode::HfCompat);
  const std::int64_t rows = 4096, n = 150, first = 3900;
  std::vector<float> theirs(std::size_t(rows * 64));
  export_cos_sin_cache(hf, rows, theirs);
  const std::shared_ptr<const Table> table = import_cos_sin_cache(rope, theirs, rows);
  Tokens t(n, 2, 64, 11);
  std::vector<float> q = attn_oracle::normal(3 * 8 * 64, 12);
  const auto kpos = iota(n, first), qpos = iota(3, first + n - 3);
  const auto out_of = [](std::vector<float>& o) { return bshd(o.data(), DType::F32, 1, 3, 8, 64); };
  const Heads qv = bshd(q.data(), DType::F32, 1, 3, 8, 64);
  for (const PositionRegimes& regimes : {PositionRegimes{}, PositionRegimes{regimes::ReRope{.window = 40}}}) {
    SCOPED_TRACE(to_string(regimes));
    ropekit::KvCache cache(rope, {.capacity = 256, .kv_heads = 2, .regimes = regimes});
    cache.append(rope, t.kv(t.k), t.kv(t.v), positions(kpos), table);
    if (regimes.index() == 0) {  // keys stored as Rope::apply(args, table) writes them
      std::vector<float> k = t.k;
      rope.apply({.k = bshd(k.data(), DType::F32, 1, n, 2, 64), .positions = positions(kpos)}, table);
      EXPECT_EQ(std::memcmp(cache.keys().data, k.data(), k.size() * 4), 0);
    }
    AttentionOptions with{.regimes = regimes};
    with.table = table;
    std::vector<float> via_cache(3 * 8 * 64), fused(via_cache.size()), own(via_cache.size());
    attention(rope, qv, positions(qpos), cache, out_of(via_cache), with);
    attention(rope,
              {.q = qv,
               .k = t.kv(t.k),
               .v = t.kv(t.v),
               .out = out_of(fused),
               .q_positions = positions(qpos),
               .k_positions = positions(kpos)},
              with);
    EXPECT_EQ(std::memcmp(via_cache.data(), fused.data(), fused.size() * 4), 0);
    attention(rope,
              {.q = qv,
               .k = t.kv(t.k),
               .v = t.kv(t.v),
               .out = out_of(own),
               .q_positions = positions(qpos),
               .k_positions = positions(kpos)},
              AttentionOptions{.regimes = regimes});
    EXPECT_NE(std::memcmp(own.data(), fused.data(), fused.size() * 4), 0);  // the table's angles are not the Rope's
  }

  // A paged cache, two sequences appended in turns (their pages interleave), read in place.
  PagedKvCache paged(rope, {.num_pages = 40, .page_size = 8, .kv_heads = 2, .max_sequences = 2});
  for (std::int64_t a = 0; a < n; a += 8) {
    const std::int64_t c = std::min<std::int64_t>(8, n - a);
    for (const int seq : {0, 1}) {
      const std::vector<std::int32_t> seq_of(std::size_t(c), seq);
      const std::vector<std::int64_t> pos(kpos.begin() + a, kpos.begin() + a + c);
      paged.append(rope, seq_of, {.k = t.kv(t.k, a, c), .v = t.kv(t.v, a, c), .positions = positions(pos)}, table);
    }
  }
  std::vector<float> via_pages(3 * 8 * 64), fused(via_pages.size());
  const std::vector<std::int32_t> seq_of = {1, 1, 1};
  AttentionOptions with;
  with.table = table;
  attention(rope, qv, positions(qpos), seq_of, paged, out_of(via_pages), with);
  attention(rope,
            {.q = qv,
             .k = t.kv(t.k),
             .v = t.kv(t.v),
             .out = out_of(fused),
             .q_positions = positions(qpos),
             .k_positions = positions(kpos)},
            with);
  EXPECT_EQ(std::memcmp(via_pages.data(), fused.data(), fused.size() * 4), 0);

  // Refused: a table without a Rope; a query or key position outside the table.
  AttentionArgs no_rope{.q = qv, .k = t.kv(t.k), .v = t.kv(t.v), .out = out_of(fused), .head_dim = 64};
  EXPECT_ERROR(attention(no_rope, with), "options.table is set");
  const std::vector<std::int64_t> far = {0, 1, rows};
  EXPECT_ERROR(attention(rope, qv, positions(far), seq_of, paged, out_of(via_pages), with), "outside the table");
  ropekit::KvCache small(rope, {.capacity = 4, .kv_heads = 2});
  EXPECT_ERROR(small.append(rope, t.kv(t.k, 0, 3), t.kv(t.v, 0, 3), positions(far), table), "outside the table");
  EXPECT_EQ(small.size(), 0);
}

TEST_P(KvCacheTest, OneShiftEqualsRotatingAtTheShiftedPosition) {
  for (const Spec& spec : {llama(), yarn()}) {
    const Rope rope(spec);
    Tokens t(300, 2, 64, 4);
    for (const std::int64_t delta : {std::int64_t{-100}, std::int64_t{37}, std::int64_t{1} << 20}) {
      ropekit::KvCache cache(rope, {.capacity = 300, .kv_heads = 2});
      const auto pos = iota(300, 100);
      cache.append(rope, t.kv(t.k), t.kv(t.v), positions(pos));
      const double appended = worst_pair_error(cache, spec, rope.plan(), t, iota(300));
      cache.shift(50, 300, delta);
      EXPECT_EQ(cache.position(49), 149);
      EXPECT_EQ(cache.position(50), 150 + delta);
      const double shifted = worst_pair_error(cache, spec, rope.plan(), t, iota(300));
      std::printf("%s delta %lld: appended %.2f, after one shift %.2f (eps·m·|pair|)\n",
                  std::string(rope_type_name(spec.scaling)).c_str(), static_cast<long long>(delta), appended, shifted);
      EXPECT_LE(appended, 5.0);       // one rotation (attention.hpp)
      EXPECT_LE(shifted, 5.0 + 2.5);  // and one shift
    }
  }
}

TEST_P(KvCacheTest, AThousandShiftsStayARotationEvenUnderYarn) {
  // llama.cpp multiplies YaRN's magnitude in on every shift (m^1001 after 1000 shifts, here 1e106);
  // ropekit's shift is R(δ) with magnitude 1, so the error stays at float32 rounding.
  const Spec spec = yarn();
  const Rope rope(spec);
  ASSERT_GT(rope.plan().cos_sin_scale, 1.2);
  Tokens t(64, 2, 64, 5);
  ropekit::KvCache cache(rope, {.capacity = 64, .kv_heads = 2});
  cache.append(rope, t.kv(t.k), t.kv(t.v), positions(iota(64, 5000)));
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::int64_t> step(-300, 300);
  for (int i = 0; i < 1000; ++i) {
    std::int64_t delta = step(rng);
    if (cache.position(0) + delta < 0) delta = -delta;
    cache.shift(0, 64, delta);
  }
  const double worst = worst_pair_error(cache, spec, rope.plan(), t, iota(64));
  std::printf("after 1000 shifts: worst %.2f eps·m·|pair| (contract: %.0f)\n", worst, 5 + 1000 * 2.5);
  EXPECT_LE(worst, 5 + 1000 * 2.5);
  // A regression guard on what this seeded run measures (82): successive shifts' rounding errors
  // do not line up (≈ sqrt(n) growth); a compounded magnitude would be off by a factor 1e106.
  EXPECT_LE(worst, 200.0);
}

// Half-precision storage: append rounds once to the storage type, a shift rounds once more.
TEST_P(KvCacheTest, Bf16AndFp16ShiftsAddOneStorageRoundingEach) {
  const Spec spec = yarn();
  const Rope rope(spec);
  for (const DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string(to_string(dtype)));
    const double u = dtype == DType::BF16 ? 0x1p-8 : 0x1p-11;  // half an ulp, relative
    const double floor = dtype == DType::F16 ? 0x1p-25 : 0.0;  // half the fp16 subnormal step
    Tokens t(40, 1, 64, 6);
    std::vector<std::uint16_t> k16(t.k.size()), v16(t.v.size());
    for (std::size_t i = 0; i < k16.size(); ++i) {
      k16[i] = dtype == DType::BF16 ? float_to_bf16(t.k[i]) : float_to_f16(t.k[i]);
      v16[i] = dtype == DType::BF16 ? float_to_bf16(t.v[i]) : float_to_f16(t.v[i]);
      t.k[i] = dtype == DType::BF16 ? bf16_to_float(k16[i])
                                    : f16_to_float(k16[i]);  // the oracle starts from the stored keys
    }
    ropekit::KvCache cache(rope, {.capacity = 40, .kv_heads = 1, .dtype = dtype});
    cache.append(rope, bshd(k16.data(), dtype, 1, 40, 1, 64), bshd(v16.data(), dtype, 1, 40, 1, 64),
                 positions(iota(40, 10)));
    cache.shift(0, 40, -7);
    const auto* stored = static_cast<const std::uint16_t*>(cache.keys().data);
    const auto widen = [dtype](std::uint16_t h) { return dtype == DType::BF16 ? bf16_to_float(h) : f16_to_float(h); };
    for (std::int64_t slot = 0; slot < 40; ++slot) {
      const std::int64_t pos = cache.position(slot);
      const std::vector<double> x(t.k.begin() + slot * 64, t.k.begin() + (slot + 1) * 64);
      const std::vector<double> want = oracle::rotate(spec, rope.plan(), x, &pos);
      for (int j = 0; j < 32; ++j) {
        const auto [a, b] = oracle::lanes(spec, j);
        const double norm = std::hypot(x[a], x[b]) * rope.plan().cos_sin_scale;
        const double err = std::hypot(widen(stored[slot * 64 + a]) - want[a], widen(stored[slot * 64 + b]) - want[b]);
        // Two storage roundings (append, shift) per lane, plus the float32 rotations (contract: 5 + 2.5 ε).
        ASSERT_LE(err, 2 * std::sqrt(2.0) * (u * norm + floor) + 8 * kEps * norm) << "slot " << slot << " pair " << j;
      }
    }
  }
}

// Re-rotation on a plan change equals appending the unrotated keys under the new plan.
void check_rerotation(const Spec& spec, std::int64_t first_length, std::int64_t grown_length) {
  Rope rope(spec, AngleMode::Accurate, first_length);
  Tokens t(grown_length, 2, spec.head_dim, 8);
  ropekit::KvCache cache(rope, {.capacity = grown_length, .kv_heads = 2});
  const auto pos = iota(first_length);
  cache.append(rope, t.kv(t.k, 0, first_length), t.kv(t.v, 0, first_length), positions(pos));
  // A Rope never changes: the grown sequence is planned by another one.
  const Rope grown(spec, AngleMode::Accurate, grown_length);
  ASSERT_TRUE(needs_rerotation(rope.plan(), grown.plan())) << "the plan did not change";
  EXPECT_ERROR(cache.append(grown, t.kv(t.k, first_length), t.kv(t.v, first_length),
                            positions(iota(grown_length - first_length, first_length))),
               "rerotate");
  std::vector<float> q(spec.head_dim * 2), out(spec.head_dim * 2);
  const std::vector<std::int64_t> qp = {first_length};
  EXPECT_ERROR(attention(grown, bshd(q.data(), DType::F32, 1, 1, 2, spec.head_dim), positions(qp), cache,
                         bshd(out.data(), DType::F32, 1, 1, 2, spec.head_dim)),
               "rerotate");
  EXPECT_TRUE(cache.rerotate(grown));
  EXPECT_FALSE(cache.rerotate(grown));
  const double worst = worst_pair_error(cache, spec, grown.plan(), t, iota(first_length));
  std::printf("%s re-rotated %lld -> %lld: worst %.2f eps·m·|pair|\n",
              std::string(rope_type_name(spec.scaling)).c_str(), static_cast<long long>(first_length),
              static_cast<long long>(grown_length), worst);
  EXPECT_LE(worst, 15.0);  // attention.hpp: three rotations' worth
  // And the rest of the sequence appends under the new plan.
  cache.append(grown, t.kv(t.k, first_length), t.kv(t.v, first_length),
               positions(iota(grown_length - first_length, first_length)));
  EXPECT_LE(worst_pair_error(cache, spec, grown.plan(), t, iota(grown_length)), 15.0);
}

TEST_P(KvCacheTest, RerotationWhenDynamicNtkGrows) {
  Spec spec = llama();
  spec.scaling = scaling::DynamicNtk{.factor = 2.0, .max_position_embeddings = 64};
  check_rerotation(spec, 64, 150);
}

TEST_P(KvCacheTest, RerotationWhenLongRopeSwitchesToLongFactors) {
  Spec spec = llama(32);
  std::vector<double> short_factor(16), long_factor(16);
  for (int i = 0; i < 16; ++i) {
    short_factor[i] = 1.0 + 0.05 * i;
    long_factor[i] = 1.0 + 2.5 * i;
  }
  spec.scaling = scaling::LongRope{short_factor, long_factor, 64, 8.0, std::nullopt};
  check_rerotation(spec, 64, 100);
}

TEST_P(KvCacheTest, ContextShiftingEqualsAppendingAtTheNewPositions) {
  // llama.cpp's context shift: keep the first 10, drop the next 40, move the rest back by 40.
  const Spec spec = yarn();
  const Rope rope(spec);
  Tokens t(120, 2, 64, 9);
  ropekit::KvCache cache(rope, {.capacity = 120, .kv_heads = 2});
  cache.append(rope, t.kv(t.k), t.kv(t.v), positions(iota(120)));
  cache.erase(10, 50);
  cache.shift(10, cache.size(), -40);
  ASSERT_EQ(cache.size(), 80);
  std::vector<std::int64_t> source = iota(80);
  for (std::int64_t i = 10; i < 80; ++i) source[i] = i + 40;
  for (std::int64_t i = 0; i < 80; ++i) EXPECT_EQ(cache.position(i), i);
  EXPECT_LE(worst_pair_error(cache, spec, rope.plan(), t, source), 5.0 + 2.5);  // append + one shift
  const auto* values = static_cast<const float*>(cache.values().data);
  EXPECT_EQ(values[10 * 2 * 64], t.v[50 * 2 * 64]);
}

TEST_P(KvCacheTest, BadInput) {
  const Rope rope(llama());
  Tokens t(10, 2, 64, 10);
  ropekit::KvCache cache(rope, {.capacity = 8, .kv_heads = 2});
  EXPECT_ERROR(cache.append(rope, t.kv(t.k), t.kv(t.v), positions(iota(10))), "10 tokens", "capacity 8");
  cache.append(rope, t.kv(t.k, 0, 4), t.kv(t.v, 0, 4), positions(iota(4, 2)));
  cache.append(rope, t.kv(t.k, 0, 0), t.kv(t.v, 0, 0), positions(iota(0)));  // zero tokens: nothing changes
  EXPECT_EQ(cache.size(), 4);
  EXPECT_ERROR(cache.append(rope, t.kv(t.k, 0, 5), t.kv(t.v, 0, 5), positions(iota(5))), "5 tokens at size 4");
  EXPECT_ERROR(cache.shift(0, 4, -3), "slot 0 at position 2", "before position 0");
  EXPECT_EQ(cache.position(0), 2);  // a refused shift changes nothing
  EXPECT_ERROR(cache.shift(2, 6, 1), "[2, 6)", "[0, 4)");
  EXPECT_ERROR(cache.erase(3, 1), "[3, 1)");
  EXPECT_ERROR(cache.position(4), "slot = 4");
  std::vector<float> k1(64), k3(3 * 64 * 1);
  EXPECT_ERROR(cache.append(rope, bshd(k1.data(), DType::F32, 1, 1, 1, 64), bshd(k1.data(), DType::F32, 1, 1, 1, 64),
                            positions(iota(1))),
               "k.heads = 1", "kv_heads = 2");
  EXPECT_ERROR(cache.append(rope, t.kv(t.k, 0, 1), t.kv(t.v, 0, 2), positions(iota(1))), "v.seq = 2");
  EXPECT_ERROR(cache.append(rope, t.kv(t.k, 0, 1), t.kv(t.v, 0, 1), positions(iota(2))), "positions.count = 2");
  std::vector<std::uint16_t> b16(2 * 64);
  EXPECT_ERROR(cache.append(rope, bshd(b16.data(), DType::BF16, 1, 1, 2, 64), t.kv(t.v, 0, 1), positions(iota(1))),
               "k.dtype = bfloat16");
  EXPECT_ERROR(cache.append(rope, bshd(t.k.data(), DType::F32, 2, 1, 2, 64), bshd(t.v.data(), DType::F32, 2, 1, 2, 64),
                            positions(iota(2))),
               "batch");
  const Rope other(llama(32));
  EXPECT_ERROR(cache.append(other, t.kv(t.k, 0, 1), t.kv(t.v, 0, 1), positions(iota(1))), "head_dim 32", "head_dim 64");
  EXPECT_ERROR(KvCache(rope, {.capacity = 8, .kv_heads = 2, .head_dim = 128}), "head_dim = 128", "64");
  EXPECT_ERROR(KvCache(rope, {.capacity = 0, .kv_heads = 2}), "capacity = 0");
  EXPECT_ERROR(KvCache(rope, {.capacity = 8, .kv_heads = 0}), "kv_heads = 0");
  EXPECT_ERROR(KvCache(rope, {.capacity = 8, .kv_heads = 2, .threads = -1}), "KvCacheShape.threads = -1");
  Spec mrope = llama(16);
  mrope.mrope = MRope{{2, 3, 3}, MRopeLayout::Sectioned};
  EXPECT_ERROR(KvCache(Rope(mrope), {.capacity = 8, .kv_heads = 1}), "M-RoPE");
  // Queries against the cache: head counts and batch must fit.
  std::vector<float> q(3 * 64), out(3 * 64);
  EXPECT_ERROR(attention(rope, bshd(q.data(), DType::F32, 1, 1, 3, 64), positions(iota(1, 9)), cache,
                         bshd(out.data(), DType::F32, 1, 1, 3, 64)),
               "q.heads = 3", "k.heads = 2");
}

}  // namespace
