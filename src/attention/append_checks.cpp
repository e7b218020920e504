// prepare_append's checks (attention_internal.hpp: detail::check_append): every argument of a fused rotate-and-append
// — views, cache geometry, slots, QK norm — checked once, for host memory or (PositionsAt::Device) device memory whose
// values the host never reads. The resolution and the per-token work are append.cpp's.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

#include "attention/attention_internal.hpp"
#include "rope/validate.hpp"
#include "rope/views.hpp"
#include "ropekit/append.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

namespace {

bool same_view(const Heads& a, const Heads& b) {
  return a.data == b.data && a.dtype == b.dtype && a.batch == b.batch && a.seq == b.seq && a.heads == b.heads &&
         a.batch_stride == b.batch_stride && a.seq_stride == b.seq_stride && a.head_stride == b.head_stride;
}

void require_shape(const Heads& view, std::string_view name, const Heads& like, std::string_view like_name) {
  if (view.batch != like.batch || view.seq != like.seq) {
    throw Error(fmt::format("{} has batch {} x seq {} but {} has batch {} x seq {}: they must hold the same tokens",
                            name, view.batch, view.seq, like_name, like.batch, like.seq));
  }
}

}  // namespace

detail::CheckedCall detail::check_append(const Rope& rope, const AppendArgs& args, const PagedCache& cache,
                                         KeyWrite keys, const RotateArgs& rotation_args, PositionsAt at) {
  const Spec& spec = rope.spec();
  const int d = spec.head_dim;
  detail::check_cache(cache);
  if (args.threads < 0) throw Error(fmt::format("threads = {}: must be >= 0 (0: the default)", args.threads));
  if (keys == KeyWrite::Unrotated && (!args.k_out.empty() || !args.norm.k_weight.empty())) {
    throw Error("keys stored unrotated take no k_out and no norm.k_weight");
  }

  // The views: k is required; each view's lanes and heads against the rope and the cache.
  if (args.k.empty()) throw Error("k is empty: an append needs the new keys");
  // The rotation's part — q and k (only read by the rotation: it writes into the append's own rows),
  // their tokens and the positions — checked by the rotation's own validator, whose result the prepare
  // path takes as it is; each view's extent goes on to its byte range below.
  const detail::CheckedCall rotation =
      detail::validate_call(rotation_args, rope.pair_map(), detail::ViewUse::Read, {}, at);
  const std::int64_t k_extent = rotation.k_extent();
  if (args.k.heads != cache.kv_heads) {
    throw Error(fmt::format("k.heads = {} differs from cache.kv_heads = {}", args.k.heads, cache.kv_heads));
  }
  if (args.k_offset < 0 || args.k_offset > cache.head_dim - d) {
    throw Error(fmt::format("k_offset = {}: k's {} lanes must fit the cache's {}-lane key entry", args.k_offset, d,
                            cache.head_dim));
  }
  const std::int64_t q_extent = rotation.q_extent();
  const auto check_output = [&](const Heads& out, std::string_view name, const Heads& in,
                                std::string_view in_name) -> std::int64_t {
    if (out.empty()) {
      if (out.data != nullptr) throw Error(fmt::format("{}.data is set but {} is empty", name, name));
      return 0;
    }
    if (in.empty()) throw Error(fmt::format("{} is set but {} is empty: nothing to write", name, in_name));
    const std::int64_t extent = detail::check_view(out, name, d);
    if (out.batch != in.batch || out.seq != in.seq || out.heads != in.heads || out.dtype != in.dtype) {
      throw Error(fmt::format("{} [{}, {}, {}] {} differs from {} [{}, {}, {}] {}", name, out.batch, out.seq, out.heads,
                              to_string(out.dtype), in_name, in.batch, in.seq, in.heads, to_string(in.dtype)));
    }
    detail::require_no_self_overlap(out, name, d);
    return extent;
  };
  const std::int64_t q_out_extent = check_output(args.q_out, "q_out", args.q, "q");
  const std::int64_t k_out_extent = check_output(args.k_out, "k_out", args.k, "k");
  if (args.q_out.empty() && !args.q.empty()) detail::require_no_self_overlap(args.q, "q", d);
  const bool k_in_place = !args.k_out.empty() && same_view(args.k, args.k_out);
  if (args.k_nope.empty() != (args.k_nope_dim == 0)) {
    throw Error(fmt::format("k_nope is {} but k_nope_dim = {}: give both or neither",
                            args.k_nope.empty() ? "empty" : "set", args.k_nope_dim));
  }
  std::int64_t k_nope_extent = 0, v_extent = 0;
  if (!args.k_nope.empty()) {
    k_nope_extent = detail::check_view(args.k_nope, "k_nope", args.k_nope_dim);
    require_shape(args.k_nope, "k_nope", args.k, "k");
    if (args.k_nope.heads != cache.kv_heads) {
      throw Error(fmt::format("k_nope.heads = {} differs from cache.kv_heads = {}", args.k_nope.heads, cache.kv_heads));
    }
    if (args.k_nope_offset < 0 || args.k_nope_dim < 0 || args.k_nope_offset > cache.head_dim - args.k_nope_dim) {
      throw Error(fmt::format("k_nope_offset = {}: k_nope's {} lanes must fit the cache's {}-lane key entry",
                              args.k_nope_offset, args.k_nope_dim, cache.head_dim));
    }
    if (args.k_nope_offset < args.k_offset + d && args.k_offset < args.k_nope_offset + args.k_nope_dim) {
      throw Error(fmt::format("k_nope lanes [{}, {}) overlap k's lanes [{}, {}) of the key entry", args.k_nope_offset,
                              args.k_nope_offset + args.k_nope_dim, args.k_offset, args.k_offset + d));
    }
  }
  if (args.v.empty() != (cache.v == nullptr)) {
    throw Error(fmt::format("v is {} but cache.v is {}: values go exactly into a cache that has them",
                            args.v.empty() ? "empty" : "set", cache.v == nullptr ? "null" : "set"));
  }
  if (!args.v.empty()) {
    v_extent = detail::check_view(args.v, "v", cache.v_head_dim);
    require_shape(args.v, "v", args.k, "k");
    if (args.v.heads != cache.kv_heads) {
      throw Error(fmt::format("v.heads = {} differs from cache.kv_heads = {}", args.v.heads, cache.kv_heads));
    }
  }

  if (at == detail::PositionsAt::Device) {  // device pointers: each element read with one access of its width
    for (const auto& [field, h] : {std::pair<const char*, const Heads*>{"q_out.data", &args.q_out},
                                   {"k_out.data", &args.k_out},
                                   {"k_nope.data", &args.k_nope},
                                   {"v.data", &args.v}}) {
      detail::check_device_alignment(field, h->data, static_cast<std::size_t>(element_size(h->dtype)));
    }
    const auto es = static_cast<std::size_t>(element_size(cache.dtype));
    detail::check_device_alignment("cache.k", cache.k, es);
    detail::check_device_alignment("cache.v", cache.v, es);
  }

  // No written memory may be read or written by another view.
  {
    // At most 9 ranges (5 written): a fixed array, filled as the views are found (neither allocated nor
    // zeroed: decode calls are small); bit i of `written` marks a written range. Each range is made in its
    // slot (placement new from make's prvalue): copied in, GCC reloaded the name's two 8-byte stores with
    // one 16-byte load, which the store buffer cannot forward (a sixth of the preparation, perf annotate).
    std::array<detail::ByteRange, 9> ranges;
    std::uint32_t written = 0;
    std::size_t n = 0;
    const auto add = [&](bool is_written, auto make) {
      written |= std::uint32_t{is_written} << n;
      ::new (&ranges[n++]) detail::ByteRange(make());
    };
    if (!args.q.empty()) add(args.q_out.empty(), [&] { return detail::byte_range(args.q, "q", d, q_extent); });
    if (!args.q_out.empty()) add(true, [&] { return detail::byte_range(args.q_out, "q_out", d, q_out_extent); });
    add(k_in_place, [&] { return detail::byte_range(args.k, "k", d, k_extent); });
    if (!args.k_out.empty() && !k_in_place) {
      add(true, [&] { return detail::byte_range(args.k_out, "k_out", d, k_out_extent); });
    }
    if (!args.k_nope.empty()) {
      add(false, [&] { return detail::byte_range(args.k_nope, "k_nope", args.k_nope_dim, k_nope_extent); });
    }
    if (!args.v.empty()) add(false, [&] { return detail::byte_range(args.v, "v", cache.v_head_dim, v_extent); });
    add(true, [&] { return detail::cache_byte_range(cache, cache.k, cache.head_dim, "cache.k"); });
    if (cache.v != nullptr)
      add(true, [&] { return detail::cache_byte_range(cache, cache.v, cache.v_head_dim, "cache.v"); });
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = i + 1; j < n; ++j) {
        if (((written >> i) | (written >> j)) & 1u) detail::require_disjoint(ranges[i], ranges[j]);
      }
    }
  }

  // QK-norm weights: their counts (their values are read by the resolution: host memory, or the device's).
  const QkNorm& norm = args.norm;
  const auto weight_count = [&](std::span<const float> w, const Heads& view, std::string_view name,
                                std::string_view of) {
    if (w.empty()) return;
    if (view.empty()) throw Error(fmt::format("norm.{} is set but {} is empty", name, of));
    const std::int64_t want = norm.across_heads ? view.heads * d : d;
    if (std::int64_t(w.size()) != want) {
      throw Error(fmt::format("norm.{} has {} values: must have {} ({})", name, w.size(), want,
                              norm.across_heads ? "heads x head_dim, across_heads" : "head_dim"));
    }
    if (at == detail::PositionsAt::Device) detail::check_device_alignment(fmt::format("norm.{}", name), w.data(), 4);
  };
  weight_count(norm.q_weight, args.q, "q_weight", "q");
  weight_count(norm.k_weight, args.k, "k_weight", "k");
  if ((!norm.q_weight.empty() || !norm.k_weight.empty()) && (!std::isfinite(norm.eps) || norm.eps <= 0.0f)) {
    throw Error(fmt::format("norm.eps = {}: must be finite and > 0", norm.eps));
  }
  if (!std::isfinite(norm.weight_offset))
    throw Error(fmt::format("norm.weight_offset = {}: must be finite", norm.weight_offset));
  return rotation;
}

}  // namespace ropekit
