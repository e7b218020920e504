// ggml_side_by_side: ropekit's rotation against ggml's CPU ggml_rope_ext (llama.cpp's RoPE) in one process,
// with the same shapes, bytes and thread count, contenders interleaved round by round with a memcpy of the
// same bytes (issue 18's side-by-side; docs/performance-log.md records what it measured). ggml is fetched and
// built outside the repository (README.md here); nothing of it is committed.
//
//   [PROBE_TARGET=NAME] ggml_side_by_side [threads]   → one markdown row per dtype × pairing × in/out of place, 128
//   dims ×
//                                   32 heads × 512 tokens, positions 0..511, base 10000
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "ropekit/ropekit.hpp"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double microseconds_per_call(F&& f, int calls) {
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) f();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  // PROBE_TARGET=AVX2 (or any name simd_targets() lists) times that target's kernels instead of the default.
  if (const char* target = std::getenv("PROBE_TARGET")) ropekit::set_simd_target(target);
  constexpr int kDim = 128, kHeads = 32, kTokens = 512, kRounds = 9, kCalls = 20;
  std::printf(
      "| dtype | pairing (ggml mode) | | ropekit µs | ggml µs | memcpy µs | ropekit / ggml | ropekit of memcpy | ggml "
      "of memcpy |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16}) {
    for (const int mode : {GGML_ROPE_TYPE_NEOX, 0}) {
      for (const bool in_place : {false, true}) {
        const std::size_t element = type == GGML_TYPE_F32 ? 4 : 2;
        const std::size_t bytes = std::size_t{kDim} * kHeads * kTokens * element;
        ggml_init_params params{.mem_size = 3 * bytes + (16 << 20), .mem_buffer = nullptr, .no_alloc = false};
        ggml_context* ctx = ggml_init(params);
        // ggml's [ne0 = dim, ne1 = heads, ne2 = tokens] is ropekit's BSHD with batch 1.
        ggml_tensor* x = ggml_new_tensor_3d(ctx, type, kDim, kHeads, kTokens);
        ggml_tensor* pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, kTokens);
        std::vector<std::int64_t> positions(kTokens);
        for (int t = 0; t < kTokens; ++t) positions[t] = static_cast<int32_t*>(pos->data)[t] = t;
        for (std::size_t i = 0; i < bytes / element; ++i) {
          const float v = float((i * 2654435761u) % 1000) / 500.0f - 1.0f;
          if (type == GGML_TYPE_F32)
            static_cast<float*>(x->data)[i] = v;
          else
            static_cast<ggml_fp16_t*>(x->data)[i] = ggml_fp32_to_fp16(v);
        }
        ggml_tensor* y =
            in_place
                ? ggml_rope_ext_inplace(ctx, x, pos, nullptr, kDim, mode, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f)
                : ggml_rope_ext(ctx, x, pos, nullptr, kDim, mode, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        ggml_cgraph* graph = ggml_new_graph(ctx);
        ggml_build_forward_expand(graph, y);
        ggml_cplan plan = ggml_graph_plan(graph, threads, nullptr);
        std::vector<std::uint8_t> work(plan.work_size + 64);
        plan.work_data = work.data();

        const ropekit::DType dtype = type == GGML_TYPE_F32 ? ropekit::DType::F32 : ropekit::DType::F16;
        const ropekit::Rope rope(
            ropekit::Spec{.head_dim = kDim,
                          .rotary_dim = kDim,
                          .base = 10000.0,
                          .pairing = mode == 0 ? ropekit::Pairing::Interleaved : ropekit::Pairing::Half});
        std::vector<std::byte> q(bytes), q_out(bytes), src(bytes), dst(bytes);
        std::memcpy(q.data(), x->data, bytes);
        ropekit::RotateArgs args{.q = ropekit::bshd(q.data(), dtype, 1, kTokens, kHeads, kDim),
                                 .positions = ropekit::positions(positions),
                                 .threads = threads};
        if (!in_place) args.q_out = ropekit::bshd(q_out.data(), dtype, 1, kTokens, kHeads, kDim);

        // The same rotation? ggml forms its angles in float32, ropekit in double: they agree to ~1e-4 at
        // position 511. A larger difference means the two do not compute the same thing.
        if (!in_place) {
          ggml_graph_compute(graph, &plan);
          rope.apply(args);
          double worst = 0.0;
          for (std::size_t i = 0; i < bytes / element; ++i) {
            const float a = type == GGML_TYPE_F32 ? static_cast<const float*>(y->data)[i]
                                                  : ggml_fp16_to_fp32(static_cast<const ggml_fp16_t*>(y->data)[i]);
            const float b = type == GGML_TYPE_F32
                                ? reinterpret_cast<const float*>(q_out.data())[i]
                                : ropekit::f16_to_float(reinterpret_cast<const std::uint16_t*>(q_out.data())[i]);
            worst = std::max(worst, double(std::abs(a - b)));
          }
          if (worst > 2e-3) {
            std::fprintf(stderr, "ggml and ropekit disagree: max |difference| %g\n", worst);
            return 1;
          }
        }

        std::vector<double> t_ropekit, t_ggml, t_memcpy;
        for (int round = 0; round < kRounds; ++round) {
          t_ggml.push_back(microseconds_per_call([&] { ggml_graph_compute(graph, &plan); }, kCalls));
          t_ropekit.push_back(microseconds_per_call([&] { rope.apply(args); }, kCalls));
          t_memcpy.push_back(microseconds_per_call(
              [&] {
                std::memcpy(dst.data(), src.data(), bytes);
                asm volatile("" ::: "memory");
              },
              kCalls));
        }
        const double r = median(t_ropekit), g = median(t_ggml), m = median(t_memcpy);
        std::printf("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f× | %.2f | %.2f |\n",
                    type == GGML_TYPE_F32 ? "fp32" : "fp16", mode == 0 ? "interleaved (NORMAL)" : "half (NEOX)",
                    in_place ? "in place" : "out of place", r, g, m, g / r, m / r, m / g);
        ggml_free(ctx);
      }
    }
  }
  std::printf("\n%d thread(s); ropekit SIMD target %s; memcpy: the same bytes, one buffer to another\n", threads,
              ropekit::simd_target().c_str());
  return 0;
}
