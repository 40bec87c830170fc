// Times the warp-per-head replay kernel's flush and append launches alone, from
// the library's own kernel source (bf16 inputs, H=128 P=64 N=128 G=8, L=16,
// T tokens (env TOK, default 1), slots rotated over 4 sets so the pool is past
// L2). Not part of the build:
//
//   K=kernels; { echo '#include <cstring>'; head -781 $K/ssu_update.cu;
//     sed -n 32,42p $K/ssu_pipelined.cu; sed -n 232,270p $K/ssu_pipelined.cu; echo '}';
//     sed -n '1,/^#define SSU_REPLAY_KERNEL(/p' $K/ssu_replay.cu | head -n -1;
//     cat THIS_FILE; } > fl.cu
//   nvcc -std=c++17 -O3 -fmad=false -I $K -gencode arch=compute_90a,code=sm_90a fl.cu -o fl
//
// (the line numbers pick ssu_update.cu's helpers and ssu_pipelined.cu's
// prefetch helper at commit time). Each launch follows a reset of the
// counters; "flush": every slot has 16 committed entries, "append": slot s
// has s % (17 - T). Prints flush / append us per launch with the block's f32
// region off (fold_f32=0) and on, twice.
#include <cstdio>
#include <vector>
#include <cstring>
#include <cstdlib>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)
extern "C" __global__ void __launch_bounds__(SSU_CUDA_REPLAY_THREADS, kReplayWarpMinBlocks<float>) kf(const ssu_cuda_replay_launch L) { replay_warp_body<float, bf16>(L); }
extern "C" __global__ void __launch_bounds__(SSU_CUDA_REPLAY_THREADS, kReplayWarpMinBlocks<bf16>) kb(const ssu_cuda_replay_launch L) { replay_warp_body<bf16, bf16>(L); }
static int a16(int x) { return (x + 15) / 16 * 16; }
template <typename ST> void run(int Bt, const char* name, void (*kern)(const ssu_cuda_replay_launch)) {
  const int H = 128, P = 64, N = 128, G = 8, Lr = 16, ROT = 4, S = Bt * ROT, T = getenv("TOK") ? atoi(getenv("TOK")) : 1, E = Lr + T, ib = 2;
  auto dm = [](size_t n) { void* p; CK(cudaMalloc(&p, n)); CK(cudaMemset(p, 0, n)); return p; };
  auto fill_bf16 = [&](size_t n) { std::vector<unsigned short> h(n); for (size_t i = 0; i < n; ++i) h[i] = 0x3c00 + (i * 37 % 255); void* p = dm(n * 2); CK(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice)); return p; };
  auto fill_f32 = [&](size_t n, float base) { std::vector<float> h(n); for (size_t i = 0; i < n; ++i) h[i] = base + 0.001f * (i % 97); void* p = dm(n * 4); CK(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice)); return p; };
  const size_t st_el = (size_t)S * H * P * N;
  void* state = dm(st_el * sizeof(ST)); CK(cudaMemset(state, 0x3c, st_el * sizeof(ST)));
  void* x = fill_bf16((size_t)Bt * T * H * P); void* z = fill_bf16((size_t)Bt * T * H * P);
  void* B = fill_bf16((size_t)Bt * T * G * N); void* C = fill_bf16((size_t)Bt * T * G * N);
  void* out = dm((size_t)Bt * T * H * P * 2);
  void* dt = fill_f32((size_t)Bt * T * H, -1.f); void* A = fill_f32(H, -0.5f); void* D = fill_f32(H, 1.f); void* bias = fill_f32(H, 0.1f);
  void* rx = fill_bf16((size_t)S * Lr * H * P); void* rB = fill_bf16((size_t)S * Lr * G * N); void* rdt = fill_f32((size_t)S * Lr * H, 0.2f);
  int* cm = (int*)dm(S * 4); int* pd = (int*)dm(S * 4); int* cmF = (int*)dm(S * 4); int* cmA = (int*)dm(S * 4);
  std::vector<int> hc(S);
  for (int i = 0; i < S; ++i) hc[i] = Lr; CK(cudaMemcpy(cmF, hc.data(), S * 4, cudaMemcpyHostToDevice));
  for (int i = 0; i < S; ++i) hc[i] = i % (Lr - T + 1); CK(cudaMemcpy(cmA, hc.data(), S * 4, cudaMemcpyHostToDevice));
  std::vector<int> hi(S); for (int i = 0; i < S; ++i) hi[i] = (i * 7919) % S;
  int* idx = (int*)dm(S * 4); CK(cudaMemcpy(idx, hi.data(), S * 4, cudaMemcpyHostToDevice));
  unsigned* err = (unsigned*)dm(4);
  ssu_cuda_replay_launch L; memset(&L, 0, sizeof L);
  ssu_update_params& p = L.p.u;
  p.batch = Bt; p.ntokens = T; p.total_tokens = (int64_t)Bt * T; p.nheads = H; p.dim = P; p.dstate = N; p.ngroups = G; p.heads_per_group = H / G; p.nslots = S; p.pad_slot_id = -1; 
  p.features = SSU_F_DT_SOFTPLUS | SSU_F_HAS_D | SSU_F_HAS_DT_BIAS | SSU_F_HAS_Z | SSU_F_HAS_SRC;
  p.state_dtype = sizeof(ST) == 4 ? 1 : 3; p.input_dtype = 3; p.dt_dtype = p.A_dtype = p.D_dtype = p.dt_bias_dtype = 1; p.index_dtype = 5;
  p.state = state; p.state_stride_slot = (int64_t)H * P * N;
  p.x = x; p.x_stride_b = H * P * T; p.x_stride_t = H * P; p.x_stride_h = P;
  p.dt = dt; p.dt_stride_b = H * T; p.dt_stride_t = H; p.dt_stride_h = 1;
  p.B = B; p.B_stride_b = G * N * T; p.B_stride_t = G * N; p.B_stride_g = N;
  p.C = C; p.C_stride_b = G * N * T; p.C_stride_t = G * N; p.C_stride_g = N;
  p.z = z; p.z_stride_b = H * P * T; p.z_stride_t = H * P; p.z_stride_h = P;
  p.out = out; p.out_stride_b = H * P * T; p.out_stride_t = H * P; p.out_stride_h = P;
  p.A = A; p.A_stride_h = 1; p.D = D; p.D_stride_h = 1; p.dt_bias = bias; p.dt_bias_stride_h = 1;
  p.src_stride_b = 1; p.error_word = err;
  ssu_replay_params& r = L.p;
  r.ring_len = Lr; r.ring_x = rx; r.ring_x_stride_s = (int64_t)Lr * H * P; r.ring_x_stride_l = H * P; r.ring_x_stride_h = P;
  r.ring_B = rB; r.ring_B_stride_s = Lr * G * N; r.ring_B_stride_l = G * N; r.ring_B_stride_g = N;
  r.ring_dt = (float*)rdt; r.ring_dt_stride_s = Lr * H; r.ring_dt_stride_l = H; r.ring_dt_stride_h = 1;
  r.committed = cm; r.committed_stride = 1; r.pending = pd; r.pending_stride = 1;
  int o = 0; auto put = [&](int bytes) { int at = o; o = a16(o + bytes); return at; };
  L.off_tile = put(0); L.off_Br = put(0); L.off_Bt = put(T * N * ib); L.off_C = put(T * N * ib);
  L.off_xr = put(Lr * P * ib); L.off_xt = put(T * P * ib); L.off_z = put(T * P * ib);
  L.off_delta = put(E * 4); L.off_dA = put(E * 4); L.off_dtt = put(T * 4); L.off_D = put(P * 4);
  L.off_y = put(T * P * 4); L.off_coef = put((T * E + T) * 4); L.off_scale = put(0);
  L.warp_slice = a16(o); L.lanes_per_row = 8; L.prefetch_steps = getenv("PF") ? atoi(getenv("PF")) : 6; L.early_entries = 1;
  L.group_share = 1; int need = L.warp_slice * 4;
  L.off_group_B = need; need = a16(need + Lr * N * ib); L.off_group_dot = need; need = a16(need + T * E * 4);
  const int off_bf = need; const int need_bf = a16(need + (Lr + 2 * T) * (N + N / 8) * 4);
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, need_bf));
  const int blocks = Bt * H / 4;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto timeit = [&](int* c0, bool with_kernel, int smem) {
    for (int it = 0; it < 43; ++it) {
      if (it == 3) cudaEventRecord(e0);
      CK(cudaMemcpyAsync(cm, c0, S * 4, cudaMemcpyDeviceToDevice)); CK(cudaMemsetAsync(pd, 0, S * 4));
      if (with_kernel) { p.src_index = idx + (it % ROT) * Bt; kern<<<blocks, 128, smem>>>(L); }
    }
    cudaEventRecord(e1); CK(cudaEventSynchronize(e1)); CK(cudaGetLastError());
    float ms; cudaEventElapsedTime(&ms, e0, e1); return ms * 1000.f / 40;
  };
  for (int rep = 0; rep < 2; ++rep) for (int v = 0; v < 2; ++v) {

#ifndef NO_BF
    L.off_group_Bf = v ? off_bf : 0;
#endif
    const int smem = v ? need_bf : need;
    timeit(cmF, true, smem);
    const float tr = timeit(cmF, false, smem), tf = timeit(cmF, true, smem), ta = timeit(cmA, true, smem);
    printf("%s T%d b%d fold_f32=%d: flush %.1f us, append %.1f us (reset %.1f)\n", name, T, Bt, v, tf - tr, ta - tr, tr);
  }
}
int main() { run<float>(64, "f32", kf); run<bf16>(64, "bf16", kb); run<float>(512, "f32", kf); run<bf16>(512, "bf16", kb); }
