// The case table and its workloads (see cases.hpp).
#include "lib/cases.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>

namespace ropekit::cases {
namespace {

Spec make_spec(int head_dim, int rotary_dim, double base, Pairing pairing, Scaling scaling = scaling::None{},
               std::optional<MRope> mrope = std::nullopt, std::optional<Axial> axial = std::nullopt) {
  return {.head_dim = head_dim,
          .rotary_dim = rotary_dim,
          .base = base,
          .pairing = pairing,
          .scaling = std::move(scaling),
          .mrope = std::move(mrope),
          .axial = std::move(axial)};
}

const std::map<std::string, Spec, std::less<>>& spec_table() {
  static const std::map<std::string, Spec, std::less<>> table = [] {
    constexpr Pairing H = Pairing::Half, I = Pairing::Interleaved;
    const auto yarn = scaling::Yarn{.factor = 8, .original_max_position_embeddings = 4096};
    const auto deepseek =
        scaling::Yarn{.factor = 40.0, .original_max_position_embeddings = 4096, .mscale = 1.0, .mscale_all_dim = 0.707};
    return std::map<std::string, Spec, std::less<>>{
        {"half128", make_spec(128, 128, 1e4, H)},
        {"interleaved128", make_spec(128, 128, 1e4, I)},
        {"half72", make_spec(72, 72, 1e4, H)},
        {"interleaved72", make_spec(72, 72, 1e4, I)},
        {"half80", make_spec(80, 80, 1e4, H)},
        {"half96", make_spec(96, 96, 1e4, H)},
        {"interleaved96", make_spec(96, 96, 1e4, I)},
        {"half32of128", make_spec(128, 32, 1e4, H)},
        {"interleaved32of128", make_spec(128, 32, 1e4, I)},
        {"interleaved6of10", make_spec(10, 6, 1e4, I)},
        {"half20of80", make_spec(80, 20, 1e4, H)},
        {"half2of2", make_spec(2, 2, 1e4, H)},
        {"half64", make_spec(64, 64, 1e4, H)},
        {"interleaved64", make_spec(64, 64, 1e4, I)},
        {"half256", make_spec(256, 256, 1e4, H)},
        {"yarn64", make_spec(64, 64, 1e4, H, yarn)},
        {"deepseek64", make_spec(64, 64, 1e4, I, deepseek)},
        {"deepseek96", make_spec(96, 96, 1e4, I, deepseek)},
        {"mrope_sectioned", make_spec(128, 128, 1e6, H, scaling::None{}, MRope{{16, 24, 24}, MRopeLayout::Sectioned})},
        {"mrope_interleaved",
         make_spec(128, 128, 5e6, H, scaling::None{}, MRope{{24, 20, 20}, MRopeLayout::Interleaved})},
        // Vision encoders' axial RoPE: Qwen2-VL's ViT (80-lane heads, h/w), a 3-axis interleaved one (Llama 4's
        // pairing, N-D) and Pixtral's strided frequencies.
        {"axial_vit80", make_spec(80, 80, 1e4, H, scaling::None{}, std::nullopt, Axial{{20, 20}})},
        {"axial3_interleaved64", make_spec(64, 64, 1e4, I, scaling::None{}, std::nullopt, Axial{{8, 12, 12}})},
        {"axial_strided64",
         make_spec(64, 64, 1e4, H, scaling::None{}, std::nullopt, Axial{{16, 16}, AxialFrequencies::Strided})},
    };
  }();
  return table;
}

std::string_view short_name(DType d) { return d == DType::F32 ? "fp32" : d == DType::BF16 ? "bf16" : "fp16"; }
std::string_view layout_name(Layout l) {
  switch (l) {
    case Layout::Bshd: return "bshd";
    case Layout::Bhsd: return "bhsd";
    case Layout::Strided: return "strided";
    case Layout::BshdOff16: return "bshdoff16";
  }
  return "?";
}
std::string_view positions_name(PositionKind p) {
  return p == PositionKind::Sequential ? "seqpos" : p == PositionKind::Scattered ? "scattered" : "huge";
}
std::string_view direction_name(Direction d) {
  return d == Direction::Forward ? "forward" : d == Direction::Inverse ? "inverse" : "backward";
}
std::string_view bias_name(Bias b) {
  switch (b) {
    case Bias::Alibi: return "/alibi";
    case Bias::RelativeBucket: return "/t5";
    case Bias::Dense: return "/dense";
    case Bias::None: break;
  }
  return "";
}

void store(DType dt, std::byte* p, float v) {
  if (dt == DType::F32) {
    std::memcpy(p, &v, 4);
  } else {
    const std::uint16_t h = dt == DType::BF16 ? float_to_bf16(v) : float_to_f16(v);
    std::memcpy(p, &h, 2);
  }
}

// Values: standard normal, plus (with specials) a sprinkling of ±0, ±inf, NaN, subnormals, huge values
// and values on bf16/fp16 rounding ties.
void fill(Tensor& t, std::mt19937& rng, bool specials) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float special[] = {0.0f,
                           -0.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           1e-40f,
                           -3e-39f,
                           6.0e4f,
                           3e38f,
                           1.0f + 1.0f / 256,
                           1.0f + 3.0f / 2048,
                           65519.0f};
  const std::size_t es = std::size_t(element_size(t.dtype));
  for (std::size_t i = 0; i + es <= t.size; i += es) {
    const float v = specials && rng() % 23 == 0 ? special[rng() % std::size(special)] : normal(rng);
    store(t.dtype, t.data() + i, v);
  }
}

// A tensor of `heads` heads × `dim` lanes per token in `layout`, `misalign` elements past a 64-byte
// boundary, with 16 guard elements before and 64 after.
Tensor make_tensor(DType dt, Layout layout, std::int64_t batch, std::int64_t seq, std::int64_t heads, int dim,
                   int misalign, std::mt19937& rng, bool specials, bool with_values = true) {
  Tensor t;
  t.dtype = dt;
  Heads& v = t.view;
  v.dtype = dt;
  v.batch = batch;
  v.seq = seq;
  v.heads = heads;
  switch (layout) {
    case Layout::Bshd:
    case Layout::BshdOff16: v.head_stride = dim, v.seq_stride = heads * dim, v.batch_stride = seq * heads * dim; break;
    case Layout::Bhsd: v.seq_stride = dim, v.head_stride = seq * dim, v.batch_stride = heads * seq * dim; break;
    case Layout::Strided: {
      const std::int64_t gap = 3;
      v.head_stride = dim + gap;
      v.seq_stride = heads * v.head_stride + gap;
      v.batch_stride = seq * v.seq_stride + gap;
      break;
    }
  }
  const std::int64_t es = element_size(dt);
  const std::int64_t guard_before = layout == Layout::Strided     ? 16 + misalign
                                    : layout == Layout::BshdOff16 ? 16 / element_size(dt)
                                                                  : 0;
  const std::int64_t elements = guard_before + batch * v.batch_stride + 64;
  t.size = std::size_t(elements * es);
  t.storage.resize(t.size + 64);
  t.offset = (64 - reinterpret_cast<std::uintptr_t>(t.storage.data()) % 64) % 64;
  v.data = t.data() + guard_before * es;
  if (with_values) fill(t, rng, specials);
  return t;
}

// Pools the Scattered and Huge positions are drawn from (shuffled, with repeats).
constexpr std::int64_t kPool[] = {0, 1, 2, 17, 4095, 4096, 4097, 20000, 65535, 1 << 20, 1000003, 2147483647};

}  // namespace

namespace {

// One Rope per spec for the whole process: workloads share its growing table (built once, read by
// every case), as an engine shares one Rope across layers and calls. A Rope is safe to read from many
// threads; cases never change its current length.
const Rope& shared_rope(std::string_view name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Rope>, std::less<>> ropes;
  std::lock_guard lock(mutex);
  auto it = ropes.find(name);
  if (it == ropes.end()) it = ropes.emplace(std::string(name), std::make_unique<Rope>(spec(name))).first;
  return *it->second;
}

}  // namespace

const Spec& spec(std::string_view name) {
  const auto& table = spec_table();
  const auto it = table.find(name);
  if (it == table.end()) throw Error(fmt::format("case spec = {}: unknown", name));
  return it->second;
}

std::string Case::name() const {
  const std::string_view stage = seq == 1 ? "decode" : "prefill";
  if (op == Op::Rotate) {
    return fmt::format("rotate/{}/{}/{}/{}/{}/{}/{}/{}/b{}s{}q{}k{}/t{}{}", stage, spec, short_name(dtype),
                       layout_name(layout), in_place ? "inplace" : "outofplace", direction_name(direction),
                       angles == Angles::Table ? "table" : "onthefly", positions_name(positions), batch, seq, q_heads,
                       k_heads, threads, step ? "/step" : "");
  }
  return fmt::format("{}/{}/{}/{}-{}/{}/b{}q{}k{}/h{}:{}/dv{}/{}{}{}{}/t{}",
                     op == Op::Attention ? "attention" : "cache_attention", stage, spec, short_name(dtype),
                     short_name(out_dtype), layout_name(layout), batch, seq, k_seq, q_heads, k_heads, value_dim(),
                     causal ? "causal" : "full", window > 0 ? fmt::format("/w{}", window) : "", bias_name(bias),
                     q_offset > 0 ? fmt::format("/at{}", q_offset) : "", threads);
}

int Case::head_dim() const { return cases::spec(spec).head_dim; }

std::int64_t Case::bytes() const { return 2 * batch * seq * (q_heads + k_heads) * head_dim() * element_size(dtype); }

Case shrunk(Case c, int factor) {
  if (c.op == Op::Rotate || factor <= 1) return c;
  const auto up = [&](std::int64_t n) { return (n + factor - 1) / factor; };
  const std::int64_t after_offset = c.k_seq - c.q_offset;  // keys from the first query on (its own chunk, or none)
  const std::int64_t seq = c.seq == 1 ? 1 : up(c.seq);
  c.q_offset /= factor;
  c.k_seq = c.q_offset + (after_offset == c.seq ? seq : up(after_offset));
  c.seq = seq;
  return c;
}

bool matches(const Case& c, const std::vector<std::string>& filters) {
  const std::string name = c.name();
  return std::all_of(filters.begin(), filters.end(),
                     [&](const std::string& f) { return name.find(f) != std::string::npos; });
}

std::vector<Case> eval_cases() {
  std::vector<Case> out;
  // Rotation: every kernel shape (odd tails, partial rotary, M-RoPE, a magnitude ≠ 1) × dtype ×
  // direction × in/out of place × table/on-the-fly, strided and misaligned, 1–3 threads.
  int n = 0;
  for (const char* s :
       {"half128", "interleaved128", "half72", "interleaved72", "half80", "interleaved96", "half96", "half32of128",
        "interleaved32of128", "interleaved6of10", "half2of2", "yarn64", "mrope_sectioned", "mrope_interleaved",
        "axial_vit80", "axial3_interleaved64", "axial_strided64"}) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      for (Direction dir : {Direction::Forward, Direction::Inverse, Direction::Backward}) {
        for (int variant = 0; variant < 4; ++variant) {
          Case c{.op = Op::Rotate,
                 .spec = s,
                 .dtype = dt,
                 .layout = Layout::Strided,
                 .positions = variant & 2 ? PositionKind::Huge : PositionKind::Scattered,
                 .batch = 2,
                 .seq = 3,
                 .q_heads = 4,
                 .k_heads = 2,
                 .threads = 1 + n++ % 3,
                 .in_place = !(variant & 1),
                 .direction = dir,
                 .angles = variant & 2 ? Angles::OnTheFly : Angles::Table};
          out.push_back(c);
        }
      }
    }
  }
  // Decode: one token (the kernels' one-token path), q and k in buffers of their own, in and out of place, both
  // angle sources, the in-register widths (64–256) and others.
  for (const char* s : {"half128", "half256", "yarn64", "interleaved128", "half72", "half32of128"}) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      for (int variant = 0; variant < 4; ++variant) {
        out.push_back({.op = Op::Rotate,
                       .spec = s,
                       .dtype = dt,
                       .layout = variant & 1 ? Layout::BshdOff16 : Layout::Bshd,
                       .positions = PositionKind::Scattered,
                       .seq = 1,
                       .q_heads = 8,
                       .k_heads = 2,
                       .in_place = variant < 2,
                       .angles = variant == 3 ? Angles::OnTheFly : Angles::Table});
      }
    }
  }
  // Calls big enough that several threads really run (each gets >= 256 KiB), every thread count.
  for (const char* s : {"half128", "interleaved128"}) {
    for (DType dt : {DType::F32, DType::BF16}) {
      for (int threads : {1, 2, 3, 4, 7}) {
        out.push_back({.op = Op::Rotate,
                       .spec = s,
                       .dtype = dt,
                       .layout = Layout::Bshd,
                       .seq = 97,
                       .q_heads = 32,
                       .k_heads = 8,
                       .threads = threads});
      }
    }
  }
  // Layouts HF and engines use.
  for (Layout layout : {Layout::Bshd, Layout::Bhsd}) {
    out.push_back({.op = Op::Rotate,
                   .spec = "half128",
                   .dtype = DType::BF16,
                   .layout = layout,
                   .batch = 2,
                   .seq = 5,
                   .q_heads = 4,
                   .k_heads = 2,
                   .in_place = false});
  }

  // Attention: fused = apply then attention, within the oracle's bound.
  const Case base{
      .op = Op::Attention, .spec = "half64", .seq = 150, .q_heads = 8, .k_heads = 2, .threads = 0, .k_seq = 150};
  const auto with = [&](auto edit) {
    Case c = base;
    edit(c);
    out.push_back(c);
  };
  for (const char* s : {"half64", "deepseek64"}) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) with([&](Case& c) { c.spec = s, c.dtype = dt; });
  }
  for (DType o : {DType::BF16, DType::F16}) with([&](Case& c) { c.out_dtype = o; });
  with([](Case& c) { c.dtype = DType::BF16, c.out_dtype = DType::BF16; });
  with([](Case& c) { c.seq = c.k_seq = 300; });
  with([](Case& c) { c.seq = 1, c.k_seq = 4100, c.q_offset = 4100; });  // decode after 4100 keys
  with([](Case& c) { c.seq = 70, c.k_seq = 570, c.q_offset = 500; });   // a chunk after a prefix
  for (const std::pair<int, int>& heads : {std::pair{4, 4}, std::pair{6, 2}, std::pair{8, 1}}) {
    with([&](Case& c) { c.q_heads = heads.first, c.k_heads = heads.second; });  // GQA, MQA, MHA
  }
  with([](Case& c) { c.causal = false, c.batch = 2, c.seq = 40, c.k_seq = 90; });
  with([](Case& c) { c.window = 17, c.seq = c.k_seq = 200; });
  with([](Case& c) { c.window = 64, c.batch = 2, c.seq = c.k_seq = 200; });
  for (Bias b : {Bias::Alibi, Bias::RelativeBucket, Bias::Dense}) {
    for (bool causal : {true, false}) with([&](Case& c) { c.bias = b, c.causal = causal, c.seq = c.k_seq = 130; });
  }
  with([](Case& c) { c.spec = "deepseek96", c.v_head_dim = 64; });  // MLA widths: q/k 96, v 64
  with([](Case& c) { c.spec = "half20of80"; });                     // partial rotary, odd head_dim
  with([](Case& c) { c.spec = "half256", c.seq = c.k_seq = 70; });
  with([](Case& c) { c.layout = Layout::Strided, c.dtype = DType::BF16; });
  with([](Case& c) { c.threads = 3; });
  // Decode and chunks against a KV cache (keys stored rotated), every storage type.
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    out.push_back({.op = Op::CacheAttention,
                   .spec = "half64",
                   .dtype = dt,
                   .seq = 1,
                   .q_heads = 8,
                   .k_heads = 2,
                   .threads = 0,
                   .k_seq = 300,
                   .q_offset = 300});
  }
  out.push_back({.op = Op::CacheAttention,
                 .spec = "yarn64",
                 .seq = 20,
                 .q_heads = 8,
                 .k_heads = 2,
                 .threads = 0,
                 .k_seq = 220,
                 .q_offset = 200});
  return out;
}

std::vector<Case> perf_cases() {
  struct Shape {
    int d;
    std::int64_t tokens, q_heads, k_heads;
  };
  std::vector<Case> out;
  for (const Shape& s :
       {Shape{128, 512, 32, 8}, Shape{128, 4096, 32, 8}, Shape{64, 4096, 8, 2}, Shape{128, 1, 32, 8}}) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      for (const char* pairing : {"half", "interleaved"}) {
        for (bool in_place : {true, false}) {
          for (int threads : {1, 2}) {
            for (Angles angles : {Angles::Table, Angles::OnTheFly}) {
              out.push_back({.op = Op::Rotate,
                             .spec = fmt::format("{}{}", pairing, s.d),
                             .dtype = dt,
                             .positions = PositionKind::Sequential,
                             .seq = s.tokens,
                             .q_heads = s.q_heads,
                             .k_heads = s.k_heads,
                             .threads = threads,
                             .in_place = in_place,
                             .angles = angles});
              if (s.tokens == 1) {  // decode: also as an engine's step (prepared once, moved each call)
                out.push_back(out.back());
                out.back().step = true;
              }
            }
          }
        }
      }
    }
  }
  // Rows 16 bytes off a 64-byte boundary, as NumPy arrays and malloc'd buffers often are (one thread, table).
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    for (const char* spec : {"half128", "interleaved128"}) {
      for (bool in_place : {true, false}) {
        out.push_back({.op = Op::Rotate,
                       .spec = spec,
                       .dtype = dt,
                       .layout = Layout::BshdOff16,
                       .positions = PositionKind::Sequential,
                       .seq = 512,
                       .q_heads = 32,
                       .k_heads = 8,
                       .threads = 1,
                       .in_place = in_place});
      }
    }
  }
  // Attention, default threads: prefill fused vs apply-then-attention, decode against a cache.
  for (auto [seq, q, k, spec, dt] :
       {std::tuple{512, 32, 8, "half128", DType::F32}, std::tuple{512, 32, 8, "half128", DType::BF16},
        std::tuple{2048, 8, 2, "half128", DType::F32}, std::tuple{2048, 8, 2, "half128", DType::BF16},
        std::tuple{4096, 8, 8, "half64", DType::F32}}) {
    out.push_back({.op = Op::Attention,
                   .spec = spec,
                   .dtype = dt,
                   .seq = seq,
                   .q_heads = q,
                   .k_heads = k,
                   .threads = 0,
                   .k_seq = seq});
  }
  for (std::int64_t cached : {512, 4096, 32768}) {
    out.push_back({.op = Op::CacheAttention,
                   .spec = "half128",
                   .seq = 1,
                   .q_heads = 32,
                   .k_heads = 8,
                   .threads = 0,
                   .k_seq = cached,
                   .q_offset = cached});
  }
  return out;
}

bool Tensor::same_bytes(const Tensor& other) const {
  return size == other.size && std::memcmp(data(), other.data(), size) == 0;
}

Workload::Workload(const Case& c, std::uint32_t seed)
    : c_(c), head_dim_(c.head_dim()), bytes_(c.bytes()), rope_(shared_rope(c.spec)) {
  std::mt19937 rng(seed);
  const int d = head_dim_, dv = c.value_dim();
  if (c.op == Op::Rotate) {
    const bool specials = c.layout == Layout::Strided || c.specials;  // eval cases: special values too
    const int mis = int(rng() % 5);
    q = make_tensor(c.dtype, c.layout, c.batch, c.seq, c.q_heads, d, mis, rng, specials);
    k = make_tensor(c.dtype, c.layout, c.batch, c.seq, c.k_heads, d, mis + 1, rng, specials);
    // Also for in-place cases: there they are the destination of the benchmark's memcpy ceiling
    // (zero-filled: nothing reads them).
    q_out = make_tensor(c.dtype, c.layout, c.batch, c.seq, c.q_heads, d, int(rng() % 3), rng, specials, !c.in_place);
    k_out = make_tensor(c.dtype, c.layout, c.batch, c.seq, c.k_heads, d, 0, rng, specials, !c.in_place);
    const int axes = rope_.pair_map().num_axes;
    const std::int64_t tokens = c.batch * c.seq;
    for (int a = 0; a < axes; ++a) {
      for (std::int64_t t = 0; t < tokens; ++t) {
        switch (c.positions) {
          case PositionKind::Sequential: pos_.push_back(c.seq == 1 ? 4095 : t % c.seq); break;
          case PositionKind::Scattered: pos_.push_back(kPool[rng() % 8]); break;
          case PositionKind::Huge: pos_.push_back(kPool[rng() % std::size(kPool)]); break;
        }
      }
    }
    if (c.angles == Angles::Table) table_ = rope_.table(*std::max_element(pos_.begin(), pos_.end()) + 1);
    return;
  }

  // Attention: positions q_offset + t and t, three apart between batches.
  q = make_tensor(c.dtype, c.layout, c.batch, c.seq, c.q_heads, d, 1, rng, false);
  k = make_tensor(c.dtype, c.layout, c.batch, c.k_seq, c.k_heads, d, 2, rng, false);
  v = make_tensor(c.dtype, c.layout, c.batch, c.k_seq, c.k_heads, dv, 3, rng, false);
  out = make_tensor(c.out_dtype, Layout::Bshd, c.batch, c.seq, c.q_heads, dv, 0, rng, false);
  unfused_out = out;
  unfused_out.view.data = unfused_out.data() + (static_cast<std::byte*>(out.view.data) - out.data());
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t t = 0; t < c.seq; ++t) q_positions.push_back(c.q_offset + t + 3 * b);
    for (std::int64_t t = 0; t < c.k_seq; ++t) k_positions.push_back(t + 3 * b);
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  switch (c.bias) {
    case Bias::Alibi: alibi = alibi_slopes(int(c.q_heads)); break;
    case Bias::RelativeBucket:
      t5_table.resize(std::size_t(32 * c.q_heads));
      for (float& x : t5_table) x = normal(rng);
      break;
    case Bias::Dense:
      dense_bias.resize(std::size_t(c.q_heads * c.seq * c.k_seq));
      for (float& x : dense_bias) x = normal(rng);
      break;
    case Bias::None: break;
  }
  if (c.op == Op::CacheAttention) {
    cache.emplace(rope_, KvCacheShape{.capacity = c.k_seq, .kv_heads = c.k_heads, .v_head_dim = dv, .dtype = c.dtype});
    cache->append(rope_, k.view, v.view, ropekit::positions(k_positions));
  }
}

RotateArgs Workload::rotate_args() {
  RotateArgs a{.q = q.view, .k = k.view, .direction = c_.direction, .threads = c_.threads};
  a.positions = axial_positions(std::span<const std::int64_t>(pos_), rope_.pair_map().num_axes);
  if (!c_.in_place) {
    a.q_out = q_out.view;
    a.k_out = k_out.view;
  }
  return a;
}

RotateCall Workload::prepare() {
  const RotateArgs a = rotate_args();
  return c_.angles == Angles::OnTheFly ? rope_.prepare_on_the_fly(a) : rope_.prepare(a, table_);
}

AttentionArgs Workload::attention_args() {
  AttentionArgs a;
  a.q = q.view;
  a.k = k.view;
  a.v = v.view;
  a.out = out.view;
  a.q_positions = ropekit::positions(q_positions);
  a.k_positions = ropekit::positions(k_positions);
  a.v_head_dim = c_.value_dim();
  return a;
}

AttentionOptions Workload::attention_options() const {
  AttentionOptions o;
  o.causal = c_.causal;
  o.window = c_.window;
  o.threads = c_.threads;
  switch (c_.bias) {
    case Bias::Alibi: o.bias = AlibiBias{alibi}; break;
    case Bias::RelativeBucket: o.bias = RelativeBucketBias{T5Buckets{32, 128, !c_.causal}, t5_table}; break;
    case Bias::Dense: o.bias = DenseBias{dense_bias.data(), 1, c_.q_heads, c_.seq, c_.k_seq}; break;
    case Bias::None: break;
  }
  return o;
}

void Workload::run() {
  switch (c_.op) {
    case Op::Rotate:
      if (!c_.step) {
        prepare().run();
        return;
      }
      if (!step_call_) step_call_ = prepare();
      step_call_->set_positions(axial_positions(std::span<const std::int64_t>(pos_), rope_.pair_map().num_axes));
      step_call_->run();
      return;
    case Op::Attention: attention(rope_, attention_args(), attention_options()); return;
    case Op::CacheAttention:
      attention(rope_, q.view, ropekit::positions(q_positions), *cache, out.view, attention_options());
      return;
  }
}

void Workload::run_unfused() {
  if (c_.op == Op::Rotate) throw Error("run_unfused: a rotation case has no unfused path");
  const int d = c_.head_dim();
  std::mt19937 rng(0);
  if (q_rot.size == 0) {
    q_rot = make_tensor(c_.dtype, Layout::Bshd, c_.batch, c_.seq, c_.q_heads, d, 0, rng, false);
    if (c_.op == Op::Attention)
      k_rot = make_tensor(c_.dtype, Layout::Bshd, c_.batch, c_.k_seq, c_.k_heads, d, 0, rng, false);
  }
  rope_.apply({.q = q.view, .q_out = q_rot.view, .positions = ropekit::positions(q_positions), .threads = c_.threads});
  AttentionArgs plain = attention_args();
  plain.q = q_rot.view;
  plain.out = unfused_out.view;
  plain.head_dim = d;
  if (c_.op == Op::CacheAttention) {
    const Heads keys = cache->keys();  // as the cache stores them (rotated at append)
    plain.k = keys;
    plain.v = cache->values();
    plain.k_positions = cache->positions();
  } else {
    rope_.apply(
        {.q = k.view, .q_out = k_rot.view, .positions = ropekit::positions(k_positions), .threads = c_.threads});
    plain.k = k_rot.view;
  }
  AttentionOptions o = attention_options();
  o.softmax_scale_mult = rope_.plan().softmax_scale_mult;
  attention(plain, o);
}

}  // namespace ropekit::cases
