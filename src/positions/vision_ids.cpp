// Vision encoders' patch coordinates (ropekit/position_ids.hpp): transcriptions of Hugging Face's index functions
// (transformers.vision_utils and the Pixtral and Llama 4 modeling files, v5.15.0), every argument checked first.
#include <fmt/format.h>

#include <algorithm>

#include "ropekit/error.hpp"
#include "ropekit/position_ids.hpp"

namespace ropekit {
namespace {

// Checks each grid and returns the total token count t·h·w over them (≤ kMaxVisionTokens).
std::int64_t checked_tokens(std::string_view fn, std::string_view arg, std::span<const VisionGrid> grids,
                            std::int64_t merge) {
  if (merge < 1) throw Error(fmt::format("{}: spatial_merge_size = {}: must be at least 1", fn, merge));
  std::int64_t total = 0;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    const VisionGrid& g = grids[i];
    if (g.t < 1 || g.h < 1 || g.w < 1) {
      throw Error(
          fmt::format("{}: {}[{}] = ({}, {}, {}): every dimension must be at least 1", fn, arg, i, g.t, g.h, g.w));
    }
    if (g.h % merge != 0 || g.w % merge != 0) {
      throw Error(fmt::format("{}: {}[{}] = ({}, {}, {}): spatial_merge_size = {} does not divide h and w", fn, arg, i,
                              g.t, g.h, g.w, merge));
    }
    const std::int64_t left = kMaxVisionTokens - total;
    if (g.t > left || g.h > left / g.t || g.w > left / (g.t * g.h)) {
      throw Error(fmt::format("{}: {}[{}] = ({}, {}, {}): more than {} tokens in all (kMaxVisionTokens)", fn, arg, i,
                              g.t, g.h, g.w, kMaxVisionTokens));
    }
    total += g.t * g.h * g.w;
  }
  return total;
}

}  // namespace

std::vector<std::int64_t> vision_position_ids(std::span<const VisionGrid> grids, std::int64_t merge,
                                              bool include_temporal) {
  const std::int64_t n = checked_tokens("vision_position_ids", "grids", grids, merge);
  const int axes = include_temporal ? 3 : 2;
  std::vector<std::int64_t> out(static_cast<std::size_t>(axes * n));
  std::int64_t* t_out = include_temporal ? out.data() : nullptr;
  std::int64_t* h_out = out.data() + (axes - 2) * n;
  std::int64_t* w_out = out.data() + (axes - 1) * n;
  std::int64_t k = 0;
  for (const VisionGrid& g : grids) {
    // meshgrid(h, w).reshape(h/m, m, w/m, m).transpose(1, 2): block (bh, bw) in row-major order, inside it the m×m
    // patches row-major; then the whole frame once per t.
    for (std::int64_t t = 0; t < g.t; ++t) {
      for (std::int64_t bh = 0; bh < g.h / merge; ++bh) {
        for (std::int64_t bw = 0; bw < g.w / merge; ++bw) {
          for (std::int64_t ih = 0; ih < merge; ++ih) {
            for (std::int64_t iw = 0; iw < merge; ++iw, ++k) {
              if (t_out != nullptr) t_out[k] = t;
              h_out[k] = bh * merge + ih;
              w_out[k] = bw * merge + iw;
            }
          }
        }
      }
    }
  }
  return out;
}

VisionWindows vision_window_index(std::span<const VisionGrid> grids, std::int64_t merge, std::int64_t window_size,
                                  std::int64_t patch_size) {
  checked_tokens("vision_window_index", "grids", grids, merge);
  if (patch_size < 1) throw Error(fmt::format("vision_window_index: patch_size = {}: must be at least 1", patch_size));
  // HF: window_size // spatial_merge_size // patch_size merged patches per window side.
  const std::int64_t side = window_size < 0 ? 0 : window_size / merge / patch_size;
  if (side < 1) {
    throw Error(fmt::format(
        "vision_window_index: window_size = {}: must hold at least one merged patch (spatial_merge_size {} x "
        "patch_size {})",
        window_size, merge, patch_size));
  }
  const std::int64_t unit = merge * merge;
  VisionWindows out;
  std::vector<std::int64_t> cu = {0};
  std::int64_t base = 0;
  for (const VisionGrid& g : grids) {
    const std::int64_t lh = g.h / merge, lw = g.w / merge;
    // HF pads to a whole number of windows plus, when the side already divides, one more (empty) window row or
    // column: pad = side − l % side. Empty windows repeat a boundary that unique_consecutive then removes.
    const std::int64_t wins_h = (lh + side - lh % side) / side, wins_w = (lw + side - lw % side) / side;
    for (std::int64_t t = 0; t < g.t; ++t) {
      for (std::int64_t wh = 0; wh < wins_h; ++wh) {
        for (std::int64_t ww = 0; ww < wins_w; ++ww) {
          std::int64_t count = 0;
          for (std::int64_t y = wh * side; y < std::min(lh, (wh + 1) * side); ++y) {
            for (std::int64_t x = ww * side; x < std::min(lw, (ww + 1) * side); ++x, ++count) {
              out.window_index.push_back(base + (t * lh + y) * lw + x);
            }
          }
          cu.push_back(cu.back() + count * unit);
        }
      }
    }
    base += g.t * lh * lw;
  }
  cu.erase(std::unique(cu.begin(), cu.end()), cu.end());
  out.cu_window_seqlens = std::move(cu);
  return out;
}

std::vector<std::int64_t> window_order(std::span<const std::int64_t> positions, int axes,
                                       std::span<const std::int64_t> window_index, std::int64_t unit) {
  if (axes < 1) throw Error(fmt::format("window_order: axes = {}: must be at least 1", axes));
  if (unit < 1) throw Error(fmt::format("window_order: unit = {}: must be at least 1", unit));
  if (positions.size() % static_cast<std::size_t>(axes) != 0) {
    throw Error(
        fmt::format("window_order: positions hold {} values: not {} streams of equal length", positions.size(), axes));
  }
  const std::int64_t n = static_cast<std::int64_t>(positions.size()) / axes;
  if (n % unit != 0) throw Error(fmt::format("window_order: {} tokens: not a multiple of unit = {}", n, unit));
  const std::int64_t groups = n / unit;
  if (static_cast<std::int64_t>(window_index.size()) != groups) {
    throw Error(fmt::format("window_order: window_index has {} entries: must have one per group of {} tokens, {}",
                            window_index.size(), unit, groups));
  }
  std::vector<std::int64_t> out(positions.size());
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t src = window_index[static_cast<std::size_t>(g)];
    if (src < 0 || src >= groups) {
      throw Error(fmt::format("window_order: window_index[{}] = {}: outside [0, {})", g, src, groups));
    }
    for (int a = 0; a < axes; ++a) {
      std::copy_n(positions.begin() + a * n + src * unit, unit, out.begin() + a * n + g * unit);
    }
  }
  return out;
}

std::vector<std::int64_t> pixtral_position_ids(std::span<const VisionGrid> images, std::int64_t max_side) {
  if (max_side < 1) {
    throw Error(fmt::format("pixtral_position_ids: max_patches_per_side = {}: must be at least 1", max_side));
  }
  checked_tokens("pixtral_position_ids", "images", images, 1);
  std::int64_t n = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const VisionGrid& g = images[i];
    if (g.t != 1 || g.h > max_side || g.w > max_side) {
      throw Error(fmt::format(
          "pixtral_position_ids: images[{}] = ({}, {}, {}): one frame of at most max_patches_per_side = {} patches "
          "a side",
          i, g.t, g.h, g.w, max_side));
    }
    n += g.h * g.w;
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(2 * n));
  std::int64_t k = 0;
  for (const VisionGrid& g : images) {
    for (std::int64_t r = 0; r < g.h; ++r) {
      for (std::int64_t c = 0; c < g.w; ++c, ++k) {
        out[k] = r;
        out[n + k] = c;
      }
    }
  }
  return out;
}

std::vector<std::int64_t> llama4_vision_position_ids(std::int64_t side) {
  // side² + 1 tokens within kMaxVisionTokens.
  if (side < 1 || side > 4095) {
    throw Error(fmt::format("llama4_vision_position_ids: patches_per_side = {}: must be in [1, 4095]", side));
  }
  const std::int64_t n = side * side + 1;
  std::vector<std::int64_t> out(static_cast<std::size_t>(2 * n), 0);  // the class token, last, stays (0, 0)
  for (std::int64_t i = 0; i + 1 < n; ++i) {
    out[i] = i % side + 1;      // x: img_idx % idx, + 1
    out[n + i] = i / side + 1;  // y: img_idx // idx, + 1
  }
  return out;
}

}  // namespace ropekit
