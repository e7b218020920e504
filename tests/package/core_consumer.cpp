// An outside program that wants RoPE alone: find_package(ropekit COMPONENTS core) and ropekit::core, so
// that neither OpenBLAS nor nlohmann-json is found or linked (check.cmake verifies both). A Llama 3.1
// spec by hand, a query and a key rotated at two pairs of positions with the same distance: the logits
// agree (RoPE's relative-position property).
#include <ropekit/cpu.hpp>
#include <ropekit/rope.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const ropekit::Spec spec{.head_dim = 128,
                           .rotary_dim = 128,
                           .base = 500000.0,
                           .pairing = ropekit::Pairing::Half,
                           .scaling = ropekit::scaling::Llama3{8.0, 1.0, 4.0, 8192}};
  const ropekit::Rope rope(spec);
  const int d = spec.head_dim;
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
  std::printf("ropekit::core %s: logit(1007, 7) = %.6f, logit(1000007, 999007) = %.6f\n",
              ropekit::simd_target().c_str(), a, b);
  if (std::fabs(a - b) > 1e-4 * std::fabs(a)) return 1;
  std::printf("ok\n");
  return 0;
}
