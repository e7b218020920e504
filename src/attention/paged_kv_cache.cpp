// Many sequences in one paged KV cache (ropekit/paged_kv_cache.hpp): a page free list, per-sequence
// pages, positions and plan; the fused append resolves each token's slot from its sequence; the
// sequence operations move, turn or copy entries; attention runs the attention driver over a
// sequence's entries with q rotated on load, its tiles reading the pages in place (fp8 entries widened
// × scale as they load; keys rotated on load over scattered pages gathered into buffers first).
#include "ropekit/paged_kv_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "attention/attention_internal.hpp"
#include "call/prepare.hpp"
#include "rope/backend.hpp"
#include "rope/parallel.hpp"
#include "rope/reference.hpp"
#include "rope/views.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

namespace {

// The entries of a sequence between positions [p0, p1) (negative p0: from 0; negative p1: to the end).
struct PositionRange {
  std::int64_t p0, p1;
  bool contains(std::int64_t p) const { return p >= p0 && p < p1; }
};

PositionRange range_of(std::int64_t p0, std::int64_t p1) {
  return {std::max<std::int64_t>(p0, 0), p1 < 0 ? std::numeric_limits<std::int64_t>::max() : p1};
}

bool is_fp8(CacheDType t) { return t == CacheDType::F8E4M3; }

// The DType an entry of a non-fp8 cache is stored as (the enumerators agree), and what fp8 entries
// are widened to.
DType storage_dtype(CacheDType t) { return is_fp8(t) ? DType::F32 : static_cast<DType>(t); }

using detail::KeyStorage;
using detail::storage_of;

// The plan of pure rotations R(δ): the same frequencies, magnitude 1.
Plan unit_magnitude(Plan plan) {
  plan.cos_sin_scale = 1.0;
  return plan;
}

}  // namespace

struct PagedKvCache::State {
  struct Sequence {
    std::vector<std::int32_t> pages;
    std::vector<std::int64_t> positions;  // per entry
    std::vector<std::int64_t> stored;     // ChunkRelative: the position each key is rotated at
    std::optional<Plan> plan;             // set while the sequence has entries
  };

  Spec spec;
  AngleMode mode;
  PositionRegimes regimes;
  KeyStorage storage = KeyStorage::AtPosition;
  // The last unit-magnitude rope built for K-shifts (a context shift per token must not build one).
  std::shared_ptr<const Rope> unit;

  // The positions entries [first, first + n) of s are rotated at.
  Positions rotated_at(const Sequence& s, std::int64_t first, std::int64_t n) const {
    const auto& from = storage == KeyStorage::ChunkRelative ? s.stored : s.positions;
    return ropekit::positions(std::span<const std::int64_t>(from.data() + first, std::size_t(n)));
  }

  const Rope& unit_rope(const Plan& plan) {
    Plan p = unit_magnitude(plan);
    if (!unit || needs_rerotation(unit->plan(), p)) unit = std::make_shared<const Rope>(spec, std::move(p), mode);
    return *unit;
  }

  // Keeps the entries of s for which keep(i) holds, in order; pages no longer needed are freed.
  template <class Keep>
  void retain(Sequence& s, Keep keep) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < s.positions.size(); ++i) {
      if (!keep(i)) continue;
      if (kept != i) {
        copy_entry(slot(s, std::int64_t(i)), slot(s, std::int64_t(kept)));
        s.positions[kept] = s.positions[i];
        if (!s.stored.empty()) s.stored[kept] = s.stored[i];
      }
      ++kept;
    }
    s.positions.resize(kept);
    if (!s.stored.empty()) s.stored.resize(kept);
    shrink(s);
  }

  // Turns the keys of `entries` by R(step): a pure rotation with magnitude 1; a negative step is the
  // inverse rotation by |step|, which for magnitude 1 is exactly R(step).
  void turn(const Sequence& s, const std::vector<std::int64_t>& entries, std::int64_t step) {
    const Rope& rope = unit_rope(*s.plan);
    const std::int64_t magnitude = step < 0 ? -step : step;
    std::vector<std::int64_t> steps;
    turn_keys(s, entries, [&](const Heads& view, std::int64_t, std::int64_t n) {
      steps.assign(std::size_t(n), magnitude);
      detail::prepare(rope,
                      {.k = view,
                       .positions = ropekit::positions(std::span<const std::int64_t>(steps)),
                       .direction = step < 0 ? Direction::Inverse : Direction::Forward},
                      {.keep_plan = false})
          .run();
    });
  }

  // Moves `entries` of s (entry order) by delta positions, their keys turned as they are stored.
  // Errors (nothing changes): a position that would leave [0, 2^47).
  void shift(int seq, Sequence& s, const std::vector<std::int64_t>& entries, std::int64_t delta,
             std::string_view caller) {
    if (delta <= -kPositionLimit || delta >= kPositionLimit) {
      throw Error(fmt::format("{}: delta = {}: |delta| must be below 2^47", caller, delta));
    }
    for (const std::int64_t i : entries) {
      const std::int64_t p = s.positions[std::size_t(i)] + delta;
      if (p < 0 || p >= kPositionLimit) {
        throw Error(
            fmt::format("{}: sequence {} entry {} at position {} moved by {} would be at {}: positions must "
                        "stay in [0, 2^47)",
                        caller, seq, i, s.positions[std::size_t(i)], delta, p));
      }
    }
    if (delta == 0 || entries.empty()) return;
    switch (storage) {
      case KeyStorage::AtPosition: turn(s, entries, delta); break;
      case KeyStorage::Unrotated: break;  // positions only
      case KeyStorage::ChunkRelative: {
        // Each key turns from its stored position to the new one's: entries grouped by that step.
        std::vector<std::pair<std::int64_t, std::int64_t>> by_step;  // (step, entry)
        for (const std::int64_t i : entries) {
          const auto e = std::size_t(i);
          by_step.emplace_back(regime_key_position(regimes, 0, s.positions[e] + delta) - s.stored[e], i);
        }
        std::stable_sort(by_step.begin(), by_step.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        std::vector<std::int64_t> group;
        for (std::size_t a = 0; a < by_step.size();) {
          std::size_t b = a;
          group.clear();
          while (b < by_step.size() && by_step[b].first == by_step[a].first) group.push_back(by_step[b++].second);
          if (by_step[a].first != 0) turn(s, group, by_step[a].first);
          for (const std::int64_t i : group) s.stored[std::size_t(i)] += by_step[a].first;
          a = b;
        }
        break;
      }
    }
    for (const std::int64_t i : entries) s.positions[std::size_t(i)] += delta;
  }

  // Re-rotates every key of s from old_rope's plan (the sequence's) to rope's (see rerotate).
  void rerotate_keys(Sequence& s, const Rope& old_rope, const Rope& rope) {
    std::vector<std::int64_t> entries(s.positions.size());
    for (std::size_t i = 0; i < entries.size(); ++i) entries[i] = std::int64_t(i);
    std::vector<float> buffer;
    const std::int64_t heads = cache.kv_heads, d = cache.head_dim;
    turn_keys(s, entries, [&](const Heads& view, std::int64_t first, std::int64_t n) {
      const Positions at = rotated_at(s, first, n);
      // Un-rotate and rotate in float32, one rounding to storage at the end (float32 keys in place).
      Heads work = view;
      if (view.dtype != DType::F32) {
        buffer.resize(std::size_t(n * heads * d));
        for (std::int64_t e = 0; e < n; ++e) {
          for (std::int64_t h = 0; h < heads; ++h) {
            detail::widen(view.row(0, e, h), view.dtype, d, buffer.data() + (e * heads + h) * d);
          }
        }
        work = bshd(buffer.data(), DType::F32, 1, n, heads, d);
      }
      detail::prepare(old_rope, {.k = work, .positions = at, .direction = Direction::Inverse}, {.keep_plan = false})
          .run();
      detail::prepare(rope, {.k = work, .positions = at, .direction = Direction::Forward}, {.keep_plan = false}).run();
      if (view.dtype != DType::F32) {
        for (std::int64_t e = 0; e < n; ++e) {
          for (std::int64_t h = 0; h < heads; ++h) {
            detail::narrow(buffer.data() + (e * heads + h) * d, d, view.dtype, view.row(0, e, h));
          }
        }
      }
    });
    s.plan = rope.plan();
  }
  std::vector<std::byte> k_memory, v_memory;
  PagedCache cache;
  std::vector<std::int32_t> free;  // a stack: pages are taken from the back
  std::vector<Sequence> sequences;

  std::int64_t slot(const Sequence& s, std::int64_t entry) const {
    return std::int64_t{s.pages[std::size_t(entry / cache.page_size)]} * cache.page_size + entry % cache.page_size;
  }
  std::int64_t pages_for(std::int64_t entries) const { return (entries + cache.page_size - 1) / cache.page_size; }

  // Keys and values of one slot copied to another (every head).
  void copy_entry(std::int64_t from, std::int64_t to) {
    const std::int64_t es = element_size(cache.dtype);
    for (std::int64_t h = 0; h < cache.kv_heads; ++h) {
      std::memcpy(cache.key(to, h), cache.key(from, h), std::size_t(cache.head_dim * es));
      if (cache.v != nullptr) std::memcpy(cache.value(to, h), cache.value(from, h), std::size_t(cache.v_head_dim * es));
    }
  }

  // Pages beyond what `entries` need go back to the free list.
  void shrink(Sequence& s) {
    const auto keep = std::size_t(pages_for(std::int64_t(s.positions.size())));
    while (s.pages.size() > keep) {
      free.push_back(s.pages.back());
      s.pages.pop_back();
    }
    if (s.positions.empty()) s.plan.reset();
  }

  // Takes pages from the free list until s holds `entries` entries. Errors: too few free pages.
  void grow(Sequence& s, std::int64_t entries, std::string_view caller) {
    const std::int64_t needed = pages_for(entries) - std::int64_t(s.pages.size());
    if (needed > std::int64_t(free.size())) {
      throw Error(fmt::format("{}: needs {} more pages, {} are free", caller, needed, free.size()));
    }
    for (std::int64_t i = 0; i < needed; ++i) {
      s.pages.push_back(free.back());
      free.pop_back();
    }
  }

  // Turns the keys of the given entries of s by one rotation each: for every run of entries that are
  // consecutive within a page, rotate(view, first entry, count) on a view of their key rows in
  // storage (f32/bf16/f16), or on float32 copies widened × k_scale and quantized back (fp8).
  template <class Rotate>
  void turn_keys(const Sequence& s, const std::vector<std::int64_t>& entries, Rotate rotate) {
    const DType dtype = storage_dtype(cache.dtype);
    const std::int64_t ps = cache.page_size, d = cache.head_dim, heads = cache.kv_heads;
    const std::int64_t head_stride = cache.head_stride(cache.head_dim);
    const std::int64_t entry_stride = cache.layout == PageLayout::NHD ? heads * d : d;
    std::vector<float> buffer;
    const cpu::E4m3WidenKernel widen_e4m3 = cpu::select_e4m3_widen_kernel();
    for (std::size_t i = 0; i < entries.size();) {
      std::size_t j = i + 1;
      while (j < entries.size() && entries[j] == entries[j - 1] + 1 && entries[j] / ps == entries[i] / ps) ++j;
      const std::int64_t first = entries[i], count = std::int64_t(j - i);
      const std::int64_t slot0 = slot(s, first);
      if (!is_fp8(cache.dtype)) {
        Heads view{.data = cache.key(slot0, 0),
                   .dtype = dtype,
                   .batch = 1,
                   .seq = count,
                   .heads = heads,
                   .batch_stride = count * entry_stride,
                   .seq_stride = entry_stride,
                   .head_stride = head_stride};
        rotate(view, first, count);
      } else {
        buffer.resize(std::size_t(count * heads * d));
        for (std::int64_t e = 0; e < count; ++e) {
          for (std::int64_t h = 0; h < heads; ++h) {
            widen_e4m3(static_cast<const std::uint8_t*>(cache.key(slot0 + e, h)), d, cache.k_scale,
                       buffer.data() + (e * heads + h) * d);
          }
        }
        rotate(bshd(buffer.data(), DType::F32, 1, count, heads, d), first, count);
        const cpu::CacheConvertKernel quantize = cpu::select_cache_convert_kernel();
        for (std::int64_t e = 0; e < count; ++e) {
          for (std::int64_t h = 0; h < heads; ++h) {
            quantize(buffer.data() + (e * heads + h) * d, DType::F32, d, cache.key(slot0 + e, h), cache.dtype,
                     cache.k_scale);
          }
        }
      }
      i = j;
    }
  }
};

PagedKvCache::PagedKvCache(const Rope& rope, PagedKvCacheShape shape) : shape_(shape) {
  const Spec& spec = rope.spec();
  if (shape_.head_dim == 0) shape_.head_dim = spec.head_dim;
  if (shape_.head_dim != spec.head_dim) {
    throw Error(fmt::format("PagedKvCacheShape.head_dim = {} differs from the rope's head_dim = {}", shape_.head_dim,
                            spec.head_dim));
  }
  if (shape_.v_head_dim < 0) {
    throw Error(fmt::format("PagedKvCacheShape.v_head_dim = {}: must be >= 0", shape_.v_head_dim));
  }
  if (shape_.v_head_dim == 0) shape_.v_head_dim = shape_.head_dim;
  if (shape_.max_sequences <= 0) {
    throw Error(fmt::format("PagedKvCacheShape.max_sequences = {}: must be > 0", shape_.max_sequences));
  }
  if (spec.mrope) {
    throw Error(
        "PagedKvCache: M-RoPE specs are not supported (the cache keeps one position per entry, M-RoPE "
        "needs three)");
  }
  if (shape_.num_pages > std::numeric_limits<std::int32_t>::max()) {
    throw Error(fmt::format("PagedKvCacheShape.num_pages = {}: page indices are int32", shape_.num_pages));
  }
  validate_regimes(shape_.regimes, "PagedKvCacheShape.regimes");
  auto state = std::make_unique<State>();
  state->spec = spec;
  state->mode = rope.angle_mode();
  state->regimes = shape_.regimes;
  state->storage = storage_of(shape_.regimes);
  PagedCache& c = state->cache;
  c = PagedCache{.dtype = shape_.dtype,
                 .layout = shape_.layout,
                 .num_pages = shape_.num_pages,
                 .page_size = shape_.page_size,
                 .kv_heads = shape_.kv_heads,
                 .head_dim = shape_.head_dim,
                 .v_head_dim = shape_.v_head_dim,
                 .k_scale = shape_.k_scale,
                 .v_scale = shape_.v_scale};
  c.validate();  // named fields, before anything is allocated
  constexpr std::int64_t kMaxBytes = std::int64_t{1} << 40;
  const std::int64_t per_page = c.page_size * c.kv_heads * (c.head_dim + c.v_head_dim) * element_size(c.dtype);
  if (c.num_pages > kMaxBytes / per_page) {
    throw Error(fmt::format("PagedKvCacheShape: {} pages of {} bytes would exceed 1 TiB", c.num_pages, per_page));
  }
  state->k_memory.resize(std::size_t(c.num_pages * c.page_size * c.kv_heads * c.head_dim * element_size(c.dtype)));
  state->v_memory.resize(std::size_t(c.num_pages * c.page_size * c.kv_heads * c.v_head_dim * element_size(c.dtype)));
  c.k = state->k_memory.data();
  c.v = state->v_memory.data();
  state->free.resize(std::size_t(c.num_pages));
  for (std::size_t i = 0; i < state->free.size(); ++i) state->free[i] = std::int32_t(state->free.size() - 1 - i);
  state->sequences.resize(std::size_t(shape_.max_sequences));
  state_ = std::move(state);
}

PagedKvCache::~PagedKvCache() = default;
PagedKvCache::PagedKvCache(PagedKvCache&&) noexcept = default;
PagedKvCache& PagedKvCache::operator=(PagedKvCache&&) noexcept = default;

namespace {
void check_seq(int seq, int max_sequences, std::string_view caller) {
  if (seq < 0 || seq >= max_sequences) {
    throw Error(fmt::format("{}: sequence {}: outside [0, {})", caller, seq, max_sequences));
  }
}
}  // namespace

const PagedCache& PagedKvCache::cache() const { return state_->cache; }
std::int64_t PagedKvCache::free_pages() const { return std::int64_t(state_->free.size()); }

std::int64_t PagedKvCache::length(int seq) const {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::length");
  return std::int64_t(state_->sequences[std::size_t(seq)].positions.size());
}

std::span<const std::int64_t> PagedKvCache::positions(int seq) const {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::positions");
  return state_->sequences[std::size_t(seq)].positions;
}

std::span<const std::int32_t> PagedKvCache::pages(int seq) const {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::pages");
  return state_->sequences[std::size_t(seq)].pages;
}

const Plan& PagedKvCache::plan(int seq) const {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::plan");
  const auto& p = state_->sequences[std::size_t(seq)].plan;
  if (!p) throw Error(fmt::format("PagedKvCache::plan: sequence {} is empty: its keys have no plan yet", seq));
  return *p;
}

void PagedKvCache::require_layout(const Rope& rope, std::string_view caller) const {
  const Spec& a = rope.spec();
  const Spec& b = state_->spec;
  if (a.head_dim != b.head_dim || a.rotary_dim != b.rotary_dim || a.pairing != b.pairing || a.mrope != b.mrope) {
    throw Error(fmt::format(
        "{}: the rope (head_dim {}, rotary_dim {}, {}) does not have the cache's layout "
        "(head_dim {}, rotary_dim {}, {})",
        caller, a.head_dim, a.rotary_dim, to_string(a.pairing), b.head_dim, b.rotary_dim, to_string(b.pairing)));
  }
  if (rope.angle_mode() != state_->mode) {
    throw Error(fmt::format("{}: the rope's angle mode = {} differs from the cache's = {}", caller,
                            to_string(rope.angle_mode()), to_string(state_->mode)));
  }
}

namespace {
std::string plan_name(const Plan& p) {
  return p.current_length ? fmt::format("current length {}", *p.current_length) : std::string("initial");
}

void require_plan(const std::optional<Plan>& cached, const Rope& rope, int seq, std::string_view caller) {
  if (cached && needs_rerotation(*cached, rope.plan())) {
    throw Error(
        fmt::format("{}: sequence {}'s keys are rotated under another plan ({}) than the rope's ({}): "
                    "rerotate it first",
                    caller, seq, plan_name(*cached), plan_name(rope.plan())));
  }
}
}  // namespace

void PagedKvCache::append(const Rope& rope, std::span<const std::int32_t> seq_of, AppendArgs args,
                          std::shared_ptr<const Table> table) {
  State& st = *state_;
  require_layout(rope, "PagedKvCache::append");
  const auto* given = std::get_if<SlotMapping>(&args.slots);
  if (given == nullptr || given->data != nullptr || given->count != 0) {
    throw Error("PagedKvCache::append: args.slots must be left unset: the cache resolves each token's slot");
  }
  if (args.k.batch != 1) throw Error(fmt::format("PagedKvCache::append: k.batch = {}: must be 1", args.k.batch));
  const std::int64_t tokens = args.k.seq;
  if (std::int64_t(seq_of.size()) != tokens) {
    throw Error(fmt::format("PagedKvCache::append: seq_of has {} values: one per token, {}", seq_of.size(), tokens));
  }
  if (args.positions.axes != 1) {
    throw Error(fmt::format("PagedKvCache::append: positions.axes = {}: one stream per token", args.positions.axes));
  }
  if (st.storage != KeyStorage::AtPosition) {
    const auto refuse = [&](bool given, std::string_view what) {
      if (given) {
        throw Error(
            fmt::format("PagedKvCache::append: args.{} is set, but a cache for position regimes ({}) takes "
                        "keys and values only: attention rotates the queries per regime",
                        what, to_string(st.regimes)));
      }
    };
    refuse(!args.q.empty(), "q");
    refuse(!args.q_out.empty(), "q_out");
    refuse(!args.k_out.empty(), "k_out");
    refuse(!args.norm.q_weight.empty() || !args.norm.k_weight.empty(), "norm");
  }
  // Each token's entry and slot; pages taken from the free list only in this plan, committed after
  // the append succeeded.
  std::vector<std::int64_t> count(st.sequences.size(), 0), extra_pages(st.sequences.size(), 0);
  for (std::int64_t t = 0; t < tokens; ++t) {
    check_seq(seq_of[std::size_t(t)], shape_.max_sequences, "PagedKvCache::append: seq_of");
    ++count[std::size_t(seq_of[std::size_t(t)])];
  }
  std::int64_t needed = 0;
  for (std::size_t s = 0; s < st.sequences.size(); ++s) {
    if (count[s] == 0) continue;
    // Unrotated keys carry no plan: the sequence takes the rope's.
    if (st.storage != KeyStorage::Unrotated) require_plan(st.sequences[s].plan, rope, int(s), "PagedKvCache::append");
    const std::int64_t len = std::int64_t(st.sequences[s].positions.size());
    extra_pages[s] = st.pages_for(len + count[s]) - std::int64_t(st.sequences[s].pages.size());
    needed += extra_pages[s];
  }
  if (needed > std::int64_t(st.free.size())) {
    throw Error(
        fmt::format("PagedKvCache::append: the tokens need {} more pages, {} are free", needed, st.free.size()));
  }
  std::vector<std::vector<std::int32_t>> new_pages(st.sequences.size());
  std::size_t taken = 0;
  for (std::size_t s = 0; s < st.sequences.size(); ++s) {
    for (std::int64_t i = 0; i < extra_pages[s]; ++i) new_pages[s].push_back(st.free[st.free.size() - 1 - taken++]);
  }
  std::vector<std::int64_t> slots(static_cast<std::size_t>(tokens)), next(st.sequences.size());
  for (std::size_t s = 0; s < st.sequences.size(); ++s) next[s] = std::int64_t(st.sequences[s].positions.size());
  for (std::int64_t t = 0; t < tokens; ++t) {
    const auto s = std::size_t(seq_of[std::size_t(t)]);
    const State::Sequence& seq = st.sequences[s];
    const std::int64_t entry = next[s]++;
    const std::int64_t page_index = entry / st.cache.page_size;
    const std::int32_t page = page_index < std::int64_t(seq.pages.size())
                                  ? seq.pages[std::size_t(page_index)]
                                  : new_pages[s][std::size_t(page_index - std::int64_t(seq.pages.size()))];
    slots[std::size_t(t)] = std::int64_t{page} * st.cache.page_size + entry % st.cache.page_size;
  }
  args.slots = slot_mapping(slots);
  // Keys at the positions they are stored at (ChunkRelative: position mod chunk_len, the positions
  // validated first as the call would), or unrotated.
  std::vector<std::int64_t> stored;
  if (st.storage == KeyStorage::ChunkRelative) {
    detail::prepare(rope, {.k = args.k, .positions = args.positions}, {.use = detail::ViewUse::Read});
    stored.resize(std::size_t(tokens));
    for (std::int64_t t = 0; t < tokens; ++t)
      stored[std::size_t(t)] = regime_key_position(st.regimes, 0, args.positions.at(0, t));
  }
  AppendArgs stored_args = args;
  if (!stored.empty()) stored_args.positions = ropekit::positions(std::span<const std::int64_t>(stored));
  detail::AppendAccess::run_once(  // validates everything else
      rope, stored_args, st.cache,
      st.storage == KeyStorage::Unrotated ? detail::KeyWrite::Unrotated : detail::KeyWrite::Rotated, std::move(table));
  // Commit.
  st.free.resize(st.free.size() - taken);
  for (std::size_t s = 0; s < st.sequences.size(); ++s) {
    State::Sequence& seq = st.sequences[s];
    seq.pages.insert(seq.pages.end(), new_pages[s].begin(), new_pages[s].end());
    if (count[s] > 0 && (!seq.plan || st.storage == KeyStorage::Unrotated)) seq.plan = rope.plan();
  }
  for (std::int64_t t = 0; t < tokens; ++t) {
    State::Sequence& seq = st.sequences[std::size_t(seq_of[std::size_t(t)])];
    seq.positions.push_back(args.positions.at(0, t));
    if (!stored.empty()) seq.stored.push_back(stored[std::size_t(t)]);
  }
}

void PagedKvCache::seq_rm(int seq, std::int64_t p0, std::int64_t p1) {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::seq_rm");
  State::Sequence& s = state_->sequences[std::size_t(seq)];
  const PositionRange range = range_of(p0, p1);
  state_->retain(s, [&](std::size_t i) { return !range.contains(s.positions[i]); });
}

void PagedKvCache::seq_add(int seq, std::int64_t p0, std::int64_t p1, std::int64_t delta) {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::seq_add");
  State::Sequence& s = state_->sequences[std::size_t(seq)];
  const PositionRange range = range_of(p0, p1);
  std::vector<std::int64_t> entries;
  for (std::size_t i = 0; i < s.positions.size(); ++i) {
    if (range.contains(s.positions[i])) entries.push_back(std::int64_t(i));
  }
  state_->shift(seq, s, entries, delta, "PagedKvCache::seq_add");
}

namespace {
void check_entries(std::int64_t first, std::int64_t last, std::int64_t length, int seq, std::string_view caller) {
  if (first < 0 || last < first || last > length) {
    throw Error(
        fmt::format("{}: entries [{}, {}) are not inside sequence {}'s [0, {})", caller, first, last, seq, length));
  }
}
}  // namespace

void PagedKvCache::erase_entries(int seq, std::int64_t first, std::int64_t last) {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::erase_entries");
  State::Sequence& s = state_->sequences[std::size_t(seq)];
  check_entries(first, last, std::int64_t(s.positions.size()), seq, "PagedKvCache::erase_entries");
  state_->retain(s, [&](std::size_t i) { return std::int64_t(i) < first || std::int64_t(i) >= last; });
}

void PagedKvCache::shift_entries(int seq, std::int64_t first, std::int64_t last, std::int64_t delta) {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::shift_entries");
  State::Sequence& s = state_->sequences[std::size_t(seq)];
  check_entries(first, last, std::int64_t(s.positions.size()), seq, "PagedKvCache::shift_entries");
  std::vector<std::int64_t> entries(std::size_t(last - first));
  for (std::size_t i = 0; i < entries.size(); ++i) entries[i] = first + std::int64_t(i);
  state_->shift(seq, s, entries, delta, "PagedKvCache::shift_entries");
}

void PagedKvCache::seq_cp(int src, int dst, std::int64_t p0, std::int64_t p1) {
  check_seq(src, shape_.max_sequences, "PagedKvCache::seq_cp: src");
  check_seq(dst, shape_.max_sequences, "PagedKvCache::seq_cp: dst");
  if (src == dst) throw Error(fmt::format("PagedKvCache::seq_cp: src = dst = {}", src));
  State& st = *state_;
  State::Sequence& from = st.sequences[std::size_t(src)];
  State::Sequence& to = st.sequences[std::size_t(dst)];
  const PositionRange range = range_of(p0, p1);
  std::vector<std::size_t> entries;
  for (std::size_t i = 0; i < from.positions.size(); ++i) {
    if (range.contains(from.positions[i])) entries.push_back(i);
  }
  if (entries.empty()) return;
  if (to.plan && needs_rerotation(*to.plan, *from.plan)) {
    throw Error(
        fmt::format("PagedKvCache::seq_cp: sequence {}'s keys ({}) and sequence {}'s ({}) are rotated under "
                    "different plans",
                    src, plan_name(*from.plan), dst, plan_name(*to.plan)));
  }
  const std::int64_t first = std::int64_t(to.positions.size());
  st.grow(to, first + std::int64_t(entries.size()), "PagedKvCache::seq_cp");
  for (std::size_t k = 0; k < entries.size(); ++k) {
    st.copy_entry(st.slot(from, std::int64_t(entries[k])), st.slot(to, first + std::int64_t(k)));
    to.positions.push_back(from.positions[entries[k]]);
    if (!from.stored.empty()) to.stored.push_back(from.stored[entries[k]]);
  }
  if (!to.plan) to.plan = from.plan;
}

void PagedKvCache::seq_clear(int seq) {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::seq_clear");
  State::Sequence& s = state_->sequences[std::size_t(seq)];
  s.positions.clear();
  s.stored.clear();
  state_->shrink(s);
}

bool PagedKvCache::rerotate(int seq, const Rope& rope) {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::rerotate");
  require_layout(rope, "PagedKvCache::rerotate");
  State::Sequence& s = state_->sequences[std::size_t(seq)];
  if (s.positions.empty()) return false;
  if (!needs_rerotation(*s.plan, rope.plan()) || state_->storage == KeyStorage::Unrotated) {
    s.plan = rope.plan();
    return false;
  }
  const Rope old_rope(state_->spec, *s.plan, state_->mode);
  state_->rerotate_keys(s, old_rope, rope);
  return true;
}

bool PagedKvCache::rerotate(int seq, const Rope& from, const Rope& to) {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::rerotate");
  require_layout(to, "PagedKvCache::rerotate");
  require_layout(from, "PagedKvCache::rerotate");
  State::Sequence& s = state_->sequences[std::size_t(seq)];
  if (s.positions.empty()) return false;
  if (needs_rerotation(*s.plan, from.plan())) {
    throw Error(fmt::format("PagedKvCache::rerotate: from's plan ({}) is not sequence {}'s ({})",
                            plan_name(from.plan()), seq, plan_name(*s.plan)));
  }
  if (!needs_rerotation(*s.plan, to.plan()) || state_->storage == KeyStorage::Unrotated) {
    s.plan = to.plan();
    return false;
  }
  state_->rerotate_keys(s, from, to);
  return true;
}

void PagedKvCache::page_table(std::span<const std::int32_t> seqs, std::vector<std::int32_t>& indices,
                              std::vector<std::int32_t>& indptr, std::vector<std::int32_t>& last_page_len) const {
  indices.clear();
  indptr.assign(1, 0);
  last_page_len.clear();
  for (const std::int32_t seq : seqs) {
    check_seq(seq, shape_.max_sequences, "PagedKvCache::page_table");
    const State::Sequence& s = state_->sequences[std::size_t(seq)];
    indices.insert(indices.end(), s.pages.begin(), s.pages.end());
    indptr.push_back(std::int32_t(indices.size()));
    const auto len = std::int64_t(s.positions.size());
    last_page_len.push_back(len == 0 ? 0 : std::int32_t((len - 1) % shape_.page_size + 1));
  }
}

void attention(const Rope& rope, const Heads& q, Positions q_positions, std::span<const std::int32_t> seq_of,
               const PagedKvCache& cache, const Heads& out, const AttentionOptions& options) {
  cache.require_layout(rope, "attention");
  const PagedKvCacheShape& shape = cache.shape();
  if (options.regimes.index() != 0 && options.regimes != shape.regimes) {
    throw Error(
        fmt::format("attention: options.regimes = {} differs from the cache's regimes = {} (they decide "
                    "how its keys are stored)",
                    to_string(options.regimes), to_string(shape.regimes)));
  }
  AttentionOptions with_regimes = options;
  with_regimes.regimes = shape.regimes;
  // Unrotated keys are rotated on load, per regime; others are read as stored.
  const detail::RopeLoads loads = storage_of(shape.regimes) == KeyStorage::Unrotated ? detail::RopeLoads::QueriesAndKeys
                                                                                     : detail::RopeLoads::Queries;
  if (q.batch != 1 || out.batch != 1) {
    throw Error(
        fmt::format("attention: q.batch = {}, out.batch = {}: a paged cache takes batch 1 (tokens on seq, "
                    "each with its sequence in seq_of)",
                    q.batch, out.batch));
  }
  if (std::int64_t(seq_of.size()) != q.seq) {
    throw Error(fmt::format("attention: seq_of has {} values: one per query token, {}", seq_of.size(), q.seq));
  }
  if (q_positions.axes != 1 || q_positions.count != q.seq) {
    throw Error(fmt::format("attention: q_positions has {} streams of {}: one position per query token, {}",
                            q_positions.axes, q_positions.count, q.seq));
  }
  if (out.seq != q.seq) throw Error(fmt::format("attention: out.seq = {} differs from q.seq = {}", out.seq, q.seq));
  for (const std::int32_t s : seq_of) check_seq(s, shape.max_sequences, "attention: seq_of");
  const PagedCache& c = cache.cache();
  const DType kv_dtype = storage_dtype(c.dtype);
  const std::int64_t es = element_size(c.dtype), heads = c.kv_heads;
  // out against the cache's whole memory (its pointers are public: cache()), once: the views the runs
  // below read the pages through describe their shapes, not the pages' memory (KvMemory::Cache).
  {
    detail::check_view(out, "out", shape.v_head_dim);
    const detail::ByteRange out_range = detail::byte_range(out, "out", shape.v_head_dim);
    detail::require_disjoint(out_range, detail::cache_byte_range(c, c.k, shape.head_dim, "the cache's keys"));
    detail::require_disjoint(out_range, detail::cache_byte_range(c, c.v, shape.v_head_dim, "the cache's values"));
  }
  // Gather buffers, kept per thread and grown only (no zero fill, no page faults on later calls).
  thread_local std::vector<std::byte> keys, values;
  const bool nhd = c.layout == PageLayout::NHD;
  for (std::int64_t a = 0; a < q.seq;) {
    std::int64_t b = a + 1;
    while (b < q.seq && seq_of[std::size_t(b)] == seq_of[std::size_t(a)]) ++b;
    const int seq = seq_of[std::size_t(a)];
    const std::int64_t n = cache.length(seq);
    Heads q_run = q, out_run = out;
    q_run.data = q.row(0, a, 0);
    q_run.seq = b - a;
    out_run.data = out.row(0, a, 0);
    out_run.seq = b - a;
    const std::size_t index_bytes = q_positions.type == IndexType::I32 ? 4 : 8;
    const Positions q_pos{static_cast<const std::byte*>(q_positions.data) + std::size_t(a) * index_bytes,
                          q_positions.type, b - a, 1};
    if (n == 0) {  // a query that sees no key gets zeros (attention.hpp)
      detail::check_view(out_run, "out", shape.v_head_dim);
      const std::vector<float> zeros(std::size_t(shape.v_head_dim), 0.0f);
      for (std::int64_t t = 0; t < b - a; ++t) {
        for (std::int64_t h = 0; h < out_run.heads; ++h)
          detail::narrow(zeros.data(), shape.v_head_dim, out.dtype, out_run.row(0, t, h));
      }
      a = b;
      continue;
    }
    const Plan& plan = cache.plan(seq);
    if (loads == detail::RopeLoads::Queries && needs_rerotation(plan, rope.plan())) {  // unrotated keys have no plan
      throw Error(
          fmt::format("attention: sequence {}'s keys are rotated under another plan than the rope's: rerotate "
                      "it first",
                      seq));
    }
    const std::span<const std::int32_t> pages = cache.pages(seq);
    const std::int64_t used_pages = (n + c.page_size - 1) / c.page_size;
    AttentionArgs args;
    args.q = q_run;
    args.out = out_run;
    args.q_positions = q_pos;
    args.k_positions = positions(cache.positions(seq));
    args.head_dim = shape.head_dim;
    args.v_head_dim = shape.v_head_dim;
    // Entries at one stride are read where they are: NHD pages that follow each other in memory, or
    // one page of either layout.
    bool in_place = c.dtype != CacheDType::F8E4M3 && (nhd || used_pages == 1);
    for (std::int64_t p = 1; in_place && p < used_pages; ++p) in_place = pages[std::size_t(p)] == pages[0] + p;
    if (in_place) {
      const std::int64_t slot0 = std::int64_t{pages[0]} * c.page_size;
      const auto view = [&](void* data, std::int64_t lanes) {
        const std::int64_t seq_stride = nhd ? heads * lanes : lanes, head_stride = nhd ? lanes : c.page_size * lanes;
        return Heads{.data = data,
                     .dtype = kv_dtype,
                     .batch = 1,
                     .seq = n,
                     .heads = heads,
                     .batch_stride = n * heads * lanes,
                     .seq_stride = seq_stride,
                     .head_stride = head_stride};
      };
      args.k = view(c.key(slot0, 0), shape.head_dim);
      args.v = view(c.value(slot0, 0), shape.v_head_dim);
      const detail::ResolvedAttention r =
          detail::resolve_attention(&rope, args, with_regimes, loads, detail::KvMemory::Cache);
      detail::run_attention(args, with_regimes, r);
      a = b;
      continue;
    }
    // Pages anywhere, keys read as stored: the tile loader reads each key and value row through the
    // page table (key j: slot pages[j / page_size] · page_size + j % page_size), fp8 entries widened
    // × scale as they load. The views start at page 0 with the sequence's length and the layout's
    // strides (fp8: in bytes); only their strides and types are read.
    if (loads == detail::RopeLoads::Queries && shape.regimes.index() == 0) {
      const auto view = [&](void* data, std::int64_t lanes) {
        const std::int64_t seq_stride = nhd ? heads * lanes : lanes, head_stride = nhd ? lanes : c.page_size * lanes;
        return Heads{.data = data,
                     .dtype = kv_dtype,
                     .batch = 1,
                     .seq = n,
                     .heads = heads,
                     .batch_stride = n * seq_stride,
                     .seq_stride = seq_stride,
                     .head_stride = head_stride};
      };
      args.k = view(c.k, shape.head_dim);
      args.v = view(c.v, shape.v_head_dim);
      const detail::ResolvedAttention r =
          detail::resolve_attention(&rope, args, with_regimes, loads, detail::KvMemory::Cache);
      detail::KvPages kv_pages{
          .pages = pages, .page_size = c.page_size, .page_span = nhd ? c.page_size : heads * c.page_size};
      if (is_fp8(c.dtype)) kv_pages.k_e4m3_scale = c.k_scale, kv_pages.v_e4m3_scale = c.v_scale;
      detail::run_attention(args, with_regimes, r, &kv_pages);
      a = b;
      continue;
    }
    // Else (keys rotated on load) the sequence's entries in entry order: NHD pages gather as
    // [n, kv_heads, lanes] (one copy per page), HND pages as [kv_heads, n, lanes] (one copy per page and
    // head); fp8 widened × scale.
    const std::int64_t ke = kv_dtype == DType::F32 ? 4 : es;
    const auto k_bytes = std::size_t(n * heads * shape.head_dim * ke),
               v_bytes = std::size_t(n * heads * shape.v_head_dim * ke);
    if (keys.size() < k_bytes) keys.resize(k_bytes);
    if (values.size() < v_bytes) values.resize(v_bytes);
    // One page of keys or values into place (pages are independent: split over the threads).
    const cpu::E4m3WidenKernel widen_e4m3 = cpu::select_e4m3_widen_kernel();
    const auto gather_page = [&](std::byte* dst, bool is_key, std::int64_t page_index) {
      const std::int64_t lanes = is_key ? shape.head_dim : shape.v_head_dim;
      const float scale = is_key ? c.k_scale : c.v_scale;
      const std::int64_t first = page_index * c.page_size, count = std::min(c.page_size, n - first);
      const std::int64_t slot = std::int64_t{pages[std::size_t(page_index)]} * c.page_size;
      for (std::int64_t h = 0; h < (nhd ? 1 : heads); ++h) {
        const void* src = is_key ? c.key(slot, h) : c.value(slot, h);
        const std::int64_t elements = count * lanes * (nhd ? heads : 1);
        std::byte* to = dst + (nhd ? first * heads * lanes : h * n * lanes + first * lanes) * ke;
        if (c.dtype == CacheDType::F8E4M3) {
          widen_e4m3(static_cast<const std::uint8_t*>(src), elements, scale, reinterpret_cast<float*>(to));
        } else {
          std::memcpy(to, src, std::size_t(elements * es));
        }
      }
    };
    std::byte* k_dst = keys.data();
    std::byte* v_dst = values.data();
    const int threads = static_cast<int>(std::min<std::int64_t>(
        threads_for_bytes(options.threads > 0 ? options.threads : default_threads(), std::int64_t(k_bytes + v_bytes)),
        used_pages));
    detail::parallel_ranges(std::max(threads, 1), used_pages, [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t p = first; p < last; ++p) {
        gather_page(k_dst, true, p);
        gather_page(v_dst, false, p);
      }
    });
    args.k = nhd ? bshd(keys.data(), kv_dtype, 1, n, heads, shape.head_dim)
                 : bhsd(keys.data(), kv_dtype, 1, n, heads, shape.head_dim);
    args.v = nhd ? bshd(values.data(), kv_dtype, 1, n, heads, shape.v_head_dim)
                 : bhsd(values.data(), kv_dtype, 1, n, heads, shape.v_head_dim);
    const detail::ResolvedAttention r = detail::resolve_attention(&rope, args, with_regimes, loads);
    detail::run_attention(args, with_regimes, r);
    a = b;
  }
}

}  // namespace ropekit
