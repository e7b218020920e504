// Per-target body of cpu::update_row (see attention.hpp). Included once per Highway target by
// attention_kernels.cpp.
#if defined(ROPEKIT_CPU_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPEKIT_CPU_ATTENTION_INL_H_
#undef ROPEKIT_CPU_ATTENTION_INL_H_
#else
#define ROPEKIT_CPU_ATTENTION_INL_H_
#endif

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <cmath>
#include <limits>

#include "cpu/attention.hpp"

HWY_BEFORE_NAMESPACE();
namespace ropekit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void UpdateRow(const RowTile& t, RowState& state) {
  const hn::ScalableTag<float> d;
  const size_t n = hn::Lanes(d);
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // Scores over the whole (padded) tile, vectorized over keys: kTileKeys is a multiple of every
  // x86 vector width, so there is no tail.
  auto tile_max = hn::Set(d, neg_inf);
  for (size_t j = 0; j < size_t(kTileKeys); j += n) {
    auto dot = hn::Zero(d);
    for (int lane = 0; lane < t.head_dim; ++lane) {
      dot = hn::MulAdd(hn::Set(d, t.q[lane]), hn::LoadU(d, t.keys_t + size_t(lane) * kTileKeys + j), dot);
    }
    const auto s = hn::MulAdd(dot, hn::Set(d, t.scale), hn::LoadU(d, t.bias + j));
    hn::StoreU(s, d, t.scores + j);
    tile_max = hn::Max(tile_max, s);
  }
  const float new_max = std::max(state.max, hn::GetLane(hn::MaxOfLanes(d, tile_max)));
  if (new_max == neg_inf) return;  // nothing visible so far

  // p = exp(s − max'), zero where masked (−infinity is outside Exp's domain). NaN scores stay NaN
  // (Ne is true for them) and reach the output, as in the reference.
  const auto vmax = hn::Set(d, new_max);
  auto sum = hn::Zero(d);
  for (size_t j = 0; j < size_t(kTileKeys); j += n) {
    const auto s = hn::LoadU(d, t.scores + j);
    const auto p = hn::IfThenElseZero(hn::Ne(s, hn::Set(d, neg_inf)), hn::Exp(d, hn::Sub(s, vmax)));
    hn::StoreU(p, d, t.scores + j);
    sum = hn::Add(sum, p);
  }
  const float correction = state.max == neg_inf ? 0.0f : std::exp(state.max - new_max);
  state.sum = state.sum * correction + hn::GetLane(hn::SumOfLanes(d, sum));
  state.max = new_max;

  // acc = acc·correction + Σ_j p_j v_j, four vectors of v lanes at a time kept in registers.
  const auto corr = hn::Set(d, correction);
  int lane = 0;
  for (; lane + int(4 * n) <= t.v_head_dim; lane += int(4 * n)) {
    auto a0 = hn::Mul(hn::LoadU(d, state.acc + lane), corr);
    auto a1 = hn::Mul(hn::LoadU(d, state.acc + lane + n), corr);
    auto a2 = hn::Mul(hn::LoadU(d, state.acc + lane + 2 * n), corr);
    auto a3 = hn::Mul(hn::LoadU(d, state.acc + lane + 3 * n), corr);
    for (int j = 0; j < t.keys; ++j) {
      const auto p = hn::Set(d, t.scores[j]);
      const float* v = t.v_rows[j] + lane;
      a0 = hn::MulAdd(p, hn::LoadU(d, v), a0);
      a1 = hn::MulAdd(p, hn::LoadU(d, v + n), a1);
      a2 = hn::MulAdd(p, hn::LoadU(d, v + 2 * n), a2);
      a3 = hn::MulAdd(p, hn::LoadU(d, v + 3 * n), a3);
    }
    hn::StoreU(a0, d, state.acc + lane);
    hn::StoreU(a1, d, state.acc + lane + n);
    hn::StoreU(a2, d, state.acc + lane + 2 * n);
    hn::StoreU(a3, d, state.acc + lane + 3 * n);
  }
  for (; lane + int(n) <= t.v_head_dim; lane += int(n)) {
    auto a = hn::Mul(hn::LoadU(d, state.acc + lane), corr);
    for (int j = 0; j < t.keys; ++j) a = hn::MulAdd(hn::Set(d, t.scores[j]), hn::LoadU(d, t.v_rows[j] + lane), a);
    hn::StoreU(a, d, state.acc + lane);
  }
  for (; lane < t.v_head_dim; ++lane) {
    float a = state.acc[lane] * correction;
    for (int j = 0; j < t.keys; ++j) a = std::fma(t.scores[j], t.v_rows[j][lane], a);
    state.acc[lane] = a;
  }
}

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
