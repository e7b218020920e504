// GGUF metadata → Spec. The tests write small GGUF files the way llama.cpp's converter would for a
// model and check that the Spec (and so the plan) equals the one from the model's config.json,
// except for what llama.cpp itself does differently (the pairing of "llama", Llama 3's smoothing
// shipped as per-pair divisors). Then every truncation and each malformed field.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>

#include "gguf_writer.hpp"
#include "golden.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using gguf_test::Writer;
using ropekit::Error;
namespace scaling = ropekit::scaling;

ropekit::ModelPositions read(const Writer& w, ropekit::ConfigOptions options = {}) {
  const std::vector<std::byte> bytes = w.bytes();
  return ropekit::read_gguf(bytes, options, "test.gguf");
}

Writer base_writer(const std::string& arch, float freq_base, std::uint32_t dims, std::uint32_t embedding,
                   std::uint32_t heads) {
  Writer w;
  w.str("general.architecture", arch);
  w.u32(arch + ".context_length", 131072);
  w.u32(arch + ".embedding_length", embedding);
  w.u32(arch + ".attention.head_count", heads);
  w.f32(arch + ".rope.freq_base", freq_base);
  w.u32(arch + ".rope.dimension_count", dims);
  return w;
}

// llama.cpp's convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors): Llama 3 smoothing as
// per-pair divisors of the float32 default frequencies, computed in Python floats, stored as F32.
std::vector<float> llama3_rope_freqs(double base, int dim, double factor, double low, double high, double old) {
  std::vector<float> out;
  for (int i = 0; i < dim / 2; ++i) {
    const float freq = float(1.0 / double(float(std::pow(double(float(base)), double(float(2 * i) / float(dim))))));
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < old / high) {
      out.push_back(1.0f);
    } else if (wavelen > old / low) {
      out.push_back(float(factor));
    } else {
      const double smooth = (old / wavelen - low) / (high - low);
      out.push_back(float(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

TEST(Gguf, Llama31ReadsAsInterleavedWithRopeFreqsMatchingTheLlama3Plan) {
  Writer w = base_writer("llama", 500000.0f, 128, 4096, 32);
  w.tensor_f32("rope_freqs.weight", llama3_rope_freqs(500000.0, 128, 8, 1, 4, 8192));
  const ropekit::ModelPositions model = read(w);
  const ropekit::Spec& spec = model.layer().spec;
  EXPECT_EQ(model.model_type, "llama");
  EXPECT_EQ(spec.pairing, ropekit::Pairing::Interleaved);  // converter-permuted q/k rows
  ASSERT_TRUE(std::holds_alternative<scaling::FreqFactors>(spec.scaling));
  const ropekit::Plan gguf = ropekit::make_plan(spec);
  const ropekit::Plan hf = ropekit::make_plan(ropekit::read_preset("llama-3.1-8b").layer().spec);
  // Same smoothing, two float32 evaluation orders (HF's blend vs ggml's divide by the stored divisor):
  // each is a few float32 roundings of one expression; the plan contract (2 ulp) holds.
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < hf.inv_freq.size(); ++i) {
    worst = std::max(worst, golden::ulp_distance(float(gguf.inv_freq[i]), float(hf.inv_freq[i])));
  }
  std::printf("GGUF rope_freqs vs HF llama3 inv_freq: worst %lld ulp\n", static_cast<long long>(worst));
  EXPECT_LE(worst, 2);
}

TEST(Gguf, Qwen25YarnEqualsTheConfigSpec) {
  Writer w = base_writer("qwen2", 1e6f, 128, 3584, 28);
  w.str("qwen2.rope.scaling.type", "yarn");
  w.f32("qwen2.rope.scaling.factor", 4.0f);
  w.u32("qwen2.rope.scaling.original_context_length", 32768);
  const ropekit::Spec gguf = read(w).layer().spec;
  const ropekit::Spec config = ropekit::read_preset("qwen2.5-7b-instruct-yarn4").layer().spec;
  EXPECT_EQ(gguf.pairing, config.pairing);
  const ropekit::Plan a = ropekit::make_plan(gguf), b = ropekit::make_plan(config);
  EXPECT_EQ(a.inv_freq, b.inv_freq);
  EXPECT_EQ(a.cos_sin_scale, b.cos_sin_scale);
}

TEST(Gguf, DeepSeekLogMultiplierGivesUnitMagnitudeAndSoftmaxCorrection) {
  Writer w = base_writer("deepseek2", 10000.0f, 64, 7168, 128);
  w.u32("deepseek2.attention.key_length", 192);
  w.str("deepseek2.rope.scaling.type", "yarn");
  w.f32("deepseek2.rope.scaling.factor", 40.0f);
  w.u32("deepseek2.rope.scaling.original_context_length", 4096);
  w.f32("deepseek2.rope.scaling.yarn_log_multiplier", 0.1f);
  const ropekit::ModelPositions model = read(w);
  EXPECT_EQ(model.layer().rope_offset, 128);
  EXPECT_EQ(model.qk_head_dim, 192);
  const ropekit::Plan gguf = ropekit::make_plan(model.layer().spec);
  const ropekit::Plan config = ropekit::make_plan(ropekit::read_preset("deepseek-v3").layer().spec);
  EXPECT_EQ(gguf.inv_freq, config.inv_freq);
  EXPECT_EQ(gguf.cos_sin_scale, 1.0);
  EXPECT_NEAR(gguf.softmax_scale_mult, config.softmax_scale_mult, 1e-6);  // 0.1 stored as float32
}

TEST(Gguf, Phi3LongRopeFactorTensorsEqualTheConfigPlan) {
  const ropekit::Spec config = ropekit::read_preset("phi-3-mini-128k-instruct").layer().spec;
  const auto& lr = std::get<scaling::LongRope>(config.scaling);
  Writer w = base_writer("phi3", 10000.0f, 96, 3072, 32);
  w.u32("phi3.rope.scaling.original_context_length", 4096);
  const double attn = std::sqrt(1 + std::log(32.0) / std::log(4096.0));
  w.f32("phi3.rope.scaling.attn_factor", float(attn));
  w.tensor_f32("rope_factors_long.weight", std::vector<float>(lr.long_factor.begin(), lr.long_factor.end()));
  w.tensor_f32("rope_factors_short.weight", std::vector<float>(lr.short_factor.begin(), lr.short_factor.end()));
  const ropekit::Spec gguf = read(w).layer().spec;
  for (std::optional<std::int64_t> len : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{8192}}) {
    const ropekit::Plan a = ropekit::make_plan(gguf, len), b = ropekit::make_plan(config, len);
    EXPECT_EQ(a.inv_freq, b.inv_freq);
    EXPECT_EQ(a.uses_long_factors, b.uses_long_factors);
    EXPECT_NEAR(a.cos_sin_scale, b.cos_sin_scale, 1e-7);  // attn_factor stored as float32
  }
}

TEST(Gguf, Gemma3HasTwoLayerTypesAndQwen2VlSections) {
  Writer g = base_writer("gemma3", 1e6f, 256, 2560, 8);
  g.u32("gemma3.attention.key_length", 256);
  g.str("gemma3.rope.scaling.type", "linear");
  g.f32("gemma3.rope.scaling.factor", 8.0f);
  const ropekit::ModelPositions gemma = read(g);
  const ropekit::ModelPositions config = ropekit::read_preset("gemma-3-4b");
  for (const char* t : {"full_attention", "sliding_attention"}) {
    SCOPED_TRACE(t);
    EXPECT_EQ(ropekit::make_plan(gemma.layer(t).spec).inv_freq, ropekit::make_plan(config.layer(t).spec).inv_freq);
  }
  Writer q = base_writer("qwen2vl", 1e6f, 128, 3584, 28);
  q.i32_array("qwen2vl.rope.dimension_sections", {16, 24, 24, 0});
  const ropekit::Spec qs = read(q).layer().spec;
  ASSERT_TRUE(qs.mrope);
  EXPECT_EQ(qs.mrope->sections, (std::vector<int>{16, 24, 24}));
  EXPECT_EQ(qs.mrope->layout, ropekit::MRopeLayout::Sectioned);
}

TEST(Gguf, FileReaderEqualsMemoryReader) {
  Writer w = base_writer("llama", 500000.0f, 128, 4096, 32);
  w.tensor_f32("rope_freqs.weight", llama3_rope_freqs(500000.0, 128, 8, 1, 4, 8192));
  const std::vector<std::byte> bytes = w.bytes();
  const auto path = std::filesystem::temp_directory_path() / "ropekit_gguf_test.gguf";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  const ropekit::Spec from_file = ropekit::read_gguf_file(path).layer().spec;
  std::filesystem::remove(path);
  EXPECT_EQ(ropekit::make_plan(from_file).inv_freq, ropekit::make_plan(read(w).layer().spec).inv_freq);
  EXPECT_THROW(ropekit::read_gguf_file("/nonexistent.gguf"), Error);
}

void expect_error(const std::vector<std::byte>& bytes, const std::string& fragment) {
  try {
    ropekit::read_gguf(bytes, {}, "bad.gguf");
    ADD_FAILURE() << "no error, expected: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(GgufErrors, EveryTruncationIsAnErrorNeverACrash) {
  Writer w = base_writer("phi3", 10000.0f, 96, 3072, 32);
  w.u32("phi3.rope.scaling.original_context_length", 4096);
  w.tensor_f32("rope_factors_long.weight", std::vector<float>(48, 2.0f));
  w.tensor_f32("rope_factors_short.weight", std::vector<float>(48, 1.0f));
  const std::vector<std::byte> full = w.bytes();
  ASSERT_NO_THROW(ropekit::read_gguf(full));
  // Cutting the file anywhere is an error: the last tensor's 192 data bytes end the file (no padding).
  for (std::size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE(n);
    const std::vector<std::byte> cut(full.begin(), full.begin() + std::ptrdiff_t(n));
    EXPECT_THROW(ropekit::read_gguf(cut), Error);
  }
  expect_error({full.begin(), full.begin() + 20}, "truncated GGUF: the key/value count");
}

TEST(GgufErrors, EachMalformedFieldIsNamed) {
  Writer ok = base_writer("llama", 1e4f, 128, 4096, 32);
  std::vector<std::byte> bytes = ok.bytes();
  bytes[0] = std::byte{'X'};
  expect_error(bytes, "not a GGUF file");
  expect_error(ok.bytes(1), "GGUF version = 1: only versions 2 and 3");

  // Lengths and counts larger than the file: checked before use (no huge allocation).
  bytes = ok.bytes();
  const std::uint64_t huge = std::uint64_t{1} << 60;
  std::memcpy(bytes.data() + 16, &huge, 8);  // kv_count
  expect_error(bytes, "truncated GGUF");
  Writer long_key = ok;
  std::vector<std::byte> raw(8);
  std::memcpy(raw.data(), &huge, 8);  // a key whose length claims 2^60 bytes
  long_key.raw_kv(raw);
  expect_error(long_key.bytes(), "a metadata key has length");
  Writer bad_type = ok;
  std::vector<std::byte> kv = {std::byte{1}, {}, {}, {}, {}, {}, {}, {}, std::byte{'k'}, std::byte{99}, {}, {}, {}};
  bad_type.raw_kv(kv);
  expect_error(bad_type.bytes(), "k has value type 99: not a GGUF type");

  // Semantic errors name the key.
  Writer no_arch;
  no_arch.u32("llama.context_length", 4096);
  expect_error(no_arch.bytes(), "general.architecture is missing");
  Writer unknown = base_writer("brand_new_arch", 1e4f, 64, 512, 8);
  expect_error(unknown.bytes(), "general.architecture = brand_new_arch: not in ropekit's architecture table");
  ropekit::ConfigOptions half;
  half.pairing = ropekit::Pairing::Half;
  EXPECT_NO_THROW(ropekit::read_gguf(unknown.bytes(), half));
  Writer bad_scaling = ok;
  bad_scaling.str("llama.rope.scaling.type", "warp");
  bad_scaling.f32("llama.rope.scaling.factor", 2.0f);
  expect_error(bad_scaling.bytes(), "llama.rope.scaling.type = warp: unknown");
  Writer no_factor = ok;
  no_factor.str("llama.rope.scaling.type", "linear");
  expect_error(no_factor.bytes(), "llama.rope.scaling.factor is missing");
  Writer yarn_no_original = ok;
  yarn_no_original.str("llama.rope.scaling.type", "yarn");
  yarn_no_original.f32("llama.rope.scaling.factor", 4.0f);
  expect_error(yarn_no_original.bytes(), "llama.rope.scaling.original_context_length is missing");
  Writer f16_freqs = ok;
  f16_freqs.tensor_f32("rope_freqs.weight", std::vector<float>(64, 1.0f), /*type=*/1);
  expect_error(f16_freqs.bytes(), "rope_freqs.weight = ggml type 1: expected F32");
  Writer short_freqs = ok;
  short_freqs.tensor_f32("rope_freqs.weight", std::vector<float>(10, 1.0f));
  expect_error(short_freqs.bytes(), "rope_freqs.weight = 10 values: expected rope.dimension_count/2 = 64");
  Writer bad_dims = base_writer("llama", 1e4f, 127, 4096, 32);
  expect_error(bad_dims.bytes(), "spec.rotary_dim = 127: must be even");
  Writer odd_width = base_writer("llama", 1e4f, 128, 4097, 32);
  expect_error(odd_width.bytes(), "llama.embedding_length = 4097: must be a positive multiple");
  Writer four_streams = base_writer("qwen2vl", 1e6f, 128, 3584, 28);
  four_streams.i32_array("qwen2vl.rope.dimension_sections", {16, 24, 20, 4});
  expect_error(four_streams.bytes(), "a 4th position stream is not supported");
  Writer only_long = base_writer("phi3", 1e4f, 96, 3072, 32);
  only_long.u32("phi3.rope.scaling.original_context_length", 4096);
  only_long.tensor_f32("rope_factors_long.weight", std::vector<float>(48, 2.0f));
  expect_error(only_long.bytes(), "needs both rope_factors_long and rope_factors_short");
}

// Integers are range-checked before any conversion (a u64 of 2^63 cast to int64 is undefined
// behaviour, which the sanitizer build turns into an abort), and numbers — also the elements of
// per-layer arrays — must be finite.
// A Llama GGUF without context_length (each test adds its own).
Writer llama_without_context(float freq_base = 1e4f) {
  Writer w;
  w.str("general.architecture", "llama");
  w.u32("llama.embedding_length", 4096);
  w.u32("llama.attention.head_count", 32);
  w.f32("llama.rope.freq_base", freq_base);
  w.u32("llama.rope.dimension_count", 128);
  return w;
}

TEST(GgufErrors, HugeOrNonFiniteNumbersAreNamedNeverCast) {
  for (const std::uint64_t huge : {std::uint64_t{1} << 63, ~std::uint64_t{0}, std::uint64_t{1} << 47}) {
    Writer w = llama_without_context();
    w.u64("llama.context_length", huge);
    expect_error(w.bytes(), "llama.context_length = ");
  }
  Writer negative = llama_without_context();
  negative.i64("llama.context_length", -5);
  expect_error(negative.bytes(), "llama.context_length = -5");
  Writer ok = llama_without_context();
  ok.u64("llama.context_length", std::uint64_t{1} << 40);
  EXPECT_EQ(ropekit::read_gguf(ok.bytes()).max_position_embeddings, std::int64_t{1} << 40);
  for (const double bad : {1e30, 4096.5, -1.0}) {
    Writer w = base_writer("llama", 1e4f, 128, 4096, 32);
    w.str("llama.rope.scaling.type", "yarn");
    w.f32("llama.rope.scaling.factor", 4.0f);
    w.f64("llama.rope.scaling.original_context_length", bad);
    expect_error(w.bytes(), "llama.rope.scaling.original_context_length = ");
  }
  Writer nan_base = llama_without_context(std::numeric_limits<float>::quiet_NaN());
  expect_error(nan_base.bytes(), "llama.rope.freq_base = nan: expected a finite number");
  // Per-layer arrays: RoPE reads the first layer's value, which must be a finite number too.
  Writer per_layer;
  per_layer.str("general.architecture", "llama");
  per_layer.u32("llama.embedding_length", 4096);
  per_layer.f32_array("llama.attention.head_count", {std::numeric_limits<float>::infinity(), 32.0f});
  per_layer.f32("llama.rope.freq_base", 1e4f);
  expect_error(per_layer.bytes(), "llama.attention.head_count[0] = inf: expected a finite number");
}

}  // namespace
