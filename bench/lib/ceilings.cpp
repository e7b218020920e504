// The ceilings (see ceilings.hpp). The in-place ceiling loop is compiled for every Highway target and
// dispatched to the best one, so it uses the widest vectors the kernels can.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/ceilings.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace ropekit::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Reads and writes every 32-bit word of [p, p + words) once. `mask` is 0 at run time, so the data
// keep their values, but the compiler cannot drop the stores.
void XorStream(std::uint32_t* p, std::size_t words, std::uint32_t mask) {
  const hn::ScalableTag<std::uint32_t> d;
  const std::size_t n = hn::Lanes(d);
  const auto m = hn::Set(d, mask);
  std::size_t i = 0;
  for (; i + 2 * n <= words; i += 2 * n) {
    const auto a = hn::LoadU(d, p + i);
    const auto b = hn::LoadU(d, p + i + n);
    hn::StoreU(hn::Xor(a, m), d, p + i);
    hn::StoreU(hn::Xor(b, m), d, p + i + n);
  }
  for (; i < words; ++i) p[i] ^= mask;
}

}  // namespace ropekit::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <fmt/format.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>

#include "lib/ceilings.hpp"

namespace ropekit::bench {

HWY_EXPORT(XorStream);

namespace {

volatile std::uint32_t g_zero_mask = 0;

using Clock = std::chrono::steady_clock;

// Seconds per call of f, run in a batch of n calls.
double seconds_per_call(const std::function<void()>& f, std::int64_t n) {
  const auto start = Clock::now();
  for (std::int64_t i = 0; i < n; ++i) f();
  const std::chrono::duration<double> elapsed = Clock::now() - start;
  return elapsed.count() / static_cast<double>(n);
}

std::int64_t calls_per_batch(const std::function<void()>& f, double batch_seconds) {
  f();  // warm: first-touch pages, caches, OpenMP threads
  const double once = seconds_per_call(f, 1);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(batch_seconds / std::max(once, 1e-9)));
}

// f(first, last) over [0, n) in `threads` contiguous ranges whose sizes differ by at most one, one per
// thread, and on the calling thread alone when one thread (or one line) is asked for: the split the
// library gives a call's rows (rope/parallel.hpp), so the ceiling's threads stream alike and a decode-sized
// ceiling pays no parallel region the call does not pay.
template <class F>
void split_lines(int threads, std::int64_t n, F f) {
#ifdef _OPENMP
  if (threads > 1 && n > 1) {
#pragma omp parallel num_threads(threads)
    {
      const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::int64_t per = n / nt, extra = n % nt;
      const std::int64_t first = t * per + std::min(t, extra);
      f(first, first + per + (t < extra ? 1 : 0));
    }
    return;
  }
#endif
  (void)threads;
  f(std::int64_t{0}, n);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

std::string ceiling_name(Ceiling c) { return c == Ceiling::InPlaceStream ? "in-place stream" : "memcpy"; }

Ceiling ceiling_of(const cases::Case& c) { return c.in_place && c.seq > 1 ? Ceiling::InPlaceStream : Ceiling::Memcpy; }

// Issue 18's targets: prefill 0.85 with a table, 0.5 with angles on the fly; decode 0.5 and 0.25.
double target_of(const cases::Case& c) {
  const bool table = c.angles == cases::Angles::Table;
  if (c.seq == 1) return table ? 0.5 : 0.25;
  return table ? 0.85 : 0.5;
}

void run_ceiling(cases::Workload& w) {
  const cases::Case& c = w.c();
  const int threads =
      threads_for_bytes(c.threads > 0 ? c.threads : default_threads(), w.bytes());  // as apply() decides
  const auto kernel = HWY_DYNAMIC_DISPATCH(XorStream);
  const std::uint32_t mask = g_zero_mask;
  for (cases::Tensor* in : {&w.q, &w.k}) {
    cases::Tensor* out = in == &w.q ? &w.q_out : &w.k_out;
    auto* first_byte = static_cast<std::byte*>(in->view.data);
    const std::int64_t lines = c.batch * c.seq * in->view.heads * w.head_dim() * element_size(c.dtype) / 64;
    if (ceiling_of(c) == Ceiling::InPlaceStream) {
      auto* words = reinterpret_cast<std::uint32_t*>(first_byte);
      split_lines(threads, lines, [&](std::int64_t first, std::int64_t last) {
        kernel(words + first * 16, static_cast<std::size_t>((last - first) * 16), mask);
      });
    } else {
      auto* target = static_cast<std::byte*>(out->view.data);
      split_lines(threads, lines, [&](std::int64_t first, std::int64_t last) {
        std::memcpy(target + first * 64, first_byte + first * 64, static_cast<std::size_t>((last - first) * 64));
      });
    }
  }
}

Result measure(const cases::Case& c, int rounds, double batch_seconds) {
  cases::Workload w(c, 1);
  const std::function<void()> kernel = [&] { w.run(); };
  const std::function<void()> ceiling = [&] { run_ceiling(w); };
  const std::int64_t nk = calls_per_batch(kernel, batch_seconds);
  const std::int64_t nc = calls_per_batch(ceiling, batch_seconds);
  std::vector<double> tk, tc;
  for (int r = 0; r < rounds; ++r) {
    tk.push_back(seconds_per_call(kernel, nk));
    tc.push_back(seconds_per_call(ceiling, nc));
  }
  const double bytes = static_cast<double>(c.bytes());
  return {c, bytes / median(tk) / 1e9, bytes / median(tc) / 1e9};
}

std::vector<double> interleaved(const std::vector<std::function<void()>>& fns, int rounds, double min_seconds) {
  std::vector<std::vector<double>> samples(fns.size());
  for (const auto& f : fns) f();  // warm up (tables, caches, thread pool)
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < fns.size(); ++i) {
      fns[i]();
      int calls = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      do {
        fns[i]();
        ++calls;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      } while (elapsed < min_seconds);
      samples[i].push_back(elapsed / calls);
    }
  }
  std::vector<double> medians;
  for (auto& s : samples) medians.push_back(median(s));
  return medians;
}

}  // namespace ropekit::bench

#endif  // HWY_ONCE
