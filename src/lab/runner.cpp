// The Llama forward pass on ropekit's attention and KV cache (ropekit/model.hpp).
#include <cblas.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>

#include "lab/kernels.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"
#include "ropekit/kv_cache.hpp"
#include "ropekit/model.hpp"

namespace ropekit {

const LayerPositions& LlamaModel::rope_layer() const {
  const std::vector<const LayerPositions*> groups = rope.rope_groups();
  if (groups.empty()) throw Error(fmt::format("{}: the model has no RoPE layers", source));
  for (const LayerPositions* g : groups) {
    if (g->spec != groups.front()->spec) {
      for (const LayerPositions* full : groups)
        if (full->layer_type == "full_attention") return *full;
      break;
    }
  }
  return *groups.front();
}

namespace {

// Multiply-adds of a group of matrix products below which it runs on the calling thread alone (waking the
// team costs more than it saves).
constexpr double kWorkPerThread = 1 << 14;

// One matrix product y[n × out] (+)= x[n × in] · W[out × in]ᵀ.
struct Product {
  const float* x;
  const WeightMatrix& w;
  float* y;
  int in, out;
  bool accumulate;
};

// Floats of a packed matrix's rows widened at a time for a prefill's sgemm: into L2, each then read by every token.
constexpr std::size_t kPanelFloats = std::size_t{1} << 16;

// Rows [o0, o1) of one product: a matvec (one token: lab/kernels.hpp) or sgemm on OpenBLAS's calling thread. A packed
// W (F16/BF16/quantized): one token's dot products widen each row in chunks as they read it (matvec_packed_rows); many
// tokens' sgemm reads a panel of rows widened into this thread's buffer. Each row's dot product and each output's sum
// over `in` (sgemm: its blocking follows the shared dimension, which panels do not change) is the one computed over
// the widened values stored as float32 (tests/model_test.cpp).
void product_rows(const Product& p, int n, int o0, int o1, const lab::Int8Vector* xq) {
  const auto in = std::size_t(p.in);
  // Outputs [r0, r1) of many tokens from the float32 rows w (W's row r0 first).
  const auto sgemm = [&](const float* w, int r0, int r1) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, r1 - r0, p.in, 1.0f, p.x, p.in, w, p.in,
                p.accumulate ? 1.0f : 0.0f, p.y + r0, p.out);
  };
  if (const float* w = p.w.float_rows()) {
    if (n == 1) {
      lab::matvec_rows(w, p.x, p.y, in, std::size_t(o0), std::size_t(o1), p.accumulate);
    } else {
      sgemm(w + std::size_t(o0) * in, o0, o1);
    }
    return;
  }
  if (xq != nullptr) {  // RunnerOptions::int8_activations: x quantized by matmuls
    lab::int8_matvec_rows(p.w, *xq, p.y + o0, std::size_t(o0), std::size_t(o1), p.accumulate);
    return;
  }
  if (n == 1) {  // each row widened in chunks straight into its dot product
    lab::matvec_packed_rows(p.w, p.x, p.y + o0, std::size_t(o0), std::size_t(o1), p.accumulate);
    return;
  }
  thread_local std::vector<float> panel;
  const int rows = int(std::max<std::size_t>(1, kPanelFloats / in));
  panel.resize(std::size_t(std::min(rows, o1 - o0)) * in);
  for (int r0 = o0; r0 < o1; r0 += rows) {
    const int r1 = std::min(o1, r0 + rows);
    p.w.rows_to_float(r0, r1 - r0, p.in, panel.data());
    sgemm(panel.data(), r0, r1);
  }
}

// Products that read what is ready (e.g. q, k and v from one normalised x), each W's rows (the outputs) split
// over `threads` OpenMP threads in blocks of 16, in one parallel region: each thread's block of every
// product, one matvec (a single token: lab/kernels.hpp) or sgemm on OpenBLAS's calling thread. One thread
// pool for the whole forward: OpenBLAS's own pool, idling in sched_yield beside the OpenMP team that runs
// attention, made two threads slower than one (stories15M eval, one method: 9.0 s on one thread, 10.4 s
// on two with 6.3 s of system time). One region per group, not per product: a decode step on two threads
// waits at 4 barriers per layer instead of 7.
void matmuls(std::initializer_list<Product> products, int n, int threads, bool int8) {
  // With int8 activations, a single token's input to block-quantized matrices is quantized once here, on the calling
  // thread, for every product that reads it (q, k and v read one x) and every thread that splits their rows.
  constexpr std::size_t kMaxProducts = 3;
  thread_local std::array<lab::Int8Vector, kMaxProducts> quantized;
  std::array<const lab::Int8Vector*, kMaxProducts> xq{};
  if (products.size() > kMaxProducts) throw Error(fmt::format("matmuls: {} products in one group", products.size()));
  if (n == 1 && int8) {
    std::size_t i = 0;
    for (const Product& p : products) {
      if (lab::int8_rows(p.w.encoding)) {
        for (std::size_t j = 0; j < i && xq[i] == nullptr; ++j) {
          if (xq[j] != nullptr && products.begin()[j].x == p.x && products.begin()[j].in == p.in) xq[i] = xq[j];
        }
        if (xq[i] == nullptr) {
          lab::quantize_int8({p.x, std::size_t(p.in)}, quantized[i]);
          xq[i] = &quantized[i];
        }
      }
      ++i;
    }
  }
  const auto block = [&](std::size_t i, int o0, int o1) {
    if (o1 > o0) product_rows(products.begin()[i], n, o0, o1, xq[i]);
  };
  double macs = 0;
  int narrowest = std::numeric_limits<int>::max();
  for (const Product& p : products) {
    macs += double(n) * double(p.in) * double(p.out);
    narrowest = std::min(narrowest, p.out);
  }
  const int parts = macs >= 2 * kWorkPerThread ? std::max(1, std::min(threads, narrowest / 16)) : 1;
  if (parts == 1) {
    for (std::size_t i = 0; i < products.size(); ++i) block(i, 0, products.begin()[i].out);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(parts) schedule(static, 1)
#endif
  for (int part = 0; part < parts; ++part) {
    for (std::size_t i = 0; i < products.size(); ++i) {
      const int out = products.begin()[i].out;
      const auto edge = [&](int e) { return e == parts ? out : (out / parts * e) / 16 * 16; };
      block(i, edge(part), edge(part + 1));
    }
  }
}

// Token i's row of a [n, width] buffer.
const float* vi_begin(const std::vector<float>& buffer, int i, int width) {
  return buffer.data() + std::size_t(i) * std::size_t(width);
}

// run.c's RMSNorm: o = w ⊙ x / sqrt(mean(x²) + eps), the sum in float32.
void rmsnorm(const float* x, const std::vector<float>& w, float* o, int n, int dim, float eps) {
  for (int t = 0; t < n; ++t) {
    const float* xt = x + std::size_t(t) * std::size_t(dim);
    float* ot = o + std::size_t(t) * std::size_t(dim);
    float ss = 0.0f;
    for (int i = 0; i < dim; ++i) ss += xt[i] * xt[i];
    const float scale = 1.0f / std::sqrt(ss / float(dim) + eps);
    for (int i = 0; i < dim; ++i) ot[i] = w[std::size_t(i)] * (scale * xt[i]);
  }
}

}  // namespace

Spec spec_with_scaling(const LlamaModel& model, std::string_view fragment, std::string_view origin,
                       std::optional<std::int64_t> trained_length) {
  nlohmann::json scaling;
  try {
    scaling = nlohmann::json::parse(fragment);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{} = {}: invalid JSON: {}", origin, fragment, e.what()));
  }
  if (!scaling.is_object()) throw Error(fmt::format("{} = {}: must be a JSON object", origin, fragment));
  const Spec& own = model.rope_layer().spec;
  nlohmann::json config = {{"model_type", "llama"},
                           {"hidden_size", model.config.dim},
                           {"num_attention_heads", model.config.n_heads},
                           {"head_dim", own.head_dim},
                           {"max_position_embeddings", trained_length.value_or(model.config.seq_len)}};
  if (own.rotary_dim != own.head_dim) config["partial_rotary_factor"] = double(own.rotary_dim) / own.head_dim;
  // A v5 rope_parameters fragment carries its own rope_theta; a legacy rope_scaling one does not.
  if (scaling.contains("rope_theta")) {
    config["rope_parameters"] = scaling;
  } else {
    config["rope_theta"] = own.base;
    config["rope_scaling"] = scaling;
  }
  ConfigOptions options;
  options.pairing = own.pairing;
  ModelPositions read = read_config(config.dump(), options, origin);
  return read.layer().spec;
}

struct LlamaRunner::State {
  const LlamaModel* model;
  RunnerOptions options;
  int threads = 1;
  std::vector<KvCache> caches;  // one per layer, created on the first forward
  // Per layer, the layer's own RoPE where the model gives it one (LlamaModel::layer_specs); empty: none.
  std::vector<std::optional<Rope>> own_ropes;
  bool stale = false;
  // Layers whose keys live in plain buffers rather than a KvCache: every layer with stale keys (as rotated at their
  // append), NoPE layers (LlamaModel::nope_layers: as given). Empty where a layer has a cache.
  std::vector<std::vector<float>> plain_keys, plain_values;
  std::vector<std::int64_t> all_positions;  // every cached token's position (the plain layers' mask and window)
  std::int64_t size = 0;
  // Scratch, grown to the largest call.
  std::vector<float> x, xb, q, k, v, att, h1, h3;
};

LlamaRunner::LlamaRunner(const LlamaModel& model, RunnerOptions options) : state_(std::make_unique<State>()) {
  if (options.capacity <= 0) throw Error(fmt::format("LlamaRunner: capacity = {}: must be positive", options.capacity));
  const LlamaConfig& c = model.config;
  if (c.dim <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim() <= 0 ||
      (c.head_size == 0 && c.dim % c.n_heads != 0) || c.n_heads % c.n_kv_heads != 0 ||
      c.n_layers != int(model.layers.size())) {
    throw Error(fmt::format("LlamaRunner: the model {} has dimensions that do not fit together", model.source));
  }
  state_->model = &model;
  state_->options = options;
  state_->threads = options.threads > 0 ? options.threads : default_threads();
  if (!model.layer_specs.empty()) {
    state_->own_ropes.resize(std::size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) {
      if (l < int(model.layer_specs.size()) && model.layer_specs[std::size_t(l)])
        state_->own_ropes[std::size_t(l)].emplace(*model.layer_specs[std::size_t(l)]);
    }
  }
  // OpenBLAS runs on each calling thread; matmul splits the work over OpenMP's (one pool).
  openblas_set_num_threads(1);
}

LlamaRunner::~LlamaRunner() = default;
LlamaRunner::LlamaRunner(LlamaRunner&&) noexcept = default;
LlamaRunner& LlamaRunner::operator=(LlamaRunner&&) noexcept = default;

const LlamaModel& LlamaRunner::model() const { return *state_->model; }
std::int64_t LlamaRunner::size() const { return state_->size; }

void LlamaRunner::clear() {
  for (KvCache& cache : state_->caches) cache.clear();
  state_->all_positions.clear();
  state_->size = 0;
}

bool LlamaRunner::rerotate(const Rope& from, const Rope& to) {
  if (state_->stale) throw Error("LlamaRunner::rerotate: the runner holds stale keys (ForwardOptions::stale_keys)");
  bool changed = false;
  for (std::size_t l = 0; l < state_->caches.size(); ++l) {
    if (!state_->own_ropes.empty() && state_->own_ropes[l]) continue;  // the layer's own RoPE does not change
    changed = state_->caches[l].rerotate(from, to) || changed;
  }
  return changed;
}

void LlamaRunner::forward(const Rope& rope, std::span<const int> tokens, std::span<const std::int64_t> positions,
                          std::span<float> logits, const ForwardOptions& options) {
  State& s = *state_;
  const LlamaModel& m = *s.model;
  const LlamaConfig& c = m.config;
  const int n = int(tokens.size());
  const int dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim(), hidden = c.hidden_dim,
            vocab = c.vocab_size;
  if (tokens.empty()) throw Error("LlamaRunner::forward: no tokens");
  if (positions.size() != tokens.size()) {
    throw Error(fmt::format("LlamaRunner::forward: {} positions for {} tokens", positions.size(), tokens.size()));
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw Error(
          fmt::format("LlamaRunner::forward: tokens[{}] = {}: outside the vocabulary [0, {})", i, tokens[i], vocab));
    }
  }
  if (std::int64_t(n) > s.options.capacity - s.size) {
    throw Error(fmt::format("LlamaRunner::forward: {} tokens after {} overflow the capacity {}", n, s.size,
                            s.options.capacity));
  }
  const bool last_only = logits.size() == std::size_t(vocab) && n > 1;
  if (!last_only && logits.size() != std::size_t(n) * std::size_t(vocab)) {
    throw Error(fmt::format("LlamaRunner::forward: logits has {} floats: need {} (every token) or {} (the last)",
                            logits.size(), std::size_t(n) * std::size_t(vocab), vocab));
  }
  if (rope.spec().head_dim != hd) {
    throw Error(
        fmt::format("LlamaRunner::forward: rope head_dim = {}: the model's head size is {}", rope.spec().head_dim, hd));
  }
  if (s.size > 0 && options.stale_keys != s.stale) {
    throw Error("LlamaRunner::forward: stale_keys must not change while tokens are cached (clear() first)");
  }
  if (!options.token_ropes.empty()) {
    if (options.token_ropes.size() != tokens.size()) {
      throw Error(
          fmt::format("LlamaRunner::forward: {} token_ropes for {} tokens", options.token_ropes.size(), tokens.size()));
    }
    if (options.regimes.index() != 0)
      throw Error("LlamaRunner::forward: token_ropes and position regimes do not combine");
    for (const Rope* r : options.token_ropes) {
      if (r == nullptr || r->spec().head_dim != hd) {
        throw Error("LlamaRunner::forward: every token_ropes entry must be a Rope of the model's head size");
      }
    }
  }
  if (options.stale_keys && options.regimes.index() != 0) {
    throw Error(
        "LlamaRunner::forward: stale_keys and position regimes do not combine (regimes need the runner's caches)");
  }
  if (!s.caches.empty() && s.caches.front().shape().regimes != options.regimes) {
    if (s.size > 0) {
      throw Error(fmt::format("LlamaRunner::forward: regimes {} differ from the cached tokens' {} (clear() first)",
                              to_string(options.regimes), to_string(s.caches.front().shape().regimes)));
    }
    s.caches.clear();
  }
  s.stale = options.stale_keys;
  if (s.caches.empty() && !s.stale) {
    for (int l = 0; l < c.n_layers; ++l) {
      const std::optional<Rope>* own = s.own_ropes.empty() ? nullptr : &s.own_ropes[std::size_t(l)];
      s.caches.emplace_back(own != nullptr && *own ? **own : rope, KvCacheShape{.capacity = s.options.capacity,
                                                                                .kv_heads = c.n_kv_heads,
                                                                                .dtype = s.options.kv_dtype,
                                                                                .threads = s.threads,
                                                                                .regimes = options.regimes});
    }
  }
  if (s.stale && s.options.kv_dtype != DType::F32) throw Error("LlamaRunner: stale_keys stores float32 keys only");
  s.plain_keys.resize(std::size_t(c.n_layers));
  s.plain_values.resize(std::size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    if ((s.stale || m.nope(l)) && s.plain_keys[std::size_t(l)].empty()) {
      s.plain_keys[std::size_t(l)].resize(std::size_t(s.options.capacity * kv_dim));
      s.plain_values[std::size_t(l)].resize(std::size_t(s.options.capacity * kv_dim));
    }
  }
  auto grow = [](std::vector<float>& v, std::size_t size) {
    if (v.size() < size) v.resize(size);
  };
  const std::size_t un = std::size_t(n);
  grow(s.x, un * dim);
  grow(s.xb, un * dim);
  grow(s.q, un * q_dim);
  grow(s.k, un * kv_dim);
  grow(s.v, un * kv_dim);
  grow(s.att, un * q_dim);
  grow(s.h1, un * hidden);
  grow(s.h3, un * hidden);

  for (int t = 0; t < n; ++t) {
    m.token_embedding.rows_to_float(tokens[std::size_t(t)], 1, dim, s.x.data() + std::size_t(t) * dim);
    if (c.embed_scale > 0) {  // Gemma: × √dim, in float32
      for (int i = 0; i < dim; ++i) s.x[std::size_t(t) * dim + std::size_t(i)] *= c.embed_scale;
    }
  }
  AttentionOptions attention_options;
  attention_options.logn_length = options.logn_length;
  attention_options.threads = s.threads;
  const Positions pos = ropekit::positions(positions);
  const Heads q = bshd(s.q.data(), DType::F32, 1, n, c.n_heads, hd);
  const Heads k = bshd(s.k.data(), DType::F32, 1, n, c.n_kv_heads, hd);
  const Heads v = bshd(s.v.data(), DType::F32, 1, n, c.n_kv_heads, hd);
  const Heads att = bshd(s.att.data(), DType::F32, 1, n, c.n_heads, hd);
  s.all_positions.insert(s.all_positions.end(), positions.begin(), positions.end());
  // Attention of queries `qh` (at `qpos`, into `out`) over the first `total` keys of layer l's plain buffers.
  const auto attend_plain = [&](int l, const Heads& qh, const Positions& qpos, const Heads& out, std::int64_t total,
                                const AttentionOptions& o) {
    attention(
        {.q = qh,
         .k = bshd(s.plain_keys[std::size_t(l)].data(), DType::F32, 1, total, c.n_kv_heads, hd),
         .v = bshd(s.plain_values[std::size_t(l)].data(), DType::F32, 1, total, c.n_kv_heads, hd),
         .out = out,
         .q_positions = qpos,
         .k_positions = ropekit::positions(std::span<const std::int64_t>(s.all_positions.data(), std::size_t(total))),
         .head_dim = hd},
        o);
  };

  if (c.softmax_scale > 0) attention_options.softmax_scale = c.softmax_scale;
  if (c.attn_softcap > 0) attention_options.logit_softcap = c.attn_softcap;
  const AttentionOptions call_options = attention_options;
  // x += W · in (rows of `width`), normalized by `post` first where the model has such a norm (Gemma).
  const auto add_output = [&](const float* in, const WeightMatrix& weights, int width, const std::vector<float>& post) {
    if (post.empty()) {
      matmuls({{in, weights, s.x.data(), width, dim, true}}, n, s.threads, s.options.int8_activations);
      return;
    }
    matmuls({{in, weights, s.xb.data(), width, dim, false}}, n, s.threads, s.options.int8_activations);
    rmsnorm(s.xb.data(), post, s.xb.data(), n, dim, c.norm_eps);
    for (std::size_t i = 0; i < un * std::size_t(dim); ++i) s.x[i] += s.xb[i];
  };
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& w = m.layers[std::size_t(l)];
    // The call's window (the lab's swa method) and the layer's own (Mistral's, Qwen's sliding layers): the narrower.
    const std::int64_t model_window = m.window(l);
    attention_options = call_options;
    attention_options.window = options.window > 0 && model_window > 0 ? std::min(options.window, model_window)
                                                                      : std::max(options.window, model_window);
    // The layer's RoPE: its own (Gemma 3's local layers) or the call's.
    const Rope* own = s.own_ropes.empty() || !s.own_ropes[std::size_t(l)] ? nullptr : &*s.own_ropes[std::size_t(l)];
    const Rope& layer_rope = own != nullptr ? *own : rope;
    rmsnorm(s.x.data(), w.rms_att, s.xb.data(), n, dim, c.norm_eps);
    matmuls({{s.xb.data(), w.wq, s.q.data(), dim, q_dim, false},
             {s.xb.data(), w.wk, s.k.data(), dim, kv_dim, false},
             {s.xb.data(), w.wv, s.v.data(), dim, kv_dim, false}},
            n, s.threads, s.options.int8_activations);
    if (!w.bq.empty()) {  // Qwen2's biases (a model has all three or none: the loader checks)
      for (int t = 0; t < n; ++t) {
        float* qt = s.q.data() + std::size_t(t) * q_dim;
        float* kt = s.k.data() + std::size_t(t) * kv_dim;
        float* vt = s.v.data() + std::size_t(t) * kv_dim;
        for (int i = 0; i < q_dim; ++i) qt[i] += w.bq[std::size_t(i)];
        for (int i = 0; i < kv_dim; ++i) kt[i] += w.bk[std::size_t(i)], vt[i] += w.bv[std::size_t(i)];
      }
    }
    if (!w.q_norm.empty()) {  // Qwen3: each head normed on its own, in place (rows of head_dim)
      rmsnorm(s.q.data(), w.q_norm, s.q.data(), n * c.n_heads, hd, c.norm_eps);
      rmsnorm(s.k.data(), w.k_norm, s.k.data(), n * c.n_kv_heads, hd, c.norm_eps);
    }
    if (options.on_qk) options.on_qk(l, {s.q.data(), un * q_dim}, {s.k.data(), un * kv_dim});
    if (m.nope(l)) {
      // No positional encoding: keys kept as given, attention over them masked (and windowed) by position only.
      const std::size_t at = std::size_t(s.size) * kv_dim;
      std::copy(s.k.data(), s.k.data() + un * kv_dim, s.plain_keys[std::size_t(l)].data() + at);
      std::copy(s.v.data(), s.v.data() + un * kv_dim, s.plain_values[std::size_t(l)].data() + at);
      attend_plain(l, q, pos, att, s.size + n, attention_options);
    } else if (!options.token_ropes.empty() && own == nullptr) {
      // Token by token, each with its own plan (the products above and below ran once for all of them).
      for (int i = 0; i < n; ++i) {
        const Rope& r = *options.token_ropes[std::size_t(i)];
        const Positions at = ropekit::positions(positions.subspan(std::size_t(i), 1));
        const auto row = [&](std::vector<float>& buffer, int heads) {
          return bshd(buffer.data() + std::size_t(i) * std::size_t(heads) * std::size_t(hd), DType::F32, 1, 1, heads,
                      hd);
        };
        const Heads qi = row(s.q, c.n_heads), ki = row(s.k, c.n_kv_heads), vi = row(s.v, c.n_kv_heads),
                    atti = row(s.att, c.n_heads);
        if (!s.stale) {
          KvCache& cache = s.caches[std::size_t(l)];
          cache.rerotate(i == 0 ? rope : *options.token_ropes[std::size_t(i - 1)], r);
          cache.append(r, ki, vi, at);
          attention(r, qi, at, cache, atti, attention_options);
        } else {
          float* keys = s.plain_keys[std::size_t(l)].data();
          float* values = s.plain_values[std::size_t(l)].data();
          const std::int64_t before = s.size + i;
          r.apply({.q = qi,
                   .k = ki,
                   .k_out = bshd(keys + std::size_t(before) * kv_dim, DType::F32, 1, 1, c.n_kv_heads, hd),
                   .positions = at,
                   .threads = s.threads});
          std::copy(vi_begin(s.v, i, kv_dim), vi_begin(s.v, i + 1, kv_dim), values + std::size_t(before) * kv_dim);
          AttentionOptions scaled = attention_options;
          scaled.softmax_scale_mult = r.plan().softmax_scale_mult;
          attend_plain(l, qi, at, atti, before + 1, scaled);
        }
      }
    } else if (!s.stale) {
      KvCache& cache = s.caches[std::size_t(l)];
      cache.append(layer_rope, k, v, pos);
      attention(layer_rope, q, pos, cache, att, attention_options);
    } else {
      // Keys rotated now, under this call's plan, and kept so; queries rotated under it too.
      const std::size_t at = std::size_t(s.size) * kv_dim;
      layer_rope.apply({.q = q,
                        .k = k,
                        .k_out = bshd(s.plain_keys[std::size_t(l)].data() + at, DType::F32, 1, n, c.n_kv_heads, hd),
                        .positions = pos,
                        .threads = s.threads});
      std::copy(s.v.data(), s.v.data() + un * kv_dim, s.plain_values[std::size_t(l)].data() + at);
      AttentionOptions scaled = attention_options;
      scaled.softmax_scale_mult = layer_rope.plan().softmax_scale_mult;
      attend_plain(l, q, pos, att, s.size + n, scaled);
    }
    // The attention's output added to the residual; Gemma normalizes it first (post_attention_layernorm).
    add_output(s.att.data(), w.wo, q_dim, w.rms_post_att);
    rmsnorm(s.x.data(), w.rms_ffn, s.xb.data(), n, dim, c.norm_eps);
    matmuls(
        {{s.xb.data(), w.w1, s.h1.data(), dim, hidden, false}, {s.xb.data(), w.w3, s.h3.data(), dim, hidden, false}}, n,
        s.threads, s.options.int8_activations);
    if (c.gelu_tanh) {
      for (std::size_t i = 0; i < un * hidden; ++i) {  // GeGLU: gelu(w1 x) ⊙ w3 x, gelu's tanh form (Gemma)
        const float g = s.h1[i];
        s.h1[i] = 0.5f * g * (1.0f + std::tanh(0.7978845608028654f * (g + 0.044715f * g * g * g))) * s.h3[i];
      }
    } else {
      for (std::size_t i = 0; i < un * hidden; ++i) {
        const float g = s.h1[i];
        s.h1[i] = g / (1.0f + std::exp(-g)) * s.h3[i];  // SwiGLU: silu(w1 x) ⊙ w3 x
      }
    }
    add_output(s.h1.data(), w.w2, hidden, w.rms_post_ffn);
  }
  s.size += n;
  const int first = last_only ? n - 1 : 0;
  const int rows = n - first;
  rmsnorm(s.x.data() + std::size_t(first) * dim, m.rms_final, s.xb.data(), rows, dim, c.norm_eps);
  matmuls({{s.xb.data(), m.classifier_weights(), logits.data(), dim, vocab, false}}, rows, s.threads,
          s.options.int8_activations);
  if (c.final_softcap > 0) {  // Gemma 2: cap·tanh(logits / cap), in float32 as HF computes it
    const float cap = static_cast<float>(c.final_softcap);
    for (float& x : logits) x = cap * std::tanh(x / cap);
  }
}

}  // namespace ropekit
