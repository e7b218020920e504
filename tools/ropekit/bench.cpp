// `ropekit bench [--json] [--filter TEXT]... [--target NAME] [--quick]`: RoPE throughput as a fraction
// of this machine's bandwidth, measured in the same run, over the rotation perf cases of the case
// table (bench/lib/cases.hpp; ceilings: bench/lib/ceilings.hpp).
#include <fmt/ostream.h>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "lib/ceilings.hpp"
#include "ropekit/cpu.hpp"

namespace ropekit::cli {

namespace {

struct BenchOptions {
  bool json = false;
  bool quick = false;
  std::vector<std::string> filters;
  std::string target;
};

// Restores the best SIMD target however the run ends.
struct TargetScope {
  explicit TargetScope(const std::string& name) { set_simd_target(name); }
  ~TargetScope() { set_simd_target(""); }
};

}  // namespace

void add_bench(CLI::App& app, Streams io) {
  auto options = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand(
      "bench", "measure RoPE throughput against this machine's in-place streaming and memcpy bandwidth");
  cmd->add_flag("--json", options->json, "one JSON object per case: name, gbps, fraction, ceiling, ...");
  cmd->add_option("--filter", options->filters,
                  "run only cases whose name contains every given text (e.g. --filter prefill --filter fp32)");
  cmd->add_option("--target", options->target, "run on this SIMD target (ropekit::simd_targets(); default: the best)");
  cmd->add_flag("--quick", options->quick, "3 short rounds per case instead of 7 (noisier)");
  cmd->callback([options, io] {
    std::vector<cases::Case> selected;
    for (const cases::Case& c : cases::perf_cases()) {
      if (c.op == cases::Op::Rotate && cases::matches(c, options->filters)) selected.push_back(c);
    }
    if (selected.empty()) throw Error("--filter matches no case (ropekit bench lists them all without a filter)");
    const TargetScope target(options->target);
    const int rounds = options->quick ? 3 : 7;
    const double batch_seconds = options->quick ? 0.01 : 0.02;
    if (!options->json) {
      fmt::print(io.out, "SIMD target {}; ceilings measured in this run, interleaved with each case\n", simd_target());
      fmt::print(io.out, "{:<72} {:>8} {:>9} {:>8} {:>7}  {}\n", "case", "GB/s", "ceiling", "fraction", "target",
                 "ceiling kind");
    }
    int missed = 0;
    for (const cases::Case& c : selected) {
      const bench::Result r = bench::measure(c, rounds, batch_seconds);
      if (!r.meets_target()) ++missed;
      const std::string ceiling = bench::ceiling_name(bench::ceiling_of(c));
      if (options->json) {
        const nlohmann::json j = {{"name", c.name()},
                                  {"gbps", r.gbps},
                                  {"fraction", r.fraction()},
                                  {"ceiling", r.ceiling_gbps},
                                  {"ceiling_kind", ceiling},
                                  {"target_fraction", bench::target_of(c)},
                                  {"meets_target", r.meets_target()},
                                  {"bytes", c.bytes()},
                                  {"threads", c.threads},
                                  {"simd_target", simd_target()}};
        fmt::print(io.out, "{}\n", j.dump());
      } else {
        fmt::print(io.out, "{:<72} {:>8.1f} {:>9.1f} {:>8.3f} {:>7.2f}  {}{}\n", c.name(), r.gbps, r.ceiling_gbps,
                   r.fraction(), bench::target_of(c), ceiling, r.meets_target() ? "" : "  (below target)");
      }
    }
    if (!options->json) fmt::print(io.out, "{} of {} cases below target\n", missed, selected.size());
  });
}

}  // namespace ropekit::cli
