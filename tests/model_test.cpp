// The model runner and its loaders (llama2.c legacy and version-1 exports, GGUF with F32/F16/BF16 and quantized
// tensors) against run.c's output (tests/data/runc/) and against each other.
#include <gtest/gtest.h>

#include <map>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <numeric>
#include <random>
#include <sstream>

#include "bundled_model.hpp"
#include "expect_error.hpp"
#include "lab/quants.hpp"
#include "model_files.hpp"
#include "model_oracle.hpp"
#include "ropekit/kv_cache.hpp"
#include "ropekit/lab.hpp"
#include "ropekit/model.hpp"
#include "ropekit/tokenizer.hpp"

namespace {

using namespace bundled_model;

// Logits of every position for `tokens` read in one batch with the model's RoPE.
std::vector<float> logits_of(const ropekit::LlamaModel& m, const std::vector<int>& tokens) {
  ropekit::LlamaRunner runner(m, {.capacity = std::int64_t(tokens.size())});
  std::vector<std::int64_t> pos(tokens.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> logits(tokens.size() * std::size_t(m.config.vocab_size));
  runner.forward(ropekit::Rope(m.rope.layer().spec), tokens, pos, logits);
  return logits;
}

// run.c's generate loop, greedy, printing as run.c does.
std::string greedy(const ropekit::LlamaModel& m, const ropekit::Tokenizer& tok, const std::string& prompt, int steps) {
  const std::vector<int> ids = tok.encode(prompt, true);
  ropekit::LlamaRunner runner(m, {.capacity = steps});
  ropekit::Sampler sampler(m.config.vocab_size, 0.0f, 0.9f, 1);
  const ropekit::Rope rope(m.rope.layer().spec);
  std::vector<float> logits(std::size_t(m.config.vocab_size));
  std::string out;
  int token = ids[0];
  for (std::int64_t pos = 0; pos < steps;) {
    runner.forward(rope, std::span<const int>(&token, 1), std::span<const std::int64_t>(&pos, 1), logits);
    const int next = pos + 1 < std::int64_t(ids.size()) ? ids[std::size_t(pos + 1)] : sampler.sample(logits);
    ++pos;
    if (next == 1) break;
    const std::string piece = tok.decode(token, next);
    if (!(piece.size() == 1 && !std::isprint(static_cast<unsigned char>(piece[0])) &&
          !std::isspace(static_cast<unsigned char>(piece[0])))) {
      out += piece;
    }
    token = next;
  }
  return out + "\n";
}

TEST(Model, LoadsTheBundledCheckpoint) {
  const auto& c = bundled().config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  const ropekit::Spec& spec = bundled().rope.layer().spec;
  EXPECT_EQ(spec.pairing, ropekit::Pairing::Interleaved);
  EXPECT_EQ(spec.head_dim, 8);
  EXPECT_EQ(spec.base, 10000.0);
}

// run.c at temperature 0 (tests/data/runc/README.md): the same bytes.
TEST(Model, GreedyGenerationIsRunCs) {
  EXPECT_EQ(greedy(bundled(), bundled_tokenizer(), "Once upon a time", 200),
            read(kRepo + "/tests/data/runc/greedy-200-once-upon-a-time.txt"));
  EXPECT_EQ(greedy(bundled(), bundled_tokenizer(), "", 512),
            read(kRepo + "/tests/data/runc/greedy-512-empty-prompt.txt"));
}

TEST(Model, BatchedPrefillEqualsOneTokenAtATime) {
  const std::vector<int> tokens(excerpt_tokens().begin(), excerpt_tokens().begin() + 300);
  const std::vector<float> batched = logits_of(bundled(), tokens);
  ropekit::LlamaRunner runner(bundled(), {.capacity = 300});
  const ropekit::Rope rope(bundled().rope.layer().spec);
  std::vector<float> one(512);
  double worst = 0;
  for (std::int64_t t = 0; t < 300; ++t) {
    runner.forward(rope, std::span<const int>(&tokens[std::size_t(t)], 1), std::span<const std::int64_t>(&t, 1), one);
    for (int v = 0; v < 512; ++v)
      worst = std::max(worst, double(std::fabs(one[std::size_t(v)] - batched[std::size_t(t * 512 + v)])));
  }
  EXPECT_LT(worst, 1e-4);  // sgemm and sgemv sum in different orders; the logits are O(10)
}

// Per-token plans (dynamic NTK): a chunk read with token_ropes — one Rope per token, the cache re-rotated to
// each in turn, or kept stale — gives the logits of the same tokens read one at a time with rerotate()
// (or stale keys) between them, up to the order sgemm and sgemv sum in.
TEST(Model, TokenRopesEqualOneTokenAtATime) {
  const ropekit::Spec base = bundled().rope.layer().spec;
  ropekit::Spec spec = base;
  spec.scaling = ropekit::scaling::DynamicNtk{.factor = 4.0, .max_position_embeddings = 16};
  const std::vector<int> tokens(excerpt_tokens().begin(), excerpt_tokens().begin() + 40);
  std::vector<std::int64_t> pos(40);
  std::iota(pos.begin(), pos.end(), 0);
  for (bool stale : {false, true}) {
    SCOPED_TRACE(stale ? "stale" : "exact");
    // Reference: 16 tokens under the plan at 16, then one token at a time.
    ropekit::LlamaRunner one(bundled(), {.capacity = 40});
    std::vector<float> prefix(16 * 512), row(512), want;
    ropekit::Rope previous(spec, ropekit::AngleMode::Accurate, 16);
    one.forward(previous, std::span<const int>(tokens.data(), 16), std::span<const std::int64_t>(pos.data(), 16),
                prefix, {.stale_keys = stale});
    for (int t = 16; t < 40; ++t) {
      ropekit::Rope current(spec, ropekit::AngleMode::Accurate, t + 1);
      if (!stale) one.rerotate(previous, current);
      one.forward(current, std::span<const int>(&tokens[std::size_t(t)], 1),
                  std::span<const std::int64_t>(&pos[std::size_t(t)], 1), row, {.stale_keys = stale});
      want.insert(want.end(), row.begin(), row.end());
      previous = std::move(current);
    }
    // The same 24 tokens as one chunk with their plans.
    ropekit::LlamaRunner chunk(bundled(), {.capacity = 40});
    const ropekit::Rope first(spec, ropekit::AngleMode::Accurate, 16);
    chunk.forward(first, std::span<const int>(tokens.data(), 16), std::span<const std::int64_t>(pos.data(), 16), prefix,
                  {.stale_keys = stale});
    std::vector<ropekit::Rope> ropes;
    for (int t = 16; t < 40; ++t) ropes.emplace_back(spec, ropekit::AngleMode::Accurate, t + 1);
    std::vector<const ropekit::Rope*> ptrs;
    for (const auto& r : ropes) ptrs.push_back(&r);
    std::vector<float> got(24 * 512);
    chunk.forward(first, std::span<const int>(tokens.data() + 16, 24),
                  std::span<const std::int64_t>(pos.data() + 16, 24), got, {.stale_keys = stale, .token_ropes = ptrs});
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
    EXPECT_LT(worst, 1e-4);
  }
  ropekit::LlamaRunner runner(bundled(), {.capacity = 4});
  const ropekit::Rope rope(base);
  const std::vector<const ropekit::Rope*> one_rope = {&rope};
  std::vector<float> logits(2 * 512);
  const std::vector<int> two = {1, 2};
  const std::vector<std::int64_t> at = {0, 1};
  EXPECT_ERROR(runner.forward(rope, two, at, logits, {.token_ropes = one_rope}), "1 token_ropes for 2 tokens");
}

TEST(Model, Version1ExportLoadsTheSameWeights) {
  const auto m = ropekit::load_llama2c(model_files::version1_bytes(bundled()), "v1");
  EXPECT_EQ(m.token_embedding, bundled().token_embedding);
  EXPECT_EQ(m.layers[4].w2, bundled().layers[4].w2);
  EXPECT_EQ(m.rms_final, bundled().rms_final);
  EXPECT_TRUE(m.config.shared_classifier);
}

TEST(Model, UnsharedClassifierIsRead) {
  for (bool v1 : {false, true}) {
    const auto tiny = model_files::tiny_model(false);
    const auto bytes = v1 ? model_files::version1_bytes(tiny) : model_files::legacy_bytes(tiny);
    const auto m = ropekit::load_llama2c(bytes, "tiny");
    EXPECT_FALSE(m.config.shared_classifier);
    EXPECT_EQ(m.classifier, tiny.classifier);
    EXPECT_NE(logits_of(m, {1, 2, 3}), [&] {
      auto shared = m;
      shared.classifier.clear();
      return logits_of(shared, {1, 2, 3});
    }());
  }
}

// GGUF as llama.cpp stores a llama: interleaved q/k rows, so the F32 file gives exactly the llama2.c logits.
TEST(Model, GgufLlamaGivesTheSameLogits) {
  const std::vector<int> tokens(excerpt_tokens().begin(), excerpt_tokens().begin() + 100);
  const std::vector<float> reference = logits_of(bundled(), tokens);
  for (std::uint32_t type : {0u, 1u, 30u}) {
    const auto m = ropekit::load_gguf_model(model_files::gguf_bytes(bundled(), type), "model.gguf");
    EXPECT_EQ(m.rope.layer().spec.pairing, ropekit::Pairing::Interleaved);
    EXPECT_EQ(m.config.seq_len, 512);
    const std::vector<float> logits = logits_of(m, tokens);
    double worst = 0;
    for (std::size_t i = 0; i < logits.size(); ++i)
      worst = std::max(worst, double(std::fabs(logits[i] - reference[i])));
    if (type == 0) {
      EXPECT_EQ(worst, 0.0);
    } else {
      EXPECT_LT(worst, type == 1 ? 0.05 : 0.5) << "type " << type;  // weights rounded to 11 / 8 bits
      EXPECT_GT(worst, 0.0);
    }
  }
  // The same weights with the lanes paired as NeoX would be another model: the pairing matters.
  auto half = bundled();
  half.rope.groups[0].spec.pairing = ropekit::Pairing::Half;
  EXPECT_NE(logits_of(half, tokens), reference);
}

TEST(Model, GgufTokenizerEncodesAsTheLlama2cOne) {
  const auto bytes = model_files::gguf_bytes(bundled(), 0, &bundled_tokenizer());
  const auto tok = ropekit::Tokenizer::from_gguf(bytes, "model.gguf");
  ASSERT_EQ(tok.vocab_size(), 512);
  const std::string text = read(kRepo + "/data/tinystories-valid-excerpt.txt").substr(0, 3000);
  EXPECT_EQ(tok.encode(text, true), bundled_tokenizer().encode(text, true));
}

TEST(Model, MalformedGgufModelsAreErrors) {
  auto tiny = model_files::tiny_model(false);
  const auto good = model_files::gguf_bytes(tiny, 0);
  EXPECT_NO_THROW(ropekit::load_gguf_model(good, "tiny.gguf"));
  for (std::size_t n = 0; n < good.size(); n += 7) {
    EXPECT_THROW(ropekit::load_gguf_model(std::span(good.data(), n), "tiny.gguf"), ropekit::Error) << n;
  }
  // A quantized tensor: an error naming it and its type.
  gguf_test::Writer w;
  w.str("general.architecture", "llama");
  EXPECT_ERROR(ropekit::load_gguf_model(w.bytes(), "x.gguf"), "llama.embedding_length", "missing");
  auto q8 = model_files::gguf_bytes(tiny, 0);
  {
    // Re-type blk.0.attn_q.weight as Q8_0 (8) by rewriting its info: find the name, skip dims.
    const std::string name = "blk.0.attn_q.weight";
    auto it = std::search(q8.begin(), q8.end(), reinterpret_cast<const std::byte*>(name.data()),
                          reinterpret_cast<const std::byte*>(name.data() + name.size()));
    ASSERT_NE(it, q8.end());
    const std::size_t type_at = std::size_t(it - q8.begin()) + name.size() + 4 + 2 * 8;
    const std::uint32_t q8_0 = 8;
    std::memcpy(q8.data() + type_at, &q8_0, 4);
  }
  EXPECT_ERROR(ropekit::load_gguf_model(q8, "q.gguf"), "blk.0.attn_q.weight", "Q8_0", "whole blocks of 32");
  {  // A type the runner does not read: Q2_K (10).
    const std::string name = "blk.0.attn_q.weight";
    auto it = std::search(q8.begin(), q8.end(), reinterpret_cast<const std::byte*>(name.data()),
                          reinterpret_cast<const std::byte*>(name.data() + name.size()));
    const std::uint32_t q2_k = 10;
    std::memcpy(q8.data() + std::size_t(it - q8.begin()) + name.size() + 4 + 2 * 8, &q2_k, 4);
  }
  EXPECT_ERROR(ropekit::load_gguf_model(q8, "q.gguf"), "blk.0.attn_q.weight", "Q2_K", "Q8_0, Q4_0");
  gguf_test::Writer neox;
  neox.str("general.architecture", "gptneox");
  EXPECT_ERROR(ropekit::load_gguf_model(neox.bytes(), "n.gguf"), "general.architecture", "gptneox");
}

// A GGUF whose matrices are Q8_0 blocks: the loader's weights are the blocks dequantized (lab/quants.hpp, held to
// gguf-py bit for bit by quants_test), and the model runs exactly as the same weights stored as F32.
TEST(Model, QuantizedGgufWeightsAreTheirBlocksDequantized) {
  ropekit::LlamaModel m = model_files::tiny_model(false);
  m.config.dim = 32;
  m.config.hidden_dim = 32;
  m.config.n_heads = 2;
  m.config.n_kv_heads = 1;
  // 2100 classifier rows: more than one panel of rows widened at a time, the last one ragged (prefill: 2048 rows
  // of 32, decode: 256).
  m.config.vocab_size = 2100;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  const auto random = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  const std::size_t dim = 32, kv = std::size_t(m.config.kv_dim()), vocab = std::size_t(m.config.vocab_size);
  m.token_embedding = random(vocab * dim);
  m.classifier = random(vocab * dim);
  m.rms_final = std::vector<float>(dim, 1.0f);
  for (auto& L : m.layers) {
    L = {.rms_att = std::vector<float>(dim, 1.0f),
         .wq = random(dim * dim),
         .wk = random(kv * dim),
         .wv = random(kv * dim),
         .wo = random(dim * dim),
         .rms_ffn = std::vector<float>(dim, 1.0f),
         .w1 = random(dim * dim),
         .w2 = random(dim * dim),
         .w3 = random(dim * dim)};
  }
  // Q8_0 blocks of each matrix (ggml's quantize_row_q8_0: d = max|x| / 127 in f16, q = round(x / d)), and the model
  // with those blocks' dequantized values.
  ropekit::LlamaModel dequantized = m;
  const auto q8_0 = [](std::vector<float>& values) {
    std::vector<std::byte> blocks;
    for (std::size_t b = 0; b < values.size(); b += 32) {
      float amax = 0;
      for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(values[b + i]));
      const std::uint16_t d = ropekit::float_to_f16(amax / 127.0f);
      const float df = ropekit::f16_to_float(d), inv = df == 0 ? 0.0f : 1.0f / df;
      blocks.push_back(std::byte(d & 0xff));
      blocks.push_back(std::byte(d >> 8));
      for (std::size_t i = 0; i < 32; ++i) {
        blocks.push_back(std::byte(std::uint8_t(std::int8_t(std::lround(values[b + i] * inv)))));
      }
    }
    ropekit::detail::dequantize(*ropekit::detail::quant_type(8), blocks.data(), values.size() / 32, values.data());
    return blocks;
  };
  gguf_test::Writer w;
  w.str("general.architecture", "llama");
  w.u32("llama.embedding_length", 32);
  w.u32("llama.feed_forward_length", 32);
  w.u32("llama.block_count", std::uint32_t(m.config.n_layers));
  w.u32("llama.attention.head_count", 2);
  w.u32("llama.attention.head_count_kv", 1);
  w.u32("llama.context_length", 8);
  w.u32("llama.rope.dimension_count", 16);
  w.f32("llama.rope.freq_base", 10000.0f);
  w.f32("llama.attention.layer_norm_rms_epsilon", m.config.norm_eps);
  const auto f32 = [](const std::vector<float>& v) { return model_files::encode(v, 0); };
  w.tensor("token_embd.weight", {dim, vocab}, 8, q8_0(dequantized.token_embedding));
  for (int l = 0; l < m.config.n_layers; ++l) {
    auto& L = dequantized.layers[std::size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.tensor(p + "attn_norm.weight", {dim}, 0, f32(L.rms_att));
    w.tensor(p + "attn_q.weight", {dim, dim}, 8, q8_0(L.wq));
    w.tensor(p + "attn_k.weight", {dim, kv}, 8, q8_0(L.wk));
    w.tensor(p + "attn_v.weight", {dim, kv}, 8, q8_0(L.wv));
    w.tensor(p + "attn_output.weight", {dim, dim}, 8, q8_0(L.wo));
    w.tensor(p + "ffn_norm.weight", {dim}, 0, f32(L.rms_ffn));
    w.tensor(p + "ffn_gate.weight", {dim, dim}, 8, q8_0(L.w1));
    w.tensor(p + "ffn_down.weight", {dim, dim}, 8, q8_0(L.w2));
    w.tensor(p + "ffn_up.weight", {dim, dim}, 8, q8_0(L.w3));
  }
  w.tensor("output_norm.weight", {dim}, 0, f32(dequantized.rms_final));
  w.tensor("output.weight", {dim, vocab}, 8, q8_0(dequantized.classifier));
  const ropekit::LlamaModel loaded = ropekit::load_gguf_model(w.bytes(), "q8.gguf");
  // The matrices stay Q8_0 blocks (in the model's own copy of the bytes), read back as their dequantized values.
  const auto expect_blocks = [](const ropekit::WeightMatrix& got, const std::vector<float>& want, std::int64_t cols) {
    EXPECT_TRUE(got.is_packed());
    EXPECT_EQ(got.encoding, ropekit::WeightEncoding::Q8_0);
    EXPECT_EQ(got.cols, cols);
    EXPECT_EQ(got.rows * cols, std::int64_t(want.size()));
    EXPECT_EQ(got.row_bytes, std::size_t(cols / 32 * 34));
    EXPECT_EQ(got.to_floats(cols), want);
  };
  ASSERT_NE(loaded.storage, nullptr);
  expect_blocks(loaded.token_embedding, dequantized.token_embedding, 32);
  expect_blocks(loaded.classifier, dequantized.classifier, 32);
  for (int l = 0; l < m.config.n_layers; ++l) {
    const auto &a = loaded.layers[std::size_t(l)], &b = dequantized.layers[std::size_t(l)];
    for (const auto& [got, want] : {std::pair{&a.wq, &b.wq},
                                    {&a.wk, &b.wk},
                                    {&a.wv, &b.wv},
                                    {&a.wo, &b.wo},
                                    {&a.w1, &b.w1},
                                    {&a.w2, &b.w2},
                                    {&a.w3, &b.w3}}) {
      expect_blocks(*got, *want, 32);
    }
    EXPECT_EQ(a.rms_att, b.rms_att);  // 1-D F32 tensors: float32 vectors
  }
  EXPECT_NE(loaded.layers[0].wq.to_floats(32), m.layers[0].wq);  // quantized: not the float weights
  // The same forward, bit for bit, as the dequantized weights stored as F32: prefill (sgemm over panels of rows)
  // and decode (a dot product per row).
  dequantized.rope = loaded.rope;
  const std::vector<int> tokens = {1, 5, 9, 3, 7, 2};
  const std::vector<std::int64_t> pos = {0, 1, 2, 3, 4, 5};
  std::vector<float> a(tokens.size() * vocab), b(tokens.size() * vocab);
  ropekit::LlamaRunner(loaded, {.capacity = 8}).forward(ropekit::Rope(loaded.rope.layer().spec), tokens, pos, a);
  ropekit::LlamaRunner(dequantized, {.capacity = 8}).forward(ropekit::Rope(loaded.rope.layer().spec), tokens, pos, b);
  EXPECT_EQ(a, b);
  for (int threads : {1, 2}) {
    ropekit::LlamaRunner ra(loaded, {.capacity = 8, .threads = threads}), rb(dequantized, {.capacity = 8});
    const ropekit::Rope rope(loaded.rope.layer().spec);
    std::vector<float> la(vocab), lb(vocab);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      ra.forward(rope, std::span(&tokens[i], 1), std::span(&pos[i], 1), la);
      rb.forward(rope, std::span(&tokens[i], 1), std::span(&pos[i], 1), lb);
      EXPECT_EQ(la, lb) << "decode step " << i << ", threads " << threads;
    }
  }
  // RunnerOptions::int8_activations: decode takes the 8-bit products (their error bound is quants_test's), prefill and
  // float32 matrices do not, and the thread count changes no bit.
  {
    const ropekit::Rope rope(loaded.rope.layer().spec);
    std::vector<float> p8(tokens.size() * vocab);
    ropekit::LlamaRunner(loaded, {.capacity = 8, .int8_activations = true}).forward(rope, tokens, pos, p8);
    EXPECT_EQ(p8, a);  // prefill: unchanged
    ropekit::LlamaRunner r8(loaded, {.capacity = 8, .threads = 1, .int8_activations = true}),
        r8t(loaded, {.capacity = 8, .threads = 2, .int8_activations = true}), rf(loaded, {.capacity = 8}),
        rd(dequantized, {.capacity = 8, .int8_activations = true});
    std::vector<float> l8(vocab), l8t(vocab), lf(vocab), ld(vocab);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      r8.forward(rope, std::span(&tokens[i], 1), std::span(&pos[i], 1), l8);
      r8t.forward(rope, std::span(&tokens[i], 1), std::span(&pos[i], 1), l8t);
      rf.forward(rope, std::span(&tokens[i], 1), std::span(&pos[i], 1), lf);
      rd.forward(rope, std::span(&tokens[i], 1), std::span(&pos[i], 1), ld);
      EXPECT_EQ(ld, lf) << "float32 matrices are unaffected, step " << i;
      EXPECT_NE(l8, lf) << "decode step " << i << " took the float32 products";
      EXPECT_EQ(l8, l8t) << "decode step " << i << ": 1 and 2 threads";
    }
  }
  // The same file read by load_model_file: mapped, not copied, and the same logits.
  {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("ropekit_q8_" + std::to_string(::getpid()) + ".gguf");
    const std::vector<std::byte> bytes = w.bytes();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    const ropekit::LlamaModel mapped = ropekit::load_model_file(path);
    std::filesystem::remove(path);  // the map keeps the pages
    ASSERT_TRUE(mapped.layers[0].w2.is_packed());
    std::vector<float> c(tokens.size() * vocab);
    ropekit::LlamaRunner(mapped, {.capacity = 8}).forward(ropekit::Rope(mapped.rope.layer().spec), tokens, pos, c);
    EXPECT_EQ(c, a);
  }
  // A file that changes under the model (model.hpp's LoadOptions): read into memory (map = false), the model runs on
  // after the file is truncated; mapped, the next read past the new end raises SIGBUS — the documented contract,
  // shown here in a child process.
  {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("ropekit_q8_trunc_" + std::to_string(::getpid()) + ".gguf");
    const std::vector<std::byte> bytes = w.bytes();
    const auto write = [&] {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    };
    const auto run = [&](const ropekit::LlamaModel& model) {
      std::vector<float> c(tokens.size() * vocab);
      ropekit::LlamaRunner(model, {.capacity = 8, .threads = 1})
          .forward(ropekit::Rope(model.rope.layer().spec), tokens, pos, c);
      return c;
    };
    write();
    const ropekit::LlamaModel copied = ropekit::load_model_file(path, {.map = false});
    ASSERT_TRUE(copied.layers[0].w2.is_packed());
    std::filesystem::resize_file(path, 0);
    EXPECT_EQ(run(copied), a);
    write();
    const ropekit::LlamaModel mapped = ropekit::load_model_file(path);
    std::filesystem::resize_file(path, 0);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(run(mapped), "");
    std::filesystem::remove(path);
  }
  // A copy of the model shares its packed bytes; they outlive the loader's input.
  const ropekit::LlamaModel copy = loaded;
  EXPECT_EQ(copy.storage, loaded.storage);
  EXPECT_EQ(copy.layers[0].wq.packed, loaded.layers[0].wq.packed);
}

TEST(Model, TruncatedCheckpointsAreErrorsAtEveryByte) {
  for (bool shared : {true, false}) {
    const auto tiny = model_files::tiny_model(shared);
    for (const auto& bytes : {model_files::legacy_bytes(tiny), model_files::version1_bytes(tiny)}) {
      EXPECT_NO_THROW(ropekit::load_llama2c(bytes, "tiny"));
      for (std::size_t n = 0; n < bytes.size(); ++n) {
        EXPECT_THROW(ropekit::load_llama2c(std::span(bytes.data(), n), "tiny"), ropekit::Error) << n;
      }
      auto longer = bytes;
      longer.push_back(std::byte{0});
      EXPECT_ERROR(ropekit::load_llama2c(longer, "tiny"), "1 bytes follow the last tensor");
    }
  }
}

TEST(Model, ImpossibleDimensionsAreErrors) {
  auto header = [](std::vector<std::int32_t> v) {
    std::vector<std::byte> out;
    for (auto x : v) model_files::put(out, x);
    out.resize(out.size() + 4096);
    return out;
  };
  EXPECT_ERROR(ropekit::load_llama2c(header({64, 172, 5, 7, 7, 512, 512}), "m"), "dim = 64", "n_heads = 7");
  EXPECT_ERROR(ropekit::load_llama2c(header({64, 172, 5, 8, 3, 512, 512}), "m"), "n_kv_heads = 3");
  EXPECT_ERROR(ropekit::load_llama2c(header({0, 172, 5, 8, 4, 512, 512}), "m"), "dim = 0");
  EXPECT_ERROR(ropekit::load_llama2c(header({64, -1, 5, 8, 4, 512, 512}), "m"), "hidden_dim = -1");
  EXPECT_ERROR(ropekit::load_llama2c(header({24, 172, 5, 8, 4, 512, 512}), "m"), "head size must be even");
  EXPECT_ERROR(ropekit::load_llama2c(header({1 << 30, 1 << 30, 1 << 30, 1 << 24, 1, 1 << 30, 512}), "m"), "m:");
  EXPECT_ERROR(ropekit::load_llama2c(header({64, 172, 5, 8, 4, 512, 512}), "m"), "truncated", "needs");
  auto tiny = model_files::tiny_model();
  tiny.layers[1].wv[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_ERROR(ropekit::load_llama2c(model_files::legacy_bytes(tiny), "nan.bin"), "nan.bin", "tensor wv", "element");
  std::vector<std::byte> v2 = model_files::version1_bytes(model_files::tiny_model());
  const std::int32_t two = 2;
  std::memcpy(v2.data() + 4, &two, 4);
  EXPECT_ERROR(ropekit::load_llama2c(v2, "q.bin"), "version = 2");
}

}  // namespace
