#include "cli.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "ropekit/error.hpp"

namespace ropekit::cli {

void ModelOptions::add_to(CLI::App& app, bool with_gguf, std::string_view seq_len_default) {
  auto* group = app.add_option_group("model", "where the model's RoPE comes from (exactly one)");
  group->add_option("--config", config, "Hugging Face config.json");
  group->add_option("--preset", preset, "a built-in preset (ropekit presets lists them)");
  if (with_gguf) group->add_option("--gguf", gguf, "llama.cpp GGUF file (metadata only is read)");
  group->require_option(1);
  app.add_option("--pairing", pairing, "override the lane pairing: half (rotate_half) or interleaved (GPT-J)")
      ->check(CLI::IsMember({"half", "interleaved"}));
  auto* type_opt =
      app.add_option("--layer-type", layer_type, "layer type, for models with several (e.g. sliding_attention)");
  app.add_option("--layer", layer, "one layer's plan, by index (0-based)")
      ->check(in_range(0, 1 << 20))
      ->excludes(type_opt);
  app.add_option("--seq-len", seq_len,
                 fmt::format("current sequence length (dynamic NTK, LongRoPE); default: {}", seq_len_default))
      ->check(in_range(std::int64_t{1}, kPositionLimit - 1));
}

ModelPositions ModelOptions::load() const {
  ConfigOptions options;
  if (pairing == "half") options.pairing = Pairing::Half;
  if (pairing == "interleaved") options.pairing = Pairing::Interleaved;
  if (!config.empty()) return read_config_file(config, options);
  if (!preset.empty()) return read_preset(preset, options);
  return read_gguf_file(gguf, options);
}

std::vector<const LayerPositions*> ModelOptions::selected_layers(const ModelPositions& model) const {
  if (layer) return {&model.at_layer(*layer)};
  if (!layer_type.empty()) return {&model.layer(layer_type)};
  std::vector<const LayerPositions*> layers;
  for (const LayerPositions& l : model.groups) layers.push_back(&l);
  return layers;
}

std::vector<const LayerPositions*> ModelOptions::selected_rope_layers(const ModelPositions& model) const {
  std::vector<const LayerPositions*> rope;
  for (const LayerPositions* l : selected_layers(model)) {
    if (l->encoding == PositionEncoding::Rope) rope.push_back(l);
  }
  if (rope.empty()) {
    const LayerPositions& first = *selected_layers(model).front();
    const std::string what = layer                 ? fmt::format("layer = {}", *layer)
                             : !layer_type.empty() ? fmt::format("layer type = {}", layer_type)
                                                   : std::string("the model");
    throw Error(fmt::format("{}: {}: has no RoPE (encoding {}{})", model.source, what, encoding_name(first.encoding),
                            first.attention ? "" : ", no attention"));
  }
  return rope;
}

std::string layer_ranges(const std::vector<int>& layers) {
  if (layers.empty()) return "all";
  std::string out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? fmt::format("{}", layers[i]) : fmt::format("{}-{}", layers[i], layers[j]);
    i = j + 1;
  }
  return out;
}

std::string describe_group(const ModelPositions& model, const LayerPositions& g) {
  std::string s =
      fmt::format("layers {:<14} {:<28} ", layer_ranges(g.layers), g.layer_type.empty() ? "(all)" : g.layer_type);
  if (!g.attention) return s + "no attention";
  switch (g.encoding) {
    case PositionEncoding::Rope:
      s += fmt::format("rope {} {} base {:g} rotary {}/{}", rope_type_name(g.spec.scaling), to_string(g.spec.pairing),
                       g.spec.base, g.spec.rotary_dim, g.qk_head_dim);
      if (g.rope_offset > 0) s += fmt::format(" at lane {}", g.rope_offset);
      if (g.spec.mrope) s += " m-rope";
      if (g.spec.axial) s += fmt::format(" axial {}", fmt::join(g.spec.axial->sections, "/"));
      if (g.indexer) {
        s += fmt::format(" + indexer rope {} {}/{}", to_string(g.indexer->spec.pairing), g.indexer->spec.rotary_dim,
                         g.indexer->qk_head_dim);
      }
      break;
    case PositionEncoding::Alibi: s += fmt::format("alibi ({} heads)", g.alibi_slopes.size()); break;
    case PositionEncoding::None: s += "none (NoPE)"; break;
    case PositionEncoding::Learned: s += "learned absolute (added to the input)"; break;
  }
  if (g.sliding_window) s += fmt::format("  window {}", *g.sliding_window);
  if (g.attention_chunk) s += fmt::format("  chunk {}", *g.attention_chunk);
  s += fmt::format("  softmax_scale {:.6g}", g.softmax_scale);
  if (g.logit_softcap) s += fmt::format("  softcap {:g}", *g.logit_softcap);
  if (g.query_scaling.kind != QueryScaling::Kind::None) s += fmt::format("  query × {}", g.query_scaling.formula());
  (void)model;
  return s;
}

void print_warnings(const ModelPositions& model, std::ostream& err) {
  for (const std::string& w : model.warnings) fmt::print(err, "ropekit: warning: {}\n", w);
}

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "ropekit: rotary position embeddings exactly as the model's reference implementation "
      "computes them",
      "ropekit"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every sub-command");
  app.set_version_flag("--version", std::string("ropekit ") + ROPEKIT_VERSION, "print ropekit's version and exit");
  Streams io{out, err};
  add_inspect(app, io);
  add_freqs(app, io);
  add_apply(app, io);
  add_presets(app, io);
  add_bench(app, io);
  add_decay(app, io);
  add_verify(app, io);
  add_tokenize(app, io);
  add_positions(app, io);
  add_generate(app, io);
  add_eval(app, io);
  add_passkey(app, io);
  add_chart(app, io);

  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (!args.empty() && !args[0].starts_with("-") && std::find(names.begin(), names.end(), args[0]) == names.end()) {
    fmt::print(err, "ropekit: unknown sub-command {} (known: {})\n", args[0], fmt::join(names, ", "));
    return 2;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
  try {
    app.parse(reversed);
    return 0;
  } catch (const ChecksFailed&) {
    return 1;
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << '\n';
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    // The help that answers it: the sub-command's own where one was given.
    const std::vector<CLI::App*> given = app.get_subcommands();
    fmt::print(err, "ropekit: {} (see ropekit {}--help)\n", message,
               given.empty() ? std::string() : given.front()->get_name() + " ");
    return 2;
  } catch (const Error& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    fmt::print(err, "ropekit: {}\n", message);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(err, "ropekit: internal error: {}\n", e.what());
    return 1;
  }
}

}  // namespace ropekit::cli
