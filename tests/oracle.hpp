// tests/oracle.hpp — independent higher-precision references for the tests.
//
// The angle oracle works in __float128 (113-bit significand): p·ω is exact for p < 2^60 and any
// double ω, reduction by 2π uses a 113-bit 2π, so its cos/sin are exact to ~1e-30 — far below the
// 1e-7 the library promises. The rotation oracle re-derives the lane pairing from the Spec on its
// own (it does not use PairMap) and rotates in double.
#pragma once

#if defined(__aarch64__)
#include <cstdlib>  // strtold
#else
#include <quadmath.h>
#endif

#include <cmath>
#include <cstdint>
#include <vector>

#include "ropekit/plan.hpp"
#include "ropekit/spec.hpp"

namespace oracle {

#if defined(__aarch64__)
// AArch64 Linux: long double is IEEE binary128 itself (glibc's cosl/sinl/fmodl are correctly rounded to it),
// and GCC has no __float128 there.
using Quad = long double;
inline Quad quad_from_string(const char* text) { return std::strtold(text, nullptr); }
inline Quad quad_fmod(Quad x, Quad y) { return fmodl(x, y); }
inline Quad quad_cos(Quad x) { return cosl(x); }
inline Quad quad_sin(Quad x) { return sinl(x); }
#else
using Quad = __float128;
inline Quad quad_from_string(const char* text) { return strtoflt128(text, nullptr); }
inline Quad quad_fmod(Quad x, Quad y) { return fmodq(x, y); }
inline Quad quad_cos(Quad x) { return cosq(x); }
inline Quad quad_sin(Quad x) { return sinq(x); }
#endif
static_assert(sizeof(Quad) == 16, "binary128: a 113-bit significand");

inline void cos_sin(std::int64_t position, double inv_freq, double* c, double* s) {
  // π rounded to 113 bits (M_PIq's value; that macro's Q-suffixed literal is an error under -Wpedantic).
  static const Quad two_pi = 2 * quad_from_string("3.14159265358979323846264338327950288419716939937510");
  Quad angle = static_cast<Quad>(position) * static_cast<Quad>(inv_freq);
  angle = quad_fmod(angle, two_pi);
  *c = static_cast<double>(quad_cos(angle));
  *s = static_cast<double>(quad_sin(angle));
}

// Lanes (a, b) of pair j, derived from the definitions in spec.hpp.
inline std::pair<int, int> lanes(const ropekit::Spec& spec, int j) {
  if (spec.pairing == ropekit::Pairing::Interleaved) return {2 * j, 2 * j + 1};
  return {j, j + spec.rotary_dim / 2};
}

// The position stream of pair j (0 = t, 1 = h, 2 = w), from the M-RoPE definitions.
inline int stream(const ropekit::Spec& spec, int j) {
  if (!spec.mrope) return 0;
  const auto& s = spec.mrope->sections;
  if (spec.mrope->layout == ropekit::MRopeLayout::Interleaved) {
    if (j % 3 == 1 && j < 3 * s[1]) return 1;
    if (j % 3 == 2 && j < 3 * s[2]) return 2;
    return 0;
  }
  if (j < s[0]) return 0;
  if (j < s[0] + s[1]) return 1;
  return 2;
}

enum class Dir { Forward, Inverse, Backward };

// Rotates one head (head_dim values) in double. `pos` holds one position per stream.
inline std::vector<double> rotate(const ropekit::Spec& spec, const ropekit::Plan& plan, const std::vector<double>& x,
                                  const std::int64_t* pos, Dir dir = Dir::Forward) {
  std::vector<double> y = x;
  const double m = dir == Dir::Inverse ? 1.0 / plan.cos_sin_scale : plan.cos_sin_scale;
  const double sign = dir == Dir::Forward ? 1.0 : -1.0;
  for (int j = 0; j < spec.rotary_dim / 2; ++j) {
    double c, s;
    cos_sin(pos[stream(spec, j)], plan.inv_freq[j], &c, &s);
    s *= sign;
    const auto [a, b] = lanes(spec, j);
    y[a] = m * (x[a] * c - x[b] * s);
    y[b] = m * (x[b] * c + x[a] * s);
  }
  return y;
}

}  // namespace oracle
