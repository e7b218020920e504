// A minimal GGUF writer for tests (and fuzz seeds): key/values and tensors of raw bytes, laid out as
// ggml's gguf.cpp writes them (header, key/values, tensor infos, padding to the alignment, data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gguf_test {

class Writer {
 public:
  void u32(const std::string& key, std::uint32_t v) { scalar(key, 4, v); }
  void f32(const std::string& key, float v) { scalar(key, 6, v); }
  void u64(const std::string& key, std::uint64_t v) { scalar(key, 10, v); }
  void i64(const std::string& key, std::int64_t v) { scalar(key, 11, v); }
  void f64(const std::string& key, double v) { scalar(key, 12, v); }
  void f32_array(const std::string& key, const std::vector<float>& v) {
    this->key(key, 9);
    put(kv_, std::uint32_t{6});
    put(kv_, std::uint64_t{v.size()});
    for (float x : v) put(kv_, x);
    ++kv_count_;
  }
  void str(const std::string& key, const std::string& v) {
    this->key(key, 8);
    string(kv_, v);
    ++kv_count_;
  }
  void i32_array(const std::string& key, const std::vector<std::int32_t>& v) {
    this->key(key, 9);
    put(kv_, std::uint32_t{5});
    put(kv_, std::uint64_t{v.size()});
    for (std::int32_t x : v) put(kv_, x);
    ++kv_count_;
  }
  void bool_array(const std::string& key, const std::vector<bool>& v) {
    this->key(key, 9);
    put(kv_, std::uint32_t{7});
    put(kv_, std::uint64_t{v.size()});
    for (bool x : v) put(kv_, std::uint8_t{x});
    ++kv_count_;
  }
  void str_array(const std::string& key, const std::vector<std::string>& v) {
    this->key(key, 9);
    put(kv_, std::uint32_t{8});
    put(kv_, std::uint64_t{v.size()});
    for (const std::string& x : v) string(kv_, x);
    ++kv_count_;
  }
  void tensor_f32(const std::string& name, const std::vector<float>& values, std::uint32_t type = 0) {
    std::vector<std::byte> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    tensors_.push_back({name, {values.size()}, type, std::move(bytes)});
  }
  // dims in ggml order (ne[0] first), `type` a ggml type, `bytes` the data as stored.
  void tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type,
              std::vector<std::byte> bytes) {
    tensors_.push_back({name, std::move(dims), type, std::move(bytes)});
  }
  // Raw bytes appended to the key/value section (for malformed-input tests); counts as one entry.
  void raw_kv(const std::vector<std::byte>& bytes) {
    kv_.insert(kv_.end(), bytes.begin(), bytes.end());
    ++kv_count_;
  }

  std::vector<std::byte> bytes(std::uint32_t version = 3, std::size_t alignment = 32) const {
    // Built from the magic, not inserted into an empty vector: GCC 12's -Wstringop-overflow misreads that.
    std::vector<std::byte> out{std::byte{'G'}, std::byte{'G'}, std::byte{'U'}, std::byte{'F'}};
    put(out, version);
    put(out, std::uint64_t{tensors_.size()});
    put(out, kv_count_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    std::uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      string(out, t.name);
      put(out, std::uint32_t(t.dims.size()));
      for (std::uint64_t dim : t.dims) put(out, dim);
      put(out, t.type);
      put(out, offset);
      offset += (t.bytes.size() + alignment - 1) / alignment * alignment;
    }
    while (out.size() % alignment) out.push_back(std::byte{0});
    for (const Tensor& t : tensors_) {
      const std::size_t at = out.size();
      out.resize(at + t.bytes.size());
      if (!t.bytes.empty()) std::memcpy(out.data() + at, t.bytes.data(), t.bytes.size());
      while (out.size() % alignment) out.push_back(std::byte{0});
    }
    return out;
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::vector<std::byte> bytes;
  };
  template <class T>
  static void put(std::vector<std::byte>& out, T v) {
    const std::size_t at = out.size();
    out.resize(at + sizeof v);
    std::memcpy(out.data() + at, &v, sizeof v);
  }
  static void string(std::vector<std::byte>& out, const std::string& s) {
    put(out, std::uint64_t{s.size()});
    for (char c : s) out.push_back(static_cast<std::byte>(c));
  }
  void key(const std::string& k, std::uint32_t type) {
    string(kv_, k);
    put(kv_, type);
  }
  template <class T>
  void scalar(const std::string& k, std::uint32_t type, T v) {
    key(k, type);
    put(kv_, v);
    ++kv_count_;
  }

  std::vector<std::byte> kv_;
  std::uint64_t kv_count_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace gguf_test
