// python/src/arrays.hpp — NumPy arrays and PyTorch CPU tensors as ropekit views, without copies.
//
// The binding never copies q or k: it reads the caller's data pointer, shape and strides and hands
// them to ropekit's Heads views (which take any non-negative strides with a contiguous head_dim
// axis). What a view cannot express — negative strides, a strided head_dim axis, byte strides that are
// not whole elements, a tensor off the CPU — is a ropekit.Error naming the argument, never a silent
// copy. Positions are read-only inputs: they are copied when that is what it takes to give one per
// token (broadcast over the batch, non-contiguous, Python lists).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ropekit/rope.hpp"
#include "ropekit/tensor.hpp"

namespace ropekit::python {

namespace py = pybind11;

enum class Framework { NumPy, Torch };

// One array's memory as ropekit sees it: element strides, a storage type.
struct Array {
  py::object owner;  // keeps the caller's array alive while the view is used
  Framework framework = Framework::NumPy;
  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<std::int64_t, 8> shape{};
  std::array<std::int64_t, 8> strides{};  // elements
  bool writable = true;

  std::string shape_text() const;
};

// `dtype` is the caller's storage override: "bf16" reads a NumPy uint16 array as bfloat16 bits.
// Errors name `name`: an unsupported dtype, a tensor off the CPU or requiring grad (under grad mode),
// byte strides that are not whole elements, negative strides, more than 8 dimensions.
Array float_array(py::handle object, std::string_view name, std::string_view dtype);
// A torch tensor in the memory of CUDA device `cuda_device` (the host reads none of it), as float_array reads a CPU
// one.
Array device_float_array(py::handle object, std::string_view name, int cuda_device);
// A torch tensor whose is_cuda is True (Rope.apply hands those to the torch operators' device path, ropekit/_cuda.py).
bool is_cuda_tensor(py::handle object);

// A new C-contiguous array of the same framework, shape and dtype as `like`.
Array empty_like(const Array& like, std::string_view name);
// A new float32 C-contiguous array of `shape` in the framework of `like`.
Array empty_f32(const Array& like, const std::vector<std::int64_t>& shape, std::string_view name);
// The shape of an attention output: q's layout with v_head_dim lanes.
std::vector<std::int64_t> out_shape(const Array& q, std::int64_t v_head_dim);

enum class Layout { BSHD, BHSD, THD };
Layout parse_layout(std::string_view text);
std::string_view to_string(Layout layout);

// The Heads view of an array in `layout`; head_dim = 0 takes the array's own last axis. Errors name
// `name`: the rank the layout needs, the head_dim axis (its size and stride 1).
Heads heads_view(const Array& array, Layout layout, int head_dim, std::string_view name);

// The views of one rotation (Rope.apply and the PyTorch operators): q and k (either may be null, not both) and
// their outputs (null: in place) in `layout`, checked against the rope's head_dim and against each other (the same
// tokens). Positions, direction and threads are the caller's to set. No Python.
RotateArgs rotation_views(const Rope& rope, const Array* q, const Array* k, const Array* q_out, const Array* k_out,
                          std::string_view layout);

// Positions for `batch` × `seq` tokens with `axes` streams, from None (0, 1, …, seq−1 in every batch
// row), an int32/int64 NumPy array or torch tensor, an int or a sequence of ints. Accepted shapes
// (after a leading 3 for M-RoPE): [batch, seq], [1, seq] and [seq] (the last two broadcast over the
// batch); with batch = 1 also any shape holding exactly seq values per stream.
struct PositionsBuffer {
  Positions view;
  py::object keep;                  // the caller's array, when read in place
  std::vector<std::int64_t> owned;  // when built or broadcast here
};
PositionsBuffer read_positions(py::handle object, std::int64_t batch, std::int64_t seq, int axes, std::string_view name,
                               std::string_view for_what);

// The same mapping from integer data already read (C-contiguous, `shape` as given, M-RoPE's leading streams
// included): a view of `data` when it holds one value per token, else a broadcast copy in `owned`; data = null is
// None (0, 1, …, seq−1 in every batch row). No Python.
PositionsBuffer map_positions(const void* data, IndexType type, const std::vector<std::int64_t>& shape,
                              std::int64_t batch, std::int64_t seq, int axes, std::string_view name,
                              std::string_view for_what);

// Device positions (or a slot mapping: axes = 1) of `shape`: the shapes map_positions accepts for host ones, less
// the broadcasts and None — one value per token, since the host reads none of them and a broadcast would be a device
// copy. Returns {null, I64, batch·seq, axes}: the caller fills in the data and its type.
Positions device_positions_shape(const std::vector<std::int64_t>& shape, std::int64_t batch, std::int64_t seq, int axes,
                                 std::string_view name, std::string_view for_what);

// An int64 NumPy array of `values` with `shape` (no copy of the vector's data is kept elsewhere).
py::array_t<std::int64_t> int64_array(std::vector<std::int64_t> values, std::vector<py::ssize_t> shape);

}  // namespace ropekit::python
