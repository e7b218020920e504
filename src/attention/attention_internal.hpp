// src/attention_internal.hpp — what attention.cpp shares with the KV cache and linear attention:
// argument resolution (all validation) and float32 widening/narrowing of stored rows.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <vector>

#include "ropekit/attention.hpp"

namespace ropekit::detail {

// Storage ↔ float32 for n contiguous elements (exact widening; narrowing rounds once, RNE).
void widen(const void* src, DType dtype, int n, float* dst);
void narrow(const float* src, int n, DType dtype, void* dst);

// Element index of (batch b, token s, head) in a view.
std::int64_t index_of(const Heads& h, std::int64_t b, std::int64_t s, std::int64_t head);
// `count` tokens from token s of batch b, heads [head, head + heads), as a batch-1 view.
Heads sub_view(const Heads& h, std::int64_t b, std::int64_t s, std::int64_t count, std::int64_t head,
               std::int64_t heads);
// Tokens [first, first + count) of every stream, copied into `storage`.
Positions sub_positions(const Positions& p, std::int64_t first, std::int64_t count,
                        std::vector<std::int64_t>& storage);

struct ResolvedAttention {
  int head_dim = 0, v_head_dim = 0;
  float scale = 1.0f;               // softmax scale × softmax_scale_mult
  Positions q_mask, k_mask;         // data null when neither mask nor bias needs positions
  std::int64_t max_q_position = -1, max_k_position = -1;
  std::vector<int> t5_lut;          // T5 bucket of relative position r at [r + t5_range]
  std::int64_t t5_range = 0;
};

// Validates everything (ropekit::Error naming the field). rope: the rope that rotates q (and k
// when rope_rotates_k), or null.
ResolvedAttention resolve_attention(const Rope* rope, const AttentionArgs& args,
                                    const AttentionOptions& options, bool rope_rotates_k);
void run_attention(const Rope* q_rope, const Rope* k_rope, const AttentionArgs& args,
                   const AttentionOptions& options, const ResolvedAttention& resolved);

// Runs body(i, state) for i in [0, items) on up to `threads` threads (OpenMP, dynamic schedule),
// each thread with its own state from make_state(). Items must be independent. An exception must
// not leave an OpenMP region (nor skip the loop's barrier): the first one is rethrown afterwards.
template <class MakeState, class Body>
void parallel_items(int threads, std::int64_t items, MakeState make_state, Body body) {
#ifdef _OPENMP
  if (threads > 1 && items > 1) {
    std::exception_ptr failure;
    const auto record = [&failure] {
#pragma omp critical(ropekit_parallel_items_failure)
      if (!failure) failure = std::current_exception();
    };
#pragma omp parallel num_threads(threads)
    {
      std::optional<decltype(make_state())> state;
      try {
        state.emplace(make_state());
      } catch (...) {
        record();
      }
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t i = 0; i < items; ++i) {
        if (!state) continue;
        try {
          body(i, *state);
        } catch (...) {
          record();
        }
      }
    }
    if (failure) std::rethrow_exception(failure);
    return;
  }
#endif
  (void)threads;
  auto state = make_state();
  for (std::int64_t i = 0; i < items; ++i) body(i, state);
}

}  // namespace ropekit::detail
