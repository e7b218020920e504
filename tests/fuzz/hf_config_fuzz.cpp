// libFuzzer target: the config.json of a Hugging Face model directory → load_hf_model over fixed, valid weights (the
// repository's Gemma 3 checkpoint: every model type, key and layer plan the input names is read against them), then
// one forward pass of a token when the model loads. Rejections are ropekit::Error; nothing may crash, allocate without
// bound or read past a tensor.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "forward_one_token.hpp"
#include "ropekit/error.hpp"
#include "ropekit/model.hpp"

namespace {

namespace fs = std::filesystem;

// A directory of its own holding the checkpoint's weights (a link) and each input as config.json; removed at exit.
struct ModelDir {
  fs::path path = fs::temp_directory_path() / ("ropekit-hf-config-fuzz-" + std::to_string(::getpid()));
  ModelDir() {
    fs::create_directories(path);
    fs::remove(path / "model.safetensors");
    fs::create_symlink(fs::path(ROPEKIT_HF_MODELS) / "gemma3_local_global" / "model.safetensors",
                       path / "model.safetensors");
  }
  ~ModelDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

const fs::path& model_dir() {
  static const ModelDir dir;
  return dir.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path& dir = model_dir();
  std::ofstream(dir / "config.json", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  try {
    forward_one_token(ropekit::load_hf_model(dir));
  } catch (const ropekit::Error&) {
  }
  return 0;
}
