// python/src/torch_abi.h — the calls the PyTorch operator library (python/torch_ops/, built against one libtorch)
// makes into the Python extension (python/src/, which holds the Ropes the operators' `rope` handles name).
//
// Why two libraries: the extension must import without PyTorch (NumPy users, Debian's PyTorch 1.13), while the
// operators must be C++ (TORCH_LIBRARY) to cost what an ATen op costs — the Python registration spends far more per
// call in the dispatcher's Python layers (docs/performance.md). The operator library links libtorch but not ropekit;
// it translates at::Tensor into the plain descriptions below and calls these functions, so there is one copy of the
// core and one registry of handles in the process. Plain C: the two sides are built by different builds (the wheel,
// a CMake tree) and only agree on this header and its version number.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ROPEKIT_TORCH_ABI_VERSION 3
#define RK_ABI_ABSENT (-1)

// Storage of a floating-point operand; positions are int32 or int64. The C API's numbering (rk_dtype,
// rk_index_type in ropekit/ropekit.h: one set of codes across the fronts), restated here because the operator
// library is built without ropekit's headers; python/src/torch_abi.cpp checks that the two agree.
enum { RK_ABI_F32 = 1, RK_ABI_BF16 = 2, RK_ABI_F16 = 3 };
enum { RK_ABI_I32 = 1, RK_ABI_I64 = 2 };

// A tensor: its data pointer (host memory, or device memory on the call's CUDA device), shape and strides in
// elements (as at::Tensor::strides gives them).
typedef struct {
  void* data;  // may be null when the tensor has no elements
  int32_t dtype;
  int32_t ndim;  // at most 8; -1: absent (an optional argument given None)
  int64_t shape[8];
  int64_t strides[8];
} rk_abi_tensor;

typedef struct {
  int64_t rope;                // a handle from ropekit.ops.handle
  const char* layout;          // "bshd", "bhsd", "thd"
  const char* direction;       // "forward", "inverse", "backward"
  const char* angles;          // "accurate", "hf"
  rk_abi_tensor q, k;          // either may be absent, not both
  rk_abi_tensor q_out, k_out;  // absent: in place
  rk_abi_tensor positions;     // C-contiguous int32/int64; absent: 0, 1, ... per sequence
  int32_t threads;             // 0: the library's default
  // -1: every tensor is in host memory. Otherwise every tensor, positions included, is in the memory of this CUDA
  // device, and the rotation is launched asynchronously on `stream` (a cudaStream_t of that device; null: its
  // legacy default stream): ropekit::cuda::DeviceRope::rotate, errors in positions reported by cuda_check.
  int32_t cuda_device;
  void* stream;
} rk_abi_rotate;

typedef struct {
  int32_t version;  // ROPEKIT_TORCH_ABI_VERSION
  // 0 on success; otherwise 1 for a ropekit::Error (bad input), 2 for anything else, with the message written to
  // `error` (truncated to `error_size`). Thread-safe; needs no GIL.
  int (*rotate)(const rk_abi_rotate* call, char* error, size_t error_size);
  // Sets ropekit.Error(message) as the calling thread's Python exception (takes the GIL itself), so that the operator
  // library can throw it through the dispatcher as the Python layers did.
  void (*raise_error)(const char* message);
} rk_torch_abi;

#ifdef __cplusplus
}
#endif
