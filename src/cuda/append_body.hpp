// src/cuda/append_body.hpp — the CUDA fused rotate-and-append's per-thread body (ropekit/append.hpp's semantics), over
// explicit block and thread indices, like the rotation's (rotate_body.hpp).
//
// The launch grid is four segments, one after the other:
//   pairs   one thread per (token, head group, pair) for the key rows that are not QK-normed: a key row's pair
//           rotated, rounded to k's storage type (the live key, kept in k_out when given), then converted to the
//           cache type and stored in the token's key entry; pair j also carries the pass-through lanes
//           rotary_dim + j, + 2·pairs, ... of its row.
// Queries that are not QK-normed are rotated by the rotation kernel itself (query_rotation), launched beside this
// grid: its wide accesses run at most of the copy bandwidth, which a body mixing queries and keys did not reach.
//   normed  one thread per (token, tensor, norm group) for QK-normed heads: the RMSNorm's sum of squares in double in
//           lane order (the CPU's order: a parallel reduction would round differently), then each head's lanes
//           normed, rotated in float32 and rounded once — the CPU path's bits (AppendCall, QkNorm).
//   values  one thread per (token, kv head, lane) of v: converted into the value entry.
//   nope    one thread per (token, kv head, lane) of k_nope (MLA): converted into the key entry at k_nope_offset.
// A token without a slot (−1) writes no entry; its query and live key are still rotated. Conversions are the
// scalar reference's (convert_to_cache_reference): the same type copied, else widened exactly and rounded once
// (fp8: e4m3(x / scale)). The slots come resolved (prepare_append on the host resolves slot mappings and page
// tables alike; the device API reads a page table on the device, table_slot).
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/device_math.hpp"
#include "cuda/rotate_body.hpp"

namespace ropekit::cuda {

// Token t's slot through the page table, as prepare_append resolves it (fill_slots); −1 for anything the host would
// refuse there — a batch index outside the batch, indptr out of order or past the indices, a last page length
// outside [1, page_size] (0 for a sequence without pages), an entry past the sequence's, a page outside the cache —
// reported on the error word.
ROPEKIT_HD std::int64_t table_slot(const AppendShape& a, std::int64_t token) {
  const DevicePageTable& p = a.table;
  const std::int64_t b = p.batch_indices[token], e = p.seq_positions[token];
  bool bad = b < 0 || b >= p.batch;
  std::int64_t page = -1;
  if (!bad) {
    const std::int64_t first = p.indptr[b], last = p.indptr[b + 1], len = p.last_page_len[b];
    bad = first < 0 || last < first || last > p.num_indices || (last > first ? len < 1 || len > a.page_size : len != 0);
    const std::int64_t entries = last > first ? (last - first - 1) * a.page_size + len : 0;
    bad = bad || e < 0 || e >= entries;
    if (!bad) {
      page = p.indices[first + e / a.page_size];
      bad = page < 0 || page >= a.num_pages;
    }
  }
  if (bad) {
    if (a.rot.error != nullptr) report(a.rot, token);
    return -1;
  }
  return page * a.page_size + e % a.page_size;
}

// Token t's slot; −1 (not cached) also for a slot outside the cache, which is reported when the shape carries an
// error word (the device API: the host never read the slots).
ROPEKIT_HD std::int64_t slot_of(const AppendShape& a, std::int64_t token) {
  if (a.table.indptr != nullptr) return table_slot(a, token);
  const std::int64_t slot =
      a.slots_i64 ? static_cast<const std::int64_t*>(a.slots)[token] : static_cast<const std::int32_t*>(a.slots)[token];
  if (a.rot.error != nullptr && (slot < -1 || slot >= a.page_size * a.num_pages)) {
    report(a.rot, token);
    return -1;
  }
  return slot;
}

// One element of storage type `from` (its bits) into the cache's type at dst.
ROPEKIT_HD void to_cache(const AppendShape& a, Storage from, std::uint32_t bits, float scale, char* dst) {
  if (a.cache != CacheStorage::E4M3 && static_cast<int>(a.cache) == static_cast<int>(from)) {
    write_bits(dst, bits, storage_size(from));
    return;
  }
  const float x = float_from(from, bits);  // exact
  if (a.cache == CacheStorage::E4M3) {
    write_bits(dst, e4m3_store(fdiv(x, scale)), 1);
  } else {
    write_bits(dst, bits_as(static_cast<Storage>(a.cache), x), a.cache_element_size);
  }
}

// Where a slot's entries start, found once per thread: head h's entry is entry first + h·step (step 1 in NHD, the page
// size in HND, where a page holds each head's entries in turn) — a 64-bit division per element stored was dozens of a
// GPU's instructions for each. first < 0: the token has no slot.
struct EntryAt {
  std::int64_t first;
  ROPEKIT_HD EntryAt(const AppendShape& a, std::int64_t slot)
      : first(slot < 0 ? -1
              : !a.hnd ? slot * a.kv_heads
                       : slot / a.page_size * a.kv_heads * a.page_size + slot % a.page_size) {}
  ROPEKIT_HD bool cached() const { return first >= 0; }
};

// Element `lane` of the entry of kv head `head` at `at` (append.hpp's NHD / HND addressing).
ROPEKIT_HD char* entry(const AppendShape& a, char* base, const EntryAt& at, std::int64_t head, int lanes, int lane) {
  return base + ((at.first + head * (a.hnd ? a.page_size : 1)) * lanes + lane) * a.cache_element_size;
}
ROPEKIT_HD char* entry(const AppendShape& a, char* base, std::int64_t slot, std::int64_t head, int lanes, int lane) {
  return entry(a, base, EntryAt(a, slot), head, lanes, lane);
}

// A token's (sequence, index in it): found once per thread, not per element (a 64-bit division is dozens of
// instructions on a GPU).
struct TokenAt {
  std::int64_t b, t;
  ROPEKIT_HD TokenAt(const RotateShape& s, std::int64_t token) : b(token / s.seq), t(token % s.seq) {}
};

ROPEKIT_HD char* row(const View& v, TokenAt at, std::int64_t head, int element_size) {
  return v.data + (at.b * v.batch_stride + at.t * v.seq_stride + head * v.head_stride) * element_size;
}

// A key element rotated (or as given) in k's storage, as bits: kept in k_out and stored in the entry.
ROPEKIT_HD void put_key(const AppendShape& a, TokenAt at, std::int64_t head, const EntryAt& slot, int lane,
                        std::uint32_t bits) {
  const int es = a.rot.element_size;
  if (a.keep_k) write_bits(row(a.k_out, at, head, es) + lane * es, bits, es);
  if (slot.cached())
    to_cache(a, a.rot.storage, bits, a.k_scale, entry(a, a.cache_k, slot, head, a.key_lanes, a.k_offset + lane));
}

// An element as stored, as its bits (a 16-bit type's in the low half): what put_key takes.
ROPEKIT_HD std::uint32_t bits_of_raw(float x) { return bits_of(x); }
ROPEKIT_HD std::uint32_t bits_of_raw(std::uint16_t x) { return x; }

// A run's raw elements (a lanes xa, b lanes xb) stored as they are: W a lanes at pa and W b lanes at pb, or (adjacent)
// 2W lanes alternating from pa.
template <bool Adjacent, class Raw, int W>
ROPEKIT_HD void store_raw_run(char* pa, char* pb, const Raw (&xa)[W], const Raw (&xb)[W]) {
  if constexpr (Adjacent) {
    Raw v[2 * W];
    ROPEKIT_UNROLL
    for (int w = 0; w < W; ++w) {
      v[2 * w] = xa[w];
      v[2 * w + 1] = xb[w];
    }
    store_run(pa, v);
  } else {
    store_run(pa, xa);
    store_run(pb, xb);
  }
}

// Pairs j0 … j0 + W − 1 of the key rows h ≡ group (mod pair_groups) of its token, k stored as St, as the rotation
// kernel turns rows (rotate_body.hpp): coefficients once, 4 / W rows' loads issued before their stores;
// each element rounded to k's storage (the live key, kept in k_out when given), then stored in the token's key entry.
// One pair (W = 1, not adjacent): any pair map, each element converted into the cache's type (put_key). A wider run
// (only where the cache holds St and every access is aligned: choose_append_vectors): one access per run of lanes for
// the row, k_out and the entry, the 16-bit results rounded two per conversion as the rotation's (store_turned).
template <Storage St, int W, bool Adjacent>
ROPEKIT_HD void pair_thread_as(const AppendShape& a, std::int64_t g) {
  using Io = StorageOf<St>;
  using Raw = typename Io::Raw;
  constexpr int es = static_cast<int>(sizeof(Raw));
  constexpr bool kOnePair = W == 1 && !Adjacent;
  // Rows counted as fp32's (4 / W), as before the rotation counted bytes: at the rotation's count the 16-bit append
  // kernels, which also hold k_out's and the entry's stores, took more registers (ptxas, sm_90;
  // docs/performance-log.md) — for a GPU run to weigh.
  constexpr int K = rows_in_flight<W, 4>();
  const RotateShape& s = a.rot;
  const std::int64_t heads = a.pair_k_heads();
  const int runs = s.pairs / W;
  const int j0 = static_cast<int>(g % runs) * W;
  const std::int64_t r = g / runs;
  const std::int64_t token = r / a.pair_groups, group = r % a.pair_groups;
  const EntryAt slot(a, slot_of(a, token));
  if (!slot.cached() && !a.keep_k) return;  // nothing of this token's keys is written
  // A position that cannot be rotated leaves the rows unwritten, as it leaves the rotation's.
  float c[W], sn[W];
  ROPEKIT_UNROLL
  for (int w = 0; w < W; ++w) {
    c[w] = 1.0f;
    sn[w] = 0.0f;
    if (a.rotate_keys && !coefficients(s, token, j0 + w, c[w], sn[w])) return;
  }
  const TokenAt at(s, token);
  // Adjacent: the run's lanes are la, la + 1, …, la + 2W − 1, a and b alternating.
  const int la = s.lane_a[j0], lb = s.lane_b[j0];
  for (std::int64_t h0 = group; h0 < heads; h0 += K * a.pair_groups) {
    // Compile-time row indices (unrolled) keep the rows' bits in registers.
    Raw xa[K][W], xb[K][W];
    ROPEKIT_UNROLL
    for (int i = 0; i < K; ++i) {
      const std::int64_t h = h0 + i * a.pair_groups;
      if (h >= heads) break;
      load_pairs<Adjacent>(row(s.k_in, at, h, es), la, lb, xa[i], xb[i]);
    }
    ROPEKIT_UNROLL
    for (int i = 0; i < K; ++i) {
      const std::int64_t h = h0 + i * a.pair_groups;
      if (h >= heads) break;
      const char* src = row(s.k_in, at, h, es);
      if constexpr (kOnePair) {
        std::uint32_t ya = bits_of_raw(xa[i][0]), yb = bits_of_raw(xb[i][0]);
        if (a.rotate_keys) {  // rounded to k's storage: the live key's bits
          const float fa = Io::load(xa[i][0]), fb = Io::load(xb[i][0]);
          ya = bits_of_raw(Io::store(fma(fa, c[0], -fmul(fb, sn[0]))));
          yb = bits_of_raw(Io::store(fma(fb, c[0], fmul(fa, sn[0]))));
        }
        put_key(a, at, h, slot, la, ya);
        put_key(a, at, h, slot, lb, yb);
        for (int lane = s.rotary_dim + j0; lane < s.head_dim; lane += s.pairs)
          put_key(a, at, h, slot, lane, read_bits(src + lane * es, es));
      } else {
        char* const out = a.keep_k ? row(a.k_out, at, h, es) : nullptr;
        char* const ent = slot.cached() ? entry(a, a.cache_k, slot, h, a.key_lanes, a.k_offset) : nullptr;
        if (a.rotate_keys) {
          float ra[W], rb[W];
          turn_run<St, W>(xa[i], xb[i], c, sn, ra, rb);
          const TurnedRuns<St, W, Adjacent> turned(ra, rb);
          if (out != nullptr) turned.store(out + la * es, out + lb * es);
          if (ent != nullptr) turned.store(ent + la * es, ent + lb * es);
        } else {
          if (out != nullptr) store_raw_run<Adjacent>(out + la * es, out + lb * es, xa[i], xb[i]);
          if (ent != nullptr) store_raw_run<Adjacent>(ent + la * es, ent + lb * es, xa[i], xb[i]);
        }
        // The pass-through lanes of this run's pairs: the same type in the row and the entry, copied as bits.
        ROPEKIT_UNROLL
        for (int w = 0; w < W; ++w) {
          for (int lane = s.rotary_dim + j0 + w; lane < s.head_dim; lane += s.pairs) {
            const std::uint32_t bits = read_bits(src + lane * es, es);
            if (out != nullptr) write_bits(out + lane * es, bits, es);
            if (ent != nullptr) write_bits(ent + lane * es, bits, es);
          }
        }
      }
    }
  }
}

// The key rows' segment for the shape's configuration (the host's grid; a GPU launches the configuration's kernel).
ROPEKIT_HD void pair_thread(const AppendShape& a, std::int64_t g) {
  with_configuration(a.rot.storage, a.key_vector_pairs, a.key_adjacent, [&](auto st, auto w, auto adjacent) {
    pair_thread_as<decltype(st)::value, decltype(w)::value, decltype(adjacent)::value>(a, g);
  });
}

// RMSNorm of one group (one head, or every head of the token: across_heads) of q or k, rotated in float32 and
// rounded once to storage.
ROPEKIT_HD void norm_thread(const AppendShape& a, std::int64_t g) {
  const RotateShape& s = a.rot;
  const std::int64_t per_token = a.q_groups() + a.k_groups();
  const std::int64_t token = g / per_token, u = g % per_token;
  const TokenAt at(s, token);
  const bool is_q = u < a.q_groups();
  const std::int64_t group = is_q ? u : u - a.q_groups();
  const std::int64_t first = a.across_heads ? 0 : group,
                     last = a.across_heads ? (is_q ? s.q_heads : s.k_heads) : group + 1;
  const float* weight = is_q ? a.q_weight : a.k_weight;
  const View& in = is_q ? s.q_in : s.k_in;
  const int es = s.element_size, d = s.head_dim;
  const EntryAt slot(a, is_q ? -1 : slot_of(a, token));
  if (!is_q && !slot.cached() && !a.keep_k) return;
  double sum = 0.0;  // float products are exact in double; the sum is rounded in lane order, as the CPU's loop
  for (std::int64_t h = first; h < last; ++h) {
    const char* src = row(in, at, h, es);
    for (int l = 0; l < d; ++l) {
      const double x = load_as(s.storage, src + l * es);
      sum = dadd(sum, dmul(x, x));
    }
  }
  const double lanes = static_cast<double>((last - first) * d);
  const float r = static_cast<float>(ddiv(1.0, dsqrt(dadd(ddiv(sum, lanes), static_cast<double>(a.eps)))));
  for (std::int64_t h = first; h < last; ++h) {
    const char* src = row(in, at, h, es);
    const std::int64_t w0 = a.across_heads ? (h - first) * d : 0;
    const auto normed = [&](int l) {
      return fmul(fmul(load_as(s.storage, src + l * es), r),
                  a.add_weight_offset ? fadd(weight[w0 + l], a.weight_offset) : weight[w0 + l]);
    };
    char* dst = is_q ? row(s.q_out, at, h, es) : nullptr;
    // Pass-through lanes first: the pairs' lanes are then the only ones read after being written in place.
    for (int l = s.rotary_dim; l < d; ++l) {
      const std::uint32_t bits = bits_as(s.storage, normed(l));
      if (is_q) {
        write_bits(dst + l * es, bits, es);
      } else {
        put_key(a, at, h, slot, l, bits);
      }
    }
    for (int j = 0; j < s.pairs; ++j) {
      float c, sn;
      if (!coefficients(s, token, j, c, sn)) return;
      const int la = s.lane_a[j], lb = s.lane_b[j];
      const float xa = normed(la), xb = normed(lb);
      const std::uint32_t bits_a = bits_as(s.storage, fma(xa, c, -fmul(xb, sn)));
      const std::uint32_t bits_b = bits_as(s.storage, fma(xb, c, fmul(xa, sn)));
      if (is_q) {
        write_bits(dst + la * es, bits_a, es);
        write_bits(dst + lb * es, bits_b, es);
      } else {
        put_key(a, at, h, slot, la, bits_a);
        put_key(a, at, h, slot, lb, bits_b);
      }
    }
  }
}

// Lane `g % lanes` of every kv head of token `g / lanes`: copied from `src` (one row of `lanes` elements per head) into
// the entry of `entry_lanes` elements at lane `first` — the values, and MLA's k_nope in the key entry. kRowsInFlight
// heads' loads are issued before their stores.
ROPEKIT_HD void lane_thread(const AppendShape& a, std::int64_t g, int lanes, const View& src, Storage storage,
                            float scale, char* base, int entry_lanes, int first) {
  const std::int64_t token = g / lanes;
  const int lane = static_cast<int>(g % lanes);
  const EntryAt slot(a, slot_of(a, token));
  if (!slot.cached()) return;
  const TokenAt at(a.rot, token);
  const int es = storage_size(storage);
  for (std::int64_t h0 = 0; h0 < a.kv_heads; h0 += kRowsInFlight) {
    std::uint32_t bits[kRowsInFlight];
    ROPEKIT_UNROLL
    for (int i = 0; i < kRowsInFlight; ++i) {
      if (h0 + i < a.kv_heads) bits[i] = read_bits(row(src, at, h0 + i, es) + lane * es, es);
    }
    ROPEKIT_UNROLL
    for (int i = 0; i < kRowsInFlight; ++i) {
      if (h0 + i < a.kv_heads)
        to_cache(a, storage, bits[i], scale, entry(a, base, slot, h0 + i, entry_lanes, first + lane));
    }
  }
}

// lane_thread where the cache holds src's type (elements of es bytes) and every row and entry is aligned to kBytes
// (choose_append_vectors): thread g copies run g % (lanes / n) of n = kBytes / es lanes of every kv head of token
// g / (lanes / n) with one load and one store per head.
template <int kBytes>
ROPEKIT_HD void run_copy_thread(const AppendShape& a, std::int64_t g, int lanes, const View& src, int es, char* base,
                                int entry_lanes, int first) {
  using Word = std::conditional_t<kBytes == 2, std::uint16_t, std::uint32_t>;
  constexpr int kWords = kBytes / static_cast<int>(sizeof(Word));
  // Rows in flight: 32 bytes per thread (the element path holds kRowsInFlight elements), and the registers they take.
  constexpr int K = kBytes >= 16 ? 2 : kBytes == 8 ? 4 : kRowsInFlight;
  const int n = kBytes / es, runs = lanes / n;
  const std::int64_t token = g / runs;
  const int lane = static_cast<int>(g % runs) * n;
  const EntryAt slot(a, slot_of(a, token));
  if (!slot.cached()) return;
  const TokenAt at(a.rot, token);
  const std::int64_t heads = a.kv_heads;  // a local: the stores (char pointers) might otherwise alias it
  for (std::int64_t h0 = 0; h0 < heads; h0 += K) {
    Word w[K][kWords] = {};  // zeros GCC cannot see are never stored (registers on a GPU)
    ROPEKIT_UNROLL
    for (int i = 0; i < K; ++i) {
      if (h0 + i >= heads) break;
      load_run(row(src, at, h0 + i, es) + lane * es, w[i]);
    }
    ROPEKIT_UNROLL
    for (int i = 0; i < K; ++i) {
      if (h0 + i >= heads) break;
      store_run(entry(a, base, slot, h0 + i, entry_lanes, first + lane), w[i]);
    }
  }
}

// The values' or k_nope's segment: runs of `bytes` copied (run_copy_thread), or lanes converted (bytes 0).
ROPEKIT_HD void lanes_segment(const AppendShape& a, std::int64_t g, int bytes, int lanes, const View& src,
                              Storage storage, float scale, char* base, int entry_lanes, int first) {
  const int es = storage_size(storage);
  switch (bytes) {
    case 16: return run_copy_thread<16>(a, g, lanes, src, es, base, entry_lanes, first);
    case 8: return run_copy_thread<8>(a, g, lanes, src, es, base, entry_lanes, first);
    case 4: return run_copy_thread<4>(a, g, lanes, src, es, base, entry_lanes, first);
    case 2: return run_copy_thread<2>(a, g, lanes, src, es, base, entry_lanes, first);
    default: return lane_thread(a, g, lanes, src, storage, scale, base, entry_lanes, first);
  }
}

// The grid's segments. A GPU launches each as a kernel of its own (registers sized to that segment's body: the
// double-precision norm would otherwise hold every thread of the launch to its count); the host runs them in order.
enum class AppendPart : int { Pairs = 0, Norms = 1, Values = 2, Nope = 3 };

ROPEKIT_HD std::int64_t part_threads(const AppendShape& a, AppendPart p) {
  switch (p) {
    case AppendPart::Pairs: return a.pair_threads();
    case AppendPart::Norms: return a.norm_threads();
    case AppendPart::Values: return a.value_threads();
    case AppendPart::Nope: return a.nope_threads();
  }
  return 0;
}

// Thread g (< part_threads(a, P)) of segment P.
template <AppendPart P>
ROPEKIT_HD void append_part(const AppendShape& a, std::int64_t g) {
  if constexpr (P == AppendPart::Pairs) {
    pair_thread(a, g);
  } else if constexpr (P == AppendPart::Norms) {
    norm_thread(a, g);
  } else if constexpr (P == AppendPart::Values) {
    lanes_segment(a, g, a.value_bytes, a.value_lanes, a.v, a.v_storage, a.v_scale, a.cache_v, a.value_lanes, 0);
  } else {
    lanes_segment(a, g, a.nope_bytes, a.k_nope_dim, a.k_nope, a.k_nope_storage, a.k_scale, a.cache_k, a.key_lanes,
                  a.k_nope_offset);
  }
}

// The work of thread `thread` of block `block` of one launch over the segments one after the other (blocks of
// block_dim threads; threads past the grid's work return): the host's run of the grid.
ROPEKIT_HD void append_thread(const AppendShape& a, std::int64_t block, int thread, int block_dim) {
  std::int64_t g = block * block_dim + thread;
  if (g < a.pair_threads()) return append_part<AppendPart::Pairs>(a, g);
  g -= a.pair_threads();
  if (g < a.norm_threads()) return append_part<AppendPart::Norms>(a, g);
  g -= a.norm_threads();
  if (g < a.value_threads()) return append_part<AppendPart::Values>(a, g);
  g -= a.value_threads();
  if (g < a.nope_threads()) append_part<AppendPart::Nope>(a, g);
}

// The blocks of block_dim threads the queries' rotation takes at the head of a one-launch append (0 where it rotates
// no queries): whole blocks, so that each keeps the rotation kernel's grid.
ROPEKIT_HD std::int64_t query_blocks(const AppendShape& a, int block_dim) {
  return a.rotates_queries() ? blocks_of(query_rotation(a).threads(), block_dim) : 0;
}
// The blocks of a one-launch append's grid: the queries', then the segments'.
ROPEKIT_HD std::int64_t one_launch_blocks(const AppendShape& a, int block_dim) {
  return query_blocks(a, block_dim) + blocks_of(a.threads(), block_dim);
}

// Thread `thread` of block `block` of a one-launch append (AppendShape::one_launch): the queries' rotation, as the
// rotation kernel would run it, in the first query_blocks blocks; the append's segments (append_thread) in the rest.
// The two write disjoint memory, as the separate launches do.
ROPEKIT_HD_INLINED void append_launch_thread(const AppendShape& a, std::int64_t block, int thread, int block_dim) {
  const std::int64_t q_blocks = query_blocks(a, block_dim);
  if (block < q_blocks) return rotate_thread(query_rotation(a), block, thread, block_dim);
  append_thread(a, block - q_blocks, thread, block_dim);
}

}  // namespace ropekit::cuda
