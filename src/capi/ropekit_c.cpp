// The C API (ropekit/ropekit.h): each function translates its C structs into the C++ ones, calls the
// C++ API and turns every exception into a status and a per-thread message. No arithmetic of its own.
#include "ropekit/ropekit.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "ropekit/append.hpp"
#include "ropekit/attention.hpp"
#include "ropekit/config.hpp"
#include "ropekit/cos_sin_cache.hpp"
#include "ropekit/error.hpp"
#include "ropekit/paged_kv_cache.hpp"
#include "ropekit/position_ids.hpp"
#include "ropekit/rope.hpp"
#include "ropekit/rope_set.hpp"

// Every handle begins with its kind's tag: a handle of another kind (arguments out of order, a pointer cast from
// void*) is an error naming the argument, not a crash. (A freed handle is still the caller's bug.)
namespace ropekit::capi {
template <char... Name>
struct Tag {
  static constexpr char name[] = {Name..., '\0'};
  static constexpr std::uint64_t expected = [] {
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the kind's name: distinct per kind
    for (const char c : {Name...}) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return h;
  }();
  std::uint64_t value = expected;
};
}  // namespace ropekit::capi

struct rk_model {
  ropekit::capi::Tag<'r', 'k', '_', 'm', 'o', 'd', 'e', 'l'> tag;
  ropekit::ModelPositions model;
};
struct rk_spec {
  ropekit::capi::Tag<'r', 'k', '_', 's', 'p', 'e', 'c'> tag;
  ropekit::Spec spec;
};
struct rk_rope {
  ropekit::capi::Tag<'r', 'k', '_', 'r', 'o', 'p', 'e'> tag;
  std::shared_ptr<const ropekit::Rope> rope;  // shared with a rope set, when it came from one
};
struct rk_rope_set {
  ropekit::capi::Tag<'r', 'k', '_', 'r', 'o', 'p', 'e', '_', 's', 'e', 't'> tag;
  ropekit::RopeSet set;
};
struct rk_paged_kv_cache {
  ropekit::capi::Tag<'r', 'k', '_', 'p', 'a', 'g', 'e', 'd', '_', 'k', 'v', '_', 'c', 'a', 'c', 'h', 'e'> tag;
  ropekit::PagedKvCache cache;
};
struct rk_call {
  ropekit::capi::Tag<'r', 'k', '_', 'c', 'a', 'l', 'l'> tag;
  ropekit::RotateCall call;
};
struct rk_append_call {
  ropekit::capi::Tag<'r', 'k', '_', 'a', 'p', 'p', 'e', 'n', 'd', '_', 'c', 'a', 'l', 'l'> tag;
  ropekit::AppendCall call;
};
struct rk_table {
  ropekit::capi::Tag<'r', 'k', '_', 't', 'a', 'b', 'l', 'e'> tag;
  std::shared_ptr<const ropekit::Table> table;  // shared with the calls prepared with it
};

namespace {

using namespace ropekit;

thread_local std::string last_error;
// Set when recording a message itself ran out of memory: rk_last_error says so rather than a stale message.
thread_local const char* last_error_lost = nullptr;

// Records `message` as the thread's last error, never throwing: out of memory, a fixed message instead.
template <class Message>
void set_error(Message&& message) noexcept {
  try {
    last_error = std::forward<Message>(message)();
    last_error_lost = nullptr;
  } catch (...) {
    last_error_lost = "out of memory (while recording an error's message)";
  }
}

// Runs f, which may throw anything; the status says what kind of failure it was.
template <class F>
rk_status guarded(F&& f) noexcept {
  try {
    f();
    return RK_OK;
  } catch (const Error& e) {
    set_error([&] { return std::string(e.what()); });
    return RK_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    set_error([] { return std::string("out of memory"); });
    return RK_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error([&] { return fmt::format("internal error: {}", e.what()); });
    return RK_INTERNAL;
  } catch (...) {
    set_error([] { return std::string("internal error: an unknown exception"); });
    return RK_INTERNAL;
  }
}

// A handle's tag, read as the first 8 bytes every handle has (a handle of another kind has them too).
template <class T>
void check_kind(const T* p, const char* name) {
  if constexpr (requires { p->tag; }) {
    using Kind = decltype(p->tag);
    std::uint64_t value = 0;
    std::memcpy(&value, static_cast<const void*>(p), sizeof value);
    if (value != Kind::expected) {
      throw Error(
          fmt::format("{}: not an {} (a handle of another kind: check the arguments' order)", name, Kind::name));
    }
  }
}

template <class T>
const T& need(const T* p, const char* name) {
  if (!p) throw Error(fmt::format("{} is NULL", name));
  check_kind(p, name);
  return *p;
}

template <class T>
T& need_mutable(T* p, const char* name) {
  if (!p) throw Error(fmt::format("{} is NULL", name));
  check_kind(p, name);
  return *p;
}

template <class T>
void need_out(T** out, const char* name) {
  if (!out) throw Error(fmt::format("{} (the output handle) is NULL", name));
}

// The destroy functions return nothing: a handle of another kind is left alone (deleting it as this kind would
// corrupt the heap) and said in rk_last_error.
template <class T>
void destroy(T* p, const char* name) {
  if (!p) return;
  try {
    check_kind(p, name);
  } catch (const Error& e) {
    set_error([&] { return std::string(e.what()); });
    return;
  } catch (...) {  // out of memory while naming the wrong kind: still not this kind
    set_error([] { return std::string("out of memory"); });
    return;
  }
  delete p;
}

DType dtype_of(rk_dtype d, const char* field) {
  switch (d) {
    case RK_F32: return DType::F32;
    case RK_BF16: return DType::BF16;
    case RK_F16: return DType::F16;
  }
  throw Error(fmt::format("{}.dtype = {}: must be RK_F32, RK_BF16 or RK_F16", field, static_cast<int>(d)));
}

Heads heads_of(const rk_heads& h, const char* field) {
  Heads out;
  if (h.batch == 0 || h.seq == 0 || h.heads == 0) {
    // Absent: C callers zero the struct, so its dtype may be 0.
    out.batch = h.batch;
    out.seq = h.seq;
    out.heads = h.heads;
    return out;
  }
  out.data = h.data;
  out.dtype = dtype_of(h.dtype, field);
  out.batch = h.batch;
  out.seq = h.seq;
  out.heads = h.heads;
  out.batch_stride = h.batch_stride;
  out.seq_stride = h.seq_stride;
  out.head_stride = h.head_stride;
  return out;
}

IndexType index_type_of(rk_index_type t, const char* field) {
  if (t == RK_I32) return IndexType::I32;
  if (t == RK_I64) return IndexType::I64;
  throw Error(fmt::format("{} = {}: must be RK_I32 or RK_I64", field, static_cast<int>(t)));
}

Positions positions_of(const rk_positions& p, const char* field) {
  if (p.count == 0) return {};
  return {p.data, index_type_of(p.type, (std::string(field) + ".type").c_str()), p.count, p.axes};
}

rk_heads to_c(const Heads& h) {
  return {h.data, static_cast<rk_dtype>(h.dtype), h.batch, h.seq, h.heads, h.batch_stride, h.seq_stride, h.head_stride};
}

template <class T>
std::span<const T> span_of(const T* data, std::int64_t count, const char* field) {
  if (count < 0) throw Error(fmt::format("{} count = {}: must be >= 0", field, count));
  if (count > 0 && !data) throw Error(fmt::format("{} is NULL with count {}", field, count));
  return {data, static_cast<std::size_t>(count)};
}

RotateArgs rotate_args_of(const rk_rotate_args& a) {
  RotateArgs out;
  out.q = heads_of(a.q, "q");
  out.k = heads_of(a.k, "k");
  out.q_out = heads_of(a.q_out, "q_out");
  out.k_out = heads_of(a.k_out, "k_out");
  out.positions = positions_of(a.positions, "positions");
  switch (a.direction) {
    case RK_FORWARD: out.direction = Direction::Forward; break;
    case RK_INVERSE: out.direction = Direction::Inverse; break;
    case RK_BACKWARD: out.direction = Direction::Backward; break;
    default:
      throw Error(
          fmt::format("direction = {}: must be RK_FORWARD, RK_INVERSE or RK_BACKWARD", static_cast<int>(a.direction)));
  }
  out.threads = a.threads;
  return out;
}

PagedCache cache_of(const rk_paged_cache& c) {
  PagedCache out;
  out.k = c.k;
  out.v = c.v;
  switch (c.dtype) {
    case RK_CACHE_F32: out.dtype = CacheDType::F32; break;
    case RK_CACHE_BF16: out.dtype = CacheDType::BF16; break;
    case RK_CACHE_F16: out.dtype = CacheDType::F16; break;
    case RK_CACHE_F8E4M3: out.dtype = CacheDType::F8E4M3; break;
    default: throw Error(fmt::format("cache.dtype = {}: not an rk_cache_dtype", static_cast<int>(c.dtype)));
  }
  switch (c.layout) {
    case RK_NHD: out.layout = PageLayout::NHD; break;
    case RK_HND: out.layout = PageLayout::HND; break;
    default: throw Error(fmt::format("cache.layout = {}: must be RK_NHD or RK_HND", static_cast<int>(c.layout)));
  }
  out.num_pages = c.num_pages;
  out.page_size = c.page_size;
  out.kv_heads = c.kv_heads;
  out.head_dim = c.head_dim;
  out.v_head_dim = c.v_head_dim;
  // Zero means "not set" only where a scale has no meaning (non-fp8 caches keep 1); an fp8 cache
  // must be given its scale, and C++ names a bad one.
  const bool fp8 = out.dtype == CacheDType::F8E4M3;
  out.k_scale = (!fp8 && c.k_scale == 0.0f) ? 1.0f : c.k_scale;
  out.v_scale = (!fp8 && c.v_scale == 0.0f) ? 1.0f : c.v_scale;
  return out;
}

// The slot fields of rk_append_args: a slot mapping, or (slot_mapping NULL) a page table.
std::variant<SlotMapping, PageTable> slots_of(const rk_append_args& a) {
  if (a.slot_mapping) return SlotMapping{a.slot_mapping, index_type_of(a.slot_type, "slot_type"), a.slot_count};
  if (a.batch < 0) throw Error(fmt::format("batch = {}: must be >= 0", a.batch));
  return PageTable{.indices = span_of(a.page_indices, a.num_page_indices, "page_indices"),
                   .indptr = span_of(a.page_indptr, a.batch + 1, "page_indptr"),
                   .last_page_len = span_of(a.last_page_len, a.batch, "last_page_len"),
                   .batch_indices = span_of(a.batch_indices, a.num_tokens, "batch_indices"),
                   .seq_positions = span_of(a.seq_positions, a.num_tokens, "seq_positions")};
}

AppendArgs append_args_of(const rk_append_args& a) {
  AppendArgs out;
  out.q = heads_of(a.q, "q");
  out.q_out = heads_of(a.q_out, "q_out");
  out.k = heads_of(a.k, "k");
  out.k_out = heads_of(a.k_out, "k_out");
  out.k_nope = heads_of(a.k_nope, "k_nope");
  out.v = heads_of(a.v, "v");
  out.positions = positions_of(a.positions, "positions");
  out.slots = slots_of(a);
  out.k_offset = a.k_offset;
  out.k_nope_offset = a.k_nope_offset;
  out.k_nope_dim = a.k_nope_dim;
  out.norm.q_weight = span_of(a.q_norm_weight, static_cast<std::int64_t>(a.q_norm_count), "q_norm_weight");
  out.norm.k_weight = span_of(a.k_norm_weight, static_cast<std::int64_t>(a.k_norm_count), "k_norm_weight");
  out.norm.eps = a.norm_eps == 0.0f ? 1e-6f : a.norm_eps;
  out.norm.weight_offset = a.norm_weight_offset;
  out.norm.across_heads = a.norm_across_heads != 0;
  out.threads = a.threads;
  return out;
}

AngleMode angle_mode_of(rk_angle_mode mode) {
  if (mode == RK_ANGLES_ACCURATE) return AngleMode::Accurate;
  if (mode == RK_ANGLES_HF) return AngleMode::HfCompat;
  throw Error(fmt::format("mode = {}: must be RK_ANGLES_ACCURATE or RK_ANGLES_HF", static_cast<int>(mode)));
}

AttentionOptions options_of(int causal, std::int64_t window, double softmax_scale, int threads) {
  AttentionOptions options;
  options.causal = causal != 0;
  options.window = window;
  if (softmax_scale != 0.0) options.softmax_scale = softmax_scale;
  options.threads = threads;
  return options;
}

void check_range(std::int64_t first, std::int64_t last, std::int64_t rows) {
  if (first < 0 || first > last || last > rows) {
    throw Error(
        fmt::format("rows [first, last) = [{}, {}): must lie in [0, {}] with first <= last", first, last, rows));
  }
}

// A prepared call (rk_call, rk_append_call): rows [first, last) after a range check, or every row.
template <class Handle>
rk_status run_range(const Handle* call, int64_t first, int64_t last) {
  return guarded([&] {
    const auto& c = need(call, "call").call;
    check_range(first, last, c.rows());
    c.run(first, last);
  });
}

template <class Handle>
rk_status run_all(const Handle* call) {
  return guarded([&] { need(call, "call").call.run(); });
}

}  // namespace

extern "C" {

const char* rk_last_error(void) { return last_error_lost != nullptr ? last_error_lost : last_error.c_str(); }

const char* rk_status_name(rk_status status) {
  switch (status) {
    case RK_OK: return "ok";
    case RK_INVALID_ARGUMENT: return "invalid argument";
    case RK_OUT_OF_MEMORY: return "out of memory";
    case RK_INTERNAL: return "internal error";
  }
  return "unknown status";
}

const char* rk_version(void) { return ROPEKIT_VERSION_STRING; }

rk_heads rk_bshd(void* data, rk_dtype dtype, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  rk_heads h = to_c(bshd(data, DType::F32, batch, seq, heads, head_dim));
  h.dtype = dtype;
  return h;
}

rk_heads rk_bhsd(void* data, rk_dtype dtype, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  rk_heads h = to_c(bhsd(data, DType::F32, batch, seq, heads, head_dim));
  h.dtype = dtype;
  return h;
}

rk_positions rk_positions_i64(const int64_t* data, int64_t count) { return {data, RK_I64, count, 1}; }
rk_positions rk_positions_i32(const int32_t* data, int64_t count) { return {data, RK_I32, count, 1}; }
rk_positions rk_positions_axial(const int64_t* data, int64_t count, int axes) { return {data, RK_I64, count, axes}; }

rk_status rk_model_from_config_json(const char* json, size_t length, rk_model** out) {
  return guarded([&] {
    need_out(out, "out");
    if (!json && length > 0) throw Error(fmt::format("json is NULL with length {}", length));
    *out = new rk_model{{}, read_config(std::string_view(json ? json : "", length))};
  });
}

rk_status rk_model_from_preset(const char* name, rk_model** out) {
  return guarded([&] {
    need_out(out, "out");
    if (!name) throw Error("name is NULL");
    *out = new rk_model{{}, read_preset(name)};
  });
}

void rk_model_destroy(rk_model* model) { destroy(model, "model"); }

int rk_model_num_layers(const rk_model* model) { return model ? model->model.num_layers : 0; }

size_t rk_model_num_warnings(const rk_model* model) { return model ? model->model.warnings.size() : 0; }

const char* rk_model_warning(const rk_model* model, size_t index) {
  if (!model || index >= model->model.warnings.size()) return nullptr;
  return model->model.warnings[index].c_str();
}

}  // extern "C"

namespace {
const LayerPositions& group_of(const rk_model* model, int layer) {
  const ModelPositions& m = need(model, "model").model;
  if (layer == -1) return m.layer("");
  return m.at_layer(layer);
}
}  // namespace

extern "C" {

rk_status rk_model_layer_info(const rk_model* model, int layer, rk_layer_info* out) {
  return guarded([&] {
    if (!out) throw Error("out is NULL");
    const LayerPositions& g = group_of(model, layer);
    *out = {.rotates = g.encoding == PositionEncoding::Rope ? 1 : 0,
            .rope_offset = g.rope_offset,
            .qk_head_dim = g.qk_head_dim,
            .sliding_window = g.sliding_window.value_or(0),
            .softmax_scale = g.softmax_scale,
            .logit_softcap = g.logit_softcap.value_or(0.0)};
  });
}

rk_status rk_model_layer_spec(const rk_model* model, int layer, rk_spec** out) {
  return guarded([&] {
    need_out(out, "out");
    const LayerPositions& g = group_of(model, layer);
    if (g.encoding != PositionEncoding::Rope) {
      throw Error(fmt::format("layer = {}: its layers ({}) do not use RoPE", layer,
                              g.layer_type.empty() ? std::string("the only group") : g.layer_type));
    }
    *out = new rk_spec{{}, g.spec};
  });
}

rk_status rk_spec_create(int head_dim, int rotary_dim, double base, rk_pairing pairing, rk_spec** out) {
  return guarded([&] {
    need_out(out, "out");
    if (pairing != RK_INTERLEAVED && pairing != RK_HALF) {
      throw Error(fmt::format("pairing = {}: must be RK_INTERLEAVED or RK_HALF", static_cast<int>(pairing)));
    }
    Spec spec{.head_dim = head_dim,
              .rotary_dim = rotary_dim,
              .base = base,
              .pairing = pairing == RK_HALF ? Pairing::Half : Pairing::Interleaved};
    spec.validate();
    *out = new rk_spec{{}, std::move(spec)};
  });
}

void rk_spec_destroy(rk_spec* spec) { destroy(spec, "spec"); }
int rk_spec_head_dim(const rk_spec* spec) { return spec ? spec->spec.head_dim : 0; }
int rk_spec_rotary_dim(const rk_spec* spec) { return spec ? spec->spec.rotary_dim : 0; }

rk_status rk_rope_create(const rk_spec* spec, rk_angle_mode mode, int64_t current_length, rk_rope** out) {
  return guarded([&] {
    need_out(out, "out");
    const Spec& s = need(spec, "spec").spec;
    if (current_length < 0) throw Error(fmt::format("current_length = {}: must be >= 0 (0: none)", current_length));
    const std::optional<std::int64_t> length = current_length == 0 ? std::nullopt : std::optional(current_length);
    *out = new rk_rope{{}, std::make_shared<const Rope>(s, angle_mode_of(mode), length)};
  });
}

void rk_rope_destroy(rk_rope* rope) { destroy(rope, "rope"); }

rk_status rk_rope_plan(const rk_rope* rope, double* inv_freq, size_t capacity, double* cos_sin_scale,
                       double* softmax_scale_mult) {
  return guarded([&] {
    const Plan& plan = need(rope, "rope").rope->plan();
    if (inv_freq) {
      if (capacity < plan.inv_freq.size()) {
        throw Error(fmt::format("capacity = {}: inv_freq needs {} entries", capacity, plan.inv_freq.size()));
      }
      std::copy(plan.inv_freq.begin(), plan.inv_freq.end(), inv_freq);
    }
    if (cos_sin_scale) *cos_sin_scale = plan.cos_sin_scale;
    if (softmax_scale_mult) *softmax_scale_mult = plan.softmax_scale_mult;
  });
}

rk_status rk_rope_prepare(const rk_rope* rope, const rk_rotate_args* args, rk_call** out) {
  return guarded([&] {
    need_out(out, "out");
    RotateCall call = need(rope, "rope").rope->prepare(rotate_args_of(need(args, "args")));
    *out = new rk_call{{}, std::move(call)};
  });
}

int64_t rk_call_rows(const rk_call* call) { return call ? call->call.rows() : 0; }

rk_status rk_call_run(const rk_call* call, int64_t first, int64_t last) { return run_range(call, first, last); }
rk_status rk_call_run_all(const rk_call* call) { return run_all(call); }

rk_status rk_call_set_positions(rk_call* call, rk_positions positions) {
  return guarded([&] { need_mutable(call, "call").call.set_positions(positions_of(positions, "positions")); });
}

void rk_call_destroy(rk_call* call) { destroy(call, "call"); }

rk_status rk_rope_apply(const rk_rope* rope, const rk_rotate_args* args) {
  return guarded([&] { need(rope, "rope").rope->apply(rotate_args_of(need(args, "args"))); });
}

rk_status rk_append_prepare(const rk_rope* rope, const rk_append_args* args, const rk_paged_cache* cache,
                            rk_append_call** out) {
  return guarded([&] {
    need_out(out, "out");
    AppendCall call =
        prepare_append(*need(rope, "rope").rope, append_args_of(need(args, "args")), cache_of(need(cache, "cache")));
    *out = new rk_append_call{{}, std::move(call)};
  });
}

int64_t rk_append_call_rows(const rk_append_call* call) { return call ? call->call.rows() : 0; }

rk_status rk_append_call_run(const rk_append_call* call, int64_t first, int64_t last) {
  return run_range(call, first, last);
}
rk_status rk_append_call_run_all(const rk_append_call* call) { return run_all(call); }

rk_status rk_append_call_set_positions_and_slots(rk_append_call* call, const rk_append_args* args) {
  return guarded([&] {
    auto& c = need_mutable(call, "call").call;
    const rk_append_args& a = need(args, "args");
    c.set_positions_and_slots(positions_of(a.positions, "positions"), slots_of(a));
  });
}

void rk_append_call_destroy(rk_append_call* call) { destroy(call, "call"); }

rk_status rk_cos_sin_cache_export(const rk_rope* rope, int64_t num_positions, float* out, size_t capacity) {
  return guarded([&] {
    const Rope& r = *need(rope, "rope").rope;
    if (out == nullptr) throw Error("out is NULL");
    // The size export_cos_sin_cache checks against; its range check comes first (num_positions may be huge).
    const std::int64_t want =
        num_positions >= 0 && num_positions < kPositionLimit ? num_positions * r.spec().rotary_dim : 0;
    if (std::uint64_t(want) > capacity) {
      throw Error(fmt::format("capacity = {}: the cache needs num_positions x rotary_dim = {} x {} = {} floats",
                              capacity, num_positions, r.spec().rotary_dim, want));
    }
    export_cos_sin_cache(r, num_positions, std::span<float>(out, std::size_t(want)));
  });
}

rk_status rk_cos_sin_cache_import(const rk_rope* rope, const float* cache, size_t count, int64_t num_positions,
                                  rk_table** out) {
  return guarded([&] {
    need_out(out, "out");
    if (cache == nullptr && count > 0) throw Error("cache is NULL");
    auto table = import_cos_sin_cache(*need(rope, "rope").rope, std::span<const float>(cache, count), num_positions);
    *out = new rk_table{{}, std::move(table)};
  });
}

void rk_table_destroy(rk_table* table) { destroy(table, "table"); }

rk_status rk_cos_sin_cache_check(const rk_rope* rope, const float* cache, size_t count, int64_t num_positions,
                                 double tolerance, rk_cos_sin_cache_report* out) {
  return guarded([&] {
    if (out == nullptr) throw Error("out is NULL");
    if (cache == nullptr && count > 0) throw Error("cache is NULL");
    const CosSinCacheReport r = check_cos_sin_cache(*need(rope, "rope").rope, std::span<const float>(cache, count),
                                                    num_positions, tolerance == 0.0 ? 1e-6 : tolerance);
    *out = {.max_error = r.max_error,
            .worst_position = r.worst_position,
            .worst_pair = r.worst_pair,
            .worst_is_sin = r.worst_is_sin ? 1 : 0,
            .first_position_over = r.first_position_over,
            .accurate_bound = r.accurate_bound};
  });
}

rk_status rk_rope_prepare_with_table(const rk_rope* rope, const rk_rotate_args* args, const rk_table* table,
                                     rk_call** out) {
  return guarded([&] {
    need_out(out, "out");
    RotateCall call = need(rope, "rope").rope->prepare(rotate_args_of(need(args, "args")), need(table, "table").table);
    *out = new rk_call{{}, std::move(call)};
  });
}

rk_status rk_append_prepare_with_table(const rk_rope* rope, const rk_append_args* args, const rk_paged_cache* cache,
                                       const rk_table* table, rk_append_call** out) {
  return guarded([&] {
    need_out(out, "out");
    AppendCall call = prepare_append(*need(rope, "rope").rope, append_args_of(need(args, "args")),
                                     cache_of(need(cache, "cache")), need(table, "table").table);
    *out = new rk_append_call{{}, std::move(call)};
  });
}

rk_status rk_append(const rk_rope* rope, const rk_append_args* args, const rk_paged_cache* cache) {
  return guarded(
      [&] { append(*need(rope, "rope").rope, append_args_of(need(args, "args")), cache_of(need(cache, "cache"))); });
}

rk_status rk_attention(const rk_rope* rope, const rk_attention_args* args) {
  return guarded([&] {
    const rk_attention_args& a = need(args, "args");
    AttentionArgs cpp{.q = heads_of(a.q, "q"),
                      .k = heads_of(a.k, "k"),
                      .v = heads_of(a.v, "v"),
                      .out = heads_of(a.out, "out"),
                      .q_positions = positions_of(a.q_positions, "q_positions"),
                      .k_positions = positions_of(a.k_positions, "k_positions"),
                      .head_dim = a.head_dim,
                      .v_head_dim = a.v_head_dim};
    AttentionOptions options = options_of(a.causal, a.window, a.softmax_scale, a.threads);
    if (a.table != nullptr) options.table = a.table->table;
    if (rope) {
      attention(*rope->rope, cpp, options);
    } else {
      attention(cpp, options);
    }
  });
}

rk_status rk_rope_set_create(const rk_spec* spec, rk_angle_mode mode, int64_t length_bucket, size_t max_ropes,
                             rk_rope_set** out) {
  return guarded([&] {
    need_out(out, "out");
    RopeSet::Options options;
    if (length_bucket != 0) options.length_bucket = length_bucket;
    if (max_ropes != 0) options.max_ropes = max_ropes;
    *out = new rk_rope_set{{}, RopeSet(need(spec, "spec").spec, angle_mode_of(mode), options)};
  });
}

void rk_rope_set_destroy(rk_rope_set* set) { destroy(set, "set"); }

rk_status rk_rope_set_at(const rk_rope_set* set, int64_t current_length, rk_rope** out) {
  return guarded([&] {
    need_out(out, "out");
    *out = new rk_rope{{}, need(set, "set").set.at(current_length)};
  });
}

rk_status rk_paged_kv_cache_create(const rk_rope* rope, const rk_paged_kv_cache_shape* shape, rk_paged_kv_cache** out) {
  return guarded([&] {
    need_out(out, "out");
    const rk_paged_kv_cache_shape& s = need(shape, "shape");
    // The cache's type, layout and scales read as for a caller's cache (zero scales: unset).
    const rk_paged_cache like{.dtype = s.dtype, .layout = s.layout, .k_scale = s.k_scale, .v_scale = s.v_scale};
    const PagedCache c = cache_of(like);
    *out = new rk_paged_kv_cache{{},
                                 PagedKvCache(*need(rope, "rope").rope, {.num_pages = s.num_pages,
                                                                         .page_size = s.page_size,
                                                                         .kv_heads = s.kv_heads,
                                                                         .head_dim = s.head_dim,
                                                                         .v_head_dim = s.v_head_dim,
                                                                         .dtype = c.dtype,
                                                                         .layout = c.layout,
                                                                         .k_scale = c.k_scale,
                                                                         .v_scale = c.v_scale,
                                                                         .max_sequences = s.max_sequences})};
  });
}

void rk_paged_kv_cache_destroy(rk_paged_kv_cache* cache) { destroy(cache, "cache"); }

namespace {

void paged_append(rk_paged_kv_cache* cache, const rk_rope* rope, const int32_t* seq_of, const rk_append_args* args,
                  std::shared_ptr<const Table> table) {
  const rk_append_args& a = need(args, "args");
  if (a.slot_mapping != nullptr || a.page_indices != nullptr || a.page_indptr != nullptr) {
    throw Error("args: leave slot_mapping and the page table unset: the cache resolves each token's slot");
  }
  rk_append_args plain = a;
  plain.slot_mapping = &plain;  // any non-null: read as a slot mapping, replaced below
  plain.slot_type = RK_I64;
  AppendArgs cpp = append_args_of(plain);
  cpp.slots = SlotMapping{};
  const std::int64_t tokens = cpp.k.batch * cpp.k.seq;
  auto& c = need_mutable(cache, "cache").cache;
  c.append(*need(rope, "rope").rope, span_of(seq_of, tokens, "seq_of"), cpp, std::move(table));
}

}  // namespace

rk_status rk_paged_kv_cache_append(rk_paged_kv_cache* cache, const rk_rope* rope, const int32_t* seq_of,
                                   const rk_append_args* args) {
  return guarded([&] { paged_append(cache, rope, seq_of, args, nullptr); });
}

rk_status rk_paged_kv_cache_append_with_table(rk_paged_kv_cache* cache, const rk_rope* rope, const int32_t* seq_of,
                                              const rk_append_args* args, const rk_table* table) {
  return guarded([&] { paged_append(cache, rope, seq_of, args, need(table, "table").table); });
}

rk_status rk_paged_kv_cache_erase(rk_paged_kv_cache* cache, int seq, int64_t p0, int64_t p1) {
  return guarded([&] { need_mutable(cache, "cache").cache.erase(seq, p0, p1); });
}

rk_status rk_paged_kv_cache_shift(rk_paged_kv_cache* cache, int seq, int64_t p0, int64_t p1, int64_t delta) {
  return guarded([&] { need_mutable(cache, "cache").cache.shift(seq, p0, p1, delta); });
}

rk_status rk_paged_kv_cache_seq_rm(rk_paged_kv_cache* cache, int seq, int64_t p0, int64_t p1) {
  return rk_paged_kv_cache_erase(cache, seq, p0, p1);
}

rk_status rk_paged_kv_cache_seq_add(rk_paged_kv_cache* cache, int seq, int64_t p0, int64_t p1, int64_t delta) {
  return rk_paged_kv_cache_shift(cache, seq, p0, p1, delta);
}

rk_status rk_paged_kv_cache_seq_cp(rk_paged_kv_cache* cache, int src, int dst, int64_t p0, int64_t p1) {
  return guarded([&] { need_mutable(cache, "cache").cache.seq_cp(src, dst, p0, p1); });
}

rk_status rk_paged_kv_cache_seq_clear(rk_paged_kv_cache* cache, int seq) {
  return guarded([&] { need_mutable(cache, "cache").cache.seq_clear(seq); });
}

rk_status rk_paged_kv_cache_rerotate(rk_paged_kv_cache* cache, int seq, const rk_rope* rope, int* rerotated) {
  return guarded([&] {
    const bool done = need_mutable(cache, "cache").cache.rerotate(seq, *need(rope, "rope").rope);
    if (rerotated) *rerotated = done ? 1 : 0;
  });
}

rk_status rk_paged_kv_cache_length(const rk_paged_kv_cache* cache, int seq, int64_t* length) {
  return guarded([&] {
    if (!length) throw Error("length is NULL");
    *length = need(cache, "cache").cache.length(seq);
  });
}

rk_status rk_paged_kv_cache_free_pages(const rk_paged_kv_cache* cache, int64_t* pages) {
  return guarded([&] {
    if (!pages) throw Error("pages is NULL");
    *pages = need(cache, "cache").cache.free_pages();
  });
}

namespace {

void paged_attention(const rk_rope* rope, const rk_paged_kv_cache* cache, rk_heads q, rk_positions q_positions,
                     const int32_t* seq_of, rk_heads out, int causal, int64_t window, double softmax_scale, int threads,
                     std::shared_ptr<const Table> table) {
  const Heads qh = heads_of(q, "q");
  AttentionOptions options = options_of(causal, window, softmax_scale, threads);
  options.table = std::move(table);
  attention(*need(rope, "rope").rope, qh, positions_of(q_positions, "q_positions"),
            span_of(seq_of, qh.batch * qh.seq, "seq_of"), need(cache, "cache").cache, heads_of(out, "out"), options);
}

}  // namespace

rk_status rk_paged_kv_cache_attention(const rk_paged_kv_cache* cache, const rk_rope* rope, rk_heads q,
                                      rk_positions q_positions, const int32_t* seq_of, rk_heads out, int causal,
                                      int64_t window, double softmax_scale, int threads) {
  return guarded([&] {
    paged_attention(rope, cache, q, q_positions, seq_of, out, causal, window, softmax_scale, threads, nullptr);
  });
}

rk_status rk_paged_kv_cache_attention_with_table(const rk_paged_kv_cache* cache, const rk_rope* rope, rk_heads q,
                                                 rk_positions q_positions, const int32_t* seq_of, rk_heads out,
                                                 int causal, int64_t window, double softmax_scale, int threads,
                                                 const rk_table* table) {
  return guarded([&] {
    paged_attention(rope, cache, q, q_positions, seq_of, out, causal, window, softmax_scale, threads,
                    need(table, "table").table);
  });
}

}  // extern "C"

namespace {

std::span<const std::int64_t> c_span(const std::int64_t* data, std::size_t count, const char* name) {
  if (data == nullptr && count > 0) throw Error(fmt::format("{} is NULL with a length of {}", name, count));
  return {data, count};
}

// Copies `values` to out[0, capacity), or fails naming the count needed.
void write_out(const std::vector<std::int64_t>& values, std::int64_t* out, std::size_t capacity, std::size_t* count,
               const char* name) {
  if (count == nullptr) throw Error("count is NULL");
  if (values.size() > capacity) {
    throw Error(fmt::format("capacity = {}: {} needs {} values", capacity, name, values.size()));
  }
  if (!values.empty() && out == nullptr) throw Error(fmt::format("{} is NULL", name));
  std::copy(values.begin(), values.end(), out);
  *count = values.size();
}

// start_offsets: NULL, or one per document of cu_seqlens.
std::span<const std::int64_t> offsets_span(const std::int64_t* start_offsets, std::size_t cu_count) {
  if (start_offsets == nullptr) return {};
  return {start_offsets, cu_count == 0 ? 0 : cu_count - 1};
}

}  // namespace

extern "C" {

rk_status rk_packed_positions(const int64_t* cu_seqlens, size_t cu_count, const int64_t* start_offsets, int64_t* out,
                              size_t capacity, size_t* count) {
  return guarded([&] {
    write_out(packed_positions(c_span(cu_seqlens, cu_count, "cu_seqlens"), offsets_span(start_offsets, cu_count)), out,
              capacity, count, "out");
  });
}

rk_status rk_mrope_position_ids(rk_mrope_family family, rk_mrope_rule rule, const rk_mrope_input* in,
                                int64_t* positions, size_t capacity, int64_t* deltas, size_t deltas_capacity) {
  return guarded([&] {
    if (in == nullptr) throw Error("input is NULL");
    if (in->batch < 1 || in->seq < 0 || in->seq > kPositionLimit / in->batch) {
      throw Error(fmt::format("input.batch = {}, input.seq = {}: batch must be at least 1 and seq at least 0",
                              in->batch, in->seq));
    }
    const auto tokens = static_cast<std::size_t>(in->batch * in->seq);
    auto grids = [](const std::int64_t* thw, std::size_t n, const char* name) {
      if (n > 0 && thw == nullptr) throw Error(fmt::format("{} is NULL with {} grids", name, n));
      std::vector<VisionGrid> out;
      for (std::size_t i = 0; i < n; ++i) out.push_back({thw[3 * i], thw[3 * i + 1], thw[3 * i + 2]});
      return out;
    };
    if (tokens > 0 && in->token_types == nullptr) throw Error("input.token_types is NULL");
    if (static_cast<int>(family) < 0 || static_cast<int>(family) > 3) {
      throw Error(fmt::format("family = {}: not an rk_mrope_family", static_cast<int>(family)));
    }
    if (rule != RK_MROPE_TOKEN_TYPES && rule != RK_MROPE_TOKEN_SCAN) {
      throw Error(fmt::format("rule = {}: not an rk_mrope_rule", static_cast<int>(rule)));
    }
    const std::vector<VisionGrid> images = grids(in->image_grid_thw, in->images, "input.image_grid_thw");
    const std::vector<VisionGrid> videos = grids(in->video_grid_thw, in->videos, "input.video_grid_thw");
    if (capacity < 3 * tokens || positions == nullptr) {
      throw Error(fmt::format("capacity = {}: positions needs {} values", capacity, 3 * tokens));
    }
    if (deltas_capacity < static_cast<std::size_t>(in->batch) || deltas == nullptr) {
      throw Error(fmt::format("deltas_capacity = {}: deltas needs {} values", deltas_capacity, in->batch));
    }
    const MropeInput input{
        .batch = in->batch,
        .seq = in->seq,
        .token_types = {in->token_types, tokens},
        .attention_mask = in->attention_mask ? std::span<const std::uint8_t>(in->attention_mask, tokens)
                                             : std::span<const std::uint8_t>(),
        .image_grids = images,
        .video_grids = videos,
        .second_per_grid_ts = in->second_per_grid_ts ? std::span<const double>(in->second_per_grid_ts, in->videos)
                                                     : std::span<const double>(),
        .spatial_merge_size = in->spatial_merge_size,
        .tokens_per_second = in->tokens_per_second};
    mrope_position_ids(static_cast<MropeFamily>(static_cast<int>(family)),
                       rule == RK_MROPE_TOKEN_TYPES ? MropeRule::TokenTypes : MropeRule::TokenScan, input,
                       std::span<std::int64_t>(positions, 3 * tokens),
                       std::span<std::int64_t>(deltas, static_cast<std::size_t>(in->batch)));
  });
}

rk_status rk_vision_position_ids(const int64_t* grid_thw, size_t grids, int64_t spatial_merge_size, int64_t* out,
                                 size_t capacity, size_t* count) {
  return guarded([&] {
    if (grids > 0 && grid_thw == nullptr) throw Error(fmt::format("grid_thw is NULL with {} grids", grids));
    std::vector<VisionGrid> g;
    for (std::size_t i = 0; i < grids; ++i) g.push_back({grid_thw[3 * i], grid_thw[3 * i + 1], grid_thw[3 * i + 2]});
    write_out(vision_position_ids(g, spatial_merge_size), out, capacity, count, "out");
  });
}

rk_status rk_cp_shard_positions(int64_t seq_len, int64_t start, const int64_t* cu_seqlens, size_t cu_count,
                                const int64_t* start_offsets, const rk_cp_shard* shard, int64_t* indices,
                                int64_t* positions, size_t capacity, size_t* count) {
  return rk_cp_positions(seq_len, start, cu_seqlens, cu_count, start_offsets, shard, indices, positions, capacity,
                         count);
}

rk_status rk_cp_positions(int64_t seq_len, int64_t start, const int64_t* cu_seqlens, size_t cu_count,
                          const int64_t* start_offsets, const rk_cp_shard* shard, int64_t* indices, int64_t* positions,
                          size_t capacity, size_t* count) {
  return guarded([&] {
    if (shard == nullptr) throw Error("shard is NULL");
    const CpShard s{.size = shard->size,
                    .rank = shard->rank,
                    .sharding = static_cast<CpSharding>(static_cast<int>(shard->sharding)),
                    .stripe = shard->stripe};
    std::vector<std::int64_t> idx, pos;
    if (cu_seqlens != nullptr) {
      const auto cu = c_span(cu_seqlens, cu_count, "cu_seqlens");
      idx = cp_indices_packed(cu, s);
      pos = cp_positions_packed(cu, s, offsets_span(start_offsets, cu_count));
    } else {
      idx = cp_indices(seq_len, s);
      pos = cp_positions(seq_len, s, start);
    }
    std::size_t written = 0;
    if (indices != nullptr) write_out(idx, indices, capacity, &written, "indices");
    write_out(pos, positions, capacity, count, "positions");
  });
}

rk_status rk_tree_positions(const int64_t* parents, size_t nodes, int64_t root_position, int64_t* positions,
                            uint8_t* mask) {
  return guarded([&] {
    const auto p = c_span(parents, nodes, "parents");
    const std::vector<std::int64_t> pos = tree_positions(p, root_position);
    if (nodes > 0 && positions == nullptr) throw Error("positions is NULL");
    std::vector<std::uint8_t> m;
    if (mask != nullptr) m = tree_mask(p);
    std::copy(pos.begin(), pos.end(), positions);
    if (mask != nullptr) std::copy(m.begin(), m.end(), mask);
  });
}

rk_status rk_rejected_slot_ranges(const int64_t* parents, size_t nodes, const int64_t* accepted, size_t accepted_count,
                                  int64_t base_slot, int64_t* ranges, size_t capacity, size_t* count) {
  return guarded([&] {
    const auto r = rejected_slot_ranges(c_span(parents, nodes, "parents"), c_span(accepted, accepted_count, "accepted"),
                                        base_slot);
    if (count == nullptr) throw Error("count is NULL");
    if (r.size() > capacity) throw Error(fmt::format("capacity = {}: {} ranges to write", capacity, r.size()));
    if (!r.empty() && ranges == nullptr) throw Error("ranges is NULL");
    for (std::size_t i = 0; i < r.size(); ++i) {
      ranges[2 * i] = r[i].first;
      ranges[2 * i + 1] = r[i].second;
    }
    *count = r.size();
  });
}

}  // extern "C"
