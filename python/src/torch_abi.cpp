// python/src/torch_abi.cpp — the extension's side of torch_abi.h: the registry of Rope handles the PyTorch
// operators take, and the rotation they call without the GIL.
#include "torch_abi.h"

#include <pybind11/pybind11.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "rope_object.hpp"
#include "ropekit/cuda.hpp"
#include "ropekit/error.hpp"
#include "ropekit/ropekit.h"

// The operator ABI's storage codes are the C API's (one numbering across the fronts).
static_assert(int{RK_ABI_F32} == int{RK_F32} && int{RK_ABI_BF16} == int{RK_BF16} && int{RK_ABI_F16} == int{RK_F16});
static_assert(int{RK_ABI_I32} == int{RK_I32} && int{RK_ABI_I64} == int{RK_I64});

namespace ropekit::python {
namespace {

// The device copy of an imported table (an engine's cos/sin cache: rotate_with_cache_) on one CUDA device.
struct TableDeviceRope {
  const Table* table;
  int device;
  std::shared_ptr<const cuda::DeviceRope> gpu;  // holds the table too
};

// Handles are positive ints, one per live Rope object, never reused: an operator in a compiled graph holds its handle
// as a constant. The registry holds each Rope weakly — whoever made the handle (a module, ropekit.torch's
// RotaryEmbedding) keeps the Rope alive — so a process that makes and drops Ropes does not grow: the entries (and
// device copies) of freed Ropes are swept as the registry grows, and a handle whose Rope was freed is refused by name,
// never another Rope's.
struct Registry {
  std::mutex mutex;
  std::int64_t next = 1;
  std::unordered_map<std::int64_t, std::weak_ptr<PyRope>> ropes;
  std::unordered_map<const PyRope*, std::int64_t> handles;  // a live Rope's handle (an address may be reused: checked)
  // The device copies of a handle's angles, per (handle, angle mode, CUDA device), made on first use.
  std::map<std::tuple<std::int64_t, int, int>, std::shared_ptr<const cuda::DeviceRope>> device_ropes;
  std::vector<TableDeviceRope> table_ropes;  // table_device_rope
  std::size_t sweep_at = 64;                 // entries at which freed Ropes are swept next

  // Drops the entries of freed Ropes; the next sweep when the registry has doubled (amortised O(1) per handle).
  void sweep() {
    for (auto it = ropes.begin(); it != ropes.end();) {
      if (!it->second.expired()) {
        ++it;
        continue;
      }
      const std::int64_t h = it->first;
      std::erase_if(handles, [h](const auto& e) { return e.second == h; });
      std::erase_if(device_ropes, [h](const auto& e) { return std::get<0>(e.first) == h; });
      it = ropes.erase(it);
    }
    sweep_at = std::max<std::size_t>(64, 2 * ropes.size());
  }
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: operators may run during interpreter shutdown
  return *r;
}

std::shared_ptr<PyRope> lookup(std::int64_t handle) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  const auto it = r.ropes.find(handle);
  if (it == r.ropes.end()) {
    throw Error(fmt::format("rope = {}: not a handle from ropekit.ops.handle, or its Rope was freed", handle));
  }
  std::shared_ptr<PyRope> rope = it->second.lock();
  if (!rope) throw Error(fmt::format("rope = {}: its Rope was freed (keep the Rope while its handle is used)", handle));
  return rope;
}

// How many Ropes the registry holds entries for (tests: freed ones are swept).
std::size_t registered() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  return r.ropes.size();
}

PyObject* error_type = nullptr;

// Positions a device copy's table holds. Accurate angles: rows for the common positions, the same bits on the fly
// past them (DeviceRope). HfCompat ("hf") angles are libm's, which a GPU does not reproduce, so their table must cover
// every position used: a position past it is reported by cuda_check (2 × 32768 × pairs float32: 16 MiB at 64 pairs).
constexpr std::int64_t kAccurateDeviceTable = 8192;
constexpr std::int64_t kHfDeviceTable = 32768;

std::shared_ptr<const cuda::DeviceRope> device_rope(std::int64_t handle, AngleMode mode, const Rope& rope, int device) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  auto& slot = r.device_ropes[{handle, static_cast<int>(mode), device}];
  if (!slot) {
    slot = std::make_shared<const cuda::DeviceRope>(
        rope, device, mode == AngleMode::HfCompat ? kHfDeviceTable : kAccurateDeviceTable);
  }
  return slot;
}

// The newest kept per process: ropekit.ops keeps as many imported tables; an evicted one is uploaded again if used.
constexpr std::size_t kTableDeviceRopes = 8;

std::shared_ptr<const cuda::DeviceRope> table_device_rope(const std::shared_ptr<const Table>& table, const Rope& rope,
                                                          int device) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  for (const TableDeviceRope& t : r.table_ropes)
    if (t.table == table.get() && t.device == device) return t.gpu;
  auto gpu = std::make_shared<const cuda::DeviceRope>(rope, device, table);
  if (r.table_ropes.size() == kTableDeviceRopes) r.table_ropes.erase(r.table_ropes.begin());
  r.table_ropes.push_back({table.get(), device, gpu});
  return gpu;
}

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

// A rotation's views from the ABI's descriptions, and its positions' description: everything the operators check
// before they read or write memory (rotate_with for a call, check_rotation for a fake one).
struct RotationViews {
  std::shared_ptr<const Rope> rope;
  RotateArgs args;
  bool has_q = false, has_positions = false;
  IndexType type = IndexType::I64;
  std::vector<std::int64_t> shape;  // the positions'
  std::string for_what;
  const Heads& first() const { return has_q ? args.q : args.k; }
};

RotationViews rotation_views_of(const rk_abi_rotate& c) {
  RotationViews r;
  const std::shared_ptr<PyRope> py_rope = lookup(c.rope);
  r.rope = py_rope->rope(parse_angles(c.angles));
  const bool has_q = c.q.ndim != RK_ABI_ABSENT, has_k = c.k.ndim != RK_ABI_ABSENT;
  r.has_q = has_q;
  Array q, k, q_out, k_out;
  if (has_q) q = array_of(c.q, "q");
  if (has_k) k = array_of(c.k, "k");
  // The operators' rule (their outputs are one list of q's storage type): q and k in one storage type.
  if (has_q && has_k && k.dtype != q.dtype) {
    throw Error(fmt::format("k: dtype {} differs from q's {}: the operators take q and k in one storage type",
                            to_string(k.dtype), to_string(q.dtype)));
  }
  const bool inplace = c.q_out.ndim == RK_ABI_ABSENT && c.k_out.ndim == RK_ABI_ABSENT;
  if (!inplace) {
    if (has_q) q_out = array_of(c.q_out, "q_out");
    if (has_k) k_out = array_of(c.k_out, "k_out");
  }
  r.args = rotation_views(*r.rope, has_q ? &q : nullptr, has_k ? &k : nullptr, inplace ? nullptr : &q_out,
                          inplace ? nullptr : &k_out, c.layout);
  r.args.direction = parse_direction(c.direction);
  r.args.threads = c.threads;
  const rk_abi_tensor& p = c.positions;
  r.has_positions = p.ndim != RK_ABI_ABSENT;
  if (r.has_positions && p.dtype != RK_ABI_I32 && p.dtype != RK_ABI_I64)
    throw Error(fmt::format("positions: storage code {} is not int32 or int64", p.dtype));
  if (p.ndim < RK_ABI_ABSENT || p.ndim > 8) throw Error(fmt::format("positions: {} dimensions; at most 8", p.ndim));
  r.type = p.dtype == RK_ABI_I32 ? IndexType::I32 : IndexType::I64;
  r.shape.assign(p.shape, p.shape + std::max(0, p.ndim));
  r.for_what = fmt::format("q/k (layout \"{}\")", c.layout);
  return r;
}

// Device memory: the host reads none of it. The positions must give one position per token (a broadcast or None
// would need a device copy: the caller's to make).
Positions device_positions_of(const RotationViews& r, int axes) {
  if (!r.has_positions) {
    throw Error(fmt::format("positions: None; for CUDA tensors give one position per token ({} on the device)",
                            r.first().batch > 1 ? "shape (batch, seq)" : "shape (seq,)"));
  }
  Positions positions = device_positions_shape(r.shape, r.first().batch, r.first().seq, axes, "positions", r.for_what);
  positions.type = r.type;
  return positions;
}

// The rotation the operators call: with the rope's own angles, or (table given) an imported table's.
int rotate_with(const rk_abi_rotate* c, const std::shared_ptr<const Table>& table, char* error,
                std::size_t error_size) noexcept {
  try {
    RotationViews r = rotation_views_of(*c);
    const Rope& rope = *r.rope;
    RotateArgs& args = r.args;
    const rk_abi_tensor& p = c->positions;
    if (c->cuda_device >= 0) {
      args.positions = device_positions_of(r, rope.pair_map().num_axes);
      args.positions.data = p.data;
      const AngleMode mode = parse_angles(c->angles);
      const std::shared_ptr<const cuda::DeviceRope> gpu =
          table ? table_device_rope(table, rope, c->cuda_device) : device_rope(c->rope, mode, rope, c->cuda_device);
      gpu->rotate(args, {.device = c->cuda_device, .stream = c->stream});
      return 0;
    }
    // map_positions reads null data as None; positions with no elements describe no tokens, so any pointer will do.
    static constexpr std::int64_t no_positions = 0;
    const void* data = !r.has_positions ? nullptr : p.data != nullptr ? p.data : &no_positions;
    const PositionsBuffer positions = map_positions(data, r.type, r.shape, r.first().batch, r.first().seq,
                                                    rope.pair_map().num_axes, "positions", r.for_what);
    args.positions = positions.view;
    (table ? rope.prepare(args, table) : rope.prepare(args)).run();
    return 0;
  } catch (const Error& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 2;
  }
}

// A call of the operators on tensors without memory (their fakes under torch.compile: FakeTensor, meta): the checks
// rotate_with makes, by the same functions, up to a prepared call that never runs. The positions' values are
// unknown, so their shape is mapped over zeros; a position out of range is the real call's error.
void check_rotation(const rk_abi_rotate& c) {
  RotationViews r = rotation_views_of(c);
  const int axes = r.rope->pair_map().num_axes;
  if (c.cuda_device >= 0) device_positions_of(r, axes);
  std::int64_t count = 1;
  for (const std::int64_t n : r.shape) count *= n;
  const std::vector<std::int64_t> zeros(static_cast<std::size_t>(std::max<std::int64_t>(count, 1)), 0);
  const PositionsBuffer positions = map_positions(r.has_positions ? zeros.data() : nullptr, IndexType::I64, r.shape,
                                                  r.first().batch, r.first().seq, axes, "positions", r.for_what);
  r.args.positions = positions.view;
  static_cast<void>(r.rope->prepare(r.args));
}

int rotate(const rk_abi_rotate* c, char* error, std::size_t error_size) noexcept {
  return rotate_with(c, nullptr, error, error_size);
}

void raise_error(const char* message) {
  const PyGILState_STATE state = PyGILState_Ensure();
  PyErr_SetString(error_type != nullptr ? error_type : PyExc_ValueError, message);
  PyGILState_Release(state);
}

constexpr rk_torch_abi abi{ROPEKIT_TORCH_ABI_VERSION, &rotate, &raise_error};

// A torch tensor (or None: absent) as the ABI describes it, read through its Python attributes (the extension does
// not link PyTorch).
// Operand `index`'s stand-in address for a tensor without memory: aligned, and 2^44 bytes from the next one's, so no
// two operands' views overlap.
void* stand_in_address(int index) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(index) << 44); }

// Shape only (a fake tensor has no memory): the data pointer is a distinct, aligned address per operand, compared by
// the checks and never dereferenced (check_rotation runs no kernel); null for a tensor without elements, as a real
// one may have.
rk_abi_tensor describe_tensor(py::handle t, std::string_view name, int fake_address = 0) {
  rk_abi_tensor d{};
  if (t.is_none()) {
    d.ndim = RK_ABI_ABSENT;
    return d;
  }
  // By role: the ABI's storage and index codes are two numberings (C's rk_dtype and rk_index_type), so a tensor's
  // code says its type only once its role is known.
  const std::string dtype = py::str(t.attr("dtype")).cast<std::string>();
  const bool index = name == "positions";
  if (index && dtype == "torch.int32") {
    d.dtype = RK_ABI_I32;
  } else if (index && dtype == "torch.int64") {
    d.dtype = RK_ABI_I64;
  } else if (index) {
    throw Error(fmt::format("{}: dtype {}: must be int32 or int64", name, dtype));
  } else if (dtype == "torch.float32") {
    d.dtype = RK_ABI_F32;
  } else if (dtype == "torch.bfloat16") {
    d.dtype = RK_ABI_BF16;
  } else if (dtype == "torch.float16") {
    d.dtype = RK_ABI_F16;
  } else {
    throw Error(
        fmt::format("{}: dtype {} is not supported (torch.float32, torch.float16, torch.bfloat16)", name, dtype));
  }
  const auto shape = t.attr("shape").cast<std::vector<std::int64_t>>();
  const auto strides = t.attr("stride")().cast<std::vector<std::int64_t>>();
  if (shape.size() > 8) throw Error(fmt::format("{}: {} dimensions; at most 8", name, shape.size()));
  d.ndim = static_cast<std::int32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    d.shape[i] = shape[i];
    d.strides[i] = strides[i];
  }
  if (fake_address > 0) {
    const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
    d.data = empty ? nullptr : stand_in_address(fake_address);
  } else {
    d.data = reinterpret_cast<void*>(t.attr("data_ptr")().cast<std::uintptr_t>());
  }
  return d;
}

// A rotation of CUDA tensors as the bindings below describe it.
struct DeviceRotation {
  std::int64_t rope;
  const char *layout, *direction, *angles;
  rk_abi_tensor q, k, q_out, k_out, positions;
  int device;
  std::uintptr_t stream;
};

// Runs it without the GIL (rotate_with: the rope's own angles, or `table`'s); ropekit.Error for its refusals.
void run_device_rotation(const DeviceRotation& d, const std::shared_ptr<const Table>& table) {
  rk_abi_rotate call{};
  call.rope = d.rope;
  call.layout = d.layout;
  call.direction = d.direction;
  call.angles = d.angles;
  call.q = d.q;
  call.k = d.k;
  call.q_out = d.q_out;
  call.k_out = d.k_out;
  call.positions = d.positions;
  call.cuda_device = d.device;
  call.stream = reinterpret_cast<void*>(d.stream);
  char error[1024];
  int rc;
  {
    const py::gil_scoped_release release;
    rc = rotate_with(&call, table, error, sizeof error);
  }
  if (rc == 1) throw Error(error);
  if (rc != 0) throw std::runtime_error(error);
}

}  // namespace

void bind_torch_abi(py::module_& m, py::handle error) {
  error_type = error.ptr();
  m.def(
      "_torch_handle",
      [](const std::shared_ptr<PyRope>& rope) {
        Registry& r = registry();
        const std::lock_guard lock(r.mutex);
        if (const auto it = r.handles.find(rope.get()); it != r.handles.end()) {
          if (r.ropes.at(it->second).lock() == rope) return it->second;
          r.handles.erase(it);  // a freed Rope's address, reused
        }
        if (r.ropes.size() >= r.sweep_at) r.sweep();
        const std::int64_t h = r.next++;
        r.ropes.emplace(h, rope);
        r.handles.emplace(rope.get(), h);
        return h;
      },
      py::arg("rope"), "The handle ropekit's PyTorch operators take for `rope` (the same Rope, the same handle).");
  m.def(
      "_torch_rope", [](std::int64_t handle) { return lookup(handle); }, py::arg("handle"),
      "The Rope a handle names (ropekit.Error when it names none).");
  m.def("_torch_registered", &registered, "How many Ropes the handle registry holds entries for (freed ones swept).");
  m.def(
      "_torch_abi", [] { return reinterpret_cast<std::uintptr_t>(&abi); },
      "The address of the rk_torch_abi table (python/src/torch_abi.h) the operator library binds to.");
  m.attr("_TORCH_ABI_VERSION") = ROPEKIT_TORCH_ABI_VERSION;
  // The kernel of ropekit::rotate / rotate_ as the Python registration calls it (ropekit.ops): the C++ operator
  // library's call through the same ABI path (rotate_with), so both registrations and the fakes check with the same
  // functions and words. device -1: host tensors (stream unused); else every tensor in the memory of `device`, the
  // rotation launched asynchronously on `stream` (torch's current stream).
  const auto rotate_tensors = [](std::int64_t rope, py::handle q, py::handle k, py::handle q_out, py::handle k_out,
                                 py::handle positions, const std::string& layout, const std::string& direction,
                                 const std::string& angles, int device, std::uintptr_t stream) {
    run_device_rotation({rope, layout.c_str(), direction.c_str(), angles.c_str(), describe_tensor(q, "q"),
                         describe_tensor(k, "k"), describe_tensor(q_out, "q_out"), describe_tensor(k_out, "k_out"),
                         describe_tensor(positions, "positions"), device, stream},
                        nullptr);
  };
  m.def("_rotate_torch", rotate_tensors, py::arg("rope"), py::arg("q"), py::arg("k"), py::arg("q_out"),
        py::arg("k_out"), py::arg("positions"), py::arg("layout"), py::arg("direction"), py::arg("angles"),
        py::arg("device") = -1, py::arg("stream") = 0);
  m.def("_rotate_cuda", rotate_tensors, py::arg("rope"), py::arg("q"), py::arg("k"), py::arg("q_out"), py::arg("k_out"),
        py::arg("positions"), py::arg("layout"), py::arg("direction"), py::arg("angles"), py::arg("device"),
        py::arg("stream"));
  // The CUDA kernel of ropekit::rotate_with_cache_ (registered from ropekit.ops): rotate_ with the angles of exactly
  // `table` (the engine's cache, imported once per tensor version by ropekit.ops), uploaded once per device.
  m.def(
      "_rotate_cuda_table",
      [](std::int64_t rope, const PyCosSinTable& table, py::handle q, py::handle k, py::handle positions,
         const std::string& layout, int device, std::uintptr_t stream, py::handle q_out, py::handle k_out,
         const std::string& direction) {
        run_device_rotation({rope, layout.c_str(), direction.c_str(), "accurate", describe_tensor(q, "q"),
                             describe_tensor(k, "k"), describe_tensor(q_out, "q_out"), describe_tensor(k_out, "k_out"),
                             describe_tensor(positions, "positions"), device, stream},
                            table.table);
      },
      py::arg("rope"), py::arg("table"), py::arg("q"), py::arg("k"), py::arg("positions"), py::arg("layout"),
      py::arg("device"), py::arg("stream"), py::arg("q_out") = py::none(), py::arg("k_out") = py::none(),
      py::arg("direction") = "forward");
  // The CUDA kernel of ropekit::rotate_and_cache_ (registered from ropekit.ops for the CUDA dispatch key): the fused
  // rotate-and-append of ropekit.rotate_and_cache on CUDA tensors of `device`, launched on `stream`.
  m.def(
      "_rotate_and_cache_cuda",
      [](std::int64_t rope, py::handle key_cache, py::handle value_cache, py::handle key, py::handle value,
         py::handle slot_mapping, py::handle query, py::handle positions, const std::string& cache_layout,
         double k_scale, double v_scale, const std::string& angles, int device, std::uintptr_t stream) {
        const AngleMode mode = parse_angles(angles);
        const std::shared_ptr<const Rope> held = lookup(rope)->rope(mode);
        rotate_and_cache_cuda(
            *held, [&] { return device_rope(rope, mode, *held, device); }, key_cache, value_cache, key, value,
            slot_mapping, query, positions, cache_layout, k_scale, v_scale, device, reinterpret_cast<void*>(stream));
      },
      py::arg("rope"), py::arg("key_cache"), py::arg("value_cache"), py::arg("key"), py::arg("value"),
      py::arg("slot_mapping"), py::arg("query"), py::arg("positions"), py::arg("cache_layout"), py::arg("k_scale"),
      py::arg("v_scale"), py::arg("angles"), py::arg("device"), py::arg("stream"));
  m.def(
      "_cuda_check",
      [](int device, std::uintptr_t stream) {
        std::vector<std::shared_ptr<const cuda::DeviceRope>> ropes;
        {
          Registry& r = registry();
          const std::lock_guard lock(r.mutex);
          for (const auto& [key, gpu] : r.device_ropes)
            if (std::get<2>(key) == device) ropes.push_back(gpu);
          for (const TableDeviceRope& t : r.table_ropes)
            if (t.device == device) ropes.push_back(t.gpu);
        }
        const py::gil_scoped_release release;
        for (const auto& gpu : ropes) gpu->check({.device = device, .stream = reinterpret_cast<void*>(stream)});
      },
      py::arg("device"), py::arg("stream"),
      "Waits for `stream` and raises ropekit.Error naming the first token whose position a CUDA rotation on `device` "
      "could not rotate since the last check.");
  m.def(
      "_torch_check_rotation",
      [](py::handle q, py::handle k, py::handle positions, std::int64_t rope, const std::string& layout,
         const std::string& direction, const std::string& angles, bool inplace) {
        rk_abi_rotate c{};
        c.rope = rope;
        c.layout = layout.c_str();
        c.direction = direction.c_str();
        c.angles = angles.c_str();
        c.q = describe_tensor(q, "q", 1);
        c.k = describe_tensor(k, "k", 2);
        c.positions = describe_tensor(positions, "positions", 3);
        c.q_out.ndim = c.k_out.ndim = RK_ABI_ABSENT;
        // Out of place: the outputs the operator allocates, contiguous tensors shaped as q and k.
        const auto contiguous = [](rk_abi_tensor t, int fake_address) {
          if (t.ndim == RK_ABI_ABSENT) return t;
          std::int64_t stride = 1;
          for (int i = t.ndim - 1; i >= 0; --i) {
            t.strides[i] = stride;
            stride *= t.shape[i];
          }
          if (t.data != nullptr) t.data = stand_in_address(fake_address);
          return t;
        };
        if (!inplace) {
          c.q_out = contiguous(c.q, 4);
          c.k_out = contiguous(c.k, 5);
        }
        const py::object device = (q.is_none() ? k : q).attr("device");
        c.cuda_device = device.attr("type").cast<std::string>() == "cuda"
                            ? (device.attr("index").is_none() ? 0 : device.attr("index").cast<int>())
                            : -1;
        check_rotation(c);
      },
      py::arg("q"), py::arg("k"), py::arg("positions"), py::arg("rope"), py::arg("layout"), py::arg("direction"),
      py::arg("angles"), py::arg("inplace"),
      "The checks of ropekit::rotate / rotate_ on tensors without memory (the operators' fakes): the real call's "
      "checks by the same functions, up to a prepared call that never runs.");
  m.def("_cuda_built", [] { return cuda::built(); });
}

}  // namespace ropekit::python
