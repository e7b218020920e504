// M-RoPE position ids (ropekit/position_ids.hpp): Hugging Face's get_rope_index of the Qwen-VL family and
// GLM-4V, both indexing rules, every argument checked first.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ropekit/error.hpp"
#include "ropekit/position_ids.hpp"
#include "ropekit/spec.hpp"  // kPositionLimit

namespace ropekit {
namespace {

const char* family_name(MropeFamily f) {
  switch (f) {
    case MropeFamily::Qwen2Vl: return "qwen2_vl";
    case MropeFamily::Qwen25Vl: return "qwen2_5_vl";
    case MropeFamily::Qwen3Vl: return "qwen3_vl";
    case MropeFamily::Glm4v: return "glm4v";
  }
  return "?";
}

void check_grid(const VisionGrid& g, std::int64_t merge, const char* what, std::size_t i) {
  if (g.t < 1 || g.h < 1 || g.w < 1) {
    throw Error(fmt::format("mrope_position_ids: {}[{}] = ({}, {}, {}): every dimension must be at least 1", what, i,
                            g.t, g.h, g.w));
  }
  if (g.h % merge != 0 || g.w % merge != 0) {
    throw Error(
        fmt::format("mrope_position_ids: {}[{}] = ({}, {}, {}): spatial_merge_size = {} does not divide h "
                    "and w",
                    what, i, g.t, g.h, g.w, merge));
  }
  if (g.t > kPositionLimit / g.h || g.t * g.h > kPositionLimit / g.w) {
    throw Error(fmt::format("mrope_position_ids: {}[{}] = ({}, {}, {}): too many patches", what, i, g.t, g.h, g.w));
  }
}

}  // namespace

void mrope_position_ids(MropeFamily family, MropeRule indexing, const MropeInput& in, std::span<std::int64_t> positions,
                        std::span<std::int64_t> deltas) {
  if (family != MropeFamily::Qwen2Vl && family != MropeFamily::Qwen25Vl && family != MropeFamily::Qwen3Vl &&
      family != MropeFamily::Glm4v) {
    throw Error(fmt::format("mrope_position_ids: family = {}: not an MropeFamily", static_cast<int>(family)));
  }
  if (indexing != MropeRule::TokenTypes && indexing != MropeRule::TokenScan) {
    throw Error(fmt::format("mrope_position_ids: rule = {}: not an MropeRule", static_cast<int>(indexing)));
  }
  if (family == MropeFamily::Glm4v && indexing == MropeRule::TokenScan) {
    throw Error(
        "mrope_position_ids: glm4v with the token-scanning rule: GLM-4V's transformers 4.x indexing scans its "
        "own video start/end tokens and is not implemented; use MropeRule::TokenTypes (transformers 5)");
  }
  if (in.batch < 1 || in.seq < 0 || in.seq > kPositionLimit / in.batch) {
    throw Error(fmt::format("mrope_position_ids: batch = {}, seq = {}: batch must be at least 1 and seq at least 0",
                            in.batch, in.seq));
  }
  const auto cells = std::size_t(in.batch * in.seq);
  if (in.token_types.size() != cells) {
    throw Error(fmt::format("mrope_position_ids: token_types has {} values: batch × seq = {} × {} = {}",
                            in.token_types.size(), in.batch, in.seq, cells));
  }
  if (!in.attention_mask.empty() && in.attention_mask.size() != cells) {
    throw Error(fmt::format("mrope_position_ids: attention_mask has {} values: batch × seq = {}",
                            in.attention_mask.size(), cells));
  }
  if (in.spatial_merge_size < 1) {
    throw Error(fmt::format("mrope_position_ids: spatial_merge_size = {}: must be at least 1", in.spatial_merge_size));
  }
  if (in.tokens_per_second < 0) {
    throw Error(fmt::format("mrope_position_ids: tokens_per_second = {}: must be ≥ 0", in.tokens_per_second));
  }
  for (std::size_t i = 0; i < cells; ++i) {
    if (in.token_types[i] < 0 || in.token_types[i] > 2) {
      throw Error(fmt::format("mrope_position_ids: token_types[{}] = {}: 0 (text), 1 (image) or 2 (video)", i,
                              in.token_types[i]));
    }
  }
  const std::int64_t m = in.spatial_merge_size;
  for (std::size_t i = 0; i < in.image_grids.size(); ++i) check_grid(in.image_grids[i], m, "image_grids", i);
  for (std::size_t i = 0; i < in.video_grids.size(); ++i) check_grid(in.video_grids[i], m, "video_grids", i);
  const bool qwen25 = family == MropeFamily::Qwen25Vl;
  if (!in.second_per_grid_ts.empty()) {
    if (!qwen25) {
      throw Error(fmt::format("mrope_position_ids: second_per_grid_ts is given: only qwen2_5_vl reads it, not {}",
                              family_name(family)));
    }
    if (in.second_per_grid_ts.size() != in.video_grids.size()) {
      throw Error(fmt::format("mrope_position_ids: second_per_grid_ts has {} values: one per video ({})",
                              in.second_per_grid_ts.size(), in.video_grids.size()));
    }
    for (std::size_t i = 0; i < in.second_per_grid_ts.size(); ++i) {
      const double s = in.second_per_grid_ts[i];
      if (!std::isfinite(s) || s < 0 || s > 1e9) {
        throw Error(fmt::format("mrope_position_ids: second_per_grid_ts[{}] = {}: must be finite and ≥ 0", i, s));
      }
    }
  }
  // Qwen3-VL and GLM-4V: every video frame is its own item (timestamps in the text between frames).
  struct Item {
    VisionGrid grid;
    std::int64_t interval;  // Qwen2.5-VL's time step per frame (TokenTypes); 1 elsewhere
    double seconds;         // Qwen2.5-VL's second_per_grid_t (TokenScan)
  };
  std::vector<Item> images, videos;
  for (const VisionGrid& g : in.image_grids) images.push_back({g, 1, 1.0});
  for (std::size_t v = 0; v < in.video_grids.size(); ++v) {
    const VisionGrid& g = in.video_grids[v];
    const double seconds = in.second_per_grid_ts.empty() ? 1.0 : in.second_per_grid_ts[v];
    if (family == MropeFamily::Qwen3Vl || family == MropeFamily::Glm4v) {
      for (std::int64_t f = 0; f < g.t; ++f) videos.push_back({{1, g.h, g.w}, 1, 1.0});
    } else {
      // int(second_per_grid_t): Python's truncation toward zero, as transformers 5 applies it.
      const std::int64_t interval = qwen25 ? in.tokens_per_second * std::int64_t(seconds) : 1;
      videos.push_back({g, interval, seconds});
    }
  }
  if (positions.size() != 3 * cells || deltas.size() != std::size_t(in.batch)) {
    throw Error(
        fmt::format("mrope_position_ids: positions has {} values and deltas {}: need 3 × batch × seq = {} and "
                    "batch = {}",
                    positions.size(), deltas.size(), 3 * cells, in.batch));
  }
  struct {
    std::span<std::int64_t> positions, deltas;
  } out{positions, deltas};
  // Padding: 0 in transformers 5, 1 in 4.57 (its position_ids start as ones; the text-only path fills 1).
  const std::int64_t padding = indexing == MropeRule::TokenScan ? 1 : 0;
  const bool text_only_path = indexing == MropeRule::TokenScan && in.image_grids.empty() && in.video_grids.empty();
  std::fill(out.positions.begin(), out.positions.end(), padding);
  std::fill(out.deltas.begin(), out.deltas.end(), 0);
  std::size_t next_image = 0, next_video = 0;
  std::vector<std::int64_t> kept;  // the unpadded token indices of one sequence
  for (std::int64_t b = 0; b < in.batch; ++b) {
    kept.clear();
    for (std::int64_t t = 0; t < in.seq; ++t) {
      const std::size_t at = std::size_t(b * in.seq + t);
      if (in.attention_mask.empty() || in.attention_mask[at] != 0) kept.push_back(t);
    }
    if (kept.empty()) {
      throw Error(fmt::format("mrope_position_ids: sequence {} has no token the attention_mask keeps", b));
    }
    const auto set = [&](std::int64_t t, std::int64_t tp, std::int64_t hp, std::int64_t wp) {
      const std::size_t at = std::size_t(b * in.seq + t);
      out.positions[at] = tp;
      out.positions[cells + at] = hp;
      out.positions[2 * cells + at] = wp;
    };
    std::int64_t pos = 0, max_position = 0;
    for (std::size_t k = 0; k < kept.size();) {
      const std::int32_t type = in.token_types[std::size_t(b * in.seq + kept[k])];
      std::size_t end = k;
      while (end < kept.size() && in.token_types[std::size_t(b * in.seq + kept[end])] == type) ++end;
      const auto run = std::int64_t(end - k);
      if (type == 0) {
        for (std::int64_t i = 0; i < run; ++i) set(kept[k + std::size_t(i)], pos + i, pos + i, pos + i);
        max_position = std::max(max_position, pos + run - 1);
        pos += run;
      } else {
        std::vector<Item>& items = type == 1 ? images : videos;
        std::size_t& next = type == 1 ? next_image : next_video;
        const char* what = type == 1 ? "image" : "video";
        if (next >= items.size()) {
          throw Error(fmt::format("mrope_position_ids: sequence {} token {} starts {} {} of only {} given{}", b,
                                  kept[k], what, next, items.size(),
                                  type == 2 && (family == MropeFamily::Qwen3Vl || family == MropeFamily::Glm4v)
                                      ? " (video frames: each frame is one item)"
                                      : ""));
        }
        const Item& item = items[next++];
        const std::int64_t gt = item.grid.t, gh = item.grid.h / m, gw = item.grid.w / m;
        if (run != gt * gh * gw) {
          throw Error(
              fmt::format("mrope_position_ids: sequence {}: {} tokens from token {} for {} {} whose grid ({}, "
                          "{}, {}) merged by {} holds {}",
                          b, run, kept[k], what, next - 1, item.grid.t, item.grid.h, item.grid.w, m, gt * gh * gw));
        }
        std::int64_t step = item.interval;
        if (indexing == MropeRule::TokenScan && qwen25 && type == 2) {
          step = std::int64_t(item.seconds) * in.tokens_per_second;
        }
        std::size_t i = k;
        std::int64_t largest = pos;
        for (std::int64_t ti = 0; ti < gt; ++ti) {
          for (std::int64_t hi = 0; hi < gh; ++hi) {
            for (std::int64_t wi = 0; wi < gw; ++wi) {
              const std::int64_t tp = ti * step + pos;
              set(kept[i++], tp, hi + pos, wi + pos);
              largest = std::max({largest, tp, hi + pos, wi + pos});
            }
          }
        }
        max_position = std::max(max_position, largest);
        pos = indexing == MropeRule::TokenTypes ? pos + std::max(gh, gw) : largest + 1;
      }
      if (pos >= kPositionLimit) throw Error("mrope_position_ids: positions reach 2^47");
      k = end;
    }
    // The decode offset: transformers 5 subtracts the unpadded length; 4.57 the padded one (and its text-only
    // path takes the maximum over the padding's 1s too).
    if (indexing == MropeRule::TokenTypes) {
      out.deltas[std::size_t(b)] = max_position + 1 - std::int64_t(kept.size());
    } else {
      if (text_only_path && std::int64_t(kept.size()) < in.seq) max_position = std::max<std::int64_t>(max_position, 1);
      out.deltas[std::size_t(b)] = max_position + 1 - in.seq;
    }
  }
  if (next_image != images.size() || next_video != videos.size()) {
    throw Error(
        fmt::format("mrope_position_ids: the tokens use {} of {} images and {} of {} video items: grids are "
                    "left over",
                    next_image, images.size(), next_video, videos.size()));
  }
}

MropePositionIds mrope_position_ids(MropeFamily family, MropeRule indexing, const MropeInput& input) {
  MropePositionIds out;
  if (input.batch >= 1 && input.seq >= 0 && input.seq <= kPositionLimit / input.batch) {
    out.positions.resize(3 * std::size_t(input.batch * input.seq));
    out.deltas.resize(std::size_t(input.batch));
  }
  mrope_position_ids(family, indexing, input, out.positions, out.deltas);
  return out;
}

std::vector<std::int64_t> mrope_decode_positions(std::int64_t delta, std::int64_t cached, std::int64_t count) {
  if (cached < 0 || count < 0 || cached > kPositionLimit - count || cached + delta < 0 ||
      cached + count + delta > kPositionLimit) {
    throw Error(
        fmt::format("mrope_decode_positions: delta = {}, cached = {}, count = {}: positions must lie in [0, "
                    "2^47)",
                    delta, cached, count));
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) out[std::size_t(i)] = cached + i + delta;
  return out;
}

}  // namespace ropekit
