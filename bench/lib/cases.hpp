// bench/lib/cases.hpp — one table of cases (op × spec × dtype × layout × positions × shape) for
// the per-target tests and the benchmarks, as ggml's test-backend-ops does it:
//   tests/targets_test.cpp   runs every eval case on every compiled and supported SIMD target:
//                            rotation bit for bit against the scalar reference, attention against
//                            apply-then-attention (bit for bit) and a double-precision oracle;
//   ropekit bench, bench/rope_bench, bench/attention_bench
//                            time the perf cases against ceilings measured in the same run.
// A case's name() says everything about it; filters (ropekit bench --filter, the tests'
// ROPEKIT_CASES) select cases whose name contains every filter text, and the target filter
// (ropekit bench --target, the tests' gtest filter on the target name) selects the SIMD target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ropekit/ropekit.hpp"

namespace ropekit::cases {

enum class Op {
  Rotate,          // Rope::prepare(args).run(): q and k of the same tokens
  Attention,       // ropekit::attention(rope, args): RoPE fused into the Q/K tile loads
  CacheAttention,  // keys appended to a KvCache (stored rotated), then attention of q against it
};
enum class Layout {
  Bshd,       // contiguous [batch, seq, heads, head_dim], 64-byte aligned
  Bhsd,       // contiguous [batch, heads, seq, head_dim] (HF after transpose)
  Strided,    // gaps between heads, tokens and batches, starting a few elements past a 64-byte boundary
  BshdOff16,  // contiguous BSHD 16 bytes past a 64-byte boundary, where malloc (and so NumPy) puts
              // large buffers
};
enum class PositionKind {
  Sequential,  // 0, 1, …, seq − 1 per batch (a prefill); a single token (decode) is at 4095
  Scattered,   // shuffled, with repeats, below 20 001 (tables are built)
  Huge,        // shuffled, with repeats, up to 2^31 − 1 (on-the-fly angles)
};
enum class Angles { Table, OnTheFly };
enum class Bias { None, Alibi, RelativeBucket, Dense };

// The specs cases draw from, by name: "half128" (Llama), "interleaved128" (GPT-J), odd tails
// ("half72", "interleaved72", "half80", "half96", "interleaved96"), partial rotary ("half32of128",
// "interleaved32of128", "interleaved6of10", "half20of80"), "half2of2", "half64", "interleaved64",
// "half256", "yarn64" (cos_sin_scale ≠ 1), "deepseek64"/"deepseek96" (YaRN with mscale_all_dim:
// softmax_scale_mult ≠ 1, interleaved), M-RoPE "mrope_sectioned" and "mrope_interleaved".
const Spec& spec(std::string_view name);

struct Case {
  Op op = Op::Rotate;
  std::string spec = "half128";
  DType dtype = DType::F32;  // storage of q, k and v
  Layout layout = Layout::Bshd;
  PositionKind positions = PositionKind::Scattered;
  std::int64_t batch = 1, seq = 1;        // tokens of q (rotation: of q and k)
  std::int64_t q_heads = 1, k_heads = 1;  // attention: k_heads = kv heads
  int threads = 1;                        // 0: ropekit::default_threads()

  // Rotate
  bool in_place = true;
  Direction direction = Direction::Forward;
  Angles angles = Angles::Table;
  bool step = false;  // decode as an engine steps: a call prepared once, moved by RotateCall::set_positions
  // Special values (±0, ±inf, NaN, subnormals, ties) among q and k's, as the strided eval cases always have: the CUDA
  // tests' packed twins of those cases set it, so that the kernels' wide runs meet them too.
  bool specials = false;

  // Attention, CacheAttention
  std::int64_t k_seq = 0;
  int v_head_dim = 0;  // 0: head_dim
  DType out_dtype = DType::F32;
  bool causal = true;
  std::int64_t window = 0;
  Bias bias = Bias::None;
  std::int64_t q_offset = 0;  // position of the first query (a chunk or a decode step after a prefix)

  std::string name() const;
  int head_dim() const;
  int value_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim(); }
  // Rotate: bytes of q and k read + written per call.
  std::int64_t bytes() const;
};

std::vector<Case> eval_cases();  // every op on small shapes: what the per-target tests run
// An attention case with its queries, keys and the prefix before the queries divided by `factor` (rounded up; one
// query stays one), windows, heads, dtypes and biases kept: the same row at a fraction of the work, for runs under an
// emulator (scripts/test-arm64.sh). Rotation cases are returned as they are.
Case shrunk(Case c, int factor);
std::vector<Case> perf_cases();  // the benchmark grid
// True when c.name() contains every filter text.
bool matches(const Case& c, const std::vector<std::string>& filters);

// A [batch, seq, heads, dim] tensor in a case's layout and dtype, inside an aligned buffer with guard
// elements before, between and after its rows. Every element, guards included, holds a value, so a
// stray write shows in a byte comparison.
struct Tensor {
  DType dtype = DType::F32;
  std::vector<std::byte> storage;  // over-allocated so that the view can start on a 64-byte boundary
  std::size_t offset = 0;          // bytes from storage.data() to the buffer's first byte
  std::size_t size = 0;            // bytes of the buffer (guards included)
  Heads view;

  std::byte* data() { return storage.data() + offset; }
  const std::byte* data() const { return storage.data() + offset; }
  bool same_bytes(const Tensor& other) const;
};

// The buffers, positions and Rope of one case, filled deterministically from `seed`.
class Workload {
 public:
  Workload(const Case& c, std::uint32_t seed);
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  const Case& c() const { return c_; }
  const Rope& rope() const { return rope_; }
  // Case::head_dim() and bytes() looked up once (a spec lookup costs a third of a decode-sized memcpy: the
  // ceiling reads these on every call).
  int head_dim() const { return head_dim_; }
  std::int64_t bytes() const { return bytes_; }

  // Rotate: the call's arguments, and the call prepared with the case's angle source.
  RotateArgs rotate_args();
  RotateCall prepare();
  const std::vector<std::int64_t>& rotation_positions() const { return pos_; }

  // Attention / CacheAttention: the fused call's arguments and options.
  AttentionArgs attention_args();
  AttentionOptions attention_options() const;
  // The case's operation through the library on the current SIMD target: the rotation, or the fused
  // attention (CacheAttention: against the cache filled at construction).
  void run();
  // Attention only: Rope::apply into q_rot / k_rot, then attention() on those — the unfused path.
  void run_unfused();

  // Data. Rotate: q, k, q_out, k_out (written only by out-of-place cases). Attention: q, k, v, out, and after
  // run_unfused() q_rot, k_rot (Attention; CacheAttention's rotated keys are cache->keys()) and unfused_out.
  Tensor q, k, q_out, k_out, v, out, q_rot, k_rot, unfused_out;
  std::vector<std::int64_t> q_positions, k_positions;  // attention: mask positions too
  std::vector<float> dense_bias, t5_table, alibi;
  std::optional<KvCache> cache;

 private:
  Case c_;
  int head_dim_ = 0;
  std::int64_t bytes_ = 0;
  const Rope& rope_;               // shared by every workload of the same spec (its table is built once)
  std::vector<std::int64_t> pos_;  // rotation: positions (M-RoPE: three streams)
  std::shared_ptr<const Table> table_;
  std::optional<RotateCall> step_call_;  // Case::step: prepared at the first run
};

}  // namespace ropekit::cases
