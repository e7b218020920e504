// bench/attention_bench — where RoPE is consumed, measured:
//   1. softmax attention with RoPE fused into its tile loads vs apply() then the same attention on
//      the rotated copies, for the attention perf cases of the case table (bench/lib/cases.hpp):
//      prefill, and decode of one token against a KV cache (with the cache's read rate as a fraction
//      of a memcpy of the same bytes timed in the same rounds: decode is bound by reading the cache);
//   2. linear attention (RoFormer) vs softmax attention as the sequence grows: time per token;
//   3. position regimes (ReRoPE, SelfExtend, dual-chunk, log-n) vs plain fused attention, prefill of
//      4096 tokens and decode at 4096 cached tokens (issue target: ≤ 2× plain for two regimes);
//   4. decode of many sequences over one PagedKvCache vs one contiguous KvCache per sequence, and over
//      an fp8 PagedKvCache holding the same tokens.
// Each pair of contenders is timed interleaved (A, B, A, B, ...), median of the rounds, so both see
// the same machine state (bench::interleaved).
//
//   attention_bench [--quick] [--regimes | --paged] [--target NAME]   markdown tables on stdout
//                                                     (--regimes: 3 only; --paged: 4 only)
#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lib/ceilings.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;
using bench::interleaved;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::int64_t> first_positions(std::int64_t n) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[i] = i;
  return p;
}

Spec llama(int d) { return {.head_dim = d, .rotary_dim = d, .base = 500000.0, .pairing = Pairing::Half}; }

void fused_vs_unfused(const std::vector<cases::Case>& selected, int rounds, double min_seconds) {
  fmt::print("## Softmax attention, prefill: RoPE fused into the tile loads vs apply() then attention\n\n");
  fmt::print("| case | fused ms | apply+attention ms | fused / (apply+attention) | fused GFLOP/s |\n");
  fmt::print("|---|---|---|---|---|\n");
  for (const cases::Case& c : selected) {
    if (c.op != cases::Op::Attention) continue;
    cases::Workload w(c, 1);
    const auto t = interleaved({[&] { w.run(); }, [&] { w.run_unfused(); }}, rounds, min_seconds);
    const double flops = 2.0 * double(c.seq) * double(c.k_seq + 1) / 2.0 * double(c.q_heads) * 2.0 * c.head_dim();
    fmt::print("| {} | {:.3f} | {:.3f} | {:.3f} | {:.1f} |\n", c.name(), t[0] * 1e3, t[1] * 1e3, t[0] / t[1],
               flops / t[0] * 1e-9);
  }
  fmt::print("\n");
}

void decode(const std::vector<cases::Case>& selected, int rounds, double min_seconds) {
  fmt::print("## Softmax attention, decode: one token against a KV cache\n\n");
  fmt::print(
      "| case | fused µs | apply+attention µs | fused / (apply+attention) | cache GB/s | memcpy GB/s | fraction |\n");
  fmt::print("|---|---|---|---|---|---|---|\n");
  for (const cases::Case& c : selected) {
    if (c.op != cases::Op::CacheAttention) continue;
    cases::Workload w(c, 1);
    const std::size_t bytes = std::size_t(c.k_seq * c.k_heads * (c.head_dim() + c.value_dim()) * element_size(c.dtype));
    std::vector<std::byte> src(bytes), dst(bytes);
    std::memset(src.data(), 1, bytes);
    const auto t =
        interleaved({[&] { w.run(); }, [&] { w.run_unfused(); }, [&] { std::memcpy(dst.data(), src.data(), bytes); }},
                    rounds, min_seconds);
    const double gbps = double(bytes) / t[0] * 1e-9, copy = 2.0 * double(bytes) / t[2] * 1e-9;
    fmt::print("| {} | {:.1f} | {:.1f} | {:.3f} | {:.1f} | {:.1f} | {:.2f} |\n", c.name(), t[0] * 1e6, t[1] * 1e6,
               t[0] / t[1], gbps, copy, gbps / copy);
  }
  fmt::print("\n(cache GB/s: K and V bytes read per call / time; memcpy GB/s: bytes read + written per second.)\n\n");
}

void linear_vs_softmax(const std::vector<std::int64_t>& lengths, int rounds, double min_seconds) {
  fmt::print(
      "## Linear attention (RoFormer, recurrent) vs softmax attention, causal self-attention, 8 heads × 64, fp32\n\n");
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

// Position regimes (ReRoPE, SelfExtend, dual-chunk) against plain fused attention on the same data, in
// the same rounds: prefill of n tokens (q, k, v raw; the rotations fused into the tile loads) and decode
// of one token against n cached tokens (each contender's cache holds the keys as it reads them: rotated
// for plain attention, unrotated for ReRoPE / SelfExtend, chunk-relative for DCA). Parameters as for a
// model trained at L0 = n / 4: ReRoPE w = L0, SelfExtend W = L0 / 2, G = 8, DCA chunk = L0, local = L0 / 32.
void regimes_vs_plain(std::int64_t n, std::int64_t prefill_heads, int rounds, double min_seconds) {
  const std::int64_t l0 = n / 4;
  const std::vector<std::pair<std::string, PositionRegimes>> contenders = {
      {"plain", PositionRegimes{}},
      {fmt::format("rerope w={}", l0), regimes::ReRope{.window = l0}},
      {fmt::format("self_extend W={} G=8", l0 / 2), regimes::SelfExtend{.window = l0 / 2, .group = 8}},
      {fmt::format("dca chunk={} local={}", l0, l0 / 32), regimes::DualChunk{.chunk_size = l0, .local_size = l0 / 32}},
      {"plain + logn", PositionRegimes{}}};
  const int d = 128;
  const Rope rope(llama(d));
  for (DType dt : {DType::F32, DType::BF16}) {
    const std::size_t es = std::size_t(element_size(dt));
    const auto make = [&](std::int64_t tokens, std::int64_t heads, unsigned seed) {
      const std::vector<float> f = random_floats(std::size_t(tokens * heads * d), seed);
      std::vector<std::byte> out(f.size() * es);
      for (std::size_t i = 0; i < f.size(); ++i) {
        if (dt == DType::F32) {
          std::memcpy(out.data() + 4 * i, &f[i], 4);
        } else {
          const std::uint16_t h = float_to_bf16(f[i]);
          std::memcpy(out.data() + 2 * i, &h, 2);
        }
      }
      return out;
    };
    const std::vector<std::int64_t> pos = first_positions(n + 1);
    // Prefill: prefill_heads query heads over prefill_heads / 4 kv heads.
    const std::int64_t hq = prefill_heads, hk = std::max<std::int64_t>(1, prefill_heads / 4);
    std::vector<std::byte> q = make(n, hq, 1), k = make(n, hk, 2), v = make(n, hk, 3);
    std::vector<float> out(std::size_t(n * hq * d));
    AttentionArgs a;
    a.q = bshd(q.data(), dt, 1, n, hq, d);
    a.k = bshd(k.data(), dt, 1, n, hk, d);
    a.v = bshd(v.data(), dt, 1, n, hk, d);
    a.out = bshd(out.data(), DType::F32, 1, n, hq, d);
    a.q_positions = a.k_positions = positions(std::span<const std::int64_t>(pos.data(), std::size_t(n)));
    std::vector<std::function<void()>> prefill;
    for (std::size_t c = 0; c < contenders.size(); ++c) {
      AttentionOptions o;
      o.regimes = contenders[c].second;
      if (c + 1 == contenders.size()) o.logn_length = l0;
      prefill.push_back([&, o] { attention(rope, a, o); });
    }
    const auto tp = interleaved(prefill, rounds, min_seconds);
    // Decode: 32 query heads over 8 kv heads, one token at position n against n cached tokens.
    std::vector<std::byte> dk = make(n, 8, 4), dv = make(n, 8, 5), dq = make(1, 32, 6);
    std::vector<float> one(32 * d);
    std::vector<KvCache> caches;
    for (const auto& [name, regimes] : contenders) {
      caches.emplace_back(rope, KvCacheShape{.capacity = n, .kv_heads = 8, .dtype = dt, .regimes = regimes});
      caches.back().append(rope, bshd(dk.data(), dt, 1, n, 8, d), bshd(dv.data(), dt, 1, n, 8, d),
                           positions(std::span<const std::int64_t>(pos.data(), std::size_t(n))));
    }
    const Positions at = positions(std::span<const std::int64_t>(pos.data() + n, 1));
    std::vector<std::function<void()>> decode_calls;
    for (std::size_t c = 0; c < contenders.size(); ++c) {
      AttentionOptions o;
      if (c + 1 == contenders.size()) o.logn_length = l0;
      decode_calls.push_back([&, c, o] {
        attention(rope, bshd(dq.data(), dt, 1, 1, 32, d), at, caches[c], bshd(one.data(), DType::F32, 1, 1, 32, d), o);
      });
    }
    const auto td = interleaved(decode_calls, rounds, min_seconds);
    fmt::print(
        "## Position regimes vs plain fused attention, {}: prefill {} tokens ({} q / {} kv heads × 128), "
        "decode at {} cached tokens (32 q / 8 kv heads × 128)\n\n",
        to_string(dt), n, hq, hk, n);
    fmt::print("| method | prefill ms | / plain | decode µs | / plain |\n|---|---|---|---|---|\n");
    for (std::size_t c = 0; c < contenders.size(); ++c) {
      fmt::print("| {} | {:.2f} | {:.2f} | {:.1f} | {:.2f} |\n", contenders[c].first, tp[c] * 1e3, tp[c] / tp[0],
                 td[c] * 1e6, td[c] / td[0]);
    }
    fmt::print("\n");
  }
}

}  // namespace

// Decode over many sequences: one attention call over a PagedKvCache (sequences appended in turns of
// one page each, so their pages interleave) against one call per sequence over its own contiguous
// KvCache holding the same tokens; the same tokens in an fp8 (e4m3) paged cache (KvCache has no fp8:
// no contiguous peer); and a memcpy of the K and V bytes each reads, timed in the same rounds.
void paged_vs_contiguous(int rounds, double min_seconds, bool quick) {
  fmt::print("## Decode over a paged cache vs contiguous caches (32 q / 8 kv heads × 128, pages of 16)\n\n");
  fmt::print(
      "| sequences × cached tokens | cache | paged µs | contiguous µs | paged / contiguous | cache GB/s | of memcpy "
      "|\n");
  fmt::print("|---|---|---|---|---|---|---|\n");
  const Spec spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = Pairing::Half};
  const Rope rope(spec);
  const std::int64_t q_heads = 32, kv = 8, d = 128, page_size = 16;
  for (const auto& sizes : {std::pair<std::int64_t, std::int64_t>{1, quick ? 256 : 4096},
                            std::pair<std::int64_t, std::int64_t>{16, quick ? 64 : 1024}}) {
    // Named copies, not a structured binding: clang 14 cannot capture bindings in the lambdas below.
    const std::int64_t batch = sizes.first, n = sizes.second;
    const auto paged_cache = [&](CacheDType dtype) {
      return PagedKvCache(rope, {.num_pages = batch * (n / page_size),
                                 .page_size = page_size,
                                 .kv_heads = kv,
                                 .dtype = dtype,
                                 .max_sequences = int(batch)});
    };
    PagedKvCache paged = paged_cache(CacheDType::BF16), paged_fp8 = paged_cache(CacheDType::F8E4M3);
    std::vector<KvCache> contiguous;
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    const auto bf16 = [&](std::int64_t count) {
      std::vector<std::uint16_t> x(static_cast<std::size_t>(count));
      for (auto& e : x) e = float_to_bf16(normal(rng));
      return x;
    };
    std::vector<std::vector<std::uint16_t>> k, v;
    std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
    std::iota(pos.begin(), pos.end(), 0);
    for (std::int64_t s = 0; s < batch; ++s) {
      k.push_back(bf16(n * kv * d));
      v.push_back(bf16(n * kv * d));
      contiguous.emplace_back(rope, KvCacheShape{.capacity = n, .kv_heads = kv, .dtype = DType::BF16});
      contiguous.back().append(rope, bshd(k.back().data(), DType::BF16, 1, n, kv, d),
                               bshd(v.back().data(), DType::BF16, 1, n, kv, d), positions(pos));
    }
    for (std::int64_t first = 0; first < n; first += page_size) {
      for (std::int64_t s = 0; s < batch; ++s) {
        std::vector<std::int32_t> seq_of(static_cast<std::size_t>(page_size), std::int32_t(s));
        const std::size_t at = static_cast<std::size_t>(first * kv * d);
        const AppendArgs page{.k = bshd(k[std::size_t(s)].data() + at, DType::BF16, 1, page_size, kv, d),
                              .v = bshd(v[std::size_t(s)].data() + at, DType::BF16, 1, page_size, kv, d),
                              .positions = positions(std::span<const std::int64_t>(pos).subspan(
                                  std::size_t(first), std::size_t(page_size)))};
        paged.append(rope, seq_of, page);
        paged_fp8.append(rope, seq_of, page);
      }
    }
    std::vector<std::uint16_t> q = bf16(batch * q_heads * d), out(q.size());
    const std::vector<std::int64_t> q_pos(static_cast<std::size_t>(batch), n);
    std::vector<std::int32_t> seq_of(static_cast<std::size_t>(batch));
    std::iota(seq_of.begin(), seq_of.end(), 0);
    const std::size_t bytes = std::size_t(batch * n * kv * 2 * d * 2), fp8_bytes = bytes / 2;
    std::vector<std::byte> src(bytes), dst(bytes);
    std::memset(src.data(), 1, bytes);
    const auto over = [&](const PagedKvCache& cache) {
      return [&] {
        attention(rope, bshd(q.data(), DType::BF16, 1, batch, q_heads, d), positions(q_pos), seq_of, cache,
                  bshd(out.data(), DType::BF16, 1, batch, q_heads, d));
      };
    };
    const auto t = interleaved({over(paged),
                                [&] {
                                  for (std::int64_t s = 0; s < batch; ++s) {
                                    const std::vector<std::int64_t> one = {n};
                                    attention(rope, bshd(q.data() + s * q_heads * d, DType::BF16, 1, 1, q_heads, d),
                                              positions(one), contiguous[std::size_t(s)],
                                              bshd(out.data() + s * q_heads * d, DType::BF16, 1, 1, q_heads, d));
                                  }
                                },
                                [&] { std::memcpy(dst.data(), src.data(), bytes); }, over(paged_fp8),
                                [&] { std::memcpy(dst.data(), src.data(), fp8_bytes); }},
                               rounds, min_seconds);
    const double gbps = double(bytes) / t[0] * 1e-9, copy = 2.0 * double(bytes) / t[2] * 1e-9;
    const double fp8_gbps = double(fp8_bytes) / t[3] * 1e-9, fp8_copy = 2.0 * double(fp8_bytes) / t[4] * 1e-9;
    fmt::print("| {} × {} | bf16 | {:.1f} | {:.1f} | {:.2f} | {:.1f} | {:.2f} |\n", batch, n, t[0] * 1e6, t[1] * 1e6,
               t[0] / t[1], gbps, gbps / copy);
    fmt::print("| {} × {} | f8e4m3 | {:.1f} | — | {:.2f} (of bf16 contiguous) | {:.1f} | {:.2f} |\n", batch, n,
               t[3] * 1e6, t[3] / t[1], fp8_gbps, fp8_gbps / fp8_copy);
  }
  fmt::print(
      "\n(cache GB/s: K and V bytes read per call / time; of memcpy: that over memcpy's read + write rate.)\n\n");
}

int main(int argc, char** argv) {
  bool quick = false, regimes_only = false, paged_only = false;
  std::string target;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--regimes") {
      regimes_only = true;
    } else if (arg == "--paged") {
      paged_only = true;
    } else if (arg == "--target" && i + 1 < argc) {
      target = argv[++i];
    } else {
      fmt::print(stderr, "usage: attention_bench [--quick] [--regimes | --paged] [--target NAME]\n");
      return 2;
    }
  }
  try {
    set_simd_target(target);
  } catch (const Error& e) {
    fmt::print(stderr, "attention_bench: {}\n", e.what());
    return 2;
  }
  fmt::print("threads: {}, SIMD target: {}\n\n", default_threads(), simd_target());
  const int rounds = quick ? 1 : 7;
  const double min_seconds = quick ? 0.0 : 0.05;
  if (regimes_only) {  // section 3 alone
    regimes_vs_plain(quick ? 256 : 4096, quick ? 4 : 8, quick ? 1 : 3, 0.0);
    return 0;
  }
  if (paged_only) {  // section 4 alone
    paged_vs_contiguous(rounds, min_seconds, quick);
    return 0;
  }
  std::vector<cases::Case> selected;
  for (cases::Case c : cases::perf_cases()) {
    if (c.op == cases::Op::Rotate) continue;
    if (quick) {  // the smoke run: the same code paths on small shapes
      if (c.op == cases::Op::Attention) {
        if (c.dtype != DType::F32 || c.spec != "half128") continue;
        c.seq = c.k_seq = 128;
      } else {
        c.k_seq = c.q_offset = 256;
      }
    }
    selected.push_back(c);
  }
  fused_vs_unfused(selected, rounds, min_seconds);
  decode(selected, rounds, min_seconds);
  if (quick) {
    linear_vs_softmax({128, 256}, rounds, min_seconds);
    regimes_vs_plain(256, 4, rounds, min_seconds);
  } else {
    linear_vs_softmax({256, 512, 1024, 2048, 4096, 8192}, rounds, min_seconds);
    regimes_vs_plain(4096, 8, 3, 0.0);
  }
  paged_vs_contiguous(rounds, min_seconds, quick);
  return 0;
}
