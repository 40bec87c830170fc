// The Mamba-3 decode step and rotary step, served straight from the slot
// pools (no gather / scatter). Entry points:
//   ssu_mamba3_step_<state>_r<R>   R = 1, 2, 4: B of the lane's columns kept
//                                  in registers across rows, prev_B and C
//                                  read from shared memory
//   ssu_mamba3_step_<state>_rn     any R: operands read from shared memory
//   ssu_mamba3_rotary
// Inputs other than the state are staged once per block as fp32 in shared
// memory, so their dtypes are run-time values.
//
// Step geometry: one block of M3_THREADS threads per (sequence, head). A row
// of N state elements is spread over LPR = N / VC lanes (VC = 4 columns per
// lane: one 16-byte f32 access), so a pass covers M3_THREADS / LPR rows; the
// block walks all P rows in passes. While the per-row operands are staged,
// the head's whole state tile (up to 64 KiB) is copied into shared memory
// with cp.async in two halves; the first half's rows are processed while the
// second half is in flight. Larger tiles are read straight from global
// memory. The block owns the whole head, so it can overwrite
// prev_B[dst, :, h] after every row has read prev_B[src, :, h] (they may be
// the same slot). The state step uses fused multiply-adds: the Mamba-3
// state is held to the reference's tolerance, not to the CPU's bits.
//
// Readout: with outproj, out[p] = sum_n H'[p,n] * c[p,n] + e[p] where
// c[p,n] = sum_r w_r[p] C[r,n], w_r[p] = outproj[r,p] * silu(z[p] zproj[r,p])
// and e[p] = sum_r w_r[p] D x[p] xproj[r,p]: one lane reduction per row.
// Without outproj, one reduction per (row, r).
#include <stdint.h>

#include <type_traits>

#include "ssu_mamba3_params.h"
#include "ssu_math.h"

#define M3_THREADS 128
#define M3_VC 4
#define M3_STAGE 4

namespace {

constexpr int32_t kF32 = 1, kF16 = 2, kBF16 = 3, kI64 = 6;

__device__ __forceinline__ float m3_f16_to_f32(unsigned short u) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(u));
  return f;
}
__device__ __forceinline__ unsigned short m3_f32_to_f16(float f) {
  unsigned short u;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(u) : "f"(f));
  return u;
}
__device__ __forceinline__ unsigned short m3_f32_to_bf16(float f) {
  // Round to nearest even; NaN stays a quiet NaN.
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);
  return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Elements whose dtype is a run-time value.
__device__ __forceinline__ float ld(const void* p, int32_t dtype, int64_t i) {
  if (dtype == kF32) return __ldg(static_cast<const float*>(p) + i);
  const unsigned short u = __ldg(static_cast<const unsigned short*>(p) + i);
  return dtype == kBF16 ? __uint_as_float(static_cast<uint32_t>(u) << 16) : m3_f16_to_f32(u);
}
__device__ __forceinline__ void st(void* p, int32_t dtype, int64_t i, float v) {
  if (dtype == kF32) {
    static_cast<float*>(p)[i] = v;
  } else {
    static_cast<unsigned short*>(p)[i] = dtype == kBF16 ? m3_f32_to_bf16(v) : m3_f32_to_f16(v);
  }
}
// Copies one element's bits (same dtype on both sides).
__device__ __forceinline__ void copy_elem(void* d, const void* s, int32_t dtype, int64_t di,
                                          int64_t si) {
  if (dtype == kF32)
    static_cast<float*>(d)[di] = __ldg(static_cast<const float*>(s) + si);
  else
    static_cast<unsigned short*>(d)[di] = __ldg(static_cast<const unsigned short*>(s) + si);
}

__device__ __forceinline__ int64_t ld_index(const void* p, int32_t dtype, int64_t i) {
  if (dtype == kI64) return __ldg(static_cast<const long long*>(p) + i);
  return __ldg(static_cast<const int*>(p) + i);
}
__device__ __forceinline__ bool pad_slot(int64_t s, int64_t pad) { return s < 0 || s == pad; }
__device__ __forceinline__ void report_index(uint32_t* w) {
  if (w) atomicOr(w, 0x1u);
}

// VC state elements <-> fp32.
// Vector accesses need the head's rows aligned (rows are N >= 16 elements,
// so the head base decides); `vec` false falls back to element accesses.
template <typename ST>
struct StateIO;
template <>
struct StateIO<float> {
  static constexpr int kAlign = 16;
  static __device__ __forceinline__ float cvt(float f) { return f; }
  static __device__ __forceinline__ float back(float f) { return f; }
  static __device__ __forceinline__ void load(const float* p, float* v) {
    const float4 q = __ldcs(reinterpret_cast<const float4*>(p));
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
  }
  static __device__ __forceinline__ void store(float* p, const float* v) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  }
  static __device__ __forceinline__ void load_shared(const float* p, float* v) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
  }
};
template <int DT>
struct StateIO16 {
  static constexpr int kAlign = 8;
  static __device__ __forceinline__ float cvt(unsigned short u) {
    return DT == kBF16 ? __uint_as_float(static_cast<uint32_t>(u) << 16) : m3_f16_to_f32(u);
  }
  static __device__ __forceinline__ unsigned short back(float f) {
    return DT == kBF16 ? m3_f32_to_bf16(f) : m3_f32_to_f16(f);
  }
  static __device__ __forceinline__ void load(const unsigned short* p, float* v) {
    const uint2 q = __ldcs(reinterpret_cast<const uint2*>(p));
    v[0] = cvt(q.x & 0xffffu); v[1] = cvt(q.x >> 16);
    v[2] = cvt(q.y & 0xffffu); v[3] = cvt(q.y >> 16);
  }
  static __device__ __forceinline__ void load_shared(const unsigned short* p, float* v) {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    v[0] = cvt(q.x & 0xffffu); v[1] = cvt(q.x >> 16);
    v[2] = cvt(q.y & 0xffffu); v[3] = cvt(q.y >> 16);
  }
  static __device__ __forceinline__ void store(unsigned short* p, const float* v) {
    uint2 q;
    q.x = back(v[0]) | (static_cast<uint32_t>(back(v[1])) << 16);
    q.y = back(v[2]) | (static_cast<uint32_t>(back(v[3])) << 16);
    __stcs(reinterpret_cast<uint2*>(p), q);
  }
};

// Four consecutive fp32 values of shared memory (16-byte aligned).
__device__ __forceinline__ void lds4(const float* p, float* v) {
  const float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
}

struct StepSmem {
  float* B;   // [R][N]  this step's B
  float* Bp;  // [R][N]  prev_B of the src slot
  float* C;   // [R][N]
  float* xg;  // [R][P]  xproj[r,p] * (gamma * x[p])
  float* xb;  // [R][P]  xproj[r,p] * (beta * xprev[p])
  float* w;   // [R][P]  readout weight (outproj * gate), or 1
  float* e;   // [R][P]  D x[p] xproj[r,p] (times w with outproj)
};

// SD: the state's storage type (float, or unsigned short for f16 / bf16
// with IO the matching converter). RR: R when the operands live in
// registers, 0 for the shared-memory path.
template <typename SD, typename IO, int RR>
__device__ __forceinline__ void mamba3_step_body(const ssu_mamba3_params& p) {
  extern __shared__ __align__(16) float sm[];
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / p.nheads, h = bh - b * p.nheads;
  const int tid = threadIdx.x;
  const int P = static_cast<int>(p.dim), N = static_cast<int>(p.dstate);
  const int R = RR > 0 ? RR : static_cast<int>(p.rank);
  const uint32_t f = p.features;
  const bool outproj = f & SSU_M3_HAS_OUTPROJ;
  const bool reporter = tid == 0 && h == 0;

  int64_t src = b;
  if (f & SSU_M3_HAS_SRC) src = ld_index(p.src_index, p.index_dtype, b * p.src_stride);
  bool pad = pad_slot(src, p.pad_slot_id);
  if (!pad && src >= p.nslots) {
    if (reporter) report_index(p.error_word);
    pad = true;
  }
  if (pad) {
    const int nout = outproj ? P : R * P;
    for (int i = tid; i < nout; i += M3_THREADS) {
      const int r = i / P, pp = i - r * P;
      st(p.out, p.input_dtype, b * p.out_stride_b + r * p.out_stride_r + h * p.out_stride_h + pp,
         0.f);
    }
    return;
  }
  int64_t dst = src;
  if (f & SSU_M3_HAS_DST) {
    dst = ld_index(p.dst_index, p.index_dtype, b * p.dst_stride);
    if (pad_slot(dst, p.pad_slot_id)) {
      dst = -1;
    } else if (dst >= p.nslots) {
      if (reporter) report_index(p.error_word);
      dst = -1;
    }
  }

  const int64_t head_off = h * int64_t(P) * N;
  SD* const state = static_cast<SD*>(p.state);
  const SD* const src_head = state + src * p.state_stride_slot + head_off;
  SD* const dst_head = dst >= 0 ? state + dst * p.state_stride_slot + head_off : nullptr;
  const bool vec = ((reinterpret_cast<uintptr_t>(src_head) | reinterpret_cast<uintptr_t>(dst_head)) &
                    (IO::kAlign - 1)) == 0;

  StepSmem s;
  const int RN = R * N, RP = R * P;
  // The head's state tile, copied with 16-byte cp.async while the operands
  // below are staged: the whole tile is in flight at once.
  SD* const s_state = reinterpret_cast<SD*>(sm + ((3 * RN + 4 * RP + 8 + 3) & ~3));
  const bool staged = p.cuda_stage_state && (reinterpret_cast<uintptr_t>(src_head) & 15) == 0;
  if (staged) {
    // Two groups: rows [0, P/2) and the rest.
    const int chunks = static_cast<int>(int64_t(P) * N * sizeof(SD) / 16);
    const int half = static_cast<int>(int64_t(P / 2) * N * sizeof(SD) / 16);
    const char* g = reinterpret_cast<const char*>(src_head);
    char* d = reinterpret_cast<char*>(s_state);
    for (int c = tid; c < half; c += M3_THREADS) {
      const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(d + 16 * c));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(g + 16 * c)
                   : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    for (int c = half + tid; c < chunks; c += M3_THREADS) {
      const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(d + 16 * c));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(g + 16 * c)
                   : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  s.B = sm;
  s.Bp = s.B + RN;
  s.C = s.Bp + RN;
  s.xg = s.C + RN;
  s.xb = s.xg + RP;
  s.w = s.xb + RP;
  s.e = s.w + RP;

  // Per-(b, h) scalars (every thread computes them; they are a few loads).
  const float A = ld(p.A, p.A_dtype, b * p.A_stride_b + h * p.A_stride_h);
  const float dt = ld(p.dt, p.dt_dtype, b * p.dt_stride_b + h * p.dt_stride_h);
  const float trap = ld(p.trap, p.trap_dtype, b * p.trap_stride_b + h * p.trap_stride_h);
  const float alpha = ssu_math::exp(A * dt);
  const float gamma = trap * dt;
  const float beta = ((1.0f - trap) * dt) * alpha;
  const float D = (f & SSU_M3_HAS_D) ? ld(p.D, p.D_dtype, h * p.D_stride_h) : 0.f;

  // Stage B, prev_B, C (fp32) and the per-row tables. Loads are issued
  // M3_STAGE iterations at a time before any of them is used, so the
  // staging costs a few round trips, not one per iteration.
  const int32_t it = p.input_dtype;
  for (int i0 = tid; i0 < RN; i0 += M3_STAGE * M3_THREADS) {
    float vb[M3_STAGE], vc[M3_STAGE], vp[M3_STAGE];
#pragma unroll
    for (int u = 0; u < M3_STAGE; ++u) {
      const int i = i0 + u * M3_THREADS;
      if (i < RN) {
        const int r = i / N, n = i - r * N;
        vb[u] = ld(p.B, it, b * p.B_stride_b + r * p.B_stride_r + h * p.B_stride_h + n);
        vc[u] = ld(p.C, it, b * p.C_stride_b + r * p.C_stride_r + h * p.C_stride_h + n);
        vp[u] = ld(p.prev_B, it,
                   src * p.prev_B_stride_slot + r * p.prev_B_stride_r + h * p.prev_B_stride_h + n);
      }
    }
#pragma unroll
    for (int u = 0; u < M3_STAGE; ++u) {
      const int i = i0 + u * M3_THREADS;
      if (i < RN) {
        s.B[i] = vb[u];
        s.C[i] = vc[u];
        s.Bp[i] = vp[u];
      }
    }
  }
  const bool has_z = f & SSU_M3_HAS_Z;
  for (int i0 = tid; i0 < RP; i0 += M3_STAGE * M3_THREADS) {
    float vx[M3_STAGE], vxp[M3_STAGE], vj[M3_STAGE], vw[M3_STAGE], vz[M3_STAGE], vzp[M3_STAGE];
#pragma unroll
    for (int u = 0; u < M3_STAGE; ++u) {
      const int i = i0 + u * M3_THREADS;
      if (i < RP) {
        const int r = i / P, pp = i - r * P;
        vx[u] = ld(p.x, it, b * p.x_stride_b + h * p.x_stride_h + pp);
        vxp[u] = ld(p.prev_x, it, src * p.prev_x_stride_slot + h * p.prev_x_stride_h + pp);
        vj[u] = ld(p.xproj, p.xproj_dtype,
                   r * p.xproj_stride_r + h * p.xproj_stride_h + pp * p.xproj_stride_p);
        vw[u] = outproj ? ld(p.outproj, p.outproj_dtype,
                             r * p.outproj_stride_r + h * p.outproj_stride_h + pp * p.outproj_stride_p)
                        : 1.f;
        vz[u] = has_z ? ld(p.z, it, b * p.z_stride_b + h * p.z_stride_h + pp) : 0.f;
        vzp[u] = has_z ? ld(p.zproj, p.zproj_dtype,
                            r * p.zproj_stride_r + h * p.zproj_stride_h + pp * p.zproj_stride_p)
                       : 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < M3_STAGE; ++u) {
      const int i = i0 + u * M3_THREADS;
      if (i < RP) {
        const float x = vx[u], xpj = vj[u];
        s.xg[i] = xpj * (gamma * x);
        s.xb[i] = xpj * (beta * vxp[u]);
        const float e = (D * x) * xpj;
        float w = vw[u];
        if (has_z) {
          const float v = vz[u] * vzp[u];
          w = w * (v / (1.0f + expf(-v)));
        }
        s.w[i] = w;
        s.e[i] = outproj ? w * e : e;
      }
    }
  }
  if (staged) asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  __syncthreads();

  const int lpr = N / M3_VC;            // lanes per row (power of two, 4..64)
  const int rows_per_pass = M3_THREADS / lpr;
  const int lane = tid % lpr;
  const int n0 = lane * M3_VC;
  const int row_in_pass = tid / lpr;
  // Lanes of one row are consecutive; a row spans at most one warp when
  // lpr <= 32, else two warps combined through shared memory.
  // This step's B for the lane's columns stays in registers (R <= 4);
  // prev_B and C are read from shared memory as 16-byte vectors, which keeps
  // the kernel at fewer registers (more resident blocks).
  float bv[RR > 0 ? RR : 1][M3_VC];
  if constexpr (RR > 0) {
#pragma unroll
    for (int r = 0; r < RR; ++r)
#pragma unroll
      for (int v = 0; v < M3_VC; ++v) {
        bv[r][v] = s.B[r * N + n0 + v];
      }
  }

  const int passes = (P + rows_per_pass - 1) / rows_per_pass;
  float* const red = s.e + RP;  // [M3_THREADS / 32] partial sums for lpr == 64

  // One pass: every thread takes one row's chunk of VC columns (the state
  // comes from the staged tile, else straight from global memory), updates
  // it, stores it and reads out. All threads run every pass together (the
  // readout of N = 256 synchronizes the block). One code path, so the
  // chunk stays in registers.
  const int half_pass = (P / 2) / rows_per_pass;
  for (int pass = 0; pass < passes; ++pass) {
    if (staged && pass == half_pass) {
      // The tile arrived in two cp.async groups: the first half's rows were
      // processed while the second half was still in flight.
      asm volatile("cp.async.wait_all;\n" ::: "memory");
      __syncthreads();
    }
    const int row = pass * rows_per_pass + row_in_pass;
    float hh[M3_VC];
#pragma unroll
    for (int v = 0; v < M3_VC; ++v) hh[v] = 0.f;
    if (row < P) {
      if (staged) {
        IO::load_shared(s_state + int64_t(row) * N + n0, hh);
      } else if (vec) {
        IO::load(src_head + int64_t(row) * N + n0, hh);
      } else {
#pragma unroll
        for (int v = 0; v < M3_VC; ++v) hh[v] = IO::cvt(src_head[int64_t(row) * N + n0 + v]);
      }
    }
      const bool rv = row < P;
      const int pr = rv ? row : 0;
  #pragma unroll
      for (int v = 0; v < M3_VC; ++v) hh[v] = alpha * hh[v];
    // Constant trip counts when RR > 0: fully unrolled, so the per-lane
    // operand arrays stay in registers.
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float xg = s.xg[r * P + pr], xb = s.xb[r * P + pr];
        float bp4[M3_VC], b4[M3_VC];
        lds4(s.Bp + r * N + n0, bp4);
        if (RR == 0) lds4(s.B + r * N + n0, b4);
  #pragma unroll
        for (int v = 0; v < M3_VC; ++v) {
          const float bb = RR > 0 ? bv[RR > 0 ? r : 0][v] : b4[v];
          const float bp = bp4[v];
          hh[v] = fmaf(xg, bb, hh[v]);
          hh[v] = fmaf(xb, bp, hh[v]);
        }
      }
      if (rv && dst_head) {
        if (vec) {
          IO::store(dst_head + int64_t(row) * N + n0, hh);
        } else {
  #pragma unroll
          for (int v = 0; v < M3_VC; ++v) dst_head[int64_t(row) * N + n0 + v] = IO::back(hh[v]);
        }
      }

      // Readout.
      const int nsum = outproj ? 1 : R;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r >= nsum) break;  // block-uniform
        float acc = 0.f;
        if (outproj) {
          float c[M3_VC] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int q = 0; q < R; ++q) {
            float c4[M3_VC];
            lds4(s.C + q * N + n0, c4);
            const float wq = s.w[q * P + pr];
#pragma unroll
            for (int v = 0; v < M3_VC; ++v) c[v] = fmaf(wq, c4[v], c[v]);
          }
#pragma unroll
          for (int v = 0; v < M3_VC; ++v) acc = fmaf(hh[v], c[v], acc);
        } else {
          float c4[M3_VC];
          lds4(s.C + r * N + n0, c4);
#pragma unroll
          for (int v = 0; v < M3_VC; ++v) acc = fmaf(hh[v], c4[v], acc);
        }
        const int width = lpr < 32 ? lpr : 32;
        for (int off = width >> 1; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (lpr > 32) {  // N = 256: a row spans two warps
          __syncthreads();
          if ((tid & 31) == 0) red[tid >> 5] = acc;
          __syncthreads();
          acc = red[(tid >> 5) & ~1] + red[((tid >> 5) & ~1) + 1];
        }
        if (rv && lane == 0) {
          float y = acc;
          if (outproj) {
#pragma unroll
            for (int q = 0; q < R; ++q) y += s.e[q * P + pr];
          } else {
            y += s.e[r * P + pr];
          }
          st(p.out, it, b * p.out_stride_b + r * p.out_stride_r + h * p.out_stride_h + row, y);
        }
      }
  }

  if ((f & SSU_M3_UPDATE_PREV) && dst >= 0) {
    __syncthreads();  // every row has read prev_B / prev_x of src
    for (int i = tid; i < RN; i += M3_THREADS) {
      const int r = i / N, n = i - r * N;
      copy_elem(p.prev_B, p.B, it,
                dst * p.prev_B_stride_slot + r * p.prev_B_stride_r + h * p.prev_B_stride_h + n,
                b * p.B_stride_b + r * p.B_stride_r + h * p.B_stride_h + n);
    }
    for (int i = tid; i < P; i += M3_THREADS)
      copy_elem(p.prev_x, p.x, it, dst * p.prev_x_stride_slot + h * p.prev_x_stride_h + i,
                b * p.x_stride_b + h * p.x_stride_h + i);
  }
}

// Rotary: one block per (sequence, head).
__device__ __forceinline__ void rotary_body(const ssu_rotary_params& p) {
  extern __shared__ __align__(16) float sm[];
  const int64_t bh = blockIdx.x;
  const int64_t b = bh / p.nheads, h = bh - b * p.nheads;
  const int tid = threadIdx.x;
  const int N = static_cast<int>(p.dstate), R = static_cast<int>(p.rank);
  const int Sa = static_cast<int>(p.nangles);
  const uint32_t f = p.features;
  const bool reporter = tid == 0 && h == 0;

  int64_t src = b;
  if (f & SSU_ROT_HAS_SRC) src = ld_index(p.src_index, p.index_dtype, b * p.src_stride);
  bool pad = pad_slot(src, p.pad_slot_id);
  if (!pad && src >= p.nslots) {
    if (reporter) report_index(p.error_word);
    pad = true;
  }
  const int32_t qt = p.qk_dtype;
  if (pad) {
    for (int i = tid; i < R * N; i += M3_THREADS) {
      const int r = i / N, n = i - r * N;
      st(p.q_out, qt, b * p.q_out_stride_b + r * p.q_out_stride_r + h * p.q_out_stride_h + n, 0.f);
      st(p.k_out, qt, b * p.k_out_stride_b + r * p.k_out_stride_r + h * p.k_out_stride_h + n, 0.f);
    }
    return;
  }
  int64_t dst = src;
  if (f & SSU_ROT_HAS_DST) {
    dst = ld_index(p.dst_index, p.index_dtype, b * p.dst_stride);
    if (pad_slot(dst, p.pad_slot_id)) {
      dst = -1;
    } else if (dst >= p.nslots) {
      if (reporter) report_index(p.error_word);
      dst = -1;
    }
  }
  float* const s_cos = sm;
  float* const s_sin = sm + Sa;
  const float dt = ld(p.dt, p.dt_dtype, b * p.dt_stride_b + h * p.dt_stride_h);
  const float kPi = 3.14159265358979323846f, k2Pi = 6.28318530717958647692f;
  for (int i = tid; i < Sa; i += M3_THREADS) {
    const float a = p.angle_state[src * p.angle_stride_slot + h * p.angle_stride_h + i];
    const float rate =
        ld(p.angle_rate, p.rate_dtype, b * p.rate_stride_b + h * p.rate_stride_h + i * p.rate_stride_i);
    float th = a + (tanhf(rate) * kPi) * dt;
    th = th - k2Pi * floorf(th / k2Pi);
    if (th >= k2Pi) th = th - k2Pi;
    if (th < 0.f) th = th + k2Pi;
    float sn, cs;
    sincosf(th, &sn, &cs);
    s_cos[i] = cs;
    s_sin[i] = sn;
    // The same thread read this element above (dst may equal src).
    if (dst >= 0) p.angle_state[dst * p.angle_stride_slot + h * p.angle_stride_h + i] = th;
  }
  __syncthreads();
  const bool halved = f & SSU_ROT_HALVED;
  const int half = N / 2;
  // Each thread handles one pair or one pass-through element of q and k.
  for (int i = tid; i < R * N; i += M3_THREADS) {
    const int r = i / N, n = i - r * N;
    int a, c, j;  // pair (a, c) rotated by angle j; a == n
    if (halved) {
      if (n >= half) continue;
      a = n; c = n + half; j = n;
    } else {
      if (n & 1) continue;
      a = n; c = n + 1; j = n >> 1;
    }
    for (int which = 0; which < 2; ++which) {
      const void* in = which ? p.k : p.q;
      void* out = which ? p.k_out : p.q_out;
      const int64_t ib = which ? b * p.k_stride_b + r * p.k_stride_r + h * p.k_stride_h
                               : b * p.q_stride_b + r * p.q_stride_r + h * p.q_stride_h;
      const int64_t ob = which ? b * p.k_out_stride_b + r * p.k_out_stride_r + h * p.k_out_stride_h
                               : b * p.q_out_stride_b + r * p.q_out_stride_r + h * p.q_out_stride_h;
      const bool has_bias = which ? (f & SSU_ROT_HAS_K_BIAS) : (f & SSU_ROT_HAS_Q_BIAS);
      float va = ld(in, qt, ib + a), vc = ld(in, qt, ib + c);
      if (has_bias) {
        const void* bias = which ? p.k_bias : p.q_bias;
        const int32_t bt = which ? p.k_bias_dtype : p.q_bias_dtype;
        const int64_t sr = which ? p.k_bias_stride_r : p.q_bias_stride_r;
        const int64_t sh = which ? p.k_bias_stride_h : p.q_bias_stride_h;
        const int64_t sn = which ? p.k_bias_stride_n : p.q_bias_stride_n;
        va = va + ld(bias, bt, r * sr + h * sh + a * sn);
        vc = vc + ld(bias, bt, r * sr + h * sh + c * sn);
      }
      float oa = va, oc = vc;
      if (j < Sa) {
        const float cs = s_cos[j], sn = s_sin[j];
        oa = va * cs - vc * sn;
        oc = va * sn + vc * cs;
      }
      st(out, qt, ob + a, oa);
      st(out, qt, ob + c, oc);
    }
  }
}

}  // namespace

#define M3_STEP_KERNEL(name, SD, IO, RR)                                              \
  extern "C" __global__ void __launch_bounds__(M3_THREADS)                            \
      name(const __grid_constant__ ssu_mamba3_params params) {                        \
    mamba3_step_body<SD, IO, RR>(params);                                             \
  }
#define M3_STEP_KERNELS(sname, SD, IO)          \
  M3_STEP_KERNEL(ssu_mamba3_step_##sname##_r1, SD, IO, 1) \
  M3_STEP_KERNEL(ssu_mamba3_step_##sname##_r2, SD, IO, 2) \
  M3_STEP_KERNEL(ssu_mamba3_step_##sname##_r4, SD, IO, 4) \
  M3_STEP_KERNEL(ssu_mamba3_step_##sname##_rn, SD, IO, 0)

M3_STEP_KERNELS(f32, float, StateIO<float>)
M3_STEP_KERNELS(f16, unsigned short, StateIO16<kF16>)
M3_STEP_KERNELS(bf16, unsigned short, StateIO16<kBF16>)

extern "C" __global__ void __launch_bounds__(M3_THREADS)
    ssu_mamba3_rotary(const __grid_constant__ ssu_rotary_params params) {
  rotary_body(params);
}
