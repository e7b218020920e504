// soak: a bounded stress run of an engine-like loop (issue 66, docs/reliability.md) — one thread per core, each
// with its own paged KV cache of several sequences, appending, K-shifting, erasing, copying and re-rotating at
// random (tests/cache_model.hpp's operations, each checked against its model after every step: the spot check) and
// attending over the sequences after every step; the process's resident memory sampled once a second. Passes when
// no step disagrees with the model and the resident memory after the warm-up (the first fifth) stays within 2 % (and
// 4 MiB) of its value at the end of the warm-up.
//   build/release/bench/soak [seconds = 120]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "cache_model.hpp"

namespace {

std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ropekit;
  using Clock = std::chrono::steady_clock;
  const double seconds = argc > 1 ? std::atof(argv[1]) : 120.0;
  if (!(seconds > 0)) {
    std::fprintf(stderr, "soak: seconds = %s: must be a positive number\n", argv[1]);
    return 2;
  }
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const cache_model::Ropes ropes;
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> steps{0}, attended{0};
  std::mutex failure_mutex;
  std::string failure;
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      static constexpr CacheDType kTypes[] = {CacheDType::BF16, CacheDType::F8E4M3, CacheDType::F32, CacheDType::F16};
      const CacheDType dtype = kTypes[t % 4];
      const PagedKvCacheShape shape{.num_pages = 64,
                                    .page_size = 16,
                                    .kv_heads = cache_model::kKvHeads,
                                    .dtype = dtype,
                                    .k_scale = dtype == CacheDType::F8E4M3 ? 0.03f : 1.0f,
                                    .v_scale = dtype == CacheDType::F8E4M3 ? 0.02f : 1.0f,
                                    .max_sequences = 8,
                                    .regimes = {}};
      cache_model::Harness harness(ropes, shape);
      std::mt19937_64 g(1000 + t);
      std::vector<float> q(std::size_t(4 * cache_model::kHeadDim)), out(q.size());
      for (float& x : q) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(g);
      while (!stop.load(std::memory_order_relaxed)) {
        const cache_model::Op op = cache_model::random_op(g, harness.model());
        const std::string diff = harness.step(op);
        if (!diff.empty()) {
          std::lock_guard lock(failure_mutex);
          // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on a chain of std::string + at -O3.
          failure = "thread ";
          failure += std::to_string(t);
          failure += " (";
          failure += op.describe();
          failure += "): ";
          failure += diff;
          stop = true;
          return;
        }
        ++steps;
        // A decode query against every non-empty sequence, under its own plan.
        for (int s = 0; s < shape.max_sequences; ++s) {
          const auto& seq = harness.model()[std::size_t(s)];
          if (seq.entries.empty()) continue;
          const std::int64_t next = seq.entries.back().pos + 1;
          const std::vector<std::int32_t> seqs = {s};
          const std::vector<std::int64_t> qp = {next};
          attention(ropes.at(seq.plan),
                    bshd(q.data(), DType::F32, 1, 1, 2 * cache_model::kKvHeads, cache_model::kHeadDim), positions(qp),
                    seqs, harness.cache(),
                    bshd(out.data(), DType::F32, 1, 1, 2 * cache_model::kKvHeads, cache_model::kHeadDim),
                    {.causal = false, .threads = 1});
          ++attended;
        }
      }
    });
  }
  const auto start = Clock::now();
  std::vector<std::pair<double, std::int64_t>> samples;
  while (!stop) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double at = std::chrono::duration<double>(Clock::now() - start).count();
    samples.emplace_back(at, resident_bytes());
    if (at >= seconds) stop = true;
  }
  for (std::thread& w : workers) w.join();
  if (!failure.empty()) {
    std::printf("soak: FAILED after %lld steps: %s\n", static_cast<long long>(steps.load()), failure.c_str());
    return 1;
  }
  const std::size_t warm = std::max<std::size_t>(1, samples.size() / 5);
  const std::int64_t base = samples[warm - 1].second;
  std::int64_t low = base, high = base;
  for (std::size_t i = warm; i < samples.size(); ++i) {
    low = std::min(low, samples[i].second);
    high = std::max(high, samples[i].second);
  }
  const double allowed = std::max(0.02 * double(base), 4.0 * 1048576.0);
  std::printf("soak: %u threads, %.0f s: %lld operations checked against the model, %lld decode attentions\n", threads,
              samples.back().first, static_cast<long long>(steps.load()), static_cast<long long>(attended.load()));
  std::printf(
      "soak: resident memory after the warm-up (%zu s): %.1f MiB, then %.1f to %.1f MiB (allowed drift %.1f "
      "MiB)\n",
      warm, double(base) / 1048576.0, double(low) / 1048576.0, double(high) / 1048576.0, allowed / 1048576.0);
  const bool flat = double(high - base) <= allowed;
  std::printf("soak: %s\n", flat ? "ok: flat" : "FAILED: resident memory grew after the warm-up");
  return flat ? 0 : 1;
}
