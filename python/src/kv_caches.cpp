// python/src/kv_caches.cpp — ropekit.KvCache and ropekit.PagedKvCache: the KV caches from Python (append, K-shift,
// erase, re-rotation, attention against them). Arrays in, new float32 arrays out.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <limits>
#include <map>

#include "arrays.hpp"
#include "bindings.hpp"
#include "rope_object.hpp"
#include "ropekit/ropekit.hpp"

namespace ropekit::python {
namespace {

DType parse_dtype(std::string_view text) {
  if (text == "float32" || text == "f32") return DType::F32;
  if (text == "bfloat16" || text == "bf16") return DType::BF16;
  if (text == "float16" || text == "f16") return DType::F16;
  throw Error(fmt::format("dtype = \"{}\": must be \"float32\", \"bfloat16\" or \"float16\"", text));
}

// A cache's keys or values widened to float32 in token-major order, read under its lock (no Python), and made into
// a NumPy array [seq, heads, head_dim] after.
struct Widened {
  std::vector<float> values;
  std::int64_t seq = 0, heads = 0;
  int head_dim = 0;
  py::array_t<float> array() const {
    py::array_t<float> out(std::vector<py::ssize_t>{seq, heads, head_dim});
    std::copy(values.begin(), values.end(), out.mutable_data());
    return out;
  }
};

Widened widened(const Heads& h, int head_dim) {
  Widened w{std::vector<float>(static_cast<std::size_t>(h.seq * h.heads * head_dim)), h.seq, h.heads, head_dim};
  float* o = w.values.data();
  for (std::int64_t s = 0; s < h.seq; ++s) {
    for (std::int64_t head = 0; head < h.heads; ++head) {
      const void* row = h.row(0, s, head);
      for (int i = 0; i < head_dim; ++i) {
        float v = 0;
        switch (h.dtype) {
          case DType::F32: v = static_cast<const float*>(row)[i]; break;
          case DType::BF16: v = bf16_to_float(static_cast<const std::uint16_t*>(row)[i]); break;
          case DType::F16: v = f16_to_float(static_cast<const std::uint16_t*>(row)[i]); break;
        }
        *o++ = v;
      }
    }
  }
  return w;
}

// A cache attention's options from its Python keywords (KvCache.attention, PagedKvCache.attention).
AttentionOptions attention_options(bool causal, std::int64_t window, std::optional<double> softmax_scale,
                                   const PyCosSinTable* table) {
  return {.causal = causal, .window = window, .softmax_scale = softmax_scale, .table = table_of(table)};
}

// Every use of `cache` runs under `guard` (bindings.hpp): Python threads may share the object.
struct PyKvCache {
  std::unique_ptr<KvCache> cache;
  int head_dim = 0, v_head_dim = 0;
  Guarded guard;
};

PyKvCache make_cache(const PyRope& rope, std::int64_t capacity, std::int64_t kv_heads, std::string_view dtype,
                     int v_head_dim, std::string_view angles) {
  const int head_dim = rope.spec().head_dim;
  return {std::make_unique<KvCache>(
              *rope.rope(parse_angles(angles)),
              KvCacheShape{
                  .capacity = capacity, .kv_heads = kv_heads, .v_head_dim = v_head_dim, .dtype = parse_dtype(dtype)}),
          head_dim, v_head_dim > 0 ? v_head_dim : head_dim};
}

void cache_append(PyKvCache& self, const PyRope& py_rope, py::handle k_obj, py::handle v_obj, py::handle positions,
                  std::string_view layout_text, std::string_view angles, const PyCosSinTable* table) {
  const Layout layout = parse_layout(layout_text);
  const std::shared_ptr<const Rope> rope_held = py_rope.rope(parse_angles(angles));
  const Rope& rope = *rope_held;
  const Array k = float_array(k_obj, "k", ""), v = float_array(v_obj, "v", "");
  const Heads kv = heads_view(k, layout, rope.spec().head_dim, "k"), vv = heads_view(v, layout, 0, "v");
  if (kv.batch != 1) throw Error(fmt::format("k: batch = {}; a KvCache holds one sequence (batch 1)", kv.batch));
  const bool follow = positions.is_none();  // after the cached tokens
  const PositionsBuffer given = follow ? PositionsBuffer{} : read_positions(positions, 1, kv.seq, 1, "positions", "k");
  self.guard.write([&] {
    std::vector<std::int64_t> next;
    if (follow) {
      const std::int64_t start = self.cache->size() == 0 ? 0 : self.cache->position(self.cache->size() - 1) + 1;
      next.resize(static_cast<std::size_t>(kv.seq));
      for (std::int64_t i = 0; i < kv.seq; ++i) next[static_cast<std::size_t>(i)] = start + i;
    }
    self.cache->append(rope, kv, vv, follow ? ropekit::positions(std::span<const std::int64_t>(next)) : given.view,
                       table_of(table));
  });
}

py::object cache_attention(const PyKvCache& self, const PyRope& py_rope, py::handle q_obj, py::handle positions,
                           std::string_view layout_text, bool causal, std::int64_t window,
                           std::optional<double> softmax_scale, std::string_view angles, const PyCosSinTable* table) {
  const Layout layout = parse_layout(layout_text);
  const std::shared_ptr<const Rope> rope_held = py_rope.rope(parse_angles(angles));
  const Rope& rope = *rope_held;
  const Array q = float_array(q_obj, "q", "");
  const Heads qv = heads_view(q, layout, rope.spec().head_dim, "q");
  const std::int64_t v_head_dim = self.v_head_dim;
  const Array out = empty_f32(q, out_shape(q, v_head_dim), "out");
  const Heads ov = heads_view(out, layout, static_cast<int>(v_head_dim), "out");
  const PositionsBuffer pos = read_positions(positions, qv.batch, qv.seq, 1, "positions", "q");
  const AttentionOptions options = attention_options(causal, window, softmax_scale, table);
  self.guard.read([&] { attention(rope, qv, pos.view, *self.cache, ov, options); });
  return out.owner;
}

// Many sequences in one paged cache (ropekit/paged_kv_cache.hpp), tokens in "thd" layout: [tokens,
// heads, lanes], each token's sequence in seq_ids.
struct PyPagedKvCache {
  std::unique_ptr<PagedKvCache> cache;
  Guarded guard;  // every use of `cache` runs under it (bindings.hpp)
};

CacheDType parse_cache_dtype(std::string_view text) {
  if (text == "float32" || text == "f32") return CacheDType::F32;
  if (text == "bfloat16" || text == "bf16") return CacheDType::BF16;
  if (text == "float16" || text == "f16") return CacheDType::F16;
  if (text == "fp8_e4m3" || text == "float8_e4m3fn") return CacheDType::F8E4M3;
  throw Error(fmt::format("dtype = \"{}\": must be \"float32\", \"bfloat16\", \"float16\" or \"fp8_e4m3\"", text));
}

PageLayout parse_page_layout(std::string_view text) {
  if (text == "nhd" || text == "NHD") return PageLayout::NHD;
  if (text == "hnd" || text == "HND") return PageLayout::HND;
  throw Error(fmt::format("layout = \"{}\": must be \"nhd\" or \"hnd\"", text));
}

// seq_ids as int32, one per token.
std::vector<std::int32_t> read_seq_ids(py::handle seq_ids, std::int64_t tokens) {
  const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast> a =
      py::module_::import("numpy").attr("asarray")(seq_ids, "int64").attr("reshape")(-1);
  if (a.size() != tokens) {
    throw Error(fmt::format("seq_ids has {} values: one per token, {}", a.size(), tokens));
  }
  std::vector<std::int32_t> out(static_cast<std::size_t>(tokens));
  for (std::int64_t i = 0; i < tokens; ++i) {
    const std::int64_t v = a.data()[i];
    if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max()) {
      throw Error(fmt::format("seq_ids[{}] = {}: not a sequence id", i, v));
    }
    out[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(v);
  }
  return out;
}

PyPagedKvCache make_paged_cache(const PyRope& rope, std::int64_t num_pages, std::int64_t page_size,
                                std::int64_t kv_heads, int max_sequences, std::string_view dtype,
                                std::string_view layout, float k_scale, float v_scale, int v_head_dim,
                                std::string_view angles) {
  return {std::make_unique<PagedKvCache>(*rope.rope(parse_angles(angles)),
                                         PagedKvCacheShape{.num_pages = num_pages,
                                                           .page_size = page_size,
                                                           .kv_heads = kv_heads,
                                                           .v_head_dim = v_head_dim,
                                                           .dtype = parse_cache_dtype(dtype),
                                                           .layout = parse_page_layout(layout),
                                                           .k_scale = k_scale,
                                                           .v_scale = v_scale,
                                                           .max_sequences = max_sequences})};
}

void paged_append(PyPagedKvCache& self, const PyRope& py_rope, py::handle seq_ids, py::handle k_obj, py::handle v_obj,
                  py::handle positions, std::string_view angles, const PyCosSinTable* table) {
  const std::shared_ptr<const Rope> rope = py_rope.rope(parse_angles(angles));
  const Array k = float_array(k_obj, "k", ""), v = float_array(v_obj, "v", "");
  const Heads kv = heads_view(k, Layout::THD, rope->spec().head_dim, "k"), vv = heads_view(v, Layout::THD, 0, "v");
  const std::vector<std::int32_t> seq_of = read_seq_ids(seq_ids, kv.seq);
  const bool follow = positions.is_none();  // each token after its sequence's last cached one
  const PositionsBuffer given = follow ? PositionsBuffer{} : read_positions(positions, 1, kv.seq, 1, "positions", "k");
  self.guard.write([&] {
    std::vector<std::int64_t> owned;
    if (follow) {
      std::map<std::int32_t, std::int64_t> next;
      owned.resize(seq_of.size());
      for (std::size_t t = 0; t < seq_of.size(); ++t) {
        auto it = next.find(seq_of[t]);
        if (it == next.end()) {
          const std::span<const std::int64_t> cached = self.cache->positions(seq_of[t]);
          it = next.emplace(seq_of[t], cached.empty() ? 0 : cached.back() + 1).first;
        }
        owned[t] = it->second++;
      }
    }
    const Positions pos = follow ? ropekit::positions(std::span<const std::int64_t>(owned)) : given.view;
    self.cache->append(*rope, seq_of, {.k = kv, .v = vv, .positions = pos}, table_of(table));
  });
}

py::object paged_attention(const PyPagedKvCache& self, const PyRope& py_rope, py::handle q_obj, py::handle positions,
                           py::handle seq_ids, bool causal, std::int64_t window, std::optional<double> softmax_scale,
                           std::string_view angles, const PyCosSinTable* table) {
  const std::shared_ptr<const Rope> rope = py_rope.rope(parse_angles(angles));
  const Array q = float_array(q_obj, "q", "");
  const Heads qv = heads_view(q, Layout::THD, rope->spec().head_dim, "q");
  const std::int64_t v_head_dim = self.cache->shape().v_head_dim;
  const Array out = empty_f32(q, out_shape(q, v_head_dim), "out");
  const Heads ov = heads_view(out, Layout::THD, static_cast<int>(v_head_dim), "out");
  const PositionsBuffer pos = read_positions(positions, 1, qv.seq, 1, "positions", "q");
  const std::vector<std::int32_t> seq_of = read_seq_ids(seq_ids, qv.seq);
  const AttentionOptions options = attention_options(causal, window, softmax_scale, table);
  self.guard.read([&] { attention(*rope, qv, pos.view, seq_of, *self.cache, ov, options); });
  return out.owner;
}

}  // namespace

void bind_kv_caches(py::module_& m) {
  const auto* const kNoTable = static_cast<const PyCosSinTable*>(nullptr);  // table=None: the Rope's angles
  py::class_<PyKvCache>(
      m, "KvCache",
      "One sequence's KV cache of rotated keys (ropekit/kv_cache.hpp): slots in append order, each "
      "with its position; K-shift as a pure rotation, re-rotation on a plan change. Threads may share it: a change "
      "runs alone, reads (attention among them) together.")
      .def(py::init(&make_cache), py::arg("rope"), py::arg("capacity"), py::arg("kv_heads"), py::kw_only(),
           py::arg("dtype") = "float32", py::arg("v_head_dim") = 0, py::arg("angles") = "accurate",
           "A cache of `capacity` slots of kv_heads keys (rope.head_dim) and values (v_head_dim, 0: head_dim), stored "
           "as dtype 'float32', 'bfloat16' or 'float16'")
      .def("append", &cache_append, py::arg("rope"), py::arg("k"), py::arg("v"), py::arg("positions") = py::none(),
           py::kw_only(), py::arg("layout") = "thd", py::arg("angles") = "accurate", py::arg("table") = kNoTable,
           "Rotates k at positions (None: following the last slot's) and appends it with v, one rounding to storage")
      .def("attention", &cache_attention, py::arg("rope"), py::arg("q"), py::arg("positions"), py::kw_only(),
           py::arg("layout") = "thd", py::arg("causal") = true, py::arg("window") = 0,
           py::arg("softmax_scale") = py::none(), py::arg("angles") = "accurate", py::arg("table") = kNoTable,
           "Softmax attention of q (rotated on load at positions) over the cached keys and values; causal by "
           "position, window > 0 a sliding window; returns the output as q's kind of array")
      .def(
          "shift",
          [](PyKvCache& c, std::int64_t first, std::int64_t last, std::int64_t delta) {
            c.guard.write([&] { c.cache->shift(first, last, delta); });
          },
          py::arg("first"), py::arg("last"), py::arg("delta"),
          "K-shift: slots [first, last) move by delta positions, their keys turned by R(delta); a refused shift (a "
          "position below 0 or at 2^47) changes nothing")
      .def(
          "erase",
          [](PyKvCache& c, std::int64_t first, std::int64_t last) {
            c.guard.write([&] { c.cache->erase(first, last); });
          },
          py::arg("first"), py::arg("last"),
          "Removes slots [first, last); later slots move down keeping their positions (llama.cpp's seq_rm)")
      .def(
          "clear", [](PyKvCache& c) { c.guard.write([&] { c.cache->clear(); }); }, "Removes every slot")
      .def(
          "rerotate",
          [](PyKvCache& c, const PyRope& rope, std::string_view angles) {
            const std::shared_ptr<const Rope> held = rope.rope(parse_angles(angles));  // with the GIL
            return c.guard.write([&] { return c.cache->rerotate(*held); });
          },
          py::arg("rope"), py::kw_only(), py::arg("angles") = "accurate",
          "Re-rotates the cached keys from their plan to rope's (dynamic NTK, LongRoPE); False, changing nothing, "
          "when the plans agree")
      .def_property_readonly("size", [](const PyKvCache& c) { return c.guard.read([&] { return c.cache->size(); }); })
      .def_property_readonly("capacity", [](const PyKvCache& c) { return c.cache->capacity(); })  // never changes
      .def("__len__", [](const PyKvCache& c) { return c.guard.read([&] { return c.cache->size(); }); })
      .def(
          "keys",
          [](const PyKvCache& c) { return c.guard.read([&] { return widened(c.cache->keys(), c.head_dim); }).array(); },
          "The stored (rotated) keys as float32 [size, kv_heads, head_dim], a copy")
      .def(
          "values",
          [](const PyKvCache& c) {
            return c.guard.read([&] { return widened(c.cache->values(), c.v_head_dim); }).array();
          },
          "The stored values as float32 [size, kv_heads, v_head_dim], a copy")
      .def(
          "positions",
          [](const PyKvCache& c) {
            const std::vector<std::int64_t> p = c.guard.read([&] {
              std::vector<std::int64_t> v(static_cast<std::size_t>(c.cache->size()));
              for (std::size_t i = 0; i < v.size(); ++i) v[i] = c.cache->position(static_cast<std::int64_t>(i));
              return v;
            });
            return py::array_t<std::int64_t>(static_cast<py::ssize_t>(p.size()), p.data());
          },
          "Each slot's position, int64");

  py::class_<PyPagedKvCache>(
      m, "PagedKvCache",
      "A paged KV cache of rotated keys for many sequences (ropekit/paged_kv_cache.hpp): pages "
      "in FlashInfer's layout, llama.cpp's sequence operations, fp8/bf16/fp16 storage. Threads may "
      "share it: a change runs alone, reads (attention among them) together.")
      .def(py::init(&make_paged_cache), py::arg("rope"), py::arg("num_pages"), py::arg("page_size"),
           py::arg("kv_heads"), py::arg("max_sequences"), py::kw_only(), py::arg("dtype") = "float32",
           py::arg("layout") = "nhd", py::arg("k_scale") = 1.0f, py::arg("v_scale") = 1.0f, py::arg("v_head_dim") = 0,
           py::arg("angles") = "accurate",
           "num_pages pages of page_size tokens for up to max_sequences sequences; dtype 'float32', 'bfloat16', "
           "'float16' or 'fp8_e4m3' (k_scale, v_scale: the fp8 scales), page layout 'nhd' or 'hnd'")
      .def("append", &paged_append, py::arg("rope"), py::arg("seq_ids"), py::arg("k"), py::arg("v"),
           py::arg("positions") = py::none(), py::kw_only(), py::arg("angles") = "accurate",
           py::arg("table") = kNoTable,
           "Rotates each token's k at its position (None: following its sequence's last) and appends it with v to "
           "the sequence seq_ids names, taking pages from the free list")
      .def("attention", &paged_attention, py::arg("rope"), py::arg("q"), py::arg("positions"), py::arg("seq_ids"),
           py::kw_only(), py::arg("causal") = true, py::arg("window") = 0, py::arg("softmax_scale") = py::none(),
           py::arg("angles") = "accurate", py::arg("table") = kNoTable,
           "Softmax attention of each query token (rotated on load at its position) over its sequence's cached keys "
           "and values; causal by position, window > 0 a sliding window")
      .def(
          "erase",
          [](PyPagedKvCache& c, int seq, std::int64_t p0, std::int64_t p1) {
            c.guard.write([&] { c.cache->erase(seq, p0, p1); });
          },
          py::arg("seq"), py::arg("p0") = -1, py::arg("p1") = -1,
          "Removes seq's entries at positions [p0, p1) (p0 < 0: from 0, p1 < 0: to the end); later entries keep "
          "their positions; pages no longer needed are freed")
      .def(
          "shift",
          [](PyPagedKvCache& c, int seq, std::int64_t p0, std::int64_t p1, std::int64_t delta) {
            c.guard.write([&] { c.cache->shift(seq, p0, p1, delta); });
          },
          py::arg("seq"), py::arg("p0"), py::arg("p1"), py::arg("delta"),
          "K-shift: seq's entries at positions [p0, p1) move by delta, their keys turned by R(delta); a refused "
          "shift changes nothing")
      // llama.cpp's names, kept for one version (docs/conventions.md): a DeprecationWarning, then the operation.
      .def(
          "seq_rm",
          [](PyPagedKvCache& c, int seq, std::int64_t p0, std::int64_t p1) {
            if (PyErr_WarnEx(PyExc_DeprecationWarning, "PagedKvCache.seq_rm is renamed erase", 1) != 0) {
              throw py::error_already_set();
            }
            c.guard.write([&] { c.cache->erase(seq, p0, p1); });
          },
          py::arg("seq"), py::arg("p0") = -1, py::arg("p1") = -1, "Deprecated name of erase (llama.cpp's)")
      .def(
          "seq_add",
          [](PyPagedKvCache& c, int seq, std::int64_t p0, std::int64_t p1, std::int64_t delta) {
            if (PyErr_WarnEx(PyExc_DeprecationWarning, "PagedKvCache.seq_add is renamed shift", 1) != 0) {
              throw py::error_already_set();
            }
            c.guard.write([&] { c.cache->shift(seq, p0, p1, delta); });
          },
          py::arg("seq"), py::arg("p0"), py::arg("p1"), py::arg("delta"), "Deprecated name of shift (llama.cpp's)")
      .def(
          "seq_cp",
          [](PyPagedKvCache& c, int src, int dst, std::int64_t p0, std::int64_t p1) {
            c.guard.write([&] { c.cache->seq_cp(src, dst, p0, p1); });
          },
          py::arg("src"), py::arg("dst"), py::arg("p0") = -1, py::arg("p1") = -1,
          "Copies src's entries at positions [p0, p1) to the end of dst (dst adopts src's plan when empty)")
      .def(
          "seq_clear", [](PyPagedKvCache& c, int seq) { c.guard.write([&] { c.cache->seq_clear(seq); }); },
          py::arg("seq"), "Removes every entry of seq, and its plan")
      .def(
          "rerotate",
          [](PyPagedKvCache& c, int seq, const PyRope& rope, std::string_view angles) {
            const std::shared_ptr<const Rope> held = rope.rope(parse_angles(angles));  // with the GIL
            return c.guard.write([&] { return c.cache->rerotate(seq, *held); });
          },
          py::arg("seq"), py::arg("rope"), py::kw_only(), py::arg("angles") = "accurate",
          "Re-rotates seq's keys from its plan to rope's; False (adopting the plan) when they agree, the keys are "
          "stored unrotated or the sequence is empty")
      .def(
          "length", [](const PyPagedKvCache& c, int seq) { return c.guard.read([&] { return c.cache->length(seq); }); },
          py::arg("seq"), "How many entries seq holds")
      .def(
          "positions",
          [](const PyPagedKvCache& c, int seq) {
            const auto p = c.guard.read([&] {
              const std::span<const std::int64_t> v = c.cache->positions(seq);
              return std::vector<std::int64_t>(v.begin(), v.end());
            });
            return py::array_t<std::int64_t>(static_cast<py::ssize_t>(p.size()), p.data());
          },
          py::arg("seq"), "seq's entries' positions in entry order, int64")
      .def(
          "pages",
          [](const PyPagedKvCache& c, int seq) {
            const auto p = c.guard.read([&] {
              const std::span<const std::int32_t> v = c.cache->pages(seq);
              return std::vector<std::int32_t>(v.begin(), v.end());
            });
            return py::array_t<std::int32_t>(static_cast<py::ssize_t>(p.size()), p.data());
          },
          py::arg("seq"), "The pages seq occupies, in order, int32")
      .def_property_readonly(
          "free_pages", [](const PyPagedKvCache& c) { return c.guard.read([&] { return c.cache->free_pages(); }); })
      .def(
          "page_table",
          [](const PyPagedKvCache& c, const std::vector<std::int32_t>& seqs) {
            std::vector<std::int32_t> indices, indptr, last;
            c.guard.read([&] { c.cache->page_table(seqs, indices, indptr, last); });
            const auto array = [](const std::vector<std::int32_t>& v) {
              return py::array_t<std::int32_t>(static_cast<py::ssize_t>(v.size()), v.data());
            };
            return py::make_tuple(array(indices), array(indptr), array(last));
          },
          py::arg("seqs"),
          "FlashInfer's page table of the sequences seqs: (indices, indptr, last_page_len), int32 arrays, for an "
          "engine's own attention kernel");
}

}  // namespace ropekit::python
