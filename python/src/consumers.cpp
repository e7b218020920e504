// python/src/consumers.cpp — attention from Python: softmax attention with RoPE fused and linear attention (arrays in,
// a new float32 array out), and the timing helper the benchmarks call. (The KV caches: kv_caches.cpp; the model
// runner, tokenizer and lab: model.cpp.)
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

py::object attention_impl(const PyRope* py_rope, py::handle q_obj, py::handle k_obj, py::handle v_obj,
                          py::handle q_positions, py::handle k_positions, std::string_view layout_text, bool causal,
                          std::int64_t window, std::optional<double> softmax_scale,
                          std::optional<std::vector<float>> alibi, std::string_view angles, bool linear,
                          std::string_view form, const PyCosSinTable* table = nullptr) {
  const Layout layout = parse_layout(layout_text);
  const std::shared_ptr<const Rope> rope_held = py_rope ? py_rope->rope(parse_angles(angles)) : nullptr;
  const Rope* rope = rope_held.get();
  const Array q = float_array(q_obj, "q", ""), k = float_array(k_obj, "k", ""), v = float_array(v_obj, "v", "");
  const int head_dim = rope ? rope->spec().head_dim : static_cast<int>(q.shape[q.ndim - 1]);
  AttentionArgs args;
  args.q = heads_view(q, layout, head_dim, "q");
  args.k = heads_view(k, layout, head_dim, "k");
  args.v = heads_view(v, layout, 0, "v");
  const std::int64_t v_head_dim = v.shape[v.ndim - 1];
  args.head_dim = head_dim;
  args.v_head_dim = static_cast<int>(v_head_dim);
  const Array out = empty_f32(q, out_shape(q, v_head_dim), "out");
  args.out = heads_view(out, layout, static_cast<int>(v_head_dim), "out");
  const int axes = rope ? rope->pair_map().num_axes : 1;
  const PositionsBuffer qp = read_positions(q_positions, args.q.batch, args.q.seq, axes, "q_positions", "q");
  const PositionsBuffer kp = read_positions(k_positions, args.k.batch, args.k.seq, axes, "k_positions", "k");
  args.q_positions = qp.view;
  args.k_positions = kp.view;
  if (linear) {
    if (!rope) throw Error("linear_attention: needs a rope");
    LinearAttentionForm f;
    if (form == "recurrent")
      f = LinearAttentionForm::Recurrent;
    else if (form == "parallel")
      f = LinearAttentionForm::Parallel;
    else
      throw Error(fmt::format("form = \"{}\": must be \"recurrent\" or \"parallel\"", form));
    py::gil_scoped_release release;
    linear_attention(*rope, args, causal, f);
    return out.owner;
  }
  AttentionOptions options;
  options.causal = causal;
  options.window = window;
  options.softmax_scale = softmax_scale;
  if (alibi) options.bias = AlibiBias{*alibi};
  options.table = table_of(table);
  {
    py::gil_scoped_release release;
    rope ? attention(*rope, args, options) : attention(args, options);
  }
  return out.owner;
}

}  // namespace

double time_apply(const PyRope& py_rope, py::handle q_obj, py::handle k_obj, py::handle positions,
                  std::string_view layout_text, std::int64_t iterations, int threads) {
  const Layout layout = parse_layout(layout_text);
  const std::shared_ptr<const Rope> rope_held = py_rope.rope(AngleMode::Accurate);
  const Rope& rope = *rope_held;
  const Array q = float_array(q_obj, "q", ""), k = float_array(k_obj, "k", "");
  RotateArgs args;
  args.q = heads_view(q, layout, rope.spec().head_dim, "q");
  args.k = heads_view(k, layout, rope.spec().head_dim, "k");
  args.threads = threads;
  const PositionsBuffer pos = read_positions(positions, args.q.batch, args.q.seq, 1, "positions", "q");
  args.positions = pos.view;
  py::gil_scoped_release release;
  rope.apply(args);  // warm: the table
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < iterations; ++i) rope.prepare(args).run();
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  return ns / static_cast<double>(std::max<std::int64_t>(iterations, 1));
}

void bind_consumers(py::module_& m) {
  const auto* const kNoTable = static_cast<const PyCosSinTable*>(nullptr);  // table=None: the Rope's angles
  m.def(
      "attention",
      [](py::handle q, py::handle k, py::handle v, const PyRope* rope, py::handle qp, py::handle kp,
         std::string_view layout, bool causal, std::int64_t window, std::optional<double> scale,
         std::optional<std::vector<float>> alibi, std::string_view angles, const PyCosSinTable* table) {
        return attention_impl(rope, q, k, v, qp, kp, layout, causal, window, scale, std::move(alibi), angles, false, "",
                              table);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("rope") = nullptr, py::arg("q_positions") = py::none(),
      py::arg("k_positions") = py::none(), py::kw_only(), py::arg("layout") = "bshd", py::arg("causal") = true,
      py::arg("window") = 0, py::arg("softmax_scale") = py::none(), py::arg("alibi_slopes") = py::none(),
      py::arg("angles") = "accurate", py::arg("table") = kNoTable,
      "Softmax attention (ropekit/attention.hpp) with RoPE fused into the Q/K loads (rope None: no rotation): GQA/MQA, "
      "causal by position, window > 0 a sliding window, ALiBi slopes; float32 arithmetic, bit-identical to "
      "Rope.apply followed by attention on the rotated copies");
  m.def(
      "linear_attention",
      [](const PyRope& rope, py::handle q, py::handle k, py::handle v, py::handle qp, py::handle kp,
         std::string_view layout, bool causal, std::string_view form, std::string_view angles) {
        return attention_impl(&rope, q, k, v, qp, kp, layout, causal, 0, std::nullopt, std::nullopt, angles, true,
                              form);
      },
      py::arg("rope"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("q_positions") = py::none(),
      py::arg("k_positions") = py::none(), py::kw_only(), py::arg("layout") = "bshd", py::arg("causal") = true,
      py::arg("form") = "recurrent", py::arg("angles") = "accurate",
      "RoFormer's linear attention with RoPE (ropekit/linear_attention.hpp), in the 'recurrent' or 'parallel' "
      "form");
}

}  // namespace ropekit::python
