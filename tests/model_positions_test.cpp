// ModelPositions: every family's per-layer rule, on a corpus of real configs (tests/data/configs,
// sources in its README) with the plans written from each family's modeling code, and the same
// per-layer treatment for GGUF. Each family's distinctive rule has an expectation that fails if the
// rule is dropped (the layer that would otherwise rotate, the lanes, the base, the scale).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>

#include "gguf_writer.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using json = nlohmann::json;
using ropekit::Error;
using ropekit::LayerPositions;
using ropekit::ModelPositions;
using ropekit::Pairing;
using ropekit::PositionEncoding;
using ropekit::QueryScaling;
namespace scaling = ropekit::scaling;

const std::string kConfigs = std::string(ROPEKIT_REPO_DIR) + "/tests/data/configs/";

std::string text_of(const std::string& name) {
  std::ifstream in(kConfigs + name + ".json");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
ModelPositions corpus(const std::string& name) { return ropekit::read_config_file(kConfigs + name + ".json"); }
ModelPositions read(const json& j) { return ropekit::read_config(j.dump(), {}, "test.json"); }

std::vector<int> every(int n, auto pred) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    if (pred(i)) out.push_back(i);
  }
  return out;
}

TEST(ModelPositions, Exaone4RotatesOnlyItsSlidingLayers) {
  const ModelPositions m = corpus("exaone-4.0-32b");
  ASSERT_EQ(m.num_layers, 64);
  ASSERT_EQ(m.groups.size(), 2u);
  const LayerPositions& local = m.layer("sliding_attention");
  const LayerPositions& global = m.layer("full_attention");
  EXPECT_EQ(local.layers, every(64, [](int i) { return (i + 1) % 4 != 0; }));
  EXPECT_EQ(global.layers, every(64, [](int i) { return (i + 1) % 4 == 0; }));
  EXPECT_EQ(local.encoding, PositionEncoding::Rope);
  EXPECT_EQ(global.encoding, PositionEncoding::None);  // dropped rule: the global layers would rotate
  EXPECT_EQ(local.sliding_window, 4096);
  EXPECT_FALSE(global.sliding_window);
  EXPECT_TRUE(std::holds_alternative<scaling::Llama3>(local.spec.scaling));
  EXPECT_EQ(local.spec.base, 1e6);
  EXPECT_EQ(&m.at_layer(3), &global);
  EXPECT_EQ(&m.at_layer(62), &local);
  // Without a window (EXAONE 4.0 1.2B) every layer rotates.
  const ModelPositions small = corpus("exaone-4.0-1.2b");
  ASSERT_EQ(small.groups.size(), 1u);
  EXPECT_EQ(small.groups[0].encoding, PositionEncoding::Rope);
  EXPECT_EQ(small.groups[0].layers.size(), 30u);
  // The "LLLG" string pattern alone (no layer_types) gives the same plan.
  json j = json::parse(text_of("exaone-4.0-32b"));
  j.erase("layer_types");
  EXPECT_EQ(read(j).groups[1].layers, global.layers);
  // EXAONE 4.5 nests the same language model in text_config (HF Exaone45Config: its text model_type, absent or
  // exaone4_5_text, is exaone4): the same plan, the full-attention layers still without RoPE.
  for (const char* text_type : {"", "exaone4_5_text", "exaone4"}) {
    json text = json::parse(text_of("exaone-4.0-32b"));
    text.erase("model_type");
    text.erase("_name_or_path");
    if (*text_type != 0) text["model_type"] = text_type;
    const ModelPositions wrapped = read(json{{"model_type", "exaone4_5"}, {"text_config", text}});
    EXPECT_EQ(wrapped.groups, m.groups) << text_type;
    EXPECT_EQ(wrapped.family, "exaone 4");
  }
}

TEST(ModelPositions, Cohere2LeavesFullLayersWithoutRope) {
  const ModelPositions m = corpus("command-r7b-12-2024");
  EXPECT_EQ(m.layer("full_attention").encoding, PositionEncoding::None);
  EXPECT_EQ(m.layer("full_attention").layers, every(32, [](int i) { return (i + 1) % 4 == 0; }));
  EXPECT_EQ(m.layer("sliding_attention").spec.pairing, Pairing::Interleaved);
  EXPECT_EQ(m.layer("sliding_attention").spec.base, 50000.0);
}

TEST(ModelPositions, SmolLM3NoRopeLayers) {
  const ModelPositions m = corpus("smollm3-3b");
  ASSERT_EQ(m.groups.size(), 2u);
  EXPECT_EQ(m.groups[0].layer_type, "rope");
  EXPECT_EQ(m.groups[1].layer_type, "nope");
  EXPECT_EQ(m.groups[1].encoding, PositionEncoding::None);
  EXPECT_EQ(m.groups[1].layers, every(36, [](int i) { return (i + 1) % 4 == 0; }));
  EXPECT_EQ(m.groups[0].spec.base, 5e6);
  // The default (no list): every 4th layer, from no_rope_layer_interval.
  json j = json::parse(text_of("smollm3-3b"));
  j.erase("no_rope_layers");
  j["no_rope_layer_interval"] = 3;
  EXPECT_EQ(read(j).layer("nope").layers, every(36, [](int i) { return (i + 1) % 3 == 0; }));
}

TEST(ModelPositions, Llama4ChunkedRopeLayersAndTemperatureTunedNopeLayers) {
  const ModelPositions m = corpus("llama-4-scout-17b-16e");
  const LayerPositions& rope = m.layer("chunked_attention");
  const LayerPositions& nope = m.layer("full_attention");
  EXPECT_EQ(rope.spec.pairing, Pairing::Interleaved);
  EXPECT_EQ(rope.attention_chunk, 8192);
  // high_freq_factor = low_freq_factor = 1: no smoothing band, a hard step at wavelength 8192.
  const ropekit::Plan plan = ropekit::make_plan(rope.spec);
  const ropekit::Plan plain = ropekit::make_plan([&] {
    ropekit::Spec s = rope.spec;
    s.scaling = scaling::None{};
    return s;
  }());
  int divided = 0;
  for (std::size_t i = 0; i < plan.inv_freq.size(); ++i) {
    const bool long_wave = 2 * std::numbers::pi / plain.inv_freq[i] > 8192;
    EXPECT_EQ(plan.inv_freq[i], long_wave ? double(float(plain.inv_freq[i] / 16.0)) : plain.inv_freq[i]) << i;
    divided += long_wave;
  }
  EXPECT_GT(divided, 0);
  EXPECT_EQ(nope.encoding, PositionEncoding::None);
  EXPECT_FALSE(nope.attention_chunk);
  EXPECT_EQ(nope.layers, every(48, [](int i) { return (i + 1) % 4 == 0; }));
  ASSERT_EQ(nope.query_scaling.kind, QueryScaling::Kind::Llama4);
  EXPECT_EQ(rope.query_scaling.kind, QueryScaling::Kind::None);
  // HF: log1p(floor((p + 1) / 8192)) * 0.1 + 1.
  EXPECT_EQ(nope.query_scaling.factor(0), 1.0);
  EXPECT_EQ(nope.query_scaling.factor(8190), 1.0);
  EXPECT_DOUBLE_EQ(nope.query_scaling.factor(8191), 1.0 + 0.1 * std::log(2.0));
  EXPECT_DOUBLE_EQ(nope.query_scaling.factor(3 * 8192 - 1), 1.0 + 0.1 * std::log(4.0));
}

TEST(ModelPositions, Ministral3ScalesQueriesByPosition) {
  const ModelPositions m = corpus("ministral-3-8b-instruct-2512");
  ASSERT_EQ(m.groups.size(), 1u);
  const LayerPositions& g = m.groups[0];
  EXPECT_EQ(m.family, "llama-style");
  ASSERT_EQ(g.query_scaling.kind, QueryScaling::Kind::Beta);
  EXPECT_EQ(g.query_scaling.length, 16384);
  EXPECT_EQ(g.query_scaling.factor(16383), 1.0);
  EXPECT_DOUBLE_EQ(g.query_scaling.factor(16384), 1.0 + 0.1 * std::log(2.0));
  EXPECT_DOUBLE_EQ(g.query_scaling.factor(5 * 16384 + 7), 1.0 + 0.1 * std::log(6.0));
  for (const std::string& w : m.warnings) EXPECT_EQ(w.find("llama_4_scaling_beta"), std::string::npos) << w;
  // A family whose attention does not apply it says so instead of claiming HF ignores it.
  json j = json::parse(text_of("ministral-3-8b-instruct-2512"))["text_config"];
  j["model_type"] = "mistral";
  const ModelPositions plain = read(j);
  EXPECT_EQ(plain.groups[0].query_scaling.kind, QueryScaling::Kind::None);
  ASSERT_EQ(plain.warnings.size(), 1u);
  EXPECT_NE(plain.warnings[0].find("model_type mistral's attention code does not apply llama_4_scaling_beta"),
            std::string::npos)
      << plain.warnings[0];
  // YaRN with mscale = mscale_all_dim = 1: Ministral 3 (Devstral-Small-2's text model) keeps head_dim^-0.5 as its
  // softmax scale (modeling_ministral3.py: self.scaling = self.head_dim**-0.5) and cos/sin unscaled; Mistral 4's
  // attention multiplies the scale by mscale(16, 1)² (modeling_mistral4.py yarn_apply_mscale), as DeepSeek's does.
  const ropekit::Plan p3 = ropekit::make_plan(g.spec);
  EXPECT_EQ(p3.softmax_scale_mult, 1.0);
  EXPECT_EQ(p3.cos_sin_scale, 1.0);
  j = json::parse(text_of("ministral-3-8b-instruct-2512"))["text_config"];
  j["model_type"] = "mistral4";
  const ropekit::Plan p4 = ropekit::make_plan(read(j).groups[0].spec);
  EXPECT_DOUBLE_EQ(p4.softmax_scale_mult, std::pow(0.1 * std::log(16.0) + 1.0, 2));  // 1.924
  EXPECT_EQ(p4.inv_freq, p3.inv_freq);
}

TEST(ModelPositions, Gemma2SoftcapAndQueryPreAttnScalar) {
  const ModelPositions m = corpus("gemma-2-2b");
  const LayerPositions& local = m.layer("sliding_attention");
  EXPECT_EQ(local.layers, every(26, [](int i) { return i % 2 == 0; }));
  EXPECT_EQ(local.logit_softcap, 50.0);
  EXPECT_EQ(local.softmax_scale, 1.0 / 16.0);  // 256^-0.5, not head_dim's (also 256 here)
  json j = json::parse(text_of("gemma-2-2b"));
  j["query_pre_attn_scalar"] = 144;
  j["attn_logit_softcapping"] = nullptr;
  const ModelPositions changed = read(j);
  EXPECT_EQ(changed.groups[0].softmax_scale, 1.0 / 12.0);
  EXPECT_FALSE(changed.groups[0].logit_softcap);
}

TEST(ModelPositions, Gemma4GlobalLayersUseTheGlobalHeadAndProportionalRope) {
  const ModelPositions m = corpus("gemma-4-text-defaults");
  const LayerPositions& global = m.layer("full_attention");
  const LayerPositions& local = m.layer("sliding_attention");
  EXPECT_EQ(global.layers, (std::vector<int>{5, 11}));  // pattern 6, and the last layer forced full
  EXPECT_EQ(global.qk_head_dim, 512);
  EXPECT_EQ(global.spec.head_dim, 512);
  const auto& p = std::get<scaling::Proportional>(global.spec.scaling);
  EXPECT_EQ(p.partial_rotary_factor, 0.25);
  EXPECT_EQ(global.spec.base, 1e6);
  EXPECT_EQ(local.spec.head_dim, 256);
  EXPECT_EQ(local.spec.base, 1e4);
  EXPECT_EQ(local.sliding_window, 512);
  EXPECT_EQ(global.softmax_scale, 1.0);
  // 13 layers: pattern 6 leaves layer 12 sliding; Gemma 4 forces the last layer full.
  json j = json::parse(text_of("gemma-4-text-defaults"));
  j["num_hidden_layers"] = 13;
  EXPECT_EQ(read(j).layer("full_attention").layers, (std::vector<int>{5, 11, 12}));
}

TEST(ModelPositions, DeepSeekV4RotatesTheTrailingLanesWithTwoBases) {
  const ModelPositions m = corpus("deepseek-v4-legacy-keys");
  const LayerPositions& swa = m.layer("sliding_attention");
  const LayerPositions& csa = m.layer("compressed_sparse_attention");
  const LayerPositions& hca = m.layer("heavily_compressed_attention");
  EXPECT_EQ(swa.layers, (std::vector<int>{0, 1}));
  EXPECT_EQ(csa.layers, (std::vector<int>{2, 4}));
  EXPECT_EQ(hca.layers, (std::vector<int>{3, 5}));
  for (const LayerPositions* g : {&swa, &csa, &hca}) {
    EXPECT_EQ(g->rope_offset, 448);  // the last 64 of 512 lanes
    EXPECT_EQ(g->spec.rotary_dim, 64);
    EXPECT_EQ(g->spec.pairing, Pairing::Interleaved);
    EXPECT_EQ(g->sliding_window, 128);
    EXPECT_EQ(g->softmax_scale, 1.0 / std::sqrt(512.0));
  }
  EXPECT_EQ(swa.spec.base, 10000.0);
  EXPECT_TRUE(std::holds_alternative<scaling::None>(swa.spec.scaling));
  EXPECT_EQ(csa.spec.base, 160000.0);  // compress_rope_theta
  const auto& y = std::get<scaling::Yarn>(csa.spec.scaling);
  EXPECT_EQ(y.factor, 16.0);
  EXPECT_EQ(y.attention_factor, 1.0);  // forced by DeepseekV4Config
  EXPECT_EQ(ropekit::make_plan(csa.spec).cos_sin_scale, 1.0);
  EXPECT_EQ(csa.spec, hca.spec);
}

TEST(ModelPositions, ChatGlmRotatesHalfOfEachHeadInterleaved) {
  for (const auto& [name, base, layers] :
       {std::tuple{"chatglm3-6b-32k", 500000.0, 28}, std::tuple{"glm-4-9b-chat", 5000000.0, 40}}) {
    const ModelPositions m = corpus(name);
    ASSERT_EQ(m.groups.size(), 1u) << name;
    const ropekit::Spec& s = m.groups[0].spec;
    EXPECT_EQ(s.head_dim, 128) << name;
    EXPECT_EQ(s.rotary_dim, 64) << name;  // kv_channels / 2
    EXPECT_EQ(s.pairing, Pairing::Interleaved) << name;
    EXPECT_EQ(s.base, base) << name;  // 10000 · rope_ratio
    EXPECT_EQ(m.num_layers, layers) << name;
  }
}

TEST(ModelPositions, QwenV1DynamicNtkAndLogN) {
  const ModelPositions m = corpus("qwen-7b-chat");
  const LayerPositions& g = m.groups[0];
  const auto& q = std::get<scaling::QwenDynamicNtk>(g.spec.scaling);
  EXPECT_EQ(q.seq_length, 8192);
  // α = 2^ceil(log2(L / 8192) + 1) − 1: 1 up to 8192, 3 to 16384, 7 to 32768.
  const double d = 128;
  for (const auto& [length, alpha] : {std::pair{8192, 1.0}, {8193, 3.0}, {16384, 3.0}, {16385, 7.0}, {32768, 7.0}}) {
    const ropekit::Plan plan = ropekit::make_plan(g.spec, length);
    const double base = 10000.0 * std::pow(alpha, d / (d - 2));
    for (int i : {1, 20, 63}) {
      const double expected = 1.0 / std::pow(base, 2.0 * i / d);
      EXPECT_NEAR(plan.inv_freq[std::size_t(i)], expected, 2e-7 * expected) << length << " pair " << i;
    }
    EXPECT_EQ(ropekit::needs_rerotation(ropekit::make_plan(g.spec, 8192), plan), alpha != 1.0) << length;
  }
  ASSERT_EQ(g.query_scaling.kind, QueryScaling::Kind::LogN);
  EXPECT_EQ(g.query_scaling.factor(8191), 1.0);  // position 8191 is the 8192nd token
  EXPECT_DOUBLE_EQ(g.query_scaling.factor(8192), std::log(8193.0) / std::log(8192.0));
  EXPECT_DOUBLE_EQ(g.query_scaling.factor(16383), std::log(16384.0) / std::log(8192.0));
}

TEST(ModelPositions, BaichuanThirteenBIsAlibiAndSevenBRotates) {
  const ModelPositions big = corpus("baichuan2-13b-chat");
  ASSERT_EQ(big.groups.size(), 1u);
  EXPECT_EQ(big.groups[0].encoding, PositionEncoding::Alibi);
  const std::vector<float> slopes = ropekit::alibi_slopes(40);
  EXPECT_EQ(big.groups[0].alibi_slopes, std::vector<double>(slopes.begin(), slopes.end()));
  EXPECT_TRUE(big.rope_groups().empty());
  const ModelPositions small = corpus("baichuan2-7b-chat");
  EXPECT_EQ(small.groups[0].encoding, PositionEncoding::Rope);
  EXPECT_EQ(small.groups[0].spec.pairing, Pairing::Half);
}

TEST(ModelPositions, ModelsWithoutRope) {
  EXPECT_EQ(corpus("bloom-560m").groups[0].encoding, PositionEncoding::Alibi);
  EXPECT_EQ(corpus("bloom-560m").groups[0].alibi_slopes.size(), 16u);
  EXPECT_EQ(corpus("falcon-rw-1b").groups[0].encoding, PositionEncoding::Alibi);
  EXPECT_EQ(corpus("falcon-7b").groups[0].encoding, PositionEncoding::Rope);
  EXPECT_EQ(corpus("mpt-7b").groups[0].encoding, PositionEncoding::Alibi);
  json mpt = json::parse(text_of("mpt-7b"));
  mpt["attn_config"]["alibi"] = false;
  EXPECT_EQ(read(mpt).groups[0].encoding, PositionEncoding::Learned);
  EXPECT_EQ(read(json{{"model_type", "gpt2"}, {"n_embd", 768}, {"n_head", 12}, {"n_layer", 12}}).groups[0].encoding,
            PositionEncoding::Learned);
  const ModelPositions h = corpus("nemotron-h-8b-base-8k");
  EXPECT_EQ(h.layer("attention").layers, (std::vector<int>{7, 18, 29, 40}));
  EXPECT_EQ(h.layer("attention").encoding, PositionEncoding::None);
  EXPECT_TRUE(h.layer("attention").attention);
  EXPECT_FALSE(h.layer("mamba").attention);
  EXPECT_TRUE(h.rope_groups().empty());
  // transformers 5.15 writes the list layers_block_type instead of the pattern (legacy names remapped): the same plan.
  json listed = json::parse(text_of("nemotron-h-8b-base-8k"));
  json blocks = json::array();
  for (char c : listed["hybrid_override_pattern"].get<std::string>()) {
    blocks.push_back(c == '*'   ? "full_attention"
                     : c == 'M' ? (blocks.size() % 2 ? "mamba" : "linear_attention")
                     : c == 'E' ? "moe"
                                : "mlp");
  }
  listed.erase("hybrid_override_pattern");
  listed["layers_block_type"] = blocks;
  const ModelPositions from_list = read(listed);
  EXPECT_EQ(from_list.layer("attention").layers, h.layer("attention").layers);
  EXPECT_EQ(from_list.layer("mamba").layers, h.layer("mamba").layers);
  EXPECT_EQ(from_list.layer_types, h.layer_types);
  listed["layers_block_type"][0] = "convolution";
  try {
    (void)read(listed);
    ADD_FAILURE() << "no error for an unknown block type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers_block_type[0] = \"convolution\": expected full_attention"),
              std::string::npos)
        << e.what();
  }
  const ModelPositions jamba = corpus("jamba-v0.1");
  EXPECT_EQ(jamba.layer("attention").layers, (std::vector<int>{4, 12, 20, 28}));
  EXPECT_EQ(jamba.layer("attention").encoding, PositionEncoding::None);
}

TEST(ModelPositions, HybridsRotateOnlyInTheirAttentionLayers) {
  const ModelPositions lfm = corpus("lfm2-1.2b");
  EXPECT_EQ(lfm.layer("full_attention").layers, (std::vector<int>{2, 5, 8, 10, 12, 14}));
  EXPECT_FALSE(lfm.layer("conv").attention);
  EXPECT_EQ(lfm.layer("full_attention").spec.base, 1e6);
  const ModelPositions next = corpus("qwen3-next-80b-a3b");
  const LayerPositions& full = next.layer("full_attention");
  EXPECT_EQ(full.layers, every(48, [](int i) { return (i + 1) % 4 == 0; }));
  EXPECT_EQ(full.spec.rotary_dim, 64);  // partial_rotary_factor 0.25 of 256, applied
  EXPECT_FALSE(next.layer("linear_attention").attention);
  const ModelPositions vision = corpus("llama-3.2-11b-vision");
  EXPECT_EQ(vision.layer("cross_attention").layers, (std::vector<int>{3, 8, 13, 18, 23, 28, 33, 38}));
  EXPECT_EQ(vision.layer("cross_attention").encoding, PositionEncoding::None);
  EXPECT_TRUE(std::holds_alternative<scaling::Llama3>(vision.layer("self_attention").spec.scaling));
}

TEST(ModelPositions, WindowsPerLayer) {
  const ModelPositions oss = corpus("gpt-oss-20b");
  EXPECT_EQ(oss.layer("sliding_attention").layers, every(24, [](int i) { return i % 2 == 0; }));
  EXPECT_EQ(oss.layer("sliding_attention").sliding_window, 128);
  EXPECT_FALSE(std::get<scaling::Yarn>(oss.layer("full_attention").spec.scaling).truncate);
  // OLMo 3: the sliding layers use plain RoPE at the same θ; YaRN only on the full layers.
  const ModelPositions olmo = corpus("olmo-3-7b");
  EXPECT_TRUE(std::holds_alternative<scaling::None>(olmo.layer("sliding_attention").spec.scaling));
  EXPECT_EQ(olmo.layer("sliding_attention").spec.base, 500000.0);
  EXPECT_TRUE(std::holds_alternative<scaling::Yarn>(olmo.layer("full_attention").spec.scaling));
  // Qwen 2: layers from max_window_layers on slide, only with use_sliding_window.
  const ModelPositions qwen = corpus("qwen2.5-7b-sliding");
  EXPECT_EQ(qwen.layer("sliding_attention").layers, every(28, [](int i) { return i >= 20; }));
  json off = json::parse(text_of("qwen2.5-7b-sliding"));
  off["use_sliding_window"] = false;
  const ModelPositions q = read(off);
  ASSERT_EQ(q.groups.size(), 1u);
  EXPECT_FALSE(q.groups[0].sliding_window);
  // Mistral 7B v0.1: the window on every layer.
  const ModelPositions mistral = read(json{{"model_type", "mistral"},
                                           {"hidden_size", 4096},
                                           {"num_attention_heads", 32},
                                           {"num_hidden_layers", 32},
                                           {"sliding_window", 4096}});
  ASSERT_EQ(mistral.groups.size(), 1u);
  EXPECT_EQ(mistral.groups[0].sliding_window, 4096);
}

TEST(ModelPositions, MlaFamiliesPlaceTheRopeSliceAfterTheNopeLanes) {
  const ModelPositions kimi = corpus("kimi-k2-instruct");
  EXPECT_EQ(kimi.groups[0].rope_offset, 128);
  EXPECT_EQ(kimi.groups[0].spec.head_dim, 64);
  EXPECT_EQ(kimi.groups[0].spec.pairing, Pairing::Interleaved);
  EXPECT_EQ(kimi.groups[0].softmax_scale, 1.0 / std::sqrt(192.0));
  EXPECT_DOUBLE_EQ(ropekit::make_plan(kimi.groups[0].spec).softmax_scale_mult, std::pow(0.1 * std::log(32.0) + 1.0, 2));
  const ModelPositions cpm = corpus("minicpm3-4b");
  EXPECT_EQ(cpm.groups[0].rope_offset, 64);
  EXPECT_EQ(cpm.groups[0].spec.head_dim, 32);
  EXPECT_EQ(cpm.groups[0].spec.pairing, Pairing::Half);
  EXPECT_TRUE(std::holds_alternative<scaling::LongRope>(cpm.groups[0].spec.scaling));
}

TEST(ModelPositions, RemoteCodeSpellings) {
  const ModelPositions stable = corpus("stablelm-3b-4e1t");
  EXPECT_EQ(stable.groups[0].spec.rotary_dim, 20);  // rope_pct 0.25 of 80
  const ModelPositions intern = corpus("internlm2_5-7b-chat");
  EXPECT_TRUE(std::holds_alternative<scaling::DynamicNtk>(intern.groups[0].spec.scaling));
  EXPECT_EQ(intern.groups[0].spec.pairing, Pairing::Half);
}

// A remote-code config.json may leave model_type out (transformers finds the class through auto_map): the family comes
// from the class `architectures` or auto_map names, and the plan is the one the model_type would give. Every
// remote-code family in the corpus, by architectures alone and by auto_map alone (issue 61).
TEST(ModelPositions, ConfigsWithoutModelTypeAreReadByTheirClass) {
  struct Case {
    const char* config;
    const char* module;  // auto_map's modeling file
  };
  for (const Case& c : {Case{"qwen-7b-chat", "modeling_qwen"}, Case{"chatglm3-6b-32k", "modeling_chatglm"},
                        Case{"glm-4-9b-chat", "modeling_chatglm"}, Case{"baichuan2-7b-chat", "modeling_baichuan"},
                        Case{"baichuan2-13b-chat", "modeling_baichuan"},
                        Case{"internlm2_5-7b-chat", "modeling_internlm2"}, Case{"minicpm3-4b", "modeling_minicpm"},
                        Case{"kimi-k2-instruct", "modeling_deepseek"}, Case{"falcon-rw-1b", "modelling_RW"}}) {
    SCOPED_TRACE(c.config);
    const json full = json::parse(text_of(c.config));
    const ModelPositions want = read(full);
    ASSERT_TRUE(full.contains("architectures")) << "the corpus config names its class";
    json by_architectures = full;
    by_architectures.erase("model_type");
    json by_auto_map = by_architectures;
    by_auto_map.erase("architectures");
    by_auto_map["auto_map"] = {
        {"AutoConfig", std::string(c.module) + ".Config"},
        {"AutoModelForCausalLM", std::string(c.module) + "." + full["architectures"][0].get<std::string>()}};
    for (const json& j : {by_architectures, by_auto_map}) {
      const ModelPositions got = read(j);
      EXPECT_EQ(got.family, want.family);
      ASSERT_EQ(got.groups.size(), want.groups.size());
      for (std::size_t i = 0; i < got.groups.size(); ++i) {
        const LayerPositions &g = got.groups[i], &w = want.groups[i];
        // Field by field: a non-RoPE group's unused spec holds NaN (base), which == never matches.
        EXPECT_EQ(g.layer_type, w.layer_type);
        EXPECT_EQ(g.layers, w.layers);
        EXPECT_EQ(g.encoding, w.encoding);
        if (w.encoding == PositionEncoding::Rope) {
          EXPECT_EQ(g.spec, w.spec);
        }
        EXPECT_EQ(g.rope_offset, w.rope_offset);
        EXPECT_EQ(g.qk_head_dim, w.qk_head_dim);
        EXPECT_EQ(g.alibi_slopes, w.alibi_slopes);
        EXPECT_EQ(g.sliding_window, w.sliding_window);
        EXPECT_EQ(g.softmax_scale, w.softmax_scale);
        EXPECT_EQ(g.query_scaling, w.query_scaling);
      }
      EXPECT_EQ(got.layer_types, want.layer_types);
      EXPECT_EQ(got.qk_head_dim, want.qk_head_dim);
      ASSERT_FALSE(got.warnings.empty());
      EXPECT_NE(got.warnings[0].find("model_type is missing: read as"), std::string::npos) << got.warnings[0];
    }
  }
  // Transformers' naming and the two classes named otherwise.
  for (const auto& [cls, type] :
       std::vector<std::pair<std::string, std::string>>{{"Qwen2MoeForCausalLM", "qwen2_moe"},
                                                        {"GPTNeoXForCausalLM", "gpt_neox"},
                                                        {"DeepseekV3ForCausalLM", "deepseek_v3"},
                                                        {"Qwen2VLForConditionalGeneration", "qwen2_vl"},
                                                        {"DeciLMForCausalLM", "deci"},
                                                        {"RWForCausalLM", "RefinedWebModel"},
                                                        {"org/repo--modeling_xverse.XverseForCausalLM", "xverse"}}) {
    const ModelPositions m = read({{"architectures", {cls}}, {"num_attention_heads", 8}, {"hidden_size", 512}});
    EXPECT_EQ(m.model_type, type) << cls;
  }
  // A class no row matches: the Llama reading and its warning, as for an unknown model_type.
  const ModelPositions unknown =
      read({{"architectures", {"MyNewForCausalLM"}}, {"num_attention_heads", 8}, {"hidden_size", 512}});
  EXPECT_EQ(unknown.family, "llama-style");
  EXPECT_NE(unknown.warnings.at(0).find("not in ropekit's model table"), std::string::npos);
  // A model_type that is present is never second-guessed by the class.
  const ModelPositions named = read({{"model_type", "my_llama"},
                                     {"architectures", {"QWenLMHeadModel"}},
                                     {"num_attention_heads", 8},
                                     {"hidden_size", 512}});
  EXPECT_EQ(named.family, "llama-style");
}

TEST(ModelPositions, EveryCorpusConfigReadsAndEveryLayerHasOneGroup) {
  for (const auto& entry : std::filesystem::directory_iterator(kConfigs)) {
    if (entry.path().extension() != ".json") continue;
    const ModelPositions m = ropekit::read_config_file(entry.path());
    ASSERT_GT(m.num_layers, 0) << entry.path();
    std::vector<int> seen(std::size_t(m.num_layers), 0);
    for (const LayerPositions& g : m.groups) {
      for (int l : g.layers) ++seen[std::size_t(l)];
      if (g.encoding == PositionEncoding::Rope) (void)ropekit::make_plan(g.spec, 1 << 20);
      if (g.attention) {
        EXPECT_GT(g.softmax_scale, 0.0) << entry.path();
      }
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), m.num_layers) << entry.path();
    EXPECT_EQ(m.layer_types.size(), std::size_t(m.num_layers));
  }
}

TEST(ModelPositions, AtLayerAndLayerErrors) {
  const ModelPositions m = corpus("exaone-4.0-32b");
  EXPECT_THROW(m.at_layer(64), Error);
  EXPECT_THROW(m.at_layer(-1), Error);
  EXPECT_EQ(m.layer().layer_type, "sliding_attention");  // the only RoPE group
  try {
    (void)corpus("gemma-2-2b").layer();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("several layer types"), std::string::npos);
  }
  // One RoPE group among several: "" selects it.
  EXPECT_EQ(corpus("smollm3-3b").layer().layer_type, "rope");
  const ModelPositions fragment = ropekit::read_preset("llama-3.2-1b");
  EXPECT_EQ(fragment.num_layers, 0);
  EXPECT_THROW(fragment.at_layer(0), Error);
}

TEST(ModelPositions, BadPerLayerKeysNameTheKey) {
  auto expect_error = [](const json& j, const std::string& fragment) {
    try {
      (void)read(j);
      ADD_FAILURE() << "no error for " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  json exa = json::parse(text_of("exaone-4.0-32b"));
  exa["layer_types"].erase(0);
  expect_error(exa, "layer_types = ");
  exa = json::parse(text_of("exaone-4.0-32b"));
  exa.erase("layer_types");
  exa["sliding_window_pattern"] = "LLXG";
  expect_error(exa, "sliding_window_pattern = \"LLXG\"");
  // config_fuzz's find: a chunked_attention layer type and no attention_chunk_size read a null node (UBSan; the
  // CLI segfaulted on this config).
  const json olmo = {{"model_type", "olmo2"},
                     {"hidden_size", 4096},
                     {"num_attention_heads", 32},
                     {"num_hidden_layers", 2},
                     {"layer_types", {"chunked_attention", "full_attention"}},
                     {"rope_theta", 500000},
                     {"max_position_embeddings", 8192}};
  expect_error(olmo, "attention_chunk_size (layer_types has chunked_attention layers) is missing");
  json smol = json::parse(text_of("smollm3-3b"));
  smol["no_rope_layers"][0] = 2;
  expect_error(smol, "no_rope_layers[0] = 2: must be 0 or 1");
  json h = json::parse(text_of("nemotron-h-8b-base-8k"));
  h["hybrid_override_pattern"] = "M*Q";
  expect_error(h, "hybrid_override_pattern = \"M*Q\"");
  json glm = json::parse(text_of("chatglm3-6b-32k"));
  glm["position_encoding_2d"] = true;
  expect_error(glm, "position_encoding_2d = true");
  json qwen = json::parse(text_of("qwen-7b-chat"));
  qwen.erase("seq_length");
  expect_error(qwen, "seq_length");
  // An odd head without rotary_pct: the error names kv_channels (found by config_fuzz: it dereferenced
  // the absent rotary_pct).
  json odd = json::parse(text_of("qwen-7b-chat"));
  odd.erase("rotary_pct");
  odd["kv_channels"] = 129;
  expect_error(odd, "kv_channels = 129: gives rotary_dim = 129");
  json v4 = json::parse(text_of("deepseek-v4-legacy-keys"));
  v4["compress_ratios"][2] = 5;
  expect_error(v4, "compress_ratios[2] = 5");
  // One entry more than layers (DeepSeek-V4-Flash: 44 for 43, the MTP layer's) is what HF reads — it keeps the
  // first num_hidden_layers — so it gives the plan of the first six; fewer than layers is an error.
  v4 = json::parse(text_of("deepseek-v4-legacy-keys"));
  const ModelPositions six = read(v4);
  v4["compress_ratios"].push_back(0);
  EXPECT_EQ(read(v4).layer_types, six.layer_types);
  EXPECT_EQ(read(v4).num_layers, 6);
  v4["compress_ratios"].push_back(7);
  expect_error(v4, "compress_ratios[7] = 7");
  v4["compress_ratios"] = {0, 0, 4};
  expect_error(v4, "has 3 entries: must have num_hidden_layers = 6");
}

TEST(ModelPositions, HuggingFaceValidationWarnings) {
  json j = {{"model_type", "llama"},
            {"hidden_size", 4096},
            {"num_attention_heads", 32},
            {"rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}}}};
  const ModelPositions m = read(j);
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_NE(m.warnings[0].find("rope_scaling.factor = 0.5: rope_type linear expects a factor >= 1"), std::string::npos);
}

// GGUF: llama.cpp's per-layer facts (block_count, the SWA pattern, its hard-coded NoPE layers).
TEST(ModelPositionsGguf, PerLayerPatterns) {
  auto base = [](const std::string& arch, std::uint32_t layers) {
    gguf_test::Writer w;
    w.str("general.architecture", arch);
    w.u32(arch + ".block_count", layers);
    w.u32(arch + ".embedding_length", 4096);
    w.u32(arch + ".attention.head_count", 32);
    w.u32(arch + ".rope.dimension_count", 128);
    w.f32(arch + ".rope.freq_base", 1e6f);
    return w;
  };
  auto read_gguf = [](const gguf_test::Writer& w) { return ropekit::read_gguf(w.bytes(), {}, "t.gguf"); };
  gguf_test::Writer exa = base("exaone4", 8);
  exa.u32("exaone4.attention.sliding_window", 4096);
  const ModelPositions e = read_gguf(exa);
  EXPECT_EQ(e.layer("full_attention").layers, (std::vector<int>{3, 7}));
  EXPECT_EQ(e.layer("full_attention").encoding, PositionEncoding::None);
  EXPECT_EQ(e.layer("sliding_attention").sliding_window, 4096);
  // An explicit per-layer bool array wins over the hard-coded period.
  gguf_test::Writer arr = base("exaone4", 4);
  arr.bool_array("exaone4.attention.sliding_window_pattern", {true, false, true, false});
  EXPECT_EQ(read_gguf(arr).layer("full_attention").layers, (std::vector<int>{1, 3}));
  const ModelPositions l4 = read_gguf(base("llama4", 8));
  EXPECT_EQ(l4.layer("nope").layers, (std::vector<int>{3, 7}));
  EXPECT_EQ(l4.layer("rope").spec.pairing, Pairing::Interleaved);
  const ModelPositions bloom = read_gguf(base("bloom", 2));
  EXPECT_EQ(bloom.groups[0].encoding, PositionEncoding::Alibi);
  EXPECT_EQ(bloom.groups[0].alibi_slopes.size(), 32u);
  gguf_test::Writer bad = base("gemma2", 4);
  bad.bool_array("gemma2.attention.sliding_window_pattern", {true, false});
  EXPECT_THROW(read_gguf(bad), Error);
}

}  // namespace
