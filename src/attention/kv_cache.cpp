// The KV cache of one sequence: a PagedKvCache holding sequence 0 in one page of `capacity` entries
// (NHD, so the entries are the contiguous [capacity, kv_heads, head_dim] rows keys() views). Storage,
// the fused append, K-shift, erase and re-rotation are the paged cache's; this file adds the
// slot-indexed interface and its checks.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "attention/attention_internal.hpp"
#include "rope/views.hpp"
#include "ropekit/error.hpp"
#include "ropekit/kv_cache.hpp"
#include "ropekit/paged_kv_cache.hpp"

namespace ropekit {

struct KvCache::State {
  Spec spec;
  AngleMode mode;
  PagedKvCache paged;
  Plan empty_plan;  // plan() while the cache is empty: the last plan its keys had (or the first rope's)

  State(const Rope& rope, const KvCacheShape& shape)
      : spec(rope.spec()),
        mode(rope.angle_mode()),
        paged(rope, {.num_pages = 1,
                     .page_size = shape.capacity,
                     .kv_heads = shape.kv_heads,
                     .head_dim = shape.head_dim,
                     .v_head_dim = shape.v_head_dim,
                     .dtype = static_cast<CacheDType>(shape.dtype),
                     .layout = PageLayout::NHD,
                     .max_sequences = 1,
                     .regimes = shape.regimes}),
        empty_plan(rope.plan()) {}
  const Plan& plan() const { return paged.length(0) > 0 ? paged.plan(0) : empty_plan; }
  // Slot s is entry s of page 0, the only page: the keys and values are the page's memory.
  void* keys() const { return paged.cache().k; }
  void* values() const { return paged.cache().v; }
  // Keeps plan() across an operation that may empty the cache.
  void remember_plan() {
    if (paged.length(0) > 0) empty_plan = paged.plan(0);
  }
};

KvCache::KvCache(const Rope& rope, KvCacheShape shape) : shape_(shape) {
  const Spec& spec = rope.spec();
  if (shape_.capacity <= 0) throw Error(fmt::format("KvCacheShape.capacity = {}: must be > 0", shape_.capacity));
  if (shape_.kv_heads <= 0) throw Error(fmt::format("KvCacheShape.kv_heads = {}: must be > 0", shape_.kv_heads));
  if (shape_.head_dim == 0) shape_.head_dim = spec.head_dim;
  if (shape_.head_dim != spec.head_dim) {
    throw Error(fmt::format("KvCacheShape.head_dim = {} differs from the rope's head_dim = {}", shape_.head_dim,
                            spec.head_dim));
  }
  if (shape_.threads < 0)
    throw Error(fmt::format("KvCacheShape.threads = {}: must be >= 0 (0: the default)", shape_.threads));
  if (shape_.v_head_dim < 0) throw Error(fmt::format("KvCacheShape.v_head_dim = {}: must be >= 0", shape_.v_head_dim));
  if (shape_.v_head_dim == 0) shape_.v_head_dim = shape_.head_dim;
  if (!detail::valid_dtype(shape_.dtype)) {
    throw Error(fmt::format("KvCacheShape.dtype = {}: not a DType", static_cast<int>(shape_.dtype)));
  }
  if (spec.num_axes() != 1) {
    throw Error(fmt::format(
        "KvCache: {} specs are not supported (the cache keeps one position per token, the spec needs {} streams)",
        spec.mrope ? "M-RoPE" : "axial", spec.num_axes()));
  }
  constexpr std::int64_t kMaxBytes = std::int64_t{1} << 40;
  const std::int64_t row = shape_.kv_heads * (shape_.head_dim + shape_.v_head_dim) * element_size(shape_.dtype);
  if (shape_.capacity > kMaxBytes / row) {
    throw Error(fmt::format("KvCacheShape.capacity = {}: {} bytes per token would exceed 1 TiB", shape_.capacity, row));
  }
  validate_regimes(shape_.regimes, "KvCacheShape.regimes");
  if (const auto* dc = std::get_if<regimes::DualChunk>(&shape_.regimes);
      dc != nullptr && dc->chunk_size > shape_.capacity) {
    throw Error(fmt::format("KvCacheShape.regimes.chunk_size = {}: larger than the cache (capacity {})", dc->chunk_size,
                            shape_.capacity));
  }
  state_ = std::make_unique<State>(rope, shape_);
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

const Plan& KvCache::plan() const { return state_->plan(); }

std::int64_t KvCache::position(std::int64_t slot) const {
  if (slot < 0 || slot >= size_) {
    throw Error(fmt::format("KvCache::position: slot = {}: outside [0, {})", slot, size_));
  }
  return state_->paged.positions(0)[std::size_t(slot)];
}

Heads KvCache::keys() const { return bshd(state_->keys(), shape_.dtype, 1, size_, shape_.kv_heads, shape_.head_dim); }
Heads KvCache::values() const {
  return bshd(state_->values(), shape_.dtype, 1, size_, shape_.kv_heads, shape_.v_head_dim);
}
Positions KvCache::positions() const { return {state_->paged.positions(0).data(), IndexType::I64, size_, 1}; }

void KvCache::check_layout(const Rope& rope, std::string_view caller) const {
  const Spec& mine = state_->spec;
  const Spec& theirs = rope.spec();
  if (theirs.head_dim != mine.head_dim || theirs.rotary_dim != mine.rotary_dim || theirs.pairing != mine.pairing ||
      theirs.num_axes() != 1) {
    throw Error(
        fmt::format("{}: the rope (head_dim {}, rotary_dim {}, pairing {}) does not match the "
                    "cache's (head_dim {}, rotary_dim {}, pairing {})",
                    caller, theirs.head_dim, theirs.rotary_dim, to_string(theirs.pairing), mine.head_dim,
                    mine.rotary_dim, to_string(mine.pairing)));
  }
  if (rope.angle_mode() != state_->mode) {
    throw Error(fmt::format("{}: the rope's angle mode {} differs from the cache's {}", caller,
                            to_string(rope.angle_mode()), to_string(state_->mode)));
  }
}

namespace {
std::string length(const Plan& p) {
  return p.current_length ? fmt::format("{}", *p.current_length) : std::string("none");
}
}  // namespace

void KvCache::require_compatible(const Rope& rope, std::string_view caller) const {
  check_layout(rope, caller);
  if (size_ > 0 && detail::storage_of(shape_.regimes) != detail::KeyStorage::Unrotated &&
      needs_rerotation(state_->plan(), rope.plan())) {
    throw Error(
        fmt::format("{}: the cached keys were rotated under another plan (current length {}; "
                    "the rope's: {}): call KvCache::rerotate(rope) first",
                    caller, length(state_->plan()), length(rope.plan())));
  }
}

void KvCache::append(const Rope& rope, const Heads& k, const Heads& v, Positions positions,
                     std::shared_ptr<const Table> table) {
  require_compatible(rope, "KvCache::append");
  detail::check_view(v, "v", shape_.v_head_dim);
  if (k.batch != 1 || v.batch != 1) {
    throw Error(
        fmt::format("KvCache::append: k.batch = {}, v.batch = {}: the cache holds one sequence "
                    "(batch 1)",
                    k.batch, v.batch));
  }
  if (k.heads != shape_.kv_heads || v.heads != shape_.kv_heads) {
    throw Error(fmt::format("KvCache::append: k.heads = {}, v.heads = {}: the cache holds kv_heads = {}", k.heads,
                            v.heads, shape_.kv_heads));
  }
  if (v.seq != k.seq) throw Error(fmt::format("KvCache::append: v.seq = {} differs from k.seq = {}", v.seq, k.seq));
  if (k.dtype != shape_.dtype || v.dtype != shape_.dtype) {
    throw Error(fmt::format("KvCache::append: k.dtype = {}, v.dtype = {}: the cache stores {}", to_string(k.dtype),
                            to_string(v.dtype), to_string(shape_.dtype)));
  }
  const std::int64_t n = k.seq;
  if (n > shape_.capacity - size_) {
    throw Error(
        fmt::format("KvCache::append: {} tokens at size {} overflow the capacity {}", n, size_, shape_.capacity));
  }
  if (n == 0) return;  // nothing to store (the fused append refuses an empty k)
  // An empty cache adopts the rope's plan; so does an unrotated one (ReRope, SelfExtend: its keys carry none).
  const std::vector<std::int32_t> seq_of(std::size_t(n), 0);
  state_->paged.append(rope, seq_of, {.k = k, .v = v, .positions = positions, .threads = shape_.threads},
                       std::move(table));
  size_ = state_->paged.length(0);
}

void KvCache::shift(std::int64_t first, std::int64_t last, std::int64_t delta) {
  if (first < 0 || last < first || last > size_) {
    throw Error(
        fmt::format("KvCache::shift: span [{}, {}) is not inside the cached slots [0, {})", first, last, size_));
  }
  if (delta == 0 || first == last) return;
  if (delta <= -kPositionLimit || delta >= kPositionLimit) {
    throw Error(fmt::format("KvCache::shift: delta = {}: |delta| must be below 2^47", delta));
  }
  const auto at = state_->paged.positions(0);
  for (std::int64_t slot = first; slot < last; ++slot) {
    const std::int64_t p = at[std::size_t(slot)] + delta;
    if (p < 0) {
      throw Error(
          fmt::format("KvCache::shift: slot {} at position {} shifted by {} would be at {}: "
                      "positions must stay >= 0 (shifting before position 0)",
                      slot, at[std::size_t(slot)], delta, p));
    }
    if (p >= kPositionLimit) {
      throw Error(fmt::format("KvCache::shift: slot {} at position {} shifted by {} would pass 2^47", slot,
                              at[std::size_t(slot)], delta));
    }
  }
  state_->paged.shift_entries(0, first, last, delta);
}

void KvCache::erase(std::int64_t first, std::int64_t last) {
  if (first < 0 || last < first || last > size_) {
    throw Error(
        fmt::format("KvCache::erase: span [{}, {}) is not inside the cached slots [0, {})", first, last, size_));
  }
  state_->remember_plan();
  state_->paged.erase_entries(0, first, last);
  size_ = state_->paged.length(0);
}

void KvCache::clear() {  // the next append adopts its rope's plan
  state_->remember_plan();
  state_->paged.seq_clear(0);
  size_ = 0;
}

bool KvCache::rerotate(const Rope& rope) {
  check_layout(rope, "KvCache::rerotate");
  return state_->paged.rerotate(0, rope);
}

bool KvCache::rerotate(const Rope& old_rope, const Rope& rope) {
  check_layout(rope, "KvCache::rerotate");
  check_layout(old_rope, "KvCache::rerotate");
  return state_->paged.rerotate(0, old_rope, rope);
}

const PagedKvCache& KvCache::paged() const { return state_->paged; }

void attention(const Rope& rope, const Heads& q, Positions q_positions, const KvCache& cache, const Heads& out,
               const AttentionOptions& options) {
  cache.require_compatible(rope, "attention");
  // Sequence 0 of the paged cache, read in place (one page).
  const std::vector<std::int32_t> seq_of(std::size_t(std::max<std::int64_t>(q.seq, 0)), 0);
  attention(rope, q, q_positions, seq_of, cache.paged(), out, options);
}

}  // namespace ropekit
