// config.json reader and presets.
//
// Every golden entry already goes through read_config (golden_test.cpp). Here: each preset gives the
// Spec its model card says, and the presets that have a Hugging Face golden counterpart give HF's
// inv_freq (within 2 float32 ulp, as the plan's contract) and attention scaling; every spelling HF
// accepts maps to the same Spec; every class of bad input throws an Error naming the key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "expect_error.hpp"
#include "golden.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using nlohmann::json;
using ropekit::Error;
using ropekit::Pairing;
using ropekit::Spec;
namespace scaling = ropekit::scaling;

json preset_json(std::string_view name) {
  for (const ropekit::Preset& p : ropekit::presets()) {
    if (p.name == name) return json::parse(p.config_json);
  }
  throw std::runtime_error("no preset " + std::string(name));
}

ropekit::ModelPositions read(const json& config, ropekit::ConfigOptions options = {}) {
  return ropekit::read_config(config.dump(), options, "test.json");
}

// Same Spec: every field, and the same plan bit for bit (which covers the scaling parameters).
void expect_same_spec(const Spec& actual, const Spec& expected) {
  EXPECT_EQ(actual.head_dim, expected.head_dim);
  EXPECT_EQ(actual.rotary_dim, expected.rotary_dim);
  EXPECT_EQ(actual.base, expected.base);
  EXPECT_EQ(actual.pairing, expected.pairing);
  EXPECT_EQ(ropekit::rope_type_name(actual.scaling), ropekit::rope_type_name(expected.scaling));
  ASSERT_EQ(actual.mrope.has_value(), expected.mrope.has_value());
  if (expected.mrope) {
    EXPECT_EQ(actual.mrope->sections, expected.mrope->sections);
    EXPECT_EQ(actual.mrope->layout, expected.mrope->layout);
  }
  for (std::optional<std::int64_t> len : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{1 << 20}}) {
    const ropekit::Plan a = ropekit::make_plan(actual, len), e = ropekit::make_plan(expected, len);
    EXPECT_EQ(a.inv_freq, e.inv_freq);
    EXPECT_EQ(a.cos_sin_scale, e.cos_sin_scale);
    EXPECT_EQ(a.softmax_scale_mult, e.softmax_scale_mult);
  }
}

Spec make(int head_dim, int rotary_dim, double base, Pairing pairing, ropekit::Scaling s = scaling::None{}) {
  Spec spec;
  spec.head_dim = head_dim;
  spec.rotary_dim = rotary_dim;
  spec.base = base;
  spec.pairing = pairing;
  spec.scaling = std::move(s);
  return spec;
}

scaling::Yarn yarn(double factor, std::int64_t original) {
  scaling::Yarn y{};
  y.factor = factor;
  y.original_max_position_embeddings = original;
  return y;
}

TEST(Presets, EachGivesTheSpecOfItsModelCard) {
  const auto& P = Pairing::Half;
  scaling::Yarn deepseek = yarn(40, 4096);
  deepseek.mscale = 1.0;
  deepseek.mscale_all_dim = 1.0;
  Spec qwen2_vl = make(128, 128, 1e6, P);
  qwen2_vl.mrope = ropekit::MRope{{16, 24, 24}, ropekit::MRopeLayout::Sectioned};
  const std::map<std::string, Spec> expected{
      {"llama-3.1-8b", make(128, 128, 5e5, P, scaling::Llama3{8, 1, 4, 8192})},
      {"llama-3.2-1b", make(64, 64, 5e5, P, scaling::Llama3{32, 1, 4, 8192})},
      {"mistral-7b-instruct-v0.2", make(128, 128, 1e6, P)},
      {"qwen2.5-7b-instruct-yarn4", make(128, 128, 1e6, P, yarn(4, 32768))},
      {"qwen2-vl-7b", qwen2_vl},
      {"deepseek-v3", make(64, 64, 1e4, Pairing::Interleaved, deepseek)},
      {"gpt-neox-20b", make(96, 24, 1e4, P)},
      {"gpt-j-6b", make(256, 64, 1e4, Pairing::Interleaved)},
  };
  EXPECT_EQ(ropekit::presets().size(), 10u);
  for (const auto& [name, spec] : expected) {
    SCOPED_TRACE(name);
    const ropekit::ModelPositions model = ropekit::read_preset(name);
    ASSERT_EQ(model.groups.size(), 1u);
    expect_same_spec(model.layer().spec, spec);
    EXPECT_TRUE(model.warnings.empty()) << model.warnings.front();
  }
  const ropekit::ModelPositions ds = ropekit::read_preset("deepseek-v3");
  EXPECT_EQ(ds.layer().rope_offset, 128);  // rope part after the 128 nope lanes
  EXPECT_EQ(ds.qk_head_dim, 192);
  EXPECT_NEAR(ropekit::make_plan(ds.layer().spec).softmax_scale_mult, 1.8738542, 1e-7);
  EXPECT_EQ(ropekit::make_plan(ds.layer().spec).cos_sin_scale, 1.0);
}

TEST(Presets, Gemma3HasLocalAndGlobalLayers) {
  const ropekit::ModelPositions model = ropekit::read_preset("gemma-3-4b");
  ASSERT_EQ(model.groups.size(), 2u);
  expect_same_spec(model.layer("sliding_attention").spec, make(256, 256, 1e4, Pairing::Half));
  expect_same_spec(model.layer("full_attention").spec, make(256, 256, 1e6, Pairing::Half, scaling::Linear{8}));
  ASSERT_EQ(model.layer_types.size(), 34u);
  EXPECT_EQ(std::count(model.layer_types.begin(), model.layer_types.end(), "full_attention"), 5);
  EXPECT_EQ(model.layer_types[5], "full_attention");
  EXPECT_THROW(model.layer(), Error);  // ambiguous without a layer type
  EXPECT_THROW(model.layer("global"), Error);
}

// Presets with a Hugging Face golden counterpart reproduce HF's inv_freq and attention scaling.
void expect_golden(const Spec& spec, std::optional<std::int64_t> seq_len, const json& expected_inv,
                   double expected_scaling) {
  const ropekit::Plan plan = ropekit::make_plan(spec, seq_len);
  const auto inv = expected_inv.get<std::vector<double>>();
  ASSERT_EQ(plan.inv_freq.size(), inv.size());
  for (std::size_t i = 0; i < inv.size(); ++i) {
    EXPECT_LE(golden::ulp_distance(float(plan.inv_freq[i]), float(inv[i])), 2) << "pair " << i;
  }
  EXPECT_NEAR(plan.cos_sin_scale, expected_scaling, 1e-6 * expected_scaling);
}

const json& entry_with_id(const json& file, const std::string& id) {
  for (const json& e : file["entries"]) {
    if (e["id"] == id) return e;
  }
  throw std::runtime_error("no golden entry " + id);
}

TEST(Presets, MatchHuggingFaceGoldenVectors) {
  const json e2e = golden::load("e2e.json");
  for (const auto& [preset, id] : {std::pair{"llama-3.1-8b", "e2e/Llama-3.1-8B/llama3"},
                                   std::pair{"mistral-7b-instruct-v0.2", "e2e/Mistral-7B-Instruct-v0.2/default"}}) {
    SCOPED_TRACE(preset);
    const json& call = entry_with_id(e2e, id)["calls"][0];
    expect_golden(ropekit::read_preset(preset).layer().spec, {}, call["inv_freq_used"],
                  call["attention_scaling_used"].get<double>());
  }
  const json llama3 = golden::load("llama3.json");
  const json& l32 = entry_with_id(llama3, "llama3/f32/lo1-hi4/omp8192/hd64/prf1.0/theta500000");
  expect_golden(ropekit::read_preset("llama-3.2-1b").layer().spec, {}, l32["inv_freq"], 1.0);

  const json longrope = golden::load("longrope.json");
  const Spec phi3 = ropekit::read_preset("phi-3-mini-128k-instruct").layer().spec;
  for (const char* id : {"longrope/phi3-mini-128k/seqNone", "longrope/phi3-mini-128k/seq4096",
                         "longrope/phi3-mini-128k/seq4097", "longrope/phi3-mini-128k/seq131072"}) {
    SCOPED_TRACE(id);
    const json& e = entry_with_id(longrope, id);
    expect_golden(phi3, golden::seq_len_of(e), e["inv_freq"], e["attention_scaling"].get<double>());
  }

  const json yarn_file = golden::load("yarn.json");
  const json& ds = entry_with_id(yarn_file, "yarn/f40/attn[mscale=1,mscale_all_dim=1]/hd64/theta10000");
  expect_golden(ropekit::read_preset("deepseek-v3").layer().spec, {}, ds["inv_freq"],
                ds["attention_scaling"].get<double>());
}

const json kLlama31 = {{"model_type", "llama"},
                       {"hidden_size", 4096},
                       {"num_attention_heads", 32},
                       {"max_position_embeddings", 131072},
                       {"rope_theta", 500000.0},
                       {"rope_scaling",
                        {{"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192},
                         {"rope_type", "llama3"}}}};

TEST(ConfigSpellings, V5RopeParametersEqualLegacyRopeScaling) {
  json v5 = kLlama31;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5["rope_parameters"] = kLlama31["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  expect_same_spec(read(v5).layer().spec, read(kLlama31).layer().spec);

  json legacy_type = kLlama31;  // "type" instead of "rope_type"
  legacy_type["rope_scaling"].erase("rope_type");
  legacy_type["rope_scaling"]["type"] = "llama3";
  expect_same_spec(read(legacy_type).layer().spec, read(kLlama31).layer().spec);

  json explicit_head = kLlama31;
  explicit_head["head_dim"] = 128;
  explicit_head["hidden_size"] = 1000;  // head_dim wins over hidden_size / num_attention_heads
  expect_same_spec(read(explicit_head).layer().spec, read(kLlama31).layer().spec);
}

TEST(ConfigSpellings, SuIsLongRopeAndTopLevelOriginalWins) {
  const json phi = preset_json("phi-3-mini-128k-instruct");
  json su = phi;
  su["rope_scaling"]["type"] = "su";
  expect_same_spec(read(su).layer().spec, read(phi).layer().spec);
  // HF: the top-level original_max_position_embeddings (Phi-3) takes priority over the dict's.
  json both = phi;
  both["rope_scaling"]["original_max_position_embeddings"] = 8192;
  const ropekit::ModelPositions model = read(both);
  const auto& lr = std::get<scaling::LongRope>(model.layer().spec.scaling);
  EXPECT_EQ(lr.original_max_position_embeddings, 4096);
  EXPECT_EQ(lr.factor, 32.0);  // max_position_embeddings / original
}

TEST(ConfigSpellings, PartialRotaryKeys) {
  const json base = {{"hidden_size", 1024}, {"num_attention_heads", 8}, {"max_position_embeddings", 4096}};
  json neox = base;
  neox["model_type"] = "gpt_neox";
  neox["rotary_pct"] = 0.25;
  EXPECT_EQ(read(neox).layer().spec.rotary_dim, 32);
  json phi = base;
  phi["model_type"] = "phi";
  phi["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(read(phi).layer().spec.rotary_dim, 64);
  phi.erase("partial_rotary_factor");
  phi["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.75}};
  EXPECT_EQ(read(phi).layer().spec.rotary_dim, 96);
  json gptj = {{"model_type", "gptj"}, {"n_embd", 4096}, {"n_head", 16}, {"rotary_dim", 64}};
  EXPECT_EQ(read(gptj).layer().spec.rotary_dim, 64);
  EXPECT_EQ(read(gptj).layer().spec.pairing, Pairing::Interleaved);

  // Llama's default RoPE ignores partial_rotary_factor (as HF), and says so.
  json llama = base;
  llama["model_type"] = "llama";
  llama["partial_rotary_factor"] = 0.5;
  const ropekit::ModelPositions m = read(llama);
  EXPECT_EQ(m.layer().spec.rotary_dim, 128);
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_NE(m.warnings[0].find("partial_rotary_factor = 0.5 is ignored"), std::string::npos) << m.warnings[0];
}

TEST(ConfigSpellings, Gemma3V5NestedParametersEqualLegacy) {
  const json legacy = preset_json("gemma-3-4b");
  json v5 = legacy["text_config"];
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5.erase("rope_local_base_freq");
  v5.erase("sliding_window_pattern");
  v5["layer_types"] = json::array();
  for (int i = 0; i < 34; ++i) v5["layer_types"].push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  v5["rope_parameters"] = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                           {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}}};
  const ropekit::ModelPositions a = read(legacy), b = read(v5);
  EXPECT_EQ(a.layer_types, b.layer_types);
  for (const char* t : {"sliding_attention", "full_attention"}) {
    SCOPED_TRACE(t);
    expect_same_spec(b.layer(t).spec, a.layer(t).spec);
  }
  // First-use order follows layer_types: layer 0 is sliding.
  EXPECT_EQ(b.groups[0].layer_type, "sliding_attention");
}

// transformers 5.15's standardize_rope_params treats a per-layer-type nesting whose keys are not all the model's layer
// types (OLMo 3 whose layers are all sliding: keys sliding and full, layer types sliding only) as one global dictionary
// and adds "rope_type" and "rope_theta": null beside the nested ones; the rotary module still reads
// rope_parameters[layer_type]. The nesting is what counts (issue 61: patch() on OLMo 3 found θ 1e4 read for 5e5).
TEST(ConfigSpellings, NestedParametersBesideLeftoverScalars) {
  const json config = {{"model_type", "olmo3"},
                       {"hidden_size", 64},
                       {"num_attention_heads", 4},
                       {"num_hidden_layers", 2},
                       {"layer_types", {"sliding_attention", "sliding_attention"}},
                       {"sliding_window", 8},
                       {"rope_parameters",
                        {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 500000.0}}},
                         {"full_attention", {{"rope_type", "default"}, {"rope_theta", 500000.0}}},
                         {"rope_type", "default"},
                         {"rope_theta", nullptr}}}};
  const ropekit::ModelPositions m = read(config);
  ASSERT_EQ(m.groups.size(), 1u);
  EXPECT_EQ(m.groups[0].layer_type, "sliding_attention");
  EXPECT_EQ(m.groups[0].spec.base, 500000.0);
}

// DBRX (and MPT) spell max_position_embeddings max_seq_len (transformers' attribute_map): dynamic NTK on a DBRX config
// scales past it instead of failing for a missing max_position_embeddings.
TEST(ConfigSpellings, MaxSeqLenIsMaxPositionEmbeddings) {
  const ropekit::ModelPositions m = read({{"model_type", "dbrx"},
                                          {"d_model", 64},
                                          {"n_heads", 4},
                                          {"max_seq_len", 24},
                                          {"rope_parameters", {{"rope_type", "dynamic"}, {"factor", 2.0}}}});
  EXPECT_EQ(m.max_position_embeddings, 24);
  const auto* dynamic = std::get_if<ropekit::scaling::DynamicNtk>(&m.layer().spec.scaling);
  ASSERT_NE(dynamic, nullptr);
  EXPECT_EQ(dynamic->max_position_embeddings, 24);
}

TEST(ConfigSpellings, MRopeSectionsAndTextConfig) {
  // Qwen3-VL: parameters under text_config, interleaved M-RoPE.
  const json qwen3_vl = {
      {"model_type", "qwen3_vl"},
      {"text_config",
       {{"model_type", "qwen3_vl_text"},
        {"hidden_size", 4096},
        {"num_attention_heads", 32},
        {"head_dim", 128},
        {"max_position_embeddings", 262144},
        {"rope_theta", 5000000},
        {"rope_scaling", {{"rope_type", "default"}, {"mrope_section", {24, 20, 20}}, {"mrope_interleaved", true}}}}}};
  const Spec s = read(qwen3_vl).layer().spec;
  ASSERT_TRUE(s.mrope);
  EXPECT_EQ(s.mrope->sections, (std::vector<int>{24, 20, 20}));
  EXPECT_EQ(s.mrope->layout, ropekit::MRopeLayout::Interleaved);
  EXPECT_EQ(s.base, 5e6);
  // Qwen2-VL's legacy {"type": "mrope"} is default RoPE with sections.
  const Spec q2 = ropekit::read_preset("qwen2-vl-7b").layer().spec;
  EXPECT_EQ(q2.mrope->layout, ropekit::MRopeLayout::Sectioned);
  EXPECT_TRUE(std::holds_alternative<scaling::None>(q2.scaling));
}

TEST(ConfigSpellings, DeepSeekRopeInterleaveAndPairingOverride) {
  json ds = preset_json("deepseek-v3");
  EXPECT_EQ(read(ds).layer().spec.pairing, Pairing::Interleaved);
  ds["rope_interleave"] = false;
  EXPECT_EQ(read(ds).layer().spec.pairing, Pairing::Half);
  ropekit::ConfigOptions force;
  force.pairing = Pairing::Interleaved;
  EXPECT_EQ(read(ds, force).layer().spec.pairing, Pairing::Interleaved);
  // An unknown model_type with Llama-style keys is read as a Llama, with a warning naming the
  // assumption; --pairing overrides the pairing.
  json custom = kLlama31;
  custom["model_type"] = "my_new_model";
  const ropekit::ModelPositions assumed = read(custom);
  EXPECT_EQ(assumed.layer().spec.pairing, Pairing::Half);
  ASSERT_EQ(assumed.warnings.size(), 1u);
  EXPECT_NE(assumed.warnings[0].find("model_type my_new_model is not in ropekit's model table"), std::string::npos)
      << assumed.warnings[0];
  EXPECT_NE(assumed.warnings[0].find("read as Hugging Face reads a Llama"), std::string::npos);
  EXPECT_EQ(read(custom, force).layer().spec.pairing, Pairing::Interleaved);
}

// DeepSeek V3.2 and GLM-5 (DSA): a second rotary per layer, the indexer's, with the attention's angles on the first
// qk_rope_head_dim of index_head_dim lanes — rotate_half for V3.2 (DeepseekV32Indexer: "NON-interleaved ... unlike the
// main MLA attention"), interleaved for GLM-5, and only on GLM-5's "full" indexer layers (GlmMoeDsaConfig's
// indexer_types: index_topk_pattern, else index_topk_freq / index_skip_topk_offset). Both attentions are always
// interleaved in transformers 5.15 (apply_rotary_pos_emb_interleave; rope_interleave is not read).
TEST(ConfigFamilies, DsaIndexerRopeIsASecondRopePerLayer) {
  json v32 = {{"model_type", "deepseek_v32"},
              {"num_hidden_layers", 3},
              {"hidden_size", 7168},
              {"num_attention_heads", 128},
              {"qk_rope_head_dim", 64},
              {"qk_nope_head_dim", 128},
              {"index_head_dim", 128},
              {"rope_theta", 10000},
              {"rope_interleave", false},
              {"rope_scaling", {{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096}}}};
  const ropekit::ModelPositions m = read(v32);
  ASSERT_EQ(m.groups.size(), 1u);
  const ropekit::LayerPositions& g = m.layer();
  EXPECT_EQ(g.spec.pairing, Pairing::Interleaved);
  ASSERT_TRUE(g.indexer.has_value());
  EXPECT_EQ(g.indexer->spec.pairing, Pairing::Half);
  EXPECT_EQ(g.indexer->rope_offset, 0);
  EXPECT_EQ(g.indexer->qk_head_dim, 128);
  Spec same = g.indexer->spec;
  same.pairing = g.spec.pairing;
  EXPECT_EQ(same, g.spec);  // the same angles
  EXPECT_EQ(ropekit::make_plan(g.indexer->spec).inv_freq, ropekit::make_plan(g.spec).inv_freq);

  json glm5 = {{"model_type", "glm_moe_dsa"}, {"num_hidden_layers", 6}, {"hidden_size", 6144},
               {"num_attention_heads", 64},   {"qk_rope_head_dim", 64}, {"qk_nope_head_dim", 192},
               {"rope_theta", 1e6},           {"index_topk_freq", 2}};
  const ropekit::ModelPositions five = read(glm5);
  ASSERT_EQ(five.groups.size(), 2u);
  EXPECT_EQ(five.layer("rope_indexer").layers, (std::vector<int>{0, 1, 3, 5}));  // HF: full, full, shared, full, ...
  EXPECT_EQ(five.layer("rope_indexer").indexer->spec.pairing, Pairing::Interleaved);
  EXPECT_EQ(five.layer("rope_indexer").indexer->qk_head_dim, 128);  // index_head_dim's default
  EXPECT_FALSE(five.layer("rope").indexer.has_value());
  glm5["index_topk_pattern"] = "FSSFFF";
  EXPECT_EQ(read(glm5).layer("rope_indexer").layers, (std::vector<int>{0, 3, 4, 5}));
  glm5["index_topk_pattern"] = "FSX";
  EXPECT_ERROR(read(glm5), "index_topk_pattern", "one F or S per layer (6)");
  glm5.erase("index_topk_pattern");
  glm5["indexer_types"] = {"full", "shared"};
  EXPECT_ERROR(read(glm5), "indexer_types", "each of 6 layers");
  glm5["indexer_types"] = {"full", "shared", "full", "both", "full", "full"};
  EXPECT_ERROR(read(glm5), "indexer_types[3]", "\"both\"");
  glm5.erase("indexer_types");
  glm5["index_head_dim"] = 32;
  EXPECT_ERROR(read(glm5), "index_head_dim = 32");
}

TEST(ConfigWarnings, UnknownKeysAndFactorMismatchWarnAsHuggingFaceDoes) {
  json extra = kLlama31;
  extra["rope_scaling"]["flavour"] = "vanilla";
  const ropekit::ModelPositions m = read(extra);
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_NE(m.warnings[0].find("unrecognized key(s) flavour"), std::string::npos) << m.warnings[0];

  // The golden entry where HF warned about the factor: ropekit warns too, and uses the explicit factor.
  const json yarn_file = golden::load("yarn.json");
  const json& e = entry_with_id(yarn_file, "yarn/special/mpe_not_omp_x_factor");
  ASSERT_FALSE(e["hf_log"].empty());
  const ropekit::ModelPositions y = golden::model_of(e);
  ASSERT_EQ(y.warnings.size(), 1u);
  EXPECT_NE(y.warnings[0].find("differs from max_position_embeddings"), std::string::npos) << y.warnings[0];
  EXPECT_EQ(std::get<scaling::Yarn>(y.layer().spec.scaling).factor, 4.0);
}

// Every malformed-input class gives an Error whose message names the key (and the value).
void expect_error(const std::string& text, const std::string& fragment, ropekit::ConfigOptions options = {}) {
  try {
    ropekit::read_config(text, options, "bad.json");
    ADD_FAILURE() << "no error for " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

std::string with(json config, const json::json_pointer& where, const json& value) {
  config[where] = value;
  return config.dump();
}

std::string without(json config, const json::json_pointer& where) {
  config[where.parent_pointer()].erase(where.back());
  return config.dump();
}

TEST(ConfigErrors, EachClassNamesTheKey) {
  using P = json::json_pointer;
  // Invalid JSON and a non-object document.
  expect_error("{\"model_type\": \"llama\",", "bad.json: invalid JSON at byte");
  expect_error("[1, 2]", "the top level = [1,2]: expected a JSON object");
  // A number beyond double: nlohmann throws out_of_range, not parse_error (found by config_fuzz).
  expect_error(R"({"model_type": "llama", "rope_theta": 1e999})", "bad.json: invalid JSON");
  // Wrong types.
  expect_error(with(kLlama31, P("/rope_scaling/factor"), "eight"),
               "rope_scaling.factor = \"eight\": expected a number");
  expect_error(with(kLlama31, P("/rope_scaling"), 8), "rope_scaling = 8: expected a JSON object");
  expect_error(with(kLlama31, P("/rope_theta"), true), "rope_theta = true: expected a number");
  expect_error(with(kLlama31, P("/hidden_size"), 4096.5), "hidden_size = 4096.5: expected an integer");
  expect_error(with(kLlama31, P("/model_type"), 7), "model_type = 7: expected a string");
  expect_error(with(kLlama31, P("/rope_scaling/rope_type"), "mystery"),
               "rope_scaling.rope_type = \"mystery\": unknown rope type");
  // Missing keys.
  expect_error(without(kLlama31, P("/rope_scaling/low_freq_factor")),
               "rope_scaling.low_freq_factor (required by rope_type llama3) is missing");
  expect_error(without(kLlama31, P("/hidden_size")), "head_dim (and hidden_size");
  // Without Llama-style keys an unknown (or missing) model_type cannot be read as a Llama.
  expect_error(R"({"hidden_size": 64})", "model_type is missing and the config has no Llama-style keys");
  expect_error(R"({"model_type": "unheard_of", "hidden_size": 64})",
               "model_type = \"unheard_of\": not in ropekit's model table");
  json linear = kLlama31;
  linear["rope_scaling"] = {{"rope_type", "linear"}};
  expect_error(linear.dump(), "rope_scaling.factor (required by rope_type linear) is missing");
  json dynamic = kLlama31;
  dynamic.erase("max_position_embeddings");
  dynamic["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  expect_error(dynamic.dump(), "max_position_embeddings (dynamic NTK scales past it) is missing");
  json longrope = kLlama31;
  longrope["rope_scaling"] = {{"type", "longrope"}, {"long_factor", std::vector<double>(64, 1.0)}};
  expect_error(longrope.dump(), "rope_scaling.short_factor (required by rope_type longrope) is missing");
  longrope["rope_scaling"]["short_factor"] = std::vector<double>(10, 1.0);
  expect_error(longrope.dump(), "rope_scaling.short_factor = [1.0,1.0");
  // Values the formulas cannot use.
  expect_error(with(kLlama31, P("/partial_rotary_factor"), 1.5), "partial_rotary_factor = 1.5: must be in (0, 1]");
  json neox = {{"model_type", "gpt_neox"}, {"hidden_size", 90}, {"num_attention_heads", 1}, {"rotary_pct", 0.5}};
  expect_error(neox.dump(), "rotary_pct = 0.5: gives rotary_dim = int(90 * 0.5) = 45: must be even");
  expect_error(with(kLlama31, P("/num_attention_heads"), 0), "num_attention_heads = 0: must be > 0");
  expect_error(with(kLlama31, P("/hidden_size"), 4097), "hidden_size = 4097: must be a positive multiple");
  expect_error(with(kLlama31, P("/rope_theta"), 0.5), "bad.json: rope_theta = 0.5: must be > 1");
  expect_error(with(kLlama31, P("/rope_scaling/high_freq_factor"), 0.5), "llama3.high_freq_factor = 0.5");
  json mrope = kLlama31;
  mrope["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {16, 24}}};
  expect_error(mrope.dump(), "rope_scaling.mrope_section = [16,24]: expected 3 entries");
}

// Python's json (transformers' save_pretrained) writes non-finite floats as NaN / Infinity / -Infinity, which real
// configs hold (Falcon-H1, the Mamba-2 family: "time_step_limit": [0.0, Infinity]): read where ropekit does not use
// them, an error naming the key where it does, never a JSON error (issue 61: patch() on Falcon-H1).
TEST(ConfigSpellings, PythonsNonFiniteTokensAreReadAsPythonReadsThem) {
  const std::string base = kLlama31.dump();
  const std::string with_limits = base.substr(0, base.size() - 1) +
                                  R"(, "time_step_limit": [0.0, Infinity], "x": -Infinity, "y": NaN,)"
                                  R"( "note": "NaN and Infinity in a string stay text"})";
  const ropekit::ModelPositions m = ropekit::read_config(with_limits, {}, "h1.json");
  EXPECT_EQ(m.layer().spec, ropekit::read_config(base, {}, "h1.json").layer().spec);
  std::string infinite_theta = base;
  const std::string key = "\"rope_theta\":";
  const std::size_t at = infinite_theta.find(key);
  ASSERT_NE(at, std::string::npos);
  const std::size_t end = infinite_theta.find_first_of(",}", at);
  infinite_theta.replace(at + key.size(), end - at - key.size(), "Infinity");
  expect_error(infinite_theta, "rope_theta = Infinity: expected a finite number");
  // A syntax error after a rewritten token is reported at its byte in the input as given.
  const std::string broken = R"({"a": NaN, "b": })";
  try {
    (void)ropekit::read_config(broken, {}, "bad.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid JSON at byte 17"), std::string::npos) << e.what();
  }
}

TEST(ConfigErrors, FilesAndPresets) {
  EXPECT_THROW(ropekit::read_config_file("/nonexistent/config.json"), Error);
  try {
    ropekit::read_preset("llama-9");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("preset = llama-9: unknown (known: deepseek-v3"), std::string::npos)
        << e.what();
  }
}

}  // namespace
