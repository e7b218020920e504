// ropekit/call.hpp — one rotation call: its arguments (RotateArgs) and the validated handle that
// runs it (RotateCall, made by Rope::prepare).
//
// One call rotates q and k of the same tokens (GQA: their head counts may differ; either may be
// empty). Each is rotated in place, or read from q/k and written to q_out/k_out (same shape and
// dtype; lanes outside the rotary part are copied). Per pair (a, b) with angle θ and magnitude m:
//   Forward   a' = m(a·cosθ − b·sinθ),  b' = m(b·cosθ + a·sinθ)    m = cos_sin_scale
//   Inverse   the exact inverse of Forward: rotation by −θ, m = 1/cos_sin_scale
//             (un-rotating cached keys before re-rotation)
//   Backward  the transpose of Forward: rotation by −θ, m = cos_sin_scale (gradients)
//
// Numerics of every call (the scalar reference, src/rope/reference.cpp, is the specification; every
// SIMD target and thread count gives its bits exactly, except that a NaN may carry another sign or
// payload):
//   Precision    the coefficients m·cos and m·sin are rounded to float32 (as HF's cos·attention_scaling),
//                then a' = fma(a, c, −(b·s)), b' = fma(b, c, a·s) in float32, rounded once to storage.
//   Error        with AngleMode::Accurate, against m·R(p)x in exact arithmetic: float32 storage within
//                3e-7·m·‖pair‖ (‖pair‖ = the norm of the pair in the input); bf16/fp16 storage within that
//                plus half an ulp of the storage type, and equal to the float32 result rounded once.
//                Pass-through lanes (partial rotary) are copied bit for bit. HfCompat: HF's own float32
//                angle error comes on top (ropekit/table.hpp). Tested: tests/apply_test.cpp, targets_test.cpp.
//   Valid range  positions in [0, kPositionLimit) = [0, 2^47), int32 or int64, any order and repeats;
//                non-negative strides; the rows of a written view do not overlap each other or another
//                view (checked by prepare, which throws ropekit::Error naming the view and field).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ropekit/pair_map.hpp"
#include "ropekit/tensor.hpp"

namespace ropekit {

class Table;

enum class Direction { Forward, Inverse, Backward };

struct RotateArgs {
  Heads q;
  Heads k;
  Heads q_out;  // data == nullptr: rotate q in place
  Heads k_out;  // data == nullptr: rotate k in place
  Positions positions;
  Direction direction = Direction::Forward;
  int threads = 0;  // RotateCall::run(): 0 = ropekit::default_threads() (ropekit/cpu.hpp); results never depend on it
};

namespace detail {
struct RotateJob;  // the call shape every backend reads (src/rope/call_shape.hpp): internal
using RowsKernel = void (*)(const RotateJob& job, std::int64_t first, std::int64_t last);
struct PrepareAccess;  // the prepare path (src/call/prepare.hpp), the one place that builds a call
}  // namespace detail

// One rotation call, validated and resolved once by Rope::prepare: views and positions checked, the
// angle source chosen (a table snapshot, pinned for the call's lifetime, or on-the-fly angles), and
// the kernel for dtype × pairing × SIMD target chosen. Running it does no further checks, locks,
// allocations or dispatch, so an engine can split rows() over its own threads:
//
//   const ropekit::RotateCall call = rope.prepare(args);   // throws ropekit::Error on bad input
//   pool.parallel_for(0, call.rows(), [&](auto first, auto last) { call.run(first, last); });
//
// The call keeps what it read from the Rope alive (plan, table), so it stays valid after the Rope's
// destruction; the tensors and positions it points to must
// outlive it, and the positions must keep the values prepare checked (the table covers those only).
// Numerics: as the file comment says, identical for any split of the rows.
class RotateCall {
 public:
  RotateCall() noexcept;  // an empty call: rows() == 0
  RotateCall(const RotateCall& other) noexcept;
  RotateCall(RotateCall&& other) noexcept;
  RotateCall& operator=(const RotateCall& other) noexcept;
  RotateCall& operator=(RotateCall&& other) noexcept;
  ~RotateCall();

  // (token, head) rows of the call: tokens × (q heads + k heads).
  std::int64_t rows() const { return rows_; }
  // Rotates rows [first, last); requires 0 ≤ first ≤ last ≤ rows() (not checked). Disjoint ranges may
  // run concurrently from any threads.
  void run(std::int64_t first, std::int64_t last) const noexcept {
    if (first < last) kernel_(*job_, first, last);
  }
  // Every row, on the library's threads: RotateArgs::threads (0: ropekit::default_threads()), fewer for
  // small calls (ropekit::threads_for_bytes).
  void run() const;

  // Moves the call to other positions of the same tokens — all that changes from one decode step to the
  // next — checking only them, as prepare does (count and axes as prepared, each in [0, 2^47)); the views
  // and the kernel stay. The angles come from where prepare took them: a call of Rope::prepare(args) reads
  // the Rope's table as a prepare at the new positions would (growing it when that is worth it, else
  // computing the angles on the fly), a call of prepare_on_the_fly stays on the fly, and a call of
  // prepare(args, table) reads that table and throws for a position outside it. The bits are those of a
  // fresh prepare. On bad positions it throws ropekit::Error and leaves the call as it was. Not while the
  // call runs (it rewrites the job the runs read).
  //
  //   ropekit::RotateCall step = rope.prepare(args);   // once per layer: views, strides, overlaps
  //   for each decode step: step.set_positions(ropekit::positions(pos)); step.run();
  //
  // By reference, not by value: a 32-byte argument goes through memory, and the copy GCC makes of the
  // caller's temporary read it back with 16-byte loads across its 8- and 1-byte stores — two missed
  // store-to-load forwards, a tenth of a 40-head fp32 step (kernel_floor on Zen 5).
  void set_positions(const Positions& positions);

  // The resolved call as the backends read it (src/rope/call_shape.hpp; internal, for ropekit's own
  // consumers and tests).
  const detail::RotateJob& job() const noexcept { return *job_; }

 private:
  friend struct detail::PrepareAccess;
  // The job starts from the arguments (aggregate initialisation: no zeroing of the rest first).
  explicit RotateCall(const RotateArgs& args) noexcept;
  // The job lives in the call itself, not behind a pointer: a decode step's prepare is a few hundred
  // nanoseconds, and an allocation would be a tenth of it. Its type is internal, so the public header
  // holds only its bytes and a pointer to the job made in them (src/call/prepare.cpp checks that it fits
  // and copies as bytes; copies and moves point their own at their own bytes).
  static constexpr std::size_t kJobBytes = 448;
  alignas(8) std::byte job_storage_[kJobBytes];
  detail::RotateJob* job_;
  std::int64_t rows_ = 0;
  detail::RowsKernel kernel_ = nullptr;
  std::shared_ptr<const void> plan_pin_;    // the Rope state the job points into (map, angles)
  std::shared_ptr<const Table> table_pin_;  // the table snapshot, when the call reads one
  // set_positions: whether the table was the caller's (positions outside it are an error, not a reason
  // to compute angles).
  bool table_given_ = false;
  std::shared_ptr<void> tables_;  // the Rope's growing table, for a call whose Rope chose its angles
};

}  // namespace ropekit
