// run_probe HEADS [f32|bf16|f16] [calls] — a prepared decode-shaped RotateCall::run (1 token of HEADS heads × 128:
// 4/5 of them q, the rest k right after q, out of place, one thread, the table's rows) against a memcpy of the same
// bytes: prints ns per call of each and their ratio, medians of 15 batches. Varying HEADS separates a call's fixed
// cost from its cost per head (a 2-head call is nearly all fixed cost) and shows where the rows leave L1.
// SPLIT=1 puts k in its own buffer (two runs per token instead of one); OFFSET=16 misaligns every buffer by 16 bytes;
// PAIRING=interleaved rotates adjacent lanes (GPT-J, llama.cpp's NORMAL) instead of halves.
// Public API only (bench/compare/README.md).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe_timing.hpp"
#include "ropekit/ropekit.hpp"

int main(int argc, char** argv) {
  using namespace ropekit;
  constexpr int kDim = 128;
  const int heads = argc > 1 ? std::max(2, std::atoi(argv[1])) : 40;
  const std::string type = argc > 2 ? argv[2] : "f32";
  const long calls = argc > 3 ? std::atol(argv[3]) : 3000000;
  const DType dtype = type == "bf16" ? DType::BF16 : type == "f16" ? DType::F16 : DType::F32;
  const int q_heads = std::max(1, heads * 4 / 5), k_heads = heads - q_heads;
  const std::size_t bytes = std::size_t(heads) * kDim * element_size(dtype);
  const bool split = std::getenv("SPLIT") != nullptr;
  // k after q in one buffer (a fused QKV projection's layout), or (SPLIT) 4 KiB into a buffer of its own.
  // Every buffer starts OFFSET bytes (default 0) past a 64-byte boundary: 16 gives rows that split cache lines.
  const std::size_t offset = std::getenv("OFFSET") != nullptr ? std::size_t(std::atoi(std::getenv("OFFSET"))) : 0;
  std::vector<std::byte> in_buffer(bytes + 8192, std::byte{0x3e}), out_buffer(bytes + 8192),
      k_in_buffer(bytes + 8192, std::byte{0x3e}), k_out_buffer(bytes + 8192);
  const auto at = [&](std::vector<std::byte>& v) {
    const auto address = reinterpret_cast<std::uintptr_t>(v.data());
    return v.data() + ((64 - address % 64) % 64 + offset);
  };
  std::byte* const in = at(in_buffer);
  std::byte* const out = at(out_buffer);
  const std::size_t q_bytes = std::size_t(q_heads) * kDim * element_size(dtype);
  std::byte* k_src = split ? at(k_in_buffer) + 4096 : in + q_bytes;
  std::byte* k_dst = split ? at(k_out_buffer) + 4096 : out + q_bytes;
  const bool interleaved = std::getenv("PAIRING") != nullptr && std::string(std::getenv("PAIRING")) == "interleaved";
  const Rope rope(Spec{.head_dim = kDim,
                       .rotary_dim = kDim,
                       .base = 5e5,
                       .pairing = interleaved ? Pairing::Interleaved : Pairing::Half});
  const std::vector<std::int64_t> pos = {4095};
  const RotateCall call = rope.prepare({.q = bshd(in, dtype, 1, 1, q_heads, kDim),
                                        .k = bshd(k_src, dtype, 1, 1, k_heads, kDim),
                                        .q_out = bshd(out, dtype, 1, 1, q_heads, kDim),
                                        .k_out = bshd(k_dst, dtype, 1, 1, k_heads, kDim),
                                        .positions = positions(pos),
                                        .threads = 1},
                                       rope.table(4096));
  const double run = probe::ns_per_call(
      [&] {
        call.run(0, call.rows());
        asm volatile("" ::: "memory");
      },
      calls / 15);
  const double copy = probe::ns_per_call(
      [&] {
        std::memcpy(out, in, bytes);
        asm volatile("" ::: "memory");
      },
      calls / 15);
  std::printf("%d heads (%d q + %d k) %s%s%s: run %.1f ns, memcpy %.1f ns, run / memcpy %.2f\n", heads, q_heads,
              k_heads, type.c_str(), split ? ", k apart" : "", interleaved ? ", interleaved" : "", run, copy,
              run / copy);
  return 0;
}
