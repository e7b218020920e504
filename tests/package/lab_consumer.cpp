// An outside program that runs a model: find_package(ropekit COMPONENTS lab) and ropekit::lab alone (it brings the
// core, config and engine below it). The repository's TinyStories 260K model (its path passed in by the build),
// greedy continuation of BOS: run.c's first tokens on this model.
#include <ropekit/model.hpp>
#include <ropekit/rope.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const ropekit::LlamaModel model = ropekit::load_model_file(argv[1]);
  const ropekit::Rope rope(model.rope_layer().spec);
  ropekit::LlamaRunner runner(model, {.capacity = 16, .threads = 1});
  const int vocab = model.config.vocab_size;
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  int token = 1;  // BOS
  int argmax = 0;
  for (std::int64_t p = 0; p < 4; ++p) {
    const std::vector<int> tokens = {token};
    const std::vector<std::int64_t> positions = {p};
    runner.forward(rope, tokens, positions, logits);
    argmax = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::printf("%d ", argmax);
    token = argmax;
  }
  std::printf("\nropekit::lab: %d layers, vocab %d, %lld tokens cached\n", model.config.n_layers, vocab,
              static_cast<long long>(runner.size()));
  if (runner.size() != 4 || argmax < 0 || argmax >= vocab) return 1;
  std::printf("ok\n");
  return 0;
}
