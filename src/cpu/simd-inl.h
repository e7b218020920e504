// src/cpu/simd-inl.h — what every per-target file of the CPU backend shares: the Highway namespace,
// whether this target has SIMD kernels, and the float32 tag and lane count they use. Included (per
// Highway target) by codecs-inl.h, angles-inl.h, rotate-inl.h and attention-inl.h.
#if defined(ROPEKIT_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPEKIT_CPU_SIMD_INL_H_
#undef ROPEKIT_CPU_SIMD_INL_H_
#else
#define ROPEKIT_CPU_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>

HWY_BEFORE_NAMESPACE();
namespace ropekit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The SIMD kernels need a fused multiply-add (else the second rounding changes the numbers) and
// vector lanes to pair up; other targets run the scalar reference (rope/backend.hpp).
#undef ROPEKIT_SIMD_KERNELS
#if HWY_NATIVE_FMA && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
#define ROPEKIT_SIMD_KERNELS 1
#else
#define ROPEKIT_SIMD_KERNELS 0
#endif

#if ROPEKIT_SIMD_KERNELS
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
#endif

// Whether this target's rotation, angle-row and conversion kernels are the scalar reference
// (cpu::rotates_with_reference).
inline bool RotatesWithReference() { return !ROPEKIT_SIMD_KERNELS; }

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
