// An outside program that runs attention over a KV cache: find_package(ropekit COMPONENTS engine) and ropekit::engine
// alone (with the core; no config reader, no lab). Keys appended to a KvCache (rotated on the way in), then one
// query attends to them; with every value equal to 1 the output is 1 whatever the weights.
#include <ropekit/attention.hpp>
#include <ropekit/encodings.hpp>
#include <ropekit/kv_cache.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const int d = 16, n = 5;
  const ropekit::Rope rope({.head_dim = d, .rotary_dim = d, .base = 10000.0, .pairing = ropekit::Pairing::Half});
  ropekit::KvCache cache(rope, {.capacity = 8, .kv_heads = 1, .head_dim = d});
  std::vector<float> k(n * d), v(n * d, 1.0f), q(d), out(d);
  for (int i = 0; i < n * d; ++i) k[i] = std::sin(0.37f * float(i));
  for (int i = 0; i < d; ++i) q[i] = std::cos(0.11f * float(i));
  std::vector<std::int64_t> pos = {0, 1, 2, 3, 4}, qpos = {4};
  cache.append(rope, ropekit::bshd(k.data(), ropekit::DType::F32, 1, n, 1, d),
               ropekit::bshd(v.data(), ropekit::DType::F32, 1, n, 1, d), ropekit::positions(pos));
  ropekit::attention(rope, {.q = ropekit::bshd(q.data(), ropekit::DType::F32, 1, 1, 1, d),
                            .k = cache.keys(),
                            .v = cache.values(),
                            .out = ropekit::bshd(out.data(), ropekit::DType::F32, 1, 1, 1, d),
                            .q_positions = ropekit::positions(qpos),
                            .k_positions = cache.positions()});
  const std::vector<float> slopes = ropekit::alibi_slopes(4);
  std::printf("ropekit::engine: cache of %lld keys, out[0] = %.7f, ALiBi slopes of 4 heads from %.4f\n",
              static_cast<long long>(cache.size()), out[0], slopes[0]);
  for (float o : out) {
    if (std::fabs(o - 1.0f) > 1e-6f) return 1;
  }
  std::printf("ok\n");
  return 0;
}
