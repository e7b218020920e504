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

#include "lib/ceilings.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

// n elements of T starting on a 64-byte boundary, as an engine's tensors and caches do (PyTorch's CPU
// allocator and ggml's buffers align to 64 bytes). A std::vector's large blocks start 16 bytes past a page,
// which splits every 64-byte store of a 2 KB cache entry across two lines — a cost engines do not pay, and
// one that moved the fused-vs-pair comparison at decode 256 by ±10 % with where the pages landed.
template <class T>
class Aligned {
 public:
  explicit Aligned(std::size_t n) : storage_(n + 64 / sizeof(T)) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    data_ = storage_.data() + (64 - address % 64) % 64 / sizeof(T);
  }
  Aligned(Aligned&&) noexcept = default;  // a moved vector keeps its block, so data_ stays in it
  Aligned(const Aligned&) = delete;       // a copy's data_ would point into the original
  Aligned& operator=(const Aligned&) = delete;
  T* data() { return data_; }
  T& operator[](std::size_t i) { return data_[i]; }

 private:
  std::vector<T> storage_;
  T* data_;
};

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
    Aligned<std::uint16_t> b(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) b[std::size_t(i)] = float_to_bf16(normal(rng));
    return b;
  };
  Aligned<std::uint16_t> q = buffer(s.tokens * q_heads * d), k = buffer(s.tokens * kv * d),
                         v = buffer(s.tokens * kv * d);
  // Each token (decode: each sequence's one token) lands in its own page, pages in shuffled order, as
  // a server's page allocator hands them out; prefill fills consecutive slots of shuffled pages. Decode
  // calls are steps: call j writes each sequence's next slot (its 4 pages, 64 steps, then around again)
  // at the next position, so the entries a call writes are not the ones the previous call left in the
  // core's caches — as in an engine, where each step writes entries no one has touched yet.
  const bool decode = s.name.starts_with("decode");
  const std::int64_t pages = decode ? s.tokens * 4 : s.tokens / page_size * 2;
  const std::int64_t steps = decode ? 4 * page_size : 1;
  std::vector<std::int64_t> page_order(static_cast<std::size_t>(pages));
  std::iota(page_order.begin(), page_order.end(), 0);
  std::shuffle(page_order.begin(), page_order.end(), rng);
  std::vector<std::vector<std::int64_t>> step_slots(static_cast<std::size_t>(steps)),
      step_pos(static_cast<std::size_t>(steps));
  for (std::int64_t j = 0; j < steps; ++j) {
    auto& slots = step_slots[std::size_t(j)];
    auto& pos = step_pos[std::size_t(j)];
    for (std::int64_t t = 0; t < s.tokens; ++t) {
      slots.push_back(decode ? page_order[t * 4 + j / page_size] * page_size + j % page_size
                             : page_order[t / page_size] * page_size + t % page_size);
      pos.push_back(decode ? 4000 + 13 * t + j : t);
    }
  }
  std::int64_t step = 0;  // the step the next call runs; each timed function advances it
  const auto next_step = [&] {
    const std::int64_t j = step;
    step = (step + 1) % steps;
    return std::size_t(j);
  };
  const std::int64_t es = element_size(s.cache);
  const std::size_t cache_bytes = std::size_t(pages * page_size * kv * d * es);
  Aligned<std::byte> kc(cache_bytes), vc(cache_bytes);
  const PagedCache cache{.k = kc.data(),
                         .v = vc.data(),
                         .dtype = s.cache,
                         .num_pages = pages,
                         .page_size = page_size,
                         .kv_heads = kv,
                         .head_dim = int(d),
                         .v_head_dim = int(d),
                         .k_scale = s.cache == CacheDType::F8E4M3 ? 0.05f : 1.0f,
                         .v_scale = s.cache == CacheDType::F8E4M3 ? 0.05f : 1.0f};
  const Heads qv = bshd(q.data(), DType::BF16, 1, s.tokens, q_heads, d),
              kvw = bshd(k.data(), DType::BF16, 1, s.tokens, kv, d),
              vv = bshd(v.data(), DType::BF16, 1, s.tokens, kv, d);
  const auto args_of = [&](std::size_t j) {
    return AppendArgs{.q = qv,
                      .k = kvw,
                      .k_out = s.write_back ? kvw : Heads{},
                      .v = vv,
                      .positions = positions(step_pos[j]),
                      .slots = slot_mapping(step_slots[j]),
                      .threads = 1};
  };
  const auto fused = [&] { append(rope, args_of(next_step()), cache); };  // one shot, as the pair applies
  // Decode steps of prepared calls (an engine's layer keeps its buffers from step to step): each call moves
  // to the step's positions and slots and runs; the views were checked once.
  AppendCall fused_call = prepare_append(rope, args_of(0), cache);
  const auto fused_step = [&] {
    const std::size_t j = next_step();
    fused_call.set_positions_and_slots(positions(step_pos[j]), slot_mapping(step_slots[j]));
    fused_call.run();
  };
  RotateCall rotate_call = rope.prepare({.q = qv, .k = kvw, .positions = positions(step_pos[0]), .threads = 1});
  const auto copy_entries = [&](const std::vector<std::int64_t>& slots) {
    for (std::int64_t t = 0; t < s.tokens; ++t) {
      for (std::int64_t h = 0; h < kv; ++h) {
        const std::uint16_t* ks = k.data() + (t * kv + h) * d;
        const std::uint16_t* vs = v.data() + (t * kv + h) * d;
        if (s.cache == CacheDType::BF16) {
          std::memcpy(cache.key(slots[t], h), ks, std::size_t(d * 2));
          std::memcpy(cache.value(slots[t], h), vs, std::size_t(d * 2));
        } else {
          // The same SIMD quantizer the fused path uses: the pair differs only in the fusion.
          convert_to_cache(ks, DType::BF16, d, cache.key(slots[t], h), CacheDType::F8E4M3, cache.k_scale);
          convert_to_cache(vs, DType::BF16, d, cache.value(slots[t], h), CacheDType::F8E4M3, cache.v_scale);
        }
      }
    }
  };
  const auto unfused = [&] {
    const std::size_t j = next_step();
    rope.apply({.q = qv, .k = kvw, .positions = positions(step_pos[j]), .threads = 1});
    copy_entries(step_slots[j]);
  };
  const auto unfused_step = [&] {
    const std::size_t j = next_step();
    rotate_call.set_positions(positions(step_pos[j]));
    rotate_call.run();
    copy_entries(step_slots[j]);
  };
  // The bytes the fused call must move: q read + written, k read (and written back when asked), k and
  // v entries written, v read.
  const double bytes = double(s.tokens) *
                       double(q_heads * d * 2 * 2 + kv * d * 2 * (s.write_back ? 2 : 1) + kv * d * 2 + 2 * kv * d * es);
  const std::size_t half = static_cast<std::size_t>(bytes / 2);
  Aligned<std::byte> src(half), dst(half);
  std::memset(src.data(), 1, half);
  const auto t =
      bench::interleaved({fused, unfused, fused_step, unfused_step, [&] { std::memcpy(dst.data(), src.data(), half); }},
                         rounds, min_seconds);
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
  fmt::print(
      "| case | cache | fused µs | apply+copy µs | speed-up | step: fused µs | step: rotate+copy µs | speed-up | "
      "fused GB/s | of memcpy | step: of memcpy |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const CacheDType cache : {CacheDType::BF16, CacheDType::F8E4M3}) {
    for (const Shape& s : {Shape{"decode batch 1", 1, cache, false}, Shape{"decode batch 16", 16, cache, false},
                           Shape{"decode batch 256", 256, cache, false}, Shape{"prefill 512", 512, cache, true},
                           Shape{"decode batch 256, k written back", 256, cache, true}}) {
      run(s, rounds, min_seconds);
    }
  }
  fmt::print(
      "\n(decode: the fused call writes the rotated keys only into the cache; prefill and the last row also\n"
      "rotate the live k. fused GB/s: the bytes the call must move — q read and written, k read (and written\n"
      "back), k and v entries written, v read — per second; of memcpy: a memcpy of the same bytes (half read, half\n"
      "written) timed in the same rounds, divided by the fused time. step: calls prepared once and moved to each\n"
      "step's positions and slots — AppendCall::set_positions_and_slots, RotateCall::set_positions — as a\n"
      "decoding engine's layer runs them.)\n");
  return 0;
}
