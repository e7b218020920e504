// `ropekit freqs`: the plan's numbers, for scripts (--json) or one inv_freq per line.
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "ropekit/plan.hpp"

namespace ropekit::cli {
namespace {

nlohmann::json layer_json(const LayerRope& layer, const Plan& plan, bool with_layer_type) {
  nlohmann::json j;
  if (with_layer_type) j["layer_type"] = layer.layer_type;
  j["rope_type"] = std::string(rope_type_name(layer.spec.scaling));
  j["head_dim"] = layer.spec.head_dim;
  j["rotary_dim"] = layer.spec.rotary_dim;
  j["pairing"] = std::string(to_string(layer.spec.pairing));
  j["base"] = layer.spec.base;
  j["inv_freq"] = plan.inv_freq;  // doubles print with 17 significant digits: they round-trip
  j["cos_sin_scale"] = plan.cos_sin_scale;
  j["softmax_scale_mult"] = plan.softmax_scale_mult;
  if (plan.current_length) j["current_length"] = *plan.current_length;
  if (layer.rope_offset > 0) j["rope_offset"] = layer.rope_offset;
  return j;
}

}  // namespace

void add_freqs(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand("freqs", "print a model's inv_freq, cos_sin_scale and softmax_scale_mult");
  auto opts = std::make_shared<ModelOptions>();
  auto as_json = std::make_shared<bool>(false);
  opts->add_to(*cmd);
  cmd->add_flag("--json", *as_json, "JSON: one object, or an array of objects with layer_type when the model "
                                    "has several layer types");
  cmd->callback([io, opts, as_json] {
    const ModelRope model = opts->load();
    print_warnings(model, io.err);
    const std::vector<const LayerRope*> layers = opts->selected_layers(model);
    const bool several = layers.size() > 1;
    nlohmann::json all = nlohmann::json::array();
    for (const LayerRope* layer : layers) {
      const Plan plan = make_plan(layer->spec, opts->seq_len);
      if (*as_json) {
        all.push_back(layer_json(*layer, plan, several));
        continue;
      }
      if (several) fmt::print(io.out, "# layer type {}\n", layer->layer_type);
      for (double v : plan.inv_freq) fmt::print(io.out, "{:.17g}\n", v);
    }
    if (*as_json) io.out << (several ? all : all[0]).dump(2) << "\n";
  });
}

}  // namespace ropekit::cli
