// src/cpu/rotate-inl.h — the per-target RoPE kernels. src/cpu/rotate.cpp compiles this once per
// Highway target (foreach_target.h) and hands out one kernel per call; per-target consumers (the
// fused attention driver, attention-inl.h) include it and inline RotateTokenHeads into their loads.
// Storage goes through codecs-inl.h, on-the-fly coefficients through angles-inl.h; the row steps are
// rotate_steps-inl.h's, a token's coefficients coefficients-inl.h's, AVX3_BF16's native bf16 steps
// bf16_pairs-inl.h's. This file puts them together per head, per token and per call.
//
// Per token the kernel forms the float32 coefficients c = m·cos, s = sign·m·sin for every pair
// (m = cos_sin_scale, as the scalar reference does), then streams through that token's q and k
// heads: each element is read once and written once. Per pair (a, b):
//   a' = fma(a, c, −(b·s)),  b' = fma(b, c, a·s)      in float32, one rounding to storage.
// Half pairing (NeoX, Llama): a and b are vectors at lanes i and i + rotary_dim/2.
// Interleaved pairing (GPT-J): one vector holds whole pairs; Reverse2 swaps each pair's lanes and
// the coefficients are stored per lane with the sine's sign folded in, so x' = fma(x, C, swap(x)·S).
// Tails shorter than a vector go through a bounce buffer: no access outside the row and no masked
// store (which may rewrite neighbouring bytes another thread is writing), and the same arithmetic
// as the body.
#if defined(ROPEKIT_CPU_ROTATE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPEKIT_CPU_ROTATE_INL_H_
#undef ROPEKIT_CPU_ROTATE_INL_H_
#else
#define ROPEKIT_CPU_ROTATE_INL_H_
#endif

#include <hwy/aligned_allocator.h>
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/angles-inl.h"
#include "cpu/bf16_pairs-inl.h"
#include "cpu/codecs-inl.h"
#include "cpu/coefficients-inl.h"
#include "cpu/rotate_steps-inl.h"
#include "cpu/simd-inl.h"
#include "rope/angles.hpp"
#include "rope/backend.hpp"
#include "rope/call_shape.hpp"
#include "rope/reference.hpp"
#include "ropekit/table.hpp"

HWY_BEFORE_NAMESPACE();
namespace ropekit::cpu::HWY_NAMESPACE {
using detail::RotateJob;

#if ROPEKIT_SIMD_KERNELS

// The row steps (rotate_steps-inl.h), the token's coefficients (coefficients-inl.h) and the native bf16 steps
// (bf16_pairs-inl.h) are included above; what follows puts them together per head, per token and per call.
// Rotates one head row: src → dst (dst == src: in place; else the pass-through lanes are copied).
template <class Codec, Pairing kPairing>
HWY_INLINE void RotateHead(const PairMap& map, const typename Codec::T* src, typename Codec::T* dst,
                           const Scratch& scratch, bool stream, bool& streamed) {
  using T = typename Codec::T;
  if (dst == src) {
    RotateRow<Codec, kPairing, false>(src, dst, scratch.read_c, scratch.read_s, map.rotary_dim);
    return;
  }
  std::memcpy(dst + map.rotary_dim, src + map.rotary_dim,
              static_cast<std::size_t>(map.head_dim - map.rotary_dim) * sizeof(T));
  // Non-temporal stores need every full vector store aligned to the vector size.
  const std::size_t vector_bytes = hn::Lanes(DF()) * sizeof(T);
  const auto aligned = [&](const T* p) { return reinterpret_cast<std::uintptr_t>(p) % vector_bytes == 0; };
  if (stream && aligned(dst) && (kPairing == Pairing::Interleaved || aligned(dst + map.rotary_dim / 2))) {
    streamed = true;
    RotateRow<Codec, kPairing, true>(src, dst, scratch.read_c, scratch.read_s, map.rotary_dim);
  } else {
    RotateRow<Codec, kPairing, false>(src, dst, scratch.read_c, scratch.read_s, map.rotary_dim);
  }
}

#if !HWY_HAVE_SCALABLE
// Whether a head of kSteps vectors of pairs takes HalfHeadLoadsFirst: half pairing, a codec that stores vector by
// vector, and a, b, c and s all in registers (spilled — AVX2, 128 dims of fp32 — decode took longer).
template <class Codec, Pairing kPairing, std::size_t kSteps>
constexpr bool kLoadsFirst = kPairing == Pairing::Half && !kStoresInPairs<Codec> && 4 * kSteps <= kRegistersForRows;

// One head of sizeof...(I) vectors of pairs, half pairing, c and s in registers: the head's loads first, then its
// stores in address order (a's steps, then b's): stores that alternate between the two halves split two cache lines
// each where the rows are not 64-byte aligned (docs/performance-log.md: the code comments' figures). HalfStep's
// arithmetic, so its bits.
template <class Codec, std::size_t... I>
HWY_INLINE void HalfHeadLoadsFirst(const typename Codec::T* in, typename Codec::T* out, const VF* vc, const VF* vs,
                                   std::index_sequence<I...>) {
  const DF d;
  const std::size_t n = hn::Lanes(d);
  const std::size_t width = sizeof...(I) * n;
  const VF a[] = {Codec::Load(d, in + I * n)...};
  const VF b[] = {Codec::Load(d, in + width + I * n)...};
  const VF ra[] = {hn::MulSub(a[I], vc[I], hn::Mul(b[I], vs[I]))...};
  const VF rb[] = {hn::MulAdd(b[I], vc[I], hn::Mul(a[I], vs[I]))...};
  (Codec::template Store<false>(ra[I], d, out + I * n), ...);
  (Codec::template Store<false>(rb[I], d, out + width + I * n), ...);
}

// Whether rows of kSteps vectors take PlainWholeTokens: fp32 or fp16 in q and k (codecs that store vector by vector);
// half pairing at 64 dims on AVX-512 (two vectors of pairs, in registers with their loads first; at 128 dims the grid
// measured no gain), interleaved up to 128 (eight vectors of lanes: faster than the scratch's expansion on Zen 5
// (docs/performance-log.md: the code comments' figures)).
template <class QCodec, class KCodec>
constexpr bool kPlainCodecs = std::is_same_v<QCodec, KCodec> &&
                              (std::is_same_v<typename QCodec::T, float> || std::is_same_v<QCodec, F16Codec>);
template <class QCodec, class KCodec, Pairing kPairing, std::size_t kSteps>
constexpr bool kPlainWholeTokens = kPlainCodecs<QCodec, KCodec> &&
                                   (kPairing == Pairing::Half ? kLoadsFirst<QCodec, kPairing, kSteps> && kSteps <= 2
                                                              : kSteps <= 8);

// Whole tokens [token, end) of one such codec's q and k rows (kPlainWholeTokens), each token's coefficients its angle
// row (token_rows: the table's, or computed on the fly), no pass-through lanes, no prefetch: Bf16EvenOdd::WholeTokens'
// shape for fp32 and fp16 — per token c and s loaded once for its q and k rows, then a plain loop over each view's
// heads, no flags. The same steps as the generic walk (RotateTokenInRegisters → RotateHeadsInRegisters), so the same
// bits. Interleaved pairing: sizeof...(I) vectors of lanes, each token's rows expanded to lanes in registers
// (PairsToLanes, as WriteCoefficients expands them into the scratch).
template <class Codec, Pairing kPairing, class Rows, std::size_t... I>
HWY_NOINLINE void PlainWholeTokens(const RotateJob& job, std::int64_t token, std::int64_t end, Rows& token_rows,
                                   std::index_sequence<I...>) {
  using T = typename Codec::T;
  const DF d;
  const std::size_t n = hn::Lanes(d);
  const RotateArgs& args = job.args;
  std::int64_t b = 0, s = 0;
  if (token != 0) b = token / job.seq, s = token % job.seq;
  const ViewRows<T> q_rows(args.q, args.q_out, job.q_heads), k_rows(args.k, args.k_out, job.k_heads);
  const std::int64_t seq = job.seq;
  const auto rows = [&](const ViewRows<T>& view, const VF* vc, const VF* vs) HWY_ATTR __attribute__((always_inline)) {
    T* in = view.in_row(b, s);
    T* out = view.out_row(b, s);
    const std::int64_t in_stride = view.in_head, out_stride = view.out_head, heads = view.heads;
    for (std::int64_t h = 0; h < heads; ++h, in += in_stride, out += out_stride) {
      if constexpr (kPairing == Pairing::Half) {
        HalfHeadLoadsFirst<Codec>(in, out, vc, vs, std::index_sequence<I...>());
      } else {
        (InterleavedStep<Codec, false>(d, in + I * n, out + I * n, vc[I], vs[I]), ...);
      }
    }
  };
  for (; token < end; ++token) {
    const RowCoefficients c = token_rows(token);
    VF vc[sizeof...(I)], vs[sizeof...(I)];
    if constexpr (kPairing == Pairing::Half) {
      ((vc[I] = hn::LoadU(d, c.read_c + I * n), vs[I] = hn::LoadU(d, c.read_s + I * n)), ...);
    } else {
      const DH dh;
      (PairsToLanes(hn::LoadU(dh, c.read_c + I * n / 2), hn::LoadU(dh, c.read_s + I * n / 2), vc[I], vs[I]), ...);
    }
    if (q_rows.heads > 0) rows(q_rows, vc, vs);
    if (k_rows.heads > 0) rows(k_rows, vc, vs);
    if (++s == seq) {
      s = 0;
      ++b;
    }
  }
}
#endif

// `heads` rows of one token with the coefficients held in registers across the heads: rotary widths
// (of pairs for Half, of lanes for Interleaved) of kSteps whole vectors, the steps unrolled. The same
// steps as RotateRow, so the same bits; short rows (decode, head_dim 64–128) no longer reload c and s
// per head nor pay a loop per row.
// Not on SVE targets: their vectors are sizeless, so they cannot be held in arrays; RotateHeads takes the row loop
// there (the same steps, so the same bits).
#if !HWY_HAVE_SCALABLE
// (`scratch`: a Scratch, or a RowCoefficients where no scratch is needed: only its read_c and read_s are read.)
template <class Codec, Pairing kPairing, std::size_t kSteps, class Coefficients, std::size_t... I>
HWY_INLINE void RotateHeadsInRegisters(const PairMap& map, const typename Codec::T* src, std::int64_t src_stride,
                                       typename Codec::T* dst, std::int64_t dst_stride, std::int64_t heads,
                                       const Coefficients& scratch, bool prefetch, std::index_sequence<I...>) {
  using T = typename Codec::T;
  const DF d;
  const std::size_t n = hn::Lanes(d);
  const std::size_t width = kSteps * n;
  const VF vc[kSteps] = {hn::LoadU(d, scratch.read_c + I * n)...};
  const VF vs[kSteps] = {hn::LoadU(d, scratch.read_s + I * n)...};
  const bool copy_pass = dst != src && map.head_dim > map.rotary_dim;
  const auto pass_bytes = static_cast<std::size_t>(map.head_dim - map.rotary_dim) * sizeof(T);
#if ROPEKIT_NATIVE_BF16 && HWY_ARCH_X86
  if constexpr (std::is_same_v<Codec, BF16CodecT<true>> && kSteps % 2 == 0) {
    return Bf16EvenOdd::Heads<kPairing>(map, src, src_stride, dst, dst_stride, heads, vc, vs, prefetch,
                                        std::make_index_sequence<kSteps / 2>());
  }
#endif
  for (std::int64_t h = 0; h < heads; ++h) {
    const T* in = src + h * src_stride;
    T* out = dst + h * dst_stride;
    if (prefetch) PrefetchAhead(in, out, (kPairing == Pairing::Half ? 2 : 1) * width * sizeof(T));
    if (copy_pass) std::memcpy(out + map.rotary_dim, in + map.rotary_dim, pass_bytes);
    if constexpr (kLoadsFirst<Codec, kPairing, kSteps>) {
      HalfHeadLoadsFirst<Codec>(in, out, vc, vs, std::index_sequence<I...>());
    } else if constexpr (kPairing == Pairing::Half) {
      (HalfStep<Codec, false>(d, in + I * n, in + width + I * n, out + I * n, out + width + I * n, vc[I], vs[I]), ...);
    } else {
      (InterleavedStep<Codec, false>(d, in + I * n, out + I * n, vc[I], vs[I]), ...);
    }
  }
}

#endif  // !HWY_HAVE_SCALABLE

// Up to 8 steps (16 coefficient vectors): all in registers on AVX-512 (32 of them); on AVX2 (16) the
// compiler keeps some on the stack, which is still faster than the row loop (docs/performance-log.md: the code
// comments' figures).
constexpr std::size_t kMaxStepsInRegisters = 8;

#if !HWY_HAVE_SCALABLE
// The rotary width of `map`'s rows in whole vectors (of pairs for Half, of lanes for Interleaved); 0 where it is not
// whole vectors.
template <Pairing kPairing>
HWY_INLINE std::size_t WidthInVectors(const PairMap& map) {
  const std::size_t n = hn::Lanes(DF());
  const auto width = static_cast<std::size_t>(kPairing == Pairing::Half ? map.rotary_dim / 2 : map.rotary_dim);
  return width % n == 0 ? width / n : 0;
}

// The in-register width of a job's rows (WidthInVectors), or 0 where its stores are non-temporal (out of place, large
// calls): those take the row loop, which streams.
template <Pairing kPairing>
HWY_INLINE std::size_t RegisterSteps(const RotateJob& job) {
  const bool in_place = job.args.q_out.data == nullptr && job.args.k_out.data == nullptr;
  return !job.stream_stores || in_place ? WidthInVectors<kPairing>(*job.map) : 0;
}

// Calls f(std::integral_constant<std::size_t, kSteps>()) where `steps` is an in-register width (1, 2, 4 or 8 vectors)
// and returns true; false for any other.
template <class F>
HWY_INLINE bool WithStepsInRegisters(std::size_t steps, F&& f) {
  switch (steps) {
    case 1: f(std::integral_constant<std::size_t, 1>()); return true;
    case 2: f(std::integral_constant<std::size_t, 2>()); return true;
    case 4: f(std::integral_constant<std::size_t, 4>()); return true;
    case kMaxStepsInRegisters: f(std::integral_constant<std::size_t, kMaxStepsInRegisters>()); return true;
    default: return false;
  }
}
#endif

// `heads` rows of one token (src rows src_stride elements apart, dst rows dst_stride apart; dst ==
// src: in place): in registers where the rotary width is 1, 2, 4 or 8 whole vectors and no
// non-temporal store is wanted, else row by row.
template <class Codec, Pairing kPairing>
HWY_INLINE void RotateHeads(const PairMap& map, const typename Codec::T* src, std::int64_t src_stride,
                            typename Codec::T* dst, std::int64_t dst_stride, std::int64_t heads, const Scratch& scratch,
                            bool stream, bool& streamed, bool prefetch = false) {
#if HWY_HAVE_SCALABLE
  (void)prefetch;  // only the in-registers path prefetches
#else
  if ((!stream || dst == src) && WithStepsInRegisters(WidthInVectors<kPairing>(map), [&](auto steps) {
        constexpr std::size_t kSteps = decltype(steps)::value;
        RotateHeadsInRegisters<Codec, kPairing, kSteps>(map, src, src_stride, dst, dst_stride, heads, scratch, prefetch,
                                                        std::make_index_sequence<kSteps>());
      })) {
    return;
  }
#endif
  for (std::int64_t h = 0; h < heads; ++h) {
    RotateHead<Codec, kPairing>(map, src + h * src_stride, dst + h * dst_stride, scratch, stream, streamed);
  }
}

// Whether token (b, s)'s k rows continue its q rows: the same codec, the same head strides, and k's
// first row (input and, out of place, output) where a (q_heads + 1)-th q row would be.
template <class QCodec, class KCodec>
HWY_INLINE bool QKContiguous(const RotateArgs& args, std::int64_t b, std::int64_t s, std::int64_t q_heads) {
  if constexpr (!std::is_same_v<QCodec, KCodec>) {
    return false;
  } else {
    // As integers: the row after q's last need not lie in q's buffer.
    const auto address = [&](const Heads& v, std::int64_t head) {
      return reinterpret_cast<std::uintptr_t>(v.data) +
             static_cast<std::uintptr_t>((b * v.batch_stride + s * v.seq_stride + head * v.head_stride) *
                                         static_cast<std::int64_t>(element_size(v.dtype)));
    };
    if (q_heads == 0 || args.k.head_stride != args.q.head_stride || address(args.k, 0) != address(args.q, q_heads)) {
      return false;
    }
    if (args.q_out.data == nullptr || args.k_out.data == nullptr) return args.q_out.data == args.k_out.data;
    return args.k_out.head_stride == args.q_out.head_stride && address(args.k_out, 0) == address(args.q_out, q_heads);
  }
}

// Rows [first, last) of the job by (token, head) runs: any range, any layout, every kernel path.
template <Pairing kPairing, class QCodec, class KCodec>
void RotateRowRuns(const RotateJob& job, std::int64_t first, std::int64_t last) {
  if (first >= last) return;
  Scratch scratch(*job.map);
  const RotateArgs& args = job.args;
  const std::int64_t heads = job.q_heads + job.k_heads;
  // Walk (token, head) and (batch, seq) by increments: divisions per row would cost as much as
  // the row's memory traffic.
  // (A call from its first row, as every one-thread call is, skips the divisions: 64-bit divides are
  // tens of cycles, a noticeable part of a decode call.)
  std::int64_t token = 0, h = 0, b = 0, s = 0;
  if (first != 0) {
    token = first / heads, h = first % heads;
    b = token / job.seq, s = token % job.seq;
  }
  bool streamed = false;
  BuildCoefficients<kPairing>(job, token, scratch);
  for (std::int64_t row = first; row < last;) {
    // A run of rows: the token's q heads (or k heads) from h on, up to the range's end.
    std::int64_t run;
    if (h < job.q_heads) {
      // The token's q heads from h on; and its k rows too where they follow its q rows at the same stride (a
      // fused QKV projection's output): one run over both, without a second loop entry and coefficient setup
      // (docs/performance-log.md: the code comments' figures).
      const bool with_k = h == 0 && last - row > job.q_heads && QKContiguous<QCodec, KCodec>(args, b, s, job.q_heads);
      using T = typename QCodec::T;
      run = std::min(with_k ? heads : job.q_heads - h, last - row);
      T* src = static_cast<T*>(args.q.row(b, s, h));
      const bool out = args.q_out.data != nullptr;
      RotateHeads<QCodec, kPairing>(*job.map, src, args.q.head_stride,
                                    out ? static_cast<T*>(args.q_out.row(b, s, h)) : src,
                                    out ? args.q_out.head_stride : args.q.head_stride, run, scratch, job.stream_stores,
                                    streamed, job.prefetch_rows);
    } else {
      using T = typename KCodec::T;
      const std::int64_t head = h - job.q_heads;
      run = std::min(job.k_heads - head, last - row);
      T* src = static_cast<T*>(args.k.row(b, s, head));
      const bool out = args.k_out.data != nullptr;
      RotateHeads<KCodec, kPairing>(*job.map, src, args.k.head_stride,
                                    out ? static_cast<T*>(args.k_out.row(b, s, head)) : src,
                                    out ? args.k_out.head_stride : args.k.head_stride, run, scratch, job.stream_stores,
                                    streamed, job.prefetch_rows);
    }
    row += run;
    h += run;
    if (h == heads) {
      h = 0;
      ++token;
      if (++s == job.seq) {
        s = 0;
        ++b;
      }
      if (row < last) BuildCoefficients<kPairing>(job, token, scratch);
    }
  }
  if (streamed) hwy::FlushStream();  // order the non-temporal stores before the caller reads
}

#if !HWY_HAVE_SCALABLE
// Token (b, s)'s q rows, then its k rows — one run where k continues q — through the in-register kernel of kSteps
// vectors, with the token's coefficients (a Scratch, or a RowCoefficients).
template <Pairing kPairing, class QCodec, class KCodec, std::size_t kSteps, class Coefficients>
HWY_INLINE void RotateTokenInRegisters(const RotateJob& job, std::int64_t b, std::int64_t s,
                                       const Coefficients& coefficients) {
  const RotateArgs& args = job.args;
  const auto steps = std::make_index_sequence<kSteps>();
  std::int64_t merged = 0;  // k rows rotated with q's run
  if (job.q_heads > 0) {
    using T = typename QCodec::T;
    T* src = static_cast<T*>(args.q.row(b, s, 0));
    const bool out = args.q_out.data != nullptr;
    if (job.k_heads > 0 && QKContiguous<QCodec, KCodec>(args, b, s, job.q_heads)) merged = job.k_heads;
    RotateHeadsInRegisters<QCodec, kPairing, kSteps>(*job.map, src, args.q.head_stride,
                                                     out ? static_cast<T*>(args.q_out.row(b, s, 0)) : src,
                                                     out ? args.q_out.head_stride : args.q.head_stride,
                                                     job.q_heads + merged, coefficients, job.prefetch_rows, steps);
  }
  if (job.k_heads > 0 && merged == 0) {
    using T = typename KCodec::T;
    T* src = static_cast<T*>(args.k.row(b, s, 0));
    const bool out = args.k_out.data != nullptr;
    RotateHeadsInRegisters<KCodec, kPairing, kSteps>(
        *job.map, src, args.k.head_stride, out ? static_cast<T*>(args.k_out.row(b, s, 0)) : src,
        out ? args.k_out.head_stride : args.k.head_stride, job.k_heads, coefficients, job.prefetch_rows, steps);
  }
}

// Whole tokens [token, end) of a job whose rows take the in-registers path (kSteps vectors of rotary width, no
// non-temporal stores): per token its coefficients and RotateTokenInRegisters, the rows found from the token's (b, s)
// alone. The same steps as RotateRowRuns, so the same bits; what it saves is RotateRowRuns' per-run work — the
// head/run bookkeeping, four row addresses and the contiguity test recomputed with the loop state spilled to the
// stack, and the dispatch on the width — about as many instructions per token as a 64-dim token's ten rows take
// (perf annotate, Zen 5).
template <Pairing kPairing, class QCodec, class KCodec, std::size_t kSteps>
HWY_NOINLINE void RotateWholeTokens(const RotateJob& job, std::int64_t token, std::int64_t end) {
#if ROPEKIT_NATIVE_BF16 && HWY_ARCH_X86
  // bf16 rows in the hand-written kernel's shape take a kernel of their own (Bf16EvenOdd::WholeTokens).
  if constexpr (std::is_same_v<QCodec, BF16CodecT<true>> && std::is_same_v<KCodec, BF16CodecT<true>> &&
                kSteps % 2 == 0) {
    if (WholeTokenRows(job)) {
      return WithRowSource(job, end, [&](auto& rows) {
        Bf16EvenOdd::WholeTokens<kPairing>(job, token, end, rows, std::make_index_sequence<kSteps / 2>());
      });
    }
  }
#endif
  // fp32 and fp16 rows likewise where kPlainWholeTokens (PlainWholeTokens) (docs/performance-log.md: the code comments'
  // figures).
  if constexpr (kPlainWholeTokens<QCodec, KCodec, kPairing, kSteps>) {
    if (WholeTokenRows(job)) {
      return WithRowSource(job, end, [&](auto& rows) {
        PlainWholeTokens<QCodec, kPairing>(job, token, end, rows, std::make_index_sequence<kSteps>());
      });
    }
  }
  std::int64_t b = 0, s = 0;
  if (token != 0) b = token / job.seq, s = token % job.seq;  // (a one-thread call skips the divisions, as below)
  const auto next = [&] {
    if (++s == job.seq) {
      s = 0;
      ++b;
    }
  };
  // Short rows (64 dims: two vectors of pairs) whose coefficients are the table's rows as they are, in a loop of their
  // own, without a scratch: per token it is the whole token's fixed cost that counts there. Not for wider rows: the
  // same loop was slower for fp32 128-dim rows in place (memory-bound), for reasons not found (docs/performance-log.md:
  // the code comments' figures).
  if constexpr (kSteps <= 2) {
    if (TableRowsAreCoefficients<kPairing>(job)) {
      const TableRowSource rows(job);
      for (; token < end; ++token, next()) {
        RotateTokenInRegisters<kPairing, QCodec, KCodec, kSteps>(job, b, s, rows(token));
      }
      return;
    }
  }
  Scratch scratch(*job.map);
  for (; token < end; ++token, next()) {
    BuildCoefficients<kPairing>(job, token, scratch);
    RotateTokenInRegisters<kPairing, QCodec, KCodec, kSteps>(job, b, s, scratch);
  }
}

#endif  // !HWY_HAVE_SCALABLE

// The kernel of one call shape: rows [first, last) of the job, q rows through QCodec, k rows through
// KCodec (both chosen once, at prepare). Where the rows are in-register widths (every model's head_dim of 64–256 on
// AVX-512 and AVX2) and take no non-temporal stores, the whole tokens of a range take RotateWholeTokens and the
// partial ones at its ends the runs. (A one-token call may have a kernel of its own: OneTokenRows.)
template <Pairing kPairing, class QCodec, class KCodec>
void RotateRowsFor(const RotateJob& job, std::int64_t first, std::int64_t last) {
  if (first >= last) return;
#if !HWY_HAVE_SCALABLE
  const std::size_t steps = RegisterSteps<kPairing>(job);
  const std::int64_t heads = job.q_heads + job.k_heads;
  // Divisions only where a thread's range starts or ends inside the rows: 64-bit divides are tens of cycles, a
  // noticeable part of a decode call.
  const std::int64_t token = first == 0 ? 0 : (first + heads - 1) / heads;
  const std::int64_t end = last == job.rows() ? job.tokens : last / heads;
  // Two whole tokens at least: a single one (a decode call) ran slower this way than as runs, the extra call's cost
  // not repaid (docs/performance-log.md: the code comments' figures).
  if (end - token >= 2 && WithStepsInRegisters(steps, [&](auto k) {
        RotateRowRuns<kPairing, QCodec, KCodec>(job, first, token * heads);
        RotateWholeTokens<kPairing, QCodec, KCodec, decltype(k)::value>(job, token, end);
        RotateRowRuns<kPairing, QCodec, KCodec>(job, end * heads, last);
      })) {
    return;
  }
#endif
  RotateRowRuns<kPairing, QCodec, KCodec>(job, first, last);
}

#if !HWY_HAVE_SCALABLE
// The kernel of a one-token call (a decode step) whose rows are kSteps vectors wide, half pairing, magnitude 1 and
// no non-temporal stores — all fixed at prepare, so RotateKernelFor decides them once (OneTokenSteps): a call of every
// row with a table reads the table's rows in place as its coefficients, without a scratch, the runs' bookkeeping or
// their address arithmetic (the token is (0, 0)). What is left to decide per run is whether the range is the whole
// token and whether a table is there (set_positions may move the call to angles on the fly and back). Other ranges take
// RotateRowsFor. (Until 2026-11-27 RotateRowsFor tested the whole shape on every run; deciding it at prepare is
// faster (docs/performance-log.md: the code comments' figures).)
// Interleaved pairing (no pass-through lanes: OneTokenSteps): the whole-token kernels, which read the table's rows
// without a scratch — fp32 and fp16 rows of up to 128 dims expanded to lanes in registers, bf16 as they are.
template <Pairing kPairing, class QCodec, class KCodec, std::size_t kSteps>
void OneTokenRows(const RotateJob& job, std::int64_t first, std::int64_t last) {
  if (first == 0 && last == job.q_heads + job.k_heads && job.table != nullptr) {
    if constexpr (kPairing == Pairing::Half) {
      RotateTokenInRegisters<kPairing, QCodec, KCodec, kSteps>(job, 0, 0, TableRowCoefficients(job, 0));
    } else if constexpr (kPlainCodecs<QCodec, KCodec> && kSteps <= kMaxStepsInRegisters) {
      TableRowSource rows(job);
      PlainWholeTokens<QCodec, kPairing>(job, 0, 1, rows, std::make_index_sequence<kSteps>());
    } else {
      RotateWholeTokens<kPairing, QCodec, KCodec, kSteps>(job, 0, 1);
    }
    return;
  }
  RotateRowsFor<kPairing, QCodec, KCodec>(job, first, last);
}

#endif  // !HWY_HAVE_SCALABLE

// The kernel for (QCodec, KCodec): OneTokenRows of kSteps vectors, or (kSteps = 0) RotateRowsFor.
template <Pairing kPairing, class QCodec, class KCodec, std::size_t kSteps>
detail::RowsKernel KernelOf() {
#if !HWY_HAVE_SCALABLE
  if constexpr (kSteps > 0) return &OneTokenRows<kPairing, QCodec, KCodec, kSteps>;
#endif
  return &RotateRowsFor<kPairing, QCodec, KCodec>;
}

template <Pairing kPairing, std::size_t kSteps, class Bf16, class QCodec>
detail::RowsKernel KernelForK(DType k) {
  switch (k) {
    case DType::BF16: return KernelOf<kPairing, QCodec, Bf16, kSteps>();
    case DType::F16: return KernelOf<kPairing, QCodec, F16Codec, kSteps>();
    default: return KernelOf<kPairing, QCodec, F32Codec, kSteps>();
  }
}

template <Pairing kPairing, std::size_t kSteps, class Bf16>
detail::RowsKernel KernelFor(DType q, DType k) {
  switch (q) {
    case DType::BF16: return KernelForK<kPairing, kSteps, Bf16, Bf16>(k);
    case DType::F16: return KernelForK<kPairing, kSteps, Bf16, F16Codec>(k);
    default: return KernelForK<kPairing, kSteps, Bf16, F32Codec>(k);
  }
}

template <Pairing kPairing, std::size_t kSteps>
detail::RowsKernel KernelFor(DType q, DType k, bool native_bf16, bool small) {
  if (small && q == DType::F32 && k == DType::F32) return KernelOf<kPairing, F32PinnedCodec, F32PinnedCodec, kSteps>();
  return native_bf16 ? KernelFor<kPairing, kSteps, BF16NativeCodec>(q, k)
                     : KernelFor<kPairing, kSteps, BF16Codec>(q, k);
}

// The in-register width (in vectors) of a one-token call that can take OneTokenRows: one token, no non-temporal stores
// out of place, and a table's rows usable as its coefficients — as they are (half pairing: TableRowsCanBeCoefficients)
// or as each pair's c and s (interleaved, no pass-through lanes: the whole-token kernels); 0 for any other call.
inline std::size_t OneTokenSteps(const RotateJob& job) {
#if HWY_HAVE_SCALABLE
  (void)job;
  return 0;
#else
  if (job.tokens != 1) return 0;
  if (job.map->pairing == Pairing::Interleaved)
    return WholeTokenRows(job) ? RegisterSteps<Pairing::Interleaved>(job) : 0;
  return TableRowsCanBeCoefficients<Pairing::Half>(job) ? RegisterSteps<Pairing::Half>(job) : 0;
#endif
}

// The kernel for a job's shape (its pairing, the dtypes q and k are read as — an absent view's dtype is irrelevant:
// it has no rows — and, for a one-token call, OneTokenSteps); native_bf16: narrow bf16 stores with the target's
// instruction where it has one; small: the call's bytes fit the L1 data cache, which picks F32PinnedCodec for fp32.
inline detail::RowsKernel RotateKernelFor(const RotateJob& job, DType q, DType k, bool native_bf16, bool small) {
  const auto for_pairing = [&](auto pairing) {
    constexpr Pairing kPairing = decltype(pairing)::value;
    detail::RowsKernel kernel = nullptr;
#if !HWY_HAVE_SCALABLE
    WithStepsInRegisters(OneTokenSteps(job), [&](auto steps) {
      kernel = KernelFor<kPairing, decltype(steps)::value>(q, k, native_bf16, small);
    });
#endif
    return kernel != nullptr ? kernel : KernelFor<kPairing, 0>(q, k, native_bf16, small);
  };
  if (job.map->pairing == Pairing::Interleaved)
    return for_pairing(std::integral_constant<Pairing, Pairing::Interleaved>());
  return for_pairing(std::integral_constant<Pairing, Pairing::Half>());
}

// Token rows (a TokenKernel's work, ropekit/call.hpp) in Codec's storage type, with the caller's
// coefficient scratch.
template <class Codec>
HWY_INLINE void RotateTokenRowsAs(const RotateJob& job, std::int64_t token, const void* src, std::int64_t src_stride,
                                  void* dst, std::int64_t dst_stride, std::int64_t heads, Scratch& scratch) {
  using T = typename Codec::T;
  const bool interleaved = job.map->pairing == Pairing::Interleaved;
  if (interleaved) {
    BuildCoefficients<Pairing::Interleaved>(job, token, scratch);
  } else {
    BuildCoefficients<Pairing::Half>(job, token, scratch);
  }
  bool streamed = false;
  const T* in = static_cast<const T*>(src);
  T* out = static_cast<T*>(dst);
  if (interleaved) {
    RotateHeads<Codec, Pairing::Interleaved>(*job.map, in, src_stride, out, dst_stride, heads, scratch, false,
                                             streamed);
  } else {
    RotateHeads<Codec, Pairing::Half>(*job.map, in, src_stride, out, dst_stride, heads, scratch, false, streamed);
  }
}

// Heads [head_first, head_first + heads) of token `token` of `in` (the job's q or k), rotated into
// dst (in's storage type, rows dst_stride elements apart): for per-target consumers that inline the
// rotation into their loads (the fused attention driver).
HWY_INLINE void RotateTokenHeads(const RotateJob& job, const Heads& in, std::int64_t token, std::int64_t head_first,
                                 std::int64_t heads, void* dst, std::int64_t dst_stride, Scratch& scratch) {
  const void* src = in.row(token / job.seq, token % job.seq, head_first);
  switch (in.dtype) {
    case DType::BF16:
      return RotateTokenRowsAs<BF16Codec>(job, token, src, in.head_stride, dst, dst_stride, heads, scratch);
    case DType::F16:
      return RotateTokenRowsAs<F16Codec>(job, token, src, in.head_stride, dst, dst_stride, heads, scratch);
    default: return RotateTokenRowsAs<F32Codec>(job, token, src, in.head_stride, dst, dst_stride, heads, scratch);
  }
}

// A TokenKernel with its own coefficient scratch.
template <class Codec>
void TokenRows(const RotateJob& job, std::int64_t token, const void* src, std::int64_t src_stride, void* dst,
               std::int64_t dst_stride, std::int64_t heads) {
  Scratch scratch(*job.map);
  RotateTokenRowsAs<Codec>(job, token, src, src_stride, dst, dst_stride, heads, scratch);
}

inline detail::TokenKernel TokenKernelFor(DType dtype, bool native_bf16) {
  switch (dtype) {
    case DType::BF16: return native_bf16 ? &TokenRows<BF16NativeCodec> : &TokenRows<BF16Codec>;
    case DType::F16: return &TokenRows<F16Codec>;
    default: return &TokenRows<F32Codec>;
  }
}

template <Pairing kPairing, class Codec>
HWY_INLINE void RotateHeadRowsAs(const RotateJob& job, const detail::HeadRows& rows, const Scratch& scratch) {
  using T = typename Codec::T;
  bool streamed = false;
  RotateHeads<Codec, kPairing>(*job.map, static_cast<const T*>(rows.src), rows.src_stride, static_cast<T*>(rows.dst),
                               rows.dst_stride, rows.heads, scratch, false, streamed);
}

template <Pairing kPairing, class Bf16>
HWY_INLINE void RotateHeadRows(const RotateJob& job, const detail::HeadRows& rows, const Scratch& scratch) {
  switch (rows.dtype) {
    case DType::BF16: return RotateHeadRowsAs<kPairing, Bf16>(job, rows, scratch);
    case DType::F16: return RotateHeadRowsAs<kPairing, F16Codec>(job, rows, scratch);
    default: return RotateHeadRowsAs<kPairing, F32Codec>(job, rows, scratch);
  }
}

// A TokenPairKernel: the token's coefficients built once for both sets of rows.
template <Pairing kPairing, class Bf16>
void TokenPairRows(const RotateJob& job, std::int64_t token, const detail::HeadRows& a, const detail::HeadRows& b) {
  Scratch scratch(*job.map);
  BuildCoefficients<kPairing>(job, token, scratch);
  RotateHeadRows<kPairing, Bf16>(job, a, scratch);
  RotateHeadRows<kPairing, Bf16>(job, b, scratch);
}

template <class Bf16>
detail::TokenPairKernel TokenPairKernelOf(Pairing pairing) {
  return pairing == Pairing::Interleaved ? &TokenPairRows<Pairing::Interleaved, Bf16>
                                         : &TokenPairRows<Pairing::Half, Bf16>;
}

inline detail::TokenPairKernel TokenPairKernelFor(Pairing pairing, bool native_bf16) {
  return native_bf16 ? TokenPairKernelOf<BF16NativeCodec>(pairing) : TokenPairKernelOf<BF16Codec>(pairing);
}

#else  // !ROPEKIT_SIMD_KERNELS: the scalar reference is this target's kernel.

inline detail::RowsKernel RotateKernelFor(const RotateJob&, DType, DType, bool, bool) {
  return &detail::rotate_rows_reference;
}

// No per-target scratch is needed: the reference keeps its own.
struct Scratch {
  explicit Scratch(const PairMap&) {}
};

template <DType kType>
void ReferenceTokenRows(const RotateJob& job, std::int64_t token, const void* src, std::int64_t src_stride, void* dst,
                        std::int64_t dst_stride, std::int64_t heads) {
  detail::rotate_token_rows_reference(job, token, src, src_stride, dst, dst_stride, heads, kType);
}

// The reference forms the coefficients per set of rows; the bits are the same.
inline void ReferenceTokenPairRows(const RotateJob& job, std::int64_t token, const detail::HeadRows& a,
                                   const detail::HeadRows& b) {
  for (const detail::HeadRows* rows : {&a, &b}) {
    if (rows->heads > 0) {
      detail::rotate_token_rows_reference(job, token, rows->src, rows->src_stride, rows->dst, rows->dst_stride,
                                          rows->heads, rows->dtype);
    }
  }
}

inline detail::TokenPairKernel TokenPairKernelFor(Pairing, bool) { return &ReferenceTokenPairRows; }

inline detail::TokenKernel TokenKernelFor(DType dtype, bool) {
  switch (dtype) {
    case DType::BF16: return &ReferenceTokenRows<DType::BF16>;
    case DType::F16: return &ReferenceTokenRows<DType::F16>;
    default: return &ReferenceTokenRows<DType::F32>;
  }
}

HWY_INLINE void RotateTokenHeads(const RotateJob& job, const Heads& in, std::int64_t token, std::int64_t head_first,
                                 std::int64_t heads, void* dst, std::int64_t dst_stride, Scratch&) {
  const void* src = in.row(token / job.seq, token % job.seq, head_first);
  detail::rotate_token_rows_reference(job, token, src, in.head_stride, dst, dst_stride, heads, in.dtype);
}

#endif  // ROPEKIT_SIMD_KERNELS

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
