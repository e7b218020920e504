/* The C API from C: every handle, status and message, the numbers against a double-precision oracle
 * and against the same work done another way (split rows on the caller's threads, fused append vs
 * apply then copy, attention with rope fused vs rotated first), and bad input that changes nothing.
 * Plain C11 with pthreads: what an engine written in C would do. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ropekit/ropekit.h"

static int failures = 0;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ++failures;                                                              \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
    }                                                                          \
  } while (0)

#define CHECK_OK(call)                                                              \
  do {                                                                              \
    rk_status s_ = (call);                                                          \
    CHECK(s_ == RK_OK, "%s -> %s: %s", #call, rk_status_name(s_), rk_last_error()); \
  } while (0)

/* The call fails with RK_INVALID_ARGUMENT and a message containing `needle`. */
#define CHECK_ERROR(call, needle)                                                                               \
  do {                                                                                                          \
    rk_status s_ = (call);                                                                                      \
    CHECK(s_ == RK_INVALID_ARGUMENT, "%s -> %s (wanted invalid argument)", #call, rk_status_name(s_));          \
    CHECK(strstr(rk_last_error(), (needle)) != NULL, "%s: message \"%s\" lacks \"%s\"", #call, rk_last_error(), \
          (needle));                                                                                            \
  } while (0)

enum { D = 64, P = D / 2, TOKENS = 7, QH = 4, KH = 2 };

static float lcg_float(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)((*state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void fill(float* x, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) x[i] = lcg_float(&seed);
}

/* Worst |rotated - exact| / ||pair|| over rows of D lanes, half pairing (lanes j, j + P). */
static double worst_rotation_error(const float* in, const float* out, size_t rows, const int64_t* pos, size_t heads,
                                   const double* inv_freq, double m) {
  double worst = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    const int64_t p = pos[r / heads];
    for (int j = 0; j < P; ++j) {
      const double a = in[r * D + j], b = in[r * D + j + P];
      const double theta = (double)p * inv_freq[j];
      const double ea = m * (a * cos(theta) - b * sin(theta)), eb = m * (b * cos(theta) + a * sin(theta));
      const double norm = sqrt(a * a + b * b);
      if (norm == 0.0) continue;
      const double err = fmax(fabs(out[r * D + j] - ea), fabs(out[r * D + j + P] - eb)) / (m * norm);
      if (err > worst) worst = err;
    }
  }
  return worst;
}

static void test_status_and_version(void) {
  CHECK(strcmp(rk_status_name(RK_OK), "ok") == 0, "%s", rk_status_name(RK_OK));
  CHECK(strcmp(rk_status_name((rk_status)42), "unknown status") == 0, "%s", rk_status_name((rk_status)42));
  CHECK(strcmp(rk_version(), ROPEKIT_VERSION) == 0, "version %s, the project's %s", rk_version(), ROPEKIT_VERSION);
}

static rk_rope* plain_rope(void) {
  rk_spec* spec = NULL;
  rk_rope* rope = NULL;
  CHECK_OK(rk_spec_create(D, D, 10000.0, RK_HALF, &spec));
  CHECK_OK(rk_rope_create(spec, RK_ANGLES_ACCURATE, 0, &rope));
  rk_spec_destroy(spec);
  return rope;
}

/* Rotation: accurate to the contract (3e-7·m·||pair||), and prepare + run over ranges split across
 * the caller's threads equals apply bit for bit. */
struct range_job {
  const rk_call* call;
  int64_t first, last;
  rk_status status;
};

static void* run_range(void* arg) {
  struct range_job* job = (struct range_job*)arg;
  job->status = rk_call_run(job->call, job->first, job->last);
  return NULL;
}

static void test_rotation(void) {
  rk_rope* rope = plain_rope();
  double inv_freq[P], m = 0.0, softmax_mult = 0.0;
  CHECK_OK(rk_rope_plan(rope, inv_freq, P, &m, &softmax_mult));
  CHECK(m == 1.0 && softmax_mult == 1.0, "plain rope: m %g, softmax mult %g", m, softmax_mult);
  CHECK(inv_freq[0] == 1.0, "inv_freq[0] = %g", inv_freq[0]);

  static float q[TOKENS * QH * D], k[TOKENS * KH * D], q0[TOKENS * QH * D], k0[TOKENS * KH * D];
  static float q2[TOKENS * QH * D], k2[TOKENS * KH * D];
  fill(q0, TOKENS * QH * D, 1);
  fill(k0, TOKENS * KH * D, 2);
  const int64_t pos[TOKENS] = {0, 1, 2, 1000, 65535, 1 << 24, 2147483647};
  memcpy(q, q0, sizeof q);
  memcpy(k, k0, sizeof k);
  rk_rotate_args args;
  memset(&args, 0, sizeof args);
  args.q = rk_bshd(q, RK_F32, 1, TOKENS, QH, D);
  args.k = rk_bshd(k, RK_F32, 1, TOKENS, KH, D);
  args.positions = rk_positions_i64(pos, TOKENS);
  CHECK_OK(rk_rope_apply(rope, &args));
  const double eq = worst_rotation_error(q0, q, TOKENS * QH, pos, QH, inv_freq, m);
  const double ek = worst_rotation_error(k0, k, TOKENS * KH, pos, KH, inv_freq, m);
  printf("rotation: worst error %.3g (q), %.3g (k) of ||pair||; contract 3e-7\n", eq, ek);
  CHECK(eq <= 3e-7 && ek <= 3e-7, "q %g, k %g", eq, ek);

  /* The same through a prepared call, its rows split over three threads of ours. */
  memcpy(q2, q0, sizeof q2);
  memcpy(k2, k0, sizeof k2);
  args.q = rk_bshd(q2, RK_F32, 1, TOKENS, QH, D);
  args.k = rk_bshd(k2, RK_F32, 1, TOKENS, KH, D);
  rk_call* call = NULL;
  CHECK_OK(rk_rope_prepare(rope, &args, &call));
  const int64_t rows = rk_call_rows(call);
  CHECK(rows == TOKENS * (QH + KH), "rows %lld", (long long)rows);
  struct range_job jobs[3] = {{call, 0, 5, RK_OK}, {call, 5, 6, RK_OK}, {call, 6, rows, RK_OK}};
  pthread_t threads[3];
  for (int t = 0; t < 3; ++t) pthread_create(&threads[t], NULL, run_range, &jobs[t]);
  for (int t = 0; t < 3; ++t) pthread_join(threads[t], NULL);
  for (int t = 0; t < 3; ++t) CHECK(jobs[t].status == RK_OK, "range %d: %s", t, rk_status_name(jobs[t].status));
  CHECK(memcmp(q, q2, sizeof q) == 0 && memcmp(k, k2, sizeof k) == 0, "split run differs from apply");

  /* A range outside the call is refused and runs nothing. */
  memcpy(q2, q0, sizeof q2);
  CHECK_ERROR(rk_call_run(call, 3, rows + 1), "[3, 43)");
  CHECK_ERROR(rk_call_run(call, 4, 2), "first <= last");
  CHECK(memcmp(q2, q0, sizeof q2) == 0, "a refused range wrote");

  /* Decode steps: the call moved to other positions gives apply's bits at them; bad positions are refused
   * and leave the call as it was. */
  const int64_t later[TOKENS] = {7, 8, 9, 4096, 70000, 3, 5};
  const int64_t bad[TOKENS] = {7, 8, 9, -4, 70000, 3, 5};
  CHECK_OK(rk_call_set_positions(call, rk_positions_i64(later, TOKENS)));
  CHECK_ERROR(rk_call_set_positions(call, rk_positions_i64(bad, TOKENS)), "positions[3] = -4");
  CHECK_ERROR(rk_call_set_positions(call, rk_positions_i64(later, TOKENS - 1)), "positions.count = 6");
  CHECK_ERROR(rk_call_set_positions(NULL, rk_positions_i64(later, TOKENS)), "call is NULL");
  memcpy(q2, q0, sizeof q2);
  memcpy(k2, k0, sizeof k2);
  CHECK_OK(rk_call_run_all(call));
  memcpy(q, q0, sizeof q);
  memcpy(k, k0, sizeof k);
  args.q = rk_bshd(q, RK_F32, 1, TOKENS, QH, D);
  args.k = rk_bshd(k, RK_F32, 1, TOKENS, KH, D);
  args.positions = rk_positions_i64(later, TOKENS);
  CHECK_OK(rk_rope_apply(rope, &args));
  CHECK(memcmp(q, q2, sizeof q) == 0 && memcmp(k, k2, sizeof k) == 0, "set_positions + run differs from apply");
  rk_call_destroy(call);

  /* Inverse undoes forward within the contract (twice the one-way bound). */
  args.q = rk_bshd(q, RK_F32, 1, TOKENS, QH, D);
  memset(&args.k, 0, sizeof args.k);
  args.direction = RK_INVERSE;
  CHECK_OK(rk_rope_apply(rope, &args));
  double worst = 0.0;
  for (size_t i = 0; i < TOKENS * QH * D; ++i) worst = fmax(worst, fabs(q[i] - q0[i]));
  CHECK(worst <= 2 * 3e-7 * 1.5, "inverse after forward: %g", worst);
  rk_rope_destroy(rope);
}

static void test_bad_input_changes_nothing(void) {
  rk_rope* rope = plain_rope();
  float q[2 * D], q0[2 * D];
  fill(q0, 2 * D, 3);
  memcpy(q, q0, sizeof q);
  const int64_t pos[2] = {3, 4};
  const int64_t bad_pos[2] = {3, -1};
  rk_rotate_args args;
  memset(&args, 0, sizeof args);
  args.q = rk_bshd(q, RK_F32, 1, 2, 1, D);
  args.positions = rk_positions_i64(bad_pos, 2);
  CHECK_ERROR(rk_rope_apply(rope, &args), "-1");
  args.positions = rk_positions_i64(pos, 1);
  CHECK_ERROR(rk_rope_apply(rope, &args), "positions");
  args.positions = rk_positions_i64(pos, 2);
  args.q.dtype = (rk_dtype)7;
  CHECK_ERROR(rk_rope_apply(rope, &args), "q.dtype = 7");
  args.q.dtype = RK_F32;
  args.direction = (rk_direction)9;
  CHECK_ERROR(rk_rope_apply(rope, &args), "direction = 9");
  args.direction = RK_FORWARD;
  args.positions.type = (rk_index_type)0;
  CHECK_ERROR(rk_rope_apply(rope, &args), "positions.type = 0");
  CHECK(memcmp(q, q0, sizeof q) == 0, "a refused call wrote");
  rk_call* call = (rk_call*)&args; /* must stay untouched on failure */
  args.positions = rk_positions_i64(bad_pos, 2);
  CHECK_ERROR(rk_rope_prepare(rope, &args, &call), "-1");
  CHECK(call == (rk_call*)&args, "a failed prepare wrote its output handle");
  CHECK_ERROR(rk_rope_prepare(NULL, &args, &call), "rope is NULL");
  CHECK_ERROR(rk_rope_prepare(rope, NULL, &call), "args is NULL");
  CHECK_ERROR(rk_rope_prepare(rope, &args, NULL), "output handle");

  rk_spec* spec = NULL;
  CHECK_ERROR(rk_spec_create(64, 63, 10000.0, RK_HALF, &spec), "rotary_dim = 63");
  CHECK_ERROR(rk_spec_create(64, 64, 10000.0, (rk_pairing)0, &spec), "pairing = 0");
  CHECK_ERROR(rk_spec_create(64, 64, NAN, RK_HALF, &spec), "base");
  CHECK(spec == NULL, "a failed create wrote its output handle");
  CHECK_OK(rk_spec_create(64, 64, 10000.0, RK_HALF, &spec));
  rk_rope* other = NULL;
  CHECK_ERROR(rk_rope_create(spec, (rk_angle_mode)5, 0, &other), "mode = 5");
  CHECK_ERROR(rk_rope_create(spec, RK_ANGLES_ACCURATE, -3, &other), "current_length = -3");
  CHECK(other == NULL, "a failed create wrote its output handle");
  double inv_freq[4];
  CHECK_ERROR(rk_rope_plan(rope, inv_freq, 4, NULL, NULL), "capacity = 4");
  rk_spec_destroy(spec);
  rk_spec_destroy(NULL);
  rk_rope_destroy(NULL);
  rk_call_destroy(NULL);
  rk_rope_destroy(rope);
}

static void test_config(void) {
  const char* json =
      "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"num_attention_heads\": 32, "
      "\"num_hidden_layers\": 2, \"max_position_embeddings\": 131072, \"rope_theta\": 500000.0, "
      "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
      "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}";
  rk_model* model = NULL;
  CHECK_OK(rk_model_from_config_json(json, strlen(json), &model));
  CHECK(rk_model_num_layers(model) == 2, "layers %d", rk_model_num_layers(model));
  rk_layer_info info;
  CHECK_OK(rk_model_layer_info(model, 1, &info));
  CHECK(info.rotates == 1 && info.qk_head_dim == 128, "rotates %d, qk_head_dim %d", info.rotates, info.qk_head_dim);
  CHECK(fabs(info.softmax_scale - 1.0 / sqrt(128.0)) < 1e-15, "softmax scale %g", info.softmax_scale);
  rk_spec* spec = NULL;
  CHECK_OK(rk_model_layer_spec(model, -1, &spec));
  CHECK(rk_spec_head_dim(spec) == 128 && rk_spec_rotary_dim(spec) == 128, "head_dim %d", rk_spec_head_dim(spec));
  rk_rope* rope = NULL;
  CHECK_OK(rk_rope_create(spec, RK_ANGLES_ACCURATE, 0, &rope));
  double inv_freq[64];
  CHECK_OK(rk_rope_plan(rope, inv_freq, 64, NULL, NULL));
  /* Llama 3: high frequencies kept, the lowest divided by the factor (float32 values, HF's). */
  CHECK(inv_freq[0] == 1.0, "inv_freq[0] = %.17g", inv_freq[0]);
  const double low = pow(500000.0, -126.0 / 128.0) / 8.0;
  CHECK(fabs(inv_freq[63] - low) <= 2e-7 * low, "inv_freq[63] = %.9g, want %.9g", inv_freq[63], low);
  CHECK_ERROR(rk_model_layer_info(model, 2, &info), "layer = 2");
  rk_rope_destroy(rope);
  rk_spec_destroy(spec);
  rk_model_destroy(model);

  CHECK_ERROR(rk_model_from_config_json("{\"rope_theta\": ", 15, &model), "config.json");
  const char* wrong_type = "{\"head_dim\": 64, \"rope_theta\": \"big\"}";
  CHECK_ERROR(rk_model_from_config_json(wrong_type, strlen(wrong_type), &model), "rope_theta");
  CHECK_OK(rk_model_from_preset("llama-3.1-8b", &model));
  CHECK_OK(rk_model_layer_spec(model, -1, &spec)); /* a preset is a RoPE fragment: no layer count */
  CHECK(rk_spec_head_dim(spec) == 128, "llama-3.1-8b head_dim %d", rk_spec_head_dim(spec));
  rk_spec_destroy(spec);
  CHECK(rk_model_warning(model, rk_model_num_warnings(model)) == NULL, "warning past the end");
  rk_model_destroy(model);
  model = NULL;
  CHECK_ERROR(rk_model_from_preset("no-such-model", &model), "no-such-model");
  CHECK(model == NULL, "a failed read wrote its output handle");
}

/* Fused rotate-and-append into a paged f32 cache equals apply then copy, bit for bit; a skipped
 * token's slot and every other slot stay untouched; a page table addresses the same slots. */
enum { PAGES = 3, PAGE = 4, SLOTS = PAGES * PAGE, N = 5 };

static void test_append(void) {
  rk_rope* rope = plain_rope();
  static float k[N * KH * D], v[N * KH * D], kc[SLOTS * KH * D], vc[SLOTS * KH * D], rotated[N * KH * D];
  fill(k, N * KH * D, 4);
  fill(v, N * KH * D, 5);
  for (size_t i = 0; i < SLOTS * KH * D; ++i) kc[i] = vc[i] = -7.0f;
  const int64_t pos[N] = {10, 11, 12, 13, 14};
  const int64_t slots[N] = {5, 6, 7, 8, -1};
  rk_paged_cache cache;
  memset(&cache, 0, sizeof cache);
  cache.k = kc;
  cache.v = vc;
  cache.dtype = RK_CACHE_F32;
  cache.layout = RK_NHD;
  cache.num_pages = PAGES;
  cache.page_size = PAGE;
  cache.kv_heads = KH;
  cache.head_dim = D;
  cache.v_head_dim = D;
  rk_append_args args;
  memset(&args, 0, sizeof args);
  args.k = rk_bshd(k, RK_F32, 1, N, KH, D);
  args.v = rk_bshd(v, RK_F32, 1, N, KH, D);
  args.positions = rk_positions_i64(pos, N);
  args.slot_mapping = slots;
  args.slot_type = RK_I64;
  args.slot_count = N;
  rk_append_call* call = NULL;
  CHECK_OK(rk_append_prepare(rope, &args, &cache, &call));
  CHECK(rk_append_call_rows(call) == N, "rows %lld", (long long)rk_append_call_rows(call));
  CHECK_OK(rk_append_call_run(call, 0, 2));
  CHECK_OK(rk_append_call_run(call, 2, N));
  CHECK_ERROR(rk_append_call_run(call, 0, N + 1), "[0, 6)");

  rk_append_call_destroy(call);

  memcpy(rotated, k, sizeof rotated);
  rk_rotate_args rot;
  memset(&rot, 0, sizeof rot);
  rot.k = rk_bshd(rotated, RK_F32, 1, N, KH, D);
  rot.positions = rk_positions_i64(pos, N);
  CHECK_OK(rk_rope_apply(rope, &rot));
  int mismatched = 0, touched = 0;
  for (int s = 0; s < SLOTS; ++s) {
    int token = -1;
    for (int t = 0; t < N; ++t) {
      if (slots[t] == s) token = t;
    }
    for (int h = 0; h < KH; ++h) {
      const float* ke = kc + ((size_t)s * KH + h) * D; /* NHD: page, entry, head, lane */
      const float* ve = vc + ((size_t)s * KH + h) * D;
      if (token < 0) {
        for (int l = 0; l < D; ++l) touched += ke[l] != -7.0f || ve[l] != -7.0f;
      } else {
        mismatched += memcmp(ke, rotated + ((size_t)token * KH + h) * D, D * sizeof(float)) != 0;
        mismatched += memcmp(ve, v + ((size_t)token * KH + h) * D, D * sizeof(float)) != 0;
      }
    }
  }
  CHECK(mismatched == 0, "%d cache entries differ from apply then copy", mismatched);
  CHECK(touched == 0, "%d lanes outside the mapped slots were written", touched);
  CHECK(memcmp(k, rotated, sizeof k) != 0, "the live k was rotated without k_out");

  /* The same slots through a page table: one sequence on pages {1, 2}, 4 tokens at entries 1..4. */
  static float kc2[SLOTS * KH * D], vc2[SLOTS * KH * D];
  for (size_t i = 0; i < SLOTS * KH * D; ++i) kc2[i] = vc2[i] = -7.0f;
  cache.k = kc2;
  cache.v = vc2;
  const int32_t indices[2] = {1, 2}, indptr[2] = {0, 2}, last_len[1] = {1}, batch_of[4] = {0, 0, 0, 0};
  const int32_t seq_pos[4] = {1, 2, 3, 4};
  rk_append_args table = args;
  table.k = rk_bshd(k, RK_F32, 1, 4, KH, D);
  table.v = rk_bshd(v, RK_F32, 1, 4, KH, D);
  table.positions = rk_positions_i64(pos, 4);
  table.slot_mapping = NULL;
  table.page_indices = indices;
  table.num_page_indices = 2;
  table.page_indptr = indptr;
  table.last_page_len = last_len;
  table.batch = 1;
  table.batch_indices = batch_of;
  table.seq_positions = seq_pos;
  table.num_tokens = 4;
  CHECK_OK(rk_append(rope, &table, &cache));
  CHECK(memcmp(kc2, kc, sizeof kc) == 0 && memcmp(vc2, vc, sizeof vc) == 0, "page table differs from slot mapping");

  /* Bad input: nothing written. */
  memcpy(kc2, kc, sizeof kc);
  const int64_t shared[N] = {5, 6, 6, 8, -1};
  args.slot_mapping = shared;
  CHECK_ERROR(rk_append(rope, &args, &cache), "6");
  const int64_t outside[N] = {5, 6, 7, 12, -1};
  args.slot_mapping = outside;
  CHECK_ERROR(rk_append(rope, &args, &cache), "12");
  args.slot_mapping = slots;
  cache.dtype = RK_CACHE_F8E4M3;
  CHECK_ERROR(rk_append(rope, &args, &cache), "k_scale");
  cache.k_scale = cache.v_scale = -1.0f;
  CHECK_ERROR(rk_append(rope, &args, &cache), "k_scale = -1");
  cache.dtype = (rk_cache_dtype)9;
  CHECK_ERROR(rk_append(rope, &args, &cache), "cache.dtype = 9");
  cache.dtype = RK_CACHE_F32;
  cache.k_scale = cache.v_scale = 0.0f;
  cache.layout = (rk_page_layout)3;
  CHECK_ERROR(rk_append(rope, &args, &cache), "cache.layout = 3");
  cache.layout = RK_NHD;
  table.page_indptr = NULL;
  CHECK_ERROR(rk_append(rope, &table, &cache), "page_indptr is NULL");
  CHECK(memcmp(kc2, kc, sizeof kc) == 0, "a refused append wrote");
  rk_append_call_destroy(NULL);
  /* A decode step of a prepared call (new positions and slots, same views) writes what a fresh append at
   * them writes; a bad step is refused and changes nothing. k is only read (no k_out). */
  {
    static float kc3[SLOTS * KH * D], vc3[SLOTS * KH * D], kc4[SLOTS * KH * D], vc4[SLOTS * KH * D];
    for (size_t i = 0; i < SLOTS * KH * D; ++i) kc3[i] = vc3[i] = kc4[i] = vc4[i] = -7.0f;
    rk_paged_cache stepped = cache, fresh = cache;
    stepped.k = kc3, stepped.v = vc3, fresh.k = kc4, fresh.v = vc4;
    CHECK_OK(rk_append_prepare(rope, &args, &stepped, &call));
    const int64_t step_pos[N] = {40, 41, 42, 43, 44};
    const int64_t step_slots[N] = {0, 1, -1, 9, 2};
    const int64_t clash[N] = {0, 1, 1, 9, 2};
    rk_append_args step = args;
    step.positions = rk_positions_i64(step_pos, N);
    step.slot_mapping = clash;
    CHECK_ERROR(rk_append_call_set_positions_and_slots(call, &step), "both write slot 1");
    step.slot_mapping = step_slots;
    CHECK_OK(rk_append_call_set_positions_and_slots(call, &step));
    CHECK_OK(rk_append_call_run_all(call));
    CHECK_OK(rk_append(rope, &step, &fresh));
    CHECK(memcmp(kc3, kc4, sizeof kc3) == 0 && memcmp(vc3, vc4, sizeof vc3) == 0, "a step differs from a fresh append");
    CHECK_ERROR(rk_append_call_set_positions_and_slots(NULL, &step), "call is NULL");
    rk_append_call_destroy(call);
  }
  rk_rope_destroy(rope);
}

/* An engine's own cos/sin cache: ropekit's export checks clean, a planted error is found where it is;
 * rotating and appending with an imported cache use exactly its values (the own export: the bits of
 * apply; the planted one: different bits at that position, and the append's entries are the keys its
 * rotation gives); calls keep the table alive; bad input is refused. */
static void test_cos_sin_cache(void) {
  enum { NP = 64 };
  rk_rope* rope = plain_rope();
  static float cache[NP * D], planted[NP * D];
  CHECK_ERROR(rk_cos_sin_cache_export(rope, NP, cache, NP * D - 1), "capacity = 4095");
  CHECK_OK(rk_cos_sin_cache_export(rope, NP, cache, NP * D));
  rk_cos_sin_cache_report report;
  CHECK_OK(rk_cos_sin_cache_check(rope, cache, NP * D, NP, 0.0, &report));
  CHECK(report.max_error <= report.accurate_bound && report.first_position_over == -1,
        "own export: error %g, bound %g, over at %lld", report.max_error, report.accurate_bound,
        (long long)report.first_position_over);
  memcpy(planted, cache, sizeof planted);
  planted[10 * D + P + 3] += 1e-3f; /* position 10, pair 3, sin */
  CHECK_OK(rk_cos_sin_cache_check(rope, planted, NP * D, NP, 1e-6, &report));
  CHECK(report.worst_position == 10 && report.worst_pair == 3 && report.worst_is_sin == 1 &&
            report.first_position_over == 10,
        "planted error found at position %lld, pair %d, sin %d", (long long)report.worst_position, report.worst_pair,
        report.worst_is_sin);
  CHECK_ERROR(rk_cos_sin_cache_check(rope, cache, NP * D - 1, NP, 0.0, &report), "4095 values");

  rk_table *own = NULL, *theirs = NULL, *untouched = (rk_table*)&report;
  CHECK_ERROR(rk_cos_sin_cache_import(rope, cache, NP * D, -1, &untouched), "num_positions = -1");
  CHECK(untouched == (rk_table*)&report, "a failed import wrote its output handle");
  CHECK_OK(rk_cos_sin_cache_import(rope, cache, NP * D, NP, &own));
  CHECK_OK(rk_cos_sin_cache_import(rope, planted, NP * D, NP, &theirs));

  static float k[N * KH * D], want[N * KH * D], got[N * KH * D];
  fill(k, N * KH * D, 8);
  const int64_t pos[N] = {10, 3, 63, 0, 10};
  rk_rotate_args rot;
  memset(&rot, 0, sizeof rot);
  rot.positions = rk_positions_i64(pos, N);
  memcpy(want, k, sizeof k);
  rot.k = rk_bshd(want, RK_F32, 1, N, KH, D);
  CHECK_OK(rk_rope_apply(rope, &rot));
  memcpy(got, k, sizeof k);
  rot.k = rk_bshd(got, RK_F32, 1, N, KH, D);
  rk_call* call = NULL;
  CHECK_OK(rk_rope_prepare_with_table(rope, &rot, own, &call));
  rk_table_destroy(own); /* the call keeps it */
  CHECK_OK(rk_call_run_all(call));
  rk_call_destroy(call);
  CHECK(memcmp(got, want, sizeof got) == 0, "the imported own export rotates other than apply");
  memcpy(got, k, sizeof k);
  CHECK_OK(rk_rope_prepare_with_table(rope, &rot, theirs, &call));
  CHECK_OK(rk_call_run_all(call));
  rk_call_destroy(call);
  CHECK(memcmp(got, want, sizeof got) != 0, "the planted cache's values were not used");
  CHECK(memcmp(got + KH * D, want + KH * D, 3 * KH * D * sizeof(float)) == 0, "positions 3, 63, 0 differ");

  /* The fused append with the planted cache writes the keys its rotation gave (f32 cache: copies). */
  static float kc[SLOTS * KH * D], vc[SLOTS * KH * D];
  rk_paged_cache pc;
  memset(&pc, 0, sizeof pc);
  pc.k = kc, pc.v = vc, pc.dtype = RK_CACHE_F32, pc.layout = RK_NHD;
  pc.num_pages = PAGES, pc.page_size = PAGE, pc.kv_heads = KH, pc.head_dim = D, pc.v_head_dim = D;
  const int64_t slots[N] = {0, 1, 2, 3, 4};
  rk_append_args args;
  memset(&args, 0, sizeof args);
  args.k = rk_bshd(k, RK_F32, 1, N, KH, D);
  args.v = rk_bshd(k, RK_F32, 1, N, KH, D);
  args.positions = rk_positions_i64(pos, N);
  args.slot_mapping = slots, args.slot_type = RK_I64, args.slot_count = N;
  rk_append_call* append = NULL;
  CHECK_OK(rk_append_prepare_with_table(rope, &args, &pc, theirs, &append));
  CHECK_OK(rk_append_call_run_all(append));
  CHECK(memcmp(kc, got, sizeof got) == 0, "the append's keys differ from the rotation with the same cache");
  const int64_t outside[N] = {10, 3, 64, 0, 10};
  rk_append_args step = args;
  step.positions = rk_positions_i64(outside, N);
  CHECK_ERROR(rk_append_call_set_positions_and_slots(append, &step), "position 64 is outside the table");
  CHECK_ERROR(rk_append_prepare_with_table(rope, &step, &pc, theirs, &append), "position 64 is outside the table");
  CHECK_ERROR(rk_append_prepare_with_table(rope, &args, &pc, NULL, &append), "table is NULL");
  rk_append_call_destroy(append);

  /* Attention with the planted cache: over a paged cache whose keys were appended with it, and fused
   * over the raw keys; both rotate q with it (the query sits at position 10, the planted row). */
  rk_paged_kv_cache_shape shape;
  memset(&shape, 0, sizeof shape);
  shape.num_pages = PAGES, shape.page_size = PAGE, shape.kv_heads = KH, shape.dtype = RK_CACHE_F32;
  shape.layout = RK_NHD, shape.max_sequences = 1;
  rk_paged_kv_cache* paged = NULL;
  CHECK_OK(rk_paged_kv_cache_create(rope, &shape, &paged));
  const int32_t seq_of[N] = {0, 0, 0, 0, 0};
  rk_append_args tokens = args; /* the same tokens; the paged cache picks their slots */
  tokens.slot_mapping = NULL, tokens.slot_count = 0;
  CHECK_ERROR(rk_paged_kv_cache_append_with_table(paged, rope, seq_of, &tokens, NULL), "table is NULL");
  CHECK_OK(rk_paged_kv_cache_append_with_table(paged, rope, seq_of, &tokens, theirs));
  static float q[QH * D], via_cache[QH * D], fused[QH * D], untabled[QH * D];
  fill(q, QH * D, 9);
  const int64_t q_pos[1] = {10};
  CHECK_OK(rk_paged_kv_cache_attention_with_table(paged, rope, rk_bshd(q, RK_F32, 1, 1, QH, D),
                                                  rk_positions_i64(q_pos, 1), seq_of,
                                                  rk_bshd(via_cache, RK_F32, 1, 1, QH, D), 0, 0, 0.0, 1, theirs));
  rk_attention_args at;
  memset(&at, 0, sizeof at);
  at.q = rk_bshd(q, RK_F32, 1, 1, QH, D), at.k = rk_bshd(k, RK_F32, 1, N, KH, D),
  at.v = rk_bshd(k, RK_F32, 1, N, KH, D);
  at.q_positions = rk_positions_i64(q_pos, 1), at.k_positions = rk_positions_i64(pos, N), at.threads = 1;
  at.out = rk_bshd(fused, RK_F32, 1, 1, QH, D);
  at.table = theirs;
  CHECK_OK(rk_attention(rope, &at));
  CHECK(memcmp(via_cache, fused, sizeof fused) == 0,
        "attention over the cache differs from the fused one with the table");
  at.out = rk_bshd(untabled, RK_F32, 1, 1, QH, D);
  at.table = NULL;
  CHECK_OK(rk_attention(rope, &at));
  CHECK(memcmp(untabled, fused, sizeof fused) != 0, "rk_attention_args.table was not used");
  at.table = theirs;
  at.head_dim = D; /* attention without a rope needs it */
  CHECK_ERROR(rk_attention(NULL, &at), "options.table is set");
  CHECK_ERROR(
      rk_paged_kv_cache_attention_with_table(paged, rope, rk_bshd(q, RK_F32, 1, 1, QH, D), rk_positions_i64(q_pos, 1),
                                             seq_of, rk_bshd(via_cache, RK_F32, 1, 1, QH, D), 0, 0, 0.0, 1, NULL),
      "table is NULL");
  rk_paged_kv_cache_destroy(paged);
  rk_table_destroy(theirs);
  rk_table_destroy(NULL);
  rk_rope_destroy(rope);
}

/* Attention with the rope fused into the tile loads equals attention on q and k rotated first
 * (the fused path rotates exactly as apply would), and both match a double-precision softmax. */
static void test_attention(void) {
  rk_rope* rope = plain_rope();
  enum { S = 9 };
  static float q[S * QH * D], k[S * KH * D], v[S * KH * D], qr[S * QH * D], kr[S * KH * D];
  static float fused[S * QH * D], unfused[S * QH * D];
  fill(q, S * QH * D, 6);
  fill(k, S * KH * D, 7);
  fill(v, S * KH * D, 8);
  int64_t pos[S];
  for (int i = 0; i < S; ++i) pos[i] = 100 + i;
  rk_attention_args args;
  memset(&args, 0, sizeof args);
  args.q = rk_bshd(q, RK_F32, 1, S, QH, D);
  args.k = rk_bshd(k, RK_F32, 1, S, KH, D);
  args.v = rk_bshd(v, RK_F32, 1, S, KH, D);
  args.out = rk_bshd(fused, RK_F32, 1, S, QH, D);
  args.q_positions = args.k_positions = rk_positions_i64(pos, S);
  args.causal = 1;
  CHECK_OK(rk_attention(rope, &args));

  memcpy(qr, q, sizeof qr);
  memcpy(kr, k, sizeof kr);
  rk_rotate_args rot;
  memset(&rot, 0, sizeof rot);
  rot.q = rk_bshd(qr, RK_F32, 1, S, QH, D);
  rot.k = rk_bshd(kr, RK_F32, 1, S, KH, D);
  rot.positions = rk_positions_i64(pos, S);
  CHECK_OK(rk_rope_apply(rope, &rot));
  rk_attention_args plain = args;
  plain.q = rk_bshd(qr, RK_F32, 1, S, QH, D);
  plain.k = rk_bshd(kr, RK_F32, 1, S, KH, D);
  plain.out = rk_bshd(unfused, RK_F32, 1, S, QH, D);
  plain.head_dim = D;
  CHECK_OK(rk_attention(NULL, &plain));
  CHECK(memcmp(fused, unfused, sizeof fused) == 0, "fused rope attention differs from rotate then attend");

  /* Oracle: double softmax of the rotated (as stored) q·k, causal; bound 1e-6·(1 + R)·max|v|. */
  double worst = 0.0;
  for (int i = 0; i < S; ++i) {
    for (int h = 0; h < QH; ++h) {
      const int kvh = h / (QH / KH);
      double logits[S], lo = INFINITY, hi = -INFINITY, sum = 0.0, maxv = 0.0;
      for (int j = 0; j <= i; ++j) {
        double dot = 0.0;
        for (int l = 0; l < D; ++l) dot += (double)qr[(i * QH + h) * D + l] * kr[(j * KH + kvh) * D + l];
        logits[j] = dot / sqrt((double)D);
        lo = fmin(lo, logits[j]);
        hi = fmax(hi, logits[j]);
      }
      for (int j = 0; j <= i; ++j) sum += exp(logits[j] - hi);
      for (int l = 0; l < D; ++l) {
        double o = 0.0;
        for (int j = 0; j <= i; ++j) {
          o += exp(logits[j] - hi) / sum * v[(j * KH + kvh) * D + l];
          maxv = fmax(maxv, fabs(v[(j * KH + kvh) * D + l]));
        }
        const double err = fabs(fused[(i * QH + h) * D + l] - o) / (1e-6 * (1.0 + (hi - lo)) * maxv);
        worst = fmax(worst, err);
      }
    }
  }
  printf("attention: worst error %.3f of the bound\n", worst);
  CHECK(worst <= 1.0, "attention error %g of the bound", worst);

  args.window = -1;
  CHECK_ERROR(rk_attention(rope, &args), "window");
  args.window = 0;
  plain.head_dim = 0;
  CHECK_ERROR(rk_attention(NULL, &plain), "head_dim");
  rk_rope_destroy(rope);
}

/* Many sequences: a rope from a rope set, two sequences appended interleaved into a paged cache, and
 * decode attention of both in one call equals fused attention over each sequence's tokens given
 * directly (the cache holds exactly the keys that attention would rotate); sequence operations and
 * their errors. */
static void test_paged_cache(void) {
  rk_spec* spec = NULL;
  rk_rope_set* set = NULL;
  rk_rope* rope = NULL;
  CHECK_OK(rk_spec_create(D, D, 10000.0, RK_HALF, &spec));
  CHECK_OK(rk_rope_set_create(spec, RK_ANGLES_ACCURATE, 0, 0, &set));
  CHECK_OK(rk_rope_set_at(set, 12, &rope));
  rk_rope_set_destroy(set); /* the rope handle keeps its rope */
  rk_paged_kv_cache_shape shape;
  memset(&shape, 0, sizeof shape);
  shape.num_pages = 8;
  shape.page_size = 4;
  shape.kv_heads = KH;
  shape.dtype = RK_CACHE_F32;
  shape.layout = RK_HND;
  shape.max_sequences = 2;
  rk_paged_kv_cache* cache = NULL;
  CHECK_OK(rk_paged_kv_cache_create(rope, &shape, &cache));

  enum { L0 = 7, L1 = 10 };
  static float k0[L0 * KH * D], v0[L0 * KH * D], k1[L1 * KH * D], v1[L1 * KH * D];
  fill(k0, L0 * KH * D, 21);
  fill(v0, L0 * KH * D, 22);
  fill(k1, L1 * KH * D, 23);
  fill(v1, L1 * KH * D, 24);
  int64_t p0[L0], p1[L1];
  for (int i = 0; i < L0; ++i) p0[i] = i;
  for (int i = 0; i < L1; ++i) p1[i] = 50 + i;
  /* One token of each sequence per call, in turns. */
  for (int t = 0; t < L1; ++t) {
    for (int s = 0; s < 2; ++s) {
      if (s == 0 && t >= L0) continue;
      rk_append_args a;
      memset(&a, 0, sizeof a);
      float* k = s == 0 ? k0 : k1;
      float* v = s == 0 ? v0 : v1;
      a.k = rk_bshd(k + t * KH * D, RK_F32, 1, 1, KH, D);
      a.v = rk_bshd(v + t * KH * D, RK_F32, 1, 1, KH, D);
      a.positions = rk_positions_i64(s == 0 ? &p0[t] : &p1[t], 1);
      const int32_t seq = s;
      CHECK_OK(rk_paged_kv_cache_append(cache, rope, &seq, &a));
    }
  }
  int64_t length = 0, free_pages = 0;
  CHECK_OK(rk_paged_kv_cache_length(cache, 1, &length));
  CHECK_OK(rk_paged_kv_cache_free_pages(cache, &free_pages));
  CHECK(length == L1 && free_pages == 8 - 2 - 3, "length %lld, free pages %lld", (long long)length,
        (long long)free_pages);

  static float q[2 * QH * D], out[2 * QH * D], want[QH * D];
  fill(q, 2 * QH * D, 25);
  const int32_t seq_of[2] = {0, 1};
  const int64_t q_pos[2] = {L0, 50 + L1};
  CHECK_OK(rk_paged_kv_cache_attention(cache, rope, rk_bshd(q, RK_F32, 1, 2, QH, D), rk_positions_i64(q_pos, 2), seq_of,
                                       rk_bshd(out, RK_F32, 1, 2, QH, D), 1, 0, 0.0, 0));
  for (int s = 0; s < 2; ++s) {
    rk_attention_args a;
    memset(&a, 0, sizeof a);
    a.q = rk_bshd(q + s * QH * D, RK_F32, 1, 1, QH, D);
    a.k = rk_bshd(s == 0 ? k0 : k1, RK_F32, 1, s == 0 ? L0 : L1, KH, D);
    a.v = rk_bshd(s == 0 ? v0 : v1, RK_F32, 1, s == 0 ? L0 : L1, KH, D);
    a.out = rk_bshd(want, RK_F32, 1, 1, QH, D);
    a.q_positions = rk_positions_i64(&q_pos[s], 1);
    a.k_positions = rk_positions_i64(s == 0 ? p0 : p1, s == 0 ? L0 : L1);
    a.causal = 1;
    CHECK_OK(rk_attention(rope, &a));
    CHECK(memcmp(out + s * QH * D, want, sizeof want) == 0, "sequence %d: paged differs from fused attention", s);
  }

  /* A handle of another kind (the Rope-first order of 2026-11-29's rk_paged_kv_cache_attention, a void* mix-up) is
   * refused by its tag, naming the argument; destroying one as the wrong kind leaves it alone. */
  CHECK_ERROR(
      rk_paged_kv_cache_attention((const rk_paged_kv_cache*)(const void*)rope, (const rk_rope*)(const void*)cache,
                                  rk_bshd(q, RK_F32, 1, 2, QH, D), rk_positions_i64(q_pos, 2), seq_of,
                                  rk_bshd(out, RK_F32, 1, 2, QH, D), 1, 0, 0.0, 0),
      "cache: not an rk_paged_kv_cache");
  rk_rope_destroy((rk_rope*)(void*)cache);
  CHECK(strstr(rk_last_error(), "rope: not an rk_rope") != NULL, "destroy as another kind: \"%s\"", rk_last_error());
  CHECK_OK(rk_paged_kv_cache_length(cache, 1, &length));

  /* Sequence operations: shifting a whole sequence by 0 positions changes nothing; removing it frees
   * its pages; bad ids and appends with a slot mapping are refused. */
  CHECK_OK(rk_paged_kv_cache_shift(cache, 1, 0, -1, 0));
  CHECK_OK(rk_paged_kv_cache_seq_cp(cache, 1, 0, 55, 57));
  CHECK_OK(rk_paged_kv_cache_length(cache, 0, &length));
  CHECK(length == L0 + 2, "after seq_cp: %lld", (long long)length);
  CHECK_OK(rk_paged_kv_cache_erase(cache, 0, -1, -1));
  CHECK_OK(rk_paged_kv_cache_seq_clear(cache, 1));
  CHECK_OK(rk_paged_kv_cache_free_pages(cache, &free_pages));
  CHECK(free_pages == 8, "free pages after clearing %lld", (long long)free_pages);
  CHECK_ERROR(rk_paged_kv_cache_erase(cache, 2, 0, -1), "sequence 2");
  CHECK_ERROR(rk_paged_kv_cache_shift(cache, -1, 0, -1, 3), "sequence -1");
  /* llama.cpp's names, kept for one version: the same operations (the compiler warns where they are used). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  CHECK_ERROR(rk_paged_kv_cache_seq_rm(cache, 2, 0, -1), "sequence 2");
  CHECK_ERROR(rk_paged_kv_cache_seq_add(cache, -1, 0, -1, 3), "sequence -1");
  CHECK_OK(rk_paged_kv_cache_seq_add(cache, 0, 0, -1, 0));
  CHECK_OK(rk_paged_kv_cache_seq_rm(cache, 0, -1, -1));
#pragma GCC diagnostic pop
  int rerotated = 7;
  CHECK_OK(rk_paged_kv_cache_rerotate(cache, 0, rope, &rerotated));
  CHECK(rerotated == 0, "an empty sequence was re-rotated");
  rk_append_args a;
  memset(&a, 0, sizeof a);
  a.k = rk_bshd(k0, RK_F32, 1, 1, KH, D);
  a.v = rk_bshd(v0, RK_F32, 1, 1, KH, D);
  a.positions = rk_positions_i64(p0, 1);
  const int64_t slot = 3;
  a.slot_mapping = &slot;
  const int32_t seq = 0;
  CHECK_ERROR(rk_paged_kv_cache_append(cache, rope, &seq, &a), "leave slot_mapping");
  shape.max_sequences = 0;
  rk_paged_kv_cache* bad = NULL;
  CHECK_ERROR(rk_paged_kv_cache_create(rope, &shape, &bad), "max_sequences = 0");
  CHECK(bad == NULL, "a failed create wrote its output handle");
  rk_rope_set* bad_set = NULL;
  CHECK_ERROR(rk_rope_set_create(spec, RK_ANGLES_ACCURATE, -4, 0, &bad_set), "length_bucket = -4");
  rk_paged_kv_cache_destroy(cache);
  rk_paged_kv_cache_destroy(NULL);
  rk_rope_destroy(rope);
  rk_spec_destroy(spec);
}

/* Position ids: the values of the C++ functions (position_ids_test.cpp checks those against the references). */
static void test_position_ids(void) {
  const int64_t cu[] = {0, 3, 5, 9};
  int64_t out[16];
  size_t count = 0;
  CHECK_OK(rk_packed_positions(cu, 4, NULL, out, 16, &count));
  const int64_t want[] = {0, 1, 2, 0, 1, 0, 1, 2, 3};
  CHECK(count == 9 && memcmp(out, want, sizeof want) == 0, "packed positions (count %zu)", count);
  CHECK_ERROR(rk_packed_positions(cu, 4, NULL, out, 4, &count), "capacity = 4");
  const int64_t bad_cu[] = {1, 3};
  CHECK_ERROR(rk_packed_positions(bad_cu, 2, NULL, out, 16, &count), "cu_seqlens[0] = 1");

  rk_cp_shard shard = {2, 1, RK_CP_ZIGZAG, 1};
  int64_t indices[16], positions[16];
  CHECK_OK(rk_cp_positions(8, 100, NULL, 0, NULL, &shard, indices, positions, 16, &count));
  const int64_t zig[] = {2, 3, 4, 5};
  const int64_t zig_pos[] = {102, 103, 104, 105};
  CHECK(count == 4 && memcmp(indices, zig, sizeof zig) == 0 && memcmp(positions, zig_pos, sizeof zig_pos) == 0,
        "zig-zag rank 1 of 2");
  const int64_t packed_cu[] = {0, 4, 12};
  CHECK_OK(rk_cp_positions(0, 0, packed_cu, 3, NULL, &shard, indices, positions, 16, &count));
  const int64_t packed_idx[] = {1, 2, 6, 7, 8, 9};
  const int64_t packed_pos[] = {1, 2, 2, 3, 4, 5};
  CHECK(count == 6 && memcmp(indices, packed_idx, sizeof packed_idx) == 0 &&
            memcmp(positions, packed_pos, sizeof packed_pos) == 0,
        "packed zig-zag rank 1 of 2");
  shard.rank = 2;
  CHECK_ERROR(rk_cp_positions(8, 0, NULL, 0, NULL, &shard, indices, positions, 16, &count), "cp rank = 2");
  shard.rank = 0;
  shard.sharding = (rk_cp_sharding)9;
  CHECK_ERROR(rk_cp_positions(8, 0, NULL, 0, NULL, &shard, indices, positions, 16, &count), "sharding = 9");
  /* The name until 2026-11-29, kept for one version: the same function. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  CHECK_ERROR(rk_cp_shard_positions(8, 0, NULL, 0, NULL, &shard, indices, positions, 16, &count), "sharding = 9");
#pragma GCC diagnostic pop

  const int64_t parents[] = {-1, -1, 0, 2};
  uint8_t mask[16];
  CHECK_OK(rk_tree_positions(parents, 4, 10, positions, mask));
  const int64_t depth[] = {11, 11, 12, 13};
  const uint8_t want_mask[] = {1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1};
  CHECK(memcmp(positions, depth, sizeof depth) == 0 && memcmp(mask, want_mask, sizeof want_mask) == 0, "tree");
  const int64_t cycle[] = {-1, 1};
  CHECK_ERROR(rk_tree_positions(cycle, 2, 0, positions, NULL), "parents[1] = 1");
  const int64_t accepted[] = {0, 2};
  int64_t ranges[8];
  CHECK_OK(rk_rejected_slot_ranges(parents, 4, accepted, 2, 20, ranges, 4, &count));
  CHECK(count == 2 && ranges[0] == 23 && ranges[1] == 24 && ranges[2] == 21 && ranges[3] == 22, "ranges");
  const int64_t not_path[] = {2};
  CHECK_ERROR(rk_rejected_slot_ranges(parents, 4, not_path, 1, 0, ranges, 4, &count), "accepted[0] = 2");

  /* M-RoPE: text, a 4 × 6 image (6 merged tokens), text; the text after it continues at 2 + max(4, 6) / 2. */
  const int32_t types[] = {0, 0, 1, 1, 1, 1, 1, 1, 0};
  const int64_t image[] = {1, 4, 6};
  rk_mrope_input in = {1, 9, types, NULL, image, 1, NULL, 0, NULL, 2, 2};
  int64_t mpos[27], deltas[1];
  CHECK_OK(rk_mrope_position_ids(RK_MROPE_QWEN2_VL, RK_MROPE_TOKEN_TYPES, &in, mpos, 27, deltas, 1));
  CHECK(mpos[8] == 5 && mpos[9 + 2] == 2 && mpos[18 + 3] == 3 && deltas[0] == -3, "mrope ids (t %lld, delta %lld)",
        (long long)mpos[8], (long long)deltas[0]);
  CHECK_ERROR(rk_mrope_position_ids(RK_MROPE_QWEN2_VL, RK_MROPE_TOKEN_TYPES, &in, mpos, 20, deltas, 1),
              "capacity = 20");
  const int64_t odd_image[] = {1, 5, 6};
  in.image_grid_thw = odd_image;
  CHECK_ERROR(rk_mrope_position_ids(RK_MROPE_QWEN2_VL, RK_MROPE_TOKEN_TYPES, &in, mpos, 27, deltas, 1),
              "spatial_merge_size = 2");
  CHECK_ERROR(rk_mrope_position_ids((rk_mrope_family)9, RK_MROPE_TOKEN_TYPES, &in, mpos, 27, deltas, 1), "family = 9");

  /* A vision encoder's patches: block-major over 2 × 2 merge blocks. */
  const int64_t grid[] = {1, 2, 4};
  int64_t vpos[16];
  CHECK_OK(rk_vision_position_ids(grid, 1, 2, vpos, 16, &count));
  const int64_t hw[] = {0, 0, 1, 1, 0, 0, 1, 1, /* w */ 0, 1, 0, 1, 2, 3, 2, 3};
  CHECK(count == 16 && memcmp(vpos, hw, sizeof hw) == 0, "vision ids (count %zu)", count);
  CHECK_ERROR(rk_vision_position_ids(grid, 1, 3, vpos, 16, &count), "spatial_merge_size = 3");
  const rk_positions axial = rk_positions_axial(vpos, 8, 2);
  CHECK(axial.axes == 2 && axial.count == 8, "axial view");
}

int main(void) {
  test_status_and_version();
  test_rotation();
  test_bad_input_changes_nothing();
  test_config();
  test_append();
  test_cos_sin_cache();
  test_attention();
  test_paged_cache();
  test_position_ids();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
