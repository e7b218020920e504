// FlashInfer's rotation entry points (include/flashinfer/pos_enc.cuh of the wheel ROPEKIT_FLASHINFER_DIR names),
// instantiated for float32, bf16 and fp16 with int64 positions. See flashinfer_peer.hpp.
#include "flashinfer_peer.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <flashinfer/page.cuh>
#include <flashinfer/pos_enc.cuh>

namespace flashinfer_peer {
namespace {

template <class T>
cudaError_t rotate_as(void* q, void* k, void* q_out, void* k_out, const std::int64_t* positions, std::uint32_t tokens,
                      std::uint32_t q_heads, std::uint32_t k_heads, std::uint32_t head_dim, bool interleave,
                      float theta, const float* cos_sin, cudaStream_t stream) {
  auto* qp = static_cast<T*>(q);
  auto* kp = static_cast<T*>(k);
  auto* qo = static_cast<T*>(q_out);
  auto* ko = static_cast<T*>(k_out);
  // FlashInfer's signatures take non-const pointers to what they only read.
  auto* pos = const_cast<std::int64_t*>(positions);
  const std::size_t q_n = std::size_t(q_heads) * head_dim, k_n = std::size_t(k_heads) * head_dim, h = head_dim;
  if (cos_sin == nullptr)
    return flashinfer::BatchQKApplyRotaryPosIds<T, std::int64_t>(qp, kp, qo, ko, pos, tokens, q_heads, k_heads,
                                                                 head_dim, head_dim, q_n, h, k_n, h, q_n, h, k_n, h,
                                                                 interleave, 1.0f, theta, stream);
  return flashinfer::BatchQKApplyRotaryPosIdsCosSinCache<T, std::int64_t>(
      qp, kp, qo, ko, const_cast<float*>(cos_sin), pos, tokens, q_heads, k_heads, head_dim, head_dim, q_n, h, k_n, h,
      q_n, h, k_n, h, interleave, stream);
}

}  // namespace

cudaError_t rotate(Type type, void* q, void* k, void* q_out, void* k_out, const std::int64_t* positions,
                   std::uint32_t tokens, std::uint32_t q_heads, std::uint32_t k_heads, std::uint32_t head_dim,
                   bool interleave, float theta, const float* cos_sin, cudaStream_t stream) {
  switch (type) {
    case Type::F32:
      return rotate_as<float>(q, k, q_out, k_out, positions, tokens, q_heads, k_heads, head_dim, interleave, theta,
                              cos_sin, stream);
    case Type::BF16:
      return rotate_as<__nv_bfloat16>(q, k, q_out, k_out, positions, tokens, q_heads, k_heads, head_dim, interleave,
                                      theta, cos_sin, stream);
    case Type::F16:
      return rotate_as<__half>(q, k, q_out, k_out, positions, tokens, q_heads, k_heads, head_dim, interleave, theta,
                               cos_sin, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t rotate_then_append_bf16(void* q, void* k, void* v, void* k_rotated, void* k_cache, void* v_cache,
                                    const std::int64_t* positions, const std::int32_t* page_indices,
                                    const std::int32_t* page_indptr, const std::int32_t* last_page_len,
                                    const std::int32_t* batch_indices, const std::int32_t* entry_positions,
                                    std::uint32_t batch, std::uint32_t tokens, std::uint32_t q_heads,
                                    std::uint32_t kv_heads, std::uint32_t head_dim, std::uint32_t page_size,
                                    const float* cos_sin, cudaStream_t stream) {
  using T = __nv_bfloat16;
  auto* qp = static_cast<T*>(q);
  auto* kp = static_cast<T*>(k);
  auto* kr = static_cast<T*>(k_rotated);
  const std::size_t q_n = std::size_t(q_heads) * head_dim, k_n = std::size_t(kv_heads) * head_dim, h = head_dim;
  const cudaError_t rotated = flashinfer::BatchQKApplyRotaryPosIdsCosSinCache<T, std::int64_t>(
      qp, kp, qp, kr, const_cast<float*>(cos_sin), const_cast<std::int64_t*>(positions), tokens, q_heads, kv_heads,
      head_dim, head_dim, q_n, h, k_n, h, q_n, h, k_n, h, /*interleave=*/false, stream);
  if (rotated != cudaSuccess) return rotated;
  // FlashInfer's signatures take non-const pointers to what they only read.
  flashinfer::paged_kv_t<T, std::int32_t> paged(
      kv_heads, page_size, head_dim, batch, flashinfer::QKVLayout::kNHD, static_cast<T*>(k_cache),
      static_cast<T*>(v_cache), const_cast<std::int32_t*>(page_indices), const_cast<std::int32_t*>(page_indptr),
      const_cast<std::int32_t*>(last_page_len));
  return flashinfer::AppendPagedKVCache<T, std::int32_t>(
      paged, kr, static_cast<T*>(v), const_cast<std::int32_t*>(batch_indices),
      const_cast<std::int32_t*>(entry_positions), tokens, k_n, h, k_n, h, stream);
}

}  // namespace flashinfer_peer
