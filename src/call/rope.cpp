// Rope: the plan and its angle sources (ropekit/rope.hpp); its calls are made by the prepare path
// (prepare.cpp).
#include "ropekit/rope.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

#include "call/rope_state.hpp"
#include "rope/views.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

namespace {

// Below this many positions a table is always worth building (≈ 1 MiB for 64 pairs).
constexpr std::int64_t kSmallTablePositions = 2048;
// A call may grow the table to at most this many positions per row it rotates — counting the rows
// this Rope computed on the fly since the table last grew — beyond that the rows it needs are
// computed on the fly. A few tokens at huge positions never build a table; a decoder stepping one
// token at a time past the table (position 4000, no prefill before it) builds it after at most
// needed / 64 steps, so the angles it computes on the fly cost at most 1/64 of the table it reads
// from then on (HF and vLLM precompute the whole table up front).
constexpr std::int64_t kGrowthPerRow = 64;

void check_plan_fits(const Spec& spec, const Plan& plan) {
  if (static_cast<int>(plan.inv_freq.size()) != spec.num_pairs()) {
    throw Error(fmt::format("plan.inv_freq has {} entries: the spec has rotary_dim/2 = {} pairs", plan.inv_freq.size(),
                            spec.num_pairs()));
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

Rope::Rope(const Spec& spec, AngleMode mode, std::optional<std::int64_t> current_length)
    : Rope(spec, make_plan(spec, current_length), mode) {}

Rope::Rope(Spec spec, Plan plan, AngleMode mode) : spec_(std::move(spec)), cache_(std::make_shared<TableCache>()) {
  if (mode != AngleMode::Accurate && mode != AngleMode::HfCompat) {
    throw Error(fmt::format("angle mode = {}: not an AngleMode", static_cast<int>(mode)));
  }
  PairMap map = make_pair_map(spec_);  // validates the spec
  check_plan_fits(spec_, plan);
  state_ = std::make_shared<const State>(std::move(plan), std::move(map), mode);
}

Rope::~Rope() = default;
Rope::Rope(Rope&&) noexcept = default;
Rope& Rope::operator=(Rope&&) noexcept = default;

const Plan& Rope::plan() const { return state_->plan; }
const PairMap& Rope::pair_map() const { return state_->map; }
AngleMode Rope::angle_mode() const { return state_->mode; }

std::shared_ptr<const Table> Rope::table(std::int64_t num_positions) const {
  return grow(*state_, *cache_, num_positions);
}

std::shared_ptr<const Table> Rope::table_for(std::int64_t max_position, std::int64_t rows) const {
  return table_for(*state_, *cache_, max_position, rows);
}

std::shared_ptr<const Table> Rope::grow(const State& state, TableCache& cache, std::int64_t num_positions) {
  std::lock_guard lock(cache.mutex);
  const std::shared_ptr<const Table>& current = cache.table;
  if (current && current->num_positions() >= num_positions) return current;
  if (!current) {
    cache.table = std::make_shared<const Table>(state.plan, state.mode, num_positions);
  } else {
    // Grow geometrically so that a sequence of growing calls costs O(final size) in total.
    const std::int64_t row_bytes = std::int64_t(state.plan.inv_freq.size()) * 8;
    const std::int64_t cap = std::max<std::int64_t>(num_positions, kMaxTableBytes / row_bytes);
    const std::int64_t grown = std::min(std::max(num_positions, 2 * current->num_positions()), cap);
    cache.table = std::make_shared<const Table>(*current, grown);
  }
  return cache.table;
}

std::shared_ptr<const Table> Rope::table_for(const State& state, TableCache& cache, std::int64_t max_position,
                                             std::int64_t rows) {
  const std::int64_t needed = max_position + 1;
  std::shared_ptr<const Table> snapshot;
  {
    std::lock_guard lock(cache.mutex);
    snapshot = cache.table;
  }
  const std::int64_t have = snapshot ? snapshot->num_positions() : 0;
  const std::int64_t row_bytes = std::int64_t(state.plan.inv_freq.size()) * 8;
  const bool fits = needed <= kMaxTableBytes / row_bytes;
  const std::int64_t spent = cache.on_the_fly_rows.load(std::memory_order_relaxed);
  const bool worth_it = needed <= std::max({kSmallTablePositions, 2 * have, kGrowthPerRow * (rows + spent)});
  if (needed > have && fits && worth_it) {
    snapshot = grow(state, cache, needed);
    cache.on_the_fly_rows.store(0, std::memory_order_relaxed);
  }
  if (snapshot && needed <= snapshot->num_positions()) return snapshot;
  cache.on_the_fly_rows.fetch_add(rows, std::memory_order_relaxed);
  return nullptr;
}

void Rope::cos_sin(Positions positions, std::span<float> cos, std::span<float> sin) const {
  const State& state = *state_;
  const PairMap& map = state.map;
  const std::int64_t pairs = map.num_pairs();
  const std::int64_t max_position = detail::check_positions(positions, "positions", positions.count, map.num_axes);
  const std::int64_t needed = positions.count * pairs;
  if (static_cast<std::int64_t>(cos.size()) < needed || static_cast<std::int64_t>(sin.size()) < needed) {
    throw Error(fmt::format("cos_sin: output spans hold {} and {} values, {} positions x {} pairs need {}", cos.size(),
                            sin.size(), positions.count, pairs, needed));
  }
  if (positions.count == 0) return;
  // The same source and arithmetic as the scalar reference's coefficients (src/rope/reference.cpp).
  const std::shared_ptr<const Table> table = table_for(max_position, positions.count * map.num_axes);
  const auto magnitude = static_cast<float>(state.plan.cos_sin_scale);
  std::vector<float> rows(static_cast<std::size_t>(2 * map.num_axes * pairs));
  for (std::int64_t t = 0; t < positions.count; ++t) {
    const float* cos_row[3] = {};
    const float* sin_row[3] = {};
    for (int a = 0; a < map.num_axes; ++a) {
      const std::int64_t p = positions.at(a, t);
      if (table) {
        cos_row[a] = table->cos_row(p);
        sin_row[a] = table->sin_row(p);
      } else {
        float* row = rows.data() + 2 * a * pairs;
        state.angles.row(p, row, row + pairs);
        cos_row[a] = row;
        sin_row[a] = row + pairs;
      }
    }
    float* c = cos.data() + t * pairs;
    float* s = sin.data() + t * pairs;
    for (std::int64_t j = 0; j < pairs; ++j) {
      const int a = map.axis[static_cast<std::size_t>(j)];
      c[j] = cos_row[a][j] * magnitude;
      s[j] = sin_row[a][j] * magnitude;
    }
  }
}

}  // namespace ropekit
