// src/cpu/bf16_pairs-inl.h — bf16 rows on AVX3_BF16 in even/odd lanes (Bf16EvenOdd): the native narrowing's
// steps over a token's rows (coefficients-inl.h's), with the codec's exact software path for the values the
// instruction treats differently. Per Highway target, included by rotate-inl.h.
#if defined(ROPEKIT_CPU_BF16_PAIRS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPEKIT_CPU_BF16_PAIRS_INL_H_
#undef ROPEKIT_CPU_BF16_PAIRS_INL_H_
#else
#define ROPEKIT_CPU_BF16_PAIRS_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

#include "cpu/codecs-inl.h"
#include "cpu/coefficients-inl.h"
#include "cpu/rotate_steps-inl.h"
#include "cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ropekit::cpu::HWY_NAMESPACE {
using detail::RotateJob;

#if ROPEKIT_SIMD_KERNELS
#if ROPEKIT_NATIVE_BF16 && HWY_ARCH_X86
// bf16 rows on AVX3_BF16 in even/odd lanes: 32 bf16 values load as one vector of 32-bit lanes, whose
// low halves (the even values) widen with one shift and whose high halves (the odd ones) with one AND;
// the rotated evens and odds narrow together with one vcvtne2ps2bf16 and go back to value order with
// one vpermw. Half pairing: a step is 32 pairs (the even and the odd ones of a and b), 25 port-0/5
// operations instead of 30. Interleaved pairing: the even lanes are the pairs' a values and the odd
// lanes their b values, so the lane swap disappears too (16 pairs: about 9 operations instead of 16).
// The arithmetic is the vector steps' on the same values (coefficients regrouped alike), so the bits
// are; a step whose results hold a subnormal (which the instruction flushes) is narrowed by
// the codec's software rounding (float_to_bf16 in vectors: NarrowExact). The subnormal test runs only where a narrowed
// word is ±0 (a flush leaves one): one vptestnmw per 32 values instead of a vfpclassps per 16.
struct Bf16EvenOdd {
  using DU = hn::RebindToUnsigned<DF>;

  static void Widen(const std::uint16_t* p, VF& even, VF& odd) {
    const DF d;
    const DU du;
    const auto v = hn::LoadU(du, reinterpret_cast<const std::uint32_t*>(p));
    even = hn::BitCast(d, hn::ShiftLeft<16>(v));
    odd = hn::BitCast(d, hn::And(v, hn::Set(du, 0xFFFF0000u)));
  }

  // Value order from vcvtne2ps2bf16's [16 evens | 16 odds]: output word 2k ← word k, 2k + 1 ← 16 + k.
  static __m512i Interleave() {
    alignas(64) static constexpr std::uint16_t kIndex[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                             21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                             11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_load_si512(kIndex);
  }

  // [16 evens | 16 odds] narrowed by the instruction (subnormal inputs become ±0).
  static __m512i Pack(VF even, VF odd) {
    __m512i packed;
    asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(packed) : "v"(odd.raw), "v"(even.raw));
    return packed;
  }

  // float_to_bf16's words for 16 even and 16 odd values, in value order: the codec's software narrowing (the non-native
  // targets' store), for the steps whose results hold a subnormal, which the instruction flushes. In registers, not
  // by a call: a call in the heads loop, though never taken, made the compiler keep the loop's constants in memory
  // around it, a measurable cost per token (docs/performance-log.md: the code comments' figures).
  static __m512i NarrowExact(VF even, VF odd) {
    const DU du;
    const auto words = [&](VF v) { return hn::PromoteTo(du, BF16CodecT<true>::SoftwareDemote(v)); };
    return hn::Or(words(even), hn::ShiftLeft<16>(words(odd))).raw;
  }

  // 16 even and 16 odd values stored in value order: narrowed by the instruction, unless a narrowed word
  // is ±0 and the exact test finds a subnormal (which the instruction flushed) — then by float_to_bf16.
  // A flush always leaves a ±0 word, so results with none held no subnormal.
  static void Store(VF even, VF odd, __m512i order, std::uint16_t* p) {
    const __m512i packed = Pack(even, odd);
    const __mmask32 zero = _mm512_testn_epi16_mask(packed, _mm512_set1_epi16(0x7fff));
    if (HWY_LIKELY(_kortestz_mask32_u8(zero, zero) != 0) || BF16CodecT<true>::NoSubnormal(even, odd)) {
      _mm512_storeu_si512(p, _mm512_permutexvar_epi16(order, packed));
    } else {
      _mm512_storeu_si512(p, NarrowExact(even, odd));
    }
  }

  // The coefficients vc, vs (2·sizeof...(J) vectors each, the layout RotateRow reads) regrouped for the even/odd steps.
  // Half: c and s of the even pairs (ce, se) and of the odd pairs (co, so). Interleaved: the lanes hold c_j twice and
  // (−s_j, s_j), so ce and so are one c and one s per pair (co and se go unused); even lanes are the pairs' a values,
  // odd lanes their b values, and no lane swap is needed.
  template <std::size_t... J>
  HWY_INLINE static void Regroup(const VF* vc, const VF* vs, VF* ce, VF* co, VF* se, VF* so,
                                 std::index_sequence<J...>) {
    const DF d;
    ((ce[J] = hn::ConcatEven(d, vc[2 * J + 1], vc[2 * J]), co[J] = hn::ConcatOdd(d, vc[2 * J + 1], vc[2 * J]),
      se[J] = hn::ConcatEven(d, vs[2 * J + 1], vs[2 * J]), so[J] = hn::ConcatOdd(d, vs[2 * J + 1], vs[2 * J])),
     ...);
  }

  // Rows of 2·sizeof...(J) vectors (Half: of pairs; Interleaved: of lanes), the coefficients (vc, vs:
  // the layout RotateRow reads) regrouped once per token.
  template <Pairing kPairing, std::size_t... J>
  HWY_INLINE static void Heads(const PairMap& map, const std::uint16_t* src, std::int64_t src_stride,
                               std::uint16_t* dst, std::int64_t dst_stride, std::int64_t heads, const VF* vc,
                               const VF* vs, bool prefetch, std::index_sequence<J...>) {
    const DF d;
    const std::size_t n = hn::Lanes(d);
    const std::size_t width = 2 * sizeof...(J) * n;
    const __m512i order = Interleave();
    const bool copy_pass = dst != src && map.head_dim > map.rotary_dim;
    const auto pass_bytes = static_cast<std::size_t>(map.head_dim - map.rotary_dim) * sizeof(std::uint16_t);
    VF ce[sizeof...(J)], co[sizeof...(J)], se[sizeof...(J)], so[sizeof...(J)];
    Regroup(vc, vs, ce, co, se, so, std::index_sequence<J...>());
    // Two copies of the loop: with the pass-through copy (out of place, partial rotary) and without, so that the common
    // loop holds no call (see NarrowExact).
    const auto loop = [&](auto copy) HWY_ATTR __attribute__((always_inline)) {
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::uint16_t* in = src + h * src_stride;
        std::uint16_t* out = dst + h * dst_stride;
        if (prefetch) PrefetchAhead(in, out, (kPairing == Pairing::Half ? 2 : 1) * width * sizeof(std::uint16_t));
        if constexpr (decltype(copy)::value) std::memcpy(out + map.rotary_dim, in + map.rotary_dim, pass_bytes);
        if constexpr (kPairing == Pairing::Half) {
          (HalfStep(in + 2 * J * n, in + width + 2 * J * n, out + 2 * J * n, out + width + 2 * J * n, ce[J], se[J],
                    co[J], so[J], order),
           ...);
        } else {
          (InterleavedStep(in + 2 * J * n, out + 2 * J * n, ce[J], so[J], order), ...);
        }
      }
    };
    if (copy_pass) {
      loop(std::true_type());
    } else {
      loop(std::false_type());
    }
  }

  // Whole tokens [token, end) of bf16 q and k rows, half pairing, 2·sizeof...(J) vectors of pairs, each token's
  // coefficients its angle row (token_rows: the table's, or computed on the fly), no pass-through lanes, no prefetch:
  // bench/compare/kernel_floor's hand-written kernel's shape, written as it is — the token's coefficients regrouped
  // once for its q and k rows, a plain loop over each view's heads, no flags. The generic walk (RotateWholeTokens →
  // RotateTokenInRegisters → Heads) does the same steps, so the same bits, but its flags, regroup per run and merged
  // q/k runs left GCC a loop that reloaded its interleave index per head (docs/performance-log.md: the code comments'
  // figures). Interleaved pairing likewise: there the regrouped coefficients are the table's rows themselves (one c and
  // one s per pair: Regroup's ce and so), loaded as they are — no expansion to lanes and no regroup per token.
  template <Pairing kPairing, class Rows, std::size_t... J>
  HWY_NOINLINE static void WholeTokens(const RotateJob& job, std::int64_t token, std::int64_t end, Rows& token_rows,
                                       std::index_sequence<J...>) {
    const DF d;
    const std::size_t n = hn::Lanes(d);
    constexpr std::size_t kVectors = 2 * sizeof...(J);
    const std::size_t width = kVectors * n;
    const RotateArgs& args = job.args;
    const __m512i order = Interleave();
    std::int64_t b = 0, s = 0;
    if (token != 0) b = token / job.seq, s = token % job.seq;
    using Rows16 = ViewRows<std::uint16_t>;
    const Rows16 q_rows(args.q, args.q_out, job.q_heads), k_rows(args.k, args.k_out, job.k_heads);
    const std::int64_t seq = job.seq;
    const auto rows = [&](const Rows16& view, const VF* ce, const VF* co, const VF* se, const VF* so) HWY_ATTR
        __attribute__((always_inline)) {
      std::uint16_t* in = view.in_row(b, s);
      std::uint16_t* out = view.out_row(b, s);
      const std::int64_t in_stride = view.in_head, out_stride = view.out_head, heads = view.heads;
      for (std::int64_t h = 0; h < heads; ++h, in += in_stride, out += out_stride) {
        if constexpr (kPairing == Pairing::Half) {
          (HalfStep(in + 2 * J * n, in + width + 2 * J * n, out + 2 * J * n, out + width + 2 * J * n, ce[J], se[J],
                    co[J], so[J], order),
           ...);
        } else {
          (InterleavedStep(in + 2 * J * n, out + 2 * J * n, ce[J], so[J], order), ...);
        }
      }
    };
    for (; token < end; ++token) {
      const RowCoefficients c = token_rows(token);
      VF ce[sizeof...(J)], co[sizeof...(J)], se[sizeof...(J)], so[sizeof...(J)];
      if constexpr (kPairing == Pairing::Half) {
        VF vc[kVectors], vs[kVectors];
        for (std::size_t i = 0; i < kVectors; ++i)
          vc[i] = hn::LoadU(d, c.read_c + i * n), vs[i] = hn::LoadU(d, c.read_s + i * n);
        Regroup(vc, vs, ce, co, se, so, std::index_sequence<J...>());
      } else {
        ((ce[J] = hn::LoadU(d, c.read_c + J * n), so[J] = hn::LoadU(d, c.read_s + J * n)), ...);
      }
      if (q_rows.heads > 0) rows(q_rows, ce, co, se, so);
      if (k_rows.heads > 0) rows(k_rows, ce, co, se, so);
      if (++s == seq) {
        s = 0;
        ++b;
      }
    }
  }

  // 32 interleaved values (16 pairs): a' = fma(a, c, −b·s), b' = fma(b, c, a·s), as InterleavedStep's
  // lanes compute them.
  HWY_INLINE static void InterleavedStep(const std::uint16_t* in, std::uint16_t* out, VF c, VF s, __m512i order) {
    VF a, b;
    Widen(in, a, b);
    Store(hn::MulSub(a, c, hn::Mul(b, s)), hn::MulAdd(b, c, hn::Mul(a, s)), order, out);
  }

  // 32 pairs: 16 even and 16 odd ones of a and of b.
  HWY_INLINE static void HalfStep(const std::uint16_t* a_in, const std::uint16_t* b_in, std::uint16_t* a_out,
                                  std::uint16_t* b_out, VF ce, VF se, VF co, VF so, __m512i order) {
    VF ae, ao, be, bo;
    Widen(a_in, ae, ao);
    Widen(b_in, be, bo);
    const VF ae2 = hn::MulSub(ae, ce, hn::Mul(be, se));
    const VF be2 = hn::MulAdd(be, ce, hn::Mul(ae, se));
    const VF ao2 = hn::MulSub(ao, co, hn::Mul(bo, so));
    const VF bo2 = hn::MulAdd(bo, co, hn::Mul(ao, so));
    // Store's test for a and b together: one mask test instead of two (it showed in an L2-resident call).
    const __m512i a_packed = Pack(ae2, ao2);
    const __m512i b_packed = Pack(be2, bo2);
    const __m512i magnitude = _mm512_set1_epi16(0x7fff);
    const bool no_zero = _kortestz_mask32_u8(_mm512_testn_epi16_mask(a_packed, magnitude),
                                             _mm512_testn_epi16_mask(b_packed, magnitude)) != 0;
    if (HWY_LIKELY(no_zero) || (BF16CodecT<true>::NoSubnormal(ae2, ao2) && BF16CodecT<true>::NoSubnormal(be2, bo2))) {
      _mm512_storeu_si512(a_out, _mm512_permutexvar_epi16(order, a_packed));
      _mm512_storeu_si512(b_out, _mm512_permutexvar_epi16(order, b_packed));
    } else {
      _mm512_storeu_si512(a_out, NarrowExact(ae2, ao2));
      _mm512_storeu_si512(b_out, NarrowExact(be2, bo2));
    }
  }
};
#endif
#endif  // ROPEKIT_SIMD_KERNELS

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
