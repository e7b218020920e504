// Linear attention with RoPE (RoFormer eq. 19): recurrent = parallel = a double oracle; rotation
// on the numerator only; outputs depend on relative positions only.
#include <gtest/gtest.h>

#include <cmath>

#include "attention_oracle.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"
#include "ropekit/ropekit.hpp"
#include "targets.hpp"

namespace {

using namespace ropekit;

struct Problem {
  Spec spec{.head_dim = 32, .rotary_dim = 32, .base = 10000.0, .pairing = Pairing::Half};
  std::int64_t seq = 120, q_heads = 4, kv_heads = 2;
  int dv = 24;
  std::vector<float> q, k, v;
  std::vector<std::int64_t> pos;

  explicit Problem(std::uint32_t seed, std::int64_t offset = 0) {
    q = attn_oracle::normal(std::size_t(seq * q_heads * spec.head_dim), seed);
    k = attn_oracle::normal(std::size_t(seq * kv_heads * spec.head_dim), seed + 1);
    v = attn_oracle::normal(std::size_t(seq * kv_heads * dv), seed + 2);
    for (std::int64_t t = 0; t < seq; ++t) pos.push_back(offset + t);
  }

  std::vector<float> run(const Rope& rope, bool causal, LinearAttentionForm form) {
    std::vector<float> out(std::size_t(seq * q_heads * dv));
    AttentionArgs a;
    a.q = bshd(q.data(), DType::F32, 1, seq, q_heads, spec.head_dim);
    a.k = bshd(k.data(), DType::F32, 1, seq, kv_heads, spec.head_dim);
    a.v = bshd(v.data(), DType::F32, 1, seq, kv_heads, dv);
    a.out = bshd(out.data(), DType::F32, 1, seq, q_heads, dv);
    a.q_positions = a.k_positions = positions(pos);
    a.v_head_dim = dv;
    linear_attention(rope, a, causal, form);
    return out;
  }

  // Eq. 19 in double: φ in double, rotation by the double oracle, numerator rotated only.
  std::vector<double> oracle(const Rope& rope, bool causal) const {
    const int d = spec.head_dim;
    const auto phi = [](double x) { return x > 0 ? x + 1 : std::exp(x); };
    const auto features = [&](const std::vector<float>& x, std::int64_t t, std::int64_t heads, std::int64_t h,
                              bool rotate) {
      std::vector<double> f(d);
      for (int l = 0; l < d; ++l) f[l] = phi(x[(t * heads + h) * d + l]);
      return rotate ? oracle::rotate(spec, rope.plan(), f, &pos[t]) : f;
    };
    std::vector<double> out(std::size_t(seq * q_heads * dv));
    const std::int64_t group = q_heads / kv_heads;
    std::vector<std::vector<double>> rk(std::size_t(seq * kv_heads)), pk(rk.size());
    for (std::int64_t n = 0; n < seq; ++n) {
      for (std::int64_t h = 0; h < kv_heads; ++h) {
        rk[n * kv_heads + h] = features(k, n, kv_heads, h, true);
        pk[n * kv_heads + h] = features(k, n, kv_heads, h, false);
      }
    }
    for (std::int64_t h = 0; h < q_heads; ++h) {
      for (std::int64_t m = 0; m < seq; ++m) {
        const auto rq = features(q, m, q_heads, h, true), pq = features(q, m, q_heads, h, false);
        double den = 0;
        std::vector<double> num(dv, 0.0);
        for (std::int64_t n = 0; n < (causal ? m + 1 : seq); ++n) {
          const auto& rkn = rk[n * kv_heads + h / group];
          const auto& pkn = pk[n * kv_heads + h / group];
          double w = 0, u = 0;
          for (int l = 0; l < d; ++l) w += rq[l] * rkn[l], u += pq[l] * pkn[l];
          den += u;
          for (int l = 0; l < dv; ++l) num[l] += w * v[(n * kv_heads + h / group) * dv + l];
        }
        for (int l = 0; l < dv; ++l) out[(m * q_heads + h) * dv + l] = num[l] / den;
      }
    }
    return out;
  }
};

double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst / scale;
}

class LinearAttention : public targets::PerTarget {};
ROPEKIT_PER_TARGET(LinearAttention);

TEST_P(LinearAttention, RecurrentAndParallelAgreeWithTheOracle) {
  for (const bool causal : {true, false}) {
    Problem p(1);
    const Rope rope(p.spec);
    const std::vector<double> want = p.oracle(rope, causal);
    const auto recurrent = p.run(rope, causal, LinearAttentionForm::Recurrent);
    const auto parallel = p.run(rope, causal, LinearAttentionForm::Parallel);
    const double e_rec = max_rel_error(recurrent, want), e_par = max_rel_error(parallel, want);
    std::printf("%s: recurrent %.2e, parallel %.2e (max error / max |out|)\n", causal ? "causal" : "bidirectional",
                e_rec, e_par);
    EXPECT_LE(e_rec, 1e-5);
    EXPECT_LE(e_par, 1e-5);
    double diff = 0;
    for (std::size_t i = 0; i < recurrent.size(); ++i)
      diff = std::max(diff, double(std::fabs(recurrent[i] - parallel[i])));
    EXPECT_LE(diff, 1e-5 * (*std::max_element(want.begin(), want.end(),
                                              [](double a, double b) { return std::fabs(a) < std::fabs(b); })) +
                        1e-5);
  }
}

TEST_P(LinearAttention, RotationIsOnTheNumeratorOnly) {
  // Token 1 (position 1) of head 0 by hand: keys 0 and 1, numerator rotated, denominator not.
  Problem p(2);
  const Rope rope(p.spec);
  const auto got = p.run(rope, true, LinearAttentionForm::Recurrent);
  const int d = p.spec.head_dim;
  const auto phi = [&](const std::vector<float>& x, std::int64_t row) {
    std::vector<double> f(d);
    for (int l = 0; l < d; ++l) f[l] = x[row * d + l] > 0 ? x[row * d + l] + 1.0 : std::exp(double(x[row * d + l]));
    return f;
  };
  const auto dot = [d](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (int l = 0; l < d; ++l) s += a[l] * b[l];
    return s;
  };
  const auto fq = phi(p.q, 1 * p.q_heads);  // token 1, head 0
  const auto rq = oracle::rotate(p.spec, rope.plan(), fq, &p.pos[1]);
  double num = 0, den = 0, den_rotated = 0;
  for (std::int64_t n = 0; n < 2; ++n) {
    const auto fk = phi(p.k, n * p.kv_heads);
    const auto rk = oracle::rotate(p.spec, rope.plan(), fk, &p.pos[n]);
    num += dot(rq, rk) * p.v[n * p.kv_heads * p.dv];
    den += dot(fq, fk);
    den_rotated += dot(rq, rk);
  }
  const float out = got[1 * p.q_heads * p.dv];
  EXPECT_NEAR(out, num / den, 1e-5 * std::fabs(num / den));
  EXPECT_GT(std::fabs(num / den_rotated - num / den), 1e-3 * std::fabs(num / den));  // the mistake would show
}

TEST_P(LinearAttention, OutputsDependOnRelativePositionsOnly) {
  Problem near(3, 0), far(3, 1 << 20);
  const Rope rope(near.spec);
  const auto a = near.run(rope, true, LinearAttentionForm::Recurrent);
  const auto b = far.run(rope, true, LinearAttentionForm::Recurrent);
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, double(std::fabs(a[i])));
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
  }
  EXPECT_LE(diff, 1e-5 * scale);
}

TEST_P(LinearAttention, BadInput) {
  Problem p(4);
  const Rope rope(p.spec);
  std::vector<float> out(std::size_t(p.seq * p.q_heads * p.dv));
  AttentionArgs a;
  a.q = bshd(p.q.data(), DType::F32, 1, p.seq, p.q_heads, 32);
  a.k = bshd(p.k.data(), DType::F32, 1, p.seq - 1, p.kv_heads, 32);
  a.v = bshd(p.v.data(), DType::F32, 1, p.seq - 1, p.kv_heads, p.dv);
  a.out = bshd(out.data(), DType::F32, 1, p.seq, p.q_heads, p.dv);
  a.q_positions = positions(p.pos);
  a.k_positions = positions(std::span(p.pos).first(std::size_t(p.seq - 1)));
  a.v_head_dim = p.dv;
  EXPECT_ERROR(linear_attention(rope, a, true), "causal needs q.seq = k.seq");
  linear_attention(rope, a, false);  // bidirectional cross-attention is fine
  a.k = bshd(p.k.data(), DType::F32, 1, p.seq - 1, 3, 32);
  EXPECT_ERROR(linear_attention(rope, a, false), "k.heads = 3");
}

}  // namespace
