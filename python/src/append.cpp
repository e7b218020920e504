// python/src/append.cpp — ropekit.rotate_and_cache: the fused rotate-and-append into an engine's paged KV cache
// (ropekit/append.hpp) over NumPy arrays and PyTorch CPU tensors, with vLLM's slot mapping. The operator
// torch.ops.ropekit.rotate_and_cache_ (ropekit/ops.py) calls it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "rope_object.hpp"
#include "ropekit/append.hpp"
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
// e4m3 (uint8) named by `cache_dtype` ("bf16", "f8e4m3").
CacheMemory cache_memory(py::handle object, std::string_view name, std::string_view cache_dtype) {
  CacheMemory c;
  c.owner = py::reinterpret_borrow<py::object>(object);
  std::string kind;
  if (py::isinstance<py::array>(object)) {
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
    if (!object.attr("is_cpu").cast<bool>()) {
      throw Error(fmt::format("{}: a tensor on {}; ropekit's Python module works on CPU tensors", name,
                              py::str(object.attr("device")).cast<std::string>()));
    }
    if (!object.attr("is_contiguous")().cast<bool>())
      throw Error(fmt::format("{}: the cache must be contiguous", name));
    if (!cache_dtype.empty())
      throw Error(fmt::format("cache_dtype = \"{}\": only for NumPy arrays holding bits (a tensor has its dtype)",
                              cache_dtype));
    for (const py::handle s : py::tuple(object.attr("shape"))) c.shape.push_back(s.cast<std::int64_t>());
    c.data = reinterpret_cast<void*>(object.attr("data_ptr")().cast<std::uintptr_t>());
  } else {
    throw Error(fmt::format("{}: a {}; caches are NumPy arrays or PyTorch CPU tensors", name, type_name(object)));
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

void rotate_and_cache(const PyRope& py_rope, py::handle key_cache_obj, py::handle value_cache_obj, py::handle key_obj,
                      py::handle value_obj, py::handle slot_mapping_obj, py::handle query_obj, py::handle positions_obj,
                      std::string_view cache_layout, double k_scale, double v_scale, std::string_view angles,
                      bool rotate_key, std::string_view cache_dtype, int threads) {
  const std::shared_ptr<const Rope> rope_held = py_rope.rope(parse_angles(angles));
  const Rope& rope = *rope_held;
  const PageLayout layout = parse_cache_layout(cache_layout);
  const bool has_v = !value_obj.is_none();
  if (has_v != !value_cache_obj.is_none())
    throw Error("value and value_cache: give both (keys and values) or neither (a keys-only cache, MLA)");
  const CacheMemory kc = cache_memory(key_cache_obj, "key_cache", cache_dtype);
  const auto [pages, page_size, kv_heads, k_lanes] = cache_dims(kc, layout, "key_cache");
  PagedCache cache{.k = kc.data,
                   .v = nullptr,
                   .dtype = kc.dtype,
                   .layout = layout,
                   .num_pages = pages,
                   .page_size = page_size,
                   .kv_heads = kv_heads,
                   .head_dim = static_cast<int>(k_lanes),
                   .v_head_dim = 0,
                   .k_scale = static_cast<float>(k_scale),
                   .v_scale = static_cast<float>(v_scale)};
  CacheMemory vc;
  if (has_v) {
    vc = cache_memory(value_cache_obj, "value_cache", cache_dtype);
    const auto [v_pages, v_page_size, v_heads, v_lanes] = cache_dims(vc, layout, "value_cache");
    if (vc.dtype != kc.dtype || v_pages != pages || v_page_size != page_size || v_heads != kv_heads) {
      throw Error(fmt::format(
          "value_cache: {} of ({}, {}, {}) pages × entries × heads; key_cache is {} of ({}, {}, {})",
          to_string(vc.dtype), v_pages, v_page_size, v_heads, to_string(kc.dtype), pages, page_size, kv_heads));
    }
    cache.v = vc.data;
    cache.v_head_dim = static_cast<int>(v_lanes);
  }
  const int head_dim = rope.spec().head_dim;
  const Array k = float_array(key_obj, "key", "");
  AppendArgs args;
  args.k = heads_view(k, Layout::THD, head_dim, "key");
  if (rotate_key) args.k_out = args.k;  // vLLM's rotary_embedding rotates the live key in place too
  Array v, q;
  if (has_v) v = float_array(value_obj, "value", ""), args.v = heads_view(v, Layout::THD, 0, "value");
  if (!query_obj.is_none())
    q = float_array(query_obj, "query", ""), args.q = heads_view(q, Layout::THD, head_dim, "query");
  const std::int64_t tokens = args.k.batch * args.k.seq;
  const PositionsBuffer positions =
      read_positions(positions_obj, 1, tokens, rope.pair_map().num_axes, "positions", "key [tokens, kv_heads, dim]");
  args.positions = positions.view;
  // Slot mapping: int32 or int64, one per token, −1 skips the token (vLLM's padding).
  if (slot_mapping_obj.is_none()) throw Error("slot_mapping is None: give the cache slot of each token (−1: none)");
  const PositionsBuffer slots =
      read_positions(slot_mapping_obj, 1, tokens, 1, "slot_mapping", "key [tokens, kv_heads, dim]");
  args.slots = SlotMapping{slots.view.data, slots.view.type, tokens};
  args.threads = threads;
  const AppendCall call = prepare_append(rope, args, cache);
  py::gil_scoped_release release;
  call.run();
}

}  // namespace

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
