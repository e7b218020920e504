// RoPE bandwidth cases and their ceilings (see bandwidth.hpp). The in-place ceiling loop is
// compiled for every Highway target and dispatched like the kernels, so both use the same vectors.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/bandwidth.cpp"
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
#include <hwy/aligned_allocator.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>

#include "lib/bandwidth.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ropekit::bench {

HWY_EXPORT(XorStream);

namespace {

volatile std::uint32_t g_zero_mask = 0;

// Splits [0, n) over `threads` OpenMP threads (the same split policy as apply()).
void parallel_ranges(int threads, std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& f) {
#ifdef _OPENMP
  if (threads > 1) {
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
  f(0, n);
}

std::string dtype_name(DType d) { return d == DType::F32 ? "fp32" : d == DType::BF16 ? "bf16" : "fp16"; }

}  // namespace

std::string ceiling_name(Ceiling c) { return c == Ceiling::InPlaceStream ? "in-place stream" : "memcpy"; }

std::string Case::name() const {
  return fmt::format("{}/{}/{}/{}/t{}/{}", shape.label, dtype_name(dtype),
                     pairing == Pairing::Half ? "half" : "interleaved", in_place ? "inplace" : "outofplace",
                     threads, on_the_fly ? "onthefly" : "table");
}

std::int64_t Case::bytes() const {
  return 2 * shape.tokens * (shape.q_heads + shape.k_heads) * shape.head_dim * element_size(dtype);
}

std::vector<Case> all_cases() {
  const std::vector<Shape> shapes = {
      {"prefill_128x32x512", 128, 512, 32, 8, false},
      {"prefill_128x32x4096", 128, 4096, 32, 8, false},
      {"prefill_64x8x4096", 64, 4096, 8, 2, false},
      {"decode_128x32q8k", 128, 1, 32, 8, true},
  };
  std::vector<Case> cases;
  for (const Shape& s : shapes)
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (Pairing p : {Pairing::Half, Pairing::Interleaved})
        for (bool in_place : {true, false})
          for (int threads : {1, 2})
            for (bool on_the_fly : {false, true}) cases.push_back({s, dt, p, in_place, threads, on_the_fly});
  return cases;
}

// A 64-byte-aligned byte buffer (Highway 1.0 has no aligned std::allocator).
struct AlignedBytes {
  hwy::AlignedFreeUniquePtr<std::uint8_t[]> bytes;
  std::size_t n = 0;
  void resize(std::size_t size) {
    bytes = hwy::AllocateAligned<std::uint8_t>(size);
    n = size;
    std::memset(bytes.get(), 0, n);
  }
  std::uint8_t* data() { return bytes.get(); }
  std::size_t size() const { return n; }
  std::uint8_t& operator[](std::size_t i) { return bytes[i]; }
};

struct Workload::Impl {
  Case c;
  Rope rope;
  std::vector<std::int64_t> pos;
  std::shared_ptr<const Table> table;
  AlignedBytes q, k, q_out, k_out;

  explicit Impl(const Case& cs)
      : c(cs), rope(Spec{.head_dim = cs.shape.head_dim, .rotary_dim = cs.shape.head_dim, .base = 5e5,
                         .pairing = cs.pairing}) {
    const std::int64_t es = element_size(c.dtype), d = c.shape.head_dim;
    q.resize(static_cast<std::size_t>(c.shape.tokens * c.shape.q_heads * d * es));
    k.resize(static_cast<std::size_t>(c.shape.tokens * c.shape.k_heads * d * es));
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto fill = [&](auto& buf) {
      for (std::size_t i = 0; i < buf.size(); i += es) {
        const float v = normal(rng);
        if (c.dtype == DType::F32) {
          std::memcpy(&buf[i], &v, 4);
        } else {
          const std::uint16_t h = c.dtype == DType::BF16 ? float_to_bf16(v) : float_to_f16(v);
          std::memcpy(&buf[i], &h, 2);
        }
      }
    };
    fill(q);
    fill(k);
    q_out.resize(q.size());
    k_out.resize(k.size());
    // Prefill: positions 0..S−1; decode: one token deep into a 4096-token context.
    pos.resize(static_cast<std::size_t>(c.shape.tokens));
    std::iota(pos.begin(), pos.end(), c.shape.decode ? 4095 : 0);
    if (!c.on_the_fly) table = rope.table(pos.back() + 1);
  }

  RotateArgs args() {
    const std::int64_t d = c.shape.head_dim, s = c.shape.tokens;
    RotateArgs a{.q = bshd(q.data(), c.dtype, 1, s, c.shape.q_heads, d),
                 .k = bshd(k.data(), c.dtype, 1, s, c.shape.k_heads, d),
                 .positions = positions(pos), .threads = c.threads};
    if (!c.in_place) {
      a.q_out = bshd(q_out.data(), c.dtype, 1, s, c.shape.q_heads, d);
      a.k_out = bshd(k_out.data(), c.dtype, 1, s, c.shape.k_heads, d);
    }
    return a;
  }
};

Workload::Workload(const Case& c) : impl_(std::make_unique<Impl>(c)) {}
Workload::~Workload() = default;

void Workload::run() {
  const RotateArgs a = impl_->args();
  if (impl_->c.on_the_fly) {
    impl_->rope.apply_on_the_fly(a);
  } else {
    impl_->rope.apply(a, *impl_->table);
  }
}

void Workload::run_ceiling() {
  Impl& w = *impl_;
  const int threads = threads_for_bytes(w.c.threads, w.c.bytes());  // as apply() decides;
  const auto kernel = HWY_DYNAMIC_DISPATCH(XorStream);
  const std::uint32_t mask = g_zero_mask;
  for (auto* buf : {&w.q, &w.k}) {
    auto* out = buf == &w.q ? &w.q_out : &w.k_out;
    const std::int64_t lines = static_cast<std::int64_t>(buf->size() / 64);
    if (w.c.ceiling() == Ceiling::InPlaceStream) {
      auto* words = reinterpret_cast<std::uint32_t*>(buf->data());
      parallel_ranges(threads, lines, [&](std::int64_t first, std::int64_t last) {
        kernel(words + first * 16, static_cast<std::size_t>((last - first) * 16), mask);
      });
    } else {
      parallel_ranges(threads, lines, [&](std::int64_t first, std::int64_t last) {
        std::memcpy(out->data() + first * 64, buf->data() + first * 64, static_cast<std::size_t>((last - first) * 64));
      });
    }
  }
}

namespace {

// Seconds per call of f, run in a batch of n calls.
double seconds_per_call(const std::function<void()>& f, std::int64_t n) {
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < n; ++i) f();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / static_cast<double>(n);
}

std::int64_t calls_per_batch(const std::function<void()>& f, double batch_seconds) {
  f();  // warm: first-touch pages, caches, OpenMP threads
  const double once = seconds_per_call(f, 1);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(batch_seconds / std::max(once, 1e-9)));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Result measure(const Case& c, int rounds, double batch_seconds) {
  Workload w(c);
  const std::function<void()> kernel = [&] { w.run(); };
  const std::function<void()> ceiling = [&] { w.run_ceiling(); };
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

}  // namespace ropekit::bench

#endif  // HWY_ONCE
