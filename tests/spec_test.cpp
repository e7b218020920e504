// The lane index map (every layout spelled out by hand) and the storage conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "expect_error.hpp"
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

// The variant descriptions (ropekit/variants.hpp) drive names, validation and the readers' keys: one
// description per variant, found by its name; the fields a value yields are its description's, in order;
// a bad value of a described field is refused naming "<rope_type>.<key>", as the description's rule says.
TEST(Variants, EachIsDescribedOnceAndItsFieldsDriveValidation) {
  const std::vector<Scaling> one_of_each = {
      scaling::None{},
      scaling::Linear{2.0},
      scaling::Ntk{2.0},
      scaling::DynamicNtk{2.0, 4096},
      scaling::Yarn{.factor = 4.0, .original_max_position_embeddings = 4096},
      scaling::Llama3{8.0, 1.0, 4.0, 8192},
      scaling::LongRope{std::vector<double>(32, 1.0), std::vector<double>(32, 2.0), 4096, 32.0, std::nullopt},
      scaling::Proportional{0.25, 1.0},
      scaling::FreqFactors{std::vector<double>(32, 1.0)},
      scaling::QwenDynamicNtk{8192},
      scaling::HunyuanAlpha{1000.0, 1.0, 32768},
  };
  ASSERT_EQ(one_of_each.size(), variant_infos().size());
  for (const Scaling& scaling : one_of_each) {
    const VariantInfo& info = variant_info(scaling);
    SCOPED_TRACE(std::string(info.name));
    EXPECT_EQ(variant_infos()[scaling.index()], &info);
    EXPECT_EQ(find_variant(info.name), &info);
    EXPECT_EQ(rope_type_name(scaling), info.name);
    EXPECT_FALSE(info.formula.empty());
    std::vector<std::string_view> keys;
    for_each_field(scaling, [&](const FieldInfo& field, const FieldValue&) { keys.push_back(field.key); });
    ASSERT_EQ(keys.size(), info.fields.size());
    for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(keys[i], info.fields[i].key);
    const Spec spec{.head_dim = 64, .rotary_dim = 64, .base = 1e4, .pairing = Pairing::Half, .scaling = scaling};
    EXPECT_NO_THROW(spec.validate());
  }
  EXPECT_EQ(find_variant("no_such_type"), nullptr);
  // Defaults live in the structs (written once) and the description says which fields have them.
  EXPECT_EQ(scaling::Yarn{}.beta_fast, 32.0);
  EXPECT_EQ(find_variant("yarn")->fields[2].key, "beta_fast");
  EXPECT_EQ(find_variant("yarn")->fields[2].presence, Presence::Default);
  // Each rule, by the field's name.
  Spec bad{.head_dim = 64, .rotary_dim = 64, .base = 1e4, .pairing = Pairing::Half};
  bad.scaling = scaling::Yarn{.factor = -1.0, .original_max_position_embeddings = 4096};
  EXPECT_ERROR(bad.validate(), "yarn.factor = -1: must be a finite number > 0");
  bad.scaling = scaling::Yarn{.factor = 4.0, .original_max_position_embeddings = 4096, .mscale = -0.5};
  EXPECT_ERROR(bad.validate(), "yarn.mscale = -0.5: must be a finite number >= 0");
  bad.scaling = scaling::Proportional{1.5, 1.0};
  EXPECT_ERROR(bad.validate(), "proportional.partial_rotary_factor = 1.5: must be in (0, 1]");
  bad.scaling = scaling::DynamicNtk{2.0, 0};
  EXPECT_ERROR(bad.validate(), "dynamic.max_position_embeddings = 0: must be > 0");
  bad.scaling = scaling::FreqFactors{std::vector<double>(31, 1.0)};
  EXPECT_ERROR(bad.validate(), "freq_factors.divisors has 31 entries");
}

}  // namespace
