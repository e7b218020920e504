/* ropekit/ropekit.h — the C API: ropekit for engines written in C (or bound from any language with a
 * C FFI). Opaque handles, status codes, no exception crosses it.
 *
 *   rk_model* model;  rk_spec* spec;  rk_rope* rope;
 *   if (rk_model_from_config_json(json, json_len, &model) != RK_OK) fprintf(stderr, "%s\n", rk_last_error());
 *   rk_model_layer_spec(model, 0, &spec);            // the spec of layer 0
 *   rk_rope_create(spec, RK_ANGLES_ACCURATE, 0, &rope);
 *   rk_rotate_args args = {0};
 *   args.q = rk_bshd(q, RK_BF16, 1, seq, 32, 128);  args.k = rk_bshd(k, RK_BF16, 1, seq, 8, 128);
 *   args.positions = rk_positions_i64(pos, seq);
 *   rk_call* call;
 *   rk_rope_prepare(rope, &args, &call);             // validated once
 *   ... each worker: rk_call_run(call, first, last) over [0, rk_call_rows(call)) ...
 *   rk_call_destroy(call);
 *
 * Errors: every function that can fail returns an rk_status; RK_OK is 0. On failure nothing was
 * written (no output handle, no tensor, no cache entry) and rk_last_error() returns the message —
 * the same text the C++ API's ropekit::Error carries, naming the field and the value. The message is
 * per thread and stays until that thread's next failing call.
 *
 * Numerics, valid ranges and thread safety are those of the C++ functions each one calls (named in
 * its comment): the C API adds no arithmetic. Handles: an rk_rope and an rk_spec are immutable and
 * may be used from many threads at once; an rk_call / rk_append_call may be run on disjoint row
 * ranges from many threads at once. Destroy functions accept NULL.
 *
 * Threads: rk_*_run_all and rk_rope_apply run on the library's threads (OpenMP when built with it,
 * else the calling thread; args.threads = 0 picks ropekit's default). An engine with its own pool
 * splits rk_call_rows() with rk_call_run instead; results never depend on the split.
 */
#ifndef ROPEKIT_ROPEKIT_H
#define ROPEKIT_ROPEKIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Enumerations with int as their type in C++ as well: a C caller may pass any int (a bad value is an
 * RK_INVALID_ARGUMENT naming it), which C++ must be able to read without undefined behaviour. */
#ifdef __cplusplus
#define RK_ENUM(name) enum name : int
#else
#define RK_ENUM(name) enum name
#endif
/* A name kept for one version after a rename (docs/conventions.md): the compiler says what it became. */
#if defined(__GNUC__) || defined(__clang__)
#define RK_DEPRECATED(message) __attribute__((deprecated(message)))
#else
#define RK_DEPRECATED(message)
#endif
/* The RK_ENUM typedefs below sit between clang-format off/on: clang-format reads RK_ENUM(...) as a call. */

/* clang-format off */
typedef RK_ENUM(rk_status) {
  RK_OK = 0,
  RK_INVALID_ARGUMENT = 1, /* bad input: the message names the field and the value */
  RK_OUT_OF_MEMORY = 2,
  RK_INTERNAL = 3          /* a bug in ropekit: please report the message */
} rk_status;
/* clang-format on */

/* The message of this thread's last failing call ("" if none). Valid until its next failing call. */
const char* rk_last_error(void);
/* "ok", "invalid argument", "out of memory", "internal error"; "unknown status" otherwise. */
const char* rk_status_name(rk_status status);
/* The library version, "MAJOR.MINOR.PATCH". */
const char* rk_version(void);

/* ---- element types, views and positions (ropekit/tensor.hpp) ------------------------------------ */

/* clang-format off */
typedef RK_ENUM(rk_dtype) { RK_F32 = 1, RK_BF16 = 2, RK_F16 = 3 } rk_dtype;
/* clang-format on */
/* clang-format off */
typedef RK_ENUM(rk_index_type) { RK_I32 = 1, RK_I64 = 2 } rk_index_type;
/* clang-format on */

/* A [batch, seq, heads, head_dim] view with element strides; the head's lanes are contiguous. A view
 * with batch, seq or heads 0 (all zero: {0}) is absent. */
typedef struct rk_heads {
  void* data;
  rk_dtype dtype;
  int64_t batch, seq, heads;
  int64_t batch_stride, seq_stride, head_stride; /* in elements */
} rk_heads;

/* Contiguous [batch, seq, heads, head_dim] and [batch, heads, seq, head_dim]. */
rk_heads rk_bshd(void* data, rk_dtype dtype, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim);
rk_heads rk_bhsd(void* data, rk_dtype dtype, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim);

/* One position per token (batch × seq of them, token-major); M-RoPE: axes = 3 streams of count each. */
typedef struct rk_positions {
  const void* data;
  rk_index_type type;
  int64_t count;
  int axes;
} rk_positions;

rk_positions rk_positions_i64(const int64_t* data, int64_t count);
rk_positions rk_positions_i32(const int32_t* data, int64_t count);
/* axes streams of count positions each, stream after stream (M-RoPE: 3; a vision encoder's axial RoPE: one per
 * axis). */
rk_positions rk_positions_axial(const int64_t* data, int64_t count, int axes);

/* ---- a model's plan and its specs (ropekit/config.hpp, ropekit/spec.hpp) ------------------------- */

typedef struct rk_model rk_model; /* a model's per-layer positional plan */
typedef struct rk_spec rk_spec;   /* the RoPE of one group of layers */

/* From Hugging Face config.json text (a whole config or a fragment with the RoPE keys), read as
 * ropekit::read_config; from a built-in preset (ropekit::read_preset, e.g. "llama-3.1-8b"). */
rk_status rk_model_from_config_json(const char* json, size_t length, rk_model** out);
rk_status rk_model_from_preset(const char* name, rk_model** out);
void rk_model_destroy(rk_model* model);
/* The layer count (0 when the config gives none) and the count of warnings (HF's, assumptions made). */
int rk_model_num_layers(const rk_model* model);
size_t rk_model_num_warnings(const rk_model* model);
const char* rk_model_warning(const rk_model* model, size_t index); /* NULL outside [0, count) */

/* Facts of the layer group a layer belongs to. layer = -1: the only RoPE group (an error when there
 * are several). */
typedef struct rk_layer_info {
  int rotates;            /* 1: RoPE; 0: no positional encoding, ALiBi or no attention */
  int rope_offset;        /* lanes before the rotary slice in each q/k head (MLA) */
  int qk_head_dim;        /* full width of a q/k head */
  int64_t sliding_window; /* 0: none */
  double softmax_scale;   /* before the plan's softmax_scale_mult */
  double logit_softcap;   /* 0: none */
} rk_layer_info;
rk_status rk_model_layer_info(const rk_model* model, int layer, rk_layer_info* out);
/* The spec of that group; an error for a layer that does not rotate. */
rk_status rk_model_layer_spec(const rk_model* model, int layer, rk_spec** out);

/* clang-format off */
typedef RK_ENUM(rk_pairing) { RK_INTERLEAVED = 1, RK_HALF = 2 } rk_pairing;
/* clang-format on */
/* Plain RoPE (no scaling): θ_i = base^(-2i/rotary_dim), validated as ropekit::Spec::validate. For a
 * scaled variant, pass its config JSON fragment to rk_model_from_config_json. */
rk_status rk_spec_create(int head_dim, int rotary_dim, double base, rk_pairing pairing, rk_spec** out);
void rk_spec_destroy(rk_spec* spec);
int rk_spec_head_dim(const rk_spec* spec);
int rk_spec_rotary_dim(const rk_spec* spec);

/* ---- the rope and its validated call (ropekit/rope.hpp, ropekit/call.hpp) ------------------------ */

/* clang-format off */
typedef RK_ENUM(rk_angle_mode) { RK_ANGLES_ACCURATE = 0, RK_ANGLES_HF = 1 } rk_angle_mode;
/* clang-format on */
/* clang-format off */
typedef RK_ENUM(rk_direction) { RK_FORWARD = 0, RK_INVERSE = 1, RK_BACKWARD = 2 } rk_direction;
/* clang-format on */

typedef struct rk_rope rk_rope;
/* ropekit::Rope(spec, mode, current_length); current_length 0: the plan at initialisation. */
rk_status rk_rope_create(const rk_spec* spec, rk_angle_mode mode, int64_t current_length, rk_rope** out);
void rk_rope_destroy(rk_rope* rope);
/* The plan: rotary_dim/2 inverse frequencies (radians per position) into inv_freq[0, capacity), the
 * cos/sin magnitude and the softmax scale multiplier (any output may be NULL). */
rk_status rk_rope_plan(const rk_rope* rope, double* inv_freq, size_t capacity, double* cos_sin_scale,
                       double* softmax_scale_mult);

typedef struct rk_rotate_args {
  rk_heads q, k;
  rk_heads q_out, k_out; /* absent: rotate in place */
  rk_positions positions;
  rk_direction direction;
  int threads; /* run_all / apply: 0 = the library's default */
} rk_rotate_args;

typedef struct rk_call rk_call;
rk_status rk_rope_prepare(const rk_rope* rope, const rk_rotate_args* args, rk_call** out);
int64_t rk_call_rows(const rk_call* call);
/* Rows [first, last): an error unless 0 <= first <= last <= rows. */
rk_status rk_call_run(const rk_call* call, int64_t first, int64_t last);
rk_status rk_call_run_all(const rk_call* call);
/* RotateCall::set_positions: a decode step moves the call to new positions of the same tokens (checked
 * as prepare checks them; on error the call is unchanged). Not while the call runs. */
rk_status rk_call_set_positions(rk_call* call, rk_positions positions);
void rk_call_destroy(rk_call* call);
/* prepare then run_all. */
rk_status rk_rope_apply(const rk_rope* rope, const rk_rotate_args* args);

/* ---- fused rotate-and-append into a paged cache (ropekit/append.hpp) ----------------------------- */

/* clang-format off */
typedef RK_ENUM(rk_cache_dtype) { RK_CACHE_F32 = 1, RK_CACHE_BF16 = 2, RK_CACHE_F16 = 3, RK_CACHE_F8E4M3 = 4 } rk_cache_dtype;
/* clang-format on */
/* clang-format off */
typedef RK_ENUM(rk_page_layout) { RK_NHD = 1, RK_HND = 2 } rk_page_layout;
/* clang-format on */

typedef struct rk_paged_cache {
  void* k;
  void* v; /* NULL (v_head_dim 0): keys only */
  rk_cache_dtype dtype;
  rk_page_layout layout;
  int64_t num_pages, page_size, kv_heads;
  int head_dim, v_head_dim;
  float k_scale, v_scale; /* fp8: required, finite and > 0; other types: 0 (unset) or 1 */
} rk_paged_cache;

typedef struct rk_append_args {
  rk_heads q, q_out, k, k_out, k_nope, v;
  rk_positions positions;
  /* Either a slot mapping (vLLM: token t -> slot, -1 skips) ... */
  const void* slot_mapping;
  rk_index_type slot_type;
  int64_t slot_count;
  /* ... or, when slot_mapping is NULL, a page table (FlashInfer's append_paged_kv_cache), int32. */
  const int32_t* page_indices;
  int64_t num_page_indices;
  const int32_t* page_indptr;   /* batch + 1 */
  const int32_t* last_page_len; /* batch */
  int64_t batch;
  const int32_t* batch_indices; /* per token */
  const int32_t* seq_positions; /* per token */
  int64_t num_tokens;
  int k_offset, k_nope_offset, k_nope_dim;
  /* Fused RMSNorm of q and k (NULL weights: none); q_norm_count / k_norm_count values each. */
  const float* q_norm_weight;
  size_t q_norm_count;
  const float* k_norm_weight;
  size_t k_norm_count;
  float norm_eps; /* 0 (unset) is read as 1e-6 */
  float norm_weight_offset;
  int norm_across_heads;
  int threads;
} rk_append_args;

typedef struct rk_append_call rk_append_call;
rk_status rk_append_prepare(const rk_rope* rope, const rk_append_args* args, const rk_paged_cache* cache,
                            rk_append_call** out);
int64_t rk_append_call_rows(const rk_append_call* call); /* tokens */
rk_status rk_append_call_run(const rk_append_call* call, int64_t first, int64_t last);
rk_status rk_append_call_run_all(const rk_append_call* call);
/* AppendCall::set_positions_and_slots: a decode step of a prepared append. Reads only args' positions and
 * slot fields (mapping or page table) for the same tokens; on error the call is unchanged. */
rk_status rk_append_call_set_positions_and_slots(rk_append_call* call, const rk_append_args* args);
void rk_append_call_destroy(rk_append_call* call);
rk_status rk_append(const rk_rope* rope, const rk_append_args* args, const rk_paged_cache* cache);

/* ---- an engine's own cos/sin cache (ropekit/cos_sin_cache.hpp) ----------------------------------- */

/* Layout (vLLM's cos_sin_cache, FlashInfer's too): float32 [num_positions, rotary_dim], row p = the
 * rotary_dim/2 values m*cos(p*w_j), then the m*sin(p*w_j); m = the plan's cos_sin_scale. */
typedef struct rk_table rk_table;
/* ropekit's own coefficients in that layout into out[0, num_positions * rotary_dim); capacity counts floats. */
rk_status rk_cos_sin_cache_export(const rk_rope* rope, int64_t num_positions, float* out, size_t capacity);
/* A table holding a copy of the caller's cache (count = num_positions * rotary_dim floats), for the
 * *_with_table calls below: they rotate with exactly its values. */
rk_status rk_cos_sin_cache_import(const rk_rope* rope, const float* cache, size_t count, int64_t num_positions,
                                  rk_table** out);
void rk_table_destroy(rk_table* table);
/* How far a cache is from the accurate angles (ropekit::check_cos_sin_cache; tolerance 0: 1e-6). */
typedef struct rk_cos_sin_cache_report {
  double max_error;       /* max |value - exact| */
  int64_t worst_position; /* -1: an empty cache */
  int worst_pair;
  int worst_is_sin;
  int64_t first_position_over; /* first position with an error above the tolerance; -1: none */
  double accurate_bound;       /* what ropekit's own export meets everywhere */
} rk_cos_sin_cache_report;
rk_status rk_cos_sin_cache_check(const rk_rope* rope, const float* cache, size_t count, int64_t num_positions,
                                 double tolerance, rk_cos_sin_cache_report* out);
/* rk_rope_prepare / rk_append_prepare with the table's angles (Rope::prepare(args, table),
 * prepare_append(rope, args, cache, table)); the call keeps the table alive: it may be destroyed first.
 * Errors also: a table of other frequencies, a position outside it (at prepare and at each step). */
rk_status rk_rope_prepare_with_table(const rk_rope* rope, const rk_rotate_args* args, const rk_table* table,
                                     rk_call** out);
rk_status rk_append_prepare_with_table(const rk_rope* rope, const rk_append_args* args, const rk_paged_cache* cache,
                                       const rk_table* table, rk_append_call** out);

/* ---- immutable ropes per length (ropekit/rope_set.hpp) ------------------------------------------- */

typedef struct rk_rope_set rk_rope_set;
/* One rope per distinct plan, keyed by a sequence's current length (dynamic NTK, LongRoPE); may be
 * used from many threads at once. length_bucket 0: 1 (each length planned exactly); max_ropes 0: 64. */
rk_status rk_rope_set_create(const rk_spec* spec, rk_angle_mode mode, int64_t length_bucket, size_t max_ropes,
                             rk_rope_set** out);
void rk_rope_set_destroy(rk_rope_set* set);
/* A handle to the rope of a sequence at current_length (it shares the set's rope and outlives the set;
 * destroy it with rk_rope_destroy). */
rk_status rk_rope_set_at(const rk_rope_set* set, int64_t current_length, rk_rope** out);

/* ---- many sequences in one paged cache (ropekit/paged_kv_cache.hpp) ------------------------------ */

typedef struct rk_paged_kv_cache rk_paged_kv_cache;
typedef struct rk_paged_kv_cache_shape {
  int64_t num_pages, page_size, kv_heads;
  int head_dim, v_head_dim; /* 0: the rope's head_dim; v_head_dim 0: head_dim */
  rk_cache_dtype dtype;
  rk_page_layout layout;
  float k_scale, v_scale; /* as rk_paged_cache's */
  int max_sequences;
} rk_paged_kv_cache_shape;

rk_status rk_paged_kv_cache_create(const rk_rope* rope, const rk_paged_kv_cache_shape* shape, rk_paged_kv_cache** out);
void rk_paged_kv_cache_destroy(rk_paged_kv_cache* cache);
/* The tokens of args (batch 1; token t to sequence seq_of[t]) appended at the end of their sequences;
 * args' slot mapping and page table must be left unset (NULL). */
rk_status rk_paged_kv_cache_append(rk_paged_kv_cache* cache, const rk_rope* rope, const int32_t* seq_of,
                                   const rk_append_args* args);
/* The same with the keys (and q) rotated by exactly `table` (rk_cos_sin_cache_import); attention then
 * takes it too (rk_paged_kv_cache_attention_with_table). */
rk_status rk_paged_kv_cache_append_with_table(rk_paged_kv_cache* cache, const rk_rope* rope, const int32_t* seq_of,
                                              const rk_append_args* args, const rk_table* table);
/* The sequence operations over positions [p0, p1) (p1 < 0: to the end), as PagedKvCache's erase and shift. */
rk_status rk_paged_kv_cache_erase(rk_paged_kv_cache* cache, int seq, int64_t p0, int64_t p1);
rk_status rk_paged_kv_cache_shift(rk_paged_kv_cache* cache, int seq, int64_t p0, int64_t p1, int64_t delta);
/* llama.cpp's names for the two, kept for one version (docs/conventions.md). */
RK_DEPRECATED("renamed rk_paged_kv_cache_erase")
rk_status rk_paged_kv_cache_seq_rm(rk_paged_kv_cache* cache, int seq, int64_t p0, int64_t p1);
RK_DEPRECATED("renamed rk_paged_kv_cache_shift")
rk_status rk_paged_kv_cache_seq_add(rk_paged_kv_cache* cache, int seq, int64_t p0, int64_t p1, int64_t delta);
rk_status rk_paged_kv_cache_seq_cp(rk_paged_kv_cache* cache, int src, int dst, int64_t p0, int64_t p1);
rk_status rk_paged_kv_cache_seq_clear(rk_paged_kv_cache* cache, int seq);
/* Re-rotates seq's keys to rope's plan; *rerotated (may be NULL) says whether keys changed. */
rk_status rk_paged_kv_cache_rerotate(rk_paged_kv_cache* cache, int seq, const rk_rope* rope, int* rerotated);
rk_status rk_paged_kv_cache_length(const rk_paged_kv_cache* cache, int seq, int64_t* length);
rk_status rk_paged_kv_cache_free_pages(const rk_paged_kv_cache* cache, int64_t* pages);
/* Queries (batch 1, unrotated; token t of sequence seq_of[t]) against their sequences' entries. The cache first,
 * as every rk_paged_kv_cache_ call takes it (docs/conventions.md). */
rk_status rk_paged_kv_cache_attention(const rk_paged_kv_cache* cache, const rk_rope* rope, rk_heads q,
                                      rk_positions q_positions, const int32_t* seq_of, rk_heads out, int causal,
                                      int64_t window, double softmax_scale, int threads);
/* The same with q rotated on load by exactly `table`. */
rk_status rk_paged_kv_cache_attention_with_table(const rk_paged_kv_cache* cache, const rk_rope* rope, rk_heads q,
                                                 rk_positions q_positions, const int32_t* seq_of, rk_heads out,
                                                 int causal, int64_t window, double softmax_scale, int threads,
                                                 const rk_table* table);
/* Until 2026-11-29 both took the Rope first. A call in that order is refused at compile time in C (its first two
 * pointers have the wrong types) and at run time by the handles' kinds (RK_INVALID_ARGUMENT naming "cache"); C++
 * keeps the old order for one version as deprecated overloads (the end of this header). */

/* ---- attention (ropekit/attention.hpp) ----------------------------------------------------------- */

typedef struct rk_attention_args {
  rk_heads q, k, v, out;
  rk_positions q_positions, k_positions;
  int head_dim, v_head_dim; /* 0: the rope's head_dim; v_head_dim 0: head_dim */
  int causal;               /* nonzero: key j visible from query i only if j <= i */
  int64_t window;           /* > 0: also i - j < window */
  double softmax_scale;     /* 0: 1/sqrt(head_dim) */
  int threads;
  const rk_table* table; /* NULL: the rope's angles; else q rotated on load with exactly this table's
                          * (an engine's cos/sin cache, rk_cos_sin_cache_import); needs a rope */
} rk_attention_args;

/* Softmax attention with RoPE fused into the tile loads (rope non-NULL: q and k given unrotated) or
 * on q and k as given (rope NULL). ropekit::attention. */
rk_status rk_attention(const rk_rope* rope, const rk_attention_args* args);

/* ---- Position ids beyond one text stream (ropekit/position_ids.hpp) ----
 * Each writes its values into out[0, capacity) and their number into *count; when capacity is too small it
 * fails naming the count needed, writing nothing. Array arguments may be NULL only with a length of 0. */

/* ropekit::packed_positions: cu_seqlens[0, documents + 1); start_offsets NULL or one per document. */
rk_status rk_packed_positions(const int64_t* cu_seqlens, size_t cu_count, const int64_t* start_offsets, int64_t* out,
                              size_t capacity, size_t* count);

/* clang-format off */
typedef RK_ENUM(rk_cp_sharding) {
  RK_CP_CONTIGUOUS = 0, /* rank r holds [r L/size, (r+1) L/size) */
  RK_CP_ZIGZAG = 1,     /* 2 size chunks; rank r holds chunks r and 2 size - 1 - r (Megatron-LM, TransformerEngine) */
  RK_CP_STRIPED = 2     /* token t on rank (t / stripe) mod size */
} rk_cp_sharding;
/* clang-format on */

typedef struct rk_cp_shard {
  int size, rank;
  rk_cp_sharding sharding;
  int64_t stripe; /* RK_CP_STRIPED: tokens per stripe (>= 1) */
} rk_cp_shard;

/* The tokens (global indices, may be NULL) and positions rank shard->rank holds: one sequence of seq_len tokens
 * at positions start + index (ropekit::cp_indices / cp_positions), or, with cu_seqlens non-NULL, a packed batch
 * sharded per document (cp_indices_packed / cp_positions_packed; start_offsets NULL or one per document;
 * seq_len and start are then ignored). indices and positions each hold capacity values. */
rk_status rk_cp_positions(int64_t seq_len, int64_t start, const int64_t* cu_seqlens, size_t cu_count,
                          const int64_t* start_offsets, const rk_cp_shard* shard, int64_t* indices, int64_t* positions,
                          size_t capacity, size_t* count);
/* The name until 2026-11-29, kept for one version (docs/conventions.md). */
RK_DEPRECATED("renamed rk_cp_positions")
rk_status rk_cp_shard_positions(int64_t seq_len, int64_t start, const int64_t* cu_seqlens, size_t cu_count,
                                const int64_t* start_offsets, const rk_cp_shard* shard, int64_t* indices,
                                int64_t* positions, size_t capacity, size_t* count);

/* A draft tree (ropekit::tree_positions, tree_mask): positions[0, nodes); mask NULL or [nodes x nodes]. */
rk_status rk_tree_positions(const int64_t* parents, size_t nodes, int64_t root_position, int64_t* positions,
                            uint8_t* mask);

/* ropekit::rejected_slot_ranges: ranges[2i], ranges[2i+1] = [first, last) of range i, last range first;
 * capacity counts ranges. */
rk_status rk_rejected_slot_ranges(const int64_t* parents, size_t nodes, const int64_t* accepted, size_t accepted_count,
                                  int64_t base_slot, int64_t* ranges, size_t capacity, size_t* count);

/* clang-format off */
typedef RK_ENUM(rk_mrope_family) {
  RK_MROPE_QWEN2_VL = 0, RK_MROPE_QWEN2_5_VL = 1, RK_MROPE_QWEN3_VL = 2, RK_MROPE_GLM4V = 3
} rk_mrope_family;
typedef RK_ENUM(rk_mrope_rule) {
  RK_MROPE_TOKEN_TYPES = 0, /* transformers 5 (mm_token_type_ids) */
  RK_MROPE_TOKEN_SCAN = 1   /* transformers 4.57 and the engines that copied it */
} rk_mrope_rule;
/* clang-format on */

/* ropekit::MropeInput: token_types [batch × seq] (0 text, 1 image, 2 video), attention_mask NULL or [batch × seq]
 * (0 = padding), image/video grids as (t, h, w) triples, second_per_grid_ts NULL or one per video. */
typedef struct rk_mrope_input {
  int64_t batch, seq;
  const int32_t* token_types;
  const uint8_t* attention_mask;
  const int64_t* image_grid_thw;
  size_t images;
  const int64_t* video_grid_thw;
  size_t videos;
  const double* second_per_grid_ts;
  int64_t spatial_merge_size; /* 2 in every released model */
  int64_t tokens_per_second;  /* Qwen2.5-VL: 2 */
} rk_mrope_input;

/* ropekit::mrope_position_ids (Hugging Face's get_rope_index): positions [3 × batch × seq] (t, h, w rows; capacity
 * counts values), deltas [batch] (deltas_capacity counts values). */
rk_status rk_mrope_position_ids(rk_mrope_family family, rk_mrope_rule rule, const rk_mrope_input* input,
                                int64_t* positions, size_t capacity, int64_t* deltas, size_t deltas_capacity);

/* ropekit::vision_position_ids (get_vision_position_ids of the Qwen-VL / GLM-4V ViTs): grids (t, h, w) triples;
 * out receives the h stream then the w stream (2 × count values; *count = values written); view them with
 * rk_positions_axial(out, *count / 2, 2). */
rk_status rk_vision_position_ids(const int64_t* grid_thw, size_t grids, int64_t spatial_merge_size, int64_t* out,
                                 size_t capacity, size_t* count);

#ifdef __cplusplus
}

/* The Rope-first order of rk_paged_kv_cache_attention, kept for C++ callers for one version (see above). */
RK_DEPRECATED("the cache comes first: rk_paged_kv_cache_attention(cache, rope, ...)")
inline rk_status rk_paged_kv_cache_attention(const rk_rope* rope, const rk_paged_kv_cache* cache, rk_heads q,
                                             rk_positions q_positions, const int32_t* seq_of, rk_heads out, int causal,
                                             int64_t window, double softmax_scale, int threads) {
  return rk_paged_kv_cache_attention(cache, rope, q, q_positions, seq_of, out, causal, window, softmax_scale, threads);
}
RK_DEPRECATED("the cache comes first: rk_paged_kv_cache_attention_with_table(cache, rope, ...)")
inline rk_status rk_paged_kv_cache_attention_with_table(const rk_rope* rope, const rk_paged_kv_cache* cache, rk_heads q,
                                                        rk_positions q_positions, const int32_t* seq_of, rk_heads out,
                                                        int causal, int64_t window, double softmax_scale, int threads,
                                                        const rk_table* table) {
  return rk_paged_kv_cache_attention_with_table(cache, rope, q, q_positions, seq_of, out, causal, window, softmax_scale,
                                                threads, table);
}
#endif

#endif /* ROPEKIT_ROPEKIT_H */
