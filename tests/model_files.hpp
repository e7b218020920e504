// tests/model_files.hpp — writes a LlamaModel back out as the formats the loaders read (llama2.c's
// legacy and version-1 exports, GGUF with F32/F16/BF16 tensors and a tokenizer), and makes tiny random
// models: for round-trip tests, malformed-input tests and fuzz seeds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf_writer.hpp"
#include "ropekit/dtype.hpp"
#include "ropekit/model.hpp"
#include "ropekit/tokenizer.hpp"

namespace model_files {

inline void put_bytes(std::vector<std::byte>& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}
template <class T>
void put(std::vector<std::byte>& out, T v) {
  put_bytes(out, &v, sizeof v);
}
inline void put_floats(std::vector<std::byte>& out, const std::vector<float>& v) {
  put_bytes(out, v.data(), v.size() * 4);
}

// The legacy export (models/README.md): header, weights, the two unused freq_cis tables, classifier.
inline std::vector<std::byte> legacy_bytes(const ropekit::LlamaModel& m) {
  const ropekit::LlamaConfig& c = m.config;
  std::vector<std::byte> out;
  for (std::int32_t v : {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                         c.shared_classifier ? c.vocab_size : -c.vocab_size, std::int32_t(c.seq_len)}) {
    put(out, v);
  }
  put_floats(out, m.token_embedding);
  for (const auto& l : m.layers) put_floats(out, l.rms_att);
  for (const auto& l : m.layers) put_floats(out, l.wq);
  for (const auto& l : m.layers) put_floats(out, l.wk);
  for (const auto& l : m.layers) put_floats(out, l.wv);
  for (const auto& l : m.layers) put_floats(out, l.wo);
  for (const auto& l : m.layers) put_floats(out, l.rms_ffn);
  for (const auto& l : m.layers) put_floats(out, l.w1);
  for (const auto& l : m.layers) put_floats(out, l.w2);
  for (const auto& l : m.layers) put_floats(out, l.w3);
  put_floats(out, m.rms_final);
  put_floats(out, std::vector<float>(std::size_t(c.seq_len * c.head_dim()), 0.5f));  // freq_cis real + imag
  if (!c.shared_classifier) put_floats(out, m.classifier);
  return out;
}

// export.py's version1_export.
inline std::vector<std::byte> version1_bytes(const ropekit::LlamaModel& m) {
  const ropekit::LlamaConfig& c = m.config;
  std::vector<std::byte> out;
  put(out, std::uint32_t{0x616b3432});
  put(out, std::int32_t{1});
  for (std::int32_t v :
       {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, std::int32_t(c.seq_len)}) {
    put(out, v);
  }
  put(out, std::uint8_t(c.shared_classifier ? 1 : 0));
  out.resize(256, std::byte{0});
  for (const auto& l : m.layers) put_floats(out, l.rms_att);
  for (const auto& l : m.layers) put_floats(out, l.rms_ffn);
  put_floats(out, m.rms_final);
  put_floats(out, m.token_embedding);
  for (const auto& l : m.layers) put_floats(out, l.wq);
  for (const auto& l : m.layers) put_floats(out, l.wk);
  for (const auto& l : m.layers) put_floats(out, l.wv);
  for (const auto& l : m.layers) put_floats(out, l.wo);
  for (const auto& l : m.layers) put_floats(out, l.w1);
  for (const auto& l : m.layers) put_floats(out, l.w2);
  for (const auto& l : m.layers) put_floats(out, l.w3);
  if (!c.shared_classifier) put_floats(out, m.classifier);
  return out;
}

// ggml types: 0 F32, 1 F16, 30 BF16.
inline std::vector<std::byte> encode(const std::vector<float>& v, std::uint32_t type) {
  std::vector<std::byte> out;
  for (float x : v) {
    if (type == 0) {
      put(out, x);
    } else {
      put(out, type == 1 ? ropekit::float_to_f16(x) : ropekit::float_to_bf16(x));
    }
  }
  return out;
}

// GGUF llama: the model's weights (llama2.c's q/k rows are already in llama.cpp's interleaved order),
// its hyper-parameters, and the tokenizer when given (pieces with " " written as U+2581).
inline std::vector<std::byte> gguf_bytes(const ropekit::LlamaModel& m, std::uint32_t type,
                                         const ropekit::Tokenizer* tokenizer = nullptr) {
  const ropekit::LlamaConfig& c = m.config;
  gguf_test::Writer w;
  w.str("general.architecture", "llama");
  w.u32("llama.embedding_length", std::uint32_t(c.dim));
  w.u32("llama.feed_forward_length", std::uint32_t(c.hidden_dim));
  w.u32("llama.block_count", std::uint32_t(c.n_layers));
  w.u32("llama.attention.head_count", std::uint32_t(c.n_heads));
  w.u32("llama.attention.head_count_kv", std::uint32_t(c.n_kv_heads));
  w.u32("llama.context_length", std::uint32_t(c.seq_len));
  w.u32("llama.rope.dimension_count", std::uint32_t(c.head_dim()));
  w.f32("llama.rope.freq_base", 10000.0f);
  w.f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  if (tokenizer) {
    w.str("tokenizer.ggml.model", "llama");
    std::vector<std::string> pieces;
    std::vector<float> scores;
    for (int i = 0; i < tokenizer->vocab_size(); ++i) {
      std::string piece;
      for (char ch : tokenizer->piece(i)) piece += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
      pieces.push_back(piece);
      scores.push_back(tokenizer->score(i));
    }
    w.str_array("tokenizer.ggml.tokens", pieces);
    w.f32_array("tokenizer.ggml.scores", scores);
    w.u32("tokenizer.ggml.bos_token_id", 1);
    w.u32("tokenizer.ggml.eos_token_id", 2);
  }
  const auto dim = std::uint64_t(c.dim), hidden = std::uint64_t(c.hidden_dim), kv = std::uint64_t(c.kv_dim());
  const auto vocab = std::uint64_t(c.vocab_size);
  w.tensor("token_embd.weight", {dim, vocab}, type, encode(m.token_embedding, type));
  for (int l = 0; l < c.n_layers; ++l) {
    const auto& L = m.layers[std::size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.tensor(p + "attn_norm.weight", {dim}, 0, encode(L.rms_att, 0));
    w.tensor(p + "attn_q.weight", {dim, dim}, type, encode(L.wq, type));
    w.tensor(p + "attn_k.weight", {dim, kv}, type, encode(L.wk, type));
    w.tensor(p + "attn_v.weight", {dim, kv}, type, encode(L.wv, type));
    w.tensor(p + "attn_output.weight", {dim, dim}, type, encode(L.wo, type));
    w.tensor(p + "ffn_norm.weight", {dim}, 0, encode(L.rms_ffn, 0));
    w.tensor(p + "ffn_gate.weight", {dim, hidden}, type, encode(L.w1, type));
    w.tensor(p + "ffn_down.weight", {hidden, dim}, type, encode(L.w2, type));
    w.tensor(p + "ffn_up.weight", {dim, hidden}, type, encode(L.w3, type));
  }
  w.tensor("output_norm.weight", {dim}, 0, encode(m.rms_final, 0));
  if (!c.shared_classifier) w.tensor("output.weight", {dim, vocab}, type, encode(m.classifier, type));
  return w.bytes();
}

// A tiny model with random weights (for malformed-input tests and fuzz seeds).
inline ropekit::LlamaModel tiny_model(bool shared = true, unsigned seed = 1) {
  ropekit::LlamaModel m;
  m.config = {.dim = 8,
              .hidden_dim = 12,
              .n_layers = 2,
              .n_heads = 2,
              .n_kv_heads = 1,
              .vocab_size = 16,
              .seq_len = 8,
              .shared_classifier = shared};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  auto random = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  const std::size_t dim = 8, hidden = 12, kv = 4, vocab = 16;
  m.token_embedding = random(vocab * dim);
  for (int l = 0; l < 2; ++l) {
    m.layers.push_back({std::vector<float>(dim, 1.0f), random(dim * dim), random(kv * dim), random(kv * dim),
                        random(dim * dim), std::vector<float>(dim, 1.0f), random(hidden * dim), random(dim * hidden),
                        random(hidden * dim)});
  }
  m.rms_final = std::vector<float>(dim, 1.0f);
  if (!shared) m.classifier = random(vocab * dim);
  return m;
}

// llama2.c tokenizer.bin bytes for `pieces` with `scores`.
inline std::vector<std::byte> tokenizer_bytes(const std::vector<std::string>& pieces,
                                              const std::vector<float>& scores) {
  std::vector<std::byte> out;
  std::uint32_t max_length = 0;
  for (const auto& p : pieces) max_length = std::max<std::uint32_t>(max_length, std::uint32_t(p.size()));
  put(out, max_length);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    put(out, scores[i]);
    put(out, std::int32_t(pieces[i].size()));
    put_bytes(out, pieces[i].data(), pieces[i].size());
  }
  return out;
}

}  // namespace model_files
