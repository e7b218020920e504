// NumPy / PyTorch arrays as ropekit views (see arrays.hpp).
#include "arrays.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "ropekit/error.hpp"

namespace ropekit::python {
namespace {

// PyTorch, looked up only once the caller has imported it (`import ropekit` never imports torch).
// The references are kept for the life of the process.
struct Torch {
  PyObject* tensor_type = nullptr;
  PyObject* float32 = nullptr;
  PyObject* float16 = nullptr;
  PyObject* bfloat16 = nullptr;
  PyObject* int32 = nullptr;
  PyObject* int64 = nullptr;
  py::handle is_grad_enabled, empty;
};

const Torch* torch_api() {
  static Torch api;
  if (api.tensor_type != nullptr) return &api;
  PyObject* module = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (module == nullptr) return nullptr;
  py::handle torch(module);
  auto keep = [](py::object o) { return o.release().ptr(); };
  api.float32 = keep(torch.attr("float32"));
  api.float16 = keep(torch.attr("float16"));
  api.bfloat16 = keep(torch.attr("bfloat16"));
  api.int32 = keep(torch.attr("int32"));
  api.int64 = keep(torch.attr("int64"));
  api.is_grad_enabled = keep(torch.attr("is_grad_enabled"));
  api.empty = keep(torch.attr("empty"));
  api.tensor_type = keep(torch.attr("Tensor"));
  return &api;
}

// Attribute access by interned name (pybind11's attr("...") builds a new str per call; on the decode
// path every Python-level call counts). Names are string literals, so their addresses are the keys.
PyObject* interned(const char* name) {
  thread_local std::unordered_map<const char*, PyObject*> names;
  PyObject*& key = names[name];
  if (key == nullptr) key = PyUnicode_InternFromString(name);
  return key;
}

py::object steal_or_throw(PyObject* value) {
  if (value == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

py::object get(py::handle object, const char* name) {
  return steal_or_throw(PyObject_GetAttr(object.ptr(), interned(name)));
}

py::object call(py::handle object, const char* name) {
  return steal_or_throw(PyObject_CallMethodNoArgs(object.ptr(), interned(name)));
}

bool is_torch_tensor(py::handle object, const Torch*& api) {
  if (py::isinstance<py::array>(object)) return false;
  api = torch_api();
  return api != nullptr && PyObject_IsInstance(object.ptr(), api->tensor_type) == 1;
}

std::string_view numpy_dtype_name(const py::dtype& dtype) {
  switch (dtype.kind()) {
    case 'f': return dtype.itemsize() == 8 ? "float64" : dtype.itemsize() == 4 ? "float32" : "float16";
    case 'u': return dtype.itemsize() == 2 ? "uint16" : "an unsigned integer type";
    case 'i': return "an integer type";
    case 'c': return "complex";
    default: return "a non-float type";
  }
}

void check_device_and_grad(py::handle tensor, const Torch& api, std::string_view name) {
  if (get(tensor, "is_cpu").ptr() != Py_True) {
    throw Error(fmt::format("{}: a tensor on {}; this takes CPU tensors (CUDA tensors: Rope.apply, torch.ops.ropekit)",
                            name, py::str(tensor.attr("device")).cast<std::string>()));
  }
  if (get(tensor, "requires_grad").ptr() == Py_True && api.is_grad_enabled().ptr() == Py_True) {
    throw Error(
        fmt::format("{} requires grad: rotate it through ropekit.torch.apply_rotary (autograd), "
                    "or pass {}.detach()",
                    name, name));
  }
}

Array from_numpy(py::handle object, std::string_view name, std::string_view dtype_override) {
  auto a = py::reinterpret_borrow<py::array>(object);
  Array out;
  out.owner = a;
  out.framework = Framework::NumPy;
  const py::dtype dt = a.dtype();
  const char order = dt.byteorder();
  if (order == '>')
    throw Error(fmt::format("{}: big-endian dtype {}; pass a native-endian array", name,
                            py::str(py::handle(dt)).cast<std::string>()));
  if (dtype_override == "bf16" || dtype_override == "bfloat16") {
    if (dt.kind() != 'u' || dt.itemsize() != 2) {
      throw Error(
          fmt::format("{}: dtype=\"bf16\" reads uint16 bfloat16 bits, got a {} array", name, numpy_dtype_name(dt)));
    }
    out.dtype = DType::BF16;
  } else if (!dtype_override.empty()) {
    throw Error(fmt::format(
        "dtype = \"{}\": the only storage override is \"bf16\" (NumPy uint16 holding bfloat16 bits)", dtype_override));
  } else if (dt.kind() == 'f' && dt.itemsize() == 4) {
    out.dtype = DType::F32;
  } else if (dt.kind() == 'f' && dt.itemsize() == 2) {
    out.dtype = DType::F16;
  } else if (dt.kind() == 'u' && dt.itemsize() == 2) {
    throw Error(fmt::format("{}: a uint16 array; if it holds bfloat16 bits, say so with dtype=\"bf16\"", name));
  } else {
    throw Error(
        fmt::format("{}: dtype {} is not supported (float32, float16, or bfloat16 bits as uint16 "
                    "with dtype=\"bf16\")",
                    name, numpy_dtype_name(dt)));
  }
  out.ndim = static_cast<int>(a.ndim());
  if (out.ndim > 8) throw Error(fmt::format("{}: {} dimensions", name, out.ndim));
  const auto size = static_cast<std::int64_t>(dt.itemsize());
  for (int i = 0; i < out.ndim; ++i) {
    out.shape[i] = a.shape(i);
    const std::int64_t bytes = a.strides(i);
    if (bytes % size != 0) {
      throw Error(fmt::format("{}: stride of axis {} is {} bytes, not a whole number of {}-byte elements", name, i,
                              bytes, size));
    }
    out.strides[i] = bytes / size;
  }
  out.data = const_cast<void*>(a.data());
  out.writable = a.writeable();
  return out;
}

// cuda_device < 0: a CPU tensor (check_device_and_grad); else a tensor in the memory of that CUDA device.
Array from_torch(py::handle object, const Torch& api, std::string_view name, std::string_view dtype_override,
                 int cuda_device = -1) {
  if (cuda_device < 0) {
    check_device_and_grad(object, api, name);
  } else if (get(object, "is_cuda").ptr() != Py_True ||
             get(get(object, "device"), "index").cast<int>() != cuda_device) {
    throw Error(fmt::format("{}: a tensor on {}; this call's tensors are on cuda:{}", name,
                            py::str(get(object, "device")).cast<std::string>(), cuda_device));
  }
  Array out;
  out.owner = py::reinterpret_borrow<py::object>(object);
  out.framework = Framework::Torch;
  const py::object dtype = get(object, "dtype");
  if (!dtype_override.empty() && dtype_override != "bf16" && dtype_override != "bfloat16") {
    throw Error(fmt::format("dtype = \"{}\": the only storage override is \"bf16\"", dtype_override));
  }
  if (dtype.ptr() == api.float32) {
    out.dtype = DType::F32;
  } else if (dtype.ptr() == api.float16) {
    out.dtype = DType::F16;
  } else if (dtype.ptr() == api.bfloat16) {
    out.dtype = DType::BF16;
  } else {
    throw Error(fmt::format("{}: dtype {} is not supported (torch.float32, torch.float16, torch.bfloat16)", name,
                            py::str(dtype).cast<std::string>()));
  }
  if (!dtype_override.empty() && out.dtype != DType::BF16) {
    throw Error(fmt::format("{}: dtype=\"bf16\" given for a {} tensor", name, py::str(dtype).cast<std::string>()));
  }
  const py::tuple shape = get(object, "shape");
  const py::tuple strides = call(object, "stride");
  out.ndim = static_cast<int>(shape.size());
  if (out.ndim > 8) throw Error(fmt::format("{}: {} dimensions", name, out.ndim));
  for (int i = 0; i < out.ndim; ++i) {
    out.shape[i] = shape[i].cast<std::int64_t>();
    out.strides[i] = strides[i].cast<std::int64_t>();
  }
  out.data = reinterpret_cast<void*>(call(object, "data_ptr").cast<std::uintptr_t>());
  out.writable = true;
  return out;
}

}  // namespace

std::string Array::shape_text() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + (ndim == 1 ? ",)" : ")");
}

Array float_array(py::handle object, std::string_view name, std::string_view dtype) {
  if (object.is_none()) throw Error(fmt::format("{} is None", name));
  const Torch* api = nullptr;
  if (py::isinstance<py::array>(object)) return from_numpy(object, name, dtype);
  if (is_torch_tensor(object, api)) return from_torch(object, *api, name, dtype);
  throw Error(
      fmt::format("{}: a {}; ropekit takes NumPy arrays and PyTorch CPU tensors (no copy is made: "
                  "convert with numpy.asarray if that is what you want)",
                  name, py::str(py::type::of(object).attr("__name__")).cast<std::string>()));
}

Array device_float_array(py::handle object, std::string_view name, int cuda_device) {
  const Torch* api = nullptr;
  if (object.is_none()) throw Error(fmt::format("{} is None", name));
  if (!is_torch_tensor(object, api)) {
    throw Error(fmt::format("{}: a {}; with CUDA tensors every tensor of the call is a CUDA tensor", name,
                            py::str(py::type::of(object).attr("__name__")).cast<std::string>()));
  }
  return from_torch(object, *api, name, "", cuda_device);
}

bool is_cuda_tensor(py::handle object) {
  const Torch* api = nullptr;
  return !object.is_none() && is_torch_tensor(object, api) && get(object, "is_cuda").ptr() == Py_True;
}

Array empty_like(const Array& like, std::string_view name) {
  std::vector<std::int64_t> shape(like.shape.begin(), like.shape.begin() + like.ndim);
  Array out;
  if (like.framework == Framework::NumPy) {
    py::dtype dt = like.dtype == DType::F32   ? py::dtype::of<float>()
                   : like.dtype == DType::F16 ? py::dtype("float16")
                                              : py::dtype::of<std::uint16_t>();
    py::array a(dt, std::vector<py::ssize_t>(shape.begin(), shape.end()));
    return from_numpy(a, name, like.dtype == DType::BF16 ? "bf16" : "");
  }
  const Torch& api = *torch_api();
  PyObject* dtype = like.dtype == DType::F32 ? api.float32 : like.dtype == DType::F16 ? api.float16 : api.bfloat16;
  py::object t = api.empty(py::cast(shape), py::arg("dtype") = py::handle(dtype));
  return from_torch(t, api, name, "");
}

Array empty_f32(const Array& like, const std::vector<std::int64_t>& shape, std::string_view name) {
  if (like.framework == Framework::NumPy) {
    py::array a(py::dtype::of<float>(), std::vector<py::ssize_t>(shape.begin(), shape.end()));
    return from_numpy(a, name, "");
  }
  const Torch& api = *torch_api();
  py::object t = api.empty(py::cast(shape), py::arg("dtype") = py::handle(api.float32));
  return from_torch(t, api, name, "");
}

Layout parse_layout(std::string_view text) {
  if (text == "bshd") return Layout::BSHD;
  if (text == "bhsd") return Layout::BHSD;
  if (text == "thd") return Layout::THD;
  throw Error(
      fmt::format("layout = \"{}\": must be \"bshd\" [batch, seq, heads, head_dim], \"bhsd\" "
                  "[batch, heads, seq, head_dim] or \"thd\" [tokens, heads, head_dim]",
                  text));
}

std::string_view to_string(Layout layout) {
  switch (layout) {
    case Layout::BSHD: return "bshd";
    case Layout::BHSD: return "bhsd";
    case Layout::THD: return "thd";
  }
  return "?";
}

Heads heads_view(const Array& a, Layout layout, int head_dim, std::string_view name) {
  const int rank = layout == Layout::THD ? 3 : 4;
  if (a.ndim != rank) {
    throw Error(fmt::format("{}: shape {} has {} dimensions; layout \"{}\" needs {}", name, a.shape_text(), a.ndim,
                            to_string(layout),
                            layout == Layout::THD    ? "3: [tokens, heads, head_dim]"
                            : layout == Layout::BSHD ? "4: [batch, seq, heads, head_dim]"
                                                     : "4: [batch, heads, seq, head_dim]"));
  }
  const std::int64_t d = a.shape[rank - 1];
  if (head_dim > 0 && d != head_dim) {
    throw Error(fmt::format("{}: shape {} has head_dim {} (last axis); this Rope's head_dim is {}", name,
                            a.shape_text(), d, head_dim));
  }
  if (a.strides[rank - 1] != 1 && d > 1) {
    throw Error(
        fmt::format("{}: the head_dim axis has stride {} elements; ropekit reads each head's lanes "
                    "contiguously (stride 1): pass a view whose last axis is contiguous",
                    name, a.strides[rank - 1]));
  }
  for (int i = 0; i < rank; ++i) {
    if (a.strides[i] < 0) {
      throw Error(fmt::format("{}: axis {} has a negative stride ({}), which ropekit's views cannot express", name, i,
                              a.strides[i]));
    }
  }
  Heads h;
  h.data = a.data;
  h.dtype = a.dtype;
  h.head_dim = d <= std::numeric_limits<int>::max() ? static_cast<int>(d) : 0;
  switch (layout) {
    case Layout::BSHD:
      h.batch = a.shape[0], h.seq = a.shape[1], h.heads = a.shape[2];
      h.batch_stride = a.strides[0], h.seq_stride = a.strides[1], h.head_stride = a.strides[2];
      break;
    case Layout::BHSD:
      h.batch = a.shape[0], h.heads = a.shape[1], h.seq = a.shape[2];
      h.batch_stride = a.strides[0], h.head_stride = a.strides[1], h.seq_stride = a.strides[2];
      break;
    case Layout::THD:
      h.batch = 1, h.seq = a.shape[0], h.heads = a.shape[1];
      h.batch_stride = 0, h.seq_stride = a.strides[0], h.head_stride = a.strides[1];
      break;
  }
  return h;
}

namespace {

std::string expected_shapes(std::int64_t batch, std::int64_t seq, int axes) {
  const std::string lead = axes > 1 ? fmt::format("{}, ", axes) : "";
  if (batch == 1) return fmt::format("[{}{}] or [{}1, {}]", lead, seq, lead, seq);
  return fmt::format("[{}{}, {}], [{}1, {}] or [{}{}]", lead, batch, seq, lead, seq, lead, seq);
}

}  // namespace

RotateArgs rotation_views(const Rope& rope, const Array* q, const Array* k, const Array* q_out, const Array* k_out,
                          std::string_view layout_text) {
  const Layout layout = parse_layout(layout_text);
  const int head_dim = rope.spec().head_dim;
  if (q == nullptr && k == nullptr) throw Error("q and k are both None");
  RotateArgs args;
  if (q != nullptr) args.q = heads_view(*q, layout, head_dim, "q");
  if (k != nullptr) args.k = heads_view(*k, layout, head_dim, "k");
  if (q != nullptr && k != nullptr && (args.q.batch != args.k.batch || args.q.seq != args.k.seq)) {
    throw Error(fmt::format("q {} and k {} hold different tokens (layout \"{}\"): batch and seq must agree",
                            q->shape_text(), k->shape_text(), layout_text));
  }
  if (q != nullptr && q_out != nullptr) args.q_out = heads_view(*q_out, layout, head_dim, "q_out");
  if (k != nullptr && k_out != nullptr) args.k_out = heads_view(*k_out, layout, head_dim, "k_out");
  return args;
}

PositionsBuffer read_positions(py::handle object, std::int64_t batch, std::int64_t seq, int axes, std::string_view name,
                               std::string_view for_what) {
  if (object.is_none()) return map_positions(nullptr, IndexType::I64, {}, batch, seq, axes, name, for_what);
  // Integer data, C-contiguous: a NumPy array as it is, a torch tensor through its data pointer, else
  // numpy.asarray (lists, ints, non-contiguous arrays).
  const void* data = nullptr;
  IndexType type = IndexType::I64;
  std::vector<std::int64_t> shape;
  const Torch* api = nullptr;
  py::object held;
  if (is_torch_tensor(object, api)) {
    const py::object dtype = get(object, "dtype");
    if (dtype.ptr() != api->int64 && dtype.ptr() != api->int32) {
      throw Error(fmt::format("{}: dtype {}; positions are torch.int32 or torch.int64", name,
                              py::str(dtype).cast<std::string>()));
    }
    held = call(object, "is_contiguous").ptr() == Py_True && get(object, "is_cpu").ptr() == Py_True
               ? py::reinterpret_borrow<py::object>(object)
               : object.attr("detach")().attr("cpu")().attr("contiguous")();
    type = dtype.ptr() == api->int32 ? IndexType::I32 : IndexType::I64;
    for (const py::handle s : py::tuple(get(held, "shape"))) shape.push_back(s.cast<std::int64_t>());
    data = reinterpret_cast<const void*>(call(held, "data_ptr").cast<std::uintptr_t>());
  } else {
    py::array a = py::isinstance<py::array>(object) ? py::reinterpret_borrow<py::array>(object)
                                                    : py::array(py::module_::import("numpy").attr("asarray")(object));
    const py::dtype dt = a.dtype();
    const bool integer = dt.kind() == 'i' || dt.kind() == 'u';
    if (!integer || dt.itemsize() > 8 || (dt.kind() == 'u' && dt.itemsize() == 8)) {
      throw Error(
          fmt::format("{}: dtype {}; positions are int32 or int64", name, py::str(py::handle(dt)).cast<std::string>()));
    }
    if (dt.byteorder() == '>' || !(dt.kind() == 'i' && (dt.itemsize() == 4 || dt.itemsize() == 8)) ||
        !(a.flags() & py::array::c_style)) {
      a = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    }
    type = a.dtype().itemsize() == 4 ? IndexType::I32 : IndexType::I64;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) shape.push_back(a.shape(i));
    data = a.data();
    held = a;
  }
  PositionsBuffer mapped = map_positions(data, type, shape, batch, seq, axes, name, for_what);
  if (mapped.owned.empty()) mapped.keep = held;  // a view of the caller's data
  return mapped;
}

PositionsBuffer map_positions(const void* data, IndexType type, const std::vector<std::int64_t>& shape,
                              std::int64_t batch, std::int64_t seq, int axes, std::string_view name,
                              std::string_view for_what) {
  PositionsBuffer out;
  const std::int64_t tokens = batch * seq;
  if (data == nullptr) {  // None: 0, 1, …, seq−1 in every batch row
    out.owned.resize(static_cast<std::size_t>(axes * tokens));
    for (std::int64_t i = 0; i < axes * tokens; ++i) out.owned[static_cast<std::size_t>(i)] = i % seq;
    out.view = {out.owned.data(), IndexType::I64, tokens, axes};
    return out;
  }
  // Shape → how the values map onto the tokens.
  std::vector<std::int64_t> rest = shape;
  if (axes > 1) {
    if (shape.empty() || shape[0] != axes) {
      throw Error(fmt::format("{}: shape ({}); the spec needs {} position streams first ({}): {} for {}", name,
                              fmt::join(shape, ", "), axes == 3 ? "three" : std::to_string(axes),
                              axes == 3 ? "M-RoPE t, h, w, or 3 axial axes" : "axial axes",
                              expected_shapes(batch, seq, axes), for_what));
    }
    rest.erase(rest.begin());
  }
  const std::int64_t per_stream = std::accumulate(rest.begin(), rest.end(), std::int64_t{1}, std::multiplies<>());
  bool direct = false, broadcast = false;
  if (rest.size() == 2 && rest[0] == batch && rest[1] == seq)
    direct = true;
  else if (rest.size() == 2 && rest[0] == 1 && rest[1] == seq)
    broadcast = true;
  else if (rest.size() == 1 && rest[0] == seq)
    broadcast = true;
  else if (rest.size() == 0 && seq == 1)
    broadcast = true;
  if (batch == 1 && per_stream == seq) direct = true, broadcast = false;
  if (!direct && !broadcast) {
    throw Error(fmt::format("{}: shape ({}) does not fit {} tokens ({} × {}) of {}: give {}", name,
                            fmt::join(shape, ", "), tokens, batch, seq, for_what, expected_shapes(batch, seq, axes)));
  }
  if (direct) {
    out.view = {data, type, tokens, axes};
    return out;
  }
  out.owned.resize(static_cast<std::size_t>(axes * tokens));
  const Positions src{data, type, seq, axes};
  for (int ax = 0; ax < axes; ++ax)
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t s = 0; s < seq; ++s)
        out.owned[static_cast<std::size_t>(ax * tokens + b * seq + s)] = src.at(ax, s);
  out.view = {out.owned.data(), IndexType::I64, tokens, axes};
  return out;
}

Positions device_positions_shape(const std::vector<std::int64_t>& shape, std::int64_t batch, std::int64_t seq, int axes,
                                 std::string_view name, std::string_view for_what) {
  std::int64_t count = 1;
  for (const std::int64_t n : shape) count *= n;
  const std::vector<std::int64_t> zeros(static_cast<std::size_t>(std::max<std::int64_t>(count, 1)), 0);
  const PositionsBuffer mapped = map_positions(zeros.data(), IndexType::I64, shape, batch, seq, axes, name, for_what);
  if (!mapped.owned.empty()) {
    throw Error(
        fmt::format("{}: shape ({}) broadcasts over the batch of {}; for CUDA tensors give one per token: "
                    "shape (batch, seq)",
                    name, fmt::join(shape, ", "), batch));
  }
  return {nullptr, IndexType::I64, mapped.view.count, mapped.view.axes};
}

py::array_t<std::int64_t> int64_array(std::vector<std::int64_t> values, std::vector<py::ssize_t> shape) {
  py::array_t<std::int64_t> a(shape);
  std::copy(values.begin(), values.end(), a.mutable_data());
  return a;
}

std::vector<std::int64_t> out_shape(const Array& q, std::int64_t v_head_dim) {
  std::vector<std::int64_t> shape(q.shape.begin(), q.shape.begin() + q.ndim);
  shape.back() = v_head_dim;
  return shape;
}

}  // namespace ropekit::python
