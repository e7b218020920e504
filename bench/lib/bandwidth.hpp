// bench/bandwidth.hpp — RoPE throughput as a fraction of this machine's memory bandwidth,
// measured in the same run. Shared by `ropekit bench` and the Google Benchmark executable.
//
// Every case rotates q and k of one call. Its bytes are those read plus written of q and k (in
// place: each element read and written once; out of place: read from q/k, written to q_out/k_out).
// Its ceiling is measured on the same buffers with the same thread count, interleaved in time with
// the kernel's own measurement so that both see the same machine state:
//   in place      — a read-modify-write stream over q and k (each 64-byte line read and written
//                   once by the best SIMD target);
//   out of place  — memcpy q → q_out and k → k_out;
//   decode        — memcpy of the same bytes (target: the call within 2× the copy time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ropekit/ropekit.hpp"

namespace ropekit::bench {

enum class Ceiling { InPlaceStream, Memcpy };

struct Shape {
  std::string label;  // "prefill_128x32x512"
  int head_dim;
  std::int64_t tokens, q_heads, k_heads;
  bool decode;
};

struct Case {
  Shape shape;
  DType dtype;
  Pairing pairing;
  bool in_place;
  int threads;
  bool on_the_fly;  // angles computed per call instead of read from a table

  std::string name() const;
  Ceiling ceiling() const { return in_place && !shape.decode ? Ceiling::InPlaceStream : Ceiling::Memcpy; }
  double target() const { return shape.decode ? 0.5 : 0.85; }  // fraction of the ceiling
  std::int64_t bytes() const;  // read + written per call
};

// The grid: prefill 128×32×512 and ×4096 (32 q + 8 k heads), 64×8×4096 (8 q + 2 k heads),
// decode 1 token of 32 q + 8 k heads × 128; fp32/bf16/fp16; both pairings; in and out of place;
// 1 and 2 threads; table and on-the-fly angles.
std::vector<Case> all_cases();

// Buffers and a ready Rope for one case; run() is one rotation call, run_ceiling() one ceiling pass.
class Workload {
 public:
  explicit Workload(const Case& c);
  ~Workload();
  void run();
  void run_ceiling();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct Result {
  Case c;
  double gbps = 0;          // bytes / median time per call
  double ceiling_gbps = 0;  // the same bytes through the ceiling loop
  double fraction() const { return gbps / ceiling_gbps; }
  bool meets_target() const { return fraction() >= c.target(); }
};

// Median of `rounds` interleaved batches (kernel, ceiling, kernel, ...), each lasting about
// `batch_seconds`.
Result measure(const Case& c, int rounds = 7, double batch_seconds = 0.02);

std::string ceiling_name(Ceiling c);

}  // namespace ropekit::bench
