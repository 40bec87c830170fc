// Which instructions add to the time of IMAD.WIDE.U32 when mixed with it:
// per chain and iteration one mul.wide.u32 (folded by a LOP3) and one
// instruction X on independent data ("wide+lop3+X"), against X alone and the
// multiply alone. Eight chains per thread, 2048 threads per SM; prints
// cycles per chain-iteration and scheduler at the nominal 1980 MHz (H100
// SXM). Check the SASS (cuobjdump -sass) before reading a row: ptxas may
// fold or rebalance X (add.u32 became IADD3 and IMAD.IADD alike).
// Not part of the build:
//   nvcc -O3 -arch=sm_90a -o pipe_mix bench/micro/pipe_mix.cu && ./pipe_mix
// Results: bench/results/NOTES-cuda.md, section 1.5.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
template <int X>
__device__ __forceinline__ void opx(uint32_t& v, float& f, uint32_t u) {
  if (X == 0) {}  // none
  if (X == 1) asm volatile("{.reg .f16 h; mov.b32 {h,_}, %1; cvt.f32.f16 %0, h;}" : "=f"(f) : "r"(v));  // HADD2.F32
  if (X == 2) asm volatile("cvt.rz.f16x2.f32 %0, %1, %1;" : "=r"(v) : "f"(f));                      // F2FP
  if (X == 3) asm volatile("mul.rn.ftz.f16x2 %0, %0, %1;" : "+r"(v) : "r"(0x3C013C01u));             // HMUL2
  if (X == 4) asm volatile("mul.rn.f32 %0, %0, 0f3F800001;" : "+f"(f));                               // FMUL
  if (X == 5) asm volatile("add.u32 %0, %0, %1;" : "+r"(v) : "r"(u));                           // add
  if (X == 6) asm volatile("and.b32 %0, %0, %1;" : "+r"(v) : "r"(u | 0x10000u));                                      // LOP3
  if (X == 7) asm volatile("prmt.b32 %0, %0, %1, 0x7632;" : "+r"(v) : "r"(0x1234u));                  // PRMT
  if (X == 8) asm volatile("shf.l.wrap.b32 %0, %0, %1, 3;" : "+r"(v) : "r"(u));                                           // shift
  if (X == 9) asm volatile("max.NaN.xorsign.abs.f16x2 %0, %0, %1;" : "+r"(v) : "r"(0x3C013C01u));    // HMNMX2
  if (X == 10) asm volatile("fma.rn.f32 %0, %0, 0f3F800001, 0f3F800000;" : "+f"(f));                  // FFMA
  if (X == 12) asm volatile("cvt.rn.f32.u32 %0, %1;" : "=f"(f) : "r"(u));                                 // I2FP
}
template <int X, int W>
__global__ void k(uint32_t* out, int iters, uint32_t seed) {
  uint32_t a[8], v[8];
  float f[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) { a[j] = seed + threadIdx.x * 8 + j; v[j] = a[j] * 7; f[j] = a[j] * 1e-9f; }
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (W) {
        uint32_t lo, hi;
        asm volatile("{.reg .u64 t; mul.wide.u32 t, %2, 0xD2511F53; mov.b64 {%0,%1}, t;}" : "=r"(lo), "=r"(hi) : "r"(a[j]));
        a[j] = lo ^ hi;
      }
      opx<X>(v[j], f[j], v[(j + 1) & 7]);
      if (X == 12) v[j] ^= __float_as_uint(f[j]);
      if (X == 1) v[j] = __float_as_uint(f[j]);
      if (X == 2) f[j] = __uint_as_float(v[j]);
    }
  }
  uint32_t r = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) r ^= a[j] ^ v[j] ^ __float_as_uint(f[j]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = r;
}
template <int X, int W>
void run(const char* name, uint32_t* d, int sms) {
  const int iters = 20000;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  k<X, W><<<sms * 4, 512>>>(d, 10, 1);
  cudaEventRecord(e0);
  k<X, W><<<sms * 4, 512>>>(d, iters, 1);
  cudaEventRecord(e1); cudaEventSynchronize(e1);
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  // iterations (8 chains each) per scheduler: 4 blocks * 16 warps / 4 schedulers
  const double per_sched = 16.0 * iters * 8;
  printf("%-34s %7.3f ms  %5.2f cycles per chain-iteration and scheduler (1980 MHz)\n", name, ms,
         ms * 1e-3 * 1.98e9 / per_sched);
}
int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint32_t* d; cudaMalloc(&d, sms * 4 * 512 * 4);
  run<0, 1>("wide+lop3 alone", d, sms);
  const char* names[] = {"", "HADD2.F32 (cvt.f32.f16)", "F2FP (cvt.rz.f16x2.f32)", "HMUL2.FTZ", "FMUL", "add.u32", "and (LOP3)", "PRMT", "shf.l.wrap", "HMNMX2", "FFMA", "(unused)", "I2F"};
#define R(x) { char b[64]; snprintf(b, 64, "X alone: %s", names[x]); run<x, 0>(b, d, sms); snprintf(b, 64, "wide+lop3+%s", names[x]); run<x, 1>(b, d, sms); }
  R(1) R(2) R(3) R(4) R(5) R(6) R(7) R(8) R(9) R(10) R(12)
  return 0;
}
