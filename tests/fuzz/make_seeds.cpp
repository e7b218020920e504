// Writes starting corpora for the GGUF and .npy fuzzers: a few valid files of the shapes the
// readers accept (config.json seeds are the presets themselves).
#include <filesystem>
#include <fstream>
#include <limits>

#include "gguf_writer.hpp"
#include "model_files.hpp"
#include "npy.hpp"

namespace {

void save(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::filesystem::path dir(argv[1]);
  std::filesystem::create_directories(dir / "gguf");
  std::filesystem::create_directories(dir / "npy");
  std::filesystem::create_directories(dir / "model");
  std::filesystem::create_directories(dir / "gguf_model");
  std::filesystem::create_directories(dir / "tokenizer");
  std::filesystem::create_directories(dir / "append");

  // append_fuzz: a slot mapping and a page table that prepare_append accepts (the field order of
  // append_fuzz.cpp: mode, pages, page size, kv heads, tokens, head_dim, scale, scale used, dtype,
  // layout, k_offset, with mode's high bit the cos/sin cache's claimed rows, given rows and first
  // position, then int32 arrays).
  {
    const auto seed = [&](const char* name, std::uint8_t mode, std::uint8_t dtype, std::vector<std::int32_t> arrays,
                          std::vector<std::uint8_t> external = {}) {
      std::vector<std::byte> bytes;
      const auto put = [&](const void* p, std::size_t n) {
        bytes.insert(bytes.end(), static_cast<const std::byte*>(p), static_cast<const std::byte*>(p) + n);
      };
      const std::uint8_t head[] = {mode, 4, 4, 2, 3, 16};
      put(head, sizeof head);
      const float scale = 0.5f;
      put(&scale, 4);
      const std::uint8_t tail[] = {dtype == 4 ? std::uint8_t{1} : std::uint8_t{0}, dtype, 1, 4};
      put(tail, sizeof tail);
      put(external.data(), external.size());
      put(arrays.data(), arrays.size() * 4);
      save(dir / "append" / name, bytes);
    };
    seed("slots", 0, 1, {5, 0, 15});
    seed("slots_fp8", 0, 4, {1, 2, -1});
    // mode 3: batch 1; indptr {0, 2}, last_page_len {3}, batch_indices {0, 0, 0}, seq_positions {4, 5, 6}, indices {2,
    // 1}
    seed("pages", 3, 2, {0, 2, 3, 0, 0, 0, 4, 5, 6, 2, 1});
    // An imported cos/sin cache of 10 rows (values: these words as floats), positions 2, 3, 4.
    seed("slots_cos_sin_cache", 0x80, 2, {5, 0, 15, 0x3f000000, 0x3e800000}, {10, 10, 2});
  }

  // Tiny models in both llama2.c exports and as GGUF (F32, F16, BF16; with a tokenizer), and tokenizers.
  for (bool shared : {true, false}) {
    const ropekit::LlamaModel tiny = model_files::tiny_model(shared);
    const std::string tag = shared ? "shared" : "unshared";
    save(dir / "model" / ("legacy_" + tag + ".bin"), model_files::legacy_bytes(tiny));
    save(dir / "model" / ("v1_" + tag + ".bin"), model_files::version1_bytes(tiny));
  }
  const std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", " ", "a", "b", " a", "ab", "<0x41>", "\xE2\x82\xAC"};
  const std::vector<float> scores = {0, 0, 0, -1, -2, -2, -0.5f, -0.25f, 0, -3};
  save(dir / "tokenizer" / "small.bin", model_files::tokenizer_bytes(pieces, scores));
  {
    const ropekit::Tokenizer tokenizer = ropekit::Tokenizer::from_llama2c(model_files::tokenizer_bytes(pieces, scores));
    ropekit::LlamaModel tiny = model_files::tiny_model(false);
    for (std::uint32_t type : {0u, 1u, 30u}) {
      save(dir / "gguf_model" / ("tiny_" + std::to_string(type) + ".gguf"),
           model_files::gguf_bytes(tiny, type, &tokenizer));
    }
  }

  gguf_test::Writer llama;
  llama.str("general.architecture", "llama");
  llama.u32("llama.context_length", 131072);
  llama.u32("llama.embedding_length", 4096);
  llama.u32("llama.attention.head_count", 32);
  llama.f32("llama.rope.freq_base", 500000.0f);
  llama.u32("llama.rope.dimension_count", 128);
  gguf_test::Writer yarn = llama;
  llama.tensor_f32("rope_freqs.weight", std::vector<float>(64, 2.0f));
  save(dir / "gguf" / "llama3.gguf", llama.bytes());
  yarn.str("llama.rope.scaling.type", "yarn");
  yarn.f32("llama.rope.scaling.factor", 4.0f);
  yarn.u32("llama.rope.scaling.original_context_length", 32768);
  yarn.f32("llama.rope.scaling.yarn_log_multiplier", 0.1f);
  save(dir / "gguf" / "yarn.gguf", yarn.bytes(2));
  gguf_test::Writer vl;
  vl.str("general.architecture", "qwen2vl");
  vl.u32("qwen2vl.attention.key_length", 128);
  vl.i32_array("qwen2vl.rope.dimension_sections", {16, 24, 24, 0});
  vl.str("qwen2vl.rope.scaling.type", "longrope");
  vl.u32("qwen2vl.rope.scaling.original_context_length", 4096);
  vl.tensor_f32("rope_factors_long.weight", std::vector<float>(64, 3.0f));
  vl.tensor_f32("rope_factors_short.weight", std::vector<float>(64, 1.0f));
  save(dir / "gguf" / "mrope_longrope.gguf", vl.bytes());
  // Integers beyond int64 and non-finite numbers, where a reader that converts before it checks
  // has undefined behaviour.
  gguf_test::Writer huge;
  huge.str("general.architecture", "llama");
  huge.u64("llama.context_length", ~std::uint64_t{0});
  huge.f64("llama.rope.scaling.original_context_length", 1e300);
  huge.f32_array("llama.attention.head_count", {std::numeric_limits<float>::quiet_NaN(), 32.0f});
  huge.u32("llama.embedding_length", 4096);
  save(dir / "gguf" / "huge_numbers.gguf", huge.bytes());

  using ropekit::cli::NpyArray;
  using ropekit::cli::NpyType;
  save(dir / "npy" / "f32.npy",
       ropekit::cli::serialize_npy(NpyArray{NpyType::F32, {1, 2, 3, 4}, std::vector<std::byte>(96)}));
  save(dir / "npy" / "i64.npy", ropekit::cli::serialize_npy(NpyArray{NpyType::I64, {3}, std::vector<std::byte>(24)}));
  save(dir / "npy" / "u16.npy", ropekit::cli::serialize_npy(NpyArray{NpyType::U16, {}, std::vector<std::byte>(2)}));
  return 0;
}
