// An outside program that computes which positions tokens get: find_package(ropekit COMPONENTS positions) and
// ropekit::positions alone. Context-parallel zig-zag shards of an 8-token sequence over 2 ranks, and packed
// documents' positions.
#include <ropekit/position_ids.hpp>

#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  const std::vector<std::int64_t> rank1 = ropekit::cp_positions(8, {.size = 2, .rank = 1});
  const std::vector<std::int64_t> cu = {0, 3, 5};
  const std::vector<std::int64_t> packed = ropekit::packed_positions(cu);
  std::printf("ropekit::positions: zig-zag rank 1 of 2:");
  for (auto p : rank1) std::printf(" %lld", static_cast<long long>(p));
  std::printf("\n");
  // Megatron's zig-zag: 2·size chunks of 2, rank 1 holds chunks 1 and 2.
  if (rank1 != std::vector<std::int64_t>{2, 3, 4, 5}) return 1;
  if (packed != std::vector<std::int64_t>{0, 1, 2, 0, 1}) return 1;
  std::printf("ok\n");
  return 0;
}
