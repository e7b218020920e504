// src/cpu/coefficients-inl.h — a token's rotation coefficients c = m·cos, s = sign·m·sin for every pair, formed once
// per token from the call's table rows or angles on the fly (angles-inl.h) into per-thread scratch, laid out for the
// pairing's vector steps. Per Highway target, included by rotate-inl.h.
#if defined(ROPEKIT_CPU_COEFFICIENTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPEKIT_CPU_COEFFICIENTS_INL_H_
#undef ROPEKIT_CPU_COEFFICIENTS_INL_H_
#else
#define ROPEKIT_CPU_COEFFICIENTS_INL_H_
#endif

#include <hwy/aligned_allocator.h>
#include <hwy/highway.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/angles-inl.h"
#include "cpu/simd-inl.h"
#include "rope/angles.hpp"
#include "rope/call_shape.hpp"
#include "ropekit/table.hpp"

HWY_BEFORE_NAMESPACE();
namespace ropekit::cpu::HWY_NAMESPACE {
using detail::RotateJob;

#if ROPEKIT_SIMD_KERNELS
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

#endif  // ROPEKIT_SIMD_KERNELS

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
