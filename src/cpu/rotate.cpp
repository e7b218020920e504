// The dispatching and threading half of the CPU engine (see rotate.hpp). Highway compiles this
// file once per target: each pass includes rotate-inl.h into that target's namespace; the
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

#include "rope/reference.hpp"
#include "ropekit/cpu.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ropekit::cpu {

HWY_EXPORT(RotateRows);
HWY_EXPORT(HasSimdKernels);
HWY_EXPORT(CurrentTarget);

namespace {

std::int64_t default_stream_threshold() {
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return llc > 0 ? std::int64_t{llc} / 4 * 3 : std::int64_t{32} << 20;
}

std::atomic<std::int64_t>& stream_threshold() {
  static std::atomic<std::int64_t> bytes{default_stream_threshold()};
  return bytes;
}

void ensure_dispatch_initialized() {
  hwy::ChosenTarget& chosen = hwy::GetChosenTarget();
  if (!chosen.IsInitialized()) chosen.Update(hwy::SupportedTargets());
}

}  // namespace

std::int64_t stream_threshold_bytes() { return stream_threshold().load(); }
void set_stream_threshold_bytes(std::int64_t bytes) { stream_threshold().store(bytes); }

std::int64_t dispatched_target() {
  ensure_dispatch_initialized();
  return HWY_DYNAMIC_DISPATCH(CurrentTarget)();
}

bool dispatched_target_has_simd_kernels() {
  ensure_dispatch_initialized();
  return HWY_DYNAMIC_DISPATCH(HasSimdKernels)();
}

bool uses_stream_stores(const detail::RotateJob& job) {
  return job.bytes_written > 0 && job.bytes_written >= stream_threshold_bytes();
}

void rotate(const detail::RotateJob& job, int threads) {
  ensure_dispatch_initialized();
  if (!HWY_DYNAMIC_DISPATCH(HasSimdKernels)()) {
    detail::rotate_reference(job);
    return;
  }
  // Chosen once per call; every thread runs the same target's code.
  const auto kernel = HWY_DISPATCH_TABLE(RotateRows)[hwy::GetChosenTarget().GetIndex()];
  const bool stream = uses_stream_stores(job);
  const std::int64_t rows = job.tokens * (job.q_heads + job.k_heads);
  const std::int64_t bytes =  // read + written
      job.tokens * job.map->head_dim * 2 *
      (job.q_heads * element_size(job.args->q.dtype) + job.k_heads * element_size(job.args->k.dtype));
  const std::int64_t n = std::min<std::int64_t>(threads_for_bytes(threads, bytes), rows);
#ifdef _OPENMP
  if (n > 1) {
    // Contiguous row ranges: each thread streams through whole tokens of q and k. Every row is
    // computed by the same code whatever the split, so results do not depend on the thread count.
#pragma omp parallel num_threads(static_cast<int>(n))
    {
      const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::int64_t per = rows / nt, extra = rows % nt;
      const std::int64_t first = t * per + std::min(t, extra);
      const std::int64_t last = first + per + (t < extra ? 1 : 0);
      kernel(job, first, last, stream);
    }
    return;
  }
#endif
  kernel(job, 0, rows, stream);
}

}  // namespace ropekit::cpu

#endif  // HWY_ONCE
