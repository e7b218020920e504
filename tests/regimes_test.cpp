// Attention with position regimes (ReRoPE, SelfExtend, dual-chunk attention) and log-n query scaling,
// on every SIMD target:
//   oracle     against a double-precision softmax whose logits come from the full relative-position
//              matrix, built here from the papers' definitions (not from the library's regime
//              functions): logit(i, j) = scale·f(i)·⟨R(rel(i, j)) q_i, R(0) k_j⟩ with __float128 angles;
//   plain      bit for bit equal to plain attention when one regime covers every pair (w ≥ N, W ≥ N,
//              one chunk; log-n below its length);
//   cache      a cache made with the regimes (unrotated or chunk-relative keys), prefilled and then
//              grown one token at a time across group and chunk boundaries, equals the fused call on
//              the same tokens bit for bit, and the oracle at every step; K-shift and erase keep that;
//   errors     every bad parameter is named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "attention_oracle.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"
#include "ropekit/ropekit.hpp"
#include "targets.hpp"

namespace {

using namespace ropekit;

constexpr double kEps = 0x1p-24;

// The relative position of query i and key j under each method, from the definitions.
using RelativePosition = std::function<std::int64_t(std::int64_t i, std::int64_t j)>;

RelativePosition rerope_rel(std::int64_t w) {
  return [w](std::int64_t i, std::int64_t j) { return i - j < w ? i - j : w; };
}
RelativePosition self_extend_rel(std::int64_t W, std::int64_t G) {
  return [W, G](std::int64_t i, std::int64_t j) { return i - j < W ? i - j : i / G - j / G + W - W / G; };
}
// Qwen2.5-1M / vLLM: keys at j mod c (c = chunk − local); the query at i mod c in its own chunk, at
// min(i mod c + c, chunk) against the previous chunk, at min(2c − 1, chunk) against older ones.
RelativePosition dca_rel(std::int64_t chunk, std::int64_t local) {
  const std::int64_t c = chunk - local;
  return [c, chunk](std::int64_t i, std::int64_t j) {
    const std::int64_t kp = j % c;
    if (i / c == j / c) return i % c - kp;
    if (i / c == j / c + 1) return std::min(i % c + c, chunk) - kp;
    return std::min(2 * c - 1, chunk) - kp;
  };
}
double logn_factor(std::int64_t length, std::int64_t i) {
  return length > 0 && i + 1 > length ? std::log(double(i + 1)) / std::log(double(length)) : 1.0;
}

struct Data {
  std::int64_t n = 0, q_heads = 0, kv_heads = 0;
  int d = 0;
  DType dtype = DType::F32;
  std::vector<std::byte> q, k, v;  // [1, n, heads, d] in dtype
  std::vector<std::int64_t> pos;

  Heads view(std::vector<std::byte>& x, std::int64_t heads, std::int64_t first = 0, std::int64_t count = -1) {
    const std::int64_t es = element_size(dtype);
    return bshd(x.data() + first * heads * d * es, dtype, 1, count < 0 ? n - first : count, heads, d);
  }
  std::vector<float> floats(const std::vector<std::byte>& x) const {
    std::vector<float> out(x.size() / std::size_t(element_size(dtype)));
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (dtype == DType::F32) {
        std::memcpy(&out[i], x.data() + 4 * i, 4);
      } else {
        std::uint16_t h;
        std::memcpy(&h, x.data() + 2 * i, 2);
        out[i] = dtype == DType::BF16 ? bf16_to_float(h) : f16_to_float(h);
      }
    }
    return out;
  }
};

Data make_data(std::int64_t n, std::int64_t q_heads, std::int64_t kv_heads, int d, DType dtype, std::int64_t first,
               std::uint32_t seed) {
  Data x{n, q_heads, kv_heads, d, dtype, {}, {}, {}, {}};
  const auto fill = [&](std::vector<std::byte>& dst, std::int64_t heads, std::uint32_t s) {
    const std::vector<float> f = attn_oracle::normal(std::size_t(n * heads * d), s);
    dst.resize(f.size() * std::size_t(element_size(dtype)));
    for (std::size_t i = 0; i < f.size(); ++i) {
      if (dtype == DType::F32) {
        std::memcpy(dst.data() + 4 * i, &f[i], 4);
      } else {
        const std::uint16_t h = dtype == DType::BF16 ? float_to_bf16(f[i]) : float_to_f16(f[i]);
        std::memcpy(dst.data() + 2 * i, &h, 2);
      }
    }
  };
  fill(x.q, q_heads, seed);
  fill(x.k, kv_heads, seed + 1);
  fill(x.v, kv_heads, seed + 2);
  for (std::int64_t t = 0; t < n; ++t) x.pos.push_back(first + t);
  return x;
}

// Checks out (float32 [queries q_first …, q_heads, d]) against the oracle: a double softmax over keys
// j ≤ i of logits scale·f(i)·m²·⟨R(rel(i, j)) q_i, k_j⟩ on the stored (unrotated) values. Bound
// (attention.hpp): 1e-6·(1 + R)·max|v| + 2.2·δ·max|v|, δ = scale·f·m²·((5 + key_eps)·ε + 2u)·|q_i|·max_j |k_j|
// — the rotations' error (apply's 5ε·m per vector; key_eps: 5 for one rotation, more after K-shifts
// or re-rotation, as kv_cache.hpp states; u the storage type's rounding of the rotated values)
// carried through the logits. Returns the worst error / bound.
double check_against_oracle(const Rope& rope, const Data& x, const RelativePosition& rel, std::int64_t logn,
                            std::int64_t q_first, std::int64_t queries, std::int64_t keys,
                            const std::vector<float>& out, double key_eps = 5.0) {
  const Spec& spec = rope.spec();
  const Plan& plan = rope.plan();
  const std::vector<float> q = x.floats(x.q), k = x.floats(x.k), v = x.floats(x.v);
  const int d = x.d, pairs = spec.rotary_dim / 2;
  const std::int64_t group = x.q_heads / x.kv_heads;
  const double u = x.dtype == DType::F32 ? 0.0 : x.dtype == DType::BF16 ? 0x1p-8 : 0x1p-11;
  const double m = plan.cos_sin_scale;
  const double exact_scale = 1.0 / std::sqrt(double(d)) * plan.softmax_scale_mult;
  std::map<std::int64_t, std::vector<double>> angles;  // cos, sin of each pair at a relative position
  const auto cos_sin = [&](std::int64_t r) -> const std::vector<double>& {
    auto [it, fresh] = angles.try_emplace(r);
    if (fresh) {
      it->second.resize(std::size_t(2 * pairs));
      for (int j = 0; j < pairs; ++j)
        oracle::cos_sin(r, plan.inv_freq[std::size_t(j)], &it->second[std::size_t(2 * j)],
                        &it->second[std::size_t(2 * j + 1)]);
    }
    return it->second;
  };
  double worst = 0.0;
  double max_v = 0.0;
  for (float e : v) max_v = std::max(max_v, double(std::fabs(e)));
  for (std::int64_t s = 0; s < queries; ++s) {
    const std::int64_t qt = q_first + s;
    const std::int64_t i = x.pos[std::size_t(qt)];
    const double scale = double(float(exact_scale * logn_factor(logn, i)));
    for (std::int64_t h = 0; h < x.q_heads; ++h) {
      const std::int64_t kh = h / group;
      const float* qv = q.data() + (qt * x.q_heads + h) * d;
      double q_norm = 0.0;
      for (int l = 0; l < d; ++l) q_norm += double(qv[l]) * qv[l];
      q_norm = std::sqrt(q_norm);
      std::vector<double> logits;
      std::vector<std::int64_t> which;
      double max_k = 0.0;
      for (std::int64_t t = 0; t < keys; ++t) {
        const std::int64_t j = x.pos[std::size_t(t)];
        if (j > i) continue;
        const std::vector<double>& cs = cos_sin(rel(i, j));
        const float* kv = k.data() + (t * x.kv_heads + kh) * d;
        double dot = 0.0, k_norm = 0.0;
        std::vector<bool> paired(std::size_t(d), false);
        for (int p = 0; p < pairs; ++p) {  // ⟨R(rel) q, k⟩ pair by pair
          const auto [a, b] = oracle::lanes(spec, p);
          const double c = cs[std::size_t(2 * p)], sn = cs[std::size_t(2 * p + 1)];
          const double qa = double(qv[a]) * c - double(qv[b]) * sn, qb = double(qv[a]) * sn + double(qv[b]) * c;
          dot += (qa * kv[a] + qb * kv[b]) * m * m;
          paired[std::size_t(a)] = paired[std::size_t(b)] = true;
        }
        for (int l = 0; l < d; ++l) {
          if (!paired[std::size_t(l)]) dot += double(qv[l]) * kv[l];  // pass-through lanes
          k_norm += double(kv[l]) * kv[l];
        }
        max_k = std::max(max_k, std::sqrt(k_norm));
        logits.push_back(dot * scale);
        which.push_back(t);
      }
      const double hi = *std::max_element(logits.begin(), logits.end());
      const double lo = *std::min_element(logits.begin(), logits.end());
      double sum = 0.0;
      std::vector<double> want(std::size_t(d), 0.0);
      for (std::size_t a = 0; a < logits.size(); ++a) {
        const double p = std::exp(logits[a] - hi);
        sum += p;
        for (int l = 0; l < d; ++l) want[std::size_t(l)] += p * v[std::size_t((which[a] * x.kv_heads + kh) * d + l)];
      }
      const double delta = scale * std::max(1.0, m * m) * ((5.0 + key_eps) * kEps + 2.0 * u) * q_norm * max_k;
      const double bound = 1e-6 * (1.0 + (hi - lo)) * max_v + 2.2 * delta * max_v;
      for (int l = 0; l < d; ++l) {
        const double got = out[std::size_t((s * x.q_heads + h) * d + l)];
        const double err = std::fabs(got - want[std::size_t(l)] / sum);
        worst = std::max(worst, err / bound);
        if (err > bound) {
          ADD_FAILURE() << "query " << i << " head " << h << " lane " << l << ": " << got << " vs "
                        << want[std::size_t(l)] / sum << " (bound " << bound << ")";
          return worst;
        }
      }
    }
  }
  return worst;
}

struct Method {
  const char* name;
  PositionRegimes regimes;
  RelativePosition rel;
};

std::vector<Method> methods() {
  return {{"rerope", regimes::ReRope{.window = 20}, rerope_rel(20)},
          {"self_extend", regimes::SelfExtend{.window = 24, .group = 5}, self_extend_rel(24, 5)},
          {"dca", regimes::DualChunk{.chunk_size = 40, .local_size = 6}, dca_rel(40, 6)}};
}

Spec spec_of(Pairing pairing, int d, int rotary, bool yarn) {
  Spec s{.head_dim = d, .rotary_dim = rotary, .base = 500.0, .pairing = pairing};
  if (yarn) s.scaling = scaling::Yarn{.factor = 4.0, .original_max_position_embeddings = 64};  // magnitude ≠ 1
  return s;
}

std::vector<float> run_fused(const Rope& rope, Data& x, const AttentionOptions& o, int threads = 0) {
  std::vector<float> out(std::size_t(x.n * x.q_heads * x.d));
  AttentionArgs args;
  args.q = x.view(x.q, x.q_heads);
  args.k = x.view(x.k, x.kv_heads);
  args.v = x.view(x.v, x.kv_heads);
  args.out = bshd(out.data(), DType::F32, 1, x.n, x.q_heads, x.d);
  args.q_positions = args.k_positions = positions(x.pos);
  AttentionOptions options = o;
  options.threads = threads;
  attention(rope, args, options);
  return out;
}

class Regimes : public targets::PerTarget {};
ROPEKIT_PER_TARGET(Regimes);

// 150 tokens (three 64-key tiles, tiles mixing regimes), GQA 4/2, both pairings, partial rotary, a
// YaRN magnitude, float32 and bf16 storage, log-n on and off.
TEST_P(Regimes, FusedAttentionMatchesTheRelativePositionOracle) {
  // Under ROPEKIT_CASE_SAMPLE the targets of a run share these cases (targets::case_sample).
  const targets::CaseSample sample = targets::case_sample(false);
  double worst = 0.0;
  int cases = 0, ran = 0;
  for (const Method& method : methods()) {
    for (Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
      for (const auto& [rotary, yarn] : {std::pair{16, false}, std::pair{8, true}}) {
        for (DType dt : {DType::F32, DType::BF16}) {
          for (std::int64_t logn : {std::int64_t{0}, std::int64_t{32}}) {
            if (!sample.runs(std::uint32_t(cases))) {
              ++cases;
              continue;
            }
            SCOPED_TRACE(::testing::Message() << method.name << " " << to_string(pairing) << " rotary " << rotary << " "
                                              << to_string(dt) << " logn " << logn);
            const Rope rope(spec_of(pairing, 16, rotary, yarn));
            // (Halved under ROPEKIT_CASE_SHRINK=2, still two tiles: targets::shrunk_tokens.)
            Data x = make_data(targets::shrunk_tokens(150, 65), 4, 2, 16, dt, 0, 7 + std::uint32_t(cases));
            AttentionOptions o;
            o.regimes = method.regimes;
            o.logn_length = logn;
            const std::vector<float> out = run_fused(rope, x, o);
            worst = std::max(worst, check_against_oracle(rope, x, method.rel, logn, 0, x.n, x.n, out));
            EXPECT_EQ(run_fused(rope, x, o, 3), out) << "the thread count changed the result";
            ++cases;
            ++ran;
          }
        }
      }
    }
  }
  std::printf("%s: %d of %d cases, worst error / bound %.3f\n", GetParam().c_str(), ran, cases, worst);
  EXPECT_GT(ran, 0);
}

// One regime for every pair: the arithmetic is plain attention's.
TEST_P(Regimes, OneRegimeEverywhereIsPlainAttentionBitForBit) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    for (Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
      const Rope rope(spec_of(pairing, 16, 16, false));
      Data x = make_data(targets::shrunk_tokens(130, 65), 4, 1, 16, dt, 0, 3);
      const std::vector<float> plain = run_fused(rope, x, {});
      for (const PositionRegimes& r : {PositionRegimes{regimes::ReRope{.window = 130}},
                                       PositionRegimes{regimes::SelfExtend{.window = 200, .group = 7}},
                                       PositionRegimes{regimes::DualChunk{.chunk_size = 140, .local_size = 10}}}) {
        AttentionOptions o;
        o.regimes = r;
        o.logn_length = 130;  // every query at i + 1 ≤ 130: unscaled
        EXPECT_EQ(run_fused(rope, x, o), plain) << to_string(r) << " " << to_string(dt);
      }
      // And a smaller window does change the result (w = n − 1 would not: ReRoPE is continuous at w, the
      // one pair it would move, (n − 1, 0), has i − j = w in both regimes).
      AttentionOptions o;
      o.regimes = regimes::ReRope{.window = x.n - 30};
      EXPECT_NE(run_fused(rope, x, o), plain);
    }
  }
}

// A cache made with the regimes, prefilled with 70 tokens at positions 1000 … and then grown one
// token at a time to 150 — across SelfExtend's group boundaries and DualChunk's chunk boundaries —
// attends every new token exactly as the fused call over the same tokens does (same kernel, same
// bits), and within the oracle's bound.
TEST_P(Regimes, CacheDecodeAcrossBoundariesEqualsFusedAndOracle) {
  const targets::CaseSample sample = targets::case_sample(false);  // as above
  double worst = 0.0;
  std::uint32_t index = 0;
  for (const Method& method : methods()) {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (bool yarn : {false, true}) {
        if (!sample.runs(index++)) continue;
        SCOPED_TRACE(::testing::Message() << method.name << " " << to_string(dt) << " yarn " << yarn);
        const Rope rope(spec_of(Pairing::Half, 16, 16, yarn));
        // (Under ROPEKIT_CASE_SHRINK=2: 35 then to 75, still across a group and a chunk boundary.)
        const std::int64_t n = targets::shrunk_tokens(150, 65), prefill = targets::shrunk_tokens(70);
        Data x = make_data(n, 4, 2, 16, dt, 1000, 21);
        KvCache cache(rope, {.capacity = n, .kv_heads = 2, .dtype = dt, .regimes = method.regimes});
        AttentionOptions o;
        o.logn_length = 1050;
        std::vector<float> out(std::size_t(prefill * 4 * 16));
        cache.append(rope, x.view(x.k, 2, 0, prefill), x.view(x.v, 2, 0, prefill),
                     positions(std::span<const std::int64_t>(x.pos.data(), std::size_t(prefill))));
        attention(rope, x.view(x.q, 4, 0, prefill),
                  positions(std::span<const std::int64_t>(x.pos.data(), std::size_t(prefill))), cache,
                  bshd(out.data(), DType::F32, 1, prefill, 4, 16), o);
        worst = std::max(worst, check_against_oracle(rope, x, method.rel, 1050, 0, prefill, prefill, out));
        // The fused call over the same tokens: same tiles, same bits.
        Data head = x;
        head.n = prefill;
        head.pos.resize(std::size_t(prefill));
        AttentionOptions fused = o;
        fused.regimes = method.regimes;
        const std::vector<float> want = run_fused(rope, head, fused);
        EXPECT_EQ(out, want);
        std::vector<float> one(4 * 16);
        for (std::int64_t t = prefill; t < x.n; ++t) {
          const auto at = positions(std::span<const std::int64_t>(x.pos.data() + t, 1));
          cache.append(rope, x.view(x.k, 2, t, 1), x.view(x.v, 2, t, 1), at);
          attention(rope, x.view(x.q, 4, t, 1), at, cache, bshd(one.data(), DType::F32, 1, 1, 4, 16), o);
          worst = std::max(worst, check_against_oracle(rope, x, method.rel, 1050, t, 1, t + 1, one));
        }
      }
    }
  }
  std::printf("%s: worst error / bound %.3f\n", GetParam().c_str(), worst);
}

// Many sequences under the regimes in one paged cache: two sequences appended token by token in
// turns, so their pages interleave and attention gathers them (KvCache reads its one page in place).
// A batched call over both sequences' queries equals the fused call over each sequence's own tokens,
// bit for bit, both page layouts; then a context shift of one sequence (erase + shift) attends as a
// KvCache shifted alike. And a cache for regimes takes no q (its queries rotate per regime).
TEST_P(Regimes, PagedCacheOfManySequencesEqualsFused) {
  for (const Method& method : methods()) {
    for (const PageLayout layout : {PageLayout::NHD, PageLayout::HND}) {
      SCOPED_TRACE(::testing::Message() << method.name << " " << to_string(layout));
      const Rope rope(spec_of(Pairing::Half, 16, 16, true));
      std::vector<Data> seqs = {make_data(90, 4, 2, 16, DType::BF16, 0, 31),
                                make_data(70, 4, 2, 16, DType::BF16, 500, 41)};
      PagedKvCache cache(rope, {.num_pages = 64,
                                .page_size = 8,
                                .kv_heads = 2,
                                .dtype = CacheDType::BF16,
                                .layout = layout,
                                .max_sequences = 2,
                                .regimes = method.regimes});
      for (std::int64_t t = 0; t < 90; ++t) {
        for (int s = 0; s < 2; ++s) {
          Data& x = seqs[std::size_t(s)];
          if (t >= x.n) continue;
          const std::vector<std::int32_t> seq_of = {s};
          cache.append(rope, seq_of,
                       {.k = x.view(x.k, 2, t, 1),
                        .v = x.view(x.v, 2, t, 1),
                        .positions = positions(std::span<const std::int64_t>(x.pos.data() + t, 1))});
        }
      }
      ASSERT_NE(cache.pages(0)[1], cache.pages(0)[0] + 1) << "the pages should interleave";
      // Both sequences' queries in one call.
      std::vector<std::byte> q(seqs[0].q);
      q.insert(q.end(), seqs[1].q.begin(), seqs[1].q.end());
      std::vector<std::int64_t> qp(seqs[0].pos);
      qp.insert(qp.end(), seqs[1].pos.begin(), seqs[1].pos.end());
      std::vector<std::int32_t> seq_of(90, 0);
      seq_of.resize(160, 1);
      std::vector<float> out(std::size_t(160 * 4 * 16));
      attention(rope, bshd(q.data(), DType::BF16, 1, 160, 4, 16), positions(qp), seq_of, cache,
                bshd(out.data(), DType::F32, 1, 160, 4, 16));
      AttentionOptions fused;
      fused.regimes = method.regimes;
      std::vector<float> want = run_fused(rope, seqs[0], fused);
      const std::vector<float> want1 = run_fused(rope, seqs[1], fused);
      want.insert(want.end(), want1.begin(), want1.end());
      EXPECT_EQ(out, want);

      // Context shift of sequence 1 (positions 500…569): drop [510, 530), move the rest back by 20.
      cache.erase(1, 510, 530);
      cache.shift(1, 530, -1, -20);
      KvCache own(rope, {.capacity = 70, .kv_heads = 2, .dtype = DType::BF16, .regimes = method.regimes});
      Data& x = seqs[1];
      own.append(rope, x.view(x.k, 2), x.view(x.v, 2), positions(x.pos));
      own.erase(10, 30);
      own.shift(10, own.size(), -20);
      ASSERT_EQ(cache.length(1), own.size());
      for (std::int64_t i = 0; i < own.size(); ++i) ASSERT_EQ(cache.positions(1)[std::size_t(i)], own.position(i));
      const std::vector<std::int64_t> last = {own.position(own.size() - 1)};
      const std::vector<std::int32_t> one = {1};
      std::vector<float> got(4 * 16), expect(4 * 16);
      attention(rope, x.view(x.q, 4, 69, 1), positions(last), one, cache, bshd(got.data(), DType::F32, 1, 1, 4, 16));
      attention(rope, x.view(x.q, 4, 69, 1), positions(last), own, bshd(expect.data(), DType::F32, 1, 1, 4, 16));
      EXPECT_EQ(got, expect);
      EXPECT_ERROR(cache.append(rope, one,
                                {.q = x.view(x.q, 4, 0, 1),
                                 .k = x.view(x.k, 2, 0, 1),
                                 .v = x.view(x.v, 2, 0, 1),
                                 .positions = positions(std::span<const std::int64_t>(x.pos.data(), 1))}),
                   "args.q is set", "per regime");
    }
  }
}

// K-shift and erase on a regime cache: the cache afterwards attends as one appended at the shifted
// positions (unrotated keys: bit for bit, they only change position; DualChunk: within the oracle).
TEST_P(Regimes, ShiftAndEraseKeepTheRegimeSemantics) {
  for (const Method& method : methods()) {
    SCOPED_TRACE(method.name);
    const Rope rope(spec_of(Pairing::Interleaved, 16, 16, false));
    Data x = make_data(120, 2, 2, 16, DType::F32, 0, 5);
    KvCache cache(rope, {.capacity = 120, .kv_heads = 2, .regimes = method.regimes});
    cache.append(rope, x.view(x.k, 2), x.view(x.v, 2), positions(x.pos));
    // Context shift: drop slots [10, 40), move the rest down by 30 (positions 40… → 10…).
    cache.erase(10, 40);
    cache.shift(10, cache.size(), -30);
    Data shifted = make_data(90, 2, 2, 16, DType::F32, 0, 5);
    const auto take = [](const std::vector<std::byte>& from, std::int64_t row_bytes) {
      std::vector<std::byte> to(from.begin(), from.begin() + 10 * row_bytes);
      to.insert(to.end(), from.begin() + 40 * row_bytes, from.begin() + 120 * row_bytes);
      return to;
    };
    const std::int64_t row = 2 * 16 * 4;
    shifted.q = take(x.q, row);
    shifted.k = take(x.k, row);
    shifted.v = take(x.v, row);
    for (std::int64_t s = 0; s < cache.size(); ++s) ASSERT_EQ(cache.position(s), shifted.pos[std::size_t(s)]);
    std::vector<float> out(std::size_t(90 * 2 * 16));
    attention(rope, shifted.view(shifted.q, 2), positions(shifted.pos), cache,
              bshd(out.data(), DType::F32, 1, 90, 2, 16));
    check_against_oracle(rope, shifted, method.rel, 0, 0, 90, 90, out, 7.5);  // append + one shift
    KvCache fresh(rope, {.capacity = 120, .kv_heads = 2, .regimes = method.regimes});
    fresh.append(rope, shifted.view(shifted.k, 2), shifted.view(shifted.v, 2), positions(shifted.pos));
    std::vector<float> want(out.size());
    attention(rope, shifted.view(shifted.q, 2), positions(shifted.pos), fresh,
              bshd(want.data(), DType::F32, 1, 90, 2, 16));
    if (!std::holds_alternative<regimes::DualChunk>(method.regimes)) {
      EXPECT_EQ(out, want);
    }
  }
}

// A plan change (dynamic NTK growing) re-rotates chunk-relative keys at their stored positions, and
// leaves unrotated keys alone: afterwards the cache attends as one filled under the new plan.
TEST_P(Regimes, RerotateFollowsTheStorage) {
  Spec spec = spec_of(Pairing::Half, 16, 16, false);
  spec.scaling = scaling::DynamicNtk{.factor = 4.0, .max_position_embeddings = 32};
  const Rope before(spec, AngleMode::Accurate, 40), after(spec, AngleMode::Accurate, 100);
  for (const Method& method : methods()) {
    SCOPED_TRACE(method.name);
    Data x = make_data(90, 2, 1, 16, DType::F32, 0, 9);
    KvCache cache(before, {.capacity = 90, .kv_heads = 1, .regimes = method.regimes});
    cache.append(before, x.view(x.k, 1), x.view(x.v, 1), positions(x.pos));
    EXPECT_EQ(cache.rerotate(before, after), std::holds_alternative<regimes::DualChunk>(method.regimes));
    std::vector<float> out(std::size_t(90 * 2 * 16));
    attention(after, x.view(x.q, 2), positions(x.pos), cache, bshd(out.data(), DType::F32, 1, 90, 2, 16));
    check_against_oracle(after, x, method.rel, 0, 0, 90, 90, out, 15.0);  // kv_cache.hpp: re-rotation
  }
}

TEST_P(Regimes, BadParametersAreNamed) {
  const Rope rope(spec_of(Pairing::Half, 16, 16, false));
  Data x = make_data(8, 2, 1, 16, DType::F32, 0, 1);
  AttentionOptions o;
  o.regimes = regimes::ReRope{.window = 0};
  EXPECT_ERROR(run_fused(rope, x, o), "options.regimes.window = 0");
  o.regimes = regimes::SelfExtend{.window = 8, .group = 0};
  EXPECT_ERROR(run_fused(rope, x, o), "options.regimes.group = 0");
  o.regimes = regimes::SelfExtend{.window = 4, .group = 8};
  EXPECT_ERROR(run_fused(rope, x, o), "options.regimes.window = 4", "group = 8");
  o.regimes = regimes::DualChunk{.chunk_size = 16, .local_size = 16};
  EXPECT_ERROR(run_fused(rope, x, o), "options.regimes.chunk_size = 16", "local_size = 16");
  o.regimes = regimes::DualChunk{.chunk_size = 16, .local_size = -1};
  EXPECT_ERROR(run_fused(rope, x, o), "options.regimes.local_size = -1");
  o.regimes = regimes::ReRope{.window = 4};
  o.causal = false;
  EXPECT_ERROR(run_fused(rope, x, o), "options.regimes", "causal");
  o.causal = true;
  o.bias = AlibiBias{alibi_slopes(2)};
  EXPECT_ERROR(run_fused(rope, x, o), "options.regimes", "bias");
  o = {};
  o.logn_length = 1;
  EXPECT_ERROR(run_fused(rope, x, o), "options.logn_length = 1");
  o.logn_length = -5;
  EXPECT_ERROR(run_fused(rope, x, o), "options.logn_length = -5");
  // Caches: regimes validated, a chunk larger than the cache, regimes that differ from the cache's,
  // regimes on a cache of rotated keys.
  EXPECT_ERROR(KvCache(rope, {.capacity = 8, .kv_heads = 1, .regimes = regimes::ReRope{.window = -2}}),
               "KvCacheShape.regimes.window = -2");
  EXPECT_ERROR(PagedKvCache(rope, {.num_pages = 2,
                                   .page_size = 4,
                                   .kv_heads = 1,
                                   .max_sequences = 1,
                                   .regimes = regimes::ReRope{.window = -2}}),
               "PagedKvCacheShape.regimes.window = -2");
  EXPECT_ERROR(
      KvCache(rope, {.capacity = 8, .kv_heads = 1, .regimes = regimes::DualChunk{.chunk_size = 9, .local_size = 1}}),
      "KvCacheShape.regimes.chunk_size = 9", "capacity 8");
  KvCache plain(rope, {.capacity = 8, .kv_heads = 1});
  plain.append(rope, x.view(x.k, 1), x.view(x.v, 1), positions(x.pos));
  std::vector<float> out(8 * 2 * 16);
  o = {};
  o.regimes = regimes::SelfExtend{.window = 4, .group = 2};
  EXPECT_ERROR(attention(rope, x.view(x.q, 2), positions(x.pos), plain, bshd(out.data(), DType::F32, 1, 8, 2, 16), o),
               "options.regimes = self_extend(W=4,G=2)", "cache's regimes = none");
  // M-RoPE positions.
  Spec mrope = spec_of(Pairing::Half, 16, 16, false);
  mrope.mrope = MRope{{2, 3, 3}, MRopeLayout::Sectioned};
  const Rope mrope_rope(mrope);
  std::vector<std::int64_t> streams(3 * 8, 0);
  AttentionArgs args;
  args.q = x.view(x.q, 2);
  args.k = x.view(x.k, 1);
  args.v = x.view(x.v, 1);
  args.out = bshd(out.data(), DType::F32, 1, 8, 2, 16);
  args.q_positions = args.k_positions = mrope_positions(streams);
  args.q_mask_positions = args.k_mask_positions = positions(x.pos);
  o.regimes = regimes::ReRope{.window = 4};
  EXPECT_ERROR(attention(mrope_rope, args, o), "options.regimes", "one position stream");
}

}  // namespace
