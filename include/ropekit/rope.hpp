// ropekit/rope.hpp — a model's rotary embedding, ready to apply: Spec + Plan + angle source.
//
//   ropekit::Rope rope(spec);                       // plan at initialisation, accurate angles
//   rope.apply({.q = ropekit::bshd(q, DType::BF16, 1, S, 32, 128),
//               .k = ropekit::bshd(k, DType::BF16, 1, S, 8, 128),
//               .positions = ropekit::positions(pos)});
//
// Every call is validated once and resolved into a RotateCall (prepare), which then runs with no
// further checks: apply(args) is prepare(args).run(). Angles come from a float32 table that grows on
// demand (shared, immutable snapshots) or, when a dense table would be wasteful — a few tokens at
// huge positions, or beyond kMaxTableBytes — are computed on the fly for the positions at hand. Both
// use one angle function and give bit-identical results. The rotation runs on the SIMD kernels of
// the best target this CPU supports (ropekit/cpu.hpp), bit-identical to the scalar reference
// (src/rope/reference.cpp, the specification). Numerics of every call: ropekit/call.hpp.
//
// A Rope never changes after construction: prepare() and apply() may be called from many threads at
// once. Its plan is the one for the current length it was built with; sequences at other lengths
// (dynamic NTK, LongRoPE) use other Ropes, which ropekit::RopeSet (ropekit/rope_set.hpp) builds once
// per distinct plan and shares between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "ropekit/call.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/spec.hpp"
#include "ropekit/table.hpp"

namespace ropekit {

namespace detail {
struct PrepareAccess;  // the prepare path (src/call/prepare.hpp)
}  // namespace detail

class Rope {
 public:
  // Errors (ropekit::Error): an invalid spec (Spec::validate), a current length outside
  // [1, kPositionLimit).
  explicit Rope(const Spec& spec, AngleMode mode = AngleMode::Accurate,
                std::optional<std::int64_t> current_length = std::nullopt);
  // With an explicit plan, e.g. one whose inv_freq holds a reference's float32 values.
  // Throws ropekit::Error if the plan does not fit the spec.
  Rope(Spec spec, Plan plan, AngleMode mode);
  ~Rope();
  Rope(Rope&&) noexcept;
  Rope& operator=(Rope&&) noexcept;

  const Spec& spec() const { return spec_; }
  const Plan& plan() const;
  const PairMap& pair_map() const;
  AngleMode angle_mode() const;

  // Validates `args` and resolves the call once (ropekit/call.hpp): views and positions checked,
  // angles from the growing table or on the fly (chosen by the call's size and reach), the kernel
  // chosen. Errors: ropekit::Error naming the view, field or position (call.hpp's valid range).
  RotateCall prepare(const RotateArgs& args) const;
  // The same with on-the-fly angles (bit-identical to the table's).
  RotateCall prepare_on_the_fly(const RotateArgs& args) const;
  // The same with angles from exactly `table`, which the call keeps alive. Errors also: a table built
  // for other frequencies or another angle mode, a position outside it.
  RotateCall prepare(const RotateArgs& args, std::shared_ptr<const Table> table) const;

  // prepare(...) then RotateCall::run(): the rotation on the library's threads. (A call that runs at
  // once need not keep the plan alive — the Rope outlives it — so these skip that pin; the numbers
  // are the same.)
  void apply(const RotateArgs& args) const;
  void apply_on_the_fly(const RotateArgs& args) const;
  // The table as prepare() takes it (one spelling of the table argument: docs/conventions.md); apply() reads it
  // during the call and keeps no reference.
  void apply(const RotateArgs& args, const std::shared_ptr<const Table>& table) const;
  [[deprecated("pass the table as prepare() takes it: apply(args, std::shared_ptr<const Table>)")]] void apply(
      const RotateArgs& args, const Table& table) const;

  // The float32 coefficients apply() multiplies by, per token and pair: for token t (of
  // positions.count) and pair j, cos[t·P + j] = float32(cos θ) · float32(m) and sin likewise, rounded
  // to float32 (P = num_pairs(), m = plan().cos_sin_scale, θ the angle of pair j at the position of
  // the stream that drives it — M-RoPE selects per pair). This is Hugging Face's rotary-module output
  // (cos(emb) · attention_scaling) in half-width form. Precision: bit for bit what every call of this
  // Rope rotates with (the table's angle mode and error, ropekit/table.hpp; then one float32
  // multiply). Errors: positions as a call checks them (count, axes, range), spans shorter than
  // positions.count · num_pairs().
  void cos_sin(Positions positions, std::span<float> cos, std::span<float> sin) const;

  // A table covering at least [0, num_positions), grown from the current one if needed (numerics:
  // ropekit/table.hpp). Errors: a table beyond kMaxTableBytes.
  std::shared_ptr<const Table> table(std::int64_t num_positions) const;

 private:
  friend struct detail::PrepareAccess;  // every call is prepared there
  struct State;                         // plan, pair map, angle function: immutable, shared with the calls made from it
  struct TableCache;  // the growing table: shared with the calls that read it (set_positions may grow it)
  // The table a call reaching max_position over `rows` position rows reads (grown if that is worth
  // it), or null when its angles are better computed on the fly.
  std::shared_ptr<const Table> table_for(std::int64_t max_position, std::int64_t rows) const;
  // The two above on a state and its table cache (what a call keeps of its Rope).
  static std::shared_ptr<const Table> grow(const State& state, TableCache& cache, std::int64_t num_positions);
  static std::shared_ptr<const Table> table_for(const State& state, TableCache& cache, std::int64_t max_position,
                                                std::int64_t rows);

  Spec spec_;
  std::shared_ptr<const State> state_;
  std::shared_ptr<TableCache> cache_;
};

}  // namespace ropekit
