// The `ropekit` command line: one file per sub-command (inspect.cpp, freqs.cpp, apply.cpp,
// presets.cpp, bench.cpp, decay.cpp, verify.cpp; the model's: tokenize.cpp, generate.cpp, eval.cpp, passkey.cpp,
// chart.cpp), each registering itself on the CLI11 app. run_cli() is the whole program with its streams passed in, so
// tests run it in-process; main.cpp only forwards argv.
//
// Exit codes: 0 success, 2 bad usage or bad input (one line on stderr naming the problem),
// 1 a check that failed (verify) or anything unexpected.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ropekit/config.hpp"

namespace ropekit::cli {

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// CLI::Range that says a value is not a number when it is not one (Range alone calls "abc" out of range): the value,
// then what was expected, in the option's error line.
template <class T>
CLI::Validator in_range(T lo, T hi) {
  std::ostringstream bounds;
  bounds << '[' << lo << ", " << hi << ']';
  return CLI::Validator(
      [lo, hi, b = bounds.str()](std::string& text) -> std::string {
        T value{};
        if (!CLI::detail::lexical_cast(text, value)) {
          return "value " + text + " is not " + (std::is_integral_v<T> ? "an integer" : "a number");
        }
        if (value < lo || value > hi) return "value " + text + " is not in " + b;
        return {};
      },
      "in " + bounds.str());
}

// Where a model's RoPE comes from, shared by the sub-commands that need one.
struct ModelOptions {
  std::string config;
  std::string preset;
  std::string gguf;
  std::string pairing;       // "", "half" or "interleaved"
  std::string layer_type;    // "" = the only one
  std::optional<int> layer;  // --layer N: the group of layer N
  std::optional<std::int64_t> seq_len;

  // Adds --config/--preset/--gguf (exactly one required), --pairing, --layer-type, --seq-len.
  // seq_len_default says what the sub-command uses without --seq-len (kInitialPlan by default).
  void add_to(CLI::App& app, bool with_gguf = true, std::string_view seq_len_default = kInitialPlan);
  static constexpr std::string_view kInitialPlan =
      "the plan at initialisation, as Hugging Face builds it before any forward pass (seq_len=None: dynamic "
      "NTK's base unchanged, LongRoPE's short factors)";
  ModelPositions load() const;
  // The group named by --layer-type or holding --layer, or every group of the model when neither was given.
  std::vector<const LayerPositions*> selected_layers(const ModelPositions& model) const;
  // The same, RoPE groups only: a selection without RoPE is a ropekit::Error naming the layer and its
  // encoding (for the sub-commands that need a RoPE: apply, verify, decay).
  std::vector<const LayerPositions*> selected_rope_layers(const ModelPositions& model) const;
};

struct Streams {
  std::ostream& out;
  std::ostream& err;
};

void add_inspect(CLI::App& app, Streams io);
void add_freqs(CLI::App& app, Streams io);
void add_apply(CLI::App& app, Streams io);
void add_presets(CLI::App& app, Streams io);
void add_bench(CLI::App& app, Streams io);
void add_decay(CLI::App& app, Streams io);
void add_verify(CLI::App& app, Streams io);
void add_tokenize(CLI::App& app, Streams io);
void add_generate(CLI::App& app, Streams io);
void add_passkey(CLI::App& app, Streams io);
void add_chart(CLI::App& app, Streams io);
void add_eval(CLI::App& app, Streams io);
void add_positions(CLI::App& app, Streams io);

// Thrown by a sub-command whose checks ran but did not all pass: exit code 1, no message (the
// output already says which failed).
struct ChecksFailed {};

// Prints ModelPositions::warnings to err, one per line, as "ropekit: warning: ...".
void print_warnings(const ModelPositions& model, std::ostream& err);

// "0-2,4-6,8": a group's layer indices, compressed into ranges ("all" when the config gives no count).
std::string layer_ranges(const std::vector<int>& layers);
// One line for a group: layers, type, encoding, RoPE spec, window, scales.
std::string describe_group(const ModelPositions& model, const LayerPositions& group);

}  // namespace ropekit::cli
