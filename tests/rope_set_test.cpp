// RopeSet: one immutable Rope per distinct plan, the plan of each length exactly make_plan's, shared
// safely between threads, bounded in size.
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "expect_error.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

Spec spec_with(Scaling scaling, int d = 64) {
  return {.head_dim = d, .rotary_dim = d, .base = 10000.0, .pairing = Pairing::Half, .scaling = scaling};
}

Spec dynamic_ntk() { return spec_with(scaling::DynamicNtk{.factor = 2.0, .max_position_embeddings = 256}); }

Spec long_rope() {
  std::vector<double> short_factor(32), long_factor(32);
  for (int i = 0; i < 32; ++i) {
    short_factor[i] = 1.0 + 0.05 * i;
    long_factor[i] = 1.0 + 1.5 * i;
  }
  return spec_with(scaling::LongRope{.short_factor = short_factor,
                                     .long_factor = long_factor,
                                     .original_max_position_embeddings = 512,
                                     .factor = 8.0});
}

void expect_same_plan(const Plan& a, const Plan& b) {
  EXPECT_EQ(a.inv_freq, b.inv_freq);
  EXPECT_EQ(a.cos_sin_scale, b.cos_sin_scale);
  EXPECT_EQ(a.softmax_scale_mult, b.softmax_scale_mult);
}

TEST(RopeSet, LengthFreeVariantsShareTheInitialRope) {
  const RopeSet ropes(spec_with(scaling::Yarn{.factor = 4.0, .original_max_position_embeddings = 1024}));
  for (std::int64_t n : {1, 100, 5000, 1 << 30}) EXPECT_EQ(ropes.at(n), ropes.initial());
  EXPECT_EQ(ropes.size(), 0u);
}

TEST(RopeSet, DynamicNtkPlansEachLengthAsMakePlan) {
  const Spec spec = dynamic_ntk();
  const RopeSet ropes(spec);
  // Every length up to max_position_embeddings has the unscaled plan: one Rope.
  const auto short_rope = ropes.at(1);
  for (std::int64_t n : {2, 100, 255, 256}) {
    EXPECT_EQ(ropes.at(n), short_rope) << n;
    expect_same_plan(ropes.at(n)->plan(), make_plan(spec, n));
  }
  // Past it, each length its own plan, built once.
  for (std::int64_t n : {257, 300, 1000, 4096}) {
    const auto rope = ropes.at(n);
    EXPECT_NE(rope, short_rope) << n;
    EXPECT_EQ(ropes.at(n), rope) << n;
    expect_same_plan(rope->plan(), make_plan(spec, n));
    EXPECT_TRUE(needs_rerotation(short_rope->plan(), rope->plan()));
  }
  EXPECT_EQ(ropes.size(), 5u);
}

TEST(RopeSet, LongRopeHasTwoPlans) {
  const Spec spec = long_rope();
  const RopeSet ropes(spec);
  for (std::int64_t n = 1; n < 3000; n += 97) {
    expect_same_plan(ropes.at(n)->plan(), make_plan(spec, n));
  }
  EXPECT_EQ(ropes.size(), 2u);
  EXPECT_EQ(ropes.at(512), ropes.at(1));
  EXPECT_EQ(ropes.at(513), ropes.at(2999));
  EXPECT_NE(ropes.at(512), ropes.at(513));
}

TEST(RopeSet, BucketsPlanAtTheBucketEnd) {
  const Spec spec = dynamic_ntk();
  const RopeSet ropes(spec, AngleMode::Accurate, {.length_bucket = 128});
  EXPECT_EQ(ropes.planned_length(1), 128);
  EXPECT_EQ(ropes.planned_length(256), 256);
  EXPECT_EQ(ropes.planned_length(257), 384);
  EXPECT_EQ(ropes.planned_length(kPositionLimit - 1), kPositionLimit - 1);  // capped, not rounded past
  for (std::int64_t n = 257; n <= 384; ++n) EXPECT_EQ(ropes.at(n), ropes.at(384)) << n;
  expect_same_plan(ropes.at(300)->plan(), make_plan(spec, 384));
  EXPECT_NE(ropes.at(385), ropes.at(384));
  EXPECT_EQ(ropes.at(1), ropes.at(256));  // both buckets end at or below max_position_embeddings
  EXPECT_EQ(ropes.size(), 3u);            // unscaled, 384, 512
}

TEST(RopeSet, DropsTheLeastRecentlyUsedButHeldRopesStayValid) {
  const Spec spec = dynamic_ntk();
  const RopeSet ropes(spec, AngleMode::Accurate, {.max_ropes = 2});
  const auto a = ropes.at(300);
  const auto b = ropes.at(400);
  ropes.at(300);                 // b is now the least recently used
  const auto c = ropes.at(500);  // drops b
  EXPECT_EQ(ropes.size(), 2u);
  EXPECT_EQ(ropes.at(300), a);
  EXPECT_NE(ropes.at(400), b);  // rebuilt: another object with the same plan
  expect_same_plan(ropes.at(400)->plan(), b->plan());
  // The dropped Rope still rotates.
  std::vector<float> q(64, 1.0f);
  const std::vector<std::int64_t> pos = {399};
  b->apply({.q = bshd(q.data(), DType::F32, 1, 1, 1, 64), .positions = positions(pos)});
  EXPECT_NE(q[0], 1.0f);
  (void)c;
}

// Threads at different lengths fetch and run their Ropes at once; every result equals a Rope built
// alone for that length, bit for bit.
TEST(RopeSet, ConcurrentSequencesAtDifferentLengths) {
  const Spec spec = dynamic_ntk();
  const RopeSet ropes(spec, AngleMode::Accurate, {.max_ropes = 4});  // small: eviction under load
  constexpr int kThreads = 4, kRounds = 40, kTokens = 3, kHeads = 2;
  const std::vector<float> input = [] {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(kTokens * kHeads * 64);
    for (float& x : v) x = u(rng);
    return v;
  }();
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const std::int64_t length = 200 + 37 * ((t * kRounds + r) % 11);
        std::vector<std::int64_t> pos(kTokens);
        for (int i = 0; i < kTokens; ++i) pos[i] = length - kTokens + i;
        std::vector<float> got = input, want = input;
        ropes.at(length)->apply(
            {.q = bshd(got.data(), DType::F32, 1, kTokens, kHeads, 64), .positions = positions(pos), .threads = 1});
        Rope(spec, AngleMode::Accurate, length)
            .apply({.q = bshd(want.data(), DType::F32, 1, kTokens, kHeads, 64),
                    .positions = positions(pos),
                    .threads = 1});
        if (got != want) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  EXPECT_LE(ropes.size(), 4u);
}

TEST(RopeSet, BadInput) {
  EXPECT_ERROR(RopeSet(dynamic_ntk(), AngleMode::Accurate, {.length_bucket = 0}), "length_bucket = 0");
  EXPECT_ERROR(RopeSet(dynamic_ntk(), AngleMode::Accurate, {.max_ropes = 0}), "max_ropes = 0");
  EXPECT_ERROR(RopeSet(spec_with(scaling::None{}, 63)), "rotary_dim = 63");
  const RopeSet ropes(dynamic_ntk());
  EXPECT_ERROR(ropes.at(0), "current_length = 0");
  EXPECT_ERROR(ropes.at(-5), "current_length = -5");
  EXPECT_ERROR(ropes.at(kPositionLimit), "current_length = 140737488355328");
  EXPECT_EQ(ropes.size(), 0u);
}

}  // namespace
