// The lab's protocol (ropekit/lab.hpp, docs/lab.md): windows, lengths, methods, NLL by target position.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "lab/kernels.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"
#include "ropekit/lab.hpp"
#include "ropekit/tokenizer.hpp"

namespace ropekit {
namespace {

constexpr std::string_view kBuiltins[] = {"orig",          "pi",     "ntk", "yarn",   "yarn_notemp", "dyn_ntk",
                                          "dyn_ntk_stale", "llama3", "swa", "restart"};
// Methods that change attention rather than the frequencies; they take parameters after a colon
// (NAME:key=value,key=value) and are not in the default list.
constexpr std::string_view kRegimeMethods[] = {"rerope", "rerope_logn", "self_extend", "dca", "logn"};

// The method's base name: before the parameters.
std::string_view base_name(std::string_view name) { return name.substr(0, name.find(':')); }

bool is_builtin(std::string_view name) {
  const std::string_view base = base_name(name);
  if (base.size() != name.size()) {  // parameters: regime methods only
    return std::find(std::begin(kRegimeMethods), std::end(kRegimeMethods), base) != std::end(kRegimeMethods);
  }
  return std::find(std::begin(kBuiltins), std::end(kBuiltins), name) != std::end(kBuiltins) ||
         std::find(std::begin(kRegimeMethods), std::end(kRegimeMethods), name) != std::end(kRegimeMethods);
}

// How a method reads a window: what it does (MethodReading) and the rotation it does it with on this model.
struct MethodRun : MethodReading {
  Spec spec;
};

// The parameters a regime method takes, with their defaults (dca's local −1: chunk / 32).
// Lengths are multiples of the trained length L0 (the 260K model's w 256 and W 128 at L0 = 512).
std::map<std::string, std::int64_t> parameters_of(std::string_view base, std::int64_t l0) {
  if (base == "rerope" || base == "rerope_logn") {
    return {{"w", std::max<std::int64_t>(1, l0 / 2)}, {"logn", base == "rerope_logn" ? 1 : 0}};
  }
  if (base == "self_extend") return {{"W", std::max<std::int64_t>(8, l0 / 4)}, {"G", 8}, {"logn", 0}};
  if (base == "dca") return {{"chunk", l0}, {"local", -1}, {"logn", 0}};
  if (base == "logn") return {{"L", l0}};
  return {};
}

// NAME:key=value,... → the values by key; every key must be one of `allowed` (with its default).
std::map<std::string, std::int64_t> method_parameters(std::string_view name,
                                                      const std::map<std::string, std::int64_t>& allowed) {
  std::map<std::string, std::int64_t> values = allowed;
  const std::size_t colon = name.find(':');
  if (colon == std::string_view::npos) return values;
  std::string_view rest = name.substr(colon + 1);
  std::set<std::string> given;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const std::size_t eq = item.find('=');
    const std::string key(item.substr(0, eq));
    if (eq == std::string_view::npos || key.empty()) {
      throw Error(fmt::format("method {}: parameter \"{}\" is not key=value", name, item));
    }
    if (!allowed.contains(key)) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : allowed) keys.push_back(k);
      throw Error(
          fmt::format("method {}: unknown parameter {} (this method takes {})", name, key, fmt::join(keys, ", ")));
    }
    if (!given.insert(key).second) throw Error(fmt::format("method {}: parameter {} is given twice", name, key));
    const std::string text(item.substr(eq + 1));
    std::size_t used = 0;
    std::int64_t value = 0;
    try {
      value = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) {
      throw Error(fmt::format("method {}: parameter {} = \"{}\": not an integer", name, key, text));
    }
    values[key] = value;
  }
  return values;
}

void replace_scale(nlohmann::json& node, double s) {
  if (node.is_object()) {
    for (auto& [key, value] : node.items()) {
      if (key == "factor" && value.is_string() && value.get<std::string>() == "s") {
        value = s;
      } else {
        replace_scale(value, s);
      }
    }
  } else if (node.is_array()) {
    for (auto& value : node) replace_scale(value, s);
  }
}

// A fragment with every "factor": "s" replaced by the scale.
std::string substitute_scale(const EvalMethod& method, double s) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(method.fragment);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("method {}: invalid JSON {}: {}", method.name, method.fragment, e.what()));
  }
  replace_scale(j, s);
  return j.dump();
}

// The built-in methods that change the frequencies, each one scaling variant (its rope_type in rope/variants.cpp) at
// scale s over the trained length L0: read like a NAME=JSON method, so the variants' one description gives each its
// fields, defaults and checks. Null for the others.
nlohmann::json builtin_fragment(std::string_view n, double s, std::int64_t l0) {
  if (n == "pi") return {{"rope_type", "linear"}, {"factor", s}};
  if (n == "ntk") return {{"rope_type", "ntk"}, {"factor", s}};
  if (n == "yarn" || n == "yarn_notemp") {  // HF's beta_fast, beta_slow, truncate
    nlohmann::json j = {{"rope_type", "yarn"}, {"factor", s}, {"original_max_position_embeddings", l0}};
    if (n == "yarn_notemp") j["attention_factor"] = 1.0;  // else HF's default: 0.1·ln s + 1
    return j;
  }
  // max_position_embeddings: the config's, which spec_with_scaling makes L0.
  if (n == "dyn_ntk" || n == "dyn_ntk_stale") return {{"rope_type", "dynamic"}, {"factor", s}};
  if (n == "llama3") {
    return {{"rope_type", "llama3"},
            {"factor", s},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", l0}};
  }
  return nullptr;
}

// A regime method's parameters as its regimes' fields, checked by the regimes' own validator under the method's
// spellings (w, W, G, chunk, local).
void check_regimes(const MethodReading& run, std::string_view n, const RegimeNames& spelled) {
  const std::string prefix = fmt::format("method {}: ", n);
  RegimeNames names = spelled;
  names.prefix = prefix;
  validate_regimes(run.regimes, names);
}

}  // namespace

MethodReading describe_method(const EvalMethod& method, double s, std::int64_t l0) {
  MethodReading run;
  const std::string& n = method.name;
  const std::string_view base = base_name(n);
  if (!method.fragment.empty()) {
    run.rope_scaling = substitute_scale(method, s);
  } else if (const nlohmann::json fragment = builtin_fragment(n, s, l0); !fragment.is_null()) {
    run.rope_scaling = fragment.dump();
    if (n == "dyn_ntk") run.kind = MethodReading::Kind::Dynamic;
    if (n == "dyn_ntk_stale") run.kind = MethodReading::Kind::DynamicStale;
  } else if (n == "orig") {
  } else if (n == "swa") {
    run.window = l0;
  } else if (n == "restart") {
    run.kind = MethodReading::Kind::Restart;
  } else if (base == "rerope" || base == "rerope_logn") {
    const auto p = method_parameters(n, parameters_of(base, l0));
    run.regimes = regimes::ReRope{.window = p.at("w")};
    check_regimes(run, n, {.window = "w"});
    run.logn_length = p.at("logn") != 0 ? l0 : 0;
  } else if (base == "self_extend") {
    const auto p = method_parameters(n, parameters_of(base, l0));
    run.regimes = regimes::SelfExtend{.window = p.at("W"), .group = p.at("G")};
    check_regimes(run, n, {.window = "W", .group = "G"});
    run.logn_length = p.at("logn") != 0 ? l0 : 0;
  } else if (base == "dca") {
    const auto p = method_parameters(n, parameters_of(base, l0));
    const std::int64_t chunk = p.at("chunk"),
                       local = p.at("local") < 0 && n.find("local=") == std::string::npos ? chunk / 32 : p.at("local");
    run.regimes = regimes::DualChunk{.chunk_size = chunk, .local_size = local};
    check_regimes(run, n, {.chunk_size = "chunk", .local_size = "local"});
    run.logn_length = p.at("logn") != 0 ? l0 : 0;
  } else if (base == "logn") {
    const auto p = method_parameters(n, parameters_of(base, l0));
    if (p.at("L") < 2) throw Error(fmt::format("method {}: L = {}: must be >= 2", n, p.at("L")));
    run.logn_length = p.at("L");
  } else {
    throw Error(fmt::format("method {}: unknown", n));
  }
  return run;
}

void check_regimes_act(const std::vector<EvalMethod>& methods, std::int64_t l0, std::int64_t max_n) {
  for (const EvalMethod& m : methods) {
    const PositionRegimes r = describe_method(m, 1.0, l0).regimes;  // a regime's window does not depend on s
    const auto never = [&](std::string_view key, std::int64_t value) {
      if (value >= max_n) {
        throw Error(
            fmt::format("method {}: {} = {} is not below the largest length N = {}: the method would be orig "
                        "at every N",
                        m.name, key, value, max_n));
      }
    };
    if (const auto* rr = std::get_if<regimes::ReRope>(&r)) never("w", rr->window);
    if (const auto* se = std::get_if<regimes::SelfExtend>(&r)) never("W", se->window);
    if (const auto* dc = std::get_if<regimes::DualChunk>(&r)) never("chunk", dc->chunk_size);
  }
}

namespace {

MethodRun resolve(const EvalMethod& method, const LlamaModel& model, double s, std::int64_t l0) {
  MethodRun run{describe_method(method, s, l0), model.rope_layer().spec};
  if (!run.rope_scaling.empty()) {
    run.spec = spec_with_scaling(model, run.rope_scaling, fmt::format("method {}", method.name), l0);
    if (!method.fragment.empty() && depends_on_length(run.spec)) run.kind = MethodReading::Kind::Dynamic;
  }
  run.spec.validate();
  return run;
}

// Accumulates NLL per bucket of target position.
class Buckets {
 public:
  Buckets(const std::vector<std::int64_t>& edges, std::int64_t end) : edges_(edges), end_(end) {
    sums_.assign(edges.size(), 0.0);
    counts_.assign(edges.size(), 0);
  }
  void add(std::int64_t target, double nll) {
    const auto i = std::size_t(std::upper_bound(edges_.begin(), edges_.end(), target) - edges_.begin()) - 1;
    sums_[i] += nll;
    counts_[i] += 1;
  }
  void emit(const std::string& method, std::int64_t n, double scale, std::vector<EvalRow>& rows) const {
    for (std::size_t i = 0; i < edges_.size(); ++i) {
      if (counts_[i] == 0) continue;
      const double mean = sums_[i] / double(counts_[i]);
      const std::int64_t hi = i + 1 < edges_.size() ? edges_[i + 1] : std::max(end_, edges_[i] + 1);
      rows.push_back({method, n, scale, edges_[i], hi, counts_[i], mean, std::exp(mean)});
    }
  }

 private:
  std::vector<std::int64_t> edges_;
  std::int64_t end_;
  std::vector<double> sums_;
  std::vector<std::int64_t> counts_;
};

// −log softmax(row)[target] (lab/kernels.hpp: within 1e-5 nats).
double nll(std::span<const float> row, int target) { return lab::log_sum_exp(row) - double(row[std::size_t(target)]); }

// Tokens per forward call past L0 in the dynamic methods: each token has a plan of its own, the products
// run once per chunk.
constexpr std::int64_t kDynamicChunk = 64;

// The attention probe (EvalOptions::attention_stats): one window's queries and keys, every layer, as the runner
// projects them (ForwardOptions::on_qk), and each token's plan; after the window, every (query, head)'s attention
// distribution recomputed in float64 — the logit of query i and key j is
//   scale · logn(i) · m_q m_k Σ_pairs [(q_a k_a + q_b k_b) cos Δ + (q_a k_b − q_b k_a) sin Δ] + the unrotated lanes,
// Δ = P_q θ^q − P_k θ^k (⟨R(P_q θ^q) q, R(P_k θ^k) k⟩ for ropekit's rotation (a, b) → (a cos − b sin, a sin + b cos)),
// with each side's plan (the query's for both unless keys stay as appended), positions from the regimes — and
// summarised per layer and bucket of the query's target.
class AttentionProbe {
 public:
  AttentionProbe(const LlamaModel& model, std::vector<std::int64_t> target_edges, std::vector<std::int64_t> distance,
                 int threads)
      : model_(model), targets_(std::move(target_edges)), distance_(std::move(distance)), threads_(threads) {}

  // A new window of n tokens read with `spec`'s layout.
  void begin(std::int64_t n, const Spec& spec) {
    const LlamaConfig& c = model_.config;
    n_ = n;
    spec_ = spec;
    q_.assign(std::size_t(c.n_layers), std::vector<float>(std::size_t(n * c.q_dim())));
    k_.assign(std::size_t(c.n_layers), std::vector<float>(std::size_t(n * c.kv_dim())));
    plan_of_.assign(std::size_t(n), 0);
    plans_.clear();
  }
  // Tokens [first, first + count) of the window: their projections in one layer.
  void record(std::int64_t first, int layer, std::span<const float> q, std::span<const float> k) {
    std::copy(q.begin(), q.end(), q_[std::size_t(layer)].begin() + first * model_.config.q_dim());
    std::copy(k.begin(), k.end(), k_[std::size_t(layer)].begin() + first * model_.config.kv_dim());
  }
  // Tokens [first, last) read with `plan`.
  void set_plan(std::int64_t first, std::int64_t last, const Plan& plan) {
    plans_.push_back(plan);
    std::fill(plan_of_.begin() + first, plan_of_.begin() + last, plans_.size() - 1);
  }

  struct Reading {
    bool keys_as_appended = false;  // stale keys: each key keeps its own plan
    bool restart = false;           // positions restart at every BOS, earlier stories unseen
    std::int64_t window = 0;
    PositionRegimes regimes;
    std::int64_t logn_length = 0;
  };

  // Adds the window's statistics (tokens: the window's ids).
  void finish(const Reading& how, std::span<const int> tokens) {
    const LlamaConfig& c = model_.config;
    const int layers = c.n_layers, heads = c.n_heads, hd = c.head_dim(), group = c.n_heads / c.n_kv_heads;
    const int rotary = spec_.rotary_dim, pairs = rotary / 2;
    const bool half = spec_.pairing == Pairing::Half;
    std::vector<std::int64_t> story(std::size_t(n_), 0);  // the first token of each token's story
    for (std::int64_t t = 1; t < n_; ++t) {
      story[std::size_t(t)] = tokens[std::size_t(t)] == model_.config.bos_id ? t : story[std::size_t(t - 1)];
    }
    const auto position = [&](std::int64_t t) { return how.restart ? t - story[std::size_t(t)] : t; };
    const std::size_t buckets = targets_.size(), distances = distance_.size();
    if (sums_.empty())
      sums_.assign(std::size_t(layers) * buckets, Sums{0, 0, 0, 0, 0, 0, std::vector<double>(distances)});
    const bool regimes = how.regimes.index() != 0;
    std::vector<std::vector<Sums>> per_thread(std::size_t(std::max(1, threads_)));
#ifdef _OPENMP
#pragma omp parallel num_threads(threads_) if (threads_ > 1)
#endif
    {
#ifdef _OPENMP
      std::vector<Sums>& mine = per_thread[std::size_t(omp_get_thread_num())];
#else
      std::vector<Sums>& mine = per_thread[0];
#endif
      mine.assign(sums_.size(), Sums{0, 0, 0, 0, 0, 0, std::vector<double>(distances)});
      std::vector<double> cs, sn, logits, magnitude;
      std::vector<std::int64_t> keys;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 8)
#endif
      for (std::int64_t i = 0; i < n_ - 1; ++i) {  // query i predicts target i + 1
        const Plan& pq = plans_[plan_of_[std::size_t(i)]];
        const std::size_t bucket =
            std::size_t(std::upper_bound(targets_.begin(), targets_.end(), i + 1) - targets_.begin()) - 1;
        keys.clear();
        for (std::int64_t j = 0; j <= i; ++j) {
          if (how.restart && story[std::size_t(j)] != story[std::size_t(i)]) continue;
          if (how.window > 0 && i - j >= how.window) continue;
          keys.push_back(j);
        }
        const std::size_t nk = keys.size();
        cs.resize(nk * std::size_t(pairs));
        sn.resize(nk * std::size_t(pairs));
        magnitude.resize(nk);
        for (std::size_t a = 0; a < nk; ++a) {
          const std::int64_t j = keys[a];
          const Plan& pk = how.keys_as_appended ? plans_[plan_of_[std::size_t(j)]] : pq;
          std::int64_t at_q = position(i), at_k = position(j);
          if (regimes) {
            const int r = regime_of(how.regimes, i, j);
            at_q = regime_query_position(how.regimes, r, i);
            at_k = regime_key_position(how.regimes, r, j);
          }
          magnitude[a] = pq.cos_sin_scale * pk.cos_sin_scale;
          for (int p = 0; p < pairs; ++p) {
            const double delta =
                double(at_q) * pq.inv_freq[std::size_t(p)] - double(at_k) * pk.inv_freq[std::size_t(p)];
            cs[a * std::size_t(pairs) + std::size_t(p)] = std::cos(delta);
            sn[a * std::size_t(pairs) + std::size_t(p)] = std::sin(delta);
          }
        }
        const double logn = how.logn_length > 0 && i + 1 > how.logn_length
                                ? std::log(double(i + 1)) / std::log(double(how.logn_length))
                                : 1.0;
        const double scale = pq.softmax_scale_mult / std::sqrt(double(hd)) * logn;
        logits.resize(nk);
        for (int l = 0; l < layers; ++l) {
          Sums& into = mine[std::size_t(l) * buckets + bucket];
          // A NoPE layer (SmolLM3) rotates nothing and scales by 1/√d alone, whatever the method.
          const bool nope = model_.nope(l);
          const double layer_scale = nope ? logn / std::sqrt(double(hd)) : scale;
          for (int h = 0; h < heads; ++h) {
            const float* q = q_[std::size_t(l)].data() + std::size_t(i * c.q_dim() + h * hd);
            double max = -std::numeric_limits<double>::infinity();
            for (std::size_t a = 0; a < nk; ++a) {
              const float* k = k_[std::size_t(l)].data() + std::size_t(keys[a] * c.kv_dim() + (h / group) * hd);
              double rotated = 0, plain = 0;
              for (int p = 0; p < pairs; ++p) {
                const int ia = half ? p : 2 * p, ib = half ? p + pairs : 2 * p + 1;
                const double qa = q[ia], qb = q[ib], ka = k[ia], kb = k[ib];
                rotated += nope ? qa * ka + qb * kb
                                : (qa * ka + qb * kb) * cs[a * std::size_t(pairs) + std::size_t(p)] +
                                      (qa * kb - qb * ka) * sn[a * std::size_t(pairs) + std::size_t(p)];
              }
              for (int lane = rotary; lane < hd; ++lane) plain += double(q[lane]) * double(k[lane]);
              logits[a] = layer_scale * ((nope ? 1.0 : magnitude[a]) * rotated + plain);
              max = std::max(max, logits[a]);
            }
            double sum = 0;
            for (double& x : logits) sum += (x = std::exp(x - max));
            double entropy = 0;
            for (std::size_t a = 0; a < nk; ++a) {
              const double prob = logits[a] / sum;
              if (prob > 0) entropy -= prob * std::log(prob);
              const std::int64_t j = keys[a], d = i - j;
              into.mass[std::size_t(std::upper_bound(distance_.begin(), distance_.end(), d) - distance_.begin()) - 1] +=
                  prob;
              if (j == story[std::size_t(i)]) into.own_bos += prob;
              if (j < story[std::size_t(i)]) into.earlier += prob;
            }
            into.samples += 1;
            into.entropy += entropy;
            if (nk >= 2) {
              into.ratio += entropy / std::log(double(nk));
              into.ratio_samples += 1;
            }
          }
        }
      }
    }
    for (const auto& mine : per_thread) {
      for (std::size_t x = 0; x < mine.size(); ++x) sums_[x].add(mine[x]);
    }
  }

  // The rows for `method` (then cleared for the next method).
  void emit(const std::string& method, std::int64_t n, std::vector<AttentionStatsRow>& rows) {
    const std::size_t buckets = targets_.size(), layers = std::size_t(model_.config.n_layers);
    const auto row = [&](int layer, std::size_t b, const Sums& x) {
      if (x.samples == 0) return;
      AttentionStatsRow r{method,
                          n,
                          layer,
                          targets_[b],
                          b + 1 < buckets ? targets_[b + 1] : n,
                          x.samples,
                          x.entropy / double(x.samples),
                          x.ratio_samples > 0 ? x.ratio / double(x.ratio_samples) : 0.0,
                          x.own_bos / double(x.samples),
                          x.earlier / double(x.samples),
                          {}};
      for (double m : x.mass) r.mass.push_back(m / double(x.samples));
      rows.push_back(std::move(r));
    };
    for (std::size_t b = 0; b < buckets; ++b) {
      Sums all{0, 0, 0, 0, 0, 0, std::vector<double>(distance_.size())};
      for (std::size_t l = 0; l < layers; ++l) all.add(sums_[l * buckets + b]);
      row(-1, b, all);
    }
    for (std::size_t l = 0; l < layers; ++l) {
      for (std::size_t b = 0; b < buckets; ++b) row(int(l), b, sums_[l * buckets + b]);
    }
    sums_.clear();
  }

 private:
  struct Sums {
    std::int64_t samples, ratio_samples;
    double entropy, ratio, own_bos, earlier;
    std::vector<double> mass;
    void add(const Sums& o) {
      samples += o.samples;
      ratio_samples += o.ratio_samples;
      entropy += o.entropy;
      ratio += o.ratio;
      own_bos += o.own_bos;
      earlier += o.earlier;
      for (std::size_t d = 0; d < mass.size(); ++d) mass[d] += o.mass[d];
    }
  };
  const LlamaModel& model_;
  std::vector<std::int64_t> targets_, distance_;
  int threads_;
  std::int64_t n_ = 0;
  Spec spec_;
  std::vector<std::vector<float>> q_, k_;  // [layer][token · width]
  std::vector<std::size_t> plan_of_;       // index into plans_, per token
  std::vector<Plan> plans_;
  std::vector<Sums> sums_;  // [layer · target bucket], over windows
};

// Reads window tokens [0, n) with one method; adds the NLL of targets 1 … n−1.
class WindowReader {
 public:
  WindowReader(const LlamaModel& model, std::int64_t capacity, int threads)
      : model_(model),
        runner_(model, {.capacity = capacity, .threads = threads}),
        threads_(threads > 0 ? threads : default_threads()) {
    // Logit rows per forward call: the whole window for small vocabularies, bounded to 64 MiB (512 rows of a
    // 32000-token vocabulary: OpenBLAS packs every weight matrix once per call, 14% of a one-thread eval of
    // stories15M at 131 rows per call).
    chunk_ = std::max<std::int64_t>(1, (std::int64_t{1} << 24) / model.config.vocab_size);
  }

  // The NLL of every target of the window, added to `buckets` in order.
  void read(const MethodRun& run, std::span<const int> tokens, std::int64_t l0, Buckets& buckets,
            AttentionProbe* probe = nullptr) {
    const int vocab = model_.config.vocab_size;
    read(
        run, tokens, l0,
        [&](std::int64_t a, std::int64_t rows, std::span<const float> logits) {
          // The rows' NLLs on the runner's threads (a serial 4% of a one-thread eval), added in order.
          nlls_.resize(std::size_t(rows));
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads_) schedule(static) if (threads_ > 1 && rows > 1)
#endif
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::span<const float> row(logits.data() + r * vocab, std::size_t(vocab));
            nlls_[std::size_t(r)] = nll(row, tokens[std::size_t(a + r + 1)]);
          }
          for (std::int64_t r = 0; r < rows; ++r) buckets.add(a + r + 1, nlls_[std::size_t(r)]);
        },
        probe);
  }

  // What a read does with the float32 logits of window rows [first, first + rows), row r predicting token r + 1 (the
  // window's last row, which predicts nothing, left out).
  using RowSink = std::function<void(std::int64_t first, std::int64_t rows, std::span<const float> logits)>;

  void read(const MethodRun& run, std::span<const int> tokens, std::int64_t l0, const RowSink& sink,
            AttentionProbe* probe = nullptr) {
    const auto n = std::int64_t(tokens.size());
    const int vocab = model_.config.vocab_size;
    positions_.resize(std::size_t(n));
    std::iota(positions_.begin(), positions_.end(), std::int64_t{0});
    if (probe) probe->begin(n, run.spec);
    // Feeds tokens [first, last) (window indices) at the given positions; scores the targets they predict.
    auto feed = [&](const Rope& rope, std::int64_t first, std::int64_t last, const std::int64_t* pos,
                    const ForwardOptions& options) {
      ForwardOptions call = options;
      const Rope* before = &rope;  // with per-token plans: the plan the cached keys are under
      for (std::int64_t a = first; a < last; a += chunk_) {
        const std::int64_t b = std::min(last, a + chunk_);
        logits_.resize(std::size_t((b - a) * vocab));
        if (!options.token_ropes.empty())
          call.token_ropes = options.token_ropes.subspan(std::size_t(a - first), std::size_t(b - a));
        if (probe) {
          call.on_qk = [probe, a](int layer, std::span<const float> q, std::span<const float> k) {
            probe->record(a, layer, q, k);
          };
        }
        runner_.forward(*before, tokens.subspan(std::size_t(a), std::size_t(b - a)),
                        std::span<const std::int64_t>(pos + (a - first), std::size_t(b - a)), logits_, call);
        if (!options.token_ropes.empty()) before = options.token_ropes[std::size_t(b - first - 1)];
        const std::int64_t rows = std::min(b, n - 1) - a;
        if (rows > 0) sink(a, rows, std::span<const float>(logits_.data(), std::size_t(rows * vocab)));
      }
    };
    runner_.clear();
    switch (run.kind) {
      case MethodReading::Kind::Batched: {
        // The plan of the window's length, as one Hugging Face forward over the window takes it (LongRoPE's long
        // factors, a model's own dynamic NTK); a length-independent plan is the same either way.
        const Rope rope(run.spec, AngleMode::Accurate, n);
        if (probe) probe->set_plan(0, n, rope.plan());
        feed(rope, 0, n, positions_.data(),
             {.window = run.window, .regimes = run.regimes, .logn_length = run.logn_length});
        break;
      }
      case MethodReading::Kind::Restart: {
        std::int64_t start = 0;
        while (start < n) {
          std::int64_t end = start + 1;
          while (end < n && tokens[std::size_t(end)] != model_.config.bos_id) ++end;
          // Each story with the plan of its own length, as one Hugging Face forward over the story alone takes it
          // (LongRoPE's factors, a model's own dynamic NTK); a length-independent plan is the same either way.
          const Rope rope(run.spec, AngleMode::Accurate, end - start);
          if (probe) probe->set_plan(start, end, rope.plan());
          runner_.clear();
          feed(rope, start, end, positions_.data(), {});  // positions 0 … from the segment's start
          start = end;
        }
        break;
      }
      case MethodReading::Kind::Dynamic:
      case MethodReading::Kind::DynamicStale: {
        // Up to L0 tokens the plan is the model's (HF clamps the length at L0): read them at once.
        const bool stale = run.kind == MethodReading::Kind::DynamicStale;
        const std::int64_t prefix = std::min(n, l0);
        Rope previous(run.spec, AngleMode::Accurate, prefix);
        if (probe) probe->set_plan(0, prefix, previous.plan());
        feed(previous, 0, prefix, positions_.data(), {.stale_keys = stale});
        // Then each token with the plan of the length read so far (after reading token t, L = t + 1),
        // the cache re-rotated to it token by token (unless stale) — in chunks of kDynamicChunk tokens
        // whose matrix products run once (the weights streamed once per chunk, not per token).
        for (std::int64_t t = prefix; t < n; t += kDynamicChunk) {
          const std::int64_t end = std::min(n, t + kDynamicChunk);
          ropes_.clear();
          for (std::int64_t u = t; u < end; ++u) {
            ropes_.emplace_back(run.spec, AngleMode::Accurate, u + 1);
            if (probe) probe->set_plan(u, u + 1, ropes_.back().plan());
          }
          rope_ptrs_.clear();
          for (const Rope& r : ropes_) rope_ptrs_.push_back(&r);
          feed(previous, t, end, positions_.data() + t, {.stale_keys = stale, .token_ropes = rope_ptrs_});
          previous = std::move(ropes_.back());
        }
        break;
      }
    }
    if (probe) {
      probe->finish({.keys_as_appended = run.kind == MethodReading::Kind::DynamicStale,
                     .restart = run.kind == MethodReading::Kind::Restart,
                     .window = run.window,
                     .regimes = run.regimes,
                     .logn_length = run.logn_length},
                    tokens);
    }
  }

 private:
  const LlamaModel& model_;
  LlamaRunner runner_;
  int threads_;
  std::int64_t chunk_ = 1;
  std::vector<double> nlls_;
  std::vector<std::int64_t> positions_;
  std::vector<float> logits_;
  std::vector<Rope> ropes_;  // a dynamic chunk's plans
  std::vector<const Rope*> rope_ptrs_;
};

}  // namespace

std::vector<EvalMethod> builtin_methods() {
  std::vector<EvalMethod> out;
  for (std::string_view name : kBuiltins) out.push_back({std::string(name), ""});
  return out;
}

std::vector<EvalMethod> parse_methods(std::string_view list) {
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const char ch = list[i];
    if (in_string) {
      if (ch == '\\' && i + 1 < list.size()) {
        current += ch;
        current += list[++i];
        continue;
      }
      if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      ++depth;
    } else if (ch == '}' || ch == ']') {
      --depth;
    } else if (ch == ',' && depth == 0) {
      items.push_back(std::move(current));
      current.clear();
      continue;
    }
    current += ch;
  }
  items.push_back(std::move(current));
  // NAME:key=value,key=value — a piece "key=value" (no colon, not NAME=JSON) after a method with
  // parameters continues its parameter list.
  std::vector<std::string> merged;
  for (std::string& item : items) {
    const std::size_t eq = item.find('=');
    const bool continues = !merged.empty() && merged.back().find(':') != std::string::npos &&
                           item.find(':') == std::string::npos && eq != std::string::npos &&
                           item.find('{') == std::string::npos;
    if (continues) {
      merged.back() += "," + item;
    } else {
      merged.push_back(std::move(item));
    }
  }
  std::vector<EvalMethod> methods;
  std::set<std::string> seen;
  for (const std::string& item : merged) {
    if (item.find(':') != std::string::npos && item.find('{') == std::string::npos) {  // NAME:parameters
      if (!is_builtin(item)) {
        throw Error(fmt::format("methods: {}: only {} take parameters", item,
                                fmt::join(std::begin(kRegimeMethods), std::end(kRegimeMethods), ", ")));
      }
      method_parameters(item, parameters_of(base_name(item), 0));  // names and syntax; values when resolved
      if (!seen.insert(item).second) throw Error(fmt::format("methods: {} is given twice", item));
      methods.push_back({item, ""});
      continue;
    }
    const std::size_t eq = item.find('=');
    EvalMethod m{item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1)};
    if (m.name.empty()) throw Error(fmt::format("methods = {}: an empty method name", list));
    for (char ch : m.name) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' && ch != '.') {
        throw Error(fmt::format("methods: method name {}: use letters, digits, '_', '-' or '.'", m.name));
      }
    }
    if (eq == std::string::npos && !is_builtin(m.name)) {
      throw Error(fmt::format("methods: {} is not a built-in method ({}, {}) nor NAME=JSON", m.name,
                              fmt::join(std::begin(kBuiltins), std::end(kBuiltins), ", "),
                              fmt::join(std::begin(kRegimeMethods), std::end(kRegimeMethods), ", ")));
    }
    if (eq != std::string::npos && m.fragment.empty()) {
      throw Error(fmt::format("methods: {}= has an empty JSON fragment", m.name));
    }
    if (!seen.insert(m.name).second) throw Error(fmt::format("methods: {} is given twice", m.name));
    methods.push_back(std::move(m));
  }
  return methods;
}

std::vector<std::int64_t> eval_windows(std::span<const int> tokens, std::int64_t window_size,
                                       std::optional<std::int64_t> windows, int bos_id) {
  if (window_size < 2) throw Error(fmt::format("window-size = {}: must be at least 2", window_size));
  if (windows && *windows < 1) throw Error(fmt::format("windows = {}: must be positive", *windows));
  std::vector<std::int64_t> starts;
  const auto total = std::int64_t(tokens.size());
  std::int64_t start = 0;
  while (start + window_size <= total && (!windows || std::int64_t(starts.size()) < *windows)) {
    starts.push_back(start);
    start += window_size;
    while (start < total && tokens[std::size_t(start)] != bos_id) ++start;
  }
  if (starts.empty()) {
    throw Error(fmt::format("window-size = {}: larger than the {} tokens available", window_size, total));
  }
  if (windows && std::int64_t(starts.size()) < *windows) {
    throw Error(fmt::format("windows = {}: only {} windows of {} tokens fit in the {} tokens available", *windows,
                            starts.size(), window_size, total));
  }
  return starts;
}

EvalOptions effective_options(const EvalOptions& given, std::int64_t model_seq_len) {
  EvalOptions options = given;
  const std::int64_t l0 = options.trained_length.value_or(model_seq_len);
  if (l0 < 2 || l0 >= kPositionLimit / 8) {
    throw Error(
        fmt::format("trained-length = {}: must lie in [2, 2^44) (the protocol's lengths are multiples of it)", l0));
  }
  options.trained_length = l0;
  if (!options.window_size) options.window_size = 8 * l0;
  // L0/2 … 8·L0: inside the trained length, at it, and three doublings past it (the 260K model's table has
  // always read N = 256 at L0 = 512).
  const std::int64_t multiples[] = {l0 / 2, l0, 2 * l0, 4 * l0, 8 * l0};
  if (options.lengths.empty()) {
    for (std::int64_t n : multiples) {
      if (n >= 2) options.lengths.push_back(n);
    }
  }
  if (options.buckets.empty()) {
    options.buckets.push_back(0);
    for (std::int64_t b : multiples) {
      if (b > options.buckets.back()) options.buckets.push_back(b);
    }
  }
  return options;
}

void check_protocol(const EvalOptions& options) {
  const std::int64_t window_size = options.window_size.value_or(0);
  for (std::int64_t n : options.lengths) {
    if (n < 2 || n > window_size) {
      throw Error(fmt::format("lengths: N = {}: must lie in [2, window-size = {}]", n, window_size));
    }
  }
  if (options.buckets.empty() || options.buckets[0] != 0) throw Error("buckets: must start at 0");
  for (std::size_t i = 1; i < options.buckets.size(); ++i) {
    if (options.buckets[i] <= options.buckets[i - 1]) {
      throw Error(fmt::format("buckets: {} after {}: must increase", options.buckets[i], options.buckets[i - 1]));
    }
  }
  if (options.methods.empty()) throw Error("methods: none given");
}

EvalResult evaluate(const LlamaModel& model, std::span<const int> tokens, const EvalOptions& given) {
  const auto clock_start = std::chrono::steady_clock::now();
  const EvalOptions options = effective_options(given, model.config.seq_len);
  EvalResult result;
  result.trained_length = *options.trained_length;
  result.window_size = *options.window_size;
  const std::int64_t l0 = result.trained_length;
  const std::int64_t window_size = result.window_size;
  check_protocol(options);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= model.config.vocab_size) {
      throw Error(fmt::format("tokens[{}] = {}: outside the model's vocabulary [0, {})", i, tokens[i],
                              model.config.vocab_size));
    }
  }
  result.window_starts = eval_windows(tokens, window_size, options.windows, model.config.bos_id);
  // Resolve every method at every length first, so a bad fragment fails before any work.
  std::vector<std::vector<MethodRun>> runs;
  for (const EvalMethod& method : options.methods) {
    runs.emplace_back();
    for (std::int64_t n : options.lengths) {
      const double s = std::max(1.0, double(n) / double(l0));
      runs.back().push_back(resolve(method, model, s, l0));
      const Spec& spec = runs.back().back().spec;
      result.plans.push_back({method.name, n, s, spec, make_plan(spec, n)});
    }
  }
  const std::int64_t max_n = *std::max_element(options.lengths.begin(), options.lengths.end());
  check_regimes_act(options.methods, l0, max_n);
  const std::int64_t per_method = std::accumulate(options.lengths.begin(), options.lengths.end(), std::int64_t{0}) *
                                  std::int64_t(result.window_starts.size());
  const std::int64_t total = per_method * std::int64_t(options.methods.size());
  // The caches hold a window, and at least one dual chunk (a DualChunk cache holds its chunk).
  std::int64_t capacity = max_n;
  for (const auto& per_length : runs) {
    for (const MethodRun& run : per_length) {
      if (const auto* dc = std::get_if<regimes::DualChunk>(&run.regimes)) capacity = std::max(capacity, dc->chunk_size);
    }
  }
  WindowReader reader(model, capacity, options.threads);
  std::optional<AttentionProbe> probe;
  if (options.attention_stats) {
    // The probe recomputes every layer's attention with the method's RoPE, 1/√head_dim and no window: what the
    // runner does for every model but those whose layers differ (Gemma 3's local layers, windows, scale).
    const bool per_layer = !model.layer_specs.empty() || !model.layer_windows.empty() ||
                           model.config.sliding_window > 0 || model.config.softmax_scale > 0 ||
                           model.config.attn_softcap > 0;
    if (per_layer) {
      throw Error(
          fmt::format("{}: the attention probe (--attention) models one RoPE, no window and 1/sqrt(head_dim) "
                      "in every layer; this model's layers differ (own RoPEs, windows, softmax scale or soft-capping)",
                      model.source));
    }
    result.distance_edges = {0, 1, 16};
    for (std::int64_t e : options.buckets) {
      if (e > 16 && e < max_n) result.distance_edges.push_back(e);
    }
    probe.emplace(model, options.buckets, result.distance_edges,
                  options.threads > 0 ? options.threads : default_threads());
  }
  std::int64_t done = 0;
  for (std::size_t m = 0; m < options.methods.size(); ++m) {
    const auto method_start = std::chrono::steady_clock::now();
    for (std::size_t li = 0; li < options.lengths.size(); ++li) {
      const std::int64_t n = options.lengths[li];
      const double s = std::max(1.0, double(n) / double(l0));
      Buckets buckets(options.buckets, window_size);
      for (std::int64_t start : result.window_starts) {
        reader.read(runs[m][li], tokens.subspan(std::size_t(start), std::size_t(n)), l0, buckets,
                    probe && n == max_n ? &*probe : nullptr);
        done += n;
        if (options.progress) options.progress(done, total, fmt::format("{} N={}", options.methods[m].name, n));
      }
      buckets.emit(options.methods[m].name, n, s, result.rows);
      if (probe && n == max_n) probe->emit(options.methods[m].name, n, result.attention);
    }
    result.method_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - method_start).count());
  }
  result.tokens_read = done;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start).count();
  return result;
}

std::vector<std::string> passkey_keys(std::uint64_t seed, std::size_t count) {
  // splitmix64: a fixed, documented sequence, so that both labs (and any rerun) hide the same keys.
  std::vector<std::string> keys;
  std::uint64_t x = seed;
  for (std::size_t i = 0; i < count; ++i) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    keys.push_back(std::to_string(10000 + z % 90000));
  }
  return keys;
}

PasskeyPrompt passkey_prompt(const TextEncoder& encode, std::int64_t length, double depth, std::string_view key,
                             int bos) {
  if (!(depth >= 0.0 && depth <= 1.0)) throw Error(fmt::format("depth = {}: must lie in [0, 1]", depth));
  // The needle with every "{key}" spelled as the key.
  std::string needle;
  for (std::string_view rest = kPasskeyNeedle;;) {
    const std::size_t at = rest.find("{key}");
    needle.append(rest.substr(0, at));
    if (at == std::string_view::npos) break;
    needle.append(key);
    rest.remove_prefix(at + 5);
  }
  const std::vector<int> intro = encode(kPasskeyIntro), hidden = encode(needle), question = encode(kPasskeyQuestion);
  // The key as it continues the question (the tokens a greedy decoder writes there), else encoded alone.
  std::string spaced = " ";  // (not " " + std::string: GCC 12's -Wrestrict misreads that, too)
  spaced.append(key);
  const std::vector<int> joint = encode(std::string(kPasskeyQuestion).append(spaced));
  std::vector<int> answer;
  if (joint.size() > question.size() && std::equal(question.begin(), question.end(), joint.begin())) {
    answer.assign(joint.begin() + std::ptrdiff_t(question.size()), joint.end());
  } else {
    answer = encode(spaced);
  }
  const auto fixed = std::int64_t(1 + intro.size() + hidden.size() + question.size());
  if (length < fixed) {
    throw Error(fmt::format(
        "passkey length = {}: below the prompt's own {} tokens (BOS, intro, needle and question without filler)",
        length, fixed));
  }
  const std::vector<int> sentence = encode(kPasskeyFiller);
  if (sentence.empty() || answer.empty())
    throw Error("passkey: the tokenizer encodes the filler or the key as nothing");
  const std::int64_t budget = length - fixed, unit = std::int64_t(sentence.size());
  // The sentence boundary nearest to depth · budget (the filler's end counts as one, so depth 1 is right before the
  // question; a tie goes to the earlier boundary).
  const double want = depth * double(budget);
  std::int64_t at = 0;
  const auto consider = [&](std::int64_t b) {
    if (std::abs(double(b) - want) < std::abs(double(at) - want)) at = b;
  };
  for (std::int64_t b = 0; b <= budget; b += unit) consider(b);
  consider(budget);
  PasskeyPrompt p;
  p.prompt.reserve(std::size_t(length));
  p.prompt.push_back(bos);
  p.prompt.insert(p.prompt.end(), intro.begin(), intro.end());
  const auto filler = [&](std::int64_t from, std::int64_t to) {
    for (std::int64_t i = from; i < to; ++i) p.prompt.push_back(sentence[std::size_t(i % unit)]);
  };
  filler(0, at);
  p.prompt.insert(p.prompt.end(), hidden.begin(), hidden.end());
  filler(at, budget);
  p.prompt.insert(p.prompt.end(), question.begin(), question.end());
  p.answer = std::move(answer);
  return p;
}

std::vector<std::int64_t> passkey_lengths(std::int64_t l0) {
  std::vector<std::int64_t> lengths;
  for (std::int64_t n : {l0 / 2, l0, 2 * l0, 4 * l0}) {
    if (n >= 2) lengths.push_back(n);
  }
  return lengths;
}

TextEncoder passkey_encoder(const Tokenizer& tokenizer) {
  return [&tokenizer](std::string_view text) {
    if (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    return tokenizer.encode(std::string(text), /*bos=*/false);
  };
}

PasskeyResult passkey(const LlamaModel& model, const TextEncoder& encode, const PasskeyOptions& options) {
  const auto clock_start = std::chrono::steady_clock::now();
  const std::int64_t l0 = options.trained_length.value_or(model.config.seq_len);
  if (l0 < 2 || l0 >= kPositionLimit / 8) throw Error(fmt::format("trained-length = {}: must lie in [2, 2^44)", l0));
  if (options.keys < 1) throw Error(fmt::format("keys = {}: must be >= 1", options.keys));
  if (options.methods.empty()) throw Error("methods: none given");
  const std::vector<std::int64_t> lengths = options.lengths.empty() ? passkey_lengths(l0) : options.lengths;
  const std::vector<double> depths = options.depths.empty()
                                         ? std::vector<double>(std::begin(kPasskeyDepths), std::end(kPasskeyDepths))
                                         : options.depths;
  const int bos = model.config.bos_id;
  // Every prompt and every method at every length first: bad input fails before any forward.
  const std::size_t per_cell = std::size_t(options.keys);
  const std::vector<std::string> keys = passkey_keys(options.seed, lengths.size() * depths.size() * per_cell);
  std::vector<PasskeyPrompt> prompts;
  std::int64_t capacity = 0;
  for (std::size_t li = 0; li < lengths.size(); ++li) {
    for (std::size_t di = 0; di < depths.size(); ++di) {
      for (std::size_t ki = 0; ki < per_cell; ++ki) {
        prompts.push_back(passkey_prompt(encode, lengths[li], depths[di], keys[prompts.size()], bos));
        capacity = std::max(capacity, std::int64_t(prompts.back().prompt.size() + prompts.back().answer.size()));
        for (int id : prompts.back().prompt) {
          if (id < 0 || id >= model.config.vocab_size) {
            throw Error(fmt::format("passkey: the tokenizer gives id {} outside the model's vocabulary [0, {})", id,
                                    model.config.vocab_size));
          }
        }
      }
    }
  }
  std::vector<std::vector<MethodRun>> runs;
  for (const EvalMethod& method : options.methods) {
    runs.emplace_back();
    for (std::int64_t n : lengths)
      runs.back().push_back(resolve(method, model, std::max(1.0, double(n) / double(l0)), l0));
  }
  check_regimes_act(options.methods, l0, *std::max_element(lengths.begin(), lengths.end()));
  for (const auto& per_length : runs) {
    for (const MethodRun& run : per_length) {
      if (const auto* dc = std::get_if<regimes::DualChunk>(&run.regimes)) capacity = std::max(capacity, dc->chunk_size);
    }
  }
  WindowReader reader(model, capacity, options.threads);
  const int vocab = model.config.vocab_size;
  PasskeyResult result;
  result.trained_length = l0;
  std::int64_t done = 0, total = 0;
  for (std::int64_t n : lengths) total += n * std::int64_t(depths.size() * per_cell * options.methods.size());
  std::vector<int> window, got;
  for (std::size_t m = 0; m < options.methods.size(); ++m) {
    for (std::size_t li = 0; li < lengths.size(); ++li) {
      const double s = std::max(1.0, double(lengths[li]) / double(l0));
      for (std::size_t di = 0; di < depths.size(); ++di) {
        PasskeyCell cell{options.methods[m].name, lengths[li], s, depths[di], options.keys, 0};
        for (std::size_t ki = 0; ki < per_cell; ++ki) {
          const PasskeyPrompt& p = prompts[(li * depths.size() + di) * per_cell + ki];
          window = p.prompt;
          window.insert(window.end(), p.answer.begin(), p.answer.end());
          // Teacher-forced greedy: row first + a predicts answer[a].
          const auto first = std::int64_t(p.prompt.size()) - 1;
          got.assign(p.answer.size(), -1);
          reader.read(runs[m][li], window, l0, [&](std::int64_t a, std::int64_t rows, std::span<const float> logits) {
            for (std::int64_t r = 0; r < rows; ++r) {
              const std::int64_t index = a + r - first;
              if (index < 0 || index >= std::int64_t(got.size())) continue;
              const float* row = logits.data() + r * vocab;
              got[std::size_t(index)] = int(std::max_element(row, row + vocab) - row);
            }
          });
          cell.retrieved += got == p.answer ? 1 : 0;
          done += lengths[li];
          if (options.progress) {
            options.progress(done, total, fmt::format("passkey {} L={}", options.methods[m].name, lengths[li]));
          }
        }
        result.cells.push_back(std::move(cell));
      }
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start).count();
  return result;
}

}  // namespace ropekit
