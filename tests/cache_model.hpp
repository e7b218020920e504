// tests/cache_model.hpp — a plain model of what a PagedKvCache (and so a KvCache: one sequence in one page) must
// hold after any history of operations, and a driver that applies one operation to both and compares them
// (issue 66: model-based tests; tests/cache_model_test.cpp runs long random histories, tests/fuzz/cache_ops_fuzz.cpp
// decodes the operations from its input).
//
// The model keeps, per sequence, each entry's position, the unrotated key and the value as they were given, the plan
// the sequence is rotated under and each entry's error budget. After every operation the cache must agree with it:
// lengths, positions and free pages exactly, values bit for bit (stored once, never touched again), and every key pair
// within its contract of m·R(p)k computed here in double from the entry's own key, position and plan:
//   append  5 ε·m·|pair| (kv_cache.hpp; one float32 rotation)       + one rounding to storage (16-bit, fp8)
//   shift   2.5 ε·m·|pair| per K-shift (kv_cache.hpp)                + one rounding to storage
//   rerotate 10 ε·m·|pair| (inverse and forward: 15 in all after one) + one rounding to storage
// where a rounding to storage is at most √2·(u·m·|pair| + floor) for a pair (u: the type's relative half spacing,
// floor: its absolute one below the normals) — the bounds tests/kv_cache_test.cpp checks once, here after arbitrarily
// long histories. A refused operation (ropekit::Error) must change nothing; the model says which operations must be
// refused (overflow, a plan that differs from the sequence's, a shift below position 0, seq_cp onto itself).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "ropekit/ropekit.hpp"

namespace cache_model {

using namespace ropekit;

inline constexpr double kEps = 0x1p-24;
inline constexpr int kHeadDim = 16;
inline constexpr std::int64_t kKvHeads = 2;

// Two plans of one LongRoPE spec (short factors at length 32, long ones at 80): the sequences switch between them
// by rerotate, and a magnitude m ≠ 1 rides on every key.
inline Spec spec() {
  Spec s{.head_dim = kHeadDim, .rotary_dim = kHeadDim, .base = 10000.0, .pairing = Pairing::Half};
  std::vector<double> short_factor(kHeadDim / 2), long_factor(kHeadDim / 2);
  for (int i = 0; i < kHeadDim / 2; ++i) {
    short_factor[std::size_t(i)] = 1.0 + 0.05 * i;
    long_factor[std::size_t(i)] = 1.0 + 2.5 * i;
  }
  s.scaling = scaling::LongRope{short_factor, long_factor, 64, 8.0, std::nullopt};
  return s;
}

struct Ropes {
  Spec s = spec();
  Rope a{s, AngleMode::Accurate, 32};
  Rope b{s, AngleMode::Accurate, 80};
  const Rope& at(int plan) const { return plan == 0 ? a : b; }
};

// The storage type's rounding: relative half spacing u and absolute floor, in the units of the stored value.
struct Rounding {
  double u = 0.0, floor = 0.0;
};
inline Rounding rounding_of(CacheDType dtype, float scale) {
  switch (dtype) {
    case CacheDType::F32: return {};  // inside the ε budget (the contract's 5 ε includes the float32 store)
    case CacheDType::BF16: return {0x1p-8, 0.0};
    case CacheDType::F16: return {0x1p-11, 0x1p-25};
    case CacheDType::F8E4M3:
      return {0x1p-4, 0x1p-10 * double(scale)};  // dtype.hpp: half a spacing, relative and below 2^-6
  }
  return {};
}

struct Entry {
  std::int64_t pos = 0;
  std::vector<float> k, v;  // [kv_heads × head_dim], as given
  double eps_units = 0.0;   // the budget in ε·m·|pair|
  int roundings = 0;        // roundings to the storage type
};

struct Sequence {
  std::vector<Entry> entries;
  int plan = -1;  // the plan of its keys (meaningful while it has entries)
};

// One operation. Positions and ranges are chosen by the generator (or decoded by the fuzzer) and may be refused.
struct Op {
  // EraseEntries / ShiftEntries: over entries [p0, p1) in entry order whatever their positions — KvCache's slot
  // operations (kv_cache.hpp), which are these on its one sequence.
  enum Kind { Append, Erase, Shift, Copy, Clear, Rerotate, EraseEntries, ShiftEntries } kind = Append;
  std::vector<int> seq_of;  // Append: one sequence per token
  std::vector<std::int64_t> positions;
  int plan = 0;  // Append: the rope used; Rerotate: the target plan
  int seq = 0, dst = 0;
  std::int64_t p0 = -1, p1 = -1, delta = 0;
  std::uint64_t values_seed = 0;
  std::string describe() const;
};

inline std::string Op::describe() const {
  static const char* const kNames[] = {"append", "erase",    "shift",         "copy",
                                       "clear",  "rerotate", "erase_entries", "shift_entries"};
  std::ostringstream s;  // not a chain of std::string +: GCC 12 warns falsely (-Wrestrict) on those at -O3
  s << kNames[kind];
  if (kind == Append) {
    s << " plan " << plan << " tokens";
    for (std::size_t t = 0; t < seq_of.size(); ++t) s << ' ' << seq_of[t] << '@' << positions[t];
  } else {
    s << " seq " << seq;
    if (kind == Copy) s << " -> " << dst;
    s << " [" << p0 << ", " << p1 << ") delta " << delta << " plan " << plan;
  }
  return s.str();
}

class Harness {
 public:
  Harness(const Ropes& ropes, PagedKvCacheShape shape)
      : ropes_(ropes), shape_(shape), cache_(ropes.a, shape), model_(std::size_t(shape.max_sequences)) {}

  const PagedKvCache& cache() const { return cache_; }
  const std::vector<Sequence>& model() const { return model_; }

  // Applies op to the cache and the model. Returns "" when they agree afterwards, else what differs.
  std::string step(const Op& op) {
    const std::optional<bool> expected_ok = apply_to_model(op);  // nullopt: the model cannot tell (none so far)
    bool ok = true;
    std::string error;
    try {
      apply_to_cache(op);
    } catch (const Error& e) {
      ok = false;
      error = e.what();
    }
    if (expected_ok && *expected_ok != ok) {
      return ok ? "the cache accepted an operation the model refuses" : "the cache refused: " + error;
    }
    if (!ok) {
      model_ = before_;  // a refused operation changes nothing: the cache must equal the model before it
      ++refused_;
    }
    return compare();
  }
  std::int64_t refused() const { return refused_; }

 private:
  // A key or value lane: uniform in (−3, 3) from a hash of (seed, index) — splitmix64, so that the model and the
  // cache's input are the same numbers without storing them.
  static float value_of(std::uint64_t seed, std::size_t i) {
    std::uint64_t z = seed + (std::uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return float((double(z >> 11) * 0x1p-53 - 0.5) * 6.0);
  }
  std::int64_t pages_of(std::int64_t n) const { return (n + shape_.page_size - 1) / shape_.page_size; }
  std::int64_t free_pages(const std::vector<Sequence>& m) const {
    std::int64_t used = 0;
    for (const Sequence& s : m) used += pages_of(std::int64_t(s.entries.size()));
    return shape_.num_pages - used;
  }
  static bool in_range(std::int64_t pos, std::int64_t p0, std::int64_t p1) {
    return (p0 < 0 || pos >= p0) && (p1 < 0 || pos < p1);
  }
  bool is_16_or_8_bit() const { return shape_.dtype != CacheDType::F32; }

  // One entry's K-shift: false when it would fall below position 0 (the whole operation is then refused).
  bool shift(Entry& e, std::int64_t delta) const {
    if (e.pos + delta < 0) return false;
    e.pos += delta;
    if (delta != 0) {
      e.eps_units += 2.5;
      e.roundings += is_16_or_8_bit() ? 1 : 0;
    }
    return true;
  }

  // The model's update; returns whether the operation must succeed.
  std::optional<bool> apply_to_model(const Op& op) {
    before_ = model_;
    switch (op.kind) {
      case Op::Append: {
        std::vector<std::int64_t> added(model_.size(), 0);
        for (const int s : op.seq_of) ++added[std::size_t(s)];
        std::int64_t pages = 0;
        for (std::size_t s = 0; s < model_.size(); ++s) {
          const Sequence& q = model_[s];
          if (added[s] > 0 && !q.entries.empty() && q.plan != op.plan) return false;  // rerotate it first
          pages += pages_of(std::int64_t(q.entries.size()) + added[s]) - pages_of(std::int64_t(q.entries.size()));
        }
        if (pages > free_pages(model_)) return false;
        for (std::size_t t = 0; t < op.seq_of.size(); ++t) {
          Sequence& q = model_[std::size_t(op.seq_of[t])];
          Entry e;
          e.pos = op.positions[t];
          for (std::size_t i = 0; i < std::size_t(kKvHeads * kHeadDim); ++i) {
            e.k.push_back(value_of(op.values_seed, 2 * (t * 64 + i)));
            e.v.push_back(value_of(op.values_seed, 2 * (t * 64 + i) + 1));
          }
          e.eps_units = 5.0;
          e.roundings = is_16_or_8_bit() ? 1 : 0;
          q.entries.push_back(std::move(e));
          q.plan = op.plan;
        }
        return true;
      }
      case Op::Erase: {
        auto& v = model_[std::size_t(op.seq)].entries;
        std::erase_if(v, [&](const Entry& e) { return in_range(e.pos, op.p0, op.p1); });
        return true;
      }
      case Op::Shift: {
        for (Entry& e : model_[std::size_t(op.seq)].entries) {
          if (in_range(e.pos, op.p0, op.p1) && !shift(e, op.delta)) return false;
        }
        return true;
      }
      case Op::Copy: {
        if (op.seq == op.dst) return false;
        Sequence& src = model_[std::size_t(op.seq)];
        Sequence& dst = model_[std::size_t(op.dst)];
        std::vector<Entry> copied;
        for (const Entry& e : src.entries) {
          if (in_range(e.pos, op.p0, op.p1)) copied.push_back(e);
        }
        if (copied.empty()) return std::nullopt;  // nothing to copy: either answer is a reading of the contract
        if (!dst.entries.empty() && dst.plan != src.plan) return false;
        const std::int64_t n = std::int64_t(dst.entries.size());
        if (pages_of(n + std::int64_t(copied.size())) - pages_of(n) > free_pages(model_)) return false;
        dst.plan = src.plan;
        dst.entries.insert(dst.entries.end(), copied.begin(), copied.end());
        return true;
      }
      case Op::Clear: model_[std::size_t(op.seq)] = Sequence{}; return true;
      case Op::EraseEntries:
      case Op::ShiftEntries: {
        auto& v = model_[std::size_t(op.seq)].entries;
        if (op.p0 < 0 || op.p1 < op.p0 || op.p1 > std::int64_t(v.size())) return false;  // not inside [0, length)
        if (op.kind == Op::EraseEntries) {
          v.erase(v.begin() + op.p0, v.begin() + op.p1);
          return true;
        }
        for (std::int64_t i = op.p0; i < op.p1; ++i) {
          if (!shift(v[std::size_t(i)], op.delta)) return false;
        }
        return true;
      }
      case Op::Rerotate: {
        Sequence& q = model_[std::size_t(op.seq)];
        if (q.entries.empty() || q.plan == op.plan) {  // false, adopting the plan (paged_kv_cache.hpp)
          q.plan = op.plan;
          rerotated_expected_ = false;
          return true;
        }
        for (Entry& e : q.entries) {
          e.eps_units += 10.0;
          e.roundings += is_16_or_8_bit() ? 1 : 0;
        }
        q.plan = op.plan;
        rerotated_expected_ = true;
        return true;
      }
    }
    return std::nullopt;
  }

  void apply_to_cache(const Op& op) {
    switch (op.kind) {
      case Op::Append: {
        const std::size_t n = op.seq_of.size(), lanes = std::size_t(kKvHeads * kHeadDim);
        std::vector<float> k(n * lanes), v(n * lanes);
        for (std::size_t t = 0; t < n; ++t) {
          for (std::size_t i = 0; i < lanes; ++i) {
            k[t * lanes + i] = value_of(op.values_seed, 2 * (t * 64 + i));
            v[t * lanes + i] = value_of(op.values_seed, 2 * (t * 64 + i) + 1);
          }
        }
        std::vector<std::int32_t> seq_of(op.seq_of.begin(), op.seq_of.end());
        AppendArgs args;
        args.k = bshd(k.data(), DType::F32, 1, std::int64_t(n), kKvHeads, kHeadDim);
        args.v = bshd(v.data(), DType::F32, 1, std::int64_t(n), kKvHeads, kHeadDim);
        args.positions = positions(op.positions);
        args.threads = 1;
        cache_.append(ropes_.at(op.plan), seq_of, args);
        break;
      }
      case Op::Erase: cache_.erase(op.seq, op.p0, op.p1); break;
      case Op::Shift: cache_.shift(op.seq, op.p0, op.p1, op.delta); break;
      case Op::Copy: cache_.seq_cp(op.seq, op.dst, op.p0, op.p1); break;
      case Op::Clear: cache_.seq_clear(op.seq); break;
      case Op::EraseEntries: cache_.erase_entries(op.seq, op.p0, op.p1); break;
      case Op::ShiftEntries: cache_.shift_entries(op.seq, op.p0, op.p1, op.delta); break;
      case Op::Rerotate:
        if (cache_.rerotate(op.seq, ropes_.at(op.plan)) != rerotated_expected_) {
          throw std::logic_error("rerotate returned the other answer");  // not an Error: reported as a mismatch
        }
        break;
    }
  }

  float widen(const void* p, int lane, bool key) const {
    const float scale = key ? shape_.k_scale : shape_.v_scale;
    switch (shape_.dtype) {
      case CacheDType::F32: return static_cast<const float*>(p)[lane];
      case CacheDType::BF16: return bf16_to_float(static_cast<const std::uint16_t*>(p)[lane]);
      case CacheDType::F16: return f16_to_float(static_cast<const std::uint16_t*>(p)[lane]);
      case CacheDType::F8E4M3: return e4m3_to_float(static_cast<const std::uint8_t*>(p)[lane]) * scale;
    }
    return 0.0f;
  }
  // The value as stored: one conversion of the given float.
  float stored_value(float v) const {
    switch (shape_.dtype) {
      case CacheDType::F32: return v;
      case CacheDType::BF16: return bf16_to_float(float_to_bf16(v));
      case CacheDType::F16: return f16_to_float(float_to_f16(v));
      case CacheDType::F8E4M3: return e4m3_to_float(float_to_e4m3(v / shape_.v_scale)) * shape_.v_scale;
    }
    return 0.0f;
  }

  std::string compare() const {
    const PagedCache& pc = cache_.cache();
    const Rounding r = rounding_of(shape_.dtype, shape_.k_scale);
    if (cache_.free_pages() != free_pages(model_)) {
      return "free pages " + std::to_string(cache_.free_pages()) + ", the model " + std::to_string(free_pages(model_));
    }
    for (std::size_t s = 0; s < model_.size(); ++s) {
      const Sequence& q = model_[s];
      const int seq = int(s);
      const std::string where = "sequence " + std::to_string(s);
      if (cache_.length(seq) != std::int64_t(q.entries.size())) {
        return where + ": length " + std::to_string(cache_.length(seq)) + ", the model " +
               std::to_string(q.entries.size());
      }
      if (q.entries.empty()) continue;
      const Plan& plan = ropes_.at(q.plan).plan();
      if (cache_.plan(seq).inv_freq != plan.inv_freq) return where + ": not rotated under the model's plan";
      const double m = plan.cos_sin_scale;
      const std::span<const std::int64_t> pos = cache_.positions(seq);
      const std::span<const std::int32_t> pages = cache_.pages(seq);
      if (std::int64_t(pages.size()) != pages_of(std::int64_t(q.entries.size()))) return where + ": page count";
      for (std::size_t i = 0; i < q.entries.size(); ++i) {
        const Entry& e = q.entries[i];
        const std::string at = where + " entry " + std::to_string(i);
        if (pos[i] != e.pos)
          return at + ": position " + std::to_string(pos[i]) + ", the model " + std::to_string(e.pos);
        const std::int64_t slot = std::int64_t(pages[i / std::size_t(shape_.page_size)]) * shape_.page_size +
                                  std::int64_t(i) % shape_.page_size;
        for (std::int64_t h = 0; h < kKvHeads; ++h) {
          const float* k = e.k.data() + h * kHeadDim;
          const void* key = pc.key(slot, h);
          const void* value = pc.value(slot, h);
          for (int lane = 0; lane < kHeadDim; ++lane) {
            const float want = stored_value(e.v[std::size_t(h * kHeadDim + lane)]);
            if (widen(value, lane, false) != want) {
              return at + " head " + std::to_string(h) + ": value lane " + std::to_string(lane) + " changed";
            }
          }
          for (int j = 0; j < kHeadDim / 2; ++j) {
            const int a = j, b = j + kHeadDim / 2;  // half pairing (spec.hpp)
            const double angle = double(e.pos) * plan.inv_freq[std::size_t(j)];
            const double c = std::cos(angle), sn = std::sin(angle);
            const double want_a = m * (double(k[a]) * c - double(k[b]) * sn);
            const double want_b = m * (double(k[b]) * c + double(k[a]) * sn);
            const double norm = m * std::hypot(double(k[a]), double(k[b]));
            const double err = std::hypot(widen(key, a, true) - want_a, widen(key, b, true) - want_b);
            const double bound = e.eps_units * kEps * norm + e.roundings * std::sqrt(2.0) * (r.u * norm + r.floor);
            if (!(err <= bound)) {
              return at + " head " + std::to_string(h) + " pair " + std::to_string(j) + ": error " +
                     std::to_string(err / std::max(norm, 1e-30)) + "·m|pair| over its bound " +
                     std::to_string(bound / std::max(norm, 1e-30)) + " (" + std::to_string(e.eps_units) + " ε, " +
                     std::to_string(e.roundings) + " roundings)";
            }
          }
        }
      }
    }
    return "";
  }

  const Ropes& ropes_;
  PagedKvCacheShape shape_;
  PagedKvCache cache_;
  std::vector<Sequence> model_, before_;
  bool rerotated_expected_ = false;
  std::int64_t refused_ = 0;
};

// A random operation, weighted towards appends and shifts; positions follow each sequence's largest (sometimes
// jumping ahead), ranges and deltas are small so that refusals (below 0, overflow, another plan) happen too.
inline Op random_op(std::mt19937_64& g, const std::vector<Sequence>& model) {
  const auto below = [&](std::int64_t n) { return std::int64_t(g() % std::uint64_t(n)); };
  const int sequences = int(model.size());
  Op op;
  const std::int64_t roll = below(100);
  const auto pick_range = [&](Op& o) {
    const Sequence& q = model[std::size_t(o.seq)];
    std::int64_t lo = 0, hi = 1;
    for (const Entry& e : q.entries) hi = std::max(hi, e.pos + 1);
    o.p0 = below(4) == 0 ? -1 : lo + below(hi + 2);
    o.p1 = below(4) == 0 ? -1 : o.p0 + below(hi + 2);
  };
  op.seq = int(below(sequences));
  if (roll < 45) {
    op.kind = Op::Append;
    op.plan = int(below(2));
    const std::int64_t tokens = 1 + below(6);
    std::vector<std::int64_t> next(model.size());
    for (std::size_t s = 0; s < model.size(); ++s) {
      for (const Entry& e : model[s].entries) next[s] = std::max(next[s], e.pos + 1);
    }
    for (std::int64_t t = 0; t < tokens; ++t) {
      const int s = below(3) == 0 ? int(below(sequences)) : op.seq;
      op.seq_of.push_back(s);
      if (below(10) == 0) next[std::size_t(s)] += below(50);
      op.positions.push_back(next[std::size_t(s)]++);
    }
    // Mostly the plan the sequences already have, so that appends are not refused too often.
    if (!model[std::size_t(op.seq)].entries.empty() && below(8) != 0) op.plan = model[std::size_t(op.seq)].plan;
    op.values_seed = g();
  } else if (roll < 55) {
    op.kind = Op::Erase;
    pick_range(op);
  } else if (roll < 72) {
    op.kind = Op::Shift;
    pick_range(op);
    op.delta = below(41) - 20;
  } else if (roll < 82) {
    op.kind = below(2) == 0 ? Op::EraseEntries : Op::ShiftEntries;
    const std::int64_t n = std::int64_t(model[std::size_t(op.seq)].entries.size());
    op.p0 = below(n + 2) - (below(20) == 0 ? 1 : 0);  // now and then outside [0, length)
    op.p1 = op.p0 + below(n + 2);
    op.delta = below(41) - 20;
  } else if (roll < 90) {
    op.kind = Op::Copy;
    op.dst = int(below(sequences));
    pick_range(op);
  } else if (roll < 93) {
    op.kind = Op::Clear;
  } else {
    op.kind = Op::Rerotate;
    op.plan = int(below(2));
  }
  return op;
}

}  // namespace cache_model
