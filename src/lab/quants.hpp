// The quantized ggml block types the GGUF loader reads (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), dequantized to
// float32 as gguf-py's dequantize (the oracle the tests hold them to, bit for bit) and llama.cpp's dequantize_row_*
// compute them: each product rounded to float32 on its own (no fused multiply-add; the build contracts nothing).
// Internal.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ropekit::detail {

struct QuantType {
  std::uint32_t type;  // ggml's type id
  const char* name;
  int block_values;  // values per block
  int block_bytes;   // bytes per block
};

inline constexpr QuantType kQuantTypes[] = {{2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},   {6, "Q5_0", 32, 22},
                                            {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},   {12, "Q4_K", 256, 144},
                                            {13, "Q5_K", 256, 176}, {14, "Q6_K", 256, 210}};

// The block type of ggml type id `type`; nullptr for a type that is not one of the eight. A constant expression, so
// the per-target kernels (lab/kernels.cpp) size their blocks from the same table.
constexpr const QuantType* quant_type(std::uint32_t type) {
  for (const QuantType& q : kQuantTypes) {
    if (q.type == type) return &q;
  }
  return nullptr;
}

// Q4_K's and Q5_K's 6-bit scale and min of sub-block s from the 12 packed bytes (the scalar dequantization and the
// per-target kernels read them alike).
inline void scale_min(const std::byte* b, int s, unsigned& sc, unsigned& m) {
  const auto u8 = [](const std::byte* p, int i) { return std::to_integer<unsigned>(p[i]); };
  if (s < 4) {
    sc = u8(b, s) & 63u;
    m = u8(b, s + 4) & 63u;
  } else {
    sc = (u8(b, s + 4) & 0x0Fu) | ((u8(b, s - 4) >> 6) << 4);
    m = (u8(b, s + 4) >> 4) | ((u8(b, s) >> 6) << 4);
  }
}

// `blocks` blocks of type `q` at src → blocks · q.block_values floats at out.
void dequantize(const QuantType& q, const std::byte* src, std::uint64_t blocks, float* out);

}  // namespace ropekit::detail
