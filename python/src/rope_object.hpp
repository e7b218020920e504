// python/src/rope_object.hpp — the Python Rope: a Spec, its current length and the C++ Ropes for each
// angle mode (the HfCompat one is built on first use).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "ropekit/model_positions.hpp"
#include "ropekit/rope.hpp"

namespace ropekit::python {

AngleMode parse_angles(std::string_view text);
Direction parse_direction(std::string_view text);

// An engine's cos/sin cache imported (Rope.import_cos_sin_cache) for the table= arguments of Rope.apply,
// attention and the caches: its values, copied once.
struct PyCosSinTable {
  std::shared_ptr<const Table> table;
};
inline std::shared_ptr<const Table> table_of(const PyCosSinTable* t) { return t ? t->table : nullptr; }

class PyRope {
 public:
  PyRope(Spec spec, std::optional<std::int64_t> current_length, std::string origin);
  // A Python Rope over an existing C++ one (a RopeSet's: the same immutable Rope every sequence at a length shares).
  PyRope(std::shared_ptr<const Rope> accurate, std::string origin);

  const Spec& spec() const { return accurate_->spec(); }
  const Plan& plan() const { return accurate_->plan(); }
  std::optional<std::int64_t> current_length() const { return plan().current_length; }
  const std::string& origin() const { return origin_; }
  // The Rope forming angles in `mode` (its plan is always the same as the accurate one's). Callers
  // that release the GIL hold the pointer: set_current_length replaces the Ropes meanwhile.
  std::shared_ptr<const Rope> rope(AngleMode mode) const;
  // Replaces the Ropes by ones planned for length n (a Rope never changes); true when keys rotated
  // under the old plan need re-rotation. Refused for a RopeSet's Rope, which every sequence at its lengths shares.
  bool set_current_length(std::int64_t n);

  // What the per-layer plan says besides the Spec, when the Rope was read from a model.
  std::optional<LayerPositions> layer;

 private:
  std::string origin_;
  bool shared_ = false;  // a RopeSet's: its plan never changes
  // The PyTorch operators read the Ropes without the GIL (torch_abi.cpp): the lazily built hf_ and a
  // set_current_length on another thread are ordered by this lock.
  mutable std::mutex mutex_;
  std::shared_ptr<const Rope> accurate_;
  mutable std::shared_ptr<const Rope> hf_;
};

}  // namespace ropekit::python
