#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <mutex>

#include "cpu/rotate.hpp"
#include "rope/angles.hpp"
#include "rope/call.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"
#include "ropekit/rope.hpp"

namespace ropekit {

// The growing table: readers copy the shared_ptr under the lock and then read an immutable
// snapshot without it; growth builds a new snapshot from the old one.
struct Rope::TableCache {
  std::mutex mutex;
  std::shared_ptr<const Table> table;
  std::unique_ptr<detail::AngleEvaluator> angles;  // on-the-fly angles of the current plan
};

namespace {

// Below this many positions a table is always worth building (≈ 1 MiB for 64 pairs).
constexpr std::int64_t kSmallTablePositions = 2048;
// A call may grow the table to at most this many positions per row it rotates; beyond that the
// rows it needs are computed on the fly (a few tokens at huge positions never build a table).
constexpr std::int64_t kGrowthPerRow = 64;

void run(const RotateArgs& args, const PairMap& map, const Plan& plan,
         const detail::CallShape& shape, const Table* table, const detail::AngleEvaluator* angles) {
  const detail::RotateJob job = detail::make_job(args, map, plan, shape, table, angles);
  cpu::rotate(job, args.threads > 0 ? args.threads : default_threads());
}

void check_plan_fits(const Spec& spec, const Plan& plan) {
  if (static_cast<int>(plan.inv_freq.size()) != spec.num_pairs()) {
    throw Error(fmt::format("plan.inv_freq has {} entries: the spec has rotary_dim/2 = {} pairs",
                            plan.inv_freq.size(), spec.num_pairs()));
  }
  for (std::size_t i = 0; i < plan.inv_freq.size(); ++i) {
    if (!std::isfinite(plan.inv_freq[i]) || plan.inv_freq[i] < 0.0) {
      throw Error(fmt::format("plan.inv_freq[{}] = {}: must be finite and >= 0", i, plan.inv_freq[i]));
    }
  }
  if (!std::isfinite(plan.cos_sin_scale) || plan.cos_sin_scale <= 0.0) {
    throw Error(fmt::format("plan.cos_sin_scale = {}: must be finite and > 0", plan.cos_sin_scale));
  }
}

}  // namespace

Rope::Rope(Spec spec, AngleMode mode, std::optional<std::int64_t> current_length)
    : Rope(spec, make_plan(spec, current_length), mode) {}

Rope::Rope(Spec spec, Plan plan, AngleMode mode)
    : spec_(std::move(spec)), plan_(std::move(plan)), mode_(mode),
      pair_map_(make_pair_map(spec_)), cache_(std::make_unique<TableCache>()) {
  check_plan_fits(spec_, plan_);
  cache_->angles = std::make_unique<detail::AngleEvaluator>(plan_.inv_freq, mode_);
  if (mode_ != AngleMode::Accurate && mode_ != AngleMode::HfCompat) {
    throw Error(fmt::format("angle mode = {}: not an AngleMode", static_cast<int>(mode_)));
  }
}

Rope::~Rope() = default;
Rope::Rope(Rope&&) noexcept = default;
Rope& Rope::operator=(Rope&&) noexcept = default;

bool Rope::set_current_length(std::int64_t current_length) {
  Plan next = make_plan(spec_, current_length);
  const bool changed = needs_rerotation(plan_, next);
  plan_ = std::move(next);
  if (changed) {
    cache_->table.reset();
    cache_->angles = std::make_unique<detail::AngleEvaluator>(plan_.inv_freq, mode_);
  }
  return changed;
}

std::shared_ptr<const Table> Rope::table(std::int64_t num_positions) const {
  std::lock_guard lock(cache_->mutex);
  const std::shared_ptr<const Table>& current = cache_->table;
  if (current && current->num_positions() >= num_positions) return current;
  if (!current) {
    cache_->table = std::make_shared<const Table>(plan_, mode_, num_positions);
  } else {
    // Grow geometrically so that a sequence of growing calls costs O(final size) in total.
    const std::int64_t row_bytes = std::int64_t{spec_.num_pairs()} * 8;
    const std::int64_t cap = std::max<std::int64_t>(num_positions, kMaxTableBytes / row_bytes);
    const std::int64_t grown = std::min(std::max(num_positions, 2 * current->num_positions()), cap);
    cache_->table = std::make_shared<const Table>(*current, grown);
  }
  return cache_->table;
}

std::shared_ptr<const Table> Rope::table_for(std::int64_t max_position, std::int64_t rows) const {
  const std::int64_t needed = max_position + 1;
  std::shared_ptr<const Table> snapshot;
  {
    std::lock_guard lock(cache_->mutex);
    snapshot = cache_->table;
  }
  const std::int64_t have = snapshot ? snapshot->num_positions() : 0;
  const std::int64_t row_bytes = std::int64_t{spec_.num_pairs()} * 8;
  const bool fits = needed <= kMaxTableBytes / row_bytes;
  const bool worth_it = needed <= std::max({kSmallTablePositions, 2 * have, kGrowthPerRow * rows});
  if (needed > have && fits && worth_it) snapshot = table(needed);
  if (snapshot && needed <= snapshot->num_positions()) return snapshot;
  return nullptr;
}

void Rope::prepare(std::int64_t max_position, std::int64_t tokens) const {
  if (max_position < 0 || tokens <= 0) return;
  table_for(max_position, tokens * pair_map_.num_axes);
}

void Rope::apply(const RotateArgs& args) const {
  const detail::CallShape shape = detail::validate_call(args, pair_map_);
  if (shape.tokens == 0) return;
  const std::shared_ptr<const Table> snapshot =
      table_for(shape.max_position, shape.tokens * pair_map_.num_axes);
  if (snapshot) {
    run(args, pair_map_, plan_, shape, snapshot.get(), nullptr);
    return;
  }
  run(args, pair_map_, plan_, shape, nullptr, cache_->angles.get());
}

void Rope::apply_on_the_fly(const RotateArgs& args) const {
  const detail::CallShape shape = detail::validate_call(args, pair_map_);
  if (shape.tokens == 0) return;
  run(args, pair_map_, plan_, shape, nullptr, cache_->angles.get());
}

void Rope::apply(const RotateArgs& args, const Table& table) const {
  if (table.inv_freq() != plan_.inv_freq) {
    throw Error("table was built for other frequencies than this Rope's plan");
  }
  if (table.mode() != mode_) {
    throw Error(fmt::format("table angle mode = {} differs from this Rope's angle mode = {}",
                            to_string(table.mode()), to_string(mode_)));
  }
  const detail::CallShape shape = detail::validate_call(args, pair_map_);
  if (shape.tokens == 0) return;
  if (shape.max_position >= table.num_positions()) {
    throw Error(fmt::format("position {} is outside the table, which covers [0, {})",
                            shape.max_position, table.num_positions()));
  }
  run(args, pair_map_, plan_, shape, &table, nullptr);
}

}  // namespace ropekit
