// FlashInfer's rotation entry points (include/flashinfer/pos_enc.cuh of the wheel ROPEKIT_FLASHINFER_DIR names),
// instantiated for float32, bf16 and fp16 with int64 positions. See flashinfer_peer.hpp.
#include "flashinfer_peer.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

}  // namespace flashinfer_peer
