// Position ids beyond one text stream (ropekit/position_ids.hpp): packing, context-parallel shards,
// speculative decoding. Index arithmetic only; every argument checked before any output is formed.
#include "ropekit/position_ids.hpp"
#include "ropekit/spec.hpp"  // kPositionLimit

#include <fmt/format.h>

#include <numeric>

#include "ropekit/error.hpp"

namespace ropekit {
namespace {

void check_cu_seqlens(std::span<const std::int64_t> cu, const char* caller) {
  if (cu.empty()) throw Error(fmt::format("{}: cu_seqlens is empty: it needs at least [0]", caller));
  if (cu[0] != 0) throw Error(fmt::format("{}: cu_seqlens[0] = {}: must be 0", caller, cu[0]));
  for (std::size_t d = 1; d < cu.size(); ++d) {
    if (cu[d] < cu[d - 1]) {
      throw Error(fmt::format("{}: cu_seqlens[{}] = {} is below cu_seqlens[{}] = {}: must not decrease", caller, d,
                              cu[d], d - 1, cu[d - 1]));
    }
  }
  if (cu.back() >= kPositionLimit) {
    throw Error(fmt::format("{}: cu_seqlens ends at {}: beyond 2^47 tokens", caller, cu.back()));
  }
}

void check_offsets(std::span<const std::int64_t> cu, std::span<const std::int64_t> offsets, const char* caller) {
  if (offsets.empty()) return;
  if (offsets.size() != cu.size() - 1) {
    throw Error(
        fmt::format("{}: start_offsets has {} values: one per document ({})", caller, offsets.size(), cu.size() - 1));
  }
  for (std::size_t d = 0; d < offsets.size(); ++d) {
    const std::int64_t length = cu[d + 1] - cu[d];
    if (offsets[d] < 0 || offsets[d] > kPositionLimit - length) {
      throw Error(fmt::format("{}: start_offsets[{}] = {}: must lie in [0, 2^47 − its document's {} tokens]", caller, d,
                              offsets[d], length));
    }
  }
}

// The unit a sharding splits a sequence into, per rank: the length must be a multiple of size × it.
std::int64_t split_unit(const CpShard& s) {
  switch (s.sharding) {
    case CpSharding::Contiguous: return 1;
    case CpSharding::ZigZag: return 2;
    case CpSharding::Striped: return s.stripe;
  }
  return 1;
}

void check_shard(const CpShard& s, const char* caller) {
  if (s.size < 1) throw Error(fmt::format("{}: cp size = {}: must be at least 1", caller, s.size));
  if (s.rank < 0 || s.rank >= s.size) {
    throw Error(fmt::format("{}: cp rank = {}: must lie in [0, size = {})", caller, s.rank, s.size));
  }
  if (s.sharding != CpSharding::Contiguous && s.sharding != CpSharding::ZigZag && s.sharding != CpSharding::Striped) {
    throw Error(fmt::format("{}: sharding = {}: not a CpSharding", caller, static_cast<int>(s.sharding)));
  }
  if (s.sharding == CpSharding::Striped && s.stripe < 1) {
    throw Error(fmt::format("{}: stripe = {}: must be at least 1", caller, s.stripe));
  }
}

const char* name_of(CpSharding s) {
  switch (s) {
    case CpSharding::Contiguous: return "contiguous";
    case CpSharding::ZigZag: return "zig-zag";
    case CpSharding::Striped: return "striped";
  }
  return "?";
}

// Appends to `out` the indices first + j (j in [0, length)) rank s.rank holds; length already checked.
void shard_into(std::int64_t first, std::int64_t length, const CpShard& s, std::vector<std::int64_t>& out) {
  const std::int64_t n = s.size, r = s.rank;
  switch (s.sharding) {
    case CpSharding::Contiguous: {
      const std::int64_t per = length / n;
      for (std::int64_t j = 0; j < per; ++j) out.push_back(first + r * per + j);
      break;
    }
    case CpSharding::ZigZag: {
      const std::int64_t chunk = length / (2 * n);
      for (const std::int64_t c : {r, 2 * n - 1 - r}) {
        for (std::int64_t j = 0; j < chunk; ++j) out.push_back(first + c * chunk + j);
      }
      break;
    }
    case CpSharding::Striped: {
      for (std::int64_t t = r * s.stripe; t < length; t += n * s.stripe) {
        for (std::int64_t j = 0; j < s.stripe; ++j) out.push_back(first + t + j);
      }
      break;
    }
  }
}

void check_divisible(std::int64_t length, const CpShard& s, const char* caller, const char* what) {
  const std::int64_t unit = std::int64_t(s.size) * split_unit(s);
  if (length % unit != 0) {
    throw Error(fmt::format("{}: {} = {}: {} sharding over {} ranks needs a multiple of {}", caller, what, length,
                            name_of(s.sharding), s.size, unit));
  }
}

void check_parents(std::span<const std::int64_t> parents, const char* caller) {
  for (std::size_t i = 0; i < parents.size(); ++i) {
    if (parents[i] < -1 || parents[i] >= std::int64_t(i)) {
      throw Error(
          fmt::format("{}: parents[{}] = {}: must be −1 (the root) or an earlier node in [0, {}) — a later "
                      "node or itself would make a cycle",
                      caller, i, parents[i], i));
    }
  }
}

}  // namespace

std::vector<std::int64_t> packed_positions(std::span<const std::int64_t> cu_seqlens,
                                           std::span<const std::int64_t> start_offsets) {
  check_cu_seqlens(cu_seqlens, "packed_positions");
  check_offsets(cu_seqlens, start_offsets, "packed_positions");
  std::vector<std::int64_t> out(std::size_t(cu_seqlens.back()));
  for (std::size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    const std::int64_t offset = start_offsets.empty() ? 0 : start_offsets[d];
    for (std::int64_t t = cu_seqlens[d]; t < cu_seqlens[d + 1]; ++t) out[std::size_t(t)] = t - cu_seqlens[d] + offset;
  }
  return out;
}

std::vector<std::int64_t> cu_seqlens_from_eod(std::span<const std::int64_t> tokens, std::int64_t eod) {
  std::vector<std::int64_t> cu{0};
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] == eod) cu.push_back(std::int64_t(t) + 1);
  }
  if (cu.back() != std::int64_t(tokens.size())) cu.push_back(std::int64_t(tokens.size()));
  return cu;
}

std::vector<std::int64_t> cp_indices(std::int64_t seq_len, const CpShard& shard) {
  check_shard(shard, "cp_indices");
  if (seq_len < 0 || seq_len >= kPositionLimit) {
    throw Error(fmt::format("cp_indices: seq_len = {}: must lie in [0, 2^47)", seq_len));
  }
  check_divisible(seq_len, shard, "cp_indices", "seq_len");
  std::vector<std::int64_t> out;
  out.reserve(std::size_t(seq_len / shard.size));
  shard_into(0, seq_len, shard, out);
  return out;
}

std::vector<std::int64_t> cp_indices_packed(std::span<const std::int64_t> cu_seqlens, const CpShard& shard) {
  check_shard(shard, "cp_indices_packed");
  check_cu_seqlens(cu_seqlens, "cp_indices_packed");
  for (std::size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    const std::string what = fmt::format("document {}'s length (cu_seqlens[{}] − cu_seqlens[{}])", d, d + 1, d);
    check_divisible(cu_seqlens[d + 1] - cu_seqlens[d], shard, "cp_indices_packed", what.c_str());
  }
  std::vector<std::int64_t> out;
  out.reserve(std::size_t(cu_seqlens.back() / shard.size));
  for (std::size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    shard_into(cu_seqlens[d], cu_seqlens[d + 1] - cu_seqlens[d], shard, out);
  }
  return out;
}

std::vector<std::int64_t> cp_positions(std::int64_t seq_len, const CpShard& shard, std::int64_t start) {
  if (start < 0 || (seq_len >= 0 && start > kPositionLimit - seq_len)) {
    throw Error(fmt::format("cp_positions: start = {}: must lie in [0, 2^47 − seq_len = {}]", start, seq_len));
  }
  std::vector<std::int64_t> out = cp_indices(seq_len, shard);
  for (std::int64_t& p : out) p += start;
  return out;
}

std::vector<std::int64_t> cp_positions_packed(std::span<const std::int64_t> cu_seqlens, const CpShard& shard,
                                              std::span<const std::int64_t> start_offsets) {
  std::vector<std::int64_t> out = cp_indices_packed(cu_seqlens, shard);
  check_offsets(cu_seqlens, start_offsets, "cp_positions_packed");
  // The rank's indices come document by document: each becomes its position in its document, without the
  // global positions of every rank's tokens.
  std::size_t d = 0;
  for (std::int64_t& i : out) {
    while (i >= cu_seqlens[d + 1]) ++d;
    i = i - cu_seqlens[d] + (start_offsets.empty() ? 0 : start_offsets[d]);
  }
  return out;
}

std::vector<std::int64_t> verify_positions(std::int64_t cached, std::int64_t count) {
  if (cached < 0 || count < 0 || cached > kPositionLimit - count) {
    throw Error(fmt::format("verify_positions: cached = {}, count = {}: both must be ≥ 0 and their sum below 2^47",
                            cached, count));
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(count));
  std::iota(out.begin(), out.end(), cached);
  return out;
}

std::vector<std::int64_t> tree_positions(std::span<const std::int64_t> parents, std::int64_t root_position) {
  check_parents(parents, "tree_positions");
  if (root_position < 0 || root_position > kPositionLimit - 1 - std::int64_t(parents.size())) {
    throw Error(fmt::format("tree_positions: root_position = {}: must lie in [0, 2^47 − 1 − {} nodes]", root_position,
                            parents.size()));
  }
  std::vector<std::int64_t> out(parents.size());
  for (std::size_t i = 0; i < parents.size(); ++i) {
    out[i] = (parents[i] < 0 ? root_position : out[std::size_t(parents[i])]) + 1;
  }
  return out;
}

std::vector<std::uint8_t> tree_mask(std::span<const std::int64_t> parents) {
  check_parents(parents, "tree_mask");
  const std::size_t n = parents.size();
  std::vector<std::uint8_t> mask(n * n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    // A node sees what its parent sees, and itself.
    if (parents[i] >= 0) {
      const std::size_t p = std::size_t(parents[i]);
      std::copy(mask.begin() + std::ptrdiff_t(p * n), mask.begin() + std::ptrdiff_t(p * n + n),
                mask.begin() + std::ptrdiff_t(i * n));
    }
    mask[i * n + i] = 1;
  }
  return mask;
}

std::vector<std::pair<std::int64_t, std::int64_t>> rejected_slot_ranges(std::span<const std::int64_t> parents,
                                                                        std::span<const std::int64_t> accepted,
                                                                        std::int64_t base_slot) {
  check_parents(parents, "rejected_slot_ranges");
  if (base_slot < 0) throw Error(fmt::format("rejected_slot_ranges: base_slot = {}: must be ≥ 0", base_slot));
  const auto n = std::int64_t(parents.size());
  std::vector<std::uint8_t> keep(parents.size(), 0);
  std::int64_t expected_parent = -1;
  for (std::size_t a = 0; a < accepted.size(); ++a) {
    const std::int64_t node = accepted[a];
    if (node < 0 || node >= n) {
      throw Error(fmt::format("rejected_slot_ranges: accepted[{}] = {}: not a node in [0, {})", a, node, n));
    }
    if (parents[std::size_t(node)] != expected_parent) {
      throw Error(
          fmt::format("rejected_slot_ranges: accepted[{}] = {} has parent {}, not {}: the accepted nodes must "
                      "be a path from a root child down",
                      a, node, parents[std::size_t(node)], expected_parent));
    }
    keep[std::size_t(node)] = 1;
    expected_parent = node;
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  for (std::int64_t i = n; i > 0;) {
    if (keep[std::size_t(i - 1)]) {
      --i;
      continue;
    }
    const std::int64_t last = i;
    while (i > 0 && !keep[std::size_t(i - 1)]) --i;
    ranges.emplace_back(base_slot + i, base_slot + last);
  }
  return ranges;
}

}  // namespace ropekit
