// ropekit/model.hpp — a Llama-architecture decoder running on ropekit's attention and KV cache:
// the proof that the rotations are right on a real checkpoint, and the engine of the lab (lab.hpp).
//
//   ropekit::LlamaModel model = ropekit::load_model_file("models/tinystories-260k.bin");
//   ropekit::Rope rope(model.rope.spec);                       // or any other Spec
//   ropekit::LlamaRunner runner(model, {.capacity = 512});
//   std::vector<float> logits(n * model.config.vocab_size);
//   runner.forward(rope, tokens, positions, logits);           // prefill: n tokens, one call
//
// The forward pass is llama2.c's run.c / Hugging Face's LlamaForCausalLM: token embedding; per layer
// x += Wo·attention(RoPE(Wq·rms(x)), RoPE(Wk·rms(x)), Wv·rms(x)) with GQA, then
// x += W2·(silu(W1·rms(x)) ⊙ W3·rms(x)); final RMSNorm; classifier (shared with the embedding or not).
// Queries are rotated on load by ropekit::attention; keys are stored rotated in one KvCache per layer.
// Matrix products go through OpenBLAS (cblas_sgemm for many tokens, cblas_sgemv for one).
//   Precision: float32 activations and arithmetic (BLAS and the attention kernels' FMAs); F16/BF16 and quantized
//     weights are kept as the file stores them and widened to float32 (exactly, or as ggml dequantizes) block by
//     block as each product reads them: the same products as over those widened values stored as float32.
//   Error: not bounded per logit (a model is a deep composition); what is checked is the lab's
//     contract: the mean NLL of every position bucket within 1e-3 nats of an independent float64
//     forward (tests/model_test.cpp, every method of lab.hpp on the bundled model).
//   Valid range: positions in [0, 2^47) as the Rope allows; at most `capacity` tokens per cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ropekit/attention.hpp"
#include "ropekit/config.hpp"
#include "ropekit/rope.hpp"

namespace ropekit {

struct LlamaConfig {
  int dim = 0;         // model width
  int hidden_dim = 0;  // feed-forward width
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (GQA: n_heads is a multiple)
  int vocab_size = 0;
  std::int64_t seq_len = 0;       // the context length the model was trained at (llama2.c seq_len, GGUF context_length)
  float norm_eps = 1e-5f;         // RMSNorm epsilon
  bool shared_classifier = true;  // the classifier is the token embedding
  int bos_id = 1;
  std::int64_t sliding_window = 0;  // > 0: every layer attends to at most this many keys, its own included (Mistral)

  int head_size = 0;  // 0: dim / n_heads; else the head size, n_heads · head_size may differ from dim (Qwen3)
  // Gemma: the feed-forward is GeGLU, gelu(w1 x) ⊙ w3 x with gelu's tanh form (HF's gelu_pytorch_tanh), not SwiGLU;
  // the token embeddings are multiplied by embed_scale (> 0; HF: a float32 √dim); the attention's softmax scale is
  // softmax_scale (> 0: query_pre_attn_scalar^-0.5) rather than head_dim^-0.5.
  bool gelu_tanh = false;
  float embed_scale = 0.0f;
  double softmax_scale = 0.0;
  // Gemma 2's logit soft-capping (> 0): attention logits → cap·tanh(logits / cap) (AttentionOptions::logit_softcap),
  // and the output logits likewise with final_softcap; 0: none.
  double attn_softcap = 0.0;
  double final_softcap = 0.0;

  int head_dim() const { return head_size > 0 ? head_size : dim / n_heads; }
  int q_dim() const { return n_heads * head_dim(); }
  int kv_dim() const { return n_kv_heads * head_dim(); }
};

// How a weight matrix's values are stored (the values are GGUF's ggml type ids): float32, or kept in the checkpoint's
// own encoding — F16/BF16 (safetensors and GGUF), or ggml's quantized blocks — and widened to float32 block by block
// as the runner's products read them.
enum class WeightEncoding : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30
};
std::string_view to_string(WeightEncoding encoding);

// A weight matrix [rows × cols], row-major (out, in). float32 matrices are the vector itself (as llama2.c stores
// them) or float32 rows in a file's map (a GGUF that load_model_file maps: encoding F32, packed); the others (F16,
// BF16, quantized: the loaders keep what a GGUF or safetensors file holds) have `packed` rows of row_bytes bytes
// each, in memory the model's `storage` keeps alive (the file's map), and an empty vector.
struct WeightMatrix : std::vector<float> {
  WeightMatrix() = default;
  WeightMatrix(std::vector<float> values) : std::vector<float>(std::move(values)) {}  // NOLINT: implicit, float32
  WeightMatrix(std::initializer_list<float> values) : std::vector<float>(values) {}

  WeightEncoding encoding = WeightEncoding::F32;
  std::int64_t rows = 0, cols = 0;  // packed matrices (float32 ones: their size is rows · cols, not stated here)
  const std::byte* packed = nullptr;
  std::size_t row_bytes = 0;

  bool is_packed() const { return packed != nullptr; }
  // The float32 rows, where the values are float32 (the vector, or F32 rows in a map); null: they need widening.
  const float* float_rows() const {
    if (packed == nullptr) return data();
    return encoding == WeightEncoding::F32 ? reinterpret_cast<const float*>(packed) : nullptr;
  }
  // No values at all (neither float32 nor packed): an absent tensor.
  bool empty() const { return std::vector<float>::empty() && packed == nullptr; }
  // Rows [first, first + count) as float32 into out (count · cols values, or count · `width` for float32 matrices,
  // width = their row length): F16/BF16 widened exactly, quantized blocks dequantized bit for bit as gguf-py's
  // dequantize (lab/quants.hpp), float32 copied. Valid range: rows of the matrix (unchecked).
  void rows_to_float(std::int64_t first, std::int64_t count, std::int64_t width, float* out) const;
  // Every value as float32 (rows · cols of them): what the tests compare with a reference's weights.
  std::vector<float> to_floats(std::int64_t width) const;
};

struct LlamaLayerWeights {
  std::vector<float> rms_att;  // [dim]
  WeightMatrix wq;             // [q_dim, dim]
  WeightMatrix wk;             // [kv_dim, dim]
  WeightMatrix wv;             // [kv_dim, dim]
  WeightMatrix wo;             // [dim, q_dim]
  std::vector<float> rms_ffn;  // [dim]
  WeightMatrix w1;             // [hidden, dim] (gate)
  WeightMatrix w2;             // [dim, hidden] (down)
  WeightMatrix w3;             // [hidden, dim] (up)
  // Biases added to q, k and v after their products (Qwen2); empty: none.
  std::vector<float> bq;  // [q_dim]
  std::vector<float> bk;  // [kv_dim]
  std::vector<float> bv;  // [kv_dim]
  // RMSNorm of every q and k head before the rotation (Qwen3's q_norm / k_norm, eps = norm_eps); empty: none.
  std::vector<float> q_norm;  // [head_dim]
  std::vector<float> k_norm;  // [head_dim]
  // Gemma's norms of the attention's and the feed-forward's outputs, before each residual add; empty: none.
  std::vector<float> rms_post_att;  // [dim]
  std::vector<float> rms_post_ffn;  // [dim]
};

struct LlamaModel {
  std::string source;  // "llama2.c FILE", "gguf FILE"
  LlamaConfig config;
  WeightMatrix token_embedding;  // [vocab, dim]
  std::vector<LlamaLayerWeights> layers;
  std::vector<float> rms_final;  // [dim]
  WeightMatrix classifier;       // [vocab, dim]; empty when shared with the embedding
  // What the packed matrices point into (a file's memory map, or a copy of the bytes a loader was given); null
  // when every matrix is float32.
  std::shared_ptr<const void> storage;
  // Per layer, 1 where the layer has no positional encoding (SmolLM3's no_rope_layers zeros): its queries and keys
  // are not rotated, whatever rope the runner is given; empty: RoPE in every layer.
  std::vector<std::uint8_t> nope_layers;
  // Per layer, its sliding window (> 0) or none (0): the layers Qwen's use_sliding_window picks (from
  // max_window_layers on); empty: config.sliding_window on every layer.
  std::vector<std::int64_t> layer_windows;
  // Per layer, a RoPE of the layer's own (Gemma 3's local layers: θ 1e4, unscaled) that the call's rope — the
  // model's main one, rope_layer(), or the method a lab run puts in its place — does not replace; empty or nullopt:
  // the call's rope.
  std::vector<std::optional<Spec>> layer_specs;
  // The model's own RoPE: llama2.c checkpoints rotate interleaved pairs (2j, 2j+1) with base 10000
  // over the whole head (run.c); GGUF from its metadata (ropekit/config.hpp, read_gguf).
  ModelPositions rope;

  const WeightMatrix& classifier_weights() const { return classifier.empty() ? token_embedding : classifier; }
  bool nope(int layer) const { return !nope_layers.empty() && nope_layers[std::size_t(layer)] != 0; }
  // The model's main RoPE: the only RoPE layer group's, or the "full_attention" group's where the groups differ
  // (Gemma 3: its local layers' own RoPE is in layer_specs). Layers of another encoding are the NoPE ones above.
  // Errors: a model without RoPE layers.
  const LayerPositions& rope_layer() const;
  std::int64_t window(int layer) const {
    return layer_windows.empty() ? config.sliding_window : layer_windows[std::size_t(layer)];
  }
};

// Loaders. Every length, count and offset is checked before use; anything malformed or truncated is
// a ropekit::Error naming the file (`origin`), the field or tensor and the byte offset.
//
// llama2.c checkpoints: the legacy export (7 int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size — negative when an unshared classifier follows — and seq_len, then float32 weights,
// models/README.md) and export.py's "version 1" (uint32 magic "ak42", int32 version 1, the same 7
// int32, a uint8 shared-classifier flag, zeros to byte 256, then float32 weights in its order).
// Trailing bytes after the last tensor are an error (a file of another format or a wrong header).
LlamaModel load_llama2c(std::span<const std::byte> bytes, std::string_view origin = "llama2.c");
// GGUF of general.architecture "llama" with F32, F16, BF16 or quantized Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
// tensors:
// float32 ones copied, the matrices of the others kept packed (WeightMatrix; `bytes` is copied once into the model's
// storage, a file load_model_file maps is not copied) and dequantized as the products read them, bit for bit as
// llama.cpp's gguf package dequantizes them; 1-D tensors (norms) widened at load. Any other type: an error naming the
// tensor and its type. Hyper-parameters from the llama.* keys; RoPE through read_gguf
// (llama.cpp stores q/k rows for interleaved pairs, so the pairing is Interleaved).
LlamaModel load_gguf_model(std::span<const std::byte> bytes, std::string_view origin = "gguf");
// A Hugging Face model directory: config.json (model_type "llama"; "mistral" — its sliding_window on every layer;
// "qwen2" — q/k/v biases; "qwen3" — q/k RMSNorm per head, a head_dim of its own (both: use_sliding_window's windows on
// the layers from max_window_layers on); "smollm3" — NoPE layers; "phi3" — fused qkv and gate/up projections, split at
// load; hidden_act silu; "gemma2" — (1 + w) norms stored as 1 + w, four per layer, embeddings × √hidden, GeGLU,
// query_pre_attn_scalar, sliding windows on alternate layers, attention and final logit soft-capping; "gemma3_text" —
// the same with local layers of their own RoPE (layer_specs) and q/k norms per head) and the weights in
// model.safetensors or in
// shards named by model.safetensors.index.json, read through memory
// maps; F32, F16 and BF16 tensors (any other dtype: an error naming the file, the tensor and its dtype), each shape
// checked against config.json, tied embeddings (tie_word_embeddings). RoPE from the same config.json (read_config): HF
// stores q/k rows for its rotate_half, so the pairing is Half. Logits equal transformers' (tests/hf_model_test.cpp).
LlamaModel load_hf_model(const std::filesystem::path& dir);
// How load_model_file reads a file.
struct LoadOptions {
  // A GGUF file is memory-mapped and its packed matrices are read from the map for as long as the model (or a copy)
  // lives: resident memory about the file's size, not twice it — but the file must then not be truncated or rewritten
  // while the model lives. Where that cannot be promised, map = false reads the whole file into memory first
  // (llama.cpp's --no-mmap): the model is then independent of the file. The contract of the map, as for llama.cpp and
  // any mmap reader: a truncation under it makes the next read of a page past the new end raise SIGBUS, which
  // ropekit does not catch (tests/model_test.cpp shows both). llama2.c checkpoints are always read into memory; a
  // Hugging Face directory's shards are mapped only while loading (the weights are copied out of them).
  bool map = true;
};

// A directory → load_hf_model; a file by content: "GGUF" → GGUF, "ak42" → llama2.c version 1, anything else → the
// legacy llama2.c header.
LlamaModel load_model_file(const std::filesystem::path& path, const LoadOptions& options = {});

// A Spec for `model` with its rope_scaling / rope_parameters replaced by `fragment` (config.json
// syntax, read by read_config with the model's head_dim, base, pairing, and max_position_embeddings
// = `trained_length`, by default the model's seq_len). Errors: JSON the reader rejects, named as `origin`.
Spec spec_with_scaling(const LlamaModel& model, std::string_view fragment, std::string_view origin = "--rope-scaling",
                       std::optional<std::int64_t> trained_length = std::nullopt);

struct RunnerOptions {
  std::int64_t capacity = 0;    // tokens per layer cache (required, > 0)
  DType kv_dtype = DType::F32;  // KV-cache storage
  int threads = 0;              // 0: ropekit::default_threads() (attention and BLAS)
  // Single-token products over block-quantized matrices (Q4_0 … Q6_K) with the token's activations quantized to
  // 8 bits per value and integer dot products, as llama.cpp decodes: faster, and no longer the dequantized model's
  // float32 numbers (error bound: lab::int8_matvec_rows, docs/numerics.md). Prefill (many tokens) and F32/F16/BF16
  // matrices are unaffected. Off: every product is the float32 one over the dequantized weights.
  bool int8_activations = false;
};

// Per-call attention facts that are not the RoPE.
struct ForwardOptions {
  std::int64_t window = 0;  // > 0: sliding window of this many keys (AttentionOptions::window)
  // Stale keys (Hugging Face's dynamic-NTK cache): keys are kept as rotated at their append, even
  // when `rope`'s plan has changed since; queries use `rope`. Without it a plan change needs rerotate().
  bool stale_keys = false;
  // Position regimes (ReRoPE, SelfExtend, dual-chunk; attention.hpp) and log-n query scaling. The
  // layer caches are made for the regimes of the first forward after clear(); changing them while
  // tokens are cached is an error.
  PositionRegimes regimes;
  std::int64_t logn_length = 0;
  // One Rope per token (dynamic NTK as Hugging Face runs it: the plan of the length read so far): token i
  // reads with token_ropes[i] — its query, its key's rotation and, unless stale_keys, the cached keys,
  // re-rotated from the previous token's plan first (forward's `rope` is then the plan the cached keys
  // are under before the call). The matrix products still run once for all the tokens, so a chunk of
  // tokens streams the weights once. Empty: every token reads with `rope`. Not with regimes.
  std::span<const Rope* const> token_ropes;
  // Called once per layer with the call's queries [n, dim] and keys [n, kv_dim] as projected, before any
  // rotation (the lab's attention probe keeps them); empty: not called.
  std::function<void(int layer, std::span<const float> q, std::span<const float> k)> on_qk;
};

// Runs a model over one sequence. Not thread-safe (one sequence, one runner); each call uses the
// library's threads.
class LlamaRunner {
 public:
  // Errors: capacity ≤ 0, a model whose dimensions do not fit (dim not a multiple of n_heads, ...).
  LlamaRunner(const LlamaModel& model, RunnerOptions options);
  ~LlamaRunner();
  LlamaRunner(LlamaRunner&&) noexcept;
  LlamaRunner& operator=(LlamaRunner&&) noexcept;

  // Reads tokens at positions (appended after the cached ones) and writes logits [n, vocab] for
  // every token, or only for the last one when logits.size() == vocab. Errors: a token id outside
  // [0, vocab), counts that differ, more tokens than the free capacity, a rope whose head_dim is
  // not the model's, a rope whose plan differs from the cached keys' (call rerotate) unless
  // stale_keys, a logits span of another size, token_ropes of another count (or with regimes).
  void forward(const Rope& rope, std::span<const int> tokens, std::span<const std::int64_t> positions,
               std::span<float> logits, const ForwardOptions& options = {});
  // Re-rotates every layer's cached keys from `from` (the plan they carry) to `to`
  // (KvCache::rerotate). Returns false when the plans agree.
  bool rerotate(const Rope& from, const Rope& to);
  void clear();
  std::int64_t size() const;
  const LlamaModel& model() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// run.c's sampler: temperature 0 → argmax (the first maximum); otherwise softmax(logits / T), then
// top-p (nucleus) sampling when 0 < topp < 1, else sampling from the whole distribution, driven by
// run.c's xorshift generator seeded with `seed` (> 0).
class Sampler {
 public:
  // Errors: temperature < 0 or not finite, topp outside [0, 1], seed = 0.
  Sampler(int vocab_size, float temperature, float topp, std::uint64_t seed);
  int sample(std::span<float> logits);  // modifies logits

 private:
  float random_f32();
  int vocab_size_;
  float temperature_, topp_;
  std::uint64_t state_;
  std::vector<std::pair<float, int>> candidates_;
};

}  // namespace ropekit
