// Hugging Face model directories in the runner (issue 43, first slice: Llama): tiny random-weight checkpoints saved
// by transformers and its own float32 logits for them (tests/data/hf_models/, scripts/golden_hf_models.py), read
// through ropekit's safetensors reader and run by LlamaRunner; and every class of bad input the reader refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <unistd.h>

#include "lab/loader.hpp"
#include "ropekit/model.hpp"
#include "ropekit/ropekit.hpp"

namespace {

namespace fs = std::filesystem;
using ropekit::Error;

const fs::path kModels = fs::path(ROPEKIT_REPO_DIR) / "tests/data/hf_models";

std::vector<char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts);

// Logits within 1e-5 of HF's float32 ones, relative to the position's largest |logit|: both sides compute in float32
// from the same float32 weights (F16/BF16 files: widened exactly on both sides), in a different order of operations
// (OpenBLAS's and ropekit's attention against torch's) — a few ulp of float32 per product through two layers.
void expect_hf_logits(const std::string& name, const ropekit::LlamaModel* edited = nullptr,
                      double* worst_out = nullptr) {
  SCOPED_TRACE(name);
  const fs::path dir = kModels / name;
  const ropekit::LlamaModel loaded = edited != nullptr ? ropekit::LlamaModel{} : ropekit::load_model_file(dir);
  const ropekit::LlamaModel& model = edited != nullptr ? *edited : loaded;
  std::ifstream meta_file(dir / "meta.json");
  const nlohmann::json meta = nlohmann::json::parse(meta_file);
  const std::vector<int> tokens = meta["tokens"].get<std::vector<int>>();
  const std::vector<char> raw = read_bytes(dir / "logits.f32");
  const std::size_t vocab = std::size_t(model.config.vocab_size), n = tokens.size();
  ASSERT_EQ(raw.size(), n * vocab * 4);
  std::vector<float> want(n * vocab), got(n * vocab);
  std::memcpy(want.data(), raw.data(), raw.size());
  std::vector<std::int64_t> positions(n);
  for (std::size_t t = 0; t < n; ++t) positions[t] = std::int64_t(t);
  ropekit::LlamaRunner runner(model, {.capacity = std::int64_t(n)});
  // HF's rotary module picks length-dependent plans (LongRoPE's long factors) from the sequence's length.
  runner.forward(ropekit::Rope(model.rope_layer().spec, ropekit::AngleMode::Accurate, std::int64_t(n)), tokens,
                 positions, got);
  double worst = 0;
  for (std::size_t t = 0; t < n; ++t) {
    float scale = 0, err = 0;
    for (std::size_t v = 0; v < vocab; ++v) {
      scale = std::max(scale, std::fabs(want[t * vocab + v]));
      err = std::max(err, std::fabs(got[t * vocab + v] - want[t * vocab + v]));
    }
    ASSERT_GT(scale, 0.5f) << "position " << t << ": HF's logits are too small to say anything";
    if (worst_out == nullptr) {
      EXPECT_LE(err, 1e-5f * scale) << "position " << t;
    }
    worst = std::max(worst, double(err / scale));
  }
  if (worst_out != nullptr) {  // an edited model: the caller judges the error
    *worst_out = worst;
    return;
  }
  std::printf("%s: %zu positions × %zu logits, worst error %.2e of the position's largest logit\n", name.c_str(), n,
              vocab, worst);
}

TEST(HfModel, ShardedFloat32LlamaEqualsTransformers) {
  expect_hf_logits("llama_f32");
  const ropekit::LlamaModel m = ropekit::load_model_file(kModels / "llama_f32");
  EXPECT_FALSE(m.config.shared_classifier);
  EXPECT_EQ(m.rope.layer().spec.pairing, ropekit::Pairing::Half);
}

TEST(HfModel, Bfloat16LlamaEqualsTransformers) { expect_hf_logits("llama_bf16"); }

// BF16 matrices stay in the file's map (the model holds it), read as their exact float32 widening; norms are float32.
TEST(HfModel, Bfloat16MatricesStayPackedInTheMap) {
  const ropekit::LlamaModel model = ropekit::load_model_file(kModels / "llama_bf16");
  ASSERT_NE(model.storage, nullptr);
  const ropekit::WeightMatrix& wq = model.layers[0].wq;
  ASSERT_TRUE(wq.is_packed());
  EXPECT_EQ(wq.encoding, ropekit::WeightEncoding::BF16);
  EXPECT_EQ(wq.rows, model.config.q_dim());
  EXPECT_EQ(wq.cols, model.config.dim);
  EXPECT_EQ(wq.row_bytes, std::size_t(2 * model.config.dim));
  EXPECT_TRUE(model.token_embedding.is_packed());
  EXPECT_FALSE(model.layers[0].rms_att.empty());
  const std::vector<float> values = wq.to_floats(wq.cols);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint16_t h;
    std::memcpy(&h, wq.packed + 2 * i, 2);
    ASSERT_EQ(values[i], ropekit::bf16_to_float(h)) << i;
  }
  // F32 files are copied: no map is kept.
  EXPECT_EQ(ropekit::load_model_file(kModels / "llama_f32").storage, nullptr);
}

// The same checkpoint read both ways: llama_f32 as safetensors (HF's rows, the half pairing) and as llama.cpp's
// converter writes it (q/k rows permuted for interleaved pairs; read_gguf says Interleaved). Each reader rotates with
// the pairing its file's rows are stored for, so the logits agree — to the float32 rounding of q·k summed in another
// lane order — and both equal transformers'.
TEST(HfModel, SafetensorsAndItsGgufConversionGiveTheSameLogits) {
  const ropekit::LlamaModel hf = ropekit::load_model_file(kModels / "llama_f32");
  const ropekit::LlamaModel gguf = ropekit::load_model_file(kModels / "llama_f32.gguf");
  EXPECT_EQ(hf.rope.layer().spec.pairing, ropekit::Pairing::Half);
  EXPECT_EQ(gguf.rope.layer().spec.pairing, ropekit::Pairing::Interleaved);
  EXPECT_NE(hf.layers[0].wq, gguf.layers[0].wq.to_floats(gguf.config.dim));  // the rows are stored in another order
  EXPECT_EQ(hf.layers[0].wv, gguf.layers[0].wv.to_floats(gguf.config.dim));  // the rest is the same
  // load_model_file maps the GGUF: its F32 matrices are read in place (no copy), the map kept by the model.
  EXPECT_TRUE(gguf.layers[0].wv.is_packed());
  EXPECT_EQ(gguf.layers[0].wv.encoding, ropekit::WeightEncoding::F32);
  EXPECT_NE(gguf.storage, nullptr);
  std::ifstream meta_file(kModels / "llama_f32" / "meta.json");
  const std::vector<int> tokens = nlohmann::json::parse(meta_file)["tokens"].get<std::vector<int>>();
  std::vector<std::int64_t> positions(tokens.size());
  for (std::size_t t = 0; t < tokens.size(); ++t) positions[t] = std::int64_t(t);
  const std::size_t vocab = std::size_t(hf.config.vocab_size);
  std::vector<float> a(tokens.size() * vocab), b(a.size());
  ropekit::LlamaRunner(hf, {.capacity = 64}).forward(ropekit::Rope(hf.rope.layer().spec), tokens, positions, a);
  ropekit::LlamaRunner(gguf, {.capacity = 64}).forward(ropekit::Rope(gguf.rope.layer().spec), tokens, positions, b);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    float scale = 0, err = 0;
    for (std::size_t v = 0; v < vocab; ++v) {
      scale = std::max(scale, std::fabs(a[t * vocab + v]));
      err = std::max(err, std::fabs(a[t * vocab + v] - b[t * vocab + v]));
    }
    EXPECT_LE(err, 1e-5f * scale) << "position " << t;
  }
  // Read with the other pairing, the GGUF's rows give other logits: the pairing is what makes them agree.
  ropekit::Spec wrong = gguf.rope.layer().spec;
  wrong.pairing = ropekit::Pairing::Half;
  ropekit::LlamaRunner(gguf, {.capacity = 64}).forward(ropekit::Rope(wrong), tokens, positions, b);
  float far = 0;
  for (std::size_t i = 0; i < a.size(); ++i) far = std::max(far, std::fabs(a[i] - b[i]));
  EXPECT_GT(far, 0.01f);
}

TEST(HfModel, Llama3ScalingTiedFloat16EqualsTransformers) {
  expect_hf_logits("llama3_tied");
  const ropekit::LlamaModel m = ropekit::load_model_file(kModels / "llama3_tied");
  EXPECT_TRUE(m.config.shared_classifier);
  EXPECT_TRUE(m.classifier.empty());
}

TEST(HfModel, MistralSlidingWindowEqualsTransformers) {
  expect_hf_logits("mistral_window");
  EXPECT_EQ(ropekit::load_model_file(kModels / "mistral_window").config.sliding_window, 16);
}

TEST(HfModel, Qwen2BiasesAndYarnEqualTransformers) {
  expect_hf_logits("qwen2_yarn_bias");
  const ropekit::LlamaModel m = ropekit::load_model_file(kModels / "qwen2_yarn_bias");
  EXPECT_FALSE(m.layers[0].bq.empty());
  EXPECT_TRUE(std::holds_alternative<ropekit::scaling::Yarn>(m.rope.layer().spec.scaling));
}

// use_sliding_window: layer 0 full attention, layer 1 a window of 16 keys (max_window_layers 1), read from the layer
// groups read_config makes; 48 tokens pass the window, and the same model attending fully in every layer does not give
// HF's logits.
TEST(HfModel, Qwen2PerLayerSlidingWindowsEqualTransformers) {
  expect_hf_logits("qwen2_layer_windows");
  ropekit::LlamaModel m = ropekit::load_model_file(kModels / "qwen2_layer_windows");
  EXPECT_EQ(m.layer_windows, (std::vector<std::int64_t>{0, 16}));
  EXPECT_EQ(m.window(0), 0);
  EXPECT_EQ(m.window(1), 16);
  std::ifstream meta_file(kModels / "qwen2_layer_windows" / "meta.json");
  const std::vector<int> tokens = nlohmann::json::parse(meta_file)["tokens"].get<std::vector<int>>();
  std::vector<std::int64_t> positions(tokens.size());
  for (std::size_t t = 0; t < tokens.size(); ++t) positions[t] = std::int64_t(t);
  const std::size_t vocab = std::size_t(m.config.vocab_size);
  const ropekit::Rope rope(m.rope.layer("full_attention").spec);
  std::vector<float> windowed(tokens.size() * vocab), full(tokens.size() * vocab);
  ropekit::LlamaRunner(m, {.capacity = 64}).forward(rope, tokens, positions, windowed);
  m.layer_windows.clear();
  ropekit::LlamaRunner(m, {.capacity = 64}).forward(rope, tokens, positions, full);
  // Within the window the two agree; past it (position 16 on) layer 1's keys differ.
  float before = 0, after = 0;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    for (std::size_t v = 0; v < vocab; ++v) {
      const float d = std::fabs(windowed[t * vocab + v] - full[t * vocab + v]);
      (t < 16 ? before : after) = std::max(t < 16 ? before : after, d);
    }
  }
  EXPECT_EQ(before, 0.0f);
  EXPECT_GT(after, 1e-2f);
}

// Gemma 3's text model: a local layer (window 16, its own θ = 1e4) and a global one (θ = 1e6, linear factor 2: the
// model's RoPE, which a lab method would replace), (1 + w) norms — four per layer and q/k per head —, embeddings × √64,
// GeGLU with gelu's tanh form, the softmax scale query_pre_attn_scalar^-0.5 = 24^-0.5 (not head_dim 32's).
TEST(HfModel, Gemma3LocalAndGlobalLayersEqualTransformers) {
  expect_hf_logits("gemma3_local_global");
  const ropekit::LlamaModel m = ropekit::load_model_file(kModels / "gemma3_local_global");
  EXPECT_EQ(m.rope_layer().layer_type, "full_attention");
  EXPECT_EQ(m.rope_layer().spec.base, 1e6);
  ASSERT_EQ(m.layer_specs.size(), 2u);
  ASSERT_TRUE(m.layer_specs[0].has_value());
  EXPECT_EQ(m.layer_specs[0]->base, 1e4);
  EXPECT_FALSE(m.layer_specs[1].has_value());
  EXPECT_EQ(m.layer_windows, (std::vector<std::int64_t>{16, 0}));
  EXPECT_TRUE(m.config.gelu_tanh);
  EXPECT_EQ(m.config.embed_scale, 8.0f);
  EXPECT_DOUBLE_EQ(m.config.softmax_scale, 1.0 / std::sqrt(24.0));
  EXPECT_TRUE(m.config.shared_classifier);
  EXPECT_EQ(m.layers[0].rms_post_ffn.size(), 64u);
  // Each Gemma part is what the comparison checks: without it the logits leave HF's by far more than the bound.
  const auto without = [&](const char* what, const std::function<void(ropekit::LlamaModel&)>& edit) {
    ropekit::LlamaModel e = m;
    edit(e);
    double worst = 0;
    expect_hf_logits("gemma3_local_global", &e, &worst);
    EXPECT_GT(worst, 1e-3) << "without " << what;
  };
  without("the local layer's own RoPE", [](ropekit::LlamaModel& e) { e.layer_specs.clear(); });
  without("the local layer's window", [](ropekit::LlamaModel& e) { e.layer_windows.clear(); });
  without("GeGLU", [](ropekit::LlamaModel& e) { e.config.gelu_tanh = false; });
  without("the embedding scale", [](ropekit::LlamaModel& e) { e.config.embed_scale = 0; });
  without("query_pre_attn_scalar", [](ropekit::LlamaModel& e) { e.config.softmax_scale = 0; });
  without("the output norms", [](ropekit::LlamaModel& e) {
    for (auto& l : e.layers) l.rms_post_att.clear(), l.rms_post_ffn.clear();
  });
  // The lab on it: "orig" is the model's own RoPE on the global layer (the logits above, so a finite perplexity), a
  // method replaces that RoPE only (the local layer keeps its own); the attention probe, which models one RoPE, no
  // window and 1/sqrt(head_dim) in every layer, refuses the model rather than report other layers' attention.
  std::ifstream meta_file(kModels / "gemma3_local_global" / "meta.json");
  const std::vector<int> tokens = nlohmann::json::parse(meta_file)["tokens"].get<std::vector<int>>();
  ropekit::EvalOptions o;
  o.window_size = 48;
  o.windows = 1;
  o.lengths = {48};
  o.buckets = {0, 16, 32};
  o.trained_length = 16;
  o.methods = ropekit::parse_methods("orig,yarn");
  const ropekit::EvalResult r = ropekit::evaluate(m, tokens, o);
  ASSERT_FALSE(r.rows.empty());
  double orig = 0, yarn = 0;
  for (const ropekit::EvalRow& row : r.rows) {
    EXPECT_TRUE(std::isfinite(row.ppl)) << row.method;
    (row.method == "orig" ? orig : yarn) += row.mean_nll;
  }
  EXPECT_NE(orig, yarn);  // the method did change the global layer's rotation
  o.attention_stats = true;
  expect_error([&] { ropekit::evaluate(m, tokens, o); },
               {"attention probe", "own RoPEs, windows, softmax scale or soft-capping"});
}

// Gemma 2: a sliding layer (16 keys) then a full one, one RoPE (θ 1e4), the attention's logits soft-capped at 2 and the
// output's at 5 — caps small enough to bend most logits —, (1 + w) norms, four per layer, embeddings × √64, GeGLU,
// query_pre_attn_scalar 24.
TEST(HfModel, Gemma2SoftCappingEqualsTransformers) {
  expect_hf_logits("gemma2_softcap");
  const ropekit::LlamaModel m = ropekit::load_model_file(kModels / "gemma2_softcap");
  EXPECT_EQ(m.config.attn_softcap, 2.0);
  EXPECT_EQ(m.config.final_softcap, 5.0);
  EXPECT_TRUE(m.layer_specs.empty());  // one RoPE for both layer types
  EXPECT_EQ(m.layer_windows, (std::vector<std::int64_t>{16, 0}));
  for (const auto& [what, edit] : std::vector<std::pair<const char*, std::function<void(ropekit::LlamaModel&)>>>{
           {"the attention's cap", [](ropekit::LlamaModel& e) { e.config.attn_softcap = 0; }},
           {"the output's cap", [](ropekit::LlamaModel& e) { e.config.final_softcap = 0; }}}) {
    ropekit::LlamaModel e = m;
    edit(e);
    double worst = 0;
    expect_hf_logits("gemma2_softcap", &e, &worst);
    EXPECT_GT(worst, 1e-3) << "without " << what;
  }
}

TEST(HfModel, Qwen3QkNormAndItsOwnHeadSizeEqualTransformers) {
  expect_hf_logits("qwen3_qknorm");
  const ropekit::LlamaModel m = ropekit::load_model_file(kModels / "qwen3_qknorm");
  EXPECT_EQ(m.config.head_dim(), 32);
  EXPECT_EQ(m.config.q_dim(), 128);  // not the hidden size, 64
  EXPECT_EQ(m.layers[0].q_norm.size(), 32u);
}

TEST(HfModel, SmolLm3NopeLayerEqualsTransformers) {
  expect_hf_logits("smollm3_nope");
  const ropekit::LlamaModel m = ropekit::load_model_file(kModels / "smollm3_nope");
  EXPECT_EQ(m.nope_layers, (std::vector<std::uint8_t>{0, 1}));
  EXPECT_TRUE(m.config.shared_classifier);
  // Decoding token by token (the NoPE layer's keys accumulate across calls) gives the prefill's logits.
  std::ifstream meta_file(kModels / "smollm3_nope" / "meta.json");
  const std::vector<int> tokens = nlohmann::json::parse(meta_file)["tokens"].get<std::vector<int>>();
  const std::size_t vocab = std::size_t(m.config.vocab_size);
  std::vector<std::int64_t> positions(tokens.size());
  for (std::size_t t = 0; t < tokens.size(); ++t) positions[t] = std::int64_t(t);
  const ropekit::Rope rope(m.rope.layer().spec);
  std::vector<float> prefill(tokens.size() * vocab), step(vocab);
  ropekit::LlamaRunner(m, {.capacity = 64}).forward(rope, tokens, positions, prefill);
  ropekit::LlamaRunner decode(m, {.capacity = 64});
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    decode.forward(rope, std::span<const int>(&tokens[t], 1), std::span<const std::int64_t>(&positions[t], 1), step);
    float scale = 0, err = 0;
    for (std::size_t v = 0; v < vocab; ++v) {
      scale = std::max(scale, std::fabs(prefill[t * vocab + v]));
      err = std::max(err, std::fabs(step[v] - prefill[t * vocab + v]));
    }
    EXPECT_LE(err, 1e-5f * scale) << "token " << t;
  }
}

TEST(HfModel, Phi3FusedProjectionsAndLongRopeEqualTransformers) {
  expect_hf_logits("phi3_longrope");
  const ropekit::LlamaModel m = ropekit::load_model_file(kModels / "phi3_longrope");
  EXPECT_TRUE(std::holds_alternative<ropekit::scaling::LongRope>(m.rope.layer().spec.scaling));
  EXPECT_EQ(m.layers[0].wk.size(), 32u * 64u);  // the fused projection's k rows
  // 48 tokens past the original 16: the long factors; with the short ones the logits differ.
  EXPECT_TRUE(ropekit::Rope(m.rope.layer().spec, ropekit::AngleMode::Accurate, 48).plan().uses_long_factors);
}

// ---- bad input ------------------------------------------------------------------------------------------------

// A copy of a model directory to spoil.
struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& model) {
    dir = fs::temp_directory_path() / ("ropekit-hf-" + model + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::copy(kModels / model, dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  void edit_config(const std::function<void(nlohmann::json&)>& edit) const {
    std::ifstream in(dir / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    in.close();
    edit(j);
    std::ofstream(dir / "config.json") << j.dump();
  }
};

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// What the runner's Gemma is not (another activation, bidirectional attention) and caps that are not caps.
TEST(HfModel, RefusesGemmaSettingsTheRunnerDoesNotHave) {
  const Scratch s("gemma3_local_global");
  s.edit_config([](nlohmann::json& j) { j["attn_logit_softcapping"] = -50.0; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"attn_logit_softcapping = -50", "positive number or null"});
  s.edit_config([](nlohmann::json& j) { j["attn_logit_softcapping"] = 50.0, j["final_logit_softcapping"] = "30"; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"final_logit_softcapping = \"30\""});
  s.edit_config([](nlohmann::json& j) { j["final_logit_softcapping"] = 30.0; });
  EXPECT_EQ(ropekit::load_model_file(s.dir).config.attn_softcap, 50.0);  // Gemma 3 takes caps where a config sets them
  s.edit_config(
      [](nlohmann::json& j) { j["attn_logit_softcapping"] = nullptr, j["final_logit_softcapping"] = nullptr; });
  s.edit_config([](nlohmann::json& j) { j["final_logit_softcapping"] = nullptr, j["hidden_activation"] = "gelu"; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"hidden_activation = \"gelu\"", "gelu_pytorch_tanh"});
  s.edit_config(
      [](nlohmann::json& j) { j["hidden_activation"] = "gelu_pytorch_tanh", j["use_bidirectional_attention"] = true; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"use_bidirectional_attention = true"});
  s.edit_config([](nlohmann::json& j) {
    j["use_bidirectional_attention"] = false, j["layer_types"] = {"full_attention", "sliding_attention"};
    j["rope_parameters"]["sliding_attention"]["rope_theta"] = 20000.0;
  });
  EXPECT_NO_THROW(ropekit::load_model_file(s.dir));  // local layers may sit anywhere
}

TEST(HfModel, RefusesOtherArchitecturesAndSettingsNamingThem) {
  const Scratch s("llama_bf16");
  // Keys of the wrong JSON type: errors naming them (not a JSON library's exception).
  s.edit_config([](nlohmann::json& j) { j["model_type"] = 7; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"\"model_type\" = 7", "must be a string"});
  s.edit_config([](nlohmann::json& j) { j["model_type"] = "qwen2", j["use_sliding_window"] = "yes"; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"use_sliding_window = \"yes\"", "true or false"});
  s.edit_config([](nlohmann::json& j) { j.erase("use_sliding_window"), j["model_type"] = "falcon"; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"config.json", "model_type = \"falcon\""});
  s.edit_config([](nlohmann::json& j) { j["model_type"] = "qwen2"; });  // a Qwen2 needs its biases
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"self_attn.q_proj.bias", "missing"});
  s.edit_config([](nlohmann::json& j) { j["model_type"] = "llama", j["attention_bias"] = true; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"attention_bias = true"});
  s.edit_config([](nlohmann::json& j) { j.erase("attention_bias"), j["hidden_size"] = 80; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"model.embed_tokens.weight", "[128, 64]", "[128, 80]"});
  s.edit_config([](nlohmann::json& j) { j["hidden_size"] = 64, j["intermediate_size"] = 100; });
  expect_error([&] { ropekit::load_model_file(s.dir); },
               {"model.safetensors", "model.layers.0.mlp.gate_proj.weight", "[96, 64]", "[100, 64]"});
  s.edit_config([](nlohmann::json& j) { j["intermediate_size"] = 96, j["num_hidden_layers"] = -1; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"num_hidden_layers", "-1"});
  s.edit_config([](nlohmann::json& j) { j["num_hidden_layers"] = 3; });
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"model.layers.2.", "missing"});
  s.edit_config([](nlohmann::json& j) { j["num_hidden_layers"] = 2, j["head_dim"] = 32; });  // 4 × 32 = q's width
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"self_attn.q_proj.weight", "[64, 64]", "[128, 64]"});
  s.edit_config([](nlohmann::json& j) { j["head_dim"] = 16, j["model_type"] = "qwen3"; });  // needs its q/k norms
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"self_attn.q_norm.weight", "missing"});
}

TEST(HfModel, RefusesBrokenSafetensorsNamingFileTensorAndBytes) {
  const Scratch s("llama_bf16");
  const fs::path file = s.dir / "model.safetensors";
  const std::vector<char> good = read_bytes(file);
  std::uint64_t header = 0;
  std::memcpy(&header, good.data(), 8);
  // Truncated inside the data: the last tensor's offsets run past the file.
  write_bytes(file, std::vector<char>(good.begin(), good.end() - 100));
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"model.safetensors", "data_offsets", "outside the data"});
  // A header length past the file.
  std::vector<char> bad = good;
  const std::uint64_t huge = good.size();
  std::memcpy(bad.data(), &huge, 8);
  write_bytes(file, bad);
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"header length at byte 0", "past the file"});
  // A header that is not JSON.
  bad = good;
  bad[8] = '[';
  bad[9] = '}';
  write_bytes(file, bad);
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"JSON header", "does not parse"});
  // A dtype the runner does not read, and a byte count that disagrees with the shape.
  const std::string text(good.data() + 8, std::size_t(header));
  const std::size_t at = text.find("\"BF16\"");
  ASSERT_NE(at, std::string::npos);
  bad = good;
  std::memcpy(bad.data() + 8 + at, "\"I16\" ", 6);
  write_bytes(file, bad);
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"dtype I16", "F32, F16 and BF16"});
  bad = good;
  std::memcpy(bad.data() + 8 + at, "\"F32\" ", 6);
  write_bytes(file, bad);
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"values of F32 need", "bytes"});
  // A non-finite weight: named with its element and byte.
  bad = good;
  const auto parsed = ropekit::detail::parse_safetensors(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(good.data()), good.size()), "x");
  const auto& norm = parsed.tensors.at("model.norm.weight");
  bad[std::size_t(norm.offset) + 2] = char(0x80);
  bad[std::size_t(norm.offset) + 3] = char(0x7f);  // bf16 0x7f80: +inf
  write_bytes(file, bad);
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"model.norm.weight", "element 1", "must be finite"});
  // The same in a matrix kept packed in the map (checked at load all the same): element 70 of layer 0's v rows.
  bad = good;
  const auto& wv = parsed.tensors.at("model.layers.0.self_attn.v_proj.weight");
  bad[std::size_t(wv.offset) + 140] = char(0x80);
  bad[std::size_t(wv.offset) + 141] = char(0xff);  // bf16 0xff80: −inf
  write_bytes(file, bad);
  expect_error([&] { ropekit::load_model_file(s.dir); },
               {"model.layers.0.self_attn.v_proj.weight", "element 70", "at byte " + std::to_string(wv.offset + 140),
                "-inf", "must be finite"});
  // No weights at all.
  fs::remove(file);
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"neither model.safetensors"});
}

TEST(HfModel, RefusesABadShardIndex) {
  const Scratch s("llama_f32");
  std::ifstream in(s.dir / "model.safetensors.index.json");
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  j["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  std::ofstream(s.dir / "model.safetensors.index.json") << j.dump();
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"weight_map[\"model.norm.weight\"]", "not a file in"});
  // A shard that does not hold it.
  const std::string first = "model-00001-of-00006.safetensors";
  const std::string other = j["weight_map"]["model.norm.weight"] == first ? "model-00002-of-00006.safetensors" : first;
  j["weight_map"]["model.norm.weight"] = other;
  std::ofstream(s.dir / "model.safetensors.index.json") << j.dump();
  expect_error([&] { ropekit::load_model_file(s.dir); }, {"model.norm.weight", "the index says it is"});
}

}  // namespace
