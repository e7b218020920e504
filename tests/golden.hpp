// tests/golden.hpp — reads ../shared/golden/hf/*.json (Hugging Face transformers' own outputs) and
// turns an entry into a Spec the way HF resolves its config.
//
// This is a test-side transcription of HF's rope-parameter resolution, limited to the keys the
// golden files use; the config.json reader of the library is a separate module.
#pragma once

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "ropekit/spec.hpp"

namespace golden {

inline nlohmann::json load(const std::string& name) {
  const std::string path = std::string(ROPEKIT_GOLDEN_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open golden file " + path);
  return nlohmann::json::parse(in);
}

inline std::optional<double> opt_number(const nlohmann::json& obj, const char* key) {
  if (!obj.contains(key) || obj[key].is_null()) return std::nullopt;
  return obj[key].get<double>();
}

// HF reads beta_fast/beta_slow with `or`: 0 and null fall back to the default.
inline double or_default(const nlohmann::json& obj, const char* key, double fallback) {
  const std::optional<double> v = opt_number(obj, key);
  return (v && *v != 0.0) ? *v : fallback;
}

inline ropekit::Spec spec_of(const nlohmann::json& entry) {
  const nlohmann::json& rp = entry["resolved_rope_parameters"];
  const nlohmann::json& config = entry["config"];
  const std::string type = rp.value("rope_type", std::string("default"));
  ropekit::Spec spec{.head_dim = entry["head_dim"].get<int>(),
                     .rotary_dim = entry.contains("rotary_dim") ? entry["rotary_dim"].get<int>()
                                                                : entry["head_dim"].get<int>(),
                     .base = rp["rope_theta"].get<double>(),
                     .pairing = ropekit::Pairing::Half};  // every HF model here uses rotate_half
  const double max_pos = config["max_position_embeddings"].get<double>();
  auto original = [&] { return rp["original_max_position_embeddings"].get<std::int64_t>(); };
  auto factor_or_ratio = [&] {
    return opt_number(rp, "factor").value_or(max_pos / double(original()));
  };
  if (type == "default") {
    spec.scaling = ropekit::scaling::None{};
  } else if (type == "linear") {
    spec.scaling = ropekit::scaling::Linear{rp["factor"].get<double>()};
  } else if (type == "dynamic") {
    spec.scaling = ropekit::scaling::DynamicNtk{rp["factor"].get<double>(),
                                                static_cast<std::int64_t>(max_pos)};
  } else if (type == "yarn") {
    spec.scaling = ropekit::scaling::Yarn{
        .factor = factor_or_ratio(),
        .original_max_position_embeddings = original(),
        .beta_fast = or_default(rp, "beta_fast", 32.0),
        .beta_slow = or_default(rp, "beta_slow", 1.0),
        .truncate = rp.value("truncate", true),
        .attention_factor = opt_number(rp, "attention_factor"),
        .mscale = opt_number(rp, "mscale"),
        .mscale_all_dim = opt_number(rp, "mscale_all_dim")};
  } else if (type == "llama3") {
    spec.scaling = ropekit::scaling::Llama3{rp["factor"].get<double>(),
                                            rp["low_freq_factor"].get<double>(),
                                            rp["high_freq_factor"].get<double>(), original()};
  } else if (type == "longrope") {
    spec.scaling = ropekit::scaling::LongRope{rp["short_factor"].get<std::vector<double>>(),
                                              rp["long_factor"].get<std::vector<double>>(),
                                              original(), factor_or_ratio(),
                                              opt_number(rp, "attention_factor")};
  } else if (type == "proportional") {
    spec.scaling = ropekit::scaling::Proportional{
        opt_number(rp, "partial_rotary_factor").value_or(1.0),
        opt_number(rp, "factor").value_or(1.0)};
  } else {
    throw std::runtime_error("golden entry with unknown rope_type " + type);
  }
  return spec;
}

inline std::optional<std::int64_t> seq_len_of(const nlohmann::json& entry) {
  if (!entry.contains("seq_len") || entry["seq_len"].is_null()) return std::nullopt;
  return entry["seq_len"].get<std::int64_t>();
}

// Distance in float32 ulps (0 when both are the same float).
inline std::int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    std::int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? std::int64_t{INT32_MIN} - i : std::int64_t{i};
  };
  return std::llabs(key(a) - key(b));
}

}  // namespace golden
