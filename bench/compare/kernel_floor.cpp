// kernel_floor — what this host's cores allow a decode-shaped rotation (1 token, 32 q + 8 k heads × 128,
// out of place, one thread, L1-resident), next to what ropekit's kernel takes for it:
//   1. the throughput of the AVX-512 instructions the kernels are made of (cycles per instruction, the
//      cycle taken from a chain of dependent integer adds);
//   2. the smallest kernels that do the same arithmetic, written here by hand with intrinsics: fp32 with
//      half pairing (load a and b, two products and two fused multiply-adds, two stores per vector
//      pair), the same with half the floating-point work, with none (a copy through registers), and bf16
//      in even/odd lanes as ropekit's AVX3_BF16 target runs it, with and without its two shuffle-port
//      instructions (the ±0 test that guards the exact rounding of subnormals, and the lane interleave),
//      and fp16 (vcvtph2ps, the fp32 rotation, vcvtps2ph); and each of them again on 256-bit vectors (a core
//      that splits 512-bit operations, as Zen 4 does, may run those faster);
//   3. ropekit on the same rows: RotateCall::run (the call prepared once; fp32 also under the AVX2 target, which the
//      CPU policy picks for some calls on AMD hosts), Rope::prepare + run (validated
//      each call), RotateCall::set_positions + run (a decode step of a prepared call), and a memcpy of the
//      same bytes.
//   4. the same for a prefill-shaped call the benchmark holds to 0.85 of its in-place stream (512 tokens × (32 q +
//      8 k) heads × 128, in place, q and k in buffers of their own, one thread: 5 MiB of 16-bit rows, 10 MiB of
//      fp32, in the last-level cache): an in-place stream over the same bytes (load, xor, store: the benchmark's
//      ceiling), the hand-written kernels with each token's coefficients read from a table row, and ropekit's run;
//      and again for the benchmark's 64-dim case (4096 tokens × (8 q + 2 k) × 64, in place: 5 MiB of 16-bit rows).
// A kernel whose time equals its hand-written floor's is bound by the core, not by its code; a target
// above the floor's ratio to memcpy (or to the stream) cannot be met on this host (docs/performance-log.md).
//
//   kernel_floor            needs AVX-512 F/BW/VL (and AVX512_BF16 for the bf16 rows); prints a table
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_timing.hpp"
#include "ropekit/ropekit.hpp"

namespace {

constexpr int kHeads = 40, kDim = 128;

using probe::ns_per_call;

// ns per cycle: 4 independent chains of 1-cycle adds, 4 adds per iteration → one iteration per cycle.
double ns_per_cycle() {
  const long n = 50000000;
  return ns_per_call(
             [] {
               for (long i = 0; i < 1000; ++i) {
                 asm volatile("add $1, %%rax\n add $1, %%rbx\n add $1, %%rcx\n add $1, %%rdx" ::
                                  : "rax", "rbx", "rcx", "rdx");
               }
             },
             n / 1000 / 15) /
         1000.0;
}

// Eight independent instructions per iteration, each writing its own register from two fixed inputs.
#define EIGHT(I) I(0) I(1) I(2) I(3) I(4) I(5) I(6) I(7)
#define FMA(n) "vfmadd231ps %%zmm20, %%zmm21, %%zmm" #n "\n"
#define CVT(n) "vcvtne2ps2bf16 %%zmm20, %%zmm21, %%zmm" #n "\n"
#define PERMW(n) "vpermw %%zmm20, %%zmm21, %%zmm" #n "\n"
#define TESTNM(n) "vptestnmw %%zmm20, %%zmm21, %%k" #n "\n"
#define SHIFT(n) "vpslld $16, %%zmm20, %%zmm" #n "\n"
#define TO_F16(n) "vcvtps2ph $0, %%zmm20, %%ymm" #n "\n"
#define FROM_F16(n) "vcvtph2ps %%ymm20, %%zmm" #n "\n"
#define CLOBBERS \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"
#define THROUGHPUT(name, body)                                                \
  __attribute__((target("avx512f,avx512bw,avx512bf16"))) void name##_loop() { \
    for (int i = 0; i < 100; ++i) asm volatile(EIGHT(body)::: CLOBBERS);      \
  }                                                                           \
  double name() { return ns_per_call(name##_loop, 20000) / 800.0; }
THROUGHPUT(fma_ns, FMA)
THROUGHPUT(cvt_ns, CVT)
THROUGHPUT(permw_ns, PERMW)
THROUGHPUT(testnm_ns, TESTNM)
THROUGHPUT(shift_ns, SHIFT)
THROUGHPUT(to_f16_ns, TO_F16)
THROUGHPUT(from_f16_ns, FROM_F16)

alignas(64) float g_f32[kHeads * kDim];
alignas(64) float g_copy[kHeads * kDim];
alignas(64) std::uint16_t g_bf16[kHeads * kDim];
alignas(64) std::uint16_t g_bf16_out[kHeads * kDim];
alignas(64) std::uint16_t g_f16[kHeads * kDim];
alignas(64) std::uint16_t g_f16_out[kHeads * kDim];
alignas(64) float g_coef[4 * kDim];  // c then s, and the even/odd regrouping for bf16
volatile int g_flagged = 0;

enum class FloatWork { Rotation, FmaOnly, None };

// fp32, half pairing: one head's 4 vector pairs (a, b) rotated with c and s held in registers, row → dst (the same row:
// in place; each step stores only what it loaded).
// (kD: the head dim, 128 but for the 64-dim prefill table: kD / 32 vector pairs, b at kD / 2.)
template <FloatWork kWork, int kD = kDim>
__attribute__((target("avx512f,fma"), always_inline)) inline void f32_head(const float* row, float* dst,
                                                                           const __m512* c, const __m512* s) {
  constexpr int kB = kD / 2;
  for (int i = 0; i < kD / 32; ++i) {
    const __m512 a = _mm512_load_ps(row + 16 * i), b = _mm512_load_ps(row + kB + 16 * i);
    if constexpr (kWork == FloatWork::Rotation) {
      _mm512_store_ps(dst + 16 * i, _mm512_fmsub_ps(a, c[i], _mm512_mul_ps(b, s[i])));
      _mm512_store_ps(dst + kB + 16 * i, _mm512_fmadd_ps(b, c[i], _mm512_mul_ps(a, s[i])));
    } else if constexpr (kWork == FloatWork::FmaOnly) {
      _mm512_store_ps(dst + 16 * i, _mm512_fmsub_ps(a, c[i], b));
      _mm512_store_ps(dst + kB + 16 * i, _mm512_fmadd_ps(b, c[i], a));
    } else {
      _mm512_store_ps(dst + 16 * i, b);
      _mm512_store_ps(dst + kB + 16 * i, a);
    }
  }
}

template <FloatWork kWork>
__attribute__((target("avx512f,fma"), noinline)) void rotate_f32(const float* in, float* out) {
  __m512 c[4], s[4];
  for (int i = 0; i < 4; ++i) c[i] = _mm512_load_ps(g_coef + 16 * i), s[i] = _mm512_load_ps(g_coef + 64 + 16 * i);
  for (int h = 0; h < kHeads; ++h) f32_head<kWork>(in + h * kDim, out + h * kDim, c, s);
}

// fp16, half pairing: 16 values widen with vcvtph2ps and narrow with vcvtps2ph (round to nearest
// even, exact for every input: no software fallback), the fp32 arithmetic between.
template <int kD = kDim>
__attribute__((target("avx512f,f16c,fma"), always_inline)) inline void f16_head(const std::uint16_t* row,
                                                                                std::uint16_t* dst, const __m512* c,
                                                                                const __m512* s) {
  constexpr int kB = kD / 2;
  for (int i = 0; i < kD / 32; ++i) {
    const __m512 a = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(row + 16 * i)));
    const __m512 b = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(row + kB + 16 * i)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 16 * i),
                       _mm512_cvtps_ph(_mm512_fmsub_ps(a, c[i], _mm512_mul_ps(b, s[i])), _MM_FROUND_TO_NEAREST_INT));
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + kB + 16 * i),
                       _mm512_cvtps_ph(_mm512_fmadd_ps(b, c[i], _mm512_mul_ps(a, s[i])), _MM_FROUND_TO_NEAREST_INT));
  }
}

__attribute__((target("avx512f,f16c,fma"), noinline)) void rotate_f16(const std::uint16_t* in, std::uint16_t* out) {
  __m512 c[4], s[4];
  for (int i = 0; i < 4; ++i) c[i] = _mm512_load_ps(g_coef + 16 * i), s[i] = _mm512_load_ps(g_coef + 64 + 16 * i);
  for (int h = 0; h < kHeads; ++h) f16_head(in + h * kDim, out + h * kDim, c, s);
}

__attribute__((target("avx512f,avx512bf16"))) __m512i pack_bf16(__m512 even, __m512 odd) {
  __m512i packed;
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(packed) : "v"(odd), "v"(even));
  return packed;
}

// bf16, half pairing, even/odd lanes: 32 values load as 16 words pairs, widen by a shift (evens) and an
// AND (odds), narrow together with vcvtne2ps2bf16; kTest: the ±0 test, kInterleave: vpermw to value order.
struct Bf16Constants {
  __m512i order, high, magnitude;
};

__attribute__((target("avx512f,avx512bw"))) Bf16Constants bf16_constants() {
  alignas(64) static constexpr std::uint16_t kOrder[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                           21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                           11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return {_mm512_load_si512(kOrder), _mm512_set1_epi32(static_cast<int>(0xffff0000u)), _mm512_set1_epi16(0x7fff)};
}

// One head, r → w (the same row: in place; each step stores only what it loaded), with the coefficients regrouped
// even/odd (ce, co, se, so: two vectors each).
template <bool kTest, bool kInterleave, int kD = kDim>
__attribute__((target("avx512f,avx512bw,avx512bf16,fma"), always_inline)) inline void bf16_head(
    const std::uint16_t* r, std::uint16_t* w, const __m512* ce, const __m512* co, const __m512* se, const __m512* so,
    const Bf16Constants& k) {
  constexpr int kB = kD / 2;
  for (int j = 0; j < kD / 64; ++j) {
    const __m512i va = _mm512_load_si512(r + 32 * j), vb = _mm512_load_si512(r + kB + 32 * j);
    const __m512 ae = _mm512_castsi512_ps(_mm512_slli_epi32(va, 16)),
                 ao = _mm512_castsi512_ps(_mm512_and_si512(va, k.high));
    const __m512 be = _mm512_castsi512_ps(_mm512_slli_epi32(vb, 16)),
                 bo = _mm512_castsi512_ps(_mm512_and_si512(vb, k.high));
    __m512i pa = pack_bf16(_mm512_fmsub_ps(ae, ce[j], _mm512_mul_ps(be, se[j])),
                           _mm512_fmsub_ps(ao, co[j], _mm512_mul_ps(bo, so[j])));
    __m512i pb = pack_bf16(_mm512_fmadd_ps(be, ce[j], _mm512_mul_ps(ae, se[j])),
                           _mm512_fmadd_ps(bo, co[j], _mm512_mul_ps(ao, so[j])));
    if constexpr (kTest) {
      if (!_kortestz_mask32_u8(_mm512_testn_epi16_mask(pa, k.magnitude), _mm512_testn_epi16_mask(pb, k.magnitude))) {
        g_flagged = g_flagged + 1;  // ropekit narrows such a step again exactly; here it only counts
      }
    }
    if constexpr (kInterleave) {
      pa = _mm512_permutexvar_epi16(k.order, pa);
      pb = _mm512_permutexvar_epi16(k.order, pb);
    }
    _mm512_store_si512(w + 32 * j, pa);
    _mm512_store_si512(w + kB + 32 * j, pb);
  }
}

template <bool kTest, bool kInterleave>
__attribute__((target("avx512f,avx512bw,avx512bf16,fma"), noinline)) void rotate_bf16(const std::uint16_t* in,
                                                                                      std::uint16_t* out) {
  __m512 ce[2], co[2], se[2], so[2];
  for (int j = 0; j < 2; ++j) {
    ce[j] = _mm512_load_ps(g_coef + 128 + 16 * j), co[j] = _mm512_load_ps(g_coef + 160 + 16 * j);
    se[j] = _mm512_load_ps(g_coef + 192 + 16 * j), so[j] = _mm512_load_ps(g_coef + 224 + 16 * j);
  }
  const Bf16Constants k = bf16_constants();
  for (int h = 0; h < kHeads; ++h) bf16_head<kTest, kInterleave>(in + h * kDim, out + h * kDim, ce, co, se, so, k);
}

// 256-bit twins of the kernels above (issue 42 asks whether a core wants half-width vectors): the same steps on ymm
// registers, twice as many of them, compiled with AVX-512VL so that all 32 vector registers hold them (AVX2 code has
// 16). fp32 and fp16 as above; bf16 even/odd with 16 values per load, narrowed by the ymm vcvtne2ps2bf16 and put back
// in value order by a ymm vpermw.
#define YMM_TARGET "avx512f,avx512vl,avx512bw,f16c,fma"
__attribute__((target(YMM_TARGET), always_inline)) inline void f32_head_256(const float* row, float* dst,
                                                                            const __m256* c, const __m256* s) {
  for (int i = 0; i < 8; ++i) {
    const __m256 a = _mm256_load_ps(row + 8 * i), b = _mm256_load_ps(row + 64 + 8 * i);
    _mm256_store_ps(dst + 8 * i, _mm256_fmsub_ps(a, c[i], _mm256_mul_ps(b, s[i])));
    _mm256_store_ps(dst + 64 + 8 * i, _mm256_fmadd_ps(b, c[i], _mm256_mul_ps(a, s[i])));
  }
}

__attribute__((target(YMM_TARGET), always_inline)) inline void f16_head_256(const std::uint16_t* row,
                                                                            std::uint16_t* dst, const __m256* c,
                                                                            const __m256* s) {
  for (int i = 0; i < 8; ++i) {
    const __m256 a = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(row + 8 * i)));
    const __m256 b = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(row + 64 + 8 * i)));
    _mm_store_si128(reinterpret_cast<__m128i*>(dst + 8 * i),
                    _mm256_cvtps_ph(_mm256_fmsub_ps(a, c[i], _mm256_mul_ps(b, s[i])), _MM_FROUND_TO_NEAREST_INT));
    _mm_store_si128(reinterpret_cast<__m128i*>(dst + 64 + 8 * i),
                    _mm256_cvtps_ph(_mm256_fmadd_ps(b, c[i], _mm256_mul_ps(a, s[i])), _MM_FROUND_TO_NEAREST_INT));
  }
}

// c and s (fp32, fp16) or ce, co, se, so (bf16: two ymm of each per 512-bit one) from a row laid out as g_coef's.
struct Ymm {
  __m256 c[8], s[8];
};
__attribute__((target(YMM_TARGET), always_inline)) inline Ymm ymm_coefficients(const float* coef) {
  Ymm y;
  for (int i = 0; i < 8; ++i) y.c[i] = _mm256_loadu_ps(coef + 8 * i), y.s[i] = _mm256_loadu_ps(coef + 64 + 8 * i);
  return y;
}

struct Bf16Constants256 {
  __m256i order, high, magnitude;
};

__attribute__((target(YMM_TARGET))) Bf16Constants256 bf16_constants_256() {
  alignas(32) static constexpr std::uint16_t kOrder[16] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
  return {_mm256_load_si256(reinterpret_cast<const __m256i*>(kOrder)), _mm256_set1_epi32(static_cast<int>(0xffff0000u)),
          _mm256_set1_epi16(0x7fff)};
}

__attribute__((target(YMM_TARGET ",avx512bf16"))) inline __m256i pack_bf16_256(__m256 even, __m256 odd) {
  __m256i packed;
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(packed) : "v"(odd), "v"(even));
  return packed;
}

// One bf16 head with the contract's ±0 test and the interleave; e = ce[4], co[4], se[4], so[4] (Ymm's c: ce then co,
// s: se then so).
__attribute__((target(YMM_TARGET ",avx512bf16"), always_inline)) inline void bf16_head_256(const std::uint16_t* r,
                                                                                           std::uint16_t* w,
                                                                                           const Ymm& e,
                                                                                           const Bf16Constants256& k) {
  for (int j = 0; j < 4; ++j) {
    const __m256i va = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 16 * j));
    const __m256i vb = _mm256_load_si256(reinterpret_cast<const __m256i*>(r + 64 + 16 * j));
    const __m256 ae = _mm256_castsi256_ps(_mm256_slli_epi32(va, 16)),
                 ao = _mm256_castsi256_ps(_mm256_and_si256(va, k.high));
    const __m256 be = _mm256_castsi256_ps(_mm256_slli_epi32(vb, 16)),
                 bo = _mm256_castsi256_ps(_mm256_and_si256(vb, k.high));
    const __m256 ce = e.c[j], co = e.c[4 + j], se = e.s[j], so = e.s[4 + j];
    __m256i pa =
        pack_bf16_256(_mm256_fmsub_ps(ae, ce, _mm256_mul_ps(be, se)), _mm256_fmsub_ps(ao, co, _mm256_mul_ps(bo, so)));
    __m256i pb =
        pack_bf16_256(_mm256_fmadd_ps(be, ce, _mm256_mul_ps(ae, se)), _mm256_fmadd_ps(bo, co, _mm256_mul_ps(ao, so)));
    if (!_kortestz_mask16_u8(_mm256_testn_epi16_mask(pa, k.magnitude), _mm256_testn_epi16_mask(pb, k.magnitude))) {
      g_flagged = g_flagged + 1;
    }
    pa = _mm256_permutexvar_epi16(k.order, pa);
    pb = _mm256_permutexvar_epi16(k.order, pb);
    _mm256_store_si256(reinterpret_cast<__m256i*>(w + 16 * j), pa);
    _mm256_store_si256(reinterpret_cast<__m256i*>(w + 64 + 16 * j), pb);
  }
}

__attribute__((target(YMM_TARGET), noinline)) void rotate_f32_256(const float* in, float* out) {
  const Ymm y = ymm_coefficients(g_coef);
  for (int h = 0; h < kHeads; ++h) f32_head_256(in + h * kDim, out + h * kDim, y.c, y.s);
}

__attribute__((target(YMM_TARGET), noinline)) void rotate_f16_256(const std::uint16_t* in, std::uint16_t* out) {
  const Ymm y = ymm_coefficients(g_coef);
  for (int h = 0; h < kHeads; ++h) f16_head_256(in + h * kDim, out + h * kDim, y.c, y.s);
}

__attribute__((target(YMM_TARGET ",avx512bf16"), noinline)) void rotate_bf16_256(const std::uint16_t* in,
                                                                                 std::uint16_t* out) {
  const Ymm e = ymm_coefficients(g_coef + 128);  // ce, co, se, so as rotate_bf16 reads them
  const Bf16Constants256 k = bf16_constants_256();
  for (int h = 0; h < kHeads; ++h) bf16_head_256(in + h * kDim, out + h * kDim, e, k);
}

// Prefill: tokens of q and k heads of kD values, rotated in place, q and k in buffers of their own (the benchmark's
// bshd layout), token t's coefficients the table row t: fp32 and fp16 c[kD / 2] then s[kD / 2]; bf16 regrouped
// even/odd, ce, co, se, so (kD / 4 each: a table laid out for this kernel; ropekit regroups its rows in registers
// instead).
struct Shape {
  int tokens, q_heads, k_heads;
};
constexpr Shape kPrefill = {512, 32, 8};    // the benchmark's 512-token case at 128 dims
constexpr Shape kPrefill64 = {4096, 8, 2};  // and its 64-dim case (4096 tokens of 10 heads)

// Each token's q rows, then its k rows: rows(token, heads, first value of its rows, q?).
template <class Rows>
__attribute__((always_inline)) inline void each_token(const Shape& shape, int dim, Rows rows) {
  for (int t = 0; t < shape.tokens; ++t) {
    rows(t, shape.q_heads, std::size_t(t) * shape.q_heads * dim, true);
    rows(t, shape.k_heads, std::size_t(t) * shape.k_heads * dim, false);
  }
}

// A table row's c (kD / 2 values) and s (the next kD / 2) as kD / 32 vectors each.
template <int kD>
__attribute__((target("avx512f"), always_inline)) inline void load_cs(const float* coef, __m512* c, __m512* s) {
  for (int i = 0; i < kD / 32; ++i)
    c[i] = _mm512_loadu_ps(coef + 16 * i), s[i] = _mm512_loadu_ps(coef + kD / 2 + 16 * i);
}

template <int kD>
__attribute__((target("avx512f,fma"), noinline)) void prefill_f32(const Shape& shape, float* q, float* k,
                                                                  const float* table) {
  each_token(
      shape, kD, [&](int t, int heads, std::size_t at, bool is_q) __attribute__((target("avx512f,fma"))) {
        __m512 c[kD / 32], s[kD / 32];
        load_cs<kD>(table + std::size_t(t) * kD, c, s);
        float* rows = (is_q ? q : k) + at;
        for (int h = 0; h < heads; ++h, rows += kD) f32_head<FloatWork::Rotation, kD>(rows, rows, c, s);
      });
}

template <int kD>
__attribute__((target("avx512f,f16c,fma"), noinline)) void prefill_f16(const Shape& shape, std::uint16_t* q,
                                                                       std::uint16_t* k, const float* table) {
  each_token(
      shape, kD, [&](int t, int heads, std::size_t at, bool is_q) __attribute__((target("avx512f,f16c,fma"))) {
        __m512 c[kD / 32], s[kD / 32];
        load_cs<kD>(table + std::size_t(t) * kD, c, s);
        std::uint16_t* rows = (is_q ? q : k) + at;
        for (int h = 0; h < heads; ++h, rows += kD) f16_head<kD>(rows, rows, c, s);
      });
}

// kRegroup: the table is the fp32 kernels' (c then s per token, pairs in order), regrouped even/odd per token with
// two-source permutes, as ropekit must from its table's rows; else a table laid out even/odd for this kernel.
template <bool kTest, bool kInterleave, int kD, bool kRegroup = false>
__attribute__((target("avx512f,avx512bw,avx512bf16,fma"), noinline)) void prefill_bf16(const Shape& shape,
                                                                                       std::uint16_t* q,
                                                                                       std::uint16_t* k,
                                                                                       const float* table) {
  const Bf16Constants constants = bf16_constants();
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  each_token(
      shape,
      kD, [&](int t, int heads, std::size_t at, bool is_q) __attribute__((target("avx512f,avx512bw,avx512bf16,fma"))) {
        const float* coef = table + std::size_t(t) * kD;
        __m512 ce[kD / 64], co[kD / 64], se[kD / 64], so[kD / 64];
        for (int j = 0; j < kD / 64; ++j) {
          if constexpr (kRegroup) {
            const __m512 c0 = _mm512_loadu_ps(coef + 32 * j), c1 = _mm512_loadu_ps(coef + 32 * j + 16);
            const __m512 s0 = _mm512_loadu_ps(coef + kD / 2 + 32 * j),
                         s1 = _mm512_loadu_ps(coef + kD / 2 + 32 * j + 16);
            ce[j] = _mm512_permutex2var_ps(c0, even, c1), co[j] = _mm512_permutex2var_ps(c0, odd, c1);
            se[j] = _mm512_permutex2var_ps(s0, even, s1), so[j] = _mm512_permutex2var_ps(s0, odd, s1);
          } else {
            ce[j] = _mm512_loadu_ps(coef + 16 * j), co[j] = _mm512_loadu_ps(coef + kD / 4 + 16 * j);
            se[j] = _mm512_loadu_ps(coef + kD / 2 + 16 * j);
            so[j] = _mm512_loadu_ps(coef + 3 * kD / 4 + 16 * j);
          }
        }
        std::uint16_t* rows = (is_q ? q : k) + at;
        for (int h = 0; h < heads; ++h, rows += kD) {
          bf16_head<kTest, kInterleave, kD>(rows, rows, ce, co, se, so, constants);
        }
      });
}

// The benchmark's in-place ceiling by hand: every 64 bytes loaded, xor-ed with a constant and stored back.
__attribute__((target("avx512f"), noinline)) void xor_stream(void* data, std::size_t bytes) {
  const __m512i flip = _mm512_set1_epi32(0x00010001);
  auto* p = static_cast<__m512i*>(data);
  for (std::size_t i = 0; i < bytes / 64; ++i)
    _mm512_store_si512(p + i, _mm512_xor_si512(_mm512_load_si512(p + i), flip));
}

template <class T>
T* aligned_rows(std::size_t count) {
  return static_cast<T*>(std::aligned_alloc(64, (count * sizeof(T) + 63) / 64 * 64));
}

constexpr long kPrefillCalls = 25;  // a call is tens of µs

// A prefill shape's q and k rows of `dim` values in storage type T, each head's a and b halves from the a and b halves
// of one of `from`'s decode rows (128 values), and the time of the in-place stream over them (the ceiling their rows
// are held to).
template <class T>
struct PrefillRows {
  std::size_t q_values, k_values;
  T* q;
  T* k;
  PrefillRows(const Shape& shape, int dim, const T* from)
      : q_values(std::size_t(shape.tokens) * shape.q_heads * dim),
        k_values(std::size_t(shape.tokens) * shape.k_heads * dim),
        q(aligned_rows<T>(q_values)),
        k(aligned_rows<T>(k_values)) {
    const auto value = [&](std::size_t i) {
      const std::size_t row = i / std::size_t(dim) % kHeads, lane = i % std::size_t(dim), half = std::size_t(dim) / 2;
      return from[row * kDim + (lane < half ? lane : kDim / 2 + lane - half)];
    };
    for (std::size_t i = 0; i < q_values; ++i) q[i] = value(i);
    for (std::size_t i = 0; i < k_values; ++i) k[i] = value(i);
  }
  PrefillRows(const PrefillRows&) = delete;
  PrefillRows& operator=(const PrefillRows&) = delete;
  ~PrefillRows() {
    std::free(q);
    std::free(k);
  }
  double stream_ns() const {
    return ns_per_call(
        [&] {
          xor_stream(q, q_values * sizeof(T));
          xor_stream(k, k_values * sizeof(T));
        },
        kPrefillCalls);
  }
};

void row(const char* what, double ns, double memcpy_ns, double cycle) {
  std::printf("| %s | %.3f | %.1f | %.2f |\n", what, ns / 1000.0, ns / cycle / kHeads, memcpy_ns / ns);
}

__attribute__((target(YMM_TARGET), noinline)) void prefill_f32_256(float* q, float* k, const float* table) {
  each_token(
      kPrefill, kDim, [&](int t, int heads, std::size_t at, bool is_q) __attribute__((target(YMM_TARGET))) {
        const Ymm y = ymm_coefficients(table + std::size_t(t) * kDim);
        float* rows = (is_q ? q : k) + at;
        for (int h = 0; h < heads; ++h, rows += kDim) f32_head_256(rows, rows, y.c, y.s);
      });
}

__attribute__((target(YMM_TARGET), noinline)) void prefill_f16_256(std::uint16_t* q, std::uint16_t* k,
                                                                   const float* table) {
  each_token(
      kPrefill, kDim, [&](int t, int heads, std::size_t at, bool is_q) __attribute__((target(YMM_TARGET))) {
        const Ymm y = ymm_coefficients(table + std::size_t(t) * kDim);
        std::uint16_t* rows = (is_q ? q : k) + at;
        for (int h = 0; h < heads; ++h, rows += kDim) f16_head_256(rows, rows, y.c, y.s);
      });
}

__attribute__((target(YMM_TARGET ",avx512bf16"), noinline)) void prefill_bf16_256(std::uint16_t* q, std::uint16_t* k,
                                                                                  const float* table) {
  const Bf16Constants256 constants = bf16_constants_256();
  each_token(
      kPrefill,
      kDim, [&](int t, int heads, std::size_t at, bool is_q) __attribute__((target(YMM_TARGET ",avx512bf16"))) {
        const Ymm e = ymm_coefficients(table + std::size_t(t) * kDim);
        std::uint16_t* rows = (is_q ? q : k) + at;
        for (int h = 0; h < heads; ++h, rows += kDim) bf16_head_256(rows, rows, e, constants);
      });
}

// The prefill table for `shape` at kD dims: the in-place stream, the hand-written kernels and ropekit's run for each
// dtype (wide: the 256-bit twins and ropekit's fp32 under the AVX2 target too, for the 128-dim shape).
template <int kD>
void prefill_table(const Shape& shape, double cycle, bool bf16, bool wide) {
  using namespace ropekit;
  const auto prefill_row = [&](const char* what, double ns, double stream_ns) {
    std::printf("| %s | %.1f | %.1f | %.2f |\n", what, ns / 1000.0,
                ns / cycle / (double(shape.tokens) * (shape.q_heads + shape.k_heads)), stream_ns / ns);
  };
  const Rope rope(Spec{.head_dim = kD, .rotary_dim = kD, .base = 5e5, .pairing = Pairing::Half});
  std::vector<std::int64_t> pos(std::size_t(shape.tokens));
  for (int t = 0; t < shape.tokens; ++t) pos[std::size_t(t)] = t;
  const auto table = rope.table(shape.tokens);
  // The hand kernels' tables: c then s per token, and the same regrouped even/odd for bf16.
  std::vector<float> cs(std::size_t(shape.tokens) * kD), even_odd(std::size_t(shape.tokens) * kD);
  for (int t = 0; t < shape.tokens; ++t) {
    const float* c = table->cos_row(t);
    const float* sn = table->sin_row(t);
    float* row_cs = cs.data() + std::size_t(t) * kD;
    float* row_eo = even_odd.data() + std::size_t(t) * kD;
    for (int i = 0; i < kD / 2; ++i) row_cs[i] = c[i], row_cs[kD / 2 + i] = sn[i];
    for (int i = 0; i < kD / 4; ++i) {
      row_eo[i] = c[2 * i], row_eo[kD / 4 + i] = c[2 * i + 1];
      row_eo[kD / 2 + i] = sn[2 * i], row_eo[3 * kD / 4 + i] = sn[2 * i + 1];
    }
  }
  const auto call_for = [&](void* q, void* k, DType dtype) {
    return rope.prepare({.q = bshd(q, dtype, 1, shape.tokens, shape.q_heads, kD),
                         .k = bshd(k, dtype, 1, shape.tokens, shape.k_heads, kD),
                         .positions = positions(pos),
                         .threads = 1},
                        table);
  };
  std::printf(
      "\n| prefill, %d tokens × %d heads × %d, in place, one thread | µs | cycles per head | stream / this |\n"
      "|---|---|---|---|\n",
      shape.tokens, shape.q_heads + shape.k_heads, kD);
  {
    const PrefillRows<float> rows(shape, kD, g_f32);
    float* const q = rows.q;
    float* const k = rows.k;
    const double stream = rows.stream_ns();
    prefill_row("in-place stream over the fp32 rows", stream, stream);
    prefill_row("fp32 by hand", ns_per_call([&] { prefill_f32<kD>(shape, q, k, cs.data()); }, kPrefillCalls), stream);
    if (wide) {
      prefill_row("fp32 by hand, 256-bit", ns_per_call([&] { prefill_f32_256(q, k, cs.data()); }, kPrefillCalls),
                  stream);
    }
    const RotateCall call = call_for(q, k, DType::F32);
    prefill_row("fp32 ropekit RotateCall::run", ns_per_call([&] { call.run(0, call.rows()); }, kPrefillCalls), stream);
    if (wide) {
      set_simd_target("AVX2");
      const RotateCall avx2_call = call_for(q, k, DType::F32);
      set_simd_target("");
      prefill_row("fp32 ropekit RotateCall::run, AVX2 target",
                  ns_per_call([&] { avx2_call.run(0, avx2_call.rows()); }, kPrefillCalls), stream);
    }
  }
  for (const DType dtype : {DType::F16, DType::BF16}) {
    if (dtype == DType::BF16 && !bf16) continue;
    const bool is_bf16 = dtype == DType::BF16;
    const PrefillRows<std::uint16_t> rows(shape, kD, is_bf16 ? g_bf16 : g_f16);
    std::uint16_t* const q = rows.q;
    std::uint16_t* const k = rows.k;
    const double stream = rows.stream_ns();
    prefill_row(is_bf16 ? "in-place stream over the bf16 rows" : "in-place stream over the fp16 rows", stream, stream);
    if (is_bf16) {
      prefill_row("bf16 by hand: even/odd, ±0 test, interleave",
                  ns_per_call([&] { prefill_bf16<true, true, kD>(shape, q, k, even_odd.data()); }, kPrefillCalls),
                  stream);
      prefill_row("bf16 by hand: without either",
                  ns_per_call([&] { prefill_bf16<false, false, kD>(shape, q, k, even_odd.data()); }, kPrefillCalls),
                  stream);
      prefill_row("bf16 by hand: regrouped per token from c then s",
                  ns_per_call([&] { prefill_bf16<true, true, kD, true>(shape, q, k, cs.data()); }, kPrefillCalls),
                  stream);
      if (wide) {
        prefill_row("bf16 by hand, 256-bit: even/odd, ±0 test, interleave",
                    ns_per_call([&] { prefill_bf16_256(q, k, even_odd.data()); }, kPrefillCalls), stream);
      }
    } else {
      prefill_row("fp16 by hand: vcvtph2ps, rotation, vcvtps2ph",
                  ns_per_call([&] { prefill_f16<kD>(shape, q, k, cs.data()); }, kPrefillCalls), stream);
      if (wide) {
        prefill_row("fp16 by hand, 256-bit", ns_per_call([&] { prefill_f16_256(q, k, cs.data()); }, kPrefillCalls),
                    stream);
      }
    }
    const RotateCall call = call_for(q, k, dtype);
    prefill_row(is_bf16 ? "bf16 ropekit RotateCall::run" : "fp16 ropekit RotateCall::run",
                ns_per_call([&] { call.run(0, call.rows()); }, kPrefillCalls), stream);
  }
}

}  // namespace

int main() {
  using namespace ropekit;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl")) {
    std::puts("kernel_floor: this CPU has no AVX-512 F/BW/VL; nothing to measure");
    return 0;
  }
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  const auto targets = simd_targets();
  const bool avx2 = std::find(targets.begin(), targets.end(), "AVX2") != targets.end();
  const double cycle = ns_per_cycle();
  std::printf("SIMD target %s; one cycle = %.3f ns (a chain of dependent adds)\n\n", simd_target().c_str(), cycle);

  std::puts("| instruction (zmm, 8 independent per iteration) | cycles per instruction |\n|---|---|");
  std::printf("| vfmadd231ps | %.2f |\n", fma_ns() / cycle);
  if (bf16) std::printf("| vcvtne2ps2bf16 | %.2f |\n", cvt_ns() / cycle);
  std::printf("| vpermw | %.2f |\n| vptestnmw | %.2f |\n| vpslld | %.2f |\n", permw_ns() / cycle, testnm_ns() / cycle,
              shift_ns() / cycle);
  std::printf("| vcvtps2ph | %.2f |\n| vcvtph2ps | %.2f |\n\n", to_f16_ns() / cycle, from_f16_ns() / cycle);

  for (int i = 0; i < 4 * kDim; ++i) g_coef[i] = (i / 64) % 2 == 0 ? 0.6f : 0.8f;  // c, s, ce, co, se, so
  std::uint32_t x = 12345;
  for (int i = 0; i < kHeads * kDim; ++i) {
    x = x * 1664525u + 1013904223u;
    g_f32[i] = float(x >> 8) / float(1 << 24) - 0.5f;
    // a in [0.5, 1), b in [2, 4): with c = 0.6 and s = 0.8, no rotated value is near 0 (no ±0 results)
    g_bf16[i] = static_cast<std::uint16_t>((i % kDim < kDim / 2 ? 0x3f00 : 0x4000) + (x >> 25));
    g_f16[i] = static_cast<std::uint16_t>((i % kDim < kDim / 2 ? 0x3800 : 0x4000) + (x >> 22));  // [0.5, 1), [2, 4)
  }

  const Spec spec{.head_dim = kDim, .rotary_dim = kDim, .base = 5e5, .pairing = Pairing::Half};
  const Rope rope(spec);
  const std::vector<std::int64_t> pos = {4095};
  const auto table = rope.table(4096);
  const auto call_for = [&](void* in, void* out, DType dtype) {
    const auto k_of = [&](void* p) { return static_cast<std::byte*>(p) + 32 * kDim * element_size(dtype); };
    return rope.prepare({.q = bshd(in, dtype, 1, 1, 32, kDim),
                         .k = bshd(k_of(in), dtype, 1, 1, 8, kDim),
                         .q_out = bshd(out, dtype, 1, 1, 32, kDim),
                         .k_out = bshd(k_of(out), dtype, 1, 1, 8, kDim),
                         .positions = positions(pos),
                         .threads = 1},
                        table);
  };

  std::puts("| decode, 40 heads × 128, out of place, L1 | µs | cycles per head | memcpy / this |\n|---|---|---|---|");
  const double copy_f32 = ns_per_call([] {
    std::memcpy(g_copy, g_f32, sizeof g_f32);
    asm volatile("" ::: "memory");
  });
  row("memcpy of the fp32 rows", copy_f32, copy_f32, cycle);
  row("fp32 by hand: rotation (2 mul + 2 fma per vector pair)",
      ns_per_call([] { rotate_f32<FloatWork::Rotation>(g_f32, g_copy); }), copy_f32, cycle);
  row("fp32 by hand: 2 fma per vector pair", ns_per_call([] { rotate_f32<FloatWork::FmaOnly>(g_f32, g_copy); }),
      copy_f32, cycle);
  row("fp32 by hand: no arithmetic (a swap)", ns_per_call([] { rotate_f32<FloatWork::None>(g_f32, g_copy); }), copy_f32,
      cycle);
  row("fp32 by hand, 256-bit: rotation", ns_per_call([] { rotate_f32_256(g_f32, g_copy); }), copy_f32, cycle);
  const RotateCall f32_call = call_for(g_f32, g_copy, DType::F32);
  row("fp32 ropekit RotateCall::run", ns_per_call([&] { f32_call.run(0, f32_call.rows()); }), copy_f32, cycle);
  if (avx2) {
    set_simd_target("AVX2");  // the kernel is chosen at prepare
    const RotateCall f32_avx2 = call_for(g_f32, g_copy, DType::F32);
    set_simd_target("");
    row("fp32 ropekit RotateCall::run, AVX2 target", ns_per_call([&] { f32_avx2.run(0, f32_avx2.rows()); }), copy_f32,
        cycle);
  }
  row("fp32 ropekit Rope::prepare + run", ns_per_call([&] { call_for(g_f32, g_copy, DType::F32).run(); }), copy_f32,
      cycle);
  RotateCall f32_step = call_for(g_f32, g_copy, DType::F32);
  row("fp32 ropekit RotateCall::set_positions + run", ns_per_call([&] {
        f32_step.set_positions(positions(pos));
        f32_step.run();
      }),
      copy_f32, cycle);
  {
    const double copy_f16 = ns_per_call([] {
      std::memcpy(g_f16_out, g_f16, sizeof g_f16);
      asm volatile("" ::: "memory");
    });
    row("memcpy of the fp16 rows", copy_f16, copy_f16, cycle);
    row("fp16 by hand: vcvtph2ps, rotation, vcvtps2ph", ns_per_call([] { rotate_f16(g_f16, g_f16_out); }), copy_f16,
        cycle);
    row("fp16 by hand, 256-bit", ns_per_call([] { rotate_f16_256(g_f16, g_f16_out); }), copy_f16, cycle);
    const RotateCall f16_call = call_for(g_f16, g_f16_out, DType::F16);
    row("fp16 ropekit RotateCall::run", ns_per_call([&] { f16_call.run(0, f16_call.rows()); }), copy_f16, cycle);
    RotateCall f16_step = call_for(g_f16, g_f16_out, DType::F16);
    row("fp16 ropekit RotateCall::set_positions + run", ns_per_call([&] {
          f16_step.set_positions(positions(pos));
          f16_step.run();
        }),
        copy_f16, cycle);
  }
  if (bf16) {
    const double copy_bf16 = ns_per_call([] {
      std::memcpy(g_bf16_out, g_bf16, sizeof g_bf16);
      asm volatile("" ::: "memory");
    });
    row("memcpy of the bf16 rows", copy_bf16, copy_bf16, cycle);
    row("bf16 by hand: even/odd, ±0 test, interleave", ns_per_call([] { rotate_bf16<true, true>(g_bf16, g_bf16_out); }),
        copy_bf16, cycle);
    row("bf16 by hand: without the ±0 test", ns_per_call([] { rotate_bf16<false, true>(g_bf16, g_bf16_out); }),
        copy_bf16, cycle);
    row("bf16 by hand: without the interleave", ns_per_call([] { rotate_bf16<true, false>(g_bf16, g_bf16_out); }),
        copy_bf16, cycle);
    row("bf16 by hand: without either", ns_per_call([] { rotate_bf16<false, false>(g_bf16, g_bf16_out); }), copy_bf16,
        cycle);
    row("bf16 by hand, 256-bit: even/odd, ±0 test, interleave",
        ns_per_call([] { rotate_bf16_256(g_bf16, g_bf16_out); }), copy_bf16, cycle);
    const RotateCall bf16_call = call_for(g_bf16, g_bf16_out, DType::BF16);
    row("bf16 ropekit RotateCall::run", ns_per_call([&] { bf16_call.run(0, bf16_call.rows()); }), copy_bf16, cycle);
    row("bf16 ropekit Rope::prepare + run", ns_per_call([&] { call_for(g_bf16, g_bf16_out, DType::BF16).run(); }),
        copy_bf16, cycle);
    RotateCall bf16_step = call_for(g_bf16, g_bf16_out, DType::BF16);
    row("bf16 ropekit RotateCall::set_positions + run", ns_per_call([&] {
          bf16_step.set_positions(positions(pos));
          bf16_step.run();
        }),
        copy_bf16, cycle);
  }

  // Prefill (item 4 of the file comment): the benchmark's 128-dim case with the 256-bit twins and the AVX2 target, and
  // its 64-dim case.
  prefill_table<kDim>(kPrefill, cycle, bf16, avx2);
  prefill_table<64>(kPrefill64, cycle, bf16, false);
  if (g_flagged != 0)
    std::printf("\n(%d steps met a ±0 result: the bf16 rows above are not the common path)\n", int(g_flagged));
  return 0;
}
