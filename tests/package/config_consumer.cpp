// An outside program that reads model configs: find_package(ropekit COMPONENTS config) and ropekit::config alone
// (with the core below it; no engine, no lab, no OpenBLAS). A BLOOM config (ALiBi: its slopes are computed while
// reading) and a Llama 3.1 preset.
#include <ropekit/config.hpp>

#include <cmath>
#include <cstdio>

int main() {
  const ropekit::ModelPositions bloom = ropekit::read_config(
      R"({"model_type": "bloom", "n_head": 8, "hidden_size": 512, "n_layer": 2})", {}, "bloom.json");
  const auto& slopes = bloom.at_layer(0).alibi_slopes;
  const ropekit::ModelPositions llama = ropekit::read_preset("llama-3.1-8b");
  std::printf("ropekit::config: bloom %zu slopes, first %.6f; llama-3.1-8b head_dim %d\n", slopes.size(),
              slopes.empty() ? 0.0 : slopes[0], llama.layer().spec.head_dim);
  // 8 heads: slope_h = 2^-(h + 1).
  if (slopes.size() != 8 || slopes[0] != 0.5 || slopes[7] != std::ldexp(1.0, -8)) return 1;
  if (llama.layer().spec.head_dim != 128) return 1;
  std::printf("ok\n");
  return 0;
}
