// ropekit::verify: the self-checks behind `ropekit verify` (see ropekit/analysis.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "analysis/verify_checks.hpp"
#include "ropekit/analysis.hpp"
#include "ropekit/error.hpp"
#include "ropekit/kv_cache.hpp"

namespace ropekit::detail {
namespace {

constexpr double kEps = 0x1p-24;  // float32 unit roundoff

std::vector<float> random_vector(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& e : x) e = dist(rng);
  return x;
}

// One position per token, repeated for every stream the spec needs (text tokens of M-RoPE).
struct TokenPositions {
  std::vector<std::int64_t> values;
  Positions view;
  TokenPositions(const Rope& rope, const std::vector<std::int64_t>& p) {
    const int axes = rope.pair_map().num_axes;
    for (int a = 0; a < axes; ++a) values.insert(values.end(), p.begin(), p.end());
    view = {values.data(), IndexType::I64, std::int64_t(p.size()), axes};
  }
};

Check check(std::string name, std::string what, double figure, double bound, std::string detail = {}) {
  return {std::move(name), std::move(what), figure, bound, figure <= bound, false, std::move(detail)};
}

}  // namespace

VerifyOps library_ops(const Rope& rope) {
  VerifyOps ops;
  ops.rotate = [&rope](const std::vector<float>& x, const std::vector<std::int64_t>& p, Direction direction,
                       bool on_the_fly) {
    const int d = rope.spec().head_dim;
    std::vector<float> in = x, out(x.size());
    const TokenPositions pos(rope, p);
    const RotateArgs args{.q = bshd(in.data(), DType::F32, 1, std::int64_t(p.size()), 1, d),
                          .q_out = bshd(out.data(), DType::F32, 1, std::int64_t(p.size()), 1, d),
                          .positions = pos.view,
                          .direction = direction};
    (on_the_fly ? rope.prepare_on_the_fly(args) : rope.prepare(args)).run();
    return out;
  };
  ops.shifted_keys = [&rope](const std::vector<float>& k, const std::vector<std::int64_t>& p,
                             const std::vector<std::int64_t>& deltas) {
    const int d = rope.spec().head_dim;
    const std::int64_t n = std::int64_t(p.size());
    std::vector<float> keys = k, values(k.size(), 0.0f);
    KvCache cache(rope, {.capacity = n, .kv_heads = 1});
    cache.append(rope, bshd(keys.data(), DType::F32, 1, n, 1, d), bshd(values.data(), DType::F32, 1, n, 1, d),
                 positions(p));
    for (const std::int64_t delta : deltas) cache.shift(0, n, delta);
    const auto* stored = static_cast<const float*>(cache.keys().data);
    return std::vector<float>(stored, stored + k.size());
  };
  ops.fused_attention = [&rope](const AttentionArgs& args) {
    std::vector<float> out(std::size_t(args.q.tokens() * args.q.heads * rope.spec().head_dim));
    AttentionArgs a = args;
    a.out = bshd(out.data(), DType::F32, a.q.batch, a.q.seq, a.q.heads, rope.spec().head_dim);
    attention(rope, a);
    return out;
  };
  ops.unfused_attention = [&rope](const AttentionArgs& args) {
    const int d = rope.spec().head_dim;
    std::vector<float> q_rot(std::size_t(args.q.tokens() * args.q.heads * d)),
        k_rot(std::size_t(args.k.tokens() * args.k.heads * d)), out(q_rot.size());
    rope.apply({.q = args.q,
                .q_out = bshd(q_rot.data(), DType::F32, 1, args.q.seq, args.q.heads, d),
                .positions = args.q_positions});
    rope.apply({.k = args.k,
                .k_out = bshd(k_rot.data(), DType::F32, 1, args.k.seq, args.k.heads, d),
                .positions = args.k_positions});
    AttentionArgs plain = args;
    plain.q = bshd(q_rot.data(), DType::F32, 1, args.q.seq, args.q.heads, d);
    plain.k = bshd(k_rot.data(), DType::F32, 1, args.k.seq, args.k.heads, d);
    plain.out = bshd(out.data(), DType::F32, 1, args.q.seq, args.q.heads, d);
    plain.head_dim = d;
    AttentionOptions o;
    o.softmax_scale_mult = rope.plan().softmax_scale_mult;
    attention(plain, o);
    return out;
  };
  return ops;
}

Check check_relative_position(const Rope& rope, const VerifyOps& ops) {
  const int d = rope.spec().head_dim;
  const double m2 = rope.plan().cos_sin_scale * rope.plan().cos_sin_scale;
  const std::vector<std::int64_t> distances = {0, 1, 17, 1000, 4095};
  const std::vector<std::int64_t> offsets = {0, 1000, std::int64_t{1} << 20, std::int64_t{1} << 30};
  const std::vector<float> q = random_vector(std::size_t(d), 1), k = random_vector(std::size_t(d), 2);
  double qn = 0, kn = 0;
  for (int l = 0; l < d; ++l) qn += double(q[l]) * q[l], kn += double(k[l]) * k[l];
  const double norm = std::sqrt(qn * kn) * m2;
  const auto logit = [&](std::int64_t m, std::int64_t n) {
    const std::vector<float> rq = ops.rotate(q, {m}, Direction::Forward, false),
                             rk = ops.rotate(k, {n}, Direction::Forward, false);
    double s = 0;
    for (int l = 0; l < d; ++l) s += double(rq[l]) * rk[l];
    return s;
  };
  double worst = 0.0;
  for (const std::int64_t r : distances) {
    const double base = logit(7 + r, 7);
    for (const std::int64_t t : offsets) worst = std::max(worst, std::fabs(logit(7 + r + t, 7 + t) - base) / norm);
  }
  return check("relative_position",
               "max |logit(m+t, n+t) − logit(m, n)| / (m²·|q|·|k|), m − n up to 4095, t up to 2^30", worst, 20 * kEps,
               "each logit is within 10 ε of exact (two rotations of ≤ 5 ε)");
}

Check check_table_accuracy(const Rope& rope, const VerifyOps& ops) {
  // Rotating the unit vector (1, 0) of every pair by R(p) gives m·(cos, sin) of each pair's angle:
  // the angles as apply() uses them, for this rope and for Hugging Face's float32 arithmetic.
  const Plan& plan = rope.plan();
  const Rope hf_rope(rope.spec(), plan, AngleMode::HfCompat);
  const VerifyOps hf_ops = library_ops(hf_rope);  // for comparison only
  const PairMap& map = rope.pair_map();
  std::vector<float> unit(std::size_t(rope.spec().head_dim), 0.0f);
  for (int j = 0; j < map.num_pairs(); ++j) unit[map.lane_a[j]] = 1.0f;
  const double m = plan.cos_sin_scale;
  double worst = 0.0, hf_worst = 0.0;
  for (const std::int64_t p : {std::int64_t{0}, std::int64_t{1}, std::int64_t{4095}, std::int64_t{1000000},
                               std::int64_t{1} << 20, (std::int64_t{1} << 31) - 1}) {
    const std::vector<float> got = ops.rotate(unit, {p}, Direction::Forward, false),
                             hf_got = hf_ops.rotate(unit, {p}, Direction::Forward, false);
    for (int j = 0; j < map.num_pairs(); ++j) {
      // Long-double oracle: p·ω needs 84 bits, long double keeps 64 (error ≤ 2^31·2^−64 rad).
      const long double angle = static_cast<long double>(p) * static_cast<long double>(plan.inv_freq[j]);
      const double c = double(std::cos(angle)), s = double(std::sin(angle));
      const int a = map.lane_a[j], b = map.lane_b[j];
      worst = std::max({worst, std::fabs(got[a] / m - c), std::fabs(got[b] / m - s)});
      hf_worst = std::max({hf_worst, std::fabs(hf_got[a] / m - c), std::fabs(hf_got[b] / m - s)});
    }
  }
  // The figure includes the float32 rounding of m·cos (the magnitude is not in the table).
  return check("table_accuracy", "max |cos, sin − exact| at positions 0 … 2^31 − 1 (long-double oracle)", worst, 1e-6,
               fmt::format("Hugging Face's float32 angles at the same positions: {:.3g}", hf_worst));
}

Check check_on_the_fly_equals_table(const Rope& rope, const VerifyOps& ops) {
  const int d = rope.spec().head_dim;
  std::vector<std::int64_t> p;
  for (std::int64_t i = 0; i < 64; ++i) p.push_back(i * 997);
  const std::vector<float> x = random_vector(p.size() * std::size_t(d), 3);
  const std::vector<float> a = ops.rotate(x, p, Direction::Forward, false),
                           b = ops.rotate(x, p, Direction::Forward, true);
  double differing = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differing += std::memcmp(&a[i], &b[i], 4) != 0;
  return check("on_the_fly_equals_table", "elements where on-the-fly angles differ from the table", differing, 0.0);
}

Check check_inverse_roundtrip(const Rope& rope, const VerifyOps& ops) {
  const int d = rope.spec().head_dim;
  const std::vector<std::int64_t> p = {0, 5, 4096, 1000003, std::int64_t{1} << 30};
  const std::vector<float> x = random_vector(p.size() * std::size_t(d), 4);
  const std::vector<float> back = ops.rotate(ops.rotate(x, p, Direction::Forward, false), p, Direction::Inverse, false);
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::fabs(double(back[i]) - x[i]));
    scale = std::max(scale, std::fabs(double(x[i])));
  }
  return check("inverse_roundtrip", "max |Inverse(Forward(x)) − x| / max|x|", worst / scale, 16 * kEps);
}

Check check_magnitude_once(const Rope& rope, const VerifyOps& ops) {
  const int d = rope.spec().head_dim;
  const std::vector<float> x = random_vector(std::size_t(d), 5);
  const std::vector<float> y = ops.rotate(x, {123457}, Direction::Forward, false);
  const PairMap& map = rope.pair_map();
  double worst = 0.0;
  for (int j = 0; j < map.num_pairs(); ++j) {
    const double before = std::hypot(double(x[map.lane_a[j]]), double(x[map.lane_b[j]]));
    const double after = std::hypot(double(y[map.lane_a[j]]), double(y[map.lane_b[j]]));
    worst = std::max(worst, std::fabs(after / (before * rope.plan().cos_sin_scale) - 1.0));
  }
  return check("magnitude_once", "max | |R(p)x_pair| / (cos_sin_scale·|x_pair|) − 1 |", worst, 4 * kEps,
               fmt::format("cos_sin_scale = {:.9g}", rope.plan().cos_sin_scale));
}

Check check_k_shift(const Rope& rope, const VerifyOps& ops) {
  if (rope.spec().num_axes() != 1) {
    Check c{"k_shift",
            "K-shift by δ vs appending at p + δ",
            0,
            0,
            true,
            true,
            "M-RoPE: the KV cache keeps one position per token"};
    return c;
  }
  const int d = rope.spec().head_dim;
  const std::int64_t n = 32;
  const std::vector<float> k = random_vector(std::size_t(n * d), 6);
  std::vector<std::int64_t> p(static_cast<std::size_t>(n)), shifted(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[i] = 5000 + 3 * i, shifted[i] = p[i] - 4321;
  std::vector<std::int64_t> deltas;
  for (int i = 0; i < 100; ++i) deltas.push_back(i % 2 == 0 ? -87 : 40);  // 50·(−87) + 50·40 = −2350
  deltas.push_back(-1971);                                                // total −4321
  const std::vector<float> a = ops.shifted_keys(k, p, deltas), b = ops.shifted_keys(k, shifted, {});
  const float* ka = a.data();
  const float* kb = b.data();
  const PairMap& map = rope.pair_map();
  double worst = 0.0;
  for (std::int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < map.num_pairs(); ++j) {
      const int la = map.lane_a[j], lb = map.lane_b[j];
      const double norm = std::hypot(double(k[t * d + la]), double(k[t * d + lb])) * rope.plan().cos_sin_scale;
      const double err = std::hypot(double(ka[t * d + la]) - kb[t * d + la], double(ka[t * d + lb]) - kb[t * d + lb]);
      worst = std::max(worst, err / (kEps * std::max(norm, 1e-30)));
    }
  }
  // The caches are within (5 + 2.5·shifts) ε·m·|pair| and 5 ε·m·|pair| of exact (attention.hpp).
  return check("k_shift", "101 K-shifts vs appending at the final position, max pair error in ε·m·|pair|", worst,
               5 + 101 * 2.5 + 5,
               "a magnitude compounded per shift (llama.cpp under YaRN) would fail by orders of magnitude");
}

Check check_fused_attention(const Rope& rope, const VerifyOps& ops) {
  const int d = rope.spec().head_dim;
  const std::int64_t seq = 100, heads = 4, kv_heads = 2;
  std::vector<float> q = random_vector(std::size_t(seq * heads * d), 7),
                     k = random_vector(std::size_t(seq * kv_heads * d), 8),
                     v = random_vector(std::size_t(seq * kv_heads * d), 9);
  std::vector<std::int64_t> p(static_cast<std::size_t>(seq));
  for (std::int64_t i = 0; i < seq; ++i) p[i] = 70000 + i;
  const TokenPositions pos(rope, p);
  const Positions order = positions(p);
  AttentionArgs args;
  args.q = bshd(q.data(), DType::F32, 1, seq, heads, d);
  args.k = bshd(k.data(), DType::F32, 1, seq, kv_heads, d);
  args.v = bshd(v.data(), DType::F32, 1, seq, kv_heads, d);
  args.q_positions = args.k_positions = pos.view;
  args.q_mask_positions = args.k_mask_positions = order;
  const std::vector<float> fused = ops.fused_attention(args), plain = ops.unfused_attention(args);
  double worst = fused.size() == plain.size() ? 0.0 : std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < std::min(fused.size(), plain.size()); ++i) {
    worst = std::max(worst, std::fabs(double(fused[i]) - plain[i]));
  }
  return check("fused_attention", "max |fused attention − apply() then attention| (causal, GQA 4/2)", worst, 0.0,
               fmt::format("softmax_scale_mult = {:.9g}", rope.plan().softmax_scale_mult));
}

}  // namespace ropekit::detail

namespace ropekit {

std::vector<Check> verify(const Spec& spec, std::optional<std::int64_t> current_length) {
  using namespace detail;
  const Rope rope(spec, AngleMode::Accurate, current_length);
  const VerifyOps ops = library_ops(rope);
  return {check_relative_position(rope, ops), check_table_accuracy(rope, ops), check_on_the_fly_equals_table(rope, ops),
          check_inverse_roundtrip(rope, ops), check_magnitude_once(rope, ops), check_k_shift(rope, ops),
          check_fused_attention(rope, ops)};
}

}  // namespace ropekit
