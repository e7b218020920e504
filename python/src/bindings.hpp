// python/src/bindings.hpp — the parts of the extension bound outside module.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <utility>

namespace ropekit {
class Rope;
namespace cuda {
class DeviceRope;
}  // namespace cuda
}  // namespace ropekit

namespace ropekit::python {

class PyRope;

// Python threads may share every ropekit object (docs/python.md, "Threads"). The ones whose methods change them
// while the GIL is released (a RotateCall, the caches) hold a reader/writer lock: write() runs a change exclusively,
// read() runs alongside other reads (attention readers together; an append waits for them). Either runs `f` without
// the GIL and under the lock, and `f` is C++ alone — inputs are read from Python before, results made into Python
// objects after — so no Python code (a finalizer, an __array__) ever runs holding the lock: no lock order with the
// GIL, no deadlock.
class Guarded {
 public:
  Guarded() = default;
  Guarded(Guarded&&) noexcept {}  // a new object's lock: moved only as it is made, never while in use
  Guarded& operator=(Guarded&&) = delete;

  template <class F>
  auto write(F&& f) const {
    const pybind11::gil_scoped_release release;
    const std::unique_lock lock(mutex_);
    return std::forward<F>(f)();
  }
  template <class F>
  auto read(F&& f) const {
    const pybind11::gil_scoped_release release;
    const std::shared_lock lock(mutex_);
    return std::forward<F>(f)();
  }

 private:
  mutable std::shared_mutex mutex_;
};

// RopeSet: immutable Ropes per current length, shared (rope_set.cpp).
void bind_rope_set(pybind11::module_& m);
// attention, linear_attention (consumers.cpp).
void bind_consumers(pybind11::module_& m);
// KvCache, PagedKvCache (kv_caches.cpp).
void bind_kv_caches(pybind11::module_& m);
// Model, Tokenizer, eval and eval_methods: the model runner and the lab (model.cpp).
void bind_model(pybind11::module_& m);

// Position ids beyond one text stream: packing, context-parallel shards, draft trees (positions.cpp).
void bind_positions(pybind11::module_& m);
// ropekit.rotate_and_cache: the fused rotate-and-append into a paged KV cache (append.cpp).
void bind_append(pybind11::module_& m);

// ropekit.rotate_and_cache's CUDA path (torch.ops.ropekit.rotate_and_cache_ on CUDA tensors): the same checks and
// views as the host's, every tensor on `device` (positions and slot_mapping one per token), then
// ropekit::cuda::append launched on `stream` without the GIL, with the DeviceRope `device_rope` gives (asked for
// after the checks; made from `rope`).
void rotate_and_cache_cuda(const Rope& rope,
                           const std::function<std::shared_ptr<const cuda::DeviceRope>()>& device_rope,
                           pybind11::handle key_cache, pybind11::handle value_cache, pybind11::handle key,
                           pybind11::handle value, pybind11::handle slot_mapping, pybind11::handle query,
                           pybind11::handle positions, std::string_view cache_layout, double k_scale, double v_scale,
                           int device, void* stream);

// The handle registry and the C table the PyTorch operator library calls (torch_abi.h); `error` is ropekit.Error.
void bind_torch_abi(pybind11::module_& m, pybind11::handle error);

// The C++ side of the Python benchmark: the same call as Rope.apply(q, k, positions, layout=...)
// (in place, forward, accurate angles) prepared and run `iterations` times in a C++ loop; returns the
// mean nanoseconds per call. The Python call's time minus this is the binding's overhead.
double time_apply(const PyRope& rope, pybind11::handle q, pybind11::handle k, pybind11::handle positions,
                  std::string_view layout, std::int64_t iterations, int threads);

}  // namespace ropekit::python
