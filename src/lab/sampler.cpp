// run.c's sampler (ropekit/model.hpp): argmax, multinomial, top-p; xorshift random numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ropekit/error.hpp"
#include "ropekit/model.hpp"

namespace ropekit {

Sampler::Sampler(int vocab_size, float temperature, float topp, std::uint64_t seed)
    : vocab_size_(vocab_size), temperature_(temperature), topp_(topp), state_(seed) {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    throw Error(fmt::format("temperature = {}: must be a finite number ≥ 0", temperature));
  }
  if (!(topp >= 0.0f && topp <= 1.0f)) throw Error(fmt::format("topp = {}: must lie in [0, 1]", topp));
  if (seed == 0) throw Error("seed = 0: must be positive (xorshift stays at 0)");
  if (vocab_size <= 0) throw Error(fmt::format("vocab_size = {}: must be positive", vocab_size));
}

// xorshift* as run.c's random_u32, and its float in [0, 1) from the top 24 bits.
float Sampler::random_f32() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  const auto u32 = static_cast<std::uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  return static_cast<float>(u32 >> 8) / 16777216.0f;
}

int Sampler::sample(std::span<float> logits) {
  if (logits.size() != std::size_t(vocab_size_)) {
    throw Error(fmt::format("Sampler::sample: {} logits for a vocabulary of {}", logits.size(), vocab_size_));
  }
  if (temperature_ == 0.0f) {
    return int(std::max_element(logits.begin(), logits.end()) - logits.begin());  // the first maximum
  }
  for (float& l : logits) l /= temperature_;
  const float max = *std::max_element(logits.begin(), logits.end());
  float sum = 0.0f;
  for (float& l : logits) {
    l = std::exp(l - max);
    sum += l;
  }
  for (float& l : logits) l /= sum;
  const float coin = random_f32();
  if (topp_ <= 0.0f || topp_ >= 1.0f) {
    float cdf = 0.0f;
    for (int i = 0; i < vocab_size_; ++i) {
      cdf += logits[std::size_t(i)];
      if (coin < cdf) return i;
    }
    return vocab_size_ - 1;  // rounding
  }
  // Top-p: tokens below (1 − p)/(n − 1) cannot be in the nucleus and are dropped before sorting.
  const float cutoff = (1.0f - topp_) / float(vocab_size_ - 1);
  candidates_.clear();
  for (int i = 0; i < vocab_size_; ++i) {
    if (logits[std::size_t(i)] >= cutoff) candidates_.emplace_back(logits[std::size_t(i)], i);
  }
  std::sort(candidates_.begin(), candidates_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  float cumulative = 0.0f;
  std::size_t last = candidates_.size() - 1;
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += candidates_[i].first;
    if (cumulative > topp_) {
      last = i;
      break;
    }
  }
  const float r = coin * cumulative;
  float cdf = 0.0f;
  for (std::size_t i = 0; i <= last; ++i) {
    cdf += candidates_[i].first;
    if (r < cdf) return candidates_[i].second;
  }
  return candidates_[last].second;
}

}  // namespace ropekit
