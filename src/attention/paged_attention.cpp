// Attention over a PagedKvCache (ropekit/paged_kv_cache.hpp): the attention driver over each sequence's
// entries with q rotated on load, its tiles reading the pages in place (fp8 entries widened × scale as
// they load; keys rotated on load over scattered pages gathered into buffers first).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "attention/attention_internal.hpp"
#include "attention/paged_state.hpp"
#include "rope/backend.hpp"
#include "rope/parallel.hpp"
#include "rope/reference.hpp"
#include "rope/views.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"
#include "ropekit/paged_kv_cache.hpp"

namespace ropekit {

using detail::KeyStorage;
using detail::storage_of;
using paged::check_seq;
using paged::is_fp8;
using paged::storage_dtype;

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
    const auto index_bytes = static_cast<std::size_t>(element_size(q_positions.type));
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
