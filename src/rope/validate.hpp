// src/rope/validate.hpp — the one validator of a rotation call, and the flattening of a validated
// call into the call shape every backend reads (src/rope/call_shape.hpp).
//
// Every rotation ropekit runs passes validate_call exactly once: the prepare path (src/call/prepare.hpp)
// runs it, and a consumer that checks more than a rotation (the fused append) runs it on the rotation's
// part of its arguments and hands the result — a CheckedCall, which nothing but validate_call makes — to
// the prepare path. So no consumer restates the validator's rules.
#pragma once

#include <cstdint>
#include <string_view>

#include "ropekit/call.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"

namespace ropekit::detail {

struct RotateJob;
class AngleEvaluator;

struct CallShape {
  std::int64_t tokens = 0;         // 0: nothing to rotate
  std::int64_t max_position = -1;  // over all streams
  std::int64_t bytes_written = 0;  // by out-of-place views
};

// How a call's views are used.
//   Write  the call rotates q and k in place or into q_out/k_out: the rows of a written view must
//          not overlap each other, and no two views may share memory.
//   Read   a consumer reads q and k and rotates their rows into buffers of its own (fused attention):
//          q_out/k_out must be absent; the views are only read, so overlaps are allowed.
enum class ViewUse { Write, Read };

// Where the call's memory lives, and so who reads the positions' values.
//   Host    the CPU backend: every view and position is host memory; validate_call checks each
//           position against [0, 2^47) and finds the largest (the angle source's reach).
//   Device  the CUDA backend: every pointer is a device pointer, which the host never dereferences.
//           validate_call checks everything else — the positions' type, streams, count and pointer,
//           and every pointer's alignment to its element — and the kernel checks each position's
//           value, reporting through the device's error word (ropekit/cuda.hpp). The prepared call
//           is read by the device backend only; its run() does nothing.
enum class PositionsAt { Host, Device };

// What error messages call the views and positions (a consumer names its own arguments).
struct CallNames {
  std::string_view q = "q", k = "k", q_out = "q_out", k_out = "k_out", positions = "positions";
};

// Arguments that passed validate_call, with what it found: only validate_call makes one. It refers to
// the arguments it checked (not a copy: a decode step's prepare is a few hundred nanoseconds), which
// must outlive it.
class CheckedCall {
 public:
  const RotateArgs& args() const { return *args_; }
  ViewUse use() const { return use_; }
  PositionsAt positions_at() const { return at_; }
  const CallShape& shape() const { return shape_; }
  // Element offsets one past the last element q and k touch (0 for an absent view): what a consumer
  // that also writes memory of its own passes on to byte_range (views.hpp) for its overlap checks.
  std::int64_t q_extent() const { return q_extent_; }
  std::int64_t k_extent() const { return k_extent_; }

 private:
  friend CheckedCall validate_call(const RotateArgs&, const PairMap&, ViewUse, const CallNames&, PositionsAt);
  CheckedCall(const RotateArgs& args, ViewUse use, PositionsAt at) : args_(&args), use_(use), at_(at) {}
  const RotateArgs* args_;
  ViewUse use_;
  PositionsAt at_;
  CallShape shape_;
  std::int64_t q_extent_ = 0, k_extent_ = 0;
};

// Throws ropekit::Error naming the first bad view, stride, shape, overlap or position (ropekit/call.hpp's
// valid range; for PositionsAt::Device, the positions' layout and every pointer's alignment, not the values:
// the shape's max_position is then −1).
CheckedCall validate_call(const RotateArgs& args, const PairMap& map, ViewUse use = ViewUse::Write,
                          const CallNames& names = {}, PositionsAt at = PositionsAt::Host);

// Completes `job`, whose args hold the validated call's arguments, in place (a decode call takes a few
// hundred nanoseconds and the job is a few hundred bytes: it is built once, where it stays). Angles
// come from `table` when it is non-null (every position of the call must be inside it), else from
// `angles`. The memory policy (stream_stores, prefetch_rows) is left to the backend.
void make_job(RotateJob& job, const PairMap& map, const Plan& plan, const CallShape& shape, const Table* table,
              const AngleEvaluator* angles);

}  // namespace ropekit::detail
