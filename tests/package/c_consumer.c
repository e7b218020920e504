/* An outside C program on the C API: find_package(ropekit COMPONENTS c) and ropekit::c alone. A preset's
 * spec (its only RoPE group), a rope, and one query rotated at position 0 (the identity) and at position 1 (a change).
 */
#include <math.h>
#include <ropekit/ropekit.h>
#include <stdio.h>

int main(void) {
  rk_model* model = NULL;
  rk_spec* spec = NULL;
  rk_rope* rope = NULL;
  if (rk_model_from_preset("llama-3.1-8b", &model) != RK_OK || rk_model_layer_spec(model, -1, &spec) != RK_OK ||
      rk_rope_create(spec, RK_ANGLES_ACCURATE, 0, &rope) != RK_OK) {
    fprintf(stderr, "%s\n", rk_last_error());
    return 1;
  }
  float q[128], q0[128];
  for (int i = 0; i < 128; ++i) q[i] = q0[i] = sinf(0.1f * (float)i);
  int64_t pos = 0;
  rk_rotate_args args = {0};
  args.q = rk_bshd(q, RK_F32, 1, 1, 1, 128);
  args.positions = rk_positions_i64(&pos, 1);
  int same = rk_rope_apply(rope, &args) == RK_OK;
  for (int i = 0; i < 128; ++i) same = same && q[i] == q0[i];
  pos = 1;
  const int applied = rk_rope_apply(rope, &args) == RK_OK;
  printf("ropekit::c %s: position 0 %s, position 1 q[0] %.6f -> %.6f\n", rk_version(), same ? "unchanged" : "CHANGED",
         (double)q0[0], (double)q[0]);
  const int moved = applied && q[0] != q0[0];
  rk_rope_destroy(rope);
  rk_spec_destroy(spec);
  rk_model_destroy(model);
  if (!same || !moved) return 1;
  printf("ok\n");
  return 0;
}
