// append_probe — the per-call costs of a decode-shaped fused append (1 token, 32 q + 8 kv heads × 128, bf16,
// a bf16 paged cache, one thread, L1/L2-resident): ns per call (median of 15 batches of 20,000) of
//   prepare_append alone, prepare_append + run, the one-shot append, Rope::prepare alone, Rope::apply,
//   AppendCall::run of a prepared call, and a decode step (set_positions_and_slots + run).
// The difference between the first and third rows is what the fused call pays per call that the unfused
// rotation does not (docs/performance-log.md).
//
//   append_probe
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_timing.hpp"
#include "ropekit/ropekit.hpp"

namespace {

using probe::ns_per_call;

// 64-byte aligned, as an engine's tensors are.
template <class T>
T* aligned(std::size_t n) {
  return static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64));
}

}  // namespace

int main() {
  using namespace ropekit;
  constexpr int d = 128, q_heads = 32, kv = 8;
  constexpr std::int64_t pages = 64, page_size = 16;
  const Rope rope(Spec{.head_dim = d, .rotary_dim = d, .base = 5e5, .pairing = Pairing::Half});
  auto* q = aligned<std::uint16_t>(q_heads * d);
  auto* k = aligned<std::uint16_t>(kv * d);
  auto* v = aligned<std::uint16_t>(kv * d);
  std::fill(q, q + q_heads * d, std::uint16_t{0x3f00});
  std::fill(k, k + kv * d, std::uint16_t{0x3f00});
  std::fill(v, v + kv * d, std::uint16_t{0x3f00});
  auto* kc = aligned<std::byte>(pages * page_size * kv * d * 2);
  auto* vc = aligned<std::byte>(pages * page_size * kv * d * 2);
  const PagedCache cache{.k = kc,
                         .v = vc,
                         .dtype = CacheDType::BF16,
                         .num_pages = pages,
                         .page_size = page_size,
                         .kv_heads = kv,
                         .head_dim = d,
                         .v_head_dim = d};
  const std::vector<std::int64_t> pos = {4000}, slots = {37};
  const AppendArgs args{.q = bshd(q, DType::BF16, 1, 1, q_heads, d),
                        .k = bshd(k, DType::BF16, 1, 1, kv, d),
                        .v = bshd(v, DType::BF16, 1, 1, kv, d),
                        .positions = positions(pos),
                        .slots = slot_mapping(slots),
                        .threads = 1};
  const RotateArgs rotate{.q = args.q, .k = args.k, .positions = args.positions, .threads = 1};
  rope.table(8192);  // as after a prefill
  const auto keep = [](const auto& call) { asm volatile("" : : "r"(&call) : "memory"); };
  std::printf("prepare_append               %7.1f ns\n", ns_per_call([&] { keep(prepare_append(rope, args, cache)); }));
  std::printf("prepare_append + run         %7.1f ns\n", ns_per_call([&] { prepare_append(rope, args, cache).run(); }));
  std::printf("append (one shot)            %7.1f ns\n", ns_per_call([&] { append(rope, args, cache); }));
  std::printf("Rope::prepare                %7.1f ns\n", ns_per_call([&] { keep(rope.prepare(rotate)); }));
  std::printf("Rope::apply                  %7.1f ns\n", ns_per_call([&] { rope.apply(rotate); }));
  const AppendCall call = prepare_append(rope, args, cache);
  std::printf("AppendCall::run              %7.1f ns\n", ns_per_call([&] { call.run(); }));
  AppendCall step = prepare_append(rope, args, cache);
  std::printf("set_positions_and_slots + run %6.1f ns\n", ns_per_call([&] {
                step.set_positions_and_slots(positions(pos), slot_mapping(slots));
                step.run();
              }));
  std::free(q), std::free(k), std::free(v), std::free(kc), std::free(vc);
  return 0;
}
