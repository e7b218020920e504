// The lab's Highway kernels (lab/kernels.hpp), compiled once per target by foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lab/kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>

#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>

#include "lab/kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace ropekit::lab {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void MatvecRows(const float* w, const float* x, float* y, std::size_t in, std::size_t first, std::size_t last,
                bool accumulate) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  for (std::size_t o = first; o < last; ++o) {
    const float* row = w + o * in;
    // Four rows ahead: the prefetchers see one stream, this keeps it a few hundred bytes ahead of the loads
    // (stories15M's classifier: 29 → 49 GB/s on Zen 4 with huge pages, two accumulators against Dot's four).
    hwy::Prefetch(row + 4 * in);
    auto sum0 = hn::Zero(d), sum1 = hn::Zero(d);
    std::size_t i = 0;
    for (; i + 2 * lanes <= in; i += 2 * lanes) {
      sum0 = hn::MulAdd(hn::LoadU(d, row + i), hn::LoadU(d, x + i), sum0);
      sum1 = hn::MulAdd(hn::LoadU(d, row + i + lanes), hn::LoadU(d, x + i + lanes), sum1);
    }
    if (i + lanes <= in) {
      sum0 = hn::MulAdd(hn::LoadU(d, row + i), hn::LoadU(d, x + i), sum0);
      i += lanes;
    }
    float dot = hn::GetLane(hn::SumOfLanes(d, hn::Add(sum0, sum1)));
    for (; i < in; ++i) dot += row[i] * x[i];
    y[o] = accumulate ? y[o] + dot : dot;
  }
}

double LogSumExp(const float* row, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  float max = row[0];
  std::size_t i = 0;
  if (n >= lanes) {
    auto m = hn::LoadU(d, row);
    for (i = lanes; i + lanes <= n; i += lanes) m = hn::Max(m, hn::LoadU(d, row + i));
    max = hn::GetLane(hn::MaxOfLanes(d, m));
  }
  for (; i < n; ++i) max = row[i] > max ? row[i] : max;
  const auto vmax = hn::Set(d, max);
  // Each lane sums at most kBlock terms in float32 (each in (0, 1]: relative error ≤ kBlock·2^-24), then the
  // block's lanes go into a float64 sum.
  constexpr std::size_t kBlock = 16;
  double sum = 0;
  i = 0;
  while (i + lanes <= n) {
    auto block = hn::Zero(d);
    for (std::size_t k = 0; k < kBlock && i + lanes <= n; ++k, i += lanes) {
      block = hn::Add(block, hn::Exp(d, hn::Sub(hn::LoadU(d, row + i), vmax)));
    }
    sum += double(hn::GetLane(hn::SumOfLanes(d, block)));
  }
  // The rest one by one, through a vector padded with −FLT_MAX (exp → 0).
  if (i < n) {
    HWY_ALIGN float tail[hn::MaxLanes(d)];
    for (std::size_t j = 0; j < lanes; ++j) tail[j] = i + j < n ? row[i + j] : -hwy::HighestValue<float>();
    sum += double(hn::GetLane(hn::SumOfLanes(d, hn::Exp(d, hn::Sub(hn::Load(d, tail), vmax)))));
  }
  return double(max) + std::log(sum);
}

}  // namespace HWY_NAMESPACE
}  // namespace ropekit::lab
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ropekit::lab {

HWY_EXPORT(MatvecRows);
HWY_EXPORT(LogSumExp);

void matvec_rows(const float* w, const float* x, float* y, std::size_t in, std::size_t first, std::size_t last,
                 bool accumulate) {
  HWY_DYNAMIC_DISPATCH(MatvecRows)(w, x, y, in, first, last, accumulate);
}

double log_sum_exp(std::span<const float> row) { return HWY_DYNAMIC_DISPATCH(LogSumExp)(row.data(), row.size()); }

}  // namespace ropekit::lab
#endif  // HWY_ONCE
