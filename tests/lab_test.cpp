// The lab's protocol (perplexity by position, regime methods, the attention probe) against an independent float64
// forward (tests/model_oracle.hpp).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include <unistd.h>

#include <algorithm>
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

// The lab's configuration for the oracle comparisons: L0 = 16, N = 16 and 48, two windows, buckets 0/16/32.
ropekit::EvalOptions short_lab() {
  ropekit::EvalOptions o;
  o.window_size = 48;
  o.windows = 2;
  o.lengths = {16, 48};
  o.buckets = {0, 16, 32};
  o.trained_length = 16;
  return o;
}

// Every row of `result` within 1e-3 nats of the float64 oracle's protocol, the method of each row given
// by method_of(name, N), and with the oracle's target count.
void expect_rows_match_the_oracle(const ropekit::EvalResult& result, const ropekit::EvalOptions& o,
                                  const std::function<oracle::Method(const std::string&, std::int64_t)>& method_of) {
  const auto& tokens = excerpt_tokens();
  std::map<std::pair<std::string, std::int64_t>, std::map<std::int64_t, std::pair<double, std::int64_t>>> expected;
  for (const auto& m : o.methods) {
    for (std::int64_t n : o.lengths) {
      const oracle::Method om = method_of(m.name, n);
      for (std::int64_t start : result.window_starts) {
        const std::vector<int> window(tokens.begin() + start, tokens.begin() + start + n);
        const std::vector<double> nll = oracle::window_nll(bundled(), window, om, 1);
        for (std::size_t t = 1; t < std::size_t(n); ++t) {
          auto& [sum, count] = expected[{m.name, n}][t < 16 ? 0 : t < 32 ? 16 : 32];
          sum += nll[t - 1];
          ++count;
        }
      }
    }
  }
  ASSERT_EQ(result.rows.size(), o.methods.size() * (1 + 3));
  for (const ropekit::EvalRow& row : result.rows) {
    const auto [sum, count] = expected[{row.method, row.n}][row.bucket_lo];
    EXPECT_EQ(row.tokens, count) << row.method << " N=" << row.n << " bucket " << row.bucket_lo;
    EXPECT_NEAR(row.mean_nll, sum / double(count), 1e-3) << row.method << " N=" << row.n << " bucket " << row.bucket_lo;
    EXPECT_DOUBLE_EQ(row.ppl, std::exp(row.mean_nll));
  }
}

// The lab's protocol on a short configuration, every built-in method, against the float64 oracle.
TEST(Lab, EveryMethodWithinOneMilliNatOfTheFloat64Protocol) {
  const auto& tokens = excerpt_tokens();
  const ropekit::EvalOptions o = short_lab();
  const ropekit::EvalResult result = ropekit::evaluate(bundled(), tokens, o);
  // Window starts: 0, then the first BOS at or after 48.
  std::int64_t second = 48;
  while (tokens[std::size_t(second)] != 1) ++second;
  ASSERT_EQ(result.window_starts, (std::vector<std::int64_t>{0, second}));
  ASSERT_EQ(o.methods.size(), 10u);
  ASSERT_EQ(result.method_seconds.size(), 10u);  // one time per method, within the total
  EXPECT_LE(std::accumulate(result.method_seconds.begin(), result.method_seconds.end(), 0.0), result.seconds);
  expect_rows_match_the_oracle(result, o, [](const std::string& name, std::int64_t n) {
    return oracle::method(name, 8, 10000.0, std::max(1.0, double(n) / 16.0), 16);
  });
  // The methods differ where they should (the check above can tell them apart).
  auto nll_of = [&](const std::string& method, std::int64_t bucket) {
    for (const auto& r : result.rows) {
      if (r.method == method && r.n == 48 && r.bucket_lo == bucket) return r.mean_nll;
    }
    return 0.0;
  };
  for (const char* m : {"pi", "ntk", "yarn", "yarn_notemp", "dyn_ntk", "dyn_ntk_stale", "llama3", "swa"}) {
    EXPECT_GT(std::fabs(nll_of(m, 32) - nll_of("orig", 32)), 1e-3) << m;
  }
}

// The position-regime methods (NAME:parameters), against the float64 oracle's relative-position matrix.
TEST(Lab, RegimeMethodsWithinOneMilliNatOfTheFloat64Protocol) {
  const auto& tokens = excerpt_tokens();
  ropekit::EvalOptions o = short_lab();
  o.methods = ropekit::parse_methods(
      "rerope:w=6,rerope_logn:w=10,self_extend:W=8,G=3,self_extend:W=6,G=2,logn=1,"
      "dca,dca:chunk=12,local=3,logn");
  ASSERT_EQ(o.methods.size(), 7u);
  EXPECT_EQ(o.methods[2].name, "self_extend:W=8,G=3");
  const ropekit::EvalResult result = ropekit::evaluate(bundled(), tokens, o);
  const int d = 8;
  const double base = 10000.0;
  std::map<std::string, oracle::Method> methods = {{"rerope:w=6", oracle::rerope(d, base, 6, 0)},
                                                   {"rerope_logn:w=10", oracle::rerope(d, base, 10, 16)},
                                                   {"self_extend:W=8,G=3", oracle::self_extend(d, base, 8, 3)},
                                                   {"self_extend:W=6,G=2,logn=1", oracle::self_extend(d, base, 6, 2)},
                                                   {"dca", oracle::dca(d, base, 16, 0)},  // chunk = L0, local = L0 / 32
                                                   {"dca:chunk=12,local=3", oracle::dca(d, base, 12, 3)},
                                                   {"logn", oracle::method("logn", d, base, 1.0, 16)}};
  methods["self_extend:W=6,G=2,logn=1"].logn_length = 16;
  expect_rows_match_the_oracle(result, o, [&](const std::string& name, std::int64_t) { return methods.at(name); });
  // Each method differs from the model's own RoPE where its regimes apply (so the check can fail).
  o.methods = ropekit::parse_methods("orig");
  const ropekit::EvalResult orig = ropekit::evaluate(bundled(), tokens, o);
  auto far = [](const ropekit::EvalResult& r, const std::string& method) {
    for (const auto& row : r.rows) {
      if (row.method == method && row.n == 48 && row.bucket_lo == 32) return row.mean_nll;
    }
    return 0.0;
  };
  for (const auto& [name, om] : methods) EXPECT_GT(std::fabs(far(result, name) - far(orig, "orig")), 1e-3) << name;
}

// The attention probe: every statistic of every method against the float64 oracle's own attention
// probabilities, on windows that hold two stories (so own-BOS and earlier-story mass are exercised).
TEST(Lab, AttentionProbeEqualsTheFloat64OraclesProbabilities) {
  const auto& excerpt = excerpt_tokens();
  // Two short stories then a third: the first 20 tokens of the excerpt's first story, the start of its second.
  std::int64_t second = 1;
  while (excerpt[std::size_t(second)] != 1) ++second;
  std::vector<int> tokens(excerpt.begin(), excerpt.begin() + 20);
  tokens.insert(tokens.end(), excerpt.begin() + second, excerpt.begin() + second + 100);
  ropekit::EvalOptions o = short_lab();
  o.windows = 1;
  o.attention_stats = true;
  o.methods = ropekit::parse_methods(
      "orig,yarn,dyn_ntk,dyn_ntk_stale,swa,restart,rerope:w=6,self_extend:W=8,G=3,dca:chunk=12,local=3,logn");
  const ropekit::EvalResult result = ropekit::evaluate(bundled(), tokens, o);
  ASSERT_EQ(result.distance_edges, (std::vector<std::int64_t>{0, 1, 16, 32}));
  const int d = 8;
  const double base = 10000.0, s = 3.0;
  std::map<std::string, oracle::Method> methods = {{"rerope:w=6", oracle::rerope(d, base, 6, 0)},
                                                   {"self_extend:W=8,G=3", oracle::self_extend(d, base, 8, 3)},
                                                   {"dca:chunk=12,local=3", oracle::dca(d, base, 12, 3)}};
  for (const char* name : {"orig", "yarn", "dyn_ntk", "dyn_ntk_stale", "swa", "restart", "logn"}) {
    methods[name] = oracle::method(name, d, base, s, 16);
  }
  const int layers = bundled().config.n_layers;
  struct Expected {
    double samples = 0, entropy = 0, ratio = 0, ratio_samples = 0, own_bos = 0, earlier = 0;
    std::vector<double> mass = std::vector<double>(4);
  };
  for (const auto& m : o.methods) {
    // [layer + 1][target bucket]: layer 0 here is "all layers".
    std::vector<std::vector<Expected>> expected(std::size_t(layers + 1), std::vector<Expected>(3));
    const std::vector<int> window(tokens.begin(), tokens.begin() + 48);
    std::vector<int> story(48, 0);
    for (int t = 1; t < 48; ++t) story[std::size_t(t)] = window[std::size_t(t)] == 1 ? t : story[std::size_t(t - 1)];
    ASSERT_EQ(story[47], 20);
    oracle::window_nll(bundled(), window, methods.at(m.name), 1,
                       [&](int layer, int i, int, const std::vector<int>& keys, const std::vector<double>& probs) {
                         if (i == 47) return;  // the last query has no target
                         const int bucket = i + 1 < 16 ? 0 : i + 1 < 32 ? 1 : 2;
                         for (Expected* e : {&expected[std::size_t(layer + 1)][std::size_t(bucket)],
                                             &expected[0][std::size_t(bucket)]}) {
                           double entropy = 0;
                           for (std::size_t a = 0; a < keys.size(); ++a) {
                             const double p = probs[a];
                             if (p > 0) entropy -= p * std::log(p);
                             const int dist = i - keys[a];
                             e->mass[dist < 1 ? 0 : dist < 16 ? 1 : dist < 32 ? 2 : 3] += p;
                             if (keys[a] == story[std::size_t(i)]) e->own_bos += p;
                             if (keys[a] < story[std::size_t(i)]) e->earlier += p;
                           }
                           e->samples += 1;
                           e->entropy += entropy;
                           if (keys.size() >= 2) {
                             e->ratio += entropy / std::log(double(keys.size()));
                             e->ratio_samples += 1;
                           }
                         }
                       });
    int rows = 0;
    double earlier_total = 0;
    for (const ropekit::AttentionStatsRow& r : result.attention) {
      if (r.method != m.name) continue;
      ++rows;
      ASSERT_EQ(r.n, 48);
      const int bucket = r.query_lo == 0 ? 0 : r.query_lo == 16 ? 1 : 2;
      const Expected& e = expected[std::size_t(r.layer + 1)][std::size_t(bucket)];
      const std::string where = m.name + " layer " + std::to_string(r.layer) + " targets " + std::to_string(r.query_lo);
      EXPECT_EQ(double(r.samples), e.samples) << where;
      EXPECT_NEAR(r.entropy, e.entropy / e.samples, 1e-4) << where;
      EXPECT_NEAR(r.entropy_ratio, e.ratio / e.ratio_samples, 1e-4) << where;
      EXPECT_NEAR(r.own_bos, e.own_bos / e.samples, 1e-4) << where;
      EXPECT_NEAR(r.earlier_stories, e.earlier / e.samples, 1e-4) << where;
      ASSERT_EQ(r.mass.size(), 4u);
      double total = 0;
      for (std::size_t b = 0; b < 4; ++b) {
        EXPECT_NEAR(r.mass[b], e.mass[b] / e.samples, 1e-4) << where << " distance bucket " << b;
        total += r.mass[b];
      }
      EXPECT_NEAR(total, 1.0, 1e-9) << where;
      earlier_total += r.earlier_stories;
    }
    EXPECT_EQ(rows, (layers + 1) * 3) << m.name;
    // Restart never sees the first story; the others do (so the statistic can tell them apart).
    if (m.name == "restart") {
      EXPECT_EQ(earlier_total, 0.0);
    } else {
      EXPECT_GT(earlier_total, 1e-3) << m.name;
    }
  }
}

TEST(Lab, RegimeMethodParametersAreChecked) {
  EXPECT_ERROR(ropekit::parse_methods("rerope:x=3"), "unknown parameter x", "logn, w");
  EXPECT_ERROR(ropekit::parse_methods("rerope:w=abc"), "w = \"abc\"", "not an integer");
  EXPECT_ERROR(ropekit::parse_methods("rerope:w"), "\"w\" is not key=value");
  EXPECT_ERROR(ropekit::parse_methods("rerope:w=3,w=4"), "w is given twice");
  EXPECT_ERROR(ropekit::parse_methods("swa:w=3"), "only rerope");
  ropekit::EvalOptions o;
  o.window_size = 48;
  o.windows = 1;
  o.lengths = {48};
  o.trained_length = 16;
  const auto& tokens = excerpt_tokens();
  for (const auto& [method, needle] : std::vector<std::pair<const char*, const char*>>{
           {"rerope:w=0", "w = 0"},
           {"self_extend:G=0", "G = 0"},
           {"self_extend:W=4,G=8", "W = 4"},
           {"dca:chunk=16,local=16", "local = 16"},
           {"rerope:w=48", "w = 48 is not below the largest length N = 48"},
           {"self_extend:W=60,G=2", "W = 60"},
           {"dca:chunk=48", "chunk = 48"},
           {"dca:chunk=0", "chunk = 0"},
           {"logn:L=1", "L = 1"}}) {
    o.methods = ropekit::parse_methods(method);
    EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), method, needle);
  }
}

// restart on a window with a story boundary inside (the windows above hold one story each).
TEST(Lab, RestartCutsTheContextAtEveryBos) {
  const auto& all = excerpt_tokens();
  std::size_t second_story = 1;
  while (all[second_story] != 1) ++second_story;
  std::vector<int> tokens(all.begin(), all.begin() + 25);
  tokens.insert(tokens.end(), all.begin() + std::ptrdiff_t(second_story),
                all.begin() + std::ptrdiff_t(second_story) + 39);
  ropekit::EvalOptions o;
  o.window_size = 64;
  o.lengths = {64};
  o.buckets = {0, 25};
  o.methods = ropekit::parse_methods("restart,orig");
  const auto result = ropekit::evaluate(bundled(), tokens, o);
  ASSERT_EQ(result.rows.size(), 4u);
  for (const auto& row : result.rows) {
    const auto nll = oracle::window_nll(bundled(), tokens, oracle::method(row.method, 8, 10000.0, 1.0, 512), 1);
    double sum = 0;
    for (std::int64_t t = row.bucket_lo; t < std::min<std::int64_t>(row.bucket_hi, 64); ++t)
      sum += t > 0 ? nll[std::size_t(t - 1)] : 0.0;
    EXPECT_NEAR(row.mean_nll, sum / double(row.tokens), 1e-3) << row.method << " " << row.bucket_lo;
  }
  EXPECT_GT(std::fabs(result.rows[1].mean_nll - result.rows[3].mean_nll), 1e-2);  // after the BOS at 25
}

TEST(Lab, CustomFragmentsWithTheScale) {
  ropekit::EvalOptions o;
  o.window_size = 48;
  o.windows = 1;
  o.lengths = {48};
  o.buckets = {0, 16};
  o.trained_length = 16;
  o.methods = ropekit::parse_methods(
      "pi,lin={\"rope_type\":\"linear\",\"factor\":\"s\"},"
      "dyn={\"rope_type\":\"dynamic\",\"factor\":\"s\"}");
  ASSERT_EQ(o.methods.size(), 3u);
  EXPECT_EQ(o.methods[1].fragment, "{\"rope_type\":\"linear\",\"factor\":\"s\"}");
  const auto result = ropekit::evaluate(bundled(), excerpt_tokens(), o);
  ASSERT_EQ(result.rows.size(), 6u);
  EXPECT_NEAR(result.rows[0].mean_nll, result.rows[2].mean_nll, 1e-6);  // pi = linear with factor s
  o.methods = ropekit::parse_methods("dyn_ntk");
  const auto dyn = ropekit::evaluate(bundled(), excerpt_tokens(), o);
  EXPECT_NEAR(dyn.rows[1].mean_nll, result.rows[5].mean_nll, 1e-6);  // "dynamic" fragment = dyn_ntk
}

// Every length of the protocol is a multiple of the trained length unless given: windows of 8·L0, N and
// bucket edges at L0/2 … 8·L0, and the regime methods' windows (rerope w = L0/2, self_extend W = L0/4):
// `rerope` runs exactly as `rerope:w=L0/2`.
TEST(Lab, DefaultsAreMultiplesOfTheTrainedLength) {
  ropekit::EvalOptions o;
  o.trained_length = 16;
  const ropekit::EvalOptions e = ropekit::effective_options(o, 512);
  EXPECT_EQ(e.window_size, 128);
  EXPECT_EQ(e.lengths, (std::vector<std::int64_t>{8, 16, 32, 64, 128}));
  EXPECT_EQ(e.buckets, (std::vector<std::int64_t>{0, 8, 16, 32, 64, 128}));
  const ropekit::EvalOptions bundled_defaults = ropekit::effective_options({}, 512);  // the 260K model's table
  EXPECT_EQ(bundled_defaults.window_size, 4096);
  EXPECT_EQ(bundled_defaults.lengths, (std::vector<std::int64_t>{256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(bundled_defaults.buckets, (std::vector<std::int64_t>{0, 256, 512, 1024, 2048, 4096}));
  o.windows = 1;
  o.lengths = {48};
  o.methods = ropekit::parse_methods("rerope,rerope:w=8,self_extend,self_extend:W=8");
  const ropekit::EvalResult r = ropekit::evaluate(bundled(), excerpt_tokens(), o);
  EXPECT_EQ(r.window_size, 128);
  std::map<std::string, std::vector<double>> nll;
  for (const auto& row : r.rows) nll[row.method].push_back(row.mean_nll);
  EXPECT_EQ(nll["rerope"], nll["rerope:w=8"]);
  EXPECT_EQ(nll["self_extend"], nll["self_extend:W=8"]);
  // Parameters that make no sense for any L0, and an L0 the protocol cannot scale.
  o.methods = ropekit::parse_methods("rerope:w=0");
  EXPECT_ERROR(ropekit::evaluate(bundled(), excerpt_tokens(), o), "rerope:w=0", "w = 0");
  o.trained_length = 1;
  EXPECT_ERROR(ropekit::effective_options(o, 512), "trained-length = 1");
}

TEST(Lab, BadOptionsAreErrors) {
  const auto& tokens = excerpt_tokens();
  ropekit::EvalOptions o;
  o.window_size = 1 << 20;
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "window-size = 1048576", "larger than the");
  o.window_size = 64;
  o.lengths = {128};
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "N = 128", "window-size = 64");
  o.lengths = {64};
  o.windows = 100000;
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "windows = 100000");
  o.windows = 1;
  o.buckets = {0, 32, 16};
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "buckets", "16 after 32");
  o.buckets = {0, 32};
  std::vector<int> bad(tokens.begin(), tokens.begin() + 100);
  bad[7] = 999;
  EXPECT_ERROR(ropekit::evaluate(bundled(), bad, o), "tokens[7] = 999");
  EXPECT_ERROR(ropekit::parse_methods("orig,nope"), "nope", "not a built-in");
  EXPECT_ERROR(ropekit::parse_methods("orig,orig"), "orig is given twice");
  EXPECT_ERROR(ropekit::parse_methods("x="), "empty JSON");
  o.methods = ropekit::parse_methods("bad={\"rope_type\":\"warp\",\"factor\":\"s\"}");
  EXPECT_ERROR(ropekit::evaluate(bundled(), tokens, o), "method bad", "warp");
}

ropekit::TextEncoder bundled_encoder() { return ropekit::passkey_encoder(bundled_tokenizer()); }

std::ptrdiff_t find(const std::vector<int>& hay, const std::vector<int>& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) - hay.begin();
}

TEST(Passkey, ThePromptHasItsLengthAndTheKeyAtItsDepth) {
  const ropekit::TextEncoder encode = bundled_encoder();
  const std::vector<int> needle = encode(" The pass key is 40213. Remember it. 40213 is the pass key.");
  const std::vector<int> intro = encode(ropekit::kPasskeyIntro), question = encode(ropekit::kPasskeyQuestion);
  const auto fixed = std::int64_t(1 + intro.size() + needle.size() + question.size());
  for (std::int64_t length : {fixed, std::int64_t{300}, std::int64_t{517}}) {
    std::vector<std::ptrdiff_t> at;
    for (double depth : {0.0, 0.5, 1.0}) {
      const ropekit::PasskeyPrompt p = ropekit::passkey_prompt(encode, length, depth, "40213", 1);
      ASSERT_EQ(std::int64_t(p.prompt.size()), length);
      EXPECT_EQ(p.prompt.front(), 1);
      EXPECT_TRUE(std::equal(question.begin(), question.end(), p.prompt.end() - std::ptrdiff_t(question.size())));
      at.push_back(find(p.prompt, needle));
      std::string answer;
      for (int id : p.answer) answer += bundled_tokenizer().decode(1, id);
      EXPECT_NE(answer.find("40213"), std::string::npos) << answer;
    }
    EXPECT_EQ(at[0], std::ptrdiff_t(1 + intro.size()));  // right after the intro
    EXPECT_EQ(at[2], std::ptrdiff_t(length) - std::ptrdiff_t(question.size() + needle.size()));  // before the question
    EXPECT_LE(at[0], at[1]);
    EXPECT_LE(at[1], at[2]);
  }
  EXPECT_ERROR(ropekit::passkey_prompt(encode, 20, 0.5, "40213", 1), "passkey length = 20", "below the prompt's own");
  EXPECT_ERROR(ropekit::passkey_prompt(encode, 300, 1.5, "40213", 1), "depth = 1.5", "[0, 1]");
}

TEST(Passkey, KeysAreFiveDigitsFromTheSeed) {
  const std::vector<std::string> a = ropekit::passkey_keys(0, 50), b = ropekit::passkey_keys(0, 50);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, ropekit::passkey_keys(1, 50));
  for (const std::string& k : a) {
    ASSERT_EQ(k.size(), 5u);
    EXPECT_TRUE(std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; }));
  }
  EXPECT_GT(std::set<std::string>(a.begin(), a.end()).size(), 45u);
}

// The greedy continuation, one whole forward per token (no cache): what the teacher-forced score must agree with.
std::vector<int> greedy(std::vector<int> tokens, int steps) {
  const ropekit::LlamaModel& model = bundled();
  const ropekit::Rope rope(model.rope_layer().spec);
  std::vector<int> out;
  for (int s = 0; s < steps; ++s) {
    ropekit::LlamaRunner runner(model, {.capacity = std::int64_t(tokens.size()), .threads = 1});
    std::vector<std::int64_t> pos(tokens.size());
    std::iota(pos.begin(), pos.end(), std::int64_t{0});
    std::vector<float> logits(tokens.size() * std::size_t(model.config.vocab_size));
    runner.forward(rope, tokens, pos, logits);
    const float* last = logits.data() + (tokens.size() - 1) * std::size_t(model.config.vocab_size);
    out.push_back(int(std::max_element(last, last + model.config.vocab_size) - last));
    tokens.push_back(out.back());
  }
  return out;
}

TEST(Passkey, TheTeacherForcedScoreIsGreedyDecodingsExactMatch) {
  // The key's tokens made the model's own greedy continuation of the prompt (an encoder that spells the answer so):
  // retrieved; the same with its last token changed: missed.
  const ropekit::TextEncoder real = bundled_encoder();
  const std::string key = ropekit::passkey_keys(7, 1)[0];
  const std::vector<int> prompt = ropekit::passkey_prompt(real, 200, 0.5, key, 1).prompt;
  const std::vector<int> continuation = greedy(prompt, 4);
  const std::string joint = std::string(ropekit::kPasskeyQuestion) + " " + key;
  for (const bool changed : {false, true}) {
    std::vector<int> answer = continuation;
    if (changed) answer.back() = (answer.back() + 1) % bundled().config.vocab_size;
    const ropekit::TextEncoder spelled = [&](std::string_view text) {
      if (text != joint) return real(text);
      std::vector<int> ids = real(ropekit::kPasskeyQuestion);
      ids.insert(ids.end(), answer.begin(), answer.end());
      return ids;
    };
    ropekit::PasskeyOptions o;
    o.methods = ropekit::parse_methods("orig");
    o.lengths = {200};
    o.depths = {0.5};
    o.keys = 1;
    o.seed = 7;
    o.threads = 1;
    const ropekit::PasskeyResult r = ropekit::passkey(bundled(), spelled, o);
    ASSERT_EQ(r.cells.size(), 1u);
    EXPECT_EQ(r.cells[0].retrieved, changed ? 0 : 1);
  }
}

TEST(Passkey, BadOptionsAreErrorsBeforeAnyForward) {
  ropekit::PasskeyOptions o;
  o.methods = ropekit::parse_methods("orig,rerope:w=400");
  o.lengths = {200, 400};
  o.keys = 1;
  EXPECT_ERROR(ropekit::passkey(bundled(), bundled_encoder(), o), "w = 400 is not below the largest length N = 400");
  o.methods = ropekit::parse_methods("orig");
  o.keys = 0;
  EXPECT_ERROR(ropekit::passkey(bundled(), bundled_encoder(), o), "keys = 0");
  o.keys = 1;
  o.lengths = {40};
  EXPECT_ERROR(ropekit::passkey(bundled(), bundled_encoder(), o), "passkey length = 40");
  o.lengths = {200};
  o.depths = {-0.5};
  EXPECT_ERROR(ropekit::passkey(bundled(), bundled_encoder(), o), "depth = -0.5");
}

}  // namespace

// LongRoPE across the switch, through the runner and its KV cache (issue 39): a window read past
// original_max_position_embeddings switches from the short to the long factors at the first token past it — the
// cache re-rotated once (KvCache::rerotate returns true exactly then) — and the NLL equals the float64 protocol
// whose every query and key use the plan of the length read so far.
TEST(Lab, LongRopeAcrossTheSwitchMatchesTheFloat64Protocol) {
  const auto& tokens = excerpt_tokens();
  ropekit::EvalOptions o = short_lab();
  o.methods = ropekit::parse_methods(
      R"(lr={"rope_type": "longrope", "short_factor": [1, 1.5, 2, 3], "long_factor": [1, 2, 4, 8],)"
      R"( "original_max_position_embeddings": 16, "factor": 4})");
  const ropekit::EvalResult result = ropekit::evaluate(bundled(), tokens, o);
  const auto plain = oracle::default_inv_freq(10000.0, 8);
  oracle::Method lr;
  lr.inv_freq = [plain](std::int64_t length) {
    const std::vector<double> factors =
        length > 16 ? std::vector<double>{1, 2, 4, 8} : std::vector<double>{1, 1.5, 2, 3};
    auto f = plain;
    for (std::size_t i = 0; i < f.size(); ++i) f[i] /= factors[i];
    return f;
  };
  lr.magnitude = std::sqrt(1 + std::log(4.0) / std::log(16.0));  // HF's LongRoPE attention factor
  lr.keys = oracle::Method::Keys::PerQuery;
  expect_rows_match_the_oracle(result, o, [&](const std::string&, std::int64_t) { return lr; });

  // The cache through the switch: one re-rotation, at the first token past 16.
  ropekit::Spec spec = bundled().rope.layer().spec;
  spec.scaling = ropekit::scaling::LongRope{{1, 1.5, 2, 3}, {1, 2, 4, 8}, 16, 4.0, std::nullopt};
  ropekit::KvCache cache(ropekit::Rope(spec, ropekit::AngleMode::Accurate, 1), {.capacity = 32, .kv_heads = 1});
  std::vector<float> k(8, 0.5f), v(8, 0.25f);
  int rerotations = 0;
  std::optional<ropekit::Rope> previous;
  for (std::int64_t t = 0; t < 24; ++t) {
    ropekit::Rope now(spec, ropekit::AngleMode::Accurate, t + 1);
    if (previous) rerotations += cache.rerotate(*previous, now) ? 1 : 0;
    const std::vector<std::int64_t> at{t};
    cache.append(now, ropekit::bshd(k.data(), ropekit::DType::F32, 1, 1, 1, 8),
                 ropekit::bshd(v.data(), ropekit::DType::F32, 1, 1, 1, 8), ropekit::positions(at));
    if (t == 15) {
      EXPECT_EQ(rerotations, 0) << "short factors up to length 16";
    }
    if (t == 16) {
      EXPECT_EQ(rerotations, 1) << "the switch at length 17";
    }
    previous.emplace(std::move(now));
  }
  EXPECT_EQ(rerotations, 1);
}
