// RopeSet: one immutable Rope per distinct plan, found by the length a sequence is at
// (see ropekit/rope_set.hpp).
#include "ropekit/rope_set.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ropekit/error.hpp"
#include "ropekit/plan.hpp"

namespace ropekit {

// The Ropes held, least recently used first to go, and a memo from planned length to Rope so that a
// length seen before costs one hash lookup instead of forming its plan again.
struct RopeSet::Entries {
  struct Entry {
    std::shared_ptr<const Rope> rope;
    std::uint64_t last_use = 0;
  };
  // A memo bounded by this many lengths (cleared when full): for dynamic NTK every length up to
  // max_position_embeddings maps to one Rope, so the memo, not the Ropes, would grow with lengths.
  static constexpr std::size_t kMaxMemo = 1 << 16;

  mutable std::mutex mutex;
  std::vector<Entry> ropes;
  std::unordered_map<std::int64_t, std::shared_ptr<const Rope>> memo;
  std::uint64_t clock = 0;

  void touch(const Rope* rope) {
    for (Entry& e : ropes) {
      if (e.rope.get() == rope) e.last_use = ++clock;
    }
  }
};

RopeSet::RopeSet(Spec spec, AngleMode mode, Options options)
    : spec_(std::move(spec)), mode_(mode), options_(options), entries_(std::make_unique<Entries>()) {
  if (options_.length_bucket < 1) {
    throw Error(fmt::format("length_bucket = {}: must be >= 1", options_.length_bucket));
  }
  if (options_.max_ropes == 0) throw Error("max_ropes = 0: must be >= 1");
  initial_ = std::make_shared<const Rope>(spec_, mode_);  // validates spec and mode
  by_length_ = depends_on_length(spec_);
}

RopeSet::~RopeSet() = default;

std::int64_t RopeSet::planned_length(std::int64_t current_length) const {
  if (current_length < 1 || current_length >= kPositionLimit) {
    throw Error(fmt::format("current_length = {}: must be in [1, 2^47)", current_length));
  }
  const std::int64_t b = options_.length_bucket;
  const std::int64_t rounded = current_length % b == 0 ? current_length : (current_length / b + 1) * b;
  return std::min(rounded, kPositionLimit - 1);
}

std::shared_ptr<const Rope> RopeSet::at(std::int64_t current_length) const {
  const std::int64_t length = planned_length(current_length);
  if (!by_length_) return initial_;
  Entries& e = *entries_;
  std::lock_guard lock(e.mutex);
  if (auto it = e.memo.find(length); it != e.memo.end()) {
    e.touch(it->second.get());
    return it->second;
  }
  // Forming a plan is a few microseconds (one pow per pair); building a Rope only adds the pair map,
  // its table grows on first use. Held under the lock so that a plan is built once.
  Plan plan = make_plan(spec_, length);
  std::shared_ptr<const Rope> rope;
  for (const Entries::Entry& held : e.ropes) {
    if (!needs_rerotation(held.rope->plan(), plan)) rope = held.rope;
  }
  if (!rope) {
    if (e.ropes.size() == options_.max_ropes) {
      auto oldest = std::min_element(e.ropes.begin(), e.ropes.end(),
                                     [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
      e.ropes.erase(oldest);
      e.memo.clear();  // it may name the dropped Rope; it refills at one plan per length
    }
    rope = std::make_shared<const Rope>(spec_, std::move(plan), mode_);
    e.ropes.push_back({rope, 0});
  }
  if (e.memo.size() == Entries::kMaxMemo) e.memo.clear();
  e.memo.emplace(length, rope);
  e.touch(rope.get());
  return rope;
}

std::size_t RopeSet::size() const {
  if (!by_length_) return 0;
  std::lock_guard lock(entries_->mutex);
  return entries_->ropes.size();
}

}  // namespace ropekit
