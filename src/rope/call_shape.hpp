// src/rope/call_shape.hpp — the call shape: one validated rotation call, resolved and flattened into
// plain data, which every backend reads (the scalar reference, each CPU SIMD target, a GPU backend) and
// nothing else. Built only by the prepare path (src/call/prepare.hpp); RotateCall (ropekit/call.hpp)
// holds one. Internal: it may change with any commit.
#pragma once

#include <cstdint>

#include "ropekit/call.hpp"
#include "ropekit/pair_map.hpp"
#include "ropekit/tensor.hpp"

namespace ropekit {

class Table;

namespace detail {

class AngleEvaluator;

// Rows are (token, head), token-major; in each token q's heads come first, then k's.
struct RotateJob {
  RotateArgs args;                         // the views and positions as validated
  const PairMap* map = nullptr;            // which lanes pair, and each pair's position stream
  float magnitude = 1.0f;                  // cos_sin_scale (Inverse: its reciprocal), as float32 like the reference
  float sin_sign = 1.0f;                   // −1 for Inverse and Backward
  const Table* table = nullptr;            // angles from this table (covers every position of the call)...
  const AngleEvaluator* angles = nullptr;  // ...or computed per token
  std::int64_t tokens = 0;                 // batch × seq
  std::int64_t seq = 1;                    // token t is (t / seq, t % seq)
  std::int64_t q_heads = 0;                // 0 when q is absent
  std::int64_t k_heads = 0;
  std::int64_t bytes_moved = 0;  // read + written by the call (the thread policy reads it)
  // The memory policy, set by the backend that runs the call (kernels read these flags, never decide):
  bool stream_stores = false;  // non-temporal stores for out-of-place rows
  bool prefetch_rows = false;  // software prefetch ahead of each row: large calls
  // Where a run on one thread is faster with another target's kernel on this CPU (cpu::one_thread_256_bit), that
  // kernel — the same bits (every target's are the scalar reference's); null: the call's own kernel throughout.
  void (*one_thread_kernel)(const RotateJob& job, std::int64_t first, std::int64_t last) = nullptr;

  std::int64_t rows() const { return tokens * (q_heads + k_heads); }
};

// RowsKernel (declared with RotateCall in ropekit/call.hpp, which holds one): rotates rows [first, last)
// of a job. Never throws, takes no lock, allocates nothing.
// A token kernel: rotates `heads` rows of token `token` — read from src (rows src_stride elements
// apart) with the job's positions and coefficients for that token, written to dst (dst_stride apart)
// in the same storage type, pass-through lanes copied: the bits the call's kernel writes for those
// rows. For consumers that rotate into buffers of their own (linear attention's features).
using TokenKernel = void (*)(const RotateJob& job, std::int64_t token, const void* src, std::int64_t src_stride,
                             void* dst, std::int64_t dst_stride, std::int64_t heads);
// Head rows of one token in one storage type: `heads` rows read from src, written to dst (rows
// *_stride elements apart; dst == src rotates in place). heads = 0: none.
struct HeadRows {
  const void* src = nullptr;
  std::int64_t src_stride = 0;
  void* dst = nullptr;
  std::int64_t dst_stride = 0;
  std::int64_t heads = 0;
  DType dtype = DType::F32;
};
// Two sets of head rows of token `token` (the fused append's q and k) rotated with one set of
// coefficients, formed once: the bits a TokenKernel writes for each.
using TokenPairKernel = void (*)(const RotateJob& job, std::int64_t token, const HeadRows& a, const HeadRows& b);

}  // namespace detail
}  // namespace ropekit
