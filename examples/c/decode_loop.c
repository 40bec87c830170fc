/*
 * decode_loop.c -- a serving-style decode loop over a libssu state pool.
 *
 * Requests join and leave BATCH batch entries over STEPS steps; each request
 * owns a pool slot while it runs, and idle entries are padding (slot -1).
 * Inputs come from splitmix64, so the C, C++, Rust and Python versions of
 * this program (examples/README.md) feed the library bit-identical data and
 * print the same FNV-1a checksum of the final pool.
 *
 *   cc decode_loop.c $(pkg-config --cflags --libs ssu) -o decode_loop
 *   ./decode_loop [steps]              SSU_BACKEND=cuda ./decode_loop
 *
 * With SSU_BACKEND=cuda the buffers live in device memory, allocated through
 * the CUDA driver API opened with dlopen (no CUDA headers or link needed).
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ssu.h>

enum { SLOTS = 16, BATCH = 8, H = 8, P = 64, N = 16, G = 1, MAX_LEN = 24 };
#define SEED 0x5EEDull
#define SLOT_ELEMS ((size_t)H * P * N)

/* ---- deterministic inputs ---------------------------------------------- */

static uint64_t rng_state = SEED;

static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A value in [-1, 1) on a 2^-23 grid: exact in float and double. */
static double sym(void) { return (double)(next_u64() >> 40) / 8388608.0 - 1.0; }

static void fill(float* v, size_t n, double scale) {
  for (size_t i = 0; i < n; ++i) v[i] = (float)(sym() * scale);
}

static uint64_t fnv1a64(const void* data, size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* ---- memory: host, or CUDA device memory through the driver API --------- */

static struct {
  int on;
  int (*MemAlloc)(uint64_t*, size_t);
  int (*MemcpyHtoD)(uint64_t, const void*, size_t);
  int (*MemcpyDtoH)(void*, uint64_t, size_t);
  int (*MemFree)(uint64_t);
  int (*CtxSynchronize)(void);
} cu;

static void die(const char* what) {
  fprintf(stderr, "decode_loop: %s\n", what);
  exit(1);
}

static void cuda_init(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) die("SSU_BACKEND=cuda but libcuda.so.1 cannot be loaded");
  int (*Init)(unsigned) = NULL;
  int (*DeviceGet)(int*, int) = NULL;
  int (*Retain)(void**, int) = NULL;
  int (*SetCurrent)(void*) = NULL;
  /* POSIX's way to store a dlsym result in a function pointer. */
#define LOAD(fp, name) (*(void**)&(fp) = dlsym(lib, name))
  LOAD(Init, "cuInit");
  LOAD(DeviceGet, "cuDeviceGet");
  LOAD(Retain, "cuDevicePrimaryCtxRetain");
  LOAD(SetCurrent, "cuCtxSetCurrent");
  LOAD(cu.MemAlloc, "cuMemAlloc_v2");
  LOAD(cu.MemcpyHtoD, "cuMemcpyHtoD_v2");
  LOAD(cu.MemcpyDtoH, "cuMemcpyDtoH_v2");
  LOAD(cu.MemFree, "cuMemFree_v2");
  LOAD(cu.CtxSynchronize, "cuCtxSynchronize");
#undef LOAD
  if (!Init || !DeviceGet || !Retain || !SetCurrent || !cu.MemAlloc || !cu.MemcpyHtoD ||
      !cu.MemcpyDtoH || !cu.MemFree || !cu.CtxSynchronize)
    die("libcuda.so.1 lacks a driver API entry point");
  int dev = 0;
  void* ctx = NULL;
  /* The primary context: the same one libssu retains. */
  if (Init(0) || DeviceGet(&dev, 0) || Retain(&ctx, dev) || SetCurrent(ctx))
    die("cannot make CUDA device 0's primary context current");
  cu.on = 1;
}

/* A buffer with a host copy and, on CUDA, a device copy. */
typedef struct {
  void* host;
  uint64_t dev;
  size_t bytes;
} buffer;

static buffer buffer_new(size_t bytes) {
  buffer b = {calloc(1, bytes), 0, bytes};
  if (!b.host) die("out of memory");
  if (cu.on && (cu.MemAlloc(&b.dev, bytes) || cu.MemcpyHtoD(b.dev, b.host, bytes)))
    die("cuMemAlloc / cuMemcpyHtoD failed");
  return b;
}
static void* data(const buffer* b) { return cu.on ? (void*)(uintptr_t)b->dev : b->host; }
static void upload(const buffer* b, size_t offset, size_t bytes) {
  if (cu.on && cu.MemcpyHtoD(b->dev + offset, (const char*)b->host + offset, bytes))
    die("cuMemcpyHtoD failed");
}
static void download(buffer* b) {
  if (cu.on && cu.MemcpyDtoH(b->host, b->dev, b->bytes)) die("cuMemcpyDtoH failed");
}
static void buffer_free(buffer* b) {
  if (cu.on) cu.MemFree(b->dev);
  free(b->host);
}

/* ---- libssu ------------------------------------------------------------- */

static ssu_tensor_t dense(const buffer* b, ssu_dtype_t dtype, int ndim, const int64_t* shape) {
  ssu_tensor_t t;
  memset(&t, 0, sizeof t);
  t.data = data(b);
  t.dtype = dtype;
  t.ndim = ndim;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

static void check(ssu_status_t s, const char* what) {
  if (s != SSU_SUCCESS) {
    fprintf(stderr, "decode_loop: %s: %s: %s\n", what, ssu_status_string(s),
            ssu_last_error_message());
    exit(1);
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 200;
  const char* backend_env = getenv("SSU_BACKEND");
  int use_cuda = backend_env && strcmp(backend_env, "cuda") == 0;
  if (backend_env && !use_cuda && strcmp(backend_env, "cpu") != 0)
    die("SSU_BACKEND must be cpu or cuda");
  if (use_cuda) cuda_init();

  buffer pool = buffer_new(sizeof(float) * SLOTS * SLOT_ELEMS);
  buffer x = buffer_new(sizeof(float) * BATCH * H * P), z = buffer_new(x.bytes),
         out = buffer_new(x.bytes);
  buffer dt = buffer_new(sizeof(float) * BATCH * H);
  buffer B = buffer_new(sizeof(float) * BATCH * G * N), C = buffer_new(B.bytes);
  buffer A = buffer_new(sizeof(float) * H), D = buffer_new(A.bytes), dt_bias = buffer_new(A.bytes);
  buffer slot_index = buffer_new(sizeof(int32_t) * BATCH);

  /* Layer parameters: A in [-2, -1), dt_bias in [-4, -3), D in [-1, 1). */
  float* a = (float*)A.host;
  float* bias = (float*)dt_bias.host;
  for (int h = 0; h < H; ++h) a[h] = (float)(-1.0 - (sym() + 1.0) * 0.5);
  for (int h = 0; h < H; ++h) bias[h] = (float)(-4.0 + (sym() + 1.0) * 0.5);
  fill((float*)D.host, H, 1.0);
  upload(&A, 0, A.bytes);
  upload(&D, 0, D.bytes);
  upload(&dt_bias, 0, dt_bias.bytes);

  ssu_context_options_t copt = SSU_CONTEXT_OPTIONS_INIT;
  copt.backend = use_cuda ? SSU_BACKEND_CUDA : SSU_BACKEND_CPU;
  ssu_context_t ctx = NULL;
  check(ssu_context_create(&copt, &ctx), "ssu_context_create");

  const int64_t pool_shape[] = {SLOTS, H, P, N}, x_shape[] = {BATCH, H, P},
                bc_shape[] = {BATCH, G, N}, dt_shape[] = {BATCH, H}, h_shape[] = {H},
                b_shape[] = {BATCH};
  ssu_state_pool_t state_pool = SSU_STATE_POOL_INIT;
  state_pool.state = dense(&pool, SSU_DTYPE_F32, 4, pool_shape);
  ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;
  args.flags = SSU_UPDATE_DT_SOFTPLUS;
  args.pool = &state_pool;
  args.x = dense(&x, SSU_DTYPE_F32, 3, x_shape);
  args.z = dense(&z, SSU_DTYPE_F32, 3, x_shape);
  args.out = dense(&out, SSU_DTYPE_F32, 3, x_shape);
  args.B = dense(&B, SSU_DTYPE_F32, 3, bc_shape);
  args.C = dense(&C, SSU_DTYPE_F32, 3, bc_shape);
  args.dt = dense(&dt, SSU_DTYPE_F32, 2, dt_shape);
  args.A = dense(&A, SSU_DTYPE_F32, 1, h_shape);
  args.D = dense(&D, SSU_DTYPE_F32, 1, h_shape);
  args.dt_bias = dense(&dt_bias, SSU_DTYPE_F32, 1, h_shape);
  args.src_index = dense(&slot_index, SSU_DTYPE_I32, 1, b_shape);

  ssu_plan_t plan = NULL;
  check(ssu_plan_create_update(ctx, &args, NULL, &plan), "ssu_plan_create_update");

  int active[BATCH] = {0}, slot_of[BATCH] = {0}, remaining[BATCH] = {0}, used[SLOTS] = {0};
  int32_t* slots = (int32_t*)slot_index.host;
  long tokens = 0;
  double busy = 0.0;
  for (int step = 0; step < steps; ++step) {
    for (int e = 0; e < BATCH; ++e) /* finished requests leave */
      if (active[e] && remaining[e] == 0) {
        used[slot_of[e]] = 0;
        active[e] = 0;
      }
    for (int e = 0; e < BATCH; ++e) { /* new requests join idle entries */
      if (active[e] || next_u64() % 4 == 0) continue;
      int s = 0;
      while (used[s]) ++s; /* SLOTS > BATCH: a free slot exists */
      used[s] = 1;
      slot_of[e] = s;
      remaining[e] = 1 + (int)(next_u64() % MAX_LEN);
      active[e] = 1;
      float* st = (float*)pool.host + (size_t)s * SLOT_ELEMS; /* the prefill's state */
      fill(st, SLOT_ELEMS, 0.5);
      upload(&pool, sizeof(float) * s * SLOT_ELEMS, sizeof(float) * SLOT_ELEMS);
    }
    for (int e = 0; e < BATCH; ++e) slots[e] = active[e] ? slot_of[e] : -1;
    fill((float*)x.host, BATCH * H * P, 1.0);
    fill((float*)dt.host, BATCH * H, 0.5);
    fill((float*)B.host, BATCH * G * N, 1.0);
    fill((float*)C.host, BATCH * G * N, 1.0);
    fill((float*)z.host, BATCH * H * P, 1.0);
    upload(&slot_index, 0, slot_index.bytes);
    upload(&x, 0, x.bytes);
    upload(&dt, 0, dt.bytes);
    upload(&B, 0, B.bytes);
    upload(&C, 0, C.bytes);
    upload(&z, 0, z.bytes);

    double t0 = now();
    check(ssu_plan_execute_update(plan, &args, NULL), "ssu_plan_execute_update");
    if (cu.on && cu.CtxSynchronize()) die("cuCtxSynchronize failed");
    busy += now() - t0;

    for (int e = 0; e < BATCH; ++e)
      if (active[e]) {
        --remaining[e];
        ++tokens;
      }
  }
  download(&pool);

  printf("ssu decode example (C): backend %s [%s], %d steps, %ld tokens\n",
         use_cuda ? "cuda" : "cpu", ssu_context_device_name(ctx), steps, tokens);
  printf("throughput: %.0f tokens/s (%.2f us/step)\n", busy > 0 ? tokens / busy : 0.0,
         steps ? 1e6 * busy / steps : 0.0);
  printf("state checksum: 0x%016" PRIx64 "\n", fnv1a64(pool.host, pool.bytes));

  ssu_plan_destroy(plan);
  ssu_context_destroy(ctx);
  buffer* all[] = {&pool, &x, &z, &out, &dt, &B, &C, &A, &D, &dt_bias, &slot_index};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) buffer_free(all[i]);
  return 0;
}
