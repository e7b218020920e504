// python/src/model.cpp — the Llama runner (Model: logits, greedy and sampled generation), its tokenizer and the
// long-context lab (eval, eval_methods), from Python.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <limits>
#include <map>

#include "arrays.hpp"
#include "bindings.hpp"
#include "rope_object.hpp"
#include "ropekit/ropekit.hpp"

namespace ropekit::python {
namespace {

struct PyModel {
  std::shared_ptr<const LlamaModel> model;
};

std::vector<std::int64_t> default_positions(std::size_t n, std::int64_t start) {
  std::vector<std::int64_t> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = start + static_cast<std::int64_t>(i);
  return p;
}

Spec model_spec(const PyModel& m, const PyRope* rope) { return rope ? rope->spec() : m.model->rope_layer().spec; }

py::array_t<float> model_logits(const PyModel& self, const std::vector<int>& tokens,
                                std::optional<std::vector<std::int64_t>> positions, const PyRope* py_rope,
                                std::int64_t window, int threads) {
  const LlamaModel& model = *self.model;
  const std::vector<std::int64_t> pos = positions.value_or(default_positions(tokens.size(), 0));
  const std::int64_t vocab = model.config.vocab_size;
  py::array_t<float> logits(
      std::vector<py::ssize_t>{static_cast<py::ssize_t>(tokens.size()), static_cast<py::ssize_t>(vocab)});
  float* out = logits.mutable_data();
  const Rope own(model_spec(self, py_rope));
  const std::shared_ptr<const Rope> rope_held = py_rope ? py_rope->rope(AngleMode::Accurate) : nullptr;
  const Rope& rope = rope_held ? *rope_held : own;
  {
    py::gil_scoped_release release;
    LlamaRunner runner(
        model, {.capacity = std::max<std::int64_t>(1, static_cast<std::int64_t>(tokens.size())), .threads = threads});
    runner.forward(rope, tokens, pos, {out, tokens.size() * static_cast<std::size_t>(vocab)}, {.window = window});
  }
  return logits;
}

// run.c's loop: the prompt read in one batch, then one token at a time; a length-dependent RoPE is
// re-formed for each length read and the cached keys re-rotated (as `ropekit generate`).
std::vector<int> model_generate(const PyModel& self, const std::vector<int>& prompt, std::int64_t steps,
                                float temperature, float topp, std::uint64_t seed, const PyRope* py_rope, int threads) {
  const LlamaModel& model = *self.model;
  if (prompt.empty()) throw Error("prompt: empty (start it with BOS, the model's bos_id)");
  if (steps <= 0) throw Error(fmt::format("steps = {}: must be > 0", steps));
  const Spec spec = model_spec(self, py_rope);
  const bool dynamic = depends_on_length(spec);
  py::gil_scoped_release release;
  Rope rope(spec);
  Sampler sampler(model.config.vocab_size, temperature, topp, seed);
  LlamaRunner runner(model, {.capacity = steps, .threads = threads});
  std::vector<float> logits(static_cast<std::size_t>(model.config.vocab_size));
  std::vector<int> out;
  const std::int64_t forced = std::min<std::int64_t>(static_cast<std::int64_t>(prompt.size()) - 1, steps);
  if (forced > 0) {
    if (dynamic) rope = Rope(spec, AngleMode::Accurate, forced);
    runner.forward(rope, std::span<const int>(prompt.data(), static_cast<std::size_t>(forced)),
                   default_positions(static_cast<std::size_t>(forced), 0), logits);
  }
  std::int64_t pos = std::max<std::int64_t>(forced, 0);
  int token = prompt[static_cast<std::size_t>(pos)];
  while (pos < steps) {
    const std::int64_t p = pos;
    if (dynamic) {
      Rope next(spec, AngleMode::Accurate, p + 1);
      if (runner.size() > 0) runner.rerotate(rope, next);
      rope = std::move(next);
    }
    runner.forward(rope, std::span<const int>(&token, 1), std::span<const std::int64_t>(&p, 1), logits);
    const int next = sampler.sample(logits);
    ++pos;
    if (next == model.config.bos_id) break;
    out.push_back(next);
    token = next;
  }
  return out;
}

py::dict eval_table(const PyModel& self, const std::vector<int>& tokens, const std::string& methods,
                    std::vector<std::int64_t> lengths, std::optional<std::vector<std::int64_t>> buckets,
                    std::int64_t window_size, std::optional<std::int64_t> windows,
                    std::optional<std::int64_t> trained_length, int threads, bool attention_stats) {
  EvalOptions o;
  o.attention_stats = attention_stats;
  o.methods = parse_methods(methods);
  o.lengths = std::move(lengths);
  if (buckets) o.buckets = *buckets;
  o.window_size = window_size;
  o.windows = windows;
  o.trained_length = trained_length;
  o.threads = threads;
  EvalResult r;
  {
    py::gil_scoped_release release;
    r = evaluate(*self.model, tokens, o);
  }
  const std::size_t n = r.rows.size();
  py::list method;
  py::array_t<std::int64_t> length(n), lo(n), hi(n), count(n);
  py::array_t<double> scale(n), nll(n), ppl(n);
  for (std::size_t i = 0; i < n; ++i) {
    const EvalRow& row = r.rows[i];
    method.append(row.method);
    length.mutable_at(i) = row.n;
    scale.mutable_at(i) = row.scale;
    lo.mutable_at(i) = row.bucket_lo;
    hi.mutable_at(i) = row.bucket_hi;
    count.mutable_at(i) = row.tokens;
    nll.mutable_at(i) = row.mean_nll;
    ppl.mutable_at(i) = row.ppl;
  }
  py::dict d;
  d["method"] = py::module_::import("numpy").attr("array")(method);
  d["n"] = length;
  d["scale"] = scale;
  d["bucket_lo"] = lo;
  d["bucket_hi"] = hi;
  d["tokens"] = count;
  d["mean_nll"] = nll;
  d["ppl"] = ppl;
  d["window_starts"] = py::array_t<std::int64_t>(r.window_starts.size(), r.window_starts.data());
  d["trained_length"] = r.trained_length;
  d["seconds"] = r.seconds;
  d["method_seconds"] = py::array_t<double>(r.method_seconds.size(), r.method_seconds.data());
  if (attention_stats) {
    // The probe's rows as arrays (ropekit/lab.hpp, AttentionStatsRow); mass is [rows, distance buckets].
    const std::size_t rows = r.attention.size(), buckets = r.distance_edges.size();
    py::list a_method;
    py::array_t<std::int64_t> a_layer(rows), a_lo(rows), a_hi(rows), a_samples(rows);
    py::array_t<double> a_entropy(rows), a_ratio(rows), a_bos(rows), a_earlier(rows);
    py::array_t<double> a_mass({rows, buckets});
    for (std::size_t i = 0; i < rows; ++i) {
      const AttentionStatsRow& x = r.attention[i];
      a_method.append(x.method);
      a_layer.mutable_at(i) = x.layer;
      a_lo.mutable_at(i) = x.query_lo;
      a_hi.mutable_at(i) = x.query_hi;
      a_samples.mutable_at(i) = x.samples;
      a_entropy.mutable_at(i) = x.entropy;
      a_ratio.mutable_at(i) = x.entropy_ratio;
      a_bos.mutable_at(i) = x.own_bos;
      a_earlier.mutable_at(i) = x.earlier_stories;
      for (std::size_t b = 0; b < buckets; ++b) a_mass.mutable_at(i, b) = x.mass[b];
    }
    py::dict a;
    a["method"] = py::module_::import("numpy").attr("array")(a_method);
    a["layer"] = a_layer;
    a["query_lo"] = a_lo;
    a["query_hi"] = a_hi;
    a["samples"] = a_samples;
    a["entropy"] = a_entropy;
    a["entropy_ratio"] = a_ratio;
    a["own_bos"] = a_bos;
    a["earlier_stories"] = a_earlier;
    a["mass"] = a_mass;
    a["distance_edges"] = py::array_t<std::int64_t>(buckets, r.distance_edges.data());
    d["attention"] = a;
  }
  return d;
}

}  // namespace

void bind_model(py::module_& m) {
  py::class_<PyModel>(m, "Model",
                      "The lab's Llama runner (ropekit/model.hpp): a llama2.c checkpoint, a GGUF file or a Hugging "
                      "Face safetensors directory, run on the CPU with any RoPE")
      .def(py::init([](const std::filesystem::path& path, bool mmap) {
             return PyModel{std::make_shared<const LlamaModel>(load_model_file(path, {.map = mmap}))};
           }),
           py::arg("path"), py::kw_only(), py::arg("mmap") = true,
           "Loads a model file or directory (the format read from its contents); mmap=False reads a GGUF file into "
           "memory instead of mapping it, so that the file may change while the model lives")
      .def_property_readonly("config",
                             [](const PyModel& self) {
                               const LlamaConfig& c = self.model->config;
                               py::dict d;
                               d["dim"] = c.dim, d["hidden_dim"] = c.hidden_dim, d["n_layers"] = c.n_layers,
                               d["n_heads"] = c.n_heads;
                               d["n_kv_heads"] = c.n_kv_heads, d["vocab_size"] = c.vocab_size, d["seq_len"] = c.seq_len;
                               d["head_dim"] = c.head_dim(), d["bos_id"] = c.bos_id, d["source"] = self.model->source;
                               return d;
                             })
      .def_property_readonly("rope",
                             [](const PyModel& self) {
                               auto r = std::make_shared<PyRope>(self.model->rope_layer().spec, std::nullopt,
                                                                 self.model->source);
                               r->layer = self.model->rope_layer();
                               return r;
                             })
      .def(
          "rope_with_scaling",
          [](const PyModel& self, py::dict fragment, std::optional<std::int64_t> trained_length) {
            const std::string text = py::module_::import("json").attr("dumps")(fragment).cast<std::string>();
            return std::make_shared<PyRope>(spec_with_scaling(*self.model, text, "rope_scaling", trained_length),
                                            std::nullopt, "rope_with_scaling");
          },
          py::arg("rope_scaling"), py::kw_only(), py::arg("trained_length") = py::none(),
          "The model's RoPE under a context-extension method: rope_scaling in config.json syntax, trained_length the "
          "original context (default: the model's)")
      .def("logits", &model_logits, py::arg("tokens"), py::arg("positions") = py::none(), py::kw_only(),
           py::arg("rope") = nullptr, py::arg("window") = 0, py::arg("threads") = 0,
           "float32 logits [len(tokens), vocab_size] of one forward pass at positions (None: 0 … n-1), with rope "
           "(None: the model's) and window > 0 a sliding window")
      .def("generate", &model_generate, py::arg("prompt"), py::arg("steps"), py::kw_only(),
           py::arg("temperature") = 0.0f, py::arg("topp") = 0.9f, py::arg("seed") = 1, py::arg("rope") = nullptr,
           py::arg("threads") = 0,
           "The prompt's tokens followed by up to `steps` generated ones: greedy at temperature 0, else top-p "
           "sampling from seed");

  py::class_<Tokenizer>(m, "Tokenizer",
                        "The runner's tokenizer (ropekit/tokenizer.hpp): llama2.c's tokenizer.bin or a GGUF file's "
                        "vocabulary")
      .def(py::init([](const std::filesystem::path& path) { return Tokenizer::from_file(path); }), py::arg("path"),
           "Reads a tokenizer file (tokenizer.bin or a .gguf)")
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("bos_id", &Tokenizer::bos_id)
      .def_property_readonly("eos_id", &Tokenizer::eos_id)
      .def("encode", &Tokenizer::encode, py::arg("text"), py::kw_only(), py::arg("bos") = true, py::arg("eos") = false,
           "The token ids of text, with BOS first and EOS last when asked")
      .def(
          "encode_stories", [](const Tokenizer& t, std::string_view text) { return encode_stories(t, text); },
          py::arg("text"), "`ropekit tokenize --stories`: each story (split at <|endoftext|>) from a BOS")
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int>& tokens, int prev) {
            std::string text;
            for (const int id : tokens) {
              text += t.decode(prev, id);
              prev = id;
            }
            return py::bytes(text).attr("decode")("utf-8", "replace");
          },
          py::arg("tokens"), py::kw_only(), py::arg("prev") = 1,
          "The text of tokens, each decoded after the one before (prev: the token before the first)");

  m.def("eval", &eval_table, py::arg("model"), py::arg("tokens"), py::kw_only(),
        py::arg("methods") = "orig,pi,yarn,swa", py::arg("lengths") = std::vector<std::int64_t>{512, 2048},
        py::arg("buckets") = py::none(), py::arg("window_size") = 2048, py::arg("windows") = py::none(),
        py::arg("trained_length") = py::none(), py::arg("threads") = 0, py::arg("attention_stats") = false,
        "`ropekit eval`: perplexity by position bucket of each method at each evaluation length over windows of "
        "tokens (docs/lab.md), as a dict of NumPy arrays");
  // The lab's methods for the Python lab (ropekit.lab): the C++ parser and each method's reading, so both labs share
  // one definition of every method, its parameters and its errors.
  m.def(
      "_lab_parse_methods",
      [](const std::string& list) {
        py::list out;
        for (const EvalMethod& e : parse_methods(list)) out.append(py::make_tuple(e.name, e.fragment));
        return out;
      },
      py::arg("methods"));
  m.def(
      "_lab_method",
      [](const std::string& name, const std::string& fragment, double s, std::int64_t l0) {
        const MethodReading r = describe_method({name, fragment}, s, l0);
        static constexpr const char* kKinds[] = {"batched", "dynamic", "dynamic_stale", "restart"};
        py::dict d;
        d["kind"] = kKinds[static_cast<int>(r.kind)];
        d["rope_scaling"] =
            r.rope_scaling.empty() ? py::object(py::none()) : py::module_::import("json").attr("loads")(r.rope_scaling);
        d["window"] = r.window;
        d["logn_length"] = r.logn_length;
        py::dict regimes;
        if (const auto* rr = std::get_if<regimes::ReRope>(&r.regimes)) {
          regimes["type"] = "rerope", regimes["window"] = rr->window;
        } else if (const auto* se = std::get_if<regimes::SelfExtend>(&r.regimes)) {
          regimes["type"] = "self_extend", regimes["window"] = se->window, regimes["group"] = se->group;
        } else if (const auto* dc = std::get_if<regimes::DualChunk>(&r.regimes)) {
          regimes["type"] = "dca", regimes["chunk_size"] = dc->chunk_size, regimes["local_size"] = dc->local_size;
        }
        d["regimes"] = regimes.empty() ? py::object(py::none()) : py::object(regimes);
        return d;
      },
      py::arg("name"), py::arg("fragment"), py::arg("scale"), py::arg("trained_length"));
  // The protocol's lengths for a trained length (effective_options) and its windows (eval_windows), as the C++ lab
  // takes them.
  m.def(
      "_lab_protocol",
      [](std::int64_t l0, std::optional<std::int64_t> window_size, std::vector<std::int64_t> lengths,
         std::vector<std::int64_t> buckets) {
        EvalOptions o;
        o.trained_length = l0;
        o.window_size = window_size;
        o.lengths = std::move(lengths);
        o.buckets = std::move(buckets);
        const EvalOptions e = effective_options(o, l0);
        check_protocol(e);
        py::dict d;
        d["trained_length"] = *e.trained_length;
        d["window_size"] = *e.window_size;
        d["lengths"] = e.lengths;
        d["buckets"] = e.buckets;
        return d;
      },
      py::arg("trained_length"), py::arg("window_size"), py::arg("lengths"), py::arg("buckets"));
  m.def(
      "_lab_windows",
      [](const std::vector<int>& tokens, std::int64_t window_size, std::optional<std::int64_t> windows, int bos_id) {
        return eval_windows(tokens, window_size, windows, bos_id);
      },
      py::arg("tokens"), py::arg("window_size"), py::arg("windows"), py::arg("bos_id"));
  // Passkey retrieval (ropekit/lab.hpp): the C++ lab's grid, and the prompt and keys both labs share.
  m.def(
      "_passkey_prompt",
      [](const py::function& encode, std::int64_t length, double depth, const std::string& key, int bos) {
        const TextEncoder enc = [&encode](std::string_view text) {
          return encode(std::string(text)).cast<std::vector<int>>();
        };
        const PasskeyPrompt p = passkey_prompt(enc, length, depth, key, bos);
        return py::make_tuple(p.prompt, p.answer);
      },
      py::arg("encode"), py::arg("length"), py::arg("depth"), py::arg("key"), py::arg("bos"));
  m.def("_passkey_keys", &passkey_keys, py::arg("seed"), py::arg("count"));
  m.def("_passkey_lengths", &passkey_lengths, py::arg("trained_length"));
  m.attr("_PASSKEY_DEPTHS") = std::vector<double>(std::begin(kPasskeyDepths), std::end(kPasskeyDepths));
  m.def(
      "_lab_check_regimes_act",
      [](const std::vector<std::pair<std::string, std::string>>& methods, std::int64_t l0, std::int64_t max_n) {
        std::vector<EvalMethod> list;
        for (const auto& [name, fragment] : methods) list.push_back({name, fragment});
        check_regimes_act(list, l0, max_n);
      },
      py::arg("methods"), py::arg("trained_length"), py::arg("max_n"));
  py::dict text;
  text["intro"] = std::string(kPasskeyIntro), text["filler"] = std::string(kPasskeyFiller);
  text["needle"] = std::string(kPasskeyNeedle), text["question"] = std::string(kPasskeyQuestion);
  m.attr("_PASSKEY_TEXT") = text;
  m.def(
      "passkey",
      [](const PyModel& self, const Tokenizer& tokenizer, const std::string& methods, std::vector<std::int64_t> lengths,
         std::vector<double> depths, std::int64_t keys, std::uint64_t seed, std::optional<std::int64_t> trained_length,
         int threads) {
        PasskeyOptions o;
        o.methods = parse_methods(methods);
        o.lengths = std::move(lengths);
        o.depths = std::move(depths);
        o.keys = keys;
        o.seed = seed;
        o.trained_length = trained_length;
        o.threads = threads;
        PasskeyResult r;
        {
          py::gil_scoped_release release;
          r = passkey(*self.model, passkey_encoder(tokenizer), o);
        }
        py::list cells;
        for (const PasskeyCell& c : r.cells) {
          cells.append(py::make_tuple(c.method, c.length, c.scale, c.depth, c.keys, c.retrieved));
        }
        py::dict d;
        d["cells"] = cells;
        d["trained_length"] = r.trained_length;
        d["seconds"] = r.seconds;
        return d;
      },
      py::arg("model"), py::arg("tokenizer"), py::kw_only(),
      py::arg("methods") = "orig,pi,ntk,yarn,yarn_notemp,dyn_ntk,llama3",
      py::arg("lengths") = std::vector<std::int64_t>{}, py::arg("depths") = std::vector<double>{}, py::arg("keys") = 5,
      py::arg("seed") = 0, py::arg("trained_length") = py::none(), py::arg("threads") = 0,
      "`ropekit passkey`: retrieval of a random key hidden at each depth of a prompt of each length, per method "
      "(docs/lab.md): a dict of cells (method, length, scale, depth, keys, retrieved), trained_length, seconds");
  // The regimes' positions as the fused attention takes them (ropekit/attention.hpp), for the Python lab's tests:
  // [len(i), len(j)] regime ids and each regime's query and key positions.
  m.def(
      "_regime_table",
      [](py::dict regimes, const std::vector<std::int64_t>& i, const std::vector<std::int64_t>& j) {
        const std::string type = regimes["type"].cast<std::string>();
        PositionRegimes r;
        if (type == "rerope") {
          r = regimes::ReRope{.window = regimes["window"].cast<std::int64_t>()};
        } else if (type == "self_extend") {
          r = regimes::SelfExtend{.window = regimes["window"].cast<std::int64_t>(),
                                  .group = regimes["group"].cast<std::int64_t>()};
        } else if (type == "dca") {
          r = regimes::DualChunk{.chunk_size = regimes["chunk_size"].cast<std::int64_t>(),
                                 .local_size = regimes["local_size"].cast<std::int64_t>()};
        } else {
          throw Error(fmt::format("regimes.type = \"{}\": rerope, self_extend or dca", type));
        }
        validate_regimes(r);
        const int count = regime_count(r);
        py::array_t<std::int8_t> which({i.size(), j.size()});
        py::array_t<std::int64_t> qp({std::size_t(count), i.size()}), kp({std::size_t(count), j.size()});
        for (std::size_t a = 0; a < i.size(); ++a) {
          for (std::size_t b = 0; b < j.size(); ++b) which.mutable_at(a, b) = std::int8_t(regime_of(r, i[a], j[b]));
        }
        for (int g = 0; g < count; ++g) {
          for (std::size_t a = 0; a < i.size(); ++a) qp.mutable_at(g, a) = regime_query_position(r, g, i[a]);
          for (std::size_t b = 0; b < j.size(); ++b) kp.mutable_at(g, b) = regime_key_position(r, g, j[b]);
        }
        return py::make_tuple(which, qp, kp);
      },
      py::arg("regimes"), py::arg("i"), py::arg("j"));
  m.def(
      "eval_methods",
      [] {
        py::list out;
        for (const EvalMethod& e : builtin_methods()) out.append(e.name);
        return out;
      },
      "The lab's built-in method names (orig, pi, ntk, yarn, ...), for eval and passkey's methods=");
}

}  // namespace ropekit::python
