// Position ids beyond one text stream (ropekit/position_ids.hpp) for Python: sequences in, NumPy int64 arrays
// out. Argument names follow the references' (cu_seqlens, cp_size, cp_rank).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.hpp"
#include "ropekit/error.hpp"
#include "ropekit/position_ids.hpp"

namespace py = pybind11;

namespace ropekit::python {
namespace {

py::array_t<std::int64_t> to_array(const std::vector<std::int64_t>& v) {
  return py::array_t<std::int64_t>(py::ssize_t(v.size()), v.data());
}

CpSharding sharding_of(const std::string& name) {
  if (name == "contiguous") return CpSharding::Contiguous;
  if (name == "zigzag") return CpSharding::ZigZag;
  if (name == "striped") return CpSharding::Striped;
  throw Error("sharding = \"" + name + "\": one of contiguous, zigzag, striped");
}

CpShard shard_of(int cp_size, int cp_rank, const std::string& sharding, std::int64_t stripe) {
  return {.size = cp_size, .rank = cp_rank, .sharding = sharding_of(sharding), .stripe = stripe};
}

std::vector<std::int64_t> or_empty(const std::optional<std::vector<std::int64_t>>& v) {
  return v ? *v : std::vector<std::int64_t>{};
}

}  // namespace

void bind_positions(py::module_& m) {
  m.def(
      "packed_positions",
      [](const std::vector<std::int64_t>& cu_seqlens, std::optional<std::vector<std::int64_t>> start_offsets) {
        return to_array(packed_positions(cu_seqlens, or_empty(start_offsets)));
      },
      py::arg("cu_seqlens"), py::arg("start_offsets") = py::none(),
      "Positions of a packed batch: each document restarts at 0 (or at its start offset).");
  m.def(
      "cu_seqlens_from_eod",
      [](const std::vector<std::int64_t>& tokens, std::int64_t eod) {
        return to_array(cu_seqlens_from_eod(tokens, eod));
      },
      py::arg("tokens"), py::arg("eod"),
      "Document boundaries at end-of-document tokens (Megatron's reset_position_ids).");
  m.def(
      "cp_indices",
      [](std::int64_t seq_len, int cp_size, int cp_rank, const std::string& sharding, std::int64_t stripe,
         std::optional<std::vector<std::int64_t>> cu_seqlens) {
        const CpShard s = shard_of(cp_size, cp_rank, sharding, stripe);
        return to_array(cu_seqlens ? cp_indices_packed(*cu_seqlens, s) : cp_indices(seq_len, s));
      },
      py::arg("seq_len") = 0, py::kw_only(), py::arg("cp_size"), py::arg("cp_rank"), py::arg("sharding") = "zigzag",
      py::arg("stripe") = 1, py::arg("cu_seqlens") = py::none(),
      "The global token indices a context-parallel rank holds (per document when cu_seqlens is given).");
  m.def(
      "cp_positions",
      [](std::int64_t seq_len, int cp_size, int cp_rank, const std::string& sharding, std::int64_t stripe,
         std::int64_t start, std::optional<std::vector<std::int64_t>> cu_seqlens,
         std::optional<std::vector<std::int64_t>> start_offsets) {
        const CpShard s = shard_of(cp_size, cp_rank, sharding, stripe);
        return to_array(cu_seqlens ? cp_positions_packed(*cu_seqlens, s, or_empty(start_offsets))
                                   : cp_positions(seq_len, s, start));
      },
      py::arg("seq_len") = 0, py::kw_only(), py::arg("cp_size"), py::arg("cp_rank"), py::arg("sharding") = "zigzag",
      py::arg("stripe") = 1, py::arg("start") = 0, py::arg("cu_seqlens") = py::none(),
      py::arg("start_offsets") = py::none(), "The positions of the tokens a context-parallel rank holds.");
  m.def(
      "verify_positions",
      [](std::int64_t cached, std::int64_t count) { return to_array(verify_positions(cached, count)); },
      py::arg("cached"), py::arg("count"));
  m.def(
      "tree_positions",
      [](const std::vector<std::int64_t>& parents, std::int64_t root_position) {
        return to_array(tree_positions(parents, root_position));
      },
      py::arg("parents"), py::arg("root_position"),
      "Draft-tree positions: root_position + depth (parents[i] in [-1, i)).");
  m.def(
      "tree_mask",
      [](const std::vector<std::int64_t>& parents) {
        const std::vector<std::uint8_t> mask = tree_mask(parents);
        const auto n = py::ssize_t(parents.size());
        py::array_t<bool> out({n, n});
        for (py::ssize_t i = 0; i < n * n; ++i) out.mutable_data()[i] = mask[std::size_t(i)] != 0;
        return out;
      },
      py::arg("parents"), "[n, n] booleans: node i sees node j (j is i or an ancestor).");
  m.def(
      "rejected_slot_ranges",
      [](const std::vector<std::int64_t>& parents, const std::vector<std::int64_t>& accepted, std::int64_t base_slot) {
        return rejected_slot_ranges(parents, accepted, base_slot);
      },
      py::arg("parents"), py::arg("accepted"), py::arg("base_slot"),
      "The [first, last) cache slot ranges to erase after verification, last first.");
}

}  // namespace ropekit::python
