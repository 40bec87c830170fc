// Exploration benchmark behind cuda-h100-replay-0.7-2026-11-27-anatomy.md (not part of the
// build; uses the CUDA runtime): the bare shapes of a replay append step on the default
// Mamba-2 shape (H=128 P=64 N=128 G=8), an f32 or bf16 checkpoint read once per head with
// its dots against bf16 C, with and without a dependent chain (slot -> counters -> ring
// entries), beside a read-only stream and a copy kernel over the same bytes.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a ...-micro.cu -o mb && ./mb
#include <cstdio>
#include <cstdint>
#include <cuda_bf16.h>
#include <vector>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)
constexpr int H = 128, P = 64, N = 128, G = 8, L = 16;
typedef __nv_bfloat16 bf16;
struct Args {
  const void* state; const int* idx; const int* cnt; const bf16* C; const bf16* ringB; const bf16* ringx;
  bf16* y; int batch; int chain; int* pending;
};
template <typename ST> __device__ __forceinline__ void acc(const uint4& u, const float* c, float& d) {
  if constexpr (sizeof(ST) == 4) { const float* f = (const float*)&u; for (int i = 0; i < 4; ++i) d = fmaf(f[i], c[i], d); }
  else { const bf16* f = (const bf16*)&u; for (int i = 0; i < 8; ++i) d = fmaf(__bfloat162float(f[i]), c[i], d); }
}
// Chain: counters -> ring B (c x N) and ring x (c x rows) -> a coefficient per entry; returns sum_j coef_j x_j[r] for the lane's row.
__device__ __forceinline__ float chain_term(const Args& a, int s, int h, int r, int lane) {
  const int c = a.cnt[s];
  const int g = h / (H / G);
  // B_j . C over 32 lanes: lane covers 4 elements of each entry
  float coef = 0.f;
  float cv[4];
  for (int i = 0; i < 4; ++i) cv[i] = __bfloat162float(a.C[h / (H/G) * N + lane * 4 + i]);
  float myc = 0.f;
  for (int j = 0; j < c; ++j) {
    const bf16* Bj = a.ringB + ((int64_t)(s * L + j) * G + g) * N + lane * 4;
    float d = 0.f;
    for (int i = 0; i < 4; ++i) d = fmaf(__bfloat162float(Bj[i]), cv[i], d);
    for (int o = 16; o; o >>= 1) d += __shfl_xor_sync(~0u, d, o);
    myc += d * __bfloat162float(a.ringx[((int64_t)(s * L + j) * H + h) * P + r]);
  }
  return myc;
}
// K1: warp per head, steps of 4 rows, DEPTH steps in flight (register stream).
template <typename ST, int DEPTH>
__global__ void __launch_bounds__(128) k_warp(Args a) {
  constexpr int VEC = 16 / sizeof(ST), CPR = N / VEC, KC = CPR / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int item = blockIdx.x * 4 + warp;
  if (item >= a.batch * H) return;
  const int b = item / H, h = item % H;
  const int s = a.idx[b];
  const uint4* src = (const uint4*)((const ST*)a.state + ((int64_t)s * H + h) * P * N) + (lane >> 3) * CPR + (lane & 7);
  float c[KC * VEC];
  for (int k = 0; k < KC; ++k) for (int i = 0; i < VEC; ++i) c[k * VEC + i] = __bfloat162float(a.C[b * G * N + (h / 16) * N + ((lane & 7) + 8 * k) * VEC + i]);
  uint4 raw[DEPTH][KC];
  for (int d = 0; d < DEPTH; ++d) for (int k = 0; k < KC; ++k) raw[d][k] = __ldcs(src + d * 4 * CPR + 8 * k);
  float ct = a.chain ? chain_term(a, s, h, lane, lane) : 0.f;
  for (int rs = 0; rs < P / 4; rs += DEPTH) {
    for (int d = 0; d < DEPTH; ++d) {
      float dot = 0.f;
      for (int k = 0; k < KC; ++k) acc<ST>(raw[d][k], c + k * VEC, dot);
      if (rs + d + DEPTH < P / 4) for (int k = 0; k < KC; ++k) raw[d][k] = __ldcs(src + (rs + d + DEPTH) * 4 * CPR + 8 * k);
      dot += __shfl_xor_sync(~0u, dot, 4); dot += __shfl_xor_sync(~0u, dot, 2); dot += __shfl_xor_sync(~0u, dot, 1);
      const int row = (rs + d) * 4 + (lane >> 3);
      if ((lane & 7) == 0) a.y[((int64_t)b * H + h) * P + row] = __float2bfloat16(dot + ct);
    }
  }
}
// K2: k_warp plus the real kernel's extras, by bits: 1 count-in atomic + volatile pending read, 2 smem y + syncthreads x2, 4 last-warp style tail.
template <typename ST, int DEPTH, int BITS>
__global__ void __launch_bounds__(128, 4) k_warpx(Args a) {
  constexpr int VEC = 16 / sizeof(ST), CPR = N / VEC, KC = CPR / 8;
  extern __shared__ float sm[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int item = blockIdx.x * 4 + warp;
  const int b = item / H, h = item % H;
  const int s = a.idx[b];
  const uint4* src = (const uint4*)((const ST*)a.state + ((int64_t)s * H + h) * P * N) + (lane >> 3) * CPR + (lane & 7);
  uint4 raw[DEPTH][KC];
  for (int d = 0; d < DEPTH; ++d) for (int k = 0; k < KC; ++k) raw[d][k] = __ldcs(src + d * 4 * CPR + 8 * k);
  float c[KC * VEC];
  for (int k = 0; k < KC; ++k) for (int i = 0; i < VEC; ++i) c[k * VEC + i] = __bfloat162float(a.C[b * G * N + (h / 16) * N + ((lane & 7) + 8 * k) * VEC + i]);
  int pend = 0;
  if (BITS & 1) pend = *(volatile int*)(a.pending + s) & 0xffff;
  float ct = chain_term(a, s, h, lane, lane) + pend;
  if (BITS & 2) __syncthreads();
  int arrived = 0;
  if ((BITS & 1) && lane == 0) arrived = atomicAdd(a.pending + s, 0x10000) >> 16;
  if (BITS & 2) __syncthreads();
  float* sy = sm + warp * 1024;
  for (int rs = 0; rs < P / 4; rs += DEPTH) {
    for (int d = 0; d < DEPTH; ++d) {
      float dot = 0.f;
      for (int k = 0; k < KC; ++k) acc<ST>(raw[d][k], c + k * VEC, dot);
      if (rs + d + DEPTH < P / 4) for (int k = 0; k < KC; ++k) raw[d][k] = __ldcs(src + (rs + d + DEPTH) * 4 * CPR + 8 * k);
      dot += __shfl_xor_sync(~0u, dot, 4); dot += __shfl_xor_sync(~0u, dot, 2); dot += __shfl_xor_sync(~0u, dot, 1);
      const int row = (rs + d) * 4 + (lane >> 3);
      if (BITS & 2) { if ((lane & 7) == 0) sy[row] = dot + ct; }
      else if ((lane & 7) == 0) a.y[((int64_t)b * H + h) * P + row] = __float2bfloat16(dot + ct);
    }
  }
  if (BITS & 2) { __syncwarp(); for (int r = lane; r < P; r += 32) a.y[((int64_t)b * H + h) * P + r] = __float2bfloat16(sy[r]); }
  if (BITS & 1) {
    const bool last = __shfl_sync(~0u, (arrived & 0x7fff) == H - 1, 0);
    if (last) { __threadfence(); if (lane == 0) a.pending[s] = 1; }
  }
}
// K3: a warp owns RPW rows of a head (all its loads issued at once); 4 warps per block, blocks cover heads in order.
template <typename ST, int RPW>
__global__ void __launch_bounds__(128) k_tile(Args a) {
  constexpr int VEC = 16 / sizeof(ST), CPR = N / VEC, KC = CPR / 8, S = RPW / 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t item = (int64_t)blockIdx.x * 4 + warp;  // (b, h, tile)
  constexpr int TPH = P / RPW;
  if (item >= (int64_t)a.batch * H * TPH) return;
  const int bh = item / TPH, tile = item % TPH, b = bh / H, h = bh % H;
  const int s = a.idx[b];
  const uint4* src = (const uint4*)((const ST*)a.state + (((int64_t)s * H + h) * P + tile * RPW) * N) + (lane >> 3) * CPR + (lane & 7);
  uint4 raw[S][KC];
  for (int d = 0; d < S; ++d) for (int k = 0; k < KC; ++k) raw[d][k] = __ldcs(src + d * 4 * CPR + 8 * k);
  float c[KC * VEC];
  for (int k = 0; k < KC; ++k) for (int i = 0; i < VEC; ++i) c[k * VEC + i] = __bfloat162float(a.C[b * G * N + (h / 16) * N + ((lane & 7) + 8 * k) * VEC + i]);
  float ct = a.chain ? chain_term(a, s, h, tile * RPW + (lane % RPW), lane) : 0.f;
  for (int d = 0; d < S; ++d) {
    float dot = 0.f;
    for (int k = 0; k < KC; ++k) acc<ST>(raw[d][k], c + k * VEC, dot);
    dot += __shfl_xor_sync(~0u, dot, 4); dot += __shfl_xor_sync(~0u, dot, 2); dot += __shfl_xor_sync(~0u, dot, 1);
    const int row = tile * RPW + d * 4 + (lane >> 3);
    if ((lane & 7) == 0) a.y[((int64_t)b * H + h) * P + row] = __float2bfloat16(dot + ct);
  }
}
// Read-only stream and copy references over the same bytes.
__global__ void k_read(const uint4* p, int64_t n, float* sink) {
  float acc = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) { uint4 v = __ldcs(p + i); acc += __uint_as_float(v.x ^ v.y ^ v.z ^ v.w); }
  if (acc == 12345.f) *sink = acc;
}
__global__ void k_copy(const uint4* p, uint4* q, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) q[i] = __ldcs(p + i);
}
template <typename F> float timeit(F f, int reps = 20) {
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) f(i);
  CK(cudaDeviceSynchronize());
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) f(i);
  cudaEventRecord(e1); CK(cudaEventSynchronize(e1));
  float ms; cudaEventElapsedTime(&ms, e0, e1); CK(cudaGetLastError());
  return ms * 1000.f / reps;
}
template <typename ST> void run(int batch, const char* name) {
  const int ROT = 4, S = batch * ROT;
  const size_t sbytes = (size_t)S * H * P * N * sizeof(ST);
  void* state; CK(cudaMalloc(&state, sbytes)); CK(cudaMemset(state, 0x3c, sbytes));
  std::vector<int> hidx(S); for (int i = 0; i < S; ++i) hidx[i] = (i * 7919) % S;
  int* idx; CK(cudaMalloc(&idx, S * 4)); CK(cudaMemcpy(idx, hidx.data(), S * 4, cudaMemcpyHostToDevice));
  std::vector<int> hc(S); for (int i = 0; i < S; ++i) hc[i] = i % 16;
  int* cnt; CK(cudaMalloc(&cnt, S * 4)); CK(cudaMemcpy(cnt, hc.data(), S * 4, cudaMemcpyHostToDevice));
  bf16 *C, *rB, *rx, *y;
  CK(cudaMalloc(&C, batch * G * N * 2)); CK(cudaMemset(C, 0x3c, batch * G * N * 2));
  CK(cudaMalloc(&rB, (size_t)S * L * G * N * 2)); CK(cudaMemset(rB, 0x3c, (size_t)S * L * G * N * 2));
  CK(cudaMalloc(&rx, (size_t)S * L * H * P * 2)); CK(cudaMemset(rx, 0x3c, (size_t)S * L * H * P * 2));
  CK(cudaMalloc(&y, (size_t)batch * H * P * 2));
  float* sink; CK(cudaMalloc(&sink, 4));
  int* pending; CK(cudaMalloc(&pending, S * 4)); CK(cudaMemset(pending, 0, S * 4));
  const size_t call = (size_t)batch * H * P * N * sizeof(ST);
  auto A = [&](int i, int chain) { Args a{state, idx + (i % ROT) * batch, cnt, C, rB, rx, y, batch, chain, pending}; return a; };
  const float tr = timeit([&](int i) { k_read<<<132 * 16, 256>>>((const uint4*)((char*)state + (i % ROT) * call), call / 16, sink); });
  uint4* dst; CK(cudaMalloc(&dst, call * 2));
  const float tc = timeit([&](int i) { k_copy<<<132 * 16, 256>>>((const uint4*)((char*)state + (i % ROT) * call), dst + (i % 2) * call / 16, call / 16); });
  printf("%s b%d: bytes %.1f MB  read-only %.1f us (%.2f TB/s)  copy(read+write) %.1f us\n", name, batch, call / 1e6, tr, call / tr / 1e6, tc);
  for (int chain = 0; chain < 2; ++chain) {
    const int items = batch * H;
    float t1 = timeit([&](int i) { k_warp<ST, 4><<<(items + 3) / 4, 128>>>(A(i, chain)); });
    float t2 = timeit([&](int i) { k_warp<ST, 2><<<(items + 3) / 4, 128>>>(A(i, chain)); });
    float t3 = timeit([&](int i) { k_tile<ST, 16><<<(items * 4 + 3) / 4, 128>>>(A(i, chain)); });
    float t4 = timeit([&](int i) { k_tile<ST, 8><<<(items * 8 + 3) / 4, 128>>>(A(i, chain)); });
    float t5 = timeit([&](int i) { k_tile<ST, 32><<<(items * 2 + 3) / 4, 128>>>(A(i, chain)); });
    printf("  chain=%d  warp/head d4 %.1f  d2 %.1f | warp/16 rows %.1f  /8 rows %.1f  /32 rows %.1f   (TB/s best %.2f)\n", chain, t1, t2, t3, t4, t5,
           call / std::min(std::min(t1, t2), std::min(std::min(t3, t4), t5)) / 1e6);
  }
  {
    const int items = batch * H;
    auto X = [&](auto kern, int smem) { CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 40000));
      return timeit([&](int i) { cudaMemsetAsync(pending, 0, S * 4); kern<<<(items + 3) / 4, 128, smem>>>(A(i, 1)); }); };
    const float m = timeit([&](int i) { cudaMemsetAsync(pending, 0, S * 4); });
    printf("  memset %.1f | x0 d4 %.1f d2 %.1f | atomic d4 %.1f d2 %.1f | smem20K d4 %.1f d2 %.1f | both d2 %.1f\n", m,
      X(k_warpx<ST, 4, 0>, 0), X(k_warpx<ST, 2, 0>, 0), X(k_warpx<ST, 4, 1>, 0), X(k_warpx<ST, 2, 1>, 0),
      X(k_warpx<ST, 4, 2>, 20480), X(k_warpx<ST, 2, 2>, 20480), X(k_warpx<ST, 2, 3>, 20480));
  }
  cudaFree(state); cudaFree(idx); cudaFree(cnt); cudaFree(C); cudaFree(rB); cudaFree(rx); cudaFree(y); cudaFree(dst); cudaFree(sink);
}
int main() {
  for (int b : {64}) { run<float>(b, "f32"); run<bf16>(b, "bf16"); }
}
