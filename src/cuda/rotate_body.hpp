// src/cuda/rotate_body.hpp — the CUDA rotation kernel's per-thread body, over explicit block and thread indices.
//
// One thread per (row, pair): row = (token, head) as the call shape orders them (q's heads, then k's, per token),
// pair j of the pair map. The thread reads its token's position in the pair's stream, the table's cos/sin of that
// position, forms the coefficients and rotates its two lanes exactly as the scalar reference does
// (src/rope/reference.cpp: c = cos·m, s = sin·m·sign; a' = fma(a, c, −(b·s)), b' = fma(b, c, a·s); one rounding to
// storage); out of place it also copies its share of the pass-through lanes. The body is plain data in, plain data
// out: the host runs it over the whole grid in every test run (src/cuda/host_grid.cpp), a GPU runs it as a kernel.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "cuda/device_math.hpp"
#include "rope/turn_constants.hpp"  // the Taylor coefficients and 2π the turn reduction uses

namespace ropekit::cuda {

// sincos_turns-inl.h's arithmetic on one double: the operation sequence the scalar reference and every SIMD target
// run, with each operation explicitly rounded once on the device (__dmul_rn, __dadd_rn, __fma_rn, rint).
struct DeviceOps {
  using V = double;
  using U = std::uint64_t;
  using M = bool;
  static ROPEKIT_HD V Set(double c) { return c; }
  static ROPEKIT_HD V Mul(V a, V b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
  }
  static ROPEKIT_HD V Add(V a, V b) {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
  }
  static ROPEKIT_HD V Sub(V a, V b) { return Add(a, -b); }
  static ROPEKIT_HD V MulAdd(V a, V b, V c) {
#if defined(__CUDA_ARCH__)
    return __fma_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
  }
  static ROPEKIT_HD V MulSub(V a, V b, V c) { return MulAdd(a, b, -c); }
  static ROPEKIT_HD V Round(V a) {
#if defined(__CUDA_ARCH__)
    return rint(a);  // nearest, ties to even
#else
    return std::nearbyint(a);
#endif
  }
  static ROPEKIT_HD U Bits(V a) {
    U u;
    std::memcpy(&u, &a, 8);
    return u;
  }
  static ROPEKIT_HD U Increment(U k) { return k + 1; }
  static ROPEKIT_HD M Bit0(U k) { return (k & 1) != 0; }
  static ROPEKIT_HD U Bit1ToSign(U k) { return (k << 62) & (U{1} << 63); }
  static ROPEKIT_HD V XorSign(V a, U sign) {
    const U u = Bits(a) ^ sign;
    V v;
    std::memcpy(&v, &u, 8);
    return v;
  }
  static ROPEKIT_HD V Select(M m, V yes, V no) { return m ? yes : no; }
};

namespace turns {
#if defined(__CUDACC__)
__device__ constexpr std::array<double, 8> kSinTaylorDevice = detail::kSinTaylor;
__device__ constexpr std::array<double, 8> kCosTaylorDevice = detail::kCosTaylor;
#endif
#undef ROPEKIT_TURNS_FN
#undef ROPEKIT_TURNS_SIN
#undef ROPEKIT_TURNS_COS
#define ROPEKIT_TURNS_FN ROPEKIT_HD
#if defined(__CUDA_ARCH__)
#define ROPEKIT_TURNS_SIN kSinTaylorDevice
#define ROPEKIT_TURNS_COS kCosTaylorDevice
#else
#define ROPEKIT_TURNS_SIN detail::kSinTaylor
#define ROPEKIT_TURNS_COS detail::kCosTaylor
#endif
#include "rope/sincos_turns-inl.h"
#undef ROPEKIT_TURNS_FN
#undef ROPEKIT_TURNS_SIN
#undef ROPEKIT_TURNS_COS
}  // namespace turns

enum class Storage : std::uint8_t { F32 = 0, BF16 = 1, F16 = 2 };

struct View {  // one tensor's rows: element strides
  char* data = nullptr;
  std::int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;
};

struct RotateShape {
  View q_in, q_out, k_in, k_out;  // out.data == in.data: in place
  Storage storage = Storage::F32;
  int element_size = 4;
  // The pair map: lane_a[j], lane_b[j], axis[j] for j < pairs; lanes ≥ rotary_dim pass through.
  const std::int32_t* lane_a = nullptr;
  const std::int32_t* lane_b = nullptr;
  const std::uint8_t* axis = nullptr;
  int pairs = 0, rotary_dim = 0, head_dim = 0;
  // Positions: axes streams of `tokens` each, int32 or int64 — or, where uniform_position >= 0, that one position for
  // every token (the device K-shift: every entry turns by the same |δ|).
  const void* positions = nullptr;
  bool positions_i64 = true;
  std::int64_t uniform_position = -1;
  // The table: rows of `pairs` float32 values per position — or, where cos is null, the accurate angles on the fly
  // from each pair's turns per position as hi + lo (rope/angles.hpp's AngleEvaluator).
  const float* cos = nullptr;
  const float* sin = nullptr;
  const double* turns_hi = nullptr;
  const double* turns_lo = nullptr;
  float magnitude = 1.0f, sin_sign = 1.0f;
  std::int64_t tokens = 0, seq = 1, q_heads = 0, k_heads = 0;
  // A token's rows are split into head_groups interleaved sets, one thread per (token, set, pair) (choose_head_groups).
  std::int64_t head_groups = 1;
  // Rows of the table cover positions [0, table_positions); past them the turns give the angle (the same bits:
  // the table's rows are those angles). A shape made from a CPU call has one source or the other.
  std::int64_t table_positions = 0;
  // Set by the device API, whose positions the host never reads: a position outside [0, 2^47), or past the table
  // with no turns (HfCompat), leaves its token's rows unwritten and records token + 1 here (the first to get there).
  // Null: the positions were checked before the launch.
  unsigned long long* error = nullptr;

  ROPEKIT_HD std::int64_t rows() const { return tokens * (q_heads + k_heads); }
  ROPEKIT_HD std::int64_t threads() const { return tokens * head_groups * pairs; }
};

ROPEKIT_HD int storage_size(Storage s) { return s == Storage::F32 ? 4 : 2; }

// Raw element access. The device API checks on the host that every device pointer is aligned to its element size
// (views' strides count elements), so a GPU reads and writes each element with one access of its width — a memcpy
// from a char pointer of unknown alignment compiles to byte accesses there, 2–4× the memory instructions, which
// measured at a quarter of the copy bandwidth on an H100. The host keeps memcpy: the CPU's views may be unaligned.
template <class T>
ROPEKIT_HD T load_raw(const char* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}

template <class T>
ROPEKIT_HD void store_raw(char* p, T v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<T*>(p) = v;
#else
  std::memcpy(p, &v, sizeof(T));
#endif
}

// One element of `size` bytes (4, 2 or 1) copied as its bits.
ROPEKIT_HD void copy_element(char* dst, const char* src, int size) {
  if (size == 4) {
    store_raw(dst, load_raw<std::uint32_t>(src));
  } else if (size == 2) {
    store_raw(dst, load_raw<std::uint16_t>(src));
  } else {
    *dst = *src;
  }
}

// One element of storage type `st` at p, widened exactly to float32 / rounded once from float32 (the codecs of
// device_math.hpp). Every kernel body reads and writes its tensors through these two.
ROPEKIT_HD float load_as(Storage st, const char* p) {
  if (st == Storage::F32) return load_raw<float>(p);
  const std::uint16_t v = load_raw<std::uint16_t>(p);
  return st == Storage::BF16 ? bf16_load(v) : f16_load(v);
}

ROPEKIT_HD void store_as(Storage st, char* p, float x) {
  if (st == Storage::F32) {
    store_raw(p, x);
    return;
  }
  store_raw(p, st == Storage::BF16 ? bf16_store(x) : f16_store(x));
}

ROPEKIT_HD std::int64_t position(const RotateShape& s, int axis, std::int64_t token) {
  if (s.uniform_position >= 0) return s.uniform_position;
  const std::int64_t i = axis * s.tokens + token;
  return s.positions_i64 ? static_cast<const std::int64_t*>(s.positions)[i]
                         : static_cast<const std::int32_t*>(s.positions)[i];
}

// Records the first token whose position could not be rotated (RotateShape::error).
ROPEKIT_HD void report(const RotateShape& s, std::int64_t token) {
#if defined(__CUDA_ARCH__)
  atomicCAS(s.error, 0ull, static_cast<unsigned long long>(token) + 1);
#else
  if (*s.error == 0) *s.error = static_cast<unsigned long long>(token) + 1;
#endif
}

// 2^47: the accuracy contract's limit on positions (ropekit/spec.hpp's kPositionLimit).
constexpr std::int64_t kDevicePositionLimit = std::int64_t{1} << 47;

// Token `token`'s coefficients for pair j: c = cos·m, s = sin·m·sign (the reference's, from the table's row or the
// accurate angle of the exact turn). False, with the token reported, for a position the shape cannot rotate.
ROPEKIT_HD bool coefficients(const RotateShape& s, std::int64_t token, int j, float& c, float& sn) {
  const std::int64_t p = position(s, s.axis[j], token);
  if (s.error != nullptr && (p < 0 || p >= kDevicePositionLimit || (p >= s.table_positions && s.turns_hi == nullptr))) {
    report(s, token);
    return false;
  }
  float cos_p, sin_p;
  if (s.cos != nullptr && p < s.table_positions) {
    cos_p = s.cos[p * s.pairs + j];
    sin_p = s.sin[p * s.pairs + j];
  } else {
    double cd, sd;
    turns::SinCosOfTurns<DeviceOps>(static_cast<double>(p), s.turns_hi[j], s.turns_lo[j], cd, sd);
    cos_p = static_cast<float>(cd);  // one rounding to nearest, as the reference's row
    sin_p = static_cast<float>(sd);
  }
  c = fmul(cos_p, s.magnitude);
  sn = fmul(fmul(sin_p, s.magnitude), s.sin_sign);
  return true;
}

// Rows a thread turns at once: their loads are issued before any store, so that a thread keeps that many rows' reads
// in flight (the rows are distinct memory: the views are checked for overlaps on the host).
constexpr int kRowsInFlight = 4;

// Head groups for a launch: enough threads to fill a GPU (about 2^18 of them: 132 SMs × 2048) without splitting a
// token's rows further than that needs. A thread computes its pair's coefficients once for all its rows, so fewer
// groups mean fewer angle evaluations (the double-precision turn reduction on the fly) and table reads.
ROPEKIT_HD int choose_head_groups(std::int64_t tokens, int pairs, std::int64_t heads) {
  constexpr std::int64_t kFill = std::int64_t{1} << 18;
  const std::int64_t per_group = tokens * pairs;
  if (per_group <= 0 || heads <= 1) return 1;
  const std::int64_t groups = (kFill + per_group - 1) / per_group;
  return static_cast<int>(groups < heads ? groups : heads);
}

// The work of thread `thread` of block `block` (blocks of block_dim threads; threads past the grid's work return).
// Thread g turns pair j = g mod pairs of the rows h ≡ group (mod head_groups) of its token (q's heads, then k's), so
// that a warp's 32 threads read 32 consecutive pairs of one row (coalesced) and the pair's coefficients are formed
// once per token, not once per row.
ROPEKIT_HD void rotate_thread(const RotateShape& s, std::int64_t block, int thread, int block_dim) {
  const std::int64_t g = block * block_dim + thread;
  if (g >= s.threads()) return;
  const int j = static_cast<int>(g % s.pairs);
  const std::int64_t r = g / s.pairs;
  const std::int64_t token = r / s.head_groups, group = r % s.head_groups;
  const std::int64_t heads = s.q_heads + s.k_heads;
  const std::int64_t b = token / s.seq, t = token % s.seq;
  float c, sn;
  if (!coefficients(s, token, j, c, sn)) return;
  const int la = s.lane_a[j], lb = s.lane_b[j], es = s.element_size;
  const auto src_of = [&](std::int64_t h) {
    const bool is_q = h < s.q_heads;
    const View& in = is_q ? s.q_in : s.k_in;
    const std::int64_t head = is_q ? h : h - s.q_heads;
    return in.data + (b * in.batch_stride + t * in.seq_stride + head * in.head_stride) * es;
  };
  const auto dst_of = [&](std::int64_t h) {
    const bool is_q = h < s.q_heads;
    const View& out = is_q ? s.q_out : s.k_out;
    const std::int64_t head = is_q ? h : h - s.q_heads;
    return out.data + (b * out.batch_stride + t * out.seq_stride + head * out.head_stride) * es;
  };
  for (std::int64_t h0 = group; h0 < heads; h0 += kRowsInFlight * s.head_groups) {
    // Up to kRowsInFlight rows: every load, then every store.
    float xa[kRowsInFlight], xb[kRowsInFlight];
    int n = 0;
    for (std::int64_t h = h0; n < kRowsInFlight && h < heads; h += s.head_groups, ++n) {
      const char* src = src_of(h);
      xa[n] = load_as(s.storage, src + la * es);
      xb[n] = load_as(s.storage, src + lb * es);
    }
    for (int i = 0; i < n; ++i) {
      const std::int64_t h = h0 + i * s.head_groups;
      char* dst = dst_of(h);
      store_as(s.storage, dst + la * es, fma(xa[i], c, -fmul(xb[i], sn)));
      store_as(s.storage, dst + lb * es, fma(xb[i], c, fmul(xa[i], sn)));
      const char* src = src_of(h);
      if (dst != src) {
        for (int lane = s.rotary_dim + j; lane < s.head_dim; lane += s.pairs)
          copy_element(dst + lane * es, src + lane * es, es);
      }
    }
  }
}

}  // namespace ropekit::cuda
