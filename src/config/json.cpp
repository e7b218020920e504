// Typed access to config.json values (see json.hpp).
#include "config/json.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "ropekit/error.hpp"

namespace ropekit::detail {

namespace {

// Python's json module (and so transformers' save_pretrained) writes non-finite floats as the bare tokens NaN,
// Infinity and -Infinity, which real config.json files hold (Falcon-H1 and the Mamba-2 family:
// "time_step_limit": [0.0, Infinity]); JSON and nlohmann do not. Outside strings each becomes a string marker that
// no config holds (it starts with a NUL), turned into the double after parsing: a key ropekit reads then fails the
// finite check naming it, and the rest is ignored as before.
constexpr std::string_view kMarker = "\\u0000ropekit-nonfinite:";

struct Rewritten {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> shifts;  // (offset in text, bytes added there)
};

std::optional<Rewritten> rewrite_nonfinite(std::string_view text) {
  std::optional<Rewritten> out;
  bool in_string = false;
  std::size_t copied = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    for (std::string_view token :
         {std::string_view("-Infinity"), std::string_view("Infinity"), std::string_view("NaN")}) {
      if (text.substr(i, token.size()) != token) continue;
      if (!out) out.emplace();
      out->text.append(text.substr(copied, i - copied));
      const std::string marker = fmt::format("\"{}{}\"", kMarker, token);
      out->shifts.emplace_back(out->text.size(), marker.size() - token.size());
      out->text += marker;
      i += token.size() - 1;
      copied = i + 1;
      break;
    }
  }
  if (out) out->text.append(text.substr(copied));
  return out;
}

// The markers back to doubles; iterative, as deep nesting is valid input.
void restore_nonfinite(json& root) {
  const std::string prefix = fmt::format("{}{}", std::string_view("\0", 1), kMarker.substr(6));
  std::vector<json*> todo = {&root};
  while (!todo.empty()) {
    json* j = todo.back();
    todo.pop_back();
    if (j->is_structured()) {
      for (json& child : *j) todo.push_back(&child);
    } else if (j->is_string()) {
      const std::string& s = j->get_ref<const std::string&>();
      if (!s.starts_with(prefix)) continue;
      const std::string_view token = std::string_view(s).substr(prefix.size());
      *j = token == "NaN"        ? std::numeric_limits<double>::quiet_NaN()
           : token == "Infinity" ? std::numeric_limits<double>::infinity()
                                 : -std::numeric_limits<double>::infinity();
    }
  }
}

}  // namespace

void release(json& root) noexcept {
  // Each step removes the last child of the deepest container on the path of last children: a scalar or an empty
  // container, whose destructor needs no memory. The path is kept in a fixed window (no allocation); past its depth
  // the walk starts again from the root (deep documents: quadratic in depth / window, linear in size otherwise).
  constexpr std::size_t kWindow = 128;
  std::array<json*, kWindow> path{};
  std::size_t depth = 0;
  bool clipped = false;  // the window dropped the path's top: walk down again from the root when it empties
  path[depth++] = &root;
  while (depth > 0) {
    json& c = *path[depth - 1];
    const bool has_children = c.is_structured() && !c.empty();
    if (!has_children) {
      if (--depth == 0 && clipped) {
        clipped = false;
        path[depth++] = &root;
      }
      continue;
    }
    json& last =
        c.is_array() ? c.get_ref<json::array_t&>().back() : std::prev(c.get_ref<json::object_t&>().end())->second;
    if (last.is_structured() && !last.empty()) {
      if (depth == kWindow) {
        path[0] = &last;  // the window's new top; the ancestors are found again from the root
        depth = 1;
        clipped = true;
      } else {
        path[depth++] = &last;
      }
      continue;
    }
    if (c.is_array()) {
      c.get_ref<json::array_t&>().pop_back();
    } else {
      auto& object = c.get_ref<json::object_t&>();
      object.erase(std::prev(object.end()));
    }
  }
}

Document parse_json(std::string_view text, std::string_view origin) {
  const std::optional<Rewritten> rewritten = rewrite_nonfinite(text);
  const std::string_view parsed = rewritten ? std::string_view(rewritten->text) : text;
  Document root;
  try {
    // json::parse would build into its own value and free it by the allocating destructor on a failure part-way.
    nlohmann::detail::json_sax_dom_parser<json> builder(*root, /*allow_exceptions=*/true);
    json::sax_parse(parsed.begin(), parsed.end(), &builder);
    if (rewritten) restore_nonfinite(*root);
    return root;
  } catch (const json::parse_error& e) {
    // nlohmann's message names the byte and what it expected; keep it on one line. The byte is the input's, before
    // any marker was put in.
    std::size_t byte = e.byte;
    if (rewritten) {
      std::size_t added = 0;
      for (const auto& [at, n] : rewritten->shifts) {
        if (at < e.byte) added += n;
      }
      byte -= std::min(added, byte);
    }
    throw Error(fmt::format("{}: invalid JSON at byte {}: {}", origin, byte, e.what()));
  } catch (const json::exception& e) {  // e.g. out_of_range: a number beyond double (found by fuzzing)
    throw Error(fmt::format("{}: invalid JSON: {}", origin, e.what()));
  }
}

std::string show(const json& value) {
  if (value.is_number_float() && !std::isfinite(value.get<double>())) {  // dump() would write null
    const double x = value.get<double>();
    return std::isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity";
  }
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
