// src/cpu/rotate_steps-inl.h — the rotation's vector steps over one row: a vector of pairs rotated with coefficients
// already formed (half pairing: a and b vectors; interleaved: whole pairs, lanes swapped), the bounce-buffered tail,
// and the prefetch of large calls. Per Highway target, included by rotate-inl.h.
#if defined(ROPEKIT_CPU_ROTATE_STEPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPEKIT_CPU_ROTATE_STEPS_INL_H_
#undef ROPEKIT_CPU_ROTATE_STEPS_INL_H_
#else
#define ROPEKIT_CPU_ROTATE_STEPS_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cstdint>
#include <cstring>

#include "cpu/codecs-inl.h"
#include "cpu/simd-inl.h"
#include "rope/call_shape.hpp"

HWY_BEFORE_NAMESPACE();
namespace ropekit::cpu::HWY_NAMESPACE {
using detail::RotateJob;

#if ROPEKIT_SIMD_KERNELS

// Vector registers a kernel may hold its operands in: half of the target's (32 with AVX-512, 16 below).
constexpr std::size_t kRegistersForRows = HWY_MAX_BYTES >= 64 ? 16 : 8;

// Large calls (RotateJob::prefetch_rows) prefetch, as each row starts, the lines 2 KiB past it, of the
// source and, out of place, of the destination (a line no other core holds arrives exclusive, so the
// stores that reach it later need no ownership request). The kernels are compute-bound enough that
// the hardware prefetchers alone left bf16/fp16 rows waiting on the cache hierarchy; the destination's
// lines besides the source's, and 2 KiB rather than nearer or further, measured best
// (docs/performance-log.md: the code comments' figures). The addresses may lie past the
// views: a prefetch never faults, and they are formed as integers. On AMD Zen 4 the same prefetches cost
// (cpu::software_row_prefetch: off there).
constexpr std::uintptr_t kPrefetchAheadBytes = 2048;
HWY_INLINE void PrefetchAhead(const void* in, const void* out, std::size_t bytes) {
  for (const void* row : {in, out}) {
    const auto ahead = reinterpret_cast<std::uintptr_t>(row) + kPrefetchAheadBytes;
    for (std::size_t line = 0; line < bytes; line += 64) hwy::Prefetch(reinterpret_cast<const void*>(ahead + line));
    if (out == in) return;
  }
}

// Whether Codec narrows a step's two vectors together (StoreTwo), so they are stored together.
template <class Codec>
constexpr bool kStoresInPairs = requires(VF x, typename Codec::T* p) {
  Codec::template StoreTwo<false>(x, p, x, p);
};

// One vector step of each pairing. c and s are aligned coefficient pointers.
template <class Codec, bool kStream>
HWY_INLINE void HalfStep(DF d, const typename Codec::T* a_in, const typename Codec::T* b_in, typename Codec::T* a_out,
                         typename Codec::T* b_out, VF vc, VF vs) {
  const VF a = Codec::Load(d, a_in);
  const VF b = Codec::Load(d, b_in);
  StoreTwo<Codec, kStream>(hn::MulSub(a, vc, hn::Mul(b, vs)), a_out, hn::MulAdd(b, vc, hn::Mul(a, vs)), b_out);
}
template <class Codec, bool kStream>
HWY_INLINE void HalfStep(DF d, const typename Codec::T* a_in, const typename Codec::T* b_in, typename Codec::T* a_out,
                         typename Codec::T* b_out, const float* c, const float* s) {
  HalfStep<Codec, kStream>(d, a_in, b_in, a_out, b_out, hn::LoadU(d, c), hn::LoadU(d, s));
}

template <class Codec, bool kStream>
HWY_INLINE void InterleavedStep(DF d, const typename Codec::T* in, typename Codec::T* out, VF vc, VF vs) {
  const VF x = Codec::Load(d, in);
  Codec::template Store<kStream>(hn::MulAdd(x, vc, hn::Mul(hn::Reverse2(d, x), vs)), d, out);
}
template <class Codec, bool kStream>
HWY_INLINE void InterleavedStep(DF d, const typename Codec::T* in, typename Codec::T* out, const float* c,
                                const float* s) {
  InterleavedStep<Codec, kStream>(d, in, out, hn::Load(d, c), hn::Load(d, s));
}

// The last rotary lanes of a row that do not fill a vector (see the file comment). Out of line, so
// that the hot path below keeps a small frame.
template <class Codec, Pairing kPairing>
HWY_NOINLINE void RotateTail(const typename Codec::T* src, typename Codec::T* dst, const float* c, const float* s,
                             std::size_t width, std::size_t i) {
  using T = typename Codec::T;
  const DF d;
  const std::size_t rest = width - i;
  HWY_ALIGN T a[kMaxLanes] = {};
  if constexpr (kPairing == Pairing::Half) {
    HWY_ALIGN T b[kMaxLanes] = {};
    std::memcpy(a, src + i, rest * sizeof(T));
    std::memcpy(b, src + width + i, rest * sizeof(T));
    HalfStep<Codec, false>(d, a, b, a, b, c + i, s + i);
    std::memcpy(dst + i, a, rest * sizeof(T));
    std::memcpy(dst + width + i, b, rest * sizeof(T));
  } else {
    std::memcpy(a, src + i, rest * sizeof(T));
    InterleavedStep<Codec, false>(d, a, a, c + i, s + i);
    std::memcpy(dst + i, a, rest * sizeof(T));
  }
}

// Rotates the rotary lanes of one row. Half: c, s hold one value per pair (h = rotary_dim/2).
// Interleaved: one value per lane, s[2j] = −s_j, s[2j+1] = s_j. Both are padded to whole vectors.
template <class Codec, Pairing kPairing, bool kStream>
HWY_INLINE void RotateRow(const typename Codec::T* src, typename Codec::T* dst, const float* c, const float* s,
                          std::size_t rotary_dim) {
  const DF d;
  const std::size_t n = hn::Lanes(d);
  const std::size_t width = kPairing == Pairing::Half ? rotary_dim / 2 : rotary_dim;
  std::size_t i = 0;
  for (; i + n <= width; i += n) {
    if constexpr (kPairing == Pairing::Half) {
      HalfStep<Codec, kStream>(d, src + i, src + width + i, dst + i, dst + width + i, c + i, s + i);
    } else {
      InterleavedStep<Codec, kStream>(d, src + i, dst + i, c + i, s + i);
    }
  }
  if (i != width) RotateTail<Codec, kPairing>(src, dst, c, s, width, i);
}

#endif  // ROPEKIT_SIMD_KERNELS

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
