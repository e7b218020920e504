// PagedKvCache: many sequences in one paged cache. Each sequence's attention equals a KvCache holding
// the same tokens, bit for bit (appends interleaved across sequences, both page layouts, every
// storage type, every SIMD target); erase / shift / seq_cp equal KvCache's erase / shift / a fresh
// append; re-rotation per sequence; fp8 against the double oracle, and read in place bit for bit as
// attention over its entries' values; pages return to the free list; bad input changes nothing.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "attention_oracle.hpp"
#include "expect_error.hpp"
#include "ropekit/ropekit.h"
#include "ropekit/ropekit.hpp"
#include "targets.hpp"

namespace {

using namespace ropekit;

constexpr std::int64_t kKv = 2, kQ = 4;
constexpr int kD = 64;

Spec llama() { return {.head_dim = kD, .rotary_dim = kD, .base = 10000.0, .pairing = Pairing::Half}; }

// Tokens of one sequence in a storage type: k, v and q (one query row per token).
struct Stream {
  std::int64_t n;
  DType dtype;
  std::vector<std::uint16_t> k16, v16, q16;
  std::vector<float> k32, v32, q32;
  std::vector<std::int64_t> pos;
  Stream(std::int64_t n_, DType dtype_, std::uint32_t seed, std::int64_t first_position)
      : n(n_),
        dtype(dtype_),
        k32(attn_oracle::normal(std::size_t(n_ * kKv * kD), seed)),
        v32(attn_oracle::normal(std::size_t(n_ * kKv * kD), seed + 1)),
        q32(attn_oracle::normal(std::size_t(n_ * kQ * kD), seed + 2)) {
    for (std::int64_t i = 0; i < n; ++i) pos.push_back(first_position + i);
    const auto narrow16 = [&](const std::vector<float>& x) {
      std::vector<std::uint16_t> out(x.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        out[i] = dtype == DType::BF16 ? float_to_bf16(x[i]) : float_to_f16(x[i]);
      return out;
    };
    if (dtype != DType::F32) {
      k16 = narrow16(k32);
      v16 = narrow16(v32);
      q16 = narrow16(q32);
    }
  }
  void* data(std::vector<float>& f, std::vector<std::uint16_t>& h, std::int64_t first, std::int64_t heads) {
    return dtype == DType::F32 ? static_cast<void*>(f.data() + first * heads * kD)
                               : static_cast<void*>(h.data() + first * heads * kD);
  }
  Heads k(std::int64_t first, std::int64_t count) { return bshd(data(k32, k16, first, kKv), dtype, 1, count, kKv, kD); }
  Heads v(std::int64_t first, std::int64_t count) { return bshd(data(v32, v16, first, kKv), dtype, 1, count, kKv, kD); }
  Heads q(std::int64_t first, std::int64_t count) { return bshd(data(q32, q16, first, kQ), dtype, 1, count, kQ, kD); }
};

// The k/v rows of the given (sequence, token) pairs packed in call order, with their positions.
struct Batch {
  std::vector<std::byte> k, v;
  std::vector<std::int64_t> pos;
  std::vector<std::int32_t> seq_of;
  DType dtype;
  void add(Stream& s, int seq, std::int64_t token) {
    const std::int64_t es = element_size(s.dtype);
    const auto put = [&](std::vector<std::byte>& to, const Heads& from) {
      const auto* p = static_cast<const std::byte*>(from.data);
      to.insert(to.end(), p, p + kKv * kD * es);
    };
    put(k, s.k(token, 1));
    put(v, s.v(token, 1));
    pos.push_back(s.pos[std::size_t(token)]);
    seq_of.push_back(seq);
    dtype = s.dtype;
  }
  AppendArgs args() {
    const auto n = std::int64_t(pos.size());
    return {.k = bshd(k.data(), dtype, 1, n, kKv, kD),
            .v = bshd(v.data(), dtype, 1, n, kKv, kD),
            .positions = positions(pos)};
  }
};

class PagedKvCacheTest : public targets::PerTarget {};
ROPEKIT_PER_TARGET(PagedKvCacheTest);

PagedKvCacheShape shape_of(CacheDType dtype, PageLayout layout, std::int64_t pages = 64, std::int64_t page_size = 8) {
  return {.num_pages = pages,
          .page_size = page_size,
          .kv_heads = kKv,
          .dtype = dtype,
          .layout = layout,
          .k_scale = dtype == CacheDType::F8E4M3 ? 0.02f : 1.0f,
          .v_scale = dtype == CacheDType::F8E4M3 ? 0.02f : 1.0f,
          .max_sequences = 4};
}

// One decode query per sequence, in one call, against the paged cache; and each against its own
// KvCache; the outputs as bytes.
std::vector<std::byte> paged_decode(const Rope& rope, const PagedKvCache& cache, std::vector<Stream*> streams,
                                    const std::vector<std::int32_t>& seqs, const std::vector<std::int64_t>& q_token,
                                    const std::vector<std::int64_t>& q_pos) {
  const DType dtype = streams[0]->dtype;
  const std::int64_t es = element_size(dtype), n = std::int64_t(seqs.size());
  std::vector<std::byte> q(std::size_t(n * kQ * kD * es)), out(q.size());
  for (std::int64_t i = 0; i < n; ++i) {
    std::memcpy(q.data() + i * kQ * kD * es, streams[std::size_t(i)]->q(q_token[std::size_t(i)], 1).data,
                std::size_t(kQ * kD * es));
  }
  attention(rope, bshd(q.data(), dtype, 1, n, kQ, kD), positions(q_pos), seqs, cache,
            bshd(out.data(), dtype, 1, n, kQ, kD));
  return out;
}

std::vector<std::byte> contiguous_decode(const Rope& rope, const KvCache& cache, Stream& s, std::int64_t q_token,
                                         std::int64_t q_pos) {
  const std::int64_t es = element_size(s.dtype);
  std::vector<std::byte> out(std::size_t(kQ * kD * es));
  const std::vector<std::int64_t> qp = {q_pos};
  attention(rope, s.q(q_token, 1), positions(qp), cache, bshd(out.data(), s.dtype, 1, 1, kQ, kD));
  return out;
}

TEST_P(PagedKvCacheTest, EachSequenceAttendsLikeItsOwnKvCache) {
  const Rope rope(llama());
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (const PageLayout layout : {PageLayout::NHD, PageLayout::HND}) {
      // Pages of 12 entries for HND: 64-key tiles then start inside a page.
      const std::int64_t page_size = layout == PageLayout::NHD ? 8 : 12;
      PagedKvCache cache(rope, shape_of(static_cast<CacheDType>(dtype), layout, 64, page_size));
      // Ragged sequences at different offsets, appended interleaved: a prefill of two sequences in
      // one call, then decode steps of all three (their pages interleave; the longest spans three
      // 64-key tiles, each over pages that do not follow each other).
      std::vector<Stream> streams = {Stream(5, dtype, 1, 0), Stream(23, dtype, 2, 100), Stream(150, dtype, 3, 7)};
      std::vector<std::int64_t> done(3, 0);
      {
        Batch b;
        for (std::int64_t t = 0; t < 3; ++t) b.add(streams[0], 0, done[0]++);
        for (std::int64_t t = 0; t < 17; ++t) b.add(streams[2], 2, done[2]++);
        cache.append(rope, b.seq_of, b.args());
      }
      while (done[0] < 5 || done[1] < 23 || done[2] < 150) {
        Batch b;
        for (int s = 2; s >= 0; --s) {
          if (done[std::size_t(s)] < streams[std::size_t(s)].n)
            b.add(streams[std::size_t(s)], s, done[std::size_t(s)]++);
        }
        cache.append(rope, b.seq_of, b.args());
      }
      for (int s = 0; s < 3; ++s) ASSERT_EQ(cache.length(s), streams[std::size_t(s)].n);
      const auto pages_of = [&](std::int64_t n) { return (n + page_size - 1) / page_size; };
      EXPECT_EQ(cache.free_pages(), 64 - (pages_of(5) + pages_of(23) + pages_of(150)));

      const std::vector<std::int32_t> seqs = {2, 0, 1};
      const std::vector<std::int64_t> q_token = {149, 4, 22};
      const std::vector<std::int64_t> q_pos = {156, 4, 122};
      const std::vector<std::byte> paged =
          paged_decode(rope, cache, {&streams[2], &streams[0], &streams[1]}, seqs, q_token, q_pos);
      const std::int64_t row = kQ * kD * element_size(dtype);
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        Stream& s = streams[std::size_t(seqs[i])];
        KvCache own(rope, {.capacity = 160, .kv_heads = kKv, .dtype = dtype});
        own.append(rope, s.k(0, s.n), s.v(0, s.n), positions(s.pos));
        const std::vector<std::byte> want = contiguous_decode(rope, own, s, q_token[i], q_pos[i]);
        EXPECT_EQ(std::memcmp(paged.data() + std::int64_t(i) * row, want.data(), std::size_t(row)), 0)
            << to_string(dtype) << " " << to_string(layout) << " sequence " << seqs[i];
      }
    }
  }
}

// Prefill over a cached prefix: new queries of one sequence attend causally to its cached entries.
TEST_P(PagedKvCacheTest, PrefillOverACachedPrefix) {
  const Rope rope(llama());
  PagedKvCache cache(rope, shape_of(CacheDType::F32, PageLayout::NHD));
  Stream s(30, DType::F32, 9, 0);
  Batch b;
  for (std::int64_t t = 0; t < 30; ++t) b.add(s, 1, t);
  cache.append(rope, b.seq_of, b.args());
  KvCache own(rope, {.capacity = 30, .kv_heads = kKv});
  own.append(rope, s.k(0, 30), s.v(0, 30), positions(s.pos));
  // The last 10 tokens as queries (as a chunked prefill would run them).
  std::vector<float> got(10 * kQ * kD), want(got.size());
  const std::vector<std::int32_t> seq_of(10, 1);
  const std::vector<std::int64_t> qp(s.pos.begin() + 20, s.pos.end());
  attention(rope, s.q(20, 10), positions(qp), seq_of, cache, bshd(got.data(), DType::F32, 1, 10, kQ, kD));
  attention(rope, s.q(20, 10), positions(qp), own, bshd(want.data(), DType::F32, 1, 10, kQ, kD));
  EXPECT_EQ(got, want);
}

TEST_P(PagedKvCacheTest, SequenceOperationsEqualKvCacheOnes) {
  const Rope rope(llama());
  for (const DType dtype : {DType::F32, DType::BF16}) {
    for (const PageLayout layout : {PageLayout::NHD, PageLayout::HND}) {
      PagedKvCache cache(rope, shape_of(static_cast<CacheDType>(dtype), layout));
      Stream s(30, dtype, 4, 0);
      Batch b;
      for (std::int64_t t = 0; t < 30; ++t) b.add(s, 0, t);
      cache.append(rope, b.seq_of, b.args());
      cache.seq_cp(0, 3, 0, 12);  // a fork of the first 12 tokens
      const std::int64_t free_before = cache.free_pages();
      // Context shift: drop positions [4, 10), move the rest back by 6 (llama.cpp's seq_rm + seq_add: erase + shift).
      cache.erase(0, 4, 10);
      cache.shift(0, 10, -1, -6);
      EXPECT_EQ(cache.length(0), 24);
      EXPECT_EQ(cache.free_pages(), free_before + 1);  // 30 → 24 entries: 4 → 3 pages of 8
      KvCache own(rope, {.capacity = 30, .kv_heads = kKv, .dtype = dtype});
      own.append(rope, s.k(0, 30), s.v(0, 30), positions(s.pos));
      own.erase(4, 10);
      own.shift(4, own.size(), -6);
      for (std::int64_t i = 0; i < 24; ++i) ASSERT_EQ(cache.positions(0)[std::size_t(i)], own.position(i));
      const std::int64_t row = kQ * kD * element_size(dtype);
      std::vector<std::byte> got = paged_decode(rope, cache, {&s}, {0}, {29}, {24});
      EXPECT_EQ(std::memcmp(got.data(), contiguous_decode(rope, own, s, 29, 24).data(), std::size_t(row)), 0)
          << to_string(dtype) << " " << to_string(layout);
      // The fork kept the original 12 tokens.
      KvCache fork(rope, {.capacity = 12, .kv_heads = kKv, .dtype = dtype});
      fork.append(rope, s.k(0, 12), s.v(0, 12), positions(std::span(s.pos).first(12)));
      got = paged_decode(rope, cache, {&s}, {3}, {12}, {12});
      EXPECT_EQ(std::memcmp(got.data(), contiguous_decode(rope, fork, s, 12, 12).data(), std::size_t(row)), 0);
      // Clearing returns every page.
      cache.seq_clear(0);
      cache.seq_clear(3);
      EXPECT_EQ(cache.free_pages(), 64);
      EXPECT_ERROR(cache.plan(0), "sequence 0 is empty");
    }
  }
}

// Sequences at different lengths under dynamic NTK have different plans (a RopeSet hands out the
// Rope of each); a sequence that grows past the original length is re-rotated alone.
TEST_P(PagedKvCacheTest, PerSequencePlansAndRerotation) {
  Spec spec = llama();
  spec.scaling = scaling::DynamicNtk{.factor = 2.0, .max_position_embeddings = 32};
  const RopeSet ropes(spec);
  PagedKvCache cache(*ropes.at(1), shape_of(CacheDType::F32, PageLayout::NHD));
  Stream a(20, DType::F32, 5, 0), b(40, DType::F32, 6, 0);
  Batch ba, bb;
  for (std::int64_t t = 0; t < 20; ++t) ba.add(a, 0, t);
  for (std::int64_t t = 0; t < 40; ++t) bb.add(b, 1, t);
  cache.append(*ropes.at(20), ba.seq_of, ba.args());
  cache.append(*ropes.at(40), bb.seq_of, bb.args());
  EXPECT_TRUE(needs_rerotation(cache.plan(0), cache.plan(1)));
  // A query with the wrong sequence's rope is refused.
  std::vector<float> q(kQ * kD), out(q.size());
  const std::vector<std::int64_t> qp = {20};
  const std::vector<std::int32_t> seq0 = {0};
  EXPECT_ERROR(attention(*ropes.at(40), bshd(q.data(), DType::F32, 1, 1, kQ, kD), positions(qp), seq0, cache,
                         bshd(out.data(), DType::F32, 1, 1, kQ, kD)),
               "sequence 0", "rerotate");
  // Sequence 0 grows to 40 and is re-rotated alone: its keys are within KvCache::rerotate's bound of
  // exact (15 ε·|pair|, magnitude 1 here), and a fresh append under the new plan within 5 ε·|pair|, so
  // the two differ by at most 20 ε·|pair| per lane.
  EXPECT_TRUE(cache.rerotate(0, *ropes.at(40)));
  EXPECT_FALSE(cache.rerotate(0, *ropes.at(40)));
  EXPECT_FALSE(needs_rerotation(cache.plan(0), cache.plan(1)));
  KvCache fresh(*ropes.at(40), {.capacity = 20, .kv_heads = kKv});
  fresh.append(*ropes.at(40), a.k(0, 20), a.v(0, 20), positions(a.pos));
  const auto* want = static_cast<const float*>(fresh.keys().data);
  double worst = 0.0;
  for (std::int64_t i = 0; i < 20; ++i) {
    const std::int64_t slot = std::int64_t{cache.pages(0)[std::size_t(i / 8)]} * 8 + i % 8;
    for (std::int64_t h = 0; h < kKv; ++h) {
      const auto* got = static_cast<const float*>(cache.cache().key(slot, h));
      const float* x = a.k32.data() + (i * kKv + h) * kD;
      for (int j = 0; j < kD / 2; ++j) {
        const double norm = std::hypot(double(x[j]), double(x[j + kD / 2]));
        for (int l : {j, j + kD / 2}) {
          const double err = std::abs(double(got[l]) - double(want[(i * kKv + h) * kD + l]));
          worst = std::max(worst, err / (0x1p-24 * norm));
        }
      }
    }
  }
  std::printf("re-rotated vs fresh: worst %.2f eps·|pair| (bound 20)\n", worst);
  EXPECT_LE(worst, 20.0);
}

// Entry-range operations (KvCache's slots) equal the position-range ones where the positions are in
// entry order; rerotate(seq, from, to) equals rerotate(seq, to) bit for bit; a sequence in one HND page
// (read in place) attends as a KvCache; bad entry ranges are named and change nothing.
TEST_P(PagedKvCacheTest, EntryOperationsRerotateFromAndOnePageInPlace) {
  Spec spec = llama();
  spec.scaling = scaling::DynamicNtk{.factor = 2.0, .max_position_embeddings = 16};
  const Rope short_rope(spec, AngleMode::Accurate, 16), long_rope(spec, AngleMode::Accurate, 30);
  for (const DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(to_string(dtype));
    Stream s(30, dtype, 12, 0);
    Batch b;
    for (std::int64_t t = 0; t < 30; ++t) b.add(s, 0, t);
    PagedKvCache by_entry(short_rope, shape_of(static_cast<CacheDType>(dtype), PageLayout::HND, 4, 32));
    PagedKvCache by_position(short_rope, shape_of(static_cast<CacheDType>(dtype), PageLayout::HND, 4, 32));
    by_entry.append(short_rope, b.seq_of, b.args());
    by_position.append(short_rope, b.seq_of, b.args());
    by_entry.erase_entries(0, 4, 10);
    by_entry.shift_entries(0, 4, 24, -6);
    by_position.erase(0, 4, 10);
    by_position.shift(0, 10, -1, -6);
    EXPECT_TRUE(by_entry.rerotate(0, short_rope, long_rope));
    EXPECT_TRUE(by_position.rerotate(0, long_rope));
    ASSERT_EQ(by_entry.length(0), 24);
    const std::int64_t bytes = 32 * kKv * kD * element_size(dtype);  // one page
    EXPECT_EQ(std::memcmp(by_entry.cache().k, by_position.cache().k, std::size_t(bytes)), 0);
    EXPECT_EQ(std::memcmp(by_entry.cache().v, by_position.cache().v, std::size_t(bytes)), 0);
    for (std::int64_t i = 0; i < 24; ++i) EXPECT_EQ(by_entry.positions(0)[std::size_t(i)], i);
    // The one HND page is read in place; a KvCache (one NHD page) with the same history attends alike.
    KvCache own(short_rope, {.capacity = 30, .kv_heads = kKv, .dtype = dtype});
    own.append(short_rope, s.k(0, 30), s.v(0, 30), positions(s.pos));
    own.erase(4, 10);
    own.shift(4, 24, -6);
    EXPECT_TRUE(own.rerotate(short_rope, long_rope));
    const std::int64_t row = kQ * kD * element_size(dtype);
    const std::vector<std::byte> got = paged_decode(long_rope, by_entry, {&s}, {0}, {29}, {24});
    EXPECT_EQ(std::memcmp(got.data(), contiguous_decode(long_rope, own, s, 29, 24).data(), std::size_t(row)), 0);
    // Bad ranges and plans, and nothing changed.
    EXPECT_ERROR(by_entry.erase_entries(0, 20, 25), "entries [20, 25)", "[0, 24)");
    EXPECT_ERROR(by_entry.shift_entries(0, -1, 3, 1), "entries [-1, 3)");
    EXPECT_ERROR(by_entry.shift_entries(0, 0, 3, -1), "entry 0 at position 0", "[0, 2^47)");
    EXPECT_ERROR(by_entry.rerotate(0, short_rope, long_rope), "from's plan", "sequence 0");
    EXPECT_EQ(by_entry.length(0), 24);
    EXPECT_EQ(by_entry.positions(0)[0], 0);
    EXPECT_EQ(std::memcmp(by_entry.cache().k, by_position.cache().k, std::size_t(bytes)), 0);
  }
}

// fp8 entries: attention equals the double oracle over the dequantized keys and values (what the
// cache holds) within attention's float32 bound.
TEST_P(PagedKvCacheTest, Fp8CacheAgainstTheOracle) {
  const Rope rope(llama());
  PagedKvCache cache(rope, shape_of(CacheDType::F8E4M3, PageLayout::HND));
  Stream s(25, DType::F32, 8, 3);
  Batch b;
  for (std::int64_t t = 0; t < 25; ++t) b.add(s, 2, t);
  cache.append(rope, b.seq_of, b.args());
  cache.shift(2, 0, -1, 5);  // and a K-shift through the fp8 path
  const PagedCache& c = cache.cache();
  std::vector<float> k(25 * kKv * kD), v(k.size());
  for (std::int64_t i = 0; i < 25; ++i) {
    const std::int64_t slot = std::int64_t{cache.pages(2)[std::size_t(i / 8)]} * 8 + i % 8;
    for (std::int64_t h = 0; h < kKv; ++h) {
      for (int l = 0; l < kD; ++l) {
        k[std::size_t((i * kKv + h) * kD + l)] =
            e4m3_to_float(static_cast<const std::uint8_t*>(c.key(slot, h))[l]) * 0.02f;
        v[std::size_t((i * kKv + h) * kD + l)] =
            e4m3_to_float(static_cast<const std::uint8_t*>(c.value(slot, h))[l]) * 0.02f;
      }
    }
  }
  // The query rotated as attention rotates it on load.
  std::vector<float> q(s.q32.begin() + 24 * kQ * kD, s.q32.begin() + 25 * kQ * kD), rotated = q;
  const std::vector<std::int64_t> qp = {29};
  rope.apply({.q = bshd(rotated.data(), DType::F32, 1, 1, kQ, kD), .positions = positions(qp)});
  std::vector<float> out(kQ * kD);
  const std::vector<std::int32_t> seq_of = {2};
  attention(rope, bshd(q.data(), DType::F32, 1, 1, kQ, kD), positions(qp), seq_of, cache,
            bshd(out.data(), DType::F32, 1, 1, kQ, kD));
  std::vector<std::int64_t> kp(cache.positions(2).begin(), cache.positions(2).end());
  const attn_oracle::Shape sh{.batch = 1, .q_seq = 1, .k_seq = 25, .q_heads = kQ, .kv_heads = kKv, .d = kD, .dv = kD};
  const attn_oracle::Result want = attn_oracle::softmax_attention(rotated, k, v, sh, qp, kp, 1.0 / 8.0, true, 0);
  double max_v = 0.0;
  for (float x : v) max_v = std::max(max_v, double(std::abs(x)));
  for (std::int64_t h = 0; h < kQ; ++h) {
    const double bound = 1e-6 * (1.0 + want.logit_range[std::size_t(h)]) * max_v;
    for (int l = 0; l < kD; ++l) {
      EXPECT_LE(std::abs(out[std::size_t(h * kD + l)] - want.out[std::size_t(h * kD + l)]), bound) << h << " " << l;
    }
  }
  EXPECT_EQ(kp.front(), 8);  // shifted by 5
}

// fp8 entries are read in place, widened × scale as the tiles load them: each sequence's attention equals,
// bit for bit, attention without a rope over its entries' values (e4m3_to_float(b) · scale in entry order)
// with q rotated as attention rotates it on load — both layouts, interleaved pages, 64-key tiles starting
// inside pages, a decode query (key rows) and a prefill over the cached prefix (transposed tiles).
TEST_P(PagedKvCacheTest, Fp8EntriesReadInPlaceEqualAttentionOverTheirValues) {
  const Rope rope(llama());
  for (const PageLayout layout : {PageLayout::NHD, PageLayout::HND}) {
    const std::int64_t page_size = layout == PageLayout::NHD ? 8 : 12;
    PagedKvCacheShape shape = shape_of(CacheDType::F8E4M3, layout, 64, page_size);
    shape.v_scale = 0.035f;  // each entry widened by its own tensor's scale
    PagedKvCache cache(rope, shape);
    std::vector<Stream> streams = {Stream(150, DType::F32, 21, 3), Stream(40, DType::F32, 24, 50)};
    std::vector<std::int64_t> done(2, 0);
    while (done[0] < streams[0].n || done[1] < streams[1].n) {  // turns of 5 tokens: the pages interleave
      Batch b;
      for (int s = 0; s < 2; ++s) {
        for (int t = 0; t < 5 && done[std::size_t(s)] < streams[std::size_t(s)].n; ++t) {
          b.add(streams[std::size_t(s)], s, done[std::size_t(s)]++);
        }
      }
      cache.append(rope, b.seq_of, b.args());
    }
    const PagedCache& c = cache.cache();
    for (int seq = 0; seq < 2; ++seq) {
      const Stream& s = streams[std::size_t(seq)];
      const std::int64_t n = s.n;
      std::vector<float> k(std::size_t(n * kKv * kD)), v(k.size());
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t slot =
            std::int64_t{cache.pages(seq)[std::size_t(i / page_size)]} * page_size + i % page_size;
        for (std::int64_t h = 0; h < kKv; ++h) {
          for (int l = 0; l < kD; ++l) {
            const std::size_t at = std::size_t((i * kKv + h) * kD + l);
            k[at] = e4m3_to_float(static_cast<const std::uint8_t*>(c.key(slot, h))[l]) * c.k_scale;
            v[at] = e4m3_to_float(static_cast<const std::uint8_t*>(c.value(slot, h))[l]) * c.v_scale;
          }
        }
      }
      const std::vector<std::int64_t> kp(cache.positions(seq).begin(), cache.positions(seq).end());
      for (const std::int64_t count : {std::int64_t{1}, std::int64_t{10}}) {
        const std::int64_t first = n - count;
        std::vector<float> q(s.q32.begin() + first * kQ * kD, s.q32.begin() + n * kQ * kD);
        std::vector<float> rotated = q, got(q.size()), want(q.size());
        const std::vector<std::int64_t> qp(s.pos.begin() + first, s.pos.end());
        rope.apply({.q = bshd(rotated.data(), DType::F32, 1, count, kQ, kD), .positions = positions(qp)});
        const std::vector<std::int32_t> seq_of(std::size_t(count), seq);
        attention(rope, bshd(q.data(), DType::F32, 1, count, kQ, kD), positions(qp), seq_of, cache,
                  bshd(got.data(), DType::F32, 1, count, kQ, kD));
        attention({.q = bshd(rotated.data(), DType::F32, 1, count, kQ, kD),
                   .k = bshd(k.data(), DType::F32, 1, n, kKv, kD),
                   .v = bshd(v.data(), DType::F32, 1, n, kKv, kD),
                   .out = bshd(want.data(), DType::F32, 1, count, kQ, kD),
                   .q_positions = positions(qp),
                   .k_positions = positions(kp),
                   .head_dim = kD});
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << to_string(layout) << " sequence " << seq << ", " << count << " queries";
      }
    }
  }
}

TEST(PagedKvCacheErrors, EachClassIsRefusedAndNothingChanges) {
  const Rope rope(llama());
  EXPECT_ERROR(PagedKvCache(rope, {.num_pages = 4, .page_size = 8, .kv_heads = kKv, .max_sequences = 0}),
               "max_sequences = 0");
  EXPECT_ERROR(PagedKvCache(rope, {.num_pages = 0, .page_size = 8, .kv_heads = kKv, .max_sequences = 1}),
               "num_pages = 0");
  EXPECT_ERROR(
      PagedKvCache(rope, {.num_pages = 4, .page_size = 8, .kv_heads = kKv, .head_dim = 32, .max_sequences = 1}),
      "head_dim = 32");
  PagedKvCache cache(rope, shape_of(CacheDType::F32, PageLayout::NHD, 2, 4));  // 8 entries in all
  Stream s(10, DType::F32, 1, 0);
  Batch b;
  for (std::int64_t t = 0; t < 9; ++t) b.add(s, 0, t);
  EXPECT_ERROR(cache.append(rope, b.seq_of, b.args()), "need 3 more pages", "2 are free");
  EXPECT_EQ(cache.free_pages(), 2);
  EXPECT_EQ(cache.length(0), 0);
  Batch small;
  small.add(s, 0, 0);
  small.add(s, 7, 1);
  EXPECT_ERROR(cache.append(rope, small.seq_of, small.args()), "sequence 7", "[0, 4)");
  Batch bad_pos;
  bad_pos.add(s, 1, 0);
  bad_pos.pos[0] = -3;
  EXPECT_ERROR(cache.append(rope, bad_pos.seq_of, bad_pos.args()), "-3");
  EXPECT_EQ(cache.free_pages(), 2);
  EXPECT_EQ(cache.length(1), 0);
  Batch one;
  one.add(s, 1, 0);
  AppendArgs with_slots = one.args();
  const std::vector<std::int64_t> slots = {0};
  with_slots.slots = slot_mapping(slots);
  EXPECT_ERROR(cache.append(rope, one.seq_of, with_slots), "args.slots");
  cache.append(rope, one.seq_of, one.args());
  EXPECT_ERROR(cache.shift(1, 0, -1, -1), "position 0 moved by -1", "[0, 2^47)");
  EXPECT_EQ(cache.positions(1)[0], 0);
  EXPECT_ERROR(cache.seq_cp(1, 1, 0, -1), "src = dst = 1");
  EXPECT_ERROR(cache.erase(4, 0, -1), "sequence 4");
  const Rope other({.head_dim = kD, .rotary_dim = kD, .base = 10000.0, .pairing = Pairing::Interleaved});
  EXPECT_ERROR(cache.append(other, one.seq_of, one.args()), "layout");
  std::vector<float> q(2 * kQ * kD), out(q.size());
  const std::vector<std::int64_t> qp = {1, 2};
  const std::vector<std::int32_t> one_seq = {1};
  EXPECT_ERROR(attention(rope, bshd(q.data(), DType::F32, 1, 2, kQ, kD), positions(qp), one_seq, cache,
                         bshd(out.data(), DType::F32, 1, 2, kQ, kD)),
               "seq_of has 1 values");
  // out inside the cache's memory (cache() hands out its pointers): refused, the entries unchanged.
  const std::vector<std::int64_t> qp1 = {1};
  const std::vector<std::byte> keys_before(static_cast<const std::byte*>(cache.cache().k),
                                           static_cast<const std::byte*>(cache.cache().k) + 8 * kKv * kD * 4);
  EXPECT_ERROR(attention(rope, bshd(q.data(), DType::F32, 1, 1, kQ, kD), positions(qp1), one_seq, cache,
                         bshd(cache.cache().k, DType::F32, 1, 1, kQ, kD)),
               "out", "the cache's keys");
  EXPECT_ERROR(attention(rope, bshd(q.data(), DType::F32, 1, 1, kQ, kD), positions(qp1), one_seq, cache,
                         bshd(static_cast<float*>(cache.cache().v) + 5, DType::F32, 1, 1, kQ, kD)),
               "out", "the cache's values");
  EXPECT_EQ(std::memcmp(keys_before.data(), cache.cache().k, keys_before.size()), 0);
}

}  // namespace

// llama.cpp's names (seq_rm, seq_add), kept for one version as deprecated aliases of erase and shift: the same
// entries, positions and key bits (docs/conventions.md).
TEST(PagedKvCacheAliases, LlamaCppNamesDoWhatEraseAndShiftDo) {
  const Rope rope(llama());
  Stream s(20, DType::BF16, 3, 0);
  Batch b;
  for (std::int64_t t = 0; t < 20; ++t) b.add(s, 0, t);
  PagedKvCache renamed(rope, shape_of(CacheDType::BF16, PageLayout::NHD, 8, 4));
  PagedKvCache aliased(rope, shape_of(CacheDType::BF16, PageLayout::NHD, 8, 4));
  renamed.append(rope, b.seq_of, b.args());
  aliased.append(rope, b.seq_of, b.args());
  renamed.erase(0, 4, 9);
  renamed.shift(0, 9, -1, -5);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  aliased.seq_rm(0, 4, 9);
  aliased.seq_add(0, 9, -1, -5);
#pragma GCC diagnostic pop
  ASSERT_EQ(aliased.length(0), 15);
  EXPECT_TRUE(std::ranges::equal(aliased.positions(0), renamed.positions(0)));
  const std::size_t bytes = std::size_t(8 * 4 * kKv * kD) * 2;
  EXPECT_EQ(std::memcmp(aliased.cache().k, renamed.cache().k, bytes), 0);
  EXPECT_EQ(std::memcmp(aliased.cache().v, renamed.cache().v, bytes), 0);
}

// The C API's rk_paged_kv_cache_attention took the Rope first until 2026-11-29; C++ callers keep that order for one
// version through deprecated overloads in ropekit.h: the same call, the same bits.
TEST(PagedKvCacheAliases, TheCApisRopeFirstAttentionIsTheSameCall) {
  constexpr int kHeads = 2, kHeadDim = 64, kTokens = 5;
  rk_spec* spec = nullptr;
  rk_rope* rope = nullptr;
  rk_paged_kv_cache* cache = nullptr;
  ASSERT_EQ(rk_spec_create(kHeadDim, kHeadDim, 10000.0, RK_HALF, &spec), RK_OK) << rk_last_error();
  ASSERT_EQ(rk_rope_create(spec, RK_ANGLES_ACCURATE, 0, &rope), RK_OK) << rk_last_error();
  rk_paged_kv_cache_shape shape{};
  shape.num_pages = 2;
  shape.page_size = 4;
  shape.kv_heads = kHeads;
  shape.dtype = RK_CACHE_F32;
  shape.layout = RK_NHD;
  shape.max_sequences = 1;
  ASSERT_EQ(rk_paged_kv_cache_create(rope, &shape, &cache), RK_OK) << rk_last_error();
  std::vector<float> k(kTokens * kHeads * kHeadDim), v(k.size()), q(kHeads * kHeadDim), by_cache(q.size()),
      by_rope(q.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = std::sin(0.3f * static_cast<float>(i));
    v[i] = std::cos(0.7f * static_cast<float>(i));
  }
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::sin(1.1f * static_cast<float>(i));
  std::vector<std::int64_t> pos(kTokens);
  std::iota(pos.begin(), pos.end(), 0);
  const std::vector<std::int32_t> seq_of(kTokens, 0);
  rk_append_args a{};
  a.k = rk_bshd(k.data(), RK_F32, 1, kTokens, kHeads, kHeadDim);
  a.v = rk_bshd(v.data(), RK_F32, 1, kTokens, kHeads, kHeadDim);
  a.positions = rk_positions_i64(pos.data(), kTokens);
  ASSERT_EQ(rk_paged_kv_cache_append(cache, rope, seq_of.data(), &a), RK_OK) << rk_last_error();
  const std::int64_t q_pos = kTokens;
  const std::int32_t q_seq = 0;
  ASSERT_EQ(rk_paged_kv_cache_attention(cache, rope, rk_bshd(q.data(), RK_F32, 1, 1, kHeads, kHeadDim),
                                        rk_positions_i64(&q_pos, 1), &q_seq,
                                        rk_bshd(by_cache.data(), RK_F32, 1, 1, kHeads, kHeadDim), 1, 0, 0.0, 1),
            RK_OK)
      << rk_last_error();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ASSERT_EQ(rk_paged_kv_cache_attention(rope, cache, rk_bshd(q.data(), RK_F32, 1, 1, kHeads, kHeadDim),
                                        rk_positions_i64(&q_pos, 1), &q_seq,
                                        rk_bshd(by_rope.data(), RK_F32, 1, 1, kHeads, kHeadDim), 1, 0, 0.0, 1),
            RK_OK)
      << rk_last_error();
#pragma GCC diagnostic pop
  EXPECT_NE(by_cache, std::vector<float>(q.size()));
  EXPECT_EQ(by_rope, by_cache);
  rk_paged_kv_cache_destroy(cache);
  rk_rope_destroy(rope);
  rk_spec_destroy(spec);
}
