// The prepare path (prepare.hpp) and what a prepared call does afterwards (RotateCall, ropekit/call.hpp).
#include "call/prepare.hpp"

#include <fmt/format.h>

#include <cstring>
#include <new>
#include <type_traits>

#include "call/rope_state.hpp"
#include "rope/backend.hpp"
#include "rope/call_shape.hpp"
#include "rope/views.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

namespace detail {

struct PrepareAccess {
  // RotateCall holds its job as bytes (the type is internal): it must fit, copy as bytes and need no
  // destructor.
  static_assert(sizeof(RotateJob) <= RotateCall::kJobBytes && alignof(RotateJob) <= 8);
  static_assert(std::is_trivially_copyable_v<RotateJob> && std::is_trivially_destructible_v<RotateJob>);

  static RotateJob& job(RotateCall& call) { return *call.job_; }

  static RotateCall resolve(const Rope& rope, const CheckedCall& checked, const PrepareOptions& options) {
    const Rope::State& state = *rope.state_;
    const CallShape& shape = checked.shape();
    const Table* table = nullptr;
    std::shared_ptr<const Table> pin;
    const Table* given = options.table ? options.table.get() : options.borrowed_table;
    const bool on_device = checked.positions_at() == PositionsAt::Device;
    if (shape.tokens > 0) {
      if (given != nullptr) {
        if (!same_bits(given->inv_freq(), state.plan.inv_freq)) {
          throw Error("table was built for other frequencies than this Rope's plan");
        }
        if (!given->is_external() && given->mode() != state.mode) {
          throw Error(fmt::format("table angle mode = {} differs from this Rope's angle mode = {}",
                                  to_string(given->mode()), to_string(state.mode)));
        }
        if (!on_device && shape.max_position >= given->num_positions()) {
          throw Error(fmt::format("position {} is outside the table, which covers [0, {})", shape.max_position,
                                  given->num_positions()));
        }
        table = given;
        pin = options.table;
      } else if (!options.on_the_fly && !on_device) {
        pin = Rope::table_for(state, *rope.cache_, shape.max_position, shape.tokens * state.map.num_axes);
        table = pin.get();
      }
    }
    RotateCall call(checked.args());
    RotateJob& job = PrepareAccess::job(call);
    make_job(job, state.map, state.plan, shape, table, table ? nullptr : &state.angles);
    if (table && table->included_magnitude() != 1.0) {
      // The values carry the magnitude m already (an imported cache): Forward and Backward multiply by
      // 1 (exact), Inverse by 1/m² to leave cos/m.
      const double m = table->included_magnitude();
      job.magnitude = job.args.direction == Direction::Inverse ? static_cast<float>(1.0 / (m * m)) : 1.0f;
    }
    call.rows_ = job.rows();
    call.kernel_ = checked.use() == ViewUse::Read || on_device ? cpu::no_rows_kernel()
                                                               : cpu::select_rotate_kernel(job, shape.bytes_written);
    if (options.keep_plan) {
      call.plan_pin_ = rope.state_;
      if (given == nullptr && !options.on_the_fly && !on_device) call.tables_ = rope.cache_;
    }
    call.table_given_ = given != nullptr;
    call.table_pin_ = std::move(pin);
    return call;
  }

  static void set_positions(RotateCall& call, const Positions& positions) {
    RotateJob& job = PrepareAccess::job(call);
    if (job.map == nullptr) throw Error("set_positions: the call is empty (default-constructed)");
    if (job.tokens == 0) {
      if (positions.count != 0) {
        throw Error(fmt::format("positions.count = {}: the call has no tokens", positions.count));
      }
      job.args.positions = positions;
      return;
    }
    // Every check before the first change: a bad call leaves the job as it was.
    const std::int64_t max_position = check_positions(positions, "positions", job.tokens, job.map->num_axes);
    // The common decode step: the call's table still covers the positions, and then it stays the angle source
    // whichever way the call was prepared (the code below keeps it too). Without copying and releasing the
    // shared_ptr: two atomic read-modify-writes a decode step need not pay (docs/performance-log.md).
    if (const Table* pinned = call.table_pin_.get(); pinned != nullptr && max_position < pinned->num_positions()) {
      take_positions(job.args.positions, positions);
      job.table = pinned;
      job.angles = nullptr;
      return;
    }
    // null: the call has no plan pinned
    const auto* state = static_cast<const Rope::State*>(call.plan_pin_.get());
    std::shared_ptr<const Table> table = call.table_pin_;
    if (call.table_given_) {
      if (!table || max_position >= table->num_positions()) {
        throw Error(fmt::format("position {} is outside the table, which covers [0, {})", max_position,
                                table ? table->num_positions() : 0));
      }
    } else if (call.tables_ != nullptr && (!table || max_position >= table->num_positions())) {
      // Past the call's snapshot: the Rope's table as a prepare at these positions would read it (grown
      // if that is worth it), else angles on the fly.
      table = Rope::table_for(*state, *static_cast<Rope::TableCache*>(call.tables_.get()), max_position,
                              job.tokens * job.map->num_axes);
    }
    const bool covered = table && max_position < table->num_positions();
    if (!covered && state == nullptr) {
      throw Error("set_positions: this call cannot compute angles on the fly (its plan is not pinned)");
    }
    take_positions(job.args.positions, positions);
    // A table the Rope chose carries no magnitude of its own (only imported tables do, and those are
    // given), so job.magnitude holds for either source.
    job.table = covered ? table.get() : nullptr;
    job.angles = covered ? nullptr : &state->angles;
    call.table_pin_ = covered ? std::move(table) : nullptr;
  }

  // check_positions found count and axes as prepared: only the pointer and the index type change. Not a copy of
  // the whole struct: its 16-byte loads would span the caller's narrower stores (a missed store-to-load forward,
  // ≈ 12 cycles on Zen 5, per decode step).
  static void take_positions(Positions& held, const Positions& given) {
    held.data = given.data;
    held.type = given.type;
  }

  // A given table must hold this plan's frequencies bit for bit (−0 and +0 give zeros of different signs).
  // memcmp, not vector's ==: an element loop of 64 comparisons was a tenth of a decode call's preparation.
  static bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
  }
};

RotateCall prepare(const Rope& rope, const RotateArgs& args, const PrepareOptions& options) {
  return PrepareAccess::resolve(
      rope, validate_call(args, rope.pair_map(), options.use, options.names, options.positions), options);
}

RotateCall prepare(const Rope& rope, const CheckedCall& checked, const PrepareOptions& options) {
  return PrepareAccess::resolve(rope, checked, options);
}

}  // namespace detail

namespace {
// The job in a call's bytes: made there by placement new (or copied there as bytes, which a trivially
// copyable type allows).
detail::RotateJob* job_in(std::byte* storage) { return std::launder(reinterpret_cast<detail::RotateJob*>(storage)); }
}  // namespace

RotateCall::RotateCall() noexcept : job_(::new (static_cast<void*>(job_storage_)) detail::RotateJob{}) {}

RotateCall::RotateCall(const RotateArgs& args) noexcept
    : job_(::new (static_cast<void*>(job_storage_)) detail::RotateJob{args}) {}

RotateCall::RotateCall(const RotateCall& other) noexcept
    : rows_(other.rows_),
      kernel_(other.kernel_),
      plan_pin_(other.plan_pin_),
      table_pin_(other.table_pin_),
      table_given_(other.table_given_),
      tables_(other.tables_) {
  std::memcpy(job_storage_, other.job_storage_, sizeof(detail::RotateJob));
  job_ = job_in(job_storage_);
}

RotateCall::RotateCall(RotateCall&& other) noexcept
    : rows_(other.rows_),
      kernel_(other.kernel_),
      plan_pin_(std::move(other.plan_pin_)),
      table_pin_(std::move(other.table_pin_)),
      table_given_(other.table_given_),
      tables_(std::move(other.tables_)) {
  std::memcpy(job_storage_, other.job_storage_, sizeof(detail::RotateJob));
  job_ = job_in(job_storage_);
}

RotateCall& RotateCall::operator=(const RotateCall& other) noexcept {
  if (this != &other) *this = RotateCall(other);
  return *this;
}

RotateCall& RotateCall::operator=(RotateCall&& other) noexcept {
  if (this == &other) return *this;
  std::memcpy(job_storage_, other.job_storage_, sizeof(detail::RotateJob));
  job_ = job_in(job_storage_);
  rows_ = other.rows_;
  kernel_ = other.kernel_;
  plan_pin_ = std::move(other.plan_pin_);
  table_pin_ = std::move(other.table_pin_);
  table_given_ = other.table_given_;
  tables_ = std::move(other.tables_);
  return *this;
}

RotateCall::~RotateCall() = default;

void RotateCall::set_positions(const Positions& positions) { detail::PrepareAccess::set_positions(*this, positions); }

void RotateCall::run() const {
  if (rows() == 0) return;
  cpu::run_rows(kernel_, job(), job().args.threads > 0 ? job().args.threads : default_threads());
}

// Rope's calls: each is the prepare path with its options.
RotateCall Rope::prepare(const RotateArgs& args) const { return detail::prepare(*this, args); }

RotateCall Rope::prepare_on_the_fly(const RotateArgs& args) const {
  return detail::prepare(*this, args, {.on_the_fly = true});
}

RotateCall Rope::prepare(const RotateArgs& args, std::shared_ptr<const Table> table) const {
  if (!table) throw Error("table is null");
  return detail::prepare(*this, args, {.table = std::move(table)});
}

// The apply() calls run at once, so they keep neither the plan (the Rope outlives the call) nor, for a
// table the caller passes, that table alive; an automatic table snapshot stays pinned (another thread's
// call may grow the table meanwhile).
void Rope::apply(const RotateArgs& args) const { detail::prepare(*this, args, {.keep_plan = false}).run(); }

void Rope::apply_on_the_fly(const RotateArgs& args) const {
  detail::prepare(*this, args, {.on_the_fly = true, .keep_plan = false}).run();
}

void Rope::apply(const RotateArgs& args, const std::shared_ptr<const Table>& table) const {
  if (!table) throw Error("table is null");
  detail::prepare(*this, args, {.borrowed_table = table.get(), .keep_plan = false}).run();
}

void Rope::apply(const RotateArgs& args, const Table& table) const {
  detail::prepare(*this, args, {.borrowed_table = &table, .keep_plan = false}).run();
}

}  // namespace ropekit
