// Allocation failure (issue 66): this program replaces the global operator new with one that fails the k-th
// allocation from a chosen point on, and sweeps k over every allocation of an operation — loading each model format,
// growing a Rope's table, a RopeSet, appending to a KvCache and a PagedKvCache — until the operation completes
// untouched. Each failure must surface as std::bad_alloc or ropekit::Error (never a crash, never std::terminate),
// leak nothing (the dev tier's AddressSanitizer checks at exit), and leave the object usable: the next attempt, with
// memory back, gives exactly the result of a run that never failed.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "attention_oracle.hpp"
#include "ropekit/ropekit.hpp"

namespace {

// Allocations left before the failing one; negative: none fails. Only the thread that armed it fails.
std::atomic<long> g_left{-1};
std::atomic<bool> g_fired{false};
thread_local bool t_armed = false;

void* allocate(std::size_t n, std::size_t align) {
  if (t_armed && g_left.load(std::memory_order_relaxed) >= 0 && g_left.fetch_sub(1) == 0) {
    g_fired = true;
    throw std::bad_alloc();
  }
  if (n == 0) n = 1;
  void* p =
      align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

struct Arm {
  explicit Arm(long k) {
    g_fired = false;
    g_left = k;
    t_armed = true;
  }
  ~Arm() {
    t_armed = false;
    g_left = -1;
  }
  // Whether the failing allocation was reached (the operation saw the failure).
  static bool fired() { return g_fired.load(); }
};

}  // namespace

void* operator new(std::size_t n) { return allocate(n, alignof(std::max_align_t)); }
void* operator new[](std::size_t n) { return allocate(n, alignof(std::max_align_t)); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate(n, std::size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

using namespace ropekit;

// Runs op with the k-th allocation failing for k = 0, 1, ... until op completes without reaching it; after each
// failure, check() must hold. Returns the number of allocations swept.
template <class Op, class Check>
long sweep(const char* what, Op op, Check check) {
  for (long k = 0;; ++k) {
    bool failed = false;
    try {
      Arm arm(k);
      op();
    } catch (const std::bad_alloc&) {
      failed = true;
      if (!Arm::fired()) {
        ADD_FAILURE() << what << ": std::bad_alloc without the failing allocation (a real one, of a size gone wrong?)";
        return k;
      }
    } catch (const Error& e) {
      failed = true;  // a reader may report the failure as its own error (naming what it was reading)
      if (Arm::fired() == false) {
        ADD_FAILURE() << what << ": an error without a failed allocation: " << e.what();
        return k;
      }
    }
    if (!failed) {
      std::printf("%s: %ld allocations swept\n", what, k);
      return k;
    }
    check(k);
    if (::testing::Test::HasFatalFailure()) return k;
    if (k > 200000) {
      ADD_FAILURE() << what << ": no end after " << k << " allocations";
      return k;
    }
  }
}

Spec llama(int d = 64) { return {.head_dim = d, .rotary_dim = d, .base = 10000.0, .pairing = Pairing::Half}; }

std::vector<std::int64_t> iota(std::int64_t n, std::int64_t first = 0) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[std::size_t(i)] = first + i;
  return p;
}

TEST(AllocationFailure, LoadingEachModelFormat) {
  const std::string repo = ROPEKIT_REPO_DIR;
  // Not a Hugging Face directory: its config.json is parsed by nlohmann-json, whose value destructor (noexcept)
  // allocates a stack to free nested values — an allocation failing there calls std::terminate (found by this sweep;
  // docs/reliability.md).
  for (const std::string& path :
       {repo + "/models/tinystories-260k.bin", repo + "/tests/data/hf_models/llama_f32.gguf"}) {
    SCOPED_TRACE(path);
    const LlamaModel want = load_model_file(path);
    for (const bool map : {true, false}) {
      LlamaModel got;
      const long swept = sweep(
          path.c_str(), [&] { got = load_model_file(path, {.map = map}); }, [](long) {});
      EXPECT_GT(swept, 0);
      EXPECT_EQ(got.token_embedding, want.token_embedding);
      EXPECT_EQ(got.config.n_layers, want.config.n_layers);
    }
  }
}

TEST(AllocationFailure, GrowingARopesTableAndARopeSet) {
  const Rope rope(llama());
  const std::vector<float> q0 = attn_oracle::normal(std::size_t(64 * 2 * 64), 1);
  const auto apply_at = [&](const Rope& r, std::int64_t first) {
    std::vector<float> q = q0;
    const auto p = iota(64, first);
    r.apply({.q = bshd(q.data(), DType::F32, 1, 64, 2, 64), .positions = positions(p), .threads = 1});
    return q;
  };
  const Rope fresh(llama());
  const std::vector<float> want = apply_at(fresh, 20000);
  sweep(
      "Rope table growth", [&] { (void)apply_at(rope, 20000); },
      [&](long k) { ASSERT_EQ(apply_at(rope, 20000), want) << "after failing allocation " << k; });

  Spec dynamic = llama(32);
  dynamic.scaling = scaling::DynamicNtk{.factor = 2.0, .max_position_embeddings = 64};
  RopeSet set(dynamic);
  const Rope planned(dynamic, AngleMode::Accurate, 300);
  sweep(
      "RopeSet::at", [&] { (void)set.at(300); },
      [&](long k) { ASSERT_EQ(set.at(300)->plan().inv_freq, planned.plan().inv_freq) << "after " << k; });
}

TEST(AllocationFailure, AppendingToTheCaches) {
  const Rope rope(llama());
  const std::int64_t n = 48, heads = 2, d = 64;
  std::vector<float> k = attn_oracle::normal(std::size_t(n * heads * d), 2), v = attn_oracle::normal(k.size(), 3);
  const auto pos = iota(n);
  KvCache reference(rope, {.capacity = 2 * n, .kv_heads = heads, .threads = 1});
  reference.append(rope, bshd(k.data(), DType::F32, 1, n, heads, d), bshd(v.data(), DType::F32, 1, n, heads, d),
                   positions(pos));
  KvCache cache(rope, {.capacity = 2 * n, .kv_heads = heads, .threads = 1});
  sweep(
      "KvCache::append",
      [&] {
        cache.append(rope, bshd(k.data(), DType::F32, 1, n, heads, d), bshd(v.data(), DType::F32, 1, n, heads, d),
                     positions(pos));
      },
      [&](long at) { ASSERT_EQ(cache.size(), 0) << "a failed append (allocation " << at << ") changed the cache"; });
  ASSERT_EQ(cache.size(), n);
  EXPECT_EQ(std::memcmp(cache.keys().data, reference.keys().data, std::size_t(n * heads * d * 4)), 0);

  PagedKvCache paged(rope, {.num_pages = 8, .page_size = 16, .kv_heads = heads, .max_sequences = 2});
  const std::vector<std::int32_t> seq_of(std::size_t(n), 1);
  sweep(
      "PagedKvCache::append",
      [&] {
        paged.append(rope, seq_of,
                     {.k = bshd(k.data(), DType::F32, 1, n, heads, d),
                      .v = bshd(v.data(), DType::F32, 1, n, heads, d),
                      .positions = positions(pos),
                      .threads = 1});
      },
      [&](long at) {
        ASSERT_EQ(paged.length(1), 0) << "a failed append (allocation " << at << ") changed the cache";
        ASSERT_EQ(paged.free_pages(), 8);
      });
  EXPECT_EQ(paged.length(1), n);
}

// Everything a PagedKvCache holds, to tell that a failed operation changed nothing.
struct Snapshot {
  std::vector<std::vector<std::int64_t>> positions;
  std::vector<std::vector<std::int32_t>> pages;
  std::int64_t free = 0;
  std::vector<std::byte> keys, values;
  bool operator==(const Snapshot&) const = default;
};
Snapshot snapshot(const PagedKvCache& c) {
  Snapshot s;
  for (int q = 0; q < c.shape().max_sequences; ++q) {
    const auto p = c.positions(q);
    const auto g = c.pages(q);
    s.positions.emplace_back(p.begin(), p.end());
    s.pages.emplace_back(g.begin(), g.end());
  }
  s.free = c.free_pages();
  const PagedCache& m = c.cache();
  const std::size_t bytes = std::size_t(m.slots() * m.kv_heads * m.head_dim) * std::size_t(element_size(m.dtype));
  s.keys.assign(static_cast<const std::byte*>(m.k), static_cast<const std::byte*>(m.k) + bytes);
  s.values.assign(static_cast<const std::byte*>(m.v), static_cast<const std::byte*>(m.v) + bytes);
  return s;
}

TEST(AllocationFailure, SequenceOperationsChangeNothingWhenTheyFail) {
  Spec spec = llama(32);
  spec.scaling = scaling::DynamicNtk{.factor = 2.0, .max_position_embeddings = 64};
  const Rope rope(spec, AngleMode::Accurate, 64), grown(spec, AngleMode::Accurate, 200);
  const std::int64_t n = 40, heads = 2, d = 32;
  std::vector<float> k = attn_oracle::normal(std::size_t(n * heads * d), 4), v = attn_oracle::normal(k.size(), 5);
  const auto pos = iota(n, 10);
  for (const CacheDType dtype : {CacheDType::F32, CacheDType::BF16, CacheDType::F8E4M3}) {
    SCOPED_TRACE(std::string(to_string(dtype)));
    const auto fresh = [&] {
      PagedKvCache c(rope, {.num_pages = 12,
                            .page_size = 8,
                            .kv_heads = heads,
                            .dtype = dtype,
                            .k_scale = dtype == CacheDType::F8E4M3 ? 0.03f : 1.0f,
                            .v_scale = dtype == CacheDType::F8E4M3 ? 0.03f : 1.0f,
                            .max_sequences = 3});
      const std::vector<std::int32_t> seq_of(std::size_t(n), 0);
      c.append(rope, seq_of,
               {.k = bshd(k.data(), DType::F32, 1, n, heads, d),
                .v = bshd(v.data(), DType::F32, 1, n, heads, d),
                .positions = positions(pos),
                .threads = 1});
      return c;
    };
    // Each operation: swept on one cache, which must equal its state before the operation after every failure and
    // a cache that ran it without failing after the success.
    const auto check_op = [&](const char* what, auto op) {
      PagedKvCache c = fresh(), want = fresh();
      op(want);
      const Snapshot before = snapshot(c);
      sweep(
          what, [&] { op(c); }, [&](long at) { ASSERT_TRUE(snapshot(c) == before) << "allocation " << at; });
      EXPECT_TRUE(snapshot(c) == snapshot(want));
    };
    check_op("shift", [](PagedKvCache& c) { c.shift(0, 20, -1, -5); });
    check_op("erase", [](PagedKvCache& c) { c.erase(0, 15, 25); });
    check_op("seq_cp", [](PagedKvCache& c) { c.seq_cp(0, 2, 12, 40); });
    check_op("rerotate", [&](PagedKvCache& c) { (void)c.rerotate(0, grown); });
    check_op("seq_clear", [](PagedKvCache& c) { c.seq_clear(0); });
  }
}

}  // namespace
