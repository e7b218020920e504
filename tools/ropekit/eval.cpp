// `ropekit eval`: the long-context lab — perplexity by target position for context-extension methods
// side by side on a real model (ropekit/lab.hpp; the protocol is pinned in docs/lab.md).
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "lab_charts.hpp"
#include "model_io.hpp"
#include "plot.hpp"
#include "progress.hpp"
#include "ropekit/analysis.hpp"
#include "ropekit/error.hpp"
#include "ropekit/lab.hpp"

namespace ropekit::cli {
namespace {

struct EvalCliOptions {
  std::string model, tokens, text, tokenizer, methods, csv, json, svg, plans, attention_csv, attention_svg;
  bool stories = false;
  bool no_mmap = false;
  std::optional<std::int64_t> window_size, windows, trained_length;
  std::vector<std::int64_t> lengths, buckets;  // empty: the protocol's multiples of L0
  int threads = 0;
};

void print_table(std::ostream& out, const EvalResult& result, const std::vector<EvalMethod>& methods,
                 const std::vector<std::int64_t>& lengths) {
  // One block per N: methods down, position buckets across (PPL), and the token count per bucket.
  for (std::int64_t n : lengths) {
    std::vector<std::pair<std::int64_t, std::int64_t>> buckets;
    std::map<std::string, std::map<std::int64_t, const EvalRow*>> by_method;
    for (const EvalRow& row : result.rows) {
      if (row.n != n) continue;
      by_method[row.method][row.bucket_lo] = &row;
      std::pair<std::int64_t, std::int64_t> b{row.bucket_lo, row.bucket_hi};
      if (std::find(buckets.begin(), buckets.end(), b) == buckets.end()) buckets.push_back(b);
    }
    std::sort(buckets.begin(), buckets.end());
    const double s = std::max(1.0, double(n) / double(result.trained_length));
    fmt::print(out, "\nN = {} (s = {:g}): PPL by target position\n", n, s);
    // The method column fits the longest name (parameterized methods: "self_extend:W=256,G=16,logn=1").
    std::size_t width = 16;
    for (const EvalMethod& m : methods) width = std::max(width, m.name.size() + 2);
    fmt::print(out, "{:<{}}", "method", width);
    for (auto [lo, hi] : buckets) fmt::print(out, "{:>12}", fmt::format("{}-{}", lo, std::min(hi, n)));
    fmt::print(out, "\n");
    for (const EvalMethod& m : methods) {
      fmt::print(out, "{:<{}}", m.name, width);
      for (auto [lo, hi] : buckets) {
        const auto it = by_method[m.name].find(lo);
        if (it == by_method[m.name].end()) {
          fmt::print(out, "{:>12}", "-");
        } else {
          fmt::print(out, "{:>12.3f}", it->second->ppl);
        }
      }
      fmt::print(out, "\n");
    }
    fmt::print(out, "{:<{}}", "targets", width);
    const auto& any = by_method[methods.front().name];
    for (auto [lo, hi] : buckets) {
      const auto it = any.find(lo);
      fmt::print(out, "{:>12}", it == any.end() ? std::string("-") : fmt::format("{}", it->second->tokens));
    }
    fmt::print(out, "\n");
  }
}

void run_eval(const EvalCliOptions& o, Streams io) {
  require_plots(o.svg);
  require_plots(o.attention_svg);
  const LlamaModel model = load_model_file(o.model, {.map = !o.no_mmap});
  std::vector<int> tokens;
  if (!o.tokens.empty()) {
    tokens = read_tokens(o.tokens);
  } else {
    const Tokenizer tokenizer = load_tokenizer_for(model, o.model, o.tokenizer);
    const std::string text = read_text(o.text, "--text");
    tokens = o.stories ? encode_stories(tokenizer, text) : tokenizer.encode(text, /*bos=*/true);
  }
  EvalOptions options;
  options.window_size = o.window_size;
  options.windows = o.windows;
  options.lengths = o.lengths;
  options.buckets = o.buckets;
  options.trained_length = o.trained_length;
  options.threads = o.threads;
  options.attention_stats = !o.attention_csv.empty() || !o.attention_svg.empty();
  if (!o.methods.empty()) options.methods = parse_methods(o.methods);
  options = effective_options(options, model.config.seq_len);
  auto progress = std::make_shared<Progress>(io.err, "eval");
  options.progress = [progress](std::int64_t done, std::int64_t total, const std::string& what) {
    (*progress)(done, total, what);
  };
  const EvalResult result = evaluate(model, tokens, options);

  const std::int64_t l0 = result.trained_length;
  fmt::print(io.out, "ropekit eval: {} — {} tokens, {} windows of {} (starts {}), trained length L0 = {}\n",
             model.source, tokens.size(), result.window_starts.size(), result.window_size,
             fmt::join(result.window_starts, ","), l0);
  // The protocol's lengths, each a multiple of L0 unless given (docs/lab.md).
  fmt::print(io.out,
             "protocol: windows {} tokens ({}·L0), N = {}, buckets {}; swa window {}, rerope w {}, self_extend W {} "
             "G 8, dca chunk {} local {}, logn L {} (defaults; NAME:key=value overrides)\n",
             result.window_size, double(result.window_size) / double(l0), fmt::join(options.lengths, ","),
             fmt::join(options.buckets, ","), l0, std::max<std::int64_t>(1, l0 / 2), std::max<std::int64_t>(8, l0 / 4),
             l0, l0 / 32, l0);
  print_table(io.out, result, options.methods, options.lengths);
  fmt::print(io.out, "\n{} model positions in {:.2f} s ({:.0f} tokens/s)\n", result.tokens_read, result.seconds,
             double(result.tokens_read) / result.seconds);
  std::vector<std::string> per_method;
  for (std::size_t m = 0; m < options.methods.size(); ++m) {
    per_method.push_back(fmt::format("{} {:.1f}", options.methods[m].name, result.method_seconds[m]));
  }
  fmt::print(io.out, "seconds per method: {}\n", fmt::join(per_method, ", "));

  if (!o.csv.empty()) {
    std::ofstream csv(o.csv);
    if (!csv) throw Error(fmt::format("--csv {}: cannot write this file", o.csv));
    csv << "method,N,scale,bucket_lo,bucket_hi,tokens,mean_nll,ppl\n";
    for (const EvalRow& r : result.rows) {
      fmt::print(csv, "{},{},{},{},{},{},{:.9g},{:.9g}\n", csv_field(r.method), r.n, r.scale, r.bucket_lo, r.bucket_hi,
                 r.tokens, r.mean_nll, r.ppl);
    }
  }
  if (!o.attention_csv.empty()) {
    std::ofstream out(o.attention_csv);
    if (!out) throw Error(fmt::format("--attention-stats {}: cannot write this file", o.attention_csv));
    out << "method,N,layer,query_lo,query_hi,samples,entropy,entropy_ratio,own_bos,earlier_stories";
    const auto& edges = result.distance_edges;
    for (std::size_t d = 0; d < edges.size(); ++d) {
      if (d + 1 < edges.size()) {
        fmt::print(out, ",mass_{}_{}", edges[d], edges[d + 1]);
      } else {
        fmt::print(out, ",mass_{}_", edges[d]);
      }
    }
    out << "\n";
    for (const AttentionStatsRow& r : result.attention) {
      fmt::print(out, "{},{},{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g}", csv_field(r.method), r.n, r.layer, r.query_lo,
                 r.query_hi, r.samples, r.entropy, r.entropy_ratio, r.own_bos, r.earlier_stories);
      for (double m : r.mass) fmt::print(out, ",{:.6g}", m);
      out << "\n";
    }
  }
  if (!o.attention_svg.empty()) {
    // One panel per method: the mass on keys at each distance bucket (x: the bucket's upper edge), one curve per
    // bucket of query targets (the legend), every layer and head together.
    const std::int64_t n = *std::max_element(options.lengths.begin(), options.lengths.end());
    const auto& edges = result.distance_edges;
    std::vector<Chart> panels;
    for (const EvalMethod& m : options.methods) {
      Chart chart{
          fmt::format("{}, N = {}, s = {:g}: mass by key distance", m.name, n, std::max(1.0, double(n) / double(l0))),
          "key distance i − j (its bucket's upper edge)",
          "attention mass",
          true,
          true,
          {},
          {{double(l0), fmt::format("L0 = {}", l0)}},
          6};
      for (const AttentionStatsRow& r : result.attention) {
        if (r.method != m.name || r.layer != -1) continue;
        Series series{fmt::format("{}–{}", r.query_lo, r.query_hi), {}, {}};
        for (std::size_t d = 0; d < edges.size(); ++d) {
          const std::int64_t upper = d + 1 < edges.size() ? edges[d + 1] : n;
          if (edges[d] >= r.query_hi) break;  // no query of the bucket sees that far
          series.x.push_back(double(upper));
          series.y.push_back(r.mass[d]);
        }
        chart.series.push_back(std::move(series));
      }
      panels.push_back(std::move(chart));
    }
    write_svg(panels, 2, o.attention_svg);
  }
  if (!o.plans.empty()) {
    std::ofstream out(o.plans);
    if (!out) throw Error(fmt::format("--plans {}: cannot write this file", o.plans));
    // kept: where the pair's frequency sits between interpolated by 1/s (0) and kept (1), as YaRN's blend weight
    // (1/divisor = kept + (1 − kept)/s); empty at s = 1.
    out << "method,N,scale,pair,inv_freq,wavelength,turns_L0,divisor,band,kept\n";
    for (const EvalPlan& p : result.plans) {
      for (const PairBand& b : pair_bands(p.spec, p.plan, result.trained_length)) {
        const std::string kept =
            p.scale > 1 ? fmt::format("{:.6g}", (1 / b.divisor - 1 / p.scale) / (1 - 1 / p.scale)) : std::string();
        fmt::print(out, "{},{},{},{},{:.9g},{:.9g},{:.9g},{:.9g},{},{}\n", csv_field(p.method), p.n, p.scale, b.pair,
                   b.inv_freq, b.wavelength, b.turns, b.divisor, to_string(b.band), kept);
      }
    }
  }
  if (!o.json.empty()) {
    nlohmann::json j;
    j["model"] = model.source;
    j["tokens"] = tokens.size();
    j["window_size"] = result.window_size;
    j["window_starts"] = result.window_starts;
    j["trained_length"] = result.trained_length;
    j["seconds"] = result.seconds;
    j["method_seconds"] = result.method_seconds;
    j["methods"] = nlohmann::json::array();
    for (const EvalMethod& m : options.methods) j["methods"].push_back({{"name", m.name}, {"fragment", m.fragment}});
    j["rows"] = nlohmann::json::array();
    for (const EvalRow& r : result.rows) {
      j["rows"].push_back({{"method", r.method},
                           {"N", r.n},
                           {"scale", r.scale},
                           {"bucket_lo", r.bucket_lo},
                           {"bucket_hi", r.bucket_hi},
                           {"tokens", r.tokens},
                           {"mean_nll", r.mean_nll},
                           {"ppl", r.ppl}});
    }
    std::ofstream json(o.json);
    if (!json) throw Error(fmt::format("--json {}: cannot write this file", o.json));
    json << j.dump(2) << "\n";
  }
  if (!o.svg.empty()) {
    std::vector<std::string> names;
    for (const EvalMethod& m : options.methods) names.push_back(m.name);
    write_svg(eval_chart(result.rows, names, l0, std::filesystem::path(model.source).filename().string()), o.svg);
  }
}

}  // namespace

void add_eval(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand("eval",
                                 "the long-context lab: perplexity by target position for context-extension methods "
                                 "side by side (docs/lab.md)");
  auto o = std::make_shared<EvalCliOptions>();
  cmd->add_option("--model", o->model,
                  "llama2.c checkpoint, GGUF (llama architecture) or Hugging Face model directory (llama, mistral, "
                  "qwen2, qwen3, "
                  "smollm3, phi3, gemma2, gemma3_text)")
      ->required();
  auto* input = cmd->add_option_group("input", "the tokens (exactly one)");
  input->add_option("--tokens", o->tokens, "int32 token ids (ropekit tokenize)");
  input->add_option("--text", o->text, "a UTF-8 text file, tokenized with --tokenizer");
  input->require_option(1);
  cmd->add_option("--tokenizer", o->tokenizer, "with --text: llama2.c tokenizer.bin (GGUF: the model's own)");
  cmd->add_flag("--stories", o->stories, "with --text: one BOS-led sequence per <|endoftext|>-separated story");
  cmd->add_option("--window-size", o->window_size, "tokens per window (default 8·L0)")
      ->check(in_range(std::int64_t{2}, std::int64_t{1} << 24));
  cmd->add_option("--windows", o->windows, "number of windows (default: as many as fit)")
      ->check(in_range(std::int64_t{1}, std::int64_t{1} << 24));
  cmd->add_option("--lengths", o->lengths, "context lengths N (default L0/2, L0, 2·L0, 4·L0, 8·L0)")->delimiter(',');
  cmd->add_option("--buckets", o->buckets, "target-position bucket edges (default 0, L0/2, L0, 2·L0, 4·L0, 8·L0)")
      ->delimiter(',');
  cmd->add_option("--methods", o->methods,
                  "comma-separated methods (default: all built-ins: orig, pi, ntk, yarn, yarn_notemp, dyn_ntk, "
                  "dyn_ntk_stale, llama3, swa, restart) and NAME=JSON rope_scaling fragments (\"factor\": \"s\" is "
                  "the scale)");
  cmd->add_option("--trained-length", o->trained_length, "L0 (default: the model's seq_len / context_length)")
      ->check(in_range(std::int64_t{1}, kPositionLimit - 1));
  cmd->add_option("--threads", o->threads, "threads (default: ropekit's default)")->check(in_range(1, 1024));
  cmd->add_option("--csv", o->csv, "write method,N,scale,bucket_lo,bucket_hi,tokens,mean_nll,ppl");
  cmd->add_option("--json", o->json, "write the result as JSON");
  cmd->add_option("--attention-stats", o->attention_csv,
                  "the attention probe at the largest N: per method, layer (-1: all) and bucket of query targets, the "
                  "attention's entropy, its mass on the own story's BOS and on earlier stories, and its mass by key "
                  "distance bucket (CSV; docs/lab.md)");
  cmd->add_option("--attention-svg", o->attention_svg,
                  "plot the probe's mass by key distance, one panel per method (PLplot)");
  cmd->add_option("--plans", o->plans,
                  "write each method's plan pair by pair at each N (method,N,scale,pair,inv_freq,wavelength,turns_L0,"
                  "divisor,band,kept): what it does to every frequency");
  cmd->add_option("--svg", o->svg, "plot PPL against position at the largest N, one curve per method (PLplot)");
  cmd->add_flag("--no-mmap", o->no_mmap,
                "read a GGUF file into memory instead of mapping it (llama.cpp's --no-mmap): the file may then change "
                "while the model runs");
  cmd->callback([o, io] { run_eval(*o, io); });
}

}  // namespace ropekit::cli
