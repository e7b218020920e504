// The runner's forward call: bad tokens, positions, logits and capacities are errors naming the value.
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

TEST(Runner, BadCallsAreErrors) {
  ropekit::LlamaRunner runner(bundled(), {.capacity = 4});
  const ropekit::Rope rope(bundled().rope.layer().spec);
  std::vector<float> logits(512);
  const std::vector<std::int64_t> pos = {0, 1};
  EXPECT_ERROR(runner.forward(rope, std::vector<int>{1, 512}, pos, logits), "tokens[1] = 512");
  EXPECT_ERROR(runner.forward(rope, std::vector<int>{1}, pos, logits), "2 positions for 1 tokens");
  std::vector<float> small(10);
  EXPECT_ERROR(runner.forward(rope, std::vector<int>{1, 2}, pos, small), "logits has 10 floats");
  const std::vector<std::int64_t> five = {0, 1, 2, 3, 4};
  std::vector<float> all(5 * 512);
  EXPECT_ERROR(runner.forward(rope, std::vector<int>{1, 2, 3, 4, 5}, five, all), "overflow the capacity 4");
  EXPECT_ERROR(ropekit::LlamaRunner(bundled(), {.capacity = 0}), "capacity = 0");
  EXPECT_ERROR(ropekit::spec_with_scaling(bundled(), "{\"rope_type\": \"yarn\"}"), "factor");
  EXPECT_ERROR(ropekit::spec_with_scaling(bundled(), "{nope"), "--rope-scaling", "invalid JSON");
}

}  // namespace
