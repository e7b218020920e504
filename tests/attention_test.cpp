// Softmax attention with fused RoPE, on every SIMD target: results independent of the thread count,
// a query that sees no key, NaN propagation, M-RoPE mask positions, bad input. The equality with
// apply-then-attention and the bound against the double oracle, over the whole case table, are in
// tests/targets_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "attention_oracle.hpp"
#include "expect_error.hpp"
#include "lib/cases.hpp"
#include "ropekit/ropekit.hpp"
#include "targets.hpp"

namespace {

using namespace ropekit;

Spec llama(int d = 64) { return {.head_dim = d, .rotary_dim = d, .base = 10000.0, .pairing = Pairing::Half}; }

class Attention : public targets::PerTarget {};
ROPEKIT_PER_TARGET(Attention);

TEST_P(Attention, ResultsDoNotDependOnTheThreadCount) {
  for (const cases::Op op : {cases::Op::Attention, cases::Op::CacheAttention}) {
    std::vector<std::byte> first;
    for (const int threads : {1, 2, 3, 5}) {
      const cases::Case c = cases::shrunk({.op = op,
                                           .spec = "half64",
                                           .dtype = DType::BF16,
                                           .seq = op == cases::Op::Attention ? 200 : 3,
                                           .q_heads = 8,
                                           .k_heads = 2,
                                           .threads = threads,
                                           .k_seq = 200,
                                           .q_offset = op == cases::Op::Attention ? 0 : 200},
                                          targets::shrink_factor());
      cases::Workload w(c, 5);
      w.run();
      const std::vector<std::byte> out(w.out.data(), w.out.data() + w.out.size);
      if (first.empty()) first = out;
      EXPECT_TRUE(out == first) << c.name();
    }
  }
}

// A query row's arithmetic does not depend on which rows share its block: one causal prefill of 160 tokens (blocks
// of 40 tokens, whose key tiles inside a block are taken token by token) equals, to the bit, the same queries asked
// 20 at a time against the keys before them (where some of those tiles are seen by the whole block at once), with a
// window (tiles partly outside it), log-n scaling past 100 tokens, and a soft cap.
TEST_P(Attention, QueryRowsGiveTheSameBitsInAnyBlock) {
  const Rope rope(llama(64));
  const std::int64_t n = 160, heads = 6, kv_heads = 2, d = 64;
  std::vector<float> q = attn_oracle::normal(std::size_t(n * heads * d), 11),
                     k = attn_oracle::normal(std::size_t(n * kv_heads * d), 12),
                     v = attn_oracle::normal(std::size_t(n * kv_heads * d), 13);
  std::vector<std::int64_t> pos = std::vector<std::int64_t>(std::size_t(n));
  std::iota(pos.begin(), pos.end(), 0);
  AttentionOptions plain;
  plain.threads = 2;  // the blocks' sizes follow the thread count: 40 and 10 tokens with two
  AttentionOptions windowed = plain, logn = plain, capped = plain;
  windowed.window = 90;
  logn.logn_length = 100;
  capped.logit_softcap = 20.0;
  for (const AttentionOptions& options : {plain, windowed, logn, capped}) {
    std::vector<float> whole(q.size()), chunked(q.size());
    const auto ask = [&](std::int64_t first, std::int64_t count, std::vector<float>& out) {
      AttentionArgs args;
      args.q = bshd(q.data() + first * heads * d, DType::F32, 1, count, heads, d);
      args.k = bshd(k.data(), DType::F32, 1, first + count, kv_heads, d);
      args.v = bshd(v.data(), DType::F32, 1, first + count, kv_heads, d);
      args.out = bshd(out.data() + first * heads * d, DType::F32, 1, count, heads, d);
      args.q_positions = positions(std::span<const std::int64_t>(pos).subspan(std::size_t(first), std::size_t(count)));
      args.k_positions = positions(std::span<const std::int64_t>(pos).first(std::size_t(first + count)));
      attention(rope, args, options);
    };
    ask(0, n, whole);
    for (std::int64_t first = 0; first < n; first += 20) ask(first, 20, chunked);
    EXPECT_TRUE(std::memcmp(whole.data(), chunked.data(), whole.size() * sizeof(float)) == 0)
        << "window " << options.window << ", logn " << options.logn_length;
  }
}

TEST_P(Attention, QueryThatSeesNoKeyIsZeroAndNaNPropagates) {
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

TEST_P(Attention, MRopeTakesMaskPositionsSeparately) {
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

// Gemma 2's logit soft-capping: cap·tanh(scaled logit / cap) before the mask, against the float64 oracle, with keys
// of both tile shapes (a decode-sized call reads key rows, a prefill transposed tiles), causal with a window, GQA.
TEST_P(Attention, LogitSoftcapEqualsTheOracle) {
  for (const std::int64_t seq : {1, 37}) {
    SCOPED_TRACE(seq);
    const std::int64_t keys = 37, hq = 4, hk = 2;
    const int d = 16;
    // Large logits (σ 2 per lane, 16 lanes, scale 1/4: typically ±4) against a cap of 2: most are bent.
    std::vector<float> q = attn_oracle::normal(std::size_t(seq * hq * d), 11, 2.0f),
                       k = attn_oracle::normal(std::size_t(keys * hk * d), 12, 2.0f),
                       v = attn_oracle::normal(std::size_t(keys * hk * d), 13), out(std::size_t(seq * hq * d));
    std::vector<std::int64_t> kp(static_cast<std::size_t>(keys)), qp(static_cast<std::size_t>(seq));
    for (std::int64_t t = 0; t < keys; ++t) kp[std::size_t(t)] = t;
    for (std::int64_t t = 0; t < seq; ++t) qp[std::size_t(t)] = keys - seq + t;
    AttentionArgs args;
    args.q = bshd(q.data(), DType::F32, 1, seq, hq, d);
    args.k = bshd(k.data(), DType::F32, 1, keys, hk, d);
    args.v = bshd(v.data(), DType::F32, 1, keys, hk, d);
    args.out = bshd(out.data(), DType::F32, 1, seq, hq, d);
    args.q_positions = positions(qp);
    args.k_positions = positions(kp);
    AttentionOptions o;
    o.window = 20;
    o.logit_softcap = 2.0;
    attention(args, o);
    const attn_oracle::Shape sh{.q_seq = seq, .k_seq = keys, .q_heads = hq, .kv_heads = hk, .d = d, .dv = d};
    const attn_oracle::Result want = attn_oracle::softmax_attention(q, k, v, sh, qp, kp, 0.25, true, 20, {}, 2.0);
    const attn_oracle::Result plain = attn_oracle::softmax_attention(q, k, v, sh, qp, kp, 0.25, true, 20);
    double worst = 0, capped_off = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      worst = std::max(worst, std::fabs(double(out[i]) - want.out[i]));
      capped_off = std::max(capped_off, std::fabs(plain.out[i] - want.out[i]));
    }
    EXPECT_LT(worst, 1e-5);      // float32 logits and sums against float64
    EXPECT_GT(capped_off, 0.1);  // the cap changes the result: the comparison above checks it
  }
  // A cap of 0, below 0 or not finite: refused, naming the option.
  std::vector<float> x(16, 1.0f), o1(16);
  const std::vector<std::int64_t> p0 = {0};
  AttentionArgs one;
  one.q = one.k = one.v = bshd(x.data(), DType::F32, 1, 1, 1, 16);
  one.out = bshd(o1.data(), DType::F32, 1, 1, 1, 16);
  one.q_positions = one.k_positions = positions(p0);
  for (const double bad : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    AttentionOptions o;
    o.logit_softcap = bad;
    EXPECT_ERROR(attention(one, o), "options.logit_softcap");
  }
}

TEST_P(Attention, BadInput) {
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
  // Without a Rope the head width comes from args.head_dim or q's stated width (bshd sets it); a view
  // built by hand states none.
  AttentionArgs no_rope = good;
  EXPECT_NO_THROW(attention(no_rope));
  no_rope.q.head_dim = 0;
  EXPECT_ERROR(attention(no_rope), "head_dim = 0");
  // A view whose stated width is narrower than the lanes the call reads.
  a = good;
  a.k.head_dim = 8;
  EXPECT_ERROR(attention(rope, a), "k.head_dim = 8", "reads 16 lanes");

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
