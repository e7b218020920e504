// The ropekit CLI, run in-process through run_cli (the same code main() calls), and the .npy codec.
//
// `apply` must equal the library call bit for bit; `freqs --json` must print the plan exactly
// (doubles round-trip); every bad input must exit 2 with one stderr line naming the problem.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli.hpp"
#include "npy.hpp"
#include "plot.hpp"
#include "ropekit/ropekit.hpp"

namespace {

namespace fs = std::filesystem;
using ropekit::cli::NpyArray;
using ropekit::cli::NpyType;

struct Result {
  int code;
  std::string out, err;
};

Result run(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = ropekit::cli::run_cli(args, out, err);
  return {code, out.str(), err.str()};
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("ropekit_cli_test_" + std::to_string(std::random_device{}()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

template <class T>
NpyArray array(NpyType type, std::vector<std::int64_t> shape, const std::vector<T>& values) {
  NpyArray a{type, std::move(shape), {}};
  a.data.resize(values.size() * sizeof(T));
  std::memcpy(a.data.data(), values.data(), a.data.size());
  return a;
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(Npy, RoundTripsEveryTypeAndShape) {
  for (NpyType type : {NpyType::F32, NpyType::F16, NpyType::U16, NpyType::I32, NpyType::I64}) {
    for (const std::vector<std::int64_t>& shape : {std::vector<std::int64_t>{}, {5}, {2, 3}, {1, 4, 3, 2}, {0, 3}}) {
      NpyArray a{type, shape, {}};
      a.data.resize(std::size_t(a.count()) * ropekit::cli::npy_item_size(type));
      for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] = std::byte(i * 7 + 3);
      const std::vector<std::byte> bytes = ropekit::cli::serialize_npy(a);
      EXPECT_EQ((bytes.size() - a.data.size()) % 64, 0u);  // data 64-byte aligned, as numpy writes
      const NpyArray b = ropekit::cli::parse_npy(bytes, "x.npy");
      EXPECT_EQ(b.type, a.type);
      EXPECT_EQ(b.shape, a.shape);
      EXPECT_EQ(b.data, a.data);
    }
  }
}

TEST(Npy, ReadsWhatNumpyWrites) {
  // numpy.save(np.arange(3, dtype='<i8')) — version 1.0, header padded to 64 bytes.
  std::string header = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  ASSERT_EQ((10 + header.size()) % 64, 0u);
  std::string file = std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + char(0) + header;
  for (std::int64_t v : {0, 1, 2}) file.append(reinterpret_cast<const char*>(&v), 8);
  const NpyArray a = ropekit::cli::parse_npy(std::as_bytes(std::span(file)), "arange.npy");
  EXPECT_EQ(a.type, NpyType::I64);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{3}));
}

void expect_npy_error(const std::vector<std::byte>& bytes, const std::string& fragment) {
  try {
    ropekit::cli::parse_npy(bytes, "bad.npy");
    ADD_FAILURE() << "no error, expected " << fragment;
  } catch (const ropekit::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

std::vector<std::byte> npy_with_header(const std::string& dict, std::size_t data_bytes) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string file =
      std::string("\x93NUMPY\x01\x00", 8) + char(header.size() & 0xff) + char(header.size() >> 8) + header;
  file.append(data_bytes, '\0');
  const auto b = std::as_bytes(std::span(file));
  return {b.begin(), b.end()};
}

TEST(Npy, EveryMalformedInputIsNamed) {
  const std::vector<std::byte> good =
      ropekit::cli::serialize_npy(array(NpyType::F32, {2, 2}, std::vector<float>(4, 1.0f)));
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(ropekit::cli::parse_npy({good.data(), n}, "cut.npy"), ropekit::Error) << n;
  }
  std::vector<std::byte> bad = good;
  bad[1] = std::byte{'X'};
  expect_npy_error(bad, "not a .npy file");
  bad = good;
  bad[6] = std::byte{9};
  expect_npy_error(bad, ".npy format version = 9");
  expect_npy_error(npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4), "dtype = '>f4'");
  expect_npy_error(npy_with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 8), "dtype = '<f8'");
  expect_npy_error(npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", 4),
                   "fortran_order = True");
  expect_npy_error(npy_with_header("{'descr': '<f4', 'shape': (1,), }", 4), "no 'fortran_order'");
  expect_npy_error(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,) ", 4),
                   "malformed .npy header");
  expect_npy_error(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 4),
                   "non-negative integer");
  expect_npy_error(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12),
                   "4 bytes after the data");
  expect_npy_error(
      npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576, 1048576), }", 0),
      "more than 2^40 elements");
}

TEST(Cli, VersionIsTheProjects) {
  const Result r = run({"--version"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("ropekit ") + ROPEKIT_VERSION + "\n");
  EXPECT_EQ(r.err, "");
}

TEST(Cli, PresetsListsEveryPreset) {
  const Result r = run({"presets"});
  EXPECT_EQ(r.code, 0) << r.err;
  for (const ropekit::Preset& p : ropekit::presets()) EXPECT_NE(r.out.find(p.name), std::string::npos) << p.name;
}

TEST(Cli, FreqsJsonPrintsThePlanExactly) {
  for (const ropekit::Preset& p : ropekit::presets()) {
    SCOPED_TRACE(p.name);
    const Result r = run({"freqs", "--preset", std::string(p.name), "--json", "--seq-len", "200000"});
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const ropekit::ModelPositions model = ropekit::read_preset(p.name);
    ASSERT_EQ(j.is_array(), model.groups.size() > 1);
    for (std::size_t i = 0; i < model.groups.size(); ++i) {
      const nlohmann::json& o = j.is_array() ? j[i] : j;
      const ropekit::LayerPositions& layer =
          j.is_array() ? model.layer(o["layer_type"].get<std::string>()) : model.layer();
      const ropekit::Plan plan = ropekit::make_plan(layer.spec, 200000);
      EXPECT_EQ(o["inv_freq"].get<std::vector<double>>(), plan.inv_freq);
      EXPECT_EQ(o["cos_sin_scale"].get<double>(), plan.cos_sin_scale);
      EXPECT_EQ(o["softmax_scale_mult"].get<double>(), plan.softmax_scale_mult);
      EXPECT_EQ(o["rotary_dim"].get<int>(), layer.spec.rotary_dim);
      EXPECT_EQ(o["head_dim"].get<int>(), layer.spec.head_dim);
      EXPECT_EQ(o["pairing"].get<std::string>(), ropekit::to_string(layer.spec.pairing));
      EXPECT_EQ(o["rope_type"].get<std::string>(), ropekit::rope_type_name(layer.spec.scaling));
    }
  }
  // --seq-len is the current length: Phi-3 switches to its long factors past 4096.
  const auto short_f = nlohmann::json::parse(run({"freqs", "--preset", "phi-3-mini-128k-instruct", "--json"}).out);
  const auto long_f =
      nlohmann::json::parse(run({"freqs", "--preset", "phi-3-mini-128k-instruct", "--json", "--seq-len", "4097"}).out);
  EXPECT_NE(short_f["inv_freq"], long_f["inv_freq"]);
}

using json = nlohmann::json;
const std::string kRepo = ROPEKIT_REPO_DIR;

// The per-layer story: one summary line per group, --layer selects one layer, freqs --json gives
// one object per group with its layers and encoding; a model without RoPE is reported (exit 0).
TEST(Cli, PerLayerPlans) {
  const std::string exaone = kRepo + "/tests/data/configs/exaone-4.0-32b.json";
  const Result inspect = run({"inspect", "--config", exaone});
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("64 layers"), std::string::npos) << inspect.out.substr(0, 400);
  EXPECT_NE(inspect.out.find("layers 3,7,11,"), std::string::npos);
  EXPECT_NE(inspect.out.find("none (NoPE)"), std::string::npos);
  EXPECT_NE(inspect.out.find("window 4096"), std::string::npos);
  EXPECT_EQ(inspect.out.find("layer type    full_attention"), std::string::npos);  // no pair table for NoPE

  const Result freqs = run({"freqs", "--config", exaone, "--json"});
  ASSERT_EQ(freqs.code, 0) << freqs.err;
  const json all = json::parse(freqs.out);
  ASSERT_TRUE(all.is_array());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]["encoding"], "rope");
  EXPECT_EQ(all[0]["rope_offset"], 0);
  EXPECT_EQ(all[0]["sliding_window"], 4096);
  EXPECT_EQ(all[1]["encoding"], "none");
  EXPECT_EQ(all[1]["layers"][0], 3);
  EXPECT_FALSE(all[1].contains("inv_freq"));

  const Result one = run({"freqs", "--config", exaone, "--json", "--layer", "7"});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(json::parse(one.out)["layer_type"], "full_attention");
  const Result rope_layer = run({"freqs", "--config", exaone, "--json", "--layer", "6"});
  EXPECT_EQ(json::parse(rope_layer.out)["rope_type"], "llama3");

  const Result out_of_range = run({"freqs", "--config", exaone, "--layer", "64"});
  EXPECT_EQ(out_of_range.code, 2);
  EXPECT_NE(out_of_range.err.find("layer = 64: out of range, the model has 64 layers"), std::string::npos)
      << out_of_range.err;
  const Result nope_verify = run({"verify", "--config", exaone, "--layer", "3"});
  EXPECT_EQ(nope_verify.code, 2);
  EXPECT_NE(nope_verify.err.find("layer = 3: has no RoPE (encoding none)"), std::string::npos) << nope_verify.err;

  const Result bloom = run({"inspect", "--config", kRepo + "/tests/data/configs/bloom-560m.json"});
  EXPECT_EQ(bloom.code, 0) << bloom.err;
  EXPECT_NE(bloom.out.find("alibi (16 heads)"), std::string::npos) << bloom.out;
}

TEST(Cli, InspectShowsBandsAndMagnitudes) {
  const Result yarn = run({"inspect", "--preset", "qwen2.5-7b-instruct-yarn4"});
  ASSERT_EQ(yarn.code, 0) << yarn.err;
  for (const char* word : {"extrapolated", "blended", "interpolated", "cos_sin_scale 1.13862944", "wavelength"}) {
    EXPECT_NE(yarn.out.find(word), std::string::npos) << word;
  }
  const Result gemma = run({"inspect", "--preset", "gemma-3-4b", "--layer-type", "sliding_attention"});
  EXPECT_EQ(gemma.code, 0);
  EXPECT_NE(gemma.out.find("base 10000"), std::string::npos);
  // The per-layer summary names both groups; only the selected one gets its pair table.
  EXPECT_NE(gemma.out.find("layer type    sliding_attention (layers 0-4,6-10,"), std::string::npos) << gemma.out;
  EXPECT_EQ(gemma.out.find("layer type    full_attention"), std::string::npos);
  EXPECT_NE(gemma.out.find("layers 5,11,17,23,29"), std::string::npos);
  const Result ds = run({"inspect", "--preset", "deepseek-v3"});
  EXPECT_NE(ds.out.find("softmax_scale_mult 1.87385421"), std::string::npos) << ds.out.substr(0, 600);
  EXPECT_NE(ds.out.find("rope slice    lanes [128, 192)"), std::string::npos);
}

// apply through the CLI equals the library call on the same arrays, bit for bit.
struct ApplyCase {
  std::string preset, layout, dtype;  // dtype: f32 | f16 | bf16
  std::int64_t batch, seq, q_heads, k_heads;
  bool explicit_positions;
  std::string angles = "accurate";
};

void check_apply(const ApplyCase& c) {
  SCOPED_TRACE(c.preset + " " + c.layout + " " + c.dtype + " " + c.angles);
  TempDir dir;
  const ropekit::ModelPositions model = ropekit::read_preset(c.preset);
  const ropekit::LayerPositions& layer = model.layer();
  const std::int64_t d = model.qk_head_dim;
  const NpyType type = c.dtype == "f32" ? NpyType::F32 : c.dtype == "f16" ? NpyType::F16 : NpyType::U16;
  const ropekit::DType dtype = c.dtype == "f32"   ? ropekit::DType::F32
                               : c.dtype == "f16" ? ropekit::DType::F16
                                                  : ropekit::DType::BF16;
  auto make = [&](std::int64_t heads, unsigned seed) {
    const std::vector<float> v = random_floats(std::size_t(c.batch * c.seq * heads * d), seed);
    std::vector<std::int64_t> shape = c.layout == "bhsd" ? std::vector<std::int64_t>{c.batch, heads, c.seq, d}
                                                         : std::vector<std::int64_t>{c.batch, c.seq, heads, d};
    if (type == NpyType::F32) return array(type, shape, v);
    std::vector<std::uint16_t> bits;
    for (float x : v) bits.push_back(type == NpyType::F16 ? ropekit::float_to_f16(x) : ropekit::float_to_bf16(x));
    return array(type, shape, bits);
  };
  NpyArray q = make(c.q_heads, 1), k = make(c.k_heads, 2);
  ropekit::cli::write_npy_file(dir.file("q.npy"), q);
  ropekit::cli::write_npy_file(dir.file("k.npy"), k);
  const int axes = layer.spec.mrope ? 3 : 1;
  std::vector<std::int64_t> pos;  // stream-major, per (batch, seq) token
  std::vector<std::string> args = {"apply",           "--preset", c.preset, "--q",      dir.file("q.npy"), "--k",
                                   dir.file("k.npy"), "--layout", c.layout, "--angles", c.angles};
  if (c.explicit_positions) {
    std::mt19937 rng(7);
    std::vector<std::int32_t> p32;
    for (int a = 0; a < axes; ++a) {
      for (std::int64_t t = 0; t < c.batch * c.seq; ++t) p32.push_back(std::int32_t(rng() % 300000));
    }
    pos.assign(p32.begin(), p32.end());
    std::vector<std::int64_t> shape = {c.batch, c.seq};
    if (axes == 3) shape.insert(shape.begin(), 3);
    ropekit::cli::write_npy_file(dir.file("p.npy"), array(NpyType::I32, shape, p32));
    args.insert(args.end(), {"--positions", dir.file("p.npy")});
  } else {
    for (int a = 0; a < axes; ++a) {
      for (std::int64_t t = 0; t < c.batch * c.seq; ++t) pos.push_back(t % c.seq);
    }
  }
  if (c.dtype == "bf16") args.push_back("--bf16");
  const Result r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;

  // The library call: same positions, current length max(position) + 1, rope slice at rope_offset.
  const std::int64_t current = *std::max_element(pos.begin(), pos.end()) + 1;
  const ropekit::Rope rope(layer.spec, c.angles == "hf" ? ropekit::AngleMode::HfCompat : ropekit::AngleMode::Accurate,
                           current);
  auto view = [&](NpyArray& a, std::int64_t heads) {
    ropekit::Heads h = c.layout == "bhsd" ? ropekit::bhsd(a.data.data(), dtype, c.batch, c.seq, heads, d)
                                          : ropekit::bshd(a.data.data(), dtype, c.batch, c.seq, heads, d);
    h.data = a.data.data() + layer.rope_offset * ropekit::element_size(dtype);
    return h;
  };
  rope.apply(
      {.q = view(q, c.q_heads),
       .k = view(k, c.k_heads),
       .q_out = {},
       .k_out = {},
       .positions = axes == 3 ? ropekit::mrope_positions(pos) : ropekit::positions(std::span<const std::int64_t>(pos)),
       .direction = ropekit::Direction::Forward});
  const NpyArray q_cli = ropekit::cli::read_npy_file(dir.file("q.rope.npy"));
  const NpyArray k_cli = ropekit::cli::read_npy_file(dir.file("k.rope.npy"));
  EXPECT_EQ(q_cli.shape, q.shape);
  EXPECT_TRUE(q_cli.data == q.data) << "q differs from the library call";
  EXPECT_TRUE(k_cli.data == k.data) << "k differs from the library call";
}

TEST(Cli, ApplyEqualsTheLibraryCall) {
  for (const ApplyCase& c : std::vector<ApplyCase>{
           {"llama-3.1-8b", "bhsd", "f32", 1, 9, 4, 2, false},
           {"llama-3.1-8b", "bshd", "bf16", 2, 5, 4, 1, true},
           {"llama-3.1-8b", "bshd", "f32", 2, 5, 4, 1, true, "hf"},
           {"mistral-7b-instruct-v0.2", "bhsd", "f16", 1, 7, 2, 2, true},
           {"gpt-neox-20b", "bhsd", "f32", 1, 6, 3, 3, false},             // partial rotary: 72 lanes pass through
           {"gpt-j-6b", "bshd", "f32", 1, 4, 2, 2, true},                  // interleaved
           {"deepseek-v3", "bshd", "bf16", 1, 3, 2, 1, true},              // rope slice after 128 nope lanes
           {"qwen2-vl-7b", "bhsd", "f32", 1, 4, 2, 1, true},               // M-RoPE (3, B, S) positions
           {"phi-3-mini-128k-instruct", "bhsd", "f32", 1, 3, 1, 1, true},  // long factors (positions > 4096)
       }) {
    check_apply(c);
  }
}

TEST(Cli, ApplyInverseUndoesApply) {
  TempDir dir;
  const NpyArray q = array(NpyType::F32, {1, 2, 3, 128}, random_floats(768, 3));
  ropekit::cli::write_npy_file(dir.file("q.npy"), q);
  ropekit::cli::write_npy_file(dir.file("k.npy"), q);
  ASSERT_EQ(run({"apply", "--preset", "qwen2.5-7b-instruct-yarn4", "--q", dir.file("q.npy"), "--k", dir.file("k.npy"),
                 "--layout", "bhsd", "--out-q", dir.file("rq.npy"), "--out-k", dir.file("rk.npy")})
                .code,
            0);
  ASSERT_EQ(run({"apply", "--preset", "qwen2.5-7b-instruct-yarn4", "--q", dir.file("rq.npy"), "--k", dir.file("rk.npy"),
                 "--layout", "bhsd", "--inverse", "--out-q", dir.file("q2.npy"), "--out-k", dir.file("k2.npy")})
                .code,
            0);
  const NpyArray back = ropekit::cli::read_npy_file(dir.file("q2.npy"));
  const float* a = reinterpret_cast<const float*>(q.data.data());
  const float* b = reinterpret_cast<const float*>(back.data.data());
  for (int i = 0; i < 768; ++i) EXPECT_NEAR(b[i], a[i], 1e-5f * (1 + std::abs(a[i]))) << i;
}

// Without --seq-len, apply plans for max(positions) + 1 (Hugging Face's forward pass), while freqs and
// inspect show the plan at initialisation; each help says which, and the two agree when freqs is
// given that length.
TEST(Cli, ApplyWithoutSeqLenPlansForTheLargestPositionAsItsHelpSays) {
  EXPECT_NE(run({"apply", "--help"}).out.find("max(positions) + 1"), std::string::npos);
  EXPECT_NE(run({"freqs", "--help"}).out.find("the plan at initialisation"), std::string::npos);
  EXPECT_NE(run({"inspect", "--help"}).out.find("the plan at initialisation"), std::string::npos);
  TempDir dir;
  const NpyArray q = array(NpyType::F32, {1, 3, 1, 96}, random_floats(288, 4));
  ropekit::cli::write_npy_file(dir.file("q.npy"), q);
  const std::vector<std::int64_t> pos = {10, 4000, 5000};  // LongRoPE: past the original 4096
  ropekit::cli::write_npy_file(dir.file("p.npy"), array(NpyType::I64, {3}, pos));
  const auto apply = [&](std::vector<std::string> extra, const std::string& out) {
    std::vector<std::string> args = {"apply",
                                     "--preset",
                                     "phi-3-mini-128k-instruct",
                                     "--q",
                                     dir.file("q.npy"),
                                     "--k",
                                     dir.file("q.npy"),
                                     "--positions",
                                     dir.file("p.npy"),
                                     "--layout",
                                     "bshd",
                                     "--out-q",
                                     dir.file(out),
                                     "--out-k",
                                     dir.file("k_" + out)};
    args.insert(args.end(), extra.begin(), extra.end());
    const Result r = run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return ropekit::cli::read_npy_file(dir.file(out)).data;
  };
  const auto by_default = apply({}, "default.npy");
  EXPECT_TRUE(by_default == apply({"--seq-len", "5001"}, "long.npy"));
  EXPECT_FALSE(by_default == apply({"--seq-len", "100"}, "short.npy"));
  const Result freqs = run({"freqs", "--preset", "phi-3-mini-128k-instruct", "--seq-len", "5001", "--json"});
  const ropekit::Plan plan = ropekit::make_plan(ropekit::read_preset("phi-3-mini-128k-instruct").layer().spec, 5001);
  EXPECT_EQ(nlohmann::json::parse(freqs.out)["inv_freq"].get<std::vector<double>>(), plan.inv_freq);
  EXPECT_TRUE(plan.uses_long_factors);
}

// Every bad input: exit code 2, one line on stderr that names the problem.
void expect_usage_error(const std::vector<std::string>& args, const std::string& fragment) {
  const Result r = run(args);
  std::string joined;
  for (const auto& a : args) joined += a + " ";
  EXPECT_EQ(r.code, 2) << joined << "\n" << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << joined << "\nstderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("ropekit: ", 0), 0u) << r.err;
  EXPECT_EQ(r.out, "") << joined << ": stdout before the error";
}

TEST(CliErrors, EachBadInputExitsTwoWithOneLine) {
  TempDir dir;
  const NpyArray q = array(NpyType::F32, {1, 2, 3, 128}, random_floats(768, 4));
  ropekit::cli::write_npy_file(dir.file("q.npy"), q);
  const std::vector<std::byte> good = ropekit::cli::serialize_npy(q);
  std::ofstream(dir.file("cut.npy"), std::ios::binary).write(reinterpret_cast<const char*>(good.data()), 100);
  ropekit::cli::write_npy_file(dir.file("i32.npy"),
                               array(NpyType::I32, {1, 2, 3, 128}, std::vector<std::int32_t>(768, 1)));
  ropekit::cli::write_npy_file(dir.file("u16.npy"),
                               array(NpyType::U16, {1, 2, 3, 128}, std::vector<std::uint16_t>(768, 1)));
  ropekit::cli::write_npy_file(dir.file("hd64.npy"), array(NpyType::F32, {1, 2, 3, 64}, random_floats(384, 5)));
  ropekit::cli::write_npy_file(dir.file("seq4.npy"), array(NpyType::F32, {1, 2, 4, 128}, random_floats(1024, 6)));
  ropekit::cli::write_npy_file(dir.file("3d.npy"), array(NpyType::F32, {2, 3, 128}, random_floats(768, 7)));
  ropekit::cli::write_npy_file(dir.file("p_bad.npy"), array(NpyType::I64, {4}, std::vector<std::int64_t>{0, 1, 2, 3}));
  ropekit::cli::write_npy_file(dir.file("p_neg.npy"), array(NpyType::I64, {3}, std::vector<std::int64_t>{0, -1, 2}));
  ropekit::cli::write_npy_file(dir.file("p_f32.npy"), array(NpyType::F32, {3}, std::vector<float>{0, 1, 2}));
  write_text(dir.file("bad.json"), "{\"model_type\": \"llama\", ");
  write_text(dir.file("types.json"), R"({"model_type": "llama", "hidden_size": "big", "num_attention_heads": 8})");
  write_text(dir.file("nokey.json"), R"({"model_type": "llama", "num_attention_heads": 8})");
  write_text(dir.file("trunc.gguf"), "GGUF\x03\x00");
  const std::string Q = dir.file("q.npy");
  const std::vector<std::string> apply = {"apply", "--preset", "mistral-7b-instruct-v0.2", "--layout", "bhsd"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = apply;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };

  // Usage.
  expect_usage_error({}, "A subcommand is required");
  expect_usage_error({"frobnicate"},
                     "unknown sub-command frobnicate (known: inspect, freqs, apply, presets, bench, decay, verify, "
                     "tokenize, positions, generate, eval, passkey, chart)");
  expect_usage_error({"freqs", "--json"}, "Exactly 1 option from [--config,--preset,--gguf] is required");
  expect_usage_error({"freqs", "--preset", "llama-3.1-8b", "--config", "x.json"}, "2 were given");
  expect_usage_error({"freqs", "--preset", "llama-3.1-8b", "--seq-len", "0"}, "--seq-len: value 0 is not in [1, ");
  expect_usage_error({"freqs", "--preset", "llama-3.1-8b", "--seq-len", "abc"},
                     "--seq-len: value abc is not an integer (see ropekit freqs --help)");
  expect_usage_error({"generate", "--model", "m", "--topp", "x"}, "--topp: value x is not a number");
  expect_usage_error({"inspect", "--preset", "llama-3.1-8b", "--layer", "99"}, "layer = 99");
  expect_usage_error({"positions", dir.file("missing.json")},
                     "positions " + dir.file("missing.json") + ": cannot open");
  expect_usage_error({"positions", dir.path()}, "positions " + dir.path() + ": a directory, not a file");
  expect_usage_error({"freqs", "--preset", "llama-3.1-8b", "--pairing", "diagonal"}, "--pairing");
  expect_usage_error({"bench", "--filter", "no-such-case"}, "--filter matches no case");
  expect_usage_error({"apply", "--preset", "llama-3.1-8b", "--q", Q, "--k", Q, "--layout", "sbhd"}, "--layout");
  expect_usage_error({"decay", "--csv", dir.file("d.csv")}, "at least one --config or --preset");
  expect_usage_error({"decay", "--preset", "llama-3.1-8b"}, "--csv FILE, --svg FILE or both");
  expect_usage_error({"decay", "--preset", "llama-3.1-8b", "--csv", dir.file("d.csv"), "--max-distance", "0"},
                     "--max-distance");
  expect_usage_error({"decay", "--preset", "llama-9", "--csv", dir.file("d.csv")}, "preset = llama-9: unknown");
  expect_usage_error({"decay", "--preset", "llama-3.1-8b", "--svg", dir.file("no/such/dir/d.svg")},
                     ropekit::cli::plots_available() ? "cannot write" : "built without PLplot");
  expect_usage_error({"verify"}, "Exactly 1 option from [--config,--preset,--gguf] is required");
  // Models.
  expect_usage_error({"freqs", "--preset", "llama-9"}, "preset = llama-9: unknown");
  expect_usage_error({"inspect", "--config", dir.file("missing.json")}, "missing.json: cannot open");
  expect_usage_error({"inspect", "--config", dir.file("bad.json")}, "invalid JSON");
  expect_usage_error({"inspect", "--config", dir.file("types.json")}, "hidden_size = \"big\": expected a number");
  expect_usage_error({"inspect", "--config", dir.file("nokey.json")}, "head_dim (and hidden_size");
  expect_usage_error({"inspect", "--gguf", dir.file("trunc.gguf")}, "truncated GGUF");
  expect_usage_error({"inspect", "--preset", "gemma-3-4b", "--layer-type", "global"},
                     "layer type = global: not in this model");
  expect_usage_error({"apply", "--preset", "gemma-3-4b", "--q", Q, "--k", Q, "--layout", "bhsd"},
                     "choose one with --layer-type");
  // Arrays.
  expect_usage_error(with({"--q", dir.file("cut.npy"), "--k", Q}), "truncated .npy");
  expect_usage_error(with({"--q", dir.file("nope.npy"), "--k", Q}), "nope.npy: cannot open");
  expect_usage_error(with({"--q", dir.file("i32.npy"), "--k", Q}), "dtype int32: expected float32, float16");
  expect_usage_error(with({"--q", dir.file("u16.npy"), "--k", Q}), "pass --bf16");
  expect_usage_error(with({"--q", Q, "--k", Q, "--bf16"}), "--bf16 expects uint16");
  expect_usage_error(with({"--q", dir.file("hd64.npy"), "--k", Q}),
                     "head_dim = 64: the model's q/k heads have 128 lanes");
  expect_usage_error(with({"--q", Q, "--k", dir.file("seq4.npy")}), "batch and seq must match");
  expect_usage_error(with({"--q", dir.file("3d.npy"), "--k", Q}), "expected 4 dimensions");
  expect_usage_error(with({"--q", Q, "--k", Q, "--positions", dir.file("p_bad.npy")}),
                     "p_bad.npy: shape (4,): expected (3) or (1, 3)");
  expect_usage_error(with({"--q", Q, "--k", Q, "--positions", dir.file("p_f32.npy")}),
                     "positions must be int32 or int64");
  expect_usage_error(with({"--q", Q, "--k", Q, "--positions", dir.file("p_neg.npy"), "--seq-len", "10"}), "-1");
  expect_usage_error(with({"--q", Q, "--k", Q, "--out-q", dir.file("no/such/dir/q.npy")}), "cannot write");
}

TEST(Cli, DecayWritesOneColumnPerCurveAndAnSvgChart) {
  TempDir dir;
  const Result r = run({"decay", "--preset", "llama-3.2-1b", "--preset", "gemma-3-4b", "--max-distance", "300", "--csv",
                        dir.file("d.csv"), "--svg", dir.file("d.svg")});
  if (!ropekit::cli::plots_available()) {
    // A build without PLplot (the arm64 cross build) refuses the plot by name instead of skipping it silently.
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.err.find("built without PLplot"), std::string::npos) << r.err;
    return;
  }
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream csv(dir.file("d.csv"));
  std::string header, line;
  std::getline(csv, header);
  EXPECT_EQ(header, "distance,\"llama-3.2-1b\",\"gemma-3-4b (sliding_attention)\",\"gemma-3-4b (full_attention)\"");
  const ropekit::Plan plan = ropekit::make_plan(ropekit::read_preset("llama-3.2-1b").layer().spec);
  const std::vector<double> want = ropekit::decay_bound(plan, 300);
  int rows = 0;
  while (std::getline(csv, line)) {
    std::istringstream fields(line);
    std::string distance, value;
    std::getline(fields, distance, ',');
    std::getline(fields, value, ',');
    EXPECT_EQ(std::stoll(distance), rows);
    EXPECT_NEAR(std::stod(value), want[rows], 1e-8 * want[rows]) << "distance " << rows;
    ++rows;
  }
  EXPECT_EQ(rows, 301);
  std::ifstream svg(dir.file("d.svg"));
  const std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 100);  // axes, three curves, legend
  EXPECT_NE(text.find("polyline"), std::string::npos);
}

TEST(Cli, VerifyPassesOnPresetsAndPrintsEachCheck) {
  for (const char* preset : {"llama-3.1-8b", "qwen2.5-7b-instruct-yarn4", "phi-3-mini-128k-instruct", "qwen2-vl-7b"}) {
    const Result r = run({"verify", "--preset", preset, "--json"});
    ASSERT_EQ(r.code, 0) << preset << ": " << r.out << r.err;
    const nlohmann::json checks = nlohmann::json::parse(r.out);
    ASSERT_GE(checks.size(), 7u);
    for (const auto& c : checks) {
      EXPECT_TRUE(c["passed"].get<bool>() || c["skipped"].get<bool>()) << preset << ": " << c.dump();
      EXPECT_LE(c["figure"].get<double>(), c["bound"].get<double>()) << preset << ": " << c.dump();
    }
  }
  const Result text = run({"verify", "--preset", "llama-3.1-8b"});
  EXPECT_NE(text.out.find("PASS  relative_position"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Hugging Face's float32 angles"), std::string::npos);
}

// bench names the host on every JSON line and in its tables, and --summary groups the cases (issue 42). One small
// decode case, quick: the figures are not checked, only what is printed about them.
TEST(Cli, BenchNamesTheHostAndSummarizesGroups) {
  const ropekit::CpuIdentity& cpu = ropekit::cpu_identity();
#if defined(__x86_64__)
  EXPECT_TRUE(cpu.vendor == "GenuineIntel" || cpu.vendor == "AuthenticAMD") << cpu.vendor;
  EXPECT_GE(cpu.family, 6);
  EXPECT_FALSE(cpu.name.empty());
#endif
  const Result r = run({"bench", "--quick", "--json", "--summary", "--filter",
                        "decode/half128/fp32/bshd/inplace/forward/table", "--filter", "t1/step"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto first = r.out.substr(0, r.out.find('\n'));
  const nlohmann::json line = nlohmann::json::parse(first);
  EXPECT_EQ(line["cpu"]["vendor"], cpu.vendor);
  EXPECT_EQ(line["cpu"]["family"], cpu.family);
  EXPECT_EQ(line["cpu"]["model"], cpu.model);
  EXPECT_NE(r.out.find(fmt::format("family {} model {}", cpu.family, cpu.model)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("decode step 128 table inplace fp32 t1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("min - median - max"), std::string::npos) << r.out;
}

TEST(Cli, HelpExitsZero) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"apply", "--help"}, {"freqs", "--help"}}) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("--"), std::string::npos);
  }
  EXPECT_NE(run({"apply", "--help"}).out.find("--layout"), std::string::npos);
}

}  // namespace

// The model sub-commands on the bundled model (models/, data/).
namespace model_cli {

const std::string kModel = kRepo + "/models/tinystories-260k.bin";
const std::string kTok = kRepo + "/models/tok512.bin";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(CliModel, GenerateAtTemperatureZeroPrintsRunCsText) {
  const Result r = run({"generate", "--model", kModel, "--tokenizer", kTok, "--temperature", "0", "--steps", "200",
                        "--prompt", "Once upon a time"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, slurp(kRepo + "/tests/data/runc/greedy-200-once-upon-a-time.txt"));
  EXPECT_NE(r.err.find("achieved tok/s"), std::string::npos);
  // --int8-activations changes only quantized matrices' decode: the float32 model's text is run.c's still.
  const Result int8 = run({"generate", "--model", kModel, "--tokenizer", kTok, "--temperature", "0", "--steps", "200",
                           "--prompt", "Once upon a time", "--int8-activations"});
  ASSERT_EQ(int8.code, 0) << int8.err;
  EXPECT_EQ(int8.out, r.out);
  // --no-mmap (model.hpp's LoadOptions) reads the file into memory: the same text.
  const Result copied = run({"generate", "--model", kModel, "--tokenizer", kTok, "--temperature", "0", "--steps", "200",
                             "--prompt", "Once upon a time", "--no-mmap"});
  ASSERT_EQ(copied.code, 0) << copied.err;
  EXPECT_EQ(copied.out, r.out);
  // A scaled RoPE runs beyond the trained length; a dynamic one re-rotates as it goes.
  const Result yarn = run({"generate", "--model", kModel, "--tokenizer", kTok, "--temperature", "0", "--steps", "600",
                           "--rope-scaling", R"({"rope_type":"dynamic","factor":2})"});
  EXPECT_EQ(yarn.code, 0) << yarn.err;
}

// The text of an SVG PLplot wrote (each character an &#xNN; entity inside a <tspan>), one line per string.
std::string svg_texts(const std::string& svg) {
  std::string out;
  for (std::size_t at = svg.find("<tspan"); at != std::string::npos; at = svg.find("<tspan", at + 1)) {
    std::size_t i = svg.find('>', at) + 1;
    while (svg.compare(i, 3, "&#x") == 0) {
      const std::size_t end = svg.find(';', i);
      const unsigned long code = std::stoul(svg.substr(i + 3, end - i - 3), nullptr, 16);
      if (code < 0x80) {
        out += char(code);
      } else if (code < 0x800) {
        out += char(0xC0 | (code >> 6)), out += char(0x80 | (code & 0x3F));
      } else {
        out += char(0xE0 | (code >> 12)), out += char(0x80 | ((code >> 6) & 0x3F)), out += char(0x80 | (code & 0x3F));
      }
      i = end + 1;
    }
    out += '\n';
  }
  return out;
}

TEST(CliModel, TokenizeThenEval) {
  if (!ropekit::cli::plots_available()) GTEST_SKIP() << "this build has no PLplot (the eval's --svg)";
  const std::string ids = testing::TempDir() + "/excerpt.i32";
  const Result t = run({"tokenize", "--tokenizer", kTok, "--text", kRepo + "/data/tinystories-valid-excerpt.txt",
                        "--stories", "--out", ids});
  ASSERT_EQ(t.code, 0) << t.err;
  const std::string csv = testing::TempDir() + "/lab.csv", json = testing::TempDir() + "/lab.json",
                    svg = testing::TempDir() + "/lab.svg";
  const Result e = run({"eval",
                        "--model",
                        kModel,
                        "--tokens",
                        ids,
                        "--window-size",
                        "256",
                        "--windows",
                        "2",
                        "--lengths",
                        "64,256",
                        "--buckets",
                        "0,64,128",
                        "--trained-length",
                        "64",
                        "--methods",
                        "orig,pi,yarn,restart",
                        "--csv",
                        csv,
                        "--json",
                        json,
                        "--svg",
                        svg});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("N = 256 (s = 4)"), std::string::npos) << e.out;
  const std::string table = slurp(csv);
  EXPECT_EQ(table.substr(0, table.find('\n')), "method,N,scale,bucket_lo,bucket_hi,tokens,mean_nll,ppl");
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 1 + 4 * (1 + 3));
  EXPECT_NE(slurp(json).find("\"window_starts\""), std::string::npos);
  // The chart, as text a reader sees: labelled ticks on both axes, the trained length marked, every
  // method in the legend, the model and N in the title.
  const std::string texts = svg_texts(slurp(svg));
  for (const char* word : {"L0 = 64 (swa window)", "tinystories-260k.bin: PPL by target position, N = 256, s = 4",
                           "128", "restart", "yarn", "perplexity"}) {
    EXPECT_NE(texts.find(word), std::string::npos) << word << " in " << texts;
  }
  EXPECT_NE(e.err.find("eval: "), std::string::npos);  // progress lines (not a terminal)
  EXPECT_NE(e.out.find("protocol: windows 256 tokens (4·L0)"), std::string::npos) << e.out;
}

// `ropekit chart` draws from a lab CSV what eval --svg draws from the run (method names with commas quoted in the CSV
// and read back whole), and `ropekit passkey --svg` its grids; a CSV of anything else is exit code 2.
TEST(CliModel, ChartsFromTheLabsCsv) {
  if (!ropekit::cli::plots_available()) GTEST_SKIP() << "this build has no PLplot";
  const std::string ids = testing::TempDir() + "/chart.i32";
  ASSERT_EQ(run({"tokenize", "--tokenizer", kTok, "--text", kRepo + "/data/tinystories-valid-excerpt.txt", "--stories",
                 "--out", ids})
                .code,
            0);
  const std::string csv = testing::TempDir() + "/regimes.csv", svg = testing::TempDir() + "/regimes.svg",
                    again = testing::TempDir() + "/again.svg";
  const Result e =
      run({"eval", "--model", kModel, "--tokens", ids, "--window-size", "256", "--windows", "1", "--lengths", "128,256",
           "--trained-length", "64", "--methods", "orig,self_extend:W=16,G=4,rerope:w=24", "--csv", csv, "--svg", svg});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(slurp(csv).find("\n\"self_extend:W=16,G=4\",128,2,"), std::string::npos) << slurp(csv);
  const Result c = run({"chart", "--csv", csv, "--svg", again, "--title", "tinystories-260k.bin"});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(svg_texts(slurp(again)), svg_texts(slurp(svg)));  // the same chart, text for text
  const std::string grid = testing::TempDir() + "/passkey.csv", grid_svg = testing::TempDir() + "/passkey.svg";
  const Result p =
      run({"passkey", "--model", kModel, "--tokenizer", kTok, "--methods", "orig,yarn", "--lengths", "200,400",
           "--depths", "0,1", "--keys", "1", "--trained-length", "200", "--csv", grid, "--svg", grid_svg});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(slurp(grid).substr(0, slurp(grid).find('\n')), "method,length,scale,depth,keys,retrieved,accuracy");
  const std::string texts = svg_texts(slurp(grid_svg));
  for (const char* word : {"tinystories-260k.bin: yarn (L0 = 200)", "100%", "400", "0/1", "prompt length (tokens)"}) {
    EXPECT_NE(texts.find(word), std::string::npos) << word << " in " << texts;
  }
  const std::string junk = testing::TempDir() + "/junk.csv", open_quote = testing::TempDir() + "/quote.csv";
  std::ofstream(junk) << "a,b\n1,2\n";
  std::ofstream(open_quote) << "method,N,scale,bucket_lo,bucket_hi,tokens,mean_nll,ppl\n\"orig,64,1,0,32,31,2,7\n";
  for (const auto& [file, needle] : std::vector<std::pair<std::string, std::string>>{
           {junk, "is neither the lab's table"}, {open_quote, "line 2: a quote that is never closed"}}) {
    const Result r = run({"chart", "--csv", file, "--svg", again});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

// Ticks at values a reader can read: powers of two on position axes, 1-2-5 steps on logarithmic value axes,
// a 1-2-5 step on linear axes; a span too narrow for two such ticks gets its ends.
TEST(Charts, TicksAreReadableValues) {
  using ropekit::cli::axis_ticks;
  EXPECT_EQ(axis_ticks(64, 1536, true, true), (std::vector<double>{64, 128, 256, 512, 1024}));
  EXPECT_EQ(axis_ticks(2.1, 61, true, false), (std::vector<double>{5, 10, 20, 50}));
  EXPECT_EQ(axis_ticks(1.9, 520, true, false), (std::vector<double>{2, 5, 10, 20, 50, 100, 200, 500}));
  EXPECT_EQ(axis_ticks(2.1, 2.4, true, false), (std::vector<double>{2.1, 2.4}));
  EXPECT_EQ(axis_ticks(0, 65, false, false), (std::vector<double>{0, 20, 40, 60}));
  EXPECT_EQ(axis_ticks(1, 8192, true, true).size(), 7u);  // 14 powers of two, every other one
  // A small panel's value axis over five decades: the decades, not every other 1-2-5 tick.
  EXPECT_EQ(axis_ticks(4e-6, 0.6, true, false, 6), (std::vector<double>{1e-5, 1e-4, 1e-3, 1e-2, 1e-1}));
}

TEST(CliModel, BadInputExitsTwo) {
  const std::string junk = testing::TempDir() + "/junk.bin";
  std::ofstream(junk) << "this is not a model";
  const std::string odd = testing::TempDir() + "/odd.i32";
  std::ofstream(odd) << "12345";
  const std::string ids = testing::TempDir() + "/big.i32";
  {
    std::ofstream out(ids, std::ios::binary);
    for (std::int32_t v : {1, 600, 3}) out.write(reinterpret_cast<const char*>(&v), 4);
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"generate", "--model", junk, "--tokenizer", kTok}, "junk.bin"},
      {{"generate", "--model", kModel}, "--tokenizer is required"},
      {{"generate", "--model", kModel, "--tokenizer", kRepo + "/tests/data/runc/README.md"}, "token 0"},
      {{"generate", "--model", kModel, "--tokenizer", kTok, "--rope-scaling", "{\"rope_type\":\"yarn\"}"}, "factor"},
      {{"generate", "--model", kModel, "--tokenizer", kTok, "--topp", "2"}, "--topp"},
      {{"eval", "--model", kModel, "--tokens", odd}, "not a whole number"},
      {{"eval", "--model", kModel, "--tokens", ids, "--window-size", "3", "--lengths", "3", "--buckets", "0"},
       "tokens[1] = 600"},
      {{"eval", "--model", kModel, "--text", kRepo + "/data/tinystories-valid-excerpt.txt", "--tokenizer", kTok,
        "--stories", "--window-size", "100000"},
       "window-size = 100000"},
      {{"eval", "--model", kModel, "--tokens", ids, "--methods", "warp"}, "warp"},
      {{"tokenize", "--tokenizer", junk, "--string", "x", "--out", ids}, "junk.bin"},
      {{"passkey", "--model", kModel, "--tokenizer", kTok, "--lengths", "40"}, "passkey length = 40"},
      {{"passkey", "--model", kModel, "--tokenizer", kTok, "--lengths", "200", "--depths", "2"}, "depth = 2"},
      {{"passkey", "--model", kModel, "--tokenizer", kTok, "--keys", "0"}, "keys = 0"},
      {{"passkey", "--model", kModel, "--tokenizer", kTok, "--methods", "warp"}, "warp"},
  };
  for (const auto& [args, needle] : cases) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 2) << args[0] << " " << args[2] << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
}

}  // namespace model_cli

// `ropekit positions`: a JSON description in, the library's position ids out (printed or as int64 .npy);
// every class of bad description is exit code 2 with one line naming the key and the value.
TEST(Cli, PositionsFromADescription) {
  TempDir dir;
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.file(name)) << text;
    return dir.file(name);
  };
  const Result mrope = run({"positions", write("m.json", R"({"kind": "mrope", "family": "qwen2_vl",
      "mm_token_type_ids": [[0, 0, 1, 1, 1, 1, 1, 1, 0]], "image_grid_thw": [[1, 4, 6]]})")});
  ASSERT_EQ(mrope.code, 0) << mrope.err;
  const auto j = nlohmann::json::parse(mrope.out);
  EXPECT_EQ(j["shape"], nlohmann::json({3, 1, 9}));
  EXPECT_EQ(j["rope_deltas"], nlohmann::json({-3}));
  EXPECT_EQ(j["positions"][8], 5);  // the text after the image: 2 + max(4, 6) / 2
  const std::string npy = dir.file("cp.npy");
  const Result cp =
      run({"positions", write("cp.json", R"({"kind": "cp", "seq_len": 8, "cp_size": 2, "cp_rank": 1})"), "--out", npy});
  ASSERT_EQ(cp.code, 0) << cp.err;
  const ropekit::cli::NpyArray a = ropekit::cli::read_npy_file(npy);
  ASSERT_EQ(a.type, ropekit::cli::NpyType::I64);
  std::vector<std::int64_t> values(4);
  std::memcpy(values.data(), a.data.data(), 32);
  EXPECT_EQ(values, (std::vector<std::int64_t>{2, 3, 4, 5}));
  // Vision: Qwen2.5-VL's patches in window order, with the windows; Llama 4's fixed grid.
  const Result vision = run({"positions", write("v.json", R"({"kind": "vision", "grid_thw": [[1, 4, 4]],
      "config": {"model_type": "qwen2_5_vl", "vision_config": {"hidden_size": 64, "num_heads": 2, "window_size": 28}}})")});
  ASSERT_EQ(vision.code, 0) << vision.err;
  const auto v = nlohmann::json::parse(vision.out);
  EXPECT_EQ(v["shape"], nlohmann::json({2, 16}));
  EXPECT_EQ(v["window_index"], nlohmann::json({0, 1, 2, 3}));  // a 28-pixel window holds one merged 2x2 block
  EXPECT_EQ(v["cu_window_seqlens"], nlohmann::json({0, 4, 8, 12, 16}));
  const Result llama4 = run({"positions", write("l4.json", R"({"kind": "vision", "config": {"model_type": "llama4",
      "vision_config": {"hidden_size": 64, "num_attention_heads": 4, "image_size": 28, "patch_size": 14}}})")});
  ASSERT_EQ(llama4.code, 0) << llama4.err;
  EXPECT_EQ(nlohmann::json::parse(llama4.out)["positions"], nlohmann::json({1, 2, 1, 2, 0, 1, 1, 2, 2, 0}));
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"[1", "invalid JSON"},
           {"[1]", "must be a JSON object"},
           {R"({"kind": "ring"})", "\"kind\" = \"ring\""},
           {R"({"kind": "packed", "cu_seqlens": [0, 2], "extra": 1})", "key \"extra\""},
           {R"({"kind": "packed"})", "\"cu_seqlens\" is missing"},
           {R"({"kind": "packed", "cu_seqlens": [0, 2.5]})", "not an integer"},
           {R"({"kind": "packed", "cu_seqlens": [0, 5, 3]})", "cu_seqlens[2] = 3"},
           // Sizes past what the CLI makes (2^26 positions) or the library's grids allow: refused before any
           // allocation (the positions fuzzer's [0, 3, 444444444445] asked for 3.5 TB).
           {R"({"kind": "packed", "cu_seqlens": [0, 3, 444444444445], "start_offsets": [1, 2]})",
            "\"cu_seqlens\"[2] = 444444444445: more than the 2^26 positions"},
           {R"({"kind": "cp", "seq_len": 68719476736, "cp_size": 2, "cp_rank": 0})", "\"seq_len\" = 68719476736"},
           {R"({"kind": "cp", "cu_seqlens": [0, 67108868], "cp_size": 2, "cp_rank": 0})", "\"cu_seqlens\"[1]"},
           {R"({"kind": "vision", "grid_thw": [[1, 65536, 65536]], "config": {"model_type": "qwen2_vl",
               "vision_config": {"embed_dim": 64, "num_heads": 4}}})",
            "more than 16777216 tokens"},  // the library's own bound on vision grids
           {R"({"kind": "mrope", "family": "qwen2_vl", "mm_token_type_ids": [[0, 1]],
               "image_grid_thw": [[4096, 4096, 4096]]})",
            "holds 17179869184"},  // checked against the tokens before anything is made
           {R"({"kind": "cp", "seq_len": 10, "cp_size": 2, "cp_rank": 0})", "multiple of 4"},
           {R"({"kind": "cp", "seq_len": 8, "cp_size": 2, "cp_rank": 2})", "\"cp_rank\" = 2"},
           {R"({"kind": "cp", "seq_len": 8, "cp_size": 2, "cp_rank": 0, "sharding": "ring"})",
            "\"sharding\" = \"ring\""},
           {R"({"kind": "tree", "parents": [-1, 1], "root_position": 0})", "parents[1] = 1"},
           {R"({"kind": "mrope", "family": "llava", "mm_token_type_ids": [[0]]})", "\"family\" = \"llava\""},
           {R"({"kind": "mrope", "family": "qwen2_vl", "mm_token_type_ids": [[0, 1], [0]]})", "row 1 has 1 values"},
           {R"({"kind": "mrope", "family": "qwen2_vl", "mm_token_type_ids": [[0, 1, 1, 1, 1, 1, 1]],
               "image_grid_thw": [[1, 5, 6]]})",
            "spatial_merge_size = 2"},
           {R"({"kind": "mrope", "family": "qwen2_5_vl", "mm_token_type_ids": [[2, 2, 2, 2, 2, 2]],
               "video_grid_thw": [[1, 4, 6]], "second_per_grid_ts": [-1]})",
            "second_per_grid_ts[0] = -1"},
           {R"({"kind": "vision", "config": 3})", "\"config\" must be an object"},
           {R"({"kind": "vision", "config": {"model_type": "llama"}})", "model_type \"llama\""},
           {R"({"kind": "vision", "grid_thw": [[1, 3, 4]], "config": {"model_type": "qwen2_vl",
               "vision_config": {"embed_dim": 64, "num_heads": 4}}})",
            "grids[0] = (1, 3, 4): spatial_merge_size = 2"},
       }) {
    const Result r = run({"positions", write("bad.json", text)});
    EXPECT_EQ(r.code, 2) << text;
    EXPECT_NE(r.err.find(needle), std::string::npos) << text << " → " << r.err;
  }
}
