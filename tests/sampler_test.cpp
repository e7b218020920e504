// The sampler of the runner's generation loop: greedy, seeded temperature sampling, bad parameters.
#include <gtest/gtest.h>

#include <map>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <numeric>
#include <random>
#include <sstream>

#include "bundled_model.hpp"
#include "expect_error.hpp"
#include "lab/quants.hpp"
#include "model_files.hpp"
#include "model_oracle.hpp"
#include "ropekit/kv_cache.hpp"
#include "ropekit/lab.hpp"
#include "ropekit/model.hpp"
#include "ropekit/tokenizer.hpp"

namespace {

using namespace bundled_model;

TEST(Sampler, GreedyTemperatureAndErrors) {
  ropekit::Sampler greedy(4, 0.0f, 0.9f, 1);
  std::vector<float> logits = {0.1f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(greedy.sample(logits), 1);  // the first maximum
  ropekit::Sampler a(4, 1.0f, 0.9f, 42), b(4, 1.0f, 0.9f, 42);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> x = {0.1f, 1.0f, 0.5f, 0.2f}, y = x;
    EXPECT_EQ(a.sample(x), b.sample(y));
  }
  EXPECT_ERROR(ropekit::Sampler(4, -1.0f, 0.9f, 1), "temperature = -1");
  EXPECT_ERROR(ropekit::Sampler(4, 1.0f, 1.5f, 1), "topp = 1.5");
  EXPECT_ERROR(ropekit::Sampler(4, 1.0f, 0.9f, 0), "seed = 0");
}

}  // namespace
