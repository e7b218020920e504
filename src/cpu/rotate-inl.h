// src/cpu/rotate-inl.h — the per-target RoPE kernels. src/cpu/rotate.cpp compiles this once per
// Highway target (foreach_target.h) and hands out one kernel per call; per-target consumers (the
// fused attention driver, attention-inl.h) include it and inline RotateTokenHeads into their loads.
// Storage goes through codecs-inl.h, on-the-fly coefficients through angles-inl.h.
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
#include "cpu/codecs-inl.h"
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

// Per-thread scratch: coefficients (whole vectors plus one of padding for the tail, s vector-
// aligned after c) and on-the-fly angle rows. On the stack for common head sizes: a decode call
// takes about a microsecond, a heap allocation a noticeable part of that.
struct Scratch {
  static constexpr std::size_t kStackLanes = 512 + 2 * kMaxLanes;

  explicit Scratch(const PairMap& map) {
    const std::size_t lanes = (static_cast<std::size_t>(map.rotary_dim) / kMaxLanes + 2) * kMaxLanes;
    const std::size_t angle_floats = static_cast<std::size_t>(2 * map.num_axes * map.num_pairs());
    if (lanes <= kStackLanes && angle_floats <= kStackLanes) {
      c = stack_coef;
      angles = stack_angles;
    } else {
      heap = hwy::AllocateAligned<float>(2 * lanes + angle_floats);
      c = heap.get();
      angles = heap.get() + 2 * lanes;
    }
    s = c + lanes;
    read_c = c;
    read_s = s;
    // BuildCoefficients writes the first `written` values of c and s for every token; only a tail step
    // (a width that is not whole vectors) reads past them, up to one vector, so only then is that
    // padding zeroed (once per scratch, which the fused append builds per token: a whole memset showed in a
    // decode call's profile).
    const auto written = static_cast<std::size_t>(map.pairing == Pairing::Half ? map.rotary_dim / 2 : map.rotary_dim);
    const std::size_t n = hn::Lanes(DF());
    if (written % n != 0) {
      std::memset(c + written, 0, n * sizeof(float));
      std::memset(s + written, 0, n * sizeof(float));
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  HWY_ALIGN float stack_coef[2 * kStackLanes];
  float stack_angles[kStackLanes];
  hwy::AlignedFreeUniquePtr<float[]> heap;
  float* c;
  float* s;
  float* angles;
  // What the kernels read: c and s, or the table's own rows where they are the coefficients already
  // (BuildCoefficients says which, per token).
  const float* read_c;
  const float* read_s;
};

// A token's coefficients where they are read in place (the table's rows): what the in-register kernels read of a
// Scratch, without one.
struct RowCoefficients {
  const float* read_c;
  const float* read_s;
};

// Stores pair j's coefficients in the layout of the pairing (see RotateRow).
template <Pairing kPairing>
HWY_INLINE void StorePair(int j, float cj, float sj, float* c, float* s) {
  if constexpr (kPairing == Pairing::Half) {
    c[j] = cj;
    s[j] = sj;
  } else {
    c[2 * j] = c[2 * j + 1] = cj;
    s[2 * j] = -sj;
    s[2 * j + 1] = sj;
  }
}

// Half a vector of pairs' coefficients c_j, s_j as the interleaved pairing's lanes: c_j twice, and (−s_j, s_j) —
// each 32-bit value zero-extended to 64 bits and copied into the upper half, the lower (a-lane) sine's sign flipped.
using DH = hn::Half<DF>;
HWY_INLINE void PairsToLanes(hn::Vec<DH> c, hn::Vec<DH> s, VF& vc, VF& vs) {
  const DF d;
  const hn::RebindToUnsigned<DH> duh;
  const hn::Rebind<std::uint64_t, decltype(duh)> du64;
  const auto cj = hn::PromoteTo(du64, hn::BitCast(duh, c));
  const auto sj = hn::PromoteTo(du64, hn::BitCast(duh, s));
  vc = hn::BitCast(d, hn::Or(cj, hn::ShiftLeft<32>(cj)));
  vs = hn::BitCast(d, hn::Or(hn::Xor(sj, hn::Set(du64, 0x80000000ull)), hn::ShiftLeft<32>(sj)));
}

// The reference's float32 coefficients c = cos·m, s = (sin·m)·sign (exact: sign is ±1), for one
// position stream with pair j reading frequency j: vectors of pairs, expanded to lanes for the
// Interleaved pairing. Pure products, so vector and scalar lanes round alike.
template <Pairing kPairing>
void ScaleCoefficients(const float* cos_row, const float* sin_row, int pairs, float m, float sign, float* c, float* s) {
  int j = 0;
  if constexpr (kPairing == Pairing::Half) {
    const DF d;
    const int n = static_cast<int>(hn::Lanes(d));
    for (; j + n <= pairs; j += n) {
      hn::Store(hn::Mul(hn::LoadU(d, cos_row + j), hn::Set(d, m)), d, c + j);
      hn::Store(hn::Mul(hn::Mul(hn::LoadU(d, sin_row + j), hn::Set(d, m)), hn::Set(d, sign)), d, s + j);
    }
  } else {
    const DF d;
    const DH dh;
    const int n = static_cast<int>(hn::Lanes(dh));
    for (; j + n <= pairs; j += n) {
      VF vc, vs;
      PairsToLanes(hn::Mul(hn::LoadU(dh, cos_row + j), hn::Set(dh, m)),
                   hn::Mul(hn::Mul(hn::LoadU(dh, sin_row + j), hn::Set(dh, m)), hn::Set(dh, sign)), vc, vs);
      hn::Store(vc, d, c + 2 * j);
      hn::Store(vs, d, s + 2 * j);
    }
  }
  for (; j < pairs; ++j) StorePair<kPairing>(j, cos_row[j] * m, sin_row[j] * m * sign, c, s);
}

// BuildCoefficients' work where the table's rows are not the coefficients themselves: written into the scratch's c
// and s.
template <Pairing kPairing>
void WriteCoefficients(const RotateJob& job, std::int64_t token, Scratch& scratch) {
  const PairMap& map = *job.map;
  const int pairs = map.num_pairs();
  if (kPairing == Pairing::Half && job.table == nullptr && map.num_axes == 1 && job.magnitude == 1.0f &&
      job.sin_sign == 1.0f) {
    // The angle row is already the half pairing's coefficients (c = cos·1, s = sin·1·1): written in
    // place, without a second pass over the row.
    return AngleRow(*job.angles, job.args.positions.at(0, token), scratch.c, scratch.s);
  }
  const float* cos_row[3] = {};
  const float* sin_row[3] = {};
  for (int a = 0; a < map.num_axes; ++a) {
    const std::int64_t p = job.args.positions.at(a, token);
    if (job.table != nullptr) {
      cos_row[a] = job.table->cos_row(p);
      sin_row[a] = job.table->sin_row(p);
    } else {
      float* row = scratch.angles + 2 * a * pairs;
      AngleRow(*job.angles, p, row, row + pairs);
      cos_row[a] = row;
      sin_row[a] = row + pairs;
    }
  }
  const float m = job.magnitude, sign = job.sin_sign;
  if (map.num_axes == 1) {
    ScaleCoefficients<kPairing>(cos_row[0], sin_row[0], pairs, m, sign, scratch.c, scratch.s);
    return;
  }
  // M-RoPE: pair j takes frequency j of the stream map.axis[j] drives.
  for (int j = 0; j < pairs; ++j) {
    const int a = map.axis[j];
    StorePair<kPairing>(j, cos_row[a][j] * m, sin_row[a][j] * m * sign, scratch.c, scratch.s);
  }
}

// Whether a job's angle rows — the table's, or the rows computed on the fly — are each pair's coefficients
// c_j = cos·1, s_j = sin·1·1 as they are (exact), in whole vectors of pairs (no tail step reads past a row): for either
// pairing the whole-token kernels read them so. A property of the prepared job alone (set_positions changes only its
// angle source).
HWY_INLINE bool RowsArePairCoefficients(const RotateJob& job) {
  return job.map->num_axes == 1 && job.magnitude == 1.0f && job.sin_sign == 1.0f &&
         job.map->num_pairs() % static_cast<int>(hn::Lanes(DF())) == 0;
}

// Whether a table's rows would be the job's coefficients in the kernels' own lane layout: the half pairing's. Then they
// are read in place, without copying 2 × 256 bytes per token through a scratch.
template <Pairing kPairing>
HWY_INLINE bool TableRowsCanBeCoefficients(const RotateJob& job) {
  return kPairing == Pairing::Half && RowsArePairCoefficients(job);
}

// ... and the job reads a table.
template <Pairing kPairing>
HWY_INLINE bool TableRowsAreCoefficients(const RotateJob& job) {
  return job.table != nullptr && TableRowsCanBeCoefficients<kPairing>(job);
}

// One view pair's rows (q → q_out, or k → k_out; out null: in place) as the whole-token kernels walk them, the
// pointers and element strides read once per call. Read from the views per token (their fields, the element size from
// the dtype) they were a chain of loads and multiplies before every token's rows.
template <class T>
struct ViewRows {
  ViewRows(const ropekit::Heads& in_view, const ropekit::Heads& out_view, std::int64_t heads_)
      : in(static_cast<T*>(in_view.data)),
        out(out_view.data != nullptr ? static_cast<T*>(out_view.data) : in),
        in_batch(in_view.batch_stride),
        in_seq(in_view.seq_stride),
        in_head(in_view.head_stride),
        out_batch(out_view.data != nullptr ? out_view.batch_stride : in_batch),
        out_seq(out_view.data != nullptr ? out_view.seq_stride : in_seq),
        out_head(out_view.data != nullptr ? out_view.head_stride : in_head),
        heads(heads_) {}
  T* in_row(std::int64_t b, std::int64_t s) const { return in + b * in_batch + s * in_seq; }
  T* out_row(std::int64_t b, std::int64_t s) const { return out + b * out_batch + s * out_seq; }
  T* in;
  T* out;
  std::int64_t in_batch, in_seq, in_head, out_batch, out_seq, out_head, heads;
};

// Each token's pair coefficients for the whole-token kernels (where RowsArePairCoefficients): the table's rows in
// place, or the token's angle row computed into a scratch — the values WriteCoefficients would give either way (its
// products by 1 are exact), so the same bits.
struct TableRowSource {
  // The table's first rows, its row length and the positions, read from the job once per call, not per token: through
  // the job and the table, and the row length from the frequencies' vector, they were a chain of dependent loads
  // before every token's coefficients. The positions' pointer and type field by field, not the struct as a whole: a
  // decode step's set_positions has just stored those two fields, and a copy's 16-byte load across them would miss
  // store-to-load forwarding (docs/performance-log.md: the code comments' figures).
  explicit TableRowSource(const RotateJob& job)
      : positions(job.args.positions.data),
        i64(job.args.positions.type == IndexType::I64),
        cos(job.table->cos_row(0)),
        sin(job.table->sin_row(0)),
        pairs(job.table->num_pairs()) {}
  RowCoefficients operator()(std::int64_t token) const {
    const std::int64_t p =
        i64 ? static_cast<const std::int64_t*>(positions)[token] : static_cast<const std::int32_t*>(positions)[token];
    return {cos + p * pairs, sin + p * pairs};
  }
  const void* positions;
  bool i64;
  const float* cos;
  const float* sin;
  std::int64_t pairs;
};
// Token `token`'s coefficients read in place from the table's rows (where TableRowsAreCoefficients): a row source made
// for one token.
HWY_INLINE RowCoefficients TableRowCoefficients(const RotateJob& job, std::int64_t token) {
  return TableRowSource(job)(token);
}

// Tokens' angle rows computed on the fly, up to kBlock of them at a time (tokens [token, end) of the kernel's range):
// the kernels ask for each token's row in order. A row is a chain of ~25 dependent operations per vector; a 64-dim
// row has only four vectors, and between one token's row and the next the core sees that token's rows of heads, so
// row after row it waited out each chain. Rows computed back to back overlap (the same operations, so the same bits)
// and were faster for 16-bit 64-dim tokens. Only for tokens of few bytes: where a token's rows stream from memory a
// row computed between two tokens' rows runs under their loads, and blocks were slower there, as for fp32's 64-dim
// tokens (2.5 KB), hence 2 KB (docs/performance-log.md: the code comments' figures).
struct AngleRowSource {
  static constexpr std::int64_t kBlock = 8;
  static constexpr std::size_t kStackFloats = 1024;  // per c and s: 8 rows of 128 pairs (256 dims)
  static constexpr std::int64_t kBlockTokenBytes = 2048;

  AngleRowSource(const RotateJob& j, std::int64_t end_token) : job(j), end(end_token) {
    const auto pairs = static_cast<std::size_t>(j.map->num_pairs());
    stride = (pairs + kMaxLanes - 1) / kMaxLanes * kMaxLanes;  // each row from a vector boundary
    const std::int64_t token_bytes =
        (j.q_heads + j.k_heads) * j.map->head_dim *
        static_cast<std::int64_t>(element_size(j.q_heads > 0 ? j.args.q.dtype : j.args.k.dtype));
    if (stride <= kStackFloats) {
      block = token_bytes > kBlockTokenBytes
                  ? 1
                  : std::min<std::int64_t>(kBlock, static_cast<std::int64_t>(kStackFloats / stride));
      c = stack_c;
      s = stack_s;
    } else {
      block = 1;
      heap = hwy::AllocateAligned<float>(2 * stride);
      c = heap.get();
      s = c + stride;
    }
  }
  AngleRowSource(const AngleRowSource&) = delete;
  AngleRowSource& operator=(const AngleRowSource&) = delete;

  RowCoefficients operator()(std::int64_t token) {
    std::int64_t r = token - first;
    if (r < 0 || r >= filled) {
      first = token;
      filled = std::min(block, end - token);
      for (std::int64_t i = 0; i < filled; ++i) {
        AngleRow(*job.angles, job.args.positions.at(0, token + i), c + std::size_t(i) * stride,
                 s + std::size_t(i) * stride);
      }
      r = 0;
    }
    return {c + std::size_t(r) * stride, s + std::size_t(r) * stride};
  }

  const RotateJob& job;
  std::int64_t end;
  std::int64_t first = 0, filled = 0, block = 1;
  std::size_t stride = 0;
  HWY_ALIGN float stack_c[kStackFloats];
  HWY_ALIGN float stack_s[kStackFloats];
  hwy::AlignedFreeUniquePtr<float[]> heap;
  float* c = nullptr;
  float* s = nullptr;
};

// Whether a job's whole tokens can take the whole-token kernels: pair coefficients as its angle rows hold them (from
// its table or on the fly), no pass-through lanes, no software prefetch.
HWY_INLINE bool WholeTokenRows(const RotateJob& job) {
  return RowsArePairCoefficients(job) && (job.table != nullptr || job.angles != nullptr) && !job.prefetch_rows &&
         job.map->rotary_dim == job.map->head_dim;
}

// Calls f(rows) with the job's row source for tokens before `end`: its table's, or (no table) its angle rows'.
template <class F>
HWY_INLINE void WithRowSource(const RotateJob& job, std::int64_t end, F&& f) {
  if (job.table != nullptr) {
    TableRowSource rows(job);
    f(rows);
  } else {
    AngleRowSource rows(job, end);
    f(rows);
  }
}

// Token `token`'s coefficients for the kernels (scratch.read_c / read_s). Inline, so that the common case costs a
// decode call a few compares and two loads. As a call (before 2026-11-27) its prologue realigned the stack, and
// reading c and s back as one 16-byte load right after the scratch's constructor stored them as two 8-byte ones
// missed store-to-load forwarding (docs/performance-log.md: the code comments' figures).
template <Pairing kPairing>
HWY_INLINE void BuildCoefficients(const RotateJob& job, std::int64_t token, Scratch& scratch) {
  if (TableRowsAreCoefficients<kPairing>(job)) {
    const RowCoefficients rows = TableRowCoefficients(job, token);
    scratch.read_c = rows.read_c;
    scratch.read_s = rows.read_s;
    return;
  }
  WriteCoefficients<kPairing>(job, token, scratch);
  // After the work, not before it: a scratch may serve several jobs (attention's regimes), so the pointers are set
  // every time, and here the constructor's stores of c and s have long left the store buffer.
  scratch.read_c = scratch.c;
  scratch.read_s = scratch.s;
}

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
