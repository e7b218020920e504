// tests/model_oracle.hpp — an independent float64 Llama forward and the lab's protocol, written from
// the formulas (llama2.c's run.c; Hugging Face's rope_init functions for PI, NTK, YaRN, Llama 3 and
// dynamic NTK), sharing no code with src/model/: the reference `ropekit eval` is checked against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "ropekit/model.hpp"

namespace oracle {

// How one method rotates: inverse frequencies for a plan length L (L ≤ 0: the model's own), the
// magnitude multiplied into cos/sin, and which plan each key uses.
struct Method {
  std::function<std::vector<double>(std::int64_t length)> inv_freq;
  double magnitude = 1.0;
  enum class Keys { Same, PerQuery, AtAppend } keys = Keys::Same;  // Same: static plan
  std::int64_t window = 0;
  bool restart = false;
  // Position regimes: the logit of query i and key j is ⟨R(rel(i, j)) q, R(0) k⟩ (the relative-position
  // matrix, from the papers' definitions); absent: R(i) q against R(j) k.
  std::function<std::int64_t(std::int64_t, std::int64_t)> rel;
  std::int64_t logn_length = 0;  // > 0: logits of query i times max(1, ln(i+1)/ln(logn_length))
};

inline std::vector<double> default_inv_freq(double base, int d) {
  std::vector<double> f(std::size_t(d / 2));
  for (int i = 0; i < d / 2; ++i) f[std::size_t(i)] = std::pow(base, -2.0 * i / d);
  return f;
}

inline Method method(const std::string& name, int d, double base, double s, std::int64_t l0) {
  Method m;
  const auto plain = default_inv_freq(base, d);
  m.inv_freq = [plain](std::int64_t) { return plain; };
  if (name == "pi") {
    m.inv_freq = [plain, s](std::int64_t) {
      auto f = plain;
      for (double& x : f) x /= s;
      return f;
    };
  } else if (name == "ntk") {
    const double b = base * std::pow(s, double(d) / (d - 2));
    m.inv_freq = [b, d](std::int64_t) { return default_inv_freq(b, d); };
  } else if (name == "yarn" || name == "yarn_notemp") {
    auto dim_of = [&](double rotations) {
      return d * std::log(double(l0) / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
    };
    const double low = std::max(std::floor(dim_of(32)), 0.0);
    double high = std::min(std::ceil(dim_of(1)), double(d - 1));
    if (high == low) high += 0.001;
    std::vector<double> f(plain.size());
    for (std::size_t i = 0; i < f.size(); ++i) {
      const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1 - ramp;
      f[i] = plain[i] / s * (1 - extrapolation) + plain[i] * extrapolation;
    }
    m.inv_freq = [f](std::int64_t) { return f; };
    if (name == "yarn" && s > 1) m.magnitude = 0.1 * std::log(s) + 1;
  } else if (name == "llama3") {
    const double low_wavelen = double(l0) / 1.0, high_wavelen = double(l0) / 4.0;
    std::vector<double> f(plain.size());
    for (std::size_t i = 0; i < f.size(); ++i) {
      const double wavelen = 2 * std::numbers::pi / plain[i];
      if (wavelen < high_wavelen) {
        f[i] = plain[i];
      } else if (wavelen > low_wavelen) {
        f[i] = plain[i] / s;
      } else {
        const double smooth = (double(l0) / wavelen - 1.0) / (4.0 - 1.0);
        f[i] = (1 - smooth) * plain[i] / s + smooth * plain[i];
      }
    }
    m.inv_freq = [f](std::int64_t) { return f; };
  } else if (name == "dyn_ntk" || name == "dyn_ntk_stale") {
    m.inv_freq = [=](std::int64_t length) {
      if (length <= l0) return plain;
      const double b = base * std::pow(s * double(length) / double(l0) - (s - 1), double(d) / (d - 2));
      return default_inv_freq(b, d);
    };
    m.keys = name == "dyn_ntk" ? Method::Keys::PerQuery : Method::Keys::AtAppend;
  } else if (name == "swa") {
    m.window = l0;
  } else if (name == "restart") {
    m.restart = true;
  } else if (name == "rerope" || name == "rerope_logn") {  // w = 256 unless given below
    m.rel = [](std::int64_t i, std::int64_t j) { return std::min<std::int64_t>(i - j, 256); };
    if (name == "rerope_logn") m.logn_length = l0;
  } else if (name == "logn") {
    m.logn_length = l0;
  }
  return m;
}

// The regime methods with explicit parameters (the lab's NAME:key=value methods).
inline Method rerope(int d, double base, std::int64_t w, std::int64_t logn) {
  Method m = method("orig", d, base, 1.0, 1);
  m.rel = [w](std::int64_t i, std::int64_t j) { return i - j < w ? i - j : w; };
  m.logn_length = logn;
  return m;
}
inline Method self_extend(int d, double base, std::int64_t W, std::int64_t G) {
  Method m = method("orig", d, base, 1.0, 1);
  m.rel = [W, G](std::int64_t i, std::int64_t j) { return i - j < W ? i - j : i / G - j / G + W - W / G; };
  return m;
}
inline Method dca(int d, double base, std::int64_t chunk, std::int64_t local) {
  Method m = method("orig", d, base, 1.0, 1);
  const std::int64_t c = chunk - local;
  m.rel = [c, chunk](std::int64_t i, std::int64_t j) {
    if (i / c == j / c) return i % c - j % c;
    if (i / c == j / c + 1) return std::min(i % c + c, chunk) - j % c;
    return std::min(2 * c - 1, chunk) - j % c;
  };
  return m;
}

// Interleaved pairs (2i, 2i+1) rotated by position·f_i, times the magnitude.
inline void rotate(double* x, int d, std::int64_t position, const std::vector<double>& f, double magnitude) {
  for (int i = 0; i < d / 2; ++i) {
    const double a = double(position) * f[std::size_t(i)];
    const double c = std::cos(a) * magnitude, s = std::sin(a) * magnitude;
    const double x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x0 * s + x1 * c;
  }
}

// −log p(tokens[t+1] | tokens[0..t]) for t = 0 … n−2, the window read with `m` (bos: restart's cut).
// on_probs, when given, sees every (layer, query i, head h)'s attention distribution: the keys it sees and
// their probabilities.
using ProbabilitySink =
    std::function<void(int layer, int i, int h, const std::vector<int>& keys, const std::vector<double>& probs)>;
inline std::vector<double> window_nll(const ropekit::LlamaModel& model, const std::vector<int>& tokens, const Method& m,
                                      int bos, const ProbabilitySink& on_probs = nullptr) {
  const auto& c = model.config;
  const int n = int(tokens.size()), dim = c.dim, hd = c.head_dim(), kvd = c.kv_dim(), hidden = c.hidden_dim;
  const int group = c.n_heads / c.n_kv_heads;
  // Segment start of each token (restart) and its position.
  std::vector<int> segment(std::size_t(n), 0);
  for (int t = 1; t < n; ++t)
    segment[std::size_t(t)] = (m.restart && tokens[std::size_t(t)] == bos) ? t : segment[std::size_t(t - 1)];
  auto position = [&](int t) { return std::int64_t(t - (m.restart ? segment[std::size_t(t)] : 0)); };
  const std::size_t rows = std::size_t(n), width = std::size_t(dim);
  std::vector<std::vector<double>> x(rows, std::vector<double>(width));
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < dim; ++i)
      x[std::size_t(t)][std::size_t(i)] = model.token_embedding[std::size_t(tokens[std::size_t(t)] * dim + i)];
  }
  auto rms = [&](const std::vector<double>& v, const std::vector<float>& w) {
    double ss = 0;
    for (double a : v) ss += a * a;
    const double scale = 1 / std::sqrt(ss / double(v.size()) + double(c.norm_eps));
    std::vector<double> o(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) o[i] = double(w[i]) * v[i] * scale;
    return o;
  };
  auto matvec = [](const std::vector<float>& w, const std::vector<double>& v, int out) {
    std::vector<double> y(std::size_t(out), 0.0);
    const std::size_t in = v.size();
    for (int o = 0; o < out; ++o) {
      double acc = 0;
      for (std::size_t i = 0; i < in; ++i) acc += double(w[std::size_t(o) * in + i]) * v[i];
      y[std::size_t(o)] = acc;
    }
    return y;
  };
  int layer = -1;
  for (const auto& L : model.layers) {
    ++layer;
    std::vector<std::vector<double>> q(rows), k(rows), v(rows);
    for (int t = 0; t < n; ++t) {
      const auto xb = rms(x[std::size_t(t)], L.rms_att);
      q[std::size_t(t)] = matvec(L.wq, xb, dim);
      k[std::size_t(t)] = matvec(L.wk, xb, kvd);
      v[std::size_t(t)] = matvec(L.wv, xb, kvd);
    }
    for (int i = 0; i < n; ++i) {
      // After reading token i, i + 1 tokens have been read (the dynamic plan's length; restart and
      // static methods ignore it).
      const auto fq = m.inv_freq(m.keys == Method::Keys::Same ? 0 : i + 1);
      std::vector<double> out(std::size_t(dim), 0.0);
      for (int h = 0; h < c.n_heads; ++h) {
        std::vector<double> qh(q[std::size_t(i)].begin() + h * hd, q[std::size_t(i)].begin() + (h + 1) * hd);
        rotate(qh.data(), hd, position(i), fq, m.magnitude);
        const int kh = h / group;
        std::vector<double> logits;
        std::vector<int> keys;
        for (int j = 0; j <= i; ++j) {
          if (m.restart && segment[std::size_t(j)] != segment[std::size_t(i)]) continue;
          if (m.window > 0 && i - j >= m.window) continue;
          std::vector<double> kj(k[std::size_t(j)].begin() + kh * hd, k[std::size_t(j)].begin() + (kh + 1) * hd);
          const auto fk = m.keys == Method::Keys::AtAppend ? m.inv_freq(j + 1) : fq;
          std::vector<double> qr = qh;
          if (m.rel) {  // ⟨R(rel) q, R(0) k⟩
            qr.assign(q[std::size_t(i)].begin() + h * hd, q[std::size_t(i)].begin() + (h + 1) * hd);
            rotate(qr.data(), hd, m.rel(i, j), fq, m.magnitude);
            rotate(kj.data(), hd, 0, fk, m.magnitude);
          } else {
            rotate(kj.data(), hd, position(j), fk, m.magnitude);
          }
          double dot = 0;
          for (int l = 0; l < hd; ++l) dot += qr[std::size_t(l)] * kj[std::size_t(l)];
          const double logn = m.logn_length > 0 && i + 1 > m.logn_length
                                  ? std::log(double(i + 1)) / std::log(double(m.logn_length))
                                  : 1.0;
          logits.push_back(dot / std::sqrt(double(hd)) * logn);
          keys.push_back(j);
        }
        const double mx = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (double& l : logits) sum += (l = std::exp(l - mx));
        if (on_probs) {
          std::vector<double> probs(logits.size());
          for (std::size_t a = 0; a < probs.size(); ++a) probs[a] = logits[a] / sum;
          on_probs(layer, i, h, keys, probs);
        }
        for (std::size_t a = 0; a < keys.size(); ++a) {
          for (int l = 0; l < hd; ++l) {
            out[std::size_t(h * hd + l)] += logits[a] / sum * v[std::size_t(keys[a])][std::size_t(kh * hd + l)];
          }
        }
      }
      const auto o = matvec(L.wo, out, dim);
      for (int a = 0; a < dim; ++a) x[std::size_t(i)][std::size_t(a)] += o[std::size_t(a)];
    }
    for (int t = 0; t < n; ++t) {
      const auto xb = rms(x[std::size_t(t)], L.rms_ffn);
      auto h1 = matvec(L.w1, xb, hidden);
      const auto h3 = matvec(L.w3, xb, hidden);
      for (int a = 0; a < hidden; ++a) {
        const double g = h1[std::size_t(a)];
        h1[std::size_t(a)] = g / (1 + std::exp(-g)) * h3[std::size_t(a)];
      }
      const auto o = matvec(L.w2, h1, dim);
      for (int a = 0; a < dim; ++a) x[std::size_t(t)][std::size_t(a)] += o[std::size_t(a)];
    }
  }
  std::vector<double> nll;
  for (int t = 0; t + 1 < n; ++t) {
    const auto xb = rms(x[std::size_t(t)], model.rms_final);
    const auto logits = matvec(model.classifier.empty() ? model.token_embedding : model.classifier, xb, c.vocab_size);
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (double l : logits) sum += std::exp(l - mx);
    nll.push_back(mx + std::log(sum) - logits[std::size_t(tokens[std::size_t(t + 1)])]);
  }
  return nll;
}

}  // namespace oracle
