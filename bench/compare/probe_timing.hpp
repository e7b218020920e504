// The timing the probes here share: ns per call of f, the median of 15 batches of `calls` calls each (the median
// rides out this shared machine's spikes; one batch is a few ms).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace probe {

inline double ns_per_call(const std::function<void()>& f, long calls = 20000) {
  std::vector<double> batches;
  for (int r = 0; r < 15; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) f();
    batches.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
                      double(calls));
  }
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

}  // namespace probe
