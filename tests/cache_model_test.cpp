// Model-based tests of the paged KV cache (issue 66): long random histories of appends, erasures, K-shifts by ±δ,
// sequence copies and removals, re-rotations to another plan and page reuse, in every storage type, each compared
// after every step with the plain model of tests/cache_model.hpp (positions and unrotated keys; the expected keys
// computed from them in double). A failure prints the seed, the step and the operation, so that
// ROPEKIT_CACHE_MODEL_SEED=<seed> replays it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "cache_model.hpp"

namespace {

using namespace ropekit;

std::uint64_t seed_from_env(std::uint64_t fallback) {
  const char* text = std::getenv("ROPEKIT_CACHE_MODEL_SEED");
  return text ? std::strtoull(text, nullptr, 10) : fallback;
}

struct Counts {
  std::int64_t steps = 0, refused = 0, appends = 0, shifts = 0, rerotations = 0;
};

// 10^5 steps per storage type in optimised builds (half per page layout); a Debug build (the dev tier's ASan +
// UBSan, about 20x slower) runs a tenth, and the slow tier 10^6 in one history.
#ifdef NDEBUG
constexpr std::int64_t kStepsPerLayout = 50'000;
#else
constexpr std::int64_t kStepsPerLayout = 5'000;
#endif

// Runs `steps` random operations on a cache of `dtype` with small pages (many page reuses) and returns what
// happened; stops at the first disagreement with the model.
Counts run_history(CacheDType dtype, PageLayout layout, std::uint64_t seed, std::int64_t steps) {
  const cache_model::Ropes ropes;
  const PagedKvCacheShape shape{.num_pages = 12,
                                .page_size = 4,
                                .kv_heads = cache_model::kKvHeads,
                                .dtype = dtype,
                                .layout = layout,
                                .k_scale = dtype == CacheDType::F8E4M3 ? 0.03f : 1.0f,
                                .v_scale = dtype == CacheDType::F8E4M3 ? 0.02f : 1.0f,
                                .max_sequences = 3};
  cache_model::Harness harness(ropes, shape);
  std::mt19937_64 g(seed);
  Counts c;
  for (std::int64_t step = 0; step < steps; ++step) {
    const cache_model::Op op = cache_model::random_op(g, harness.model());
    const std::string diff = harness.step(op);
    if (!diff.empty()) {
      ADD_FAILURE() << "seed " << seed << ", step " << step << " (" << op.describe() << "): " << diff;
      return c;
    }
    ++c.steps;
    c.appends += op.kind == cache_model::Op::Append;
    c.shifts += op.kind == cache_model::Op::Shift && op.delta != 0;
    c.rerotations += op.kind == cache_model::Op::Rerotate;
  }
  c.refused = harness.refused();
  return c;
}

class CacheModel : public testing::TestWithParam<CacheDType> {};

TEST_P(CacheModel, HundredThousandStepsAgreeWithTheModel) {
  const CacheDType dtype = GetParam();
  for (const PageLayout layout : {PageLayout::NHD, PageLayout::HND}) {
    const std::uint64_t seed = seed_from_env(1000 + std::uint64_t(dtype) * 10 + std::uint64_t(layout));
    const Counts c = run_history(dtype, layout, seed, kStepsPerLayout);
    std::printf(
        "%s %s: %lld steps agree (seed %llu; tried: %lld appends, %lld shifts, %lld re-rotations; %lld refused in "
        "all)\n",
        std::string(to_string(dtype)).c_str(), layout == PageLayout::NHD ? "NHD" : "HND",
        static_cast<long long>(c.steps), static_cast<unsigned long long>(seed), static_cast<long long>(c.appends),
        static_cast<long long>(c.shifts), static_cast<long long>(c.rerotations), static_cast<long long>(c.refused));
  }
}

// The slow tier: one history of 10^6 steps over bf16 pages (the type whose budget grows fastest per operation).
TEST(CacheModelLong, AMillionStepsAgreeWithTheModel) {
  const std::uint64_t seed = seed_from_env(77);
  const Counts c = run_history(CacheDType::BF16, PageLayout::NHD, seed, 1'000'000);
  std::printf("bf16 NHD: %lld steps agree (seed %llu, %lld refused)\n", static_cast<long long>(c.steps),
              static_cast<unsigned long long>(seed), static_cast<long long>(c.refused));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CacheModel,
                         testing::Values(CacheDType::F32, CacheDType::BF16, CacheDType::F16, CacheDType::F8E4M3),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
