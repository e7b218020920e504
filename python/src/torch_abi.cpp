// python/src/torch_abi.cpp — the extension's side of torch_abi.h: the registry of Rope handles the PyTorch
// operators take, and the rotation they call without the GIL.
#include "torch_abi.h"

#include <pybind11/pybind11.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "rope_object.hpp"
#include "ropekit/error.hpp"

namespace ropekit::python {
namespace {

// Handles are small positive ints, one per Rope object, kept for the life of the process: an operator in a compiled
// graph holds its handle as a constant, so the Rope it names must outlive any graph (a model holds a handful).
struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<PyRope>> ropes;  // handle h is ropes[h - 1]
  std::unordered_map<const PyRope*, std::int64_t> handles;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: operators may run during interpreter shutdown
  return *r;
}

std::shared_ptr<PyRope> lookup(std::int64_t handle) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  if (handle < 1 || handle > static_cast<std::int64_t>(r.ropes.size()))
    throw Error(fmt::format("rope = {}: not a handle from ropekit.ops.handle", handle));
  return r.ropes[static_cast<std::size_t>(handle - 1)];
}

PyObject* error_type = nullptr;

Array array_of(const rk_abi_tensor& t, std::string_view name) {
  Array a;
  a.framework = Framework::Torch;
  a.data = t.data;
  switch (t.dtype) {
    case RK_ABI_F32: a.dtype = DType::F32; break;
    case RK_ABI_BF16: a.dtype = DType::BF16; break;
    case RK_ABI_F16: a.dtype = DType::F16; break;
    default: throw Error(fmt::format("{}: storage code {} is not float32, bfloat16 or float16", name, t.dtype));
  }
  if (t.ndim < 0 || t.ndim > 8) throw Error(fmt::format("{}: {} dimensions; at most 8", name, t.ndim));
  a.ndim = t.ndim;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.strides[i] < 0) throw Error(fmt::format("{}: stride {} of axis {} is negative", name, t.strides[i], i));
    a.shape[static_cast<std::size_t>(i)] = t.shape[i];
    a.strides[static_cast<std::size_t>(i)] = t.strides[i];
  }
  return a;
}

int rotate(const rk_abi_rotate* c, char* error, std::size_t error_size) noexcept {
  try {
    const std::shared_ptr<PyRope> py_rope = lookup(c->rope);
    const std::shared_ptr<const Rope> rope_held = py_rope->rope(parse_angles(c->angles));
    const Rope& rope = *rope_held;
    const bool has_q = c->q.ndim != RK_ABI_ABSENT, has_k = c->k.ndim != RK_ABI_ABSENT;
    Array q, k, q_out, k_out;
    if (has_q) q = array_of(c->q, "q");
    if (has_k) k = array_of(c->k, "k");
    const bool inplace = c->q_out.ndim == RK_ABI_ABSENT && c->k_out.ndim == RK_ABI_ABSENT;
    if (!inplace) {
      if (has_q) q_out = array_of(c->q_out, "q_out");
      if (has_k) k_out = array_of(c->k_out, "k_out");
    }
    RotateArgs args = rotation_views(rope, has_q ? &q : nullptr, has_k ? &k : nullptr, inplace ? nullptr : &q_out,
                                     inplace ? nullptr : &k_out, c->layout);
    args.direction = parse_direction(c->direction);
    args.threads = c->threads;
    const Heads& first = has_q ? args.q : args.k;
    const rk_abi_tensor& p = c->positions;
    const bool has_positions = p.ndim != RK_ABI_ABSENT;
    if (has_positions && p.dtype != RK_ABI_I32 && p.dtype != RK_ABI_I64)
      throw Error(fmt::format("positions: storage code {} is not int32 or int64", p.dtype));
    if (p.ndim < RK_ABI_ABSENT || p.ndim > 8) throw Error(fmt::format("positions: {} dimensions; at most 8", p.ndim));
    // map_positions reads null data as None; positions with no elements describe no tokens, so any pointer will do.
    static constexpr std::int64_t no_positions = 0;
    const void* data = !has_positions ? nullptr : p.data != nullptr ? p.data : &no_positions;
    const PositionsBuffer positions =
        map_positions(data, p.dtype == RK_ABI_I32 ? IndexType::I32 : IndexType::I64,
                      std::vector<std::int64_t>(p.shape, p.shape + std::max(0, p.ndim)), first.batch, first.seq,
                      rope.pair_map().num_axes, "positions", fmt::format("q/k (layout \"{}\")", c->layout));
    args.positions = positions.view;
    rope.prepare(args).run();
    return 0;
  } catch (const Error& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 2;
  }
}

void raise_error(const char* message) {
  const PyGILState_STATE state = PyGILState_Ensure();
  PyErr_SetString(error_type != nullptr ? error_type : PyExc_ValueError, message);
  PyGILState_Release(state);
}

constexpr rk_torch_abi abi{ROPEKIT_TORCH_ABI_VERSION, &rotate, &raise_error};

}  // namespace

void bind_torch_abi(py::module_& m, py::handle error) {
  error_type = error.ptr();
  m.def(
      "_torch_handle",
      [](const std::shared_ptr<PyRope>& rope) {
        Registry& r = registry();
        const std::lock_guard lock(r.mutex);
        const auto [it, added] = r.handles.try_emplace(rope.get(), static_cast<std::int64_t>(r.ropes.size()) + 1);
        if (added) r.ropes.push_back(rope);
        return it->second;
      },
      py::arg("rope"), "The handle ropekit's PyTorch operators take for `rope` (the same Rope, the same handle).");
  m.def(
      "_torch_rope", [](std::int64_t handle) { return lookup(handle); }, py::arg("handle"),
      "The Rope a handle names (ropekit.Error when it names none).");
  m.def(
      "_torch_abi", [] { return reinterpret_cast<std::uintptr_t>(&abi); },
      "The address of the rk_torch_abi table (python/src/torch_abi.h) the operator library binds to.");
  m.attr("_TORCH_ABI_VERSION") = ROPEKIT_TORCH_ABI_VERSION;
}

}  // namespace ropekit::python
