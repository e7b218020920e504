// Vision encoders' rotary from config.json (ropekit/config.hpp): which family, its head width, θ and the index
// parameters its position functions need — each as the family's modeling file reads them (transformers v5.15.0).
#include <fmt/format.h>

#include <array>
#include <string>
#include <utility>

#include "config/json.hpp"
#include "ropekit/config.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

using detail::json;
using detail::Reader;
using detail::Value;

struct FamilyName {
  std::string_view model_type;
  VisionFamily family;
};

// Top-level model types and the vision configs' own, for a vision_config passed alone.
constexpr std::array kFamilies = {
    FamilyName{"qwen2_vl", VisionFamily::Qwen2Vl},
    FamilyName{"qwen2_vl_vision", VisionFamily::Qwen2Vl},
    FamilyName{"qwen2_5_vl", VisionFamily::Qwen25Vl},
    FamilyName{"qwen2_5_vl_vision", VisionFamily::Qwen25Vl},
    FamilyName{"qwen3_vl", VisionFamily::Qwen3Vl},
    FamilyName{"qwen3_vl_vision", VisionFamily::Qwen3Vl},
    FamilyName{"qwen3_vl_moe", VisionFamily::Qwen3Vl},
    FamilyName{"qwen3_vl_moe_vision", VisionFamily::Qwen3Vl},
    FamilyName{"glm4v", VisionFamily::Glm4v},
    FamilyName{"glm4v_vision", VisionFamily::Glm4v},
    FamilyName{"glm4v_moe", VisionFamily::Glm4v},
    FamilyName{"glm4v_moe_vision", VisionFamily::Glm4v},
    FamilyName{"glm_ocr", VisionFamily::Glm4v},
    FamilyName{"glm_ocr_vision", VisionFamily::Glm4v},
    FamilyName{"pixtral", VisionFamily::Pixtral},
    FamilyName{"llama4", VisionFamily::Llama4},
    FamilyName{"llama4_vision_model", VisionFamily::Llama4},
};

struct VisionReader {
  const Reader& r;
  const json& node;    // the vision config
  std::string prefix;  // "vision_config." or ""

  Value get(std::string_view key) const { return {Reader::member(node, key), prefix + std::string(key)}; }
  std::int64_t required(std::string_view key) const {
    const Value v = get(key);
    if (!v) r.missing(prefix + std::string(key));
    return positive(v);
  }
  std::int64_t optional(std::string_view key, std::int64_t fallback) const {
    const Value v = get(key);
    return v ? positive(v) : fallback;
  }
  std::int64_t positive(const Value& v) const {
    const std::int64_t x = r.integer(v);
    if (x < 1 || x > (std::int64_t{1} << 30)) r.fail(v.path, *v.node, "must be an integer in [1, 2^30]");
    return x;
  }
  // rope_parameters.rope_theta (v5), then rope_theta (legacy), then HF's default 10000; only the default type.
  double theta() const {
    double base = 10000.0;
    const Value params = get("rope_parameters");
    const Value legacy = get("rope_theta");
    if (params && params.node->is_object()) {
      if (const json* t = Reader::member(*params.node, "rope_theta")) base = r.number({t, params.path + ".rope_theta"});
      for (const char* key : {"rope_type", "type"}) {
        if (const json* type = Reader::member(*params.node, key)) {
          const std::string name = r.string({type, params.path + "." + key});
          if (name != "default") r.fail(params.path + "." + key, *type, "vision RoPE supports only \"default\"");
        }
      }
    } else if (legacy) {
      base = r.number(legacy);
    }
    return base;
  }
};

}  // namespace

std::string_view to_string(VisionFamily family) {
  switch (family) {
    case VisionFamily::Qwen2Vl: return "qwen2_vl";
    case VisionFamily::Qwen25Vl: return "qwen2_5_vl";
    case VisionFamily::Qwen3Vl: return "qwen3_vl";
    case VisionFamily::Glm4v: return "glm4v";
    case VisionFamily::Pixtral: return "pixtral";
    case VisionFamily::Llama4: return "llama4";
  }
  return "?";
}

VisionRope read_vision_config(std::string_view json_text, std::string_view origin) {
  const detail::Document document = detail::parse_json(json_text, origin);
  const json& root = *document;
  const Reader r(root, std::string(origin));
  const json* vision = Reader::member(root, "vision_config");
  if (vision != nullptr && !vision->is_object()) r.fail("vision_config", *vision, "must be an object");
  const VisionReader v{r, vision ? *vision : root, vision ? "vision_config." : ""};

  VisionRope out;
  // The family: the top-level model_type, else (llava, mistral3 and other wrappers) the vision config's own.
  std::string names;
  bool found = false;
  for (const json* node : {&root, vision}) {
    if (node == nullptr || found) continue;
    const json* type = Reader::member(*node, "model_type");
    if (type == nullptr || !type->is_string()) continue;
    const std::string name = type->get<std::string>();
    names += names.empty() ? name : ", " + name;
    for (const FamilyName& f : kFamilies) {
      if (f.model_type == name) {
        out.family = f.family;
        out.model_type = name;
        found = true;
      }
    }
  }
  if (!found) {
    throw Error(fmt::format(
        "{}: model_type {}: not a vision encoder ropekit knows (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V, GLM-OCR, "
        "Pixtral, Llama 4)",
        origin, names.empty() ? "missing" : "\"" + names + "\""));
  }

  Spec& spec = out.spec;
  std::int64_t width = 0;
  switch (out.family) {
    case VisionFamily::Qwen2Vl:
      width = v.required("embed_dim");
      out.num_heads = static_cast<int>(v.required("num_heads"));
      break;
    case VisionFamily::Qwen25Vl:
    case VisionFamily::Qwen3Vl:
    case VisionFamily::Glm4v:
      width = v.required("hidden_size");
      out.num_heads = static_cast<int>(v.required("num_heads"));
      break;
    case VisionFamily::Pixtral:
    case VisionFamily::Llama4:
      width = v.required("hidden_size");
      out.num_heads = static_cast<int>(v.required("num_attention_heads"));
      break;
  }
  const std::int64_t head_dim = width / out.num_heads;  // HF: hidden_size // num_heads
  if (head_dim < 4 || head_dim % 4 != 0 || head_dim > (1 << 16)) {
    throw Error(fmt::format(
        "{}: {}hidden width {} / {} heads = head_dim {}: the vision rotary needs a multiple of 4 (two axes of "
        "whole pairs) up to 65536",
        origin, v.prefix, width, out.num_heads, head_dim));
  }
  spec.head_dim = spec.rotary_dim = static_cast<int>(head_dim);
  const int per_axis = spec.head_dim / 4;
  out.patch_size = v.optional("patch_size", 14);
  switch (out.family) {
    case VisionFamily::Qwen2Vl:
    case VisionFamily::Qwen25Vl:
    case VisionFamily::Qwen3Vl:
    case VisionFamily::Glm4v:
      spec.base = 10000.0;  // VisionRotaryEmbedding(dim, theta=10000.0): no config key reaches it
      spec.pairing = Pairing::Half;
      spec.axial = Axial{{per_axis, per_axis}, AxialFrequencies::PerAxis};
      out.spatial_merge_size = v.optional("spatial_merge_size", 2);
      if (out.family == VisionFamily::Qwen25Vl) out.window_size = v.optional("window_size", 112);
      break;
    case VisionFamily::Pixtral:
    case VisionFamily::Llama4: {
      spec.base = v.theta();
      spec.pairing = out.family == VisionFamily::Pixtral ? Pairing::Half : Pairing::Interleaved;
      spec.axial = Axial{{per_axis, per_axis},
                         out.family == VisionFamily::Pixtral ? AxialFrequencies::Strided : AxialFrequencies::PerAxis};
      const std::int64_t image = v.required("image_size");
      out.patches_per_side = image / out.patch_size;  // HF: image_size // patch_size
      if (out.patches_per_side < 1) {
        throw Error(fmt::format("{}: {}image_size = {} with patch_size {}: less than one patch a side", origin,
                                v.prefix, image, out.patch_size));
      }
      break;
    }
  }
  try {
    spec.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}{}", origin, v.prefix, e.what()));
  }
  return out;
}

}  // namespace ropekit
