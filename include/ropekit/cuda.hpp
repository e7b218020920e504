// ropekit/cuda.hpp — RoPE on NVIDIA GPUs with the CPU's bits: a Rope's angles on one device, and rotations of
// device memory on the caller's stream.
//
//   ropekit::cuda::DeviceRope gpu(rope, /*device=*/0, /*table_positions=*/8192);
//   gpu.rotate({.q = ropekit::bshd(q_dev, ropekit::DType::BF16, batch, seq, 32, 128),
//               .k = ropekit::bshd(k_dev, ropekit::DType::BF16, batch, seq, 8, 128),
//               .positions = {pos_dev, ropekit::IndexType::I64, batch * seq}},
//              {.device = 0, .stream = stream});          // asynchronous on `stream`
//   gpu.check({.device = 0, .stream = stream});           // waits; ropekit::Error if a position was out of range
//
// Numerics: bit-identical to Rope::apply on the CPU for every storage type (fp32/bf16/fp16, float32 arithmetic, one
// rounding), both pairings, partial rotary, M-RoPE and axial streams, forward/inverse/backward, in and out of place:
// the kernel runs the scalar reference's operation sequence with every rounding explicit (no contraction, nvcc
// -fmad=false), and the same body is run by the host over the whole launch grid in every test run
// (tests/cuda_host_test.cpp) and by the GPU where one is at hand (tests/cuda_device_test.cpp). Angles: the table's
// rows for positions below table_positions, above them the accurate angle on the fly (the CPU's double turn
// reduction and polynomials, compiled for the device) — the same bits either way, valid to 2^47. A HfCompat Rope's
// angles are libm's cos/sin of a float32 angle, which a GPU does not reproduce: its table must cover every position.
//
// Memory and streams: every pointer in the arguments is a device pointer on `device` (the positions too); the host
// reads none of them. The device and stream are always the caller's, never guessed from a pointer; each call is
// asynchronous on that stream and allocates nothing. A DeviceRope owns its device copies (pair map, table, turns, one
// error word) and may be used from several host threads and streams at once.
//
// CUDA graphs: rotate, cuda::append, cuda::shift and cuda::rerotate neither synchronize nor allocate, so they may be
// captured (stream capture, cudaStreamCaptureModeGlobal included) as an engine captures its decode step; a replay
// reads the tensors, positions and slots at the addresses captured — write new ones there between replays, as the
// engine does for its own kernels. The DeviceRope must exist before the capture (its constructor allocates and
// copies), and check() waits for the stream: call it outside any capture (tests/cuda_device_test.cpp,
// CapturedDecodeStepReplaysLikeTheCpu; python/tests/test_cuda_ops.py for torch.cuda.graph).
//
// Errors, on the host before anything is launched (ropekit::Error): a build without the CUDA backend, a device that
// does not exist, a CUDA error (named), and everything Rope::apply checks about the views (shapes, strides, dtypes,
// overlaps, counts). On the device: a position outside [0, 2^47), or past the table of a HfCompat Rope, leaves its
// token's rows unwritten and is reported by the next check() (the first such token of any call since the last check).
#pragma once

#include <cstdint>
#include <memory>

#include "ropekit/append.hpp"
#include "ropekit/rope.hpp"
#include "ropekit/table.hpp"

namespace ropekit::detail {
struct DeviceAccess;  // src/device/device_shapes.hpp: the device calls read a DeviceRope's host rope and device copies
}  // namespace ropekit::detail

namespace ropekit::cuda {

// True when this library was built with the CUDA backend (ROPEKIT_CUDA: nvcc found at configure time).
bool built();
// The CUDA devices this process sees (0 without the backend, a driver or a device).
int device_count();

struct Stream {
  int device = 0;
  void* stream = nullptr;  // a cudaStream_t; null: the device's legacy default stream
};

class DeviceRope {
 public:
  // Uploads rope's pair map, the cos/sin of positions [0, table_positions) and, for the accurate angles, the per-pair
  // turns to `device`. Errors: no CUDA backend, device outside [0, device_count()), table_positions outside
  // [0, 2^47), a HfCompat rope without a table, a CUDA allocation or copy that fails.
  DeviceRope(const Rope& rope, int device, std::int64_t table_positions = 0);
  // The angles of exactly `table` on `device` — an engine's own cos/sin cache (import_cos_sin_cache,
  // ropekit/cos_sin_cache.hpp: vLLM's and FlashInfer's cos_sin_cache) or a table of this Rope's — as
  // Rope::prepare(args, table) takes them on the CPU: rotate and cuda::append give the bits of Rope::apply(args, table)
  // and append(rope, args, cache, table). Every position a call uses must lie in the table: no angle is computed on
  // the fly, and a position past it leaves its token's rows unwritten and is reported by check(). cuda::shift and
  // cuda::rerotate take a DeviceRope of the rope's own angles (the constructor above). Errors: as above, a table of
  // another pair count, a null table.
  DeviceRope(const Rope& rope, int device, std::shared_ptr<const Table> table);
  ~DeviceRope();
  DeviceRope(DeviceRope&&) noexcept;
  DeviceRope& operator=(DeviceRope&&) noexcept;
  DeviceRope(const DeviceRope&) = delete;
  DeviceRope& operator=(const DeviceRope&) = delete;

  int device() const;
  std::int64_t table_positions() const;

  // Rope::apply(args) on device memory, launched on `stream` (stream.device must be this DeviceRope's device).
  void rotate(const RotateArgs& args, const Stream& stream) const;
  // Waits for `stream`; throws ropekit::Error naming the first token whose position could not be rotated by any
  // call since the last check (and clears the record).
  void check(const Stream& stream) const;

 private:
  friend struct detail::DeviceAccess;
  struct State;
  std::unique_ptr<State> state_;
};

// ropekit::append on a GPU (ropekit/cuda.hpp's conventions): args' views, positions and slot mapping and the cache's
// pages are device pointers on rope.device(); launched on `stream`; the bits of ropekit::append on the CPU (the
// kernel body is checked against AppendCall on every case of tests/cuda_host_test.cpp). QK-norm weights are device
// arrays too (weight_offset added on the device, in float32, as prepare_append adds it). The slots: a SlotMapping
// (vLLM's) or a PageTable (FlashInfer's) whose spans are device arrays, resolved on the device as prepare_append
// resolves them on the host. Checked on the host: all that prepare_append checks but the values of the positions,
// slots and page table (the spans' sizes are checked); on the device a token whose slot is outside [−1,
// cache.slots()), or whose page-table entry prepare_append would refuse (batch index, indptr, last page length, entry
// or page out of range), writes no entry, a position out of range leaves its rows unwritten, and rope.check(stream)
// reports the first such token. Two tokens given one slot: one of them wins (as vLLM's reshape_and_cache).
void append(const DeviceRope& rope, const AppendArgs& args, const PagedCache& cache, const Stream& stream);

// The K-shift of an engine's own paged cache on a GPU (PagedKvCache::seq_add's rotation): the key entries at `slots`
// (a device slot mapping, int32 or int64; −1 skips an entry) turned in place by R(delta) — the pure rotation,
// magnitude 1: f32/bf16/f16 entries rounded once to storage, fp8 entries widened × k_scale and stored
// e4m3(x / k_scale) — the CPU's bits (the kernel body equals PagedKvCache's on every case of
// tests/cuda_host_test.cpp). The key entries hold the rope's head_dim lanes from lane 0. Errors on the host: |delta|
// outside [0, 2^47), a cache that fails validate() or has no keys, cache.head_dim ≠ the rope's, a HfCompat rope
// whose table does not cover |delta|, a bad slot mapping; on the device a slot outside the cache (other than −1) is
// reported by rope.check(stream).
void shift(const DeviceRope& rope, const PagedCache& cache, const SlotMapping& slots, std::int64_t delta,
           const Stream& stream);

// The re-rotation of an engine's own paged cache on a GPU (PagedKvCache::rerotate's turn: a new scaling — a longer
// YaRN or dynamic-NTK context, say — applied to keys already cached): the key entry at slots[i], rotated by `from` at
// positions[i], is un-rotated by from (Direction::Inverse) and rotated by `to` at the same position in float32, then
// rounded once to the cache's type (fp8: widened × k_scale, stored e4m3(x / k_scale)) — the CPU's bits (the body
// equals PagedKvCache::rerotate's on every case of tests/cuda_host_test.cpp). positions: a device array, one per slot
// (per axis for M-RoPE). Errors on the host: as shift's, ropes on different devices or pairing their lanes
// differently, positions of another count or axes; on the device a slot outside the cache (other than −1) or a
// position outside [0, 2^47) (or past an HfCompat rope's table) leaves its entry as it was and is reported by
// to.check(stream).
void rerotate(const DeviceRope& from, const DeviceRope& to, const PagedCache& cache, const SlotMapping& slots,
              const Positions& positions, const Stream& stream);

}  // namespace ropekit::cuda
