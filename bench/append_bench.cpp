// bench/append_bench — the fused rotate-and-append (ropekit/append.hpp) against the unfused pair an
// engine runs without it (Rope::apply on q and k, then k and v copied — or quantized by the same SIMD
// converter the fused path uses — into their cache slots), and
// against a memcpy of the bytes the fused call must move (its ceiling), all timed interleaved in the
// same rounds (bench::interleaved). Llama 3 8B's attention shape: 32 q + 8 kv heads × 128, bf16, an
// NHD paged cache with 16-token pages; decode with 1, 16 and 256 sequences (one token each), prefill
// of 512 tokens; a bf16 cache and an fp8 e4m3 one.
//
//   append_bench [--quick]          a markdown table on stdout
#include <fmt/format.h>

#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu/rotate.hpp"
#include "lib/ceilings.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

struct Shape {
  std::string name;
  std::int64_t tokens;
  CacheDType cache;
  // The live k rotated too (prefill: attention reads the new keys from it). Decode attends from the
  // cache alone, so the fused call writes the rotated keys only there; the unfused pair has no such
  // choice (it rotates k in place, then copies).
  bool write_back;
};

void run(const Shape& s, int rounds, double min_seconds) {
  const std::int64_t q_heads = 32, kv = 8, d = 128, page_size = 16;
  const Spec spec{.head_dim = int(d), .rotary_dim = int(d), .base = 500000.0, .pairing = Pairing::Half};
  const Rope rope(spec);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  const auto buffer = [&](std::int64_t n) {
    std::vector<std::uint16_t> b(static_cast<std::size_t>(n));
    for (auto& x : b) x = float_to_bf16(normal(rng));
    return b;
  };
  std::vector<std::uint16_t> q = buffer(s.tokens * q_heads * d), k = buffer(s.tokens * kv * d), v = buffer(s.tokens * kv * d);
  // Each token (decode: each sequence's one token) lands in its own page, pages in shuffled order, as
  // a server's page allocator hands them out; prefill fills consecutive slots of shuffled pages.
  const bool decode = s.name.starts_with("decode");
  const std::int64_t pages = decode ? s.tokens * 4 : s.tokens / page_size * 2;
  std::vector<std::int64_t> page_order(static_cast<std::size_t>(pages));
  std::iota(page_order.begin(), page_order.end(), 0);
  std::shuffle(page_order.begin(), page_order.end(), rng);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(s.tokens)), pos(static_cast<std::size_t>(s.tokens));
  for (std::int64_t t = 0; t < s.tokens; ++t) {
    slots[t] = decode ? page_order[t] * page_size + 7 : page_order[t / page_size] * page_size + t % page_size;
    pos[t] = decode ? 4000 + 13 * t : t;
  }
  const std::int64_t es = element_size(s.cache);
  std::vector<std::byte> kc(std::size_t(pages * page_size * kv * d * es)), vc(kc.size());
  const PagedCache cache{.k = kc.data(), .v = vc.data(), .dtype = s.cache, .num_pages = pages, .page_size = page_size,
                         .kv_heads = kv, .head_dim = int(d), .v_head_dim = int(d),
                         .k_scale = s.cache == CacheDType::F8E4M3 ? 0.05f : 1.0f,
                         .v_scale = s.cache == CacheDType::F8E4M3 ? 0.05f : 1.0f};
  const Heads qv = bshd(q.data(), DType::BF16, 1, s.tokens, q_heads, d), kvw = bshd(k.data(), DType::BF16, 1, s.tokens, kv, d),
              vv = bshd(v.data(), DType::BF16, 1, s.tokens, kv, d);
  const AppendArgs args{.q = qv, .k = kvw, .k_out = s.write_back ? kvw : Heads{}, .v = vv, .positions = positions(pos), .slots = slot_mapping(slots),
                        .threads = 1};
  const auto fused = [&] { prepare_append(rope, args, cache).run(); };
  // Decode steps of prepared calls (an engine's layer keeps its buffers from step to step): each call moves
  // to the step's positions and slots (the same ones here) and runs; the views were checked once.
  AppendCall fused_call = prepare_append(rope, args, cache);
  const auto fused_step = [&] {
    fused_call.set_positions_and_slots(positions(pos), slot_mapping(slots));
    fused_call.run();
  };
  RotateCall rotate_call = rope.prepare({.q = qv, .k = kvw, .positions = positions(pos), .threads = 1});
  const cpu::CacheConvertKernel quantize = cpu::select_cache_convert_kernel();
  const auto copy_entries = [&] {
    for (std::int64_t t = 0; t < s.tokens; ++t) {
      for (std::int64_t h = 0; h < kv; ++h) {
        const std::uint16_t* ks = k.data() + (t * kv + h) * d;
        const std::uint16_t* vs = v.data() + (t * kv + h) * d;
        if (s.cache == CacheDType::BF16) {
          std::memcpy(cache.key(slots[t], h), ks, std::size_t(d * 2));
          std::memcpy(cache.value(slots[t], h), vs, std::size_t(d * 2));
        } else {
          // The same SIMD quantizer the fused path uses: the pair differs only in the fusion.
          quantize(ks, DType::BF16, d, cache.key(slots[t], h), CacheDType::F8E4M3, cache.k_scale);
          quantize(vs, DType::BF16, d, cache.value(slots[t], h), CacheDType::F8E4M3, cache.v_scale);
        }
      }
    }
  };
  const auto unfused = [&] {
    rope.apply({.q = qv, .k = kvw, .positions = positions(pos), .threads = 1});
    copy_entries();
  };
  const auto unfused_step = [&] {
    rotate_call.set_positions(positions(pos));
    rotate_call.run();
    copy_entries();
  };
  // The bytes the fused call must move: q read + written, k read (and written back when asked), k and
  // v entries written, v read.
  const double bytes = double(s.tokens) * double(q_heads * d * 2 * 2 + kv * d * 2 * (s.write_back ? 2 : 1) +
                                                 kv * d * 2 + 2 * kv * d * es);
  std::vector<std::byte> src(static_cast<std::size_t>(bytes / 2)), dst(src.size());
  std::memset(src.data(), 1, src.size());
  const auto t = bench::interleaved(
      {fused, unfused, fused_step, unfused_step, [&] { std::memcpy(dst.data(), src.data(), src.size()); }}, rounds,
      min_seconds);
  fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", s.name,
             to_string(s.cache), t[0] * 1e6, t[1] * 1e6, t[1] / t[0], t[2] * 1e6, t[3] * 1e6, t[3] / t[2],
             bytes / t[0] * 1e-9, t[4] / t[0], t[4] / t[2]);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int rounds = quick ? 3 : 9;
  const double min_seconds = quick ? 0.005 : 0.05;
  fmt::print("## Fused rotate-and-append vs rotate then copy (one thread)\n\n");
  fmt::print("| case | cache | fused µs | apply+copy µs | speed-up | step: fused µs | step: rotate+copy µs | speed-up | "
             "fused GB/s | of memcpy | step: of memcpy |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const CacheDType cache : {CacheDType::BF16, CacheDType::F8E4M3}) {
    for (const Shape& s : {Shape{"decode batch 1", 1, cache, false}, Shape{"decode batch 16", 16, cache, false},
                           Shape{"decode batch 256", 256, cache, false}, Shape{"prefill 512", 512, cache, true},
                           Shape{"decode batch 256, k written back", 256, cache, true}}) {
      run(s, rounds, min_seconds);
    }
  }
  fmt::print("\n(decode: the fused call writes the rotated keys only into the cache; prefill and the last row also\n"
             "rotate the live k. fused GB/s: the bytes the call must move — q read and written, k read (and written\n"
             "back), k and v entries written, v read — per second; of memcpy: a memcpy of the same bytes (half read, half\n"
             "written) timed in the same rounds, divided by the fused time. step: calls prepared once and moved to each\n"
             "step's positions and slots — AppendCall::set_positions_and_slots, RotateCall::set_positions — as a\n"
             "decoding engine's layer runs them.)\n");
  return 0;
}
