// The CUDA backend's kernel bodies run by the host over their whole launch grid (issue 41's host-verified kernel
// logic): bit for bit against the scalar reference over the rotation case table (both pairings, partial rotary,
// M-RoPE and axial streams, fp32/bf16/fp16, forward/inverse/backward, in and out of place, strided and offset
// views, guards included), and the device codecs against ropekit/dtype.hpp over every bf16 and fp16 pattern and
// the float32 rounding boundaries; the fused append's body against the CPU's AppendCall over storage and cache types,
// page layouts, slot mappings and page tables, live keys, QK-norm (per head and across heads), MLA entries and
// M-RoPE, every byte of every buffer compared, guards included. No GPU or CUDA toolkit is needed: the same bodies
// compile under nvcc.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "attention/attention_internal.hpp"
#include "cuda/device_math.hpp"
#include "cuda/host_grid.hpp"
#include "cuda_append_cases.hpp"
#include "device/device_shapes.hpp"
#include "expect_error.hpp"
#include "lib/cases.hpp"
#include "rope/angles.hpp"
#include "rope/backend.hpp"
#include "rope/reference.hpp"
#include "ropekit/cos_sin_cache.hpp"
#include "ropekit/ropekit.hpp"
#include "same_bits.hpp"
#include "targets.hpp"

namespace {

using namespace ropekit;
using namespace ropekit::cuda_cases;

bool both_nan(float a, float b) { return std::isnan(a) && std::isnan(b); }

// Every buffer of an append case, named: what the append tests compare byte for byte, guards included.
constexpr std::pair<const char*, Memory AppendBuffers::*> kAppendBuffers[] = {
    {"q", &AppendBuffers::q},         {"q_out", &AppendBuffers::q_out},   {"k", &AppendBuffers::k},
    {"k_out", &AppendBuffers::k_out}, {"k_nope", &AppendBuffers::k_nope}, {"v", &AppendBuffers::v},
    {"cache.k", &AppendBuffers::kc},  {"cache.v", &AppendBuffers::vc}};

// What a DeviceRope of `rope` holds and point_at gives a device call's shape, as host copies: the pair map, the rope's
// own table rows for positions [0, rows), the turns of the accurate angles, and an error word.
struct HostAngles {
  detail::CudaLanes lanes;
  std::vector<float> cos, sin;
  detail::AngleEvaluator angles;
  std::int64_t rows;
  unsigned long long error = 0;

  HostAngles(const Rope& rope, std::int64_t rows) : angles(rope.plan().inv_freq, rope.angle_mode()), rows(rows) {
    const PairMap& map = rope.pair_map();
    lanes.lane_a.assign(map.lane_a.begin(), map.lane_a.end());
    lanes.lane_b.assign(map.lane_b.begin(), map.lane_b.end());
    lanes.axis.assign(map.axis.begin(), map.axis.end());
    cos.resize(std::size_t(rows) * std::size_t(map.num_pairs()));
    sin.resize(cos.size());
    cpu::angle_rows(angles, 0, rows, cos.data(), sin.data());  // what DeviceRope uploads
  }
  void point(cuda::RotateShape& s, bool turns = true) {
    s.lane_a = lanes.lane_a.data();
    s.lane_b = lanes.lane_b.data();
    s.axis = lanes.axis.data();
    s.cos = rows > 0 ? cos.data() : nullptr;
    s.sin = rows > 0 ? sin.data() : nullptr;
    s.table_positions = rows;
    s.turns_hi = turns ? angles.turns_hi() : nullptr;
    s.turns_lo = turns ? angles.turns_lo() : nullptr;
    s.error = &error;
  }
};

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

// The fp16 rotation widens a run by the conversion alone unless any_f16_special finds an infinity or a NaN in it (on a
// GPU the conversion makes NaNs canonical; the host's widening is the same either way, so only this predicate decides
// what a GPU would get): every pattern at every place of runs of 1, 2, 3 and 8 elements, beside finite neighbours.
TEST(CudaHost, AnyF16SpecialFindsEveryInfinityAndNaN) {
  int specials = 0;
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    const bool want = (x & 0x7c00u) == 0x7c00u;
    specials += want;
    const std::uint16_t one[1] = {x};
    ASSERT_EQ(cuda::any_f16_special(one), want) << h;
    // Neighbours: 1.0, the largest finite, the smallest subnormal, −0 (each has a high exponent bit or none).
    for (const std::uint16_t finite :
         {std::uint16_t{0x3c00}, std::uint16_t{0x7bff}, std::uint16_t{0x0001}, std::uint16_t{0x8000}}) {
      for (int at = 0; at < 8; ++at) {
        std::uint16_t two[2] = {finite, finite}, three[3] = {finite, finite, finite}, eight[8];
        std::fill(std::begin(eight), std::end(eight), finite);
        if (at < 2) two[at] = x;
        if (at < 3) three[at] = x;
        eight[at] = x;
        if (at < 2) {
          ASSERT_EQ(cuda::any_f16_special(two), want) << h << " at " << at;
        }
        if (at < 3) {
          ASSERT_EQ(cuda::any_f16_special(three), want) << h << " at " << at;
        }
        ASSERT_EQ(cuda::any_f16_special(eight), want) << h << " at " << at;
      }
    }
  }
  EXPECT_EQ(specials, 2048);  // 2 signs × 1024 mantissas with the exponent all ones
}

TEST(CudaHost, RotationBodyOverTheLaunchGridEqualsTheReference) {
  const std::int64_t misaligned_before = cuda::host_misaligned_runs.load();
  int ran = 0, skipped = 0;
  std::map<int, int> widths;  // runs by the access width chosen (bytes)
  std::uint32_t seed = 0;
  for (const cases::Case& c : cuda_cases::rotation_cases()) {
    ++seed;
    SCOPED_TRACE(c.name());
    cases::Workload want(c, seed);
    const RotateCall reference = want.prepare();
    detail::rotate_rows_reference(reference.job(), 0, reference.rows());
    // Blocks of 96 threads: not a multiple of any case's pair count, so blocks straddle rows and the last block is
    // partial. Head groups: the launch's choice (these small cases: one row per thread), one group (a thread turns
    // every row of its token, kRowsInFlight at a time) and three (rows h ≡ group mod 3).
    // Access widths: the launch's choice (up to 16 bytes), at most 8 and 4 bytes, and one element per access.
    // Under ROPEKIT_CASE_SHRINK=f (the sanitizer tier) a case runs one in f of these twelve launches, a different
    // one in f for each case.
    bool supported = true;
    int launch = 0;
    for (const std::int64_t head_groups : {0, 1, 3}) {
      for (const int max_bytes : {16, 8, 4, 1}) {
        if ((launch++ + seed) % std::uint32_t(targets::shrink_factor()) != 0) continue;
        SCOPED_TRACE(fmt::format("head groups {}, accesses of at most {} bytes", head_groups, max_bytes));
        cases::Workload got(c, seed);
        const RotateCall call = got.prepare();
        int bytes = 0;
        if (!detail::rotate_on_host_grid(call.job(), 96, head_groups, {.max_access_bytes = max_bytes}, &bytes)) {
          supported = false;  // HfCompat angles on the fly: libm's, not reproducible on a GPU (a table there)
          break;
        }
        ++widths[bytes];
        same_bits::expect_same_rotation(got, want);
      }
      if (!supported) break;
    }
    if (!supported) {
      ++skipped;
      continue;
    }
    ++ran;
  }
  std::printf(
      "CUDA body on the host: %d cases (table and accurate on-the-fly angles) equal the reference; %d "
      "HfCompat-on-the-fly cases left to the CPU\n",
      ran, skipped);
  for (const auto& [bytes, runs] : widths) std::printf("  accesses of %2d bytes: %d runs\n", bytes, runs);
  EXPECT_GT(ran, 900);
  // Every access width a GPU can make is exercised: 2 and 4 (one element), 8 and 16 (runs of pairs).
  for (const int bytes : {2, 4, 8, 16}) {
    EXPECT_GT(widths[bytes] * targets::shrink_factor(), 300) << bytes << "-byte accesses";
  }
  // Every access the body made is one a GPU can make: aligned to its width.
  EXPECT_EQ(cuda::host_misaligned_runs.load() - misaligned_before, 0);
}

// The audit above can fail: a 16-byte run 2 bytes past an aligned address, and an 8-byte one, are counted.
TEST(CudaHost, AMisalignedRunIsCounted) {
  alignas(16) char buffer[48] = {};
  std::uint16_t run[8];
  const std::int64_t before = cuda::host_misaligned_runs.load();
  cuda::load_run(buffer + 16, run);
  cuda::store_run(buffer + 32, run);
  EXPECT_EQ(cuda::host_misaligned_runs.load(), before);
  cuda::load_run(buffer + 2, run);
  std::uint16_t half[4] = {};
  cuda::store_run(buffer + 12, half);  // 8 bytes at 12: 4-byte aligned only
  EXPECT_EQ(cuda::host_misaligned_runs.load(), before + 2);
}

// The benchmark's head-groups choice (LaunchChoices::head_groups): every shape choose_vector makes takes it, capped at
// the shape's heads; 0 gives the launch's own choice back. (The bits for any grouping: the test above.)
TEST(CudaHost, TheBenchmarksHeadGroupsAreCappedAtTheHeads) {
  const Rope rope(Spec{.head_dim = 128, .rotary_dim = 128, .base = 500000.0, .pairing = Pairing::Half});
  const std::int64_t tokens = 64, q_heads = 6, k_heads = 2, d = 128;
  std::vector<std::uint16_t> q(std::size_t(tokens * q_heads * d)), k(std::size_t(tokens * k_heads * d));
  std::vector<std::int64_t> pos(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) pos[std::size_t(t)] = t;
  const RotateCall call = rope.prepare({.q = bshd(q.data(), DType::BF16, 1, tokens, q_heads, d),
                                        .k = bshd(k.data(), DType::BF16, 1, tokens, k_heads, d),
                                        .positions = positions(pos)},
                                       rope.table(tokens));
  const auto groups = [&](int head_groups) {
    detail::CudaLanes lanes;
    cuda::RotateShape shape;
    EXPECT_TRUE(detail::make_cuda_shape(call.job(), lanes, shape));
    detail::choose_vector(*call.job().map, shape, {.head_groups = head_groups});
    return shape.head_groups;
  };
  const std::int64_t chosen = groups(0);
  EXPECT_EQ(chosen, q_heads + k_heads);  // 64 tokens are far from filling a GPU: one row per thread
  EXPECT_EQ(groups(3), 3);
  EXPECT_EQ(groups(100), q_heads + k_heads);
}

// ---- what the device API adds to the rotation body --------------------------------------------------------------

// The device API gives the body both angle sources (the table's rows below table_positions, the turns above) and an
// error word for positions the host never saw. Rows from either source are the reference's bits; a position outside
// [0, 2^47), or past the table with no turns, leaves its token's rows unwritten and records the first such token.
TEST(CudaHost, TableAndTurnsTogetherAndTheErrorWord) {
  const Spec spec{.head_dim = 64,
                  .rotary_dim = 48,
                  .base = 500000.0,
                  .pairing = Pairing::Half,
                  .scaling = scaling::Yarn{.factor = 8.0, .original_max_position_embeddings = 128}};
  const Rope rope(spec);
  const std::int64_t tokens = 9, heads = 3, d = 64;
  std::vector<std::int64_t> pos = {0, 1, 99, 100, 101, 4096, 70000, 1'000'000'007, (std::int64_t{1} << 47) - 1};
  std::vector<float> q(std::size_t(tokens * heads * d)), want, got;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : q) x = normal(rng);
  want = q;
  rope.apply({.q = bshd(want.data(), DType::F32, 1, tokens, heads, d), .positions = positions(pos)});
  // DeviceRope::rotate's shape (the one prepare path with PositionsAt::Device), pointed at what a DeviceRope of the
  // rope with a table of 100 positions holds: its rows below 100, its turns above.
  got = q;
  const auto device_shape = [&](std::vector<std::int64_t>& p) {
    return detail::device_rotate_shape(
        rope, nullptr, {.q = bshd(got.data(), DType::F32, 1, tokens, heads, d), .positions = positions(p)});
  };
  HostAngles host(rope, 100);
  cuda::RotateShape shape = device_shape(pos);
  host.point(shape);
  const auto run = [&] { detail::run_rotate_on_host(shape, 96); };
  run();
  EXPECT_EQ(host.error, 0u);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
  // Bad positions — 2^47 at token 2, −1 at token 6 — are the device's to find: the host prepares the call without
  // reading them, the body leaves those tokens' rows as they were and records the first in grid order.
  got = q;
  std::vector<std::int64_t> bad = pos;
  bad[2] = std::int64_t{1} << 47;
  bad[6] = -1;
  EXPECT_ERROR(rope.prepare({.q = bshd(got.data(), DType::F32, 1, tokens, heads, d), .positions = positions(bad)}),
               "positions[2] = 140737488355328");  // the CPU's prepare refuses them
  shape = device_shape(bad);
  host.point(shape);
  run();
  EXPECT_EQ(host.error, 3u);
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::size_t row = std::size_t(t * heads * d);
    const bool untouched = std::memcmp(got.data() + row, q.data() + row, std::size_t(heads * d) * 4) == 0;
    const bool rotated = std::memcmp(got.data() + row, want.data() + row, std::size_t(heads * d) * 4) == 0;
    EXPECT_TRUE(t == 2 || t == 6 ? untouched : rotated) << "token " << t;
  }
  // No turns (HfCompat's case): positions past the table are refused the same way.
  host.error = 0;
  got = q;
  shape = device_shape(pos);
  host.point(shape, /*turns=*/false);
  run();
  EXPECT_EQ(host.error, 4u);  // token 3, position 100: the first past the table
}

// What the host checks of a device call: everything Rope::apply checks but the positions' values, the same messages,
// and every device pointer's alignment to its element (the kernels read an element with one access of its width).
TEST(CudaHost, DeviceCallsAreCheckedOnTheHostWithoutReadingDeviceValues) {
  const Rope rope(Spec{.head_dim = 64, .rotary_dim = 64, .base = 10000.0, .pairing = Pairing::Half});
  alignas(16) std::array<float, 2 * 3 * 64 + 4> q{};
  std::vector<std::int64_t> pos = {5, -7};  // −7: not read
  const auto args = [&](float* data) {
    return RotateArgs{.q = bshd(data, DType::F32, 1, 2, 3, 64), .positions = positions(pos)};
  };
  EXPECT_NO_THROW(detail::device_rotate_shape(rope, nullptr, args(q.data())));
  EXPECT_ERROR(rope.apply(args(q.data())), "positions[1] = -7");
  EXPECT_ERROR(detail::device_rotate_shape(rope, nullptr,
                                           args(reinterpret_cast<float*>(reinterpret_cast<std::byte*>(q.data()) + 2))),
               "q.data = ", "aligned to its element size (4 bytes)");
  RotateArgs wrong = args(q.data());
  wrong.positions.count = 3;
  EXPECT_ERROR(detail::device_rotate_shape(rope, nullptr, wrong), "positions.count = 3");
  wrong = args(q.data());
  wrong.positions.type = static_cast<IndexType>(7);
  EXPECT_ERROR(detail::device_rotate_shape(rope, nullptr, wrong), "positions.type = 7");
  wrong = args(q.data());
  wrong.positions.data = reinterpret_cast<const std::byte*>(pos.data()) + 4;
  EXPECT_ERROR(detail::device_rotate_shape(rope, nullptr, wrong), "positions.data = ", "(8 bytes)");
  wrong = args(q.data());
  wrong.q_out = wrong.q;  // out of place onto itself: the views' overlap check, as on the CPU
  EXPECT_ERROR(detail::device_rotate_shape(rope, nullptr, wrong), "share memory");
  EXPECT_ERROR(rope.apply(wrong), "share memory");

  // The append: slots out of the cache and page-table values are the device's; their layout is the host's.
  const AppendCase c{rope.spec(), DType::F32, CacheDType::F32, PageLayout::NHD, Variant::NormPerHead, false};
  AppendBuffers b(c);
  b.slot_map[0] = 1'000'000;  // far outside the cache: the kernel reports it
  b.args.slots = slot_mapping(b.slot_map);
  EXPECT_NO_THROW(detail::device_append_shape(rope, nullptr, b.args, b.cache));
  EXPECT_ERROR(append(rope, b.args, b.cache), "slots[0] = 1000000");
  AppendArgs bad = b.args;
  bad.slots = SlotMapping{b.slot_map.data(), IndexType::I64, 3};
  EXPECT_ERROR(detail::device_append_shape(rope, nullptr, bad, b.cache), "slots.count = 3");
  bad = b.args;
  bad.slots =
      SlotMapping{reinterpret_cast<const std::byte*>(b.slot_map.data()) + 4, IndexType::I64, AppendBuffers::kTokens};
  EXPECT_ERROR(detail::device_append_shape(rope, nullptr, bad, b.cache), "slots.data = ", "(8 bytes)");
  bad = b.args;
  bad.norm.q_weight = std::span<const float>(b.q_weight.data(), b.q_weight.size() - 1);
  EXPECT_ERROR(detail::device_append_shape(rope, nullptr, bad, b.cache), "norm.q_weight has 63 values");
  bad = b.args;
  const std::vector<std::int32_t> short_batch(3, 0);
  bad.slots = PageTable{.indices = b.indices,
                        .indptr = b.indptr,
                        .last_page_len = b.last,
                        .batch_indices = short_batch,
                        .seq_positions = short_batch};
  EXPECT_ERROR(detail::device_append_shape(rope, nullptr, bad, b.cache), "page_table.batch_indices / seq_positions",
               "one per token, 7");
  PagedCache odd = b.cache;
  odd.v = reinterpret_cast<std::byte*>(odd.v) + 2;
  EXPECT_ERROR(detail::device_append_shape(rope, nullptr, b.args, odd), "cache.v = ", "(4 bytes)");
}

TEST(CudaHost, DeviceApiRefusesWhatThisMachineCannotDo) {
  const Rope rope(Spec{.head_dim = 64, .rotary_dim = 64, .base = 10000.0, .pairing = Pairing::Half});
  std::printf("CUDA backend built: %s; devices: %d\n", cuda::built() ? "yes" : "no", cuda::device_count());
  // A table given: refused before any device is asked for when it is null, empty or of another pair count.
  EXPECT_ERROR(cuda::DeviceRope(rope, 0, std::shared_ptr<const Table>()), "table is null");
  const Rope narrow(Spec{.head_dim = 32, .rotary_dim = 32, .base = 10000.0, .pairing = Pairing::Half});
  EXPECT_ERROR(cuda::DeviceRope(rope, 0, std::make_shared<const Table>(narrow.plan(), AngleMode::Accurate, 4)),
               "table: 16 pairs per row; this rope has 32");
  EXPECT_ERROR(cuda::DeviceRope(rope, 0, std::make_shared<const Table>(rope.plan(), AngleMode::Accurate, 0)),
               "table: no rows");
  if (!cuda::built()) {
    EXPECT_EQ(cuda::device_count(), 0);
    EXPECT_ERROR(cuda::DeviceRope(rope, 0), "built without the CUDA backend");
    return;
  }
  EXPECT_ERROR(cuda::DeviceRope(rope, -1), "device = -1");
  EXPECT_ERROR(cuda::DeviceRope(rope, cuda::device_count()), "device = ", "CUDA device");
  if (cuda::device_count() > 0) {
    EXPECT_ERROR(cuda::DeviceRope(rope, 0, -5), "table_positions = -5");
    const Rope hf(rope.spec(), AngleMode::HfCompat);
    EXPECT_ERROR(cuda::DeviceRope(hf, 0, 0), "table_positions = 0", "HfCompat");
  }
}

// ---- the fused append
// ------------------------------------------------------------------------------------------------

// The body's conversion into an fp8 cache divides by the scale (the CPU's x / scale, not x · (1 / scale)): inputs
// whose quotient lands on either side of every e4m3 rounding boundary, for scales that are not powers of two.
TEST(CudaHost, AppendConversionToFp8DividesByTheScale) {
  cuda::AppendShape shape;
  shape.cache = cuda::CacheStorage::E4M3;
  shape.cache_element_size = 1;
  int checked = 0;
  for (const float scale : {0.3f, 0.07f, 1.7f, 0.013f}) {
    for (std::uint32_t b = 0; b < 0x7e; ++b) {
      const float lo = e4m3_to_float(static_cast<std::uint8_t>(b)),
                  hi = e4m3_to_float(static_cast<std::uint8_t>(b + 1));
      const float tie = lo + (hi - lo) / 2;
      float x = tie * scale;
      for (int step = 0; step < 8; ++step, x = std::nextafter(x, 1e30f)) {
        for (const float v : {x, -x}) {
          std::uint8_t got = 0;
          cuda::to_cache(shape, cuda::Storage::F32, cuda::bits_of(v), scale, reinterpret_cast<char*>(&got));
          ASSERT_EQ(got, float_to_e4m3(v / scale)) << v << " / " << scale;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 8000);
}

TEST(CudaHost, AppendBodyOverTheLaunchGridEqualsTheCpu) {
  const std::int64_t misaligned_before = cuda::host_misaligned_runs.load();
  int ran = 0, key_runs = 0, adjacent_key_runs = 0, value_runs = 0, nope_runs = 0;
  for_each_append_case([&](const Rope& rope, const AppendCase& c) {
    AppendBuffers want(c);
    prepare_append(rope, want.args, want.cache).run();
    // Blocks of 96 threads: segments and rows straddle blocks; the last block is partial. Pair rows in the launch's
    // head groups (these small cases: one row per thread), in one group and in three; key rows, values and k_nope
    // in the widest runs the shape allows, and again element by element (LaunchChoices::append_runs); the whole
    // append in one launch (these small grids' choice) and in a launch per body.
    for (const auto& [runs, launches] : {std::pair{true, detail::AppendLaunches::Choose},
                                         {true, detail::AppendLaunches::PerBody},
                                         {false, detail::AppendLaunches::PerBody},
                                         {false, detail::AppendLaunches::One}}) {
      const detail::LaunchChoices choices{.append_runs = runs, .launches = launches};
      for (const std::int64_t pair_groups : {0, 1, 3}) {
        SCOPED_TRACE(::testing::Message() << "pair_groups " << pair_groups << (runs ? " runs" : " elements")
                                          << " launches " << int(launches));
        AppendBuffers got(c);
        const AppendCall call = prepare_append(rope, got.args, got.cache);
        if (runs && pair_groups == 0 && launches == detail::AppendLaunches::Choose) {
          detail::CudaLanes lanes;
          cuda::AppendShape shape;
          ASSERT_TRUE(detail::make_cuda_append_shape(detail::AppendAccess::job(call), lanes, shape, choices));
          EXPECT_TRUE(shape.one_launch);  // a few tokens: one launch
          key_runs += shape.key_vector_pairs > 1;
          adjacent_key_runs += shape.key_adjacent;
          value_runs += shape.value_bytes > 0;
          nope_runs += shape.nope_bytes > 0;
        }
        ASSERT_TRUE(detail::append_on_host_grid(detail::AppendAccess::job(call), 96, pair_groups, choices));
        for (const auto& [name, m] : kAppendBuffers) ASSERT_EQ((got.*m).bytes, (want.*m).bytes) << name;
      }
    }
    ++ran;
  });
  std::printf(
      "CUDA append body on the host: %d cases equal the CPU's AppendCall byte for byte (key rows in runs of pairs: %d, "
      "adjacent: %d; values in runs: %d; k_nope in runs: %d)\n",
      ran, key_runs, adjacent_key_runs, value_runs, nope_runs);
  EXPECT_EQ(ran, 720);
  // Every wide body ran: the cases where the cache holds the rows' type (one in four) have aligned buffers.
  EXPECT_GT(key_runs, 0);
  EXPECT_GT(adjacent_key_runs, 0);
  EXPECT_GT(value_runs, 0);
  EXPECT_GT(nope_runs, 0);
  EXPECT_EQ(cuda::host_misaligned_runs.load() - misaligned_before, 0);  // every access one a GPU can make
}

// cuda::append's whole host side — the one prepare path with PositionsAt::Device, the shape, the angles as a
// DeviceRope holds them (its turns; a table of 64 positions beside them for half the cases) — run by the host over the
// launch grid, against ropekit::append on the CPU for every append case, every byte of every buffer.
TEST(CudaHost, DeviceAppendsShapeEqualsTheCpu) {
  int ran = 0;
  for_each_append_case([&](const Rope& rope, const AppendCase& c) {
    AppendBuffers want(c), got(c);
    append(rope, want.args, want.cache);
    cuda::AppendShape shape = detail::device_append_shape(rope, nullptr, got.args, got.cache);
    HostAngles host(rope, ran % 2 == 0 ? 0 : 64);
    host.point(shape.rot);
    detail::run_append_on_host(shape, 96);
    EXPECT_EQ(host.error, 0u);
    for (const auto& [name, m] : kAppendBuffers) ASSERT_EQ((got.*m).bytes, (want.*m).bytes) << name;
    ++ran;
  });
  EXPECT_EQ(ran, 720);
}

// Which appends run as one launch: a decode step's grid (32 q / 8 kv heads × 128, bf16, 16-byte runs) up to 64
// sequences, split into a launch per body from 256 sequences (the rotation's grid alone is then 2^16 threads) and for
// a prefill; and the test's and benchmark's modes forcing either.
TEST(CudaHost, AppendIsOneLaunchForADecodeStepsGrid) {
  const auto shape_for = [](std::int64_t tokens, detail::AppendLaunches launches = detail::AppendLaunches::Choose) {
    cuda::AppendShape a;
    a.rot.storage = cuda::Storage::BF16;
    a.rot.element_size = 2;
    a.rot.pairs = 64;
    a.rot.rotary_dim = a.rot.head_dim = 128;
    a.rot.tokens = a.rot.seq = tokens;
    a.rot.q_heads = 32;
    a.rot.k_heads = a.kv_heads = 8;
    a.q_vector_pairs = a.key_vector_pairs = 8;
    a.q_head_groups = cuda::choose_head_groups(tokens, 8, 32);
    a.pair_groups = cuda::choose_head_groups(tokens, 8, 8);
    std::uint16_t v = 0;
    a.v.data = reinterpret_cast<char*>(&v);
    a.v_storage = cuda::Storage::BF16;
    a.value_lanes = 128;
    a.value_bytes = 16;
    detail::choose_append_launch(a, {.launches = launches});
    return a.one_launch;
  };
  for (const std::int64_t tokens : {1, 16, 64}) EXPECT_TRUE(shape_for(tokens)) << tokens;
  for (const std::int64_t tokens : {256, 8192}) EXPECT_FALSE(shape_for(tokens)) << tokens;
  EXPECT_TRUE(shape_for(8192, detail::AppendLaunches::One));
  EXPECT_FALSE(shape_for(1, detail::AppendLaunches::PerBody));
}

// What the device append changes in the body's inputs, run on the host: int32 slots read as the device gives them,
// a slot outside the cache reported and treated as padding, and the norm weights' offset added by the body.
TEST(CudaHost, AppendBodyWithTheDeviceApisInputs) {
  const Rope rope(append_specs()[0]);
  for (const Variant variant : {Variant::Plain, Variant::NormPerHead}) {
    SCOPED_TRACE(int(variant));
    const AppendCase c{rope.spec(), DType::BF16, CacheDType::F8E4M3, PageLayout::HND, variant, false};
    AppendBuffers want(c), got(c);
    want.slot_map[4] = -1;  // what the bad slot below must amount to
    want.args.slots = slot_mapping(want.slot_map);
    append(rope, want.args, want.cache);
    // cuda::append's shape (prepared without reading the slots or the weights), int32 slots, token 4's one past the
    // cache; the caller's weights, the offset added by the body.
    std::vector<std::int32_t> slots(got.slot_map.begin(), got.slot_map.end());
    slots[4] = std::int32_t(AppendBuffers::kPages * AppendBuffers::kPageSize);
    got.args.slots = SlotMapping{slots.data(), IndexType::I32, AppendBuffers::kTokens};
    cuda::AppendShape shape = detail::device_append_shape(rope, nullptr, got.args, got.cache);
    EXPECT_FALSE(shape.slots_i64);
    EXPECT_EQ(shape.add_weight_offset, true);
    HostAngles host(rope, 0);
    host.point(shape.rot);
    detail::run_append_on_host(shape, 96);
    EXPECT_EQ(host.error, 5u);
    const std::pair<const char*, Memory AppendBuffers::*> buffers[] = {{"q", &AppendBuffers::q},
                                                                       {"k", &AppendBuffers::k},
                                                                       {"k_out", &AppendBuffers::k_out},
                                                                       {"cache.k", &AppendBuffers::kc},
                                                                       {"cache.v", &AppendBuffers::vc}};
    for (const auto& [name, m] : buffers) EXPECT_EQ((got.*m).bytes, (want.*m).bytes) << name;
  }
}

// A table given to the call (an engine's cos/sin cache, imported: DeviceRope(rope, device, table)'s angles), whose
// rows carry the magnitude: the rotation and the fused append prepared with it, run by the bodies over their grids,
// against Rope::prepare(args, table) and append(..., table) on the CPU bit for bit — forward, inverse and backward,
// a plain rope and a YaRN one (magnitude ≠ 1), float32 and bf16 storage.
TEST(CudaHost, BodiesWithAnImportedTableEqualTheCpu) {
  std::mt19937 rng(43);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (const Spec& spec : {append_specs()[0], append_specs()[1]}) {
    const Rope rope(spec);
    SCOPED_TRACE(to_string(spec.pairing));
    constexpr std::int64_t kRows = 100;
    const std::shared_ptr<const Table> table = engine_table(rope, kRows);
    for (const DType dtype : {DType::F32, DType::BF16}) {
      for (const Direction direction : {Direction::Forward, Direction::Inverse, Direction::Backward}) {
        const std::int64_t tokens = 9, heads = 3, d = spec.head_dim;
        const std::size_t n = std::size_t(tokens * heads * d) * element_size(dtype);
        std::vector<std::uint8_t> data(n);
        for (std::size_t i = 0; i + 1 < n; i += 2) {  // bf16 patterns, or halves of float32 ones
          const std::uint32_t bits = std::bit_cast<std::uint32_t>(value(rng));
          data[i] = std::uint8_t(bits >> 16), data[i + 1] = std::uint8_t(bits >> 24);
        }
        std::vector<std::uint8_t> want = data, got = data;
        const std::vector<std::int64_t> pos = {0, 99, 5, 42, 42, 7, 63, 1, 98};
        const auto args = [&](std::vector<std::uint8_t>& b) {
          return RotateArgs{.q = bshd(b.data(), dtype, 1, tokens, heads, d),
                            .positions = {pos.data(), IndexType::I64, tokens},
                            .direction = direction};
        };
        rope.prepare(args(want), table).run();
        const RotateCall call = rope.prepare(args(got), table);
        ASSERT_TRUE(detail::rotate_on_host_grid(call.job(), 96));
        EXPECT_EQ(got, want) << to_string(dtype) << " direction " << int(direction);
        EXPECT_NE(got, data);
      }
    }
    // The fused append with the table, its tokens' positions folded into the table's 100 rows.
    const AppendCase c{spec, DType::BF16, CacheDType::BF16, PageLayout::NHD, Variant::Plain, false};
    AppendBuffers want(c), got(c);
    for (AppendBuffers* b : {&want, &got})
      for (std::int64_t& p : b->pos) p %= kRows;
    append(rope, want.args, want.cache, table);
    const AppendCall call = prepare_append(rope, got.args, got.cache, table);
    ASSERT_TRUE(detail::append_on_host_grid(detail::AppendAccess::job(call), 96));
    for (Memory AppendBuffers::*m : {&AppendBuffers::q, &AppendBuffers::k, &AppendBuffers::kc, &AppendBuffers::vc})
      EXPECT_EQ((got.*m).bytes, (want.*m).bytes);
  }
}

// The device API's page table, read by the body (table_slot): the slots prepare_append resolves on the host, and for
// each entry the host would refuse — a batch index outside the batch, an entry past its sequence, a page outside the
// cache, a last page length out of range — the token writes no entry and is reported, the others written as usual.
TEST(CudaHost, AppendBodyReadsAPageTable) {
  const Rope rope(append_specs()[0]);
  enum class Bad { None, Batch, Entry, Page, LastLen };
  for (const Bad bad : {Bad::None, Bad::Batch, Bad::Entry, Bad::Page, Bad::LastLen}) {
    SCOPED_TRACE(int(bad));
    const AppendCase c{rope.spec(), DType::F16, CacheDType::BF16, PageLayout::NHD, Variant::Outputs, false};
    AppendBuffers want(c), got(c);
    ASSERT_TRUE(std::holds_alternative<PageTable>(got.args.slots));
    std::vector<std::int64_t> slots = resolve_slots(want.args, want.cache);
    // Token 4 is the first of sequence 1; LastLen makes sequence 1 longer than its pages allow (every token of it).
    std::vector<std::int64_t> spoiled;
    switch (bad) {
      case Bad::None: break;
      case Bad::Batch: got.batch_indices[4] = 2, spoiled = {4}; break;
      case Bad::Entry: got.seq_positions[4] = 10, spoiled = {4}; break;
      case Bad::Page: got.indices[std::size_t(got.indptr[1] + got.seq_positions[4] / 4)] = 5, spoiled = {4}; break;
      case Bad::LastLen: got.last[1] = 5, spoiled = {3, 4, 5, 6}; break;
    }
    for (const std::int64_t t : spoiled) slots[std::size_t(t)] = -1;
    // Page: the page's other entries belong to other tokens of sequence 1 too.
    if (bad == Bad::Page) {
      for (std::int64_t t = 3; t < AppendBuffers::kTokens; ++t) {
        if (want.batch_indices[std::size_t(t)] == 1 &&
            want.seq_positions[std::size_t(t)] / 4 == want.seq_positions[4] / 4)
          slots[std::size_t(t)] = -1;
      }
    }
    want.args.slots = slot_mapping(slots);
    append(rope, want.args, want.cache);
    // cuda::append's shape: the host checks the table's counts and never reads its values (got's, spoiled).
    cuda::AppendShape shape = detail::device_append_shape(rope, nullptr, got.args, got.cache);
    HostAngles host(rope, 0);
    host.point(shape.rot);
    detail::run_append_on_host(shape, 96);
    EXPECT_EQ(host.error, spoiled.empty() ? 0u : static_cast<unsigned long long>(spoiled.front() + 1));
    const std::pair<const char*, Memory AppendBuffers::*> buffers[] = {{"q", &AppendBuffers::q},
                                                                       {"q_out", &AppendBuffers::q_out},
                                                                       {"k_out", &AppendBuffers::k_out},
                                                                       {"cache.k", &AppendBuffers::kc},
                                                                       {"cache.v", &AppendBuffers::vc}};
    for (const auto& [name, m] : buffers) EXPECT_EQ((got.*m).bytes, (want.*m).bytes) << name;
  }
}

// ---- the K-shift and re-rotation -----------------------------------------------------------------------------------

// The CPU's PagedKvCache turns its own entries (shift_entries: R(δ), magnitude 1; rerotate: un-rotate under the old
// plan, rotate under the new); the body turns a copy of the same key memory at the same slots. Every key byte
// compared, untouched entries included.
TEST(CudaHost, KShiftBodyOverTheLaunchGridEqualsTheCpu) {
  const std::int64_t misaligned_before = cuda::host_misaligned_runs.load();
  const Spec half{.head_dim = 64,
                  .rotary_dim = 64,
                  .base = 10000.0,
                  .pairing = Pairing::Half,
                  .scaling = scaling::DynamicNtk{.factor = 2.0, .max_position_embeddings = 32}};
  Spec partial = half;
  partial.rotary_dim = 32;
  partial.pairing = Pairing::Interleaved;
  int ran = 0;
  for (const Spec& spec : {half, partial}) {
    const Rope rope(spec, AngleMode::Accurate, 16), grown(spec, AngleMode::Accurate, 4096);
    for (const CacheDType dtype : {CacheDType::F32, CacheDType::BF16, CacheDType::F16, CacheDType::F8E4M3}) {
      for (const PageLayout layout : {PageLayout::NHD, PageLayout::HND}) {
        for (const std::int64_t delta : {std::int64_t{5}, std::int64_t{-37}, std::int64_t{0}}) {  // 0: rerotate
          SCOPED_TRACE(::testing::Message() << to_string(spec.pairing) << " r=" << spec.rotary_dim << " "
                                            << to_string(dtype) << " " << to_string(layout) << " delta " << delta);
          const std::int64_t kv = 2, d = 64, page_size = 4;
          PagedKvCache cache(rope, {.num_pages = 6,
                                    .page_size = page_size,
                                    .kv_heads = kv,
                                    .dtype = dtype,
                                    .layout = layout,
                                    .k_scale = dtype == CacheDType::F8E4M3 ? 0.3f : 1.0f,
                                    .v_scale = dtype == CacheDType::F8E4M3 ? 0.07f : 1.0f,
                                    .max_sequences = 2});
          // Sequences 0 and 1 appended in turns, so their pages interleave.
          Memory k(std::size_t(9 * kv * d) * 4, 21, DType::F32), v(std::size_t(9 * kv * d) * 4, 22, DType::F32);
          std::vector<std::int64_t> pos(9);
          for (std::int64_t t = 0; t < 9; ++t) pos[std::size_t(t)] = 40 + t;
          for (std::int64_t first = 0; first < 9; first += 3) {
            for (const int seq : {0, 1}) {
              const std::vector<std::int32_t> seq_of(3, seq);
              auto* kt = reinterpret_cast<float*>(k.data()) + first * kv * d;
              auto* vt = reinterpret_cast<float*>(v.data()) + first * kv * d;
              cache.append(rope, seq_of,
                           {.k = bshd(kt, DType::F32, 1, 3, kv, d),
                            .v = bshd(vt, DType::F32, 1, 3, kv, d),
                            .positions = positions(std::span(pos).subspan(std::size_t(first), 3))});
            }
          }
          const PagedCache& pc = cache.cache();
          const std::size_t bytes = std::size_t(pc.num_pages * pc.page_size * kv * d * element_size(dtype));
          std::vector<std::byte> mine(static_cast<const std::byte*>(pc.k), static_cast<const std::byte*>(pc.k) + bytes);
          // Entries [2, 7) of sequence 0: their slots, and the calls that turn them.
          std::vector<std::int64_t> slots;
          for (std::int64_t e = 2; e < 7; ++e)
            slots.push_back(std::int64_t(cache.pages(0)[std::size_t(e / page_size)]) * page_size + e % page_size);
          // Each call only lends its coefficients (never run): rows to describe, one per entry and head.
          std::vector<float> rows(std::size_t(9 * kv * d));
          const auto turns = [&](const Rope& r, std::span<const std::int64_t> at, Direction direction) {
            return r.prepare({.k = bshd(rows.data(), DType::F32, 1, std::int64_t(at.size()), kv, d),
                              .positions = positions(at),
                              .direction = direction});
          };
          std::vector<std::int64_t> at;
          std::vector<RotateCall> calls;
          if (delta != 0) {
            at.assign(slots.size(), delta < 0 ? -delta : delta);
            calls.push_back(turns(rope, at, delta < 0 ? Direction::Inverse : Direction::Forward));
            cache.shift_entries(0, 2, 7, delta);
          } else {
            // Re-rotation of the whole of sequence 0 from the short plan to the grown one.
            slots.clear();
            for (std::int64_t e = 0; e < 9; ++e)
              slots.push_back(std::int64_t(cache.pages(0)[std::size_t(e / page_size)]) * page_size + e % page_size);
            at.assign(pos.begin(), pos.end());
            calls.push_back(turns(rope, at, Direction::Inverse));
            calls.push_back(turns(grown, at, Direction::Forward));
            ASSERT_TRUE(cache.rerotate(0, rope, grown));
          }
          std::vector<const detail::RotateJob*> jobs;
          for (const RotateCall& c : calls) jobs.push_back(&c.job());
          PagedCache copy = pc;
          copy.k = mine.data();
          ASSERT_TRUE(detail::kshift_on_host_grid(jobs, copy, slots, 96));
          ASSERT_TRUE(std::memcmp(mine.data(), pc.k, bytes) == 0);
          ++ran;
        }
      }
    }
  }
  std::printf("CUDA K-shift body on the host: %d cases equal the CPU's PagedKvCache byte for byte\n", ran);
  EXPECT_EQ(ran, 48);
  EXPECT_EQ(cuda::host_misaligned_runs.load() - misaligned_before, 0);  // every access one a GPU can make
}

// What the device K-shift changes in the body's inputs (ropekit::cuda::shift): one position for every entry (|δ|),
// int32 slots read as the device gives them, −1 skipped, a slot outside the cache reported and skipped.
TEST(CudaHost, KShiftBodyWithTheDeviceApisInputs) {
  const Spec spec{.head_dim = 64, .rotary_dim = 64, .base = 10000.0, .pairing = Pairing::Half};
  const Rope rope(spec);
  const std::int64_t kv = 2, d = 64, page_size = 4, n = 9;
  std::vector<std::int64_t> at(n);
  for (std::int64_t t = 0; t < n; ++t) at[std::size_t(t)] = 300 + t;
  FilledCache filled(rope,
                     {.num_pages = 4,
                      .page_size = page_size,
                      .kv_heads = kv,
                      .dtype = CacheDType::F16,
                      .layout = PageLayout::HND,
                      .max_sequences = 1},
                     at, 41);
  PagedKvCache& cache = filled.cache;
  const PagedCache& pc = cache.cache();
  std::vector<std::byte>& mine = filled.keys;
  std::vector<std::int32_t> slots;
  for (std::int64_t e = 2; e < 7; ++e) slots.push_back(cache.pages(0)[std::size_t(e / page_size)] * 4 + int(e % 4));
  slots.insert(slots.begin() + 2, -1);  // skipped
  slots.push_back(999);                 // outside the cache: reported, skipped
  cache.shift_entries(0, 2, 7, -37);
  std::vector<float> rows(std::size_t(n * kv * d));
  const std::vector<std::int64_t> steps(slots.size(), 37);
  const RotateCall turn = rope.prepare({.k = bshd(rows.data(), DType::F32, 1, std::int64_t(steps.size()), kv, d),
                                        .positions = positions(steps),
                                        .direction = Direction::Inverse});
  const detail::RotateJob* jobs[] = {&turn.job()};
  PagedCache copy = pc;
  copy.k = mine.data();
  const std::vector<std::int64_t> unused(slots.begin(), slots.end());
  detail::CudaLanes lanes;
  cuda::KShiftShape shape;
  ASSERT_TRUE(detail::make_cuda_kshift_shape(jobs, copy, unused, lanes, shape));
  shape.calls[0].positions = nullptr;
  shape.calls[0].uniform_position = 37;
  shape.slots = slots.data();
  shape.slots_i64 = false;
  unsigned long long error = 0;
  shape.calls[0].error = &error;
  for (std::int64_t b = 0; b * 96 < shape.threads(); ++b)
    for (int t = 0; t < 96; ++t) cuda::kshift_thread(shape, b, t, 96);
  EXPECT_EQ(error, slots.size());  // the last entry's index + 1
  EXPECT_TRUE(filled.keys_equal(mine));
}

}  // namespace
