// src/rope/parallel.hpp — the library's threads: OpenMP over independent pieces of work. Without
// OpenMP (clang without libomp) everything runs on the calling thread; results never depend on the
// split.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <optional>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ropekit::detail {

// Runs f(worker, first, last) over [0, n) split into `threads` contiguous ranges (one per thread, sizes differing by
// at most one), worker in [0, threads) naming the thread's own state. f must not throw.
template <class F>
void parallel_ranges_indexed(int threads, std::int64_t n, F f) {
#ifdef _OPENMP
  if (threads > 1 && n > 1) {
#pragma omp parallel num_threads(threads)
    {
      const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::int64_t per = n / nt, extra = n % nt;
      const std::int64_t first = t * per + std::min(t, extra);
      f(static_cast<int>(t), first, first + per + (t < extra ? 1 : 0));
    }
    return;
  }
#endif
  (void)threads;
  f(0, std::int64_t{0}, n);
}

// The same without the worker: f(first, last).
template <class F>
void parallel_ranges(int threads, std::int64_t n, F f) {
  parallel_ranges_indexed(threads, n, [&f](int, std::int64_t first, std::int64_t last) { f(first, last); });
}

// Runs body(i, state) for i in [0, items) on up to `threads` threads (dynamic schedule), each thread
// with its own state from make_state(). Items must be independent. An exception must not leave an
// OpenMP region (nor skip the loop's barrier): the first one is rethrown afterwards.
template <class MakeState, class Body>
void parallel_items(int threads, std::int64_t items, MakeState make_state, Body body) {
#ifdef _OPENMP
  if (threads > 1 && items > 1) {
    std::exception_ptr failure;
    const auto record = [&failure] {
#pragma omp critical(ropekit_parallel_items_failure)
      if (!failure) failure = std::current_exception();
    };
#pragma omp parallel num_threads(threads)
    {
      std::optional<decltype(make_state())> state;
      try {
        state.emplace(make_state());
      } catch (...) {
        record();
      }
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t i = 0; i < items; ++i) {
        if (!state) continue;
        try {
          body(i, *state);
        } catch (...) {
          record();
        }
      }
    }
    if (failure) std::rethrow_exception(failure);
    return;
  }
#endif
  (void)threads;
  auto state = make_state();
  for (std::int64_t i = 0; i < items; ++i) body(i, state);
}

}  // namespace ropekit::detail
