// src/attention/paged_state.hpp — the state behind a PagedKvCache (ropekit/paged_kv_cache.hpp), shared by
// its three rooms: page management and the sequence operations (paged_kv_cache.cpp), the K-shift and
// re-rotation (kv_shift.cpp), attention over the pages (paged_attention.cpp).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "attention/attention_internal.hpp"
#include "ropekit/error.hpp"
#include "ropekit/paged_kv_cache.hpp"

namespace ropekit {
namespace paged {

// The entries of a sequence between positions [p0, p1) (negative p0: from 0; negative p1: to the end).
struct PositionRange {
  std::int64_t p0, p1;
  bool contains(std::int64_t p) const { return p >= p0 && p < p1; }
};

inline PositionRange range_of(std::int64_t p0, std::int64_t p1) {
  return {std::max<std::int64_t>(p0, 0), p1 < 0 ? std::numeric_limits<std::int64_t>::max() : p1};
}

inline bool is_fp8(CacheDType t) { return t == CacheDType::F8E4M3; }

// The DType an entry of a non-fp8 cache is stored as (the enumerators agree), and what fp8 entries
// are widened to.
inline DType storage_dtype(CacheDType t) { return is_fp8(t) ? DType::F32 : static_cast<DType>(t); }

// The plan of pure rotations R(δ): the same frequencies, magnitude 1.
inline Plan unit_magnitude(Plan plan) {
  plan.cos_sin_scale = 1.0;
  return plan;
}

inline void check_seq(int seq, int max_sequences, std::string_view caller) {
  if (seq < 0 || seq >= max_sequences) {
    throw Error(fmt::format("{}: sequence {}: outside [0, {})", caller, seq, max_sequences));
  }
}

}  // namespace paged

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
  detail::KeyStorage storage = detail::KeyStorage::AtPosition;
  // The last unit-magnitude rope built for K-shifts (a context shift per token must not build one).
  std::shared_ptr<const Rope> unit;

  // The positions entries [first, first + n) of s are rotated at.
  Positions rotated_at(const Sequence& s, std::int64_t first, std::int64_t n) const {
    const auto& from = storage == detail::KeyStorage::ChunkRelative ? s.stored : s.positions;
    return ropekit::positions(std::span<const std::int64_t>(from.data() + first, std::size_t(n)));
  }

  const Rope& unit_rope(const Plan& plan) {
    Plan p = paged::unit_magnitude(plan);
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

  // The K-shift and re-rotation (kv_shift.cpp), through calls prepared once per operation.
  // Turns the keys of `entries` by R(step): a pure rotation with magnitude 1; a negative step is the
  // inverse rotation by |step|, which for magnitude 1 is exactly R(step).
  void turn(const Sequence& s, const std::vector<std::int64_t>& entries, std::int64_t step);
  // Moves `entries` of s (entry order) by delta positions, their keys turned as they are stored.
  // Errors (nothing changes): a position that would leave [0, 2^47).
  void shift(int seq, Sequence& s, const std::vector<std::int64_t>& entries, std::int64_t delta,
             std::string_view caller);
  // Re-rotates every key of s from old_rope's plan (the sequence's) to rope's (see rerotate).
  void rerotate_keys(Sequence& s, const Rope& old_rope, const Rope& rope);
  // calls[0], calls[1], ... on the key rows of entries[i], entry i being token i of each call.
  void turn_entries(const Sequence& s, const std::vector<std::int64_t>& entries,
                    std::span<const RotateCall* const> calls);

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
    if (needed > 0) s.pages.reserve(s.pages.size() + std::size_t(needed));  // the moves below cannot throw then
    for (std::int64_t i = 0; i < needed; ++i) {
      s.pages.push_back(free.back());
      free.pop_back();
    }
  }
};

}  // namespace ropekit
