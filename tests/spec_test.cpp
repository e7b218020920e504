// The lane index map (every layout spelled out by hand) and the storage conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

TEST(PairMap, HalfPairsLaneJWithJPlusHalfRotaryDim) {
  const PairMap m = make_pair_map({.head_dim = 10, .rotary_dim = 8, .base = 1e4, .pairing = Pairing::Half});
  EXPECT_EQ(m.lane_a, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(m.lane_b, (std::vector<int>{4, 5, 6, 7}));  // lanes 8, 9 pass through
  EXPECT_EQ(m.num_axes, 1);
}

TEST(PairMap, InterleavedPairsNeighbours) {
  const PairMap m = make_pair_map({.head_dim = 8, .rotary_dim = 6, .base = 1e4, .pairing = Pairing::Interleaved});
  EXPECT_EQ(m.lane_a, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(m.lane_b, (std::vector<int>{1, 3, 5}));
}

TEST(PairMap, MropeSectionedAndInterleavedStreams) {
  Spec s{.head_dim = 24,
         .rotary_dim = 24,
         .base = 1e4,
         .pairing = Pairing::Half,
         .mrope = MRope{{4, 4, 4}, MRopeLayout::Sectioned}};
  EXPECT_EQ(make_pair_map(s).axis, (std::vector<std::uint8_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  EXPECT_EQ(make_pair_map(s).num_axes, 3);
  // Qwen3-VL: t h w t h w ... while each section lasts, then t.
  s.mrope = MRope{{6, 3, 3}, MRopeLayout::Interleaved};
  EXPECT_EQ(make_pair_map(s).axis, (std::vector<std::uint8_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 0}));
  s.mrope = MRope{{2, 5, 5}, MRopeLayout::Interleaved};
  EXPECT_EQ(make_pair_map(s).axis, (std::vector<std::uint8_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
}

TEST(Dtype, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_float(0xc040), -3.0f);
}

TEST(Dtype, F16ConversionsAreIeee) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.5f), 0xc100);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);                      // rounds to infinity
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));         // smallest subnormal
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(Dtype, Names) {
  EXPECT_EQ(to_string(DType::BF16), "bfloat16");
  EXPECT_EQ(element_size(DType::F32), 4);
  EXPECT_EQ(to_string(AngleMode::HfCompat), "hf_compat");
}

}  // namespace
