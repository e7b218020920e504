// src/cuda/device_access.hpp — what the engine's device append (src/attention/device_append.cpp) reads of a
// DeviceRope: its host Rope (whose prepare checks the views), its device copies (pair map, table, turns, error word)
// and the launch on its device. Internal.
#pragma once

#include <cstddef>

#include "cuda/append_body.hpp"
#include "cuda/kshift_body.hpp"
#include "ropekit/cuda.hpp"

namespace ropekit::detail {

struct DeviceAccess {
  static const Rope& rope(const cuda::DeviceRope& gpu);
  // Points the shape's pair map, table rows, turns and error word at the DeviceRope's device copies.
  static void angles(const cuda::DeviceRope& gpu, cuda::RotateShape& shape);
  // Launches the fused append on gpu's device and `stream` (errors: a CUDA error, named; no backend).
  static void launch_append(const cuda::DeviceRope& gpu, const cuda::AppendShape& shape, const cuda::Stream& stream);
  // Launches the K-shift likewise.
  static void launch_kshift(const cuda::DeviceRope& gpu, const cuda::KShiftShape& shape, const cuda::Stream& stream);
  // The table's row count on the device (0: angles on the fly only).
  static std::int64_t table_positions(const cuda::DeviceRope& gpu);
  // The host table a DeviceRope was made from (an engine's cos/sin cache, say): calls are prepared with it, as
  // Rope::prepare(args, table). Null for a DeviceRope of the rope's own angles.
  static const std::shared_ptr<const Table>& table(const cuda::DeviceRope& gpu);
};

// ropekit::Error naming `field` and the address when the device pointer p is not a multiple of `align` bytes: the
// kernels read each element with one access of its width (rotate_body.hpp's load_raw), which a GPU faults on when
// misaligned. Null passes (the prepare's checks say whether a view may be absent).
void check_device_alignment(const char* field, const void* p, std::size_t align);
// What the host checks of device positions (their values are the device's): the index type, count ≥ 0, axes ≥ 1, a
// pointer where there are positions, its alignment. ropekit::Error naming the field.
void check_device_positions(const Positions& positions);

}  // namespace ropekit::detail
