// `ropekit tokenize`: text → int32 token ids with a llama2.c or GGUF tokenizer (run.c's encoding).
#include <fmt/format.h>
#include <fmt/ostream.h>

#include "cli.hpp"
#include "model_io.hpp"
#include "ropekit/error.hpp"

namespace ropekit::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer, text, string, out;
  bool stories = false;
};

}  // namespace

void add_tokenize(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand("tokenize", "text → int32 token ids (llama2.c's run.c encoding: BOS, then the text)");
  auto o = std::make_shared<TokenizeOptions>();
  cmd->add_option("--tokenizer", o->tokenizer, "llama2.c tokenizer.bin or a GGUF file")->required();
  auto* group = cmd->add_option_group("input", "the text (exactly one)");
  group->add_option("--text", o->text, "a UTF-8 text file");
  group->add_option("--string", o->string, "the text itself");
  group->require_option(1);
  cmd->add_flag("--stories", o->stories,
                "split at <|endoftext|>, strip each story's surrounding whitespace, skip empty ones, and emit BOS + "
                "the story's tokens for each");
  cmd->add_option("--out", o->out, "int32 little-endian ids")->required();
  cmd->callback([o, io] {
    const Tokenizer tokenizer = Tokenizer::from_file(o->tokenizer);
    const std::string text = o->text.empty() ? o->string : read_text(o->text, "--text");
    const std::vector<int> ids = o->stories ? encode_stories(tokenizer, text) : tokenizer.encode(text, /*bos=*/true);
    write_tokens(o->out, ids);
    std::int64_t stories = 0;
    for (int id : ids) stories += id == tokenizer.bos_id();
    fmt::print(io.out, "{} tokens ({} starting with BOS) from {} bytes → {}\n", ids.size(), stories, text.size(),
               o->out);
  });
}

}  // namespace ropekit::cli
