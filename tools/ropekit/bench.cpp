// `ropekit bench [--json] [--filter TEXT] [--quick]`: RoPE throughput as a fraction of this
// machine's bandwidth, measured in the same run (bench/bandwidth.hpp describes cases and ceilings).
#include <fmt/ostream.h>

#include <nlohmann/json.hpp>

#include "lib/bandwidth.hpp"
#include "cli.hpp"
#include "ropekit/cpu.hpp"

namespace ropekit::cli {

namespace {

struct BenchOptions {
  bool json = false;
  bool quick = false;
  std::vector<std::string> filters;
};

bool selected(const std::string& name, const std::vector<std::string>& filters) {
  for (const std::string& f : filters) {
    if (name.find(f) == std::string::npos) return false;
  }
  return true;
}

}  // namespace

void add_bench(CLI::App& app, Streams io) {
  auto options = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand(
      "bench", "measure RoPE throughput against this machine's in-place streaming and memcpy bandwidth");
  cmd->add_flag("--json", options->json, "one JSON object per case: name, gbps, fraction, ceiling, ...");
  cmd->add_option("--filter", options->filters,
                  "run only cases whose name contains every given text (e.g. --filter prefill --filter fp32)");
  cmd->add_flag("--quick", options->quick, "3 short rounds per case instead of 7 (noisier)");
  cmd->callback([options, io] {
    std::vector<bench::Case> cases;
    for (const bench::Case& c : bench::all_cases()) {
      if (selected(c.name(), options->filters)) cases.push_back(c);
    }
    if (cases.empty()) throw Error("--filter matches no case (ropekit bench lists them all without a filter)");
    const int rounds = options->quick ? 3 : 7;
    const double batch_seconds = options->quick ? 0.01 : 0.02;
    if (!options->json) {
      fmt::print(io.out, "SIMD target {}; ceilings measured in this run, interleaved with each case\n",
                 simd_target());
      fmt::print(io.out, "{:<58} {:>8} {:>9} {:>8} {:>7}  {}\n", "case", "GB/s", "ceiling", "fraction",
                 "target", "ceiling kind");
    }
    int missed = 0;
    for (const bench::Case& c : cases) {
      const bench::Result r = bench::measure(c, rounds, batch_seconds);
      if (!r.meets_target()) ++missed;
      if (options->json) {
        const nlohmann::json j = {{"name", c.name()},
                                  {"gbps", r.gbps},
                                  {"fraction", r.fraction()},
                                  {"ceiling", r.ceiling_gbps},
                                  {"ceiling_kind", bench::ceiling_name(c.ceiling())},
                                  {"target_fraction", c.target()},
                                  {"meets_target", r.meets_target()},
                                  {"bytes", c.bytes()},
                                  {"threads", c.threads},
                                  {"simd_target", simd_target()}};
        fmt::print(io.out, "{}\n", j.dump());
      } else {
        fmt::print(io.out, "{:<58} {:>8.1f} {:>9.1f} {:>8.3f} {:>7.2f}  {}{}\n", c.name(), r.gbps,
                   r.ceiling_gbps, r.fraction(), c.target(), bench::ceiling_name(c.ceiling()),
                   r.meets_target() ? "" : "  (below target)");
      }
    }
    if (!options->json) fmt::print(io.out, "{} of {} cases below target\n", missed, cases.size());
  });
}

}  // namespace ropekit::cli
