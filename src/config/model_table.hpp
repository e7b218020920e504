// What ropekit must know about a model family beyond its config keys: the lane pairing its
// attention code uses, which layers rotate, and the other per-layer facts its modeling code hard-codes.
// One row per Hugging Face model_type (and per remote-code model_type that real configs name), one
// per llama.cpp architecture; docs/config.md renders the same tables with each row's source file.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "config/family.hpp"
#include "config/rope_params.hpp"
#include "ropekit/spec.hpp"

namespace ropekit::detail {

enum class SoftmaxRule {
  HeadDim,              // qk_head_dim^-0.5
  QueryPreAttnScalar,   // query_pre_attn_scalar^-0.5 (Gemma 2, Gemma 3)
  One,                  // 1 (Gemma 3n, Gemma 4: q/k RMS-normed)
  AttentionMultiplier,  // attention_multiplier (Granite)
};

// Row flags.
inline constexpr unsigned kLocalBase = 1u << 0;         // sliding layers: rope_local_base_freq, unscaled (Gemma 3)
inline constexpr unsigned kQueryBeta = 1u << 1;         // rope_parameters.llama_4_scaling_beta scales queries
inline constexpr unsigned kSlidingUnscaled = 1u << 2;   // sliding layers use default RoPE, same θ (OLMo 3)
inline constexpr unsigned kLastLayerFull = 1u << 3;     // the last layer is always full attention (Gemma 4)
inline constexpr unsigned kMropeInterleaved = 1u << 4;  // M-RoPE always interleaved (Qwen3-VL)
inline constexpr unsigned kGlobalHeadDim = 1u << 5;     // full layers use global_head_dim (Gemma 4)
inline constexpr unsigned kSoftcap = 1u << 6;           // attn_logit_softcapping (Gemma 2)
inline constexpr unsigned kQwenWindow = 1u << 7;        // use_sliding_window + max_window_layers (Qwen 2/3)
inline constexpr unsigned kRemoteCode = 1u << 9;        // the family ships its own modeling code
inline constexpr unsigned kRopeOnlyIfNamed =
    1u << 10;  // RoPE only when position_embedding_type is "rope" (Granite 4 hybrid)
inline constexpr unsigned kRopeInterleaveKey = 1u << 11;  // rope_interleave picks the pairing (DeepSeek MLA)
inline constexpr unsigned kMainCompressParams =
    1u << 12;  // rope_parameters "main" / "compress" from rope_scaling and compress_rope_theta (DeepSeek V4)
inline constexpr unsigned kNtkAlpha = 1u << 13;  // "dynamic" with "alpha": HunYuan's NTK-alpha base
// A DSA indexer rotary per layer (IndexerRope), rotate_half (DeepSeek V3.2) or interleaved (GLM-5), on layers whose
// indexer_types entry is "full" (GLM-5; DeepSeek V3.2 runs it on every layer).
inline constexpr unsigned kIndexerHalf = 1u << 14;
// The attention multiplies its softmax scale by YaRN's mscale(factor, mscale_all_dim)² (scaling::Yarn::mscale_softmax):
// DeepSeek-style MLA attention and Mistral 4. Without the flag a YaRN spec's softmax_scale_mult stays 1.
inline constexpr unsigned kMscaleSoftmax = 1u << 16;
inline constexpr unsigned kIndexerInterleaved = 1u << 15;

// Where a family's q/k head width comes from.
enum class HeadRule {
  HeadDim,     // head_dim, else hidden_size / num_attention_heads
  Mla,         // qk_rope_head_dim lanes after qk_nope_head_dim (DeepSeek MLA), else as HeadDim
  KvChannels,  // kv_channels (ChatGLM, Qwen v1)
};

struct ModelInfo {
  std::string_view model_type;
  std::string_view family;  // the row's name in docs/config.md
  Pairing pairing;
  // Llama-style models' compute_default_rope_parameters rotates the whole head whatever
  // partial_rotary_factor says (HF); the scaled variants in modeling_rope_utils still apply it.
  bool default_ignores_partial_rotary;
  double default_theta;              // the config class's rope_theta default (HF: 10000 unless overridden)
  LayerRule layers = &plain_layers;  // which layers attend, slide and rotate (family.hpp)
  std::string_view source;           // the modeling file the row was read from
  int pattern = 0;                   // default sliding_window_pattern: every pattern-th layer is full; 0 none
  SoftmaxRule softmax = SoftmaxRule::HeadDim;
  unsigned flags = 0;
  HeadRule head = HeadRule::HeadDim;
  RopeRule rope = nullptr;  // the family's own rotary embedding; nullptr: rope_parameters (rope_params.hpp)
};

// nullptr when the model_type is not in the table.
const ModelInfo* find_model(std::string_view model_type);
// The row of a model class named by config.json's `architectures` or an `auto_map` value ("QWenLMHeadModel",
// "modeling_chatglm.ChatGLMForConditionalGeneration"): transformers' naming (the model_type's letters, case, '_' and
// '-' aside, then ForCausalLM / LMHeadModel / ForConditionalGeneration / Model) or one of the few classes named
// otherwise (DeciLM, RW); nullptr when no row matches.
const ModelInfo* find_model_by_class(std::string_view class_name);
std::span<const ModelInfo> model_table();
// The row an unknown model_type is read with (Llama), with a warning naming the assumption.
const ModelInfo& llama_fallback();

// What a GGUF architecture's layers do beyond its metadata keys (gguf_rope.cpp).
enum class GgufRule {
  Plain,            // RoPE on every layer (swa_pattern / no_rope_every below)
  SlidingRopeOnly,  // only sliding layers rotate (Cohere 2, EXAONE 4)
  DeepSeek,         // MLA: the rope slice follows the nope lanes
  Alibi,            // ALiBi (BLOOM, MPT)
  Baichuan,         // 40 layers (13B): ALiBi; otherwise RoPE
};

struct GgufArchInfo {
  std::string_view arch;
  Pairing pairing;  // llama.cpp's LLAMA_ROPE_TYPE_NORM = Interleaved, NEOX/MROPE/IMROPE = Half
  std::optional<MRopeLayout> mrope;
  GgufRule rule = GgufRule::Plain;
  int swa_pattern = 0;      // llama.cpp's hard-coded set_swa_pattern period; 0 none
  int no_rope_every = 0;    // every n-th layer without RoPE (Llama 4, SmolLM3); 0 none
  bool local_base = false;  // sliding layers use rope.freq_base_swa, unscaled (Gemma 3)
};

const GgufArchInfo* find_gguf_arch(std::string_view arch);
std::span<const GgufArchInfo> gguf_table();

}  // namespace ropekit::detail
