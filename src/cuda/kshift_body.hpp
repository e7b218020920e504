// src/cuda/kshift_body.hpp — the CUDA K-shift's per-thread body: cached keys turned where they lie (ropekit/
// paged_kv_cache.hpp's seq_add / shift_entries, and rerotate's un-rotate + rotate), over explicit block and thread
// indices like the rotation's.
//
// One thread per (entry, kv head, pair). Entry i's key row is widened to float32 (fp8: e4m3 · k_scale), its pair
// turned by each call in order — call c at "position" positions_c[i] (K-shift: |δ| with Forward or Inverse, magnitude
// 1; rerotate: the old plan's inverse then the new plan's forward) — and rounded once back to the cache's type (fp8:
// e4m3(x / k_scale)). Pass-through lanes are widened and stored back the same way (pair j carries lanes
// rotary_dim + j, + 2·pairs, ...). The CPU's turn_entries does exactly this (in place in the storage type for one
// call and no fp8: the same arithmetic), so the bits are the CPU's.
#pragma once

#include <cstdint>

#include "cuda/append_body.hpp"

namespace ropekit::cuda {

ROPEKIT_HD float load_key(const KShiftShape& k, const char* p) {
  if (k.cache.cache == CacheStorage::E4M3) {
    std::uint8_t b;
    std::memcpy(&b, p, 1);
    return fmul(e4m3_load(b), k.cache.k_scale);
  }
  return load_as(static_cast<Storage>(k.cache.cache), p);
}

ROPEKIT_HD void store_key(const KShiftShape& k, char* p, float x) {
  if (k.cache.cache == CacheStorage::E4M3) {
    const std::uint8_t b = e4m3_store(fdiv(x, k.cache.k_scale));
    std::memcpy(p, &b, 1);
    return;
  }
  store_as(static_cast<Storage>(k.cache.cache), p, x);
}

ROPEKIT_HD void kshift_thread(const KShiftShape& k, std::int64_t block, int thread, int block_dim) {
  const std::int64_t g = block * block_dim + thread;
  if (g >= k.threads()) return;
  const RotateShape& first = k.calls[0];
  const int pairs = first.pairs;
  const int j = static_cast<int>(g % pairs);
  const std::int64_t head = g / pairs % k.cache.kv_heads, i = g / pairs / k.cache.kv_heads;
  const std::int64_t slot =
      k.slots_i64 ? static_cast<const std::int64_t*>(k.slots)[i] : static_cast<const std::int32_t*>(k.slots)[i];
  if (slot < 0 || slot >= k.cache.page_size * k.cache.num_pages) {
    // Only the device API's slots can be outside the cache (the host checked its own): −1 is "no entry", as in a
    // slot mapping; anything else is reported.
    if (slot != -1 && first.error != nullptr) report(first, i);
    return;
  }
  char* key = entry(k.cache, k.cache.cache_k, slot, head, k.cache.key_lanes, 0);
  const int es = k.cache.cache_element_size, la = first.lane_a[j], lb = first.lane_b[j];
  float xa = load_key(k, key + la * es), xb = load_key(k, key + lb * es);
  for (int c = 0; c < k.num_calls; ++c) {
    float co, sn;
    if (!coefficients(k.calls[c], i, j, co, sn)) return;
    const float ya = fma(xa, co, -fmul(xb, sn)), yb = fma(xb, co, fmul(xa, sn));
    xa = ya;
    xb = yb;
  }
  store_key(k, key + la * es, xa);
  store_key(k, key + lb * es, xb);
  for (int lane = first.rotary_dim + j; lane < first.head_dim; lane += pairs)
    store_key(k, key + lane * es, load_key(k, key + lane * es));
}

}  // namespace ropekit::cuda
