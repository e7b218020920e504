// src/rope/backend.hpp — the entry points of the CPU backend (src/cpu/), declared by the core so that
// the layers above it — the prepare path (src/call/), the engine (src/attention/) — call the backend
// without reading it. Each entry reads the SIMD target calls run on now (ropekit/cpu.hpp) once.
//
// Contract (tests/targets_test.cpp, on every target this CPU supports): on targets with a fused
// multiply-add and correctly rounded fp16 conversion (x86 AVX2 and AVX-512) the kernels give the bits
// of the scalar reference (rope/reference.hpp), for any split of the rows. Targets without FMA
// (SSSE3, SSE4, EMU128: a second rounding would change the numbers) run the scalar reference itself
// (rotates_with_reference).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rope/call_shape.hpp"
#include "ropekit/dtype.hpp"
#include "ropekit/spec.hpp"

namespace ropekit::detail {
class AngleEvaluator;
struct AttentionJob;
}  // namespace ropekit::detail

namespace ropekit::cpu {

// The kernel of a validated call, chosen once: pairing × q dtype × k dtype on the SIMD target calls
// run on now. Also sets the job's memory policy: non-temporal stores for out-of-place calls writing at
// least stream_threshold_bytes(), software prefetch for calls moving 1 MiB or more.
detail::RowsKernel select_rotate_kernel(detail::RotateJob& job, std::int64_t bytes_written);
// A kernel that rotates nothing (for calls that only describe their rows to a consumer).
detail::RowsKernel no_rows_kernel();
// The token kernel for rows stored as `dtype`.
detail::TokenKernel select_token_kernel(DType dtype);
// The kernel rotating two sets of one token's head rows with one set of coefficients.
detail::TokenPairKernel select_token_pair_kernel(Pairing pairing);
// Every row of a job on up to `threads` threads (>= 1), fewer for small calls (threads_for_bytes).
void run_rows(detail::RowsKernel kernel, const detail::RotateJob& job, int threads);
// The Highway dispatch-table entry (HWY_DISPATCH_TABLE(F)[i]) of the SIMD target calls run on now, for ropekit's
// kernels outside this backend (the lab's: lab/kernels.cpp), so that set_simd_target restricts them too. Their
// tables are compiled with the same targets as this backend's, so the entry means the same target.
std::size_t simd_dispatch_index();

// n lanes of storage type `from` into a cache entry of type `to`: one rounding, fp8 as e4m3(x / scale)
// (ropekit/dtype.hpp), the bits of detail::convert_to_cache_reference on every target; the same type copies.
using CacheConvertKernel = void (*)(const void* src, DType from, std::int64_t n, void* dst, CacheDType to, float scale);
CacheConvertKernel select_cache_convert_kernel();
// n e4m3 bytes to float32, each × scale: e4m3_to_float(b) · scale (exact, then one rounding), the bits
// of detail::e4m3_widen_reference on every target (an fp8 cache's entries as attention and K-shifts read them).
using E4m3WidenKernel = void (*)(const std::uint8_t* src, std::int64_t n, float scale, float* dst);
E4m3WidenKernel select_e4m3_widen_kernel();

// Rows [first, first + count) of cos/sin (row r at cos + r·pairs): AngleEvaluator::row's bits for every
// row, a vector of pairs at a time on the SIMD targets (the table fill).
void angle_rows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, float* cos, float* sin);
// The same rows' Accurate doubles before the float32 rounding (AngleEvaluator::exact_row's bits; tests).
void exact_angle_rows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, double* cos,
                      double* sin);

// Softmax attention (rope/attention_job.hpp): every item on up to `threads` threads (>= 1). Items write
// disjoint output rows, so results do not depend on the thread count.
void run_attention(const detail::AttentionJob& job, int threads);

// Out-of-place calls writing at least this many bytes use non-temporal stores (default: 3/4 of
// the last-level cache, as glibc's memcpy decides; tests lower it to exercise that path).
std::int64_t stream_threshold_bytes();
void set_stream_threshold_bytes(std::int64_t bytes);

// Whether the rotation, angle-row and conversion kernels of the SIMD target `name` (one of
// ropekit::simd_targets()) are the scalar reference itself (targets without a fused multiply-add):
// per-target tests comparing them with the reference skip such targets (the attention driver is
// per-target code on every target).
bool rotates_with_reference(std::string_view name);

}  // namespace ropekit::cpu
