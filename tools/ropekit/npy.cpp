// The .npy header is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }, padded with spaces to a multiple of 64 bytes and ended by '\n'. This reads the
// subset numpy.save writes (string, bool and int-tuple values) and rejects anything else by name.
#include "npy.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>

#include "ropekit/error.hpp"

namespace ropekit::cli {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;

struct HeaderValue {
  std::string text;                 // a string value, or "True"/"False"
  std::vector<std::int64_t> tuple;  // a shape
  bool is_tuple = false;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view origin) : s_(text), origin_(origin) {}

  std::map<std::string, HeaderValue> parse() {
    std::map<std::string, HeaderValue> out;
    skip_space();
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      std::string key = quoted();
      skip_space();
      expect(':');
      skip_space();
      out[key] = value();
      skip_space();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_space();
      if (peek() != '}') fail("expected ',' or '}'");
    }
    return out;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw Error(fmt::format("{}: malformed .npy header at character {}: {}", origin_, i_, what));
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    ++i_;
    const std::size_t end = s_.find(q, i_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(i_, end - i_));
    i_ = end + 1;
    return out;
  }
  HeaderValue value() {
    HeaderValue v;
    if (peek() == '\'' || peek() == '"') {
      v.text = quoted();
    } else if (peek() == '(') {
      ++i_;
      v.is_tuple = true;
      while (true) {
        skip_space();
        if (peek() == ')') break;
        if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a non-negative integer in the shape");
        std::int64_t n = 0;
        while (std::isdigit(static_cast<unsigned char>(peek()))) {
          if (n > kMaxElements) fail("shape entry too large");
          n = n * 10 + (s_[i_++] - '0');
        }
        v.tuple.push_back(n);
        skip_space();
        if (peek() == ',')
          ++i_;
        else if (peek() != ')')
          fail("expected ',' or ')' in the shape");
      }
      ++i_;
    } else if (s_.substr(i_, 4) == "True") {
      v.text = "True";
      i_ += 4;
    } else if (s_.substr(i_, 5) == "False") {
      v.text = "False";
      i_ += 5;
    } else {
      fail("expected a string, a tuple, True or False");
    }
    return v;
  }

  std::string_view s_;
  std::string_view origin_;
  std::size_t i_ = 0;
};

std::optional<NpyType> type_of(std::string_view descr) {
  for (NpyType t : {NpyType::F32, NpyType::F16, NpyType::U16, NpyType::I32, NpyType::I64}) {
    if (npy_descr(t) == descr) return t;
  }
  return std::nullopt;
}

}  // namespace

std::int64_t NpyArray::count() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::shape_string() const {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

std::string_view npy_descr(NpyType type) {
  switch (type) {
    case NpyType::F32: return "<f4";
    case NpyType::F16: return "<f2";
    case NpyType::U16: return "<u2";
    case NpyType::I32: return "<i4";
    case NpyType::I64: return "<i8";
  }
  return "?";
}

std::string_view npy_type_name(NpyType type) {
  switch (type) {
    case NpyType::F32: return "float32";
    case NpyType::F16: return "float16";
    case NpyType::U16: return "uint16";
    case NpyType::I32: return "int32";
    case NpyType::I64: return "int64";
  }
  return "?";
}

std::size_t npy_item_size(NpyType type) {
  switch (type) {
    case NpyType::F32:
    case NpyType::I32: return 4;
    case NpyType::F16:
    case NpyType::U16: return 2;
    case NpyType::I64: return 8;
  }
  return 0;
}

NpyArray parse_npy(std::span<const std::byte> bytes, std::string_view origin) {
  auto truncated = [&](std::string_view what, std::size_t need) {
    return Error(
        fmt::format("{}: truncated .npy file: {} needs {} bytes, the file has {}", origin, what, need, bytes.size()));
  };
  if (bytes.size() < 10) throw truncated("the preamble", 10);
  if (std::memcmp(bytes.data(), kMagic, 6) != 0) {
    throw Error(fmt::format("{}: not a .npy file (no \\x93NUMPY magic)", origin));
  }
  const auto major = static_cast<unsigned>(bytes[6]);
  std::size_t header_len = 0;
  std::size_t header_start = 0;
  if (major == 1) {
    header_len = static_cast<std::size_t>(bytes[8]) | static_cast<std::size_t>(bytes[9]) << 8;
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw truncated("the preamble", 12);
    std::uint32_t len;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    header_start = 12;
  } else {
    throw Error(fmt::format("{}: .npy format version = {}: only 1, 2 and 3 are supported", origin, major));
  }
  if (header_len > bytes.size() - header_start) throw truncated("the header", header_start + header_len);
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + header_start), header_len);
  const auto dict = HeaderParser(header, origin).parse();

  auto field = [&](const char* key) -> const HeaderValue& {
    auto it = dict.find(key);
    if (it == dict.end()) throw Error(fmt::format("{}: .npy header has no '{}'", origin, key));
    return it->second;
  };
  const HeaderValue& descr = field("descr");
  const HeaderValue& order = field("fortran_order");
  const HeaderValue& shape = field("shape");
  NpyArray out;
  const std::optional<NpyType> type = type_of(descr.text);
  if (descr.is_tuple || !type) {
    throw Error(
        fmt::format("{}: dtype = '{}': supported are <f4 (float32), <f2 (float16), <u2 "
                    "(bfloat16 bits), <i4 and <i8 (positions)",
                    origin, descr.text));
  }
  out.type = *type;
  if (order.text != "False") {
    throw Error(fmt::format("{}: fortran_order = {}: only C-ordered arrays are supported", origin, order.text));
  }
  if (!shape.is_tuple) throw Error(fmt::format("{}: shape = '{}': expected a tuple", origin, shape.text));
  out.shape = shape.tuple;
  std::int64_t count = 1;
  for (std::int64_t d : out.shape) {
    if (d != 0 && count > kMaxElements / d) {
      throw Error(fmt::format("{}: shape = {}: more than 2^40 elements", origin, out.shape_string()));
    }
    count *= d;
  }
  const std::size_t data_start = header_start + header_len;
  const std::size_t need = static_cast<std::size_t>(count) * npy_item_size(out.type);
  const std::size_t have = bytes.size() - data_start;
  if (have < need) {
    throw Error(fmt::format("{}: truncated .npy file: shape {} of {} needs {} data bytes, {} present", origin,
                            out.shape_string(), npy_type_name(out.type), need, have));
  }
  if (have > need) {
    throw Error(
        fmt::format("{}: .npy file has {} bytes after the data of shape {}", origin, have - need, out.shape_string()));
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_start), bytes.end());
  return out;
}

NpyArray read_npy_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the file", path.string()));
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_npy(std::as_bytes(std::span(raw)), path.string());
}

std::vector<std::byte> serialize_npy(const NpyArray& array) {
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npy_descr(array.type),
                                   array.shape_string());
  // Pad with spaces so that the data starts on a 64-byte boundary, then '\n' (as numpy does).
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<std::byte> out(10 + header.size() + array.data.size());
  std::memcpy(out.data(), kMagic, 6);
  out[6] = std::byte{1};
  out[7] = std::byte{0};
  out[8] = static_cast<std::byte>(header.size() & 0xff);
  out[9] = static_cast<std::byte>(header.size() >> 8);
  std::memcpy(out.data() + 10, header.data(), header.size());
  if (!array.data.empty()) std::memcpy(out.data() + 10 + header.size(), array.data.data(), array.data.size());
  return out;
}

void write_npy_file(const std::filesystem::path& path, const NpyArray& array) {
  const std::vector<std::byte> bytes = serialize_npy(array);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("{}: cannot write the file", path.string()));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error(fmt::format("{}: write failed", path.string()));
}

}  // namespace ropekit::cli
