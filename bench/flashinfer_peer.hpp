// flashinfer_peer.hpp — FlashInfer's own rotation kernels behind a plain interface, for cuda_bench's side-by-side
// rows (issue 41: "compared with FlashInfer itself"). FlashInfer is not a dependency of ropekit: this is built only
// when ROPEKIT_FLASHINFER_DIR names the `flashinfer/data` folder of a released flashinfer-python wheel
// (scripts/flashinfer-headers.sh fetches it; scripts/gpu-check.sh passes it), and compiled the way FlashInfer's own
// JIT compiles it (C++17, -O3, -use_fast_math). Nothing of FlashInfer's is in this repository.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashinfer_peer {

enum class Type { F32, BF16, F16 };

// FlashInfer's apply_rope_pos_ids (cos_sin == nullptr: frequencies by __powf and angles by __sincosf, in float32) or
// apply_rope_with_cos_sin_cache (cos_sin: float32 [positions, head_dim], the cos half then the sin half of each row,
// vLLM's layout, which ropekit::export_cos_sin_cache writes). q [tokens, q_heads, head_dim] and k [tokens, k_heads,
// head_dim], contiguous; q_out / k_out equal to q / k rotate in place. positions: one int64 per token, on the device.
// The whole head is rotated (rotary_dim = head_dim), base theta, no scaling.
cudaError_t rotate(Type type, void* q, void* k, void* q_out, void* k_out, const std::int64_t* positions,
                   std::uint32_t tokens, std::uint32_t q_heads, std::uint32_t k_heads, std::uint32_t head_dim,
                   bool interleave, float theta, const float* cos_sin, cudaStream_t stream);

// What an engine on FlashInfer runs for the fused rotate-and-append (bf16 q, k, v into a bf16 NHD paged cache): the
// rotation from the cos/sin cache with q in place and k into `k_rotated` (BatchQKApplyRotaryPosIdsCosSinCache), then
// append_paged_kv_cache's kernel (AppendPagedKVCache) writing k_rotated and v into the pages. The page table is
// FlashInfer's: page_indices / page_indptr (batch + 1) / last_page_len (batch), int32 on the device; each token's
// sequence (batch_indices) and entry within it (entry_positions), int32 on the device; positions (the rotation's)
// int64.
cudaError_t rotate_then_append_bf16(void* q, void* k, void* v, void* k_rotated, void* k_cache, void* v_cache,
                                    const std::int64_t* positions, const std::int32_t* page_indices,
                                    const std::int32_t* page_indptr, const std::int32_t* last_page_len,
                                    const std::int32_t* batch_indices, const std::int32_t* entry_positions,
                                    std::uint32_t batch, std::uint32_t tokens, std::uint32_t q_heads,
                                    std::uint32_t kv_heads, std::uint32_t head_dim, std::uint32_t page_size,
                                    const float* cos_sin, cudaStream_t stream);

}  // namespace flashinfer_peer
