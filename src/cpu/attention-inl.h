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

// Dot products of up to four query rows with each key row: every key row is loaded once per
// block of rows. Writes scale·q·k + bias (or −infinity past the valid keys) to scores.
template <class D>
void RowScores(D d, const RowTile& t, int r0, int nr) {
  using V = hn::Vec<D>;
  const int n = int(hn::Lanes(d));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < kTileKeys; ++j) {
    if (j >= t.keys) {
      for (int r = r0; r < r0 + nr; ++r) t.scores[r * kTileKeys + j] = neg_inf;
      continue;
    }
    const float* k = t.k_rows[j];
    V acc[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
    int lane = 0;
    for (; lane + n <= t.head_dim; lane += n) {
      const V kv = hn::LoadU(d, k + lane);
      for (int r = 0; r < nr; ++r) acc[r] = hn::MulAdd(hn::LoadU(d, t.q + size_t(r0 + r) * t.head_dim + lane), kv, acc[r]);
    }
    for (int r = 0; r < nr; ++r) {
      const float* q = t.q + size_t(r0 + r) * t.head_dim;
      float dot = hn::GetLane(hn::SumOfLanes(d, acc[r]));
      for (int l = lane; l < t.head_dim; ++l) dot += q[l] * k[l];
      t.scores[(r0 + r) * kTileKeys + j] = dot * t.scale + t.bias[(r0 + r) * kTileKeys + j];
    }
  }
}

void UpdateRows(const RowTile& t, RowState* states) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t n = hn::Lanes(d);
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // 1. Scores.
  if (t.k_rows != nullptr) {
    for (int r0 = 0; r0 < t.rows; r0 += 4) RowScores(d, t, r0, std::min(4, t.rows - r0));
  } else {
    // Vertical FMAs over the whole (padded) tile: kTileKeys is a multiple of every x86 vector
    // width, so there is no tail.
    for (int r = 0; r < t.rows; ++r) {
      const float* q = t.q + size_t(r) * t.head_dim;
      for (size_t j = 0; j < size_t(kTileKeys); j += n) {
        V dot = hn::Zero(d);
        for (int lane = 0; lane < t.head_dim; ++lane) {
          dot = hn::MulAdd(hn::Set(d, q[lane]), hn::LoadU(d, t.keys_t + size_t(lane) * kTileKeys + j), dot);
        }
        hn::StoreU(hn::MulAdd(dot, hn::Set(d, t.scale), hn::LoadU(d, t.bias + size_t(r) * kTileKeys + j)), d,
                   t.scores + size_t(r) * kTileKeys + j);
      }
    }
  }

  // 2. Online softmax per row: p = exp(s − max'), zero where masked (−infinity is outside Exp's
  // domain). NaN scores stay NaN (Ne is true for them) and reach the output, as in the reference.
  float correction[kMaxRows];
  bool active[kMaxRows];
  for (int r = 0; r < t.rows; ++r) {
    float* s = t.scores + size_t(r) * kTileKeys;
    RowState& state = states[r];
    V tile_max = hn::Set(d, neg_inf);
    for (size_t j = 0; j < size_t(kTileKeys); j += n) tile_max = hn::Max(tile_max, hn::LoadU(d, s + j));
    const float new_max = std::max(state.max, hn::GetLane(hn::MaxOfLanes(d, tile_max)));
    active[r] = new_max != neg_inf;  // else: nothing visible so far
    if (!active[r]) continue;
    const V vmax = hn::Set(d, new_max);
    V sum = hn::Zero(d);
    for (size_t j = 0; j < size_t(kTileKeys); j += n) {
      const V x = hn::LoadU(d, s + j);
      const V p = hn::IfThenElseZero(hn::Ne(x, hn::Set(d, neg_inf)), hn::Exp(d, hn::Sub(x, vmax)));
      hn::StoreU(p, d, s + j);
      sum = hn::Add(sum, p);
    }
    correction[r] = state.max == neg_inf ? 0.0f : std::exp(state.max - new_max);
    state.sum = state.sum * correction[r] + hn::GetLane(hn::SumOfLanes(d, sum));
    state.max = new_max;
  }

  // 3. acc = acc·correction + Σ_j p_j v_j: blocks of up to four rows × two vectors of lanes kept in
  // registers, each value row loaded once per block.
  for (int r0 = 0; r0 < t.rows; r0 += 4) {
    int block[4], nr = 0;
    for (int r = r0; r < std::min(r0 + 4, t.rows); ++r) {
      if (active[r]) block[nr++] = r;
    }
    if (nr == 0) continue;
    int lane = 0;
    for (; lane + int(2 * n) <= t.v_head_dim; lane += int(2 * n)) {
      V a0[4], a1[4];
      for (int b = 0; b < nr; ++b) {
        const V c = hn::Set(d, correction[block[b]]);
        a0[b] = hn::Mul(hn::LoadU(d, states[block[b]].acc + lane), c);
        a1[b] = hn::Mul(hn::LoadU(d, states[block[b]].acc + lane + n), c);
      }
      for (int j = 0; j < t.keys; ++j) {
        const V v0 = hn::LoadU(d, t.v_rows[j] + lane), v1 = hn::LoadU(d, t.v_rows[j] + lane + n);
        for (int b = 0; b < nr; ++b) {
          const V p = hn::Set(d, t.scores[size_t(block[b]) * kTileKeys + j]);
          a0[b] = hn::MulAdd(p, v0, a0[b]);
          a1[b] = hn::MulAdd(p, v1, a1[b]);
        }
      }
      for (int b = 0; b < nr; ++b) {
        hn::StoreU(a0[b], d, states[block[b]].acc + lane);
        hn::StoreU(a1[b], d, states[block[b]].acc + lane + n);
      }
    }
    for (int b = 0; b < nr; ++b) {
      const int r = block[b];
      const float* p = t.scores + size_t(r) * kTileKeys;
      for (int l = lane; l < t.v_head_dim; ++l) {
        float a = states[r].acc[l] * correction[r];
        for (int j = 0; j < t.keys; ++j) a += p[j] * t.v_rows[j][l];
        states[r].acc[l] = a;
      }
    }
  }
}

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
