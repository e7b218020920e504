// A paged or slot-mapped KV cache's geometry and slots (ropekit/append.hpp): PagedCache's entry addresses and
// checks, the page table's counts, and every token's slot resolved and checked — what the fused append, the paged
// cache and the device append read before anything is written.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "attention/attention_internal.hpp"
#include "ropekit/append.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

namespace {

std::int64_t entry_offset(const PagedCache& c, std::int64_t slot, std::int64_t head, int lanes) {
  const std::int64_t page = slot / c.page_size, entry = slot % c.page_size;
  const std::int64_t row = c.layout == PageLayout::NHD ? (page * c.page_size + entry) * c.kv_heads + head
                                                       : (page * c.kv_heads + head) * c.page_size + entry;
  return row * lanes * element_size(c.dtype);
}

}  // namespace

void* PagedCache::key(std::int64_t slot, std::int64_t head) const {
  return static_cast<std::byte*>(k) + entry_offset(*this, slot, head, head_dim);
}
void* PagedCache::value(std::int64_t slot, std::int64_t head) const {
  return static_cast<std::byte*>(v) + entry_offset(*this, slot, head, v_head_dim);
}

void PagedCache::validate() const {
  const PagedCache& c = *this;
  const auto positive = [](std::string_view field, std::int64_t value) {
    if (value <= 0) throw Error(fmt::format("cache.{} = {}: must be > 0", field, value));
  };
  if (c.dtype != CacheDType::F32 && c.dtype != CacheDType::BF16 && c.dtype != CacheDType::F16 &&
      c.dtype != CacheDType::F8E4M3) {
    throw Error(fmt::format("cache.dtype = {}: not a CacheDType", static_cast<int>(c.dtype)));
  }
  if (c.layout != PageLayout::NHD && c.layout != PageLayout::HND) {
    throw Error(fmt::format("cache.layout = {}: not a PageLayout", static_cast<int>(c.layout)));
  }
  positive("num_pages", c.num_pages);
  positive("page_size", c.page_size);
  positive("kv_heads", c.kv_heads);
  positive("head_dim", c.head_dim);
  if (c.v_head_dim < 0) throw Error(fmt::format("cache.v_head_dim = {}: must be >= 0", c.v_head_dim));
  // Every byte offset of the cache must fit int64 (and the address space).
  constexpr std::int64_t kMaxBytes = std::int64_t{1} << 46;
  const std::int64_t per_slot = c.kv_heads * std::int64_t{std::max(c.head_dim, c.v_head_dim)} * element_size(c.dtype);
  if (c.page_size > kMaxBytes / c.num_pages || c.num_pages * c.page_size > kMaxBytes / per_slot) {
    throw Error(
        fmt::format("cache: {} pages x {} entries x {} bytes exceed 2^46 bytes", c.num_pages, c.page_size, per_slot));
  }
  for (const auto& [name, scale] : {std::pair{"k_scale", c.k_scale}, std::pair{"v_scale", c.v_scale}}) {
    if (c.dtype == CacheDType::F8E4M3) {
      if (!std::isfinite(scale) || scale <= 0.0f) {
        throw Error(fmt::format("cache.{} = {}: must be finite and > 0", name, scale));
      }
    } else if (scale != 1.0f) {
      throw Error(fmt::format("cache.{} = {}: only an f8e4m3 cache is scaled (cache.dtype = {}); leave it 1", name,
                              scale, to_string(c.dtype)));
    }
  }
}

std::size_t detail::check_page_table_counts(const PageTable& t) {
  if (t.indptr.empty()) throw Error("page_table.indptr is empty: it has batch + 1 values");
  const std::size_t batch = t.indptr.size() - 1;
  if (t.last_page_len.size() != batch) {
    throw Error(fmt::format("page_table.last_page_len has {} values: must have batch = {} (indptr has {})",
                            t.last_page_len.size(), batch, t.indptr.size()));
  }
  if (t.batch_indices.size() != t.seq_positions.size()) {
    throw Error(fmt::format("page_table.batch_indices / seq_positions have {} / {} values: one per token each",
                            t.batch_indices.size(), t.seq_positions.size()));
  }
  return batch;
}

// The cache as a call writes it: its geometry (validate) and its memory.
void detail::check_cache(const PagedCache& c) {
  c.validate();
  if (c.k == nullptr) throw Error("cache.k is null");
  if ((c.v == nullptr) != (c.v_head_dim == 0)) {
    throw Error(
        fmt::format("cache.v is {} but cache.v_head_dim = {}: a cache without values has v = null and "
                    "v_head_dim = 0",
                    c.v == nullptr ? "null" : "set", c.v_head_dim));
  }
}

namespace {

void check_mapping_layout(const SlotMapping& m, std::int64_t tokens) {
  if (m.type != IndexType::I32 && m.type != IndexType::I64) {
    throw Error(fmt::format("slots.type = {}: not an IndexType", static_cast<int>(m.type)));
  }
  if (m.count != tokens) {
    throw Error(fmt::format("slots.count = {}: must equal the number of tokens, {}", m.count, tokens));
  }
  if (tokens > 0 && m.data == nullptr) throw Error("slots.data is null");
}

void check_tokens(const PageTable& p, std::int64_t tokens) {
  if (std::int64_t(p.batch_indices.size()) != tokens) {
    throw Error(fmt::format("page_table.batch_indices / seq_positions have {} values each: must have one per token, {}",
                            p.batch_indices.size(), tokens));
  }
}

}  // namespace

void detail::check_slot_layout(const std::variant<SlotMapping, PageTable>& spec, std::int64_t tokens) {
  if (const auto* m = std::get_if<SlotMapping>(&spec)) {
    check_mapping_layout(*m, tokens);
    detail::check_device_alignment("slots.data", m->data, element_size(m->type));
    return;
  }
  const PageTable& p = std::get<PageTable>(spec);
  detail::check_page_table_counts(p);
  check_tokens(p, tokens);
  for (const auto& [field, span] :
       {std::pair<const char*, std::span<const std::int32_t>>{"page_table.indices", p.indices},
        {"page_table.indptr", p.indptr},
        {"page_table.last_page_len", p.last_page_len},
        {"page_table.batch_indices", p.batch_indices},
        {"page_table.seq_positions", p.seq_positions}}) {
    if (span.data() == nullptr && !span.empty()) throw Error(fmt::format("{} is null", field));
    detail::check_device_alignment(field, span.data(), 4);
  }
}

// The resolved slot of every token (−1: none) into `slots`, resized to tokens (its capacity is reused, so
// a decode step that refills it allocates nothing); throws on anything outside the cache or shared.
void detail::fill_slots(const std::variant<SlotMapping, PageTable>& spec, const PagedCache& c, std::int64_t tokens,
                        std::vector<std::int64_t>& slots) {
  slots.assign(static_cast<std::size_t>(tokens), -1);
  const std::int64_t total = c.slots();
  if (const auto* m = std::get_if<SlotMapping>(&spec)) {
    check_mapping_layout(*m, tokens);
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t s = m->type == IndexType::I32 ? static_cast<const std::int32_t*>(m->data)[t]
                                                       : static_cast<const std::int64_t*>(m->data)[t];
      if (s < -1 || s >= total) {
        throw Error(
            fmt::format("slots[{}] = {}: outside the cache's {} slots [0, {}) (-1 skips a token)", t, s, total, total));
      }
      slots[std::size_t(t)] = s;
    }
  } else {
    const PageTable& p = std::get<PageTable>(spec);
    const std::size_t batch = detail::check_page_table_counts(p);
    if (p.indptr[0] != 0) throw Error(fmt::format("page_table.indptr[0] = {}: must be 0", p.indptr[0]));
    std::vector<std::int64_t> length(batch);
    for (std::size_t b = 0; b < batch; ++b) {
      const std::int32_t first = p.indptr[b], last = p.indptr[b + 1];
      if (last < first || static_cast<std::size_t>(last) > p.indices.size()) {
        throw Error(fmt::format("page_table.indptr[{}] = {}: must be in [indptr[{}] = {}, indices.size() = {}]", b + 1,
                                last, b, first, p.indices.size()));
      }
      for (std::int32_t i = first; i < last; ++i) {
        if (p.indices[std::size_t(i)] < 0 || p.indices[std::size_t(i)] >= c.num_pages) {
          throw Error(fmt::format("page_table.indices[{}] = {}: outside the cache's pages [0, {})", i,
                                  p.indices[std::size_t(i)], c.num_pages));
        }
      }
      const std::int32_t len = p.last_page_len[b];
      const bool has_pages = last > first;
      if (has_pages ? len < 1 || len > c.page_size : len != 0) {
        throw Error(
            fmt::format("page_table.last_page_len[{}] = {}: must be in [1, page_size = {}] for a sequence "
                        "with pages, 0 for one without",
                        b, len, c.page_size));
      }
      length[b] = has_pages ? std::int64_t{last - first - 1} * c.page_size + len : 0;
    }
    check_tokens(p, tokens);
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int32_t b = p.batch_indices[std::size_t(t)], e = p.seq_positions[std::size_t(t)];
      if (b < 0 || static_cast<std::size_t>(b) >= batch) {
        throw Error(fmt::format("page_table.batch_indices[{}] = {}: outside the batch [0, {})", t, b, batch));
      }
      if (e < 0 || e >= length[std::size_t(b)]) {
        throw Error(fmt::format("page_table.seq_positions[{}] = {}: outside sequence {}'s {} entries", t, e, b,
                                length[std::size_t(b)]));
      }
      const std::int32_t page = p.indices[std::size_t(p.indptr[std::size_t(b)] + e / c.page_size)];
      slots[std::size_t(t)] = std::int64_t{page} * c.page_size + e % c.page_size;
    }
  }
  // Two tokens writing one slot would race (and the result would depend on the split). Few tokens
  // (decode) compare pairwise, without the index sort's allocation.
  const auto shared = [](std::int64_t a, std::int64_t b, std::int64_t s) {
    return Error(fmt::format("tokens {} and {} both write slot {}: slots must be distinct within a call", a, b, s));
  };
  constexpr std::size_t kPairwise = 16;
  if (slots.size() <= kPairwise) {
    for (std::size_t j = 1; j < slots.size(); ++j) {
      for (std::size_t i = 0; i < j; ++i) {
        if (slots[j] >= 0 && slots[i] == slots[j]) throw shared(std::int64_t(i), std::int64_t(j), slots[j]);
      }
    }
    return;
  }
  std::vector<std::int64_t> order(slots.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return slots[std::size_t(a)] != slots[std::size_t(b)] ? slots[std::size_t(a)] < slots[std::size_t(b)] : a < b;
  });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const std::int64_t s = slots[std::size_t(order[i])];
    if (s >= 0 && s == slots[std::size_t(order[i - 1])]) throw shared(order[i - 1], order[i], s);
  }
}

std::vector<std::int64_t> resolve_slots(const AppendArgs& args, const PagedCache& cache) {
  detail::check_cache(cache);
  std::vector<std::int64_t> slots;
  detail::fill_slots(args.slots, cache, args.k.batch * args.k.seq, slots);
  return slots;
}

}  // namespace ropekit
