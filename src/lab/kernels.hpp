// src/lab/kernels.hpp — the runner's two loops that OpenBLAS and libm do not run at the memory's speed:
// a matrix–vector product over rows (decode: one token against the classifier's 32000 rows) and
// log Σ exp over a logit row (the lab's NLL of every target). Highway, compiled per target and run on
// the target the library's calls run on (ropekit::set_simd_target restricts them too: rope/backend.hpp);
// results depend on the target's vector width, as OpenBLAS's do, never on threads.
#pragma once

#include <cstddef>
#include <span>

#include "ropekit/model.hpp"

namespace ropekit::lab {

// y[o] = Σ_i W[o, i] x[i] for o in [first, last) (y[o] += … when accumulate); W row-major [out × in].
// Each row is one float32 dot product (two vector accumulators, fused multiply-adds; the error bound of a
// float32 dot product of length `in`, as sgemv's). Rows one after the other, prefetched four rows ahead: one
// stream through W, which the prefetchers follow faster than OpenBLAS's four-row sgemv_t
// (docs/performance-log.md: the code comments' figures).
void matvec_rows(const float* w, const float* x, float* y, std::size_t in, std::size_t first, std::size_t last,
                 bool accumulate);

// y[o − first] (+)= Σ_i W[o, i] x[i] for o in [first, last) over a packed matrix (F16, BF16 or quantized blocks;
// in = W.cols): each row widened 256 values at a time (as widen_rows) and fed to the same dot product as matvec_rows,
// so the result has matvec_rows's bits over the widened rows, without a float32 copy of W.
void matvec_packed_rows(const WeightMatrix& w, const float* x, float* y, std::size_t first, std::size_t last,
                        bool accumulate);

// Rows [first, first + count) of a packed matrix → float32 (count · cols values): F16/BF16 widened exactly, blocks
// dequantized with detail::dequantize's products and sums (its bits, without its per-value f16 calls).
void widen_rows(const WeightMatrix& w, std::size_t first, std::size_t count, float* out);

// log Σ_i exp(row[i]): the maximum m (exact), exp(row[i] − m) in float32 (Highway's Exp, 1 ulp, after one rounding
// of the difference), summed in float32 over blocks of 16 terms per lane, the blocks in float64. Each term is within
// (1 + |row[i] − m|)·2^-23 relative, each block's sum within 2^-20, so for |row[i] − m| ≤ 64 the result is within
// 1e-5 of log Σ exp in exact arithmetic (tests: against float64 std::exp). row must not be empty.
double log_sum_exp(std::span<const float> row);

}  // namespace ropekit::lab
