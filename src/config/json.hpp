// src/config/json.hpp — typed access to a config.json: every value is read together with the path
// that names it ("text_config.rope_theta", "rope_scaling.factor"), so that a wrong type or value
// becomes a ropekit::Error naming the key, the value and the file.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ropekit::detail {

using json = nlohmann::json;

// Frees `value`'s children without allocating and leaves it an empty container (or as it was, a scalar).
// nlohmann-json's value destructor (noexcept) allocates a stack to free nested values, so a document freed while memory
// is short would call std::terminate; freed here first, its destructor has nothing left that needs memory.
void release(json& value) noexcept;

// A JSON document freed by release(): what parse_json returns and what the readers build, so that running out of
// memory while a config is read is a std::bad_alloc, never std::terminate (tests/alloc_failure_test.cpp).
class Document {
 public:
  Document() = default;
  explicit Document(json value) noexcept : value_(std::move(value)) {}
  Document(Document&& other) noexcept : value_(std::move(other.value_)) {}
  Document& operator=(Document&& other) noexcept {
    release(value_);
    value_ = std::move(other.value_);
    return *this;
  }
  Document(const Document&) = delete;
  Document& operator=(const Document&) = delete;
  ~Document() { release(value_); }

  json& operator*() noexcept { return value_; }
  const json& operator*() const noexcept { return value_; }
  json* operator->() noexcept { return &value_; }
  const json* operator->() const noexcept { return &value_; }

 private:
  json value_;
};

// Parses JSON text; invalid JSON (with the byte nlohmann names) or numbers beyond double become a
// ropekit::Error naming `origin`. Parsed into the Document itself, so that a failure part-way frees what was read
// by release() too.
Document parse_json(std::string_view text, std::string_view origin);

// A short rendering of a JSON value for error messages.
std::string show(const json& value);

// A value found in the config together with the path that names it in messages.
struct Value {
  const json* node = nullptr;  // nullptr: absent or null (HF treats both as unset)
  std::string path;
  explicit operator bool() const { return node != nullptr; }
};

class Reader {
 public:
  // Errors: the top level or text_config is not an object.
  Reader(const json& root, std::string origin);

  [[noreturn]] void fail(std::string_view path, const json& value, std::string_view rule) const;
  [[noreturn]] void missing(std::string_view what) const;
  const std::string& origin() const { return origin_; }

  // obj[key] when obj is an object holding a non-null key, else nullptr.
  static const json* member(const json& obj, std::string_view key);

  // A model-level key: text_config first (multimodal configs keep the language model there), then
  // the top level.
  Value model_key(std::string_view key) const;
  // The first of several spellings of one key (e.g. hidden_size / n_embd).
  Value model_key_any(std::initializer_list<std::string_view> keys) const;

  // Typed reads of a present value (v.node != nullptr); each throws naming v.path.
  double number(const Value& v) const;         // finite
  std::int64_t integer(const Value& v) const;  // integral, |x| ≤ 9e15 (exact in double)
  int small_int(const Value& v) const;         // integral, |x| ≤ 2^30
  bool boolean(const Value& v) const;
  std::string string(const Value& v) const;
  std::vector<double> numbers(const Value& v) const;
  std::vector<int> ints(const Value& v) const;

 private:
  const json& root_;
  const json* text_ = nullptr;
  std::string origin_;
};

}  // namespace ropekit::detail
