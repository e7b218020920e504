// `ropekit verify`: the library's self-checks on one model's RoPE, each with its figure, bound and
// verdict. Exit code 1 when a check fails (2 stays for bad input).
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "ropekit/analysis.hpp"

namespace ropekit::cli {

void add_verify(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand("verify", "run the invariance and accuracy checks on a model's RoPE");
  auto opts = std::make_shared<ModelOptions>();
  auto as_json = std::make_shared<bool>(false);
  opts->add_to(*cmd);
  cmd->add_flag("--json", *as_json, "one JSON object per check, in an array");
  cmd->callback([io, opts, as_json] {
    const ModelPositions model = opts->load();
    print_warnings(model, io.err);
    const std::vector<const LayerPositions*> layers = opts->selected_rope_layers(model);
    nlohmann::json all = nlohmann::json::array();
    bool failed = false;
    for (const LayerPositions* layer : layers) {
      if (!*as_json && layers.size() > 1) fmt::print(io.out, "# layer type {}\n", layer->layer_type);
      for (const Check& c : verify(layer->spec, opts->seq_len)) {
        failed |= !c.passed && !c.skipped;
        if (*as_json) {
          nlohmann::json j = {{"name", c.name},     {"what", c.what},       {"figure", c.figure}, {"bound", c.bound},
                              {"passed", c.passed}, {"skipped", c.skipped}, {"detail", c.detail}};
          if (layers.size() > 1) j["layer_type"] = layer->layer_type;
          all.push_back(j);
          continue;
        }
        fmt::print(io.out, "{:4}  {:24} {:10.3g} <= {:<10.3g} {}{}\n",
                   c.skipped  ? "SKIP"
                   : c.passed ? "PASS"
                              : "FAIL",
                   c.name, c.figure, c.bound, c.what, c.detail.empty() ? "" : fmt::format(" [{}]", c.detail));
      }
    }
    if (*as_json) io.out << all.dump(2) << "\n";
    if (failed) throw ChecksFailed();
  });
}

}  // namespace ropekit::cli
