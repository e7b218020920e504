// python/torch_ops/ops.cpp — ropekit::rotate and ropekit::rotate_ registered in C++ (TORCH_LIBRARY), the operator
// library ropekit.ops loads when it was built against the running PyTorch.
//
// Why C++: registered from Python (torch.library), each call crossed the dispatcher's Python layers twice — about
// 20 µs at decode where the rotation takes 0.6 µs (docs/performance.md). Here the CPU kernel, the autograd kernel
// (the backward is the transpose rotation, as ropekit.ops documents) and the in-place op's version-counter handling
// are C++; only the fake (meta) implementations stay in Python (ropekit/ops.py), which torch.compile calls while
// tracing, never per call.
//
// The library does not contain ropekit: it describes the tensors in torch_abi.h's plain structs and calls the
// Python extension's rotation (bound once by ropekit_torch_bind), so there is one core and one registry of handles.
// A bad argument raises ropekit.Error with the core's message, as the Python registration did.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "torch_abi.h"

namespace {

// The Python extension's table (set by ropekit_torch_bind).
const rk_torch_abi* bound = nullptr;

// ropekit.Error(message) raised through the dispatcher (torch's handlers restore a persisted Python exception).
[[noreturn]] void raise(const std::string& message) {
  TORCH_CHECK(bound != nullptr, "ropekit: the operator library is not bound (import ropekit.ops)");
  bound->raise_error(message.c_str());
  python_error error;
  error.persist();
  throw error;
}

rk_abi_tensor absent() {
  rk_abi_tensor t{};
  t.ndim = RK_ABI_ABSENT;
  return t;
}

// A dtype as Python spells it (torch.float64), as the extension's messages do, so eager calls, fakes and the Python
// registration refuse in the same words.
std::string dtype_name(at::ScalarType type) { return "torch." + c10::getDtypeNames(type).first; }

rk_abi_tensor describe(const at::Tensor& t, const char* name) {
  if (!t.device().is_cpu()) {
    raise(std::string(name) + ": a tensor on " + t.device().str() +
          " where the other operands are CPU tensors; every tensor of a call is on one device");
  }
  rk_abi_tensor d{};
  switch (t.scalar_type()) {
    case at::kFloat: d.dtype = RK_ABI_F32; break;
    case at::kBFloat16: d.dtype = RK_ABI_BF16; break;
    case at::kHalf: d.dtype = RK_ABI_F16; break;
    case at::kInt: d.dtype = RK_ABI_I32; break;
    case at::kLong: d.dtype = RK_ABI_I64; break;
    default:
      raise(std::string(name) + ": dtype " + dtype_name(t.scalar_type()) +
            " is not supported (torch.float32, torch.float16, torch.bfloat16; positions int32 or int64)");
  }
  if (t.dim() > 8) raise(std::string(name) + ": " + std::to_string(t.dim()) + " dimensions; at most 8");
  d.ndim = static_cast<int32_t>(t.dim());
  d.data = t.data_ptr();
  for (int64_t i = 0; i < t.dim(); ++i) {
    d.shape[i] = t.size(i);
    d.strides[i] = t.stride(i);
  }
  return d;
}

bool is_float(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

// The check the ABI cannot make from plain structs (its storage and index codes are two numberings): dtypes by role.
// Everything else, q and k in one storage type included, is the extension's (python/src/torch_abi.cpp), which the
// operators' fakes run too.
void check_types(const at::Tensor& q, const std::optional<at::Tensor>& k, const std::optional<at::Tensor>& positions) {
  const std::pair<const char*, const at::Tensor*> operands[] = {{"q", &q}, {"k", k ? &*k : nullptr}};
  for (const auto& [name, t] : operands) {
    if (t != nullptr && !is_float(*t)) {
      raise(std::string(name) + ": dtype " + dtype_name(t->scalar_type()) +
            " is not supported (torch.float32, torch.float16, torch.bfloat16)");
    }
  }
  if (positions && positions->scalar_type() != at::kInt && positions->scalar_type() != at::kLong) {
    raise(std::string("positions: dtype ") + dtype_name(positions->scalar_type()) + ": must be int32 or int64");
  }
}

void run(rk_abi_rotate& call, c10::string_view layout, c10::string_view direction, c10::string_view angles,
         const std::optional<at::Tensor>& positions) {
  TORCH_CHECK(bound != nullptr, "ropekit: the operator library is not bound (import ropekit.ops)");
  // NUL-terminated copies for the C side (short strings: no allocation).
  const std::string layout_text(layout), direction_text(direction), angles_text(angles);
  call.layout = layout_text.c_str();
  call.direction = direction_text.c_str();
  call.angles = angles_text.c_str();
  at::Tensor dense_positions;
  if (positions) {
    dense_positions = positions->contiguous();
    call.positions = describe(dense_positions, "positions");
  } else {
    call.positions = absent();
  }
  char error[1024];
  const int rc = bound->rotate(&call, error, sizeof error);
  if (rc == 1) raise(error);
  TORCH_CHECK(rc == 0, "ropekit: ", error);
}

std::vector<at::Tensor> rotate_cpu(const at::Tensor& q, const std::optional<at::Tensor>& k,
                                   const std::optional<at::Tensor>& positions, int64_t rope, c10::string_view layout,
                                   c10::string_view direction, c10::string_view angles) {
  check_types(q, k, positions);
  // Outputs are contiguous whatever the inputs' strides (the fake implementation says the same).
  std::vector<at::Tensor> out{at::empty(q.sizes(), q.options())};
  if (k) out.push_back(at::empty(k->sizes(), k->options()));
  rk_abi_rotate call{};
  call.rope = rope;
  call.q = describe(q, "q");
  call.k = k ? describe(*k, "k") : absent();
  call.q_out = describe(out[0], "q_out");
  call.k_out = k ? describe(out[1], "k_out") : absent();
  call.threads = 0;
  call.cuda_device = -1;  // host memory (CUDA tensors dispatch to ropekit.ops' CUDA kernel)
  run(call, layout, direction, angles, positions);
  return out;
}

void rotate_inplace_cpu(const at::Tensor& q, const std::optional<at::Tensor>& k,
                        const std::optional<at::Tensor>& positions, int64_t rope, c10::string_view layout,
                        c10::string_view direction, c10::string_view angles) {
  check_types(q, k, positions);
  rk_abi_rotate call{};
  call.rope = rope;
  call.q = describe(q, "q");
  call.k = k ? describe(*k, "k") : absent();
  call.q_out = absent();
  call.k_out = absent();
  call.threads = 0;
  call.cuda_device = -1;  // host memory (CUDA tensors dispatch to ropekit.ops' CUDA kernel)
  run(call, layout, direction, angles, positions);
}

// The backward of a rotation is its transpose: "forward" ↔ "backward" (ropekit's Direction), same angles.
class Rotate : public torch::autograd::Function<Rotate> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                                                const std::optional<at::Tensor>& k,
                                                const std::optional<at::Tensor>& positions, int64_t rope,
                                                c10::string_view layout, c10::string_view direction,
                                                c10::string_view angles) {
    ctx->saved_data["rope"] = rope;
    ctx->saved_data["layout"] = std::string(layout);
    ctx->saved_data["direction"] = std::string(direction);
    ctx->saved_data["angles"] = std::string(angles);
    ctx->saved_data["has_k"] = k.has_value();
    ctx->saved_data["has_positions"] = positions.has_value();
    ctx->saved_data["q_shape"] = q.sizes().vec();
    ctx->saved_data["k_shape"] = k ? k->sizes().vec() : std::vector<int64_t>{};
    ctx->saved_data["dtype"] = q.scalar_type();
    ctx->saved_data["device"] = q.device();
    if (positions) ctx->save_for_backward({*positions});
    at::AutoDispatchBelowADInplaceOrView guard;
    return call(q, k, positions, rope, layout, direction, angles);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::string direction = ctx->saved_data["direction"].toStringRef();
    if (direction != "forward" && direction != "backward") {
      raise("direction = \"" + direction +
            "\": the inverse rotation has no ropekit transpose; differentiate direction \"forward\" or \"backward\"");
    }
    const bool has_k = ctx->saved_data["has_k"].toBool();
    std::optional<at::Tensor> positions;
    if (ctx->saved_data["has_positions"].toBool()) positions = ctx->get_saved_variables()[0];
    // A gradient autograd does not hand over (an unused output) is zero; expanded (stride-0) ones are made dense.
    const auto options =
        at::TensorOptions().dtype(ctx->saved_data["dtype"].toScalarType()).device(ctx->saved_data["device"].toDevice());
    const auto dense = [&](const at::Tensor& g, const char* shape) {
      return g.defined() ? g.contiguous() : at::zeros(ctx->saved_data[shape].toIntVector(), options);
    };
    at::Tensor gq = dense(grads[0], "q_shape");
    std::optional<at::Tensor> gk;
    if (has_k) gk = dense(grads[1], "k_shape");
    const std::string layout = ctx->saved_data["layout"].toStringRef();
    const std::string angles = ctx->saved_data["angles"].toStringRef();
    const std::vector<at::Tensor> out = call(gq, gk, positions, ctx->saved_data["rope"].toInt(), layout,
                                             direction == "forward" ? "backward" : "forward", angles);
    return {out[0],      has_k ? out[1] : at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }

  // Through the dispatcher, so that tracing (fake tensors, torch.compile) reaches the fake implementation.
  static std::vector<at::Tensor> call(const at::Tensor& q, const std::optional<at::Tensor>& k,
                                      const std::optional<at::Tensor>& positions, int64_t rope, c10::string_view layout,
                                      c10::string_view direction, c10::string_view angles) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("ropekit::rotate", "")
                               .typed<std::vector<at::Tensor>(const at::Tensor&, const std::optional<at::Tensor>&,
                                                              const std::optional<at::Tensor>&, int64_t,
                                                              c10::string_view, c10::string_view, c10::string_view)>();
    return op.call(q, k, positions, rope, layout, direction, angles);
  }
};

std::vector<at::Tensor> rotate_autograd(const at::Tensor& q, const std::optional<at::Tensor>& k,
                                        const std::optional<at::Tensor>& positions, int64_t rope,
                                        c10::string_view layout, c10::string_view direction, c10::string_view angles) {
  // Without a gradient to record, skip the autograd node: building it (its saved arguments) cost about 4 µs per
  // call, more than the decode step's rotation and every other layer of the call together.
  if (!torch::autograd::GradMode::is_enabled() || !(q.requires_grad() || (k && k->requires_grad()))) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return Rotate::call(q, k, positions, rope, layout, direction, angles);
  }
  return Rotate::apply(q, k, positions, rope, layout, direction, angles);
}

}  // namespace

// Called once by ropekit.ops with the Python extension's table; 0 when bound, else the ABI version this library
// expects (the two were built from different sources: ropekit.ops then keeps the Python registration).
extern "C" __attribute__((visibility("default"))) int ropekit_torch_bind(const rk_torch_abi* table) {
  if (table == nullptr || table->version != ROPEKIT_TORCH_ABI_VERSION) return ROPEKIT_TORCH_ABI_VERSION;
  bound = table;
  return 0;
}

TORCH_LIBRARY_FRAGMENT(ropekit, m) {
  // The fake implementations are in this Python module; torch imports it when tracing needs them.
  m.set_python_module("ropekit.ops");
  m.def("rotate(Tensor q, Tensor? k, Tensor? positions, int rope, str layout, str direction, str angles) -> Tensor[]");
  m.def(
      "rotate_(Tensor(a!) q, Tensor(b!)? k, Tensor? positions, int rope, str layout, str direction, str angles) -> "
      "()");
}

TORCH_LIBRARY_IMPL(ropekit, CPU, m) {
  m.impl("rotate", &rotate_cpu);
  m.impl("rotate_", &rotate_inplace_cpu);
}

TORCH_LIBRARY_IMPL(ropekit, Autograd, m) {
  m.impl("rotate", &rotate_autograd);
  // In place: no derivative; the fallback raises when one is needed and keeps autograd's view and version rules.
  m.impl("rotate_", torch::autograd::autogradNotImplementedFallback());
}

TORCH_LIBRARY_IMPL(ropekit, ADInplaceOrView, m) {
  m.impl("rotate_", torch::autograd::autogradNotImplementedInplaceOrViewFallback());
}
