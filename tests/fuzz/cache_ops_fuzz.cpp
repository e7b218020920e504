// libFuzzer target: the paged KV cache's operation stream (issue 66). The input picks a storage type, a page layout
// and a page size, then a stream of operations — appends of tokens to sequences at chosen positions and plans,
// erasures and K-shifts by ±δ over positions or entries (KvCache's slots), sequence copies, removals, re-rotations —
// with arguments straight from the bytes, sequence ids and ranges out of bounds included. Each runs on the cache and on
// tests/cache_model.hpp's model; they must agree after every step (a refused operation changes nothing) or the target
// aborts, printing the step.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bytes.hpp"
#include "cache_model.hpp"

using fuzz::Bytes;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ropekit;
  static const cache_model::Ropes ropes;
  Bytes in{data, size};
  const auto mode = in.take<std::uint8_t>();
  const auto dtype = static_cast<CacheDType>(1 + mode % 4);
  const PagedKvCacheShape shape{.num_pages = 1 + in.take<std::uint8_t>() % 12,
                                .page_size = 1 + in.take<std::uint8_t>() % 6,
                                .kv_heads = cache_model::kKvHeads,
                                .dtype = dtype,
                                .layout = (mode & 4) ? PageLayout::HND : PageLayout::NHD,
                                .k_scale = dtype == CacheDType::F8E4M3 ? 0.03f : 1.0f,
                                .v_scale = dtype == CacheDType::F8E4M3 ? 0.02f : 1.0f,
                                .max_sequences = 3,
                                .regimes = {}};
  cache_model::Harness harness(ropes, shape);
  for (int step = 0; in.size > 0 && step < 200; ++step) {
    cache_model::Op op;
    const auto kind = in.take<std::uint8_t>();
    op.kind = static_cast<cache_model::Op::Kind>(kind % 8);
    // Sequence ids in [0, 3): the model indexes by them; ids outside are the parsers' and append_fuzz's business.
    op.seq = in.take<std::uint8_t>() % 3;
    op.dst = in.take<std::uint8_t>() % 3;
    op.plan = (kind >> 4) & 1;
    op.p0 = in.take<std::int8_t>();
    op.p1 = in.take<std::int8_t>();
    op.delta = in.take<std::int8_t>();
    if (op.kind == cache_model::Op::Append) {
      const int tokens = 1 + in.take<std::uint8_t>() % 8;
      for (int t = 0; t < tokens; ++t) {
        const auto b = in.take<std::uint8_t>();
        op.seq_of.push_back(b % 3);
        op.positions.push_back(b >> 2);  // 0 … 63, repeats and any order included
      }
      op.values_seed = in.take<std::uint32_t>();
    }
    const std::string diff = harness.step(op);
    if (!diff.empty()) {
      std::fprintf(stderr, "cache_ops_fuzz: step %d (%s): %s\n", step, op.describe().c_str(), diff.c_str());
      std::abort();
    }
  }
  return 0;
}
