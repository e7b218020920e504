// ropekit/tokenizer.hpp — the SentencePiece-style BPE of llama2.c (run.c) and GGUF Llama models.
//
//   ropekit::Tokenizer tok = ropekit::Tokenizer::from_file("models/tok512.bin");
//   std::vector<int> ids = tok.encode("Once upon a time", /*bos=*/true);
//
// Encoding follows llama2.c's run.c: a leading space is prepended to non-empty text; the text is split
// into UTF-8 code points (a new one starts at every byte that is not a continuation byte 10xxxxxx, and
// holds at most 4 bytes); a code point missing from the vocabulary becomes one token per byte (the
// `<0xXX>` piece; llama2.c's id = byte + 3); then the adjacent pair whose concatenation is in the
// vocabulary with the highest score is merged — the leftmost of equal scores — until none is. The
// result equals run.c's quadratic loop; here it is a heap over adjacent pairs, O(n log n).
//
// Byte-fallback tokens (the `<0xXX>` pieces) stand only for bytes with no piece of their own and never
// merge, as SentencePiece's byte fallback. An older llama2.c export (stories15M's tok32000-legacy.bin)
// stores them as the raw bytes — ids 3–258 hold byte b as the code point U+00bb — so 204 one-byte strings
// are both a fallback and a regular piece ("a": ids 100 and 29874); that layout is told from the file
// itself, its fallback ids are never looked up as text (the regular, scored piece wins), and they decode
// to their byte.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ropekit {

class Tokenizer {
 public:
  // llama2.c tokenizer.bin: uint32 max_token_length, then per token float32 score, int32 length,
  // bytes — read to the end of the data (the vocabulary size is the count). Errors (ropekit::Error
  // naming `origin`, the token index and the byte offset): truncation, a negative length or one over
  // max_token_length, a non-finite score, no tokens.
  static Tokenizer from_llama2c(std::span<const std::byte> bytes, std::string_view origin = "tokenizer");
  // GGUF tokenizer.ggml.* (model "llama": tokens, scores); "▁" (U+2581) in pieces reads as a space,
  // as llama2.c's tokenizer export writes it. Errors: a missing key, a tokenizer model other than
  // "llama", arrays of different lengths.
  static Tokenizer from_gguf(std::span<const std::byte> bytes, std::string_view origin = "gguf");
  // By content: a GGUF file, else llama2.c's format.
  static Tokenizer from_file(const std::filesystem::path& path);

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  std::string_view piece(int id) const { return pieces_[static_cast<std::size_t>(id)]; }
  float score(int id) const { return scores_[static_cast<std::size_t>(id)]; }
  int bos_id() const { return bos_id_; }
  int eos_id() const { return eos_id_; }

  // Errors: a byte of the text with no token (no <0xXX> piece for it).
  std::vector<int> encode(std::string_view text, bool bos = false, bool eos = false) const;
  // The text of `token` after `prev_token`, as run.c prints it: after BOS a leading space is
  // dropped; a byte piece <0xXX> (or a legacy layout's fallback id) is that byte. Errors: an id outside
  // [0, vocab_size).
  std::string decode(int prev_token, int token) const;

  // Throws ropekit::Error unless the vocabulary has exactly `model_vocab_size` tokens.
  void require_vocab_size(int model_vocab_size, std::string_view model_origin) const;

  // Whether the file stores byte fallback in the legacy layout (the class comment), and whether `id` is a
  // byte-fallback token (0 ≤ id < vocab_size, not checked).
  bool legacy_byte_layout() const { return legacy_bytes_; }
  bool is_byte_fallback(int id) const;

 private:
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, std::string origin);
  std::string origin_;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int> ids_;  // the first id of each piece
  std::array<int, 256> byte_ids_{};           // -1: no <0xXX> piece
  bool legacy_bytes_ = false;                 // ids 3–258 are raw bytes (the legacy layout)
  int bos_id_ = 1, eos_id_ = 2;
};

// `ropekit tokenize --stories`: split at "<|endoftext|>", strip each story's surrounding
// whitespace, skip empty ones, and emit BOS + encode(story) for each.
std::vector<int> encode_stories(const Tokenizer& tokenizer, std::string_view text);

}  // namespace ropekit
