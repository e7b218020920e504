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
  app.add_option("--layer-type", layer_type, "layer type, for models with several (e.g. sliding_attention)");
  app.add_option("--seq-len", seq_len,
                 fmt::format("current sequence length (dynamic NTK, LongRoPE); default: {}", seq_len_default))
      ->check(CLI::Range(std::int64_t{1}, kPositionLimit - 1));
}

ModelRope ModelOptions::load() const {
  ConfigOptions options;
  if (pairing == "half") options.pairing = Pairing::Half;
  if (pairing == "interleaved") options.pairing = Pairing::Interleaved;
  if (!config.empty()) return read_config_file(config, options);
  if (!preset.empty()) return read_preset(preset, options);
  return read_gguf_file(gguf, options);
}

std::vector<const LayerRope*> ModelOptions::selected_layers(const ModelRope& model) const {
  if (!layer_type.empty()) return {&model.layer(layer_type)};
  std::vector<const LayerRope*> layers;
  for (const LayerRope& l : model.layers) layers.push_back(&l);
  return layers;
}

void print_warnings(const ModelRope& model, std::ostream& err) {
  for (const std::string& w : model.warnings) fmt::print(err, "ropekit: warning: {}\n", w);
}

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"ropekit: rotary position embeddings exactly as the model's reference implementation "
               "computes them",
               "ropekit"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every sub-command");
  Streams io{out, err};
  add_inspect(app, io);
  add_freqs(app, io);
  add_apply(app, io);
  add_presets(app, io);
  add_bench(app, io);
  add_decay(app, io);
  add_verify(app, io);
  add_tokenize(app, io);
  add_generate(app, io);
  add_eval(app, io);

  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (!args.empty() && !args[0].starts_with("-") &&
      std::find(names.begin(), names.end(), args[0]) == names.end()) {
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
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    fmt::print(err, "ropekit: {} (see ropekit --help)\n", message);
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
