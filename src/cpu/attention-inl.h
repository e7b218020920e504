// src/cpu/attention-inl.h — the per-target softmax-attention driver (rope/attention_job.hpp): online
// softmax over key tiles with the RoPE rotation of each Q block and K tile inlined into its load.
// Included once per Highway target by src/cpu/attention.cpp.
//
// Per item (batch, kv head, block of query tokens) the rows are the block's tokens × the query heads
// that share the kv head, so each key tile is loaded (and rotated) once for all of them. Per key
// tile: rotate into a thread-local buffer in the storage type (the bits RotateCall::run() writes),
// widen to float32 and transpose (or keep as rows for decode), then online-softmax updates: of all
// the block's rows at once where every row sees the whole tile (most tiles of a long prefill), else
// token by token with its mask row. Memory per thread: O(rows · v_head_dim + tile).
#if defined(ROPEKIT_CPU_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPEKIT_CPU_ATTENTION_INL_H_
#undef ROPEKIT_CPU_ATTENTION_INL_H_
#else
#define ROPEKIT_CPU_ATTENTION_INL_H_
#endif

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "cpu/rotate-inl.h"
#include "rope/attention_job.hpp"
#include "rope/backend.hpp"
#include "rope/parallel.hpp"
#include "rope/reference.hpp"

HWY_BEFORE_NAMESPACE();
namespace ropekit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using detail::AttentionJob;
using detail::BiasKind;

// Keys per tile. Tiles of many query rows are stored transposed (head_dim rows of kTileKeys floats)
// so the scores of a query row against the tile are vector FMAs over keys, with no horizontal sums.
inline constexpr int kTileKeys = 64;
inline constexpr int kMaxRows = 64;  // query rows per online-softmax update

// A group of query rows (the query heads sharing one kv head, at one token) against one key
// tile. Keys come in one of two layouts: transposed (keys_t; scores are vertical FMAs, best when
// many rows share the tile, the transpose is paid once) or as row pointers (k_rows; dot products
// with a horizontal sum, each key row loaded once for up to four query rows — decode, where a
// transpose would cost more than the scores).
struct RowTile {
  const float* q = nullptr;              // rows × head_dim floats, rotated
  const float* keys_t = nullptr;         // head_dim × kTileKeys, key j of lane d at [d·kTileKeys + j]
  const float* const* k_rows = nullptr;  // or: `keys` pointers to head_dim floats
  const float* const* v_rows = nullptr;  // `keys` pointers to v_head_dim floats
  const float* bias = nullptr;           // rows × kTileKeys: additive bias, −infinity = masked
  int bias_stride = kTileKeys;           // floats between rows' biases (0: every row has the first row's)
  int rows = 1;                          // 1 … kMaxRows
  int head_dim = 0;
  int v_head_dim = 0;
  int keys = 0;             // valid keys in the tile (the rest are masked)
  float scale = 1.0f;       // softmax scale, applied to q·k before the bias
  float softcap = 0.0f;     // > 0: scaled logits → softcap·tanh(logits / softcap), before the bias
  float* scores = nullptr;  // rows × kTileKeys floats of scratch
};

// The online-softmax state of a tile's rows, kept in the item's per-row buffers from the tile's first
// row on: row r's running maximum max[r], running sum sum[r], accumulator acc + r·v_head_dim.
struct RowStates {
  float* max;
  float* sum;
  float* acc;
};

HWY_INLINE float* AccOf(const RowTile& t, const RowStates& states, int r) {
  return states.acc + size_t(r) * size_t(t.v_head_dim);
}

// A scaled logit, soft-capped where the tile asks (Gemma 2): softcap·tanh(x / softcap) in float32.
HWY_INLINE float Capped(const RowTile& t, float x) { return t.softcap > 0 ? t.softcap * std::tanh(x / t.softcap) : x; }

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
#if HWY_HAVE_SCALABLE
    // SVE's vectors are sizeless (no arrays of them): one row at a time, each row's sums in the same order.
    for (int r = 0; r < nr; ++r) {
      const float* q = t.q + size_t(r0 + r) * t.head_dim;
      V acc = hn::Zero(d);
      int lane = 0;
      for (; lane + n <= t.head_dim; lane += n) acc = hn::MulAdd(hn::LoadU(d, q + lane), hn::LoadU(d, k + lane), acc);
      float dot = hn::GetLane(hn::SumOfLanes(d, acc));
#else
    V acc[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
    int lane = 0;
    for (; lane + n <= t.head_dim; lane += n) {
      const V kv = hn::LoadU(d, k + lane);
      for (int r = 0; r < nr; ++r)
        acc[r] = hn::MulAdd(hn::LoadU(d, t.q + size_t(r0 + r) * t.head_dim + lane), kv, acc[r]);
    }
    for (int r = 0; r < nr; ++r) {
      const float* q = t.q + size_t(r0 + r) * t.head_dim;
      float dot = hn::GetLane(hn::SumOfLanes(d, acc[r]));
#endif
      for (int l = lane; l < t.head_dim; ++l) dot += q[l] * k[l];
      t.scores[(r0 + r) * kTileKeys + j] = Capped(t, dot * t.scale) + t.bias[(r0 + r) * t.bias_stride + j];
    }
  }
}

// acc[lane …] = acc·correction + Σ_j p_j v_j[lane …] in vectors of at most kCap lanes, for the rows
// of `block`, while a whole vector fits before v_head_dim; returns the first lane not done.
template <size_t kCap>
HWY_INLINE int PvLanes(const RowTile& t, const RowStates& states, const int* block, int nr, const float* correction,
                       int lane) {
  const hn::CappedTag<float, kCap> d;
  const int n = int(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
#if HWY_HAVE_SCALABLE
  // Sizeless SVE vectors: row by row, each lane's chain the same fused multiply-adds in the same order.
  int end = lane;
  for (int b = 0; b < nr; ++b) {
    const int r = block[b];
    for (end = lane; end + n <= t.v_head_dim; end += n) {
      V a = hn::Mul(hn::LoadU(d, AccOf(t, states, r) + end), hn::Set(d, correction[r]));
      for (int j = 0; j < t.keys; ++j)
        a = hn::MulAdd(hn::Set(d, t.scores[size_t(r) * kTileKeys + j]), hn::LoadU(d, t.v_rows[j] + end), a);
      hn::StoreU(a, d, AccOf(t, states, r) + end);
    }
  }
  return end;
#else
  for (; lane + n <= t.v_head_dim; lane += n) {
    V a[4];  // the rows' chains interleaved, each value vector loaded once per key
    for (int b = 0; b < nr; ++b)
      a[b] = hn::Mul(hn::LoadU(d, AccOf(t, states, block[b]) + lane), hn::Set(d, correction[block[b]]));
    for (int j = 0; j < t.keys; ++j) {
      const V v = hn::LoadU(d, t.v_rows[j] + lane);
      for (int b = 0; b < nr; ++b) a[b] = hn::MulAdd(hn::Set(d, t.scores[size_t(block[b]) * kTileKeys + j]), v, a[b]);
    }
    for (int b = 0; b < nr; ++b) hn::StoreU(a[b], d, AccOf(t, states, block[b]) + lane);
  }
  return lane;
#endif
}

// Row r's scores of keys [j, j + lanes) from their dot products: scale·dot (soft-capped where the tile
// asks) + bias.
template <class D>
HWY_INLINE void StoreScores(D d, const RowTile& t, int r, size_t j, hn::Vec<D> dot) {
  float* out = t.scores + size_t(r) * kTileKeys + j;
  const float* bias = t.bias + size_t(r) * size_t(t.bias_stride) + j;
  if (t.softcap > 0) {  // soft-capped before the bias, value by value (Gemma 2's models only)
    hn::StoreU(hn::Mul(dot, hn::Set(d, t.scale)), d, out);
    for (size_t i = 0; i < hn::Lanes(d); ++i) out[i] = Capped(t, out[i]) + bias[i];
  } else {
    hn::StoreU(hn::MulAdd(dot, hn::Set(d, t.scale), hn::LoadU(d, bias)), d, out);
  }
}

#if !HWY_HAVE_SCALABLE
// Scores of rows [r0, r0 + kRows) against the transposed tile, two vectors of keys at a time: each key
// vector loaded once for all the rows and each broadcast query lane used twice — 2·kRows independent
// chains in registers, one load per FMA where a row at a time needs two. Every (row, key) score is the
// same chain of FMAs over the lanes in order as a row at a time forms, so the bits do not depend on the
// blocking. kTileKeys is a multiple of two vectors on every fixed-width target.
template <int kRows, class D>
HWY_INLINE void TransposedScores(D d, const RowTile& t, int r0) {
  using V = hn::Vec<D>;
  const size_t n = hn::Lanes(d);
  for (size_t j = 0; j < size_t(kTileKeys); j += 2 * n) {
    V dot0[kRows], dot1[kRows];
    for (int b = 0; b < kRows; ++b) dot0[b] = dot1[b] = hn::Zero(d);
    for (int lane = 0; lane < t.head_dim; ++lane) {
      const float* k = t.keys_t + size_t(lane) * kTileKeys + j;
      const V k0 = hn::LoadU(d, k), k1 = hn::LoadU(d, k + n);
      for (int b = 0; b < kRows; ++b) {
        const V qv = hn::Set(d, t.q[size_t(r0 + b) * t.head_dim + lane]);
        dot0[b] = hn::MulAdd(qv, k0, dot0[b]);
        dot1[b] = hn::MulAdd(qv, k1, dot1[b]);
      }
    }
    for (int b = 0; b < kRows; ++b) {
      StoreScores(d, t, r0 + b, j, dot0[b]);
      StoreScores(d, t, r0 + b, j + n, dot1[b]);
    }
  }
}
#endif

// For each row r: scores = q·k·scale + bias (−infinity past the valid keys).
HWY_INLINE void TileScores(const RowTile& t) {
  const hn::ScalableTag<float> d;
  if (t.k_rows != nullptr) {
    for (int r0 = 0; r0 < t.rows; r0 += 4) RowScores(d, t, r0, std::min(4, t.rows - r0));
  } else {
    // Vertical FMAs over the whole (padded) tile: kTileKeys is a multiple of every x86 vector
    // width, so there is no tail.
#if HWY_HAVE_SCALABLE
    // Sizeless SVE vectors (no arrays of them): one row and one vector of keys at a time.
    using V = hn::Vec<decltype(d)>;
    const size_t n = hn::Lanes(d);
    for (int r = 0; r < t.rows; ++r) {
      const float* q = t.q + size_t(r) * t.head_dim;
      for (size_t j = 0; j < size_t(kTileKeys); j += n) {
        V dot = hn::Zero(d);
        for (int lane = 0; lane < t.head_dim; ++lane) {
          dot = hn::MulAdd(hn::Set(d, q[lane]), hn::LoadU(d, t.keys_t + size_t(lane) * kTileKeys + j), dot);
        }
        StoreScores(d, t, r, j, dot);
      }
    }
#else
    // Blocks of up to four rows × two vectors of keys (TransposedScores).
    int r0 = 0;
    for (; r0 + 4 <= t.rows; r0 += 4) TransposedScores<4>(d, t, r0);
    switch (t.rows - r0) {
      case 3: TransposedScores<3>(d, t, r0); break;
      case 2: TransposedScores<2>(d, t, r0); break;
      case 1: TransposedScores<1>(d, t, r0); break;
      default: break;
    }
#endif
  }
}

// For each row r, from the scores of TileScores: max' = max(max, scores); p = exp(scores − max');
// sum = sum·exp(max − max') + Σp; acc = acc·exp(max − max') + Σ p_j v_j. Masked keys add nothing;
// a tile with no visible key leaves that row's state unchanged. states: `rows` rows.
HWY_INLINE void AccumulateRows(const RowTile& t, const RowStates& states) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t n = hn::Lanes(d);
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // Online softmax per row: p = exp(s − max'), zero where masked (−infinity is outside Exp's
  // domain). NaN scores stay NaN (Ne is true for them) and reach the output, as in the reference.
  float correction[kMaxRows];
  bool active[kMaxRows];
  for (int r = 0; r < t.rows; ++r) {
    float* s = t.scores + size_t(r) * kTileKeys;
    float& row_max = states.max[r];
    V tile_max = hn::Set(d, neg_inf);
    for (size_t j = 0; j < size_t(kTileKeys); j += n) tile_max = hn::Max(tile_max, hn::LoadU(d, s + j));
    const float new_max = std::max(row_max, hn::GetLane(hn::MaxOfLanes(d, tile_max)));
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
    correction[r] = row_max == neg_inf ? 0.0f : std::exp(row_max - new_max);
    states.sum[r] = states.sum[r] * correction[r] + hn::GetLane(hn::SumOfLanes(d, sum));
    row_max = new_max;
  }

  // acc = acc·correction + Σ_j p_j v_j: blocks of up to four rows × two vectors of lanes kept in
  // registers, each value row loaded once per block.
  for (int r0 = 0; r0 < t.rows; r0 += 4) {
    int block[4], nr = 0;
    for (int r = r0; r < std::min(r0 + 4, t.rows); ++r) {
      if (active[r]) block[nr++] = r;
    }
    if (nr == 0) continue;
    int lane = 0;
#if !HWY_HAVE_SCALABLE  // (SVE: PvLanes below does every whole vector, row by row)
    for (; lane + int(2 * n) <= t.v_head_dim; lane += int(2 * n)) {
      V a0[4], a1[4];
      for (int b = 0; b < nr; ++b) {
        const V c = hn::Set(d, correction[block[b]]);
        a0[b] = hn::Mul(hn::LoadU(d, AccOf(t, states, block[b]) + lane), c);
        a1[b] = hn::Mul(hn::LoadU(d, AccOf(t, states, block[b]) + lane + n), c);
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
        hn::StoreU(a0[b], d, AccOf(t, states, block[b]) + lane);
        hn::StoreU(a1[b], d, AccOf(t, states, block[b]) + lane + n);
      }
    }
#endif
    // The last lanes (fewer than two vectors; small heads have nothing else): narrower vectors,
    // then scalars.
    lane = PvLanes<16>(t, states, block, nr, correction, lane);
    lane = PvLanes<8>(t, states, block, nr, correction, lane);
    lane = PvLanes<4>(t, states, block, nr, correction, lane);
    for (int b = 0; b < nr; ++b) {
      const int r = block[b];
      const float* p = t.scores + size_t(r) * kTileKeys;
      float* acc = AccOf(t, states, r);
      for (int l = lane; l < t.v_head_dim; ++l) {
        float a = acc[l] * correction[r];
        for (int j = 0; j < t.keys; ++j) a += p[j] * t.v_rows[j][l];
        acc[l] = a;
      }
    }
  }
}

HWY_INLINE void UpdateRows(const RowTile& t, const RowStates& states) {
  TileScores(t);
  AccumulateRows(t, states);
}

// The per-thread buffers of the items a thread runs.
struct ItemBuffers {
  std::vector<std::byte> rotated;  // rotated rows in the storage type, before widening
  // Per position regime (one without regimes): the Q block and the K tile rotated its way.
  std::array<std::vector<float>, 3> q;       // rows × head_dim
  std::array<std::vector<float>, 3> keys_t;  // head_dim × kTileKeys
  std::array<std::vector<float>, 3> keys;    // kTileKeys × head_dim (row layout, rotated or non-F32 keys)
  std::array<std::vector<const float*>, 3> k_rows;
  std::array<std::vector<float>, 3> regime_scores;  // kMaxRows × kTileKeys: one regime's scores, merged
  std::vector<float> v;                             // kTileKeys × v_head_dim (non-F32 values)
  std::vector<const float*> v_rows;
  std::vector<float> bias, scores;
  std::vector<float> max, sum, acc;   // per row; acc rows × v_head_dim
  std::unique_ptr<Scratch> rotation;  // coefficients of the token being rotated (Scratch does not move)

  explicit ItemBuffers(const AttentionJob& p) {
    const std::size_t rows = std::size_t(p.block_tokens * p.group);
    const std::size_t d = std::size_t(p.head_dim), dv = std::size_t(p.v_head_dim);
    rotated.resize(std::max<std::size_t>(std::size_t(p.group), 1) * d * 4);
    for (int r = 0; r < p.rule.count; ++r) {
      q[r].resize(rows * d);
      if (p.k_tile_of[r] == r) {
        keys_t[r].resize(d * kTileKeys);
        keys[r].resize(d * kTileKeys);
        k_rows[r].resize(kTileKeys);
      }
      if (p.rule.count > 1) regime_scores[r].resize(std::size_t(kMaxRows) * kTileKeys);
    }
    v.resize(std::size_t(kTileKeys) * dv);
    v_rows.resize(kTileKeys);
    bias.resize(std::size_t(kMaxRows) * kTileKeys);
    scores.resize(std::size_t(kMaxRows) * kTileKeys);
    max.resize(rows);
    sum.resize(rows);
    acc.resize(rows * dv);
    const detail::RotateJob* job = nullptr;  // every rotation of a call has the rope's pair map
    for (int r = 0; r < 3; ++r) {
      if (job == nullptr) job = p.q_rotations[r] != nullptr ? p.q_rotations[r] : p.k_rotations[r];
    }
    if (job != nullptr) rotation = std::make_unique<Scratch>(*job->map);
  }
};

// `heads` consecutive heads of token (b, s) of `view` as float32 rows `d` apart in dst: rotated by
// `job` (when set) in the storage type first — the bits RotateCall::run() writes — then widened.
HWY_INLINE void LoadRows(const detail::RotateJob* job, const Heads& view, std::int64_t seq, std::int64_t b,
                         std::int64_t s, std::int64_t head, std::int64_t heads, int d, float* dst, ItemBuffers& buf) {
  if (job == nullptr) {
    for (std::int64_t h = 0; h < heads; ++h) WidenRow(view.row(b, s, head + h), view.dtype, d, dst + h * d);
    return;
  }
  const std::int64_t token = b * seq + s;
  if (view.dtype == DType::F32) {  // the storage type is float32: rotate straight into the rows
    RotateTokenHeads(*job, view, token, head, heads, dst, d, *buf.rotation);
    return;
  }
  RotateTokenHeads(*job, view, token, head, heads, buf.rotated.data(), d, *buf.rotation);
  WidenRow(buf.rotated.data(), view.dtype, heads * d, dst);
}

HWY_INLINE float BiasValue(const AttentionJob& p, std::int64_t b, std::int64_t head, std::int64_t s, std::int64_t t,
                           std::int64_t q_pos, std::int64_t k_pos) {
  switch (p.bias) {
    case BiasKind::Alibi: return detail::alibi_logit_bias(p.alibi_slopes[head], q_pos, k_pos);
    case BiasKind::RelativeBucket: {
      const std::int64_t r = std::clamp(k_pos - q_pos, -p.t5_range, p.t5_range);
      return p.t5_table[std::size_t(p.t5_lut[r + p.t5_range]) * p.q_heads + head];
    }
    case BiasKind::Dense: {
      const std::int64_t db = p.dense_batch == 1 ? 0 : b;
      const std::int64_t dh = p.dense_heads == 1 ? 0 : head;
      return p.dense[((db * p.dense_heads + dh) * p.q_seq + s) * p.k_seq + t];
    }
    case BiasKind::None: break;
  }
  return 0.0f;
}

// The rows of k and v that hold keys [k_first, k_first + keys): through the page table when the cache is
// read in place (one division per tile), else the keys' own indices.
HWY_INLINE void StoredRows(const AttentionJob& p, std::int64_t k_first, int keys, std::int64_t* rows) {
  if (p.kv_pages == nullptr) {
    for (int j = 0; j < keys; ++j) rows[j] = k_first + j;
    return;
  }
  std::int64_t page = k_first / p.page_size, entry = k_first % p.page_size;
  for (int j = 0; j < keys; ++j) {
    rows[j] = std::int64_t{p.kv_pages[page]} * p.page_span + entry;
    if (++entry == p.page_size) entry = 0, ++page;
  }
}

// Row (b, s, head) of an e4m3 view (AttentionJob::k_e4m3_scale): strides in bytes.
HWY_INLINE const std::uint8_t* E4m3Row(const Heads& view, std::int64_t b, std::int64_t s, std::int64_t head) {
  return static_cast<const std::uint8_t*>(view.data) + b * view.batch_stride + s * view.seq_stride +
         head * view.head_stride;
}

// K tile `kt` of keys [k_first, k_first + keys), stored in rows `rows` of k: rotated by k_rotations[kt]
// in the storage type and widened (e4m3: widened × scale), then transposed (padding keys zero) or kept as
// rows (float32 keys that need no rotation are read in place). A rotation reads key k_first + j itself
// (kv_pages is null then).
HWY_INLINE void LoadKeyTile(const AttentionJob& p, int kt, std::int64_t b, std::int64_t kv_head, std::int64_t k_first,
                            int keys, const std::int64_t* rows, ItemBuffers& s) {
  const detail::RotateJob* job = p.k_rotations[kt];
  const int d = p.head_dim;
  const float** k_rows = s.k_rows[kt].data();
  for (int j = 0; j < keys; ++j) {
    float* row = s.keys[kt].data() + std::size_t(j) * d;
    if (p.k_e4m3_scale != 0.0f) {
      WidenE4m3(E4m3Row(p.k, b, rows[j], kv_head), d, p.k_e4m3_scale, row);
      k_rows[j] = row;
    } else if (job == nullptr && p.k.dtype == DType::F32) {
      k_rows[j] = static_cast<const float*>(p.k.row(b, rows[j], kv_head));
    } else {
      LoadRows(job, p.k, p.k_seq, b, job == nullptr ? rows[j] : k_first + j, kv_head, 1, d, row, s);
      k_rows[j] = row;
    }
  }
  if (p.transpose) {  // lane-major: each destination row written contiguously, padding keys zero
    for (int l = 0; l < d; ++l) {
      float* dst = s.keys_t[kt].data() + std::size_t(l) * kTileKeys;
      for (int j = 0; j < keys; ++j) dst[j] = k_rows[j][l];
      std::fill(dst + keys, dst + kTileKeys, 0.0f);
    }
  }
}

void RunItem(const AttentionJob& p, std::int64_t b, std::int64_t kv_head, std::int64_t q_first, ItemBuffers& s) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int d = p.head_dim, dv = p.v_head_dim;
  const std::int64_t tokens = std::min(p.block_tokens, p.q_seq - q_first);
  const std::int64_t rows = tokens * p.group;
  const std::int64_t q_token0 = b * p.q_seq + q_first;
  const bool need_mask = p.q_mask.data != nullptr;
  const bool transpose = p.transpose;
  const int regimes = p.rule.count;

  // Q block per regime: rows ordered (token, head within the group), rotated on load; regime 0 now,
  // the others when a tile first needs them.
  std::array<bool, 3> q_loaded = {false, false, false};
  const auto load_q = [&](int r) {
    for (std::int64_t t = 0; t < tokens; ++t) {
      LoadRows(p.q_rotations[r], p.q, p.q_seq, b, q_first + t, kv_head * p.group, p.group, d,
               s.q[r].data() + t * p.group * d, s);
    }
    q_loaded[r] = true;
  };
  load_q(0);
  std::fill_n(s.max.begin(), rows, kNegInf);
  std::fill_n(s.sum.begin(), rows, 0.0f);
  std::fill_n(s.acc.begin(), rows * dv, 0.0f);

  std::int64_t q_min = 0, q_max = 0;
  if (need_mask) {
    q_min = std::numeric_limits<std::int64_t>::max();
    q_max = -1;
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t qp = p.q_mask.at(0, q_token0 + t);
      q_min = std::min(q_min, qp);
      q_max = std::max(q_max, qp);
    }
  }

  int sel[kTileKeys];  // the regime of each key of the tile for the current token
  for (std::int64_t k_first = 0; k_first < p.k_seq; k_first += kTileKeys) {
    const int keys = int(std::min<std::int64_t>(kTileKeys, p.k_seq - k_first));
    const std::int64_t k_token0 = b * p.k_seq + k_first;
    // Skip tiles no row of the block can see.
    std::int64_t tile_k_min = std::numeric_limits<std::int64_t>::max(), tile_k_max = -1;
    if (need_mask && (p.causal || p.window > 0)) {
      for (int j = 0; j < keys; ++j) {
        const std::int64_t kp = p.k_mask.at(0, k_token0 + j);
        tile_k_min = std::min(tile_k_min, kp);
        tile_k_max = std::max(tile_k_max, kp);
      }
      if (p.causal && tile_k_min > q_max) continue;
      if (p.window > 0 && q_min - tile_k_max >= p.window) continue;
    }

    std::int64_t rows[kTileKeys];  // of k and v
    StoredRows(p, k_first, keys, rows);
    // K tiles: without regimes now; with regimes when a token first needs them (ReRoPE's far tiles
    // never rotate the keys for the near regime).
    std::array<bool, 3> k_loaded = {false, false, false};
    const auto need = [&](int r) {
      if (!q_loaded[r]) load_q(r);
      const int kt = p.k_tile_of[r];
      if (!k_loaded[kt]) {
        LoadKeyTile(p, kt, b, kv_head, k_first, keys, rows, s);
        k_loaded[kt] = true;
      }
    };
    if (regimes == 1) need(0);
    // V rows: read in place when float32, else widened (e4m3: × scale).
    for (int j = 0; j < keys; ++j) {
      if (p.v_e4m3_scale != 0.0f) {
        WidenE4m3(E4m3Row(p.v, b, rows[j], kv_head), dv, p.v_e4m3_scale, s.v.data() + std::size_t(j) * dv);
        s.v_rows[j] = s.v.data() + std::size_t(j) * dv;
        continue;
      }
      const auto* row = static_cast<const std::byte*>(p.v.row(b, rows[j], kv_head));
      if (p.v.dtype == DType::F32) {
        s.v_rows[j] = reinterpret_cast<const float*>(row);
      } else {
        WidenRow(row, p.v.dtype, dv, s.v.data() + std::size_t(j) * dv);
        s.v_rows[j] = s.v.data() + std::size_t(j) * dv;
      }
    }

    RowTile tile;
    tile.v_rows = s.v_rows.data();
    tile.bias = s.bias.data();
    tile.head_dim = d;
    tile.v_head_dim = dv;
    tile.keys = keys;
    tile.scale = p.scale;
    tile.softcap = p.softcap;
    tile.scores = s.scores.data();
    // Points the tile at regime r's Q rows (from row r0 of the block) and K tile.
    const auto use_regime = [&](RowTile& t, int r, std::int64_t r0) {
      const int kt = p.k_tile_of[r];
      t.keys_t = transpose ? s.keys_t[kt].data() : nullptr;
      t.k_rows = transpose ? nullptr : s.k_rows[kt].data();
      t.q = s.q[r].data() + r0 * d;
    };
    // The state of the block's rows from row r0 on (rows ordered (token, head within the group)).
    const auto states_from = [&](std::int64_t r0) {
      return RowStates{s.max.data() + r0, s.sum.data() + r0, s.acc.data() + r0 * dv};
    };
    // A tile every row of the block sees whole, under one regime, one scale and no bias (most tiles of a
    // long causal prefill): all the block's rows at once, kMaxRows per update, one mask row for all.
    // Each row's arithmetic is the token-by-token path's, so the result is the same to the bit.
    const bool block_sees_tile =
        !need_mask || ((!p.causal || tile_k_max <= q_min) && (p.window <= 0 || q_max - tile_k_min < p.window));
    if (block_sees_tile && regimes == 1 && p.bias == BiasKind::None &&
        (p.logn_length <= 0 || q_max + 1 <= p.logn_length)) {
      for (int j = 0; j < kTileKeys; ++j) s.bias[std::size_t(j)] = j < keys ? 0.0f : kNegInf;
      tile.bias_stride = 0;
      const std::int64_t block_rows = tokens * p.group;  // (`rows` here: the tile's rows of k and v)
      for (std::int64_t r0 = 0; r0 < block_rows; r0 += kMaxRows) {
        tile.rows = int(std::min<std::int64_t>(kMaxRows, block_rows - r0));
        use_regime(tile, 0, r0);
        UpdateRows(tile, states_from(r0));
      }
      continue;
    }
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t qp = need_mask ? p.q_mask.at(0, q_token0 + t) : 0;
      if (need_mask && ((p.causal && tile_k_min > qp) || (p.window > 0 && qp - tile_k_max >= p.window))) {
        continue;  // this token sees no key of the tile
      }
      tile.scale = p.scale;
      if (p.logn_length > 0 && qp + 1 > p.logn_length) {
        tile.scale = float(p.exact_scale * (std::log(double(qp + 1)) / std::log(double(p.logn_length))));
      }
      // Without a bias the row of masks is the same for every head of the group: formed once per
      // token (and without per-key tests when the whole tile is visible), then shared by every row.
      const bool plain = p.bias == BiasKind::None;
      if (plain) {
        const bool all_visible =
            !need_mask || ((!p.causal || tile_k_max <= qp) && (p.window <= 0 || qp - tile_k_min < p.window));
        float* bias = s.bias.data();
        for (int j = 0; j < kTileKeys; ++j) {
          bool masked = j >= keys;
          if (!masked && !all_visible) {
            const std::int64_t kp = p.k_mask.at(0, k_token0 + j);
            masked = (p.causal && kp > qp) || (p.window > 0 && qp - kp >= p.window);
          }
          bias[j] = masked ? kNegInf : 0.0f;
        }
      }
      // The regimes this token's visible keys use (regimes need no bias: the row above is the mask).
      unsigned used = 1;
      int only = 0;
      if (regimes > 1) {
        used = 0;
        for (int j = 0; j < keys; ++j) {
          if (s.bias[j] == kNegInf) continue;
          sel[j] = p.rule.of(qp, p.k_mask.at(0, k_token0 + j));
          used |= 1u << sel[j];
        }
        if (used == 0) continue;
        only = (used & (used - 1)) == 0 ? __builtin_ctz(used) : -1;
        for (int r = 0; r < regimes; ++r) {
          if (used & (1u << r)) need(r);
        }
      }
      for (std::int64_t g0 = 0; g0 < p.group; g0 += kMaxRows) {
        const int rows_now = int(std::min<std::int64_t>(kMaxRows, p.group - g0));
        // Without a bias every row takes the mask row formed above (stride 0); with one, each its own row.
        tile.bias_stride = plain ? 0 : kTileKeys;
        for (int g = 0; g < rows_now && !plain; ++g) {
          const std::int64_t head = kv_head * p.group + g0 + g;
          float* bias = s.bias.data() + std::size_t(g) * kTileKeys;
          for (int j = 0; j < kTileKeys; ++j) {
            if (j >= keys) {
              bias[j] = kNegInf;
              continue;
            }
            const std::int64_t kp = need_mask ? p.k_mask.at(0, k_token0 + j) : 0;
            const bool masked = (p.causal && kp > qp) || (p.window > 0 && qp - kp >= p.window);
            bias[j] = masked ? kNegInf : BiasValue(p, b, head, q_first + t, k_first + j, qp, kp);
          }
        }
        tile.rows = rows_now;
        if (only >= 0) {  // one regime for the whole row: plain attention's arithmetic
          use_regime(tile, only, t * p.group + g0);
          UpdateRows(tile, states_from(t * p.group + g0));
        } else {
          // Each regime's scores for the rows, then per key the score of its regime: one softmax.
          for (int reg = 0; reg < regimes; ++reg) {
            if (!(used & (1u << reg))) continue;
            RowTile part = tile;
            use_regime(part, reg, t * p.group + g0);
            part.scores = s.regime_scores[reg].data();
            TileScores(part);
          }
          for (int g = 0; g < rows_now; ++g) {
            float* merged = s.scores.data() + std::size_t(g) * kTileKeys;
            for (int j = 0; j < kTileKeys; ++j) {
              merged[j] =
                  j < keys && s.bias[j] != kNegInf ? s.regime_scores[sel[j]][std::size_t(g) * kTileKeys + j] : kNegInf;
            }
          }
          AccumulateRows(tile, states_from(t * p.group + g0));
        }
      }
    }
  }

  // out = acc / sum; a row that saw no key is zero.
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t g = 0; g < p.group; ++g) {
      const std::int64_t r = t * p.group + g;
      float* acc = s.acc.data() + r * dv;
      const float sum = s.sum[r];
      for (int l = 0; l < dv; ++l) acc[l] = sum > 0.0f ? acc[l] / sum : 0.0f;
      void* row = p.out.row(b, q_first + t, kv_head * p.group + g);
      detail::narrow(acc, dv, p.out.dtype, row);
    }
  }
}

// The whole call on this target: every item, on up to `threads` threads.
void RunAttention(const AttentionJob& p, int threads) {
  detail::parallel_items(
      threads, p.items(), [&p] { return ItemBuffers(p); },
      [&p](std::int64_t i, ItemBuffers& s) {
        const std::int64_t block = i % p.blocks, kv_head = (i / p.blocks) % p.kv_heads, b = i / (p.blocks * p.kv_heads);
        RunItem(p, b, kv_head, block * p.block_tokens, s);
      });
}

}  // namespace ropekit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
