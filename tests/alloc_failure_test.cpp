// Allocation failure (issue 66): this program replaces the global operator new with one that fails the k-th
// allocation from a chosen point on, and sweeps k over every allocation of an operation — loading each model format,
// growing a Rope's table, a RopeSet, appending to a KvCache and a PagedKvCache — until the operation completes
// untouched. Each failure must surface as std::bad_alloc or ropekit::Error (never a crash, never std::terminate),
// leak nothing (the dev tier's AddressSanitizer checks at exit), and leave the object usable: the next attempt, with
// memory back, gives exactly the result of a run that never failed. The C API's sweep fails every allocation from the
// k-th on (memory gone, not one unlucky allocation): each failure is a status and a message, never an exception
// through C.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "attention_oracle.hpp"
#include "config/json.hpp"
#include "ropekit/ropekit.h"
#include "ropekit/ropekit.hpp"

namespace {

// Allocations left before the failing one; negative: none fails. Only the thread that armed it fails. Sticky: every
// allocation from that one on fails too.
std::atomic<long> g_left{-1};
std::atomic<bool> g_fired{false}, g_sticky{false};
thread_local bool t_armed = false;

bool fails_now() {
  if (!t_armed) return false;
  if (g_sticky.load(std::memory_order_relaxed)) return g_fired.load() || g_left.fetch_sub(1) == 0;
  return g_left.load(std::memory_order_relaxed) >= 0 && g_left.fetch_sub(1) == 0;
}

void* allocate(std::size_t n, std::size_t align) {
  if (fails_now()) {
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
  explicit Arm(long k, bool sticky = false) {
    g_fired = false;
    g_sticky = sticky;
    g_left = k;
    t_armed = true;
  }
  ~Arm() {
    t_armed = false;
    g_left = -1;
    g_sticky = false;
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
long sweep(const char* what, Op op, Check check, bool sticky = false) {
  for (long k = 0;; ++k) {
    bool failed = false;
    try {
      Arm arm(k, sticky);
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
  // A Hugging Face directory's config.json and safetensors header are JSON: nlohmann-json's value destructor
  // (noexcept) allocates, so the readers free their documents without allocating first (config/json.hpp) — before
  // that, this sweep ended in std::terminate. Sticky: every allocation from the k-th on fails too.
  for (const std::string& path : {repo + "/models/tinystories-260k.bin", repo + "/tests/data/hf_models/llama_f32.gguf",
                                  repo + "/tests/data/hf_models/llama_f32"}) {
    SCOPED_TRACE(path);
    const LlamaModel want = load_model_file(path);
    for (const bool map : {true, false}) {
      for (const bool sticky : {false, true}) {
        LlamaModel got;
        const long swept = sweep(
            path.c_str(), [&] { got = load_model_file(path, {.map = map}); }, [](long) {}, sticky);
        EXPECT_GT(swept, 0);
        EXPECT_EQ(got.token_embedding, want.token_embedding);
        EXPECT_EQ(got.config.n_layers, want.config.n_layers);
      }
    }
  }
}

// config/json.hpp's release(): a document — wide, and deeper than its path window (128) — freed with every
// allocation failing from the first: nothing may allocate, and the document is left empty.
TEST(AllocationFailure, JsonDocumentsAreFreedWithoutAllocating) {
  std::string text = R"({"a": [1, 2.5, "three", {"b": null, "c": [true, {}]}], "d": {"e": "f"}, "deep": )";
  for (int i = 0; i < 300; ++i) text += R"([{"k": "v", "n": [1, 2]}, )";
  text += "0";
  for (int i = 0; i < 300; ++i) text += "]";
  text += "}";
  for (const bool whole : {true, false}) {
    detail::Document doc = detail::parse_json(text, "test");
    ASSERT_TRUE(doc->is_object());
    {
      Arm arm(0, /*sticky=*/true);
      if (whole) {
        detail::release(*doc);
      } else {
        detail::Document moved = std::move(doc);  // the destructor's path
      }
      EXPECT_FALSE(Arm::fired()) << "release() allocated";
    }
    EXPECT_TRUE(doc->is_null() || doc->empty());
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

// The C API's sweep: op() returns a status; from the k-th allocation on every one fails. A failure must be
// RK_OUT_OF_MEMORY (or RK_INVALID_ARGUMENT from a reader naming what it was reading) with a message, then check(k).
template <class Op, class Check>
long sweep_c(const char* what, Op op, Check check) {
  for (long k = 0;; ++k) {
    rk_status status = RK_OK;
    bool fired = false;
    {
      Arm arm(k, /*sticky=*/true);
      status = op();
      fired = Arm::fired();
    }
    if (!fired) {
      EXPECT_EQ(status, RK_OK) << what << ": " << rk_last_error();
      std::printf("%s: %ld allocations swept (C API)\n", what, k);
      return k;
    }
    if (status == RK_OK) {
      ADD_FAILURE() << what << ": RK_OK although allocation " << k << " failed";
      return k;
    }
    EXPECT_TRUE(status == RK_OUT_OF_MEMORY || status == RK_INVALID_ARGUMENT)
        << what << ": " << rk_status_name(status) << " at allocation " << k << ": " << rk_last_error();
    EXPECT_NE(std::string(rk_last_error()), "") << what;
    check(k);
    if (::testing::Test::HasFailure()) return k;
    if (k > 200000) {
      ADD_FAILURE() << what << ": no end after " << k << " allocations";
      return k;
    }
  }
}

TEST(AllocationFailure, TheCApiReturnsAStatus) {
  rk_model* model = nullptr;
  sweep_c(
      "rk_model_from_preset", [&] { return rk_model_from_preset("qwen2.5-7b-instruct-yarn4", &model); },
      [&](long k) { ASSERT_EQ(model, nullptr) << "a handle after failing allocation " << k; });
  ASSERT_NE(model, nullptr);
  rk_spec* spec = nullptr;
  sweep_c(
      "rk_model_layer_spec", [&] { return rk_model_layer_spec(model, -1, &spec); },
      [&](long) { ASSERT_EQ(spec, nullptr); });
  rk_rope* rope = nullptr;
  sweep_c(
      "rk_rope_create", [&] { return rk_rope_create(spec, RK_ANGLES_ACCURATE, 0, &rope); },
      [&](long) { ASSERT_EQ(rope, nullptr); });

  // Rotations far out on a plain RoPE, each attempt from the same input, the end result the serial one's (the
  // one-shot rk_rope_apply allocates nothing here: its sweep ends at 0; rk_rope_prepare allocates the call).
  rk_spec* plain = nullptr;
  rk_rope* plain_rope = nullptr;
  ASSERT_EQ(rk_spec_create(64, 64, 10000.0, RK_HALF, &plain), RK_OK);
  ASSERT_EQ(rk_rope_create(plain, RK_ANGLES_ACCURATE, 0, &plain_rope), RK_OK);
  const int d = 64;
  const std::int64_t seq = 16, heads = 2;
  const std::vector<float> q0 = attn_oracle::normal(std::size_t(seq * heads * d), 6);
  const auto pos = iota(seq, 20000);
  const auto rotated = [&](const rk_rope* r, std::vector<float>& q) {
    rk_rotate_args args{};
    args.q = rk_bshd(q.data(), RK_F32, 1, seq, heads, d);
    args.positions = rk_positions_i64(pos.data(), seq);
    args.threads = 1;
    return rk_rope_apply(r, &args);
  };
  std::vector<float> want = q0;
  {
    rk_rope* fresh = nullptr;
    ASSERT_EQ(rk_rope_create(plain, RK_ANGLES_ACCURATE, 0, &fresh), RK_OK);
    ASSERT_EQ(rotated(fresh, want), RK_OK);
    rk_rope_destroy(fresh);
  }
  std::vector<float> q = q0;  // reset in place inside the sweeps: the test's own allocations must not fail
  sweep_c(
      "rk_rope_apply",
      [&] {
        std::copy(q0.begin(), q0.end(), q.begin());
        return rotated(plain_rope, q);
      },
      [](long) {});
  EXPECT_EQ(q, want);

  rk_call* call = nullptr;
  sweep_c(
      "rk_rope_prepare",
      [&] {
        std::copy(q0.begin(), q0.end(), q.begin());
        rk_rotate_args args{};
        args.q = rk_bshd(q.data(), RK_F32, 1, seq, heads, d);
        args.positions = rk_positions_i64(pos.data(), seq);
        return rk_rope_prepare(plain_rope, &args, &call);
      },
      [&](long) { ASSERT_EQ(call, nullptr); });
  ASSERT_EQ(rk_call_run(call, 0, rk_call_rows(call)), RK_OK);
  EXPECT_EQ(q, want);
  rk_call_destroy(call);
  rk_rope_destroy(plain_rope);
  rk_spec_destroy(plain);

  rk_rope_set* set = nullptr;
  sweep_c(
      "rk_rope_set_create", [&] { return rk_rope_set_create(spec, RK_ANGLES_ACCURATE, 0, 0, &set); },
      [&](long) { ASSERT_EQ(set, nullptr); });
  rk_rope* at = nullptr;
  sweep_c(
      "rk_rope_set_at", [&] { return rk_rope_set_at(set, 100000, &at); }, [&](long) { ASSERT_EQ(at, nullptr); });
  rk_rope_destroy(at);
  rk_rope_set_destroy(set);

  // A paged cache: made, then appended to; a failed append leaves it empty, with every page free.
  const rk_paged_kv_cache_shape shape{.num_pages = 8,
                                      .page_size = 4,
                                      .kv_heads = heads,
                                      .head_dim = 0,
                                      .v_head_dim = 0,
                                      .dtype = RK_CACHE_BF16,
                                      .layout = RK_NHD,
                                      .k_scale = 0,
                                      .v_scale = 0,
                                      .max_sequences = 2};
  rk_paged_kv_cache* cache = nullptr;
  sweep_c(
      "rk_paged_kv_cache_create", [&] { return rk_paged_kv_cache_create(rope, &shape, &cache); },
      [&](long) { ASSERT_EQ(cache, nullptr); });
  const int cache_d = rk_spec_head_dim(spec);  // the preset's rope, which the cache rotates with
  std::vector<float> k = attn_oracle::normal(std::size_t(seq * heads * cache_d), 7),
                     v = attn_oracle::normal(k.size(), 8);
  const std::vector<std::int32_t> seq_of(std::size_t(seq), 1);
  rk_append_args a{};
  a.k = rk_bshd(k.data(), RK_F32, 1, seq, heads, cache_d);
  a.v = rk_bshd(v.data(), RK_F32, 1, seq, heads, cache_d);
  a.positions = rk_positions_i64(pos.data(), seq);
  a.threads = 1;
  sweep_c(
      "rk_paged_kv_cache_append", [&] { return rk_paged_kv_cache_append(cache, rope, seq_of.data(), &a); },
      [&](long at_k) {
        std::int64_t length = -1, free = -1;
        ASSERT_EQ(rk_paged_kv_cache_length(cache, 1, &length), RK_OK);
        ASSERT_EQ(rk_paged_kv_cache_free_pages(cache, &free), RK_OK);
        ASSERT_TRUE(length == 0 && free == 8) << "a failed append (allocation " << at_k << ") changed the cache";
      });
  std::int64_t length = 0;
  ASSERT_EQ(rk_paged_kv_cache_length(cache, 1, &length), RK_OK);
  EXPECT_EQ(length, seq);
  int rerotated = 0;
  sweep_c(
      "rk_paged_kv_cache_seq_cp", [&] { return rk_paged_kv_cache_seq_cp(cache, 1, 0, -1, -1); },
      [&](long) {
        std::int64_t n = -1;
        ASSERT_EQ(rk_paged_kv_cache_length(cache, 0, &n), RK_OK);
        ASSERT_EQ(n, 0);
      });
  (void)rerotated;
  rk_paged_kv_cache_destroy(cache);
  rk_rope_destroy(rope);
  rk_spec_destroy(spec);
  rk_model_destroy(model);
}

}  // namespace
