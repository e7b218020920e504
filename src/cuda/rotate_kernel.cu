// The CUDA kernels: rotation (rotate_body.hpp, one thread per (token, head group, run of pairs)) and the K-shift
// (kshift_body.hpp), each the per-thread body the host runs over the same grid; the fused rotate-and-append's are in
// append_kernel.cu (compiled beside this file). Compiled with -fmad=false (no contraction the body does not write) for
// sm_90 (H100/H200), sm_80 and PTX. The host runs the same body over the same grid in every test run
// (tests/cuda_host_test.cpp); a GPU runs this (tests/cuda_device_test.cpp, scripts/gpu-check.sh).
#include <cuda_runtime.h>

#include "cuda/kshift_body.hpp"
#include "cuda/rotate_body.hpp"
#include "cuda/rotate_kernel.hpp"

namespace ropekit::cuda {
namespace {

// One kernel per (storage, pairs per thread, adjacent) configuration (rotate_body.hpp's with_rotate_configuration):
// the storage's conversions and the access width fixed at compile time, so a thread's runs stay in registers.
template <Storage St, int W, bool Adjacent>
__global__ void rotate_kernel(RotateShape shape) {
  rotate_thread_as<St, W, Adjacent>(shape, static_cast<std::int64_t>(blockIdx.x), static_cast<int>(threadIdx.x),
                                    static_cast<int>(blockDim.x));
}

// The rotation is bound by the memory accesses in flight, i.e. by the warps an SM holds, i.e. by registers: fp16 rows
// at 16-byte accesses take 80 registers as compiled (3 blocks of 256 per SM); capped at 64 (4 blocks; 20 bytes
// spilled outside the heads loop) they ran closer to the copy on an H200. The cap is this kernel's alone: every
// kernel given __launch_bounds__(256, 1) lost, the compiler then spending registers freely (docs/performance-log.md:
// the code comments' figures).
constexpr int kCappedBlock = 256;
template <Storage St, int W, bool Adjacent>
__global__ void __launch_bounds__(kCappedBlock, 4) rotate_kernel_capped(RotateShape shape) {
  rotate_thread_as<St, W, Adjacent>(shape, static_cast<std::int64_t>(blockIdx.x), static_cast<int>(threadIdx.x),
                                    static_cast<int>(blockDim.x));
}
// fp16's 16-byte kernels: half pairing's (W = 8) and, since rows are counted in bytes in flight (rotate_body.hpp's
// rows_in_flight: 48 → 68 registers uncapped), interleaved pairing's (W = 4, adjacent).
template <Storage St, int W, bool Adjacent>
constexpr bool kCapped = St == Storage::F16&& access_bytes<St, W, Adjacent>() == 16;

__global__ void kshift_kernel(KShiftShape shape) {
  kshift_thread(shape, static_cast<std::int64_t>(blockIdx.x), static_cast<int>(threadIdx.x),
                static_cast<int>(blockDim.x));
}

__global__ void codec_kernel(const std::uint32_t* in, std::uint16_t* bf16, std::uint16_t* f16, float* widened,
                             std::uint32_t* bf16x2, std::uint32_t* f16x2, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = float_of(in[i]);
  bf16[i] = bf16_store(x);
  f16[i] = f16_store(x);
  widened[i] = f16_load(static_cast<std::uint16_t>(in[i]));
  const float y = float_of(in[(i ^ 1) < n ? (i ^ 1) : i]);  // the pattern beside it in the high half
  bf16x2[i] = bf16x2_store(x, y);
  f16x2[i] = f16x2_store(x, y);
}

}  // namespace

int launch_kshift(const KShiftShape& device_shape, void* stream, int block_dim) {
  const std::int64_t blocks = blocks_for(device_shape.threads(), block_dim);
  if (blocks == 0) return 0;
  if (blocks < 0) return static_cast<int>(cudaErrorInvalidConfiguration);
  kshift_kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(block_dim), 0,
                  static_cast<cudaStream_t>(stream)>>>(device_shape);
  return static_cast<int>(cudaGetLastError());
}

int launch_codecs(const std::uint32_t* in, std::uint16_t* bf16, std::uint16_t* f16, float* widened,
                  std::uint32_t* bf16x2, std::uint32_t* f16x2, std::int64_t n) {
  const std::int64_t blocks = blocks_for(n, 256);
  if (blocks <= 0) return blocks == 0 ? 0 : static_cast<int>(cudaErrorInvalidConfiguration);
  codec_kernel<<<static_cast<unsigned>(blocks), 256>>>(in, bf16, f16, widened, bf16x2, f16x2, n);
  return static_cast<int>(cudaGetLastError());
}

int launch_rotate(const RotateShape& device_shape, void* stream, int block_dim) {
  const std::int64_t blocks = blocks_for(device_shape.threads(), block_dim);
  if (blocks == 0) return 0;
  if (blocks < 0) return static_cast<int>(cudaErrorInvalidConfiguration);
  bool launched = false;
  with_rotate_configuration(device_shape, [&](auto st, auto w, auto adjacent) {
    constexpr Storage St = decltype(st)::value;
    constexpr int W = decltype(w)::value;
    constexpr bool Adjacent = decltype(adjacent)::value;
    const auto grid = static_cast<unsigned>(blocks), block = static_cast<unsigned>(block_dim);
    if constexpr (kCapped<St, W, Adjacent>) {
      if (block_dim > kCappedBlock) return;  // not launched: refused below
      rotate_kernel_capped<St, W, Adjacent><<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(device_shape);
    } else {
      rotate_kernel<St, W, Adjacent><<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(device_shape);
    }
    launched = true;
  });
  // A configuration choose_vector does not make, or a block too large for the capped kernel.
  if (!launched) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace ropekit::cuda
