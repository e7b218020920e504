// prefill_probe [f32|bf16|f16] [dims] [q_heads] [k_heads] [tokens] — ns per token of a prepared prefill call (in
// place, one thread, q and k in buffers of their own, positions 0..tokens−1), with the angles from the Rope's table
// and on the fly: the difference is what the call's angle rows cost per token, which at 64 dims and few heads is
// most of an on-the-fly call. Public API only (bench/compare/README.md).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe_timing.hpp"
#include "ropekit/ropekit.hpp"

int main(int argc, char** argv) {
  using namespace ropekit;
  const std::string type = argc > 1 ? argv[1] : "bf16";
  const int dim = argc > 2 ? std::atoi(argv[2]) : 64;
  const int q_heads = argc > 3 ? std::atoi(argv[3]) : 8;
  const int k_heads = argc > 4 ? std::atoi(argv[4]) : 2;
  const int tokens = argc > 5 ? std::atoi(argv[5]) : 4096;
  const DType dtype = type == "bf16" ? DType::BF16 : type == "f16" ? DType::F16 : DType::F32;
  const std::size_t es = element_size(dtype);
  // Bytes that are finite, normal values in every dtype (0x3e3e...: bf16 0.186, fp16 1.56, fp32 0.186), each buffer
  // from a 64-byte boundary as the benchmark's are (a std::vector's large blocks start 16 bytes past one, and rows
  // that split cache lines are another case: the benchmark's bshdoff16).
  const std::size_t q_bytes = std::size_t(tokens) * q_heads * dim * es,
                    k_bytes = std::size_t(tokens) * k_heads * dim * es;
  std::vector<std::byte> q_buffer(q_bytes + 64, std::byte{0x3e}), k_buffer(k_bytes + 64, std::byte{0x3e});
  const auto aligned = [](std::vector<std::byte>& v) {
    return v.data() + (64 - reinterpret_cast<std::uintptr_t>(v.data()) % 64) % 64;
  };
  std::byte* const q = aligned(q_buffer);
  std::byte* const k = aligned(k_buffer);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(tokens));
  for (int t = 0; t < tokens; ++t) pos[std::size_t(t)] = t;
  const Rope rope(Spec{.head_dim = dim, .rotary_dim = dim, .base = 1e4, .pairing = Pairing::Half});
  const RotateArgs args{.q = bshd(q, dtype, 1, tokens, q_heads, dim),
                        .k = bshd(k, dtype, 1, tokens, k_heads, dim),
                        .positions = positions(pos),
                        .threads = 1};
  const RotateCall table = rope.prepare(args, rope.table(tokens));
  const RotateCall on_the_fly = rope.prepare_on_the_fly(args);
  const long calls = std::max(1L, 20000000L / (long(tokens) * (q_heads + k_heads) * dim));
  const double with_table = probe::ns_per_call([&] { table.run(0, table.rows()); }, calls) / tokens;
  const double computed = probe::ns_per_call([&] { on_the_fly.run(0, on_the_fly.rows()); }, calls) / tokens;
  std::printf("%s, %d dims, %d q + %d k heads, %d tokens, in place: table %.1f ns per token, on the fly %.1f (+%.1f)\n",
              type.c_str(), dim, q_heads, k_heads, tokens, with_table, computed, computed - with_table);
  return 0;
}
