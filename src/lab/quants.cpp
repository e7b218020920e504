// ggml's quantized blocks to float32 (lab/quants.hpp). Layouts, per block (little endian; f16 = IEEE binary16):
//   Q8_0  34 bytes: d f16, 32 × int8 q                      x = q · d
//   Q4_0  18 bytes: d f16, 16 bytes of nibbles              x[j] = (lo(b[j]) − 8) · d, x[j + 16] = (hi(b[j]) − 8) · d
//   Q4_1  20 bytes: d f16, m f16, 16 bytes of nibbles       x[j] = lo(b[j]) · d + m, x[j + 16] = hi(b[j]) · d + m
//   Q5_0  22 bytes: d f16, qh u32 (bit v: value v's fifth bit), 16 bytes of nibbles
//                                                           x[v] = ((nibble | fifth << 4) − 16) · d
//   Q5_1  24 bytes: d f16, m f16, qh u32, 16 bytes of nibbles   x[v] = (nibble | fifth << 4) · d + m
//   Q4_K 144 bytes per 256: d, dmin f16, 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32, 128 bytes of
//        nibbles (32 bytes per pair of sub-blocks: low nibbles the first, high the second)
//                                                           x = (d · sc) · q − (dmin · m)
//   Q5_K 176 bytes per 256: as Q4_K with 32 bytes of high bits (bit s of byte l: the fifth bit of sub-block s, lane l)
//   Q6_K 210 bytes per 256: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 int8 scales (sub-blocks of 16), d
//                                                           x = (d · scale) · (q − 32)
#include "lab/quants.hpp"

#include <cstring>

#include "ropekit/dtype.hpp"

namespace ropekit::detail {
namespace {

float f16_at(const std::byte* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_float(h);
}

unsigned u8(const std::byte* p, int i) { return std::to_integer<unsigned>(p[i]); }

// The K-quants with 4-bit lows: Q4_K (no high bits) and Q5_K (qh: 32 bytes of fifth bits).
void dequantize_k4(const std::byte* block, const std::byte* scales, const std::byte* qh, const std::byte* qs,
                   float* out) {
  const float d = f16_at(block), dmin = f16_at(block + 2);
  for (int s = 0; s < 8; ++s) {
    unsigned sc, m;
    scale_min(scales, s, sc, m);
    const float ds = d * static_cast<float>(sc), ms = dmin * static_cast<float>(m);
    const std::byte* nibbles = qs + 32 * (s / 2);
    for (int l = 0; l < 32; ++l) {
      unsigned q = s % 2 == 0 ? u8(nibbles, l) & 0x0Fu : u8(nibbles, l) >> 4;
      if (qh != nullptr) q |= ((u8(qh, l) >> s) & 1u) << 4;
      out[32 * s + l] = ds * static_cast<float>(q) - ms;
    }
  }
}

}  // namespace

void dequantize(const QuantType& q, const std::byte* src, std::uint64_t blocks, float* out) {
  for (std::uint64_t b = 0; b < blocks; ++b, src += q.block_bytes, out += q.block_values) {
    switch (q.type) {
      case 8: {  // Q8_0
        const float d = f16_at(src);
        for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<std::int8_t>(u8(src + 2, j))) * d;
        break;
      }
      case 2: {  // Q4_0
        const float d = f16_at(src);
        for (int j = 0; j < 16; ++j) {
          out[j] = d * static_cast<float>(static_cast<int>(u8(src + 2, j) & 0x0Fu) - 8);
          out[j + 16] = d * static_cast<float>(static_cast<int>(u8(src + 2, j) >> 4) - 8);
        }
        break;
      }
      case 3: {  // Q4_1
        const float d = f16_at(src), m = f16_at(src + 2);
        for (int j = 0; j < 16; ++j) {
          out[j] = d * static_cast<float>(u8(src + 4, j) & 0x0Fu) + m;
          out[j + 16] = d * static_cast<float>(u8(src + 4, j) >> 4) + m;
        }
        break;
      }
      case 6:    // Q5_0
      case 7: {  // Q5_1
        const bool q5_1 = q.type == 7;
        const float d = f16_at(src), m = q5_1 ? f16_at(src + 2) : 0.0f;
        std::uint32_t qh;
        std::memcpy(&qh, src + (q5_1 ? 4 : 2), 4);
        const std::byte* qs = src + (q5_1 ? 8 : 6);
        for (int j = 0; j < 16; ++j) {
          const unsigned lo = (u8(qs, j) & 0x0Fu) | (((qh >> j) & 1u) << 4);
          const unsigned hi = (u8(qs, j) >> 4) | (((qh >> (j + 16)) & 1u) << 4);
          if (q5_1) {
            out[j] = d * static_cast<float>(lo) + m;
            out[j + 16] = d * static_cast<float>(hi) + m;
          } else {
            out[j] = d * static_cast<float>(static_cast<int>(lo) - 16);
            out[j + 16] = d * static_cast<float>(static_cast<int>(hi) - 16);
          }
        }
        break;
      }
      case 12:  // Q4_K
        dequantize_k4(src, src + 4, nullptr, src + 16, out);
        break;
      case 13:  // Q5_K
        dequantize_k4(src, src + 4, src + 16, src + 48, out);
        break;
      case 14: {  // Q6_K
        const std::byte *ql = src, *qh = src + 128, *scales = src + 192;
        const float d = f16_at(src + 208);
        for (int r = 0; r < 8; ++r) {  // rows of 32 values: half h = r / 4, nibble (r / 2) % 2, part r % 2
          const int h = r / 4, nibble = (r / 2) % 2, part = r % 2, shift = 2 * (r % 4);
          for (int l = 0; l < 32; ++l) {
            const unsigned lo = (u8(ql, 64 * h + 32 * part + l) >> (4 * nibble)) & 0x0Fu;
            const unsigned hi = (u8(qh, 32 * h + l) >> shift) & 0x03u;
            const int v = 32 * r + l;
            const float ds = d * static_cast<float>(static_cast<std::int8_t>(u8(scales, v / 16)));
            out[v] = ds * static_cast<float>(static_cast<int>(lo | (hi << 4)) - 32);
          }
        }
        break;
      }
      default: break;
    }
  }
}

}  // namespace ropekit::detail
