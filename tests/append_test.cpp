// Fused rotate-and-append (ropekit/append.hpp), on every SIMD target: the fp8 e4m3 codec against a
// double oracle; the fused call against the unfused sequence written here (Rope::apply, then each
// element converted with dtype.hpp's scalar codecs and copied to the address the layout says) bit for
// bit, over pairings, partial rotary, storage and cache types, page layouts, slot mappings and page
// tables, MLA entries, live-k write-back and thread splits; the fused QK-norm against a double oracle
// and the unfused norm-then-rotate; and every class of bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "attention_oracle.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"
#include "rope/backend.hpp"
#include "rope/reference.hpp"
#include "ropekit/ropekit.hpp"
#include "targets.hpp"

namespace {

using namespace ropekit;

// ---- the fp8 codec ------------------------------------------------------------------------------

// Every finite e4m3 value, from its definition (sign, 4-bit exponent with bias 7, 3-bit mantissa,
// exponent 0 subnormal), in double.
double e4m3_value(int bits) {
  const int e = (bits >> 3) & 15, m = bits & 7;
  const double magnitude = e == 0 ? m * std::pow(2.0, -9) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return (bits & 0x80) ? -magnitude : magnitude;
}

TEST(E4m3, DecodesEveryPattern) {
  for (int b = 0; b < 256; ++b) {
    const float f = e4m3_to_float(std::uint8_t(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << b;
      continue;
    }
    EXPECT_EQ(double(f), e4m3_value(b)) << b;
    EXPECT_EQ(std::signbit(f), (b & 0x80) != 0) << b;
  }
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

// The oracle: the nearest finite e4m3 value, ties to the even mantissa, saturating at ±448.
std::uint8_t nearest_e4m3(double x) {
  if (std::isnan(x)) return 0x7f;
  const bool negative = std::signbit(x);
  const double a = std::fabs(x);
  int best = 0;
  for (int b = 1; b <= 0x7e; ++b) {
    const double d = std::fabs(e4m3_value(b) - a), db = std::fabs(e4m3_value(best) - a);
    if (d < db || (d == db && (b & 1) == 0)) best = b;
  }
  return std::uint8_t((negative ? 0x80 : 0) | best);
}

TEST(E4m3, RoundsToNearestEvenAndSaturates) {
  std::vector<float> inputs = {0.0f,
                               -0.0f,
                               448.0f,
                               -448.0f,
                               449.0f,
                               464.0f,
                               480.0f,
                               1e30f,
                               -1e30f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min(),
                               std::ldexp(1.0f, -10),
                               std::ldexp(3.0f, -11)};
  // Every value, the midpoints between neighbours (ties) and one float32 step either side of them.
  for (int b = 0; b < 0x7e; ++b) {
    const float lo = float(e4m3_value(b)), hi = float(e4m3_value(b + 1));
    const float mid = float((double(lo) + double(hi)) / 2);
    for (const float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), hi}) {
      inputs.push_back(x);
      inputs.push_back(-x);
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-12.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) inputs.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(exponent(rng)));
  for (const float x : inputs) {
    const std::uint8_t got = float_to_e4m3(x), want = nearest_e4m3(x);
    if (x == 0.0f) {
      EXPECT_EQ(got, std::signbit(x) ? 0x80 : 0x00);
      continue;
    }
    EXPECT_EQ(int(got), int(want)) << x;
  }
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0x7f);
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) != 0x7f) {
      EXPECT_EQ(int(float_to_e4m3(e4m3_to_float(std::uint8_t(b)))), b);
    }
  }
}

// ---- storage helpers ----------------------------------------------------------------------------

// Elements of one storage type in bytes, read and written through dtype.hpp's scalar conversions.
struct Buffer {
  int type;  // a DType or CacheDType value (1 f32, 2 bf16, 3 f16, 4 f8e4m3)
  std::vector<std::byte> bytes;
  Buffer(int t, std::size_t n, std::byte fill = std::byte{0x5a}) : type(t), bytes(n * size(t), fill) {}
  static std::size_t size(int t) { return t == 1 ? 4 : t == 4 ? 1 : 2; }
  void* data() { return bytes.data(); }
  void set(std::size_t i, float x, float scale = 1.0f) {
    std::byte* p = bytes.data() + i * size(type);
    if (type == 1) std::memcpy(p, &x, 4);
    if (type == 2 || type == 3) {
      const std::uint16_t h = type == 2 ? float_to_bf16(x) : float_to_f16(x);
      std::memcpy(p, &h, 2);
    }
    if (type == 4) *reinterpret_cast<std::uint8_t*>(p) = float_to_e4m3(x / scale);
  }
  float get(std::size_t i) const {
    const std::byte* p = bytes.data() + i * size(type);
    if (type == 1) {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    if (type == 4) return e4m3_to_float(*reinterpret_cast<const std::uint8_t*>(p));
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    return type == 2 ? bf16_to_float(h) : f16_to_float(h);
  }
};

Buffer random_buffer(DType type, std::size_t n, std::uint32_t seed) {
  Buffer b(int(type), n);
  const std::vector<float> x = attn_oracle::normal(n, seed);
  for (std::size_t i = 0; i < n; ++i) b.set(i, x[i]);
  return b;
}

// The element offset of lane `lane` of head h's entry in `slot`, written out from the layouts.
std::int64_t cache_index(PageLayout layout, std::int64_t page_size, std::int64_t heads, int lanes, std::int64_t slot,
                         std::int64_t h, int lane) {
  const std::int64_t page = slot / page_size, entry = slot % page_size;
  return (layout == PageLayout::NHD ? ((page * page_size + entry) * heads + h) * lanes
                                    : ((page * heads + h) * page_size + entry) * lanes) +
         lane;
}

// ---- fused == unfused ---------------------------------------------------------------------------

struct Case {
  Pairing pairing;
  int head_dim, rotary_dim;
  DType storage;
  CacheDType cache;
  PageLayout layout;
  bool page_table, write_back, q_out;
};

class AppendTest : public targets::PerTarget {};
ROPEKIT_PER_TARGET(AppendTest);

// One fused append against the unfused sequence; every buffer compared bit for bit.
void check_case(const Case& c, int threads_split) {
  SCOPED_TRACE(::testing::Message() << to_string(c.pairing) << " d=" << c.head_dim << " r=" << c.rotary_dim << " "
                                    << to_string(c.storage) << "->" << to_string(c.cache) << " " << to_string(c.layout)
                                    << (c.page_table ? " pages" : " slots") << (c.write_back ? " k_out" : "")
                                    << (c.q_out ? " q_out" : ""));
  const Spec spec{.head_dim = c.head_dim,
                  .rotary_dim = c.rotary_dim,
                  .base = 10000.0,
                  .pairing = c.pairing,
                  .scaling = scaling::Yarn{.factor = 4.0, .original_max_position_embeddings = 64}};
  const Rope rope(spec);
  const std::int64_t tokens = 7, q_heads = 4, kv = 2, page_size = 4, num_pages = 5;
  const int d = c.head_dim;
  // Scales that are not powers of two: x / scale and x · (1 / scale) round differently.
  const float k_scale = c.cache == CacheDType::F8E4M3 ? 0.3f : 1.0f,
              v_scale = c.cache == CacheDType::F8E4M3 ? 0.07f : 1.0f;
  Buffer q = random_buffer(c.storage, tokens * q_heads * d, 1), k = random_buffer(c.storage, tokens * kv * d, 2),
         v = random_buffer(c.storage, tokens * kv * d, 3);
  const std::vector<std::int64_t> pos = {3, 0, 1000, 17, 17, 123456, 5};
  // Two sequences: sequence 0 on pages {3, 0}, sequence 1 on pages {4, 1, 2}; tokens 0-2 extend
  // sequence 0, tokens 3-6 sequence 1.
  const std::vector<std::int32_t> indices = {3, 0, 4, 1, 2}, indptr = {0, 2, 5}, last = {3, 2};
  const std::vector<std::int32_t> batch_indices = {0, 0, 0, 1, 1, 1, 1}, seq_positions = {4, 5, 6, 7, 8, 9, 3};
  std::vector<std::int64_t> slot_map(tokens);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const int b = batch_indices[t], e = seq_positions[t];
    slot_map[t] = indices[indptr[b] + e / page_size] * page_size + e % page_size;
  }
  if (!c.page_table) slot_map[2] = -1;  // a padding token

  // Unfused: rotate copies, then convert and copy each element to its slot.
  Buffer q_want = q, k_want = k;
  rope.apply({.q = bshd(q_want.data(), c.storage, 1, tokens, q_heads, d),
              .k = bshd(k_want.data(), c.storage, 1, tokens, kv, d),
              .positions = positions(pos)});
  const std::size_t cache_elems = std::size_t(num_pages * page_size * kv * d);
  Buffer kc_want(int(c.cache), cache_elems), vc_want(int(c.cache), cache_elems);
  for (std::int64_t t = 0; t < tokens; ++t) {
    if (slot_map[t] < 0) continue;
    for (std::int64_t h = 0; h < kv; ++h) {
      for (int l = 0; l < d; ++l) {
        kc_want.set(cache_index(c.layout, page_size, kv, d, slot_map[t], h, l), k_want.get((t * kv + h) * d + l),
                    k_scale);
        vc_want.set(cache_index(c.layout, page_size, kv, d, slot_map[t], h, l), v.get((t * kv + h) * d + l), v_scale);
      }
    }
  }

  // Fused: a prepared call (its tokens split at threads_split when > 0), then the one-shot append().
  for (const bool one_shot : {false, true}) {
    SCOPED_TRACE(one_shot ? "append()" : "prepare_append()");
    Buffer q_got = q, k_got = k, q_out(int(c.storage), q.bytes.size() / Buffer::size(int(c.storage))),
           k_out(int(c.storage), k.bytes.size() / Buffer::size(int(c.storage)));
    Buffer kc(int(c.cache), cache_elems), vc(int(c.cache), cache_elems);
    const PagedCache cache{.k = kc.data(),
                           .v = vc.data(),
                           .dtype = c.cache,
                           .layout = c.layout,
                           .num_pages = num_pages,
                           .page_size = page_size,
                           .kv_heads = kv,
                           .head_dim = d,
                           .v_head_dim = d,
                           .k_scale = k_scale,
                           .v_scale = v_scale};
    AppendArgs args{.q = bshd(q_got.data(), c.storage, 1, tokens, q_heads, d),
                    .k = bshd(k_got.data(), c.storage, 1, tokens, kv, d),
                    .v = bshd(v.data(), c.storage, 1, tokens, kv, d),
                    .positions = positions(pos)};
    if (c.q_out) args.q_out = bshd(q_out.data(), c.storage, 1, tokens, q_heads, d);
    if (c.write_back) args.k_out = bshd(k_out.data(), c.storage, 1, tokens, kv, d);
    if (c.page_table) {
      args.slots = PageTable{.indices = indices,
                             .indptr = indptr,
                             .last_page_len = last,
                             .batch_indices = batch_indices,
                             .seq_positions = seq_positions};
    } else {
      args.slots = slot_mapping(slot_map);
    }
    if (one_shot) {
      append(rope, args, cache);
    } else {
      const AppendCall call = prepare_append(rope, args, cache);
      ASSERT_EQ(call.rows(), tokens);
      if (threads_split > 0) {
        call.run(0, threads_split);
        call.run(threads_split, tokens);
      } else {
        call.run();
      }
    }
    EXPECT_EQ(kc.bytes, kc_want.bytes);
    EXPECT_EQ(vc.bytes, vc_want.bytes);
    EXPECT_EQ((c.q_out ? q_out : q_got).bytes, q_want.bytes);
    if (c.q_out) {
      EXPECT_EQ(q_got.bytes, q.bytes);  // q only read
    }
    EXPECT_EQ(k_got.bytes, k.bytes);  // k never written without k_out
    if (c.write_back) {
      EXPECT_EQ(k_out.bytes, k_want.bytes);
    }
  }
}

// The per-target cache converter (SIMD e4m3 encoder, bf16/f16 narrowing) gives the scalar codec's
// bits for every input class: every e4m3 value, tie and neighbour (and their products with the
// scales), random magnitudes over the whole range, ±0, subnormal floats, infinities, NaNs; every
// bf16 and f16 pattern; and every float that narrows differently to bf16 — each of the 65,536 high
// halves with the low halves that round down, tie and round up (in order, so that most vectors take
// AVX3_BF16's native instruction, and shuffled, so that subnormals sit alone among normals and send
// their vector to the software path). Only a NaN's payload may differ in a 16-bit output (call.hpp);
// fp8 is exact.
TEST_P(AppendTest, CacheConverterEqualsTheScalarCodecs) {
  if (targets::kernels_are_the_reference(GetParam())) GTEST_SKIP() << GetParam() << ": the converter is the reference";
  std::vector<float> f32 = {0.0f,
                            -0.0f,
                            448.0f,
                            -448.0f,
                            449.0f,
                            464.0f,
                            1e30f,
                            -1e30f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x7f800001u),
                            std::bit_cast<float>(0xffc12345u),
                            std::numeric_limits<float>::denorm_min(),
                            std::ldexp(1.0f, -126),
                            std::ldexp(1.0f, -10)};
  for (int b = 0; b < 0x7e; ++b) {
    const float lo = float(e4m3_value(b)), hi = float(e4m3_value(b + 1));
    const float mid = float((double(lo) + double(hi)) / 2);
    for (const float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), hi}) {
      for (const float scale : {1.0f, 0.05f, 3.7f}) {
        f32.push_back(x * scale);
        f32.push_back(-x * scale);
      }
    }
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> exponent(-140.0f, 120.0f);
  for (int i = 0; i < 20000; ++i) f32.push_back((i % 2 ? -1.0f : 1.0f) * std::exp2(exponent(rng)));
  std::vector<float> bf16_classes;
  for (std::uint32_t high = 0; high < 0x10000; ++high) {
    for (const std::uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      bf16_classes.push_back(std::bit_cast<float>(high << 16 | low));
    }
  }
  f32.insert(f32.end(), bf16_classes.begin(), bf16_classes.end());
  std::shuffle(bf16_classes.begin(), bf16_classes.end(), rng);
  f32.insert(f32.end(), bf16_classes.begin(), bf16_classes.end());
  std::vector<std::uint16_t> every(65536);
  for (std::size_t i = 0; i < every.size(); ++i) every[i] = static_cast<std::uint16_t>(i);

  const cpu::CacheConvertKernel convert = cpu::select_cache_convert_kernel();
  int compared = 0;
  for (const DType from : {DType::F32, DType::BF16, DType::F16}) {
    const void* src = from == DType::F32 ? static_cast<const void*>(f32.data()) : every.data();
    const std::int64_t total = from == DType::F32 ? std::int64_t(f32.size()) : 65536;
    for (const CacheDType to : {CacheDType::F32, CacheDType::BF16, CacheDType::F16, CacheDType::F8E4M3}) {
      // Powers of two (the SIMD encoder multiplies by the reciprocal there; 2^-100 sends most values to
      // saturation, 2^100 most to zero and subnormal codes, 2^127's reciprocal is a subnormal float,
      // 2^-130's is infinite, so it divides) and scales that are not.
      for (const float scale : {1.0f, 0.25f, 8.0f, 0x1p-100f, 0x1p100f, 0x1p127f, 0x1p-130f, 0.05f, 3.7f}) {
        if (to != CacheDType::F8E4M3 && scale != 1.0f) continue;
        // Odd offsets and lengths: vector bodies and scalar tails both run.
        for (const std::int64_t offset : {std::int64_t{0}, std::int64_t{3}}) {
          const std::int64_t n = total - offset - 5;
          const std::int64_t es = element_size(to);
          std::vector<std::byte> got(std::size_t(n * es)), want(got.size());
          const void* in = static_cast<const std::byte*>(src) + offset * element_size(from);
          convert(in, from, n, got.data(), to, scale);
          detail::convert_to_cache_reference(in, from, n, want.data(), to, scale);
          for (std::int64_t i = 0; i < n; ++i) {
            ++compared;
            if (std::memcmp(got.data() + i * es, want.data() + i * es, std::size_t(es)) == 0) continue;
            const auto as_float = [&](const std::byte* p) {
              float f = 0.0f;
              if (to == CacheDType::F32) std::memcpy(&f, p, 4);
              std::uint16_t h = 0;
              if (es == 2) std::memcpy(&h, p, 2);
              if (to == CacheDType::BF16) f = bf16_to_float(h);
              if (to == CacheDType::F16) f = f16_to_float(h);
              return f;
            };
            const bool both_nan = to != CacheDType::F8E4M3 && std::isnan(as_float(got.data() + i * es)) &&
                                  std::isnan(as_float(want.data() + i * es));
            ASSERT_TRUE(both_nan) << to_string(from) << " -> " << to_string(to) << " scale " << scale << " element "
                                  << offset + i;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 1000000);
}

// The e4m3 widening attention and the K-shift read an fp8 cache with: e4m3_to_float(b) · scale, bit for
// bit, for every byte, on rows with and without NaN codes (the vector path and the reference), over
// scales whose product with 2^8 is exact, subnormal or beyond 2^100 (the reference), at odd offsets.
TEST_P(AppendTest, E4m3WideningEqualsTheScalarDecoder) {
  if (targets::kernels_are_the_reference(GetParam())) GTEST_SKIP() << GetParam() << ": the decoder is the reference";
  std::vector<std::uint8_t> finite, every(256);
  for (int b = 0; b < 256; ++b) {
    every[std::size_t(b)] = std::uint8_t(b);
    if ((b & 0x7f) != 0x7f) finite.push_back(std::uint8_t(b));
  }
  std::mt19937 rng(5);
  std::shuffle(finite.begin(), finite.end(), rng);
  finite.insert(finite.end(), finite.begin(), finite.end());  // 508 bytes: vector bodies and a tail
  const cpu::E4m3WidenKernel widen = cpu::select_e4m3_widen_kernel();
  int compared = 0;
  for (const auto* bytes : {&finite, &every}) {
    for (const float scale : {1.0f, 0.02f, 0.3f, 7.0f, 0x1p-140f, 0x1p-126f, 0x1p99f, 0x1p100f, 3e38f}) {
      for (const std::size_t offset : {std::size_t{0}, std::size_t{3}}) {
        const std::int64_t n = std::int64_t(bytes->size() - offset);
        std::vector<float> got(static_cast<std::size_t>(n)), want(got.size());
        widen(bytes->data() + offset, n, scale, got.data());
        detail::e4m3_widen_reference(bytes->data() + offset, n, scale, want.data());
        for (std::int64_t i = 0; i < n; ++i, ++compared) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(got[std::size_t(i)]),
                    std::bit_cast<std::uint32_t>(want[std::size_t(i)]))
              << "byte 0x" << std::hex << int((*bytes)[offset + std::size_t(i)]) << std::dec << " scale " << scale;
        }
      }
    }
  }
  EXPECT_GT(compared, 10000);
  // The reference is the decoder of ropekit/dtype.hpp: a few values by hand.
  const std::vector<std::uint8_t> some = {0x00, 0x80, 0x01, 0x08, 0x7e, 0xfe, 0x38, 0x7f};
  std::vector<float> out(some.size());
  widen(some.data(), std::int64_t(some.size()), 1.0f, out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_TRUE(std::signbit(out[1]));
  EXPECT_EQ(out[2], 0x1p-9f);
  EXPECT_EQ(out[3], 0x1p-6f);
  EXPECT_EQ(out[4], 448.0f);
  EXPECT_EQ(out[5], -448.0f);
  EXPECT_EQ(out[6], 1.0f);
  EXPECT_TRUE(std::isnan(out[7]));
}

TEST_P(AppendTest, FusedEqualsRotateThenConvertThenCopy) {
  for (const Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
    for (const auto& [d, r] : {std::pair{64, 64}, std::pair{40, 24}, std::pair{128, 32}}) {
      for (const DType storage : {DType::F32, DType::BF16, DType::F16}) {
        for (const CacheDType cache : {CacheDType::F32, CacheDType::BF16, CacheDType::F16, CacheDType::F8E4M3}) {
          for (const PageLayout layout : {PageLayout::NHD, PageLayout::HND}) {
            const bool odd = (d + int(storage) + int(cache) + int(layout)) % 2 == 1;
            check_case({pairing, d, r, storage, cache, layout, odd, !odd, odd}, 0);
          }
        }
      }
    }
  }
}

TEST_P(AppendTest, AnySplitOfTheTokensGivesTheSameBits) {
  for (const int split : {1, 3, 6}) {
    check_case({Pairing::Half, 64, 64, DType::BF16, CacheDType::F8E4M3, PageLayout::HND, true, true, false}, split);
    check_case({Pairing::Interleaved, 40, 24, DType::F32, CacheDType::BF16, PageLayout::NHD, false, false, true},
               split);
  }
}

TEST_P(AppendTest, RotatesTheLiveKeysInPlace) {
  const Spec spec{.head_dim = 32, .rotary_dim = 32, .base = 10000.0, .pairing = Pairing::Half};
  const Rope rope(spec);
  Buffer k = random_buffer(DType::F32, 3 * 2 * 32, 4), v = random_buffer(DType::F32, 3 * 2 * 32, 5);
  Buffer want = k;
  const std::vector<std::int64_t> pos = {9, 10, 11}, slots = {0, 1, 2};
  rope.apply({.k = bshd(want.data(), DType::F32, 1, 3, 2, 32), .positions = positions(pos)});
  Buffer kc(1, 4 * 2 * 32), vc(1, 4 * 2 * 32);
  const Heads kv = bshd(k.data(), DType::F32, 1, 3, 2, 32);
  append(rope,
         {.k = kv,
          .k_out = kv,
          .v = bshd(v.data(), DType::F32, 1, 3, 2, 32),
          .positions = positions(pos),
          .slots = slot_mapping(slots)},
         {.k = kc.data(),
          .v = vc.data(),
          .num_pages = 1,
          .page_size = 4,
          .kv_heads = 2,
          .head_dim = 32,
          .v_head_dim = 32});
  EXPECT_EQ(k.bytes, want.bytes);
  EXPECT_EQ(std::memcmp(kc.data(), want.data(), want.bytes.size()), 0);  // NHD, slots 0-2 in order
}

// DeepSeek's MLA cache: one entry per token = [latent (kv_lora_rank) | k_pe (rope dim)], no values.
TEST_P(AppendTest, MlaEntryHoldsTheLatentAndTheRotatedRopePart) {
  const Spec spec{.head_dim = 64,
                  .rotary_dim = 64,
                  .base = 10000.0,
                  .pairing = Pairing::Interleaved,
                  .scaling = scaling::Yarn{
                      .factor = 40.0, .original_max_position_embeddings = 4096, .mscale = 1.0, .mscale_all_dim = 1.0}};
  const Rope rope(spec);
  const std::int64_t tokens = 5, rank = 512, entry = rank + 64;
  Buffer kpe = random_buffer(DType::BF16, tokens * 64, 8), latent = random_buffer(DType::BF16, tokens * rank, 9);
  Buffer want = kpe;
  const std::vector<std::int32_t> pos = {0, 1, 4095, 4096, 160000}, slots = {7, 2, 0, 5, 6};
  rope.apply({.k = bshd(want.data(), DType::BF16, 1, tokens, 1, 64), .positions = positions(pos)});
  Buffer kc(2, 2 * 4 * entry);
  append(rope,
         {.k = bshd(kpe.data(), DType::BF16, 1, tokens, 1, 64),
          .k_nope = bshd(latent.data(), DType::BF16, 1, tokens, 1, rank),
          .positions = positions(pos),
          .slots = slot_mapping(slots),
          .k_offset = int(rank),
          .k_nope_dim = int(rank)},
         {.k = kc.data(),
          .dtype = CacheDType::BF16,
          .num_pages = 2,
          .page_size = 4,
          .kv_heads = 1,
          .head_dim = int(entry)});
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t l = 0; l < rank; ++l) ASSERT_EQ(kc.get(slots[t] * entry + l), latent.get(t * rank + l));
    for (std::int64_t l = 0; l < 64; ++l) ASSERT_EQ(kc.get(slots[t] * entry + rank + l), want.get(t * 64 + l));
  }
  EXPECT_EQ(kc.get(1 * entry), Buffer(2, 1).get(0));  // slot 1 untouched
}

// M-RoPE needs three position streams per token; the cache keeps none, so it appends like any rope.
TEST_P(AppendTest, MropeAppendsLikeApply) {
  Spec spec{.head_dim = 32, .rotary_dim = 32, .base = 10000.0, .pairing = Pairing::Half};
  spec.mrope = MRope{.sections = {4, 6, 6}};
  const Rope rope(spec);
  Buffer k = random_buffer(DType::F32, 2 * 32, 10), v = random_buffer(DType::F32, 2 * 32, 11), want = k;
  const std::vector<std::int64_t> p = {5, 6, 1, 2, 3, 9};
  rope.apply({.k = bshd(want.data(), DType::F32, 1, 2, 1, 32), .positions = mrope_positions(p)});
  Buffer kc(1, 2 * 32), vc(1, 2 * 32);
  const std::vector<std::int64_t> slots = {1, 0};
  append(rope,
         {.k = bshd(k.data(), DType::F32, 1, 2, 1, 32),
          .v = bshd(v.data(), DType::F32, 1, 2, 1, 32),
          .positions = mrope_positions(p),
          .slots = slot_mapping(slots)},
         {.k = kc.data(),
          .v = vc.data(),
          .num_pages = 2,
          .page_size = 1,
          .kv_heads = 1,
          .head_dim = 32,
          .v_head_dim = 32});
  EXPECT_EQ(std::memcmp(kc.bytes.data(), want.bytes.data() + 32 * 4, 32 * 4), 0);
  EXPECT_EQ(std::memcmp(kc.bytes.data() + 32 * 4, want.bytes.data(), 32 * 4), 0);
}

// ---- QK-norm ------------------------------------------------------------------------------------

// The norm of the pair lane l belongs to (Half pairing, rotary_dim 48 of 64; pass-through lanes: |x|).
double pair_norm(const std::vector<double>& x, int l) {
  constexpr int kRotary = 48;
  if (l >= kRotary) return std::fabs(x[l]);
  const int partner = l < kRotary / 2 ? l + kRotary / 2 : l - kRotary / 2;
  return std::hypot(x[l], x[partner]);
}

// The fused norm against (1) the exact norm-then-rotate in double: within half an ulp of storage plus
// 4 ε·|y| per pair; (2) the unfused sequence — norm rounded to storage, then Rope::apply — within
// one ulp of storage (it rounds twice, the fused once).
TEST_P(AppendTest, QkNormIsNormThenRotateToOneRounding) {
  for (const DType storage : {DType::F32, DType::BF16}) {
    for (const bool across : {false, true}) {
      SCOPED_TRACE(::testing::Message() << to_string(storage) << (across ? " across heads" : " per head"));
      const int d = 64;
      const std::int64_t tokens = 5, heads = 3;
      const Spec spec{.head_dim = d, .rotary_dim = 48, .base = 1e6, .pairing = Pairing::Half};
      const Rope rope(spec);
      const std::vector<std::int64_t> pos = {0, 7, 100, 4096, 99999};
      Buffer q = random_buffer(storage, tokens * heads * d, 12), k = random_buffer(storage, tokens * heads * d, 13);
      const std::vector<float> weight = attn_oracle::normal(std::size_t(across ? heads * d : d), 14, 0.3f);
      const float eps = 1e-6f, offset = across ? 0.0f : 1.0f;  // Gemma's 1 + weight on one of them
      Buffer kc(1, tokens * heads * d), q_fused = q;
      const std::vector<std::int64_t> slots = {0, 1, 2, 3, 4};
      append(
          rope,
          {.q = bshd(q_fused.data(), storage, 1, tokens, heads, d),
           .k = bshd(k.data(), storage, 1, tokens, heads, d),
           .positions = positions(pos),
           .slots = slot_mapping(slots),
           .norm =
               {.q_weight = weight, .k_weight = weight, .eps = eps, .weight_offset = offset, .across_heads = across}},
          {.k = kc.data(), .num_pages = 1, .page_size = tokens, .kv_heads = heads, .head_dim = d});
      // Unfused: norm in float32 rounded to storage, then rotate.
      Buffer q_unfused = q;
      const double ulp = storage == DType::F32 ? 0x1p-23 : 0x1p-7;
      for (std::int64_t t = 0; t < tokens; ++t) {
        const std::int64_t span = across ? heads * d : d;
        for (std::int64_t first = 0; first < heads * d; first += span) {
          double ss = 0.0;
          for (std::int64_t l = 0; l < span; ++l) ss += std::pow(double(q.get(t * heads * d + first + l)), 2);
          const double r = 1.0 / std::sqrt(ss / double(span) + eps);
          std::vector<double> y(static_cast<std::size_t>(span), 0.0);
          for (std::int64_t l = 0; l < span; ++l) {
            y[l] = double(q.get(t * heads * d + first + l)) * r * (double(weight[across ? first + l : l]) + offset);
            q_unfused.set(t * heads * d + first + l, float(y[l]));
          }
          // The exact norm-then-rotate of each head in this span, against the fused q: within half an
          // ulp of storage of the lane plus 8 ε·|pair| (norm: 3 roundings; rotation: numerics.md's 3e-7).
          for (std::int64_t h0 = 0; h0 < span; h0 += d) {
            const std::vector<double> x(y.begin() + h0, y.begin() + h0 + d);
            const std::vector<double> want = oracle::rotate(spec, rope.plan(), x, &pos[t]);
            for (int l = 0; l < d; ++l) {
              const double got = q_fused.get(t * heads * d + first + h0 + l);
              const double tol = std::fabs(want[l]) * ulp / 2 + 8 * 0x1p-24 * pair_norm(x, l);
              ASSERT_NEAR(got, want[l], tol) << "token " << t << " lane " << first + h0 + l;
            }
          }
        }
      }
      rope.apply({.q = bshd(q_unfused.data(), storage, 1, tokens, heads, d), .positions = positions(pos)});
      // Against the unfused sequence: its extra rounding of the normed lanes (half an ulp each) turns with
      // the pair, so the two differ by at most (1/2 + 1/2 + 1/2) ulp of storage times the pair's norm.
      for (std::int64_t row = 0; row < tokens * heads; ++row) {
        std::vector<double> y(static_cast<std::size_t>(d), 0.0);
        for (int l = 0; l < d; ++l) y[l] = q_unfused.get(row * d + l);
        for (int l = 0; l < d; ++l) {
          const double a = q_fused.get(row * d + l), b = q_unfused.get(row * d + l);
          ASSERT_LE(std::fabs(a - b), 1.5 * ulp * pair_norm(y, l)) << "row " << row << " lane " << l;
        }
      }
      // k took the same path into the cache (float32 cache: the rotated keys as stored).
      Buffer k_fused(int(storage), std::size_t(tokens * heads * d));
      for (std::size_t i = 0; i < k_fused.bytes.size() / Buffer::size(int(storage)); ++i) k_fused.set(i, kc.get(i));
      Buffer k_alone = k;
      append(rope,
             {.q = bshd(k_alone.data(), storage, 1, tokens, heads, d),
              .k = bshd(k.data(), storage, 1, tokens, heads, d),
              .positions = positions(pos),
              .slots = slot_mapping(slots),
              .norm = {.q_weight = weight, .eps = eps, .weight_offset = offset, .across_heads = across}},
             {.k = Buffer(1, tokens * heads * d).data(),
              .num_pages = 1,
              .page_size = tokens,
              .kv_heads = heads,
              .head_dim = d});
      EXPECT_EQ(k_fused.bytes, k_alone.bytes);
    }
  }
}

// ---- bad input ----------------------------------------------------------------------------------

TEST(AppendErrors, EachClassIsRefusedAndNothingIsWritten) {
  const Spec spec{.head_dim = 16, .rotary_dim = 16, .base = 10000.0, .pairing = Pairing::Half};
  const Rope rope(spec);
  std::vector<float> q(2 * 4 * 16, 1.0f), k(2 * 2 * 16, 1.0f), v(2 * 2 * 16, 1.0f), kc(4 * 2 * 16, 7.0f),
      vc(4 * 2 * 16, 7.0f);
  const std::vector<float> kc_before = kc;
  const std::vector<std::int64_t> pos = {0, 1}, good = {0, 1}, outside = {0, 4}, minus2 = {0, -2}, twice = {3, 3};
  const PagedCache cache{
      .k = kc.data(), .v = vc.data(), .num_pages = 2, .page_size = 2, .kv_heads = 2, .head_dim = 16, .v_head_dim = 16};
  const AppendArgs args{.q = bshd(q.data(), DType::F32, 1, 2, 4, 16),
                        .k = bshd(k.data(), DType::F32, 1, 2, 2, 16),
                        .v = bshd(v.data(), DType::F32, 1, 2, 2, 16),
                        .positions = positions(pos),
                        .slots = slot_mapping(good)};
  EXPECT_NO_THROW(prepare_append(rope, args, cache));

  auto a = args;
  a.slots = slot_mapping(outside);
  EXPECT_ERROR(prepare_append(rope, a, cache), "slots[1] = 4", "[0, 4)");
  a.slots = slot_mapping(minus2);
  EXPECT_ERROR(prepare_append(rope, a, cache), "slots[1] = -2");
  a.slots = slot_mapping(twice);
  EXPECT_ERROR(prepare_append(rope, a, cache), "tokens 0 and 1 both write slot 3");
  a.slots = SlotMapping{good.data(), IndexType::I64, 1};
  EXPECT_ERROR(prepare_append(rope, a, cache), "slots.count = 1");

  const std::vector<std::int32_t> idx = {1, 0}, indptr = {0, 2}, last = {2}, bi = {0, 0}, sp = {2, 3};
  const std::vector<std::int32_t> bad_indptr = {1, 2}, shrinking = {0, 2, 1}, two_last = {2, 1}, bad_idx = {1, 2},
                                  bad_last = {3}, bad_bi = {0, 1}, bad_sp = {2, 4};
  a.slots = PageTable{idx, indptr, last, bi, sp};
  EXPECT_NO_THROW(prepare_append(rope, a, cache));
  a.slots = PageTable{idx, bad_indptr, last, bi, sp};
  EXPECT_ERROR(prepare_append(rope, a, cache), "indptr[0] = 1");
  a.slots = PageTable{idx, shrinking, two_last, bi, sp};
  EXPECT_ERROR(prepare_append(rope, a, cache), "indptr[2] = 1");
  a.slots = PageTable{bad_idx, indptr, last, bi, sp};
  EXPECT_ERROR(prepare_append(rope, a, cache), "indices[1] = 2");
  a.slots = PageTable{idx, indptr, bad_last, bi, sp};
  EXPECT_ERROR(prepare_append(rope, a, cache), "last_page_len[0] = 3");
  a.slots = PageTable{idx, indptr, last, bad_bi, sp};
  EXPECT_ERROR(prepare_append(rope, a, cache), "batch_indices[1] = 1");
  a.slots = PageTable{idx, indptr, last, bi, bad_sp};
  EXPECT_ERROR(prepare_append(rope, a, cache), "seq_positions[1] = 4", "4 entries");
  // The counts (detail::check_page_table_counts, which the device append checks too).
  const std::vector<std::int32_t> none, one = {0};
  a.slots = PageTable{idx, none, last, bi, sp};
  EXPECT_ERROR(prepare_append(rope, a, cache), "page_table.indptr is empty");
  a.slots = PageTable{idx, indptr, two_last, bi, sp};
  EXPECT_ERROR(prepare_append(rope, a, cache), "page_table.last_page_len has 2 values", "batch = 1");
  a.slots = PageTable{idx, indptr, last, bi, one};
  EXPECT_ERROR(prepare_append(rope, a, cache), "batch_indices / seq_positions have 2 / 1 values");
  a.slots = PageTable{idx, indptr, last, one, one};
  EXPECT_ERROR(prepare_append(rope, a, cache), "have 1 values each: must have one per token, 2");

  auto c = cache;
  c.k_scale = 0.5f;
  EXPECT_ERROR(prepare_append(rope, args, c), "cache.k_scale = 0.5", "only an f8e4m3 cache");
  c.dtype = CacheDType::F8E4M3;
  c.v_scale = 0.0f;
  EXPECT_ERROR(prepare_append(rope, args, c), "cache.v_scale = 0");
  c.v_scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_ERROR(prepare_append(rope, args, c), "cache.v_scale = nan");
  c = cache;
  c.num_pages = 0;
  EXPECT_ERROR(prepare_append(rope, args, c), "cache.num_pages = 0");
  c = cache;
  c.dtype = static_cast<CacheDType>(9);
  EXPECT_ERROR(prepare_append(rope, args, c), "cache.dtype = 9");
  c = cache;
  c.kv_heads = 3;
  EXPECT_ERROR(prepare_append(rope, args, c), "k.heads = 2", "cache.kv_heads = 3");
  c = cache;
  c.v = nullptr;
  EXPECT_ERROR(prepare_append(rope, args, c), "cache.v is null", "v_head_dim = 16");

  a = args;
  a.k_offset = 1;
  EXPECT_ERROR(prepare_append(rope, a, cache), "k_offset = 1");
  a = args;
  a.k_nope = bshd(v.data(), DType::F32, 1, 2, 2, 8);
  a.k_nope_dim = 8;
  EXPECT_ERROR(prepare_append(rope, a, cache), "k_nope lanes [0, 8) overlap k's lanes [0, 16)");
  a.k_nope_offset = 16;
  EXPECT_ERROR(prepare_append(rope, a, cache), "k_nope_offset = 16", "16-lane key entry");
  a.k_nope_dim = 0;
  EXPECT_ERROR(prepare_append(rope, a, cache), "k_nope is set but k_nope_dim = 0");
  a = args;
  a.v = {};
  EXPECT_ERROR(prepare_append(rope, a, cache), "v is empty but cache.v is set");
  a = args;
  a.q = bshd(kc.data(), DType::F32, 1, 2, 4, 16);  // q rotated in place inside the cache
  EXPECT_ERROR(prepare_append(rope, a, cache), "q and cache.k share memory");
  a = args;
  a.k_out = bshd(q.data(), DType::F32, 1, 2, 2, 16);
  EXPECT_ERROR(prepare_append(rope, a, cache), "q and k_out share memory");
  a = args;
  a.q_out = bshd(q.data(), DType::F32, 1, 2, 2, 16);
  EXPECT_ERROR(prepare_append(rope, a, cache), "q_out [1, 2, 2]");
  a = args;
  const std::vector<float> w15(15, 1.0f), w16(16, 1.0f);
  a.norm.q_weight = w15;
  EXPECT_ERROR(prepare_append(rope, a, cache), "norm.q_weight has 15 values", "must have 16");
  a.norm.q_weight = w16;
  a.norm.eps = 0.0f;
  EXPECT_ERROR(prepare_append(rope, a, cache), "norm.eps = 0");
  a = args;
  const std::vector<std::int64_t> far = {0, std::int64_t{1} << 47};
  a.positions = positions(far);
  EXPECT_ERROR(prepare_append(rope, a, cache), "positions");
  a = args;
  a.threads = -1;
  EXPECT_ERROR(prepare_append(rope, a, cache), "threads = -1");
  // The one-shot append() runs the same checks (on its own path: the resolved call on the stack).
  a = args;
  a.slots = slot_mapping(twice);
  EXPECT_ERROR(append(rope, a, cache), "tokens 0 and 1 both write slot 3");
  a = args;
  a.q = bshd(kc.data(), DType::F32, 1, 2, 4, 16);
  EXPECT_ERROR(append(rope, a, cache), "q and cache.k share memory");
  a = args;
  a.positions = positions(far);
  EXPECT_ERROR(append(rope, a, cache), "positions");
  a = args;
  a.v = {};
  EXPECT_ERROR(append(rope, a, cache), "v is empty but cache.v is set");
  EXPECT_ERROR(append(rope, args, cache, nullptr), "table is null");
  EXPECT_EQ(kc, kc_before);
}

// New random values in b's own storage (views into it stay valid).
void refill(Buffer& b, std::uint32_t seed) {
  const Buffer fresh = random_buffer(static_cast<DType>(b.type), b.bytes.size() / Buffer::size(b.type), seed);
  std::copy(fresh.bytes.begin(), fresh.bytes.end(), b.bytes.begin());
}

// AppendCall::set_positions_and_slots: decode steps of one prepared call — two sequences, one token each
// per step, the slots given as a mapping or as a page table — write every buffer as a fresh
// prepare_append at the same positions and slots does; a refused step changes nothing.
TEST(AppendStep, EachStepEqualsAFreshPrepare) {
  const Spec spec{.head_dim = 32, .rotary_dim = 32, .base = 10000.0, .pairing = Pairing::Half};
  const Rope rope(spec);
  const std::int64_t tokens = 2, q_heads = 4, kv = 2, d = 32, page_size = 4, num_pages = 6;
  for (CacheDType cache_type : {CacheDType::BF16, CacheDType::F8E4M3}) {
    SCOPED_TRACE(to_string(cache_type));
    const float scale = cache_type == CacheDType::F8E4M3 ? 0.3f : 1.0f;
    const std::size_t cache_elems = std::size_t(num_pages * page_size * kv * d);
    Buffer kc(int(cache_type), cache_elems), vc(int(cache_type), cache_elems), kc_want = kc, vc_want = vc;
    const PagedCache cache{.k = kc.data(),
                           .v = vc.data(),
                           .dtype = cache_type,
                           .num_pages = num_pages,
                           .page_size = page_size,
                           .kv_heads = kv,
                           .head_dim = int(d),
                           .v_head_dim = int(d),
                           .k_scale = scale,
                           .v_scale = scale};
    PagedCache cache_want = cache;
    cache_want.k = kc_want.data(), cache_want.v = vc_want.data();
    Buffer q(int(DType::BF16), tokens * q_heads * d), k(int(DType::BF16), tokens * kv * d),
        v(int(DType::BF16), tokens * kv * d);
    Buffer q_want = q, k_want = k, k_out(int(DType::BF16), tokens * kv * d), k_out_want = k_out;
    const auto args_for = [&](Buffer& qb, Buffer& kb, Buffer& ko) {
      return AppendArgs{.q = bshd(qb.data(), DType::BF16, 1, tokens, q_heads, d),
                        .k = bshd(kb.data(), DType::BF16, 1, tokens, kv, d),
                        .k_out = bshd(ko.data(), DType::BF16, 1, tokens, kv, d),
                        .v = bshd(v.data(), DType::BF16, 1, tokens, kv, d)};
    };
    // Sequence 0 on pages {5, 2}, sequence 1 on pages {0, 3}; step s appends entry 3 + s of each.
    const std::vector<std::int32_t> indices = {5, 2, 0, 3}, indptr = {0, 2, 4}, batch_indices = {0, 1};
    std::vector<std::int64_t> pos(tokens), slot_map(tokens);
    std::vector<std::int32_t> last(2), seq_positions(tokens);
    const auto step_slots = [&](int s) -> std::variant<SlotMapping, PageTable> {
      for (std::int64_t t = 0; t < tokens; ++t) {
        const int e = 3 + s;
        pos[t] = e + 1000 * t;
        seq_positions[t] = e;
        last[t] = e % page_size + 1;
        slot_map[t] = indices[indptr[t] + e / page_size] * page_size + e % page_size;
      }
      if (s % 2 == 0) return slot_mapping(slot_map);
      return PageTable{.indices = indices,
                       .indptr = indptr,
                       .last_page_len = last,
                       .batch_indices = batch_indices,
                       .seq_positions = seq_positions};
    };
    AppendArgs first = args_for(q, k, k_out);
    first.positions = positions(pos);
    first.slots = step_slots(0);
    AppendCall call = prepare_append(rope, first, cache);
    for (int s = 0; s < 5; ++s) {
      SCOPED_TRACE(s);
      // New values in the same buffers: the call keeps the views it was prepared with.
      refill(q, 10 + s), refill(k, 20 + s), refill(v, 30 + s);
      q_want.bytes = q.bytes, k_want.bytes = k.bytes;
      const auto slots = step_slots(s);
      if (s > 0) call.set_positions_and_slots(positions(pos), slots);
      call.run();
      AppendArgs fresh = args_for(q_want, k_want, k_out_want);
      fresh.positions = positions(pos);
      fresh.slots = slots;
      prepare_append(rope, fresh, cache_want).run();
      EXPECT_EQ(q.bytes, q_want.bytes);
      EXPECT_EQ(k_out.bytes, k_out_want.bytes);
      EXPECT_EQ(kc.bytes, kc_want.bytes);
      EXPECT_EQ(vc.bytes, vc_want.bytes);
    }
    // Refused steps leave the call at step 4's positions and slots.
    const std::vector<std::int64_t> outside = {0, num_pages * page_size}, twice = {7, 7}, one = {7},
                                    good_slots = {1, 2};
    const std::vector<std::int64_t> negative = {-1, 3};
    EXPECT_ERROR(call.set_positions_and_slots(positions(pos), slot_mapping(outside)), "slots[1] = 24");
    EXPECT_ERROR(call.set_positions_and_slots(positions(pos), slot_mapping(twice)), "tokens 0 and 1 both write slot 7");
    EXPECT_ERROR(call.set_positions_and_slots(positions(pos), slot_mapping(one)), "slots.count = 1");
    EXPECT_ERROR(call.set_positions_and_slots(positions(negative), slot_mapping(good_slots)), "positions[0] = -1");
    EXPECT_EQ(call.rows(), tokens);
    refill(q, 99), refill(k, 98);
    q_want.bytes = q.bytes, k_want.bytes = k.bytes;
    call.run();
    AppendArgs fresh = args_for(q_want, k_want, k_out_want);
    fresh.positions = positions(pos);
    fresh.slots = step_slots(4);
    prepare_append(rope, fresh, cache_want).run();
    EXPECT_EQ(q.bytes, q_want.bytes);
    EXPECT_EQ(kc.bytes, kc_want.bytes);
    EXPECT_EQ(vc.bytes, vc_want.bytes);
  }
  AppendCall empty;
  const std::vector<std::int64_t> p = {1};
  EXPECT_ERROR(empty.set_positions_and_slots(positions(p), slot_mapping(p)), "the call is empty");
}

// An engine's own cos/sin cache (vLLM's layout, here made with Hugging Face's float32 angles and YaRN's
// magnitude inside) drives the fused append exactly as it drives Rope::apply(args, table): every
// buffer bit for bit against apply with the table → convert → copy, per call and per decode step, both
// pairings, bf16 and fp8 caches. The positions reach 60,000, where HF's float32 angles differ from the
// accurate ones, so the rope's own angles would not give these bits (checked).
TEST_P(AppendTest, ExternalCosSinCacheDrivesTheFusedAppend) {
  const std::int64_t tokens = 3, q_heads = 4, kv = 2, d = 64, page_size = 4, num_pages = 4, n = 65536;
  for (const Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
    const Spec spec{.head_dim = int(d),
                    .rotary_dim = int(d),
                    .base = 10000.0,
                    .pairing = pairing,
                    .scaling = scaling::Yarn{.factor = 8.0, .original_max_position_embeddings = 512}};
    const Rope rope(spec), hf(spec, AngleMode::HfCompat);
    std::vector<float> theirs(std::size_t(n * d));
    export_cos_sin_cache(hf, n, theirs);
    const std::shared_ptr<const Table> table = import_cos_sin_cache(rope, theirs, n);
    for (const CacheDType cache_type : {CacheDType::BF16, CacheDType::F8E4M3}) {
      SCOPED_TRACE(::testing::Message() << to_string(pairing) << " " << to_string(cache_type));
      const float scale = cache_type == CacheDType::F8E4M3 ? 0.3f : 1.0f;
      const std::size_t cache_elems = std::size_t(num_pages * page_size * kv * d);
      Buffer kc(int(cache_type), cache_elems), vc = kc, kc_want = kc, vc_want = kc;
      const PagedCache cache{.k = kc.data(),
                             .v = vc.data(),
                             .dtype = cache_type,
                             .num_pages = num_pages,
                             .page_size = page_size,
                             .kv_heads = kv,
                             .head_dim = int(d),
                             .v_head_dim = int(d),
                             .k_scale = scale,
                             .v_scale = scale};
      Buffer q(int(DType::BF16), tokens * q_heads * d), k(int(DType::BF16), tokens * kv * d), v = k;
      Buffer k_out(int(DType::BF16), tokens * kv * d);
      std::vector<std::int64_t> pos(tokens), slots(tokens);
      AppendArgs args{.q = bshd(q.data(), DType::BF16, 1, tokens, q_heads, d),
                      .k = bshd(k.data(), DType::BF16, 1, tokens, kv, d),
                      .k_out = bshd(k_out.data(), DType::BF16, 1, tokens, kv, d),
                      .v = bshd(v.data(), DType::BF16, 1, tokens, kv, d)};
      AppendCall step;
      for (int s = 0; s < 3; ++s) {
        SCOPED_TRACE(s);
        for (std::int64_t t = 0; t < tokens; ++t) pos[t] = 60000 + 1111 * t + 7 * s, slots[t] = 5 * t + s;
        refill(q, 40 + s), refill(k, 50 + s), refill(v, 60 + s);
        // Unfused: rotate copies with the table, then convert and copy each element to its slot.
        Buffer q_want = q, k_want = k, q_own = q;
        rope.apply({.q = bshd(q_want.data(), DType::BF16, 1, tokens, q_heads, d),
                    .k = bshd(k_want.data(), DType::BF16, 1, tokens, kv, d),
                    .positions = positions(pos)},
                   table);
        rope.apply({.q = bshd(q_own.data(), DType::BF16, 1, tokens, q_heads, d), .positions = positions(pos)});
        EXPECT_NE(q_own.bytes, q_want.bytes);  // the cache's angles are not the rope's own
        for (std::int64_t t = 0; t < tokens; ++t) {
          for (std::int64_t h = 0; h < kv; ++h) {
            for (int l = 0; l < d; ++l) {
              const std::int64_t at = cache_index(PageLayout::NHD, page_size, kv, int(d), slots[t], h, l);
              kc_want.set(std::size_t(at), k_want.get(std::size_t((t * kv + h) * d + l)), scale);
              vc_want.set(std::size_t(at), v.get(std::size_t((t * kv + h) * d + l)), scale);
            }
          }
        }
        // Fused: a fresh call per step, and one prepared call moved from step to step.
        Buffer q_step = q;
        args.positions = positions(pos);
        args.slots = slot_mapping(slots);
        prepare_append(rope, args, cache, table).run();
        EXPECT_EQ(q.bytes, q_want.bytes);
        EXPECT_EQ(k_out.bytes, k_want.bytes);
        EXPECT_EQ(kc.bytes, kc_want.bytes);
        EXPECT_EQ(vc.bytes, vc_want.bytes);
        q.bytes = q_step.bytes;
        if (s == 0) {
          step = prepare_append(rope, args, cache, table);
        } else {
          step.set_positions_and_slots(positions(pos), slot_mapping(slots));
        }
        step.run();
        EXPECT_EQ(q.bytes, q_want.bytes);
        EXPECT_EQ(kc.bytes, kc_want.bytes);
      }
      // A step past the cache's rows, a null table, a table of other frequencies: refused.
      pos[1] = n;
      EXPECT_ERROR(step.set_positions_and_slots(positions(pos), slot_mapping(slots)),
                   "position 65536 is outside the table");
      args.positions = positions(pos);
      EXPECT_ERROR(prepare_append(rope, args, cache, table), "position 65536 is outside the table");
      pos[1] = 0;
      EXPECT_ERROR(prepare_append(rope, args, cache, nullptr), "table is null");
      const Rope other(Spec{.head_dim = int(d), .rotary_dim = int(d), .base = 500000.0, .pairing = pairing});
      EXPECT_ERROR(prepare_append(other, args, cache, table), "other frequencies");
    }
  }
}

}  // namespace
