// ggml's quantized blocks dequantized by the GGUF loader (lab/quants.hpp) against llama.cpp's gguf package
// (tests/data/quants/, scripts/golden_quants.py): every value bit for bit, for each of the eight block types; the
// runner's vector kernels over packed rows against that scalar reference on every Highway target.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <hwy/targets.h>

#include <random>

#include "lab/kernels.hpp"
#include "lab/quants.hpp"
#include "ropekit/dtype.hpp"
#include "ropekit/model.hpp"

namespace {

std::vector<char> read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The packed encodings the runner's kernels take: the eight block types (first), then F16 and BF16.
struct Encoding {
  ropekit::WeightEncoding encoding;
  std::size_t block_values, block_bytes;
  std::vector<std::size_t> scales;  // byte offsets of the block's f16 scales
};
const std::vector<Encoding> kEncodings = {
    {ropekit::WeightEncoding::Q8_0, 32, 34, {0}},      {ropekit::WeightEncoding::Q4_0, 32, 18, {0}},
    {ropekit::WeightEncoding::Q4_1, 32, 20, {0, 2}},   {ropekit::WeightEncoding::Q5_0, 32, 22, {0}},
    {ropekit::WeightEncoding::Q5_1, 32, 24, {0, 2}},   {ropekit::WeightEncoding::Q4_K, 256, 144, {0, 2}},
    {ropekit::WeightEncoding::Q5_K, 256, 176, {0, 2}}, {ropekit::WeightEncoding::Q6_K, 256, 210, {208}},
    {ropekit::WeightEncoding::F16, 1, 2, {0}},         {ropekit::WeightEncoding::BF16, 1, 2, {}},
};

// `values` values of encoding e as random bytes, each block's f16 scales drawn from scale() (a 16-bit pattern).
template <class Scale>
std::vector<std::byte> random_blocks(const Encoding& e, std::size_t values, std::mt19937& rng, Scale&& scale) {
  std::vector<std::byte> packed(values / e.block_values * e.block_bytes);
  for (std::byte& b : packed) b = std::byte(rng() & 0xFFu);
  for (std::size_t at = 0; at < packed.size(); at += e.block_bytes) {
    for (const std::size_t offset : e.scales) {
      const std::uint16_t h = scale();
      std::memcpy(&packed[at + offset], &h, 2);
    }
  }
  return packed;
}

TEST(Quants, DequantizeEqualsGgufPyBitForBit) {
  const std::filesystem::path dir = std::filesystem::path(ROPEKIT_REPO_DIR) / "tests/data/quants";
  int types = 0;
  for (const std::uint32_t id : {8u, 2u, 3u, 6u, 7u, 12u, 13u, 14u}) {
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
  EXPECT_EQ(types, 8);
  EXPECT_EQ(ropekit::detail::quant_type(0), nullptr);  // F32 is not a block type
}

// The runner's packed-row kernels (lab/kernels.hpp), on every Highway target this CPU runs: widen_rows against
// detail::dequantize (held to gguf-py above) and the exact widening of F16/BF16, bit for bit; matvec_packed_rows
// against matvec_rows over the widened rows, bit for bit. Random blocks with every finite f16 scale pattern class
// (normal, subnormal, ±0), rows of several lengths (F16/BF16 also of lengths that are no vector multiple).
TEST(Quants, PackedRowKernelsEqualTheReferenceOnEveryTarget) {
  const std::vector<Encoding>& encodings = kEncodings;
  std::mt19937 rng(17);
  // A finite f16 (or bf16) pattern: any sign and mantissa, an exponent below all-ones; a quarter are subnormal or 0.
  const auto finite16 = [&](bool bf16) {
    const std::uint16_t sign = std::uint16_t(rng() & 0x8000u);
    if (bf16) return std::uint16_t(sign | std::uint16_t((rng() % 0xFFu) << 7) | std::uint16_t(rng() & 0x7Fu));
    const auto exponent = static_cast<unsigned>(rng() % 4 == 0 ? 0 : rng() % 31);
    return std::uint16_t(sign | (exponent << 10) | static_cast<unsigned>(rng() & 0x3FFu));
  };
  const std::vector<std::int64_t> targets = hwy::SupportedAndGeneratedTargets();
  int checked = 0;
  for (const std::int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Encoding& e : encodings) {
      SCOPED_TRACE(std::string(ropekit::to_string(e.encoding)));
      const bool values = e.block_values == 1;
      for (const std::size_t cols : values ? std::vector<std::size_t>{37, 64, 300, 576}
                                           : std::vector<std::size_t>{e.block_values, 3 * e.block_values, 1536}) {
        const std::size_t rows = 7, row_bytes = cols / e.block_values * e.block_bytes;
        std::vector<std::byte> packed = random_blocks(e, rows * cols, rng, [&] { return finite16(false); });
        if (e.encoding == ropekit::WeightEncoding::BF16) {
          for (std::size_t at = 0; at < packed.size(); at += 2) {
            const std::uint16_t h = finite16(true);
            std::memcpy(&packed[at], &h, 2);
          }
        }
        std::vector<float> want(rows * cols);
        for (std::size_t r = 0; r < rows; ++r) {
          const std::byte* row = packed.data() + r * row_bytes;
          float* out = want.data() + r * cols;
          if (values) {
            for (std::size_t i = 0; i < cols; ++i) {
              std::uint16_t h;
              std::memcpy(&h, row + 2 * i, 2);
              out[i] =
                  e.encoding == ropekit::WeightEncoding::F16 ? ropekit::f16_to_float(h) : ropekit::bf16_to_float(h);
            }
          } else {
            ropekit::detail::dequantize(*ropekit::detail::quant_type(std::uint32_t(e.encoding)), row,
                                        cols / e.block_values, out);
          }
        }
        ropekit::WeightMatrix w;
        w.encoding = e.encoding;
        w.rows = std::int64_t(rows);
        w.cols = std::int64_t(cols);
        w.packed = packed.data();
        w.row_bytes = row_bytes;
        std::vector<float> got(rows * cols, -1.0f);
        ropekit::lab::widen_rows(w, 0, rows, got.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "cols " << cols;
        std::vector<float> x(cols);
        for (float& v : x) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
        for (const bool accumulate : {false, true}) {
          std::vector<float> y_want(rows, 0.5f), y_got(rows - 2, 0.5f);
          ropekit::lab::matvec_rows(want.data(), x.data(), y_want.data(), cols, 0, rows, accumulate);
          ropekit::lab::matvec_packed_rows(w, x.data(), y_got.data(), 1, rows - 1, accumulate);
          ASSERT_EQ(std::memcmp(y_got.data(), y_want.data() + 1, y_got.size() * 4), 0)
              << "cols " << cols << ", accumulate " << accumulate;
        }
        ++checked;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(checked, int(targets.size()) * (8 * 3 + 2 * 4));
}

// The int8 decode (lab::int8_matvec_rows, RunnerOptions::int8_activations) on every Highway target, each of the eight
// block types: the activations' quantization within its contract, and each row's result within the stated bound of the
// float64 dot product of the dequantized row and x. Then x whose every value is a multiple of its group's scale
// (s_g = 2^-7: the quantization is exact), where only the float32 roundings remain.
TEST(Quants, Int8DecodeIsWithinItsStatedBoundOnEveryTarget) {
  const std::vector<Encoding> encodings(kEncodings.begin(), kEncodings.begin() + 8);  // the block types
  EXPECT_FALSE(ropekit::lab::int8_rows(ropekit::WeightEncoding::F32));
  EXPECT_FALSE(ropekit::lab::int8_rows(ropekit::WeightEncoding::F16));
  EXPECT_FALSE(ropekit::lab::int8_rows(ropekit::WeightEncoding::BF16));
  std::mt19937 rng(23);
  // Scales of a realistic spread (f16 normals from 2^-14 to 2^2), so no block's terms underflow.
  const auto scale16 = [&] {
    return ropekit::float_to_f16(std::ldexp(1.0f + float(rng() % 1024) / 1024.0f, int(rng() % 17) - 14) *
                                 (rng() % 2 == 0 ? 1.0f : -1.0f));
  };
  const std::vector<std::int64_t> targets = hwy::SupportedAndGeneratedTargets();
  int checked = 0;
  for (const std::int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Encoding& e : encodings) {
      SCOPED_TRACE(std::string(ropekit::to_string(e.encoding)));
      ASSERT_TRUE(ropekit::lab::int8_rows(e.encoding));
      const ropekit::detail::QuantType& type = *ropekit::detail::quant_type(std::uint32_t(e.encoding));
      for (const std::size_t cols : {e.block_values, 3 * e.block_values, std::size_t{1536}}) {
        const std::size_t rows = 7, row_bytes = cols / e.block_values * e.block_bytes;
        std::vector<std::byte> packed = random_blocks(e, rows * cols, rng, scale16);
        // Each value's dequantized weight and the magnitude of its block's minimum term (Q4_1/Q5_1: m; Q4_K/Q5_K:
        // dmin · m of its sub-block).
        std::vector<float> w(rows * cols), minimum(rows * cols, 0.0f);
        ropekit::detail::dequantize(type, packed.data(), rows * cols / e.block_values, w.data());
        for (std::size_t b = 0; b < rows * cols / e.block_values; ++b) {
          const std::byte* block = packed.data() + b * e.block_bytes;
          for (std::size_t v = 0; v < e.block_values; ++v) {
            float& m = minimum[b * e.block_values + v];
            std::uint16_t h;
            std::memcpy(&h, block + 2, 2);
            if (e.encoding == ropekit::WeightEncoding::Q4_1 || e.encoding == ropekit::WeightEncoding::Q5_1) {
              m = std::fabs(ropekit::f16_to_float(h));

            } else if (e.encoding == ropekit::WeightEncoding::Q4_K || e.encoding == ropekit::WeightEncoding::Q5_K) {
              unsigned sc, mm;
              ropekit::detail::scale_min(block + 4, int(v / 32), sc, mm);
              m = std::fabs(ropekit::f16_to_float(h) * float(mm));
            }
          }
        }
        ropekit::WeightMatrix wm;
        wm.encoding = e.encoding;
        wm.rows = std::int64_t(rows);
        wm.cols = std::int64_t(cols);
        wm.packed = packed.data();
        wm.row_bytes = row_bytes;
        for (const bool exact : {false, true}) {
          SCOPED_TRACE(exact ? "x exact in 8 bits" : "x uniform in [-1, 1]");
          std::vector<float> x(cols);
          for (std::size_t i = 0; i < cols; ++i) {
            if (exact) {  // k · 2^-7, each group's first value ±127 · 2^-7: s_g = 2^-7 and x_i / s_g = k exactly
              const int k = i % 32 == 0 ? (rng() % 2 == 0 ? 127 : -127) : int(rng() % 255) - 127;
              x[i] = std::ldexp(float(k), -7);
            } else {
              x[i] = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
            }
          }
          ropekit::lab::Int8Vector xq;
          ropekit::lab::quantize_int8(x, xq);
          ASSERT_EQ(xq.q.size(), cols);
          ASSERT_EQ(xq.scale.size(), cols / 32);
          for (std::size_t i = 0; i < cols; ++i) {
            const double s = xq.scale[i / 32];
            ASSERT_LE(std::abs(xq.q[i]), 127);
            ASSERT_LE(std::fabs(double(x[i]) - s * xq.q[i]), s * (0.5 + 0x1p-16)) << i;
            if (exact) {
              ASSERT_EQ(s * xq.q[i], double(x[i])) << i;
            }
          }
          for (std::size_t g = 0; g < cols / 32; ++g) {
            int total = 0;
            for (std::size_t i = 0; i < 32; ++i) total += xq.q[32 * g + i];
            EXPECT_EQ(xq.sum[g], xq.scale[g] * float(total));
          }
          for (const bool accumulate : {false, true}) {
            std::vector<float> y(rows - 2, 0.5f);
            ropekit::lab::int8_matvec_rows(wm, xq, y.data(), 1, rows - 1, accumulate);
            for (std::size_t o = 1; o + 1 < rows; ++o) {
              double want = 0, quantization = 0, magnitude = 0;
              for (std::size_t i = 0; i < cols; ++i) {
                const double wi = w[o * cols + i], xhat = double(xq.scale[i / 32]) * xq.q[i];
                want += wi * double(x[i]);
                quantization += double(xq.scale[i / 32]) * (0.5 + 0x1p-16) * std::fabs(wi);
                magnitude += (std::fabs(wi) + 2.0 * minimum[o * cols + i]) * std::fabs(xhat);
              }
              double bound = (exact ? 0.0 : quantization) + (double(cols) / 32 + 4) * 0x1p-23 * magnitude;
              if (accumulate) {  // and the one addition of the 0.5 already there
                want += 0.5;
                bound += 0x1p-24 * (std::fabs(want) + bound);
              }
              EXPECT_LE(std::fabs(double(y[o - 1]) - want), bound)
                  << "cols " << cols << ", row " << o << ", accumulate " << accumulate;
            }
          }
        }
        ++checked;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(checked, int(targets.size()) * 8 * 3);
  // A value that is not finite makes its group's scale NaN, and the products it enters NaN.
  std::vector<float> x(64, 0.25f);
  x[40] = std::numeric_limits<float>::infinity();
  ropekit::lab::Int8Vector xq;
  ropekit::lab::quantize_int8(x, xq);
  EXPECT_EQ(xq.scale[0], 0.25f / 127.0f);
  EXPECT_TRUE(std::isnan(xq.scale[1]));
  std::vector<std::byte> row(2 * 34, std::byte{1});
  ropekit::WeightMatrix wm;
  wm.encoding = ropekit::WeightEncoding::Q8_0;
  wm.rows = 1;
  wm.cols = 64;
  wm.packed = row.data();
  wm.row_bytes = 68;
  float y = 0;
  ropekit::lab::int8_matvec_rows(wm, xq, &y, 0, 1, false);
  EXPECT_TRUE(std::isnan(y));
}

}  // namespace
