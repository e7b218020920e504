// bench/attention_bench — where RoPE is consumed, measured:
//   1. softmax attention with RoPE fused into its tile loads vs apply() then the same attention on
//      the rotated copies (the target: fused not slower), prefill and decode over a cache;
//   2. linear attention (RoFormer) vs softmax attention as the sequence grows: time per token.
// Each pair of contenders is timed interleaved (A, B, A, B, ...), median of the rounds, so both see
// the same machine state. Decode also reports its KV-cache read rate as a fraction of a memcpy of
// the same bytes timed in the same rounds (decode is bound by reading the cache).
//
//   attention_bench [--quick]     markdown tables on stdout
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;
using Clock = std::chrono::steady_clock;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Seconds per call of each function: median over `rounds` interleaved batches of ≥ min_seconds.
// Each batch starts with one unmeasured call of the same function, so every contender finds the
// caches as it leaves them (not as the previous contender, e.g. a memcpy, left them).
std::vector<double> interleaved(const std::vector<std::function<void()>>& fns, int rounds, double min_seconds) {
  std::vector<std::vector<double>> samples(fns.size());
  for (const auto& f : fns) f();  // warm up (tables, caches, thread pool)
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < fns.size(); ++i) {
      fns[i]();
      int calls = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      do {
        fns[i]();
        ++calls;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      } while (elapsed < min_seconds);
      samples[i].push_back(elapsed / calls);
    }
  }
  std::vector<double> median;
  for (auto& s : samples) {
    std::sort(s.begin(), s.end());
    median.push_back(s[s.size() / 2]);
  }
  return median;
}

std::vector<std::int64_t> first_positions(std::int64_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[i] = i;
  return p;
}

Spec llama(int d) { return {.head_dim = d, .rotary_dim = d, .base = 500000.0, .pairing = Pairing::Half}; }

struct Prefill {
  std::int64_t seq, q_heads, kv_heads;
  int d;
  DType dtype;
};

void fused_vs_unfused(const std::vector<Prefill>& cases, int rounds, double min_seconds) {
  fmt::print("## Softmax attention, prefill (causal): RoPE fused into the tile loads vs apply() then attention\n\n");
  fmt::print("| seq | q/kv heads | head_dim | dtype | fused ms | apply ms | attention ms | apply+attention ms | fused / (apply+attention) | fused GFLOP/s |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Prefill& c : cases) {
    const Rope rope(llama(c.d));
    const std::size_t es = std::size_t(element_size(c.dtype));
    const std::size_t qn = std::size_t(c.seq * c.q_heads * c.d), kn = std::size_t(c.seq * c.kv_heads * c.d);
    std::vector<std::byte> q(qn * es), k(kn * es), v(kn * es), q_rot(qn * es), k_rot(kn * es);
    const std::vector<float> rq = random_floats(qn, 1), rk = random_floats(kn, 2), rv = random_floats(kn, 3);
    const auto fill = [&](std::vector<std::byte>& dst, const std::vector<float>& src) {
      for (std::size_t i = 0; i < src.size(); ++i) {
        if (c.dtype == DType::F32) {
          std::memcpy(dst.data() + 4 * i, &src[i], 4);
        } else {
          const std::uint16_t b = float_to_bf16(src[i]);
          std::memcpy(dst.data() + 2 * i, &b, 2);
        }
      }
    };
    fill(q, rq), fill(k, rk), fill(v, rv);
    std::vector<float> out(qn);
    const std::vector<std::int64_t> pos = first_positions(c.seq);
    AttentionArgs args;
    args.q = bshd(q.data(), c.dtype, 1, c.seq, c.q_heads, c.d);
    args.k = bshd(k.data(), c.dtype, 1, c.seq, c.kv_heads, c.d);
    args.v = bshd(v.data(), c.dtype, 1, c.seq, c.kv_heads, c.d);
    args.out = bshd(out.data(), DType::F32, 1, c.seq, c.q_heads, c.d);
    args.q_positions = args.k_positions = positions(pos);
    AttentionArgs plain = args;
    plain.q = bshd(q_rot.data(), c.dtype, 1, c.seq, c.q_heads, c.d);
    plain.k = bshd(k_rot.data(), c.dtype, 1, c.seq, c.kv_heads, c.d);
    plain.head_dim = c.d;
    RotateArgs rotate;
    rotate.q = args.q;
    rotate.k = args.k;
    rotate.q_out = plain.q;
    rotate.k_out = plain.k;
    rotate.positions = args.q_positions;
    const auto t = interleaved({[&] { attention(rope, args); }, [&] { rope.apply(rotate); }, [&] { attention(plain); }},
                               rounds, min_seconds);
    const double flops = 2.0 * double(c.seq) * double(c.seq + 1) / 2.0 * double(c.q_heads) * 2.0 * c.d;
    fmt::print("| {} | {}/{} | {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.1f} |\n", c.seq, c.q_heads,
               c.kv_heads, c.d, to_string(c.dtype), t[0] * 1e3, t[1] * 1e3, t[2] * 1e3, (t[1] + t[2]) * 1e3,
               t[0] / (t[1] + t[2]), flops / t[0] * 1e-9);
  }
  fmt::print("\n");
}

void decode(const std::vector<std::int64_t>& cache_lengths, int rounds, double min_seconds) {
  fmt::print("## Softmax attention, decode: one token against a KV cache (32 q / 8 kv heads × 128, fp32)\n\n");
  fmt::print("| cached tokens | fused µs | apply+attention µs | fused / (apply+attention) | cache GB/s | memcpy GB/s | fraction |\n");
  fmt::print("|---|---|---|---|---|---|---|\n");
  const int d = 128;
  const std::int64_t q_heads = 32, kv_heads = 8;
  const Rope rope(llama(d));
  for (const std::int64_t n : cache_lengths) {
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
    const std::size_t bytes = std::size_t(2 * n * kv_heads * d * 4);
    std::vector<std::byte> src(bytes), dst(bytes);
    std::memset(src.data(), 1, bytes);
    const auto t = interleaved({[&] { attention(rope, qv, positions(qp), cache, ov); },
                                [&] { rope.apply(rotate); attention(plain); },
                                [&] { std::memcpy(dst.data(), src.data(), bytes); }},
                               rounds, min_seconds);
    const double gbps = double(bytes) / t[0] * 1e-9, copy = 2.0 * double(bytes) / t[2] * 1e-9;
    fmt::print("| {} | {:.1f} | {:.1f} | {:.3f} | {:.1f} | {:.1f} | {:.2f} |\n", n, t[0] * 1e6, t[1] * 1e6, t[0] / t[1], gbps,
               copy, gbps / copy);
  }
  fmt::print("\n(cache GB/s: K and V bytes read per call / time; memcpy GB/s: bytes read + written per second.)\n\n");
}

void linear_vs_softmax(const std::vector<std::int64_t>& lengths, int rounds, double min_seconds) {
  fmt::print("## Linear attention (RoFormer, recurrent) vs softmax attention, causal self-attention, 8 heads × 64, fp32\n\n");
  fmt::print("| seq | linear ms | linear µs/token | softmax ms | softmax µs/token |\n|---|---|---|---|---|\n");
  const int d = 64;
  const std::int64_t heads = 8;
  const Rope rope(llama(d));
  for (const std::int64_t n : lengths) {
    std::vector<float> q = random_floats(std::size_t(n * heads * d), 7), k = random_floats(q.size(), 8),
                       v = random_floats(q.size(), 9), out(q.size());
    const std::vector<std::int64_t> pos = first_positions(n);
    AttentionArgs a;
    a.q = bshd(q.data(), DType::F32, 1, n, heads, d);
    a.k = bshd(k.data(), DType::F32, 1, n, heads, d);
    a.v = bshd(v.data(), DType::F32, 1, n, heads, d);
    a.out = bshd(out.data(), DType::F32, 1, n, heads, d);
    a.q_positions = a.k_positions = positions(pos);
    const auto t = interleaved({[&] { linear_attention(rope, a); }, [&] { attention(rope, a); }}, rounds, min_seconds);
    fmt::print("| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", n, t[0] * 1e3, t[0] / double(n) * 1e6, t[1] * 1e3,
               t[1] / double(n) * 1e6);
  }
  fmt::print("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (argc > 1 && !quick) {
    fmt::print(stderr, "usage: attention_bench [--quick]\n");
    return 2;
  }
  fmt::print("threads: {}, SIMD target: {}\n\n", default_threads(), simd_target());
  const int rounds = quick ? 1 : 7;
  const double min_seconds = quick ? 0.0 : 0.05;
  if (quick) {
    fused_vs_unfused({{128, 4, 2, 64, DType::F32}}, rounds, min_seconds);
    decode({256}, rounds, min_seconds);
    linear_vs_softmax({128, 256}, rounds, min_seconds);
    return 0;
  }
  fused_vs_unfused({{512, 32, 8, 128, DType::F32}, {512, 32, 8, 128, DType::BF16}, {2048, 8, 2, 128, DType::F32},
                    {2048, 8, 2, 128, DType::BF16}, {4096, 8, 8, 64, DType::F32}},
                   rounds, min_seconds);
  decode({512, 4096, 32768}, rounds, min_seconds);
  linear_vs_softmax({256, 512, 1024, 2048, 4096, 8192}, rounds, min_seconds);
  return 0;
}
