// ggml's quantized blocks dequantized by the GGUF loader (lab/quants.hpp) against llama.cpp's gguf package
// (tests/data/quants/, scripts/golden_quants.py): every value bit for bit, for each of the six block types.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lab/quants.hpp"

namespace {

std::vector<char> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Quants, DequantizeEqualsGgufPyBitForBit) {
  const std::filesystem::path dir = std::filesystem::path(ROPEKIT_REPO_DIR) / "tests/data/quants";
  int types = 0;
  for (const std::uint32_t id : {8u, 2u, 3u, 12u, 13u, 14u}) {
    const ropekit::detail::QuantType* q = ropekit::detail::quant_type(id);
    ASSERT_NE(q, nullptr) << id;
    SCOPED_TRACE(q->name);
    const std::vector<char> blocks = read_bytes(dir / (std::string(q->name) + ".blocks"));
    const std::vector<char> want_bytes = read_bytes(dir / (std::string(q->name) + ".f32"));
    ASSERT_GT(blocks.size(), 0u);
    ASSERT_EQ(blocks.size() % std::size_t(q->block_bytes), 0u);
    const std::size_t n = blocks.size() / std::size_t(q->block_bytes);
    ASSERT_EQ(want_bytes.size(), n * std::size_t(q->block_values) * 4);
    std::vector<float> got(n * std::size_t(q->block_values));
    ropekit::detail::dequantize(*q, reinterpret_cast<const std::byte*>(blocks.data()), n, got.data());
    for (std::size_t i = 0; i < got.size(); ++i) {
      std::uint32_t g, w;
      std::memcpy(&g, &got[i], 4);
      std::memcpy(&w, want_bytes.data() + 4 * i, 4);
      ASSERT_EQ(g, w) << "value " << i << " (block " << i / std::size_t(q->block_values) << ")";
    }
    ++types;
  }
  EXPECT_EQ(types, 6);
  EXPECT_EQ(ropekit::detail::quant_type(0), nullptr);  // F32 is not a block type
}

}  // namespace
