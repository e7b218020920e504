// The K-shift and re-rotation of a PagedKvCache's keys (ropekit/paged_kv_cache.hpp: seq_add, the entry
// shifts, rerotate), through calls prepared once per operation. Each operation prepares one read-only
// call over all the entries it turns — validated once, its angles (table or on the fly) chosen once —
// and then rotates each entry's kv_heads key rows where they lie, with the backend's token kernel for
// the storage type: the bits a rotation of those rows in place writes. fp8 entries are widened × k_scale
// into float32 rows, rotated, and quantized back; a re-rotation un-rotates and rotates in float32 with
// one rounding to storage at the end.
#include <algorithm>
#include <span>
#include <vector>

#include "attention/paged_state.hpp"
#include "call/prepare.hpp"
#include "rope/backend.hpp"
#include "rope/reference.hpp"

namespace ropekit {

using detail::KeyStorage;

namespace {

// One call over `count` entries that turns entry i by angle positions[i]: read-only, so its view only
// describes the rows (count tokens of kv_heads rows of head_dim lanes in one row's memory, seq_stride 0);
// each entry's rows are handed to the token kernel where they lie.
RotateCall prepare_turns(const Rope& rope, std::span<const std::int64_t> positions, std::int64_t kv_heads,
                         Direction direction, std::vector<float>& row) {
  const int d = rope.spec().head_dim;
  row.assign(std::size_t(kv_heads * d), 0.0f);
  const Heads rows{.data = row.data(),
                   .dtype = DType::F32,
                   .batch = 1,
                   .seq = std::int64_t(positions.size()),
                   .heads = kv_heads,
                   .batch_stride = 0,
                   .seq_stride = 0,
                   .head_stride = d};
  return detail::prepare(rope, {.k = rows, .positions = ropekit::positions(positions), .direction = direction},
                         {.use = detail::ViewUse::Read, .names = {.k = "the cache's keys"}, .keep_plan = false});
}

}  // namespace

// Applies calls[0], then calls[1], ... to the key rows of entries[i] of s, entry i being token i of each
// call: in place in the storage type when there is one call and the cache is not fp8, else through a
// float32 row (widened exactly, or × k_scale for fp8) with one rounding back at the end.
void PagedKvCache::State::turn_entries(const Sequence& s, const std::vector<std::int64_t>& entries,
                                       std::span<const RotateCall* const> calls) {
  const std::int64_t heads = cache.kv_heads, d = cache.head_dim;
  const std::int64_t head_stride = cache.head_stride(cache.head_dim);
  const bool direct = calls.size() == 1 && !paged::is_fp8(cache.dtype);
  const DType dtype = paged::storage_dtype(cache.dtype);
  if (direct) {
    const detail::TokenKernel kernel = cpu::select_token_kernel(dtype);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      void* key = cache.key(slot(s, entries[i]), 0);
      kernel(calls[0]->job(), std::int64_t(i), key, head_stride, key, head_stride, heads);
    }
    return;
  }
  const detail::TokenKernel f32 = cpu::select_token_kernel(DType::F32);
  const cpu::E4m3WidenKernel widen_e4m3 = cpu::select_e4m3_widen_kernel();
  const cpu::CacheConvertKernel quantize = cpu::select_cache_convert_kernel();
  std::vector<float> work(std::size_t(heads * d));
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::int64_t slot_i = slot(s, entries[i]);
    for (std::int64_t h = 0; h < heads; ++h) {
      float* row = work.data() + h * d;
      const void* key = cache.key(slot_i, h);
      if (paged::is_fp8(cache.dtype)) {
        widen_e4m3(static_cast<const std::uint8_t*>(key), d, cache.k_scale, row);
      } else {
        detail::widen(key, dtype, d, row);
      }
    }
    for (const RotateCall* call : calls) f32(call->job(), std::int64_t(i), work.data(), d, work.data(), d, heads);
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* row = work.data() + h * d;
      if (paged::is_fp8(cache.dtype)) {
        quantize(row, DType::F32, d, cache.key(slot_i, h), cache.dtype, cache.k_scale);
      } else {
        detail::narrow(row, d, dtype, cache.key(slot_i, h));
      }
    }
  }
}

void PagedKvCache::State::turn(const Sequence& s, const std::vector<std::int64_t>& entries, std::int64_t step) {
  const std::vector<std::int64_t> steps(entries.size(), step < 0 ? -step : step);
  std::vector<float> row;
  const RotateCall call =
      prepare_turns(unit_rope(*s.plan), steps, cache.kv_heads, step < 0 ? Direction::Inverse : Direction::Forward, row);
  const RotateCall* calls[] = {&call};
  turn_entries(s, entries, calls);
}

void PagedKvCache::State::shift(int seq, Sequence& s, const std::vector<std::int64_t>& entries, std::int64_t delta,
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
      std::stable_sort(by_step.begin(), by_step.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
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

void PagedKvCache::State::rerotate_keys(Sequence& s, const Rope& old_rope, const Rope& rope) {
  const auto n = std::int64_t(s.positions.size());
  std::vector<std::int64_t> entries(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) entries[std::size_t(i)] = i;
  const Positions at = rotated_at(s, 0, n);
  const std::span<const std::int64_t> positions(static_cast<const std::int64_t*>(at.data), std::size_t(n));
  std::vector<float> row;
  const RotateCall undo = prepare_turns(old_rope, positions, cache.kv_heads, Direction::Inverse, row);
  const RotateCall redo = prepare_turns(rope, positions, cache.kv_heads, Direction::Forward, row);
  // Un-rotate and rotate in float32, one rounding to storage at the end (float32 keys: in place).
  const RotateCall* calls[] = {&undo, &redo};
  Plan next = rope.plan();  // copied first: nothing after the keys turn may fail
  turn_entries(s, entries, calls);
  s.plan = std::move(next);
}

}  // namespace ropekit
