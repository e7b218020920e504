// The KV cache: keys stored rotated, K-shift as a pure rotation, re-rotation on a plan change.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "attention/attention_internal.hpp"
#include "rope/call.hpp"
#include "rope/reference.hpp"
#include "rope/views.hpp"
#include "ropekit/kv_cache.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

constexpr std::int64_t kRerotateChunk = 256;  // tokens re-rotated per float32 buffer

// The plan of pure rotations R(δ): the same frequencies, magnitude 1.
Plan unit_magnitude(Plan plan) {
  plan.cos_sin_scale = 1.0;
  return plan;
}

}  // namespace

namespace {

// How the cache stores keys (KvCacheShape::regimes).
enum class KeyStorage { AtPosition, Unrotated, ChunkRelative };

KeyStorage storage_of(const PositionRegimes& regimes) {
  if (std::holds_alternative<regimes::ReRope>(regimes) || std::holds_alternative<regimes::SelfExtend>(regimes)) {
    return KeyStorage::Unrotated;
  }
  if (std::holds_alternative<regimes::DualChunk>(regimes)) return KeyStorage::ChunkRelative;
  return KeyStorage::AtPosition;
}

}  // namespace

struct KvCache::State {
  Spec spec;
  AngleMode mode;
  Plan plan;
  KeyStorage storage = KeyStorage::AtPosition;
  std::vector<std::byte> keys, values;
  std::vector<std::int64_t> positions;
  // The position each key is rotated at (ChunkRelative: position mod chunk_len; else unused).
  std::vector<std::int64_t> stored;
  std::optional<Rope> shift_rope;

  // The positions the keys of slots [first, first + n) are rotated at.
  Positions rotated_at(std::int64_t first, std::int64_t n) const {
    const auto& from = storage == KeyStorage::ChunkRelative ? stored : positions;
    return ropekit::positions(std::span<const std::int64_t>(from.data() + first, std::size_t(n)));
  }

  State(const Rope& rope) : spec(rope.spec()), mode(rope.angle_mode()), plan(rope.plan()) {}
  void adopt(const Plan& next) {
    plan = next;
    shift_rope.emplace(spec, unit_magnitude(plan), mode);
  }
};

KvCache::KvCache(const Rope& rope, KvCacheShape shape) : shape_(shape) {
  const Spec& spec = rope.spec();
  if (shape_.capacity <= 0) throw Error(fmt::format("KvCacheShape.capacity = {}: must be > 0", shape_.capacity));
  if (shape_.kv_heads <= 0) throw Error(fmt::format("KvCacheShape.kv_heads = {}: must be > 0", shape_.kv_heads));
  if (shape_.head_dim == 0) shape_.head_dim = spec.head_dim;
  if (shape_.head_dim != spec.head_dim) {
    throw Error(fmt::format("KvCacheShape.head_dim = {} differs from the rope's head_dim = {}",
                            shape_.head_dim, spec.head_dim));
  }
  if (shape_.v_head_dim < 0) throw Error(fmt::format("KvCacheShape.v_head_dim = {}: must be >= 0", shape_.v_head_dim));
  if (shape_.v_head_dim == 0) shape_.v_head_dim = shape_.head_dim;
  if (!detail::valid_dtype(shape_.dtype)) {
    throw Error(fmt::format("KvCacheShape.dtype = {}: not a DType", static_cast<int>(shape_.dtype)));
  }
  if (spec.mrope) {
    throw Error("KvCache: M-RoPE specs are not supported (the cache keeps one position per token, "
                "M-RoPE needs three)");
  }
  constexpr std::int64_t kMaxBytes = std::int64_t{1} << 40;
  const std::int64_t row = shape_.kv_heads * (shape_.head_dim + shape_.v_head_dim) * element_size(shape_.dtype);
  if (shape_.capacity > kMaxBytes / row) {
    throw Error(fmt::format("KvCacheShape.capacity = {}: {} bytes per token would exceed 1 TiB",
                            shape_.capacity, row));
  }
  validate_regimes(shape_.regimes, "KvCacheShape.regimes");
  if (const auto* dc = std::get_if<regimes::DualChunk>(&shape_.regimes); dc != nullptr && dc->chunk_size > shape_.capacity) {
    throw Error(fmt::format("KvCacheShape.regimes.chunk_size = {}: larger than the cache (capacity {})",
                            dc->chunk_size, shape_.capacity));
  }
  state_ = std::make_unique<State>(rope);
  state_->storage = storage_of(shape_.regimes);
  state_->keys.resize(std::size_t(shape_.capacity * shape_.kv_heads * shape_.head_dim * element_size(shape_.dtype)));
  state_->values.resize(std::size_t(shape_.capacity * shape_.kv_heads * shape_.v_head_dim * element_size(shape_.dtype)));
  state_->positions.resize(std::size_t(shape_.capacity));
  if (state_->storage == KeyStorage::ChunkRelative) state_->stored.resize(std::size_t(shape_.capacity));
}

KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

const Plan& KvCache::plan() const { return state_->plan; }

std::int64_t KvCache::position(std::int64_t slot) const {
  if (slot < 0 || slot >= size_) {
    throw Error(fmt::format("KvCache::position: slot = {}: outside [0, {})", slot, size_));
  }
  return state_->positions[slot];
}

Heads KvCache::keys() const {
  return bshd(state_->keys.data(), shape_.dtype, 1, size_, shape_.kv_heads, shape_.head_dim);
}
Heads KvCache::values() const {
  return bshd(state_->values.data(), shape_.dtype, 1, size_, shape_.kv_heads, shape_.v_head_dim);
}
Positions KvCache::positions() const { return {state_->positions.data(), IndexType::I64, size_, 1}; }

void KvCache::check_layout(const Rope& rope, std::string_view caller) const {
  const Spec& mine = state_->spec;
  const Spec& theirs = rope.spec();
  if (theirs.head_dim != mine.head_dim || theirs.rotary_dim != mine.rotary_dim ||
      theirs.pairing != mine.pairing || theirs.mrope.has_value()) {
    throw Error(fmt::format("{}: the rope (head_dim {}, rotary_dim {}, pairing {}) does not match the "
                            "cache's (head_dim {}, rotary_dim {}, pairing {})", caller, theirs.head_dim,
                            theirs.rotary_dim, to_string(theirs.pairing), mine.head_dim, mine.rotary_dim,
                            to_string(mine.pairing)));
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
  if (size_ > 0 && state_->storage != KeyStorage::Unrotated && needs_rerotation(state_->plan, rope.plan())) {
    throw Error(fmt::format("{}: the cached keys were rotated under another plan (current length {}; "
                            "the rope's: {}): call KvCache::rerotate(rope) first", caller,
                            length(state_->plan), length(rope.plan())));
  }
}

void KvCache::append(const Rope& rope, const Heads& k, const Heads& v, Positions positions) {
  require_compatible(rope, "KvCache::append");
  detail::check_view(v, "v", shape_.v_head_dim);
  if (k.batch != 1 || v.batch != 1) {
    throw Error(fmt::format("KvCache::append: k.batch = {}, v.batch = {}: the cache holds one sequence "
                            "(batch 1)", k.batch, v.batch));
  }
  if (k.heads != shape_.kv_heads || v.heads != shape_.kv_heads) {
    throw Error(fmt::format("KvCache::append: k.heads = {}, v.heads = {}: the cache holds kv_heads = {}",
                            k.heads, v.heads, shape_.kv_heads));
  }
  if (v.seq != k.seq) throw Error(fmt::format("KvCache::append: v.seq = {} differs from k.seq = {}", v.seq, k.seq));
  if (k.dtype != shape_.dtype || v.dtype != shape_.dtype) {
    throw Error(fmt::format("KvCache::append: k.dtype = {}, v.dtype = {}: the cache stores {}",
                            to_string(k.dtype), to_string(v.dtype), to_string(shape_.dtype)));
  }
  const std::int64_t n = k.seq;
  if (n > shape_.capacity - size_) {
    throw Error(fmt::format("KvCache::append: {} tokens at size {} overflow the capacity {}", n, size_,
                            shape_.capacity));
  }
  const std::int64_t es = element_size(shape_.dtype);
  // k and the positions are validated once, here (the call names them as the caller does).
  const Heads slots = bshd(state_->keys.data() + size_ * shape_.kv_heads * shape_.head_dim * es, shape_.dtype, 1,
                           std::max<std::int64_t>(n, 0), shape_.kv_heads, shape_.head_dim);
  const detail::CallNames names{.k = "k", .k_out = "the cache's key slots", .positions = "positions"};
  const RotateCall call = detail::prepare_call(rope, {.k = k, .k_out = slots, .positions = positions},
                                               detail::ViewUse::Write, names);
  if (n == 0) return;
  if (size_ == 0) state_->adopt(rope.plan());
  switch (state_->storage) {
    case KeyStorage::AtPosition: call.run(); break;
    case KeyStorage::Unrotated:
      for (std::int64_t t = 0; t < n; ++t) {
        for (std::int64_t h = 0; h < shape_.kv_heads; ++h) {
          std::memcpy(slots.row(0, t, h), k.row(0, t, h), std::size_t(shape_.head_dim * es));
        }
      }
      break;
    case KeyStorage::ChunkRelative: {
      std::int64_t* stored = state_->stored.data() + size_;
      for (std::int64_t t = 0; t < n; ++t) stored[t] = regime_key_position(shape_.regimes, 0, positions.at(0, t));
      detail::prepare_call(rope, {.k = k, .k_out = slots, .positions = state_->rotated_at(size_, n)},
                           detail::ViewUse::Write, names).run();
      break;
    }
  }
  auto* values = state_->values.data() + size_ * shape_.kv_heads * shape_.v_head_dim * es;
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t h = 0; h < shape_.kv_heads; ++h) {
      std::memcpy(values + (t * shape_.kv_heads + h) * shape_.v_head_dim * es, v.row(0, t, h),
                  std::size_t(shape_.v_head_dim * es));
    }
    state_->positions[size_ + t] = positions.at(0, t);
  }
  size_ += n;
}

void KvCache::shift(std::int64_t first, std::int64_t last, std::int64_t delta) {
  if (first < 0 || last < first || last > size_) {
    throw Error(fmt::format("KvCache::shift: span [{}, {}) is not inside the cached slots [0, {})", first,
                            last, size_));
  }
  if (delta == 0 || first == last) return;
  if (delta <= -kPositionLimit || delta >= kPositionLimit) {
    throw Error(fmt::format("KvCache::shift: delta = {}: |delta| must be below 2^47", delta));
  }
  for (std::int64_t slot = first; slot < last; ++slot) {
    const std::int64_t p = state_->positions[slot] + delta;
    if (p < 0) {
      throw Error(fmt::format("KvCache::shift: slot {} at position {} shifted by {} would be at {}: "
                              "positions must stay >= 0 (shifting before position 0)", slot,
                              state_->positions[slot], delta, p));
    }
    if (p >= kPositionLimit) {
      throw Error(fmt::format("KvCache::shift: slot {} at position {} shifted by {} would pass 2^47", slot,
                              state_->positions[slot], delta));
    }
  }
  // R(δ) = rotation by δ·θ with magnitude 1 (the unit-magnitude rope); δ < 0 is the inverse
  // rotation by |δ|, which for magnitude 1 is exactly R(δ).
  const auto turn = [&](std::int64_t from, std::int64_t to, std::int64_t by) {
    const std::vector<std::int64_t> steps(std::size_t(to - from), by < 0 ? -by : by);
    RotateArgs rotate;
    rotate.k = bshd(state_->keys.data() + from * shape_.kv_heads * shape_.head_dim * element_size(shape_.dtype),
                    shape_.dtype, 1, to - from, shape_.kv_heads, shape_.head_dim);
    rotate.positions = ropekit::positions(std::span<const std::int64_t>(steps));
    rotate.direction = by < 0 ? Direction::Inverse : Direction::Forward;
    state_->shift_rope->apply(rotate);
  };
  switch (state_->storage) {
    case KeyStorage::AtPosition: turn(first, last, delta); break;
    case KeyStorage::Unrotated: break;  // positions only
    case KeyStorage::ChunkRelative:
      // Each key turns from its stored position to the new one: runs of slots with one step.
      for (std::int64_t slot = first; slot < last;) {
        const auto step_of = [&](std::int64_t at) {
          return regime_key_position(shape_.regimes, 0, state_->positions[at] + delta) - state_->stored[at];
        };
        const std::int64_t step = step_of(slot);
        std::int64_t end = slot + 1;
        while (end < last && step_of(end) == step) ++end;
        if (step != 0) turn(slot, end, step);
        for (std::int64_t at = slot; at < end; ++at) state_->stored[at] += step;
        slot = end;
      }
      break;
  }
  for (std::int64_t slot = first; slot < last; ++slot) state_->positions[slot] += delta;
}

void KvCache::erase(std::int64_t first, std::int64_t last) {
  if (first < 0 || last < first || last > size_) {
    throw Error(fmt::format("KvCache::erase: span [{}, {}) is not inside the cached slots [0, {})", first,
                            last, size_));
  }
  const std::int64_t es = element_size(shape_.dtype);
  const std::int64_t k_row = shape_.kv_heads * shape_.head_dim * es;
  const std::int64_t v_row = shape_.kv_heads * shape_.v_head_dim * es;
  const std::int64_t moved = size_ - last;
  std::memmove(state_->keys.data() + first * k_row, state_->keys.data() + last * k_row, std::size_t(moved * k_row));
  std::memmove(state_->values.data() + first * v_row, state_->values.data() + last * v_row,
               std::size_t(moved * v_row));
  std::copy(state_->positions.begin() + last, state_->positions.begin() + size_, state_->positions.begin() + first);
  if (!state_->stored.empty()) {
    std::copy(state_->stored.begin() + last, state_->stored.begin() + size_, state_->stored.begin() + first);
  }
  size_ -= last - first;
}

void KvCache::clear() { size_ = 0; }  // the next append adopts its rope's plan

bool KvCache::rerotate(const Rope& rope) {
  check_layout(rope, "KvCache::rerotate");
  if (size_ == 0 || !needs_rerotation(state_->plan, rope.plan())) {
    if (size_ > 0) state_->adopt(rope.plan());
    return false;
  }
  const Rope old_rope(state_->spec, state_->plan, state_->mode);
  return rerotate(old_rope, rope);
}

bool KvCache::rerotate(const Rope& old_rope, const Rope& rope) {
  check_layout(rope, "KvCache::rerotate");
  check_layout(old_rope, "KvCache::rerotate");
  if (size_ > 0 && needs_rerotation(state_->plan, old_rope.plan())) {
    throw Error(fmt::format("KvCache::rerotate: from's plan (current length {}) is not the cached keys' ({})",
                            length(old_rope.plan()), length(state_->plan)));
  }
  if (size_ == 0 || !needs_rerotation(state_->plan, rope.plan()) || state_->storage == KeyStorage::Unrotated) {
    if (size_ > 0) state_->adopt(rope.plan());
    return false;
  }
  const int d = shape_.head_dim;
  const std::int64_t es = element_size(shape_.dtype);
  const std::int64_t row = shape_.kv_heads * d;
  if (shape_.dtype == DType::F32) {  // float32 keys rotate where they are: the same two roundings, no copies
    RotateArgs rotate;
    rotate.k = bshd(state_->keys.data(), DType::F32, 1, size_, shape_.kv_heads, d);
    rotate.positions = state_->rotated_at(0, size_);
    rotate.direction = Direction::Inverse;
    old_rope.apply(rotate);
    rotate.direction = Direction::Forward;
    rope.apply(rotate);
    state_->adopt(rope.plan());
    return true;
  }
  std::vector<float> buffer(std::size_t(std::min(kRerotateChunk, size_) * row));
  for (std::int64_t first = 0; first < size_; first += kRerotateChunk) {
    const std::int64_t n = std::min(kRerotateChunk, size_ - first);
    std::byte* stored = state_->keys.data() + first * row * es;
    detail::widen(stored, shape_.dtype, int(n * row), buffer.data());
    RotateArgs rotate;
    rotate.k = bshd(buffer.data(), DType::F32, 1, n, shape_.kv_heads, d);
    rotate.positions = state_->rotated_at(first, n);
    rotate.direction = Direction::Inverse;  // exact inverse of the cached Forward, magnitude included
    old_rope.apply(rotate);
    rotate.direction = Direction::Forward;
    rope.apply(rotate);
    detail::narrow(buffer.data(), int(n * row), shape_.dtype, stored);
  }
  state_->adopt(rope.plan());
  return true;
}

void attention(const Rope& rope, const Heads& q, Positions q_positions, const KvCache& cache,
               const Heads& out, const AttentionOptions& options) {
  cache.require_compatible(rope, "attention");
  AttentionArgs args;
  args.q = q;
  args.k = cache.keys();
  args.v = cache.values();
  args.out = out;
  args.q_positions = q_positions;
  args.k_positions = cache.positions();
  args.head_dim = cache.shape().head_dim;
  args.v_head_dim = cache.shape().v_head_dim;
  const PositionRegimes& regimes = cache.shape().regimes;
  if (options.regimes.index() != 0 && options.regimes != regimes) {
    throw Error(fmt::format("attention: options.regimes = {} differs from the cache's regimes = {} (they decide "
                            "how its keys are stored)", to_string(options.regimes), to_string(regimes)));
  }
  AttentionOptions with_regimes = options;
  with_regimes.regimes = regimes;
  // Unrotated keys are rotated on load, per regime; others are read as stored.
  const detail::RopeLoads loads = storage_of(regimes) == KeyStorage::Unrotated ? detail::RopeLoads::QueriesAndKeys
                                                                               : detail::RopeLoads::Queries;
  const detail::ResolvedAttention r = detail::resolve_attention(&rope, args, with_regimes, loads);
  detail::run_attention(args, with_regimes, r);
}

}  // namespace ropekit
