// tests/cuda_append_cases.hpp — the fused append's cases shared by the host run of the CUDA body
// (cuda_host_test.cpp) and the GPU run of its kernel (cuda_device_test.cpp): every buffer of one append with guards,
// and the variants (live keys, page tables, QK-norm per head and across heads, MLA entries).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "lib/cases.hpp"
#include "ropekit/cos_sin_cache.hpp"
#include "ropekit/ropekit.hpp"

namespace ropekit::cuda_cases {

// Bytes with 64-byte guards either side, every byte set from `seed` (floats of the storage type for inputs, raw
// bytes for caches and outputs, so an entry or lane written that should not be shows).
struct Memory {
  static constexpr std::size_t kGuard = 64;
  std::vector<std::byte> bytes;
  Memory() = default;
  Memory(std::size_t n, std::uint32_t seed, std::optional<DType> values = std::nullopt) : bytes(n + 2 * kGuard) {
    std::mt19937 rng(seed);
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    if (!values) return;
    std::normal_distribution<float> normal(0.0f, 2.0f);
    const std::size_t es = element_size(*values);
    for (std::size_t i = 0; i < n / es; ++i) {
      const float x = normal(rng);
      std::byte* p = data() + i * es;
      if (*values == DType::F32) {
        std::memcpy(p, &x, 4);
      } else {
        const std::uint16_t h = *values == DType::BF16 ? float_to_bf16(x) : float_to_f16(x);
        std::memcpy(p, &h, 2);
      }
    }
  }
  std::byte* data() { return bytes.data() + kGuard; }
};

enum class Variant { Plain, Outputs, NormPerHead, NormAcross, Mla };

struct AppendCase {
  Spec spec;
  DType storage;
  CacheDType cache;
  PageLayout layout;
  Variant variant;
  bool far;  // a position past any table: the accurate angles on the fly
};

// Every buffer of one append, and the call's arguments over them.
struct AppendBuffers {
  static constexpr std::int64_t kTokens = 7, kQHeads = 4, kKv = 2, kPageSize = 4, kPages = 5, kNope = 32;
  Memory q, q_out, k, k_out, k_nope, v, kc, vc;
  std::vector<std::int64_t> pos;
  std::vector<std::int64_t> slot_map;
  std::vector<std::int32_t> indices = {3, 0, 4, 1, 2}, indptr = {0, 2, 5}, last = {3, 2};
  std::vector<std::int32_t> batch_indices = {0, 0, 0, 1, 1, 1, 1}, seq_positions = {4, 5, 6, 7, 8, 9, 3};
  std::vector<float> q_weight, k_weight;
  AppendArgs args;
  PagedCache cache;

  explicit AppendBuffers(const AppendCase& c) {
    const int d = c.spec.head_dim;
    const std::size_t es = element_size(c.storage), ce = element_size(c.cache);
    const bool mla = c.variant == Variant::Mla;
    const int key_lanes = mla ? d + int(kNope) : d;
    q = Memory(std::size_t(kTokens * kQHeads * d) * es, 1, c.storage);
    q_out = Memory(q.bytes.size() - 2 * Memory::kGuard, 2);
    k = Memory(std::size_t(kTokens * kKv * d) * es, 3, c.storage);
    k_out = Memory(k.bytes.size() - 2 * Memory::kGuard, 4);
    k_nope = Memory(std::size_t(kTokens * kKv * kNope) * es, 5, c.storage);
    v = Memory(std::size_t(kTokens * kKv * 48) * es, 6, c.storage);
    kc = Memory(std::size_t(kPages * kPageSize * kKv * key_lanes) * ce, 7);
    vc = Memory(std::size_t(kPages * kPageSize * kKv * 48) * ce, 8);
    const int axes = c.spec.num_axes();
    const std::vector<std::int64_t> one = {3, 0, 1000, 17, 17, c.far ? (std::int64_t{1} << 40) : 123456, 5};
    for (int a = 0; a < axes; ++a)
      for (const std::int64_t p : one) pos.push_back(p + a * 7);
    for (std::int64_t t = 0; t < kTokens; ++t) {
      const int b = batch_indices[t], e = seq_positions[t];
      slot_map.push_back(indices[indptr[b] + e / kPageSize] * kPageSize + e % kPageSize);
    }
    slot_map[2] = -1;  // a padding token
    const float k_scale = c.cache == CacheDType::F8E4M3 ? 0.3f : 1.0f,
                v_scale = c.cache == CacheDType::F8E4M3 ? 0.07f : 1.0f;
    cache = {.k = kc.data(),
             .v = mla ? nullptr : vc.data(),
             .dtype = c.cache,
             .layout = c.layout,
             .num_pages = kPages,
             .page_size = kPageSize,
             .kv_heads = kKv,
             .head_dim = key_lanes,
             .v_head_dim = mla ? 0 : 48,
             .k_scale = k_scale,
             .v_scale = v_scale};
    args.k = bshd(k.data(), c.storage, 1, kTokens, kKv, d);
    if (!mla) args.q = bshd(q.data(), c.storage, 1, kTokens, kQHeads, d);
    if (!mla) args.v = bshd(v.data(), c.storage, 1, kTokens, kKv, 48);
    args.positions = {pos.data(), IndexType::I64, kTokens, axes};
    args.slots = slot_mapping(slot_map);
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> w(0.5f, 1.5f);
    switch (c.variant) {
      case Variant::Plain: break;
      case Variant::Outputs:  // q and k into outputs; a page table
        args.q_out = bshd(q_out.data(), c.storage, 1, kTokens, kQHeads, d);
        args.k_out = bshd(k_out.data(), c.storage, 1, kTokens, kKv, d);
        args.slots = PageTable{.indices = indices,
                               .indptr = indptr,
                               .last_page_len = last,
                               .batch_indices = batch_indices,
                               .seq_positions = seq_positions};
        break;
      case Variant::NormPerHead:  // Qwen3 / Gemma 3: per-head weights (Gemma's 1 + w), live keys in place
        for (int l = 0; l < d; ++l) q_weight.push_back(w(rng)), k_weight.push_back(w(rng) - 1.0f);
        args.norm = {.q_weight = q_weight, .k_weight = k_weight, .eps = 1e-6f, .weight_offset = 1.0f};
        args.k_out = args.k;
        break;
      case Variant::NormAcross:  // OLMo 2: one norm over all of a token's heads, q into q_out
        for (int l = 0; l < kQHeads * d; ++l) q_weight.push_back(w(rng));
        for (int l = 0; l < kKv * d; ++l) k_weight.push_back(w(rng));
        args.norm = {.q_weight = q_weight, .k_weight = k_weight, .eps = 1e-5f, .across_heads = true};
        args.q_out = bshd(q_out.data(), c.storage, 1, kTokens, kQHeads, d);
        break;
      case Variant::Mla:  // keys only: the latent part first, the rope part after it
        args.k_nope = bshd(k_nope.data(), c.storage, 1, kTokens, kKv, kNope);
        args.k_nope_dim = int(kNope);
        args.k_nope_offset = 0;
        args.k_offset = int(kNope);
        break;
    }
  }
  AppendBuffers(const AppendBuffers&) = delete;
};

// The specs the append cases run over: NeoX pairs, GPT-J pairs with a partial rotary and YaRN, M-RoPE.
// An engine's cos/sin cache for positions [0, rows): the rope's own coefficients × (1 + 2^-10), imported — a table
// whose values only its own rows give (the tests of calls and DeviceRopes made from a table).
inline std::shared_ptr<const Table> engine_table(const Rope& rope, std::int64_t rows) {
  std::vector<float> cache(std::size_t(rows) * std::size_t(rope.spec().rotary_dim));
  export_cos_sin_cache(rope, rows, cache);
  for (float& x : cache) x *= 1.0f + 0x1p-10f;
  return import_cos_sin_cache(rope, cache, rows);
}

inline std::vector<Spec> append_specs() {
  const Spec half{.head_dim = 64, .rotary_dim = 64, .base = 10000.0, .pairing = Pairing::Half};
  const Spec partial{.head_dim = 64,
                     .rotary_dim = 32,
                     .base = 10000.0,
                     .pairing = Pairing::Interleaved,
                     .scaling = scaling::Yarn{.factor = 4.0, .original_max_position_embeddings = 64}};
  Spec mrope = half;
  mrope.mrope = MRope{{4, 14, 14}, MRopeLayout::Sectioned};
  return {half, partial, mrope};
}

inline constexpr Variant kVariants[] = {Variant::Plain, Variant::Outputs, Variant::NormPerHead, Variant::NormAcross,
                                        Variant::Mla};

// A one-sequence PagedKvCache holding `positions.size()` random float32 keys and values (head_dim lanes per kv head)
// appended at `positions`, a copy of its key pages' bytes, and each entry's slot — what the K-shift tests turn on the
// CPU (through the cache) and in the copy (through the kernel body or the device API).
struct FilledCache {
  PagedKvCache cache;
  std::vector<std::int64_t> positions;
  std::vector<std::byte> keys;      // the key pages' bytes as appended
  std::vector<std::int64_t> slots;  // entry e's slot

  FilledCache(const Rope& rope, const PagedKvCacheShape& shape, std::vector<std::int64_t> at, std::uint32_t seed)
      : cache(rope, shape), positions(std::move(at)) {
    const auto n = std::int64_t(positions.size()), kv = shape.kv_heads, d = std::int64_t(rope.spec().head_dim);
    Memory k(std::size_t(n * kv * d) * 4, seed, DType::F32), v(std::size_t(n * kv * d) * 4, seed + 1, DType::F32);
    cache.append(rope, std::vector<std::int32_t>(std::size_t(n), 0),
                 {.k = bshd(k.data(), DType::F32, 1, n, kv, d),
                  .v = bshd(v.data(), DType::F32, 1, n, kv, d),
                  .positions = ropekit::positions(positions)});
    const PagedCache& pc = cache.cache();
    const auto* first = static_cast<const std::byte*>(pc.k);
    keys.assign(first, first + key_bytes());
    for (std::int64_t e = 0; e < n; ++e)
      slots.push_back(std::int64_t(cache.pages(0)[std::size_t(e / shape.page_size)]) * shape.page_size +
                      e % shape.page_size);
  }
  std::size_t key_bytes() const {
    const PagedCache& pc = cache.cache();
    return std::size_t(pc.num_pages * pc.page_size * pc.kv_heads * pc.head_dim * element_size(pc.dtype));
  }
  // The cache's key pages equal `bytes`.
  bool keys_equal(const std::vector<std::byte>& bytes) const {
    return bytes.size() == key_bytes() && std::memcmp(bytes.data(), cache.cache().k, bytes.size()) == 0;
  }
};

// Every append case once — 3 specs × 3 storages × 4 cache types × 2 layouts × 5 variants × near / far positions =
// 720 — each under a SCOPED_TRACE naming it: fn(rope, case), one Rope per spec (the host run of the body and the
// GPU runs of the kernel and of ropekit::cuda::append go through the same list).
template <class F>
void for_each_append_case(F&& fn) {
  for (const Spec& spec : append_specs()) {
    const Rope rope(spec);
    for (const DType storage : {DType::F32, DType::BF16, DType::F16}) {
      for (const CacheDType cache : {CacheDType::F32, CacheDType::BF16, CacheDType::F16, CacheDType::F8E4M3}) {
        for (const PageLayout layout : {PageLayout::NHD, PageLayout::HND}) {
          for (const Variant variant : kVariants) {
            for (const bool far : {false, true}) {
              SCOPED_TRACE(::testing::Message()
                           << to_string(spec.pairing) << " r=" << spec.rotary_dim << (spec.mrope ? " mrope " : " ")
                           << to_string(storage) << "->" << to_string(cache) << " " << to_string(layout) << " variant "
                           << int(variant) << (far ? " far" : ""));
              fn(rope, AppendCase{spec, storage, cache, layout, variant, far});
            }
          }
        }
      }
    }
  }
}

// The rotation cases the CUDA kernel runs: the case table's, and each strided case again with rows packed and aligned
// (bshd), so that the runs of pairs a thread reads with one access (2 to 16 bytes: choose_vector) meet every spec,
// dtype, direction and placement the strided ones cover — those have gaps that allow only one element per access.
inline std::vector<cases::Case> rotation_cases() {
  std::vector<cases::Case> out;
  for (const cases::Case& c : cases::eval_cases()) {
    if (c.op != cases::Op::Rotate) continue;
    out.push_back(c);
    if (c.layout == cases::Layout::Strided) {
      out.push_back(c);
      out.back().layout = cases::Layout::Bshd;
      out.back().specials = true;  // the wide runs meet infinities and NaNs too (fp16's any_f16_special)
    }
  }
  return out;
}

}  // namespace ropekit::cuda_cases
