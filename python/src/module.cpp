// python/src/module.cpp — the `ropekit._ropekit` extension: Rope (construction from a config, preset,
// GGUF or keywords; plan, cos/sin, zero-copy apply), the per-layer model plan, analysis. The
// consumers are bound in kv_caches.cpp (KV caches) and consumers.cpp (attention), the model runner and the lab in
// model.cpp.
//
// Every ropekit::Error becomes ropekit.Error (a ValueError) carrying the C++ message. The GIL is
// released while a kernel runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <variant>

#include "arrays.hpp"
#include "bindings.hpp"
#include "rope_object.hpp"
#include "ropekit/ropekit.hpp"

namespace ropekit::python {

AngleMode parse_angles(std::string_view text) {
  if (text == "accurate") return AngleMode::Accurate;
  if (text == "hf") return AngleMode::HfCompat;
  throw Error(
      fmt::format("angles = \"{}\": must be \"accurate\" (correctly rounded cos/sin of the exact angle) "
                  "or \"hf\" (Hugging Face's float32 angle)",
                  text));
}

Direction parse_direction(std::string_view text) {
  if (text == "forward") return Direction::Forward;
  if (text == "inverse") return Direction::Inverse;
  if (text == "backward") return Direction::Backward;
  throw Error(
      fmt::format("direction = \"{}\": must be \"forward\", \"inverse\" (undo forward, magnitude "
                  "1/cos_sin_scale) or \"backward\" (the transpose: gradients)",
                  text));
}

PyRope::PyRope(Spec spec, std::optional<std::int64_t> current_length, std::string origin)
    : origin_(std::move(origin)),
      accurate_(std::make_shared<const Rope>(std::move(spec), AngleMode::Accurate, current_length)) {}

PyRope::PyRope(std::shared_ptr<const Rope> accurate, std::string origin)
    : origin_(std::move(origin)), shared_(true), accurate_(std::move(accurate)) {}

std::shared_ptr<const Rope> PyRope::rope(AngleMode mode) const {
  const std::lock_guard lock(mutex_);
  if (mode == AngleMode::Accurate) return accurate_;
  if (!hf_) hf_ = std::make_shared<const Rope>(accurate_->spec(), accurate_->plan(), AngleMode::HfCompat);
  return hf_;
}

bool PyRope::set_current_length(std::int64_t n) {
  if (shared_) {
    throw Error(
        fmt::format("set_current_length({}): this Rope is {}, shared by every sequence planned like it; "
                    "take the RopeSet's at({}) instead",
                    n, origin_, n));
  }
  auto next = std::make_shared<const Rope>(spec(), AngleMode::Accurate, n);  // a bad length is an Error first
  // Kept for one version (docs/conventions.md): a Rope that changes under its operator handle and under whoever
  // shares it is what RopeSet replaces.
  if (PyErr_WarnEx(PyExc_DeprecationWarning,
                   "Rope.set_current_length changes the Rope in place and is deprecated: take "
                   "ropekit.RopeSet(rope).at(length), whose Ropes never change",
                   1) != 0) {
    throw pybind11::error_already_set();
  }
  const std::lock_guard lock(mutex_);
  const bool changed = needs_rerotation(accurate_->plan(), next->plan());
  accurate_ = std::move(next);
  hf_.reset();  // rebuilt from the new plan on first use
  return changed;
}

namespace {

Pairing parse_pairing(std::string_view text) {
  if (text == "half" || text == "neox" || text == "rotate_half") return Pairing::Half;
  if (text == "interleaved" || text == "gptj") return Pairing::Interleaved;
  throw Error(
      fmt::format("pairing = \"{}\": must be \"half\" (rotate_half: lanes j, j + d/2) or "
                  "\"interleaved\" (lanes 2j, 2j + 1)",
                  text));
}

// A field's value as Python sees it: an unset optional is None.
py::object field_object(const FieldValue& value) {
  return std::visit(
      [](const auto& v) -> py::object {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) {
          return py::none();
        } else {
          return py::cast(v);
        }
      },
      value);
}

// rope_type and the variant's fields, by its description (ropekit/variants.hpp).
py::dict scaling_dict(const Scaling& scaling) {
  py::dict d;
  d["rope_type"] = std::string(rope_type_name(scaling));
  for_each_field(scaling, [&](const FieldInfo& field, const FieldValue& value) {
    d[py::str(std::string(field.key))] = field_object(value);
  });
  return d;
}

// ropekit.scaling_variants(): every variant's description.
py::list scaling_variants() {
  static constexpr const char* kSources[] = {"rope", "model", "file"};
  static constexpr const char* kPresence[] = {"required", "default", "optional"};
  py::list out;
  for (const VariantInfo* variant : variant_infos()) {
    py::list fields;
    for (const FieldInfo& field : variant->fields) {
      py::dict f;
      f["key"] = std::string(field.key);
      f["source"] = kSources[static_cast<int>(field.source)];
      f["presence"] = kPresence[static_cast<int>(field.presence)];
      fields.append(f);
    }
    py::dict d;
    d["rope_type"] = std::string(variant->name);
    d["config_rope_type"] = variant->config_rope_type;
    d["formula"] = std::string(variant->formula);
    d["fields"] = fields;
    out.append(d);
  }
  return out;
}

py::dict spec_dict(const Spec& spec) {
  py::dict d;
  d["head_dim"] = spec.head_dim;
  d["rotary_dim"] = spec.rotary_dim;
  d["base"] = spec.base;
  d["pairing"] = std::string(to_string(spec.pairing));
  d["rope_scaling"] = scaling_dict(spec.scaling);
  if (spec.mrope) {
    d["mrope_section"] = spec.mrope->sections;
    d["mrope_interleaved"] = spec.mrope->layout == MRopeLayout::Interleaved;
  } else {
    d["mrope_section"] = py::none();
  }
  if (spec.axial) {
    d["axial_sections"] = spec.axial->sections;
    d["axial_frequencies"] = spec.axial->frequencies == AxialFrequencies::Strided ? "strided" : "per_axis";
  } else {
    d["axial_sections"] = py::none();
  }
  return d;
}

py::dict layer_dict(const LayerPositions& g) {
  py::dict d;
  d["layer_type"] = g.layer_type;
  d["layers"] = g.layers;
  d["encoding"] = std::string(encoding_name(g.encoding));
  d["attention"] = g.attention;
  d["spec"] = g.encoding == PositionEncoding::Rope ? py::object(spec_dict(g.spec)) : py::none();
  d["rope_offset"] = g.rope_offset;
  d["rope_parameters"] = g.rope_parameters;
  d["qk_head_dim"] = g.qk_head_dim;
  if (g.indexer) {
    py::dict ix;
    ix["spec"] = spec_dict(g.indexer->spec);
    ix["rope_offset"] = g.indexer->rope_offset;
    ix["qk_head_dim"] = g.indexer->qk_head_dim;
    d["indexer"] = ix;
  } else {
    d["indexer"] = py::none();
  }
  d["alibi_slopes"] = g.alibi_slopes;
  d["sliding_window"] = g.sliding_window;
  d["attention_chunk"] = g.attention_chunk;
  d["softmax_scale"] = g.softmax_scale;
  d["logit_softcap"] = g.logit_softcap;
  if (g.query_scaling.kind != QueryScaling::Kind::None) {
    d["query_scaling"] = g.query_scaling.formula();
  } else {
    d["query_scaling"] = py::none();
  }
  return d;
}

py::dict positions_dict(const ModelPositions& m) {
  py::dict d;
  d["source"] = m.source;
  d["model_type"] = m.model_type;
  d["family"] = m.family;
  d["num_layers"] = m.num_layers;
  d["qk_head_dim"] = m.qk_head_dim;
  d["max_position_embeddings"] = m.max_position_embeddings;
  py::list groups;
  for (const LayerPositions& g : m.groups) groups.append(layer_dict(g));
  d["groups"] = groups;
  d["layer_types"] = m.layer_types;
  d["warnings"] = m.warnings;
  return d;
}

std::string json_text(py::handle dict) { return py::module_::import("json").attr("dumps")(dict).cast<std::string>(); }

ConfigOptions config_options(const std::optional<std::string>& pairing) {
  ConfigOptions o;
  if (pairing) o.pairing = parse_pairing(*pairing);
  return o;
}

// A config given as a path (str / os.PathLike) or a dict (config.json's content).
ModelPositions read_model(py::handle config, const std::optional<std::string>& pairing) {
  if (py::isinstance<py::dict>(config)) return read_config(json_text(config), config_options(pairing), "config dict");
  const auto path = py::module_::import("os").attr("fspath")(config).cast<std::string>();
  return read_config_file(path, config_options(pairing));
}

std::shared_ptr<PyRope> rope_of_group(const ModelPositions& m, const LayerPositions& g) {
  auto r = std::make_shared<PyRope>(g.spec, std::nullopt, m.source);
  r->layer = g;
  return r;
}

// ropekit.ModelPositions: the C++ ModelPositions (ropekit/model_positions.hpp) with each RoPE group's Rope built once,
// so layer(type) and at_layer(i) give the same Rope object (and operator handle) every time.
class PyModelPositions {
 public:
  explicit PyModelPositions(ModelPositions m) : m_(std::move(m)), ropes_(m_.groups.size()) {}

  const ModelPositions& get() const { return m_; }

  std::shared_ptr<PyRope> rope_of(const LayerPositions& g, std::string_view what) {
    if (g.encoding != PositionEncoding::Rope) {
      throw Error(fmt::format("{}: {} has no RoPE (encoding {})", m_.source, what, encoding_name(g.encoding)));
    }
    auto& r = ropes_.at(static_cast<std::size_t>(&g - m_.groups.data()));
    if (!r) r = rope_of_group(m_, g);
    return r;
  }
  std::shared_ptr<PyRope> layer(const std::optional<std::string>& layer_type) {
    if (!layer_type) {
      const auto groups = m_.rope_groups();
      if (groups.empty()) throw Error(fmt::format("{}: no layer of this model uses RoPE", m_.source));
      if (groups.size() > 1) {
        std::vector<std::string> names;
        for (const LayerPositions* g : groups) names.push_back(g->layer_type);
        throw Error(fmt::format("layer_type = None: {} has several RoPE layer types ({}): name one, or take ropes()",
                                m_.source, fmt::join(names, ", ")));
      }
      return rope_of(*groups.front(), "its RoPE layer");
    }
    return rope_of(m_.layer(*layer_type), fmt::format("layer type {}", *layer_type));
  }
  std::shared_ptr<PyRope> at_layer(int index) { return rope_of(m_.at_layer(index), fmt::format("layer {}", index)); }
  py::dict ropes() {
    py::dict out;
    for (const LayerPositions* g : m_.rope_groups()) out[py::str(g->layer_type)] = rope_of(*g, g->layer_type);
    return out;
  }

 private:
  ModelPositions m_;
  std::vector<std::shared_ptr<PyRope>> ropes_;  // by group, built on first use
};

// One Rope when the model has one RoPE plan (or `layer_type` / `layer` picks one). A model with several RoPE layer
// types and no pick gave a dict of Ropes keyed by layer type: kept for one version with a DeprecationWarning
// (one return type: ModelPositions.ropes() is the dict).
py::object ropes_of(ModelPositions m, const std::optional<std::string>& layer_type, std::optional<int> layer) {
  if (layer_type && layer) throw Error("give layer_type or layer, not both");
  PyModelPositions model(std::move(m));
  if (layer) return py::cast(model.at_layer(*layer));
  if (layer_type || model.get().rope_groups().size() <= 1) return py::cast(model.layer(layer_type));
  if (PyErr_WarnEx(PyExc_DeprecationWarning,
                   "Rope.from_config/from_preset/from_gguf of a model with several RoPE layer types returns a dict "
                   "and is deprecated: pass layer_type=, or take ropekit.ModelPositions.from_config(...).ropes()",
                   1) != 0) {
    throw py::error_already_set();
  }
  return model.ropes();
}

std::shared_ptr<PyRope> rope_from_keywords(int head_dim, std::optional<int> rotary_dim, double base,
                                           const std::string& pairing, py::object rope_scaling,
                                           std::optional<std::int64_t> max_position_embeddings,
                                           std::optional<std::vector<int>> mrope_section, bool mrope_interleaved,
                                           std::optional<std::int64_t> current_length) {
  // The scaling dict is read by the config reader, in config.json syntax, as a Llama's would be.
  py::dict config;
  config["model_type"] = "llama";
  config["head_dim"] = head_dim;
  config["hidden_size"] = head_dim;
  config["num_attention_heads"] = 1;
  config["rope_theta"] = base;
  if (max_position_embeddings) config["max_position_embeddings"] = *max_position_embeddings;
  if (!rope_scaling.is_none()) {
    if (!py::isinstance<py::dict>(rope_scaling))
      throw Error("rope_scaling: must be a dict in config.json syntax, or None");
    config["rope_scaling"] = rope_scaling;
  }
  ConfigOptions options;
  options.pairing = parse_pairing(pairing);
  const ModelPositions m = read_config(json_text(config), options, "Rope(...)");
  Spec spec = m.groups.at(0).spec;
  spec.head_dim = head_dim;
  spec.rotary_dim = rotary_dim.value_or(head_dim);
  if (mrope_section)
    spec.mrope = MRope{*mrope_section, mrope_interleaved ? MRopeLayout::Interleaved : MRopeLayout::Sectioned};
  spec.validate();
  return std::make_shared<PyRope>(spec, current_length, "Rope(...)");
}

// A float32 [num_positions, rotary_dim] copy-free view of `cache_obj` (converted when it is not one).
py::array_t<float, py::array::c_style | py::array::forcecast> cache_array(const Rope& rope, py::handle cache_obj) {
  const py::array_t<float, py::array::c_style | py::array::forcecast> cache =
      py::module_::import("numpy").attr("ascontiguousarray")(cache_obj, "float32");
  if (cache.ndim() != 2 || cache.shape(1) != rope.spec().rotary_dim) {
    throw Error(fmt::format("cache: shape [num_positions, rotary_dim = {}] expected, got {} dimensions",
                            rope.spec().rotary_dim, cache.ndim()));
  }
  return cache;
}

PyCosSinTable import_cache(const PyRope& self, py::handle cache_obj) {
  const std::shared_ptr<const Rope> rope_held = self.rope(AngleMode::Accurate);
  const auto cache = cache_array(*rope_held, cache_obj);
  py::gil_scoped_release release;
  return {import_cos_sin_cache(*rope_held, {cache.data(), static_cast<std::size_t>(cache.size())}, cache.shape(0))};
}

// Rotates q and k (NumPy arrays or torch CPU tensors) in place or into new arrays.
// ropekit.RotateCall: Rope.prepare's result, as C++'s RotateCall (ropekit/call.hpp): validated and resolved once,
// then run() per step and set_positions() between steps. It holds what its views point into: the caller's arrays
// (or the new output arrays), the positions it read, the Rope and the table.
struct PyRotateCall {
  std::shared_ptr<const Rope> rope;  // the plan the call's job points into
  Array q, k, q_out, k_out;
  bool has_q = false, has_k = false, inplace = true;
  PositionsBuffer positions;
  std::string for_what;
  std::int64_t batch = 0, seq = 0;  // the tokens the positions map onto
  std::optional<RotateCall> call;
  Guarded guard;  // run and set_positions from threads sharing the call: one at a time (bindings.hpp)

  py::object run() const {
    guard.write([&] { call->run(); });
    py::object q_result = !has_q ? py::none() : inplace ? q.owner : q_out.owner;
    py::object k_result = !has_k ? py::none() : inplace ? k.owner : k_out.owner;
    if (!has_k) return q_result;
    if (!has_q) return k_result;
    return py::make_tuple(q_result, k_result);
  }

  // New positions for the same tokens, read as prepare read them (shape, broadcast, streams); checked as prepare
  // checks them, the call unchanged on an error.
  void set_positions(py::handle positions_obj) {
    PositionsBuffer next = read_positions(positions_obj, batch, seq, rope->pair_map().num_axes, "positions", for_what);
    // Swapped under the lock (pointers alone move); the old positions are released after it, with the GIL.
    guard.write([&] {
      call->set_positions(next.view);
      std::swap(positions, next);
    });
  }
};

PyRotateCall prepare_call(const PyRope& self, py::handle q_obj, py::handle k_obj, py::handle positions_obj,
                          std::string_view layout_text, bool inplace, std::string_view direction,
                          std::string_view angles, std::string_view dtype, int threads, const PyCosSinTable* table) {
  PyRotateCall c;
  c.rope = self.rope(parse_angles(angles));
  const Rope& rope = *c.rope;
  c.has_q = !q_obj.is_none();
  c.has_k = !k_obj.is_none();
  c.inplace = inplace;
  if (!c.has_q && !c.has_k) throw Error("apply: q and k are both None");
  if (c.has_q) c.q = float_array(q_obj, "q", dtype);
  if (c.has_k) c.k = float_array(k_obj, "k", dtype);
  if (inplace) {
    if (c.has_q && !c.q.writable)
      throw Error("q: the array is read-only and inplace=True writes to it (pass inplace=False for new arrays)");
    if (c.has_k && !c.k.writable)
      throw Error("k: the array is read-only and inplace=True writes to it (pass inplace=False for new arrays)");
  } else {
    if (c.has_q) c.q_out = empty_like(c.q, "q_out");
    if (c.has_k) c.k_out = empty_like(c.k, "k_out");
  }
  RotateArgs args = rotation_views(rope, c.has_q ? &c.q : nullptr, c.has_k ? &c.k : nullptr,
                                   inplace ? nullptr : &c.q_out, inplace ? nullptr : &c.k_out, layout_text);
  args.direction = parse_direction(direction);
  args.threads = threads;
  const Heads& first = c.has_q ? args.q : args.k;
  c.batch = first.batch;
  c.seq = first.seq;
  c.for_what = fmt::format("q/k (layout \"{}\")", layout_text);
  c.positions =
      read_positions(positions_obj, first.batch, first.seq, rope.pair_map().num_axes, "positions", c.for_what);
  args.positions = c.positions.view;
  c.call.emplace(table != nullptr ? rope.prepare(args, table->table) : rope.prepare(args));
  return c;
}

// Rope.apply: prepare, then run (as C++'s Rope::apply is prepare(args).run()).
py::object apply(const PyRope& self, py::handle q_obj, py::handle k_obj, py::handle positions_obj,
                 std::string_view layout_text, bool inplace, std::string_view direction, std::string_view angles,
                 std::string_view dtype, int threads, const PyCosSinTable* table) {
  if (is_cuda_tensor(q_obj) || is_cuda_tensor(k_obj)) {
    // CUDA tensors: the same call through the torch operators' device path (ropekit::cuda::DeviceRope on the current
    // stream; with `table`, a device copy of it), with this function's semantics for positions and results
    // (ropekit/_cuda.py).
    return py::module_::import("ropekit._cuda")
        .attr("apply")(py::cast(self, py::return_value_policy::reference), q_obj, k_obj, positions_obj, layout_text,
                       inplace, direction, angles, dtype,
                       table != nullptr ? py::cast(table, py::return_value_policy::reference) : py::none());
  }
  return prepare_call(self, q_obj, k_obj, positions_obj, layout_text, inplace, direction, angles, dtype, threads, table)
      .run();
}

std::shared_ptr<PyRotateCall> prepare(const PyRope& self, py::handle q_obj, py::handle k_obj, py::handle positions_obj,
                                      std::string_view layout_text, bool inplace, std::string_view direction,
                                      std::string_view angles, std::string_view dtype, int threads,
                                      const PyCosSinTable* table) {
  if (is_cuda_tensor(q_obj) || is_cuda_tensor(k_obj)) {
    throw Error(
        "prepare: CUDA tensors are rotated by Rope.apply or the ropekit.ops operators (on the current stream); "
        "a prepared call is for host memory");
  }
  return std::make_shared<PyRotateCall>(
      prepare_call(self, q_obj, k_obj, positions_obj, layout_text, inplace, direction, angles, dtype, threads, table));
}

// (cos, sin) at `positions` as float32 arrays, magnitude included.
// vLLM's cos_sin_cache layout ([n, rotary_dim]: m·cos then m·sin), ropekit/cos_sin_cache.hpp.
py::array_t<float> cos_sin_cache(const PyRope& self, std::int64_t num_positions, std::string_view angles) {
  const std::shared_ptr<const Rope> rope_held = self.rope(parse_angles(angles));
  if (num_positions < 0) throw Error(fmt::format("num_positions = {}: must be >= 0", num_positions));
  py::array_t<float> out(
      std::vector<py::ssize_t>{static_cast<py::ssize_t>(num_positions), rope_held->spec().rotary_dim});
  float* data = out.mutable_data();
  const auto size = static_cast<std::size_t>(out.size());
  {
    py::gil_scoped_release release;
    export_cos_sin_cache(*rope_held, num_positions, {data, size});
  }
  return out;
}

py::dict check_cache(const PyRope& self, py::handle cache_obj, double tolerance) {
  const std::shared_ptr<const Rope> rope_held = self.rope(AngleMode::Accurate);
  const auto cache = cache_array(*rope_held, cache_obj);
  CosSinCacheReport r;
  {
    py::gil_scoped_release release;
    r = check_cos_sin_cache(*rope_held, {cache.data(), static_cast<std::size_t>(cache.size())}, cache.shape(0),
                            tolerance);
  }
  py::dict d;
  d["num_positions"] = r.num_positions;
  d["tolerance"] = r.tolerance;
  d["max_error"] = r.max_error;
  d["worst_position"] = r.worst_position;
  d["worst_pair"] = r.worst_pair;
  d["worst_is_sin"] = r.worst_is_sin;
  d["first_position_over"] = r.first_position_over;
  d["accurate_bound"] = r.accurate_bound;
  return d;
}

py::tuple cos_sin(const PyRope& self, py::handle positions_obj, std::string_view layout, std::string_view angles) {
  const std::shared_ptr<const Rope> rope_held = self.rope(parse_angles(angles));
  const Rope& rope = *rope_held;
  const bool hf = layout == "hf";
  if (!hf && layout != "half") {
    throw Error(
        fmt::format("layout = \"{}\": must be \"hf\" (Hugging Face's [cos θ_0 … cos θ_P−1, cos θ_0 … cos θ_P−1], "
                    "rotary_dim wide) or \"half\" (flash-attn's P = rotary_dim/2 values)",
                    layout));
  }
  const int axes = rope.pair_map().num_axes;
  // Positions of any shape (after M-RoPE's leading 3 or the axial axes): read as one row of tokens.
  py::array pos = py::module_::import("numpy").attr("asarray")(positions_obj);  // torch CPU tensors too
  std::vector<py::ssize_t> shape(pos.shape(), pos.shape() + pos.ndim());
  if (axes > 1) {
    if (shape.empty() || shape[0] != axes) {
      throw Error(fmt::format("positions: the spec needs {} position streams first ({}): shape [{}, ...]",
                              axes == 3 ? "three" : std::to_string(axes),
                              axes == 3 ? "M-RoPE t, h, w, or 3 axial axes" : "axial axes", axes));
    }
    shape.erase(shape.begin());
  }
  std::int64_t count = 1;
  for (const auto s : shape) count *= s;
  const PositionsBuffer buffer = read_positions(
      pos.attr("reshape")(axes > 1 ? py::tuple(py::make_tuple(axes, 1, count)) : py::tuple(py::make_tuple(1, count))),
      1, count, axes, "positions", "cos_sin");
  const std::int64_t pairs = rope.spec().num_pairs();
  const std::int64_t width = hf ? 2 * pairs : pairs;
  shape.push_back(width);
  py::array_t<float> c(shape), s(shape);
  float* cp = c.mutable_data();
  float* sp = s.mutable_data();
  {
    py::gil_scoped_release release;
    rope.cos_sin(buffer.view, {cp, static_cast<std::size_t>(count * width)},
                 {sp, static_cast<std::size_t>(count * width)});
    if (hf) {  // spread each row of P values to [row, row], back to front in place
      for (std::int64_t t = count - 1; t >= 0; --t) {
        for (float* a : {cp, sp}) {
          const float* src = a + t * pairs;
          float* dst = a + t * width;
          std::copy_backward(src, src + pairs, dst + pairs);
          std::copy(dst, dst + pairs, dst + pairs);
        }
      }
    }
  }
  return py::make_tuple(c, s);
}

py::dict bands(const PyRope& self, std::optional<std::int64_t> context) {
  const std::int64_t ctx = context.value_or(original_context(self.spec(), 0));
  const std::vector<PairBand> b = pair_bands(self.spec(), self.plan(), ctx);
  py::array_t<std::int64_t> pair(b.size());
  py::array_t<double> inv_freq(b.size()), wavelength(b.size()), turns(b.size()), divisor(b.size());
  py::list band;
  for (std::size_t i = 0; i < b.size(); ++i) {
    pair.mutable_at(i) = b[i].pair;
    inv_freq.mutable_at(i) = b[i].inv_freq;
    wavelength.mutable_at(i) = b[i].wavelength;
    turns.mutable_at(i) = b[i].turns;
    divisor.mutable_at(i) = b[i].divisor;
    band.append(std::string(to_string(b[i].band)));
  }
  py::dict d;
  d["pair"] = pair;
  d["inv_freq"] = inv_freq;
  d["wavelength"] = wavelength;
  d["turns"] = turns;
  d["divisor"] = divisor;
  d["band"] = band;
  d["context"] = ctx;
  return d;
}

py::list verify_checks(const PyRope& self) {
  py::list out;
  for (const Check& c : verify(self.spec(), self.current_length())) {
    py::dict d;
    d["name"] = c.name;
    d["what"] = c.what;
    d["figure"] = c.figure;
    d["bound"] = c.bound;
    d["passed"] = c.passed;
    d["skipped"] = c.skipped;
    d["detail"] = c.detail;
    out.append(d);
  }
  return out;
}

std::string repr(const PyRope& r) {
  const Spec& s = r.spec();
  return fmt::format("ropekit.Rope({} {} base={:g} head_dim={} rotary_dim={}{}{}{})", rope_type_name(s.scaling),
                     to_string(s.pairing), s.base, s.head_dim, s.rotary_dim, s.mrope ? " mrope" : "",
                     r.plan().cos_sin_scale != 1.0 ? fmt::format(" cos_sin_scale={:g}", r.plan().cos_sin_scale) : "",
                     r.layer && !r.layer->layer_type.empty() ? " layer_type=" + r.layer->layer_type : "");
}

}  // namespace

}  // namespace ropekit::python

PYBIND11_MODULE(_ropekit, m) {
  using namespace ropekit;
  using namespace ropekit::python;
  namespace py = pybind11;
  m.doc() = "ropekit: rotary position embeddings that match Hugging Face, with accurate angles (C++ core)";
  m.attr("__version__") = ROPEKIT_VERSION;

  static py::exception<Error> error(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    } catch (const std::bad_alloc&) {
      throw;  // pybind11 turns it into MemoryError
    } catch (const std::filesystem::filesystem_error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  m.def(
      "vision_rope",
      [](py::handle config) {
        const std::string text =
            py::isinstance<py::dict>(config)
                ? json_text(config)
                : py::module_::import("pathlib").attr("Path")(config).attr("read_text")().cast<std::string>();
        const VisionRope v = read_vision_config(text, py::isinstance<py::dict>(config) ? "config dict" : "config.json");
        py::dict d;
        d["family"] = std::string(to_string(v.family));
        d["model_type"] = v.model_type;
        d["rope"] = std::make_shared<PyRope>(v.spec, std::nullopt, std::string("vision_config of ") + v.model_type);
        d["num_heads"] = v.num_heads;
        d["spatial_merge_size"] = v.spatial_merge_size;
        d["patch_size"] = v.patch_size;
        d["window_size"] = v.window_size;
        d["patches_per_side"] = v.patches_per_side;
        return d;
      },
      py::arg("config"),
      "A vision encoder's rotary from a multimodal config (dict or path): {'family', 'rope' (an axial Rope), "
      "'spatial_merge_size', 'patch_size', 'window_size', 'patches_per_side', ...}.");
  py::class_<PyCosSinTable>(
      m, "CosSinTable", "An engine's cos/sin cache imported by Rope.import_cos_sin_cache, for Rope.apply(..., table=)")
      .def_property_readonly("num_positions", [](const PyCosSinTable& t) { return t.table->num_positions(); });
  py::class_<PyRotateCall, std::shared_ptr<PyRotateCall>>(
      m, "RotateCall",
      "Rope.prepare's call: run() per step, set_positions() between steps (ropekit/call.hpp). Threads sharing one "
      "call run its methods one at a time.")
      .def("run", &PyRotateCall::run,
           "Rotates the prepared q (and k) and returns what Rope.apply returns; no argument is checked again")
      .def("set_positions", &PyRotateCall::set_positions, py::arg("positions"),
           "Moves the call to new positions of the same tokens, checked as prepare checks them (the call unchanged "
           "on an error)");
  py::class_<PyRope, std::shared_ptr<PyRope>>(
      m, "Rope",
      "One RoPE plan (ropekit/rope.hpp): the spec a model's config gives, its inverse frequencies and magnitudes for "
      "a current length, and the kernels that rotate query/key arrays and tensors with it. Immutable but for the "
      "deprecated set_current_length; shared freely between threads.")
      .def(py::init(&rope_from_keywords), py::arg("head_dim"), py::kw_only(), py::arg("rotary_dim") = py::none(),
           py::arg("base") = 10000.0, py::arg("pairing") = "half", py::arg("rope_scaling") = py::none(),
           py::arg("max_position_embeddings") = py::none(), py::arg("mrope_section") = py::none(),
           py::arg("mrope_interleaved") = false, py::arg("current_length") = py::none(),
           "A Rope from keywords: rope_scaling in config.json syntax (read by the config reader), pairing 'half' "
           "(HF rotate_half) or 'interleaved' (GPT-J); rotary_dim defaults to head_dim")
      .def_static(
          "from_config",
          [](py::handle config, std::optional<std::string> layer_type, std::optional<int> layer,
             std::optional<std::string> pairing) { return ropes_of(read_model(config, pairing), layer_type, layer); },
          py::arg("config"), py::kw_only(), py::arg("layer_type") = py::none(), py::arg("layer") = py::none(),
          py::arg("pairing") = py::none(),
          "The model's RoPE from its config.json (a path or a dict), resolved as transformers does; layer_type= or "
          "layer= picks one where the layers have several RoPE plans (without it such a model gives a dict "
          "{layer_type: Rope}, deprecated)")
      .def_static(
          "from_preset",
          [](const std::string& name, std::optional<std::string> layer_type, std::optional<int> layer) {
            return ropes_of(read_preset(name), layer_type, layer);
          },
          py::arg("name"), py::kw_only(), py::arg("layer_type") = py::none(), py::arg("layer") = py::none(),
          "The RoPE of a built-in preset (ropekit.presets()), as from_config gives it")
      .def_static(
          "from_gguf",
          [](py::handle path, std::optional<std::string> layer_type, std::optional<int> layer,
             std::optional<std::string> pairing) {
            const auto p = py::module_::import("os").attr("fspath")(path).cast<std::string>();
            return ropes_of(read_gguf_file(p, config_options(pairing)), layer_type, layer);
          },
          py::arg("path"), py::kw_only(), py::arg("layer_type") = py::none(), py::arg("layer") = py::none(),
          py::arg("pairing") = py::none(),
          "The RoPE of a GGUF file's llama.cpp metadata (only the header is read), as from_config gives it")
      .def_property_readonly("head_dim", [](const PyRope& r) { return r.spec().head_dim; })
      .def_property_readonly("rotary_dim", [](const PyRope& r) { return r.spec().rotary_dim; })
      .def_property_readonly("num_pairs", [](const PyRope& r) { return r.spec().num_pairs(); })
      .def_property_readonly("pairing", [](const PyRope& r) { return std::string(to_string(r.spec().pairing)); })
      .def_property_readonly("rope_type", [](const PyRope& r) { return std::string(rope_type_name(r.spec().scaling)); })
      .def_property_readonly("spec", [](const PyRope& r) { return spec_dict(r.spec()); })
      .def_property_readonly("layer",
                             [](const PyRope& r) { return r.layer ? py::object(layer_dict(*r.layer)) : py::none(); })
      .def_property_readonly("inv_freq",
                             [](const PyRope& r) {
                               const auto& f = r.plan().inv_freq;
                               py::array_t<float> a(f.size());
                               for (std::size_t i = 0; i < f.size(); ++i) a.mutable_at(i) = static_cast<float>(f[i]);
                               return a;
                             })
      .def_property_readonly(
          "inv_freq64",
          [](const PyRope& r) { return py::array_t<double>(r.plan().inv_freq.size(), r.plan().inv_freq.data()); })
      .def_property_readonly("cos_sin_scale", [](const PyRope& r) { return r.plan().cos_sin_scale; })
      .def_property_readonly("softmax_scale_mult", [](const PyRope& r) { return r.plan().softmax_scale_mult; })
      .def_property_readonly("current_length", &PyRope::current_length)
      .def_property_readonly("uses_long_factors", [](const PyRope& r) { return r.plan().uses_long_factors; })
      .def_property_readonly("depends_on_length", [](const PyRope& r) { return depends_on_length(r.spec()); })
      .def("set_current_length", &PyRope::set_current_length, py::arg("length"),
           "Deprecated: re-plans this Rope in place for a current length (dynamic NTK, LongRoPE) and returns whether "
           "the plan changed; take RopeSet(rope).at(length) instead")
      .def("bands", &bands, py::arg("context") = py::none(),
           "Each pair's frequency band for a context length: wavelength, rotations over the context and whether the "
           "scaling keeps, blends or interpolates it (ropekit/analysis.hpp)")
      .def("export_cos_sin_cache", &cos_sin_cache, py::arg("num_positions"), py::kw_only(),
           py::arg("angles") = "accurate",
           "ropekit's coefficients in vLLM's cos_sin_cache layout: float32 [num_positions, rotary_dim], m·cos half "
           "then m·sin half (FlashInfer takes the same)")
      // The name until 2026-11-29, kept for one version (docs/conventions.md): a DeprecationWarning, then the export.
      .def(
          "cos_sin_cache",
          [](const PyRope& self, std::int64_t num_positions, std::string_view angles) {
            if (PyErr_WarnEx(PyExc_DeprecationWarning, "Rope.cos_sin_cache is renamed export_cos_sin_cache", 1) != 0) {
              throw py::error_already_set();
            }
            return cos_sin_cache(self, num_positions, angles);
          },
          py::arg("num_positions"), py::kw_only(), py::arg("angles") = "accurate",
          "Deprecated name of export_cos_sin_cache (until 2026-11-29): warns, then exports")
      .def("check_cos_sin_cache", &check_cache, py::arg("cache"), py::kw_only(), py::arg("tolerance") = 1e-6,
           "How far an engine's cos/sin cache is from the accurate angles: a dict of max_error, worst_position, "
           "worst_pair, worst_is_sin, first_position_over (the first row past tolerance, -1 if none), accurate_bound")
      .def("import_cos_sin_cache", &import_cache, py::arg("cache"),
           "An engine's float32 [n, rotary_dim] cos/sin cache copied once into a CosSinTable, which apply(..., "
           "table=) and the caches' append/attention then rotate with, value for value")
      .def("cos_sin", &cos_sin, py::arg("positions"), py::kw_only(), py::arg("layout") = "hf",
           py::arg("angles") = "accurate",
           "float32 (cos, sin) of shape positions.shape + (width,): layout 'hf' is HF's duplicated rotary_dim-wide "
           "row, 'half' flash-attn's rotary_dim/2 values; the magnitude included as HF includes it; M-RoPE positions "
           "[3, ...] give each pair its stream's value")
      .def("apply", &apply, py::arg("q"), py::arg("k") = py::none(), py::arg("positions") = py::none(), py::kw_only(),
           py::arg("layout") = "bshd", py::arg("inplace") = true, py::arg("direction") = "forward",
           py::arg("angles") = "accurate", py::arg("dtype") = "", py::arg("threads") = 0,
           py::arg("table") = static_cast<const PyCosSinTable*>(nullptr),
           "Rotates q (and k) at positions (None: 0 … seq-1): NumPy arrays, torch CPU or CUDA tensors in layout "
           "'bshd', 'bhsd' or 'thd'; in place by default, direction 'forward', 'inverse' or 'backward'; angles "
           "'accurate' (correctly rounded) or 'hf' (HF's float32 angles). Returns (q, k), or the one given — the "
           "same objects when in place. Float32 arithmetic, one rounding to storage (docs/numerics.md)")
      .def("prepare", &prepare, py::arg("q"), py::arg("k") = py::none(), py::arg("positions") = py::none(),
           py::kw_only(), py::arg("layout") = "bshd", py::arg("inplace") = true, py::arg("direction") = "forward",
           py::arg("angles") = "accurate", py::arg("dtype") = "", py::arg("threads") = 0,
           py::arg("table") = static_cast<const PyCosSinTable*>(nullptr),
           "apply()'s call validated and resolved once (ropekit/call.hpp's RotateCall): run() rotates (and returns "
           "what apply returns), set_positions(positions) moves it to new positions of the same tokens")
      .def("verify", &verify_checks,
           "`ropekit verify`'s self-checks of this RoPE against each function's contract (angles vs a float64 "
           "oracle, inverse∘forward, K-shift, fused attention, ...): dicts of name, what, figure, bound, passed, "
           "skipped, detail")
      .def(
          "decay_bound",
          [](const PyRope& r, std::int64_t max_distance) {
            const std::vector<double> d = decay_bound(r.plan(), max_distance);
            return py::array_t<double>(d.size(), d.data());
          },
          py::arg("max_distance"),
          "RoFormer's long-term decay bound (1/(d/2))·Σ|S_j| for relative distances 0 … max_distance, as float64 "
          "(ropekit/analysis.hpp)")
      .def("__repr__", &repr);

  py::class_<PyModelPositions>(m, "ModelPositions",
                               "A model's positional encoding, layer by layer, read from its config.json, a preset or "
                               "a GGUF file (ropekit/model_positions.hpp); layer(type) / at_layer(i) give its Ropes.")
      .def_static(
          "from_config",
          [](py::handle config, std::optional<std::string> pairing) {
            return PyModelPositions(read_model(config, pairing));
          },
          py::arg("config"), py::kw_only(), py::arg("pairing") = py::none(),
          "A model's positions from its config.json (a path or a dict), resolved as transformers does")
      .def_static(
          "from_preset", [](const std::string& name) { return PyModelPositions(read_preset(name)); }, py::arg("name"),
          "A built-in preset's positions (ropekit.presets())")
      .def_static(
          "from_gguf",
          [](py::handle path, std::optional<std::string> pairing) {
            const auto p = py::module_::import("os").attr("fspath")(path).cast<std::string>();
            return PyModelPositions(read_gguf_file(p, config_options(pairing)));
          },
          py::arg("path"), py::kw_only(), py::arg("pairing") = py::none(),
          "A GGUF file's positions from its llama.cpp metadata (only the header is read)")
      .def_property_readonly("source", [](const PyModelPositions& p) { return p.get().source; })
      .def_property_readonly("model_type", [](const PyModelPositions& p) { return p.get().model_type; })
      .def_property_readonly("family", [](const PyModelPositions& p) { return p.get().family; })
      .def_property_readonly("num_layers", [](const PyModelPositions& p) { return p.get().num_layers; })
      .def_property_readonly("layer_types", [](const PyModelPositions& p) { return p.get().layer_types; })
      .def_property_readonly("warnings", [](const PyModelPositions& p) { return p.get().warnings; })
      .def_property_readonly("rope_layer_types",
                             [](const PyModelPositions& p) {
                               std::vector<std::string> out;
                               for (const LayerPositions* g : p.get().rope_groups()) out.push_back(g->layer_type);
                               return out;
                             })
      .def("layer", &PyModelPositions::layer, py::arg("layer_type") = py::none(),
           "The Rope of a layer type (None: the only RoPE layer type)")
      .def("at_layer", &PyModelPositions::at_layer, py::arg("index"), "The Rope of layer `index`")
      .def("ropes", &PyModelPositions::ropes, "{layer type: Rope} for every RoPE layer type, in first-use order")
      .def(
          "to_dict", [](const PyModelPositions& p) { return positions_dict(p.get()); },
          "What ropekit.model_positions returns: every group's facts as a dict")
      .def("__repr__", [](const PyModelPositions& p) {
        return fmt::format("ropekit.ModelPositions({}, {} layers, {} groups)", p.get().source, p.get().num_layers,
                           p.get().groups.size());
      });
  m.def(
      "model_positions",
      [](py::handle config, std::optional<std::string> pairing) { return positions_dict(read_model(config, pairing)); },
      py::arg("config"), py::kw_only(), py::arg("pairing") = py::none(),
      "A model's per-layer positional plan (docs/config.md) from its config.json (a path or a dict), as a dict");
  m.def(
      "model_positions_preset", [](const std::string& name) { return positions_dict(read_preset(name)); },
      py::arg("name"), "model_positions of a built-in preset");
  m.def(
      "model_positions_gguf",
      [](py::handle path) {
        return positions_dict(read_gguf_file(py::module_::import("os").attr("fspath")(path).cast<std::string>()));
      },
      py::arg("path"), "model_positions of a GGUF file's llama.cpp metadata");
  m.def(
      "presets",
      [] {
        py::list out;
        for (const Preset& p : presets()) {
          py::dict d;
          d["name"] = std::string(p.name);
          d["model"] = std::string(p.model);
          out.append(d);
        }
        return out;
      },
      "The built-in presets (docs/config.md) as dicts of name and model");
  m.def(
      "model_families",
      [] {
        py::list out;
        for (const ModelFamily& f : model_families()) {
          py::dict d;
          d["model_type"] = std::string(f.model_type);
          d["family"] = std::string(f.family);
          d["pairing"] = std::string(to_string(f.pairing));
          d["source"] = std::string(f.source);
          d["remote_code"] = f.remote_code;
          out.append(d);
        }
        return out;
      },
      "The model table (docs/config.md): every model_type read with its family's rules, as dicts of model_type, "
      "family, pairing, source (the modeling file read) and remote_code");
  m.def("scaling_variants", &scaling_variants,
        "Every scaling variant's description: rope_type, formula, and each field's config key, source "
        "(rope, model, file) and presence (required, default, optional)");
  m.def("simd_target", &simd_target, "The SIMD target the kernels run on (the CPU's best unless set_simd_target)");
  m.def("simd_targets", &simd_targets, "Every SIMD target this CPU runs and the build compiled, best first");
  m.def(
      "set_simd_target", [](const std::string& name) { set_simd_target(name); }, py::arg("name"),
      "Restricts calls prepared from now on to one of simd_targets() (every target gives the same bits); '' "
      "restores the best");
  m.def("default_threads", &default_threads, "How many threads a call with threads=0 uses");
  m.def("set_default_threads", &set_default_threads, py::arg("threads"),
        "Sets how many threads a call with threads=0 uses (>= 1)");
  m.def("_time_apply", &time_apply, py::arg("rope"), py::arg("q"), py::arg("k"), py::arg("positions"),
        py::arg("layout"), py::arg("iterations"), py::arg("threads") = 0);

  bind_rope_set(m);
  bind_consumers(m);
  bind_kv_caches(m);
  bind_model(m);
  bind_positions(m);
  bind_torch_abi(m, error);
  bind_append(m);
}
