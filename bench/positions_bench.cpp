// Building position ids must not be the slow part of a step (issue 39): Google Benchmark of the position
// functions on realistic sizes, each beside a ceiling measured in the same run — writing the same output bytes
// (std::fill into a vector of the same size). Target: one image of 1,024 merged patches plus 8,192 text tokens
// under 100 µs on one core.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "ropekit/position_ids.hpp"

namespace {

// One image (grid 1×64×64, merge 2: 1,024 tokens) after 4,096 text tokens and before 4,096 more.
struct MropeCase {
  std::vector<std::int32_t> types;
  std::vector<ropekit::VisionGrid> image{{1, 64, 64}};
  MropeCase() {
    types.assign(4096, 0);
    types.insert(types.end(), 1024, 1);
    types.insert(types.end(), 4096, 0);
  }
};

void BM_MropeOneImage8kText(benchmark::State& state) {
  const MropeCase c;
  const ropekit::MropeInput input{
      .batch = 1, .seq = std::int64_t(c.types.size()), .token_types = c.types, .image_grids = c.image};
  for (auto _ : state) {
    auto ids = ropekit::mrope_position_ids(ropekit::MropeFamily::Qwen25Vl, ropekit::MropeRule::TokenTypes, input);
    benchmark::DoNotOptimize(ids.positions.data());
  }
  state.SetItemsProcessed(state.iterations() * std::int64_t(c.types.size()));
}
BENCHMARK(BM_MropeOneImage8kText)->Unit(benchmark::kMicrosecond);

// The same into preallocated buffers (what an engine with its own position tensor calls).
void BM_MropeOneImage8kTextInto(benchmark::State& state) {
  const MropeCase c;
  const ropekit::MropeInput input{
      .batch = 1, .seq = std::int64_t(c.types.size()), .token_types = c.types, .image_grids = c.image};
  std::vector<std::int64_t> positions(3 * c.types.size()), deltas(1);
  for (auto _ : state) {
    ropekit::mrope_position_ids(ropekit::MropeFamily::Qwen25Vl, ropekit::MropeRule::TokenTypes, input, positions,
                                deltas);
    benchmark::DoNotOptimize(positions.data());
  }
  state.SetItemsProcessed(state.iterations() * std::int64_t(c.types.size()));
}
BENCHMARK(BM_MropeOneImage8kTextInto)->Unit(benchmark::kMicrosecond);

// The ceiling: writing 3 × 9,216 int64 (what the call returns) into a buffer.
void BM_WriteSameBytes(benchmark::State& state) {
  std::vector<std::int64_t> out(3 * 9216);
  for (auto _ : state) {
    std::fill(out.begin(), out.end(), 7);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_WriteSameBytes)->Unit(benchmark::kMicrosecond);

void BM_PackedAndZigZag16k(benchmark::State& state) {
  std::vector<std::int64_t> cu{0};
  for (int d = 0; d < 32; ++d) cu.push_back(cu.back() + 512);
  for (auto _ : state) {
    auto pos = ropekit::cp_positions_packed(cu, {.size = 4, .rank = 1});
    benchmark::DoNotOptimize(pos.data());
  }
  state.SetItemsProcessed(state.iterations() * cu.back());
}
BENCHMARK(BM_PackedAndZigZag16k)->Unit(benchmark::kMicrosecond);

void BM_DraftTree64(benchmark::State& state) {
  std::vector<std::int64_t> parents(64);
  for (std::size_t i = 0; i < parents.size(); ++i) parents[i] = std::int64_t(i / 2) - 1;
  for (auto _ : state) {
    auto pos = ropekit::tree_positions(parents, 1000);
    auto mask = ropekit::tree_mask(parents);
    benchmark::DoNotOptimize(pos.data());
    benchmark::DoNotOptimize(mask.data());
  }
}
BENCHMARK(BM_DraftTree64)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
