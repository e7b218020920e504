// Softmax attention with RoPE fused into the tile loads (see ropekit/attention.hpp).
//
// Work is split into items of (batch, kv head, block of query tokens): the rows of an item are its
// tokens × the query heads that share the kv head, so each key tile is loaded (and rotated) once
// for all of them. Blocks hold about kRowsPerItem rows: the re-rotation of K tiles per block then
// costs ~1/kRowsPerItem of the scores, and fewer rows only when the threads need more items. Per key tile: rotate into a thread-local buffer in the storage
// type (what apply() would write), widen to float32 and transpose, then one online-softmax update
// per group of rows (cpu::update_rows). Memory per thread: O(kRowsPerItem · v_head_dim + tile).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attention/attention_internal.hpp"
#include "cpu/attention.hpp"
#include "rope/views.hpp"
#include "ropekit/attention.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"


namespace ropekit {
namespace {

using cpu::kTileKeys;
using detail::index_of;
using detail::sub_positions;
using detail::sub_view;
constexpr std::int64_t kRowsPerItem = 1024;
// Calls with fewer rows per item than this (decode) read keys as rows, without a transpose; see
// cpu::RowTile. Decided per call from q_seq and the group size only, never from the block split,
// so that results do not depend on the thread count.
constexpr std::int64_t kTransposeRows = 8;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// What the validation resolved, shared by every item.
struct Problem {
  const AttentionArgs* args = nullptr;
  const AttentionOptions* options = nullptr;
  const Rope* q_rope = nullptr;  // rotate q tiles on load (null: q is used as given)
  const Rope* k_rope = nullptr;  // rotate k tiles on load
  int head_dim = 0, v_head_dim = 0;
  std::int64_t block_tokens = 1;  // query tokens per item
  bool transpose = true;          // key tiles transposed (else read as rows)
  std::int64_t batch = 0, q_seq = 0, k_seq = 0, q_heads = 0, kv_heads = 0, group = 0;
  float scale = 1.0f;
  Positions q_mask, k_mask;  // one stream each; data null when nothing needs them
  std::vector<int> t5_lut;   // bucket of relative position r at [r + t5_range]
  std::int64_t t5_range = 0;
};

// The per-thread buffers of one item.
struct Scratch {
  std::vector<std::byte> rotated;  // a rotated q block or k tile in the storage type
  std::vector<float> q;            // rows × head_dim
  std::vector<float> keys_t;       // head_dim × kTileKeys
  std::vector<float> keys;         // kTileKeys × head_dim (row layout, non-F32 keys)
  std::vector<const float*> k_rows;
  std::vector<float> v;            // kTileKeys × v_head_dim (non-F32 values)
  std::vector<const float*> v_rows;
  std::vector<float> bias, scores;
  std::vector<float> max, sum, acc;  // per row; acc rows × v_head_dim
  std::vector<cpu::RowState> states;
  std::vector<std::int64_t> positions;

  explicit Scratch(const Problem& p) {
    const std::size_t rows = std::size_t(p.block_tokens * p.group);
    const std::size_t widest = std::max<std::size_t>(rows, kTileKeys);
    rotated.resize(widest * p.head_dim * 4);
    q.resize(rows * p.head_dim);
    keys_t.resize(std::size_t(p.head_dim) * kTileKeys);
    keys.resize(std::size_t(p.head_dim) * kTileKeys);
    k_rows.resize(kTileKeys);
    v.resize(std::size_t(kTileKeys) * p.v_head_dim);
    v_rows.resize(kTileKeys);
    bias.resize(std::size_t(cpu::kMaxRows) * kTileKeys);
    scores.resize(std::size_t(cpu::kMaxRows) * kTileKeys);
    states.resize(cpu::kMaxRows);
    max.resize(rows);
    sum.resize(rows);
    acc.resize(rows * p.v_head_dim);
  }
};

// Rotates (when a rope is given) `view` into scratch in its storage type and returns the view the
// tile should be read from.
Heads load_view(const Rope* rope, const Heads& view, const Positions& positions, Scratch& s,
                int head_dim) {
  if (rope == nullptr) return view;
  Heads out = bshd(s.rotated.data(), view.dtype, 1, view.seq, view.heads, head_dim);
  RotateArgs rotate;
  rotate.q = view;
  rotate.q_out = out;
  rotate.positions = positions;
  rotate.threads = 1;
  rope->apply(rotate);
  return out;
}

float bias_value(const Problem& p, std::int64_t b, std::int64_t head, std::int64_t s, std::int64_t t,
                 std::int64_t q_pos, std::int64_t k_pos) {
  const AttentionBias& bias = p.options->bias;
  if (const auto* alibi = std::get_if<AlibiBias>(&bias)) {
    return alibi_bias(alibi->slopes[head], q_pos, k_pos);
  }
  if (const auto* t5 = std::get_if<RelativeBucketBias>(&bias)) {
    const std::int64_t r = std::clamp(k_pos - q_pos, -p.t5_range, p.t5_range);
    return t5->table[std::size_t(p.t5_lut[r + p.t5_range]) * p.q_heads + head];
  }
  if (const auto* dense = std::get_if<DenseBias>(&bias)) {
    const std::int64_t db = dense->batch == 1 ? 0 : b;
    const std::int64_t dh = dense->heads == 1 ? 0 : head;
    return dense->data[((db * dense->heads + dh) * dense->queries + s) * dense->keys + t];
  }
  return 0.0f;
}

void run_item(const Problem& p, std::int64_t b, std::int64_t kv_head, std::int64_t q_first, Scratch& s) {
  const AttentionArgs& a = *p.args;
  const AttentionOptions& o = *p.options;
  const int d = p.head_dim, dv = p.v_head_dim;
  const std::int64_t tokens = std::min(p.block_tokens, p.q_seq - q_first);
  const std::int64_t rows = tokens * p.group;
  const std::int64_t q_token0 = b * p.q_seq + q_first;
  const bool need_mask = p.q_mask.data != nullptr;
  const bool transpose = p.transpose;

  // Q block: rows ordered (token, head within the group).
  {
    const Heads view = sub_view(a.q, b, q_first, tokens, kv_head * p.group, p.group);
    const Positions pos = p.q_rope ? sub_positions(a.q_positions, q_token0, tokens, s.positions) : Positions{};
    const Heads src = load_view(p.q_rope, view, pos, s, d);
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int64_t g = 0; g < p.group; ++g) {
        const auto* row = static_cast<const char*>(src.data) + index_of(src, 0, t, g) * element_size(src.dtype);
        detail::widen(row, src.dtype, d, s.q.data() + (t * p.group + g) * d);
      }
    }
  }
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

  for (std::int64_t k_first = 0; k_first < p.k_seq; k_first += kTileKeys) {
    const int keys = int(std::min<std::int64_t>(kTileKeys, p.k_seq - k_first));
    const std::int64_t k_token0 = b * p.k_seq + k_first;
    // Skip tiles no row of the block can see.
    std::int64_t tile_k_min = std::numeric_limits<std::int64_t>::max(), tile_k_max = -1;
    if (need_mask && (o.causal || o.window > 0)) {
      for (int j = 0; j < keys; ++j) {
        const std::int64_t kp = p.k_mask.at(0, k_token0 + j);
        tile_k_min = std::min(tile_k_min, kp);
        tile_k_max = std::max(tile_k_max, kp);
      }
      if (o.causal && tile_k_min > q_max) continue;
      if (o.window > 0 && q_min - tile_k_max >= o.window) continue;
    }

    // K tile: rotated in the storage type, widened, and transposed (padding keys zero) or kept as
    // rows.
    {
      const Heads view = sub_view(a.k, b, k_first, keys, kv_head, 1);
      const Positions pos = p.k_rope ? sub_positions(a.k_positions, k_token0, keys, s.positions) : Positions{};
      const Heads src = load_view(p.k_rope, view, pos, s, d);
      const auto row_of = [&](int j) {
        return static_cast<const char*>(src.data) + index_of(src, 0, j, 0) * element_size(src.dtype);
      };
      if (transpose) {
        float widened[1024];
        for (int j = 0; j < kTileKeys; ++j) {
          if (j < keys) {
            for (int l0 = 0; l0 < d; l0 += 1024) {
              const int n = std::min(1024, d - l0);
              detail::widen(row_of(j) + std::size_t(l0) * element_size(src.dtype), src.dtype, n, widened);
              for (int l = 0; l < n; ++l) s.keys_t[std::size_t(l0 + l) * kTileKeys + j] = widened[l];
            }
          } else {
            for (int l = 0; l < d; ++l) s.keys_t[std::size_t(l) * kTileKeys + j] = 0.0f;
          }
        }
      } else {
        for (int j = 0; j < keys; ++j) {
          if (src.dtype == DType::F32) {
            s.k_rows[j] = reinterpret_cast<const float*>(row_of(j));
          } else {
            detail::widen(row_of(j), src.dtype, d, s.keys.data() + std::size_t(j) * d);
            s.k_rows[j] = s.keys.data() + std::size_t(j) * d;
          }
        }
      }
    }
    // V rows: read in place when float32, else widened.
    for (int j = 0; j < keys; ++j) {
      const auto* row = static_cast<const char*>(a.v.data) + index_of(a.v, b, k_first + j, kv_head) * element_size(a.v.dtype);
      if (a.v.dtype == DType::F32) {
        s.v_rows[j] = reinterpret_cast<const float*>(row);
      } else {
        detail::widen(row, a.v.dtype, dv, s.v.data() + std::size_t(j) * dv);
        s.v_rows[j] = s.v.data() + std::size_t(j) * dv;
      }
    }

    cpu::RowTile tile;
    if (transpose) {
      tile.keys_t = s.keys_t.data();
    } else {
      tile.k_rows = s.k_rows.data();
    }
    tile.v_rows = s.v_rows.data();
    tile.bias = s.bias.data();
    tile.head_dim = d;
    tile.v_head_dim = dv;
    tile.keys = keys;
    tile.scale = p.scale;
    tile.scores = s.scores.data();
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t qp = need_mask ? p.q_mask.at(0, q_token0 + t) : 0;
      if (need_mask && ((o.causal && tile_k_min > qp) || (o.window > 0 && qp - tile_k_max >= o.window))) {
        continue;  // this token sees no key of the tile
      }
      for (std::int64_t g0 = 0; g0 < p.group; g0 += cpu::kMaxRows) {
        const int rows_now = int(std::min<std::int64_t>(cpu::kMaxRows, p.group - g0));
        for (int g = 0; g < rows_now; ++g) {
          const std::int64_t head = kv_head * p.group + g0 + g;
          float* bias = s.bias.data() + std::size_t(g) * kTileKeys;
          for (int j = 0; j < kTileKeys; ++j) {
            if (j >= keys) {
              bias[j] = kNegInf;
              continue;
            }
            const std::int64_t kp = need_mask ? p.k_mask.at(0, k_token0 + j) : 0;
            const bool masked = (o.causal && kp > qp) || (o.window > 0 && qp - kp >= o.window);
            bias[j] = masked ? kNegInf : bias_value(p, b, head, q_first + t, k_first + j, qp, kp);
          }
          const std::int64_t r = t * p.group + g0 + g;
          s.states[g] = cpu::RowState{s.max[r], s.sum[r], s.acc.data() + r * dv};
        }
        tile.q = s.q.data() + (t * p.group + g0) * d;
        tile.rows = rows_now;
        cpu::update_rows(tile, s.states.data());
        for (int g = 0; g < rows_now; ++g) {
          const std::int64_t r = t * p.group + g0 + g;
          s.max[r] = s.states[g].max;
          s.sum[r] = s.states[g].sum;
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
      auto* row = static_cast<char*>(a.out.data) +
                  index_of(a.out, b, q_first + t, kv_head * p.group + g) * element_size(a.out.dtype);
      detail::narrow(acc, dv, a.out.dtype, row);
    }
  }
}

}  // namespace

namespace detail {

std::int64_t index_of(const Heads& h, std::int64_t b, std::int64_t s, std::int64_t head) {
  return b * h.batch_stride + s * h.seq_stride + head * h.head_stride;
}

// A view of `count` tokens from token s of batch b, heads [head, head + heads).
Heads sub_view(const Heads& h, std::int64_t b, std::int64_t s, std::int64_t count, std::int64_t head,
               std::int64_t heads) {
  Heads v = h;
  v.data = static_cast<char*>(h.data) + index_of(h, b, s, head) * element_size(h.dtype);
  v.batch = 1;
  v.seq = count;
  v.heads = heads;
  return v;
}

// Tokens [first, first + count) of every stream, as a Positions over `storage`.
Positions sub_positions(const Positions& p, std::int64_t first, std::int64_t count,
                        std::vector<std::int64_t>& storage) {
  storage.resize(std::size_t(count) * p.axes);
  for (int a = 0; a < p.axes; ++a) {
    for (std::int64_t t = 0; t < count; ++t) storage[a * count + t] = p.at(a, first + t);
  }
  return {storage.data(), IndexType::I64, count, p.axes};
}

void widen(const void* src, DType dtype, int n, float* dst) {
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, std::size_t(n) * 4); return;
    case DType::BF16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = f16_to_float(s[i]);
      return;
    }
  }
}

void narrow(const float* src, int n, DType dtype, void* dst) {
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, std::size_t(n) * 4); return;
    case DType::BF16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (int i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (int i = 0; i < n; ++i) d[i] = float_to_f16(src[i]);
      return;
    }
  }
}

ResolvedAttention resolve_attention(const Rope* rope, const AttentionArgs& args,
                                    const AttentionOptions& options, bool rope_rotates_k) {
  ResolvedAttention r;
  int d = args.head_dim;
  if (rope != nullptr) {
    if (d != 0 && d != rope->spec().head_dim) {
      throw Error(fmt::format("args.head_dim = {} differs from the rope's head_dim = {}", d,
                              rope->spec().head_dim));
    }
    d = rope->spec().head_dim;
  }
  if (d <= 0) throw Error(fmt::format("args.head_dim = {}: must be > 0 (attention without a Rope needs it)", d));
  if (args.v_head_dim < 0) throw Error(fmt::format("args.v_head_dim = {}: must be >= 0", args.v_head_dim));
  const int dv = args.v_head_dim == 0 ? d : args.v_head_dim;
  r.head_dim = d;
  r.v_head_dim = dv;

  detail::check_view(args.q, "q", d);
  detail::check_view(args.k, "k", d);
  detail::check_view(args.v, "v", dv);
  detail::check_view(args.out, "out", dv);
  if (args.q.empty()) throw Error("q is empty: attention needs at least one query");
  if (args.out.data == nullptr) throw Error("out.data is null");
  if (args.k.batch != args.q.batch || args.v.batch != args.q.batch || args.out.batch != args.q.batch) {
    throw Error(fmt::format("batch sizes differ: q {}, k {}, v {}, out {}", args.q.batch, args.k.batch,
                            args.v.batch, args.out.batch));
  }
  if (args.v.seq != args.k.seq) {
    throw Error(fmt::format("v.seq = {} differs from k.seq = {}: one value per key", args.v.seq, args.k.seq));
  }
  if (args.out.seq != args.q.seq || args.out.heads != args.q.heads) {
    throw Error(fmt::format("out has seq {} x heads {}, q has seq {} x heads {}: one output row per "
                            "query head", args.out.seq, args.out.heads, args.q.seq, args.q.heads));
  }
  if (args.k.heads <= 0 || args.v.heads != args.k.heads) {
    throw Error(fmt::format("k.heads = {}, v.heads = {}: must be equal and > 0", args.k.heads, args.v.heads));
  }
  if (args.q.heads % args.k.heads != 0) {
    throw Error(fmt::format("q.heads = {} is not a multiple of k.heads = {} (GQA shares each kv head "
                            "among q.heads / k.heads query heads)", args.q.heads, args.k.heads));
  }
  detail::require_no_self_overlap(args.out, "out", dv);
  const std::array<ByteRange, 4> ranges = {byte_range(args.out, "out", dv), byte_range(args.q, "q", d),
                                           byte_range(args.k, "k", d), byte_range(args.v, "v", dv)};
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin == ranges[i].end) continue;
    require_disjoint(std::array<ByteRange, 2>{ranges[0], ranges[i]});
  }

  if (options.window < 0) throw Error(fmt::format("options.window = {}: must be >= 0 (0: no window)", options.window));
  if (options.threads < 0) throw Error(fmt::format("options.threads = {}: must be >= 0 (0: the default)", options.threads));
  if (options.softmax_scale && !(std::isfinite(*options.softmax_scale) && *options.softmax_scale > 0.0)) {
    throw Error(fmt::format("options.softmax_scale = {}: must be finite and > 0", *options.softmax_scale));
  }
  if (!(std::isfinite(options.softmax_scale_mult) && options.softmax_scale_mult > 0.0)) {
    throw Error(fmt::format("options.softmax_scale_mult = {}: must be finite and > 0", options.softmax_scale_mult));
  }

  const std::int64_t q_tokens = args.q.tokens(), k_tokens = args.k.tokens();
  const int axes = rope != nullptr ? rope->pair_map().num_axes : 1;
  if (rope != nullptr) {
    r.max_q_position = check_positions(args.q_positions, "q_positions", q_tokens, axes);
    if (rope_rotates_k && k_tokens > 0) {
      r.max_k_position = check_positions(args.k_positions, "k_positions", k_tokens, axes);
    }
  }
  const bool positional_bias = std::holds_alternative<AlibiBias>(options.bias) ||
                               std::holds_alternative<RelativeBucketBias>(options.bias);
  if (options.causal || options.window > 0 || positional_bias) {
    const auto mask = [&](const Positions& explicit_mask, const Positions& rope_positions,
                          const char* mask_name, const char* name, std::int64_t tokens) {
      if (explicit_mask.data != nullptr || explicit_mask.count != 0) {
        check_positions(explicit_mask, mask_name, tokens, 1);
        return explicit_mask;
      }
      if (rope_positions.axes != 1) {
        throw Error(fmt::format("{}: required when {} has {} streams (M-RoPE): the causal mask, window "
                                "and biases need one position per token", mask_name, name, rope_positions.axes));
      }
      check_positions(rope_positions, name, tokens, 1);
      return rope_positions;
    };
    r.q_mask = mask(args.q_mask_positions, args.q_positions, "q_mask_positions", "q_positions", q_tokens);
    if (k_tokens > 0) {
      r.k_mask = mask(args.k_mask_positions, args.k_positions, "k_mask_positions", "k_positions", k_tokens);
    }
  }

  if (const auto* alibi = std::get_if<AlibiBias>(&options.bias)) {
    if (std::int64_t(alibi->slopes.size()) != args.q.heads) {
      throw Error(fmt::format("AlibiBias.slopes has {} values: must be one per query head ({})",
                              alibi->slopes.size(), args.q.heads));
    }
    for (std::size_t h = 0; h < alibi->slopes.size(); ++h) {
      if (!std::isfinite(alibi->slopes[h])) {
        throw Error(fmt::format("AlibiBias.slopes[{}] = {}: must be finite", h, alibi->slopes[h]));
      }
    }
  }
  if (const auto* t5 = std::get_if<RelativeBucketBias>(&options.bias)) {
    t5->buckets.validate();
    const std::int64_t want = std::int64_t{t5->buckets.num_buckets} * args.q.heads;
    if (std::int64_t(t5->table.size()) != want) {
      throw Error(fmt::format("RelativeBucketBias.table has {} values: must be num_buckets x q.heads = "
                              "{} x {} = {}", t5->table.size(), t5->buckets.num_buckets, args.q.heads, want));
    }
    // Beyond ±max_distance every bucket is the last of its side, so a table over that range serves
    // any distance.
    r.t5_range = t5->buckets.max_distance;
    r.t5_lut.resize(std::size_t(2 * r.t5_range + 1));
    for (std::int64_t rel = -r.t5_range; rel <= r.t5_range; ++rel) {
      r.t5_lut[rel + r.t5_range] = t5_bucket(t5->buckets, rel);
    }
  }
  if (const auto* dense = std::get_if<DenseBias>(&options.bias)) {
    if (dense->data == nullptr) throw Error("DenseBias.data is null");
    if (dense->batch != 1 && dense->batch != args.q.batch) {
      throw Error(fmt::format("DenseBias.batch = {}: must be 1 or the batch ({})", dense->batch, args.q.batch));
    }
    if (dense->heads != 1 && dense->heads != args.q.heads) {
      throw Error(fmt::format("DenseBias.heads = {}: must be 1 or q.heads ({})", dense->heads, args.q.heads));
    }
    if (dense->queries != args.q.seq || dense->keys != args.k.seq) {
      throw Error(fmt::format("DenseBias is {} queries x {} keys: must be q.seq x k.seq = {} x {}",
                              dense->queries, dense->keys, args.q.seq, args.k.seq));
    }
  }
  const double base_scale = options.softmax_scale.value_or(1.0 / std::sqrt(double(d)));
  const double mult = rope != nullptr ? rope->plan().softmax_scale_mult : options.softmax_scale_mult;
  r.scale = float(base_scale * mult);
  return r;
}

void run_attention(const Rope* q_rope, const Rope* k_rope, const AttentionArgs& args,
                   const AttentionOptions& options, const ResolvedAttention& r) {
  Problem p;
  p.args = &args;
  p.options = &options;
  p.q_rope = q_rope;
  p.k_rope = k_rope;
  p.head_dim = r.head_dim;
  p.v_head_dim = r.v_head_dim;
  p.batch = args.q.batch;
  p.q_seq = args.q.seq;
  p.k_seq = args.k.seq;
  p.q_heads = args.q.heads;
  p.kv_heads = args.k.heads;
  p.group = args.q.heads / args.k.heads;
  p.scale = r.scale;
  p.q_mask = r.q_mask;
  p.k_mask = r.k_mask;
  p.t5_lut = r.t5_lut;
  p.t5_range = r.t5_range;
  // Grow the table once, before the threads start, as one apply() over all of q and k would.
  if (q_rope != nullptr) q_rope->prepare(r.max_q_position, args.q.tokens());
  if (k_rope != nullptr) k_rope->prepare(r.max_k_position, args.k.tokens());

  const int max_threads = options.threads > 0 ? options.threads : default_threads();
  const auto blocks_of = [&p](std::int64_t tokens) { return (p.q_seq + tokens - 1) / tokens; };
  p.block_tokens = std::min(p.q_seq, std::max<std::int64_t>(1, kRowsPerItem / p.group));
  while (p.block_tokens > 16 && p.batch * p.kv_heads * blocks_of(p.block_tokens) < 4 * max_threads) {
    p.block_tokens /= 2;
  }
  p.transpose = std::min<std::int64_t>(p.q_seq, 16) * p.group >= kTransposeRows;
  const std::int64_t blocks = blocks_of(p.block_tokens);
  const std::int64_t items = p.batch * p.kv_heads * blocks;
  const auto item = [&](std::int64_t i, Scratch& s) {
    const std::int64_t block = i % blocks, kv_head = (i / blocks) % p.kv_heads, b = i / (blocks * p.kv_heads);
    run_item(p, b, kv_head, block * p.block_tokens, s);
  };
  const int threads = int(std::min<std::int64_t>(max_threads, items));
  // Items write disjoint output rows: results do not depend on the thread count or the schedule.
  parallel_items(threads, items, [&p] { return Scratch(p); }, item);
}

}  // namespace detail

void attention(const AttentionArgs& args, const AttentionOptions& options) {
  const detail::ResolvedAttention r = detail::resolve_attention(nullptr, args, options, false);
  detail::run_attention(nullptr, nullptr, args, options, r);
}

void attention(const Rope& rope, const AttentionArgs& args, const AttentionOptions& options) {
  const detail::ResolvedAttention r = detail::resolve_attention(&rope, args, options, true);
  detail::run_attention(&rope, &rope, args, options, r);
}

}  // namespace ropekit
