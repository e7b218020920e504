// attention_probe decode N | linear N — decode of one token over a KV cache of N tokens (32 q / 8 kv
// heads × 128, fp32): fused and apply-then-attention, in µs; or linear attention (RoFormer, causal,
// 8 heads × 64) over N tokens, in µs per token. Medians of 7 batches. Public API only, so it builds
// against any ropekit (bench/compare/README.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<std::int64_t> first_positions(std::int64_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[std::size_t(i)] = i;
  return p;
}

// Seconds per call: the median of 7 batches of at least min_seconds each, after one warm-up call.
double seconds_per_call(const std::function<void()>& f, double min_seconds) {
  f();
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    int calls = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      f();
      ++calls;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < min_seconds);
    t.push_back(elapsed / calls);
  }
  std::sort(t.begin(), t.end());
  return t[3];
}

void decode(std::int64_t n) {
  const int d = 128;
  const std::int64_t q_heads = 32, kv_heads = 8;
  const Rope rope(Spec{.head_dim = d, .rotary_dim = d, .base = 5e5, .pairing = Pairing::Half});
  KvCache cache(rope, {.capacity = n, .kv_heads = kv_heads});
  std::vector<float> k = random_floats(std::size_t(n * kv_heads * d), 4), v = random_floats(k.size(), 5);
  const std::vector<std::int64_t> pos = first_positions(n);
  cache.append(rope, bshd(k.data(), DType::F32, 1, n, kv_heads, d), bshd(v.data(), DType::F32, 1, n, kv_heads, d),
               positions(pos));
  std::vector<float> q = random_floats(std::size_t(q_heads * d), 6), q_rot(q.size()), out(q.size());
  const std::vector<std::int64_t> qp = {n};
  const Heads qv = bshd(q.data(), DType::F32, 1, 1, q_heads, d), ov = bshd(out.data(), DType::F32, 1, 1, q_heads, d);
  RotateArgs rotate;
  rotate.q = qv;
  rotate.q_out = bshd(q_rot.data(), DType::F32, 1, 1, q_heads, d);
  rotate.positions = positions(qp);
  AttentionArgs plain;
  plain.q = rotate.q_out;
  plain.k = cache.keys();
  plain.v = cache.values();
  plain.out = ov;
  plain.q_positions = positions(qp);
  plain.k_positions = cache.positions();
  plain.head_dim = d;
  const double fused = seconds_per_call([&] { attention(rope, qv, positions(qp), cache, ov); }, 0.05);
  const double unfused = seconds_per_call(
      [&] {
        rope.apply(rotate);
        attention(plain);
      },
      0.05);
  std::printf("decode %lld %.1f %.1f\n", static_cast<long long>(n), fused * 1e6, unfused * 1e6);
}

void linear(std::int64_t n) {
  const int d = 64;
  const std::int64_t heads = 8;
  const Rope rope(Spec{.head_dim = d, .rotary_dim = d, .base = 5e5, .pairing = Pairing::Half});
  std::vector<float> q = random_floats(std::size_t(n * heads * d), 7), k = random_floats(q.size(), 8),
                     v = random_floats(q.size(), 9), out(q.size());
  const std::vector<std::int64_t> pos = first_positions(n);
  AttentionArgs a;
  a.q = bshd(q.data(), DType::F32, 1, n, heads, d);
  a.k = bshd(k.data(), DType::F32, 1, n, heads, d);
  a.v = bshd(v.data(), DType::F32, 1, n, heads, d);
  a.out = bshd(out.data(), DType::F32, 1, n, heads, d);
  a.q_positions = a.k_positions = positions(pos);
  const double t = seconds_per_call([&] { linear_attention(rope, a); }, 0.05);
  std::printf("linear %lld %.2f\n", static_cast<long long>(n), t / double(n) * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::int64_t n = argc > 2 ? std::atol(argv[2]) : 0;
  if ((mode != "decode" && mode != "linear") || n <= 0) {
    std::fprintf(stderr, "usage: attention_probe decode|linear N\n");
    return 2;
  }
  mode == "decode" ? decode(n) : linear(n);
  return 0;
}
