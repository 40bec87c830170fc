// Throughput of the 32 x 32 -> 64-bit multiply that Philox-4x32 needs twice
// per round and counter (mul.wide.u32, IMAD.WIDE.U32 on sm_90), against
// mul.hi + mul.lo, mul.lo or mul.hi alone, and an f32 multiply. Eight
// independent chains per thread, 2048 threads per SM; prints warp
// instructions of the first kind per clock and SM at the nominal clock.
// Not part of the build:
//   nvcc -O3 -arch=sm_90a -o philox_mul bench/micro/philox_mul.cu && ./philox_mul
// Results: bench/results/NOTES-cuda.md, section 1.5.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
template <int OP>
__global__ void k(uint32_t* out, int iters, uint32_t seed) {
  uint32_t a[8];
  float f[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) { a[j] = seed + threadIdx.x * 8 + j; f[j] = a[j] * 1e-9f; }
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (OP == 0) {  // wide: both halves used
        uint32_t lo, hi;
        asm volatile("{.reg .u64 t; mul.wide.u32 t, %2, 0xD2511F53; mov.b64 {%0,%1}, t;}" : "=r"(lo), "=r"(hi) : "r"(a[j]));
        a[j] = lo ^ hi;  // one LOP3 per wide multiply
      } else if (OP == 1) {  // mul.hi + mul.lo
        uint32_t lo, hi;
        asm volatile("mul.hi.u32 %0, %2, 0xD2511F53; mul.lo.u32 %1, %2, 0xD2511F53;" : "=r"(hi), "=r"(lo) : "r"(a[j]));
        a[j] = lo ^ hi;
      } else if (OP == 2) {  // mul.lo only
        uint32_t lo;
        asm volatile("mul.lo.u32 %0, %1, 0xD2511F53;" : "=r"(lo) : "r"(a[j]));
        a[j] = lo ^ (a[j] >> 3);
      } else if (OP == 3) {  // FMUL + LOP
        asm volatile("mul.rn.f32 %0, %0, 0f3F800001;" : "+f"(f[j]));
        a[j] ^= __float_as_uint(f[j]);
      } else if (OP == 4) {  // wide + two ffma (mix)
        uint32_t lo, hi;
        asm volatile("{.reg .u64 t; mul.wide.u32 t, %2, 0xD2511F53; mov.b64 {%0,%1}, t;}" : "=r"(lo), "=r"(hi) : "r"(a[j]));
        a[j] = lo ^ hi;
        asm volatile("mul.rn.f32 %0, %0, 0f3F800001;" : "+f"(f[j]));
        asm volatile("mul.rn.f32 %0, %0, 0f3F800001;" : "+f"(f[j]));
      } else if (OP == 5) {  // mul.hi only
        uint32_t hi;
        asm volatile("mul.hi.u32 %0, %1, 0xD2511F53;" : "=r"(hi) : "r"(a[j]));
        a[j] = hi ^ (a[j] >> 3);
      }
    }
  }
  uint32_t r = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) r ^= a[j] ^ __float_as_uint(f[j]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = r;
}
template <int OP>
void run(const char* name, uint32_t* d, int sms, int pairs) {
  const int iters = 20000;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  k<OP><<<sms * 4, 512>>>(d, 10, 1);
  cudaEventRecord(e0);
  k<OP><<<sms * 4, 512>>>(d, iters, 1);
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
  // warp-instructions of the named kind per SM per ns
  double warp_ops = double(sms) * 4 * 16 * iters * 8 * pairs;  // per named op
  printf("%-28s %8.3f ms  %6.2f warp-op/clk/SM (of the first kind, at %d MHz nominal)\n", name, ms,
         warp_ops / sms / (ms * 1e-3 * clk * 1e3), clk / 1000);
}
int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint32_t* d; cudaMalloc(&d, sms * 4 * 512 * 4);
  run<0>("mul.wide + lop3", d, sms, 1);
  run<1>("mul.hi + mul.lo + lop3", d, sms, 1);
  run<2>("mul.lo + shf/lop3", d, sms, 1);
  run<5>("mul.hi + shf/lop3", d, sms, 1);
  run<3>("fmul + lop3", d, sms, 1);
  run<4>("mul.wide + lop3 + 2 fmul", d, sms, 1);
  return 0;
}
