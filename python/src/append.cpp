// python/src/append.cpp — ropekit.rotate_and_cache: the fused rotate-and-append into an engine's paged KV cache
// (ropekit/append.hpp) over NumPy arrays and PyTorch CPU tensors, with vLLM's slot mapping. The operator
// torch.ops.ropekit.rotate_and_cache_ (ropekit/ops.py) calls it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "rope_object.hpp"
#include "ropekit/append.hpp"
#include "ropekit/cuda.hpp"
#include "ropekit/error.hpp"

namespace ropekit::python {
namespace {

// A cache tensor as the kernel addresses it: dense (C-contiguous), of one of the cache storage types.
struct CacheMemory {
  py::object owner;
  void* data = nullptr;
  CacheDType dtype = CacheDType::F32;
  std::vector<std::int64_t> shape;
};

std::string type_name(py::handle object) { return py::str(py::type::of(object).attr("__name__")).cast<std::string>(); }

// torch: float32, bfloat16, float16, float8_e4m3fn; NumPy: float32, float16, and the bits of bfloat16 (uint16) or
// e4m3 (uint8) named by `cache_dtype` ("bf16", "f8e4m3"). cuda_device >= 0: a torch tensor on that CUDA device.
CacheMemory cache_memory(py::handle object, std::string_view name, std::string_view cache_dtype, int cuda_device) {
  CacheMemory c;
  c.owner = py::reinterpret_borrow<py::object>(object);
  std::string kind;
  if (py::isinstance<py::array>(object) && cuda_device < 0) {
    auto a = py::reinterpret_borrow<py::array>(object);
    if (!(a.flags() & py::array::c_style) || !a.writeable())
      throw Error(fmt::format("{}: the cache must be a writable C-contiguous array", name));
    const py::dtype dt = a.dtype();
    if (dt.kind() == 'f' && dt.itemsize() == 4) kind = "float32";
    if (dt.kind() == 'f' && dt.itemsize() == 2) kind = "float16";
    if (dt.kind() == 'u' && dt.itemsize() == 2 && cache_dtype == "bf16") kind = "bfloat16";
    if (dt.kind() == 'u' && dt.itemsize() == 1 && cache_dtype == "f8e4m3") kind = "float8_e4m3fn";
    if (kind.empty()) {
      throw Error(
          fmt::format("{}: a {}{}-byte NumPy array{}; caches are float32, float16, or the bits of bfloat16 "
                      "(uint16, cache_dtype=\"bf16\") or fp8 e4m3 (uint8, cache_dtype=\"f8e4m3\")",
                      name, dt.kind(), dt.itemsize(),
                      cache_dtype.empty() ? "" : fmt::format(" with cache_dtype=\"{}\"", cache_dtype)));
    }
    for (py::ssize_t i = 0; i < a.ndim(); ++i) c.shape.push_back(a.shape(i));
    c.data = a.mutable_data();
  } else if (type_name(object) == "Tensor" || py::hasattr(object, "data_ptr")) {
    const std::string dtype = py::str(object.attr("dtype")).cast<std::string>();
    kind = dtype.rfind("torch.", 0) == 0 ? dtype.substr(6) : dtype;
    const bool on_the_device = cuda_device < 0 ? object.attr("is_cpu").cast<bool>()
                                               : object.attr("is_cuda").cast<bool>() &&
                                                     object.attr("device").attr("index").cast<int>() == cuda_device;
    if (!on_the_device) {
      throw Error(fmt::format("{}: a tensor on {}; {}", name, py::str(object.attr("device")).cast<std::string>(),
                              cuda_device < 0 ? std::string("ropekit.rotate_and_cache takes CPU tensors (CUDA "
                                                            "tensors: torch.ops.ropekit.rotate_and_cache_)")
                                              : fmt::format("this call's tensors are on cuda:{}", cuda_device)));
    }
    if (!object.attr("is_contiguous")().cast<bool>())
      throw Error(fmt::format("{}: the cache must be contiguous", name));
    if (!cache_dtype.empty())
      throw Error(fmt::format("cache_dtype = \"{}\": only for NumPy arrays holding bits (a tensor has its dtype)",
                              cache_dtype));
    for (const py::handle s : py::tuple(object.attr("shape"))) c.shape.push_back(s.cast<std::int64_t>());
    c.data = reinterpret_cast<void*>(object.attr("data_ptr")().cast<std::uintptr_t>());
  } else {
    throw Error(fmt::format("{}: a {}; caches are NumPy arrays or PyTorch tensors", name, type_name(object)));
  }
  if (kind == "float32") {
    c.dtype = CacheDType::F32;
  } else if (kind == "bfloat16") {
    c.dtype = CacheDType::BF16;
  } else if (kind == "float16") {
    c.dtype = CacheDType::F16;
  } else if (kind == "float8_e4m3fn") {
    c.dtype = CacheDType::F8E4M3;
  } else {
    throw Error(
        fmt::format("{}: dtype {} is not a cache type (float32, bfloat16, float16, float8_e4m3fn)", name, kind));
  }
  return c;
}

PageLayout parse_cache_layout(std::string_view text) {
  if (text == "nhd") return PageLayout::NHD;
  if (text == "hnd") return PageLayout::HND;
  throw Error(
      fmt::format("cache_layout = \"{}\": \"nhd\" ([pages, page_size, kv_heads, dim], vLLM, FlashInfer's "
                  "default) or \"hnd\" ([pages, kv_heads, page_size, dim])",
                  text));
}

// [pages, page_size, heads, dim] (NHD) or [pages, heads, page_size, dim] (HND) → (pages, page_size, heads, dim).
std::array<std::int64_t, 4> cache_dims(const CacheMemory& c, PageLayout layout, std::string_view name) {
  if (c.shape.size() != 4) {
    throw Error(fmt::format("{}: {} dimensions; a paged cache is [pages, {}, dim]", name, c.shape.size(),
                            layout == PageLayout::NHD ? "page_size, kv_heads" : "kv_heads, page_size"));
  }
  return layout == PageLayout::NHD ? std::array{c.shape[0], c.shape[1], c.shape[2], c.shape[3]}
                                   : std::array{c.shape[0], c.shape[2], c.shape[1], c.shape[3]};
}

// Positions or a slot mapping given as a CUDA tensor: int32 or int64, contiguous, one value per token (axes streams
// of them first for M-RoPE), in the memory of `cuda_device` — the kernel reads them there; the host reads none.
// Positions or a slot mapping given as a CUDA tensor of `cuda_device`: int32 or int64, contiguous, in the shapes the
// host path reads (read_positions) less broadcasts — one value per token (per axis for M-RoPE); the host reads none.
Positions device_indices(py::handle object, std::string_view name, std::int64_t tokens, int axes, int cuda_device) {
  if (object.is_none()) throw Error(fmt::format("{} is None: with CUDA tensors give one per token", name));
  if (!py::hasattr(object, "data_ptr") || !object.attr("is_cuda").cast<bool>() ||
      object.attr("device").attr("index").cast<int>() != cuda_device) {
    throw Error(fmt::format("{}: not a tensor on cuda:{} (this call's device)", name, cuda_device));
  }
  const std::string dtype = py::str(object.attr("dtype")).cast<std::string>();
  if (dtype != "torch.int32" && dtype != "torch.int64")
    throw Error(fmt::format("{}: dtype {}: must be int32 or int64", name, dtype));
  if (!object.attr("is_contiguous")().cast<bool>()) throw Error(fmt::format("{}: not contiguous", name));
  std::vector<std::int64_t> shape;
  for (const py::handle d : py::tuple(object.attr("shape"))) shape.push_back(d.cast<std::int64_t>());
  Positions p = device_positions_shape(shape, 1, tokens, axes, name, "key [tokens, kv_heads, dim]");
  p.data = reinterpret_cast<const void*>(object.attr("data_ptr")().cast<std::uintptr_t>());
  p.type = dtype == "torch.int32" ? IndexType::I32 : IndexType::I64;
  return p;
}

// What rotate_and_cache reads, kept alive while the call's views point into it (fill in place; do not move).
struct AppendInputs {
  CacheMemory kc, vc;
  Array k, v, q;
  PositionsBuffer positions, slots;
  AppendArgs args;
  PagedCache cache;
};

// The call's views: host memory (NumPy arrays, CPU tensors) where cuda_device < 0, else CUDA tensors on that device.
void read_append(AppendInputs& in, const Rope& rope, py::handle key_cache_obj, py::handle value_cache_obj,
                 py::handle key_obj, py::handle value_obj, py::handle slot_mapping_obj, py::handle query_obj,
                 py::handle positions_obj, std::string_view cache_layout, double k_scale, double v_scale,
                 bool rotate_key, std::string_view cache_dtype, int cuda_device) {
  const PageLayout layout = parse_cache_layout(cache_layout);
  const bool has_v = !value_obj.is_none();
  if (has_v != !value_cache_obj.is_none())
    throw Error("value and value_cache: give both (keys and values) or neither (a keys-only cache, MLA)");
  in.kc = cache_memory(key_cache_obj, "key_cache", cache_dtype, cuda_device);
  const auto [pages, page_size, kv_heads, k_lanes] = cache_dims(in.kc, layout, "key_cache");
  in.cache = PagedCache{.k = in.kc.data,
                        .v = nullptr,
                        .dtype = in.kc.dtype,
                        .layout = layout,
                        .num_pages = pages,
                        .page_size = page_size,
                        .kv_heads = kv_heads,
                        .head_dim = static_cast<int>(k_lanes),
                        .v_head_dim = 0,
                        .k_scale = static_cast<float>(k_scale),
                        .v_scale = static_cast<float>(v_scale)};
  if (has_v) {
    in.vc = cache_memory(value_cache_obj, "value_cache", cache_dtype, cuda_device);
    const auto [v_pages, v_page_size, v_heads, v_lanes] = cache_dims(in.vc, layout, "value_cache");
    if (in.vc.dtype != in.kc.dtype || v_pages != pages || v_page_size != page_size || v_heads != kv_heads) {
      throw Error(fmt::format(
          "value_cache: {} of ({}, {}, {}) pages × entries × heads; key_cache is {} of ({}, {}, {})",
          to_string(in.vc.dtype), v_pages, v_page_size, v_heads, to_string(in.kc.dtype), pages, page_size, kv_heads));
    }
    in.cache.v = in.vc.data;
    in.cache.v_head_dim = static_cast<int>(v_lanes);
  }
  const auto tensor = [&](py::handle object, std::string_view name) {
    return cuda_device < 0 ? float_array(object, name, "") : device_float_array(object, name, cuda_device);
  };
  const int head_dim = rope.spec().head_dim;
  AppendArgs& args = in.args;
  in.k = tensor(key_obj, "key");
  args.k = heads_view(in.k, Layout::THD, head_dim, "key");
  if (rotate_key) args.k_out = args.k;  // vLLM's rotary_embedding rotates the live key in place too
  if (has_v) in.v = tensor(value_obj, "value"), args.v = heads_view(in.v, Layout::THD, 0, "value");
  if (!query_obj.is_none())
    in.q = tensor(query_obj, "query"), args.q = heads_view(in.q, Layout::THD, head_dim, "query");
  const std::int64_t tokens = args.k.batch * args.k.seq;
  if (slot_mapping_obj.is_none()) throw Error("slot_mapping is None: give the cache slot of each token (−1: none)");
  if (cuda_device >= 0) {
    args.positions = device_indices(positions_obj, "positions", tokens, rope.pair_map().num_axes, cuda_device);
    const Positions slots = device_indices(slot_mapping_obj, "slot_mapping", tokens, 1, cuda_device);
    args.slots = SlotMapping{slots.data, slots.type, tokens};
    return;
  }
  in.positions =
      read_positions(positions_obj, 1, tokens, rope.pair_map().num_axes, "positions", "key [tokens, kv_heads, dim]");
  args.positions = in.positions.view;
  // Slot mapping: int32 or int64, one per token, −1 skips the token (vLLM's padding).
  in.slots = read_positions(slot_mapping_obj, 1, tokens, 1, "slot_mapping", "key [tokens, kv_heads, dim]");
  args.slots = SlotMapping{in.slots.view.data, in.slots.view.type, tokens};
}

void rotate_and_cache(const PyRope& py_rope, py::handle key_cache_obj, py::handle value_cache_obj, py::handle key_obj,
                      py::handle value_obj, py::handle slot_mapping_obj, py::handle query_obj, py::handle positions_obj,
                      std::string_view cache_layout, double k_scale, double v_scale, std::string_view angles,
                      bool rotate_key, std::string_view cache_dtype, int threads) {
  const std::shared_ptr<const Rope> rope_held = py_rope.rope(parse_angles(angles));
  AppendInputs in;
  read_append(in, *rope_held, key_cache_obj, value_cache_obj, key_obj, value_obj, slot_mapping_obj, query_obj,
              positions_obj, cache_layout, k_scale, v_scale, rotate_key, cache_dtype, -1);
  in.args.threads = threads;
  const AppendCall call = prepare_append(*rope_held, in.args, in.cache);
  py::gil_scoped_release release;
  call.run();
}

}  // namespace

void rotate_and_cache_cuda(const Rope& rope,
                           const std::function<std::shared_ptr<const cuda::DeviceRope>()>& device_rope,
                           py::handle key_cache, py::handle value_cache, py::handle key, py::handle value,
                           py::handle slot_mapping, py::handle query, py::handle positions,
                           std::string_view cache_layout, double k_scale, double v_scale, int device, void* stream) {
  AppendInputs in;
  read_append(in, rope, key_cache, value_cache, key, value, slot_mapping, query, positions, cache_layout, k_scale,
              v_scale, true, "", device);
  const std::shared_ptr<const cuda::DeviceRope> gpu = device_rope();  // after every check: nothing made for a refusal
  const py::gil_scoped_release release;
  cuda::append(*gpu, in.args, in.cache, {.device = device, .stream = stream});
}

void bind_append(py::module_& m) {
  m.def("rotate_and_cache", &rotate_and_cache, py::arg("rope"), py::arg("key_cache"), py::arg("value_cache"),
        py::arg("key"), py::arg("value"), py::arg("slot_mapping"), py::kw_only(), py::arg("query") = py::none(),
        py::arg("positions") = py::none(), py::arg("cache_layout") = "nhd", py::arg("k_scale") = 1.0,
        py::arg("v_scale") = 1.0, py::arg("angles") = "accurate", py::arg("rotate_key") = true,
        py::arg("cache_dtype") = "", py::arg("threads") = 0,
        "The fused rotate-and-append of ropekit/append.hpp (vLLM's rotary_embedding + reshape_and_cache in one pass): "
        "query [tokens, heads, head_dim] rotated in place; key [tokens, kv_heads, head_dim] rotated (in place too "
        "unless rotate_key=False) and written with value to the slots of slot_mapping (−1: skipped) in key_cache / "
        "value_cache ([pages, page_size, kv_heads, dim] for cache_layout \"nhd\", [pages, kv_heads, page_size, dim] "
        "for \"hnd\"; float32, bfloat16, float16 or fp8 e4m3 with k_scale / v_scale). The bits of rotate, then "
        "convert, then copy.");
}

}  // namespace ropekit::python
