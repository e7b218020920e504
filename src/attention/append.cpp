// Fused rotate-and-append into a paged or slot-mapped KV cache the caller owns (ropekit/append.hpp):
// validated and resolved once (prepare_append), then per token: q and k rotated by one per-target
// kernel with the token's coefficients formed once (QK-normed heads go through the float32 kernel
// first), k straight into its cache entries when the cache has k's type (else into k_out or a
// per-thread row buffer, then one conversion), k_nope and v converted into their entries by the
// per-target converter (SIMD e4m3 / bf16 / f16, the scalar codecs' bits).
#include "ropekit/append.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <numeric>

#include "attention/attention_internal.hpp"
#include "call/prepare.hpp"
#include "rope/backend.hpp"
#include "rope/call_shape.hpp"
#include "rope/parallel.hpp"
#include "rope/reference.hpp"
#include "rope/views.hpp"
#include "ropekit/cpu.hpp"
#include "ropekit/error.hpp"

namespace ropekit {

struct AppendCall::Resolved {
  AppendArgs args;
  PagedCache cache;
  RotateCall rotation;  // q and k, read-only: the coefficients and positions of every token
  std::vector<std::int64_t> slots;
  detail::TokenPairKernel pair_kernel = nullptr;  // q and k rows, coefficients formed once per token
  detail::TokenKernel f32_kernel = nullptr;       // normed heads, rotated in float32
  cpu::CacheConvertKernel convert = nullptr;      // rotated k (when not written directly), k_nope, v
  std::vector<float> q_weight, k_weight;          // weight + weight_offset, float32
  int head_dim = 0;
  int threads = 1;
  std::int64_t bytes_moved = 0;
  bool rotate_keys = true;  // false: k copied into the entries as given (detail::KeyWrite::Unrotated)

  // A constructor, not aggregate initialization: for `new Resolved{...}` GCC 12 first zeroes the whole
  // ~1.2 KB object and then initializes each member. The rotation is made in place (prepare_rotation()
  // initializes the member: no copy of its job).
  template <class PrepareRotation>
  Resolved(const AppendArgs& args, const PagedCache& cache, PrepareRotation prepare_rotation,
           std::vector<std::int64_t> slots, detail::TokenPairKernel pair_kernel, detail::TokenKernel f32_kernel,
           cpu::CacheConvertKernel convert, std::vector<float> q_weight, std::vector<float> k_weight, int head_dim,
           int threads, bool rotate_keys)
      : args(args),
        cache(cache),
        rotation(prepare_rotation()),
        slots(std::move(slots)),
        pair_kernel(pair_kernel),
        f32_kernel(f32_kernel),
        convert(convert),
        q_weight(std::move(q_weight)),
        k_weight(std::move(k_weight)),
        head_dim(head_dim),
        threads(threads),
        rotate_keys(rotate_keys) {
    // Not kept: the rotation holds the positions and `slots` the resolved slots; the caller's arrays
    // need not outlive prepare_append.
    this->args.positions = {};
    this->args.slots = {};
  }

  // The rows' scratch: float32 heads (normed q/k) and rotated keys in k's type before their conversion.
  struct Scratch {
    std::vector<float> buffer;
    std::vector<std::byte> rows;
  };
  std::size_t scratch_floats() const { return std::size_t(std::max(args.q.heads, args.k.heads) * head_dim); }
  std::size_t scratch_bytes() const { return std::size_t(args.k.heads * head_dim * element_size(args.k.dtype)); }
  // This thread's scratch, grown to the call's sizes (std::bad_alloc) — before a token is written.
  Scratch& thread_scratch() const;
  void run_rows(std::int64_t first, std::int64_t last, Scratch& scratch) const noexcept;

  void run(std::int64_t first, std::int64_t last) const noexcept;  // AppendCall::run(first, last)
  void run() const;                                                // every token on the library's threads
  void token(std::int64_t t, std::vector<float>& buffer, std::vector<std::byte>& rows) const;
  void prefetch_entries(std::int64_t t) const;
  void normed(const Heads& in, std::int64_t t, const std::vector<float>& weight, float* out) const;
  void norm_rotate(const Heads& in, std::int64_t t, const std::vector<float>& weight, float* norm, void* dst,
                   std::int64_t dst_stride) const;
};

AppendCall::AppendCall() = default;
AppendCall::~AppendCall() = default;
AppendCall::AppendCall(AppendCall&&) noexcept = default;
AppendCall& AppendCall::operator=(AppendCall&&) noexcept = default;

std::int64_t AppendCall::rows() const { return r_ ? r_->slots.size() : 0; }

// RMSNorm of every head of token t of `in` into out (heads × head_dim floats), as QkNorm says.
void AppendCall::Resolved::normed(const Heads& in, std::int64_t t, const std::vector<float>& weight, float* out) const {
  const std::int64_t b = t / in.seq, s = t % in.seq, d = head_dim;
  for (std::int64_t h = 0; h < in.heads; ++h) detail::widen(in.row(b, s, h), in.dtype, d, out + h * d);
  const bool across = args.norm.across_heads;
  const std::int64_t group = across ? in.heads * d : d;
  for (std::int64_t first = 0; first < in.heads * d; first += group) {
    double sum = 0.0;
    for (std::int64_t l = 0; l < group; ++l) sum += double(out[first + l]) * double(out[first + l]);
    const float r = static_cast<float>(1.0 / std::sqrt(sum / double(group) + double(args.norm.eps)));
    for (std::int64_t l = 0; l < group; ++l) {
      out[first + l] = (out[first + l] * r) * weight[std::size_t(across ? first + l : l)];
    }
  }
}

// RMSNorm of token t's heads of `in`, rotated in float32 and rounded once into dst (in's storage
// type, head rows dst_stride elements apart).
void AppendCall::Resolved::norm_rotate(const Heads& in, std::int64_t t, const std::vector<float>& weight, float* norm,
                                       void* dst, std::int64_t dst_stride) const {
  const std::int64_t d = head_dim;
  normed(in, t, weight, norm);
  f32_kernel(rotation.job(), t, norm, d, norm, d, in.heads);
  for (std::int64_t h = 0; h < in.heads; ++h) {
    detail::narrow(norm + h * d, d, in.dtype, static_cast<std::byte*>(dst) + h * dst_stride * element_size(in.dtype));
  }
}

void AppendCall::Resolved::token(std::int64_t t, std::vector<float>& buffer, std::vector<std::byte>& rows) const {
  const std::int64_t d = head_dim, kv = args.k.heads;
  const std::int64_t b = t / args.k.seq, s = t % args.k.seq;
  const std::int64_t slot = slots[std::size_t(t)];
  float* norm = buffer.data();  // heads × head_dim floats: QK-norm's float32 rows

  // Rows rotated by the one pair kernel (coefficients formed once per token); normed heads go through
  // the float32 kernel first and are handed to neither.
  detail::HeadRows q_rows, k_rows;
  if (!args.q.empty()) {
    const Heads& q = args.q;
    const Heads& dst = args.q_out.empty() ? q : args.q_out;
    if (q_weight.empty()) {
      q_rows = {q.row(b, s, 0), q.head_stride, dst.row(b, s, 0), dst.head_stride, q.heads, q.dtype};
    } else {
      norm_rotate(q, t, q_weight, norm, dst.row(b, s, 0), dst.head_stride);
    }
  }

  // The rotated keys in k's storage type: in k_out, straight in the cache entries, or in `rows`.
  const Heads& k = args.k;
  const bool live = !args.k_out.empty();
  const bool direct =
      rotate_keys && !live && k_weight.empty() && static_cast<int>(cache.dtype) == static_cast<int>(k.dtype);
  void* rotated = nullptr;
  std::int64_t rotated_stride = 0;
  if (!rotate_keys) {  // the keys go into the entries as they are
    rotated = k.row(b, s, 0);
    rotated_stride = k.head_stride;
  } else if (slot >= 0 || live) {
    if (direct) {
      rotated = static_cast<std::byte*>(cache.key(slot, 0)) + args.k_offset * element_size(cache.dtype);
      rotated_stride = cache.head_stride(cache.head_dim);
    } else {
      rotated = live ? args.k_out.row(b, s, 0) : rows.data();
      rotated_stride = live ? args.k_out.head_stride : d;
    }
    if (k_weight.empty()) {
      k_rows = {k.row(b, s, 0), k.head_stride, rotated, rotated_stride, kv, k.dtype};
    } else {
      norm_rotate(k, t, k_weight, norm, rotated, rotated_stride);
    }
  }
  if (q_rows.heads > 0 || k_rows.heads > 0) pair_kernel(rotation.job(), t, q_rows, k_rows);
  if (slot < 0) return;
  // As for the values below: keys rotated into contiguous rows (k_out, or the buffer) whose entries fill
  // whole back-to-back key entries (NHD, no offset, no nope part) convert in one call.
  const bool one_key_call = !direct && args.k_nope.empty() && rotated_stride == d && args.k_offset == 0 &&
                            cache.head_dim == d && cache.head_stride(cache.head_dim) == d;
  if (one_key_call) convert(rotated, k.dtype, kv * d, cache.key(slot, 0), cache.dtype, cache.k_scale);
  for (std::int64_t h = 0; h < kv && !one_key_call; ++h) {  // per head, and each head's k_nope lanes
    std::byte* entry = static_cast<std::byte*>(cache.key(slot, h));
    if (!direct) {
      convert(static_cast<const std::byte*>(rotated) + h * rotated_stride * element_size(k.dtype), k.dtype, d,
              entry + args.k_offset * element_size(cache.dtype), cache.dtype, cache.k_scale);
    }
    if (!args.k_nope.empty()) {
      convert(args.k_nope.row(b, s, h), args.k_nope.dtype, args.k_nope_dim,
              entry + args.k_nope_offset * element_size(cache.dtype), cache.dtype, cache.k_scale);
    }
  }
  if (args.v.empty()) return;
  // The conversion is element by element: where the token's value heads lie back to back both in v and
  // in the slot (NHD), one call converts them all (one memcpy of kv·v_head_dim for the same type).
  const std::int64_t dv = cache.v_head_dim;
  if (args.v.head_stride == dv && cache.head_stride(int(dv)) == dv) {
    convert(args.v.row(b, s, 0), args.v.dtype, kv * dv, cache.value(slot, 0), cache.dtype, cache.v_scale);
    return;
  }
  for (std::int64_t h = 0; h < kv; ++h) {
    convert(args.v.row(b, s, h), args.v.dtype, dv, cache.value(slot, h), cache.dtype, cache.v_scale);
  }
}

// Asks for token t's cache entries (keys and values, every head) ahead of the stores that will fill them,
// into L2: an engine's step writes entries no one has touched yet, and without this each entry's stores
// wait, one line after another, for their lines. Not for an fp8 cache: its software quantization is slow
// enough per line that the fills keep up, and the prefetches cost in every fp8 row. Into L2, not L1: into L1
// the small calls lost more. Every line: prefetching the first lines of an entry, or every other line, and
// leaving the rest to the hardware gave back most of the gain (docs/performance-log.md: the code comments'
// figures).
void AppendCall::Resolved::prefetch_entries(std::int64_t t) const {
  const std::int64_t slot = slots[std::size_t(t)];
  if (slot < 0 || cache.dtype == CacheDType::F8E4M3) return;
  const std::int64_t es = element_size(cache.dtype);
  const auto lines = [](const void* entry, std::int64_t bytes) {
    const auto* p = static_cast<const char*>(entry);
    for (std::int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(p + i, 0, 2);
  };
  if (cache.layout == PageLayout::NHD) {  // a slot's heads lie back to back: one range each for k and v
    lines(cache.key(slot, 0), cache.kv_heads * cache.head_dim * es);
    if (cache.v != nullptr) lines(cache.value(slot, 0), cache.kv_heads * cache.v_head_dim * es);
    return;
  }
  for (std::int64_t h = 0; h < cache.kv_heads; ++h) {  // HND puts a page of entries between a slot's heads
    lines(cache.key(slot, h), cache.head_dim * es);
    if (cache.v != nullptr) lines(cache.value(slot, h), cache.v_head_dim * es);
  }
}

// Per-thread scratch, grown once per thread: the engine's threads may split the tokens any way.
AppendCall::Resolved::Scratch& AppendCall::Resolved::thread_scratch() const {
  thread_local Scratch scratch;
  if (scratch.buffer.size() < scratch_floats()) scratch.buffer.resize(scratch_floats());
  if (scratch.rows.size() < scratch_bytes()) scratch.rows.resize(scratch_bytes());
  return scratch;
}

void AppendCall::Resolved::run_rows(std::int64_t first, std::int64_t last, Scratch& scratch) const noexcept {
  for (std::int64_t t = first; t < last; ++t) {
    if (t + 1 < last) prefetch_entries(t + 1);
    token(t, scratch.buffer, scratch.rows);
  }
}

void AppendCall::Resolved::run(std::int64_t first, std::int64_t last) const noexcept {
  if (first >= last) return;
  // prepare grew the preparing thread's scratch; another thread's first run of a call this size grows its own here,
  // where running out of memory ends the process (noexcept: append.hpp).
  run_rows(first, last, thread_scratch());
}

// Every scratch a run needs is allocated before the first token is written, so running out of memory is a
// std::bad_alloc that leaves the cache untouched (the caches' appends rely on it): the calling thread's own when it
// runs alone, else one per worker for this run.
void AppendCall::Resolved::run() const {
  const auto tokens = std::int64_t(slots.size());
  const int n = static_cast<int>(std::min<std::int64_t>(threads_for_bytes(threads, bytes_moved), tokens));
  if (n <= 1 || tokens <= 1) {
    if (tokens > 0) run_rows(0, tokens, thread_scratch());
    return;
  }
  std::vector<Scratch> workers(static_cast<std::size_t>(n));
  for (Scratch& w : workers) {
    w.buffer.resize(scratch_floats());
    w.rows.resize(scratch_bytes());
  }
  detail::parallel_ranges_indexed(n, tokens, [&](int worker, std::int64_t first, std::int64_t last) {
    run_rows(first, last, workers[static_cast<std::size_t>(worker)]);
  });
}

void AppendCall::run(std::int64_t first, std::int64_t last) const noexcept {
  if (r_) r_->run(first, last);
}

void AppendCall::set_positions_and_slots(const Positions& positions,
                                         const std::variant<SlotMapping, PageTable>& slots) {
  if (!r_) throw Error("set_positions_and_slots: the call is empty (default-constructed)");
  Resolved& r = *r_;
  // Checked into a spare vector, then the positions; only then is anything changed. The spare keeps the
  // previous step's slots (and capacity), so steps of a constant size allocate nothing.
  thread_local std::vector<std::int64_t> next;
  detail::fill_slots(slots, r.cache, std::int64_t(r.slots.size()), next);
  r.rotation.set_positions(positions);
  r.slots.swap(next);
}

void AppendCall::run() const {
  if (r_) r_->run();
}

AppendCall prepare_append(const Rope& rope, const AppendArgs& args, const PagedCache& cache) {
  return detail::AppendAccess::prepare(rope, args, cache, detail::KeyWrite::Rotated);
}

AppendCall prepare_append(const Rope& rope, const AppendArgs& args, const PagedCache& cache,
                          std::shared_ptr<const Table> table) {
  if (!table) throw Error("table is null");
  return detail::AppendAccess::prepare(rope, args, cache, detail::KeyWrite::Rotated, std::move(table));
}

void append(const Rope& rope, const AppendArgs& args, const PagedCache& cache) {
  detail::AppendAccess::run_once(rope, args, cache, detail::KeyWrite::Rotated);
}

void append(const Rope& rope, const AppendArgs& args, const PagedCache& cache, std::shared_ptr<const Table> table) {
  if (!table) throw Error("table is null");
  detail::AppendAccess::run_once(rope, args, cache, detail::KeyWrite::Rotated, std::move(table));
}

namespace {

// prepare_append's resolution of checked arguments. `emplace` constructs the Resolved from the constructor's
// arguments where its caller keeps it (an AppendCall: on the heap; a one-shot append: on the stack) and
// returns it; `slots` lends its capacity to the resolved slots. keep_plan: as for RotateCall (false: the
// call runs at once, while the Rope exists, so it pins neither the plan nor the growing table).
template <class Emplace>
void resolve_append(const Rope& rope, const AppendArgs& args, const PagedCache& cache, detail::KeyWrite keys,
                    std::shared_ptr<const Table> table, bool keep_plan, std::vector<std::int64_t> slots,
                    Emplace&& emplace) {
  using detail::KeyWrite;
  const Spec& spec = rope.spec();
  const int d = spec.head_dim;
  // The rotation's part — q and k (only read by the rotation: it writes into the append's own rows),
  // their tokens and the positions — checked by the rotation's own validator inside check_append, whose
  // result the prepare path takes as it is.
  const RotateArgs rotation_args{.q = args.q, .k = args.k, .positions = args.positions};
  const detail::CheckedCall rotation = detail::check_append(rope, args, cache, keys, rotation_args);
  const QkNorm& norm = args.norm;
  const auto weights = [&](std::span<const float> w) {
    std::vector<float> out(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) out[i] = w[i] + norm.weight_offset;
    return out;
  };
  std::vector<float> q_weight = weights(norm.q_weight);
  std::vector<float> k_weight = weights(norm.k_weight);

  const std::int64_t tokens = args.k.batch * args.k.seq;
  detail::fill_slots(args.slots, cache, tokens, slots);

  AppendCall::Resolved& r = emplace(
      args, cache, [&] { return detail::prepare(rope, rotation, {.table = std::move(table), .keep_plan = keep_plan}); },
      std::move(slots), cpu::select_token_pair_kernel(spec.pairing),
      q_weight.empty() && k_weight.empty() ? nullptr : cpu::select_token_kernel(DType::F32),
      cpu::select_cache_convert_kernel(), std::move(q_weight), std::move(k_weight), d,
      args.threads > 0 ? args.threads : default_threads(), keys == KeyWrite::Rotated);
  const std::int64_t q_bytes = args.q.heads * d * element_size(args.q.dtype) * 2;
  const std::int64_t k_bytes = args.k.heads * d * element_size(args.k.dtype) * (args.k_out.empty() ? 1 : 2) +
                               args.k.heads * (d + args.k_nope_dim + cache.v_head_dim) * element_size(cache.dtype) +
                               args.k_nope.heads * args.k_nope_dim * element_size(args.k_nope.dtype) +
                               args.v.heads * cache.v_head_dim * element_size(args.v.dtype);
  r.bytes_moved = tokens * (q_bytes + k_bytes);
}

}  // namespace

AppendCall detail::AppendAccess::prepare(const Rope& rope, const AppendArgs& args, const PagedCache& cache,
                                         KeyWrite keys, std::shared_ptr<const Table> table) {
  AppendCall call;
  resolve_append(rope, args, cache, keys, std::move(table), true, {}, [&](auto&&... a) -> AppendCall::Resolved& {
    call.r_.reset(new AppendCall::Resolved(std::forward<decltype(a)>(a)...));
    return *call.r_;
  });
  call.r_->thread_scratch();  // an engine that prepares and runs on one thread allocates nothing in run()
  return call;
}

detail::AppendJob detail::AppendAccess::job(const AppendCall& call) {
  if (!call.r_) return {};
  const AppendCall::Resolved& r = *call.r_;
  return {.rotation = &r.rotation.job(),
          .args = &r.args,
          .cache = &r.cache,
          .slots = r.slots,
          .q_weight = r.q_weight,
          .k_weight = r.k_weight,
          .rotate_keys = r.rotate_keys};
}

void detail::AppendAccess::run_once(const Rope& rope, const AppendArgs& args, const PagedCache& cache, KeyWrite keys,
                                    std::shared_ptr<const Table> table) {
  // The resolved call on the stack, and the slots in this thread's vector from the previous call: a
  // one-shot append allocates nothing once its thread has seen a call of its size.
  // Raw storage, not std::optional: GCC 12 zeroes an optional's 1.2 KB before constructing into it.
  thread_local std::vector<std::int64_t> spare;
  alignas(AppendCall::Resolved) std::byte storage[sizeof(AppendCall::Resolved)];
  struct Owner {
    AppendCall::Resolved* r = nullptr;
    ~Owner() {
      if (r) r->~Resolved();
    }
  } owner;
  resolve_append(rope, args, cache, keys, std::move(table), false, std::move(spare),
                 [&](auto&&... a) -> AppendCall::Resolved& {
                   return *(owner.r = ::new (storage) AppendCall::Resolved(std::forward<decltype(a)>(a)...));
                 });
  owner.r->run();
  spare = std::move(owner.r->slots);
}

}  // namespace ropekit
