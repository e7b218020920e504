// The model families. Pairing per family, read from each family's attention code:
//   Half        — `rotate_half` (cat(-x2, x1) over the two halves): Llama, Mistral, Qwen, Gemma, Phi,
//                 GPT-NeoX, ...
//   Interleaved — `rotate_every_two` / complex view over (2i, 2i+1): GPT-J, CodeGen, Cohere, GLM,
//                 ChatGLM, Llama 4, Ernie 4.5, DeepSeek with rope_interleave (HF de-interleaves, then
//                 rotates halves: the same pairs, with the output lanes permuted inside the rope slice).
// The other columns: the layer rule (which layers attend, slide and rotate: layer_rules.cpp), the
// default sliding pattern, the softmax scale, the flags, and where a family needs them the head width
// rule and its own rope rule (rope_params.cpp), all in model_table.hpp. `source` is the file each row was read from:
// Hugging Face transformers' models/<type>/modeling_<type>.py (and its configuration_<type>.py for defaults), or the
// model repository's own modeling file for remote-code families. llama.cpp's llama_model_rope_type() gives the GGUF
// side; its "llama" is NORM (interleaved) because convert_hf_to_gguf.py permutes HF's q/k rows for it.
#include "config/model_table.hpp"

#include <array>
#include <string>
#include <vector>

#include "ropekit/config.hpp"

namespace ropekit::detail {
namespace {

constexpr Pairing kHalf = Pairing::Half;
constexpr Pairing kInterleaved = Pairing::Interleaved;
using SR = SoftmaxRule;

// Shorthand for the many Llama-style rows: Half pairing, default RoPE over the whole head.
constexpr ModelInfo llama_like(std::string_view type, std::string_view source, double theta = 1e4, unsigned flags = 0) {
  return ModelInfo{type, "llama-style", kHalf, true, theta, plain_layers, source, 0, SR::HeadDim, flags};
}

constexpr auto kModels = std::to_array<ModelInfo>({
    // Llama-style: default RoPE over the whole head; sliding_window (when set) on every layer,
    // or per layer where layer_types says so.
    llama_like("llama", "models/llama/modeling_llama.py"),
    llama_like("code_llama", "models/llama/modeling_llama.py"),
    llama_like("mistral", "models/mistral/modeling_mistral.py"),
    llama_like("mixtral", "models/mixtral/modeling_mixtral.py", 1e6),
    llama_like("ministral", "models/ministral/modeling_ministral.py"),
    llama_like("ministral3", "models/ministral3/modeling_ministral3.py", 1e4, kQueryBeta),
    llama_like("mistral4", "models/mistral4/modeling_mistral4.py", 1e4, kQueryBeta | kMscaleSoftmax),
    llama_like("apertus", "models/apertus/modeling_apertus.py"),
    llama_like("arcee", "models/arcee/modeling_arcee.py"),
    llama_like("seed_oss", "models/seed_oss/modeling_seed_oss.py"),
    llama_like("dots1", "models/dots1/modeling_dots1.py"),
    llama_like("hunyuan_v1_dense", "models/hunyuan_v1_dense/modeling_hunyuan_v1_dense.py", 1e4, kNtkAlpha),
    llama_like("hunyuan_v1_moe", "models/hunyuan_v1_moe/modeling_hunyuan_v1_moe.py", 1e4, kNtkAlpha),
    llama_like("jetmoe", "models/jetmoe/modeling_jetmoe.py"),
    llama_like("dbrx", "models/dbrx/modeling_dbrx.py"),
    llama_like("diffllama", "models/diffllama/modeling_diffllama.py"),
    llama_like("doge", "models/doge/modeling_doge.py"),
    llama_like("bitnet", "models/bitnet/modeling_bitnet.py"),
    llama_like("aria_text", "models/aria/modeling_aria.py"),
    llama_like("csm", "models/csm/modeling_csm.py"),
    llama_like("olmo", "models/olmo/modeling_olmo.py"),
    llama_like("olmo2", "models/olmo2/modeling_olmo2.py"),
    llama_like("olmoe", "models/olmoe/modeling_olmoe.py"),
    llama_like("flex_olmo", "models/flex_olmo/modeling_flex_olmo.py"),
    llama_like("starcoder2", "models/starcoder2/modeling_starcoder2.py"),
    llama_like("falcon_h1", "models/falcon_h1/modeling_falcon_h1.py"),
    llama_like("cwm", "models/cwm/modeling_cwm.py"),
    llama_like("helium", "models/helium/modeling_helium.py"),
    llama_like("minimax", "models/minimax/modeling_minimax.py"),
    llama_like("granite", "models/granite/modeling_granite.py"),
    llama_like("granitemoe", "models/granitemoe/modeling_granitemoe.py"),
    llama_like("granitemoeshared", "models/granitemoeshared/modeling_granitemoeshared.py"),
    {"gpt_oss", "llama-style", kHalf, true, 1.5e5, plain_layers, "models/gpt_oss/modeling_gpt_oss.py", 2},
    llama_like("qwen2", "models/qwen2/modeling_qwen2.py", 1e4, kQwenWindow),
    llama_like("qwen2_moe", "models/qwen2_moe/modeling_qwen2_moe.py", 1e4, kQwenWindow),
    llama_like("qwen3", "models/qwen3/modeling_qwen3.py", 1e4, kQwenWindow),
    llama_like("qwen3_moe", "models/qwen3_moe/modeling_qwen3_moe.py", 1e4, kQwenWindow),
    llama_like("qwen2_vl", "models/qwen2_vl/modeling_qwen2_vl.py", 1e6),
    llama_like("qwen2_vl_text", "models/qwen2_vl/modeling_qwen2_vl.py", 1e6),
    llama_like("qwen2_5_vl", "models/qwen2_5_vl/modeling_qwen2_5_vl.py", 1e6),
    llama_like("qwen2_5_vl_text", "models/qwen2_5_vl/modeling_qwen2_5_vl.py", 1e6),
    llama_like("qwen3_vl", "models/qwen3_vl/modeling_qwen3_vl.py", 5e6, kMropeInterleaved),
    llama_like("qwen3_vl_text", "models/qwen3_vl/modeling_qwen3_vl.py", 5e6, kMropeInterleaved),
    llama_like("qwen3_vl_moe", "models/qwen3_vl_moe/modeling_qwen3_vl_moe.py", 5e6, kMropeInterleaved),
    llama_like("qwen3_vl_moe_text", "models/qwen3_vl_moe/modeling_qwen3_vl_moe.py", 5e6, kMropeInterleaved),
    llama_like("exaone", "LGAI-EXAONE/EXAONE-3.5-7.8B-Instruct: modeling_exaone.py", 1e4, kRemoteCode),
    llama_like("internlm2", "internlm/internlm2_5-7b-chat: modeling_internlm2.py", 1e4, kRemoteCode),
    llama_like("internlm3", "internlm/internlm3-8b-instruct: modeling_internlm3.py", 1e4, kRemoteCode),
    llama_like("minicpm", "openbmb/MiniCPM4-8B: modeling_minicpm.py", 1e4, kRemoteCode),
    llama_like("deci", "Deci/DeciLM-7B: modeling_decilm.py", 1e4, kRemoteCode),
    llama_like("codeshell", "WisdomShell/CodeShell-7B: modeling_codeshell.py", 1e4, kRemoteCode),
    llama_like("orion", "OrionStarAI/Orion-14B-Base: modeling_orion.py", 1e4, kRemoteCode),
    llama_like("xverse", "xverse/XVERSE-13B: modeling_xverse.py", 1e4, kRemoteCode),
    llama_like("aquila", "BAAI/Aquila-7B: modeling_aquila.py", 1e4, kRemoteCode),
    // Llama-style with a per-layer story.
    {"gemma", "gemma", kHalf, true, 1e4, plain_layers, "models/gemma/modeling_gemma.py"},
    {"gemma2", "gemma 2", kHalf, true, 1e4, plain_layers, "models/gemma2/modeling_gemma2.py", 2, SR::QueryPreAttnScalar,
     kSoftcap},
    {"gemma3", "gemma 3", kHalf, true, 1e6, plain_layers, "models/gemma3/modeling_gemma3.py", 6, SR::QueryPreAttnScalar,
     kLocalBase},
    {"gemma3_text", "gemma 3", kHalf, true, 1e6, plain_layers, "models/gemma3/modeling_gemma3.py", 6,
     SR::QueryPreAttnScalar, kLocalBase},
    {"gemma3n", "gemma 3n", kHalf, true, 1e6, plain_layers, "models/gemma3n/modeling_gemma3n.py", 5, SR::One,
     kLocalBase},
    {"gemma3n_text", "gemma 3n", kHalf, true, 1e6, plain_layers, "models/gemma3n/modeling_gemma3n.py", 5, SR::One,
     kLocalBase},
    {"gemma4", "gemma 4", kHalf, true, 1e6, plain_layers, "models/gemma4/modeling_gemma4.py", 6, SR::One,
     kLastLayerFull | kGlobalHeadDim},
    {"gemma4_text", "gemma 4", kHalf, true, 1e6, plain_layers, "models/gemma4/modeling_gemma4.py", 6, SR::One,
     kLastLayerFull | kGlobalHeadDim},
    {"olmo3", "olmo 3", kHalf, true, 1e4, plain_layers, "models/olmo3/modeling_olmo3.py", 4, SR::HeadDim,
     kSlidingUnscaled},
    {"exaone4", "exaone 4", kHalf, true, 1e4, exaone4_layers, "models/exaone4/modeling_exaone4.py", 4},
    // EXAONE 4.5: a vision-language wrapper whose text_config is an Exaone4Config (HF Exaone45Config maps its
    // text model_type, absent or "exaone4_5_text", to exaone4).
    {"exaone4_5", "exaone 4", kHalf, true, 1e4, exaone4_layers,
     "models/exaone4_5/configuration_exaone4_5.py -> exaone4", 4},
    {"exaone4_5_text", "exaone 4", kHalf, true, 1e4, exaone4_layers,
     "models/exaone4_5/configuration_exaone4_5.py -> exaone4", 4},
    {"smollm3", "smollm3", kHalf, true, 1e4, smollm3_layers, "models/smollm3/modeling_smollm3.py"},
    {"mllama", "mllama", kHalf, true, 1e4, mllama_layers, "models/mllama/modeling_mllama.py"},
    {"mllama_text_model", "mllama", kHalf, true, 1e4, mllama_layers, "models/mllama/modeling_mllama.py"},
    {"lfm2", "hybrid", kHalf, true, 1e4, lfm2_layers, "models/lfm2/modeling_lfm2.py"},
    {"lfm2_moe", "hybrid", kHalf, true, 1e4, lfm2_layers, "models/lfm2_moe/modeling_lfm2_moe.py"},
    {"lfm2_vl", "hybrid", kHalf, true, 1e4, lfm2_layers, "models/lfm2_vl/modeling_lfm2_vl.py"},
    {"granitemoehybrid", "hybrid", kHalf, false, 1e4, hybrid_layers,
     "models/granitemoehybrid/modeling_granitemoehybrid.py", 0, SR::AttentionMultiplier, kRopeOnlyIfNamed},
    {"bamba", "hybrid", kHalf, false, 1e4, hybrid_layers, "models/bamba/modeling_bamba.py"},
    {"qwen3_next", "hybrid", kHalf, false, 1e4, qwen3_next_layers, "models/qwen3_next/modeling_qwen3_next.py"},
    {"qwen3_5", "hybrid", kHalf, false, 1e4, qwen3_next_layers, "models/qwen3_5/modeling_qwen3_5.py", 0, SR::HeadDim,
     kMropeInterleaved},
    {"qwen3_5_text", "hybrid", kHalf, false, 1e4, qwen3_next_layers, "models/qwen3_5/modeling_qwen3_5.py", 0,
     SR::HeadDim, kMropeInterleaved},
    {"qwen3_5_moe", "hybrid", kHalf, false, 1e4, qwen3_next_layers, "models/qwen3_5_moe/modeling_qwen3_5_moe.py", 0,
     SR::HeadDim, kMropeInterleaved},
    {"qwen3_5_moe_text", "hybrid", kHalf, false, 1e4, qwen3_next_layers, "models/qwen3_5_moe/modeling_qwen3_5_moe.py",
     0, SR::HeadDim, kMropeInterleaved},
    {"jamba", "jamba", kHalf, true, 1e4, jamba_layers, "models/jamba/modeling_jamba.py"},
    {"nemotron_h", "nemotron-h", kHalf, true, 1e4, nemotron_h_layers, "models/nemotron_h/modeling_nemotron_h.py"},
    {"nemotron-nas", "nemotron-nas", kHalf, true, 1e4, nemotron_nas_layers,
     "nvidia/Llama-3_3-Nemotron-Super-49B-v1: modeling_decilm.py", 0, SR::HeadDim, kRemoteCode},
    // NeoX-style: partial rotary honoured everywhere.
    {"gpt_neox", "neox-style", kHalf, false, 1e4, plain_layers, "models/gpt_neox/modeling_gpt_neox.py"},
    {"gpt_neox_japanese", "neox-style", kHalf, false, 1e4, plain_layers,
     "models/gpt_neox_japanese/modeling_gpt_neox_japanese.py"},
    {"phi", "neox-style", kHalf, false, 1e4, plain_layers, "models/phi/modeling_phi.py"},
    {"phi3", "neox-style", kHalf, false, 1e4, plain_layers, "models/phi3/modeling_phi3.py"},
    {"phi3_v", "neox-style", kHalf, false, 1e4, plain_layers,
     "microsoft/Phi-3-vision-128k-instruct: modeling_phi3_v.py", 0, SR::HeadDim, kRemoteCode},
    {"phi4_multimodal", "neox-style", kHalf, false, 1e4, plain_layers,
     "models/phi4_multimodal/modeling_phi4_multimodal.py"},
    {"phimoe", "neox-style", kHalf, false, 1e6, plain_layers, "models/phimoe/modeling_phimoe.py"},
    {"stablelm", "neox-style", kHalf, false, 1e4, plain_layers, "models/stablelm/modeling_stablelm.py"},
    {"stablelm_epoch", "neox-style", kHalf, false, 1e4, plain_layers,
     "stabilityai/stablelm-3b-4e1t: modeling_stablelm_epoch.py", 0, SR::HeadDim, kRemoteCode},
    {"persimmon", "neox-style", kHalf, false, 2.5e4, plain_layers, "models/persimmon/modeling_persimmon.py"},
    {"fuyu", "neox-style", kHalf, false, 2.5e4, plain_layers, "models/fuyu/modeling_fuyu.py (persimmon)"},
    {"nemotron", "neox-style", kHalf, false, 1e4, plain_layers, "models/nemotron/modeling_nemotron.py"},
    {"glm4_moe", "neox-style", kHalf, false, 1e4, plain_layers, "models/glm4_moe/modeling_glm4_moe.py"},
    // GLM-4.5V: the same M-RoPE sections as GLM-4V, but rotate_half (NeoX) pairs.
    {"glm4v_moe", "neox-style", kHalf, false, 1e4, plain_layers, "models/glm4v_moe/modeling_glm4v_moe.py"},
    {"glm4v_moe_text", "neox-style", kHalf, false, 1e4, plain_layers, "models/glm4v_moe/modeling_glm4v_moe.py"},
    {"falcon", "falcon", kHalf, true, 1e4, falcon_layers, "models/falcon/modeling_falcon.py"},
    {"RefinedWeb", "falcon", kHalf, true, 1e4, falcon_layers, "models/falcon/modeling_falcon.py"},
    {"RefinedWebModel", "falcon", kHalf, true, 1e4, falcon_layers, "models/falcon/modeling_falcon.py"},
    {"qwen", "qwen (v1)", kHalf, false, 1e4, qwen_v1_layers, "Qwen/Qwen-7B-Chat: modeling_qwen.py", 0, SR::HeadDim,
     kRemoteCode, HeadRule::KvChannels, &qwen_v1_rope},
    {"baichuan", "baichuan", kHalf, true, 1e4, baichuan_layers,
     "baichuan-inc/Baichuan2-7B/13B-Chat: modeling_baichuan.py", 0, SR::HeadDim, kRemoteCode},
    // Interleaved pairs.
    {"gptj", "gpt-j-style", kInterleaved, false, 1e4, plain_layers, "models/gptj/modeling_gptj.py"},
    {"codegen", "gpt-j-style", kInterleaved, false, 1e4, plain_layers, "models/codegen/modeling_codegen.py"},
    {"cohere", "gpt-j-style", kInterleaved, false, 1e4, plain_layers, "models/cohere/modeling_cohere.py"},
    {"cohere2", "cohere 2", kInterleaved, false, 1e4, cohere2_layers, "models/cohere2/modeling_cohere2.py", 4},
    {"glm", "gpt-j-style", kInterleaved, false, 1e4, plain_layers, "models/glm/modeling_glm.py"},
    {"glm4", "gpt-j-style", kInterleaved, false, 1e4, plain_layers, "models/glm4/modeling_glm4.py"},
    // GLM-4V / GLM-4.1V and GLM-OCR: M-RoPE sections over the frequencies (Qwen2-VL's split), applied to GPT-J
    // pairs (rotate_half_llm on repeat_interleave'd cos/sin) over partial_rotary_factor of the head.
    {"glm4v", "gpt-j-style m-rope", kInterleaved, false, 1e4, plain_layers, "models/glm4v/modeling_glm4v.py"},
    {"glm4v_text", "gpt-j-style m-rope", kInterleaved, false, 1e4, plain_layers, "models/glm4v/modeling_glm4v.py"},
    {"glm_ocr", "gpt-j-style m-rope", kInterleaved, false, 1e4, plain_layers, "models/glm_ocr/modeling_glm_ocr.py"},
    {"glm_ocr_text", "gpt-j-style m-rope", kInterleaved, false, 1e4, plain_layers,
     "models/glm_ocr/modeling_glm_ocr.py"},
    {"ernie4_5", "gpt-j-style", kInterleaved, true, 1e4, plain_layers, "models/ernie4_5/modeling_ernie4_5.py"},
    {"ernie4_5_moe", "gpt-j-style", kInterleaved, true, 1e4, plain_layers,
     "models/ernie4_5_moe/modeling_ernie4_5_moe.py"},
    {"chatglm", "chatglm", kInterleaved, false, 1e4, plain_layers,
     "THUDM/chatglm3-6b, glm-4-9b-chat: modeling_chatglm.py", 0, SR::HeadDim, kRemoteCode, HeadRule::KvChannels,
     &chatglm_rope},
    {"llama4", "llama 4", kInterleaved, true, 5e5, llama4_layers, "models/llama4/modeling_llama4.py"},
    {"llama4_text", "llama 4", kInterleaved, true, 5e5, llama4_layers, "models/llama4/modeling_llama4.py"},
    {"deepseek_v2", "deepseek mla", kInterleaved, false, 1e4, plain_layers,
     "models/deepseek_v2/modeling_deepseek_v2.py", 0, SR::HeadDim, kRopeInterleaveKey | kMscaleSoftmax, HeadRule::Mla},
    {"deepseek_v3", "deepseek mla", kInterleaved, false, 1e4, plain_layers,
     "models/deepseek_v3/modeling_deepseek_v3.py", 0, SR::HeadDim, kRopeInterleaveKey | kMscaleSoftmax, HeadRule::Mla},
    // DeepSeek V3.2 and GLM-5 (DSA): the MLA attention is always interleaved (their configs dropped rope_interleave),
    // plus the sparse-attention indexer's own rotary (IndexerRope).
    {"deepseek_v32", "deepseek mla", kInterleaved, false, 1e4, plain_layers,
     "models/deepseek_v32/modeling_deepseek_v32.py (MLA attention + DeepseekV32Indexer)", 0, SR::HeadDim,
     kIndexerHalf | kMscaleSoftmax, HeadRule::Mla},
    {"glm_moe_dsa", "deepseek mla", kInterleaved, false, 1e4, plain_layers,
     "models/glm_moe_dsa/modeling_glm_moe_dsa.py (MLA attention + GlmMoeDsaIndexer)", 0, SR::HeadDim,
     kIndexerInterleaved | kMscaleSoftmax, HeadRule::Mla},
    {"kimi_k2", "deepseek mla", kInterleaved, false, 1e4, plain_layers,
     "moonshotai/Kimi-K2-Instruct: modeling_deepseek.py", 0, SR::HeadDim,
     kRemoteCode | kRopeInterleaveKey | kMscaleSoftmax, HeadRule::Mla},
    {"minicpm3", "deepseek mla", kHalf, false, 1e4, plain_layers, "openbmb/MiniCPM3-4B: modeling_minicpm.py", 0,
     SR::HeadDim, kRemoteCode | kRopeInterleaveKey | kMscaleSoftmax, HeadRule::Mla},
    {"deepseek_v4", "deepseek v4", kInterleaved, false, 1e4, deepseek_v4_layers,
     "models/deepseek_v4/modeling_deepseek_v4.py", 0, SR::HeadDim, kMainCompressParams, HeadRule::HeadDim,
     &deepseek_v4_rope},
    // Without RoPE.
    {"bloom", "alibi", kHalf, false, 1e4, alibi_layers, "models/bloom/modeling_bloom.py"},
    {"mpt", "mpt", kHalf, false, 1e4, mpt_layers, "models/mpt/modeling_mpt.py"},
    {"gpt2", "learned", kHalf, false, 1e4, learned_layers, "models/gpt2/modeling_gpt2.py"},
    {"gpt_bigcode", "learned", kHalf, false, 1e4, learned_layers, "models/gpt_bigcode/modeling_gpt_bigcode.py"},
    {"gpt_neo", "learned", kHalf, false, 1e4, learned_layers, "models/gpt_neo/modeling_gpt_neo.py"},
    {"opt", "learned", kHalf, false, 1e4, learned_layers, "models/opt/modeling_opt.py"},
    {"biogpt", "learned", kHalf, false, 1e4, learned_layers, "models/biogpt/modeling_biogpt.py"},
    {"mamba", "no attention", kHalf, false, 1e4, no_attention_layers, "models/mamba/modeling_mamba.py"},
    {"mamba2", "no attention", kHalf, false, 1e4, no_attention_layers, "models/mamba2/modeling_mamba2.py"},
    {"falcon_mamba", "no attention", kHalf, false, 1e4, no_attention_layers,
     "models/falcon_mamba/modeling_falcon_mamba.py"},
    {"rwkv", "no attention", kHalf, false, 1e4, no_attention_layers, "models/rwkv/modeling_rwkv.py"},
});

constexpr ModelInfo kLlamaFallback = llama_like("llama", "models/llama/modeling_llama.py");

constexpr auto kGgufArchs = std::to_array<GgufArchInfo>({
    {"llama", kInterleaved, {}},
    {"llama4", kInterleaved, {}, GgufRule::Plain, 0, 4},
    {"deci", kInterleaved, {}},
    {"baichuan", kInterleaved, {}, GgufRule::Baichuan},
    {"internlm2", kInterleaved, {}},
    {"minicpm", kInterleaved, {}},
    {"command-r", kInterleaved, {}},
    {"cohere2", kInterleaved, {}, GgufRule::SlidingRopeOnly, 4},
    {"olmo", kInterleaved, {}},
    {"granite", kInterleaved, {}},
    {"granitemoe", kInterleaved, {}},
    {"chatglm", kInterleaved, {}},
    {"glm4", kInterleaved, {}},
    {"deepseek", kInterleaved, {}},
    {"deepseek2", kInterleaved, {}, GgufRule::DeepSeek},
    {"gptj", kInterleaved, {}},
    {"falcon", kHalf, {}},
    {"qwen", kHalf, {}},
    {"qwen2", kHalf, {}},
    {"qwen2moe", kHalf, {}},
    {"qwen3", kHalf, {}},
    {"qwen3moe", kHalf, {}},
    {"qwen2vl", kHalf, MRopeLayout::Sectioned},
    {"qwen3vl", kHalf, MRopeLayout::Interleaved},
    {"olmo2", kHalf, {}},
    {"phi2", kHalf, {}},
    {"phi3", kHalf, {}},
    {"phimoe", kHalf, {}},
    {"gemma", kHalf, {}},
    {"gemma2", kHalf, {}, GgufRule::Plain, 2},
    {"gemma3", kHalf, {}, GgufRule::Plain, 6, 0, true},
    {"starcoder2", kHalf, {}},
    {"stablelm", kHalf, {}},
    {"gptneox", kHalf, {}},
    {"nemotron", kHalf, {}},
    {"gpt-oss", kHalf, {}, GgufRule::Plain, 2},
    {"exaone4", kHalf, {}, GgufRule::SlidingRopeOnly, 4},
    {"smollm3", kHalf, {}, GgufRule::Plain, 0, 4},
    {"glm4moe", kHalf, {}},
    {"bloom", kHalf, {}, GgufRule::Alibi},
    {"mpt", kHalf, {}, GgufRule::Alibi},
});

}  // namespace

const ModelInfo* find_model(std::string_view model_type) {
  for (const ModelInfo& m : kModels) {
    if (m.model_type == model_type) return &m;
  }
  return nullptr;
}

namespace {

// Model classes whose name is not their model_type's (the rest follow transformers' naming: the model_type's letters
// before ForCausalLM, ...).
struct ClassAlias {
  std::string_view stem;  // normalised: lower case, no '_' or '-'
  std::string_view model_type;
};
constexpr auto kClassAliases = std::to_array<ClassAlias>({
    {"decilm", "deci"},         // Deci/DeciLM-7B: DeciLMForCausalLM
    {"rw", "RefinedWebModel"},  // tiiuae/falcon-rw-*, the first Falcon releases: RWForCausalLM
});

std::string normalised(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '_' || c == '-') continue;
    out.push_back(c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c);
  }
  return out;
}

}  // namespace

const ModelInfo* find_model_by_class(std::string_view class_name) {
  // "modeling_qwen.QWenLMHeadModel" (auto_map), "org/repo--modeling_x.Class": the class is after the last '.'.
  if (const auto dot = class_name.rfind('.'); dot != std::string_view::npos) class_name.remove_prefix(dot + 1);
  std::string stem = normalised(class_name);
  bool stripped = false;
  for (std::string_view suffix : {"forcausallm", "lmheadmodel", "forconditionalgeneration", "model"}) {
    if (stem.size() > suffix.size() && stem.ends_with(suffix)) {
      stem.resize(stem.size() - suffix.size());
      stripped = true;
      break;
    }
  }
  if (!stripped) return nullptr;
  for (const ClassAlias& a : kClassAliases) {
    if (a.stem == stem) return find_model(a.model_type);
  }
  for (const ModelInfo& m : kModels) {
    if (normalised(m.model_type) == stem) return &m;
  }
  return nullptr;
}

std::span<const ModelInfo> model_table() { return kModels; }

}  // namespace ropekit::detail

namespace ropekit {

std::span<const ModelFamily> model_families() {
  static const std::vector<ModelFamily> rows = [] {
    std::vector<ModelFamily> out;
    for (const detail::ModelInfo& m : detail::model_table()) {
      out.push_back({m.model_type, m.family, m.pairing, m.source, (m.flags & detail::kRemoteCode) != 0});
    }
    return out;
  }();
  return rows;
}

}  // namespace ropekit

namespace ropekit::detail {
const ModelInfo& llama_fallback() { return kLlamaFallback; }

const GgufArchInfo* find_gguf_arch(std::string_view arch) {
  for (const GgufArchInfo& a : kGgufArchs) {
    if (a.arch == arch) return &a;
  }
  return nullptr;
}

std::span<const GgufArchInfo> gguf_table() { return kGgufArchs; }

}  // namespace ropekit::detail
