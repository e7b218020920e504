// Built-in presets: real models' config.json RoPE fragments (presets/*.json, embedded at build time
// by cmake/EmbedPresets.cmake, which also defines presets()), read like any config.json.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "ropekit/config.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

ModelPositions read_preset(std::string_view name, const ConfigOptions& options) {
  std::vector<std::string_view> names;
  for (const Preset& p : presets()) {
    if (p.name == name) return read_config(p.config_json, options, fmt::format("preset {}", p.name));
    names.push_back(p.name);
  }
  throw Error(fmt::format("preset = {}: unknown (known: {})", name, fmt::join(names, ", ")));
}

}  // namespace ropekit
