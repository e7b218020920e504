// The lab's Highway kernels (lab/kernels.hpp), compiled once per target by foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lab/kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
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

double log_sum_exp(std::span<const float> row) {
  return HWY_DISPATCH_TABLE(LogSumExp)[cpu::simd_dispatch_index()](row.data(), row.size());
}

}  // namespace ropekit::lab
#endif  // HWY_ONCE
