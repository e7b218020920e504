// runner_bench — the model runner's speed on a checkpoint, as llama.cpp's llama-bench measures its own: prefill
// ("pp": P tokens in one forward from an empty cache, the last token's logits) and decode ("tg": G greedy steps of one
// token each, from an empty cache), tokens per second, median of R runs, and the process's peak resident memory
// against the file's size. Token ids are synthetic (i · 7919 mod vocab, after BOS), as llama-bench's are: speed does
// not depend on them.
//
//   runner_bench MODEL [THREADS=2] [P=512] [G=128] [R=3] [INT8=0]
// INT8=1: decode with RunnerOptions::int8_activations (8-bit activations, integer dot products, as llama.cpp).
// Prints one line: model, weights' encoding, pp tokens/s, tg tokens/s, peak RSS MiB, file MiB, RSS / file.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ropekit/model.hpp"

int main(int argc, char** argv) try {
  if (argc < 2) {
    fmt::print(stderr, "usage: runner_bench MODEL [THREADS=2] [P=512] [G=128] [R=3] [INT8=0]\n");
    return 2;
  }
  const std::filesystem::path path = argv[1];
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int prompt = argc > 3 ? std::atoi(argv[3]) : 512;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 128;
  const int runs = argc > 5 ? std::atoi(argv[5]) : 3;
  const bool int8 = argc > 6 && std::atoi(argv[6]) != 0;
  const ropekit::LlamaModel model = ropekit::load_model_file(path);
  const int vocab = model.config.vocab_size;
  const ropekit::Rope rope(model.rope_layer().spec);
  std::vector<int> tokens(std::size_t(prompt + steps));
  tokens[0] = model.config.bos_id;
  for (std::size_t i = 1; i < tokens.size(); ++i) tokens[i] = int(i * 7919 % std::size_t(vocab));
  std::vector<std::int64_t> positions(tokens.size());
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = std::int64_t(i);
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  using Clock = std::chrono::steady_clock;
  std::vector<double> pp, tg;
  for (int r = 0; r < runs; ++r) {
    {
      ropekit::LlamaRunner runner(model, {.capacity = prompt, .threads = threads, .int8_activations = int8});
      const auto t0 = Clock::now();
      runner.forward(rope, std::span(tokens.data(), std::size_t(prompt)),
                     std::span(positions.data(), std::size_t(prompt)), logits);
      pp.push_back(prompt / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    ropekit::LlamaRunner runner(model, {.capacity = steps, .threads = threads, .int8_activations = int8});
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      const auto at = std::size_t(s);
      runner.forward(rope, std::span(&tokens[at], 1), std::span(&positions[at], 1), logits);
      tokens[at + 1] = int(std::max_element(logits.begin(), logits.end()) - logits.begin());  // greedy
    }
    tg.push_back(steps / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(pp.begin(), pp.end());
  std::sort(tg.begin(), tg.end());
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double rss = double(usage.ru_maxrss) / 1024.0, file = double(std::filesystem::file_size(path)) / (1 << 20);
  // The encodings of the matrices, most common first (a Q4_K_M file mixes several).
  std::map<std::string_view, int> count;
  const auto note = [&](const ropekit::WeightMatrix& w) {
    if (!w.empty()) ++count[to_string(w.encoding)];
  };
  note(model.token_embedding);
  note(model.classifier);
  for (const auto& l : model.layers) {
    for (const auto* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) note(*w);
  }
  std::vector<std::pair<int, std::string_view>> order;
  for (const auto& [name, n] : count) order.emplace_back(-n, name);
  std::sort(order.begin(), order.end());
  std::string encodings;
  for (const auto& [n, name] : order) {
    if (!encodings.empty()) encodings += '+';
    encodings += name;
  }
  if (int8) encodings += " (int8 activations)";
  fmt::print("{} | {} | pp{} {:.1f} tok/s | tg{} {:.1f} tok/s | peak RSS {:.0f} MiB | file {:.0f} MiB | {:.2f}\n",
             path.filename().string(), encodings, prompt, pp[pp.size() / 2], steps, tg[tg.size() / 2], rss, file,
             rss / file);
  return 0;
} catch (const std::exception& e) {
  fmt::print(stderr, "runner_bench: {}\n", e.what());
  return 2;
}
