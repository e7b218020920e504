// ropekit/spec.hpp — what a model says about its rotary embedding.
//
// A Spec is a plain value: head_dim, rotary_dim (partial rotary), base θ, the pairing of lanes,
// one scaling variant and optional M-RoPE sections. There are no hidden defaults: the pairing has
// none, and each scaling struct carries every number its formula uses. Field defaults that do
// exist are the published defaults of the reference (Hugging Face transformers) and are named in
// the comment next to them. Call validate() (make_plan does) to get a ropekit::Error naming the
// first bad field.
//
// Which reference each variant matches, and where HF, vLLM and llama.cpp differ: docs/numerics.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ropekit {

// Positions — and current lengths, and K-shift distances — lie below this bound everywhere in ropekit:
// positions in [0, kPositionLimit), current lengths in [1, kPositionLimit). Up to 2^47 the accurate
// angle (ropekit/table.hpp) keeps its contract: p·(inv_freq/2π) is split exactly in double-double
// arithmetic with ≥ 6 bits to spare below double's 2^53 integer range.
inline constexpr std::int64_t kPositionLimit = std::int64_t{1} << 47;

// Which two lanes of a head form one rotated pair j (a' = a·cos θ_j − b·sin θ_j, b' = b·cos θ_j + a·sin θ_j).
// Shown for head_dim = rotary_dim = 8 (4 pairs); lanes ≥ rotary_dim (partial rotary) pass through.
//
//   Interleaved: pair j = lanes (2j, 2j+1) — GPT-J, ggml "NORMAL", torch.view_as_complex, DeepSeek
//     lane:  0  1 | 2  3 | 4  5 | 6  7
//     pair:  0  0 | 1  1 | 2  2 | 3  3
//            a  b   a  b   a  b   a  b
//
//   Half: pair j = lanes (j, j + rotary_dim/2) — GPT-NeoX/Llama `rotate_half`, ggml "NEOX"
//     lane:  0  1  2  3 | 4  5  6  7
//     pair:  0  1  2  3 | 0  1  2  3
//            a  a  a  a   b  b  b  b
//
// The enumerators start at 1 so that a Spec whose pairing was never set (value-initialised to 0)
// fails validate() instead of silently meaning one of them. PairMap (pair_map.hpp) is the one place
// that turns this into lane indices; docs/conventions.md covers partial rotary and M-RoPE.
enum class Pairing { Interleaved = 1, Half = 2 };

namespace scaling {

// Plain RoPE: inv_freq[i] = base^(-2i/rotary_dim).
struct None {
  bool operator==(const None&) const = default;
};

// Position interpolation (Chen et al. 2023): every frequency divided by `factor`.
struct Linear {
  double factor;
  bool operator==(const Linear&) const = default;
};

// Fixed NTK-aware base change: base' = base · factor^(d/(d−2)), d = rotary_dim.
struct Ntk {
  double factor;
  bool operator==(const Ntk&) const = default;
};

// Dynamic NTK (Hugging Face "dynamic"): for current length L,
// base' = base · ((factor·L/Lmax) − (factor−1))^(d/(d−2)) with L = max(L, Lmax).
// Lmax is config.max_position_embeddings — not the original length, as in HF.
struct DynamicNtk {
  double factor;
  std::int64_t max_position_embeddings;
  bool operator==(const DynamicNtk&) const = default;
};

// Qwen (v1) `use_dynamic_ntk` (its own modeling_qwen.py): for current length L > seq_length,
// base' = base · α^(d/(d−2)) with α = 2^⌈log2(L / seq_length) + 1⌉ − 1 (3 up to 2·seq_length, then
// 7, 15, ...), α = 1 otherwise. Qwen's code fixes α at the prompt's length for a whole generation:
// plan with the prompt length to reproduce it.
struct QwenDynamicNtk {
  std::int64_t seq_length;
  bool operator==(const QwenDynamicNtk&) const = default;
};

// HunYuan's NTK-alpha (modeling_hunyuan_v1_dense.py / _moe.py: rope_scaling {"type": "dynamic", "alpha": α}):
// up to max_position_embeddings (and before any forward) base' = base · α^(d/(d−2)); past it Hugging Face's
// dynamic_rope_update switches to its standard dynamic-NTK formula on the unscaled base (α dropped, as that code
// does): base · ((factor·L/Lmax) − (factor−1))^(d/(d−2)), back to the α base below Lmax.
struct HunyuanAlpha {
  double alpha;
  double factor;
  std::int64_t max_position_embeddings;
  bool operator==(const HunyuanAlpha&) const = default;
};

// YaRN (Peng et al. 2023) as Hugging Face computes it: a linear ramp between interpolated and
// extrapolated frequencies over the pair range set by beta_fast/beta_slow, and a magnitude
// (attention factor) multiplied into cos and sin. Magnitude precedence, applied exactly once:
//   attention_factor if set, else get_mscale(f, mscale)/get_mscale(f, mscale_all_dim) when both are
//   set and non-zero, else 0.1·ln(f) + 1.
// When mscale_all_dim is set and non-zero, the plan's softmax_scale_mult is get_mscale(f, mscale_all_dim)²
// (DeepSeek's softmax-scale correction), kept separate from the cos/sin magnitude.
struct Yarn {
  double factor;
  std::int64_t original_max_position_embeddings;
  double beta_fast = 32.0;  // HF default
  double beta_slow = 1.0;   // HF default
  bool truncate = true;     // HF default: floor/ceil the correction range (gpt-oss sets false)
  std::optional<double> attention_factor;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  // Whether the model's attention multiplies its softmax scale by mscale(factor, mscale_all_dim)² (the plan's
  // softmax_scale_mult). DeepSeek-style attention does (DeepSeek V2/V3/V3.2, GLM-5, Kimi K2, MiniCPM3, Mistral 4:
  // their modeling files); HF's rope utilities and every other family do not (Ministral 3, Qwen, Llama ...). Not a
  // config key: the model table sets it per family (docs/config.md).
  bool mscale_softmax = true;
  bool operator==(const Yarn&) const = default;
};

// Llama 3 / 3.1 frequency smoothing: low-frequency pairs divided by `factor`, high-frequency pairs
// kept, a smooth blend between wavelengths L0/high_freq_factor and L0/low_freq_factor.
struct Llama3 {
  double factor;
  double low_freq_factor;
  double high_freq_factor;
  std::int64_t original_max_position_embeddings;
  bool operator==(const Llama3&) const = default;
};

// LongRoPE / "su" (Phi-3): per-pair divisors; long_factor only when the current length is strictly
// greater than original_max_position_embeddings, short_factor otherwise. `factor` only sets the
// magnitude: attention_factor if set, else sqrt(1 + ln(factor)/ln(L0)) (1 when factor <= 1).
struct LongRope {
  std::vector<double> short_factor;  // rotary_dim/2 entries
  std::vector<double> long_factor;   // rotary_dim/2 entries
  std::int64_t original_max_position_embeddings;
  double factor;  // HF: config factor, else max_position_embeddings / original
  std::optional<double> attention_factor;
  bool operator==(const LongRope&) const = default;
};

// Hugging Face "proportional" (Gemma 4): the first floor(partial_rotary_factor·head_dim/2) pairs get
// base^(-2i/head_dim)/factor, the remaining pairs angle 0 (zero-padded, so they pass through). The
// exponent's denominator is head_dim, and rotary_dim must equal head_dim.
struct Proportional {
  double partial_rotary_factor = 1.0;
  double factor = 1.0;  // HF default
  bool operator==(const Proportional&) const = default;
};

// Per-pair divisors of the default frequencies: inv_freq[i] = base^(-2i/d) / divisors[i]. This is how
// llama.cpp ships Llama 3 smoothing in GGUF files (the `rope_freqs` tensor, computed at conversion);
// a GGUF Llama 3.1 therefore reads as FreqFactors, not Llama3 (the values agree to float32 rounding).
struct FreqFactors {
  std::vector<double> divisors;  // rotary_dim/2 entries, each finite and > 0
  bool operator==(const FreqFactors&) const = default;
};

}  // namespace scaling

using Scaling = std::variant<scaling::None, scaling::Linear, scaling::Ntk, scaling::DynamicNtk, scaling::Yarn,
                             scaling::Llama3, scaling::LongRope, scaling::Proportional, scaling::FreqFactors,
                             scaling::QwenDynamicNtk, scaling::HunyuanAlpha>;

// The Hugging Face rope_type name of a variant ("default", "linear", "ntk", "dynamic", "yarn",
// "llama3", "longrope", "proportional"; "freq_factors" for FreqFactors, "qwen_dynamic" for
// QwenDynamicNtk and "hunyuan_alpha" for HunyuanAlpha, which HF has no name for),
// and the name of a pairing ("interleaved", "half"). Names only: nothing numeric.
std::string_view rope_type_name(const Scaling& scaling);
std::string_view to_string(Pairing pairing);

// Multimodal RoPE: each pair takes its angle from one of three position streams (t, h, w).
//   Sectioned (Qwen2-VL, Qwen2.5-VL): pairs [0, s0) use t, [s0, s0+s1) h, [s0+s1, s0+s1+s2) w.
//   Interleaved (Qwen3-VL): pair j uses h if j%3==1 and j < 3·s1, w if j%3==2 and j < 3·s2, else t.
// sections count pairs and must sum to rotary_dim/2. The frequency index is global (pair j always
// has inv_freq[j]); only the position stream changes.
enum class MRopeLayout { Sectioned, Interleaved };
struct MRope {
  std::vector<int> sections;  // exactly 3: t, h, w
  MRopeLayout layout = MRopeLayout::Sectioned;
  bool operator==(const MRope&) const = default;
};

// Axial N-D RoPE, the rotary of vision encoders: the pairs split into consecutive sections, one per axis
// (patch row, column, frame ...), and pair j of axis a rotates by that axis's coordinate of the token. Positions
// carry one stream per axis (axial_positions in ropekit/tensor.hpp); vision_position_ids and its peers
// (ropekit/position_ids.hpp) make them. Where each axis takes its frequencies from:
//   PerAxis (Qwen2-VL/2.5-VL/3-VL ViT, Llama 4 vision): each axis is a RoPE of its own, 2·sections[a] lanes
//     wide: pair i of the axis has HF's default inv_freq for dim = 2·sections[a] (frequencies restart per axis).
//   Strided (Pixtral): one default frequency list over rotary_dim, dealt round-robin — pair i of axis a has the
//     global frequency index i·axes + a. Needs equal sections.
// Only scaling::None combines with it (no vision encoder scales its RoPE); HF's pairing per family is in
// docs/positions.md (NeoX rotate_half for Qwen and Pixtral, complex pairs — Interleaved — for Llama 4).
enum class AxialFrequencies { PerAxis, Strided };
inline constexpr int kMaxAxialAxes = 8;
struct Axial {
  std::vector<int> sections;  // pairs per axis, each ≥ 1, 1 to kMaxAxialAxes axes, summing to rotary_dim/2
  AxialFrequencies frequencies = AxialFrequencies::PerAxis;
  bool operator==(const Axial&) const = default;
};

struct Spec {
  int head_dim = 0;    // lanes per head
  int rotary_dim = 0;  // lanes that rotate (partial rotary: < head_dim; the rest pass through)
  double base = 0.0;   // θ, config rope_theta
  Pairing pairing;     // no default on purpose: Interleaved vs Half is the classic silent bug
  Scaling scaling = scaling::None{};
  std::optional<MRope> mrope;
  std::optional<Axial> axial;  // vision N-D RoPE; exclusive with mrope

  int num_pairs() const { return rotary_dim / 2; }
  // Position streams a call needs: 3 for M-RoPE, one per axis for axial RoPE, else 1.
  int num_axes() const { return mrope ? 3 : axial ? static_cast<int>(axial->sections.size()) : 1; }

  // Throws ropekit::Error naming the first invalid field and its value. Exact: it compares fields, it
  // computes nothing. Valid: 1 ≤ head_dim ≤ 65536, 0 < rotary_dim ≤ head_dim and even, 1 < base < ∞
  // and finite, each scaling field finite and in the range its formula needs (spec.cpp), M-RoPE
  // sections summing to rotary_dim/2, axial sections as Axial says (never together with mrope).
  void validate() const;
  bool operator==(const Spec&) const = default;

 private:
  void validate_axial() const;
};

}  // namespace ropekit
