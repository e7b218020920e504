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

// The block type of ggml type id `type`; nullptr for a type that is not one of the six.
const QuantType* quant_type(std::uint32_t type);

// `blocks` blocks of type `q` at src → blocks · q.block_values floats at out.
void dequantize(const QuantType& q, const std::byte* src, std::uint64_t blocks, float* out);

}  // namespace ropekit::detail
