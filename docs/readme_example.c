/* One decode step of a Mamba-2 layer on the CPU backend: two sequences whose
 * states live in slots 3 and 1 of a pool of 4 slots. */
#include <stdio.h>
#include <ssu.h>

enum { SLOTS = 4, BATCH = 2, H = 2, P = 4, N = 8, G = 1 };

static ssu_tensor_t dense(void* data, int ndim, const int64_t* shape) {
  ssu_tensor_t t = {data, SSU_DTYPE_F32, ndim, {0}, {0}};
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

static int check(ssu_status_t s, const char* what) {
  if (s != SSU_SUCCESS)
    fprintf(stderr, "%s: %s: %s\n", what, ssu_status_string(s), ssu_last_error_message());
  return s != SSU_SUCCESS;
}

int main(void) {
  static float state[SLOTS][H][P][N], x[BATCH][H][P], z[BATCH][H][P], out[BATCH][H][P];
  static float B[BATCH][G][N], C[BATCH][G][N], dt[BATCH][H];
  float A[H] = {-1.0f, -4.0f}, D[H] = {1.0f, 1.0f}, dt_bias[H] = {-3.0f, -3.0f};
  int32_t slot[BATCH] = {3, 1};
  for (int i = 0; i < SLOTS * H * P * N; ++i) (&state[0][0][0][0])[i] = 0.01f * (i % 7);
  for (int i = 0; i < BATCH * H * P; ++i) {
    (&x[0][0][0])[i] = 0.5f;
    (&z[0][0][0])[i] = 1.0f;
  }
  for (int i = 0; i < BATCH * G * N; ++i) (&B[0][0][0])[i] = (&C[0][0][0])[i] = 0.25f;
  for (int i = 0; i < BATCH * H; ++i) (&dt[0][0])[i] = 0.1f;

  ssu_context_options_t copt = SSU_CONTEXT_OPTIONS_INIT;
  copt.backend = SSU_BACKEND_CPU;
  ssu_context_t ctx = NULL;
  if (check(ssu_context_create(&copt, &ctx), "ssu_context_create")) return 1;

  const int64_t pool_shape[] = {SLOTS, H, P, N}, x_shape[] = {BATCH, H, P},
                bc_shape[] = {BATCH, G, N}, dt_shape[] = {BATCH, H}, h_shape[] = {H},
                b_shape[] = {BATCH};
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  pool.state = dense(state, 4, pool_shape);

  ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;
  args.flags = SSU_UPDATE_DT_SOFTPLUS;
  args.pool = &pool;
  args.x = dense(x, 3, x_shape);
  args.z = dense(z, 3, x_shape);
  args.out = dense(out, 3, x_shape);
  args.B = dense(B, 3, bc_shape);
  args.C = dense(C, 3, bc_shape);
  args.dt = dense(dt, 2, dt_shape);
  args.A = dense(A, 1, h_shape);
  args.D = dense(D, 1, h_shape);
  args.dt_bias = dense(dt_bias, 1, h_shape);
  args.src_index = dense(slot, 1, b_shape);
  args.src_index.dtype = SSU_DTYPE_I32;

  /* A plan fixes everything but pointers, strides, batch and pool size; make
   * it once per layer and execute it every step. */
  ssu_plan_t plan = NULL;
  int failed = check(ssu_plan_create_update(ctx, &args, NULL, &plan), "ssu_plan_create_update") ||
               check(ssu_plan_execute_update(plan, &args, NULL), "ssu_plan_execute_update");
  if (!failed)
    printf("out[0][0][0] = %f, state[3][0][0][0] = %f\n", out[0][0][0], state[3][0][0][0]);
  ssu_plan_destroy(plan);
  ssu_context_destroy(ctx);
  return failed;
}
