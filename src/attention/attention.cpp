// Softmax attention with RoPE fused into the tile loads (ropekit/attention.hpp): the arguments are
// validated and resolved here, the rotations prepared once (validated, table pinned), the work
// scheduled into items; then one per-target driver (src/cpu/attention-inl.h) runs every item with the
// rotation inlined into its Q and K loads.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <vector>

#include "attention/attention_internal.hpp"
#include "call/prepare.hpp"
#include "rope/attention_job.hpp"
#include "rope/backend.hpp"
#include "rope/call_shape.hpp"
#include "rope/views.hpp"
#include "ropekit/attention.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

// Items of about this many query rows (tokens × the query heads of one kv head): each K tile is
// rotated once per item, so its cost is ~1/kRowsPerItem of the scores; items get smaller only when
// the threads need more of them.
constexpr std::int64_t kRowsPerItem = 1024;
// Calls with fewer rows per item than this (decode) read keys as rows, without a transpose. Decided
// per call from q_seq and the group size only, never from the block split, so that results do not
// depend on the thread count.
constexpr std::int64_t kTransposeRows = 8;
constexpr int kTransposeHeadDim = 64;
// Multiply-adds (q·k and p·v, before the causal mask) per thread below which fewer threads run.
constexpr double kWorkPerThread = 1 << 20;

}  // namespace

namespace detail {

ResolvedAttention resolve_attention(const Rope* rope, const AttentionArgs& args, const AttentionOptions& options,
                                    RopeLoads loads, KvMemory kv) {
  ResolvedAttention r;
  // Without a Rope (or args.head_dim), q's stated width is the head width.
  int d = args.head_dim != 0 || rope != nullptr ? args.head_dim : args.q.head_dim;
  if (rope != nullptr) {
    if (d != 0 && d != rope->spec().head_dim) {
      throw Error(fmt::format("args.head_dim = {} differs from the rope's head_dim = {}", d, rope->spec().head_dim));
    }
    d = rope->spec().head_dim;
  }
  if (d <= 0) {
    throw Error(fmt::format("args.head_dim = {}: must be > 0 (attention without a Rope needs it, or q's head_dim)", d));
  }
  if (args.v_head_dim < 0) throw Error(fmt::format("args.v_head_dim = {}: must be >= 0", args.v_head_dim));
  const int dv = args.v_head_dim == 0 ? d : args.v_head_dim;
  r.head_dim = d;
  r.v_head_dim = dv;

  check_view(args.q, "q", d);
  check_view(args.k, "k", d);
  check_view(args.v, "v", dv);
  check_view(args.out, "out", dv);
  if (args.q.empty()) throw Error("q is empty: attention needs at least one query");
  if (args.out.data == nullptr) throw Error("out.data is null");
  if (args.k.batch != args.q.batch || args.v.batch != args.q.batch || args.out.batch != args.q.batch) {
    throw Error(fmt::format("batch sizes differ: q {}, k {}, v {}, out {}", args.q.batch, args.k.batch, args.v.batch,
                            args.out.batch));
  }
  if (args.v.seq != args.k.seq) {
    throw Error(fmt::format("v.seq = {} differs from k.seq = {}: one value per key", args.v.seq, args.k.seq));
  }
  if (args.out.seq != args.q.seq || args.out.heads != args.q.heads) {
    throw Error(
        fmt::format("out has seq {} x heads {}, q has seq {} x heads {}: one output row per "
                    "query head",
                    args.out.seq, args.out.heads, args.q.seq, args.q.heads));
  }
  if (args.k.heads <= 0 || args.v.heads != args.k.heads) {
    throw Error(fmt::format("k.heads = {}, v.heads = {}: must be equal and > 0", args.k.heads, args.v.heads));
  }
  if (args.q.heads % args.k.heads != 0) {
    throw Error(
        fmt::format("q.heads = {} is not a multiple of k.heads = {} (GQA shares each kv head "
                    "among q.heads / k.heads query heads)",
                    args.q.heads, args.k.heads));
  }
  require_no_self_overlap(args.out, "out", dv);
  const std::array<ByteRange, 4> ranges = {byte_range(args.out, "out", dv), byte_range(args.q, "q", d),
                                           byte_range(args.k, "k", d), byte_range(args.v, "v", dv)};
  // out against q, and against k and v where their views are their memory (a cache's caller checks its own).
  const std::size_t checked = kv == KvMemory::Views ? ranges.size() : 2;
  for (std::size_t i = 1; i < checked; ++i) {
    if (ranges[i].begin == ranges[i].end) continue;
    require_disjoint(ranges[0], ranges[i]);
  }

  if (options.window < 0) throw Error(fmt::format("options.window = {}: must be >= 0 (0: no window)", options.window));
  if (options.logit_softcap && !(*options.logit_softcap > 0 && std::isfinite(float(*options.logit_softcap)))) {
    throw Error(fmt::format("options.logit_softcap = {}: must be positive and finite (absent: no soft-capping)",
                            *options.logit_softcap));
  }
  if (options.threads < 0)
    throw Error(fmt::format("options.threads = {}: must be >= 0 (0: the default)", options.threads));
  if (options.softmax_scale && !(std::isfinite(*options.softmax_scale) && *options.softmax_scale > 0.0)) {
    throw Error(fmt::format("options.softmax_scale = {}: must be finite and > 0", *options.softmax_scale));
  }
  if (!(std::isfinite(options.softmax_scale_mult) && options.softmax_scale_mult > 0.0)) {
    throw Error(fmt::format("options.softmax_scale_mult = {}: must be finite and > 0", options.softmax_scale_mult));
  }

  const std::int64_t q_tokens = args.q.tokens(), k_tokens = args.k.tokens();
  // The rotations on load, prepared once over all of q and k (views and positions validated, the
  // table or on-the-fly choice made as one apply() over them would make it).
  if (options.table && (rope == nullptr || loads == RopeLoads::None)) {
    throw Error("options.table is set but nothing is rotated on load (attention without a Rope)");
  }
  const bool rotate_q = rope != nullptr && loads != RopeLoads::None;
  const bool rotate_k = rope != nullptr && loads == RopeLoads::QueriesAndKeys && k_tokens > 0;
  if (rotate_q) {
    r.q_rotation =
        prepare(*rope, {.q = args.q, .positions = args.q_positions},
                {.use = ViewUse::Read, .names = {.q = "q", .positions = "q_positions"}, .table = options.table});
  }
  if (rotate_k) {
    r.k_rotation =
        prepare(*rope, {.q = args.k, .positions = args.k_positions},
                {.use = ViewUse::Read, .names = {.q = "k", .positions = "k_positions"}, .table = options.table});
  }
  const bool positional_bias =
      std::holds_alternative<AlibiBias>(options.bias) || std::holds_alternative<RelativeBucketBias>(options.bias);
  // Log-n scaling reads the query positions (and so the mask path) too.
  if (options.causal || options.window > 0 || positional_bias || options.logn_length > 0) {
    // validated: the rope's positions were checked when the rotation was prepared (or come from a
    // cache, which holds only positions it checked).
    const auto mask = [&](const Positions& explicit_mask, const Positions& rope_positions, const char* mask_name,
                          const char* name, std::int64_t tokens, bool validated) {
      if (explicit_mask.data != nullptr || explicit_mask.count != 0) {
        check_positions(explicit_mask, mask_name, tokens, 1);
        return explicit_mask;
      }
      if (rope_positions.axes != 1) {
        throw Error(
            fmt::format("{}: required when {} has {} streams (M-RoPE): the causal mask, window "
                        "and biases need one position per token",
                        mask_name, name, rope_positions.axes));
      }
      if (!validated) check_positions(rope_positions, name, tokens, 1);
      return rope_positions;
    };
    r.q_mask = mask(args.q_mask_positions, args.q_positions, "q_mask_positions", "q_positions", q_tokens, rotate_q);
    if (k_tokens > 0) {
      r.k_mask = mask(args.k_mask_positions, args.k_positions, "k_mask_positions", "k_positions", k_tokens,
                      rotate_k || loads == RopeLoads::Queries);
    }
  }

  if (const auto* alibi = std::get_if<AlibiBias>(&options.bias)) {
    if (std::int64_t(alibi->slopes.size()) != args.q.heads) {
      throw Error(fmt::format("AlibiBias.slopes has {} values: must be one per query head ({})", alibi->slopes.size(),
                              args.q.heads));
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
      throw Error(
          fmt::format("RelativeBucketBias.table has {} values: must be num_buckets x q.heads = "
                      "{} x {} = {}",
                      t5->table.size(), t5->buckets.num_buckets, args.q.heads, want));
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
      throw Error(fmt::format("DenseBias is {} queries x {} keys: must be q.seq x k.seq = {} x {}", dense->queries,
                              dense->keys, args.q.seq, args.k.seq));
    }
  }
  const double base_scale = options.softmax_scale.value_or(1.0 / std::sqrt(double(d)));
  const double mult = rope != nullptr ? rope->plan().softmax_scale_mult : options.softmax_scale_mult;
  r.exact_scale = base_scale * mult;
  r.scale = float(r.exact_scale);
  if (options.logn_length < 0 || options.logn_length == 1 || options.logn_length >= kPositionLimit) {
    throw Error(
        fmt::format("options.logn_length = {}: must be 0 (off) or in [2, 2^47) (the trained length "
                    "whose log divides)",
                    options.logn_length));
  }
  if (options.regimes.index() != 0) resolve_regimes(rope, args, options, loads, r);
  return r;
}

void run_attention(const AttentionArgs& args, const AttentionOptions& options, const ResolvedAttention& r,
                   const KvPages* pages) {
  detail::AttentionJob p;
  p.q = args.q;
  p.k = args.k;
  p.v = args.v;
  p.out = args.out;
  p.head_dim = r.head_dim;
  p.v_head_dim = r.v_head_dim;
  p.batch = args.q.batch;
  p.q_seq = args.q.seq;
  p.k_seq = args.k.seq;
  p.q_heads = args.q.heads;
  p.kv_heads = args.k.heads;
  p.group = args.q.heads / args.k.heads;
  p.scale = r.scale;
  p.causal = options.causal;
  p.window = options.window;
  p.softcap = options.logit_softcap ? float(*options.logit_softcap) : 0.0f;
  p.q_mask = r.q_mask;
  p.k_mask = r.k_mask;
  if (const auto* alibi = std::get_if<AlibiBias>(&options.bias)) {
    p.bias = detail::BiasKind::Alibi;
    p.alibi_slopes = alibi->slopes.data();
  } else if (const auto* t5 = std::get_if<RelativeBucketBias>(&options.bias)) {
    p.bias = detail::BiasKind::RelativeBucket;
    p.t5_table = t5->table.data();
    p.t5_lut = r.t5_lut.data();
    p.t5_range = r.t5_range;
  } else if (const auto* dense = std::get_if<DenseBias>(&options.bias)) {
    p.bias = detail::BiasKind::Dense;
    p.dense = dense->data;
    p.dense_batch = dense->batch;
    p.dense_heads = dense->heads;
  }

  if (r.q_rotation) p.q_rotations[0] = &r.q_rotation->job();
  if (r.k_rotation) p.k_rotations[0] = &r.k_rotation->job();
  p.exact_scale = r.exact_scale;
  p.logn_length = options.logn_length;
  if (r.regime_count > 1) {
    p.rule = detail::rule_of(options.regimes);
    p.k_tile_of = r.k_tile_of;
    for (std::size_t reg = 0; reg < 3; ++reg) {
      if (r.q_regime[reg]) p.q_rotations[reg] = &r.q_regime[reg]->job();
      if (r.k_regime[reg]) p.k_rotations[reg] = &r.k_regime[reg]->job();
      if (r.k_as_stored[reg]) p.k_rotations[reg] = nullptr;
    }
  }

  if (pages != nullptr) {
    // The tile loader maps key indices to rows only where it reads keys as stored.
    for (const detail::RotateJob* job : p.k_rotations) {
      if (job != nullptr) throw std::logic_error("run_attention: paged keys are read in place only as stored");
    }
    p.kv_pages = pages->pages.data();
    p.page_size = pages->page_size;
    p.page_span = pages->page_span;
    p.k_e4m3_scale = pages->k_e4m3_scale;
    p.v_e4m3_scale = pages->v_e4m3_scale;
  }

  const int max_threads = options.threads > 0 ? options.threads : default_threads();
  const auto blocks_of = [&p](std::int64_t tokens) { return (p.q_seq + tokens - 1) / tokens; };
  p.block_tokens = std::min(p.q_seq, std::max<std::int64_t>(1, kRowsPerItem / p.group));
  while (p.block_tokens > 16 && p.batch * p.kv_heads * blocks_of(p.block_tokens) < 4 * max_threads) {
    p.block_tokens /= 2;
  }
  p.blocks = blocks_of(p.block_tokens);
  // Small heads always transpose: a key row of fewer than 64 lanes fills no vector of dot products
  // (the 260K TinyStories model has 8-lane heads), while its transpose costs only head_dim × 64 moves.
  p.transpose = std::min<std::int64_t>(p.q_seq, 16) * p.group >= kTransposeRows || p.head_dim < kTransposeHeadDim;
  // Threads only for work that pays for waking them: a decode step of a small model (a few heads, a few
  // hundred keys) runs faster on one thread than the parallel region costs. Results never depend on it.
  const double work =
      double(p.batch) * double(p.q_seq) * double(p.q_heads) * double(p.k_seq) * double(p.head_dim + p.v_head_dim);
  const auto useful = std::int64_t(std::max(1.0, std::min(work / kWorkPerThread, 1e9)));
  cpu::run_attention(p, int(std::min({std::int64_t(max_threads), p.items(), useful})));
}

}  // namespace detail

void attention(const AttentionArgs& args, const AttentionOptions& options) {
  const detail::ResolvedAttention r = detail::resolve_attention(nullptr, args, options, detail::RopeLoads::None);
  detail::run_attention(args, options, r);
}

void attention(const Rope& rope, const AttentionArgs& args, const AttentionOptions& options) {
  const detail::ResolvedAttention r =
      detail::resolve_attention(&rope, args, options, detail::RopeLoads::QueriesAndKeys);
  detail::run_attention(args, options, r);
}

}  // namespace ropekit
