// The rotation entry points of the CPU backend (declared in rope/backend.hpp): Highway compiles this file
// once per target, each pass including rotate-inl.h into that target's namespace; the HWY_ONCE part holds
// the dispatch tables, the memory policy and the thread split.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/rotate.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/rotate-inl.h"

#if HWY_ONCE

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "cpu/dispatch.hpp"
#include "rope/parallel.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

namespace ropekit::cpu {

HWY_EXPORT(RotateKernelFor);
HWY_EXPORT(TokenKernelFor);
HWY_EXPORT(TokenPairKernelFor);
HWY_EXPORT(RotatesWithReference);

namespace {

std::int64_t default_stream_threshold() {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return llc > 0 ? std::int64_t{llc} / 4 * 3 : std::int64_t{32} << 20;
}

std::atomic<std::int64_t>& stream_threshold() {
  static std::atomic<std::int64_t> bytes{default_stream_threshold()};
  return bytes;
}

// A call whose bytes fit the L1 data cache takes the fp32 kernel that loads each vector once
// (F32PinnedCodec). Decode-shaped fp32 out of place, one thread, Zen 4 (32 KiB L1d): 9-32 heads × 128
// (9-32 KiB) 8-19 % faster pinned; 40 heads (40 KiB, L2-resident) 2-5 % slower.
std::int64_t l1_data_bytes() {
  static const std::int64_t bytes = [] {
    const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return l1 > 0 ? std::int64_t{l1} : std::int64_t{32} << 10;
  }();
  return bytes;
}

void no_rows(const detail::RotateJob&, std::int64_t, std::int64_t) {}

}  // namespace

std::int64_t stream_threshold_bytes() { return stream_threshold().load(); }
void set_stream_threshold_bytes(std::int64_t bytes) { stream_threshold().store(bytes); }

detail::RowsKernel select_rotate_kernel(detail::RotateJob& job, std::int64_t bytes_written) {
  job.stream_stores = bytes_written > 0 && bytes_written >= stream_threshold_bytes();
  // Rows of a smaller call are in L1/L2; there the prefetches only cost (docs/performance-log.md: the code
  // comments' figures).
  job.prefetch_rows = job.bytes_moved >= kLargeCallBytes && software_row_prefetch();
  const bool small = job.bytes_moved <= l1_data_bytes();
  const Selection target = current_selection();
  // An absent view's dtype is irrelevant (it has no rows): read as float32.
  const DType q = job.q_heads > 0 ? job.args.q.dtype : DType::F32, k = job.k_heads > 0 ? job.args.k.dtype : DType::F32;
  const bool out_of_place = job.args.q_out.data != nullptr || job.args.k_out.data != nullptr;
  job.one_thread_kernel = nullptr;
  static const int avx2 = target_index("AVX2");
  // Large calls only (one_thread_256_bit's own first condition), tested before the CPU's identity is looked up and its
  // vendor string compared: a decode call's selection skips both.
  if (job.bytes_moved >= kLargeCallBytes && avx2 >= 0 && default_target() &&
      one_thread_256_bit(cpu_identity(), q, k, job.map->pairing, out_of_place, job.bytes_moved)) {
    const Selection t = available_targets()[std::size_t(avx2)].selection;
    job.one_thread_kernel = HWY_DISPATCH_TABLE(RotateKernelFor)[t.index](job, q, k, t.native_bf16, small);
  }
  return HWY_DISPATCH_TABLE(RotateKernelFor)[target.index](job, job.args.q.dtype, job.args.k.dtype, target.native_bf16,
                                                           small);
}

detail::TokenKernel select_token_kernel(DType dtype) {
  const Selection target = current_selection();
  return HWY_DISPATCH_TABLE(TokenKernelFor)[target.index](dtype, target.native_bf16);
}

detail::TokenPairKernel select_token_pair_kernel(Pairing pairing) {
  const Selection target = current_selection();
  return HWY_DISPATCH_TABLE(TokenPairKernelFor)[target.index](pairing, target.native_bf16);
}

detail::RowsKernel no_rows_kernel() { return &no_rows; }

void run_rows(detail::RowsKernel kernel, const detail::RotateJob& job, int threads) {
  const std::int64_t rows = job.rows();
  const int n = static_cast<int>(std::min<std::int64_t>(threads_for_bytes(threads, job.bytes_moved), rows));
  if (n == 1 && job.one_thread_kernel != nullptr) kernel = job.one_thread_kernel;  // the memory policy's choice
  // Contiguous row ranges: each thread streams through whole tokens of q and k. Every row is
  // computed by the same code whatever the split, so results do not depend on the thread count.
  detail::parallel_ranges(n, rows, [&](std::int64_t first, std::int64_t last) { kernel(job, first, last); });
}

bool rotates_with_reference(std::string_view name) {
  if (const int i = target_index(name); i >= 0) {
    return HWY_DISPATCH_TABLE(RotatesWithReference)[available_targets()[std::size_t(i)].selection.index]();
  }
  throw Error(fmt::format("SIMD target {} is not one of this CPU's (ropekit::simd_targets())", name));
}

}  // namespace ropekit::cpu

#endif  // HWY_ONCE
