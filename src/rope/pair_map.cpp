#include "ropekit/pair_map.hpp"

namespace ropekit {
namespace {

// Consecutive sections, section 0 first: the one that holds pair j (M-RoPE sectioned, axial RoPE).
std::uint8_t section_of(const std::vector<int>& sections, int pair) {
  int end = 0;
  for (std::size_t axis = 0; axis < sections.size(); ++axis) {
    end += sections[axis];
    if (pair < end) return static_cast<std::uint8_t>(axis);
  }
  return static_cast<std::uint8_t>(sections.size() - 1);  // unreachable for a validated spec
}

// Which M-RoPE position stream (0 = t, 1 = h, 2 = w) drives pair j.
std::uint8_t mrope_axis(const MRope& mrope, int pair) {
  const std::vector<int>& s = mrope.sections;
  if (mrope.layout == MRopeLayout::Interleaved) {
    // HF Qwen3-VL apply_interleaved_mrope: freqs_t[..., offset : 3·s[axis] : 3] = freqs[axis].
    if (pair % 3 == 1 && pair < 3 * s[1]) return 1;
    if (pair % 3 == 2 && pair < 3 * s[2]) return 2;
    return 0;
  }
  // HF Qwen2-VL apply_multimodal_rotary_pos_emb: consecutive chunks of the frequency axis.
  return section_of(s, pair);
}

}  // namespace

PairMap make_pair_map(const Spec& spec) {
  spec.validate();
  PairMap map;
  map.head_dim = spec.head_dim;
  map.rotary_dim = spec.rotary_dim;
  map.pairing = spec.pairing;
  map.num_axes = spec.num_axes();
  const int pairs = spec.num_pairs();
  for (int j = 0; j < pairs; ++j) {
    const bool interleaved = spec.pairing == Pairing::Interleaved;
    map.lane_a.push_back(interleaved ? 2 * j : j);
    map.lane_b.push_back(interleaved ? 2 * j + 1 : j + pairs);
    map.axis.push_back(spec.mrope ? mrope_axis(*spec.mrope, j) : spec.axial ? section_of(spec.axial->sections, j) : 0);
  }
  return map;
}

}  // namespace ropekit
