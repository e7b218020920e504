// Linear attention with RoPE on the numerator (RoFormer §3.3, eq. 19), recurrent and parallel.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "attention/attention_internal.hpp"
#include "call/prepare.hpp"
#include "rope/backend.hpp"
#include "rope/call_shape.hpp"
#include "rope/parallel.hpp"
#include "rope/reference.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"
#include "ropekit/linear_attention.hpp"

namespace ropekit {
namespace {

// φ(x) = elu(x) + 1: x + 1 for x > 0, exp(x) otherwise — positive, so the denominator is too.
float feature(float x) { return x > 0.0f ? x + 1.0f : std::exp(x); }

// φ(x) and R·φ(x) of `heads` heads of batch b, laid out (token, head, lane): φ for the denominator,
// its rotation (Forward) for the numerator — computed per item, in buffers of the item's own.
struct Features {
  std::vector<float> phi;      // tokens × heads × head_dim
  std::vector<float> rotated;  // the same, rotated
};

// `rotation` is the call prepared (validated) once over all of x; its token kernel rotates this
// item's rows with the coefficients of each token, as RotateCall::run() would.
void features(const detail::RotateJob& rotation, detail::TokenKernel rotate_token, const Heads& x, std::int64_t b,
              std::int64_t head, std::int64_t heads, int d, Features& f) {
  const std::int64_t n = x.seq;
  f.phi.resize(std::size_t(n * heads * d));
  f.rotated.resize(f.phi.size());
  for (std::int64_t t = 0; t < n; ++t) {
    float* rows = f.phi.data() + t * heads * d;
    for (std::int64_t h = 0; h < heads; ++h) {
      detail::widen(x.row(b, t, head + h), x.dtype, d, rows + h * d);
      for (int l = 0; l < d; ++l) rows[h * d + l] = feature(rows[h * d + l]);
    }
    rotate_token(rotation, b * n + t, rows, d, f.rotated.data() + t * heads * d, d, heads);
  }
}

float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void linear_attention(const Rope& rope, const AttentionArgs& args, bool causal, LinearAttentionForm form) {
  if (form != LinearAttentionForm::Recurrent && form != LinearAttentionForm::Parallel) {
    throw Error(fmt::format("linear_attention: form = {}: not a LinearAttentionForm", static_cast<int>(form)));
  }
  AttentionOptions options;
  options.causal = false;  // causality here is token order, not a positional mask
  const detail::ResolvedAttention r = detail::resolve_attention(&rope, args, options, detail::RopeLoads::None);
  if (causal && args.q.seq != args.k.seq) {
    throw Error(fmt::format("linear_attention: causal needs q.seq = k.seq (self-attention), got {} and {}", args.q.seq,
                            args.k.seq));
  }
  const int d = r.head_dim, dv = r.v_head_dim;
  const std::int64_t q_seq = args.q.seq, k_seq = args.k.seq;
  const std::int64_t group = args.q.heads / args.k.heads;
  const std::int64_t items = args.q.batch * args.k.heads;
  // The rotations, validated once (views, positions; the table pinned): each item rotates its
  // features with their coefficients through the token kernel, chosen once.
  const RotateCall q_rotation =
      detail::prepare(rope, {.q = args.q, .positions = args.q_positions},
                      {.use = detail::ViewUse::Read, .names = {.q = "q", .positions = "q_positions"}});
  const RotateCall k_rotation =
      detail::prepare(rope, {.q = args.k, .positions = args.k_positions},
                      {.use = detail::ViewUse::Read, .names = {.q = "k", .positions = "k_positions"}});
  const detail::TokenKernel rotate_token = cpu::select_token_kernel(DType::F32);
  const int threads = default_threads();

  const auto item = [&](std::int64_t i) {
    const std::int64_t b = i / args.k.heads, kv_head = i % args.k.heads;
    Features k, q;
    features(k_rotation.job(), rotate_token, args.k, b, kv_head, 1, d, k);
    features(q_rotation.job(), rotate_token, args.q, b, kv_head * group, group, d, q);
    std::vector<float> v(std::size_t(k_seq * dv));
    for (std::int64_t t = 0; t < k_seq; ++t) {
      detail::widen(args.v.row(b, t, kv_head), args.v.dtype, dv, v.data() + t * dv);
    }
    std::vector<float> out(static_cast<std::size_t>(dv));
    const auto store = [&](std::int64_t t, std::int64_t g, float denominator) {
      for (int l = 0; l < dv; ++l) out[l] = denominator > 0.0f ? out[l] / denominator : 0.0f;
      void* dst = args.out.row(b, t, kv_head * group + g);
      detail::narrow(out.data(), dv, args.out.dtype, dst);
    };

    if (form == LinearAttentionForm::Parallel) {
      for (std::int64_t g = 0; g < group; ++g) {
        for (std::int64_t m = 0; m < q_seq; ++m) {
          const float* rq = q.rotated.data() + (m * group + g) * d;
          const float* pq = q.phi.data() + (m * group + g) * d;
          std::fill(out.begin(), out.end(), 0.0f);
          float denominator = 0.0f;
          const std::int64_t last = causal ? m + 1 : k_seq;
          for (std::int64_t n = 0; n < last; ++n) {
            const float weight = dot(rq, k.rotated.data() + n * d, d);
            denominator += dot(pq, k.phi.data() + n * d, d);
            for (int l = 0; l < dv; ++l) out[l] += weight * v[n * dv + l];
          }
          store(m, g, denominator);
        }
      }
      return;
    }
    // Recurrent: state = Σ_n R φ(k_n) v_nᵀ (d × dv) and z = Σ_n φ(k_n), shared by the group's heads.
    std::vector<float> state(std::size_t(d) * dv, 0.0f), z(std::size_t(d), 0.0f);
    const auto absorb = [&](std::int64_t n) {
      const float* rk = k.rotated.data() + n * d;
      const float* pk = k.phi.data() + n * d;
      for (int i = 0; i < d; ++i) {
        z[i] += pk[i];
        float* row = state.data() + std::size_t(i) * dv;
        for (int l = 0; l < dv; ++l) row[l] += rk[i] * v[n * dv + l];
      }
    };
    const auto emit = [&](std::int64_t m) {
      for (std::int64_t g = 0; g < group; ++g) {
        const float* rq = q.rotated.data() + (m * group + g) * d;
        const float* pq = q.phi.data() + (m * group + g) * d;
        std::fill(out.begin(), out.end(), 0.0f);
        for (int i = 0; i < d; ++i) {
          const float* row = state.data() + std::size_t(i) * dv;
          for (int l = 0; l < dv; ++l) out[l] += rq[i] * row[l];
        }
        store(m, g, dot(pq, z.data(), d));
      }
    };
    if (causal) {
      for (std::int64_t m = 0; m < q_seq; ++m) {
        absorb(m);
        emit(m);
      }
    } else {
      for (std::int64_t n = 0; n < k_seq; ++n) absorb(n);
      for (std::int64_t m = 0; m < q_seq; ++m) emit(m);
    }
  };

  detail::parallel_items(
      int(std::min<std::int64_t>(threads, items)), items, [] { return 0; }, [&item](std::int64_t i, int&) { item(i); });
}

}  // namespace ropekit
