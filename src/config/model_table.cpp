// Pairing per model family, read from each family's attention code:
//   Half        — `rotate_half` (cat(-x2, x1) over the two halves): Llama, Mistral, Qwen, Gemma, Phi,
//                 GPT-NeoX, ...
//   Interleaved — `rotate_every_two` / complex view over (2i, 2i+1): GPT-J, CodeGen, Cohere, GLM,
//                 Llama 4, DeepSeek with rope_interleave (HF de-interleaves, then rotates halves:
//                 the same pairs, with the output lanes permuted inside the rope slice).
// llama.cpp's llama_model_rope_type() gives the GGUF side; its "llama" is NORM (interleaved)
// because convert_hf_to_gguf.py permutes HF's q/k rows for it.
#include "config/model_table.hpp"

#include <array>

namespace ropekit::detail {
namespace {

constexpr Pairing kHalf = Pairing::Half;
constexpr Pairing kInterleaved = Pairing::Interleaved;

constexpr std::array kModels{
    // Llama-style: default RoPE over the whole head.
    ModelInfo{"llama", kHalf, true, 1e4},
    ModelInfo{"mistral", kHalf, true, 1e4},
    ModelInfo{"mixtral", kHalf, true, 1e6},
    ModelInfo{"qwen2", kHalf, true, 1e4},
    ModelInfo{"qwen2_moe", kHalf, true, 1e4},
    ModelInfo{"qwen3", kHalf, true, 1e4},
    ModelInfo{"qwen3_moe", kHalf, true, 1e4},
    ModelInfo{"qwen2_vl", kHalf, true, 1e6},
    ModelInfo{"qwen2_5_vl", kHalf, true, 1e6},
    ModelInfo{"qwen3_vl", kHalf, true, 5e6, ModelQuirk::Qwen3VL},
    ModelInfo{"qwen3_vl_text", kHalf, true, 5e6, ModelQuirk::Qwen3VL},
    ModelInfo{"gemma", kHalf, true, 1e4},
    ModelInfo{"gemma2", kHalf, true, 1e4},
    ModelInfo{"gemma3", kHalf, true, 1e6, ModelQuirk::Gemma3},
    ModelInfo{"gemma3_text", kHalf, true, 1e6, ModelQuirk::Gemma3},
    ModelInfo{"olmo", kHalf, true, 1e4},
    ModelInfo{"olmo2", kHalf, true, 1e4},
    ModelInfo{"granite", kHalf, true, 1e4},
    ModelInfo{"starcoder2", kHalf, true, 1e4},
    ModelInfo{"gpt_oss", kHalf, true, 1.5e5},
    ModelInfo{"falcon", kHalf, true, 1e4},
    // NeoX-style: partial rotary honoured everywhere.
    ModelInfo{"gpt_neox", kHalf, false, 1e4},
    ModelInfo{"gpt_neox_japanese", kHalf, false, 1e4},
    ModelInfo{"phi", kHalf, false, 1e4},
    ModelInfo{"phi3", kHalf, false, 1e4},
    ModelInfo{"phimoe", kHalf, false, 1e6},
    ModelInfo{"stablelm", kHalf, false, 1e4},
    ModelInfo{"persimmon", kHalf, false, 2.5e4},
    ModelInfo{"nemotron", kHalf, false, 1e4},
    ModelInfo{"qwen3_next", kHalf, false, 1e4},
    // Interleaved pairs.
    ModelInfo{"gptj", kInterleaved, false, 1e4},
    ModelInfo{"codegen", kInterleaved, false, 1e4},
    ModelInfo{"cohere", kInterleaved, false, 1e4},
    ModelInfo{"glm", kInterleaved, false, 1e4},
    ModelInfo{"glm4", kInterleaved, false, 1e4},
    ModelInfo{"llama4", kInterleaved, true, 5e5},
    ModelInfo{"llama4_text", kInterleaved, true, 5e5},
    ModelInfo{"deepseek_v2", kInterleaved, false, 1e4, ModelQuirk::DeepSeek},
    ModelInfo{"deepseek_v3", kInterleaved, false, 1e4, ModelQuirk::DeepSeek},
};

constexpr std::array kGgufArchs{
    GgufArchInfo{"llama", kInterleaved, {}},
    GgufArchInfo{"llama4", kInterleaved, {}},
    GgufArchInfo{"deci", kInterleaved, {}},
    GgufArchInfo{"baichuan", kInterleaved, {}},
    GgufArchInfo{"internlm2", kInterleaved, {}},
    GgufArchInfo{"minicpm", kInterleaved, {}},
    GgufArchInfo{"command-r", kInterleaved, {}},
    GgufArchInfo{"cohere2", kInterleaved, {}},
    GgufArchInfo{"olmo", kInterleaved, {}},
    GgufArchInfo{"granite", kInterleaved, {}},
    GgufArchInfo{"granitemoe", kInterleaved, {}},
    GgufArchInfo{"chatglm", kInterleaved, {}},
    GgufArchInfo{"deepseek", kInterleaved, {}},
    GgufArchInfo{"deepseek2", kInterleaved, {}, ModelQuirk::DeepSeek},
    GgufArchInfo{"gptj", kInterleaved, {}},
    GgufArchInfo{"falcon", kHalf, {}},
    GgufArchInfo{"qwen", kHalf, {}},
    GgufArchInfo{"qwen2", kHalf, {}},
    GgufArchInfo{"qwen2moe", kHalf, {}},
    GgufArchInfo{"qwen3", kHalf, {}},
    GgufArchInfo{"qwen3moe", kHalf, {}},
    GgufArchInfo{"qwen2vl", kHalf, MRopeLayout::Sectioned},
    GgufArchInfo{"qwen3vl", kHalf, MRopeLayout::Interleaved},
    GgufArchInfo{"olmo2", kHalf, {}},
    GgufArchInfo{"phi2", kHalf, {}},
    GgufArchInfo{"phi3", kHalf, {}},
    GgufArchInfo{"phimoe", kHalf, {}},
    GgufArchInfo{"gemma", kHalf, {}},
    GgufArchInfo{"gemma2", kHalf, {}},
    GgufArchInfo{"gemma3", kHalf, {}, ModelQuirk::Gemma3},
    GgufArchInfo{"starcoder2", kHalf, {}},
    GgufArchInfo{"stablelm", kHalf, {}},
    GgufArchInfo{"gptneox", kHalf, {}},
    GgufArchInfo{"nemotron", kHalf, {}},
    GgufArchInfo{"gpt-oss", kHalf, {}},
};

}  // namespace

const ModelInfo* find_model(std::string_view model_type) {
  for (const ModelInfo& m : kModels) {
    if (m.model_type == model_type) return &m;
  }
  return nullptr;
}

const GgufArchInfo* find_gguf_arch(std::string_view arch) {
  for (const GgufArchInfo& a : kGgufArchs) {
    if (a.arch == arch) return &a;
  }
  return nullptr;
}

}  // namespace ropekit::detail
