// The model runner, its loaders and tokenizer, and the lab's protocol against an independent float64
// forward (tests/model_oracle.hpp) and run.c's output (tests/data/runc/).
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

#include "expect_error.hpp"
#include "lab/kernels.hpp"
#include "lab/quants.hpp"
#include "model_files.hpp"
#include "model_oracle.hpp"
#include "ropekit/kv_cache.hpp"
#include "ropekit/lab.hpp"
#include "ropekit/model.hpp"
#include "ropekit/tokenizer.hpp"

namespace {

const std::string kRepo = ROPEKIT_REPO_DIR;
const std::string kModel = kRepo + "/models/tinystories-260k.bin";
const std::string kTokenizer = kRepo + "/models/tok512.bin";

const ropekit::LlamaModel& bundled() {
  static const ropekit::LlamaModel model = ropekit::load_model_file(kModel);
  return model;
}
const ropekit::Tokenizer& bundled_tokenizer() {
  static const ropekit::Tokenizer tok = ropekit::Tokenizer::from_file(kTokenizer);
  return tok;
}
std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
const std::vector<int>& excerpt_tokens() {
  static const std::vector<int> ids =
      ropekit::encode_stories(bundled_tokenizer(), read(kRepo + "/data/tinystories-valid-excerpt.txt"));
  return ids;
}

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

// run.c's encode, verbatim in behaviour: the quadratic scan for the best-scoring pair.
std::vector<int> naive_encode(const ropekit::Tokenizer& tok, const std::string& text) {
  std::map<std::string, int> ids;
  for (int i = tok.vocab_size() - 1; i >= 0; --i) ids[std::string(tok.piece(i))] = i;
  std::vector<int> out;
  const std::string s = text.empty() ? text : " " + text;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t e = i + 1;
    while (e < s.size() && e - i < 4 && (static_cast<unsigned char>(s[e]) & 0xC0) == 0x80) ++e;
    const auto it = ids.find(s.substr(i, e - i));
    if (it != ids.end()) {
      out.push_back(it->second);
    } else {
      for (std::size_t b = i; b < e; ++b) out.push_back(static_cast<unsigned char>(s[b]) + 3);
    }
    i = e;
  }
  while (true) {
    float best = -1e10f;
    int best_id = -1, best_at = -1;
    for (std::size_t i = 0; i + 1 < out.size(); ++i) {
      const auto it = ids.find(std::string(tok.piece(out[i])) + std::string(tok.piece(out[i + 1])));
      if (it != ids.end() && tok.score(it->second) > best) {
        best = tok.score(it->second);
        best_id = it->second;
        best_at = int(i);
      }
    }
    if (best_at < 0) break;
    out[std::size_t(best_at)] = best_id;
    out.erase(out.begin() + best_at + 1);
  }
  return out;
}

TEST(Tokenizer, EqualsRunCsQuadraticMergeLoop) {
  const auto& tok = bundled_tokenizer();
  const std::string text = read(kRepo + "/data/tinystories-valid-excerpt.txt");
  for (std::size_t at = 0; at + 400 < text.size(); at += 5000) {
    const std::string piece = text.substr(at, 400);
    auto ids = tok.encode(piece);
    EXPECT_EQ(ids, naive_encode(tok, piece)) << piece;
  }
  std::mt19937 rng(7);
  const std::string alphabet = "ab c\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x80\xFF.,\n";
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    const int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    EXPECT_EQ(tok.encode(s), naive_encode(tok, s)) << trial;
  }
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.encode("", true), std::vector<int>{1});
  const int once = tok.encode("Once")[0];  // " On"
  ASSERT_EQ(tok.piece(once), " On");
  EXPECT_EQ(tok.decode(1, once), "On");  // after BOS the leading space is dropped
  EXPECT_EQ(tok.decode(5, once), " On");
  EXPECT_EQ(tok.decode(5, 3 + 0x41), "A");  // <0x41>
}

TEST(Tokenizer, StoriesSplitAtEndOfText) {
  const auto ids = ropekit::encode_stories(bundled_tokenizer(), "  One.\n<|endoftext|>\n\n<|endoftext|> Two. ");
  std::vector<int> expected = bundled_tokenizer().encode("One.", true);
  const auto two = bundled_tokenizer().encode("Two.", true);
  expected.insert(expected.end(), two.begin(), two.end());
  EXPECT_EQ(ids, expected);
}

TEST(Tokenizer, MalformedFilesAreErrors) {
  const auto good = model_files::tokenizer_bytes({"a", "b", "ab"}, {0, 0, 1});
  EXPECT_EQ(ropekit::Tokenizer::from_llama2c(good).vocab_size(), 3);
  // The format has no token count: a file cut after a whole token is a smaller vocabulary (which
  // require_vocab_size refuses for a model); any other cut is an error.
  for (std::size_t n = 0; n < good.size(); ++n) {
    if (n == 4 || n == 13 || n == 22) continue;
    EXPECT_THROW(ropekit::Tokenizer::from_llama2c(std::span(good.data(), n), "t"), ropekit::Error) << n;
  }
  EXPECT_ERROR(ropekit::Tokenizer::from_llama2c(std::span(good.data(), 4), "t.bin"), "no tokens");
  auto negative = good;
  const std::int32_t minus = -5;
  std::memcpy(negative.data() + 8, &minus, 4);
  EXPECT_ERROR(ropekit::Tokenizer::from_llama2c(negative, "t.bin"), "token 0", "length = -5");
  EXPECT_ERROR(bundled_tokenizer().require_vocab_size(32000, "big.bin"), "512 tokens", "vocab_size = 32000");
  EXPECT_ERROR(ropekit::Tokenizer::from_llama2c(good).encode("z"), "byte 0x20");  // no pieces for ' ' or 'z'
  EXPECT_ERROR(bundled_tokenizer().decode(1, 512), "token id 512");
}

// An older llama2.c export's layout (stories15M's tokenizer): ids 3–258 hold byte b as the code point
// U+00bb instead of "<0xXX>", so "a" is both byte 0x61's fallback (id 100) and a regular piece. Told from
// the file: the regular piece wins, the fallback ids stand only for bytes with no piece and never merge,
// and they decode to their byte; a file with one of those entries changed is read as the current layout.
TEST(Tokenizer, LegacyByteLayoutPrefersRegularPieces) {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores(3, 0.0f);
  for (int b = 0; b < 256; ++b) {
    pieces.push_back(b < 0x80 ? std::string(1, char(b)) : std::string{char(0xC0 | (b >> 6)), char(0x80 | (b & 0x3F))});
    scores.push_back(0.0f);
  }
  const int first = int(pieces.size());  // regular pieces: 259 …
  for (const char* p : {" ", "a", "b", "c", ",", " a", "ab", " ab", "é"}) {
    pieces.push_back(p);
    scores.push_back(-float(pieces.size()));  // earlier pieces merge first
  }
  const auto id = [&](std::string_view p) {
    for (int i = first; i < int(pieces.size()); ++i) {
      if (pieces[std::size_t(i)] == p) return i;
    }
    return -1;
  };
  const auto bytes = model_files::tokenizer_bytes(pieces, scores);
  const auto tok = ropekit::Tokenizer::from_llama2c(bytes, "legacy.bin");
  ASSERT_TRUE(tok.legacy_byte_layout());
  EXPECT_TRUE(tok.is_byte_fallback(3 + 'a'));
  EXPECT_FALSE(tok.is_byte_fallback(id("a")));
  // "ab,c": " ab" then "," and "c" as their regular pieces — never the fallback ids 3 + ',' and 3 + 'c'.
  EXPECT_EQ(tok.encode("ab,c"), (std::vector<int>{id(" ab"), id(","), id("c")}));
  // "é" has a piece; "ü" (C3 BC) has none: its two bytes fall back, and the fallback ids do not merge.
  EXPECT_EQ(tok.encode("é"), (std::vector<int>{id(" "), id("é")}));
  EXPECT_EQ(tok.encode("ü"), (std::vector<int>{id(" "), 3 + 0xC3, 3 + 0xBC}));
  // Round trips, the fallback ids decoding to their bytes.
  for (std::string text : {"ab,c", "cab ba", "é ü!", "a\x01z"}) {
    const std::vector<int> ids = tok.encode(text, /*bos=*/true);
    std::string back;
    for (std::size_t i = 1; i < ids.size(); ++i) back += tok.decode(ids[i - 1], ids[i]);
    EXPECT_EQ(back, text);
  }
  // One fallback entry changed: not the legacy layout (read as before: first id of each piece).
  auto changed = pieces;
  changed[3 + 'q'] = "Q!";
  const auto plain = ropekit::Tokenizer::from_llama2c(model_files::tokenizer_bytes(changed, scores), "plain.bin");
  EXPECT_FALSE(plain.legacy_byte_layout());
  EXPECT_EQ(plain.encode("ca"), (std::vector<int>{3 + ' ', 3 + 'c', 3 + 'a'}));
  // The bundled (current-layout) tokenizer is not legacy, and its byte pieces are the fallback.
  EXPECT_FALSE(bundled_tokenizer().legacy_byte_layout());
  EXPECT_TRUE(bundled_tokenizer().is_byte_fallback(3 + 0x41));
  // A legacy file cut inside an entry: an error naming the token and its byte offset.
  EXPECT_ERROR(ropekit::Tokenizer::from_llama2c(std::span(bytes.data(), bytes.size() - 1), "cut.bin"), "cut.bin",
               "token 267");
  EXPECT_ERROR(tok.require_vocab_size(512, "stories260K.bin"), "268 tokens", "vocab_size = 512");

  // The same vocabulary as llama.cpp's llama2.c converter writes it into GGUF: " " as U+2581 and byte 0's
  // piece empty (a C string). Still the legacy layout, encoding as the llama2.c file does.
  gguf_test::Writer w;
  w.str("tokenizer.ggml.model", "llama");
  std::vector<std::string> escaped;
  for (const std::string& p : pieces) {
    std::string e;
    for (char ch : p) e += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
    escaped.push_back(e);
  }
  escaped[3] = "";
  w.str_array("tokenizer.ggml.tokens", escaped);
  w.f32_array("tokenizer.ggml.scores", scores);
  const auto from_gguf = ropekit::Tokenizer::from_gguf(w.bytes(), "converted.gguf");
  EXPECT_TRUE(from_gguf.legacy_byte_layout());
  for (std::string text : {"ab,c", "cab ba", "é ü!", "a\x01z"}) EXPECT_EQ(from_gguf.encode(text), tok.encode(text));
  EXPECT_EQ(from_gguf.decode(1, 3), std::string(1, '\0'));
}

TEST(Sampler, GreedyTemperatureAndErrors) {
  ropekit::Sampler greedy(4, 0.0f, 0.9f, 1);
  std::vector<float> logits = {0.1f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(greedy.sample(logits), 1);  // the first maximum
  ropekit::Sampler a(4, 1.0f, 0.9f, 42), b(4, 1.0f, 0.9f, 42);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> x = {0.1f, 1.0f, 0.5f, 0.2f}, y = x;
    EXPECT_EQ(a.sample(x), b.sample(y));
  }
  EXPECT_ERROR(ropekit::Sampler(4, -1.0f, 0.9f, 1), "temperature = -1");
  EXPECT_ERROR(ropekit::Sampler(4, 1.0f, 1.5f, 1), "topp = 1.5");
  EXPECT_ERROR(ropekit::Sampler(4, 1.0f, 0.9f, 0), "seed = 0");
}

TEST(Runner, BadCallsAreErrors) {
  ropekit::LlamaRunner runner(bundled(), {.capacity = 4});
  const ropekit::Rope rope(bundled().rope.layer().spec);
  std::vector<float> logits(512);
  const std::vector<std::int64_t> pos = {0, 1};
  EXPECT_ERROR(runner.forward(rope, std::vector<int>{1, 512}, pos, logits), "tokens[1] = 512");
  EXPECT_ERROR(runner.forward(rope, std::vector<int>{1}, pos, logits), "2 positions for 1 tokens");
  std::vector<float> small(10);
  EXPECT_ERROR(runner.forward(rope, std::vector<int>{1, 2}, pos, small), "logits has 10 floats");
  const std::vector<std::int64_t> five = {0, 1, 2, 3, 4};
  std::vector<float> all(5 * 512);
  EXPECT_ERROR(runner.forward(rope, std::vector<int>{1, 2, 3, 4, 5}, five, all), "overflow the capacity 4");
  EXPECT_ERROR(ropekit::LlamaRunner(bundled(), {.capacity = 0}), "capacity = 0");
  EXPECT_ERROR(ropekit::spec_with_scaling(bundled(), "{\"rope_type\": \"yarn\"}"), "factor");
  EXPECT_ERROR(ropekit::spec_with_scaling(bundled(), "{nope"), "--rope-scaling", "invalid JSON");
}

// The lab's configuration for the oracle comparisons: L0 = 16, N = 16 and 48, two windows, buckets 0/16/32.
ropekit::EvalOptions short_lab() {
  ropekit::EvalOptions o;
  o.window_size = 48;
  o.windows = 2;
  o.lengths = {16, 48};
  o.buckets = {0, 16, 32};
  o.trained_length = 16;
  return o;
}

// Every row of `result` within 1e-3 nats of the float64 oracle's protocol, the method of each row given
// by method_of(name, N), and with the oracle's target count.
void expect_rows_match_the_oracle(const ropekit::EvalResult& result, const ropekit::EvalOptions& o,
                                  const std::function<oracle::Method(const std::string&, std::int64_t)>& method_of) {
  const auto& tokens = excerpt_tokens();
  std::map<std::pair<std::string, std::int64_t>, std::map<std::int64_t, std::pair<double, std::int64_t>>> expected;
  for (const auto& m : o.methods) {
    for (std::int64_t n : o.lengths) {
      const oracle::Method om = method_of(m.name, n);
      for (std::int64_t start : result.window_starts) {
        const std::vector<int> window(tokens.begin() + start, tokens.begin() + start + n);
        const std::vector<double> nll = oracle::window_nll(bundled(), window, om, 1);
        for (std::size_t t = 1; t < std::size_t(n); ++t) {
          auto& [sum, count] = expected[{m.name, n}][t < 16 ? 0 : t < 32 ? 16 : 32];
          sum += nll[t - 1];
          ++count;
        }
      }
    }
  }
  ASSERT_EQ(result.rows.size(), o.methods.size() * (1 + 3));
  for (const ropekit::EvalRow& row : result.rows) {
    const auto [sum, count] = expected[{row.method, row.n}][row.bucket_lo];
    EXPECT_EQ(row.tokens, count) << row.method << " N=" << row.n << " bucket " << row.bucket_lo;
    EXPECT_NEAR(row.mean_nll, sum / double(count), 1e-3) << row.method << " N=" << row.n << " bucket " << row.bucket_lo;
    EXPECT_DOUBLE_EQ(row.ppl, std::exp(row.mean_nll));
  }
}

// The lab's protocol on a short configuration, every built-in method, against the float64 oracle.
TEST(Lab, EveryMethodWithinOneMilliNatOfTheFloat64Protocol) {
  const auto& tokens = excerpt_tokens();
  const ropekit::EvalOptions o = short_lab();
  const ropekit::EvalResult result = ropekit::evaluate(bundled(), tokens, o);
  // Window starts: 0, then the first BOS at or after 48.
  std::int64_t second = 48;
  while (tokens[std::size_t(second)] != 1) ++second;
  ASSERT_EQ(result.window_starts, (std::vector<std::int64_t>{0, second}));
  ASSERT_EQ(o.methods.size(), 10u);
  ASSERT_EQ(result.method_seconds.size(), 10u);  // one time per method, within the total
  EXPECT_LE(std::accumulate(result.method_seconds.begin(), result.method_seconds.end(), 0.0), result.seconds);
  expect_rows_match_the_oracle(result, o, [](const std::string& name, std::int64_t n) {
    return oracle::method(name, 8, 10000.0, std::max(1.0, double(n) / 16.0), 16);
  });
  // The methods differ where they should (the check above can tell them apart).
  auto nll_of = [&](const std::string& method, std::int64_t bucket) {
    for (const auto& r : result.rows) {
      if (r.method == method && r.n == 48 && r.bucket_lo == bucket) return r.mean_nll;
    }
    return 0.0;
  };
  for (const char* m : {"pi", "ntk", "yarn", "yarn_notemp", "dyn_ntk", "dyn_ntk_stale", "llama3", "swa"}) {
    EXPECT_GT(std::fabs(nll_of(m, 32) - nll_of("orig", 32)), 1e-3) << m;
  }
}

// The position-regime methods (NAME:parameters), against the float64 oracle's relative-position matrix.
TEST(Lab, RegimeMethodsWithinOneMilliNatOfTheFloat64Protocol) {
  const auto& tokens = excerpt_tokens();
  ropekit::EvalOptions o = short_lab();
  o.methods = ropekit::parse_methods(
      "rerope:w=6,rerope_logn:w=10,self_extend:W=8,G=3,self_extend:W=6,G=2,logn=1,"
      "dca,dca:chunk=12,local=3,logn");
  ASSERT_EQ(o.methods.size(), 7u);
  EXPECT_EQ(o.methods[2].name, "self_extend:W=8,G=3");
  const ropekit::EvalResult result = ropekit::evaluate(bundled(), tokens, o);
  const int d = 8;
  const double base = 10000.0;
  std::map<std::string, oracle::Method> methods = {{"rerope:w=6", oracle::rerope(d, base, 6, 0)},
                                                   {"rerope_logn:w=10", oracle::rerope(d, base, 10, 16)},
                                                   {"self_extend:W=8,G=3", oracle::self_extend(d, base, 8, 3)},
                                                   {"self_extend:W=6,G=2,logn=1", oracle::self_extend(d, base, 6, 2)},
                                                   {"dca", oracle::dca(d, base, 16, 0)},  // chunk = L0, local = L0 / 32
                                                   {"dca:chunk=12,local=3", oracle::dca(d, base, 12, 3)},
                                                   {"logn", oracle::method("logn", d, base, 1.0, 16)}};
  methods["self_extend:W=6,G=2,logn=1"].logn_length = 16;
  expect_rows_match_the_oracle(result, o, [&](const std::string& name, std::int64_t) { return methods.at(name); });
  // Each method differs from the model's own RoPE where its regimes apply (so the check can fail).
  o.methods = ropekit::parse_methods("orig");
  const ropekit::EvalResult orig = ropekit::evaluate(bundled(), tokens, o);
  auto far = [](const ropekit::EvalResult& r, const std::string& method) {
    for (const auto& row : r.rows) {
      if (row.method == method && row.n == 48 && row.bucket_lo == 32) return row.mean_nll;
    }
    return 0.0;
  };
  for (const auto& [name, om] : methods) EXPECT_GT(std::fabs(far(result, name) - far(orig, "orig")), 1e-3) << name;
}

// The attention probe: every statistic of every method against the float64 oracle's own attention
// probabilities, on windows that hold two stories (so own-BOS and earlier-story mass are exercised).
TEST(Lab, AttentionProbeEqualsTheFloat64OraclesProbabilities) {
  const auto& excerpt = excerpt_tokens();
  // Two short stories then a third: the first 20 tokens of the excerpt's first story, the start of its second.
  std::int64_t second = 1;
  while (excerpt[std::size_t(second)] != 1) ++second;
  std::vector<int> tokens(excerpt.begin(), excerpt.begin() + 20);
  tokens.insert(tokens.end(), excerpt.begin() + second, excerpt.begin() + second + 100);
  ropekit::EvalOptions o = short_lab();
  o.windows = 1;
  o.attention_stats = true;
  o.methods = ropekit::parse_methods(
      "orig,yarn,dyn_ntk,dyn_ntk_stale,swa,restart,rerope:w=6,self_extend:W=8,G=3,dca:chunk=12,local=3,logn");
  const ropekit::EvalResult result = ropekit::evaluate(bundled(), tokens, o);
  ASSERT_EQ(result.distance_edges, (std::vector<std::int64_t>{0, 1, 16, 32}));
  const int d = 8;
  const double base = 10000.0, s = 3.0;
  std::map<std::string, oracle::Method> methods = {{"rerope:w=6", oracle::rerope(d, base, 6, 0)},
                                                   {"self_extend:W=8,G=3", oracle::self_extend(d, base, 8, 3)},
                                                   {"dca:chunk=12,local=3", oracle::dca(d, base, 12, 3)}};
  for (const char* name : {"orig", "yarn", "dyn_ntk", "dyn_ntk_stale", "swa", "restart", "logn"}) {
    methods[name] = oracle::method(name, d, base, s, 16);
  }
  const int layers = bundled().config.n_layers;
  struct Expected {
    double samples = 0, entropy = 0, ratio = 0, ratio_samples = 0, own_bos = 0, earlier = 0;
    std::vector<double> mass = std::vector<double>(4);
  };
  for (const auto& m : o.methods) {
    // [layer + 1][target bucket]: layer 0 here is "all layers".
    std::vector<std::vector<Expected>> expected(std::size_t(layers + 1), std::vector<Expected>(3));
    const std::vector<int> window(tokens.begin(), tokens.begin() + 48);
    std::vector<int> story(48, 0);
    for (int t = 1; t < 48; ++t) story[std::size_t(t)] = window[std::size_t(t)] == 1 ? t : story[std::size_t(t - 1)];
    ASSERT_EQ(story[47], 20);
    oracle::window_nll(bundled(), window, methods.at(m.name), 1,
                       [&](int layer, int i, int, const std::vector<int>& keys, const std::vector<double>& probs) {
                         if (i == 47) return;  // the last query has no target
                         const int bucket = i + 1 < 16 ? 0 : i + 1 < 32 ? 1 : 2;
                         for (Expected* e : {&expected[std::size_t(layer + 1)][std::size_t(bucket)],
                                             &expected[0][std::size_t(bucket)]}) {
                           double entropy = 0;
                           for (std::size_t a = 0; a < keys.size(); ++a) {
                             const double p = probs[a];
                             if (p > 0) entropy -= p * std::log(p);
                             const int dist = i - keys[a];
                             e->mass[dist < 1 ? 0 : dist < 16 ? 1 : dist < 32 ? 2 : 3] += p;
                             if (keys[a] == story[std::size_t(i)]) e->own_bos += p;
                             if (keys[a] < story[std::size_t(i)]) e->earlier += p;
                           }
                           e->samples += 1;
                           e->entropy += entropy;
                           if (keys.size() >= 2) {
                             e->ratio += entropy / std::log(double(keys.size()));
                             e->ratio_samples += 1;
                           }
                         }
                       });
    int rows = 0;
    double earlier_total = 0;
    for (const ropekit::AttentionStatsRow& r : result.attention) {
      if (r.method != m.name) continue;
      ++rows;
      ASSERT_EQ(r.n, 48);
      const int bucket = r.query_lo == 0 ? 0 : r.query_lo == 16 ? 1 : 2;
      const Expected& e = expected[std::size_t(r.layer + 1)][std::size_t(bucket)];
      const std::string where = m.name + " layer " + std::to_string(r.layer) + " targets " + std::to_string(r.query_lo);
      EXPECT_EQ(double(r.samples), e.samples) << where;
      EXPECT_NEAR(r.entropy, e.entropy / e.samples, 1e-4) << where;
      EXPECT_NEAR(r.entropy_ratio, e.ratio / e.ratio_samples, 1e-4) << where;
      EXPECT_NEAR(r.own_bos, e.own_bos / e.samples, 1e-4) << where;
      EXPECT_NEAR(r.earlier_stories, e.earlier / e.samples, 1e-4) << where;
      ASSERT_EQ(r.mass.size(), 4u);
      double total = 0;
      for (std::size_t b = 0; b < 4; ++b) {
        EXPECT_NEAR(r.mass[b], e.mass[b] / e.samples, 1e-4) << where << " distance bucket " << b;
        total += r.mass[b];
      }
      EXPECT_NEAR(total, 1.0, 1e-9) << where;
      earlier_total += r.earlier_stories;
    }
    EXPECT_EQ(rows, (layers + 1) * 3) << m.name;
    // Restart never sees the first story; the others do (so the statistic can tell them apart).
    if (m.name == "restart") {
      EXPECT_EQ(earlier_total, 0.0);
    } else {
      EXPECT_GT(earlier_total, 1e-3) << m.name;
    }
  }
}

TEST(Lab, RegimeMethodParametersAreChecked) {
  EXPECT_ERROR(ropekit::parse_methods("rerope:x=3"), "unknown parameter x", "logn, w");
  EXPECT_ERROR(ropekit::parse_methods("rerope:w=abc"), "w = \"abc\"", "not an integer");
  EXPECT_ERROR(ropekit::parse_methods("rerope:w"), "\"w\" is not key=value");
  EXPECT_ERROR(ropekit::parse_methods("rerope:w=3,w=4"), "w is given twice");
  EXPECT_ERROR(ropekit::parse_methods("swa:w=3"), "only rerope");
  ropekit::EvalOptions o;
  o.window_size = 48;
  o.windows = 1;
  o.lengths = {48};
  o.trained_length = 16;
  const auto& tokens = excerpt_tokens();
  for (const auto& [method, needle] : std::vector<std::pair<const char*, const char*>>{
           {"rerope:w=0", "w = 0"},
           {"self_extend:G=0", "G = 0"},
           {"self_extend:W=4,G=8", "W = 4"},
           {"dca:chunk=16,local=16", "local = 16"},
           {"rerope:w=48", "w = 48 is not below the largest length N = 48"},
           {"self_extend:W=60,G=2", "W = 60"},
           {"dca:chunk=48", "chunk = 48"},
           {"dca:chunk=0", "chunk = 0"},
           {"logn:L=1", "L = 1"}}) {
    o.methods = ropekit::parse_methods(method);
    EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), method, needle);
  }
}

// restart on a window with a story boundary inside (the windows above hold one story each).
TEST(Lab, RestartCutsTheContextAtEveryBos) {
  const auto& all = excerpt_tokens();
  std::size_t second_story = 1;
  while (all[second_story] != 1) ++second_story;
  std::vector<int> tokens(all.begin(), all.begin() + 25);
  tokens.insert(tokens.end(), all.begin() + std::ptrdiff_t(second_story),
                all.begin() + std::ptrdiff_t(second_story) + 39);
  ropekit::EvalOptions o;
  o.window_size = 64;
  o.lengths = {64};
  o.buckets = {0, 25};
  o.methods = ropekit::parse_methods("restart,orig");
  const auto result = ropekit::evaluate(bundled(), tokens, o);
  ASSERT_EQ(result.rows.size(), 4u);
  for (const auto& row : result.rows) {
    const auto nll = oracle::window_nll(bundled(), tokens, oracle::method(row.method, 8, 10000.0, 1.0, 512), 1);
    double sum = 0;
    for (std::int64_t t = row.bucket_lo; t < std::min<std::int64_t>(row.bucket_hi, 64); ++t)
      sum += t > 0 ? nll[std::size_t(t - 1)] : 0.0;
    EXPECT_NEAR(row.mean_nll, sum / double(row.tokens), 1e-3) << row.method << " " << row.bucket_lo;
  }
  EXPECT_GT(std::fabs(result.rows[1].mean_nll - result.rows[3].mean_nll), 1e-2);  // after the BOS at 25
}

TEST(Lab, CustomFragmentsWithTheScale) {
  ropekit::EvalOptions o;
  o.window_size = 48;
  o.windows = 1;
  o.lengths = {48};
  o.buckets = {0, 16};
  o.trained_length = 16;
  o.methods = ropekit::parse_methods(
      "pi,lin={\"rope_type\":\"linear\",\"factor\":\"s\"},"
      "dyn={\"rope_type\":\"dynamic\",\"factor\":\"s\"}");
  ASSERT_EQ(o.methods.size(), 3u);
  EXPECT_EQ(o.methods[1].fragment, "{\"rope_type\":\"linear\",\"factor\":\"s\"}");
  const auto result = ropekit::evaluate(bundled(), excerpt_tokens(), o);
  ASSERT_EQ(result.rows.size(), 6u);
  EXPECT_NEAR(result.rows[0].mean_nll, result.rows[2].mean_nll, 1e-6);  // pi = linear with factor s
  o.methods = ropekit::parse_methods("dyn_ntk");
  const auto dyn = ropekit::evaluate(bundled(), excerpt_tokens(), o);
  EXPECT_NEAR(dyn.rows[1].mean_nll, result.rows[5].mean_nll, 1e-6);  // "dynamic" fragment = dyn_ntk
}

// Every length of the protocol is a multiple of the trained length unless given: windows of 8·L0, N and
// bucket edges at L0/2 … 8·L0, and the regime methods' windows (rerope w = L0/2, self_extend W = L0/4):
// `rerope` runs exactly as `rerope:w=L0/2`.
TEST(Lab, DefaultsAreMultiplesOfTheTrainedLength) {
  ropekit::EvalOptions o;
  o.trained_length = 16;
  const ropekit::EvalOptions e = ropekit::effective_options(o, 512);
  EXPECT_EQ(e.window_size, 128);
  EXPECT_EQ(e.lengths, (std::vector<std::int64_t>{8, 16, 32, 64, 128}));
  EXPECT_EQ(e.buckets, (std::vector<std::int64_t>{0, 8, 16, 32, 64, 128}));
  const ropekit::EvalOptions bundled_defaults = ropekit::effective_options({}, 512);  // the 260K model's table
  EXPECT_EQ(bundled_defaults.window_size, 4096);
  EXPECT_EQ(bundled_defaults.lengths, (std::vector<std::int64_t>{256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(bundled_defaults.buckets, (std::vector<std::int64_t>{0, 256, 512, 1024, 2048, 4096}));
  o.windows = 1;
  o.lengths = {48};
  o.methods = ropekit::parse_methods("rerope,rerope:w=8,self_extend,self_extend:W=8");
  const ropekit::EvalResult r = ropekit::evaluate(bundled(), excerpt_tokens(), o);
  EXPECT_EQ(r.window_size, 128);
  std::map<std::string, std::vector<double>> nll;
  for (const auto& row : r.rows) nll[row.method].push_back(row.mean_nll);
  EXPECT_EQ(nll["rerope"], nll["rerope:w=8"]);
  EXPECT_EQ(nll["self_extend"], nll["self_extend:W=8"]);
  // Parameters that make no sense for any L0, and an L0 the protocol cannot scale.
  o.methods = ropekit::parse_methods("rerope:w=0");
  EXPECT_ERROR(ropekit::evaluate(bundled(), excerpt_tokens(), o), "rerope:w=0", "w = 0");
  o.trained_length = 1;
  EXPECT_ERROR(ropekit::effective_options(o, 512), "trained-length = 1");
}

TEST(Lab, BadOptionsAreErrors) {
  const auto& tokens = excerpt_tokens();
  ropekit::EvalOptions o;
  o.window_size = 1 << 20;
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "window-size = 1048576", "larger than the");
  o.window_size = 64;
  o.lengths = {128};
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "N = 128", "window-size = 64");
  o.lengths = {64};
  o.windows = 100000;
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "windows = 100000");
  o.windows = 1;
  o.buckets = {0, 32, 16};
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "buckets", "16 after 32");
  o.buckets = {0, 32};
  std::vector<int> bad(tokens.begin(), tokens.begin() + 100);
  bad[7] = 999;
  EXPECT_ERROR(ropekit::evaluate(bundled(), bad, o), "tokens[7] = 999");
  EXPECT_ERROR(ropekit::parse_methods("orig,nope"), "nope", "not a built-in");
  EXPECT_ERROR(ropekit::parse_methods("orig,orig"), "orig is given twice");
  EXPECT_ERROR(ropekit::parse_methods("x="), "empty JSON");
  o.methods = ropekit::parse_methods("bad={\"rope_type\":\"warp\",\"factor\":\"s\"}");
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "method bad", "warp");
}

}  // namespace

// The runner's own kernels (lab/kernels.hpp) against long double, at the bounds their header states.
TEST(LabKernels, LogSumExpWithinItsBoundOfLongDouble) {
  std::mt19937 rng(7);
  for (const std::size_t n : {1u, 2u, 7u, 15u, 16u, 17u, 63u, 64u, 65u, 1000u, 32000u, 128256u}) {
    for (const float spread : {0.5f, 8.0f, 30.0f, 200.0f}) {
      std::uniform_real_distribution<float> value(-spread, spread);
      std::vector<float> row(n);
      for (float& x : row) x = value(rng) + 12.0f;
      long double max = row[0];
      for (float x : row) max = std::max(max, static_cast<long double>(x));
      long double sum = 0;
      for (float x : row) sum += std::exp(static_cast<long double>(x) - max);
      const double exact = static_cast<double>(max + std::log(sum));
      EXPECT_NEAR(ropekit::lab::log_sum_exp(row), exact, 1e-5) << "n = " << n << ", spread = " << spread;
    }
  }
  // One dominant logit, the rest far below it (their exp underflows): exactly the maximum.
  std::vector<float> peaked(1000, -1e30f);
  peaked[417] = 3.5f;
  EXPECT_EQ(ropekit::lab::log_sum_exp(peaked), 3.5);
}

TEST(LabKernels, MatvecRowsWithinTheDotProductBound) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const std::size_t in : {1u, 5u, 16u, 31u, 33u, 288u, 768u}) {
    const std::size_t out = 37;
    std::vector<float> w(out * in), x(in);
    for (float& v : w) v = value(rng);
    for (float& v : x) v = value(rng);
    for (const bool accumulate : {false, true}) {
      std::vector<float> y(out, 0.25f);
      const std::size_t first = 3, last = 30;
      ropekit::lab::matvec_rows(w.data(), x.data(), y.data(), in, first, last, accumulate);
      // n products and sums in float32 (fused or not): |error| ≤ γ_{n+1} Σ|w||x| (+ the accumulate's rounding).
      const double gamma = double(in + 2) * 0x1p-24 / (1 - double(in + 2) * 0x1p-24);
      for (std::size_t o = 0; o < out; ++o) {
        if (o < first || o >= last) {
          EXPECT_EQ(y[o], 0.25f) << "row " << o << " is outside [first, last)";
          continue;
        }
        long double exact = accumulate ? 0.25L : 0.0L, magnitude = accumulate ? 0.25L : 0.0L;
        for (std::size_t i = 0; i < in; ++i) {
          exact += static_cast<long double>(w[o * in + i]) * x[i];
          magnitude += std::abs(static_cast<long double>(w[o * in + i]) * x[i]);
        }
        EXPECT_LE(std::abs(static_cast<double>(y[o] - exact)), gamma * static_cast<double>(magnitude))
            << "in = " << in << ", row " << o << (accumulate ? ", accumulating" : "");
      }
    }
  }
}

// LongRoPE across the switch, through the runner and its KV cache (issue 39): a window read past
// original_max_position_embeddings switches from the short to the long factors at the first token past it — the
// cache re-rotated once (KvCache::rerotate returns true exactly then) — and the NLL equals the float64 protocol
// whose every query and key use the plan of the length read so far.
TEST(Lab, LongRopeAcrossTheSwitchMatchesTheFloat64Protocol) {
  const auto& tokens = excerpt_tokens();
  ropekit::EvalOptions o = short_lab();
  o.methods = ropekit::parse_methods(
      R"(lr={"rope_type": "longrope", "short_factor": [1, 1.5, 2, 3], "long_factor": [1, 2, 4, 8],)"
      R"( "original_max_position_embeddings": 16, "factor": 4})");
  const ropekit::EvalResult result = ropekit::evaluate(bundled(), tokens, o);
  const auto plain = oracle::default_inv_freq(10000.0, 8);
  oracle::Method lr;
  lr.inv_freq = [plain](std::int64_t length) {
    const std::vector<double> factors =
        length > 16 ? std::vector<double>{1, 2, 4, 8} : std::vector<double>{1, 1.5, 2, 3};
    auto f = plain;
    for (std::size_t i = 0; i < f.size(); ++i) f[i] /= factors[i];
    return f;
  };
  lr.magnitude = std::sqrt(1 + std::log(4.0) / std::log(16.0));  // HF's LongRoPE attention factor
  lr.keys = oracle::Method::Keys::PerQuery;
  expect_rows_match_the_oracle(result, o, [&](const std::string&, std::int64_t) { return lr; });

  // The cache through the switch: one re-rotation, at the first token past 16.
  ropekit::Spec spec = bundled().rope.layer().spec;
  spec.scaling = ropekit::scaling::LongRope{{1, 1.5, 2, 3}, {1, 2, 4, 8}, 16, 4.0, std::nullopt};
  ropekit::KvCache cache(ropekit::Rope(spec, ropekit::AngleMode::Accurate, 1), {.capacity = 32, .kv_heads = 1});
  std::vector<float> k(8, 0.5f), v(8, 0.25f);
  int rerotations = 0;
  std::optional<ropekit::Rope> previous;
  for (std::int64_t t = 0; t < 24; ++t) {
    ropekit::Rope now(spec, ropekit::AngleMode::Accurate, t + 1);
    if (previous) rerotations += cache.rerotate(*previous, now) ? 1 : 0;
    const std::vector<std::int64_t> at{t};
    cache.append(now, ropekit::bshd(k.data(), ropekit::DType::F32, 1, 1, 1, 8),
                 ropekit::bshd(v.data(), ropekit::DType::F32, 1, 1, 1, 8), ropekit::positions(at));
    if (t == 15) {
      EXPECT_EQ(rerotations, 0) << "short factors up to length 16";
    }
    if (t == 16) {
      EXPECT_EQ(rerotations, 1) << "the switch at length 17";
    }
    previous.emplace(std::move(now));
  }
  EXPECT_EQ(rerotations, 1);
}
