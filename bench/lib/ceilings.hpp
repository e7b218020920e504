// bench/lib/ceilings.hpp — RoPE throughput as a fraction of this machine's memory bandwidth,
// measured in the same run. Shared by `ropekit bench`, bench/rope_bench and bench/attention_bench.
//
// A rotation case's bytes are those read plus written of q and k (in place: each element read and
// written once; out of place: read from q/k, written to q_out/k_out). Its ceiling is measured on the
// same buffers with the same thread count (split as the library splits rows), interleaved in time
// with the case's own measurement so that both see the same machine state:
//   in place      — a read-modify-write stream over q and k (each 64-byte line read and written
//                   once by the best SIMD target);
//   out of place  — memcpy q → q_out and k → k_out;
//   decode        — memcpy of the same bytes (target: the call within 2× the copy time).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lib/cases.hpp"

namespace ropekit::bench {

enum class Ceiling { InPlaceStream, Memcpy };
std::string ceiling_name(Ceiling c);

// A rotation case's ceiling, and its target as a fraction of it (issue 18: prefill 0.85 with a table,
// 0.5 on the fly; decode 0.5 with a table, 0.25 on the fly).
Ceiling ceiling_of(const cases::Case& c);
double target_of(const cases::Case& c);

// One pass of the case's ceiling over the workload's q and k buffers.
void run_ceiling(cases::Workload& w);

struct Result {
  cases::Case c;
  double gbps = 0;          // bytes / median time per call
  double ceiling_gbps = 0;  // the same bytes through the ceiling loop
  double fraction() const { return gbps / ceiling_gbps; }
  bool meets_target() const { return fraction() >= target_of(c); }
};

// A rotation case: median of `rounds` interleaved batches (kernel, ceiling, kernel, ...), each lasting
// about `batch_seconds`.
Result measure(const cases::Case& c, int rounds = 7, double batch_seconds = 0.02);

// Seconds per call of each function: median over `rounds` interleaved batches of at least
// `min_seconds`. Each batch starts with one unmeasured call of the same function, so every contender
// finds the caches as it leaves them (not as the previous contender left them).
std::vector<double> interleaved(const std::vector<std::function<void()>>& fns, int rounds, double min_seconds);

}  // namespace ropekit::bench
