// Rope: the plan, its angle sources and the call handle (see ropekit/rope.hpp, ropekit/call.hpp).
#include "ropekit/rope.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

#include "cpu/rotate.hpp"
#include "rope/angles.hpp"
#include "rope/call.hpp"
#include "rope/views.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

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

// A given table must hold this plan's frequencies bit for bit (−0 and +0 give zeros of different signs).
// memcmp, not vector's ==: an element loop of 64 comparisons was a tenth of a decode call's preparation.
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

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

Rope::Rope(Spec spec, AngleMode mode, std::optional<std::int64_t> current_length)
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

RotateCall Rope::resolve(const RotateArgs& args, Angles angles, const Table* given,
                         std::shared_ptr<const Table> given_pin, detail::ViewUse use, const detail::CallNames& names,
                         bool keep_plan) const {
  return resolve_shape(args, detail::validate_call(args, state_->map, use, names), angles, given, std::move(given_pin),
                       use, keep_plan);
}

RotateCall Rope::resolve_shape(const RotateArgs& args, const detail::CallShape& shape, Angles angles,
                               const Table* given, std::shared_ptr<const Table> given_pin, detail::ViewUse use,
                               bool keep_plan) const {
  const State& state = *state_;
  const Table* table = nullptr;
  std::shared_ptr<const Table> pin;
  if (shape.tokens > 0) {
    switch (angles) {
      case Angles::Auto:
        pin = table_for(shape.max_position, shape.tokens * state.map.num_axes);
        table = pin.get();
        break;
      case Angles::OnTheFly: break;
      case Angles::Given:
        if (!same_bits(given->inv_freq(), state.plan.inv_freq)) {
          throw Error("table was built for other frequencies than this Rope's plan");
        }
        if (!given->is_external() && given->mode() != state.mode) {
          throw Error(fmt::format("table angle mode = {} differs from this Rope's angle mode = {}",
                                  to_string(given->mode()), to_string(state.mode)));
        }
        if (shape.max_position >= given->num_positions()) {
          throw Error(fmt::format("position {} is outside the table, which covers [0, {})", shape.max_position,
                                  given->num_positions()));
        }
        table = given;
        pin = std::move(given_pin);
        break;
    }
  }
  RotateCall call(args);
  detail::make_job(call.job_, state.map, state.plan, shape, table, table ? nullptr : &state.angles);
  if (table && table->included_magnitude() != 1.0) {
    // The values carry the magnitude m already (an imported cache): Forward and Backward multiply by
    // 1 (exact), Inverse by 1/m² to leave cos/m.
    const double m = table->included_magnitude();
    call.job_.magnitude = args.direction == Direction::Inverse ? static_cast<float>(1.0 / (m * m)) : 1.0f;
  }
  call.kernel_ =
      use == detail::ViewUse::Read ? cpu::no_rows_kernel() : cpu::select_rotate_kernel(call.job_, shape.bytes_written);
  if (keep_plan) {
    call.plan_pin_ = state_;
    if (angles == Angles::Auto) call.tables_ = cache_;
  }
  call.table_given_ = angles == Angles::Given;
  call.table_pin_ = std::move(pin);
  return call;
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

RotateCall Rope::prepare(const RotateArgs& args) const {
  return resolve(args, Angles::Auto, nullptr, nullptr, detail::ViewUse::Write, {});
}

RotateCall Rope::prepare_on_the_fly(const RotateArgs& args) const {
  return resolve(args, Angles::OnTheFly, nullptr, nullptr, detail::ViewUse::Write, {});
}

RotateCall Rope::prepare(const RotateArgs& args, std::shared_ptr<const Table> table) const {
  if (!table) throw Error("table is null");
  return detail::prepare_call(*this, args, detail::ViewUse::Write, {}, std::move(table));
}

// The apply() calls run at once, so they keep neither the plan (the Rope outlives the call) nor, for a table the caller
// passes, that table alive; an automatic table snapshot stays pinned (another thread's call may grow the table
// meanwhile).
void Rope::apply(const RotateArgs& args) const {
  resolve(args, Angles::Auto, nullptr, nullptr, detail::ViewUse::Write, {}, false).run();
}

void Rope::apply_on_the_fly(const RotateArgs& args) const {
  resolve(args, Angles::OnTheFly, nullptr, nullptr, detail::ViewUse::Write, {}, false).run();
}

void Rope::apply(const RotateArgs& args, const Table& table) const {
  resolve(args, Angles::Given, &table, nullptr, detail::ViewUse::Write, {}, false).run();
}

void RotateCall::set_positions(Positions positions) {
  if (job_.map == nullptr) throw Error("set_positions: the call is empty (default-constructed)");
  if (job_.tokens == 0) {
    if (positions.count != 0) {
      throw Error(fmt::format("positions.count = {}: the call has no tokens", positions.count));
    }
    job_.args.positions = positions;
    return;
  }
  // Every check before the first change: a bad call leaves the job as it was.
  const std::int64_t max_position = detail::check_positions(positions, "positions", job_.tokens, job_.map->num_axes);
  const auto* state = static_cast<const Rope::State*>(plan_pin_.get());  // null: the call has no plan pinned
  std::shared_ptr<const Table> table = table_pin_;
  if (table_given_) {
    if (!table || max_position >= table->num_positions()) {
      throw Error(fmt::format("position {} is outside the table, which covers [0, {})", max_position,
                              table ? table->num_positions() : 0));
    }
  } else if (tables_ != nullptr && (!table || max_position >= table->num_positions())) {
    // Past the call's snapshot: the Rope's table as a prepare at these positions would read it (grown
    // if that is worth it), else angles on the fly.
    table = Rope::table_for(*state, *static_cast<Rope::TableCache*>(tables_.get()), max_position,
                            job_.tokens * job_.map->num_axes);
  }
  const bool covered = table && max_position < table->num_positions();
  if (!covered && state == nullptr) {
    throw Error("set_positions: this call cannot compute angles on the fly (its plan is not pinned)");
  }
  job_.args.positions = positions;
  // A table the Rope chose carries no magnitude of its own (only imported tables do, and those are
  // given), so job_.magnitude holds for either source.
  job_.table = covered ? table.get() : nullptr;
  job_.angles = covered ? nullptr : &state->angles;
  table_pin_ = covered ? std::move(table) : nullptr;
}

void RotateCall::run() const {
  if (rows() == 0) return;
  cpu::run_rows(kernel_, job_, job_.args.threads > 0 ? job_.args.threads : default_threads());
}

namespace detail {

RotateCall prepare_call(const Rope& rope, const RotateArgs& args, ViewUse use, const CallNames& names,
                        std::shared_ptr<const Table> table) {
  if (!table) return rope.resolve(args, Rope::Angles::Auto, nullptr, nullptr, use, names);
  const Table* given = table.get();
  return rope.resolve(args, Rope::Angles::Given, given, std::move(table), use, names);
}

RotateCall prepare_checked_call(const Rope& rope, const RotateArgs& args, const CallShape& shape,
                                std::shared_ptr<const Table> table, bool keep_plan) {
  if (!table) return rope.resolve_shape(args, shape, Rope::Angles::Auto, nullptr, nullptr, ViewUse::Read, keep_plan);
  const Table* given = table.get();
  return rope.resolve_shape(args, shape, Rope::Angles::Given, given, std::move(table), ViewUse::Read, keep_plan);
}

}  // namespace detail
}  // namespace ropekit
