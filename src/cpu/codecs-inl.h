// src/cpu/codecs-inl.h — the per-target storage codecs: float32 lanes loaded from fp32/bf16/fp16 and
// stored with one rounding (bf16 natively narrowed where AVX512_BF16 allows), the e4m3 encoder and
// decoder of fp8 caches, and conversion into a cache's type. src/cpu/codecs.cpp compiles this once per
// Highway target and exports the cache converter and the e4m3 decoder; rotate-inl.h and attention-inl.h
// load and store through the codecs. Every codec gives the scalar codecs' bits (ropekit/dtype.hpp,
// rope/reference.hpp): tests/targets_test.cpp and tests/append_test.cpp, every 16-bit pattern.
#if defined(ROPEKIT_CPU_CODECS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPEKIT_CPU_CODECS_INL_H_
#undef ROPEKIT_CPU_CODECS_INL_H_
#else
#define ROPEKIT_CPU_CODECS_INL_H_
#endif

#include <hwy/highway.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/simd-inl.h"
#include "rope/backend.hpp"
#include "rope/reference.hpp"
#include "ropekit/dtype.hpp"

HWY_BEFORE_NAMESPACE();
namespace ropekit::cpu::HWY_NAMESPACE {

#if ROPEKIT_SIMD_KERNELS

// Storage codecs: load to float32 lanes, store with one rounding (round to nearest, ties to even).
struct F32Codec {
  using T = float;
  // GCC folds each load into both products that use it (memory operands: twice the load micro-ops).
  // Pinning the loaded vector in a register (an empty asm) made an L1-resident decode call 9 % faster
  // but LLC-resident prefill out of place 10-15 % slower (docs/performance-log.md): left as GCC emits it.
  static VF Load(DF d, const T* p) { return hn::LoadU(d, p); }
  template <bool kStream>
  static void Store(VF v, DF d, T* p) {
    if constexpr (kStream)
      hn::Stream(v, d, p);
    else
      hn::StoreU(v, d, p);
  }
};

// F32Codec for calls whose bytes fit the L1 data cache (decode): each loaded vector is pinned in a
// register (an empty asm), so it is loaded once instead of folded into both products that use it (on
// Zen 4 a 512-bit load takes the load pipes a cycle: a 128-dim head's 16 folded loads cost what its 8
// stores do). Not for larger calls: there GCC's folded form was faster (LLC-resident prefill 10-15 %,
// docs/performance-log.md; a 40 KiB decode call 2-5 %), so select_rotate_kernel picks by size.
struct F32PinnedCodec : F32Codec {
  static VF Load(DF d, const T* p) {
    VF v = hn::LoadU(d, p);
#if HWY_ARCH_X86
    asm("" : "+v"(v.raw));
#endif
    return v;
  }
};

// bf16 storage. Narrowing is float_to_bf16 (ropekit/dtype.hpp: round to nearest even, NaN quieted
// with its payload's high bits kept). kNative narrows with AVX512_BF16's vcvtneps2bf16 where the
// target can encode it: the SDM's convert_fp32_to_bfloat16 is the same rounding and the same NaN
// rule, except that it flushes subnormal inputs to ±0 — so a vector holding a subnormal takes the
// software path, and every target keeps the reference's bits (tests/targets_test.cpp; every float
// rounding class of every bf16 value in tests/append_test.cpp's cache-converter test). ropekit lists
// the native codec as its own target, AVX3_BF16 (cpu/dispatch.hpp): Highway 1.0 has no target for
// the extension, and kernels pick the codec when they are chosen, so the hot loop has no flag.
// On AArch64 with FEAT_BF16 the twin narrows with BFCVTN (NEON) or BFCVT (SVE): round to nearest even, NaNs quieted
// with their high payload bits kept (FPCR.DN is 0 under Linux). The instructions follow FPCR.FZ: with Linux's
// FZ = 0 they convert subnormal inputs exactly (under qemu the tests pass with the test below removed), but a program
// may set FZ (-ffast-math's startup code does), and then they flush them to ±0 as x86's does — so a vector holding a
// subnormal takes the software path here too. Assembled with `.arch_extension bf16`, so the targets themselves need
// no bf16 flag.
#define ROPEKIT_ARM_SVE \
  (HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128)
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || (HWY_ARCH_ARM_A64 && (HWY_TARGET == HWY_NEON || ROPEKIT_ARM_SVE))
#define ROPEKIT_NATIVE_BF16 1
#else
#define ROPEKIT_NATIVE_BF16 0
#endif

template <bool kNative>
struct BF16CodecT {
  using T = std::uint16_t;
  static VF Load(DF d, const T* p) {
    const hn::RebindToUnsigned<DF> du32;
    const hn::Rebind<std::uint16_t, DF> du16;
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
  }
  // float_to_bf16 in vectors (Highway 1.0's bf16 demotion truncates instead of rounding).
  static auto SoftwareDemote(VF v) {
    const hn::RebindToUnsigned<DF> du32;
    const hn::RebindToSigned<DF> di32;
    const hn::Rebind<std::uint16_t, DF> du16;
    const auto bits = hn::BitCast(du32, v);
    const auto high = hn::ShiftRight<16>(bits);
    const auto lsb = hn::And(high, hn::Set(du32, 1u));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du32, 0x7fffu), lsb)));
    const auto quiet_nan = hn::Or(high, hn::Set(du32, 0x0040u));
    const auto out = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), quiet_nan, rounded);
    return hn::DemoteTo(du16, hn::BitCast(di32, out));
  }
#if ROPEKIT_NATIVE_BF16 && HWY_ARCH_X86
  // fpclass 0x20: denormal. Intrinsics and inline assembly, not _mm512_cvtneps_pbh: that intrinsic
  // needs the function compiled for avx512bf16, which Highway's AVX3 targets are not (nor may it be
  // inlined into them).
  static bool NoSubnormal(VF v) { return _mm512_fpclass_ps_mask(v.raw, 0x20) == 0; }
  static bool NoSubnormal(VF x, VF y) {
    return _kortestz_mask16_u8(_mm512_fpclass_ps_mask(x.raw, 0x20), _mm512_fpclass_ps_mask(y.raw, 0x20)) != 0;
  }
  static auto NativeDemote(VF v) {
    __m256i out;
    asm("vcvtneps2bf16 %1, %0" : "=v"(out) : "v"(v.raw));
    return decltype(SoftwareDemote(v)){out};
  }
#elif ROPEKIT_NATIVE_BF16
  // A subnormal lane: exponent bits 0, mantissa bits not.
  static auto Subnormal(VF v) {
    const hn::RebindToUnsigned<DF> du32;
    const auto bits = hn::BitCast(du32, v);
    return hn::AndNot(hn::Eq(hn::And(bits, hn::Set(du32, 0x7f800000u)), hn::Zero(du32)),
                      hn::Eq(hn::And(bits, hn::Set(du32, 0x007fffffu)), hn::Zero(du32)));
  }
  static bool NoSubnormal(VF v) { return hn::AllFalse(hn::RebindToUnsigned<DF>(), Subnormal(v)); }
  static bool NoSubnormal(VF x, VF y) {
    return hn::AllFalse(hn::RebindToUnsigned<DF>(), hn::Or(Subnormal(x), Subnormal(y)));
  }
#if HWY_TARGET == HWY_NEON
  static auto NativeDemote(VF v) {
    uint16x4_t out;
    asm(".arch_extension bf16\n\tbfcvtn %0.4h, %1.4s" : "=w"(out) : "w"(v.raw));
    return decltype(SoftwareDemote(v)){out};
  }
#else  // SVE (vectors are the sizeless types themselves): BFCVT leaves each bf16 in the low half of its 32-bit lane;
       // the demotion packs the lanes (exact: each value is below 2^16)
  static auto NativeDemote(VF v) {
    const hn::RebindToUnsigned<DF> du32;
    const hn::RebindToSigned<DF> di32;
    svuint32_t out = svdup_n_u32(0);
    asm(".arch_extension bf16\n\tbfcvt %0.h, %1/m, %2.s" : "+w"(out) : "Upl"(svptrue_b32()), "w"(v));
    return hn::DemoteTo(hn::Rebind<std::uint16_t, DF>(), hn::BitCast(di32, hn::And(out, hn::Set(du32, 0xffffu))));
  }
#endif
#endif
  template <bool kStream, class V16>
  static void Put(V16 bits, T* p) {
    const hn::Rebind<std::uint16_t, DF> du16;
    if constexpr (kStream)
      hn::Stream(bits, du16, p);
    else
      hn::StoreU(bits, du16, p);
  }
  template <bool kStream>
  static void Store(VF v, DF, T* p) {
#if ROPEKIT_NATIVE_BF16
    if constexpr (kNative) {
      if (HWY_LIKELY(NoSubnormal(v))) return Put<kStream>(NativeDemote(v), p);
    }
#endif
    Put<kStream>(SoftwareDemote(v), p);
  }
  // Two vectors with one subnormal test (the rotation's a and b halves).
  template <bool kStream>
  static void StoreTwo(VF x, T* px, VF y, T* py) {
#if ROPEKIT_NATIVE_BF16
    if constexpr (kNative) {
      if (HWY_LIKELY(NoSubnormal(x, y))) {
        Put<kStream>(NativeDemote(x), px);
        return Put<kStream>(NativeDemote(y), py);
      }
    }
#endif
    Put<kStream>(SoftwareDemote(x), px);
    Put<kStream>(SoftwareDemote(y), py);
  }
};
using BF16Codec = BF16CodecT<false>;
// The native codec where this target has one; elsewhere the same type as BF16Codec (so a kernel
// instantiated with either is one kernel).
using BF16NativeCodec = BF16CodecT<ROPEKIT_NATIVE_BF16 != 0>;

struct F16Codec {
  using T = std::uint16_t;
  static VF Load(DF d, const T* p) {
    const hn::Rebind<hwy::float16_t, DF> df16;
    return hn::PromoteTo(d, hn::LoadU(df16, reinterpret_cast<const hwy::float16_t*>(p)));
  }
  template <bool kStream>
  static void Store(VF v, DF, T* p) {
    const hn::Rebind<hwy::float16_t, DF> df16;
    const hn::Rebind<std::uint16_t, DF> du16;
    const auto bits = hn::BitCast(du16, hn::DemoteTo(df16, v));
    if constexpr (kStream)
      hn::Stream(bits, du16, p);
    else
      hn::StoreU(bits, du16, p);
  }
};

// Stores two vectors: through the codec's StoreTwo where it has one (bf16's native narrowing tests both
// for subnormals at once), else one Store each.
template <class Codec, bool kStream>
HWY_INLINE void StoreTwo(VF x, typename Codec::T* px, VF y, typename Codec::T* py) {
  if constexpr (requires { Codec::template StoreTwo<kStream>(x, px, y, py); }) {
    Codec::template StoreTwo<kStream>(x, px, y, py);
  } else {
    Codec::template Store<kStream>(x, DF(), px);
    Codec::template Store<kStream>(y, DF(), py);
  }
}

// float_to_e4m3 (ropekit/dtype.hpp) in vectors: the same steps, lane by lane. |x|'s bits fit int32
// without the sign, so the selects compare as signed. 16 instructions per 16 values on AVX-512 (the
// encoder bounds an fp8 cache's append: docs/performance-log.md).
HWY_INLINE auto EncodeE4m3(VF v) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::RebindToSigned<DF> di32;
  const DF d;
  const auto bits = hn::BitCast(du32, v);
  const auto a = hn::And(bits, hn::Set(du32, 0x7fffffffu));
  const auto lsb = hn::And(hn::ShiftRight<20>(a), hn::Set(du32, 1u));
  const auto normal =
      hn::Min(hn::ShiftRight<20>(hn::Add(a, hn::Add(lsb, hn::Set(du32, kE4m3NormalBias)))), hn::Set(du32, 0x7eu));
  const auto sum = hn::Add(hn::BitCast(d, a), hn::Set(d, 0x1p14f));
  const auto subnormal = hn::Sub(hn::BitCast(du32, sum), hn::Set(du32, 0x46800000u));
  const auto ai = hn::BitCast(di32, a);
  auto out = hn::IfThenElse(hn::RebindMask(du32, hn::Lt(ai, hn::Set(di32, 0x3c800000))), subnormal, normal);
  out = hn::OrAnd(out, hn::ShiftRight<24>(bits), hn::Set(du32, 0x80u));
  out = hn::IfThenElse(hn::RebindMask(du32, hn::Gt(ai, hn::Set(di32, 0x7f800000))), hn::Set(du32, 0x7fu), out);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // Every lane holds a byte: truncate (vpmovdb) rather than Highway 1.0's saturating DemoteTo (two
  // packs, a mask and a permute on AVX-512).
  return hn::Vec128<std::uint8_t, 16>{_mm512_cvtepi32_epi8(out.raw)};
#else
  return hn::DemoteTo(hn::Rebind<std::uint8_t, DF>(), hn::BitCast(di32, out));
#endif
}

template <class From, class Bf16>
HWY_INLINE void ConvertFrom(const typename From::T* src, DType from, std::int64_t n, void* dst, CacheDType to,
                            float scale) {
  const DF d;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  switch (to) {
    case CacheDType::F32:
      for (; i + lanes <= n; i += lanes)
        F32Codec::Store<false>(From::Load(d, src + i), d, static_cast<float*>(dst) + i);
      break;
    case CacheDType::BF16:
      for (; i + lanes <= n; i += lanes) {
        Bf16::template Store<false>(From::Load(d, src + i), d, static_cast<std::uint16_t*>(dst) + i);
      }
      break;
    case CacheDType::F16:
      for (; i + lanes <= n; i += lanes) {
        F16Codec::Store<false>(From::Load(d, src + i), d, static_cast<std::uint16_t*>(dst) + i);
      }
      break;
    case CacheDType::F8E4M3: {
      const hn::Rebind<std::uint8_t, DF> du8;
      // x / scale for the reference's bits. Where scale is a power of two whose reciprocal is a float
      // (every power of two from 2^-126 up), x · (1/scale) is the same real number x·2^-k rounded once —
      // the same float, subnormals, overflow and NaN included — and a multiply instead of a divide
      // (the unscaled caches engines default to have scale 1).
      int exponent = 0;
      const float reciprocal = 1.0f / scale;
      if (std::frexp(scale, &exponent) == 0.5f && std::isfinite(reciprocal)) {
        const VF factor = hn::Set(d, reciprocal);
        for (; i + lanes <= n; i += lanes) {
          hn::StoreU(EncodeE4m3(hn::Mul(From::Load(d, src + i), factor)), du8, static_cast<std::uint8_t*>(dst) + i);
        }
        break;
      }
      const VF divisor = hn::Set(d, scale);
      for (; i + lanes <= n; i += lanes) {
        hn::StoreU(EncodeE4m3(hn::Div(From::Load(d, src + i), divisor)), du8, static_cast<std::uint8_t*>(dst) + i);
      }
      break;
    }
  }
  if (i < n) {
    detail::convert_to_cache_reference(src + i, from, n - i, static_cast<std::byte*>(dst) + i * element_size(to), to,
                                       scale);
  }
}

template <class Bf16>
void ConvertToCache(const void* src, DType from, std::int64_t n, void* dst, CacheDType to, float scale) {
  if (to != CacheDType::F8E4M3 && static_cast<int>(to) == static_cast<int>(from)) {
    std::memcpy(dst, src, static_cast<std::size_t>(n * element_size(from)));
    return;
  }
  switch (from) {
    case DType::BF16: return ConvertFrom<Bf16, Bf16>(static_cast<const std::uint16_t*>(src), from, n, dst, to, scale);
    case DType::F16:
      return ConvertFrom<F16Codec, Bf16>(static_cast<const std::uint16_t*>(src), from, n, dst, to, scale);
    default: return ConvertFrom<F32Codec, Bf16>(static_cast<const float*>(src), from, n, dst, to, scale);
  }
}

inline CacheConvertKernel CacheConvertKernelFor(bool native_bf16) {
  return native_bf16 ? &ConvertToCache<BF16NativeCodec> : &ConvertToCache<BF16Codec>;
}

// Storage rows to float32 (attention's tile loads): the codecs' exact widening, a vector at a time —
// detail::widen's bits (the cache-converter test compares every bf16 and f16 pattern).
HWY_INLINE void WidenRow(const void* src, DType dtype, std::int64_t n, float* dst) {
  ConvertToCache<BF16Codec>(src, dtype, n, dst, CacheDType::F32, 1.0f);
}

// e4m3 bytes to float32, each × scale: e4m3_to_float(b) · scale (ropekit/dtype.hpp: exact, then one
// rounding), 16 values in 5 vector operations on AVX-512. Sign-extended to 16 bits and shifted left by
// 7, the byte's sign, exponent and mantissa fall on binary16's, minus a bit 14 that is masked off: the
// binary16 holds the e4m3 value × 2^-8 exactly (subnormal codes on binary16 subnormals), which widens
// exactly, and one multiply by 2^8 · scale (exact for scale < 2^100) rounds the product once. The two
// NaN codes (0x7f, 0xff: written only from a NaN) would decode as ±480: a row holding one goes through
// the reference, as does a scale of 2^100 or more.
HWY_INLINE bool HasE4m3Nan(const std::uint8_t* src, std::int64_t n) {
  const hn::ScalableTag<std::uint8_t> du8;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(du8));
  const auto magnitude = hn::Set(du8, std::uint8_t{0x7f});
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    if (!hn::AllFalse(du8, hn::Eq(hn::And(hn::LoadU(du8, src + i), magnitude), magnitude))) return true;
  }
  for (; i < n; ++i) {
    if ((src[i] & 0x7f) == 0x7f) return true;
  }
  return false;
}

HWY_INLINE void WidenE4m3(const std::uint8_t* src, std::int64_t n, float scale, float* dst) {
  const DF d;
  const hn::Rebind<std::int8_t, DF> di8;
  const hn::Rebind<std::int16_t, DF> di16;
  const hn::Rebind<hwy::float16_t, DF> df16;
  const auto lanes = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  if (scale < 0x1p100f && !HasE4m3Nan(src, n)) {
    const VF factor = hn::Set(d, 0x1p8f * scale);
    const auto fields = hn::Set(di16, static_cast<std::int16_t>(0xbf80));  // sign, then bits 13 … 7
    for (; i + lanes <= n; i += lanes) {
      const auto bytes = hn::PromoteTo(di16, hn::LoadU(di8, reinterpret_cast<const std::int8_t*>(src + i)));
      const auto half = hn::BitCast(df16, hn::And(hn::ShiftLeft<7>(bytes), fields));
      hn::StoreU(hn::Mul(hn::PromoteTo(d, half), factor), d, dst + i);
    }
  }
  detail::e4m3_widen_reference(src + i, n - i, scale, dst + i);
}

#else  // !ROPEKIT_SIMD_KERNELS: the scalar reference is this target's converter.

inline CacheConvertKernel CacheConvertKernelFor(bool) { return &detail::convert_to_cache_reference; }

inline void WidenRow(const void* src, DType dtype, std::int64_t n, float* dst) { detail::widen(src, dtype, n, dst); }

inline void WidenE4m3(const std::uint8_t* src, std::int64_t n, float scale, float* dst) {
  detail::e4m3_widen_reference(src, n, scale, dst);
}

#endif  // ROPEKIT_SIMD_KERNELS

// e4m3 bytes to float32 × scale on this target (cpu::select_e4m3_widen_kernel).
inline void E4m3Widen(const std::uint8_t* src, std::int64_t n, float scale, float* dst) {
  WidenE4m3(src, n, scale, dst);
}

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
