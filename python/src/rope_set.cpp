// python/src/rope_set.cpp — ropekit.RopeSet: the C++ RopeSet (ropekit/rope_set.hpp) from Python. Each length's Rope
// is immutable and shared: every call of at() whose length plans to the same C++ Rope returns the same Python Rope
// (so its operator handle, ropekit.ops.handle, stays one), where Rope.set_current_length changes a Rope in place.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "bindings.hpp"
#include "rope_object.hpp"
#include "ropekit/error.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/rope_set.hpp"

namespace py = pybind11;

namespace ropekit::python {
namespace {

class PyRopeSet {
 public:
  PyRopeSet(const PyRope& rope, std::int64_t length_bucket, std::int64_t max_ropes)
      : set_(rope.spec(), AngleMode::Accurate, options(length_bucket, max_ropes)),
        max_ropes_(static_cast<std::size_t>(max_ropes)),
        initial_(std::make_shared<PyRope>(set_.initial(), "RopeSet.initial")) {}

  std::shared_ptr<PyRope> at(std::int64_t length) {
    const std::shared_ptr<const Rope> rope = set_.at(length);
    const std::lock_guard lock(mutex_);
    if (rope == set_.initial()) return initial_;
    if (const auto it = by_rope_.find(rope.get()); it != by_rope_.end()) {
      order_.splice(order_.end(), order_, it->second.second);  // most recently used last
      return it->second.first;
    }
    auto py_rope = std::make_shared<PyRope>(rope, fmt::format("RopeSet.at({})", length));
    // As many Python Ropes as the C++ set keeps Ropes: the least recently used goes first (whoever still holds it
    // keeps it alive; a later at() of its length returns a new Python Rope over the C++ set's Rope then).
    if (by_rope_.size() >= max_ropes_) {
      by_rope_.erase(order_.front());
      order_.pop_front();
    }
    order_.push_back(rope.get());
    by_rope_.emplace(rope.get(), std::make_pair(py_rope, std::prev(order_.end())));
    return py_rope;
  }

  const std::shared_ptr<PyRope>& initial() const { return initial_; }
  std::int64_t planned_length(std::int64_t length) const { return set_.planned_length(length); }
  std::size_t size() const { return set_.size(); }
  const RopeSet& set() const { return set_; }

 private:
  static RopeSetOptions options(std::int64_t length_bucket, std::int64_t max_ropes) {
    if (max_ropes < 1) throw Error(fmt::format("max_ropes = {}: must be >= 1", max_ropes));
    return {.length_bucket = length_bucket, .max_ropes = static_cast<std::size_t>(max_ropes)};
  }

  RopeSet set_;
  std::size_t max_ropes_;
  std::shared_ptr<PyRope> initial_;
  std::mutex mutex_;
  std::list<const Rope*> order_;
  std::map<const Rope*, std::pair<std::shared_ptr<PyRope>, std::list<const Rope*>::iterator>> by_rope_;
};

}  // namespace

void bind_rope_set(py::module_& m) {
  py::class_<PyRopeSet>(m, "RopeSet",
                        "Immutable Ropes for sequences at different current lengths (dynamic NTK, LongRoPE), built "
                        "once per distinct plan and shared: RopeSet(rope).at(length) is the Rope a sequence of that "
                        "length uses (ropekit/rope_set.hpp).")
      .def(py::init<const PyRope&, std::int64_t, std::int64_t>(), py::arg("rope"), py::kw_only(),
           py::arg("length_bucket") = 1, py::arg("max_ropes") = 64,
           "The set of rope's plans: current lengths rounded up to length_bucket, at most max_ropes kept")
      .def("at", &PyRopeSet::at, py::arg("length"),
           "The Rope planned for a sequence of current length `length` (the same object for every length with the "
           "same plan while the set keeps it).")
      .def_property_readonly("initial", &PyRopeSet::initial, "The Rope without a current length (HF's seq_len=None).")
      .def("planned_length", &PyRopeSet::planned_length, py::arg("length"),
           "The length a current length is planned at: rounded up to length_bucket, capped below 2^47")
      .def("__len__", &PyRopeSet::size)
      .def("__repr__", [](const PyRopeSet& s) {
        return fmt::format("ropekit.RopeSet({} plans, length_bucket={})", s.size(), s.set().options().length_bucket);
      });
  m.def(
      "needs_rerotation",
      [](const PyRope& cached, const PyRope& next) { return needs_rerotation(cached.plan(), next.plan()); },
      py::arg("cached"), py::arg("next"),
      "True when keys rotated under `cached`'s plan must be re-rotated to be valid under `next`'s: the angles "
      "(inv_freq) or the cos/sin magnitude differ (ropekit/plan.hpp; Hugging Face does not re-rotate).");
}

}  // namespace ropekit::python
