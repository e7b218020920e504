// `ropekit freqs`: the plan's numbers, for scripts (--json) or one inv_freq per line.
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include <variant>

#include "cli.hpp"
#include "ropekit/plan.hpp"
#include "ropekit/variants.hpp"

namespace ropekit::cli {
namespace {

nlohmann::json layer_json(const LayerPositions& layer, const std::optional<Plan>& rope, bool with_layer_type) {
  nlohmann::json j;
  if (with_layer_type) j["layer_type"] = layer.layer_type;
  j["layers"] = layer.layers;
  j["encoding"] = std::string(encoding_name(layer.encoding));
  j["attention"] = layer.attention;
  if (layer.attention) {
    j["softmax_scale"] = layer.softmax_scale;
    if (layer.sliding_window) j["sliding_window"] = *layer.sliding_window;
    if (layer.attention_chunk) j["attention_chunk"] = *layer.attention_chunk;
    if (layer.logit_softcap) j["logit_softcap"] = *layer.logit_softcap;
    if (layer.query_scaling.kind != QueryScaling::Kind::None) j["query_scaling"] = layer.query_scaling.formula();
  }
  if (layer.encoding == PositionEncoding::Alibi) j["alibi_slopes"] = layer.alibi_slopes;
  if (!rope) return j;
  const Plan& plan = *rope;
  j["rope_type"] = std::string(rope_type_name(layer.spec.scaling));
  // The variant's fields by its description (ropekit/variants.hpp): an unset optional is null.
  nlohmann::json scaling = nlohmann::json::object();
  for_each_field(layer.spec.scaling, [&](const FieldInfo& field, const FieldValue& value) {
    std::visit(
        [&](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) {
            scaling[std::string(field.key)] = nullptr;
          } else {
            scaling[std::string(field.key)] = v;
          }
        },
        value);
  });
  j["rope_scaling"] = scaling;
  j["head_dim"] = layer.spec.head_dim;
  j["rotary_dim"] = layer.spec.rotary_dim;
  j["pairing"] = std::string(to_string(layer.spec.pairing));
  j["base"] = layer.spec.base;
  j["inv_freq"] = plan.inv_freq;  // doubles print with 17 significant digits: they round-trip
  j["cos_sin_scale"] = plan.cos_sin_scale;
  j["softmax_scale_mult"] = plan.softmax_scale_mult;
  if (plan.current_length) j["current_length"] = *plan.current_length;
  j["rope_offset"] = layer.rope_offset;
  return j;
}

}  // namespace

void add_freqs(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand("freqs", "print a model's inv_freq, cos_sin_scale and softmax_scale_mult");
  auto opts = std::make_shared<ModelOptions>();
  auto as_json = std::make_shared<bool>(false);
  opts->add_to(*cmd);
  cmd->add_flag("--json", *as_json,
                "JSON: one object per layer group (layers, encoding, attention facts and, "
                "for RoPE, the plan); an array with layer_type when the model has several");
  cmd->callback([io, opts, as_json] {
    const ModelPositions model = opts->load();
    print_warnings(model, io.err);
    const std::vector<const LayerPositions*> layers = opts->selected_layers(model);
    const bool several = layers.size() > 1;
    const bool named = model.groups.size() > 1;
    nlohmann::json all = nlohmann::json::array();
    for (const LayerPositions* layer : layers) {
      std::optional<Plan> plan;
      if (layer->encoding == PositionEncoding::Rope) plan = make_plan(layer->spec, opts->seq_len);
      if (*as_json) {
        all.push_back(layer_json(*layer, plan, named));
        continue;
      }
      if (several) fmt::print(io.out, "# layer type {} (layers {})\n", layer->layer_type, layer_ranges(layer->layers));
      if (!plan)
        fmt::print(io.out, "# no RoPE: {}\n", layer->attention ? encoding_name(layer->encoding) : "no attention");
      if (plan)
        for (double v : plan->inv_freq) fmt::print(io.out, "{:.17g}\n", v);
    }
    if (*as_json) io.out << (several ? all : all[0]).dump(2) << "\n";
  });
}

}  // namespace ropekit::cli
