// The llama2.c / SentencePiece BPE tokenizer (ropekit/tokenizer.hpp).
#include "ropekit/tokenizer.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <queue>

#include "config/gguf_format.hpp"
#include "lab/loader.hpp"
#include "ropekit/error.hpp"

namespace ropekit {
namespace {

// "<0xXX>" → XX, or -1.
int byte_piece_value(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  auto hex = [](char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
  };
  const int hi = hex(piece[3]), lo = hex(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Byte b as an older llama2.c export stored byte-fallback piece 3 + b: the code point U+00bb in UTF-8
// (one byte below 0x80, two from 0x80 on: the export decoded "<0xXX>" as chr(XX)).
std::string latin1_utf8(int b) {
  if (b < 0x80) return std::string(1, static_cast<char>(b));
  return {static_cast<char>(0xC0 | (b >> 6)), static_cast<char>(0x80 | (b & 0x3F))};
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    if (s.substr(i, from.size()) == from) {
      out.append(to);
      i += from.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, std::string origin)
    : origin_(std::move(origin)), pieces_(std::move(pieces)), scores_(std::move(scores)) {
  byte_ids_.fill(-1);
  // The legacy layout (an older llama2.c export of a SentencePiece vocabulary): ids 3–258 hold byte b as
  // its Latin-1 code point instead of "<0xXX>", so a string such as "a" is both byte 0x61's fallback and a
  // regular, scored piece. Told from the file itself: every one of the 256 entries is exactly that. Byte 0
  // may also be empty: llama.cpp's llama2.c converter writes pieces as C strings, dropping the NUL.
  legacy_bytes_ = pieces_.size() > 258;
  for (int b = 0; legacy_bytes_ && b < 256; ++b) {
    const std::string& p = pieces_[std::size_t(3 + b)];
    legacy_bytes_ = p == latin1_utf8(b) || (b == 0 && p.empty());
  }
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    if (legacy_bytes_ && i >= 3 && i < 259) {
      byte_ids_[i - 3] = int(i);  // byte fallback only, as SentencePiece's: never looked up as text
      continue;
    }
    ids_.emplace(pieces_[i], int(i));
    if (const int b = byte_piece_value(pieces_[i]); b >= 0 && byte_ids_[std::size_t(b)] < 0) {
      byte_ids_[std::size_t(b)] = int(i);
    }
  }
}

bool Tokenizer::is_byte_fallback(int id) const {
  if (legacy_bytes_) return id >= 3 && id < 259;
  return byte_piece_value(pieces_[std::size_t(id)]) >= 0;
}

Tokenizer Tokenizer::from_llama2c(std::span<const std::byte> bytes, std::string_view origin) {
  detail::ByteReader r(bytes, std::string(origin));
  const auto max_length = r.scalar<std::uint32_t>("max_token_length");
  std::vector<std::string> pieces;
  std::vector<float> scores;
  while (r.remaining() > 0) {
    const std::string what = fmt::format("token {}", pieces.size());
    const std::uint64_t at = r.pos();
    const auto score = r.scalar<float>(what);
    if (!std::isfinite(score)) {
      throw Error(fmt::format("{}: {} at byte {}: score {} is not finite", origin, what, at, score));
    }
    const auto length = r.scalar<std::int32_t>(what);
    if (length < 0 || std::uint32_t(length) > max_length) {
      throw Error(fmt::format("{}: {} at byte {}: length = {}: must lie in [0, max_token_length = {}]", origin, what,
                              at + 4, length, max_length));
    }
    if (std::uint64_t(length) > r.remaining()) r.truncated(what, std::uint64_t(length));  // before allocating
    std::string piece(std::size_t(length), '\0');
    r.take(piece.data(), std::uint64_t(length), what);
    pieces.push_back(std::move(piece));
    scores.push_back(score);
  }
  if (pieces.empty()) throw Error(fmt::format("{}: the tokenizer has no tokens", origin));
  return Tokenizer(std::move(pieces), std::move(scores), std::string(origin));
}

Tokenizer Tokenizer::from_gguf(std::span<const std::byte> bytes, std::string_view origin) {
  using namespace detail::gguf;
  MemorySource source(bytes);
  Cursor cursor(source, std::string(origin));
  GgufFile file = parse(cursor, {.long_arrays = true});
  auto get = [&](const std::string& key) -> const GgufValue& {
    auto it = file.kv.find(key);
    if (it == file.kv.end()) throw Error(fmt::format("{}: the GGUF key {} is missing", origin, key));
    return it->second;
  };
  const std::string* model = std::get_if<std::string>(&get("tokenizer.ggml.model").value);
  if (!model || *model != "llama") {
    throw Error(fmt::format("{}: tokenizer.ggml.model = {}: only \"llama\" (SentencePiece BPE) is supported", origin,
                            model ? *model : "(not a string)"));
  }
  const auto* tokens = std::get_if<std::vector<GgufValue>>(&get("tokenizer.ggml.tokens").value);
  const auto* scores = std::get_if<std::vector<GgufValue>>(&get("tokenizer.ggml.scores").value);
  if (!tokens || tokens->empty())
    throw Error(fmt::format("{}: tokenizer.ggml.tokens must be a non-empty array", origin));
  if (!scores || scores->size() != tokens->size()) {
    throw Error(fmt::format("{}: tokenizer.ggml.scores must be an array of {} numbers (one per token)", origin,
                            tokens->size()));
  }
  std::vector<std::string> pieces;
  std::vector<float> score_values;
  for (std::size_t i = 0; i < tokens->size(); ++i) {
    const auto* piece = std::get_if<std::string>(&(*tokens)[i].value);
    const auto* score = std::get_if<double>(&(*scores)[i].value);
    if (!piece) throw Error(fmt::format("{}: tokenizer.ggml.tokens[{}] is not a string", origin, i));
    if (!score || !std::isfinite(*score)) {
      throw Error(fmt::format("{}: tokenizer.ggml.scores[{}] is not a finite number", origin, i));
    }
    pieces.push_back(replace_all(*piece, "\xE2\x96\x81", " "));  // U+2581 LOWER ONE EIGHTH BLOCK
    score_values.push_back(static_cast<float>(*score));
  }
  Tokenizer tok(std::move(pieces), std::move(score_values), std::string(origin));
  auto id = [&](const std::string& key, int fallback) {
    auto it = file.kv.find(key);
    if (it == file.kv.end()) return fallback;
    const double* v = std::get_if<double>(&it->second.value);
    if (!v || *v < 0 || *v >= tok.vocab_size() || *v != std::floor(*v)) {
      throw Error(fmt::format("{}: {} must be a token id below {}", origin, key, tok.vocab_size()));
    }
    return int(*v);
  };
  tok.bos_id_ = id("tokenizer.ggml.bos_token_id", 1);
  tok.eos_id_ = id("tokenizer.ggml.eos_token_id", 2);
  return tok;
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  const std::vector<std::byte> bytes = detail::read_whole_file(path, "tokenizer");
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0) return from_gguf(bytes, path.string());
  return from_llama2c(bytes, path.string());
}

void Tokenizer::require_vocab_size(int model_vocab_size, std::string_view model_origin) const {
  if (vocab_size() != model_vocab_size) {
    throw Error(fmt::format("tokenizer {} has {} tokens; the model {} has vocab_size = {}: not its tokenizer", origin_,
                            vocab_size(), model_origin, model_vocab_size));
  }
}

std::vector<int> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  // Code points (run.c's grouping), each a token or its bytes.
  std::vector<int> ids;
  if (bos) ids.push_back(bos_id_);
  std::string prefixed;
  if (!text.empty()) {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
  }
  const std::size_t first_piece = ids.size();
  for (std::size_t i = 0; i < prefixed.size();) {
    std::size_t end = i + 1;
    while (end < prefixed.size() && end - i < 4 && (static_cast<unsigned char>(prefixed[end]) & 0xC0) == 0x80) ++end;
    const std::string cp = prefixed.substr(i, end - i);
    if (auto it = ids_.find(cp); it != ids_.end()) {
      ids.push_back(it->second);
    } else {
      for (char ch : cp) {
        const int b = byte_ids_[static_cast<unsigned char>(ch)];
        if (b < 0) {
          throw Error(fmt::format("tokenizer {}: byte 0x{:02X} of the text (at byte {}) has no token (<0x{:02X}>)",
                                  origin_, static_cast<unsigned char>(ch), i - (text.empty() ? 0 : 1),
                                  static_cast<unsigned char>(ch)));
        }
        ids.push_back(b);
      }
    }
    i = end;
  }
  // Merges: a heap of adjacent pairs (score descending, then leftmost), over a linked list of
  // symbols; an entry is stale when either symbol has changed since it was pushed. Merging the best
  // pair, leftmost among equals, at each step is exactly run.c's repeated full scan.
  const std::size_t n = ids.size() - first_piece;
  if (n >= 2) {
    std::vector<int> sym(ids.begin() + std::ptrdiff_t(first_piece), ids.end());
    std::vector<std::ptrdiff_t> prev(n), next(n);
    std::vector<std::uint32_t> version(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      prev[i] = std::ptrdiff_t(i) - 1;
      next[i] = i + 1 < n ? std::ptrdiff_t(i + 1) : -1;
    }
    struct Candidate {
      float score;
      std::size_t left;
      int merged;
      std::uint32_t left_version, right_version;
      bool operator<(const Candidate& o) const {  // max-heap: higher score first, then smaller index
        if (score != o.score) return score < o.score;
        return left > o.left;
      }
    };
    std::priority_queue<Candidate> heap;
    std::string joined;
    // Byte-fallback tokens never merge (SentencePiece's rule; "<0xXX>" pieces cannot, the legacy layout's
    // raw bytes could).
    std::vector<bool> mergeable(n);
    for (std::size_t i = 0; i < n; ++i) mergeable[i] = !is_byte_fallback(sym[i]);
    auto push = [&](std::size_t left) {
      const std::ptrdiff_t right = next[left];
      if (right < 0 || !mergeable[left] || !mergeable[std::size_t(right)]) return;
      joined.assign(pieces_[std::size_t(sym[left])]);
      joined.append(pieces_[std::size_t(sym[std::size_t(right)])]);
      if (auto it = ids_.find(joined); it != ids_.end()) {
        heap.push({scores_[std::size_t(it->second)], left, it->second, version[left], version[std::size_t(right)]});
      }
    };
    for (std::size_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      const std::ptrdiff_t right = next[c.left];
      if (sym[c.left] < 0 || right < 0 || version[c.left] != c.left_version ||
          version[std::size_t(right)] != c.right_version) {
        continue;  // stale
      }
      sym[c.left] = c.merged;
      ++version[c.left];
      sym[std::size_t(right)] = -1;
      next[c.left] = next[std::size_t(right)];
      if (next[c.left] >= 0) prev[std::size_t(next[c.left])] = std::ptrdiff_t(c.left);
      if (prev[c.left] >= 0) push(std::size_t(prev[c.left]));
      push(c.left);
    }
    ids.resize(first_piece);
    for (std::ptrdiff_t i = 0; i >= 0; i = next[std::size_t(i)]) ids.push_back(sym[std::size_t(i)]);
  }
  if (eos) ids.push_back(eos_id_);
  return ids;
}

std::string Tokenizer::decode(int prev_token, int token) const {
  if (token < 0 || token >= vocab_size()) {
    throw Error(fmt::format("token id {} lies outside the vocabulary of {} tokens", token, vocab_size()));
  }
  if (legacy_bytes_ && token >= 3 && token < 259) return std::string(1, static_cast<char>(token - 3));
  std::string_view piece = pieces_[std::size_t(token)];
  if (prev_token == bos_id_ && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
  if (const int b = byte_piece_value(piece); b >= 0) return std::string(1, static_cast<char>(b));
  return std::string(piece);
}

std::vector<int> encode_stories(const Tokenizer& tokenizer, std::string_view text) {
  constexpr std::string_view kSeparator = "<|endoftext|>";
  std::vector<int> out;
  auto is_space = [](char ch) {
    return ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v';
  };
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(kSeparator, start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view story = text.substr(start, end - start);
    while (!story.empty() && is_space(story.front())) story.remove_prefix(1);
    while (!story.empty() && is_space(story.back())) story.remove_suffix(1);
    if (!story.empty()) {
      const std::vector<int> ids = tokenizer.encode(story, /*bos=*/true);
      out.insert(out.end(), ids.begin(), ids.end());
    }
    if (end == text.size()) break;
    start = end + kSeparator.size();
  }
  return out;
}

}  // namespace ropekit
