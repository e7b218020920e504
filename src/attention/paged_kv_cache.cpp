// Many sequences in one paged KV cache (ropekit/paged_kv_cache.hpp): a page free list, per-sequence
// pages, positions and plan; the fused append resolves each token's slot from its sequence; the
// sequence operations move, erase or copy entries (their keys turned by kv_shift.cpp); attention over
// the pages is paged_attention.cpp.
#include "ropekit/paged_kv_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "attention/attention_internal.hpp"
#include "attention/paged_state.hpp"
#include "call/prepare.hpp"
#include "rope/backend.hpp"
#include "rope/parallel.hpp"
#include "rope/reference.hpp"
#include "rope/views.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

using detail::KeyStorage;
using detail::storage_of;
using paged::check_seq;
using paged::is_fp8;
using paged::PositionRange;
using paged::range_of;
using paged::storage_dtype;

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
  if (spec.num_axes() != 1) {
    throw Error(fmt::format(
        "PagedKvCache: {} specs are not supported (the cache keeps one position per entry, the spec needs {} "
        "streams)",
        spec.mrope ? "M-RoPE" : "axial", spec.num_axes()));
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
  if (a.head_dim != b.head_dim || a.rotary_dim != b.rotary_dim || a.pairing != b.pairing || a.mrope != b.mrope ||
      a.axial != b.axial) {
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
  // Everything the commit needs is allocated first, so that it cannot throw: an allocation failing up to here leaves
  // the cache as it was (its new entries were written into pages still on the free list).
  std::vector<std::optional<Plan>> adopted(st.sequences.size());
  for (std::size_t s = 0; s < st.sequences.size(); ++s) {
    State::Sequence& seq = st.sequences[s];
    if (count[s] == 0) continue;
    seq.pages.reserve(seq.pages.size() + new_pages[s].size());
    seq.positions.reserve(seq.positions.size() + std::size_t(count[s]));
    if (!stored.empty()) seq.stored.reserve(seq.stored.size() + std::size_t(count[s]));
    if (!seq.plan || st.storage == KeyStorage::Unrotated) adopted[s] = rope.plan();
  }
  // Commit (no allocation from here on).
  st.free.resize(st.free.size() - taken);
  for (std::size_t s = 0; s < st.sequences.size(); ++s) {
    State::Sequence& seq = st.sequences[s];
    seq.pages.insert(seq.pages.end(), new_pages[s].begin(), new_pages[s].end());
    if (adopted[s]) seq.plan = std::move(adopted[s]);
  }
  for (std::int64_t t = 0; t < tokens; ++t) {
    State::Sequence& seq = st.sequences[std::size_t(seq_of[std::size_t(t)])];
    seq.positions.push_back(args.positions.at(0, t));
    if (!stored.empty()) seq.stored.push_back(stored[std::size_t(t)]);
  }
}

void PagedKvCache::erase(int seq, std::int64_t p0, std::int64_t p1) {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::erase");
  State::Sequence& s = state_->sequences[std::size_t(seq)];
  const PositionRange range = range_of(p0, p1);
  state_->retain(s, [&](std::size_t i) { return !range.contains(s.positions[i]); });
}

void PagedKvCache::shift(int seq, std::int64_t p0, std::int64_t p1, std::int64_t delta) {
  check_seq(seq, shape_.max_sequences, "PagedKvCache::shift");
  State::Sequence& s = state_->sequences[std::size_t(seq)];
  const PositionRange range = range_of(p0, p1);
  std::vector<std::int64_t> entries;
  for (std::size_t i = 0; i < s.positions.size(); ++i) {
    if (range.contains(s.positions[i])) entries.push_back(std::int64_t(i));
  }
  state_->shift(seq, s, entries, delta, "PagedKvCache::shift");
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
  // Allocated before anything changes, so that the copy below cannot throw half-way.
  std::optional<Plan> adopted;
  if (!to.plan) adopted = from.plan;
  to.positions.reserve(to.positions.size() + entries.size());
  if (!from.stored.empty()) to.stored.reserve(to.stored.size() + entries.size());
  st.grow(to, first + std::int64_t(entries.size()), "PagedKvCache::seq_cp");
  for (std::size_t k = 0; k < entries.size(); ++k) {
    st.copy_entry(st.slot(from, std::int64_t(entries[k])), st.slot(to, first + std::int64_t(k)));
    to.positions.push_back(from.positions[entries[k]]);
    if (!from.stored.empty()) to.stored.push_back(from.stored[entries[k]]);
  }
  if (adopted) to.plan = std::move(adopted);
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
    Plan next = rope.plan();  // a failed copy leaves the old plan whole
    s.plan = std::move(next);
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
    Plan next = to.plan();
    s.plan = std::move(next);
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

}  // namespace ropekit
