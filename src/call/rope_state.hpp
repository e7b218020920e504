// src/call/rope_state.hpp — what a Rope shares with the calls prepared from it (src/call/rope.cpp
// builds it, src/call/prepare.cpp reads it).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "rope/angles.hpp"
#include "ropekit/rope.hpp"

namespace ropekit {

// Everything a call reads from the Rope besides the table: immutable once built, so that a call can
// keep it alive after the Rope is gone.
struct Rope::State {
  Plan plan;
  PairMap map;
  AngleMode mode;
  detail::AngleEvaluator angles;  // on-the-fly angles of this plan

  State(Plan p, PairMap m, AngleMode a) : plan(std::move(p)), map(std::move(m)), mode(a), angles(plan.inv_freq, a) {}
};

// The growing table: readers copy the shared_ptr under the lock and then read an immutable
// snapshot without it; growth builds a new snapshot from the old one.
struct Rope::TableCache {
  std::mutex mutex;
  std::shared_ptr<const Table> table;
  // Position rows this Rope has computed on the fly since its table last grew (see table_for).
  std::atomic<std::int64_t> on_the_fly_rows{0};
};

}  // namespace ropekit
