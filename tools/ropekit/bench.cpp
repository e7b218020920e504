// `ropekit bench [--json] [--filter TEXT]... [--target NAME] [--quick]`: RoPE throughput as a fraction
// of this machine's bandwidth, measured in the same run, over the rotation perf cases of the case
// table (bench/lib/cases.hpp; ceilings: bench/lib/ceilings.hpp).
#include <fmt/ostream.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "cli.hpp"
#include "lib/ceilings.hpp"
#include "ropekit/cpu.hpp"

namespace ropekit::cli {

namespace {

struct BenchOptions {
  bool json = false;
  bool quick = false;
  bool summary = false;
  std::vector<std::string> filters;
  std::string target;
};

// The host as every table and JSON line names it (issue 42: the same kernels meet 150 of 252 targets on one vendor's
// cores and 83 on the other's).
std::string host_line() {
  const CpuIdentity& cpu = cpu_identity();
  return fmt::format("{} ({}, family {} model {})", cpu.name.empty() ? "unknown CPU" : cpu.name, cpu.vendor, cpu.family,
                     cpu.model);
}

// The group of a case in --summary: op kind, head width, angle source, in or out of place, storage type, thread
// count — e.g. "prefill 128 table inplace bf16 t1" (names: rotate/<kind>/<pairing><dim>/<dtype>/<layout>/<place>/
// <direction>/<angles>/<positions>/<shape>/t<threads>[/step]).
std::string group_of(const std::string& name) {
  std::vector<std::string> parts;
  for (std::size_t at = 0, next; at <= name.size(); at = next + 1) {
    next = std::min(name.find('/', at), name.size());
    parts.push_back(name.substr(at, next - at));
  }
  if (parts.size() < 11) return name;
  const std::string& pairing = parts[2];
  const std::string dim = pairing.substr(pairing.find_first_of("0123456789"));
  const bool step = parts.size() > 11 && parts[11] == "step";
  return fmt::format("{}{} {} {} {} {} {}", parts[1], step ? " step" : "", dim, parts[7], parts[5], parts[3],
                     parts[10]);
}

struct Group {
  int met = 0;
  std::vector<double> fractions;
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
  cmd->add_flag("--summary", options->summary,
                "after the cases, one line per group (kind, head width, angles, place, dtype, threads): cases meeting "
                "the target, and the min - median - max fraction of the ceiling");
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
      fmt::print(io.out, "{}; SIMD target {}; ceilings measured in this run, interleaved with each case\n", host_line(),
                 simd_target());
      fmt::print(io.out, "{:<72} {:>8} {:>9} {:>8} {:>7}  {}\n", "case", "GB/s", "ceiling", "fraction", "target",
                 "ceiling kind");
    }
    int missed = 0;
    std::map<std::string, Group> groups;
    const CpuIdentity& cpu = cpu_identity();
    const nlohmann::json cpu_json = {
        {"vendor", cpu.vendor}, {"family", cpu.family}, {"model", cpu.model}, {"name", cpu.name}};
    for (const cases::Case& c : selected) {
      const bench::Result r = bench::measure(c, rounds, batch_seconds);
      if (!r.meets_target()) ++missed;
      Group& g = groups[group_of(c.name())];
      g.met += r.meets_target() ? 1 : 0;
      g.fractions.push_back(r.fraction());
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
                                  {"simd_target", simd_target()},
                                  {"cpu", cpu_json}};
        fmt::print(io.out, "{}\n", j.dump());
      } else {
        fmt::print(io.out, "{:<72} {:>8.1f} {:>9.1f} {:>8.3f} {:>7.2f}  {}{}\n", c.name(), r.gbps, r.ceiling_gbps,
                   r.fraction(), bench::target_of(c), ceiling, r.meets_target() ? "" : "  (below target)");
      }
    }
    if (!options->json) fmt::print(io.out, "{} of {} cases below target\n", missed, selected.size());
    if (options->summary) {
      // Plain text after the JSON lines too: a line that does not parse as JSON is not a case.
      fmt::print(io.out, "\n{}; SIMD target {}; {} of {} cases meet their target\n", host_line(), simd_target(),
                 int(selected.size()) - missed, selected.size());
      fmt::print(io.out, "{:<44} {:>9}  {}\n", "group", "meeting", "fraction of the ceiling, min - median - max");
      for (auto& [name, g] : groups) {
        std::sort(g.fractions.begin(), g.fractions.end());
        const std::size_t n = g.fractions.size();
        const double median = n % 2 ? g.fractions[n / 2] : (g.fractions[n / 2 - 1] + g.fractions[n / 2]) / 2;
        fmt::print(io.out, "{:<44} {:>4}/{:<4}  {:.2f} - {:.2f} - {:.2f}\n", name, g.met, n, g.fractions.front(),
                   median, g.fractions.back());
      }
    }
  });
}

}  // namespace ropekit::cli
