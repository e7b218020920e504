// The CUDA backend's kernel bodies run by the host over their whole launch grid (issue 41's host-verified kernel
// logic): bit for bit against the scalar reference over the rotation case table (both pairings, partial rotary,
// M-RoPE and axial streams, fp32/bf16/fp16, forward/inverse/backward, in and out of place, strided and offset
// views, guards included), and the device codecs against ropekit/dtype.hpp over every bf16 and fp16 pattern and
// the float32 rounding boundaries. No GPU or CUDA toolkit is needed: the same bodies compile under nvcc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "cuda/device_math.hpp"
#include "cuda/host_grid.hpp"
#include "lib/cases.hpp"
#include "rope/reference.hpp"
#include "ropekit/ropekit.hpp"
#include "same_bits.hpp"

namespace {

using namespace ropekit;

bool both_nan(float a, float b) { return std::isnan(a) && std::isnan(b); }

TEST(CudaHost, CodecsEqualTheLibrarysOnEveryPattern) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float bf = cuda::bf16_load(bits), want_bf = bf16_to_float(bits);
    ASSERT_TRUE(std::memcmp(&bf, &want_bf, 4) == 0 || both_nan(bf, want_bf)) << std::hex << h;
    const float f = cuda::f16_load(bits), want_f = f16_to_float(bits);
    ASSERT_TRUE(std::memcmp(&f, &want_f, 4) == 0 || both_nan(f, want_f)) << std::hex << h;
  }
  // Stores: every half's neighbourhood in float32 (the value, the midpoints to its neighbours and one ulp either
  // side of them), then random bit patterns of every class.
  std::vector<float> probes;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float v = f16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(v)) continue;
    const float next = f16_to_float(static_cast<std::uint16_t>(h + 1 < 0x10000 ? h + 1 : h));
    const float mid = std::isfinite(next) ? v + (next - v) / 2 : v;
    for (const float x : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), std::nextafter(mid, -1e30f)})
      probes.push_back(x);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1'000'000; ++i) probes.push_back(cuda::float_of(static_cast<std::uint32_t>(rng())));
  for (const float x : probes) {
    const std::uint16_t half = cuda::f16_store(x), want_half = float_to_f16(x);
    const std::uint16_t b = cuda::bf16_store(x), want_b = float_to_bf16(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(f16_to_float(half)) && std::isnan(bf16_to_float(b)));
      continue;
    }
    ASSERT_EQ(half, want_half) << "f16 of " << x;
    ASSERT_EQ(b, want_b) << "bf16 of " << x;
  }
}

TEST(CudaHost, Fp8CodecEqualsTheLibrarysOnEveryPattern) {
  for (std::uint32_t b = 0; b < 0x100; ++b) {
    const float got = cuda::e4m3_load(static_cast<std::uint8_t>(b)), want = e4m3_to_float(static_cast<std::uint8_t>(b));
    ASSERT_TRUE(std::memcmp(&got, &want, 4) == 0 || both_nan(got, want)) << b;
  }
  // Stores: every e4m3 value, the midpoints to its neighbours and one float32 ulp either side, the saturation
  // boundary, infinities, NaNs, then random float32 bit patterns.
  std::vector<float> probes = {448.0f, 464.0f, 480.0f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN, -0.0f, 0.0f};
  for (std::uint32_t b = 0; b < 0x7f; ++b) {
    const float v = e4m3_to_float(static_cast<std::uint8_t>(b)), next = e4m3_to_float(static_cast<std::uint8_t>(b + 1));
    const float mid = v + (next - v) / 2;
    for (const float x : {v, -v, mid, -mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) probes.push_back(x);
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 1'000'000; ++i) probes.push_back(cuda::float_of(static_cast<std::uint32_t>(rng())));
  for (const float x : probes) ASSERT_EQ(cuda::e4m3_store(x), float_to_e4m3(x)) << x;
}

TEST(CudaHost, RotationBodyOverTheLaunchGridEqualsTheReference) {
  int ran = 0, skipped = 0;
  std::uint32_t seed = 0;
  for (const cases::Case& c : cases::eval_cases()) {
    ++seed;
    if (c.op != cases::Op::Rotate) continue;
    SCOPED_TRACE(c.name());
    cases::Workload got(c, seed), want(c, seed);
    const RotateCall reference = want.prepare();
    detail::rotate_rows_reference(reference.job(), 0, reference.rows());
    const RotateCall call = got.prepare();
    // Blocks of 96 threads: not a multiple of any case's pair count, so blocks straddle rows and the last block is
    // partial.
    if (!detail::rotate_on_host_grid(call.job(), 96)) {
      ++skipped;  // HfCompat angles on the fly: libm's, not reproducible on a GPU (a table is used there)
      continue;
    }
    same_bits::expect_same_rotation(got, want);
    ++ran;
  }
  std::printf(
      "CUDA body on the host: %d cases (table and accurate on-the-fly angles) equal the reference; %d "
      "HfCompat-on-the-fly cases left to the CPU\n",
      ran, skipped);
  EXPECT_GT(ran, 600);
}

}  // namespace
