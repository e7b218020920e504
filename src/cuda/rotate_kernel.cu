// The CUDA kernels: rotation (rotate_body.hpp, one thread per (token, head group, run of pairs)), the fused
// rotate-and-append (append_body.hpp) and the K-shift (kshift_body.hpp), each the per-thread body the host runs over
// the same grid. Compiled with -fmad=false (no contraction the body does not write) for sm_90 (H100/H200), sm_80 and
// PTX. The host runs the same body over the same grid in every test run (tests/cuda_host_test.cpp); a GPU runs this
// (tests/cuda_device_test.cpp, scripts/gpu-check.sh).
#include <cuda_runtime.h>

#include "cuda/append_body.hpp"
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
// spilled outside the heads loop) they ran 0.70 → 0.73 of the copy on an H200 (2 × 8192 bf16-shaped prefill, 65,536
// tokens 0.72 → 0.75). The cap is this kernel's alone: every kernel given __launch_bounds__(256, 1) lost (bf16 at
// 16 bytes 0.87 → 0.80), the compiler then spending registers freely.
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

// The key rows' pairs, the values and MLA's nope lanes, one segment after the other (one launch: a decode step's
// append is launch-bound), one kernel per configuration of the key rows (storage, pairs per thread, adjacent: as the
// rotation's); the QK-normed rows, whose double-precision sums need more registers, in a kernel of their own.
template <Storage St, int W, bool Adjacent>
__global__ void append_kernel(AppendShape shape) {
  std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < shape.pair_threads()) return pair_thread_as<St, W, Adjacent>(shape, g);
  g -= shape.pair_threads();
  if (g < shape.value_threads()) return append_part<AppendPart::Values>(shape, g);
  g -= shape.value_threads();
  if (g < shape.nope_threads()) append_part<AppendPart::Nope>(shape, g);
}

// The whole append in one launch (AppendShape::one_launch: a decode step's small grid): every body in one kernel,
// configurations chosen at run time (uniform across the launch). Its registers are the largest body's, which a grid
// of a few thousand threads does not feel.
__global__ void append_one_kernel(AppendShape shape) {
  append_launch_thread(shape, static_cast<std::int64_t>(blockIdx.x), static_cast<int>(threadIdx.x),
                       static_cast<int>(blockDim.x));
}

__global__ void append_norm_kernel(AppendShape shape) {
  const std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < shape.norm_threads()) append_part<AppendPart::Norms>(shape, g);
}

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

// Blocks for `threads` threads; 0 when there is nothing to do, −1 past the grid's x limit.
std::int64_t blocks_for(std::int64_t threads, int block_dim) {
  const std::int64_t blocks = (threads + block_dim - 1) / block_dim;
  return blocks > 0x7fffffff ? -1 : blocks;
}

}  // namespace

int launch_append(const AppendShape& device_shape, void* stream, int block_dim) {
  if (device_shape.one_launch) {
    const std::int64_t append_blocks = blocks_for(device_shape.threads(), block_dim);
    if (append_blocks < 0) return static_cast<int>(cudaErrorInvalidConfiguration);
    const std::int64_t blocks = query_blocks(device_shape, block_dim) + append_blocks;
    if (blocks == 0) return 0;
    if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidConfiguration);
    append_one_kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(block_dim), 0,
                        static_cast<cudaStream_t>(stream)>>>(device_shape);
    return static_cast<int>(cudaGetLastError());
  }
  if (device_shape.rotates_queries()) {  // the queries: the rotation kernel, on the same stream
    const int rc = launch_rotate(query_rotation(device_shape), stream, block_dim);
    if (rc != 0) return rc;
  }
  // The launches write disjoint memory (queries; the normed rows' entries and outputs; the other key rows', the value
  // entries and MLA's nope lanes), in stream order.
  const auto launch = [&](auto kernel, std::int64_t threads) {
    const std::int64_t blocks = blocks_for(threads, block_dim);
    if (blocks == 0) return 0;
    if (blocks < 0) return static_cast<int>(cudaErrorInvalidConfiguration);
    kernel<<<static_cast<unsigned>(blocks), static_cast<unsigned>(block_dim), 0, static_cast<cudaStream_t>(stream)>>>(
        device_shape);
    return static_cast<int>(cudaGetLastError());
  };
  const int rc = launch(append_norm_kernel, device_shape.norm_threads());
  if (rc != 0) return rc;
  int result = static_cast<int>(cudaErrorInvalidValue);  // a configuration choose_append_vectors does not make
  with_configuration(device_shape.rot.storage, device_shape.key_vector_pairs, device_shape.key_adjacent,
                     [&](auto st, auto w, auto adjacent) {
                       result = launch(
                           append_kernel<decltype(st)::value, decltype(w)::value, decltype(adjacent)::value>,
                           device_shape.pair_threads() + device_shape.value_threads() + device_shape.nope_threads());
                     });
  return result;
}

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
  const std::int64_t blocks = (device_shape.threads() + block_dim - 1) / block_dim;
  if (blocks == 0) return 0;
  if (blocks > 0x7fffffff) return static_cast<int>(cudaErrorInvalidConfiguration);
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
