// Every SIMD target this CPU supports, driven by the one case table (bench/lib/cases.hpp) — ggml's
// test-backend-ops is the model:
//   rotation   bit for bit against the scalar reference over whole buffers, guards included: odd tails,
//              partial rotary, M-RoPE, a magnitude ≠ 1, fp32/bf16/fp16 with special values, every
//              direction, in and out of place, table and on-the-fly angles, strided and misaligned
//              views, positions to 2^31 − 1, 1 to 7 threads;
//   attention  fused (RoPE in the tile loads) bit for bit against apply() then attention on the
//              rotated copies, and within attention.hpp's bound of a double-precision softmax of the
//              stored rotated q, k and v — prefill, decode, chunks, GQA/MQA, windows, ALiBi/T5/dense
//              biases, MLA widths, partial rotary, fp32/bf16/fp16 inputs and outputs, KV-cache decode.
// Bitwise equality with the reference carries the accuracy contract over to every target: the
// reference's arithmetic is the one apply_test checks against the double oracle.
//
// Select targets with the gtest filter (--gtest_filter='*/AVX2') and cases with ROPEKIT_CASES
// (comma-separated texts that must all occur in the case name, e.g. ROPEKIT_CASES=bf16,decode).
#include <gtest/gtest.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "attention_oracle.hpp"
#include "cpu/dispatch.hpp"
#include "lib/cases.hpp"
#include "rope/angles.hpp"
#include "rope/backend.hpp"
#include "rope/call_shape.hpp"
#include "rope/reference.hpp"
#include "ropekit/ropekit.hpp"
#include "same_bits.hpp"
#include "targets.hpp"

namespace {

using namespace ropekit;
using cases::Case;
using cases::Op;
using cases::Tensor;
using cases::Workload;

std::vector<std::string> case_filters() {
  std::vector<std::string> filters;
  if (const char* env = std::getenv("ROPEKIT_CASES")) {
    std::stringstream in(env);
    for (std::string f; std::getline(in, f, ',');) {
      if (!f.empty()) filters.push_back(f);
    }
  }
  return filters;
}

// The eval cases of the given ops that pass ROPEKIT_CASES, attention rows shrunk by ROPEKIT_CASE_SHRINK
// (targets::shrink_factor, cases::shrunk), with their index (the workload's seed, so that a case keeps its inputs
// whatever the selection).
std::vector<std::pair<std::uint32_t, Case>> selected(std::initializer_list<Op> ops) {
  const std::vector<std::string> filters = case_filters();
  const int factor = targets::shrink_factor();
  std::vector<std::pair<std::uint32_t, Case>> out;
  std::uint32_t index = 0;
  for (const Case& c : cases::eval_cases()) {
    ++index;
    if (std::find(ops.begin(), ops.end(), c.op) != ops.end() && cases::matches(c, filters)) {
      out.emplace_back(index, cases::shrunk(c, factor));
    }
  }
  return out;
}

using same_bits::expect_same_bits;
using same_bits::is_nan;

void expect_reference_bits(Workload& got, Workload& want) {
  const RotateCall reference = want.prepare();
  detail::rotate_rows_reference(reference.job(), 0, reference.rows());
  got.run();
  same_bits::expect_same_rotation(got, want);
}

class Rotation : public targets::AgainstReference {};
ROPEKIT_PER_TARGET(Rotation);

TEST_P(Rotation, EveryCaseEqualsTheReferenceBitForBit) {
  const targets::CaseSample sample = targets::case_sample(true);
  int ran = 0, table = 0;
  for (const auto& [seed, c] : selected({Op::Rotate})) {
    ++table;
    if (!sample.runs(seed)) continue;
    SCOPED_TRACE(c.name());
    Workload got(c, seed), want(c, seed);
    expect_reference_bits(got, want);
    ++ran;
  }
  std::printf("%s: %d rotation cases (one in %d)\n", GetParam().c_str(), ran, sample.share);
  if (case_filters().empty()) {
    EXPECT_GT(table, 500);
    EXPECT_GT(ran, 0);
  }
}

// Out-of-place calls above the threshold use non-temporal stores on vector-aligned rows; rows that
// are not aligned fall back to ordinary stores. Both must give the reference's bits.
TEST_P(Rotation, NonTemporalStoresGiveTheSameBits) {
  const std::int64_t saved = cpu::stream_threshold_bytes();
  cpu::set_stream_threshold_bytes(1);
  for (const char* spec : {"half128", "interleaved128", "half72", "interleaved72", "half80", "interleaved96",
                           "half32of128", "interleaved6of10", "half2of2", "yarn64", "mrope_sectioned"}) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      for (cases::Layout layout : {cases::Layout::Bshd, cases::Layout::Strided}) {
        const Case c{.op = Op::Rotate,
                     .spec = spec,
                     .dtype = dt,
                     .layout = layout,
                     .seq = 9,
                     .q_heads = 4,
                     .k_heads = 2,
                     .threads = 2,
                     .in_place = false};
        SCOPED_TRACE(c.name());
        Workload got(c, 3), want(c, 3);
        ASSERT_TRUE(got.prepare().job().stream_stores);
        expect_reference_bits(got, want);
      }
    }
  }
  cpu::set_stream_threshold_bytes(saved);
}

// The software prefetch ahead of large rotations' rows is chosen from the CPU's identity (issue 42): off on AMD
// families 25 and 26 (measured on Zen 4 and Zen 5), on elsewhere; a large call's job carries this host's choice, a
// small one never prefetches. A prefetch is a hint: the per-target tests above run with whichever this host chose, and
// the bits cannot differ.
TEST(MemoryPolicy, SoftwarePrefetchFollowsTheCpuIdentity) {
  EXPECT_TRUE(cpu::software_row_prefetch({.vendor = "GenuineIntel", .family = 6, .model = 207}));
  EXPECT_TRUE(cpu::software_row_prefetch({.vendor = "GenuineIntel", .family = 6, .model = 167}));
  EXPECT_FALSE(cpu::software_row_prefetch({.vendor = "AuthenticAMD", .family = 25, .model = 17}));
  EXPECT_FALSE(cpu::software_row_prefetch({.vendor = "AuthenticAMD", .family = 26, .model = 2}));  // Zen 5
  EXPECT_TRUE(
      cpu::software_row_prefetch({.vendor = "AuthenticAMD", .family = 23, .model = 49}));  // Zen 2: not measured
  const Case large{.op = Op::Rotate, .spec = "half128", .dtype = DType::F32, .seq = 512, .q_heads = 32, .k_heads = 8};
  const Case small{.op = Op::Rotate, .spec = "half128", .dtype = DType::F32, .seq = 1, .q_heads = 32, .k_heads = 8};
  Workload big(large, 1), decode(small, 1);
  EXPECT_EQ(big.prepare().job().prefetch_rows, cpu::software_row_prefetch());
  EXPECT_FALSE(decode.prepare().job().prefetch_rows);
}

// The 256-bit kernel for one thread (issue 42): only on AMD families 25 and 26, only for large float32 half-pairing
// rotations out of place, only where no target was chosen; the kernel it names is the AVX2 target's, whose bits the
// per-target tests above check against the scalar reference.
TEST(MemoryPolicy, OneThread256BitKernelFollowsTheCpuIdentityAndTheCall) {
  const CpuIdentity zen4{.vendor = "AuthenticAMD", .family = 25, .model = 17};
  const std::int64_t mib = std::int64_t{1} << 20;
  EXPECT_TRUE(cpu::one_thread_256_bit(zen4, DType::F32, DType::F32, Pairing::Half, true, mib));
  EXPECT_FALSE(cpu::one_thread_256_bit(zen4, DType::F32, DType::F32, Pairing::Half, true, mib - 1));  // decode-sized
  EXPECT_FALSE(cpu::one_thread_256_bit(zen4, DType::F32, DType::F32, Pairing::Half, false, mib));     // in place
  EXPECT_FALSE(cpu::one_thread_256_bit(zen4, DType::F32, DType::F32, Pairing::Interleaved, true, mib));
  EXPECT_FALSE(cpu::one_thread_256_bit(zen4, DType::BF16, DType::BF16, Pairing::Half, true, mib));
  EXPECT_FALSE(cpu::one_thread_256_bit(zen4, DType::F32, DType::F16, Pairing::Half, true, mib));
  EXPECT_FALSE(cpu::one_thread_256_bit({.vendor = "GenuineIntel", .family = 6, .model = 207}, DType::F32, DType::F32,
                                       Pairing::Half, true, mib));
  EXPECT_TRUE(cpu::one_thread_256_bit({.vendor = "AuthenticAMD", .family = 26, .model = 2}, DType::F32, DType::F32,
                                      Pairing::Half, true, mib));  // Zen 5
  EXPECT_FALSE(cpu::one_thread_256_bit({.vendor = "AuthenticAMD", .family = 23, .model = 49}, DType::F32, DType::F32,
                                       Pairing::Half, true, mib));  // Zen 2: not measured
  const Case large{.op = Op::Rotate,
                   .spec = "half128",
                   .dtype = DType::F32,
                   .seq = 512,
                   .q_heads = 32,
                   .k_heads = 8,
                   .in_place = false};
  Workload big(large, 1);
  const std::vector<std::string> targets = simd_targets();
  const bool here = cpu::one_thread_256_bit(cpu_identity(), DType::F32, DType::F32, Pairing::Half, true, mib) &&
                    std::count(targets.begin(), targets.end(), "AVX2") > 0;
  EXPECT_EQ(big.prepare().job().one_thread_kernel != nullptr, here);
  // A target chosen by name runs its own code throughout.
  set_simd_target(targets.front());
  EXPECT_EQ(big.prepare().job().one_thread_kernel, nullptr);
  set_simd_target("");
  EXPECT_EQ(big.prepare().job().one_thread_kernel != nullptr, here);
}

// Every 16-bit pattern (all NaNs, infinities, subnormals, both zeros) goes through the bf16 and fp16
// load and store of the target, at several angles and a magnitude ≠ 1, and must come out as the
// reference's bits.
TEST_P(Rotation, EveryBf16AndFp16BitPatternMatchesTheReference) {
  const Rope rope(cases::spec("yarn64"));
  std::vector<std::int64_t> pos(1024);
  for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = std::int64_t(i % 7) * 1237;
  const auto table = rope.table(*std::max_element(pos.begin(), pos.end()) + 1);
  for (DType dt : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string(to_string(dt)));
    std::vector<std::uint16_t> x(1 << 16);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint16_t>(i * 40503u);  // a permutation
    std::vector<std::uint16_t> want = x;
    RotateArgs args{.q = bshd(x.data(), dt, 1, 1024, 1, 64), .positions = positions(pos)};
    RotateArgs ref_args = args;
    ref_args.q.data = want.data();
    const RotateCall reference = rope.prepare(ref_args, table);
    detail::rotate_rows_reference(reference.job(), 0, reference.rows());
    rope.prepare(args, table).run();
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (x[i] == want[i]) continue;
      ASSERT_TRUE(is_nan(dt, reinterpret_cast<const std::byte*>(&x[i])) &&
                  is_nan(dt, reinterpret_cast<const std::byte*>(&want[i])))
          << "element " << i << ": " << x[i] << " vs " << want[i];
    }
  }
}

// Case c's rotation, its rows run by `run(call)` in whatever pieces it likes, must carry the reference's bits (the
// outputs: q and k in place, q_out and k_out out of place).
template <class Run>
void ExpectPiecesGiveTheReferenceBits(const Case& c, std::uint32_t seed, Run run) {
  Workload got(c, seed), want(c, seed);
  const RotateCall reference = want.prepare();
  detail::rotate_rows_reference(reference.job(), 0, reference.rows());
  run(got.prepare());
  if (c.in_place) {
    expect_same_bits(got.q, want.q, "q");
    expect_same_bits(got.k, want.k, "k");
  } else {
    expect_same_bits(got.q_out, want.q_out, "q_out");
    expect_same_bits(got.k_out, want.k_out, "k_out");
  }
}

// A RotateCall's rows can be split anyhow — this is what an engine's thread pool does.
TEST_P(Rotation, AnySplitOfTheRowsGivesTheSameBits) {
  const Case c{.op = Op::Rotate,
               .spec = "interleaved96",
               .dtype = DType::BF16,
               .layout = cases::Layout::Strided,
               .batch = 2,
               .seq = 7,
               .q_heads = 5,
               .k_heads = 3,
               .in_place = false};
  ExpectPiecesGiveTheReferenceBits(c, 11, [](const RotateCall& call) {
    ASSERT_EQ(call.rows(), 2 * 7 * (5 + 3));
    for (std::int64_t first = call.rows(); first > 0; first -= 13) {
      call.run(std::max<std::int64_t>(0, first - 13), first);
    }
  });
}

// Ranges of whole tokens that start and end inside a later batch entry — what a thread's share of a batched prefill is
// — through the whole-token kernels (in-register widths of 64 and 128 dims, both pairings, a table whose rows are the
// coefficients, every dtype, in and out of place), against the reference on the same views. A kernel that found a
// range's first token from its sequence index alone, not its batch entry too, wrote the first batch's rows again.
TEST_P(Rotation, WholeTokenRangesInsideLaterBatchEntriesGiveTheReferenceBits) {
  for (const char* spec : {"half64", "half128", "interleaved64", "interleaved128"})
    for (DType dt : {DType::F32, DType::BF16, DType::F16})
      for (bool in_place : {true, false}) {
        SCOPED_TRACE(std::string(spec) + " " + std::string(to_string(dt)) + (in_place ? " in place" : " out of place"));
        const Case c{.op = Op::Rotate,
                     .spec = spec,
                     .dtype = dt,
                     .layout = cases::Layout::Bshd,
                     .batch = 3,
                     .seq = 5,
                     .q_heads = 3,
                     .k_heads = 2,
                     .in_place = in_place};
        ExpectPiecesGiveTheReferenceBits(c, 17, [](const RotateCall& call) {
          // Tokens [0, 7), [7, 12) and [12, 15) of 5 rows each: the second and third start inside batch entries 1, 2.
          for (const auto& [first, last] : {std::pair{0, 7}, std::pair{7, 12}, std::pair{12, 15}}) {
            call.run(first * 5, last * 5);
          }
        });
      }
}

// q and k as slices of one fused projection per token ([q heads | k heads], the same head stride), the
// layout a QKV projection writes: the kernel then rotates each token's q and k rows in one run. In
// place and out of place (outputs fused alike, or q's output apart: one run each), every dtype and
// pairing, whole-vector and tail widths, and rows split anyhow (runs that start or end inside a token's
// q or k rows), against the reference on the same views.
TEST_P(Rotation, FusedQkRowsGiveTheReferenceBits) {
  const std::int64_t qh = 4, kh = 2;
  int compared = 0;
  for (const std::int64_t tokens : {1, 5})  // 1: a decode call (the kernels' one-token path)
    for (const char* name : {"half128", "interleaved128", "half72", "half32of128"}) {
      const Rope rope(cases::spec(name));
      const int d = rope.spec().head_dim;
      const auto table = rope.table(4100);
      std::vector<std::int64_t> pos(tokens);
      for (std::int64_t t = 0; t < tokens; ++t) pos[std::size_t(t)] = (t * 1237) % 4096;
      for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
        const std::size_t es = element_size(dt), width = std::size_t((qh + kh) * d);
        for (int outputs : {0, 1, 2}) {  // in place; fused outputs; q's output in a buffer of its own
          SCOPED_TRACE(std::string(name) + " " + std::string(to_string(dt)) + " outputs " + std::to_string(outputs));
          std::mt19937 rng(7);
          std::vector<std::byte> in(tokens * width * es + 64), out(in.size()), q_apart(tokens * qh * d * es + 64);
          for (std::size_t i = 0; i + es <= in.size(); i += es) {
            const float v = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
            if (dt == DType::F32)
              std::memcpy(&in[i], &v, 4);
            else {
              const std::uint16_t h = dt == DType::BF16 ? float_to_bf16(v) : float_to_f16(v);
              std::memcpy(&in[i], &h, 2);
            }
          }
          const auto slice = [&](std::byte* base, std::int64_t first, std::int64_t heads) {
            Heads v = bshd(base + std::size_t(first * d) * es, dt, 1, tokens, heads, d);
            v.seq_stride = std::int64_t(width);
            return v;
          };
          const auto args_for = [&](std::byte* src, std::byte* dst, std::byte* q_dst) {
            RotateArgs a{.q = slice(src, 0, qh), .k = slice(src, qh, kh), .positions = positions(pos)};
            if (outputs > 0) {
              a.q_out = outputs == 1 ? slice(dst, 0, qh) : bshd(q_dst, dt, 1, tokens, qh, d);
              a.k_out = slice(dst, qh, kh);
            }
            return a;
          };
          std::vector<std::byte> want_in = in, want_out = out, want_q = q_apart;
          const RotateCall reference = rope.prepare(args_for(want_in.data(), want_out.data(), want_q.data()), table);
          detail::rotate_rows_reference(reference.job(), 0, reference.rows());
          for (std::int64_t step : {std::int64_t{0}, std::int64_t{5}}) {  // 0: one run over every row
            std::vector<std::byte> got_in = in, got_out = out, got_q = q_apart;
            const RotateCall call = rope.prepare(args_for(got_in.data(), got_out.data(), got_q.data()), table);
            if (step == 0) call.run(0, call.rows());
            for (std::int64_t first = 0; step > 0 && first < call.rows(); first += step) {
              call.run(first, std::min(call.rows(), first + step));
            }
            EXPECT_TRUE(got_in == want_in) << "step " << step;
            EXPECT_TRUE(got_out == want_out) << "step " << step;
            EXPECT_TRUE(got_q == want_q) << "step " << step;
            ++compared;
          }
        }
      }
    }
  EXPECT_EQ(compared, 2 * 4 * 3 * 3 * 2);
}

// ---------------------------------------------------------------------------------------------------
// Angles: the SIMD rows (table fill and on-the-fly coefficients) against the scalar reference's.

class Angles : public targets::AgainstReference {};
ROPEKIT_PER_TARGET(Angles);

// Pair counts 1, 3, 7, 8, 9, 15, 17, 64, 72 (tails of every vector width, and whole vectors), bases
// from 10 to 1e9 and a YaRN-blended plan, at dense small positions (every quarter turn of the fast
// pairs), random ones below 2^31 and the edges up to kPositionLimit − 1: bit for bit, the float32 rows
// and the doubles they are rounded from.
TEST_P(Angles, EveryTargetsRowsEqualTheScalarRows) {
  std::mt19937_64 rng(7);
  std::vector<std::int64_t> at;
  for (std::int64_t p = 0; p < 600; ++p) at.push_back(p);
  std::uniform_int_distribution<std::int64_t> below_2_31(0, (std::int64_t{1} << 31) - 1);
  for (int i = 0; i < 400; ++i) at.push_back(below_2_31(rng));
  for (std::int64_t p :
       {std::int64_t{1} << 31, (std::int64_t{1} << 31) - 1, std::int64_t{1} << 40, kPositionLimit - 1}) {
    at.push_back(p);
  }
  std::vector<std::vector<double>> plans;
  for (double base : {10.0, 1e4, 5e5, 1e9}) {
    for (int d : {2, 6, 14, 16, 18, 30, 34, 128, 144}) {
      plans.push_back(make_plan({.head_dim = d, .rotary_dim = d, .base = base, .pairing = Pairing::Half}).inv_freq);
    }
  }
  plans.push_back(make_plan({.head_dim = 128,
                             .rotary_dim = 128,
                             .base = 5e5,
                             .pairing = Pairing::Half,
                             .scaling = scaling::Yarn{.factor = 8.0, .original_max_position_embeddings = 4096}})
                      .inv_freq);
  int compared = 0;
  for (const std::vector<double>& inv_freq : plans) {
    const detail::AngleEvaluator angles(inv_freq, AngleMode::Accurate);
    const std::size_t n = inv_freq.size();
    std::vector<float> want_cos(n), want_sin(n), got_cos(at.size() * n), got_sin(at.size() * n);
    // The doubles too: the float32 rounding would hide most last-bit differences of the sequence.
    std::vector<double> want_cos64(n), want_sin64(n), got_cos64(n), got_sin64(n);
    for (std::size_t i = 0; i < at.size(); ++i) cpu::angle_rows(angles, at[i], 1, &got_cos[i * n], &got_sin[i * n]);
    for (std::size_t i = 0; i < at.size(); ++i) {
      angles.row(at[i], want_cos.data(), want_sin.data());
      ASSERT_EQ(std::memcmp(want_cos.data(), &got_cos[i * n], n * sizeof(float)), 0)
          << "cos, " << n << " pairs, p " << at[i];
      ASSERT_EQ(std::memcmp(want_sin.data(), &got_sin[i * n], n * sizeof(float)), 0)
          << "sin, " << n << " pairs, p " << at[i];
      angles.exact_row(at[i], want_cos64.data(), want_sin64.data());
      cpu::exact_angle_rows(angles, at[i], 1, got_cos64.data(), got_sin64.data());
      ASSERT_EQ(std::memcmp(want_cos64.data(), got_cos64.data(), n * sizeof(double)), 0)
          << "cos, " << n << " pairs, p " << at[i];
      ASSERT_EQ(std::memcmp(want_sin64.data(), got_sin64.data(), n * sizeof(double)), 0)
          << "sin, " << n << " pairs, p " << at[i];
      ++compared;
    }
  }
  // Many rows in one call: row r at r·pairs.
  const detail::AngleEvaluator angles(plans[16], AngleMode::Accurate);  // base 1e4, 64 pairs
  const std::size_t n = plans[16].size();
  std::vector<float> rows_cos(1000 * n), rows_sin(1000 * n), want_cos(n), want_sin(n);
  cpu::angle_rows(angles, 12345, 1000, rows_cos.data(), rows_sin.data());
  for (std::int64_t r = 0; r < 1000; ++r) {
    angles.row(12345 + r, want_cos.data(), want_sin.data());
    ASSERT_EQ(std::memcmp(want_cos.data(), &rows_cos[std::size_t(r) * n], n * sizeof(float)), 0) << r;
    ASSERT_EQ(std::memcmp(want_sin.data(), &rows_sin[std::size_t(r) * n], n * sizeof(float)), 0) << r;
  }
  std::printf("%s: %d rows equal the scalar reference's\n", GetParam().c_str(), compared);
}

// ---------------------------------------------------------------------------------------------------
// Attention.

// The values of a view as contiguous float32 [batch, seq, heads, dim].
std::vector<float> floats(const Heads& v, int dim) {
  std::vector<float> out;
  for (std::int64_t b = 0; b < v.batch; ++b) {
    for (std::int64_t s = 0; s < v.seq; ++s) {
      for (std::int64_t h = 0; h < v.heads; ++h) {
        const auto* row = static_cast<const std::byte*>(v.row(b, s, h));
        for (int l = 0; l < dim; ++l) {
          float f;
          if (v.dtype == DType::F32) {
            std::memcpy(&f, row + 4 * l, 4);
          } else {
            std::uint16_t h16;
            std::memcpy(&h16, row + 2 * l, 2);
            f = v.dtype == DType::BF16 ? bf16_to_float(h16) : f16_to_float(h16);
          }
          out.push_back(f);
        }
      }
    }
  }
  return out;
}

attn_oracle::Bias oracle_bias(const Case& c, const AttentionOptions& o) {
  if (const auto* a = std::get_if<AlibiBias>(&o.bias)) {
    const std::vector<float> slopes = a->slopes;
    return [slopes](auto, std::int64_t h, auto, auto, std::int64_t qp, std::int64_t kp) {
      return -double(slopes[h]) * double(std::llabs(qp - kp));
    };
  }
  if (const auto* t = std::get_if<RelativeBucketBias>(&o.bias)) {
    const RelativeBucketBias t5 = *t;
    const std::int64_t heads = c.q_heads;
    return [t5, heads](auto, std::int64_t h, auto, auto, std::int64_t qp, std::int64_t kp) {
      return double(t5.table[t5_bucket(t5.buckets, kp - qp) * heads + h]);
    };
  }
  if (const auto* d = std::get_if<DenseBias>(&o.bias)) {
    const DenseBias dense = *d;
    return [dense](auto, std::int64_t h, std::int64_t s, std::int64_t t, auto, auto) {
      return double(dense.data[(h * dense.queries + s) * dense.keys + t]);
    };
  }
  return {};
}

// Half an ulp of the output type relative to the value (0 for float32), and its smallest step.
double output_rounding(DType dt) { return dt == DType::F32 ? 0.0 : dt == DType::BF16 ? 0x1p-8 : 0x1p-11; }
double output_floor(DType dt) { return dt == DType::F16 ? 0x1p-25 : 0.0; }

class Attention : public targets::PerTarget {};
ROPEKIT_PER_TARGET(Attention);

TEST_P(Attention, EveryCaseEqualsApplyThenAttentionAndTheOracle) {
  const targets::CaseSample sample = targets::case_sample(false);
  int ran = 0, table = 0;
  double worst_ratio = 0.0;
  for (const auto& [seed, c] : selected({Op::Attention, Op::CacheAttention})) {
    ++table;
    if (!sample.runs(seed)) continue;
    SCOPED_TRACE(c.name());
    Workload w(c, seed);
    w.run();
    w.run_unfused();
    expect_same_bits(w.out, w.unfused_out, "fused attention vs apply() then attention");

    // The double oracle on the rotated values as stored.
    const int d = c.head_dim(), dv = c.value_dim();
    const attn_oracle::Shape shape{.batch = c.batch,
                                   .q_seq = c.seq,
                                   .k_seq = c.k_seq,
                                   .q_heads = c.q_heads,
                                   .kv_heads = c.k_heads,
                                   .d = d,
                                   .dv = dv};
    const Heads& stored_keys = c.op == Op::CacheAttention ? w.cache->keys() : w.k_rot.view;
    const std::vector<float> qf = floats(w.q_rot.view, d), kf = floats(stored_keys, d), vf = floats(w.v.view, dv),
                             got = floats(w.out.view, dv);
    const double scale = float(1.0 / std::sqrt(double(d)) * w.rope().plan().softmax_scale_mult);
    const attn_oracle::Result want =
        attn_oracle::softmax_attention(qf, kf, vf, shape, w.q_positions, w.k_positions, scale, c.causal, c.window,
                                       oracle_bias(c, w.attention_options()));
    double max_v = 0.0;
    for (float e : vf) max_v = std::max(max_v, double(std::fabs(e)));
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double base = 1e-6 * (1.0 + want.logit_range[i / dv]) * max_v;  // the contract in attention.hpp
      const double bound =
          base + output_rounding(c.out_dtype) * (std::fabs(want.out[i]) + base) + output_floor(c.out_dtype);
      const double err = std::fabs(got[i] - want.out[i]);
      worst_ratio = std::max(worst_ratio, err / bound);
      if (err > bound) {
        ADD_FAILURE() << "element " << i << ": " << got[i] << " vs " << want.out[i] << " (bound " << bound << ")";
        break;
      }
    }
    ++ran;
  }
  std::printf("%s: %d attention cases (one in %d), worst error / bound %.3f\n", GetParam().c_str(), ran, sample.share,
              worst_ratio);
  if (case_filters().empty()) {
    EXPECT_GT(table, 30);
    EXPECT_GT(ran, 0);
  }
}

// ---------------------------------------------------------------------------------------------------
// Target controls.

TEST(Targets, AreListedBestFirstAndTheBestIsChosen) {
  const std::vector<std::string> targets = simd_targets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(simd_target(), targets.front());
  for (const std::string& t : targets) std::printf("compiled and supported: %s\n", t.c_str());
}

// AVX3_BF16 is listed exactly where the CPU has AVX512_BF16 (CPUID.(7,1):EAX[5]), first, as the best
// AVX-512 target's twin.
TEST(Targets, TheNativeBf16TargetIsListedWhereTheCpuHasTheExtension) {
  const std::vector<std::string> targets = simd_targets();
  const auto avx512 =
      std::find_if(targets.begin(), targets.end(), [](const std::string& t) { return t == "AVX3" || t == "AVX3_DL"; });
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool has_bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a & (1u << 5)) != 0;
#else
  const bool has_bf16 = false;
#endif
  const bool listed = std::find(targets.begin(), targets.end(), "AVX3_BF16") != targets.end();
  EXPECT_EQ(listed, has_bf16 && avx512 != targets.end());
  if (listed) {
    EXPECT_EQ(targets.front(), "AVX3_BF16");
    EXPECT_EQ(targets[1], *avx512);
  }
}

// On AArch64 the best target gets a FEAT_BF16 twin (BFCVT/BFCVTN), listed first as "<best>_BF16", exactly where the
// kernel reports HWCAP2_BF16; no other target has one.
TEST(Targets, TheArmBf16TwinIsListedWhereTheCpuHasTheExtension) {
  const std::vector<std::string> targets = simd_targets();
#if defined(__aarch64__)
  const bool has_bf16 = (getauxval(AT_HWCAP2) & (1ul << 14)) != 0;
#else
  const bool has_bf16 = false;
#endif
  const auto twins = std::count_if(targets.begin(), targets.end(), [](const std::string& t) {
    return t != "AVX3_BF16" && t.size() > 5 && t.substr(t.size() - 5) == "_BF16";
  });
  EXPECT_EQ(twins, has_bf16 ? 1 : 0);
  if (has_bf16) {
    ASSERT_GE(targets.size(), 2u);
    EXPECT_EQ(targets.front(), targets[1] + "_BF16");
  }
}

TEST(Targets, ListingIsAPureQuery) {
  const std::vector<std::string> targets = simd_targets();
  set_simd_target(targets.back());
  EXPECT_EQ(simd_targets(), targets);        // still every target the CPU has...
  EXPECT_EQ(simd_target(), targets.back());  // ...and the restriction unchanged
  set_simd_target("");
  EXPECT_EQ(simd_target(), targets.front());
}

// The targets whose rotation kernels are the scalar reference are exactly those without a fused
// multiply-add (the per-target comparisons with the reference skip them); an unknown name is an error.
TEST(Targets, TheReferenceTargetsAreThoseWithoutFma) {
  for (const std::string& name : simd_targets()) {
    const bool no_fma = name == "SSSE3" || name == "SSE4" || name == "SSE2" || name == "EMU128" || name == "SCALAR";
    EXPECT_EQ(cpu::rotates_with_reference(name), no_fma) << name;
  }
  EXPECT_THROW(cpu::rotates_with_reference("AVX9000"), Error);
}

TEST(Targets, BadTargetNamesAndThreadCounts) {
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
