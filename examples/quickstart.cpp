#include <cstdint>
#include <cstdio>
#include <vector>

#include <ropekit/ropekit.hpp>

int main() {
  const ropekit::Rope rope(ropekit::read_preset("llama-3.1-8b").layer().spec);  // Llama 3.1's scaled RoPE
  const int seq = 4, heads = 32, dim = rope.spec().head_dim;
  std::vector<float> q(std::size_t(seq) * heads * dim, 1.0f);      // [batch 1, seq, heads, head_dim]
  std::vector<std::int64_t> pos = {0, 1, 1'000'000, 100'000'000};  // accurate angles at any position
  rope.apply({.q = ropekit::bshd(q.data(), ropekit::DType::F32, 1, seq, heads, dim),
              .positions = ropekit::positions(pos)});  // rotated in place
  for (int t = 0; t < seq; ++t)
    std::printf("position %lld: q[0:2] = %+.6f %+.6f\n", (long long)pos[t], q[std::size_t(t) * heads * dim],
                q[std::size_t(t) * heads * dim + 1]);
}
