// tests/fuzz/forward_one_token.hpp — what the model fuzzers do with a model that loads: one token through the runner
// (every accepted config must run), skipped for models too large to run quickly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ropekit/model.hpp"

inline void forward_one_token(const ropekit::LlamaModel& model) {
  if (model.config.vocab_size > 4096 || model.config.dim > 1024) return;
  ropekit::LlamaRunner runner(model, {.capacity = 2, .threads = 1});
  std::vector<float> logits(std::size_t(model.config.vocab_size));
  const int token = 0;
  const std::int64_t position = 0;
  runner.forward(ropekit::Rope(model.rope_layer().spec), std::span(&token, 1), std::span(&position, 1), logits);
}
