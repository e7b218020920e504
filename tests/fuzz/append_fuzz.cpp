// libFuzzer target: caller-provided cache geometry, slot mappings and page tables → prepare_append
// (and a run when they are accepted); with mode's high bit, also a caller's cos/sin cache (its claimed
// rows, its values, positions that may fall outside it) imported and driving the append. Any input may be rejected with
// ropekit::Error; an accepted one must write only inside the cache (ASan sees the buffers' bounds exactly).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bytes.hpp"
#include "ropekit/append.hpp"
#include "ropekit/cos_sin_cache.hpp"
#include "ropekit/error.hpp"

using fuzz::Bytes;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ropekit;
  Bytes in{data, size};
  const auto mode = in.take<std::uint8_t>();
  // Geometry: small enough to allocate exactly, signed so that negative values are tried.
  const std::int64_t num_pages = in.take<std::int8_t>(), page_size = in.take<std::int8_t>(),
                     kv_heads = in.take<std::int8_t>() % 4,
                     tokens = std::clamp<int>(in.take<std::uint8_t>() % 16, 1, 15);
  const int head_dim = in.take<std::int8_t>();
  const float raw_scale = in.take<float>();
  const float k_scale = in.take<std::uint8_t>() % 2 ? raw_scale : 1.0f;
  const auto dtype = static_cast<CacheDType>(in.take<std::uint8_t>() % 6);
  const auto layout = static_cast<PageLayout>(in.take<std::uint8_t>() % 4);
  const int k_offset = in.take<std::int8_t>();
  // An engine's cos/sin cache: claimed rows, rows actually given, and where the positions start.
  const bool external = (mode & 0x80) != 0;
  const std::int64_t table_rows = external ? in.take<std::uint8_t>() % 24 : 0;
  const std::size_t given_rows = external ? in.take<std::uint8_t>() % 24 : 0;
  const std::int64_t first_position = external ? in.take<std::int8_t>() : 0;

  const Spec spec{.head_dim = 8, .rotary_dim = 8, .base = 10000.0, .pairing = Pairing::Half};
  const Rope rope(spec);
  const std::int64_t heads = std::max<std::int64_t>(kv_heads, 1);
  std::vector<float> k(std::size_t(tokens * heads * 8), 0.5f), v(std::size_t(tokens * heads * 8), 0.25f);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(tokens), 0);
  for (std::int64_t t = 0; t < tokens; ++t) pos[std::size_t(t)] = first_position + t;
  // The cache is allocated from the geometry the input claims (when it is sane), so an accepted call
  // that writes outside it is an ASan error.
  const bool sane = num_pages > 0 && page_size > 0 && kv_heads > 0 && head_dim > 0 && dtype >= CacheDType::F32 &&
                    dtype <= CacheDType::F8E4M3;
  const std::int64_t slots = sane ? num_pages * page_size * kv_heads : 0;
  std::vector<std::byte> kc(
      std::size_t(std::max<std::int64_t>(slots * head_dim * (sane ? element_size(dtype) : 1), 1))),
      vc(std::size_t(std::max<std::int64_t>(slots * 8 * (sane ? element_size(dtype) : 1), 1)));
  const PagedCache cache{.k = kc.data(),
                         .v = vc.data(),
                         .dtype = dtype,
                         .layout = layout,
                         .num_pages = num_pages,
                         .page_size = page_size,
                         .kv_heads = kv_heads,
                         .head_dim = head_dim,
                         .v_head_dim = 8,
                         .k_scale = k_scale,
                         .v_scale = 1.0f};
  AppendArgs args{.k = bshd(k.data(), DType::F32, 1, tokens, heads, 8),
                  .v = bshd(v.data(), DType::F32, 1, tokens, heads, 8),
                  .positions = positions(std::span<const std::int64_t>(pos)),
                  .k_offset = k_offset};
  // The rest: int32 arrays.
  std::vector<std::int32_t> rest(in.size / 4);
  if (!rest.empty()) std::memcpy(rest.data(), in.data, rest.size() * 4);
  const auto piece = [&](std::size_t& at, std::size_t n) {
    n = std::min(n, rest.size() - std::min(at, rest.size()));
    std::span<const std::int32_t> s(rest.data() + std::min(at, rest.size()), n);
    at += n;
    return s;
  };
  std::size_t at = 0;
  if (mode % 2 == 0) {
    args.slots = slot_mapping(piece(at, std::size_t(tokens)));
  } else {
    const std::size_t batch = mode / 2 % 5;
    const std::span<const std::int32_t> indptr = piece(at, batch + 1), last = piece(at, batch),
                                        batch_indices = piece(at, std::size_t(tokens)),
                                        seq_positions = piece(at, std::size_t(tokens)),
                                        indices = piece(at, rest.size());
    args.slots = PageTable{indices, indptr, last, batch_indices, seq_positions};
  }
  try {
    if (external) {
      // Its values: the input's int32 words read as floats (NaN and infinities included), else 0.5.
      std::vector<float> values(given_rows * 8, 0.5f);
      for (std::size_t i = 0; i < values.size() && !rest.empty(); ++i) {
        std::memcpy(&values[i], &rest[i % rest.size()], 4);
      }
      const auto table = import_cos_sin_cache(rope, values, table_rows);
      if (sane) append(rope, args, cache, table);
    } else if (sane) {
      append(rope, args, cache);
    } else {
      (void)resolve_slots(args, cache);
    }
  } catch (const Error&) {
  }
  return 0;
}
