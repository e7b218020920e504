// The dispatching and threading half of the CPU rotation backend (see rotate.hpp). Highway compiles
// this file once per target: each pass includes rotate-inl.h into that target's namespace; the
// HWY_ONCE part holds the dispatch tables and the thread split.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/rotate.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/rotate-inl.h"

#if HWY_ONCE

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "cpu/dispatch.hpp"
#include "cpu/parallel.hpp"
#include "ropekit/cpu.hpp"

namespace ropekit::cpu {

HWY_EXPORT(RotateKernelFor);
HWY_EXPORT(TokenKernelFor);
HWY_EXPORT(TokenPairKernelFor);
HWY_EXPORT(CacheConvertKernelFor);
HWY_EXPORT(E4m3Widen);
HWY_EXPORT(FloatAngleRows);
HWY_EXPORT(ExactAngleRows);

namespace {

std::int64_t default_stream_threshold() {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return llc > 0 ? std::int64_t{llc} / 4 * 3 : std::int64_t{32} << 20;
}

std::atomic<std::int64_t>& stream_threshold() {
  static std::atomic<std::int64_t> bytes{default_stream_threshold()};
  return bytes;
}

void no_rows(const detail::RotateJob&, std::int64_t, std::int64_t) {}

}  // namespace

std::int64_t stream_threshold_bytes() { return stream_threshold().load(); }
void set_stream_threshold_bytes(std::int64_t bytes) { stream_threshold().store(bytes); }

detail::RowsKernel select_rotate_kernel(detail::RotateJob& job, std::int64_t bytes_written) {
  job.stream_stores = bytes_written > 0 && bytes_written >= stream_threshold_bytes();
  // Rows of a call this small are in L1/L2 (a decode step's q and k were just written by their
  // projection); there the prefetches only cost (fp32 decode steps 0.39-0.48 -> 0.35-0.46 of memcpy).
  constexpr std::int64_t kPrefetchFromBytes = std::int64_t{1} << 20;
  job.prefetch_rows = job.bytes_moved >= kPrefetchFromBytes;
  const Selection target = current_selection();
  return HWY_DISPATCH_TABLE(RotateKernelFor)[target.index](job.map->pairing, job.args.q.dtype, job.args.k.dtype,
                                                           target.native_bf16);
}

detail::TokenKernel select_token_kernel(DType dtype) {
  const Selection target = current_selection();
  return HWY_DISPATCH_TABLE(TokenKernelFor)[target.index](dtype, target.native_bf16);
}

detail::TokenPairKernel select_token_pair_kernel(Pairing pairing) {
  const Selection target = current_selection();
  return HWY_DISPATCH_TABLE(TokenPairKernelFor)[target.index](pairing, target.native_bf16);
}

CacheConvertKernel select_cache_convert_kernel() {
  const Selection target = current_selection();
  return HWY_DISPATCH_TABLE(CacheConvertKernelFor)[target.index](target.native_bf16);
}

E4m3WidenKernel select_e4m3_widen_kernel() { return HWY_DISPATCH_TABLE(E4m3Widen)[current_selection().index]; }

void e4m3_widen_reference(const std::uint8_t* src, std::int64_t n, float scale, float* dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = e4m3_to_float(src[i]) * scale;
}

void angle_rows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, float* cos, float* sin) {
  HWY_DISPATCH_TABLE(FloatAngleRows)[current_selection().index](angles, first, count, cos, sin);
}

void exact_angle_rows(const detail::AngleEvaluator& angles, std::int64_t first, std::int64_t count, double* cos,
                      double* sin) {
  HWY_DISPATCH_TABLE(ExactAngleRows)[current_selection().index](angles, first, count, cos, sin);
}

void convert_to_cache_reference(const void* src, DType from, std::int64_t n, void* dst, CacheDType to, float scale) {
  if (to != CacheDType::F8E4M3 && static_cast<int>(to) == static_cast<int>(from)) {
    std::memcpy(dst, src, static_cast<std::size_t>(n * element_size(from)));
    return;
  }
  // In blocks through a float32 buffer on the stack: widen (exact), then one rounding.
  constexpr std::int64_t kBlock = 256;
  float buffer[kBlock];
  for (std::int64_t first = 0; first < n; first += kBlock) {
    const std::int64_t count = std::min(kBlock, n - first);
    detail::widen(static_cast<const std::byte*>(src) + first * element_size(from), from, count, buffer);
    void* out = static_cast<std::byte*>(dst) + first * element_size(to);
    if (to == CacheDType::F8E4M3) {
      auto* bytes = static_cast<std::uint8_t*>(out);
      for (std::int64_t i = 0; i < count; ++i) bytes[i] = float_to_e4m3(buffer[i] / scale);
    } else {
      detail::narrow(buffer, count, static_cast<DType>(to), out);
    }
  }
}

detail::RowsKernel no_rows_kernel() { return &no_rows; }

void run_rows(detail::RowsKernel kernel, const detail::RotateJob& job, int threads) {
  const std::int64_t rows = job.rows();
  const int n = static_cast<int>(std::min<std::int64_t>(threads_for_bytes(threads, job.bytes_moved), rows));
  // Contiguous row ranges: each thread streams through whole tokens of q and k. Every row is
  // computed by the same code whatever the split, so results do not depend on the thread count.
  parallel_ranges(n, rows, [&](std::int64_t first, std::int64_t last) { kernel(job, first, last); });
}

}  // namespace ropekit::cpu

#endif  // HWY_ONCE
