// Position regimes (ropekit/attention.hpp: ReRoPE, SelfExtend, Dual Chunk Attention) in one place: what a
// regime set means to each part of the engine. The tile loop reads one interface, the RegimeRule
// (rope/attention_job.hpp) that rule_of makes, to pick the regime of each (query, key) pair; attention's
// loads get each regime's query and key rotations from resolve_regimes; the caches store keys as
// storage_of says, at regime_key_position for Dual Chunk.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "attention/attention_internal.hpp"
#include "call/prepare.hpp"
#include "rope/attention_job.hpp"
#include "ropekit/attention.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

namespace detail {

// DualChunk's chunk_len.
std::int64_t chunk_len(const regimes::DualChunk& dc) { return dc.chunk_size - dc.local_size; }

// The regime rule the per-target driver inlines; regime_of and regime_count read the same one.
RegimeRule rule_of(const PositionRegimes& regimes) {
  RegimeRule rule;
  if (const auto* r = std::get_if<regimes::ReRope>(&regimes)) {
    rule = {.kind = RegimeRule::Kind::Window, .window = r->window, .count = 2};
  } else if (const auto* se = std::get_if<regimes::SelfExtend>(&regimes)) {
    rule = {.kind = RegimeRule::Kind::Window, .window = se->window, .count = 2};
  } else if (const auto* dc = std::get_if<regimes::DualChunk>(&regimes)) {
    rule = {.kind = RegimeRule::Kind::DualChunk, .chunk_len = chunk_len(*dc), .count = 3};
  }
  return rule;
}

}  // namespace detail

using detail::chunk_len;
using detail::rule_of;

void validate_regimes(const PositionRegimes& regimes, std::string_view what) {
  const std::string prefix = fmt::format("{}.", what);
  validate_regimes(regimes, RegimeNames{.prefix = prefix});
}

void validate_regimes(const PositionRegimes& regimes, const RegimeNames& names) {
  const std::string_view p = names.prefix;
  const auto check = [&](std::string_view name, std::int64_t value, std::int64_t min, std::string_view rule) {
    if (value < min || value >= kPositionLimit) {
      throw Error(fmt::format("{}{} = {}: must be {} (and below 2^47)", p, name, value, rule));
    }
  };
  if (const auto* r = std::get_if<regimes::ReRope>(&regimes)) {
    check(names.window, r->window, 1, ">= 1");
  } else if (const auto* se = std::get_if<regimes::SelfExtend>(&regimes)) {
    check(names.group, se->group, 1, ">= 1");
    check(names.window, se->window, 1, ">= 1");
    if (se->window < se->group) {
      throw Error(
          fmt::format("{}{} = {}: must be >= {} = {} (the neighbour window holds at least one "
                      "group)",
                      p, names.window, se->window, names.group, se->group));
    }
  } else if (const auto* dc = std::get_if<regimes::DualChunk>(&regimes)) {
    check(names.local_size, dc->local_size, 0, ">= 0");
    check(names.chunk_size, dc->chunk_size, 1, ">= 1");
    if (dc->chunk_size <= dc->local_size) {
      throw Error(fmt::format("{}{} = {}: must be > {} = {} (the chunk length {} - {} must be positive)", p,
                              names.chunk_size, dc->chunk_size, names.local_size, dc->local_size, names.chunk_size,
                              names.local_size));
    }
  }
}

int regime_count(const PositionRegimes& regimes) { return rule_of(regimes).count; }

int regime_of(const PositionRegimes& regimes, std::int64_t i, std::int64_t j) { return rule_of(regimes).of(i, j); }

std::int64_t regime_query_position(const PositionRegimes& regimes, int r, std::int64_t i) {
  if (r == 0 && regimes.index() != 3) return i;
  if (const auto* rr = std::get_if<regimes::ReRope>(&regimes)) return rr->window;
  if (const auto* se = std::get_if<regimes::SelfExtend>(&regimes)) {
    return i / se->group + se->window - se->window / se->group;
  }
  if (const auto* dc = std::get_if<regimes::DualChunk>(&regimes)) {
    const std::int64_t c = chunk_len(*dc);
    if (r == 0) return i % c;
    if (r == 1) return std::min(i % c + c, dc->chunk_size);
    return std::min(2 * c - 1, dc->chunk_size);
  }
  return i;
}

std::int64_t regime_key_position(const PositionRegimes& regimes, int r, std::int64_t j) {
  if (r == 0 && regimes.index() != 3) return j;
  if (std::holds_alternative<regimes::ReRope>(regimes)) return 0;
  if (const auto* se = std::get_if<regimes::SelfExtend>(&regimes)) return j / se->group;
  if (const auto* dc = std::get_if<regimes::DualChunk>(&regimes)) return j % chunk_len(*dc);
  return j;
}

std::string to_string(const PositionRegimes& regimes) {
  if (const auto* r = std::get_if<regimes::ReRope>(&regimes)) return fmt::format("rerope(w={})", r->window);
  if (const auto* se = std::get_if<regimes::SelfExtend>(&regimes)) {
    return fmt::format("self_extend(W={},G={})", se->window, se->group);
  }
  if (const auto* dc = std::get_if<regimes::DualChunk>(&regimes)) {
    return fmt::format("dca(chunk={},local={})", dc->chunk_size, dc->local_size);
  }
  return "none";
}

namespace detail {

void resolve_regimes(const Rope* rope, const AttentionArgs& args, const AttentionOptions& options, RopeLoads loads,
                     ResolvedAttention& r) {
  validate_regimes(options.regimes, "options.regimes");
  if (rope == nullptr || loads == RopeLoads::None) {
    throw Error("options.regimes: position regimes rotate q and k themselves: use attention(rope, ...)");
  }
  if (!options.causal) throw Error("options.regimes: needs options.causal (the regimes are defined for i >= j)");
  if (options.bias.index() != 0) throw Error("options.regimes: cannot be combined with options.bias");
  if (args.q_positions.axes != 1 || (args.k.tokens() > 0 && args.k_positions.axes != 1) ||
      args.q_mask_positions.data != nullptr || args.k_mask_positions.data != nullptr) {
    throw Error(
        "options.regimes: needs one position stream per token (no M-RoPE) and no separate mask "
        "positions: the regimes derive every rotation from the tokens' positions");
  }
  const PositionRegimes& regimes = options.regimes;
  const bool dual_chunk = std::holds_alternative<regimes::DualChunk>(regimes);
  r.regime_count = regime_count(regimes);
  const std::int64_t q_tokens = args.q.tokens(), k_tokens = args.k.tokens();
  // Materializes regime `reg`'s positions of `tokens` token positions into storage slot `slot`.
  const auto materialize = [&](int slot, const Positions& from, std::int64_t tokens, bool query, int reg) {
    std::vector<std::int64_t>& out = r.regime_positions[std::size_t(slot)];
    out.resize(std::size_t(tokens));
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t p = from.at(0, t);
      out[std::size_t(t)] = query ? regime_query_position(regimes, reg, p) : regime_key_position(regimes, reg, p);
    }
    return ropekit::positions(std::span<const std::int64_t>(out));
  };
  // Queries: DualChunk's regime 0 rotates to i mod chunk_len (r.q_rotation is then unused); the
  // other kinds' regime 0 is the plain rotation.
  for (int reg = dual_chunk ? 0 : 1; reg < r.regime_count; ++reg) {
    r.q_regime[std::size_t(reg)] =
        prepare(*rope, {.q = args.q, .positions = materialize(reg, args.q_positions, q_tokens, true, reg)},
                {.use = ViewUse::Read, .names = {.q = "q", .positions = "q_positions"}, .table = options.table});
  }
  if (dual_chunk) {
    // Every regime reads the keys at j mod chunk_len: one K tile (stored so by a cache).
    r.k_tile_of = {0, 0, 0};
    if (loads == RopeLoads::QueriesAndKeys && k_tokens > 0) {
      r.k_regime[0] =
          prepare(*rope, {.q = args.k, .positions = materialize(3, args.k_positions, k_tokens, false, 0)},
                  {.use = ViewUse::Read, .names = {.q = "k", .positions = "k_positions"}, .table = options.table});
    } else {
      r.k_as_stored = {true, true, true};
    }
    return;
  }
  if (loads != RopeLoads::QueriesAndKeys) {
    throw Error(fmt::format("options.regimes = {}: needs the keys unrotated (a KvCache made with these regimes)",
                            to_string(regimes)));
  }
  if (k_tokens == 0) return;
  // Regime 1's keys: ReRope's at position 0 — as stored when the magnitude is 1 (R(0) is the identity; not
  // with a given table, whose row 0 holds the engine's values) — SelfExtend's at ⌊j/G⌋.
  if (std::holds_alternative<regimes::ReRope>(regimes) && rope->plan().cos_sin_scale == 1.0 && !options.table) {
    r.k_as_stored[1] = true;
    return;
  }
  r.k_regime[1] =
      prepare(*rope, {.q = args.k, .positions = materialize(4, args.k_positions, k_tokens, false, 1)},
              {.use = ViewUse::Read, .names = {.q = "k", .positions = "k_positions"}, .table = options.table});
}

}  // namespace detail
}  // namespace ropekit
