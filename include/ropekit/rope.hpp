// ropekit/rope.hpp — a model's rotary embedding, ready to apply: Spec + Plan + angle source.
//
//   ropekit::Rope rope(spec);                       // plan at initialisation, accurate angles
//   rope.apply({.q = ropekit::bshd(q, DType::BF16, 1, S, 32, 128),
//               .k = ropekit::bshd(k, DType::BF16, 1, S, 8, 128),
//               .positions = ropekit::positions(pos)});
//
// Angles come from a float32 table that grows on demand (shared, immutable snapshots) or, when a
// dense table would be wasteful — a few tokens at huge positions, or beyond kMaxTableBytes — are
// computed on the fly for the positions at hand. Both paths use one angle function and give
// bit-identical results. apply() may be called from many threads at once; set_current_length()
// may not run concurrently with anything else.
//
// This is the scalar reference implementation: fp32 arithmetic, one rounding, clarity first.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ropekit/call.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/spec.hpp"
#include "ropekit/table.hpp"

namespace ropekit {

class Rope {
 public:
  explicit Rope(Spec spec, AngleMode mode = AngleMode::Accurate,
                std::optional<std::int64_t> current_length = std::nullopt);
  // With an explicit plan, e.g. one whose inv_freq holds a reference's float32 values.
  // Throws ropekit::Error if the plan does not fit the spec.
  Rope(Spec spec, Plan plan, AngleMode mode);
  ~Rope();
  Rope(Rope&&) noexcept;
  Rope& operator=(Rope&&) noexcept;

  const Spec& spec() const { return spec_; }
  const Plan& plan() const { return plan_; }
  const PairMap& pair_map() const { return pair_map_; }
  AngleMode angle_mode() const { return mode_; }

  // Re-forms the plan for a new current length (dynamic NTK, LongRoPE). Returns true when the
  // rotation changed, i.e. keys already rotated and cached must be re-rotated (needs_rerotation).
  bool set_current_length(std::int64_t current_length);

  // Rotates per RotateArgs, with angles from the table or on the fly (chosen per call).
  void apply(const RotateArgs& args) const;
  // Forces on-the-fly angles.
  void apply_on_the_fly(const RotateArgs& args) const;
  // Uses exactly `table`; throws if it was built for other frequencies or another angle mode, or
  // if a position is outside it.
  void apply(const RotateArgs& args, const Table& table) const;

  // A table covering at least [0, num_positions), grown from the current one if needed.
  std::shared_ptr<const Table> table(std::int64_t num_positions) const;

  // Grows the table now if apply() would grow it for a call of `tokens` tokens reaching
  // max_position. Callers that split one logical call into many small ones (attention's tiles)
  // call it first, so that every tile finds the table and none of them waits on its growth.
  void prepare(std::int64_t max_position, std::int64_t tokens) const;

 private:
  struct TableCache;
  // The table apply() uses for a call reaching max_position over `rows` position rows (grown if
  // that is worth it), or null when the angles are to be computed on the fly.
  std::shared_ptr<const Table> table_for(std::int64_t max_position, std::int64_t rows) const;
  Spec spec_;
  Plan plan_;
  AngleMode mode_;
  PairMap pair_map_;
  std::unique_ptr<TableCache> cache_;
};

}  // namespace ropekit
