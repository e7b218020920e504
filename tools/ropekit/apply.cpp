// `ropekit apply`: rotate q and k stored as NumPy arrays, exactly as the library call does (the
// tests check that the two agree bit for bit).
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <algorithm>
#include <cstring>

#include "cli.hpp"
#include "npy.hpp"
#include "ropekit/error.hpp"
#include "ropekit/rope.hpp"

namespace ropekit::cli {
namespace {

struct ApplyOptions {
  ModelOptions model;
  std::string q_path, k_path, positions_path, out_q, out_k;
  std::string layout;
  std::string angles = "accurate";
  bool bf16 = false;
  bool inverse = false;
};

// "dir/q.npy" → "dir/q.rope.npy"
std::string default_output(const std::string& input) {
  std::filesystem::path p(input);
  return (p.parent_path() / (p.stem().string() + ".rope.npy")).string();
}

DType dtype_of(const NpyArray& a, const std::string& path, bool bf16) {
  if (bf16) {
    if (a.type != NpyType::U16) {
      throw Error(
          fmt::format("{}: dtype {}: --bf16 expects uint16 arrays holding bfloat16 bits", path, npy_type_name(a.type)));
    }
    return DType::BF16;
  }
  switch (a.type) {
    case NpyType::F32: return DType::F32;
    case NpyType::F16: return DType::F16;
    case NpyType::U16: throw Error(fmt::format("{}: dtype uint16: pass --bf16 to read it as bfloat16 bits", path));
    default:
      throw Error(
          fmt::format("{}: dtype {}: expected float32, float16 or (with --bf16) uint16", path, npy_type_name(a.type)));
  }
}

struct Dims {
  std::int64_t batch, seq, heads, head_dim;
};

Dims dims_of(const NpyArray& a, const std::string& path, const std::string& layout) {
  if (a.shape.size() != 4) {
    throw Error(fmt::format("{}: shape {}: expected 4 dimensions ({})", path, a.shape_string(),
                            layout == "bhsd" ? "batch, heads, seq, head_dim" : "batch, seq, heads, head_dim"));
  }
  if (layout == "bhsd") return {a.shape[0], a.shape[2], a.shape[1], a.shape[3]};
  return {a.shape[0], a.shape[1], a.shape[2], a.shape[3]};
}

// Positions as int64, stream-major (M-RoPE: t, then h, then w; axial: axis 0 first), one per (batch, seq) token.
std::vector<std::int64_t> read_positions(const std::string& path, const Dims& d, int axes) {
  const NpyArray p = read_npy_file(path);
  if (p.type != NpyType::I32 && p.type != NpyType::I64) {
    throw Error(fmt::format("{}: dtype {}: positions must be int32 or int64", path, npy_type_name(p.type)));
  }
  // Accepted shapes: (S,) or (B, S); with M-RoPE (3, S) or (3, B, S). (S,) is shared by the batch.
  std::vector<std::int64_t> expect_shared = {d.seq}, expect_full = {d.batch, d.seq};
  if (axes > 1) {
    expect_shared.insert(expect_shared.begin(), axes);
    expect_full.insert(expect_full.begin(), axes);
  }
  const bool shared = p.shape == expect_shared;
  if (!shared && p.shape != expect_full) {
    throw Error(fmt::format(
        "{}: shape {}: expected ({}) or ({}) for {} tokens of batch {}{}", path, p.shape_string(),
        fmt::join(expect_shared, ", "), fmt::join(expect_full, ", "), d.seq, d.batch,
        axes > 1 ? fmt::format(" ({} position streams first: M-RoPE t, h, w or axial axes)", axes) : std::string()));
  }
  auto at = [&](std::int64_t i) -> std::int64_t {
    if (p.type == NpyType::I32) {
      std::int32_t v;
      std::memcpy(&v, p.data.data() + i * 4, 4);
      return v;
    }
    std::int64_t v;
    std::memcpy(&v, p.data.data() + i * 8, 8);
    return v;
  };
  const std::int64_t tokens = d.batch * d.seq;
  std::vector<std::int64_t> out(static_cast<std::size_t>(axes * tokens));
  for (int a = 0; a < axes; ++a) {
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::int64_t src = shared ? a * d.seq + t % d.seq : a * tokens + t;
      out[a * tokens + t] = at(src);
    }
  }
  return out;
}

// A view of the rotated slice of each head (all of it, except DeepSeek's rope part).
Heads view(NpyArray& a, DType dtype, const Dims& d, const std::string& layout, int offset, int lanes_rotated) {
  const Heads h = layout == "bhsd" ? bhsd(a.data.data(), dtype, d.batch, d.seq, d.heads, d.head_dim)
                                   : bshd(a.data.data(), dtype, d.batch, d.seq, d.heads, d.head_dim);
  return lanes(h, offset, lanes_rotated);
}

void run(const ApplyOptions& o, Streams io) {
  const ModelPositions model = o.model.load();
  print_warnings(model, io.err);
  const std::vector<const LayerPositions*> rope_groups = o.model.selected_rope_layers(model);
  if (rope_groups.size() > 1) {
    throw Error(fmt::format("{}: the model has several RoPE layer types: choose one with --layer-type or --layer",
                            model.source));
  }
  const LayerPositions& layer = *rope_groups.front();

  NpyArray q = read_npy_file(o.q_path);
  NpyArray k = read_npy_file(o.k_path);
  const DType q_type = dtype_of(q, o.q_path, o.bf16);
  const DType k_type = dtype_of(k, o.k_path, o.bf16);
  const Dims qd = dims_of(q, o.q_path, o.layout);
  const Dims kd = dims_of(k, o.k_path, o.layout);
  for (const auto& [d, path] : {std::pair{qd, o.q_path}, std::pair{kd, o.k_path}}) {
    if (d.head_dim != layer.qk_head_dim) {
      throw Error(
          fmt::format("{}: head_dim = {}: the model's q/k heads have {} lanes", path, d.head_dim, layer.qk_head_dim));
    }
  }
  if (kd.batch != qd.batch || kd.seq != qd.seq) {
    throw Error(fmt::format("{}: shape {}: batch and seq must match {}'s ({}, {})", o.k_path, k.shape_string(),
                            o.q_path, qd.batch, qd.seq));
  }

  const int axes = layer.spec.num_axes();
  std::vector<std::int64_t> pos;
  if (!o.positions_path.empty()) {
    pos = read_positions(o.positions_path, qd, axes);
  } else {
    for (int a = 0; a < axes; ++a) {
      for (std::int64_t t = 0; t < qd.batch * qd.seq; ++t) pos.push_back(t % qd.seq);
    }
  }
  const Positions positions = axial_positions(std::span<const std::int64_t>(pos), axes);
  std::int64_t current = o.model.seq_len.value_or(0);
  if (!o.model.seq_len && !pos.empty()) {
    current = std::max<std::int64_t>(1, *std::max_element(pos.begin(), pos.end()) + 1);
  }
  const AngleMode mode = o.angles == "hf" ? AngleMode::HfCompat : AngleMode::Accurate;
  const Rope rope(layer.spec, mode, current > 0 ? std::optional(current) : std::nullopt);

  // Outputs start as copies so that lanes outside the rotated slice pass through; then in place.
  NpyArray q_out = q, k_out = k;
  rope.apply({.q = view(q_out, q_type, qd, o.layout, layer.rope_offset, layer.spec.head_dim),
              .k = view(k_out, k_type, kd, o.layout, layer.rope_offset, layer.spec.head_dim),
              .q_out = {},
              .k_out = {},
              .positions = positions,
              .direction = o.inverse ? Direction::Inverse : Direction::Forward});
  const std::string q_dest = o.out_q.empty() ? default_output(o.q_path) : o.out_q;
  const std::string k_dest = o.out_k.empty() ? default_output(o.k_path) : o.out_k;
  write_npy_file(q_dest, q_out);
  write_npy_file(k_dest, k_out);
  fmt::print(io.out, "rotated q {} and k {} ({}, {} pairing, {} angles, current length {}) -> {}, {}\n",
             q.shape_string(), k.shape_string(), rope_type_name(layer.spec.scaling), to_string(layer.spec.pairing),
             to_string(mode), current, q_dest, k_dest);
}

}  // namespace

void add_apply(CLI::App& app, Streams io) {
  auto* cmd = app.add_subcommand("apply", "rotate q and k from .npy files (float32, float16, or bf16 bits as uint16)");
  auto o = std::make_shared<ApplyOptions>();
  o->model.add_to(*cmd, /*with_gguf=*/true,
                  "max(positions) + 1, the length Hugging Face's forward pass plans for (dynamic_rope_update); "
                  "freqs and inspect show that plan with --seq-len max(positions) + 1");
  cmd->add_option("--q", o->q_path, "queries .npy, 4-D in --layout")->required();
  cmd->add_option("--k", o->k_path, "keys .npy, 4-D in --layout (heads may differ from q: GQA)")->required();
  cmd->add_option("--positions", o->positions_path,
                  "int32/int64 .npy: (S,) or (B, S); M-RoPE (3, S) or (3, B, S); default 0..S-1");
  cmd->add_option("--layout", o->layout, "bhsd (HF after transpose) or bshd")
      ->required()
      ->check(CLI::IsMember({"bhsd", "bshd"}));
  cmd->add_option("--out-q", o->out_q, "output for q (default: Q.rope.npy next to the input)");
  cmd->add_option("--out-k", o->out_k, "output for k (default: K.rope.npy next to the input)");
  cmd->add_option("--angles", o->angles, "accurate (default) or hf (Hugging Face's float32 angles)")
      ->check(CLI::IsMember({"accurate", "hf"}));
  cmd->add_flag("--bf16", o->bf16, "read and write uint16 arrays as bfloat16 bits");
  cmd->add_flag("--inverse", o->inverse, "undo a rotation (R(-p), magnitude divided out)");
  cmd->callback([io, o] { run(*o, io); });
}

}  // namespace ropekit::cli
