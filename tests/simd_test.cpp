// SIMD kernels: every Highway target this CPU supports against the scalar reference kernel, bit
// for bit — odd tails (head_dim 72, 80, 96; rotary 32 of 128), misaligned pointers, strided views,
// guard regions, both pairings, M-RoPE, fp32/bf16/fp16 with special values, all directions, in and
// out of place (incl. non-temporal stores), table and on-the-fly angles, any thread count.
//
// Bitwise equality with the reference carries the accuracy contract over to every target: the
// reference's arithmetic is the one apply_test checks against the double-precision oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "cpu/rotate.hpp"
#include "rope/angles.hpp"
#include "rope/reference.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using namespace ropekit;

// Restores the best SIMD target however a test ends.
struct TargetGuard {
  ~TargetGuard() { set_simd_target(""); }
};

struct KernelCase {
  const char* name;
  Spec spec;
};

std::vector<KernelCase> kernel_cases() {
  auto spec = [](int head, int rot, Pairing p, Scaling s = scaling::None{}) {
    return Spec{.head_dim = head, .rotary_dim = rot, .base = 1e4, .pairing = p, .scaling = s};
  };
  const auto yarn = scaling::Yarn{.factor = 8, .original_max_position_embeddings = 4096};
  return {
      {"half_128", spec(128, 128, Pairing::Half)},
      {"interleaved_128", spec(128, 128, Pairing::Interleaved)},
      {"half_72", spec(72, 72, Pairing::Half)},
      {"interleaved_72", spec(72, 72, Pairing::Interleaved)},
      {"half_80", spec(80, 80, Pairing::Half)},
      {"interleaved_96", spec(96, 96, Pairing::Interleaved)},
      {"half_96", spec(96, 96, Pairing::Half)},
      {"half_32_of_128", spec(128, 32, Pairing::Half)},
      {"interleaved_32_of_128", spec(128, 32, Pairing::Interleaved)},
      {"interleaved_6_of_10", spec(10, 6, Pairing::Interleaved)},
      {"half_2_of_2", spec(2, 2, Pairing::Half)},
      {"yarn_half_64", spec(64, 64, Pairing::Half, yarn)},  // cos_sin_scale != 1
      {"mrope_sectioned", {.head_dim = 128, .rotary_dim = 128, .base = 1e6, .pairing = Pairing::Half,
                           .mrope = MRope{{16, 24, 24}, MRopeLayout::Sectioned}}},
      {"mrope_interleaved", {.head_dim = 128, .rotary_dim = 128, .base = 5e6, .pairing = Pairing::Half,
                             .mrope = MRope{{24, 20, 20}, MRopeLayout::Interleaved}}},
  };
}

// A [batch, seq, heads, head_dim] view inside a buffer with guard elements before, between and
// after the rows, starting `misalign` elements past a 64-byte boundary.
struct Buffer {
  DType dtype;
  std::int64_t batch, seq, heads, head_dim, head_stride, seq_stride, batch_stride, offset;
  std::vector<std::uint8_t> bytes;  // over-allocated so that the view can start aligned

  Buffer(DType dt, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d, int gap,
         int misalign, std::mt19937& rng)
      : dtype(dt), batch(b), seq(s), heads(h), head_dim(d), head_stride(d + gap),
        seq_stride(h * (d + gap) + gap), batch_stride(s * (h * (d + gap) + gap) + gap) {
    const std::int64_t elements = b * batch_stride + 64;
    bytes.resize(static_cast<std::size_t>(elements * element_size(dt) + 128));
    const auto base = reinterpret_cast<std::uintptr_t>(bytes.data());
    const std::int64_t aligned = static_cast<std::int64_t>((64 - base % 64) % 64);
    offset = aligned / element_size(dt) + 16 + misalign;  // 16 guard elements before
    fill(rng);
  }
  std::int64_t num_elements() const { return std::int64_t(bytes.size()) / element_size(dtype); }
  std::uint8_t* at(std::int64_t e) { return bytes.data() + e * element_size(dtype); }
  // Random normal values with a sprinkling of special ones: ±0, ±inf, NaN, subnormals, huge values
  // and values on bf16/fp16 rounding ties.
  void fill(std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(), 1e-40f, -3e-39f, 6.0e4f,
                              3e38f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 2048, 65519.0f};
    for (std::int64_t e = 0; e < num_elements(); ++e) {
      const float v = rng() % 23 == 0 ? specials[rng() % std::size(specials)] : normal(rng);
      if (dtype == DType::F32) {
        std::memcpy(at(e), &v, 4);
      } else {
        const std::uint16_t h = dtype == DType::BF16 ? float_to_bf16(v) : float_to_f16(v);
        std::memcpy(at(e), &h, 2);
      }
    }
  }
  Heads view() {
    return {at(offset), dtype, batch, seq, heads, batch_stride, seq_stride, head_stride};
  }
};

struct Call {
  Buffer q, k, q_out, k_out;
  std::vector<std::int64_t> pos;
  bool out_of_place;
  Direction direction;
  RotateArgs args(int axes, int threads) {
    RotateArgs a{.q = q.view(), .k = k.view(),
                 .positions = axes == 3 ? mrope_positions(std::span<const std::int64_t>(pos))
                                        : positions(std::span<const std::int64_t>(pos)),
                 .direction = direction, .threads = threads};
    if (out_of_place) {
      a.q_out = q_out.view();
      a.k_out = k_out.view();
    }
    return a;
  }
};

// Positions up to 2^31 − 1 for on-the-fly angles; up to 20000 where a table is built.
Call make_call(const Spec& spec, DType dt, std::int64_t b, std::int64_t s, std::int64_t hq,
               std::int64_t hk, bool out_of_place, Direction dir, std::mt19937& rng,
               bool large_positions = false) {
  const int gap = int(rng() % 3) * 5, mis = int(rng() % 5);
  Call c{Buffer(dt, b, s, hq, spec.head_dim, gap, mis, rng),
         Buffer(dt, b, s, hk, spec.head_dim, gap + 1, mis + 1, rng),
         Buffer(dt, b, s, hq, spec.head_dim, 0, int(rng() % 3), rng),
         Buffer(dt, b, s, hk, spec.head_dim, 2, 0, rng),
         {}, out_of_place, dir};
  const int axes = spec.mrope ? 3 : 1;
  const std::int64_t pool[] = {0, 1, 2, 17, 4095, 4096, 4097, 20000, 65535, 1 << 20, 1000003, 2147483647};
  const std::size_t pool_size = large_positions ? std::size(pool) : 8;
  for (std::int64_t i = 0; i < b * s * axes; ++i) c.pos.push_back(pool[rng() % pool_size]);
  return c;
}

// The reference on a copy of the same call.
Call run_reference(const Rope& rope, Call call, bool on_the_fly) {
  const int axes = rope.spec().mrope ? 3 : 1;
  const RotateArgs args = call.args(axes, 1);
  const std::int64_t max_p = *std::max_element(call.pos.begin(), call.pos.end());
  const RotateCall prepared = on_the_fly ? rope.prepare_on_the_fly(args) : rope.prepare(args, rope.table(max_p + 1));
  detail::rotate_rows_reference(prepared.job(), 0, prepared.rows());
  return call;
}

void run_kernel(const Rope& rope, Call& call, bool on_the_fly, int threads) {
  const int axes = rope.spec().mrope ? 3 : 1;
  const RotateArgs args = call.args(axes, threads);
  if (on_the_fly) {
    rope.apply_on_the_fly(args);
  } else {
    const std::int64_t max_p = *std::max_element(call.pos.begin(), call.pos.end());
    rope.apply(args, *rope.table(max_p + 1));
  }
}

bool is_nan(DType dt, const std::uint8_t* p) {
  if (dt == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return std::isnan(f);
  }
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return std::isnan(dt == DType::BF16 ? bf16_to_float(h) : f16_to_float(h));
}

// Whole buffers, guards included, must be bit-identical — except that a NaN may carry another
// sign or payload (IEEE 754 leaves NaN propagation open, and an FMA's operand order picks it).
void expect_same_bits(const Buffer& got, const Buffer& want, const char* name) {
  ASSERT_EQ(got.bytes.size(), want.bytes.size());
  const std::int64_t esize = element_size(got.dtype);
  for (std::int64_t e = 0; e * esize < std::int64_t(got.bytes.size()); ++e) {
    const std::uint8_t* g = got.bytes.data() + e * esize;
    const std::uint8_t* w = want.bytes.data() + e * esize;
    if (std::memcmp(g, w, esize) == 0) continue;
    if (is_nan(got.dtype, g) && is_nan(got.dtype, w)) continue;
    ADD_FAILURE() << name << " differs at element " << e - got.offset << " from the view's start";
    return;
  }
}

void expect_same_bytes(const Call& got, const Call& want) {
  expect_same_bits(got.q, want.q, "q");
  expect_same_bits(got.k, want.k, "k");
  expect_same_bits(got.q_out, want.q_out, "q_out");
  expect_same_bits(got.k_out, want.k_out, "k_out");
}

TEST(Simd, TargetsAreListedAndOneIsChosen) {
  const std::vector<std::string> targets = simd_targets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(simd_target(), targets.front());
  for (const std::string& t : targets) std::printf("compiled and supported: %s\n", t.c_str());
}

TEST(Simd, EveryTargetMatchesTheReferenceBitForBit) {
  TargetGuard guard;
  for (const std::string& target : simd_targets()) {
    set_simd_target(target);
    ASSERT_EQ(simd_target(), target);
    std::mt19937 rng(42);
    for (const KernelCase& kc : kernel_cases()) {
      const Rope rope(kc.spec);
      for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
        for (Direction dir : {Direction::Forward, Direction::Inverse, Direction::Backward}) {
          for (int variant = 0; variant < 4; ++variant) {
            const bool out_of_place = variant & 1, on_the_fly = variant & 2;
            SCOPED_TRACE(::testing::Message() << target << " " << kc.name << " " << to_string(dt)
                                              << " dir " << int(dir) << " variant " << variant);
            Call call = make_call(kc.spec, dt, 2, 3, 4, 2, out_of_place, dir, rng, on_the_fly);
            const Call want = run_reference(rope, call, on_the_fly);
            run_kernel(rope, call, on_the_fly, 1 + int(rng() % 3));
            expect_same_bytes(call, want);
          }
        }
      }
    }
  }
}

TEST(Simd, QOnlyAndKOnlyCalls) {
  std::mt19937 rng(5);
  const Rope rope(kernel_cases()[0].spec);
  for (int which = 0; which < 2; ++which) {
    Call call = make_call(rope.spec(), DType::BF16, 1, 5, 3, 2, false, Direction::Forward, rng);
    (which == 0 ? call.k : call.q).heads = 0;  // absent view
    const Call want = run_reference(rope, call, false);
    run_kernel(rope, call, false, 2);
    expect_same_bytes(call, want);
  }
}

// Large enough that several threads really run (each gets >= 256 KiB of traffic).
TEST(Simd, ResultsDoNotDependOnTheThreadCount) {
  std::mt19937 rng(9);
  for (Pairing pairing : {Pairing::Half, Pairing::Interleaved}) {
    const Rope rope({.head_dim = 128, .rotary_dim = 128, .base = 5e5, .pairing = pairing});
    for (DType dt : {DType::F32, DType::BF16}) {
      const Call input = make_call(rope.spec(), dt, 1, 97, 32, 8, false, Direction::Forward, rng);
      const Call want = run_reference(rope, input, false);
      for (int threads : {1, 2, 3, 4, 7}) {
        SCOPED_TRACE(::testing::Message() << "threads " << threads << " " << to_string(dt));
        Call call = input;
        run_kernel(rope, call, false, threads);
        expect_same_bytes(call, want);
      }
    }
  }
}

// Out-of-place calls above the threshold use non-temporal stores on vector-aligned rows; rows that
// are not aligned fall back to ordinary stores. Both must give the reference's bits.
TEST(Simd, NonTemporalStoresGiveTheSameBits) {
  const std::int64_t saved = cpu::stream_threshold_bytes();
  cpu::set_stream_threshold_bytes(1);
  std::mt19937 rng(3);
  for (const KernelCase& kc : kernel_cases()) {
    const Rope rope(kc.spec);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(::testing::Message() << kc.name << " " << to_string(dt));
      Call call = make_call(kc.spec, dt, 1, 9, 4, 2, true, Direction::Forward, rng);
      call.q_out = Buffer(dt, 1, 9, 4, kc.spec.head_dim, 0, 0, rng);  // aligned when rows allow
      const int axes = kc.spec.mrope ? 3 : 1;
      const RotateArgs args = call.args(axes, 1);
      ASSERT_TRUE(rope.prepare(args).job().stream_stores);
      const Call want = run_reference(rope, call, false);
      run_kernel(rope, call, false, 2);
      expect_same_bytes(call, want);
    }
  }
  cpu::set_stream_threshold_bytes(saved);
}

// Every 16-bit pattern (all NaNs, infinities, subnormals, both zeros) goes through the bf16 and
// fp16 load and store of every target, at several angles and a magnitude != 1, and must come out
// as the reference's bits.
TEST(Simd, EveryBf16AndFp16BitPatternMatchesTheReference) {
  TargetGuard guard;
  const Rope rope({.head_dim = 64, .rotary_dim = 64, .base = 1e4, .pairing = Pairing::Half,
                   .scaling = scaling::Yarn{.factor = 8, .original_max_position_embeddings = 4096}});
  std::vector<std::int64_t> pos(1024);
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = std::int64_t(i % 7) * 1237;
  const std::vector<std::int64_t> max_pos = {*std::max_element(pos.begin(), pos.end())};
  const auto table = rope.table(max_pos[0] + 1);
  for (const std::string& target : simd_targets()) {
    set_simd_target(target);
    for (DType dt : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(target + " " + std::string(to_string(dt)));
      std::vector<std::uint16_t> x(1 << 16);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint16_t>(i * 40503u);  // a permutation
      std::vector<std::uint16_t> want = x;
      const RotateArgs args{.q = bshd(x.data(), dt, 1, 1024, 1, 64), .positions = positions(pos)};
      RotateArgs ref_args = args;
      ref_args.q.data = want.data();
      const RotateCall ref = rope.prepare(ref_args, table);
      detail::rotate_rows_reference(ref.job(), 0, ref.rows());
      rope.apply(args, *table);
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (x[i] == want[i]) continue;
        ASSERT_TRUE(is_nan(dt, reinterpret_cast<const std::uint8_t*>(&x[i])) &&
                    is_nan(dt, reinterpret_cast<const std::uint8_t*>(&want[i])))
            << "element " << i << ": " << x[i] << " vs " << want[i];
      }
    }
  }
}

TEST(Simd, ListingTargetsKeepsARestriction) {
  TargetGuard guard;
  const std::vector<std::string> targets = simd_targets();
  set_simd_target(targets.back());
  EXPECT_EQ(simd_targets(), targets);  // still every target the CPU has...
  EXPECT_EQ(simd_target(), targets.back());  // ...and dispatch still restricted
}

TEST(Simd, BadTargetNamesAndThreadCounts) {
  EXPECT_THROW(set_simd_target("AVX9000"), Error);
  try {
    set_simd_target("AVX9000");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("simd target = \"AVX9000\""), std::string::npos) << e.what();
  }
  EXPECT_EQ(simd_target(), simd_targets().front());
  EXPECT_THROW(set_default_threads(0), Error);
  const int saved = default_threads();
  set_default_threads(3);
  EXPECT_EQ(default_threads(), 3);
  set_default_threads(saved);
}

}  // namespace
