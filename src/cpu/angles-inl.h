// src/cpu/angles-inl.h — the per-target angle rows: cos/sin of position·inv_freq for every pair, a
// vector of pairs at a time, by rope/sincos_turns-inl.h's operation sequence — the one the scalar
// reference (rope/angles.cpp) runs — so table rows and on-the-fly coefficients have the reference's
// bits on every target. src/cpu/angles.cpp compiles this once per Highway target and exports the table
// fill (cpu::angle_rows, cpu::exact_angle_rows); rotate-inl.h forms on-the-fly coefficients with AngleRow.
#if defined(ROPEKIT_CPU_ANGLES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPEKIT_CPU_ANGLES_INL_H_
#undef ROPEKIT_CPU_ANGLES_INL_H_
#else
#define ROPEKIT_CPU_ANGLES_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/simd-inl.h"
#include "rope/angles.hpp"

HWY_BEFORE_NAMESPACE();
namespace ropekit::cpu::HWY_NAMESPACE {

#if ROPEKIT_SIMD_KERNELS

// Highway arithmetic for SinCosOfTurns, lane by lane the scalar reference's operations
// (rope/angles.cpp): MulAdd and MulSub are fused on these targets (ROPEKIT_SIMD_KERNELS), Round is
// round-to-nearest-even, the bit operations act on each lane's 64 bits as the scalar ones on a double's.
struct AngleOps {
  using D = hn::ScalableTag<double>;
  using DU = hn::RebindToUnsigned<D>;
  using V = hn::Vec<D>;
  using U = hn::Vec<DU>;
  using M = hn::Mask<D>;
  static V Set(double c) { return hn::Set(D(), c); }
  static V Mul(V a, V b) { return hn::Mul(a, b); }
  static V Sub(V a, V b) { return hn::Sub(a, b); }
  static V Add(V a, V b) { return hn::Add(a, b); }
  static V MulAdd(V a, V b, V c) { return hn::MulAdd(a, b, c); }
  static V MulSub(V a, V b, V c) { return hn::MulSub(a, b, c); }
  static V Round(V a) { return hn::Round(a); }
  static U Bits(V a) { return hn::BitCast(DU(), a); }
  static U Increment(U k) { return hn::Add(k, hn::Set(DU(), 1)); }
  static M Bit0(U k) { return hn::RebindMask(D(), hn::TestBit(k, hn::Set(DU(), 1))); }
  static U Bit1ToSign(U k) { return hn::And(hn::ShiftLeft<62>(k), hn::Set(DU(), std::uint64_t{1} << 63)); }
  static V XorSign(V a, U sign) { return hn::BitCast(D(), hn::Xor(hn::BitCast(DU(), a), sign)); }
  static V Select(M m, V yes, V no) { return hn::IfThenElse(m, yes, no); }
};

// Always inlined: with AngleOpsX's vector arrays, a call passes them through memory.
#undef ROPEKIT_TURNS_FN
#define ROPEKIT_TURNS_FN HWY_INLINE
#include "rope/sincos_turns-inl.h"
#undef ROPEKIT_TURNS_FN

#if !HWY_HAVE_SCALABLE
// AngleOps over K vectors at once: each operation applied to the K vectors before the next, so that a row's K chains
// run side by side. One vector at a time a row was latency-bound (docs/performance-log.md: the code comments' figures):
// each vector is a chain of ~25 dependent operations, and the core's schedulers held too few of the next vectors'
// operations to hide it. The same operations on each lane, so the same bits. Not on SVE targets: their vectors are
// sizeless and cannot be held in arrays.
template <std::size_t K>
struct AngleOpsX {
  using D = AngleOps::D;
  // Constructors of the target's own (HWY_ATTR): implicit ones are compiled without it, and on Arm they then cannot
  // inline the vectors' constructors.
  struct V {
    HWY_INLINE HWY_ATTR V() {}
    AngleOps::V v[K];
  };
  struct U {
    HWY_INLINE HWY_ATTR U() {}
    AngleOps::U v[K];
  };
  struct M {
    HWY_INLINE HWY_ATTR M() {}
    AngleOps::M v[K];
  };
  template <class R, class F>
  HWY_INLINE static R Each(F f) {
    R r;
    for (std::size_t i = 0; i < K; ++i) r.v[i] = f(i);
    return r;
  }
  HWY_INLINE static V Set(double c) {
    const auto x = AngleOps::Set(c);
    return Each<V>([&](std::size_t) { return x; });
  }
  HWY_INLINE static V Mul(V a, V b) {
    return Each<V>([&](std::size_t i) { return AngleOps::Mul(a.v[i], b.v[i]); });
  }
  HWY_INLINE static V Sub(V a, V b) {
    return Each<V>([&](std::size_t i) { return AngleOps::Sub(a.v[i], b.v[i]); });
  }
  HWY_INLINE static V Add(V a, V b) {
    return Each<V>([&](std::size_t i) { return AngleOps::Add(a.v[i], b.v[i]); });
  }
  HWY_INLINE static V MulAdd(V a, V b, V c) {
    return Each<V>([&](std::size_t i) { return AngleOps::MulAdd(a.v[i], b.v[i], c.v[i]); });
  }
  HWY_INLINE static V MulSub(V a, V b, V c) {
    return Each<V>([&](std::size_t i) { return AngleOps::MulSub(a.v[i], b.v[i], c.v[i]); });
  }
  HWY_INLINE static V Round(V a) {
    return Each<V>([&](std::size_t i) { return AngleOps::Round(a.v[i]); });
  }
  HWY_INLINE static U Bits(V a) {
    return Each<U>([&](std::size_t i) { return AngleOps::Bits(a.v[i]); });
  }
  HWY_INLINE static U Increment(U k) {
    return Each<U>([&](std::size_t i) { return AngleOps::Increment(k.v[i]); });
  }
  HWY_INLINE static M Bit0(U k) {
    return Each<M>([&](std::size_t i) { return AngleOps::Bit0(k.v[i]); });
  }
  HWY_INLINE static U Bit1ToSign(U k) {
    return Each<U>([&](std::size_t i) { return AngleOps::Bit1ToSign(k.v[i]); });
  }
  HWY_INLINE static V XorSign(V a, U sign) {
    return Each<V>([&](std::size_t i) { return AngleOps::XorSign(a.v[i], sign.v[i]); });
  }
  HWY_INLINE static V Select(M m, V yes, V no) {
    return Each<V>([&](std::size_t i) { return AngleOps::Select(m.v[i], yes.v[i], no.v[i]); });
  }
};
#endif

// One position's row of cos/sin, T = float: AngleEvaluator::row's bits (Accurate angles a vector of
// pairs at a time, the tail through zero-padded coefficients; HfCompat through the scalar row);
// T = double: exact_row's.
template <class T>
HWY_INLINE void AngleRow(const detail::AngleEvaluator& angles, std::int64_t position, T* cos_out, T* sin_out) {
  if constexpr (std::is_same_v<T, float>) {
    if (angles.mode() != AngleMode::Accurate) return angles.row(position, cos_out, sin_out);
  }
  using D = AngleOps::D;
  const D dd;
  const hn::Rebind<T, D> dt;
  const auto store = [&](AngleOps::V v, T* out) {
    if constexpr (std::is_same_v<T, float>)
      hn::StoreU(hn::DemoteTo(dt, v), dt, out);
    else
      hn::StoreU(v, dd, out);
  };
  constexpr std::size_t kMax = HWY_MAX_BYTES / sizeof(double);
  const std::size_t lanes = hn::Lanes(dd), n = static_cast<std::size_t>(angles.num_pairs());
  const double* hi = angles.turns_hi();
  const double* lo = angles.turns_lo();
  const auto p = hn::Set(dd, static_cast<double>(position));
  std::size_t j = 0;
#if !HWY_HAVE_SCALABLE
  // Four vectors side by side (AngleOpsX), then two; eight lost to the spills of eight chains, and a 64-dim row has
  // only four vectors (docs/performance-log.md: the code comments' figures).
  const auto side_by_side = [&](auto side) HWY_ATTR __attribute__((always_inline)) {
    constexpr std::size_t kSide = decltype(side)::value;
    using X = AngleOpsX<kSide>;
    for (; j + kSide * lanes <= n; j += kSide * lanes) {
      typename X::V c, s, px, hx, lx;
      for (std::size_t i = 0; i < kSide; ++i) {
        px.v[i] = p;
        hx.v[i] = hn::LoadU(dd, hi + j + i * lanes);
        lx.v[i] = hn::LoadU(dd, lo + j + i * lanes);
      }
      SinCosOfTurns<X>(px, hx, lx, c, s);
      for (std::size_t i = 0; i < kSide; ++i) {
        store(c.v[i], cos_out + j + i * lanes);
        store(s.v[i], sin_out + j + i * lanes);
      }
    }
  };
  side_by_side(std::integral_constant<std::size_t, 4>());
  side_by_side(std::integral_constant<std::size_t, 2>());
#endif
  for (; j + lanes <= n; j += lanes) {
    AngleOps::V c, s;
    SinCosOfTurns<AngleOps>(p, hn::LoadU(dd, hi + j), hn::LoadU(dd, lo + j), c, s);
    store(c, cos_out + j);
    store(s, sin_out + j);
  }
  if (j == n) return;
  HWY_ALIGN double tail_hi[kMax] = {};
  HWY_ALIGN double tail_lo[kMax] = {};
  T tail_cos[kMax], tail_sin[kMax];
  const std::size_t rest = n - j;
  std::memcpy(tail_hi, hi + j, rest * sizeof(double));
  std::memcpy(tail_lo, lo + j, rest * sizeof(double));
  AngleOps::V c, s;
  SinCosOfTurns<AngleOps>(p, hn::Load(dd, tail_hi), hn::Load(dd, tail_lo), c, s);
  store(c, tail_cos);
  store(s, tail_sin);
  std::memcpy(cos_out + j, tail_cos, rest * sizeof(T));
  std::memcpy(sin_out + j, tail_sin, rest * sizeof(T));
}

// Rows [first, first + count) of a table (row p at cos + (p − first)·pairs): cpu::angle_rows and,
// with T = double, cpu::exact_angle_rows.
template <class T>
void AngleRows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, T* cos, T* sin) {
  const std::int64_t pairs = angles.num_pairs();
  for (std::int64_t r = 0; r < count; ++r) AngleRow(angles, first + r, cos + r * pairs, sin + r * pairs);
}

#else  // !ROPEKIT_SIMD_KERNELS: the scalar reference's rows.

template <class T>
void AngleRows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, T* cos, T* sin) {
  const std::int64_t pairs = angles.num_pairs();
  for (std::int64_t r = 0; r < count; ++r) {
    if constexpr (std::is_same_v<T, float>) {
      angles.row(first + r, cos + r * pairs, sin + r * pairs);
    } else {
      angles.exact_row(first + r, cos + r * pairs, sin + r * pairs);
    }
  }
}

#endif  // ROPEKIT_SIMD_KERNELS

// Named instances for the dispatch tables (HWY_EXPORT takes a plain name).
inline void FloatAngleRows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, float* cos,
                           float* sin) {
  AngleRows<float>(angles, first, count, cos, sin);
}
inline void ExactAngleRows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, double* cos,
                           double* sin) {
  AngleRows<double>(angles, first, count, cos, sin);
}

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
