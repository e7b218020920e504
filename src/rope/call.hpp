// src/rope/call.hpp — validation of one rotation call and its flattening into the call shape that
// every backend reads (detail::RotateJob, declared with RotateCall in ropekit/call.hpp). Backends
// include this header and the public ones, nothing above the core.
#pragma once

#include <cstdint>
#include <string_view>

#include "ropekit/call.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/plan.hpp"

namespace ropekit {
class Rope;
}

namespace ropekit::detail {

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

// What error messages call the views and positions (a consumer names its own arguments).
struct CallNames {
  std::string_view q = "q", k = "k", q_out = "q_out", k_out = "k_out", positions = "positions";
};

// Throws ropekit::Error naming the first bad view, stride, shape or position.
CallShape validate_call(const RotateArgs& args, const PairMap& map, ViewUse use = ViewUse::Write,
                        const CallNames& names = {});

// Completes `job`, whose args hold the validated call's arguments, in place (a decode call takes a few
// hundred nanoseconds and the job is a few hundred bytes: it is built once, where it stays). Angles
// come from `table` when it is non-null (every position of the call must be inside it), else from
// `angles`. stream_stores is left to the backend.
void make_job(RotateJob& job, const PairMap& map, const Plan& plan, const CallShape& shape, const Table* table,
              const AngleEvaluator* angles);

// Rope::prepare for consumers: errors name the consumer's arguments, and with ViewUse::Read (a
// consumer that rotates rows into its own buffers) the views are only read: the call's job() feeds the
// consumer's per-target code and its run() does nothing (it has no destination). Angles from `table`
// when it is non-null (as Rope::prepare(args, table) takes them), else as Rope::prepare chooses them.
RotateCall prepare_call(const Rope& rope, const RotateArgs& args, ViewUse use, const CallNames& names,
                        std::shared_ptr<const Table> table = nullptr);

// prepare_call(rope, args, ViewUse::Read, ...) for a consumer that has checked the views itself as
// validate_call checks them (dtype, extents, data, q and k holding the same tokens; threads and direction
// valid) and the positions by check_positions: `shape` is what validate_call would return (bytes_written
// 0). The fused append checks q and k for its own use before its rotation; validating them again was a
// tenth of a decode call's preparation. keep_plan = false: the call neither pins the plan nor can grow
// the table, so it must run before the Rope is gone and cannot take set_positions (a one-shot call, as
// Rope::apply makes).
RotateCall prepare_checked_call(const Rope& rope, const RotateArgs& args, const CallShape& shape,
                                std::shared_ptr<const Table> table, bool keep_plan);

}  // namespace ropekit::detail
