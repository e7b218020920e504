// ropekit/lab.hpp — the long-context lab: perplexity by target position for context-extension methods,
// side by side, on a real model (`ropekit eval`; docs/lab.md pins the protocol).
//
//   ropekit::EvalOptions options;                      // defaults: docs/lab.md
//   ropekit::EvalResult result = ropekit::evaluate(model, tokens, options);
//
// Protocol. Windows: the first starts at token 0; each next one at the first BOS at or after the end
// of the previous; a window is window_size tokens (default 8·L0); as many as fit, or `windows`. For each
// N in `lengths` (default L0/2, L0, 2·L0, 4·L0, 8·L0) the model reads tokens [start, start + N) of every
// window, with s = max(1, N / L0) (L0 = trained_length, default the model's seq_len). Every default
// that is a length is a multiple of L0 (effective_options), so the protocol scales with the model: the
// 260K TinyStories model (L0 = 512) reads 4096-token windows, stories15M (L0 = 256) 2048-token ones. Targets are window
// positions 1 … N−1, each predicted from the tokens before it; NLL (float64 log-softmax of the float32 logits) is
// averaged per bucket [buckets[i], buckets[i+1]) of target position and reported with its token count and PPL =
// exp(mean NLL).
//   Accuracy: every bucket's mean NLL within 1e-3 nats of a float64 forward of the same protocol
//   (tests/model_test.cpp checks every built-in method on a short configuration).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ropekit/model.hpp"
#include "ropekit/tokenizer.hpp"

namespace ropekit {

// A method: a built-in name, or NAME=JSON (a rope_scaling / rope_parameters fragment in config.json
// syntax; a "factor" given as the string "s" becomes the window's scale s). Built-ins:
//   orig          the model's RoPE
//   pi            linear interpolation, factor s
//   ntk           fixed NTK-aware base · s^(d/(d−2))
//   yarn          YaRN: factor s, original L0, beta_fast 32, beta_slow 1, truncate, magnitude 0.1·ln s + 1
//   yarn_notemp   the same frequencies, magnitude 1
//   dyn_ntk       Hugging Face's dynamic NTK, factor s: when L > L0 tokens have been read, every cached
//                 key and the new query use base·((s·L/L0) − (s−1))^(d/(d−2)); the cache is re-rotated
//                 as L grows (KvCache::rerotate), one token at a time past L0
//   dyn_ntk_stale the same new-token rotation, cached keys keeping the rotation of their append
//                 (Hugging Face's cache)
//   llama3        Llama 3: factor s, low_freq_factor 1, high_freq_factor 4, original L0
//   swa           the model's RoPE, a sliding window of L0 keys
//   restart       the model's RoPE, context cut at every BOS with positions restarting at 0 there (each story
//                 with the plan of its own length, as a Hugging Face forward over the story alone)
// Methods that change how attention uses positions (attention.hpp's regimes; not in the default list),
// with parameters after a colon — NAME:key=value,key=value — defaults in brackets:
//   rerope        ReRoPE: relative position i − j inside a window, w beyond it   w [L0/2], logn [0]
//   rerope_logn   the same with log-n query scaling (Su's patch)                 w [L0/2], logn [1]
//   self_extend   SelfExtend: neighbours at i − j, grouped positions beyond      W [L0/4], G [8], logn [0]
//   dca           dual-chunk attention (Qwen2.5-1M)                              chunk [L0], local [chunk/32], logn [0]
//   logn          the model's RoPE with log-n query scaling max(1, ln(i+1)/ln L)  L [L0]
// logn=1 adds log-n scaling with L = L0 to a regime method.
// A fragment whose plan depends on the length (dynamic, longrope) runs like dyn_ntk.
struct EvalMethod {
  std::string name;
  std::string fragment;  // empty for a built-in
};
// Parses "orig,pi,name={...},rerope:w=384,self_extend:W=256,G=4" (commas inside a JSON fragment's
// braces do not split; a key=value piece after a NAME:parameters method continues its parameters).
// Errors: an unknown name (listing the built-ins), an empty name, a duplicate, parameters on a method
// without any, an unknown parameter (listing the method's), a value that is not an integer. Values out
// of range (w < 1, G < 1, W < G, local outside [0, chunk)) are errors of evaluate().
std::vector<EvalMethod> parse_methods(std::string_view list);
std::vector<EvalMethod> builtin_methods();

// What a method does at scale s over the trained length L0, before it meets a model: how the lab reads a window with
// it and what it changes. The C++ lab resolves it against a LlamaModel (spec_with_scaling), the Python lab
// (ropekit.lab) against a Hugging Face config: one definition of every method for both.
struct MethodReading {
  enum class Kind {
    Batched,       // one forward over the window
    Dynamic,       // dyn_ntk: past L0, each token with the plan of the length read so far, the cache re-rotated
    DynamicStale,  // dyn_ntk_stale: the same, cached keys keeping the plan of their append
    Restart,       // restart: each story (from a BOS) read on its own from position 0
  };
  Kind kind = Kind::Batched;
  // The rope_scaling (or rope_parameters) fragment the method installs, as JSON with s substituted; empty: the
  // model's own RoPE. A NAME=JSON fragment whose plan depends on the length (dynamic, longrope) reads as Dynamic:
  // the caller decides that once the fragment has met the model's config (depends_on_length of its spec).
  std::string rope_scaling;
  std::int64_t window = 0;  // > 0: a sliding window of that many keys (swa: L0)
  PositionRegimes regimes;
  std::int64_t logn_length = 0;  // > 0: log-n query scaling with that L
};
// Errors: as parse_methods for names and parameters; parameter values out of range (validate_regimes, under the
// method's spellings); invalid JSON in a fragment.
MethodReading describe_method(const EvalMethod& method, double s, std::int64_t l0);

struct EvalOptions {
  std::optional<std::int64_t> window_size;  // absent: 8·L0
  std::optional<std::int64_t> windows;      // absent: as many as fit
  std::vector<std::int64_t> lengths;        // empty: L0/2, L0, 2·L0, 4·L0, 8·L0
  std::vector<std::int64_t> buckets;        // empty: 0, L0/2, L0, 2·L0, 4·L0, 8·L0
  std::vector<EvalMethod> methods = builtin_methods();
  std::optional<std::int64_t> trained_length;  // absent: the model's seq_len
  int threads = 0;
  // The attention probe: at the largest N only, every window, every method — each layer's attention
  // distributions recomputed in float64 from the runner's own queries and keys (EvalResult::attention).
  // Costs about as much again as the eval's forward at that N.
  bool attention_stats = false;
  // Called after each (method, N, window) read with tokens read so far and the total.
  std::function<void(std::int64_t done, std::int64_t total, const std::string& what)> progress;
};

struct EvalRow {
  std::string method;
  std::int64_t n = 0;
  double scale = 1;
  std::int64_t bucket_lo = 0, bucket_hi = 0;
  std::int64_t tokens = 0;
  double mean_nll = 0;
  double ppl = 0;
};

// The rotation one method used at one length: its spec, and its plan at that length (a length-dependent method's —
// dynamic NTK's, LongRoPE's — after reading all N tokens; the plan of its last token).
struct EvalPlan {
  std::string method;
  std::int64_t n = 0;
  double scale = 1;
  Spec spec;
  Plan plan;
};

// The attention probe's statistics for one method, one layer (−1: every layer together) and the queries whose
// target (the token each predicts: query position i predicts i + 1) falls in one bucket [query_lo, query_hi):
// means over (query, head) pairs and windows of each query's attention distribution over the keys it sees.
// The distribution is recomputed in float64 from the runner's queries and keys with the method's rotation
// (each side's plan, positions and magnitude, regimes and their positions), causal mask and window, log-n
// scaling and softmax scale — the one ropekit's attention computes in float32 (tests: against the float64
// oracle's probabilities, within 1e-4).
struct AttentionStatsRow {
  std::string method;
  std::int64_t n = 0;
  int layer = -1;
  std::int64_t query_lo = 0, query_hi = 0;
  std::int64_t samples = 0;    // (query, head) pairs
  double entropy = 0;          // nats
  double entropy_ratio = 0;    // entropy / ln(keys seen), over the pairs that see ≥ 2 keys (1: uniform)
  double own_bos = 0;          // mass on the first token (BOS) of the query's own story
  double earlier_stories = 0;  // mass on keys before it: the stories a window holds before the query's
  std::vector<double> mass;    // per relative-distance bucket (EvalResult::distance_edges); sums to 1
};

struct EvalResult {
  std::vector<std::int64_t> window_starts;
  std::int64_t trained_length = 0;
  std::int64_t window_size = 0;  // as read (options.window_size, or its default)
  std::vector<EvalRow> rows;     // method-major, then N, then bucket; empty buckets left out
  double seconds = 0;
  std::vector<double> method_seconds;  // wall time per method, in options.methods' order
  std::int64_t tokens_read = 0;        // model positions computed, all methods
  std::vector<EvalPlan> plans;         // method-major, then N
  // With EvalOptions::attention_stats: distance bucket edges (0, 1, 16, then the target buckets' edges
  // above 16; the last bucket open) and the rows, method-major, then layer (−1 first), then query bucket.
  std::vector<std::int64_t> distance_edges;
  std::vector<AttentionStatsRow> attention;
};

// `options` with every absent length filled in from the trained length L0 (options.trained_length, else
// `model_seq_len`): the protocol's defaults as multiples of L0 (the file comment). Errors: L0 < 2.
EvalOptions effective_options(const EvalOptions& options, std::int64_t model_seq_len);

// The checks evaluate() makes of `options` after effective_options: a length < 2 or larger than window_size, buckets
// not strictly increasing from 0, no method.
void check_protocol(const EvalOptions& options);

// A regime method whose window (rerope's w, self_extend's W, dca's chunk) is not below the largest length max_n never
// acts: an error naming the method and the parameter (the method would silently be orig). evaluate() and passkey()
// check it; so does the Python lab.
void check_regimes_act(const std::vector<EvalMethod>& methods, std::int64_t l0, std::int64_t max_n);

// The window starts the protocol takes from `tokens`. Errors: window_size < 2, no window fits, fewer
// than `windows` fit.
std::vector<std::int64_t> eval_windows(std::span<const int> tokens, std::int64_t window_size,
                                       std::optional<std::int64_t> windows, int bos_id);

// Errors (ropekit::Error naming the option and value): a length < 2 or larger than window_size,
// buckets not strictly increasing from 0, token ids outside the vocabulary, the window errors above,
// a fragment the config reader rejects.
EvalResult evaluate(const LlamaModel& model, std::span<const int> tokens, const EvalOptions& options);

// Passkey retrieval (docs/lab.md; `ropekit passkey`, ropekit.lab.passkey): the standard task — an intro, filler
// sentences with "The pass key is K. Remember it. K is the pass key." at relative depth d of the filler, the question
// at the end — per method on a length × depth grid. The text, the prompt's layout and the keys are defined here once
// for both labs.
inline constexpr std::string_view kPasskeyIntro =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you "
    "about the important information there.";
inline constexpr std::string_view kPasskeyFiller =
    " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
inline constexpr std::string_view kPasskeyNeedle = " The pass key is {key}. Remember it. {key} is the pass key.";
inline constexpr std::string_view kPasskeyQuestion = " What is the pass key? The pass key is";

// Text → token ids without BOS (a piece's leading space is the tokenizer's to render).
using TextEncoder = std::function<std::vector<int>(std::string_view)>;
// A llama2.c tokenizer as a TextEncoder: it renders SentencePiece's dummy-prefix space itself, so a piece's own
// leading space is dropped. The encoder refers to `tokenizer`, which must outlive it.
TextEncoder passkey_encoder(const Tokenizer& tokenizer);

// The grid's defaults: lengths L0/2, L0, 2·L0, 4·L0 (those ≥ 2) and depths 0 … 1 in quarters.
std::vector<std::int64_t> passkey_lengths(std::int64_t l0);
inline constexpr double kPasskeyDepths[] = {0, 0.25, 0.5, 0.75, 1};

struct PasskeyPrompt {
  std::vector<int> prompt;  // exactly the length asked for: BOS, intro, filler with the needle, question
  std::vector<int> answer;  // the key's tokens as they continue the question
};
// The prompt of `length` tokens with `key` at the filler's sentence boundary nearest to depth · (filler length), and
// the answer. Errors: depth outside [0, 1], a length below the prompt without filler (naming both).
PasskeyPrompt passkey_prompt(const TextEncoder& encode, std::int64_t length, double depth, std::string_view key,
                             int bos);
// `count` 5-digit keys (10000 … 99999) from splitmix64 seeded with `seed`: the grid takes them in order (length, then
// depth, then key).
std::vector<std::string> passkey_keys(std::uint64_t seed, std::size_t count);

struct PasskeyOptions {
  std::vector<EvalMethod> methods = builtin_methods();
  std::vector<std::int64_t> lengths;  // empty: passkey_lengths(L0)
  std::vector<double> depths;         // empty: kPasskeyDepths
  std::int64_t keys = 5;              // per (length, depth) cell
  std::uint64_t seed = 0;
  std::optional<std::int64_t> trained_length;  // absent: the model's seq_len
  int threads = 0;
  std::function<void(std::int64_t done, std::int64_t total, const std::string& what)> progress;
};

struct PasskeyCell {
  std::string method;
  std::int64_t length = 0;
  double scale = 1;  // s = max(1, length / L0): the method's scale at this length
  double depth = 0;
  std::int64_t keys = 0;
  std::int64_t retrieved = 0;
};

struct PasskeyResult {
  std::vector<PasskeyCell> cells;  // method-major, then length, then depth
  std::int64_t trained_length = 0;
  double seconds = 0;
};

// Greedy decoding's exact match, scored in one teacher-forced forward per key: retrieved iff each answer token is the
// argmax (the first, on ties) of the float32 logits given the prompt and the answer's tokens before it. Methods read
// the window as evaluate() does. Errors (before any forward): keys < 1, a depth outside [0, 1], a length below the
// prompt's own, ids outside the vocabulary, and evaluate()'s method errors.
PasskeyResult passkey(const LlamaModel& model, const TextEncoder& encode, const PasskeyOptions& options);

}  // namespace ropekit
