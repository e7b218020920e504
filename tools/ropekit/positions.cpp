// `ropekit positions`: the position ids of a batch described in JSON (docs/positions.md).
#include "positions.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli.hpp"
#include "model_io.hpp"
#include "npy.hpp"
#include "ropekit/config.hpp"
#include "ropekit/error.hpp"
#include "ropekit/position_ids.hpp"

namespace ropekit::cli {
namespace {

using json = nlohmann::json;

class Reader {
 public:
  Reader(const json& j, std::string_view origin) : j_(j), origin_(origin) {}

  void only(std::initializer_list<const char*> keys) const {
    const std::set<std::string> allowed(keys.begin(), keys.end());
    for (const auto& [key, value] : j_.items()) {
      if (!allowed.contains(key)) {
        throw Error(fmt::format("{}: key \"{}\" is not read for kind \"{}\" (keys: {})", origin_, key, kind(),
                                fmt::join(allowed, ", ")));
      }
    }
  }
  std::string kind() const { return j_.value("kind", std::string()); }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  std::int64_t integer(const char* key, std::optional<std::int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw Error(fmt::format("{}: \"{}\" is missing", origin_, key));
    }
    return as_integer(j_[key], key);
  }
  std::string text(const char* key, std::string fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string())
      throw Error(fmt::format("{}: \"{}\" = {}: must be a string", origin_, key, j_[key].dump()));
    return j_[key].get<std::string>();
  }
  std::vector<std::int64_t> integers(const char* key, bool required) const {
    std::vector<std::int64_t> out;
    if (!has(key)) {
      if (required) throw Error(fmt::format("{}: \"{}\" is missing", origin_, key));
      return out;
    }
    if (!j_[key].is_array()) throw Error(fmt::format("{}: \"{}\" must be an array of integers", origin_, key));
    for (const json& v : j_[key]) out.push_back(as_integer(v, key));
    return out;
  }
  std::vector<double> numbers(const char* key) const {
    std::vector<double> out;
    if (!has(key)) return out;
    if (!j_[key].is_array()) throw Error(fmt::format("{}: \"{}\" must be an array of numbers", origin_, key));
    for (const json& v : j_[key]) {
      if (!v.is_number()) throw Error(fmt::format("{}: \"{}\" holds {}: not a number", origin_, key, v.dump()));
      out.push_back(v.get<double>());
    }
    return out;
  }
  // A rectangular [rows][cols] array of integers.
  std::vector<std::int64_t> matrix(const char* key, std::int64_t& rows, std::int64_t& cols, bool required) const {
    std::vector<std::int64_t> out;
    rows = cols = 0;
    if (!has(key)) {
      if (required) throw Error(fmt::format("{}: \"{}\" is missing", origin_, key));
      return out;
    }
    if (!j_[key].is_array()) throw Error(fmt::format("{}: \"{}\" must be an array of arrays", origin_, key));
    for (const json& row : j_[key]) {
      if (!row.is_array()) throw Error(fmt::format("{}: \"{}\" holds {}: not an array", origin_, key, row.dump()));
      if (rows == 0) cols = std::int64_t(row.size());
      if (std::int64_t(row.size()) != cols) {
        throw Error(fmt::format("{}: \"{}\" row {} has {} values, row 0 has {}", origin_, key, rows, row.size(), cols));
      }
      for (const json& v : row) out.push_back(as_integer(v, key));
      ++rows;
    }
    return out;
  }

 private:
  std::int64_t as_integer(const json& v, const char* key) const {
    if (!v.is_number_integer()) throw Error(fmt::format("{}: \"{}\" holds {}: not an integer", origin_, key, v.dump()));
    return v.get<std::int64_t>();
  }
  const json& j_;
  std::string_view origin_;
};

// The most positions a packed or context-parallel description may ask `ropekit positions` to make: 2^26 (0.5 GiB of
// int64), beyond any sequence a model takes. The library bounds those by the position range (2^47) only, so without
// this a file's few bytes could ask for terabytes (the positions fuzzer's "cu_seqlens": [0, 3, 444444444445] did);
// vision and M-RoPE grids have the library's own bounds.
constexpr std::int64_t kMaxTokens = std::int64_t{1} << 26;

void check_tokens(std::int64_t tokens, std::string_view origin, std::string_view what) {
  if (tokens > kMaxTokens) {
    throw Error(
        fmt::format("{}: {} = {}: more than the 2^26 positions `ropekit positions` makes", origin, what, tokens));
  }
}

// cu_seqlens' largest entry (its end, once the library has checked it does not decrease) against kMaxTokens.
std::vector<std::int64_t> bounded_cu_seqlens(const Reader& r, std::string_view origin) {
  std::vector<std::int64_t> cu = r.integers("cu_seqlens", true);
  for (std::size_t d = 0; d < cu.size(); ++d) check_tokens(cu[d], origin, fmt::format("\"cu_seqlens\"[{}]", d));
  return cu;
}

CpSharding sharding_of(const std::string& s, std::string_view origin) {
  if (s == "contiguous") return CpSharding::Contiguous;
  if (s == "zigzag") return CpSharding::ZigZag;
  if (s == "striped") return CpSharding::Striped;
  throw Error(fmt::format("{}: \"sharding\" = \"{}\": contiguous, zigzag or striped", origin, s));
}

MropeFamily family_of(const std::string& s, std::string_view origin) {
  if (s == "qwen2_vl") return MropeFamily::Qwen2Vl;
  if (s == "qwen2_5_vl") return MropeFamily::Qwen25Vl;
  if (s == "qwen3_vl") return MropeFamily::Qwen3Vl;
  if (s == "glm4v") return MropeFamily::Glm4v;
  throw Error(fmt::format("{}: \"family\" = \"{}\": qwen2_vl, qwen2_5_vl, qwen3_vl or glm4v", origin, s));
}

std::vector<VisionGrid> grids(const Reader& r, const char* key, std::string_view origin) {
  std::int64_t rows = 0, cols = 0;
  const std::vector<std::int64_t> m = r.matrix(key, rows, cols, false);
  if (rows > 0 && cols != 3) throw Error(fmt::format("{}: \"{}\" rows have {} values: (t, h, w)", origin, key, cols));
  std::vector<VisionGrid> out;
  for (std::int64_t i = 0; i < rows; ++i)
    out.push_back({m[std::size_t(3 * i)], m[std::size_t(3 * i + 1)], m[std::size_t(3 * i + 2)]});
  return out;
}

}  // namespace

PositionIds positions_from_json(std::string_view text, std::string_view origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: invalid JSON: {}", origin, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: must be a JSON object with a \"kind\"", origin));
  const Reader r(j, origin);
  const std::string kind = r.text("kind", "");
  PositionIds out;
  if (kind == "packed") {
    r.only({"kind", "cu_seqlens", "start_offsets"});
    out.values = packed_positions(bounded_cu_seqlens(r, origin), r.integers("start_offsets", false));
  } else if (kind == "cp") {
    r.only({"kind", "seq_len", "cu_seqlens", "cp_size", "cp_rank", "sharding", "stripe", "start", "start_offsets"});
    const std::int64_t size = r.integer("cp_size"), rank = r.integer("cp_rank");
    if (size < 1 || size > (1 << 20))
      throw Error(fmt::format("{}: \"cp_size\" = {}: must lie in [1, 2^20]", origin, size));
    if (rank < 0 || rank >= size)
      throw Error(fmt::format("{}: \"cp_rank\" = {}: must lie in [0, {})", origin, rank, size));
    const CpShard shard{.size = int(size),
                        .rank = int(rank),
                        .sharding = sharding_of(r.text("sharding", "zigzag"), origin),
                        .stripe = r.integer("stripe", 1)};
    if (r.has("cu_seqlens")) {
      out.values = cp_positions_packed(bounded_cu_seqlens(r, origin), shard, r.integers("start_offsets", false));
    } else {
      const std::int64_t seq_len = r.integer("seq_len");
      check_tokens(seq_len, origin, "\"seq_len\"");
      out.values = cp_positions(seq_len, shard, r.integer("start", 0));
    }
  } else if (kind == "tree") {
    r.only({"kind", "parents", "root_position"});
    out.values = tree_positions(r.integers("parents", true), r.integer("root_position"));
  } else if (kind == "mrope") {
    r.only({"kind", "family", "rule", "mm_token_type_ids", "attention_mask", "image_grid_thw", "video_grid_thw",
            "second_per_grid_ts", "spatial_merge_size", "tokens_per_second"});
    const MropeFamily family = family_of(r.text("family", ""), origin);
    const std::string rule = r.text("rule", "token_types");
    if (rule != "token_types" && rule != "token_scan") {
      throw Error(
          fmt::format("{}: \"rule\" = \"{}\": token_types (transformers 5) or token_scan (4.57)", origin, rule));
    }
    std::int64_t batch = 0, seq = 0, mrows = 0, mcols = 0;
    const std::vector<std::int64_t> types64 = r.matrix("mm_token_type_ids", batch, seq, true);
    const std::vector<std::int64_t> mask64 = r.matrix("attention_mask", mrows, mcols, false);
    if (batch == 0) throw Error(fmt::format("{}: \"mm_token_type_ids\" is empty", origin));
    if (!mask64.empty() && (mrows != batch || mcols != seq)) {
      throw Error(fmt::format("{}: \"attention_mask\" is {} × {}: mm_token_type_ids is {} × {}", origin, mrows, mcols,
                              batch, seq));
    }
    std::vector<std::int32_t> types;
    for (std::int64_t v : types64) {
      if (v < 0 || v > 2) throw Error(fmt::format("{}: \"mm_token_type_ids\" holds {}: 0, 1 or 2", origin, v));
      types.push_back(std::int32_t(v));
    }
    std::vector<std::uint8_t> mask;
    for (std::int64_t v : mask64) {
      if (v != 0 && v != 1) throw Error(fmt::format("{}: \"attention_mask\" holds {}: 0 or 1", origin, v));
      mask.push_back(std::uint8_t(v));
    }
    const std::vector<VisionGrid> images = grids(r, "image_grid_thw", origin),
                                  videos = grids(r, "video_grid_thw", origin);
    const std::vector<double> seconds = r.numbers("second_per_grid_ts");
    const MropePositionIds ids =
        mrope_position_ids(family, rule == "token_types" ? MropeRule::TokenTypes : MropeRule::TokenScan,
                           {.batch = batch,
                            .seq = seq,
                            .token_types = types,
                            .attention_mask = mask,
                            .image_grids = images,
                            .video_grids = videos,
                            .second_per_grid_ts = seconds,
                            .spatial_merge_size = r.integer("spatial_merge_size", 2),
                            .tokens_per_second = r.integer("tokens_per_second", 2)});
    out.shape = {3, batch, seq};
    out.values = ids.positions;
    out.deltas = ids.deltas;
    return out;
  } else if (kind == "vision") {
    r.only({"kind", "config", "grid_thw"});
    if (!r.has("config") || !j["config"].is_object()) {
      throw Error(fmt::format("{}: \"config\" must be an object (a config.json or its vision_config)", origin));
    }
    const VisionRope v = read_vision_config(j["config"].dump(), fmt::format("{}: config", origin));
    const std::vector<VisionGrid> g = grids(r, "grid_thw", origin);
    switch (v.family) {
      case VisionFamily::Pixtral: out.values = pixtral_position_ids(g, v.patches_per_side); break;
      case VisionFamily::Llama4:
        if (!g.empty())
          throw Error(fmt::format("{}: \"grid_thw\": Llama 4's vision grid is fixed by its config", origin));
        out.values = llama4_vision_position_ids(v.patches_per_side);
        break;
      default:
        out.values = vision_position_ids(g, v.spatial_merge_size);
        if (v.family == VisionFamily::Qwen25Vl) {
          VisionWindows w = vision_window_index(g, v.spatial_merge_size, v.window_size, v.patch_size);
          out.values = window_order(out.values, 2, w.window_index, v.spatial_merge_size * v.spatial_merge_size);
          out.window_index = std::move(w.window_index);
          out.cu_window_seqlens = std::move(w.cu_window_seqlens);
        }
    }
    out.shape = {2, std::int64_t(out.values.size() / 2)};
    return out;
  } else {
    throw Error(fmt::format("{}: \"kind\" = \"{}\": mrope, vision, packed, cp or tree", origin, kind));
  }
  out.shape = {std::int64_t(out.values.size())};
  return out;
}

namespace {
struct PositionsOptions {
  std::string json, out;
};
}  // namespace

void add_positions(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand(
      "positions",
      "position ids of a batch described in JSON: M-RoPE (HF get_rope_index), vision patches, packing, CP shards, "
      "trees");
  auto o = std::make_shared<PositionsOptions>();
  cmd->add_option("json", o->json, "the description (docs/positions.md), a file or - for standard input")->required();
  cmd->add_option("--out", o->out,
                  "write the ids as int64 .npy (M-RoPE: [3, batch, seq], vision: [2, n]) instead of printing them");
  cmd->callback([o, io] {
    const std::string text =
        o->json == "-" ? std::string(std::istreambuf_iterator<char>(std::cin), {}) : read_text(o->json, "positions");
    const PositionIds ids = positions_from_json(text, o->json);
    if (!o->out.empty()) {
      NpyArray a{NpyType::I64, ids.shape, std::vector<std::byte>(ids.values.size() * 8)};
      std::memcpy(a.data.data(), ids.values.data(), a.data.size());
      write_npy_file(o->out, a);
      fmt::print(io.out, "{} position ids, shape ({}) → {}\n", ids.values.size(), fmt::join(ids.shape, ", "), o->out);
    } else {
      nlohmann::json j;
      j["shape"] = ids.shape;
      j["positions"] = ids.values;
      if (!ids.deltas.empty()) j["rope_deltas"] = ids.deltas;
      if (!ids.window_index.empty()) {
        j["window_index"] = ids.window_index;
        j["cu_window_seqlens"] = ids.cu_window_seqlens;
      }
      io.out << j.dump() << "\n";
    }
  });
}

}  // namespace ropekit::cli
