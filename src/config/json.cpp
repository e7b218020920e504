// Typed access to config.json values (see json.hpp).
#include "config/json.hpp"

#include <fmt/format.h>

#include <cmath>

#include "ropekit/error.hpp"

namespace ropekit::detail {

json parse_json(std::string_view text, std::string_view origin) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // nlohmann's message names the byte and what it expected; keep it on one line.
    throw Error(fmt::format("{}: invalid JSON at byte {}: {}", origin, e.byte, e.what()));
  } catch (const json::exception& e) {  // e.g. out_of_range: a number beyond double (found by fuzzing)
    throw Error(fmt::format("{}: invalid JSON: {}", origin, e.what()));
  }
}

std::string show(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

Reader::Reader(const json& root, std::string origin) : root_(root), origin_(std::move(origin)) {
  if (!root_.is_object()) fail("the top level", root_, "expected a JSON object");
  if (const json* text = member(root_, "text_config")) {
    if (!text->is_object()) fail("text_config", *text, "expected a JSON object");
    text_ = text;
  }
}

void Reader::fail(std::string_view path, const json& value, std::string_view rule) const {
  throw Error(fmt::format("{}: {} = {}: {}", origin_, path, show(value), rule));
}

void Reader::missing(std::string_view what) const { throw Error(fmt::format("{}: {} is missing", origin_, what)); }

const json* Reader::member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Value Reader::model_key(std::string_view key) const {
  if (text_) {
    if (const json* v = member(*text_, key)) return {v, fmt::format("text_config.{}", key)};
  }
  if (const json* v = member(root_, key)) return {v, std::string(key)};
  return {};
}

Value Reader::model_key_any(std::initializer_list<std::string_view> keys) const {
  for (std::string_view k : keys) {
    if (Value v = model_key(k)) return v;
  }
  return {};
}

double Reader::number(const Value& v) const {
  if (!v.node->is_number()) fail(v.path, *v.node, "expected a number");
  const double x = v.node->get<double>();
  if (!std::isfinite(x)) fail(v.path, *v.node, "expected a finite number");
  return x;
}

std::int64_t Reader::integer(const Value& v) const {
  const double x = number(v);
  if (x != std::floor(x) || std::fabs(x) > 9.0e15) fail(v.path, *v.node, "expected an integer");
  return static_cast<std::int64_t>(x);
}

int Reader::small_int(const Value& v) const {
  const std::int64_t x = integer(v);
  if (x < -(1 << 30) || x > (1 << 30)) fail(v.path, *v.node, "out of range");
  return static_cast<int>(x);
}

bool Reader::boolean(const Value& v) const {
  if (!v.node->is_boolean()) fail(v.path, *v.node, "expected true or false");
  return v.node->get<bool>();
}

std::string Reader::string(const Value& v) const {
  if (!v.node->is_string()) fail(v.path, *v.node, "expected a string");
  return v.node->get<std::string>();
}

std::vector<double> Reader::numbers(const Value& v) const {
  if (!v.node->is_array()) fail(v.path, *v.node, "expected an array of numbers");
  std::vector<double> out;
  for (std::size_t i = 0; i < v.node->size(); ++i) {
    out.push_back(number({&(*v.node)[i], fmt::format("{}[{}]", v.path, i)}));
  }
  return out;
}

std::vector<int> Reader::ints(const Value& v) const {
  if (!v.node->is_array()) fail(v.path, *v.node, "expected an array of integers");
  std::vector<int> out;
  for (std::size_t i = 0; i < v.node->size(); ++i) {
    out.push_back(small_int({&(*v.node)[i], fmt::format("{}[{}]", v.path, i)}));
  }
  return out;
}

}  // namespace ropekit::detail
