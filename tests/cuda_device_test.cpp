// The CUDA rotation kernel on a GPU (label cuda; skipped where no GPU is present): every case of the rotation case
// table (angles from its table, or accurate on the fly) uploaded, rotated by the kernel, downloaded, and compared with
// the scalar reference bit for bit, guard regions included — the same comparison tests/cuda_host_test.cpp makes for the
// host's run of the same body.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda/host_grid.hpp"
#include "cuda/rotate_kernel.hpp"
#include "lib/cases.hpp"
#include "rope/reference.hpp"
#include "ropekit/ropekit.hpp"
#include "ropekit/table.hpp"
#include "same_bits.hpp"

namespace {

using namespace ropekit;

// A device copy of a host buffer, and the translation of host pointers into it.
struct DeviceCopy {
  const std::byte* host = nullptr;
  std::size_t size = 0;
  std::byte* device = nullptr;
  DeviceCopy(const void* data, std::size_t bytes) : host(static_cast<const std::byte*>(data)), size(bytes) {
    if (bytes == 0) return;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(device, data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceCopy() { cudaFree(device); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  template <class T>
  T* map(T* p) const {
    if (p == nullptr || device == nullptr) return nullptr;
    return reinterpret_cast<T*>(device + (reinterpret_cast<const std::byte*>(p) - host));
  }
  void back(void* data) const {
    if (size > 0) {
      EXPECT_EQ(cudaMemcpy(data, device, size, cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }
};

TEST(CudaDevice, RotationKernelEqualsTheReference) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int ran = 0;
  std::uint32_t seed = 0;
  for (const cases::Case& c : cases::eval_cases()) {
    ++seed;
    if (c.op != cases::Op::Rotate) continue;
    SCOPED_TRACE(c.name());
    cases::Workload got(c, seed), want(c, seed);
    const RotateCall reference = want.prepare();
    detail::rotate_rows_reference(reference.job(), 0, reference.rows());
    const RotateCall call = got.prepare();
    detail::CudaLanes lanes;
    cuda::RotateShape s;
    if (!detail::make_cuda_shape(call.job(), lanes, s)) continue;  // HfCompat on the fly: the CPU's
    const Table* table = call.job().table;
    DeviceCopy q(got.q.storage.data(), got.q.storage.size()), k(got.k.storage.data(), got.k.storage.size()),
        q_out(got.q_out.storage.data(), got.q_out.storage.size()),
        k_out(got.k_out.storage.data(), got.k_out.storage.size());
    DeviceCopy a(lanes.lane_a.data(), lanes.lane_a.size() * 4), b(lanes.lane_b.data(), lanes.lane_b.size() * 4),
        axis(lanes.axis.data(), lanes.axis.size());
    const auto& pos = got.rotation_positions();
    DeviceCopy positions(pos.data(), pos.size() * 8);
    const std::size_t table_bytes =
        table != nullptr ? std::size_t(table->num_positions()) * std::size_t(table->num_pairs()) * 4 : 0;
    DeviceCopy cos(s.cos, table_bytes), sin(s.sin, table_bytes);
    const std::size_t turn_bytes = s.turns_hi != nullptr ? std::size_t(s.pairs) * 8 : 0;
    DeviceCopy hi(s.turns_hi, turn_bytes), lo(s.turns_lo, turn_bytes);
    auto map_view = [&](cuda::View v) {
      for (const DeviceCopy* d : {&q, &k, &q_out, &k_out}) {
        if (v.data != nullptr && reinterpret_cast<std::byte*>(v.data) >= d->host &&
            reinterpret_cast<std::byte*>(v.data) < d->host + d->size) {
          v.data = d->map(v.data);
          return v;
        }
      }
      v.data = nullptr;
      return v;
    };
    s.q_in = map_view(s.q_in);
    s.q_out = map_view(s.q_out);
    s.k_in = map_view(s.k_in);
    s.k_out = map_view(s.k_out);
    s.lane_a = a.map(s.lane_a);
    s.lane_b = b.map(s.lane_b);
    s.axis = axis.map(s.axis);
    ASSERT_EQ(s.positions, static_cast<const void*>(pos.data())) << "the case's positions are int64";
    s.positions = positions.map(pos.data());
    s.cos = cos.map(s.cos);
    s.sin = sin.map(s.sin);
    s.turns_hi = hi.map(s.turns_hi);
    s.turns_lo = lo.map(s.turns_lo);
    ASSERT_EQ(cuda::launch_rotate(s, nullptr, 96), 0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    q.back(got.q.storage.data());
    k.back(got.k.storage.data());
    q_out.back(got.q_out.storage.data());
    k_out.back(got.k_out.storage.data());
    same_bits::expect_same_rotation(got, want);
    ++ran;
  }
  std::printf("%s: %d cases (table and accurate on-the-fly angles) equal the reference\n", prop.name, ran);
  EXPECT_GT(ran, 600);
}

}  // namespace
