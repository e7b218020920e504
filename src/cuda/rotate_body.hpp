// src/cuda/rotate_body.hpp — the CUDA rotation kernel's per-thread body, over explicit block and thread indices.
//
// One thread per (token, head group, run of W pairs): the rows of a token (q's heads, then k's) split into head
// groups, and W consecutive pairs of the pair map read and written with one access per run of lanes (W and the
// pairing's run shape chosen on the host: detail::choose_vector). For each pair the thread reads its token's position
// in the pair's stream, the table's cos/sin of that position (or the accurate angle of the exact turn), forms the
// coefficients once for all its rows and rotates the two lanes exactly as the scalar reference does
// (src/rope/reference.cpp: c = cos·m, s = sin·m·sign; a' = fma(a, c, −(b·s)), b' = fma(b, c, a·s); one rounding to
// storage); out of place it also copies its share of the pass-through lanes. The body is plain data in, plain data
// out: the host runs it over the whole grid in every test run (src/cuda/host_grid.cpp), a GPU runs it as a kernel.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>
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

#if !defined(__CUDA_ARCH__)
// Accesses that a GPU could not make as the bodies do (load_raw / store_raw, load_run / store_run): an address that is
// not a multiple of the access's width (a misaligned access faults on a GPU, where the host's memcpy would not
// notice). The host tests run the kernel body over its whole launch grid and expect none (tests/cuda_host_test.cpp), so
// the alignment choose_vector promises is checked on every machine, not only where a GPU is at hand.
inline std::atomic<std::int64_t> host_misaligned_runs{0};
template <int kBytes>
inline void audit_run(const char* p) {
  if (kBytes > 1 && reinterpret_cast<std::uintptr_t>(p) % kBytes != 0)
    host_misaligned_runs.fetch_add(1, std::memory_order_relaxed);
}
#endif

// Raw element access. The device API checks on the host that every device pointer is aligned to its element size
// (views' strides count elements), so a GPU reads and writes each element with one access of its width — a memcpy
// from a char pointer of unknown alignment compiles to byte accesses there, 2–4× the memory instructions, which
// measured at a quarter of the copy bandwidth on an H100. The host keeps memcpy: the CPU's views may be unaligned.
template <class T>
ROPEKIT_HD T load_raw(const char* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const T*>(p);
#else
  audit_run<sizeof(T)>(p);
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
  audit_run<sizeof(T)>(p);
  std::memcpy(p, &v, sizeof(T));
#endif
}

// An element's bits held in a register (a float32's, or a 16-bit type's in the low half): the body passes elements
// between its steps as these, never through a local array whose address is taken — on a GPU such an array lives in
// local memory, which held the fused append far below the copy bandwidth (docs/performance-log.md).
ROPEKIT_HD std::uint32_t read_bits(const char* p, int size) {
  if (size == 4) return load_raw<std::uint32_t>(p);
  if (size == 2) return load_raw<std::uint16_t>(p);
  return static_cast<std::uint8_t>(*p);
}

ROPEKIT_HD void write_bits(char* p, std::uint32_t bits, int size) {
  if (size == 4) {
    store_raw(p, bits);
  } else if (size == 2) {
    store_raw(p, static_cast<std::uint16_t>(bits));
  } else {
    *p = static_cast<char>(bits);
  }
}

// x rounded once to storage st, as bits; and bits of st widened exactly.
ROPEKIT_HD std::uint32_t bits_as(Storage st, float x) {
  return st == Storage::F32 ? bits_of(x) : st == Storage::BF16 ? bf16_store(x) : f16_store(x);
}
ROPEKIT_HD float float_from(Storage st, std::uint32_t bits) {
  return st == Storage::F32    ? float_of(bits)
         : st == Storage::BF16 ? bf16_load(static_cast<std::uint16_t>(bits))
                               : f16_load(static_cast<std::uint16_t>(bits));
}

// One element of `size` bytes (4, 2 or 1) copied as its bits.
ROPEKIT_HD void copy_element(char* dst, const char* src, int size) { write_bits(dst, read_bits(src, size), size); }

// One element of storage type `st` at p, widened exactly to float32 / rounded once from float32 (the codecs of
// device_math.hpp). The bodies that pick the storage at run time read and write their tensors through these two.
ROPEKIT_HD float load_as(Storage st, const char* p) { return float_from(st, read_bits(p, storage_size(st))); }
ROPEKIT_HD void store_as(Storage st, char* p, float x) { write_bits(p, bits_as(st, x), storage_size(st)); }

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
// in flight (the rows are distinct memory: the views are checked for overlaps on the host). A thread turning W pairs of
// es-byte elements reads 2·W·es bytes per row, so it holds kBytesInFlight / (2·W·es) rows, at least one. Counted in
// pairs (4 / W rows) until 2026-11-27, which gave 16-bit rows half fp32's bytes at every width but half pairing's
// 16-byte runs, and those rows ran slower than the others on an H200 (docs/performance-log.md: the code comments'
// figures). The kernels are bound by the accesses in flight.
constexpr int kBytesInFlight = 32;
// Rows in flight where a thread copies one element per row (the fused append's lanes: lane_thread).
constexpr int kRowsInFlight = 4;
template <int W, int es>
constexpr int rows_in_flight() {
  return 2 * W * es >= kBytesInFlight ? 1 : kBytesInFlight / (2 * W * es);
}

// The widest access a thread makes (bytes): a GPU's widest load and store.
constexpr int kMaxAccessBytes = 16;

// Blocks of block_dim threads that cover `threads` threads (a launch's grid, and the host's run of it).
ROPEKIT_HD std::int64_t blocks_of(std::int64_t threads, int block_dim) { return (threads + block_dim - 1) / block_dim; }

// Head groups for a launch: enough threads to fill a GPU (about 2^18 of them: 132 SMs × 2048) without splitting a
// token's rows further than that needs. A thread computes its pairs' coefficients once for all its rows, so fewer
// groups mean fewer angle evaluations (the double-precision turn reduction on the fly) and table reads. `runs`: the
// threads per (token, group), pairs / vector_pairs.
ROPEKIT_HD int choose_head_groups(std::int64_t tokens, int runs, std::int64_t heads) {
  constexpr std::int64_t kFill = std::int64_t{1} << 18;
  const std::int64_t per_group = tokens * runs;
  if (per_group <= 0 || heads <= 1) return 1;
  const std::int64_t groups = (kFill + per_group - 1) / per_group;
  return static_cast<int>(groups < heads ? groups : heads);
}

#if defined(__CUDACC__)
#define ROPEKIT_UNROLL _Pragma("unroll")
#else
#define ROPEKIT_UNROLL
#endif

// N consecutive elements at p as one access of their whole width (2, 4, 8 or 16 bytes; p aligned to it, which the
// host's choose_vector checks): on a GPU one load or store instruction instead of N, the difference between a
// quarter and most of the copy bandwidth for 16-bit storage. The host keeps memcpy.
template <class T, int N>
ROPEKIT_HD void load_run(const char* p, T (&out)[N]) {
  constexpr int bytes = N * static_cast<int>(sizeof(T));
  static_assert(bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16, "one access of 2, 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__)
  if constexpr (bytes == 16) {
    const uint4 w = *reinterpret_cast<const uint4*>(p);
    std::memcpy(out, &w, 16);
  } else if constexpr (bytes == 8) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    std::memcpy(out, &w, 8);
  } else if constexpr (bytes == 4) {
    const std::uint32_t w = *reinterpret_cast<const std::uint32_t*>(p);
    std::memcpy(out, &w, 4);
  } else {
    const std::uint16_t w = *reinterpret_cast<const std::uint16_t*>(p);
    std::memcpy(out, &w, 2);
  }
#else
  audit_run<bytes>(p);
  std::memcpy(out, p, bytes);
#endif
}

template <class T, int N>
ROPEKIT_HD void store_run(char* p, const T (&in)[N]) {
  constexpr int bytes = N * static_cast<int>(sizeof(T));
  static_assert(bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16, "one access of 2, 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__)
  if constexpr (bytes == 16) {
    uint4 w;
    std::memcpy(&w, in, 16);
    *reinterpret_cast<uint4*>(p) = w;
  } else if constexpr (bytes == 8) {
    uint2 w;
    std::memcpy(&w, in, 8);
    *reinterpret_cast<uint2*>(p) = w;
  } else if constexpr (bytes == 4) {
    std::uint32_t w;
    std::memcpy(&w, in, 4);
    *reinterpret_cast<std::uint32_t*>(p) = w;
  } else {
    std::uint16_t w;
    std::memcpy(&w, in, 2);
    *reinterpret_cast<std::uint16_t*>(p) = w;
  }
#else
  audit_run<bytes>(p);
  std::memcpy(p, in, bytes);
#endif
}

// The W pairs of a run of row `src` as stored: the a lanes (from la) into xa and the b lanes (from lb) into xb with one
// access each — or, adjacent, one access of the 2W lanes from la, a and b alternating.
template <bool Adjacent, class Raw, int W>
ROPEKIT_HD void load_pairs(const char* src, int la, int lb, Raw (&xa)[W], Raw (&xb)[W]) {
  constexpr int es = static_cast<int>(sizeof(Raw));
  if constexpr (Adjacent) {
    Raw v[2 * W];
    load_run(src + la * es, v);
    ROPEKIT_UNROLL
    for (int w = 0; w < W; ++w) {
      xa[w] = v[2 * w];
      xb[w] = v[2 * w + 1];
    }
  } else {
    load_run(src + la * es, xa);
    load_run(src + lb * es, xb);
  }
}

// A storage type known at compile time: its element as stored, widened exactly to float32, rounded once from it.
template <Storage St>
struct StorageOf;
template <>
struct StorageOf<Storage::F32> {
  using Raw = float;
  static ROPEKIT_HD float load(float x) { return x; }
  static ROPEKIT_HD float store(float x) { return x; }
};
// The 16-bit types also round two results into one word (store2: lo in the low half, the lower address).
template <>
struct StorageOf<Storage::BF16> {
  using Raw = std::uint16_t;
  static ROPEKIT_HD float load(std::uint16_t x) { return bf16_load(x); }
  static ROPEKIT_HD std::uint16_t store(float x) { return bf16_store(x); }
  static ROPEKIT_HD std::uint32_t store2(float lo, float hi) { return bf16x2_store(lo, hi); }
};
template <>
struct StorageOf<Storage::F16> {
  using Raw = std::uint16_t;
  static ROPEKIT_HD float load(std::uint16_t x) { return f16_load(x); }
  static ROPEKIT_HD float load_finite(std::uint16_t x) { return f16_load_finite(x); }
  static ROPEKIT_HD std::uint16_t store(float x) { return f16_store(x); }
  static ROPEKIT_HD std::uint32_t store2(float lo, float hi) { return f16x2_store(lo, hi); }
};

// Whether any of N fp16 elements is an infinity or a NaN (exponent all ones), the elements taken two to a 32-bit word:
// the halves of t = (w & 0x7c007c00) ^ 0x7c007c00 are 0 exactly for those, and (t − 0x00010001) & 0x80008000 is
// nonzero exactly when a half is 0 (a half of t is a multiple of 0x400 below 0x8000: only 0 wraps past bit 15, and
// the borrow it passes up cannot wrap a nonzero high half). About two operations per element instead of a select's ten
// (f16_load's on a GPU) — what kept the fp16 rotation further from the copy bandwidth than bf16 looked like
// instructions (docs/performance-log.md: the code comments' figures).
template <int N>
ROPEKIT_HD bool any_f16_special(const std::uint16_t (&x)[N]) {
  std::uint32_t found = 0;
  ROPEKIT_UNROLL
  for (int i = 0; i + 1 < N; i += 2) {
    const std::uint32_t w = static_cast<std::uint32_t>(x[i]) | (static_cast<std::uint32_t>(x[i + 1]) << 16);
    const std::uint32_t t = (w & 0x7c007c00u) ^ 0x7c007c00u;
    found |= (t - 0x00010001u) & 0x80008000u;
  }
  if constexpr (N % 2 == 1) found |= (x[N - 1] & 0x7c00u) == 0x7c00u ? 1u : 0u;
  return found != 0;
}

// A thread's W turned pairs (ra: the a lanes, rb: the b lanes) rounded to storage St, held as the runs of lanes they
// are stored as: the a run and the b run (half pairing), or one run of a and b alternating (adjacent). 16-bit storage
// rounds two results per conversion where they share a word: a lane and its b lane (adjacent), or two neighbouring a
// lanes and two b lanes (half pairing, W even). The fused append stores one rounding in two places (k_out, the entry).
template <Storage St, int W, bool Adjacent>
struct TurnedRuns {
  using Io = StorageOf<St>;
  using Raw = typename Io::Raw;
  static constexpr bool kWords = St != Storage::F32 && (Adjacent || W % 2 == 0);  // two results per word
  using Element = std::conditional_t<kWords, std::uint32_t, Raw>;
  static constexpr int kA = kWords ? (Adjacent ? W : W / 2) : (Adjacent ? 2 * W : W);  // elements of the a run
  Element a[kA];
  Element b[Adjacent ? 1 : kA];  // unused when adjacent

  ROPEKIT_HD TurnedRuns(const float (&ra)[W], const float (&rb)[W]) {
    if constexpr (kWords && Adjacent) {
      ROPEKIT_UNROLL
      for (int w = 0; w < W; ++w) a[w] = Io::store2(ra[w], rb[w]);
    } else if constexpr (kWords) {
      ROPEKIT_UNROLL
      for (int w = 0; w < W / 2; ++w) {
        a[w] = Io::store2(ra[2 * w], ra[2 * w + 1]);
        b[w] = Io::store2(rb[2 * w], rb[2 * w + 1]);
      }
    } else if constexpr (Adjacent) {
      ROPEKIT_UNROLL
      for (int w = 0; w < W; ++w) {
        a[2 * w] = Io::store(ra[w]);
        a[2 * w + 1] = Io::store(rb[w]);
      }
    } else {
      ROPEKIT_UNROLL
      for (int w = 0; w < W; ++w) {
        a[w] = Io::store(ra[w]);
        b[w] = Io::store(rb[w]);
      }
    }
  }

  // Written with one access per run at pa (and pb, half pairing).
  ROPEKIT_HD void store(char* pa, char* pb) const {
    store_run(pa, a);
    if constexpr (!Adjacent) store_run(pb, b);
  }
};

template <Storage St, int W, bool Adjacent>
ROPEKIT_HD void store_turned(char* pa, char* pb, const float (&ra)[W], const float (&rb)[W]) {
  TurnedRuns<St, W, Adjacent>(ra, rb).store(pa, pb);
}

// The bytes one access of a (storage, W, adjacent) configuration moves: W elements, or 2W when adjacent.
template <Storage St, int W, bool Adjacent>
constexpr int access_bytes() {
  return (Adjacent ? 2 * W : W) * static_cast<int>(sizeof(typename StorageOf<St>::Raw));
}

// A run's W pairs (xa: the a lanes, xb: the b lanes, as stored) widened and turned: ra = fma(a, c, −(b·s)), rb =
// fma(b, c, a·s). fp16 runs without an infinity or a NaN widen by the conversion alone (any_f16_special; the same
// values).
template <Storage St, int W, class Raw>
ROPEKIT_HD void turn_run(const Raw (&xa)[W], const Raw (&xb)[W], const float (&c)[W], const float (&sn)[W],
                         float (&ra)[W], float (&rb)[W]) {
  using Io = StorageOf<St>;
  const auto turn = [&](auto load) {
    ROPEKIT_UNROLL
    for (int w = 0; w < W; ++w) {
      const float a = load(xa[w]), bv = load(xb[w]);
      ra[w] = fma(a, c[w], -fmul(bv, sn[w]));
      rb[w] = fma(bv, c[w], fmul(a, sn[w]));
    }
  };
  if constexpr (St == Storage::F16) {
    if (!any_f16_special(xa) && !any_f16_special(xb)) {
      turn([](Raw x) { return Io::load_finite(x); });
      return;
    }
  }
  turn([](Raw x) { return Io::load(x); });
}

// The work of thread `thread` of block `block` (blocks of block_dim threads; threads past the grid's work return), for
// storage St turning W pairs per thread. Thread g turns pairs j0 … j0 + W − 1 (j0 = W · (g mod pairs/W)) of the rows
// h ≡ group (mod head_groups) of its token (q's heads, then k's), so that a warp's threads read consecutive runs of
// one row (coalesced) and each pair's coefficients are formed once per token, not once per row. Each element is
// turned as the scalar reference turns it; only the grouping of the memory accesses differs.
template <Storage St, int W, bool Adjacent>
ROPEKIT_HD void rotate_thread_as(const RotateShape& s, std::int64_t block, int thread, int block_dim) {
  using Io = StorageOf<St>;
  using Raw = typename Io::Raw;
  constexpr int es = static_cast<int>(sizeof(Raw));
  constexpr int K = rows_in_flight<W, es>();
  const std::int64_t g = block * block_dim + thread;
  if (g >= s.threads()) return;
  const int runs = s.pairs / W;
  const int j0 = static_cast<int>(g % runs) * W;
  const std::int64_t r = g / runs;
  const std::int64_t token = r / s.head_groups, group = r % s.head_groups;
  const std::int64_t heads = s.q_heads + s.k_heads;
  const std::int64_t b = token / s.seq, t = token % s.seq;
  float c[W], sn[W];
  ROPEKIT_UNROLL
  for (int w = 0; w < W; ++w) {
    if (!coefficients(s, token, j0 + w, c[w], sn[w])) return;
  }
  // Adjacent: the run's lanes are la, la + 1, …, la + 2W − 1, a and b alternating.
  const int la = s.lane_a[j0], lb = s.lane_b[j0];
  const auto row = [&](const View& v, std::int64_t head) {
    return v.data + (b * v.batch_stride + t * v.seq_stride + head * v.head_stride) * es;
  };
  const auto src_of = [&](std::int64_t h) { return h < s.q_heads ? row(s.q_in, h) : row(s.k_in, h - s.q_heads); };
  const auto dst_of = [&](std::int64_t h) { return h < s.q_heads ? row(s.q_out, h) : row(s.k_out, h - s.q_heads); };
  for (std::int64_t h0 = group; h0 < heads; h0 += K * s.head_groups) {
    // Up to K rows: every load, then every store.
    Raw xa[K][W], xb[K][W];
    ROPEKIT_UNROLL
    for (int i = 0; i < K; ++i) {
      const std::int64_t h = h0 + i * s.head_groups;
      if (h >= heads) break;
      load_pairs<Adjacent>(src_of(h), la, lb, xa[i], xb[i]);
    }
    ROPEKIT_UNROLL
    for (int i = 0; i < K; ++i) {
      const std::int64_t h = h0 + i * s.head_groups;
      if (h >= heads) break;
      float ra[W], rb[W];
      turn_run<St, W>(xa[i], xb[i], c, sn, ra, rb);
      char* dst = dst_of(h);
      store_turned<St, W, Adjacent>(dst + la * es, dst + lb * es, ra, rb);
      const char* src = src_of(h);
      if (dst != src) {  // out of place: this thread's share of the pass-through lanes
        for (int w = 0; w < W; ++w) {
          for (int lane = s.rotary_dim + j0 + w; lane < s.head_dim; lane += s.pairs)
            copy_element(dst + lane * es, src + lane * es, es);
        }
      }
    }
  }
}

// Calls f(storage, W, adjacent) — each an std::integral_constant — with the shape's configuration, one of those whose
// accesses are at most kMaxAccessBytes (choose_vector makes no other). The kernels instantiate one per configuration;
// the host's grid runs the same.
template <Storage St, int W, bool Adjacent, class F>
ROPEKIT_HD void call_configuration(F& f) {
  if constexpr (access_bytes<St, W, Adjacent>() <= kMaxAccessBytes) {
    f(std::integral_constant<Storage, St>{}, std::integral_constant<int, W>{}, std::bool_constant<Adjacent>{});
  }
}

template <Storage St, class F>
ROPEKIT_HD void with_vector(int vector_pairs, bool adjacent, F& f) {
  switch (vector_pairs * 2 + (adjacent ? 1 : 0)) {
    case 2: return call_configuration<St, 1, false>(f);
    case 3: return call_configuration<St, 1, true>(f);
    case 4: return call_configuration<St, 2, false>(f);
    case 5: return call_configuration<St, 2, true>(f);
    case 8: return call_configuration<St, 4, false>(f);
    case 9: return call_configuration<St, 4, true>(f);
    case 16: return call_configuration<St, 8, false>(f);
    default: return;
  }
}

// f(storage, W, adjacent) for a (storage, pairs per thread, adjacent) configuration: the rotation's, and the fused
// append's key rows' (append_body.hpp).
template <class F>
ROPEKIT_HD void with_configuration(Storage storage, int vector_pairs, bool adjacent, F&& f) {
  switch (storage) {
    case Storage::F32: return with_vector<Storage::F32>(vector_pairs, adjacent, f);
    case Storage::BF16: return with_vector<Storage::BF16>(vector_pairs, adjacent, f);
    case Storage::F16: return with_vector<Storage::F16>(vector_pairs, adjacent, f);
  }
}

template <class F>
ROPEKIT_HD void with_rotate_configuration(const RotateShape& s, F&& f) {
  with_configuration(s.storage, s.vector_pairs, s.adjacent, f);
}

// The body for the shape's configuration (the host's grid; a GPU launches the configuration's own kernel, and the
// one-launch append calls this for its queries: inlined there, see ROPEKIT_HD_INLINED).
ROPEKIT_HD_INLINED void rotate_thread(const RotateShape& s, std::int64_t block, int thread, int block_dim) {
  with_rotate_configuration(s, [&](auto st, auto w, auto adjacent) {
    rotate_thread_as<decltype(st)::value, decltype(w)::value, decltype(adjacent)::value>(s, block, thread, block_dim);
  });
}

}  // namespace ropekit::cuda
