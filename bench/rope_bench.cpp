// Google Benchmark over the rotation perf cases of the case table (bench/lib/cases.hpp), as
// `ropekit bench` runs them. Each benchmark times the rotation, then the matching ceiling (in-place
// stream or memcpy) for as many calls on the same buffers, and reports GB/s, the ceiling's GB/s and
// their ratio as counters.
//   build/release/bench/rope_bench --benchmark_filter='rotate/prefill/half128/fp32/.*/t1/'
#include <benchmark/benchmark.h>

#include <chrono>

#include "lib/ceilings.hpp"

namespace {

void run_case(benchmark::State& state, const ropekit::cases::Case& c) {
  ropekit::cases::Workload w(c, 1);
  w.run();
  ropekit::bench::run_ceiling(w);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) w.run();
  const std::chrono::duration<double> kernel = std::chrono::steady_clock::now() - start;
  const auto ceiling_start = std::chrono::steady_clock::now();
  for (benchmark::IterationCount i = 0; i < state.iterations(); ++i) ropekit::bench::run_ceiling(w);
  const std::chrono::duration<double> ceiling = std::chrono::steady_clock::now() - ceiling_start;

  const double bytes = static_cast<double>(c.bytes()) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["GB/s"] = bytes / kernel.count() / 1e9;
  state.counters["ceiling_GB/s"] = bytes / ceiling.count() / 1e9;
  state.counters["fraction"] = ceiling.count() / kernel.count();
  state.SetLabel(ropekit::bench::ceiling_name(ropekit::bench::ceiling_of(c)));
}

}  // namespace

int main(int argc, char** argv) {
  for (const ropekit::cases::Case& c : ropekit::cases::perf_cases()) {
    if (c.op != ropekit::cases::Op::Rotate) continue;
    benchmark::RegisterBenchmark(c.name().c_str(), run_case, c)->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
