// GGUF metadata → ModelPositions (per layer where llama.cpp stores or hard-codes it): the llama.cpp keys ({arch} =
// general.architecture) and how they map, following llama.cpp's loader (llama-model.cpp / llama-context.cpp);
// docs/config.md lists them. The container itself is read by gguf_format.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "config/gguf_format.hpp"
#include "config/model_table.hpp"
#include "config/positions_builder.hpp"
#include "ropekit/config.hpp"
#include "ropekit/encodings.hpp"
#include "ropekit/error.hpp"
#include "ropekit/plan.hpp"

namespace ropekit {
namespace {

using namespace detail::gguf;

class SpecBuilder {
 public:
  SpecBuilder(GgufFile& f, Cursor& c, const ConfigOptions& options) : f_(f), c_(c), options_(options) {}

  ModelPositions build() {
    out_.source = c_.origin();
    const std::string arch = string_key("general.architecture");
    out_.model_type = arch;
    prefix_ = arch + ".";
    const detail::GgufArchInfo* info = detail::find_gguf_arch(arch);
    if (options_.pairing) {
      pairing_ = *options_.pairing;
    } else if (info) {
      pairing_ = info->pairing;
    } else {
      throw Error(
          fmt::format("{}: general.architecture = {}: not in ropekit's architecture table "
                      "(docs/config.md), so the lane pairing is unknown: pass --pairing "
                      "half|interleaved (ConfigOptions::pairing)",
                      c_.origin(), arch));
    }
    static constexpr detail::GgufArchInfo kPlain{"", Pairing::Half, {}};
    const detail::GgufArchInfo& row = info ? *info : kPlain;
    out_.family = info ? arch : "unknown architecture";
    const bool deepseek = row.rule == detail::GgufRule::DeepSeek;

    int head_dim = 0;
    if (auto k = number(prefix_ + "attention.key_length")) head_dim = as_int(prefix_ + "attention.key_length", *k);
    if (deepseek) {
      if (auto k = number(prefix_ + "attention.key_length_mla"))
        head_dim = as_int(prefix_ + "attention.key_length_mla", *k);
    }
    if (head_dim == 0) {
      const double width = required(prefix_ + "embedding_length");
      const double heads = required(prefix_ + "attention.head_count");
      if (heads <= 0 || width <= 0 || std::fmod(width, heads) != 0.0) {
        fail(prefix_ + "embedding_length", width,
             fmt::format("must be a positive multiple of {}attention.head_count = {}", prefix_, heads));
      }
      head_dim = as_int(prefix_ + "embedding_length", width / heads);
    }
    int rotary_dim = head_dim;
    if (auto r = number(prefix_ + "rope.dimension_count")) rotary_dim = as_int(prefix_ + "rope.dimension_count", *r);
    out_.qk_head_dim = head_dim;
    int offset = 0;
    if (deepseek) {  // MLA: the rope slice (dimension_count lanes) follows the nope lanes
      if (rotary_dim > head_dim) fail(prefix_ + "rope.dimension_count", rotary_dim, "exceeds the key length");
      offset = head_dim - rotary_dim;
      head_dim = rotary_dim;
    }
    if (auto ctx = number(prefix_ + "context_length")) {
      out_.max_position_embeddings = length(prefix_ + "context_length", *ctx);
    }

    // The RoPE of full-attention layers, and of sliding ones where llama.cpp gives them their own.
    Spec spec;
    spec.head_dim = head_dim;
    spec.rotary_dim = rotary_dim;
    spec.base = number(prefix_ + "rope.freq_base").value_or(10000.0);  // llama.cpp's default
    spec.pairing = pairing_;
    spec.scaling = scaling(rotary_dim / 2);
    if (row.mrope) {
      if (auto it = f_.kv.find(prefix_ + "rope.dimension_sections"); it != f_.kv.end()) {
        spec.mrope = MRope{sections(it->second), *row.mrope};
      }
    }
    Spec sliding_spec = spec;
    if (row.local_base) {  // llama.cpp: sliding-window layers use freq_base_swa (10000) and no scaling
      sliding_spec.base = number(prefix_ + "rope.freq_base_swa").value_or(10000.0);
      sliding_spec.scaling = scaling::None{};
    }
    validated(spec);
    validated(sliding_spec);

    // Per layer: which slide (attention.sliding_window_pattern: a period, or one bool per layer; else
    // the period llama.cpp hard-codes for the architecture), which rotate.
    int n = 0;
    if (auto b = number(prefix_ + "block_count")) {
      if (*b < 0 || *b > detail::kMaxLayers || *b != std::floor(*b)) {
        fail(prefix_ + "block_count", *b, fmt::format("must be an integer in [0, {}]", detail::kMaxLayers));
      }
      n = int(*b);
    }
    const std::optional<double> window = number(prefix_ + "attention.sliding_window");
    std::vector<bool> sliding = sliding_layers(n, row.swa_pattern);
    const bool alibi = row.rule == detail::GgufRule::Alibi || (row.rule == detail::GgufRule::Baichuan && n == 40);

    auto plan = [&](bool slides, bool rope) {
      LayerPositions g;
      g.qk_head_dim = out_.qk_head_dim;
      g.softmax_scale = 1.0 / std::sqrt(double(out_.qk_head_dim));
      if (auto s = number(prefix_ + "attention.scale")) g.softmax_scale = *s;  // Granite's attention multiplier
      if (auto cap = number(prefix_ + "attn_logit_softcapping")) g.logit_softcap = *cap;
      const bool has_swa = row.swa_pattern > 0 || f_.kv.count(prefix_ + "attention.sliding_window_pattern") != 0;
      if (has_swa) g.layer_type = slides ? "sliding_attention" : "full_attention";
      if (slides && window) g.sliding_window = std::int64_t(*window);
      if (alibi) {
        g.encoding = PositionEncoding::Alibi;
        const std::vector<float> s =
            alibi_slopes(as_int(prefix_ + "attention.head_count", required(prefix_ + "attention.head_count")));
        g.alibi_slopes.assign(s.begin(), s.end());
      } else if (rope) {
        g.encoding = PositionEncoding::Rope;
        g.spec = slides ? sliding_spec : spec;
        g.rope_offset = offset;
      } else {
        g.encoding = PositionEncoding::None;
      }
      return g;
    };
    auto rotates = [&](int i, bool slides) {
      if (row.rule == detail::GgufRule::SlidingRopeOnly) return slides;
      if (row.no_rope_every > 0) return (i + 1) % row.no_rope_every != 0;
      return true;
    };
    std::vector<LayerPositions> plans;
    if (n > 0) {
      for (int i = 0; i < n; ++i) plans.push_back(plan(sliding[std::size_t(i)], rotates(i, sliding[std::size_t(i)])));
    } else {
      plans.push_back(plan(false, row.rule != detail::GgufRule::SlidingRopeOnly));
      if (row.local_base || row.swa_pattern > 0) plans.push_back(plan(true, true));
      if (row.no_rope_every > 0) plans.push_back(plan(false, false));
    }
    detail::assemble_groups(out_, plans, n > 0);
    return std::move(out_);
  }

  // llama.cpp's swa_layers: `{arch}.attention.sliding_window_pattern` as one bool per layer or as a
  // period n (layer il slides when il % n < n − 1), else the architecture's hard-coded period.
  std::vector<bool> sliding_layers(int n, int period) const {
    std::vector<bool> out(std::size_t(n), false);
    const std::string key = prefix_ + "attention.sliding_window_pattern";
    if (auto it = f_.kv.find(key); it != f_.kv.end()) {
      if (const auto* items = std::get_if<std::vector<GgufValue>>(&it->second.value)) {
        if (items->size() != std::size_t(n) && n > 0) {
          fail(key, fmt::format("{} entries", items->size()), fmt::format("expected block_count = {}", n));
        }
        for (std::size_t i = 0; i < items->size() && i < out.size(); ++i) {
          const bool* b = std::get_if<bool>(&(*items)[i].value);
          const double* d = std::get_if<double>(&(*items)[i].value);
          if (!b && !d) fail(fmt::format("{}[{}]", key, i), "(not a bool)", "expected a bool per layer");
          out[i] = b ? *b : *d != 0.0;
        }
        return out;
      }
      const double* d = std::get_if<double>(&it->second.value);
      if (!d || *d < 0 || *d > detail::kMaxLayers || *d != std::floor(*d))
        fail(key, "(value)", "expected a period or a bool per layer");
      period = int(*d);
    }
    for (int i = 0; i < n; ++i) out[std::size_t(i)] = period > 0 && i % period < period - 1;
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& key, const auto& value, std::string_view rule) const {
    throw Error(fmt::format("{}: {} = {}: {}", c_.origin(), key, value, rule));
  }

  void validated(const Spec& spec) const {
    try {
      spec.validate();
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", c_.origin(), e.what()));
    }
  }

  std::optional<double> number(const std::string& key) const {
    auto it = f_.kv.find(key);
    if (it == f_.kv.end()) return std::nullopt;
    const GgufValue& v = it->second;
    if (const auto* items = std::get_if<std::vector<GgufValue>>(&v.value)) {
      // Per-layer arrays (e.g. head_count on some architectures): RoPE needs the first layer's.
      if (!items->empty()) {
        if (const double* d = std::get_if<double>(&items->front().value)) {
          if (!std::isfinite(*d)) fail(key + "[0]", *d, "expected a finite number");
          return *d;
        }
      }
    }
    const double* d = std::get_if<double>(&v.value);
    if (!d) fail(key, "(not a number)", "expected a number");
    if (!std::isfinite(*d)) fail(key, *d, "expected a finite number");
    return *d;
  }
  double required(const std::string& key) const {
    if (auto v = number(key)) return *v;
    throw Error(fmt::format("{}: {} is missing", c_.origin(), key));
  }
  // A context length: an integer in [1, kPositionLimit), checked before the conversion (a value
  // beyond int64 would make it undefined).
  std::int64_t length(const std::string& key, double v) const {
    if (!(v >= 1 && v < double(kPositionLimit) && v == std::floor(v))) {
      fail(key, v, "must be an integer in [1, 2^47)");
    }
    return static_cast<std::int64_t>(v);
  }
  int as_int(const std::string& key, double v) const {
    if (v != std::floor(v) || v <= 0 || v > 65536) fail(key, v, "must be an integer in [1, 65536]");
    return static_cast<int>(v);
  }
  std::string string_key(const std::string& key) const {
    auto it = f_.kv.find(key);
    if (it == f_.kv.end()) throw Error(fmt::format("{}: {} is missing", c_.origin(), key));
    const auto* s = std::get_if<std::string>(&it->second.value);
    if (!s) fail(key, "(not a string)", "expected a string");
    return *s;
  }

  std::vector<int> sections(const GgufValue& v) const {
    const std::string key = prefix_ + "rope.dimension_sections";
    const auto* items = std::get_if<std::vector<GgufValue>>(&v.value);
    if (!items || items->size() < 3 || items->size() > 4) fail(key, "(not 3 or 4 integers)", "expected [t, h, w, e]");
    std::vector<int> out;
    for (const GgufValue& item : *items) {
      const double* d = std::get_if<double>(&item.value);
      if (!d || *d != std::floor(*d) || *d < 0 || *d > 65536) fail(key, "(entry)", "expected integers >= 0");
      out.push_back(static_cast<int>(*d));
    }
    if (out.size() == 4 && out[3] != 0) {
      fail(key + "[3]", out[3], "a 4th position stream is not supported (ropekit models t, h, w)");
    }
    out.resize(3);
    return out;
  }

  // A small F32 tensor's values, checked against the file's extent.
  std::optional<std::vector<double>> tensor(const std::string& name, int expected) {
    auto it = f_.tensors.find(name);
    if (it == f_.tensors.end()) return std::nullopt;
    const TensorInfo& t = it->second;
    if (t.type != 0) fail(name, fmt::format("ggml type {}", t.type), "expected F32 (type 0)");
    std::uint64_t n = 1;
    for (std::uint64_t d : t.dims) {
      if (d != 0 && n > UINT64_MAX / d) fail(name, "(dims)", "element count overflows");
      n *= d;
    }
    if (n != static_cast<std::uint64_t>(expected)) {
      fail(name, fmt::format("{} values", n), fmt::format("expected rope.dimension_count/2 = {}", expected));
    }
    const std::uint64_t size = c_.source().size();
    if (f_.data_start > size || t.offset > size - f_.data_start || n * 4 > size - f_.data_start - t.offset) {
      throw Error(
          fmt::format("{}: truncated GGUF: tensor {} ({} bytes at data offset {}) lies past the "
                      "end of the file",
                      c_.origin(), name, n * 4, t.offset));
    }
    std::vector<float> raw(n);
    c_.source().read(f_.data_start + t.offset, raw.data(), n * 4);
    return std::vector<double>(raw.begin(), raw.end());
  }

  Scaling scaling(int pairs) {
    std::string type = "none";
    if (auto it = f_.kv.find(prefix_ + "rope.scaling.type"); it != f_.kv.end()) {
      const auto* s = std::get_if<std::string>(&it->second.value);
      if (!s) fail(prefix_ + "rope.scaling.type", "(not a string)", "expected a string");
      type = *s;
    }
    std::optional<double> factor = number(prefix_ + "rope.scaling.factor");
    if (!factor) factor = number(prefix_ + "rope.scale_linear");  // older files
    const std::optional<double> attn_factor = number(prefix_ + "rope.scaling.attn_factor");
    auto original = [&] {
      const std::string key = prefix_ + "rope.scaling.original_context_length";
      return length(key, required(key));
    };
    auto freqs = tensor("rope_freqs.weight", pairs);
    auto long_f = tensor("rope_factors_long.weight", pairs);
    auto short_f = tensor("rope_factors_short.weight", pairs);

    if (long_f || short_f || type == "longrope") {  // Phi-3: LongRoPE factor tensors
      if (!long_f || !short_f) {
        throw Error(
            fmt::format("{}: LongRoPE needs both rope_factors_long and rope_factors_short tensors", c_.origin()));
      }
      const std::int64_t l0 = original();
      scaling::LongRope lr{*short_f, *long_f, l0, 0.0, attn_factor};
      lr.factor = out_.max_position_embeddings > 0 ? double(out_.max_position_embeddings) / double(l0) : 1.0;
      return lr;
    }
    if (freqs) {  // Llama 3: smoothing precomputed as per-pair divisors
      if (type != "none") fail(prefix_ + "rope.scaling.type", type, "cannot be combined with rope_freqs");
      return scaling::FreqFactors{*freqs};
    }
    if (type == "none") return scaling::None{};
    if (!factor)
      throw Error(fmt::format("{}: {}rope.scaling.factor is missing (scaling type {})", c_.origin(), prefix_, type));
    if (type == "linear") return scaling::Linear{*factor};
    if (type == "yarn") {
      scaling::Yarn y{};
      y.factor = *factor;
      y.original_max_position_embeddings = original();
      y.beta_fast = number(prefix_ + "rope.scaling.yarn_beta_fast").value_or(y.beta_fast);
      y.beta_slow = number(prefix_ + "rope.scaling.yarn_beta_slow").value_or(y.beta_slow);
      const double log_mul = number(prefix_ + "rope.scaling.yarn_log_multiplier").value_or(0.0);
      if (log_mul > 0.0) {
        // DeepSeek: yarn_log_multiplier = 0.1·mscale_all_dim, and llama.cpp sets mscale equal to it,
        // so the cos/sin magnitude is 1 and the softmax gets mscale(f, mscale_all_dim)².
        y.mscale = y.mscale_all_dim = log_mul / 0.1;
      } else if (attn_factor && *attn_factor != 1.0) {
        // llama.cpp multiplies attn_factor onto ggml's built-in 0.1·ln(f) + 1.
        y.attention_factor = *attn_factor * yarn_get_mscale(*factor);
      }
      return y;
    }
    fail(prefix_ + "rope.scaling.type", type, "unknown (known: none, linear, yarn, longrope)");
  }

  GgufFile& f_;
  Cursor& c_;
  const ConfigOptions& options_;
  std::string prefix_;
  Pairing pairing_{};
  ModelPositions out_;
};

ModelPositions read(Source& src, const ConfigOptions& options, std::string origin) {
  Cursor cursor(src, std::move(origin));
  GgufFile file = parse(cursor);
  return SpecBuilder(file, cursor, options).build();
}

}  // namespace

ModelPositions read_gguf(std::span<const std::byte> bytes, const ConfigOptions& options, std::string_view origin) {
  MemorySource src(bytes);
  return read(src, options, std::string(origin));
}

ModelPositions read_gguf_file(const std::filesystem::path& path, const ConfigOptions& options) {
  FileSource src(path);
  return read(src, options, path.string());
}

}  // namespace ropekit
