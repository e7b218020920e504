// The CUDA kernels on a GPU (label cuda; skipped where no GPU is present): every case of the rotation case table
// (angles from its table, or accurate on the fly) uploaded, rotated by the kernel, downloaded, and compared with the
// scalar reference bit for bit, guard regions included; the fused append's and the K-shift's cases against the CPU's
// AppendCall and PagedKvCache byte for byte — the same comparisons tests/cuda_host_test.cpp makes for the host's run
// of the same bodies.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "attention/attention_internal.hpp"
#include "cuda/host_grid.hpp"
#include "cuda/rotate_kernel.hpp"
#include "cuda_append_cases.hpp"
#include "device/device_shapes.hpp"
#include "expect_error.hpp"
#include "lib/cases.hpp"
#include "rope/reference.hpp"
#include "ropekit/append.hpp"
#include "ropekit/cos_sin_cache.hpp"
#include "ropekit/cuda.hpp"
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

// Host memory regions mirrored on the device: any pointer into a region maps to the same offset in its copy.
struct Mirror {
  std::vector<std::unique_ptr<DeviceCopy>> copies;
  void add(const void* data, std::size_t bytes) {
    if (data != nullptr && bytes > 0) copies.push_back(std::make_unique<DeviceCopy>(data, bytes));
  }
  template <class T>
  T* map(T* p) const {
    if (p == nullptr) return nullptr;
    const auto* b = reinterpret_cast<const std::byte*>(p);
    for (const auto& c : copies) {
      if (b >= c->host && b < c->host + c->size) return c->map(p);
    }
    ADD_FAILURE() << "a pointer outside every mirrored region";
    return nullptr;
  }
  cuda::View map(cuda::View v) const {
    v.data = map(v.data);
    return v;
  }
  // The rotation's shape: its views, lanes, positions, table or turns.
  void map(cuda::RotateShape& s) const {
    s.q_in = map(s.q_in);
    s.q_out = map(s.q_out);
    s.k_in = map(s.k_in);
    s.k_out = map(s.k_out);
    s.lane_a = map(s.lane_a);
    s.lane_b = map(s.lane_b);
    s.axis = map(s.axis);
    s.positions = map(s.positions);
    s.cos = map(s.cos);
    s.sin = map(s.sin);
    s.turns_hi = map(s.turns_hi);
    s.turns_lo = map(s.turns_lo);
  }
};

// The angle sources of a rotation shape: the lanes, the table (whole) or the turns.
void add_angles(Mirror& m, const cuda::RotateShape& s, const detail::CudaLanes& lanes, const detail::RotateJob& job) {
  m.add(lanes.lane_a.data(), lanes.lane_a.size() * 4);
  m.add(lanes.lane_b.data(), lanes.lane_b.size() * 4);
  m.add(lanes.axis.data(), lanes.axis.size());
  if (job.table != nullptr) {
    const std::size_t bytes = std::size_t(job.table->num_positions()) * std::size_t(job.table->num_pairs()) * 4;
    m.add(s.cos, bytes);
    m.add(s.sin, bytes);
  } else {
    m.add(s.turns_hi, std::size_t(s.pairs) * 8);
    m.add(s.turns_lo, std::size_t(s.pairs) * 8);
  }
}

TEST(CudaDevice, RotationKernelEqualsTheReference) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int ran = 0;
  std::map<int, int> widths;  // cases by the access width run (bytes)
  std::uint32_t seed = 0;
  for (const cases::Case& c : cuda_cases::rotation_cases()) {
    ++seed;
    // Each case at the launch's widest access and at one element per access (the alternate cases at 8 bytes).
    for (const int max_bytes : {16, seed % 2 == 0 ? 8 : 1}) {
      SCOPED_TRACE(c.name() + " accesses of at most " + std::to_string(max_bytes) + " bytes");
      cases::Workload got(c, seed), want(c, seed);
      const RotateCall reference = want.prepare();
      detail::rotate_rows_reference(reference.job(), 0, reference.rows());
      const RotateCall call = got.prepare();
      detail::CudaLanes lanes;
      cuda::RotateShape s;
      if (!detail::make_cuda_shape(call.job(), lanes, s)) continue;  // HfCompat on the fly: the CPU's
      detail::choose_vector(*call.job().map, s, {.max_access_bytes = max_bytes});
      ++widths[(s.adjacent ? 2 : 1) * s.vector_pairs * s.element_size];
      // q, k and the outputs first (copied back after the launch), then the angles and the positions (read only).
      Mirror m;
      for (cases::Tensor* t : {&got.q, &got.k, &got.q_out, &got.k_out}) m.add(t->storage.data(), t->storage.size());
      const std::size_t written = m.copies.size();
      add_angles(m, s, lanes, call.job());
      const auto& pos = got.rotation_positions();
      m.add(pos.data(), pos.size() * 8);
      ASSERT_EQ(s.positions, static_cast<const void*>(pos.data())) << "the case's positions are int64";
      m.map(s);
      ASSERT_EQ(cuda::launch_rotate(s, nullptr, 96), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (std::size_t i = 0; i < written; ++i) m.copies[i]->back(const_cast<std::byte*>(m.copies[i]->host));
      same_bits::expect_same_rotation(got, want);
      ++ran;
    }
  }
  std::printf("%s: %d runs of the cases (table and accurate on-the-fly angles) equal the reference\n", prop.name, ran);
  for (const auto& [bytes, runs] : widths) std::printf("  accesses of %2d bytes: %d runs\n", bytes, runs);
  EXPECT_GT(ran, 1800);
  for (const int bytes : {2, 4, 8, 16}) EXPECT_GT(widths[bytes], 100) << bytes << "-byte accesses";
}

bool have_device() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

// The public device API (ropekit/cuda.hpp) over the rotation case table: DeviceRope::rotate of device copies on a
// stream of our own, against the scalar reference bit for bit (a table of 64 positions, so that most cases take both
// angle sources); then a bad position reported by check() and its rows left as they were.
// The device's storage codecs (the hardware's cvt.rn for numbers, the software for NaNs) against the host's bit for
// bit: every fp16 pattern widened; every float32 pattern of the form (hi << 16) | lo for the bf16/fp16 rounding
// boundaries' neighbourhoods, and random patterns.
TEST(CudaDevice, CodecsEqualTheHostsOnEveryPattern) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  std::vector<std::uint32_t> in;
  for (std::uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (const std::uint32_t lo :
         {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u, 0xefffu, 0xf000u, 0xf001u, 0xffffu}) {
      in.push_back(hi << 16 | lo);
    }
  }
  std::uint32_t x = 12345;
  for (int i = 0; i < 1'000'000; ++i) in.push_back(x = x * 1664525u + 1013904223u);
  const std::size_t n = in.size();
  DeviceCopy din(in.data(), n * 4);
  std::vector<std::uint16_t> bf(n), f16(n);
  std::vector<float> widened(n);
  std::vector<std::uint32_t> bf2(n), f162(n);
  DeviceCopy dbf(bf.data(), n * 2), df16(f16.data(), n * 2), dw(widened.data(), n * 4), dbf2(bf2.data(), n * 4),
      df162(f162.data(), n * 4);
  ASSERT_EQ(
      cuda::launch_codecs(reinterpret_cast<const std::uint32_t*>(din.device),
                          reinterpret_cast<std::uint16_t*>(dbf.device), reinterpret_cast<std::uint16_t*>(df16.device),
                          reinterpret_cast<float*>(dw.device), reinterpret_cast<std::uint32_t*>(dbf2.device),
                          reinterpret_cast<std::uint32_t*>(df162.device), static_cast<std::int64_t>(n)),
      0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dbf.back(bf.data());
  df16.back(f16.data());
  dw.back(widened.data());
  dbf2.back(bf2.data());
  df162.back(f162.data());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n && bad < 10; ++i) {
    const float v = cuda::float_of(in[i]);
    const float w = cuda::f16_load(static_cast<std::uint16_t>(in[i]));
    // The packed stores: this pattern in the low half, its neighbour's in the high half, each rounded as alone.
    const float u = cuda::float_of(in[(i ^ 1) < n ? (i ^ 1) : i]);
    const std::uint32_t bf_pair = cuda::bf16_store(v) | std::uint32_t{cuda::bf16_store(u)} << 16;
    const std::uint32_t f16_pair = cuda::f16_store(v) | std::uint32_t{cuda::f16_store(u)} << 16;
    if (bf[i] != cuda::bf16_store(v) || f16[i] != cuda::f16_store(v) || cuda::bits_of(widened[i]) != cuda::bits_of(w) ||
        bf2[i] != bf_pair || f162[i] != f16_pair) {
      ADD_FAILURE() << std::hex << "pattern 0x" << in[i] << ": device bf16 0x" << bf[i] << " host 0x"
                    << cuda::bf16_store(v) << ", f16 0x" << f16[i] << " host 0x" << cuda::f16_store(v) << ", widened 0x"
                    << cuda::bits_of(widened[i]) << " host 0x" << cuda::bits_of(w) << ", bf16x2 0x" << bf2[i]
                    << " host 0x" << bf_pair << ", f16x2 0x" << f162[i] << " host 0x" << f16_pair;
      ++bad;
    }
  }
  std::printf("storage codecs: %zu patterns equal the host's\n", n);
}

TEST(CudaDevice, DeviceRopeRotatesLikeTheReference) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  int ran = 0;
  std::uint32_t seed = 0;
  for (const cases::Case& c : cuda_cases::rotation_cases()) {
    ++seed;
    SCOPED_TRACE(c.name());
    cases::Workload got(c, seed), want(c, seed);
    const RotateCall reference = want.prepare();
    detail::rotate_rows_reference(reference.job(), 0, reference.rows());
    if (got.rope().angle_mode() == AngleMode::HfCompat && c.angles != cases::Angles::Table) continue;
    const cuda::DeviceRope gpu(got.rope(), 0, got.rope().angle_mode() == AngleMode::HfCompat ? 1 << 20 : 64);
    RotateArgs args = got.rotate_args();
    Mirror m;
    for (cases::Tensor* t : {&got.q, &got.k, &got.q_out, &got.k_out}) m.add(t->storage.data(), t->storage.size());
    const auto& pos = got.rotation_positions();
    m.add(pos.data(), pos.size() * 8);
    const auto map_heads = [&](Heads h) {
      h.data = m.map(h.data);
      return h;
    };
    if (args.q.data) args.q = map_heads(args.q);
    if (args.k.data) args.k = map_heads(args.k);
    if (args.q_out.data) args.q_out = map_heads(args.q_out);
    if (args.k_out.data) args.k_out = map_heads(args.k_out);
    args.positions.data = m.map(args.positions.data);
    gpu.rotate(args, {.device = 0, .stream = stream});
    gpu.check({.device = 0, .stream = stream});
    for (std::size_t i = 0; i < 4; ++i) m.copies[i]->back(const_cast<std::byte*>(m.copies[i]->host));
    same_bits::expect_same_rotation(got, want);
    ++ran;
  }
  std::printf("DeviceRope::rotate: %d cases equal the reference\n", ran);
  EXPECT_GT(ran, 900);
  // A position of 2^47 on token 1: reported, its rows unwritten, the other tokens rotated.
  const Rope rope(Spec{.head_dim = 64, .rotary_dim = 64, .base = 10000.0, .pairing = Pairing::Half});
  const cuda::DeviceRope gpu(rope, 0, 16);
  std::vector<float> q(3 * 2 * 64, 1.0f);
  const std::vector<std::int64_t> pos = {5, std::int64_t{1} << 47, 7};
  DeviceCopy dq(q.data(), q.size() * 4), dp(pos.data(), pos.size() * 8);
  gpu.rotate({.q = bshd(dq.device, DType::F32, 1, 3, 2, 64), .positions = {dp.device, IndexType::I64, 3}},
             {.device = 0, .stream = stream});
  try {
    gpu.check({.device = 0, .stream = stream});
    ADD_FAILURE() << "no error for position 2^47";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 1"), std::string::npos) << e.what();
  }
  dq.back(q.data());
  for (int l = 0; l < 2 * 64; ++l) EXPECT_EQ(q[std::size_t(2 * 64 + l)], 1.0f);
  gpu.check({.device = 0, .stream = stream});  // cleared
  // A device pointer not aligned to its element: refused on the host, naming the field (the kernel reads whole
  // elements, which a GPU faults on when misaligned), and nothing launched.
  std::byte* odd = reinterpret_cast<std::byte*>(dq.device) + 2;  // 2-byte aligned: not a float32's 4
  EXPECT_ERROR(gpu.rotate({.q = bshd(odd, DType::F32, 1, 1, 1, 64), .positions = {dp.device, IndexType::I64, 1}},
                          {.device = 0, .stream = stream}),
               "q.data");
  EXPECT_ERROR(gpu.rotate({.q = bshd(dq.device, DType::F32, 1, 1, 1, 64),
                           .positions = {reinterpret_cast<std::byte*>(dp.device) + 4, IndexType::I64, 1}},
                          {.device = 0, .stream = stream}),
               "positions.data");
  PagedCache cache{.k = odd, .dtype = CacheDType::F32, .num_pages = 1, .page_size = 1, .kv_heads = 1, .head_dim = 64};
  EXPECT_ERROR(cuda::shift(gpu, cache, {dp.device, IndexType::I64, 1}, 3, {.device = 0, .stream = stream}), "cache.k");
  gpu.check({.device = 0, .stream = stream});
  cudaStreamDestroy(stream);
}

TEST(CudaDevice, AppendKernelEqualsTheCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  using namespace cuda_cases;
  int ran = 0;
  for_each_append_case([&](const Rope& rope, const AppendCase& c) {
    AppendBuffers want(c);
    prepare_append(rope, want.args, want.cache).run();
    // The whole append in one launch (these small grids' choice: AppendShape::one_launch) and in a launch per body.
    for (const bool one_launch : {true, false}) {
      SCOPED_TRACE(one_launch ? "one launch" : "a launch per body");
      AppendBuffers got(c);
      const AppendCall call = prepare_append(rope, got.args, got.cache);
      const detail::AppendJob job = detail::AppendAccess::job(call);
      detail::CudaLanes lanes;
      cuda::AppendShape a;
      ASSERT_TRUE(detail::make_cuda_append_shape(job, lanes, a));
      ASSERT_TRUE(a.one_launch);
      a.one_launch = one_launch;
      Mirror m;
      for (Memory* buffer : {&got.q, &got.q_out, &got.k, &got.k_out, &got.k_nope, &got.v, &got.kc, &got.vc})
        m.add(buffer->bytes.data(), buffer->bytes.size());
      add_angles(m, a.rot, lanes, *job.rotation);
      m.add(got.pos.data(), got.pos.size() * 8);
      m.add(job.slots.data(), job.slots.size() * 8);
      m.add(job.q_weight.data(), job.q_weight.size() * 4);
      m.add(job.k_weight.data(), job.k_weight.size() * 4);
      ASSERT_EQ(a.rot.positions, static_cast<const void*>(got.pos.data())) << "int64 positions, read in place";
      m.map(a.rot);
      a.k_out = m.map(a.k_out);
      a.k_nope = m.map(a.k_nope);
      a.v = m.map(a.v);
      a.slots = m.map(a.slots);
      a.cache_k = m.map(a.cache_k);
      a.cache_v = m.map(a.cache_v);
      a.q_weight = m.map(a.q_weight);
      a.k_weight = m.map(a.k_weight);
      ASSERT_EQ(cuda::launch_append(a, nullptr, 96), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      // The eight buffers were mirrored first; the angles, slots and weights were only read.
      for (std::size_t i = 0; i < 8; ++i) m.copies[i]->back(const_cast<std::byte*>(m.copies[i]->host));
      for (Memory AppendBuffers::*b :
           {&AppendBuffers::q, &AppendBuffers::q_out, &AppendBuffers::k, &AppendBuffers::k_out, &AppendBuffers::k_nope,
            &AppendBuffers::v, &AppendBuffers::kc, &AppendBuffers::vc}) {
        ASSERT_EQ((got.*b).bytes, (want.*b).bytes);
      }
    }
    ++ran;
  });
  std::printf(
      "fused append kernel: %d cases equal the CPU's AppendCall byte for byte, in one launch and in a launch "
      "per body\n",
      ran);
  EXPECT_EQ(ran, 720);
}

// ropekit::cuda::append (the public device append) over the append cases, slot mappings throughout (int32 on every
// other case), against the CPU's append byte for byte; then a slot outside the cache reported by check().
// The append buffers' eight tensors and positions mirrored on the device (the first eight copies, in the buffers'
// order), and the arguments with their views and positions pointing at the copies; the slots are the caller's.
AppendArgs mirror_append(cuda_cases::AppendBuffers& got, Mirror& m) {
  for (cuda_cases::Memory* b : {&got.q, &got.q_out, &got.k, &got.k_out, &got.k_nope, &got.v, &got.kc, &got.vc})
    m.add(b->bytes.data(), b->bytes.size());
  m.add(got.pos.data(), got.pos.size() * 8);
  AppendArgs args = got.args;
  for (Heads* h : {&args.q, &args.q_out, &args.k, &args.k_out, &args.k_nope, &args.v}) h->data = m.map(h->data);
  args.positions.data = m.map(args.positions.data);
  return args;
}

// `got`'s cache with its pages in the mirror.
PagedCache mirrored_cache(const cuda_cases::AppendBuffers& got, const Mirror& m) {
  PagedCache dc = got.cache;
  dc.k = m.map(dc.k);
  dc.v = m.map(dc.v);
  return dc;
}

// ropekit::cuda::append into the mirrored cache, checked, and the eight tensors copied back into `got`.
void run_mirrored_append(const cuda::DeviceRope& gpu, const AppendArgs& args, const cuda_cases::AppendBuffers& got,
                         const Mirror& m, cudaStream_t stream) {
  cuda::append(gpu, args, mirrored_cache(got, m), {.device = 0, .stream = stream});
  gpu.check({.device = 0, .stream = stream});
  for (std::size_t i = 0; i < 8; ++i) m.copies[i]->back(const_cast<std::byte*>(m.copies[i]->host));
}

TEST(CudaDevice, DeviceAppendEqualsTheCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  using namespace cuda_cases;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  int ran = 0;
  // One DeviceRope per spec (the helper's Ropes may share an address, so the spec is the key).
  std::unique_ptr<cuda::DeviceRope> gpu_owner;
  std::optional<Spec> gpu_spec;
  for_each_append_case([&](const Rope& rope, const AppendCase& c) {
    if (!gpu_spec || !(*gpu_spec == rope.spec())) {
      gpu_owner = std::make_unique<cuda::DeviceRope>(rope, 0, 2048);
      gpu_spec = rope.spec();
    }
    const cuda::DeviceRope& gpu = *gpu_owner;
    AppendBuffers want(c), got(c);
    want.args.slots = slot_mapping(want.slot_map);
    append(rope, want.args, want.cache);
    std::vector<std::int32_t> slots32(got.slot_map.begin(), got.slot_map.end());
    const bool narrow = ran % 2 == 1;
    Mirror m;
    AppendArgs args = mirror_append(got, m);
    m.add(got.slot_map.data(), got.slot_map.size() * 8);
    m.add(slots32.data(), slots32.size() * 4);
    m.add(got.q_weight.data(), got.q_weight.size() * 4);
    m.add(got.k_weight.data(), got.k_weight.size() * 4);
    args.slots = narrow ? SlotMapping{m.map(slots32.data()), IndexType::I32, AppendBuffers::kTokens}
                        : SlotMapping{m.map(got.slot_map.data()), IndexType::I64, AppendBuffers::kTokens};
    if (!got.q_weight.empty()) args.norm.q_weight = {m.map(got.q_weight.data()), got.q_weight.size()};
    if (!got.k_weight.empty()) args.norm.k_weight = {m.map(got.k_weight.data()), got.k_weight.size()};
    run_mirrored_append(gpu, args, got, m, stream);
    for (Memory AppendBuffers::*b :
         {&AppendBuffers::q, &AppendBuffers::q_out, &AppendBuffers::k, &AppendBuffers::k_out, &AppendBuffers::k_nope,
          &AppendBuffers::v, &AppendBuffers::kc, &AppendBuffers::vc}) {
      ASSERT_EQ((got.*b).bytes, (want.*b).bytes);
    }
    ++ran;
  });
  std::printf("ropekit::cuda::append: %d cases equal the CPU's append byte for byte\n", ran);
  EXPECT_EQ(ran, 720);
  cudaStreamDestroy(stream);
}

// ropekit::cuda::append with a page table in device memory (FlashInfer's addressing, read on the device) over the
// append cases that carry one, against the CPU's append with the same table byte for byte; then a token whose batch
// index is outside the batch: reported by check(), no entry written for it.
TEST(CudaDevice, DeviceAppendReadsAPageTable) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  using namespace cuda_cases;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  int ran = 0;
  for_each_append_case([&](const Rope& rope, const AppendCase& c) {
    if (c.variant != Variant::Outputs) return;  // the cases with a page table
    const cuda::DeviceRope gpu(rope, 0, 2048);
    AppendBuffers want(c), got(c);
    append(rope, want.args, want.cache);
    Mirror m;
    AppendArgs args = mirror_append(got, m);
    for (std::vector<std::int32_t>* v : {&got.indices, &got.indptr, &got.last, &got.batch_indices, &got.seq_positions})
      m.add(v->data(), v->size() * 4);
    const auto device_span = [&](std::vector<std::int32_t>& v) {
      return std::span<const std::int32_t>(m.map(v.data()), v.size());
    };
    args.slots = PageTable{.indices = device_span(got.indices),
                           .indptr = device_span(got.indptr),
                           .last_page_len = device_span(got.last),
                           .batch_indices = device_span(got.batch_indices),
                           .seq_positions = device_span(got.seq_positions)};
    run_mirrored_append(gpu, args, got, m, stream);
    for (Memory AppendBuffers::*b :
         {&AppendBuffers::q, &AppendBuffers::q_out, &AppendBuffers::k_out, &AppendBuffers::kc, &AppendBuffers::vc}) {
      ASSERT_EQ((got.*b).bytes, (want.*b).bytes);
    }
    ++ran;
    if (ran > 1) return;
    // A batch index outside the batch on token 4 (the host never reads it): reported, the token's entries unwritten.
    const std::int32_t outside = 2;
    ASSERT_EQ(cudaMemcpy(const_cast<std::int32_t*>(std::get<PageTable>(args.slots).batch_indices.data()) + 4, &outside,
                         4, cudaMemcpyHostToDevice),
              cudaSuccess);
    cuda::append(gpu, args, mirrored_cache(got, m), {.device = 0, .stream = stream});
    try {
      gpu.check({.device = 0, .stream = stream});
      ADD_FAILURE() << "no error for a batch index outside the batch";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token 4"), std::string::npos) << e.what();
    }
  });
  std::printf("ropekit::cuda::append with a device page table: %d cases equal the CPU's append byte for byte\n", ran);
  EXPECT_GT(ran, 0);
  cudaStreamDestroy(stream);
}

TEST(CudaDevice, KShiftKernelEqualsTheCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const Spec spec{.head_dim = 64,
                  .rotary_dim = 32,
                  .base = 10000.0,
                  .pairing = Pairing::Interleaved,
                  .scaling = scaling::DynamicNtk{.factor = 2.0, .max_position_embeddings = 32}};
  const Rope rope(spec, AngleMode::Accurate, 16), grown(spec, AngleMode::Accurate, 4096);
  int ran = 0;
  for (const CacheDType dtype : {CacheDType::F32, CacheDType::BF16, CacheDType::F16, CacheDType::F8E4M3}) {
    for (const PageLayout layout : {PageLayout::NHD, PageLayout::HND}) {
      for (const bool rerotate : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << to_string(dtype) << " " << to_string(layout) << (rerotate ? " rerotate" : " shift"));
        const std::int64_t kv = 2, d = 64, n = 12;
        std::vector<std::int64_t> at(n);
        for (std::int64_t t = 0; t < n; ++t) at[std::size_t(t)] = 100 + 3 * t;
        cuda_cases::FilledCache filled(rope,
                                       {.num_pages = 4,
                                        .page_size = 4,
                                        .kv_heads = kv,
                                        .dtype = dtype,
                                        .layout = layout,
                                        .k_scale = dtype == CacheDType::F8E4M3 ? 0.3f : 1.0f,
                                        .max_sequences = 1},
                                       at, 31);
        PagedKvCache& cache = filled.cache;
        const PagedCache& pc = cache.cache();
        std::vector<std::byte>& mine = filled.keys;
        const std::vector<std::int64_t>&pos = filled.positions, &slots = filled.slots;
        std::vector<float> rows(std::size_t(n * kv * d));
        const auto turns = [&](const Rope& r, std::span<const std::int64_t> at, Direction direction) {
          return r.prepare(
              {.k = bshd(rows.data(), DType::F32, 1, n, kv, d), .positions = positions(at), .direction = direction});
        };
        const std::vector<std::int64_t> steps(std::size_t(n), 77);
        std::vector<RotateCall> calls;
        if (rerotate) {
          calls.push_back(turns(rope, pos, Direction::Inverse));
          calls.push_back(turns(grown, pos, Direction::Forward));
          ASSERT_TRUE(cache.rerotate(0, rope, grown));
        } else {
          calls.push_back(turns(rope, steps, Direction::Inverse));
          cache.shift(0, -1, -1, -77);
        }
        std::vector<const detail::RotateJob*> jobs;
        for (const RotateCall& call : calls) jobs.push_back(&call.job());
        PagedCache copy = pc;
        copy.k = mine.data();
        detail::CudaLanes lanes;
        cuda::KShiftShape s;
        ASSERT_TRUE(detail::make_cuda_kshift_shape(jobs, copy, slots, lanes, s));
        Mirror m;
        m.add(mine.data(), mine.size());
        m.add(slots.data(), slots.size() * 8);
        m.add(pos.data(), pos.size() * 8);
        m.add(steps.data(), steps.size() * 8);
        m.add(rows.data(), rows.size() * 4);  // the calls' views (the K-shift reads only their coefficients)
        for (int c = 0; c < s.num_calls; ++c) add_angles(m, s.calls[c], lanes, *jobs[std::size_t(c)]);
        for (int c = 0; c < s.num_calls; ++c) m.map(s.calls[c]);
        s.slots = m.map(s.slots);
        s.cache.cache_k = m.map(s.cache.cache_k);
        ASSERT_EQ(cuda::launch_kshift(s, nullptr, 96), 0);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        m.copies.front()->back(mine.data());
        ASSERT_TRUE(filled.keys_equal(mine));
        ++ran;
      }
    }
  }
  std::printf("K-shift kernel: %d cases equal the CPU's PagedKvCache byte for byte\n", ran);
  // The public device K-shift on the last configuration's cache: R(−77) of every entry, against shift's.
  {
    const Rope plain(Spec{.head_dim = 64, .rotary_dim = 64, .base = 10000.0, .pairing = Pairing::Half});
    const cuda::DeviceRope gpu(plain, 0, 0);
    std::vector<std::int64_t> at(12);
    for (std::int64_t t = 0; t < 12; ++t) at[std::size_t(t)] = 500 + t;
    cuda_cases::FilledCache filled(
        plain, {.num_pages = 4, .page_size = 4, .kv_heads = 2, .dtype = CacheDType::BF16, .max_sequences = 1}, at, 51);
    PagedKvCache& cpu = filled.cache;
    const PagedCache& pc = cpu.cache();
    std::vector<std::byte>& mine = filled.keys;
    std::vector<std::int64_t>& slots = filled.slots;
    cpu.shift(0, -1, -1, -77);
    Mirror m;
    m.add(mine.data(), mine.size());
    m.add(slots.data(), slots.size() * 8);
    PagedCache dc = pc;
    dc.k = m.map(mine.data());
    dc.v = nullptr;
    dc.v_head_dim = 0;
    cuda::shift(gpu, dc, {m.map(slots.data()), IndexType::I64, 12}, -77, {.device = 0, .stream = nullptr});
    gpu.check({.device = 0, .stream = nullptr});
    m.copies.front()->back(mine.data());
    EXPECT_TRUE(filled.keys_equal(mine)) << "ropekit::cuda::shift";
  }
  // The public device re-rotation: a dynamic-NTK rope's table grown from 16 to 4096 positions (a new plan) applied to
  // an fp8 cache, against PagedKvCache::rerotate's; then a slot past the cache, reported on to's error word.
  {
    const Spec spec{.head_dim = 64,
                    .rotary_dim = 32,
                    .base = 10000.0,
                    .pairing = Pairing::Interleaved,
                    .scaling = scaling::DynamicNtk{.factor = 2.0, .max_position_embeddings = 32}};
    const Rope rope(spec, AngleMode::Accurate, 16), grown(spec, AngleMode::Accurate, 4096);
    const cuda::DeviceRope from(rope, 0, 16), to(grown, 0, 64);
    std::vector<std::int64_t> at(12);
    for (std::int64_t t = 0; t < 12; ++t) at[std::size_t(t)] = 30 + 5 * t;
    cuda_cases::FilledCache filled(rope,
                                   {.num_pages = 4,
                                    .page_size = 4,
                                    .kv_heads = 2,
                                    .dtype = CacheDType::F8E4M3,
                                    .layout = PageLayout::HND,
                                    .k_scale = 0.3f,
                                    .max_sequences = 1},
                                   at, 53);
    PagedKvCache& cpu = filled.cache;
    const PagedCache& pc = cpu.cache();
    std::vector<std::byte>& mine = filled.keys;
    std::vector<std::int64_t>& slots = filled.slots;
    const std::vector<std::int64_t>& pos = filled.positions;
    ASSERT_TRUE(cpu.rerotate(0, rope, grown));
    Mirror m;
    m.add(mine.data(), mine.size());
    m.add(slots.data(), slots.size() * 8);
    m.add(pos.data(), pos.size() * 8);
    PagedCache dc = pc;
    dc.k = m.map(mine.data());
    dc.v = nullptr;
    dc.v_head_dim = 0;
    const cuda::Stream stream{.device = 0, .stream = nullptr};
    cuda::rerotate(from, to, dc, {m.map(slots.data()), IndexType::I64, 12}, {m.map(pos.data()), IndexType::I64, 12},
                   stream);
    to.check(stream);
    m.copies.front()->back(mine.data());
    EXPECT_TRUE(filled.keys_equal(mine)) << "ropekit::cuda::rerotate";
    // Refused on the host, naming what: positions of another count, a rope pairing its lanes otherwise.
    EXPECT_ERROR(cuda::rerotate(from, to, dc, {m.map(slots.data()), IndexType::I64, 12},
                                {m.map(pos.data()), IndexType::I64, 11}, stream),
                 "positions: count = 11");
    Spec half = spec;
    half.pairing = Pairing::Half;
    const cuda::DeviceRope other(Rope(half, AngleMode::Accurate, 4096), 0, 64);
    EXPECT_ERROR(cuda::rerotate(from, other, dc, {m.map(slots.data()), IndexType::I64, 12},
                                {m.map(pos.data()), IndexType::I64, 12}, stream),
                 "pair their lanes differently");
    slots[3] = 16;  // one past the cache's 16 slots
    m.copies[1] = std::make_unique<DeviceCopy>(slots.data(), slots.size() * 8);
    cuda::rerotate(from, to, dc, {m.map(slots.data()), IndexType::I64, 12}, {m.map(pos.data()), IndexType::I64, 12},
                   stream);
    try {
      to.check(stream);
      ADD_FAILURE() << "no error for a slot past the cache";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token 3"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(ran, 16);
}

// A DeviceRope made from an imported table (an engine's cos/sin cache, scaled off the rope's own values so that only
// the table's rows can give the CPU's bits): DeviceRope::rotate and cuda::append against Rope::prepare(args, table)
// and append(..., table) on the CPU byte for byte; a position past the table reported by check(); the K-shift refused.
TEST(CudaDevice, DeviceRopeFromAnImportedTableGivesTheCpusBits) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  using namespace cuda_cases;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const cuda::Stream on{.device = 0, .stream = stream};
  for (const Spec& spec : {append_specs()[0], append_specs()[1]}) {
    const Rope rope(spec);
    SCOPED_TRACE(to_string(spec.pairing));
    constexpr std::int64_t kRows = 100;
    const std::shared_ptr<const Table> table = engine_table(rope, kRows);
    const cuda::DeviceRope gpu(rope, 0, table);
    EXPECT_EQ(gpu.table_positions(), kRows);
    // The rotation: bf16 rows of 9 tokens × 3 heads.
    const std::int64_t tokens = 9, heads = 3, d = spec.head_dim;
    std::vector<std::uint16_t> want(std::size_t(tokens * heads * d));
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = std::uint16_t(0x3f00 + (i * 37) % 0x1ff);
    std::vector<std::uint16_t> got = want;
    std::vector<std::int64_t> pos = {0, 99, 5, 42, 42, 7, 63, 1, 98};
    rope.prepare({.q = bshd(want.data(), DType::BF16, 1, tokens, heads, d),
                  .positions = {pos.data(), IndexType::I64, tokens}},
                 table)
        .run();
    DeviceCopy dq(got.data(), got.size() * 2), dp(pos.data(), pos.size() * 8);
    const RotateArgs args{.q = bshd(dq.device, DType::BF16, 1, tokens, heads, d),
                          .positions = {dp.device, IndexType::I64, tokens}};
    gpu.rotate(args, on);
    gpu.check(on);
    dq.back(got.data());
    EXPECT_EQ(got, want);
    // Past the table: token 3 at position 100 is reported, its rows unwritten.
    pos[3] = kRows;
    ASSERT_EQ(cudaMemcpy(dp.device, pos.data(), pos.size() * 8, cudaMemcpyHostToDevice), cudaSuccess);
    gpu.rotate(args, on);
    EXPECT_ERROR(gpu.check(on), "token 3");
    // The fused append, its tokens' positions folded into the table.
    const AppendCase c{spec, DType::BF16, CacheDType::BF16, PageLayout::NHD, Variant::Plain, false};
    AppendBuffers want_append(c), got_append(c);
    for (AppendBuffers* b : {&want_append, &got_append})
      for (std::int64_t& p : b->pos) p %= kRows;
    want_append.args.slots = slot_mapping(want_append.slot_map);
    append(rope, want_append.args, want_append.cache, table);
    Mirror m;
    AppendArgs append_args = mirror_append(got_append, m);
    m.add(got_append.slot_map.data(), got_append.slot_map.size() * 8);
    append_args.slots = SlotMapping{m.map(got_append.slot_map.data()), IndexType::I64, AppendBuffers::kTokens};
    run_mirrored_append(gpu, append_args, got_append, m, stream);
    for (Memory AppendBuffers::*b : {&AppendBuffers::q, &AppendBuffers::k, &AppendBuffers::kc, &AppendBuffers::vc})
      EXPECT_EQ((got_append.*b).bytes, (want_append.*b).bytes);
    // The K-shift turns cached keys by the rope's own angles: a DeviceRope made from a table is refused.
    EXPECT_ERROR(cuda::shift(gpu, mirrored_cache(got_append, m), std::get<SlotMapping>(append_args.slots), 1, on),
                 "a DeviceRope made from a table");
  }
  cudaStreamDestroy(stream);
}

// A decode step as engines run it in a CUDA graph: DeviceRope::rotate and cuda::append captured once on a stream of
// our own (the append in one launch, then in a launch per body), the graph replayed over new inputs, positions and
// slots written in place between replays (a padding slot of -1 in one of them) — each replay equal to the CPU's
// Rope::apply and append on the same inputs, byte for byte, the cache carried across replays on both sides. Capture
// is in cudaStreamCaptureModeGlobal, which refuses any call that would synchronize or allocate. Then a position out
// of range in a replay: each DeviceRope's check() after it names the token (check() waits, so never inside a capture).
// Last, the K-shift and the re-rotation captured, replayed against the same calls made directly.
TEST(CudaDevice, CapturedDecodeStepReplaysLikeTheCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  constexpr std::int64_t batch = 4, hq = 32, hk = 8, d = 128, page_size = 16, pages = 8;
  const Rope rope(Spec{.head_dim = int(d), .rotary_dim = int(d), .base = 500000.0, .pairing = Pairing::Half});
  const cuda::DeviceRope table_gpu(rope, 0, 4096), fly_gpu(rope, 0, 0);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const cuda::Stream on{.device = 0, .stream = stream};
  // The step's buffers, bf16 bit patterns: q, k for the rotation; q2, k2, v for the append; the caches.
  const std::size_t q_n = batch * hq * d, k_n = batch * hk * d, cache_n = pages * page_size * hk * d;
  std::vector<std::uint16_t> q(q_n), k(k_n), q2(q_n), k2(k_n), v(k_n), kc(cache_n, 0), vc(cache_n, 0);
  std::vector<std::int64_t> pos(batch), slots(batch);
  Mirror m;
  for (auto* b : {&q, &k, &q2, &k2, &v, &kc, &vc}) m.add(b->data(), b->size() * 2);
  m.add(pos.data(), pos.size() * 8);
  m.add(slots.data(), slots.size() * 8);
  const auto heads = [](void* data, std::int64_t n) { return bshd(data, DType::BF16, batch, 1, n, d); };
  const auto rotate_args = [&](const auto& at) {
    return RotateArgs{.q = heads(at(q.data()), hq),
                      .k = heads(at(k.data()), hk),
                      .positions = {at(pos.data()), IndexType::I64, batch}};
  };
  const auto append_args = [&](const auto& at) {
    return AppendArgs{.q = heads(at(q2.data()), hq),
                      .k = heads(at(k2.data()), hk),
                      .v = heads(at(v.data()), hk),
                      .positions = {at(pos.data()), IndexType::I64, batch},
                      .slots = SlotMapping{at(slots.data()), IndexType::I64, batch}};
  };
  const auto cache_at = [&](const auto& at) {
    return PagedCache{.k = at(kc.data()),
                      .v = at(vc.data()),
                      .dtype = CacheDType::BF16,
                      .num_pages = pages,
                      .page_size = page_size,
                      .kv_heads = hk,
                      .head_dim = int(d),
                      .v_head_dim = int(d)};
  };
  const auto on_device = [&](auto* p) { return static_cast<void*>(m.map(p)); };
  std::vector<std::uint16_t> cpu_kc(cache_n, 0), cpu_vc(cache_n, 0);  // the CPU's cache, carried across steps
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (const auto mode : {detail::AppendLaunches::One, detail::AppendLaunches::PerBody}) {
    SCOPED_TRACE(mode == detail::AppendLaunches::One ? "append in one launch" : "append in a launch per body");
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    table_gpu.rotate(rotate_args(on_device), on);
    detail::DeviceAccess::append(fly_gpu, append_args(on_device), cache_at(on_device), on, {.launches = mode});
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE(step);
      for (auto* b : {&q, &k, &q2, &k2, &v})
        for (std::uint16_t& x : *b) x = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(value(rng)) >> 16);
      for (std::int64_t b = 0; b < batch; ++b) {
        pos[std::size_t(b)] = 17 + 1000 * b + 311 * step;  // under the table's 4096 and over none of it
        slots[std::size_t(b)] = (step == 1 && b == 2) ? -1 : b * (pages * page_size / batch) + step;
      }
      for (const std::size_t i : {0, 1, 2, 3, 4, 7, 8})  // inputs; the caches stay where the last replay left them
        ASSERT_EQ(
            cudaMemcpyAsync(m.copies[i]->device, m.copies[i]->host, m.copies[i]->size, cudaMemcpyHostToDevice, stream),
            cudaSuccess);
      // The CPU on copies of the same inputs (the rotation and the append's queries in place) and on its own cache.
      std::vector<std::uint16_t> want_q = q, want_k = k, want_q2 = q2;
      const auto on_cpu = [&](auto* p) -> void* {
        if (static_cast<void*>(p) == q.data()) return want_q.data();
        if (static_cast<void*>(p) == k.data()) return want_k.data();
        if (static_cast<void*>(p) == q2.data()) return want_q2.data();
        if (static_cast<void*>(p) == kc.data()) return cpu_kc.data();
        if (static_cast<void*>(p) == vc.data()) return cpu_vc.data();
        return p;
      };
      rope.apply(rotate_args(on_cpu));
      append(rope, append_args(on_cpu), cache_at(on_cpu));
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      table_gpu.check(on);
      fly_gpu.check(on);
      for (std::size_t i = 0; i < 7; ++i) m.copies[i]->back(const_cast<std::byte*>(m.copies[i]->host));
      EXPECT_EQ(q, want_q);
      EXPECT_EQ(k, want_k);
      EXPECT_EQ(q2, want_q2);
      EXPECT_EQ(kc, cpu_kc);
      EXPECT_EQ(vc, cpu_vc);
    }
    // A replay with token 2's position at 2^47: both calls leave its rows unwritten and report it after the replay.
    pos[2] = std::int64_t{1} << 47;
    ASSERT_EQ(cudaMemcpyAsync(m.copies[7]->device, pos.data(), pos.size() * 8, cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_ERROR(table_gpu.check(on), "token 2");
    EXPECT_ERROR(fly_gpu.check(on), "token 2");
    for (std::size_t i = 5; i < 7; ++i) m.copies[i]->back(const_cast<std::byte*>(m.copies[i]->host));
    cpu_kc = kc;  // the replay wrote the other tokens' entries: carry the device's cache on
    cpu_vc = vc;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  // cuda::shift and cuda::rerotate (to a Rope of another base) captured too: a replay leaves the cache as the same
  // calls made directly on the same cache do (the direct calls equal the CPU's in the K-shift test above).
  const Rope other(Spec{.head_dim = int(d), .rotary_dim = int(d), .base = 1e6, .pairing = Pairing::Half});
  const cuda::DeviceRope other_gpu(other, 0, 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    slots[std::size_t(b)] = 32 * b;
    pos[std::size_t(b)] = 100 + b;
  }
  for (const std::size_t i : {7, 8})
    ASSERT_EQ(cudaMemcpy(m.copies[i]->device, m.copies[i]->host, m.copies[i]->size, cudaMemcpyHostToDevice),
              cudaSuccess);
  const SlotMapping device_slots{on_device(slots.data()), IndexType::I64, batch};
  const auto turn = [&] {
    cuda::shift(fly_gpu, cache_at(on_device), device_slots, -5, on);
    cuda::rerotate(fly_gpu, other_gpu, cache_at(on_device), device_slots,
                   {on_device(pos.data()), IndexType::I64, batch}, on);
  };
  const std::vector<std::uint16_t> before = kc;  // the device's cache as the last replay left it (copied back)
  turn();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  m.copies[5]->back(kc.data());
  const std::vector<std::uint16_t> direct = kc;
  EXPECT_NE(direct, before);
  ASSERT_EQ(cudaMemcpy(m.copies[5]->device, before.data(), before.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  turn();
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  fly_gpu.check(on);
  other_gpu.check(on);
  m.copies[5]->back(kc.data());
  EXPECT_EQ(kc, direct);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
