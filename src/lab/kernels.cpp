// The lab's Highway kernels (lab/kernels.hpp), compiled once per target by foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lab/kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>

#include "lab/kernels.hpp"
#include "lab/quants.hpp"
#include "rope/backend.hpp"

HWY_BEFORE_NAMESPACE();
namespace ropekit::lab {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void MatvecRows(const float* w, const float* x, float* y, std::size_t in, std::size_t first, std::size_t last,
                bool accumulate) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  for (std::size_t o = first; o < last; ++o) {
    const float* row = w + o * in;
    // Four rows ahead: the prefetchers see one stream, this keeps it a few hundred bytes ahead of the loads
    // (docs/performance-log.md: the code comments' figures).
    hwy::Prefetch(row + 4 * in);
    // Vector k of the row goes to accumulator k mod 4: four chains of fused multiply-adds, so their latency
    // overlaps (the packed rows' kernel below, which dequantizes as it goes, was latency-bound with two).
    auto sum0 = hn::Zero(d), sum1 = hn::Zero(d), sum2 = hn::Zero(d), sum3 = hn::Zero(d);
    std::size_t i = 0;
    for (; i + 4 * lanes <= in; i += 4 * lanes) {
      sum0 = hn::MulAdd(hn::LoadU(d, row + i), hn::LoadU(d, x + i), sum0);
      sum1 = hn::MulAdd(hn::LoadU(d, row + i + lanes), hn::LoadU(d, x + i + lanes), sum1);
      sum2 = hn::MulAdd(hn::LoadU(d, row + i + 2 * lanes), hn::LoadU(d, x + i + 2 * lanes), sum2);
      sum3 = hn::MulAdd(hn::LoadU(d, row + i + 3 * lanes), hn::LoadU(d, x + i + 3 * lanes), sum3);
    }
    if (i + lanes <= in) sum0 = hn::MulAdd(hn::LoadU(d, row + i), hn::LoadU(d, x + i), sum0), i += lanes;
    if (i + lanes <= in) sum1 = hn::MulAdd(hn::LoadU(d, row + i), hn::LoadU(d, x + i), sum1), i += lanes;
    if (i + lanes <= in) sum2 = hn::MulAdd(hn::LoadU(d, row + i), hn::LoadU(d, x + i), sum2), i += lanes;
    float dot = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(sum0, sum1), hn::Add(sum2, sum3))));
    for (; i < in; ++i) dot += row[i] * x[i];
    y[o] = accumulate ? y[o] + dot : dot;
  }
}

// Vectors of at most 16 floats: a quantized block's groups of 16 or 32 values are whole vectors on every target.
using DQ = hn::CappedTag<float, 16>;

// binary16 → float32, exact: the target's conversion (vcvtph2ps where there is one) on a one-lane vector (the
// per-block scales of the quantized types).
HWY_INLINE float HalfToFloat(const std::byte* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
}

// n bytes → n int32 lanes.
HWY_INLINE hn::Vec<hn::Rebind<std::int32_t, DQ>> Bytes(const std::byte* p) {
  const hn::Rebind<std::uint8_t, DQ> du8;
  return hn::BitCast(
      hn::Rebind<std::int32_t, DQ>(),
      hn::PromoteTo(hn::Rebind<std::uint32_t, DQ>(), hn::LoadU(du8, reinterpret_cast<const std::uint8_t*>(p))));
}

// Encodings by ggml type id (WeightEncoding's values); kF16 and kBF16 are value-by-value, the others blocks of
// lab/quants.hpp's table.
constexpr std::uint32_t kF16 = std::uint32_t(WeightEncoding::F16), kBF16 = std::uint32_t(WeightEncoding::BF16),
                        kQ4_0 = std::uint32_t(WeightEncoding::Q4_0), kQ4_1 = std::uint32_t(WeightEncoding::Q4_1),
                        kQ5_0 = std::uint32_t(WeightEncoding::Q5_0), kQ5_1 = std::uint32_t(WeightEncoding::Q5_1),
                        kQ8_0 = std::uint32_t(WeightEncoding::Q8_0), kQ4_K = std::uint32_t(WeightEncoding::Q4_K),
                        kQ5_K = std::uint32_t(WeightEncoding::Q5_K), kQ6_K = std::uint32_t(WeightEncoding::Q6_K);
template <std::uint32_t kType>
constexpr std::size_t kBlockValues = kType == kF16 || kType == kBF16
                                         ? 1
                                         : std::size_t(detail::quant_type(kType)->block_values);
template <std::uint32_t kType>
constexpr std::size_t kBlockBytes = kType == kF16 || kType == kBF16
                                        ? 2
                                        : std::size_t(detail::quant_type(kType)->block_bytes);

// One block of kType at src → its values, emitted in value order as vectors of DQ: emit(offset, vector). The same
// products and sums as detail::dequantize (lab/quants.cpp), each rounded on its own (no fused multiply-add), so the
// same bits.
template <std::uint32_t kType, class Emit>
HWY_INLINE void DequantizeBlock(const std::byte* src, Emit&& emit) {
  const DQ d;
  const hn::Rebind<std::int32_t, DQ> di;
  const std::size_t n = hn::Lanes(d);
  const auto low = hn::Set(di, 0x0F);
  if constexpr (kType == kQ8_0) {  // x = q · d
    const hn::Rebind<std::int8_t, DQ> di8;
    const auto vd = hn::Set(d, HalfToFloat(src));
    for (std::size_t j = 0; j < 32; j += n) {
      const auto q = hn::PromoteTo(di, hn::LoadU(di8, reinterpret_cast<const std::int8_t*>(src + 2 + j)));
      emit(j, hn::Mul(hn::ConvertTo(d, q), vd));
    }
  } else if constexpr (kType == kQ4_0 || kType == kQ4_1) {
    // Q4_0: x[j] = d · (lo − 8), x[j + 16] = d · (hi − 8); Q4_1: x[j] = d · lo + m, x[j + 16] = d · hi + m
    constexpr bool kMin = kType == kQ4_1;
    const auto vd = hn::Set(d, HalfToFloat(src));
    const auto vm = hn::Set(d, kMin ? HalfToFloat(src + 2) : 0.0f);
    const std::byte* q = src + (kMin ? 4 : 2);
    const auto bias = hn::Set(di, kMin ? 0 : 8);
    for (std::size_t half = 0; half < 2; ++half) {  // the low nibbles (values 0-15), then the high ones (16-31)
      for (std::size_t j = 0; j < 16; j += n) {
        const auto v = Bytes(q + j);
        const auto x = hn::Mul(vd, hn::ConvertTo(d, hn::Sub(half == 0 ? hn::And(v, low) : hn::ShiftRight<4>(v), bias)));
        emit(16 * half + j, kMin ? hn::Add(x, vm) : x);
      }
    }
  } else if constexpr (kType == kQ5_0 || kType == kQ5_1) {
    // Q5_0: x[v] = d · ((nibble | fifth << 4) − 16); Q5_1: x[v] = d · (nibble | fifth << 4) + m; fifth: bit v of qh
    constexpr bool kMin = kType == kQ5_1;
    const hn::Rebind<std::uint32_t, DQ> du;
    const auto vd = hn::Set(d, HalfToFloat(src));
    const auto vm = hn::Set(d, kMin ? HalfToFloat(src + 2) : 0.0f);
    std::uint32_t qh;
    std::memcpy(&qh, src + (kMin ? 4 : 2), 4);
    const std::byte* q = src + (kMin ? 8 : 6);
    const auto bias = hn::Set(di, kMin ? 0 : 16);
    for (std::size_t half = 0; half < 2; ++half) {  // the low nibbles (values 0-15), then the high ones (16-31)
      for (std::size_t j = 0; j < 16; j += n) {
        const auto v = Bytes(q + j);
        const auto fifth = hn::BitCast(
            di, hn::And(hn::Shr(hn::Set(du, qh), hn::Iota(du, std::uint32_t(16 * half + j))), hn::Set(du, 1u)));
        const auto nibble = half == 0 ? hn::And(v, low) : hn::ShiftRight<4>(v);
        const auto x = hn::Mul(vd, hn::ConvertTo(d, hn::Sub(hn::Or(nibble, hn::ShiftLeft<4>(fifth)), bias)));
        emit(16 * half + j, kMin ? hn::Add(x, vm) : x);
      }
    }
  } else if constexpr (kType == kQ4_K || kType == kQ5_K) {
    // x = (d · sc) · q − (dmin · m) per sub-block of 32; Q5_K: a fifth bit from qh
    constexpr bool kHigh = kType == kQ5_K;
    const float dd = HalfToFloat(src), dmin = HalfToFloat(src + 2);
    const std::byte *scales = src + 4, *qh = src + 16, *qs = src + (kHigh ? 48 : 16);
    for (int sb = 0; sb < 8; ++sb) {
      unsigned sc, m;
      detail::scale_min(scales, sb, sc, m);
      const auto ds = hn::Set(d, dd * static_cast<float>(sc)), ms = hn::Set(d, dmin * static_cast<float>(m));
      const std::byte* nibbles = qs + 32 * (sb / 2);
      for (std::size_t l = 0; l < 32; l += n) {
        const auto v = Bytes(nibbles + l);
        auto q = sb % 2 == 0 ? hn::And(v, low) : hn::ShiftRight<4>(v);
        if constexpr (kHigh)
          q = hn::Or(q, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(Bytes(qh + l), sb), hn::Set(di, 1))));
        emit(32 * std::size_t(sb) + l, hn::Sub(hn::Mul(ds, hn::ConvertTo(d, q)), ms));
      }
    }
  } else if constexpr (kType == kQ6_K) {
    // x = (d · scale) · (q − 32), rows of 32 values, int8 scales per 16
    const std::byte *ql = src, *qh = src + 128, *scales = src + 192;
    const float dd = HalfToFloat(src + 208);
    for (int r = 0; r < 8; ++r) {
      const int h = r / 4, nibble = (r / 2) % 2, part = r % 2, shift = 2 * (r % 4);
      for (std::size_t l = 0; l < 32; l += n) {
        const int v = 32 * r + int(l);
        const auto ds = hn::Set(d, dd * static_cast<float>(static_cast<std::int8_t>(scales[v / 16])));
        const auto lo = hn::And(hn::ShiftRightSame(Bytes(ql + 64 * h + 32 * part + l), 4 * nibble), low);
        const auto hi = hn::And(hn::ShiftRightSame(Bytes(qh + 32 * h + l), shift), hn::Set(di, 3));
        const auto q = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), hn::Set(di, 32));
        emit(std::size_t(v), hn::Mul(ds, hn::ConvertTo(d, q)));
      }
    }
  }
}

// `count` values of a packed row from value `first` (both multiples of kType's block, but for the row's last
// values of F16/BF16) → float32 at out.
template <std::uint32_t kType>
HWY_INLINE void WidenValues(const std::byte* row, std::size_t first, std::size_t count, float* out) {
  if constexpr (kType == kF16 || kType == kBF16) {
    const DQ d;
    const std::size_t n = hn::Lanes(d);
    const std::byte* p = row + 2 * first;
    std::size_t i = 0;
    if constexpr (kType == kF16) {
      const hn::Rebind<hwy::float16_t, DQ> dh;
      for (; i + n <= count; i += n) {
        hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p + 2 * i))), d, out + i);
      }
      for (; i < count; ++i) out[i] = HalfToFloat(p + 2 * i);
    } else {
      const hn::Rebind<std::uint16_t, DQ> du16;
      const hn::Rebind<std::uint32_t, DQ> du32;
      for (; i + n <= count; i += n) {
        const auto w = hn::PromoteTo(du32, hn::LoadU(du16, reinterpret_cast<const std::uint16_t*>(p + 2 * i)));
        hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(w)), d, out + i);
      }
      for (; i < count; ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
      }
    }
  } else {
    const DQ d;
    const std::byte* src = row + first / kBlockValues<kType> * kBlockBytes<kType>;
    for (std::size_t b = 0; b < count / kBlockValues<kType>; ++b) {
      float* block = out + b * kBlockValues<kType>;
      DequantizeBlock<kType>(src + b * kBlockBytes<kType>,
                             [&](std::size_t at, auto v) { hn::StoreU(v, d, block + at); });
    }
  }
}

// Calls f.template operator()<kType>() for the encoding's type id (one of the eight).
template <class F>
HWY_INLINE void WithEncoding(std::uint32_t encoding, F&& f) {
  switch (encoding) {
    case kF16: return f.template operator()<kF16>();
    case kBF16: return f.template operator()<kBF16>();
    case kQ4_0: return f.template operator()<kQ4_0>();
    case kQ4_1: return f.template operator()<kQ4_1>();
    case kQ5_0: return f.template operator()<kQ5_0>();
    case kQ5_1: return f.template operator()<kQ5_1>();
    case kQ8_0: return f.template operator()<kQ8_0>();
    case kQ4_K: return f.template operator()<kQ4_K>();
    case kQ5_K: return f.template operator()<kQ5_K>();
    case kQ6_K: return f.template operator()<kQ6_K>();
    default: return;
  }
}

void WidenRows(std::uint32_t encoding, const std::byte* packed, std::size_t row_bytes, std::size_t cols,
               std::size_t first, std::size_t count, float* out) {
  WithEncoding(encoding, [&]<std::uint32_t kType>() {
    for (std::size_t r = 0; r < count; ++r) {
      WidenValues<kType>(packed + (first + r) * row_bytes, 0, cols, out + r * cols);
    }
  });
}

// MatvecRows over packed rows: each row widened 256 values at a time into a buffer the dot product then reads, the
// accumulators fed in MatvecRows's order (256 is a multiple of four vectors and of every block), so the same bits as
// MatvecRows over the rows widened first.
template <std::uint32_t kType>
void MatvecPackedRowsFor(const std::byte* packed, std::size_t row_bytes, const float* x, float* y, std::size_t in,
                         std::size_t first, std::size_t last, bool accumulate) {
  constexpr std::size_t kChunk = 256;
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  if constexpr (kType != kF16 && kType != kBF16 && std::is_same_v<hn::Vec<DQ>, hn::Vec<decltype(d)>>) {
    if (hn::Lanes(DQ()) == lanes) {
      // A block's vectors are the dot product's vectors (a block is whole vectors when they hold at most 16
      // floats): dequantized in registers and fed straight to the accumulators, vector k of the row to accumulator
      // k mod 4, as MatvecRows feeds them (no tail: a row is whole blocks). (Two rows at a time was slower: SmolLM2
      // Q4_1 decode, one thread, 56-60 against 75-79 tokens/s with two accumulators.)
      for (std::size_t o = first; o < last; ++o) {
        const std::byte* row = packed + o * row_bytes;
        hwy::Prefetch(row + 4 * row_bytes);
        auto sum0 = hn::Zero(d), sum1 = hn::Zero(d), sum2 = hn::Zero(d), sum3 = hn::Zero(d);
        // Block b's vectors, the first of them vector kBase (mod 4) of the row: vector k to accumulator k mod 4, as
        // in MatvecRows (kBase a constant, so the accumulator of each vector is known where the block is unrolled).
        const auto feed = [&]<std::size_t kBase>(std::size_t b) {
          const float* xb = x + b * kBlockValues<kType>;
          std::size_t k = kBase;
          DequantizeBlock<kType>(row + b * kBlockBytes<kType>, [&](std::size_t at, hn::Vec<DQ> v) {
            const auto xv = hn::LoadU(d, xb + at);
            switch (k++ & 3) {
              case 0: sum0 = hn::MulAdd(v, xv, sum0); break;
              case 1: sum1 = hn::MulAdd(v, xv, sum1); break;
              case 2: sum2 = hn::MulAdd(v, xv, sum2); break;
              default: sum3 = hn::MulAdd(v, xv, sum3); break;
            }
          });
        };
        const std::size_t blocks = in / kBlockValues<kType>, per_block = kBlockValues<kType> / lanes;
        std::size_t b = 0;
        if (per_block % 4 == 0) {  // every block starts at accumulator 0
          for (; b < blocks; ++b) feed.template operator()<0>(b);
        } else {  // two vectors per block (16-float vectors, 32-value blocks): blocks alternate 0-1 and 2-3
          for (; b + 2 <= blocks; b += 2) {
            feed.template operator()<0>(b);
            feed.template operator()<2>(b + 1);
          }
          if (b < blocks) feed.template operator()<0>(b);
        }
        const float dot = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(sum0, sum1), hn::Add(sum2, sum3))));
        y[o - first] = accumulate ? y[o - first] + dot : dot;
      }
      return;
    }
  }
  HWY_ALIGN float buf[kChunk];
  for (std::size_t o = first; o < last; ++o) {
    const std::byte* row = packed + o * row_bytes;
    hwy::Prefetch(row + 4 * row_bytes);
    auto sum0 = hn::Zero(d), sum1 = hn::Zero(d), sum2 = hn::Zero(d), sum3 = hn::Zero(d);
    std::size_t i = 0, n = 0, j = 0;
    while (i < in) {
      n = std::min(kChunk, in - i);
      WidenValues<kType>(row, i, n, buf);
      for (j = 0; j + 4 * lanes <= n; j += 4 * lanes) {
        sum0 = hn::MulAdd(hn::Load(d, buf + j), hn::LoadU(d, x + i + j), sum0);
        sum1 = hn::MulAdd(hn::Load(d, buf + j + lanes), hn::LoadU(d, x + i + j + lanes), sum1);
        sum2 = hn::MulAdd(hn::Load(d, buf + j + 2 * lanes), hn::LoadU(d, x + i + j + 2 * lanes), sum2);
        sum3 = hn::MulAdd(hn::Load(d, buf + j + 3 * lanes), hn::LoadU(d, x + i + j + 3 * lanes), sum3);
      }
      // The row's last chunk only (n < kChunk) leaves vectors: the next three accumulators, as MatvecRows.
      if (j + lanes <= n) sum0 = hn::MulAdd(hn::Load(d, buf + j), hn::LoadU(d, x + i + j), sum0), j += lanes;
      if (j + lanes <= n) sum1 = hn::MulAdd(hn::Load(d, buf + j), hn::LoadU(d, x + i + j), sum1), j += lanes;
      if (j + lanes <= n) sum2 = hn::MulAdd(hn::Load(d, buf + j), hn::LoadU(d, x + i + j), sum2), j += lanes;
      i += n;
    }
    float dot = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(sum0, sum1), hn::Add(sum2, sum3))));
    for (; j < n; ++j) dot += buf[j] * x[in - n + j];
    y[o - first] = accumulate ? y[o - first] + dot : dot;
  }
}

void MatvecPackedRows(std::uint32_t encoding, const std::byte* packed, std::size_t row_bytes, const float* x, float* y,
                      std::size_t in, std::size_t first, std::size_t last, bool accumulate) {
  WithEncoding(encoding, [&]<std::uint32_t kType>() {
    MatvecPackedRowsFor<kType>(packed, row_bytes, x, y, in, first, last, accumulate);
  });
}

// The int8 decode (lab/kernels.hpp: int8_matvec_rows). Vectors of at most 16 int16 lanes: a group of 16 values that
// share a scale is whole vectors on every target, so every lane of an accumulator has one scale and the "reorder" of
// ReorderWidenMulAccumulate (which lane gets which pair) does not matter.
using D16 = hn::CappedTag<std::int16_t, 16>;
using D32 = hn::Repartition<std::int32_t, D16>;
using DF32 = hn::Repartition<float, D16>;

// quantize_int8 (lab/kernels.hpp), 8 floats at a time.
void QuantizeInt8(const float* x, std::size_t n, std::int8_t* q, float* scale, float* sum) {
  const hn::CappedTag<float, 8> d;
  const hn::Rebind<std::int32_t, decltype(d)> di;
  const hn::Rebind<std::int8_t, decltype(d)> d8;
  const std::size_t lanes = hn::Lanes(d);
  for (std::size_t g = 0; g < n / 32; ++g) {
    const float* xg = x + 32 * g;
    auto amax = hn::Zero(d);
    bool finite = true;
    for (std::size_t i = 0; i < 32; i += lanes) {
      const auto v = hn::LoadU(d, xg + i);
      finite = finite && hn::AllTrue(d, hn::IsFinite(v));
      amax = hn::Max(amax, hn::Abs(v));
    }
    const float m = hn::GetLane(hn::MaxOfLanes(d, amax));
    if (!finite || m == 0.0f) {
      std::fill(q + 32 * g, q + 32 * (g + 1), std::int8_t{0});
      scale[g] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      sum[g] = scale[g];
      continue;
    }
    const float s = m / 127.0f;
    const auto vs = hn::Set(d, s), lo = hn::Set(d, -127.0f), hi = hn::Set(d, 127.0f);
    std::int32_t total = 0;
    for (std::size_t i = 0; i < 32; i += lanes) {
      // x/s ≤ 127 (1 + 2^-23)², so the clamp only guards the rounding of s; Round: to nearest, ties to even.
      const auto r = hn::ConvertTo(di, hn::Min(hn::Max(hn::Round(hn::Div(hn::LoadU(d, xg + i), vs)), lo), hi));
      hn::StoreU(hn::DemoteTo(d8, r), d8, q + 32 * g + i);
      total += hn::GetLane(hn::SumOfLanes(di, r));
    }
    scale[g] = s;
    sum[g] = s * static_cast<float>(total);
  }
}

// n bytes at p (unsigned) → n int16 lanes.
HWY_INLINE hn::Vec<D16> Bytes16(const std::byte* p) {
  return hn::BitCast(
      D16(), hn::PromoteTo(hn::Rebind<std::uint16_t, D16>(),
                           hn::LoadU(hn::Rebind<std::uint8_t, D16>(), reinterpret_cast<const std::uint8_t*>(p))));
}

// Lane k: 1 << k (bit k of a 16-bit pattern, the fifth bits of Q5_0/Q5_1).
alignas(64) constexpr std::uint16_t kLaneBits[16] = {1,   2,   4,    8,    16,   32,   64,    128,
                                                     256, 512, 1024, 2048, 4096, 8192, 16384, 32768};

// Per encoding: what the unsigned integers of a block are offset by (value = scale · (integer − kBias) [+ minimum]).
template <std::uint32_t kType>
constexpr int kBias = kType == kQ4_0   ? 8
                      : kType == kQ5_0 ? 16
                      : kType == kQ6_K ? 32
                                       : 0;

// The unsigned integers of values [v, v + Lanes(D16)) of one kType block (v a multiple of the lanes; the lanes divide
// 16), before kBias is taken off; Q8_0's are its signed ones.
template <std::uint32_t kType>
HWY_INLINE hn::Vec<D16> UnsignedInts(const std::byte* src, std::size_t v) {
  const D16 d;
  const auto low = hn::Set(d, 0x0F);
  if constexpr (kType == kQ8_0) {
    return hn::PromoteTo(d,
                         hn::LoadU(hn::Rebind<std::int8_t, D16>(), reinterpret_cast<const std::int8_t*>(src + 2 + v)));
  } else if constexpr (kType == kQ4_0 || kType == kQ4_1) {
    const auto b = Bytes16(src + (kType == kQ4_1 ? 4 : 2) + v % 16);
    return v < 16 ? hn::And(b, low) : hn::ShiftRight<4>(b);
  } else if constexpr (kType == kQ5_0 || kType == kQ5_1) {
    constexpr bool kMin = kType == kQ5_1;
    const hn::Rebind<std::uint16_t, D16> du;
    std::uint32_t qh;
    std::memcpy(&qh, src + (kMin ? 4 : 2), 4);
    const auto b = Bytes16(src + (kMin ? 8 : 6) + v % 16);
    const auto nibble = v < 16 ? hn::And(b, low) : hn::ShiftRight<4>(b);
    const auto bits = hn::Set(du, static_cast<std::uint16_t>(qh >> v));
    return hn::Or(nibble,
                  hn::BitCast(d, hn::IfThenElseZero(hn::TestBit(bits, hn::LoadU(du, kLaneBits)), hn::Set(du, 16))));
  } else if constexpr (kType == kQ4_K || kType == kQ5_K) {
    constexpr bool kHigh = kType == kQ5_K;
    const std::size_t sb = v / 32, l = v % 32;
    const auto b = Bytes16(src + (kHigh ? 48 : 16) + 32 * (sb / 2) + l);
    auto q = sb % 2 == 0 ? hn::And(b, low) : hn::ShiftRight<4>(b);
    if constexpr (kHigh) {
      q = hn::Or(q, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(Bytes16(src + 16 + l), int(sb)), hn::Set(d, 1))));
    }
    return q;
  } else {
    static_assert(kType == kQ6_K);
    const std::size_t r = v / 32, l = v % 32;
    const std::size_t h = r / 4, nibble = (r / 2) % 2, part = r % 2, shift = 2 * (r % 4);
    const auto lo = hn::And(hn::ShiftRightSame(Bytes16(src + 64 * h + 32 * part + l), int(4 * nibble)), low);
    const auto hi = hn::And(hn::ShiftRightSame(Bytes16(src + 128 + 32 * h + l), int(shift)), hn::Set(d, 3));
    return hn::Or(lo, hn::ShiftLeft<4>(hi));
  }
}

// The integers of values [v, v + Lanes(D16)): the block's values are scale · these (+ the minimum).
template <std::uint32_t kType>
HWY_INLINE hn::Vec<D16> WeightInts(const std::byte* src, std::size_t v) {
  const auto u = UnsignedInts<kType>(src, v);
  return kBias<kType> == 0 ? u : hn::Sub(u, hn::Set(D16(), std::int16_t{kBias<kType>}));
}

// Σ over values [v, v + count) of one block of (weight integer × x's integer), as int32 lanes (exact: at most 32
// products of magnitude ≤ 128 · 127 per lane).
template <std::uint32_t kType>
HWY_INLINE hn::Vec<D32> GroupDot(const std::byte* src, const std::int8_t* xq, std::size_t v, std::size_t count) {
  const D16 d;
  const D32 d32;
  const hn::Rebind<std::int8_t, D16> d8;
  auto sum0 = hn::Zero(d32), sum1 = hn::Zero(d32);
  for (std::size_t j = v; j < v + count; j += hn::Lanes(d)) {
    sum0 = hn::ReorderWidenMulAccumulate(d32, WeightInts<kType>(src, j), hn::PromoteTo(d, hn::LoadU(d8, xq + j)), sum0,
                                         sum1);
  }
  return hn::Add(sum0, sum1);
}

// The generic kernel: GroupDot's int16 products, per 32 values (16 for Q6_K) a multiply-add of their sum by the
// weight scale times x's; a block's minimum times x's group sum on its own.
template <std::uint32_t kType>
void Int8MatvecRowsFor(const std::byte* packed, std::size_t row_bytes, const std::int8_t* xq, const float* xs,
                       const float* xsum, float* y, std::size_t in, std::size_t first, std::size_t last,
                       bool accumulate) {
  constexpr std::size_t kValues = kBlockValues<kType>, kBytes = kBlockBytes<kType>;
  const DF32 df;
  const std::size_t blocks = in / kValues;
  // acc += Σ over values [v, v + count) · scale
  const auto add = [&](hn::Vec<DF32>& acc, const std::byte* src, const std::int8_t* xb, std::size_t v,
                       std::size_t count, float scale) {
    acc = hn::MulAdd(hn::ConvertTo(df, GroupDot<kType>(src, xb, v, count)), hn::Set(df, scale), acc);
  };
  for (std::size_t o = first; o < last; ++o) {
    const std::byte* row = packed + o * row_bytes;
    hwy::Prefetch(row + 4 * row_bytes);
    auto acc = hn::Zero(df);
    float minimum = 0.0f;
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::byte* src = row + b * kBytes;
      const std::size_t g0 = b * kValues / 32;  // x's first group in this block
      const std::int8_t* xb = xq + b * kValues;
      if constexpr (kValues == 32) {
        add(acc, src, xb, 0, 32, HalfToFloat(src) * xs[g0]);
        if constexpr (kType == kQ4_1 || kType == kQ5_1) minimum += HalfToFloat(src + 2) * xsum[g0];
      } else if constexpr (kType == kQ4_K || kType == kQ5_K) {
        const float dd = HalfToFloat(src), dmin = HalfToFloat(src + 2);
        for (std::size_t sb = 0; sb < 8; ++sb) {
          unsigned sc, m;
          detail::scale_min(src + 4, int(sb), sc, m);
          add(acc, src, xb, 32 * sb, 32, (dd * static_cast<float>(sc)) * xs[g0 + sb]);
          minimum -= (dmin * static_cast<float>(m)) * xsum[g0 + sb];
        }
      } else {  // Q6_K: a scale per 16 values
        const float dd = HalfToFloat(src + 208);
        const auto* scales = reinterpret_cast<const std::int8_t*>(src + 192);
        for (std::size_t h = 0; h < 16; ++h) {
          add(acc, src, xb, 16 * h, 16, (dd * static_cast<float>(scales[h])) * xs[g0 + h / 2]);
        }
      }
    }
    const float dot = hn::GetLane(hn::SumOfLanes(df, acc)) + minimum;
    y[o - first] = accumulate ? y[o - first] + dot : dot;
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// x86 with AVX2: 32 values per instruction, as llama.cpp's kernels: the unsigned weight integers times x's signed
// ones, adjacent pairs summed into int16 (vpmaddubsw: exact, |pair| ≤ 2 · 128 · 127 < 2^15), the bias's pairs taken
// off in int16, then pairs of those into int32 (vpmaddwd, times 1 or Q6_K's scale per 16 values). Other targets take
// the generic kernel.
#define ROPEKIT_INT8_X86 1
// 32 unsigned integers of values [v, v + 32) of a kType block (Q8_0: its signed bytes).
template <std::uint32_t kType>
HWY_INLINE __m256i WeightBytes32(const std::byte* src, std::size_t v) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const auto nibbles32 = [&](const std::byte* p) {  // 16 bytes: values 0-15 their low nibbles, 16-31 their high
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), low);
  };
  const auto load32 = [](const std::byte* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); };
  if constexpr (kType == kQ8_0) {
    return load32(src + 2);
  } else if constexpr (kType == kQ4_0 || kType == kQ4_1) {
    return nibbles32(src + (kType == kQ4_1 ? 4 : 2));
  } else if constexpr (kType == kQ5_0 || kType == kQ5_1) {
    constexpr bool kMin = kType == kQ5_1;
    std::uint32_t qh;
    std::memcpy(&qh, src + (kMin ? 4 : 2), 4);
    // Byte i ← byte i/8 of qh, then bit i%8 of it: 0xFF where set.
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(qh)),
        _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
    const __m256i fifth = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
    return _mm256_or_si256(nibbles32(src + (kMin ? 8 : 6)), fifth);
  } else if constexpr (kType == kQ4_K || kType == kQ5_K) {
    constexpr bool kHigh = kType == kQ5_K;
    const std::size_t sb = v / 32;
    const __m256i b = load32(src + (kHigh ? 48 : 16) + 32 * (sb / 2));
    __m256i q = _mm256_and_si256(sb % 2 == 0 ? b : _mm256_srli_epi16(b, 4), low);
    if constexpr (kHigh) {
      const __m256i h =
          _mm256_and_si256(_mm256_srl_epi16(load32(src + 16), _mm_cvtsi32_si128(int(sb))), _mm256_set1_epi8(1));
      q = _mm256_or_si256(q, _mm256_slli_epi16(h, 4));
    }
    return q;
  } else {
    static_assert(kType == kQ6_K);
    const std::size_t r = v / 32;
    const std::size_t h = r / 4, nibble = (r / 2) % 2, part = r % 2, shift = 2 * (r % 4);
    const __m256i lo =
        _mm256_and_si256(_mm256_srl_epi16(load32(src + 64 * h + 32 * part), _mm_cvtsi32_si128(int(4 * nibble))), low);
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(load32(src + 128 + 32 * h), _mm_cvtsi32_si128(int(shift))),
                                        _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
}

// Σ over 32 values of (weight integer × x's integer) as 8 float lanes (exactly the int32 sums: |Σ| < 2^24), lanes
// 0-3 the first 16 values', 4-7 the last 16's, each half times its int16 multiplier (1, or Q6_K's scales).
template <std::uint32_t kType>
HWY_INLINE __m256 Dot32(const std::byte* src, const std::int8_t* xq, std::size_t v, __m256i multipliers) {
  const __m256i w = WeightBytes32<kType>(src, v);
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + v));
  __m256i pairs;
  if constexpr (kType == kQ8_0) {  // signed weights: |w| times x with w's sign (|−128| is 128 read unsigned)
    pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  } else {
    pairs = _mm256_maddubs_epi16(w, x);
    if constexpr (kBias<kType> != 0)
      pairs = _mm256_sub_epi16(pairs, _mm256_maddubs_epi16(_mm256_set1_epi8(kBias<kType>), x));
  }
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, multipliers));
}

HWY_INLINE float Reduce(__m256 a) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// Two accumulators, blocks (or groups of 32) alternating between them: the multiply-adds' latency overlaps. A K
// block's eight minimum terms in one vector multiply-add; Q4_1/Q5_1's in two scalars, alternating too.
template <std::uint32_t kType>
void Int8MatvecRowsX86(const std::byte* packed, std::size_t row_bytes, const std::int8_t* xq, const float* xs,
                       const float* xsum, float* y, std::size_t in, std::size_t first, std::size_t last,
                       bool accumulate) {
  constexpr std::size_t kValues = kBlockValues<kType>, kBytes = kBlockBytes<kType>;
  const std::size_t blocks = in / kValues;
  const __m256i one = _mm256_set1_epi16(1);
  for (std::size_t o = first; o < last; ++o) {
    const std::byte* row = packed + o * row_bytes;
    hwy::Prefetch(row + 4 * row_bytes);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
    float min0 = 0.0f, min1 = 0.0f;
    if constexpr (kValues == 32) {
      const auto block = [&](std::size_t b, __m256& acc, float& minimum) {
        const std::byte* src = row + b * kBytes;
        acc = _mm256_fmadd_ps(Dot32<kType>(src, xq + 32 * b, 0, one), _mm256_set1_ps(HalfToFloat(src) * xs[b]), acc);
        if constexpr (kType == kQ4_1 || kType == kQ5_1) minimum += HalfToFloat(src + 2) * xsum[b];
      };
      std::size_t b = 0;
      for (; b + 2 <= blocks; b += 2) {
        block(b, acc0, min0);
        block(b + 1, acc1, min1);
      }
      if (b < blocks) block(b, acc0, min0);
    } else {
      for (std::size_t b = 0; b < blocks; ++b) {
        const std::byte* src = row + b * kBytes;
        const std::int8_t* xb = xq + b * kValues;
        const std::size_t g0 = b * kValues / 32;
        if constexpr (kType == kQ4_K || kType == kQ5_K) {
          const float dd = HalfToFloat(src), dmin = HalfToFloat(src + 2);
          alignas(32) float ds[8], ms[8];
          for (int sb = 0; sb < 8; ++sb) {
            unsigned sc, m;
            detail::scale_min(src + 4, sb, sc, m);
            ds[sb] = dd * static_cast<float>(sc);
            ms[sb] = dmin * static_cast<float>(m);
          }
          for (std::size_t sb = 0; sb < 8; sb += 2) {
            acc0 = _mm256_fmadd_ps(Dot32<kType>(src, xb, 32 * sb, one), _mm256_set1_ps(ds[sb] * xs[g0 + sb]), acc0);
            acc1 = _mm256_fmadd_ps(Dot32<kType>(src, xb, 32 * sb + 32, one),
                                   _mm256_set1_ps(ds[sb + 1] * xs[g0 + sb + 1]), acc1);
          }
          mins = _mm256_fmadd_ps(_mm256_load_ps(ms), _mm256_loadu_ps(xsum + g0), mins);
        } else {  // Q6_K: the two halves' int8 scales as int16 multipliers (|Σ| ≤ 2 · (2 · 32 · 127) · 128 < 2^22)
          static_assert(kType == kQ6_K);
          const float dd = HalfToFloat(src + 208);
          const auto* scales = reinterpret_cast<const std::int8_t*>(src + 192);
          const auto half_scales = [&](std::size_t g) {
            return _mm256_set_m128i(_mm_set1_epi16(scales[2 * g + 1]), _mm_set1_epi16(scales[2 * g]));
          };
          for (std::size_t g = 0; g < 8; g += 2) {
            acc0 =
                _mm256_fmadd_ps(Dot32<kType>(src, xb, 32 * g, half_scales(g)), _mm256_set1_ps(dd * xs[g0 + g]), acc0);
            acc1 = _mm256_fmadd_ps(Dot32<kType>(src, xb, 32 * g + 32, half_scales(g + 1)),
                                   _mm256_set1_ps(dd * xs[g0 + g + 1]), acc1);
          }
        }
      }
    }
    const float dot = Reduce(_mm256_add_ps(acc0, acc1)) - Reduce(mins) + (min0 + min1);
    y[o - first] = accumulate ? y[o - first] + dot : dot;
  }
}
#endif

void Int8MatvecRows(std::uint32_t encoding, const std::byte* packed, std::size_t row_bytes, const std::int8_t* xq,
                    const float* xs, const float* xsum, float* y, std::size_t in, std::size_t first, std::size_t last,
                    bool accumulate) {
  WithEncoding(encoding, [&]<std::uint32_t kType>() {
    if constexpr (kType != kF16 && kType != kBF16) {
#ifdef ROPEKIT_INT8_X86
      Int8MatvecRowsX86<kType>(packed, row_bytes, xq, xs, xsum, y, in, first, last, accumulate);
#else
      Int8MatvecRowsFor<kType>(packed, row_bytes, xq, xs, xsum, y, in, first, last, accumulate);
#endif
    }
  });
#undef ROPEKIT_INT8_X86
}

double LogSumExp(const float* row, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  float max = row[0];
  std::size_t i = 0;
  if (n >= lanes) {
    auto m = hn::LoadU(d, row);
    for (i = lanes; i + lanes <= n; i += lanes) m = hn::Max(m, hn::LoadU(d, row + i));
    max = hn::GetLane(hn::MaxOfLanes(d, m));
  }
  for (; i < n; ++i) max = row[i] > max ? row[i] : max;
  const auto vmax = hn::Set(d, max);
  // Each lane sums at most kBlock terms in float32 (each in (0, 1]: relative error ≤ kBlock·2^-24), then the
  // block's lanes go into a float64 sum.
  constexpr std::size_t kBlock = 16;
  double sum = 0;
  i = 0;
  while (i + lanes <= n) {
    auto block = hn::Zero(d);
    for (std::size_t k = 0; k < kBlock && i + lanes <= n; ++k, i += lanes) {
      block = hn::Add(block, hn::Exp(d, hn::Sub(hn::LoadU(d, row + i), vmax)));
    }
    sum += double(hn::GetLane(hn::SumOfLanes(d, block)));
  }
  // The rest one by one, through a vector padded with −FLT_MAX (exp → 0).
  if (i < n) {
    HWY_ALIGN float tail[hn::MaxLanes(d)];
    for (std::size_t j = 0; j < lanes; ++j) tail[j] = i + j < n ? row[i + j] : -hwy::HighestValue<float>();
    sum += double(hn::GetLane(hn::SumOfLanes(d, hn::Exp(d, hn::Sub(hn::Load(d, tail), vmax)))));
  }
  return double(max) + std::log(sum);
}

}  // namespace HWY_NAMESPACE
}  // namespace ropekit::lab
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ropekit::lab {

HWY_EXPORT(MatvecRows);
HWY_EXPORT(MatvecPackedRows);
HWY_EXPORT(WidenRows);
HWY_EXPORT(LogSumExp);
HWY_EXPORT(Int8MatvecRows);
HWY_EXPORT(QuantizeInt8);

void matvec_packed_rows(const WeightMatrix& w, const float* x, float* y, std::size_t first, std::size_t last,
                        bool accumulate) {
  HWY_DISPATCH_TABLE(MatvecPackedRows)
  [cpu::simd_dispatch_index()](static_cast<std::uint32_t>(w.encoding), w.packed, w.row_bytes, x, y, std::size_t(w.cols),
                               first, last, accumulate);
}

void widen_rows(const WeightMatrix& w, std::size_t first, std::size_t count, float* out) {
  HWY_DISPATCH_TABLE(WidenRows)
  [cpu::simd_dispatch_index()](static_cast<std::uint32_t>(w.encoding), w.packed, w.row_bytes, std::size_t(w.cols),
                               first, count, out);
}

void matvec_rows(const float* w, const float* x, float* y, std::size_t in, std::size_t first, std::size_t last,
                 bool accumulate) {
  HWY_DISPATCH_TABLE(MatvecRows)[cpu::simd_dispatch_index()](w, x, y, in, first, last, accumulate);
}

bool int8_rows(WeightEncoding encoding) { return detail::quant_type(static_cast<std::uint32_t>(encoding)) != nullptr; }

void quantize_int8(std::span<const float> x, Int8Vector& out) {
  const std::size_t groups = x.size() / 32;
  out.q.resize(x.size());
  out.scale.resize(groups);
  out.sum.resize(groups);
  HWY_DISPATCH_TABLE(QuantizeInt8)
  [cpu::simd_dispatch_index()](x.data(), x.size(), out.q.data(), out.scale.data(), out.sum.data());
}

void int8_matvec_rows(const WeightMatrix& w, const Int8Vector& x, float* y, std::size_t first, std::size_t last,
                      bool accumulate) {
  HWY_DISPATCH_TABLE(Int8MatvecRows)
  [cpu::simd_dispatch_index()](static_cast<std::uint32_t>(w.encoding), w.packed, w.row_bytes, x.q.data(),
                               x.scale.data(), x.sum.data(), y, std::size_t(w.cols), first, last, accumulate);
}

double log_sum_exp(std::span<const float> row) {
  return HWY_DISPATCH_TABLE(LogSumExp)[cpu::simd_dispatch_index()](row.data(), row.size());
}

}  // namespace ropekit::lab
#endif  // HWY_ONCE
