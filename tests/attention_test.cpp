// Softmax attention with fused RoPE: equal bit for bit to apply() followed by attention on the
// rotated tensors, and within the stated bound of a double-precision softmax.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "attention_oracle.hpp"
#include "expect_error.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;
using attn_oracle::Shape;

Spec llama(int d = 64) { return {.head_dim = d, .rotary_dim = d, .base = 10000.0, .pairing = Pairing::Half}; }

// DeepSeek-style YaRN: cos_sin_scale ≠ 1 and softmax_scale_mult ≠ 1 at once.
Spec deepseek_yarn(int d = 64) {
  Spec s = llama(d);
  s.pairing = Pairing::Interleaved;
  s.scaling = scaling::Yarn{.factor = 40.0, .original_max_position_embeddings = 4096, .mscale = 1.0,
                            .mscale_all_dim = 0.707};
  return s;
}

enum class BiasKind { None, Alibi, T5, Dense };

struct Case {
  Spec spec = llama();
  Shape shape{.batch = 1, .q_seq = 150, .k_seq = 150, .q_heads = 8, .kv_heads = 2, .d = 64, .dv = 64};
  DType dtype = DType::F32;
  bool causal = true;
  std::int64_t window = 0;
  BiasKind bias = BiasKind::None;
  std::int64_t q_offset = 0;  // query positions start here (a decode step after a prefix)
  std::int64_t k_offset = 0;
  int threads = 0;
};

struct Data {
  std::vector<float> q, k, v;                  // float32 values (bf16-representable for BF16)
  std::vector<std::uint16_t> q16, k16, v16;    // BF16 storage
  std::vector<std::int64_t> q_pos, k_pos;
  std::vector<float> dense;
};

Data make_data(const Case& c, std::uint32_t seed) {
  const Shape& s = c.shape;
  Data x;
  x.q = attn_oracle::normal(std::size_t(s.batch * s.q_seq * s.q_heads * s.d), seed);
  x.k = attn_oracle::normal(std::size_t(s.batch * s.k_seq * s.kv_heads * s.d), seed + 1);
  x.v = attn_oracle::normal(std::size_t(s.batch * s.k_seq * s.kv_heads * s.dv), seed + 2);
  if (c.dtype == DType::BF16) {
    x.q16 = attn_oracle::to_bf16(x.q), x.k16 = attn_oracle::to_bf16(x.k), x.v16 = attn_oracle::to_bf16(x.v);
    x.q = attn_oracle::widen_bf16(x.q16), x.k = attn_oracle::widen_bf16(x.k16), x.v = attn_oracle::widen_bf16(x.v16);
  }
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t t = 0; t < s.q_seq; ++t) x.q_pos.push_back(c.q_offset + t + 3 * b);
    for (std::int64_t t = 0; t < s.k_seq; ++t) x.k_pos.push_back(c.k_offset + t + 3 * b);
  }
  x.dense = attn_oracle::normal(std::size_t(s.q_heads * s.q_seq * s.k_seq), seed + 3);
  return x;
}

AttentionOptions options_of(const Case& c, const Data& x) {
  AttentionOptions o;
  o.causal = c.causal;
  o.window = c.window;
  o.threads = c.threads;
  if (c.bias == BiasKind::Alibi) o.bias = AlibiBias{alibi_slopes(int(c.shape.q_heads))};
  if (c.bias == BiasKind::T5) {
    RelativeBucketBias t5{T5Buckets{32, 128, !c.causal}, attn_oracle::normal(std::size_t(32 * c.shape.q_heads), 9)};
    o.bias = t5;
  }
  if (c.bias == BiasKind::Dense) {
    o.bias = DenseBias{x.dense.data(), 1, c.shape.q_heads, c.shape.q_seq, c.shape.k_seq};
  }
  return o;
}

attn_oracle::Bias oracle_bias(const Case& c, const AttentionOptions& o) {
  if (const auto* a = std::get_if<AlibiBias>(&o.bias)) {
    const std::vector<float> slopes = a->slopes;
    return [slopes](auto, std::int64_t h, auto, auto, std::int64_t qp, std::int64_t kp) {
      return -double(slopes[h]) * double(std::llabs(qp - kp));
    };
  }
  if (const auto* t = std::get_if<RelativeBucketBias>(&o.bias)) {
    const RelativeBucketBias t5 = *t;
    const std::int64_t heads = c.shape.q_heads;
    return [t5, heads](auto, std::int64_t h, auto, auto, std::int64_t qp, std::int64_t kp) {
      return double(t5.table[t5_bucket(t5.buckets, kp - qp) * heads + h]);
    };
  }
  if (const auto* d = std::get_if<DenseBias>(&o.bias)) {
    const DenseBias dense = *d;
    return [dense](auto, std::int64_t h, std::int64_t s, std::int64_t t, auto, auto) {
      return double(dense.data[(h * dense.queries + s) * dense.keys + t]);
    };
  }
  return {};
}

Heads view(void* data, DType dtype, const Shape& s, std::int64_t seq, std::int64_t heads, int d) {
  return bshd(data, dtype, s.batch, seq, heads, d);
}

// Runs fused and unfused attention for one case, checks they agree bit for bit and both are within
// the documented bound of the double oracle. Returns the worst error / bound ratio.
double check_case(const Case& c, std::uint32_t seed = 1) {
  const Shape& s = c.shape;
  Data x = make_data(c, seed);
  const Rope rope(c.spec);
  void* qd = c.dtype == DType::F32 ? static_cast<void*>(x.q.data()) : x.q16.data();
  void* kd = c.dtype == DType::F32 ? static_cast<void*>(x.k.data()) : x.k16.data();
  void* vd = c.dtype == DType::F32 ? static_cast<void*>(x.v.data()) : x.v16.data();
  const AttentionOptions o = options_of(c, x);

  std::vector<float> fused(std::size_t(s.batch * s.q_seq * s.q_heads * s.dv), -1.0f);
  AttentionArgs args;
  args.q = view(qd, c.dtype, s, s.q_seq, s.q_heads, s.d);
  args.k = view(kd, c.dtype, s, s.k_seq, s.kv_heads, s.d);
  args.v = view(vd, c.dtype, s, s.k_seq, s.kv_heads, s.dv);
  args.out = view(fused.data(), DType::F32, s, s.q_seq, s.q_heads, s.dv);
  args.q_positions = positions(x.q_pos);
  args.k_positions = positions(x.k_pos);
  args.v_head_dim = s.dv;
  attention(rope, args, o);

  // apply() then attention on the rotated copies.
  const std::size_t es = std::size_t(element_size(c.dtype));
  std::vector<std::byte> q_rot(x.q.size() * es), k_rot(x.k.size() * es);
  RotateArgs rotate;
  rotate.q = args.q;
  rotate.q_out = view(q_rot.data(), c.dtype, s, s.q_seq, s.q_heads, s.d);
  rotate.positions = args.q_positions;
  rope.apply(rotate);
  rotate.q = args.k;
  rotate.q_out = view(k_rot.data(), c.dtype, s, s.k_seq, s.kv_heads, s.d);
  rotate.positions = args.k_positions;
  rope.apply(rotate);
  std::vector<float> unfused(fused.size(), -2.0f);
  AttentionArgs plain = args;
  plain.q = view(q_rot.data(), c.dtype, s, s.q_seq, s.q_heads, s.d);
  plain.k = view(k_rot.data(), c.dtype, s, s.k_seq, s.kv_heads, s.d);
  plain.out = view(unfused.data(), DType::F32, s, s.q_seq, s.q_heads, s.dv);
  plain.head_dim = s.d;
  AttentionOptions plain_options = o;
  plain_options.softmax_scale_mult = rope.plan().softmax_scale_mult;
  attention(plain, plain_options);
  EXPECT_EQ(std::memcmp(fused.data(), unfused.data(), fused.size() * 4), 0)
      << "fused attention differs from apply() then attention";

  // The double oracle on the rotated values as stored.
  std::vector<float> qf(x.q.size()), kf(x.k.size());
  if (c.dtype == DType::F32) {
    std::memcpy(qf.data(), q_rot.data(), qf.size() * 4);
    std::memcpy(kf.data(), k_rot.data(), kf.size() * 4);
  } else {
    for (std::size_t i = 0; i < qf.size(); ++i) qf[i] = bf16_to_float(reinterpret_cast<std::uint16_t*>(q_rot.data())[i]);
    for (std::size_t i = 0; i < kf.size(); ++i) kf[i] = bf16_to_float(reinterpret_cast<std::uint16_t*>(k_rot.data())[i]);
  }
  const double scale = float(1.0 / std::sqrt(double(s.d)) * rope.plan().softmax_scale_mult);
  const attn_oracle::Result want =
      attn_oracle::softmax_attention(qf, kf, x.v, s, x.q_pos, x.k_pos, scale, c.causal, c.window, oracle_bias(c, o));
  double max_v = 0.0;
  for (float e : x.v) max_v = std::max(max_v, double(std::fabs(e)));
  double worst = 0.0;
  for (std::size_t i = 0; i < fused.size(); ++i) {
    const double range = want.logit_range[i / s.dv];
    const double bound = 1e-6 * (1.0 + range) * max_v;  // the contract in attention.hpp
    const double err = std::fabs(fused[i] - want.out[i]);
    worst = std::max(worst, err / bound);
    if (err > bound) {
      ADD_FAILURE() << "element " << i << ": " << fused[i] << " vs " << want.out[i] << " (bound " << bound << ")";
      break;
    }
  }
  return worst;
}

TEST(Attention, FusedEqualsApplyThenAttentionAndTheOracle) {
  for (const DType dtype : {DType::F32, DType::BF16}) {
    for (const Spec& spec : {llama(), deepseek_yarn()}) {
      Case c;
      c.spec = spec;
      c.dtype = dtype;
      const double worst = check_case(c);
      RecordProperty("worst_error_over_bound", std::to_string(worst));
      std::printf("dtype %s rope %s: worst error / bound = %.3f\n", std::string(to_string(dtype)).c_str(),
                  std::string(rope_type_name(spec.scaling)).c_str(), worst);
    }
  }
}

TEST(Attention, CausalPrefillAndDecodeAfterAPrefix) {
  Case prefill;
  prefill.shape.q_seq = prefill.shape.k_seq = 300;
  check_case(prefill);
  Case decode;  // one new token at position 4100 against 4100 cached keys (k positions 0..4099)
  decode.shape.q_seq = 1;
  decode.shape.k_seq = 4100;
  decode.q_offset = 4100;
  check_case(decode);
  Case chunk;  // a chunk of 70 queries after 500 keys of prefix: causal by position, not by index
  chunk.shape.q_seq = 70;
  chunk.shape.k_seq = 570;
  chunk.q_offset = 500;
  check_case(chunk);
}

TEST(Attention, GqaMqaAndMultiHead) {
  for (const auto [q_heads, kv_heads] : {std::pair{4, 4}, std::pair{6, 2}, std::pair{8, 1}}) {
    Case c;
    c.shape.q_heads = q_heads;
    c.shape.kv_heads = kv_heads;
    check_case(c);
  }
}

TEST(Attention, NonCausalSlidingWindowAndBatches) {
  Case c;
  c.causal = false;
  c.shape.batch = 2;
  c.shape.q_seq = 40;
  c.shape.k_seq = 90;
  check_case(c);
  Case w;
  w.window = 17;  // Mistral: key visible iff q − k < window
  w.shape.q_seq = w.shape.k_seq = 200;
  check_case(w);
  Case w2 = w;
  w2.window = 64;
  w2.shape.batch = 2;
  check_case(w2);
}

TEST(Attention, Biases) {
  for (const BiasKind bias : {BiasKind::Alibi, BiasKind::T5, BiasKind::Dense}) {
    for (const bool causal : {true, false}) {
      Case c;
      c.bias = bias;
      c.causal = causal;
      c.shape.q_seq = c.shape.k_seq = 130;
      check_case(c);
    }
  }
}

TEST(Attention, WiderValuesPartialRotaryAndOddHeadDims) {
  Case mla;  // DeepSeek MLA-like widths: q/k 96, v 64
  mla.spec = deepseek_yarn(96);
  mla.shape.d = 96;
  mla.shape.dv = 64;
  check_case(mla);
  Case partial;  // GPT-NeoX partial rotary, head_dim 80 (not a multiple of the vector width)
  partial.spec = {.head_dim = 80, .rotary_dim = 20, .base = 10000.0, .pairing = Pairing::Half};
  partial.shape.d = partial.shape.dv = 80;
  check_case(partial);
  Case wide;
  wide.spec = llama(256);
  wide.shape.d = wide.shape.dv = 256;
  wide.shape.q_seq = wide.shape.k_seq = 70;
  check_case(wide);
}

TEST(Attention, ResultsDoNotDependOnTheThreadCount) {
  Case c;
  c.shape.q_seq = c.shape.k_seq = 200;
  const Shape& s = c.shape;
  Data x = make_data(c, 5);
  const Rope rope(c.spec);
  std::vector<float> first;
  for (const int threads : {1, 2, 3, 5}) {
    std::vector<float> out(std::size_t(s.q_seq * s.q_heads * s.dv));
    AttentionArgs args;
    args.q = bshd(x.q.data(), DType::F32, 1, s.q_seq, s.q_heads, s.d);
    args.k = bshd(x.k.data(), DType::F32, 1, s.k_seq, s.kv_heads, s.d);
    args.v = bshd(x.v.data(), DType::F32, 1, s.k_seq, s.kv_heads, s.dv);
    args.out = bshd(out.data(), DType::F32, 1, s.q_seq, s.q_heads, s.dv);
    args.q_positions = positions(x.q_pos);
    args.k_positions = positions(x.k_pos);
    AttentionOptions o;
    o.threads = threads;
    attention(rope, args, o);
    if (first.empty()) first = out;
    EXPECT_EQ(std::memcmp(first.data(), out.data(), out.size() * 4), 0) << threads << " threads";
  }
}

TEST(Attention, QueryThatSeesNoKeyIsZeroAndNaNPropagates) {
  const Rope rope(llama(8));
  std::vector<float> q(8, 0.5f), k(2 * 8, 0.25f), v(2 * 8, 1.0f), out(8, -1.0f);
  const std::vector<std::int64_t> qp = {3}, kp = {5, 6};
  AttentionArgs args;
  args.q = bshd(q.data(), DType::F32, 1, 1, 1, 8);
  args.k = bshd(k.data(), DType::F32, 1, 2, 1, 8);
  args.v = bshd(v.data(), DType::F32, 1, 2, 1, 8);
  args.out = bshd(out.data(), DType::F32, 1, 1, 1, 8);
  args.q_positions = positions(qp);
  args.k_positions = positions(kp);
  attention(rope, args);
  for (float e : out) EXPECT_EQ(e, 0.0f);
  const std::vector<std::int64_t> later = {9};
  args.q_positions = positions(later);
  v[3] = std::numeric_limits<float>::quiet_NaN();
  attention(rope, args);
  EXPECT_TRUE(std::isnan(out[3]));
}

TEST(Attention, MRopeTakesMaskPositionsSeparately) {
  Spec spec = llama(16);
  spec.mrope = MRope{{2, 3, 3}, MRopeLayout::Sectioned};
  const Rope rope(spec);
  std::vector<float> q = attn_oracle::normal(4 * 16, 1), k = attn_oracle::normal(4 * 16, 2),
                     v = attn_oracle::normal(4 * 16, 3), out(4 * 16);
  const std::vector<std::int64_t> streams = {0, 1, 1, 2, 0, 1, 2, 3, 0, 2, 1, 3};  // t, h, w
  AttentionArgs args;
  args.q = bshd(q.data(), DType::F32, 1, 4, 1, 16);
  args.k = bshd(k.data(), DType::F32, 1, 4, 1, 16);
  args.v = bshd(v.data(), DType::F32, 1, 4, 1, 16);
  args.out = bshd(out.data(), DType::F32, 1, 4, 1, 16);
  args.q_positions = args.k_positions = mrope_positions(streams);
  EXPECT_ERROR(attention(rope, args), "q_mask_positions", "M-RoPE");
  const std::vector<std::int64_t> order = {0, 1, 2, 3};
  args.q_mask_positions = args.k_mask_positions = positions(order);
  attention(rope, args);
  // Token 0 sees only itself: its output is its value.
  for (int l = 0; l < 16; ++l) EXPECT_NEAR(out[l], v[l], 1e-6f);
}

TEST(Attention, BadInput) {
  const Rope rope(llama(16));
  std::vector<float> q(4 * 4 * 16), k(4 * 2 * 16), v(4 * 2 * 16), out(4 * 4 * 16);
  const std::vector<std::int64_t> p = {0, 1, 2, 3};
  AttentionArgs good;
  good.q = bshd(q.data(), DType::F32, 1, 4, 4, 16);
  good.k = bshd(k.data(), DType::F32, 1, 4, 2, 16);
  good.v = bshd(v.data(), DType::F32, 1, 4, 2, 16);
  good.out = bshd(out.data(), DType::F32, 1, 4, 4, 16);
  good.q_positions = good.k_positions = positions(p);
  attention(rope, good);

  AttentionArgs a = good;
  a.k = bshd(k.data(), DType::F32, 1, 4, 3, 16);  // 4 query heads over 3 kv heads
  a.v = bshd(v.data(), DType::F32, 1, 4, 3, 16);
  EXPECT_ERROR(attention(rope, a), "q.heads = 4", "k.heads = 3");
  a = good;
  a.v = bshd(v.data(), DType::F32, 1, 4, 1, 16);
  EXPECT_ERROR(attention(rope, a), "v.heads = 1");
  a = good;
  a.head_dim = 32;
  EXPECT_ERROR(attention(rope, a), "head_dim = 32", "16");
  a = good;
  a.out = bshd(out.data(), DType::F32, 1, 3, 4, 16);
  EXPECT_ERROR(attention(rope, a), "out has seq 3");
  a = good;
  a.out = a.q;
  EXPECT_ERROR(attention(rope, a), "share memory");
  a = good;
  a.k_positions = positions(std::span<const std::int64_t>(p.data(), 3));
  EXPECT_ERROR(attention(rope, a), "k_positions.count = 3");
  AttentionArgs no_rope = good;
  EXPECT_ERROR(attention(no_rope), "head_dim = 0");

  AttentionOptions o;
  o.window = -1;
  EXPECT_ERROR(attention(rope, good, o), "options.window = -1");
  o = {};
  o.bias = AlibiBias{alibi_slopes(3)};
  EXPECT_ERROR(attention(rope, good, o), "slopes has 3 values", "(4)");
  o.bias = RelativeBucketBias{T5Buckets{}, std::vector<float>(32 * 3)};
  EXPECT_ERROR(attention(rope, good, o), "table has 96 values", "32 x 4");
  std::vector<float> dense(4 * 4 * 5);
  o.bias = DenseBias{dense.data(), 1, 4, 4, 5};
  EXPECT_ERROR(attention(rope, good, o), "DenseBias is 4 queries x 5 keys");
  o.bias = DenseBias{dense.data(), 1, 3, 4, 4};
  EXPECT_ERROR(attention(rope, good, o), "DenseBias.heads = 3");
  o = {};
  o.softmax_scale = 0.0;
  EXPECT_ERROR(attention(rope, good, o), "softmax_scale = 0");
}

}  // namespace
