// NumPy .npy files (format versions 1.0, 2.0 and 3.0), little-endian and C-ordered only: what
// `numpy.save` writes for the arrays `ropekit apply` reads and writes. The parser checks every
// length against the bytes present, so a truncated or malformed file gives a ropekit::Error naming
// the file and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ropekit::cli {

enum class NpyType { F32, F16, U16, I32, I64 };

struct NpyArray {
  NpyType type = NpyType::F32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;  // C order, little-endian

  std::int64_t count() const;
  std::string shape_string() const;  // "(1, 32, 16, 128)"
};

std::string_view npy_descr(NpyType type);      // "<f4", ...
std::string_view npy_type_name(NpyType type);  // "float32", ...
std::size_t npy_item_size(NpyType type);

NpyArray parse_npy(std::span<const std::byte> bytes, std::string_view origin);
NpyArray read_npy_file(const std::filesystem::path& path);
std::vector<std::byte> serialize_npy(const NpyArray& array);
void write_npy_file(const std::filesystem::path& path, const NpyArray& array);

}  // namespace ropekit::cli
