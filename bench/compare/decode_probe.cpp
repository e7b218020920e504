// decode_probe [f32|bf16] [calls] — one decode-shaped Rope::apply (1 token, 32 q + 8 k heads × 128,
// in place, one thread, angles from the table a prefill would have built): prints ns per call, the
// median of 15 batches. Public API only, so it builds against any ropekit (bench/compare/README.md).
// PROBE_TARGET=AVX2 restricts the SIMD target.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ropekit/ropekit.hpp"

int main(int argc, char** argv) {
  using namespace ropekit;
  const bool bf16 = argc > 1 && std::string(argv[1]) == "bf16";
  const long calls = argc > 2 ? std::atol(argv[2]) : 200000;
  const DType dtype = bf16 ? DType::BF16 : DType::F32;
  const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 5e5, .pairing = Pairing::Half});
  std::vector<float> q(32 * 128, 0.5f), k(8 * 128, 0.25f);  // large enough for either storage type
  const std::vector<std::int64_t> pos = {4095};
  const RotateArgs args{.q = bshd(q.data(), dtype, 1, 1, 32, 128),
                        .k = bshd(k.data(), dtype, 1, 1, 8, 128),
                        .positions = positions(pos),
                        .threads = 1};
  if (const char* target = std::getenv("PROBE_TARGET")) set_simd_target(target);
  rope.table(4096);  // as after a prefill: decode reads the table
  rope.apply(args);
  std::vector<double> seconds;
  for (int r = 0; r < 15; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < calls / 15; ++i) rope.apply(args);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                      double(calls / 15));
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf("%.1f\n", seconds[seconds.size() / 2] * 1e9);
  return 0;
}
