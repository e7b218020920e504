// `ropekit generate`: text from a Llama checkpoint with llama2.c run.c's semantics (steps count
// positions including the prompt; generation stops at BOS; pieces printed as run.c prints them), on
// ropekit's attention and KV cache, with the model's RoPE or a --rope-scaling override.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cctype>
#include <chrono>
#include <ctime>

#include "cli.hpp"
#include "model_io.hpp"
#include "ropekit/error.hpp"

namespace ropekit::cli {
namespace {

struct GenerateOptions {
  std::string model, tokenizer, prompt, rope_scaling;
  std::int64_t steps = 256;
  float temperature = 1.0f, topp = 0.9f;
  std::optional<std::uint64_t> seed;
  int threads = 0;
  bool int8_activations = false;
  bool no_mmap = false;
};

// run.c's safe_printf: a piece that is one byte, neither printable nor whitespace, is not printed.
void print_piece(std::ostream& out, const std::string& piece) {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    const auto byte = static_cast<unsigned char>(piece[0]);
    if (!(std::isprint(byte) || std::isspace(byte))) return;
  }
  out << piece;
}

void generate(const GenerateOptions& o, Streams io) {
  const LlamaModel model = load_model_file(o.model, {.map = !o.no_mmap});
  const Tokenizer tokenizer = load_tokenizer_for(model, o.model, o.tokenizer);
  const Spec spec = o.rope_scaling.empty() ? model.rope_layer().spec : spec_with_scaling(model, o.rope_scaling);
  // run.c: 0 or more than the trained length means the trained length; a scaled RoPE may go beyond it.
  std::int64_t steps = o.steps;
  if (steps == 0 || (steps > model.config.seq_len && o.rope_scaling.empty())) steps = model.config.seq_len;
  // A length-dependent RoPE (dynamic NTK, LongRoPE) is re-formed for each length read, the cached keys
  // re-rotated with it (as lab.hpp's dyn_ntk); any other has one plan.
  const bool dynamic = depends_on_length(spec);
  Rope rope(spec);
  const std::vector<int> prompt = tokenizer.encode(o.prompt, /*bos=*/true);
  const std::uint64_t seed = o.seed.value_or(static_cast<std::uint64_t>(std::time(nullptr)));
  Sampler sampler(model.config.vocab_size, o.temperature, o.topp, seed);
  LlamaRunner runner(model, {.capacity = steps, .threads = o.threads, .int8_activations = o.int8_activations});
  std::vector<float> logits(std::size_t(model.config.vocab_size));
  using clock = std::chrono::steady_clock;

  // The prompt's forced tokens are read in one batch (the same numbers as one at a time).
  const std::int64_t forced = std::min<std::int64_t>(std::int64_t(prompt.size()) - 1, steps);
  const auto prefill_start = clock::now();
  if (forced > 0) {
    if (dynamic) rope = Rope(spec, AngleMode::Accurate, forced);
    std::vector<std::int64_t> prompt_positions(std::size_t(forced), 0);
    for (std::int64_t i = 0; i < forced; ++i) prompt_positions[std::size_t(i)] = i;
    runner.forward(rope, std::span<const int>(prompt.data(), std::size_t(forced)), prompt_positions, logits);
    for (std::int64_t i = 0; i < forced; ++i) {
      print_piece(io.out, tokenizer.decode(prompt[std::size_t(i)], prompt[std::size_t(i + 1)]));
    }
  }
  const double prefill_s = std::chrono::duration<double>(clock::now() - prefill_start).count();
  std::int64_t pos = std::max<std::int64_t>(forced, 0);
  int token = prompt[std::size_t(pos)];
  std::int64_t decoded = 0;
  const auto decode_start = clock::now();
  while (pos < steps) {
    const std::int64_t p = pos;
    if (dynamic) {  // L = p + 1 tokens read after this one
      Rope next_rope(spec, AngleMode::Accurate, p + 1);
      if (runner.size() > 0) runner.rerotate(rope, next_rope);
      rope = std::move(next_rope);
    }
    runner.forward(rope, std::span<const int>(&token, 1), std::span<const std::int64_t>(&p, 1), logits);
    const int next = sampler.sample(logits);
    ++pos;
    ++decoded;
    if (next == tokenizer.bos_id()) break;
    print_piece(io.out, tokenizer.decode(token, next));
    io.out.flush();
    token = next;
  }
  const double decode_s = std::chrono::duration<double>(clock::now() - decode_start).count();
  io.out << "\n";
  if (decoded > 0) {
    fmt::print(io.err, "achieved tok/s: {:.1f} (decode: {} tokens in {:.3f} s", static_cast<double>(decoded) / decode_s,
               decoded, decode_s);
    if (forced > 0) fmt::print(io.err, "; prompt: {} tokens in one batch, {:.3f} s", forced, prefill_s);
    fmt::print(io.err, ")\n");
  }
}

}  // namespace

void add_generate(CLI::App& app, Streams io) {
  auto* cmd =
      app.add_subcommand("generate", "generate text from a llama2.c or GGUF Llama checkpoint (run.c's semantics)");
  auto o = std::make_shared<GenerateOptions>();
  cmd->add_option(
         "--model", o->model,
         "llama2.c checkpoint (.bin), GGUF (llama: F32, F16, BF16 or quantized) or Hugging Face model directory")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer, "llama2.c tokenizer.bin (default for GGUF: the model file's own)");
  cmd->add_option("--prompt", o->prompt, "the prompt (default: none, the story starts at BOS)");
  cmd->add_option("--steps", o->steps,
                  "positions to run, the prompt included (default 256; 0 or beyond the trained length: the trained "
                  "length, unless --rope-scaling)")
      ->check(in_range(std::int64_t{0}, std::int64_t{1} << 24));
  cmd->add_option("--temperature", o->temperature, "0: greedy (argmax); default 1")->check(in_range(0.0f, 1e6f));
  cmd->add_option("--topp", o->topp, "nucleus sampling threshold in [0, 1] (default 0.9; 0 or 1: off)")
      ->check(in_range(0.0f, 1.0f));
  cmd->add_option("--seed", o->seed, "random seed > 0 (default: the time)")
      ->check(in_range(std::uint64_t{1}, std::numeric_limits<std::uint64_t>::max()));
  cmd->add_option("--rope-scaling", o->rope_scaling,
                  "override the model's RoPE with a rope_scaling (or rope_parameters) fragment in config.json syntax, "
                  "e.g. '{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":512}'");
  cmd->add_option("--threads", o->threads, "threads (default: ropekit's default)")->check(in_range(1, 1024));
  cmd->add_flag("--int8-activations", o->int8_activations,
                "decode quantized (Q4_0 ... Q6_K) matrices with 8-bit activations and integer dot products, as "
                "llama.cpp does: faster, within the error bound of docs/numerics.md, no longer the dequantized "
                "model's float32 numbers");
  cmd->add_flag("--no-mmap", o->no_mmap,
                "read a GGUF file into memory instead of mapping it (llama.cpp's --no-mmap): the file may then change "
                "while the model runs");
  cmd->callback([o, io] { generate(*o, io); });
}

}  // namespace ropekit::cli
