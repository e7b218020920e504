// tests/golden.hpp — reads tests/data/golden/hf/*.json (Hugging Face transformers' own outputs) and
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
#include <vector>

#include "ropekit/config.hpp"

namespace golden {

inline nlohmann::json load(const std::string& name) {
  const std::string path = std::string(ROPEKIT_GOLDEN_DIR) + "/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open golden file " + path);
  return nlohmann::json::parse(in);
}

// The entry's config.json, read by ropekit's own reader (model_type = the HF model class the
// entry was produced with; golden configs omit it, real ones carry it).
inline ropekit::ModelPositions model_of(const nlohmann::json& entry) {
  nlohmann::json config = entry["config"];
  config["model_type"] = entry["model_class"];
  return ropekit::read_config(config.dump(), {}, entry["id"].get<std::string>());
}

inline ropekit::Spec spec_of(const nlohmann::json& entry) { return model_of(entry).layer().spec; }

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

// Position streams as the golden files store them ([[t...], [h...], [w...]]) flattened stream after stream, as
// ropekit::Positions holds them.
inline std::vector<std::int64_t> flat_streams(const nlohmann::json& streams) {
  std::vector<std::int64_t> out;
  for (const auto& s : streams) {
    for (const auto& x : s) out.push_back(x.get<std::int64_t>());
  }
  return out;
}

}  // namespace golden
