// An outside program on the installed package: reads a preset, rotates a query and a key at two pairs
// of positions with the same distance, and checks the logits agree (RoPE's relative-position property).
#include <cmath>
#include <cstdio>
#include <vector>

#include <ropekit/ropekit.hpp>

int main() {
  const ropekit::ModelPositions model = ropekit::read_preset("llama-3.1-8b");
  const ropekit::Rope rope(model.layer().spec);
  const int d = rope.spec().head_dim;
  const auto logit = [&](std::int64_t m, std::int64_t n) {
    std::vector<float> q(d), k(d);
    for (int i = 0; i < d; ++i) q[i] = std::sin(0.1f * float(i)), k[i] = std::cos(0.3f * float(i));
    const std::vector<std::int64_t> pm = {m}, pn = {n};
    rope.apply({.q = ropekit::bshd(q.data(), ropekit::DType::F32, 1, 1, 1, d), .positions = ropekit::positions(pm)});
    rope.apply({.q = ropekit::bshd(k.data(), ropekit::DType::F32, 1, 1, 1, d), .positions = ropekit::positions(pn)});
    double s = 0;
    for (int i = 0; i < d; ++i) s += double(q[i]) * k[i];
    return s;
  };
  const double a = logit(1007, 7), b = logit(1000007, 1000007 - 1000);
  std::printf("ropekit %s: logit(1007, 7) = %.6f, logit(1000007, 999007) = %.6f\n", ropekit::simd_target().c_str(), a,
              b);
  if (std::fabs(a - b) > 1e-4 * std::fabs(a)) return 1;
  std::printf("ok\n");
  return 0;
}
