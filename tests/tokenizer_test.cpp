// The llama2.c tokenizer (tok512.bin, GGUF tokenizers, the legacy byte layout) against run.c's encode loop.
#include <gtest/gtest.h>

#include <map>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <numeric>
#include <random>
#include <sstream>

#include "bundled_model.hpp"
#include "expect_error.hpp"
#include "lab/quants.hpp"
#include "model_files.hpp"
#include "model_oracle.hpp"
#include "ropekit/kv_cache.hpp"
#include "ropekit/lab.hpp"
#include "ropekit/model.hpp"
#include "ropekit/tokenizer.hpp"

namespace {

using namespace bundled_model;

// run.c's encode, verbatim in behaviour: the quadratic scan for the best-scoring pair.
std::vector<int> naive_encode(const ropekit::Tokenizer& tok, const std::string& text) {
  std::map<std::string, int> ids;
  for (int i = tok.vocab_size() - 1; i >= 0; --i) ids[std::string(tok.piece(i))] = i;
  std::vector<int> out;
  const std::string s = text.empty() ? text : " " + text;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t e = i + 1;
    while (e < s.size() && e - i < 4 && (static_cast<unsigned char>(s[e]) & 0xC0) == 0x80) ++e;
    const auto it = ids.find(s.substr(i, e - i));
    if (it != ids.end()) {
      out.push_back(it->second);
    } else {
      for (std::size_t b = i; b < e; ++b) out.push_back(static_cast<unsigned char>(s[b]) + 3);
    }
    i = e;
  }
  while (true) {
    float best = -1e10f;
    int best_id = -1, best_at = -1;
    for (std::size_t i = 0; i + 1 < out.size(); ++i) {
      const auto it = ids.find(std::string(tok.piece(out[i])) + std::string(tok.piece(out[i + 1])));
      if (it != ids.end() && tok.score(it->second) > best) {
        best = tok.score(it->second);
        best_id = it->second;
        best_at = int(i);
      }
    }
    if (best_at < 0) break;
    out[std::size_t(best_at)] = best_id;
    out.erase(out.begin() + best_at + 1);
  }
  return out;
}

TEST(Tokenizer, EqualsRunCsQuadraticMergeLoop) {
  const auto& tok = bundled_tokenizer();
  const std::string text = read(kRepo + "/data/tinystories-valid-excerpt.txt");
  for (std::size_t at = 0; at + 400 < text.size(); at += 5000) {
    const std::string piece = text.substr(at, 400);
    auto ids = tok.encode(piece);
    EXPECT_EQ(ids, naive_encode(tok, piece)) << piece;
  }
  std::mt19937 rng(7);
  const std::string alphabet = "ab c\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\x80\xFF.,\n";
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    const int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    EXPECT_EQ(tok.encode(s), naive_encode(tok, s)) << trial;
  }
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.encode("", true), std::vector<int>{1});
  const int once = tok.encode("Once")[0];  // " On"
  ASSERT_EQ(tok.piece(once), " On");
  EXPECT_EQ(tok.decode(1, once), "On");  // after BOS the leading space is dropped
  EXPECT_EQ(tok.decode(5, once), " On");
  EXPECT_EQ(tok.decode(5, 3 + 0x41), "A");  // <0x41>
}

TEST(Tokenizer, StoriesSplitAtEndOfText) {
  const auto ids = ropekit::encode_stories(bundled_tokenizer(), "  One.\n<|endoftext|>\n\n<|endoftext|> Two. ");
  std::vector<int> expected = bundled_tokenizer().encode("One.", true);
  const auto two = bundled_tokenizer().encode("Two.", true);
  expected.insert(expected.end(), two.begin(), two.end());
  EXPECT_EQ(ids, expected);
}

TEST(Tokenizer, MalformedFilesAreErrors) {
  const auto good = model_files::tokenizer_bytes({"a", "b", "ab"}, {0, 0, 1});
  EXPECT_EQ(ropekit::Tokenizer::from_llama2c(good).vocab_size(), 3);
  // The format has no token count: a file cut after a whole token is a smaller vocabulary (which
  // require_vocab_size refuses for a model); any other cut is an error.
  for (std::size_t n = 0; n < good.size(); ++n) {
    if (n == 4 || n == 13 || n == 22) continue;
    EXPECT_THROW(ropekit::Tokenizer::from_llama2c(std::span(good.data(), n), "t"), ropekit::Error) << n;
  }
  EXPECT_ERROR(ropekit::Tokenizer::from_llama2c(std::span(good.data(), 4), "t.bin"), "no tokens");
  auto negative = good;
  const std::int32_t minus = -5;
  std::memcpy(negative.data() + 8, &minus, 4);
  EXPECT_ERROR(ropekit::Tokenizer::from_llama2c(negative, "t.bin"), "token 0", "length = -5");
  EXPECT_ERROR(bundled_tokenizer().require_vocab_size(32000, "big.bin"), "512 tokens", "vocab_size = 32000");
  EXPECT_ERROR(ropekit::Tokenizer::from_llama2c(good).encode("z"), "byte 0x20");  // no pieces for ' ' or 'z'
  EXPECT_ERROR(bundled_tokenizer().decode(1, 512), "token id 512");
}

// An older llama2.c export's layout (stories15M's tokenizer): ids 3–258 hold byte b as the code point
// U+00bb instead of "<0xXX>", so "a" is both byte 0x61's fallback (id 100) and a regular piece. Told from
// the file: the regular piece wins, the fallback ids stand only for bytes with no piece and never merge,
// and they decode to their byte; a file with one of those entries changed is read as the current layout.
TEST(Tokenizer, LegacyByteLayoutPrefersRegularPieces) {
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores(3, 0.0f);
  for (int b = 0; b < 256; ++b) {
    pieces.push_back(b < 0x80 ? std::string(1, char(b)) : std::string{char(0xC0 | (b >> 6)), char(0x80 | (b & 0x3F))});
    scores.push_back(0.0f);
  }
  const int first = int(pieces.size());  // regular pieces: 259 …
  for (const char* p : {" ", "a", "b", "c", ",", " a", "ab", " ab", "é"}) {
    pieces.push_back(p);
    scores.push_back(-float(pieces.size()));  // earlier pieces merge first
  }
  const auto id = [&](std::string_view p) {
    for (int i = first; i < int(pieces.size()); ++i) {
      if (pieces[std::size_t(i)] == p) return i;
    }
    return -1;
  };
  const auto bytes = model_files::tokenizer_bytes(pieces, scores);
  const auto tok = ropekit::Tokenizer::from_llama2c(bytes, "legacy.bin");
  ASSERT_TRUE(tok.legacy_byte_layout());
  EXPECT_TRUE(tok.is_byte_fallback(3 + 'a'));
  EXPECT_FALSE(tok.is_byte_fallback(id("a")));
  // "ab,c": " ab" then "," and "c" as their regular pieces — never the fallback ids 3 + ',' and 3 + 'c'.
  EXPECT_EQ(tok.encode("ab,c"), (std::vector<int>{id(" ab"), id(","), id("c")}));
  // "é" has a piece; "ü" (C3 BC) has none: its two bytes fall back, and the fallback ids do not merge.
  EXPECT_EQ(tok.encode("é"), (std::vector<int>{id(" "), id("é")}));
  EXPECT_EQ(tok.encode("ü"), (std::vector<int>{id(" "), 3 + 0xC3, 3 + 0xBC}));
  // Round trips, the fallback ids decoding to their bytes.
  for (std::string text : {"ab,c", "cab ba", "é ü!", "a\x01z"}) {
    const std::vector<int> ids = tok.encode(text, /*bos=*/true);
    std::string back;
    for (std::size_t i = 1; i < ids.size(); ++i) back += tok.decode(ids[i - 1], ids[i]);
    EXPECT_EQ(back, text);
  }
  // One fallback entry changed: not the legacy layout (read as before: first id of each piece).
  auto changed = pieces;
  changed[3 + 'q'] = "Q!";
  const auto plain = ropekit::Tokenizer::from_llama2c(model_files::tokenizer_bytes(changed, scores), "plain.bin");
  EXPECT_FALSE(plain.legacy_byte_layout());
  EXPECT_EQ(plain.encode("ca"), (std::vector<int>{3 + ' ', 3 + 'c', 3 + 'a'}));
  // The bundled (current-layout) tokenizer is not legacy, and its byte pieces are the fallback.
  EXPECT_FALSE(bundled_tokenizer().legacy_byte_layout());
  EXPECT_TRUE(bundled_tokenizer().is_byte_fallback(3 + 0x41));
  // A legacy file cut inside an entry: an error naming the token and its byte offset.
  EXPECT_ERROR(ropekit::Tokenizer::from_llama2c(std::span(bytes.data(), bytes.size() - 1), "cut.bin"), "cut.bin",
               "token 267");
  EXPECT_ERROR(tok.require_vocab_size(512, "stories260K.bin"), "268 tokens", "vocab_size = 512");

  // The same vocabulary as llama.cpp's llama2.c converter writes it into GGUF: " " as U+2581 and byte 0's
  // piece empty (a C string). Still the legacy layout, encoding as the llama2.c file does.
  gguf_test::Writer w;
  w.str("tokenizer.ggml.model", "llama");
  std::vector<std::string> escaped;
  for (const std::string& p : pieces) {
    std::string e;
    for (char ch : p) e += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
    escaped.push_back(e);
  }
  escaped[3] = "";
  w.str_array("tokenizer.ggml.tokens", escaped);
  w.f32_array("tokenizer.ggml.scores", scores);
  const auto from_gguf = ropekit::Tokenizer::from_gguf(w.bytes(), "converted.gguf");
  EXPECT_TRUE(from_gguf.legacy_byte_layout());
  for (std::string text : {"ab,c", "cab ba", "é ü!", "a\x01z"}) EXPECT_EQ(from_gguf.encode(text), tok.encode(text));
  EXPECT_EQ(from_gguf.decode(1, 3), std::string(1, '\0'));
}

}  // namespace
