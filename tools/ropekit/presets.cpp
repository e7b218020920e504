// `ropekit presets`: the built-in models, with what each one's RoPE is.
#include <fmt/ostream.h>

#include "cli.hpp"
#include "ropekit/plan.hpp"

namespace ropekit::cli {

void add_presets(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand("presets", "list the built-in model presets");
  cmd->callback([io] {
    fmt::print(io.out, "{:<28} {:<38} {}\n", "preset", "model", "rope");
    for (const Preset& p : presets()) {
      const ModelPositions model = read_preset(p.name);
      std::string rope;
      for (const LayerPositions& layer : model.groups) {
        if (!rope.empty()) rope += "; ";
        if (layer.encoding != PositionEncoding::Rope) {
          rope += fmt::format("{}: {}", layer.layer_type, encoding_name(layer.encoding));
          continue;
        }
        if (!layer.layer_type.empty()) rope += layer.layer_type + ": ";
        rope += fmt::format("{} base {} rotary {}/{} {}", rope_type_name(layer.spec.scaling), layer.spec.base,
                            layer.spec.rotary_dim, layer.qk_head_dim, to_string(layer.spec.pairing));
        if (layer.spec.mrope) rope += " m-rope";
      }
      fmt::print(io.out, "{:<28} {:<38} {}\n", p.name, p.model, rope);
    }
  });
}

}  // namespace ropekit::cli
