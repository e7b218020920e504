// tests/attention_oracle.hpp — softmax attention in double on contiguous BSHD float arrays, and
// random test data. The oracle shares no code with src/attention/ or src/cpu/attention-inl.h: one loop per definition.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "ropekit/dtype.hpp"

namespace attn_oracle {

struct Shape {
  std::int64_t batch = 1, q_seq = 0, k_seq = 0, q_heads = 1, kv_heads = 1;
  int d = 0, dv = 0;
};

// bias(b, h, s, t, query_position, key_position); masked keys are skipped before it is called.
using Bias = std::function<double(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t)>;

struct Result {
  std::vector<double> out;          // [b, s, h, dv]
  std::vector<double> logit_range;  // per row (b, s, h): max − min visible logit (0 when none)
};

inline Result softmax_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                const Shape& sh, const std::vector<std::int64_t>& q_pos,
                                const std::vector<std::int64_t>& k_pos, double scale, bool causal, std::int64_t window,
                                const Bias& bias = {}, double softcap = 0.0) {
  Result r;
  r.out.assign(std::size_t(sh.batch * sh.q_seq * sh.q_heads * sh.dv), 0.0);
  r.logit_range.assign(std::size_t(sh.batch * sh.q_seq * sh.q_heads), 0.0);
  const std::int64_t group = sh.q_heads / sh.kv_heads;
  for (std::int64_t b = 0; b < sh.batch; ++b) {
    for (std::int64_t s = 0; s < sh.q_seq; ++s) {
      for (std::int64_t h = 0; h < sh.q_heads; ++h) {
        const std::int64_t kh = h / group;
        const std::int64_t qp = q_pos[b * sh.q_seq + s];
        const float* qr = q.data() + ((b * sh.q_seq + s) * sh.q_heads + h) * sh.d;
        std::vector<double> logits(std::size_t(sh.k_seq), -std::numeric_limits<double>::infinity());
        double hi = -std::numeric_limits<double>::infinity(), lo = -hi;
        for (std::int64_t t = 0; t < sh.k_seq; ++t) {
          const std::int64_t kp = k_pos[b * sh.k_seq + t];
          if (causal && kp > qp) continue;
          if (window > 0 && qp - kp >= window) continue;
          const float* kr = k.data() + ((b * sh.k_seq + t) * sh.kv_heads + kh) * sh.d;
          double dot = 0.0;
          for (int l = 0; l < sh.d; ++l) dot += double(qr[l]) * double(kr[l]);
          const double scaled = softcap > 0 ? softcap * std::tanh(dot * scale / softcap) : dot * scale;
          logits[t] = scaled + (bias ? bias(b, h, s, t, qp, kp) : 0.0);
          hi = std::max(hi, logits[t]);
          lo = std::min(lo, logits[t]);
        }
        if (hi == -std::numeric_limits<double>::infinity()) continue;
        r.logit_range[(b * sh.q_seq + s) * sh.q_heads + h] = hi - lo;
        double sum = 0.0;
        double* o = r.out.data() + ((b * sh.q_seq + s) * sh.q_heads + h) * sh.dv;
        for (std::int64_t t = 0; t < sh.k_seq; ++t) {
          if (logits[t] == -std::numeric_limits<double>::infinity()) continue;
          const double p = std::exp(logits[t] - hi);
          sum += p;
          const float* vr = v.data() + ((b * sh.k_seq + t) * sh.kv_heads + kh) * sh.dv;
          for (int l = 0; l < sh.dv; ++l) o[l] += p * vr[l];
        }
        for (int l = 0; l < sh.dv; ++l) o[l] /= sum;
      }
    }
  }
  return r;
}

inline std::vector<float> normal(std::size_t n, std::uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

inline std::vector<float> widen_bf16(const std::vector<std::uint16_t>& x) {
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = ropekit::bf16_to_float(x[i]);
  return y;
}

inline std::vector<std::uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<std::uint16_t> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = ropekit::float_to_bf16(x[i]);
  return y;
}

}  // namespace attn_oracle
