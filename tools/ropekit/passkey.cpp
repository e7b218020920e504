// `ropekit passkey`: passkey retrieval per method on a length × depth grid (ropekit/lab.hpp; docs/lab.md) — the
// C++ lab's side of the seeds' long-context evidence, as ropekit.lab.passkey is the Python lab's.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cli.hpp"
#include "lab_charts.hpp"
#include "model_io.hpp"
#include "plot.hpp"
#include "progress.hpp"
#include "ropekit/error.hpp"
#include "ropekit/lab.hpp"

namespace ropekit::cli {
namespace {

struct PasskeyCliOptions {
  std::string model, tokenizer, methods, csv, svg;
  bool no_mmap = false;
  std::vector<std::int64_t> lengths;
  std::vector<double> depths;
  std::int64_t keys = 5;
  std::uint64_t seed = 0;
  std::optional<std::int64_t> trained_length;
  int threads = 0;
};

void run_passkey(const PasskeyCliOptions& o, Streams io) {
  require_plots(o.svg);
  const LlamaModel model = load_model_file(o.model, {.map = !o.no_mmap});
  const Tokenizer tokenizer = load_tokenizer_for(model, o.model, o.tokenizer);
  PasskeyOptions options;
  options.methods = parse_methods(o.methods.empty() ? "orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,llama3" : o.methods);
  options.lengths = o.lengths;
  options.depths = o.depths;
  options.keys = o.keys;
  options.seed = o.seed;
  options.trained_length = o.trained_length;
  options.threads = o.threads;
  auto progress = std::make_shared<Progress>(io.err, "passkey");
  options.progress = [progress](std::int64_t done, std::int64_t total, const std::string& what) {
    (*progress)(done, total, what);
  };
  const PasskeyResult result = passkey(model, passkey_encoder(tokenizer), options);
  fmt::print(io.out, "ropekit passkey: {} — L0 = {}, {} keys per cell (seed {})\n", model.source, result.trained_length,
             o.keys, o.seed);
  std::set<double> depths;
  std::set<std::int64_t> lengths;
  for (const PasskeyCell& c : result.cells) depths.insert(c.depth), lengths.insert(c.length);
  for (const EvalMethod& m : options.methods) {
    fmt::print(io.out, "\n{}: keys retrieved (rows: length in tokens; columns: depth)\n{:>8}", m.name, "length");
    for (double d : depths) fmt::print(io.out, "{:>8g}", d);
    fmt::print(io.out, "\n");
    for (std::int64_t n : lengths) {
      fmt::print(io.out, "{:>8}", n);
      for (const PasskeyCell& c : result.cells) {
        if (c.method == m.name && c.length == n) fmt::print(io.out, "{:>8}", fmt::format("{}/{}", c.retrieved, c.keys));
      }
      fmt::print(io.out, "\n");
    }
  }
  fmt::print(io.out, "\n{:.1f} s\n", result.seconds);
  if (!o.csv.empty()) {
    std::ofstream csv(o.csv);
    if (!csv) throw Error(fmt::format("--csv {}: cannot write this file", o.csv));
    csv << "method,length,scale,depth,keys,retrieved,accuracy\n";
    for (const PasskeyCell& c : result.cells) {
      fmt::print(csv, "{},{},{},{},{},{},{:.9g}\n", csv_field(c.method), c.length, c.scale, c.depth, c.keys,
                 c.retrieved, double(c.retrieved) / double(c.keys));
    }
  }
  if (!o.svg.empty()) {
    std::vector<std::string> names;
    for (const EvalMethod& m : options.methods) names.push_back(m.name);
    const std::string model_name = std::filesystem::path(model.source).filename().string();
    write_heatmaps_svg(passkey_heatmaps(result.cells, names, result.trained_length, model_name),
                       int(std::min<std::size_t>(3, names.size())), o.svg);
  }
}

}  // namespace

void add_passkey(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand("passkey",
                                 "passkey retrieval per context-extension method on a length x depth grid "
                                 "(docs/lab.md)");
  auto o = std::make_shared<PasskeyCliOptions>();
  cmd->add_option("--model", o->model,
                  "llama2.c checkpoint, GGUF (llama architecture) or Hugging Face model directory (llama, mistral, "
                  "qwen2, qwen3, smollm3, phi3, gemma2, gemma3_text)")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer, "llama2.c tokenizer.bin (GGUF: the model's own)");
  cmd->add_option("--methods", o->methods,
                  "comma-separated methods, as `ropekit eval --methods` (default orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,"
                  "llama3)");
  cmd->add_option("--lengths", o->lengths, "prompt lengths in tokens (default L0/2, L0, 2·L0, 4·L0)")
      ->delimiter(',')
      ->check(in_range(std::int64_t{2}, std::int64_t{1} << 24));
  cmd->add_option("--depths", o->depths, "relative depths of the key in the filler (default 0,0.25,0.5,0.75,1)")
      ->delimiter(',');
  cmd->add_option("--keys", o->keys, "keys per (length, depth) cell (default 5)");
  cmd->add_option("--seed", o->seed, "the keys' seed (splitmix64; default 0)");
  cmd->add_option("--trained-length", o->trained_length, "L0 (default: the model's seq_len / context_length)")
      ->check(in_range(std::int64_t{1}, kPositionLimit - 1));
  cmd->add_option("--threads", o->threads, "threads (default: ropekit's default)")->check(in_range(1, 1024));
  cmd->add_option("--csv", o->csv, "write method,length,scale,depth,keys,retrieved,accuracy");
  cmd->add_option("--svg", o->svg, "draw the length x depth accuracy grid, one panel per method (PLplot)");
  cmd->add_flag("--no-mmap", o->no_mmap,
                "read a GGUF file into memory instead of mapping it (llama.cpp's --no-mmap): the file may then change "
                "while the model runs");
  cmd->callback([o, io] { run_passkey(*o, io); });
}

}  // namespace ropekit::cli
