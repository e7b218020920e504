// src/lab/kernels.hpp — the runner's two loops that OpenBLAS and libm do not run at the memory's speed:
// a matrix–vector product over rows (decode: one token against the classifier's 32000 rows) and
// log Σ exp over a logit row (the lab's NLL of every target). Highway, compiled per target and run on
// the target the library's calls run on (ropekit::set_simd_target restricts them too: rope/backend.hpp);
// results depend on the target's vector width, as OpenBLAS's do, never on threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

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

// A token's activation vector quantized to 8 bits per value for int8_matvec_rows (llama.cpp's trade for decode: its
// Q8_0 activations): per group g of 32 values, the scale s_g = max_i |x_i| / 127 (float32) and q_i = x_i / s_g rounded
// to the nearest integer (ties to even), in [−127, 127]; sum_g = s_g · Σ_i q_i in float32 (what a block's minimum
// multiplies). |x_i − s_g·q_i| ≤ s_g · (1/2 + 2^-16). A group with a value that is
// not finite gets s_g = NaN (q = 0), so the products it enters are NaN, as float32 ones would be.
struct Int8Vector {
  std::vector<std::int8_t> q;
  std::vector<float> scale, sum;
};
// x.size() must be a multiple of 32 (every block-quantized row is).
void quantize_int8(std::span<const float> x, Int8Vector& out);

// Whether int8_matvec_rows takes matrices of this encoding: the eight ggml block types.
bool int8_rows(WeightEncoding encoding);

// y[o − first] (+)= Σ_i W[o, i] x̂_i for o in [first, last): W packed in one of the block types (int8_rows), x̂ the
// quantized vector (x.q.size() == W.cols). The weights' integers (unsigned; Q8_0's signed) multiply x's exactly in
// integers (AVX2 and up: vpmaddubsw and vpmaddwd, 32 values an instruction, as llama.cpp; other targets: int16
// products); each 32 values then add (weight scale · s_g) · Σ q_w·q_x to one of two float32 accumulators (fused
// multiply-adds; Q6_K's per-16 scales and the offsets of Q4_0, Q5_0 and Q6_K enter the integer sums), and a block's
// minimum times x's group sums a third. Error against the float32 dot product
// with x (the default decode's): the activations' rounding, at most Σ_g s_g (1/2 + 2^-16) Σ_{i∈g} |W[o, i]|, plus
// float32 roundings of at most (in/32 + 4) · 2^-23 · Σ_i P_i |x̂_i|, where P_i = |W[o, i]| + 2 |m_i| (m_i the block's
// minimum: Q4_1/Q5_1 m, Q4_K/Q5_K dmin · m; 0 for the others, whose offsets are taken off in integers). Results depend
// on the target's vector width, never on threads.
void int8_matvec_rows(const WeightMatrix& w, const Int8Vector& x, float* y, std::size_t first, std::size_t last,
                      bool accumulate);

// log Σ_i exp(row[i]): the maximum m (exact), exp(row[i] − m) in float32 (Highway's Exp, 1 ulp, after one rounding
// of the difference), summed in float32 over blocks of 16 terms per lane, the blocks in float64. Each term is within
// (1 + |row[i] − m|)·2^-23 relative, each block's sum within 2^-20, so for |row[i] − m| ≤ 64 the result is within
// 1e-5 of log Σ exp in exact arithmetic (tests: against float64 std::exp). row must not be empty.
double log_sum_exp(std::span<const float> row);

}  // namespace ropekit::lab
