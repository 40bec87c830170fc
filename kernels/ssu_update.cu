// Selective state update (Mamba-1 / Mamba-2), single- and multi-token, every
// write mode of SPEC.md sections 1 and 2, for f32, f16 and bf16 states and
// inputs. One template; its instances are extern "C" entry points named
//   ssu_update_<state>_<input>_<variant>
// with variant vec1 / vec2 (16-byte state accesses, 1 or 2 chunks per lane)
// or gen (element accesses, any N <= 256 and any alignment). Everything that
// does not change the code path (sizes, strides, flags, the dtypes of dt, A,
// D, dt_bias and of the indices) is a run-time value.
//
// The kernel is memory bound: each state row is read once (16-byte loads
// where the plan allows), kept in fp32 registers across all tokens, and
// written once per required store. Small per-token operands (B, C, x, dt, z)
// come through the read-only cache; they are shared by every row of a block.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "ssu_cuda_launch.h"

// Values of SSU_DTYPE_* and SSU_ERROR_BIT_* (ssu.h, which nvcc does not need).
#define SSU_DT_F32 1
#define SSU_DT_F16 2
#define SSU_DT_BF16 3
#define SSU_DT_I32 5
#define SSU_DT_I64 6
#define SSU_BIT_INDEX 0x1u
#define SSU_BIT_SEQLEN 0x2u

namespace {

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(f16 v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ f16 from_f32<f16>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) { return __float2bfloat16_rn(v); }

// A value of a tensor whose dtype is only known at run time (dt, A, D,
// dt_bias). The branch is uniform across the grid.
__device__ __forceinline__ float load_param(const void* p, int32_t dtype, int64_t i) {
  if (dtype == SSU_DT_F32) return __ldg(static_cast<const float*>(p) + i);
  const unsigned short u = __ldg(static_cast<const unsigned short*>(p) + i);
  return dtype == SSU_DT_BF16 ? __uint_as_float(static_cast<uint32_t>(u) << 16)
                              : __half2float(__ushort_as_half(u));
}

__device__ __forceinline__ int64_t load_index(const void* p, int32_t dtype, int64_t i) {
  if (dtype == SSU_DT_I64) return __ldg(static_cast<const long long*>(p) + i);
  return __ldg(static_cast<const int*>(p) + i);
}

__device__ __forceinline__ float softplus20(float v) { return v > 20.f ? v : log1pf(expf(v)); }
__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

__device__ __forceinline__ void report(uint32_t* word, uint32_t bit) {
  if (word) atomicOr(word, bit);
}

// One chunk of VEC state elements: a 16-byte access when VEC*sizeof(T) is 16,
// element accesses otherwise. State traffic is streamed (evict-first): each
// byte is touched once per call.
template <typename T, int VEC>
__device__ __forceinline__ void load_chunk(const T* src, float* v) {
  if constexpr (VEC * sizeof(T) == 16) {
    union {
      uint4 u;
      T e[VEC];
    } c;
    c.u = __ldcs(reinterpret_cast<const uint4*>(src));
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = to_f32(c.e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = to_f32(src[i]);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_chunk(T* dst, const float* v) {
  if constexpr (VEC * sizeof(T) == 16) {
    union {
      uint4 u;
      T e[VEC];
    } c;
#pragma unroll
    for (int i = 0; i < VEC; ++i) c.e[i] = from_f32<T>(v[i]);
    __stcs(reinterpret_cast<uint4*>(dst), c.u);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) dst[i] = from_f32<T>(v[i]);
  }
}

// A slot value is padding when negative or equal to the call's pad id.
__device__ __forceinline__ bool is_pad(int64_t slot, int64_t pad_id) {
  return slot < 0 || slot == pad_id;
}

template <typename ST, typename IT, int VEC, int KC>
__device__ __forceinline__ void update_body(const ssu_cuda_update_launch& L) {
  constexpr int E = VEC * KC;  // state elements per lane per row
  constexpr int MAXR = SSU_CUDA_MAX_ROWS_PER_THREAD;
  const ssu_update_params& p = L.p;
  const uint32_t f = p.features;

  const int tiles = L.tiles_per_head;
  const int64_t blk = blockIdx.x;
  const int64_t bh = blk / tiles;
  const int tile = static_cast<int>(blk - bh * tiles);
  const int64_t b = bh / p.nheads;
  const int64_t h = bh - b * p.nheads;
  const int64_t g = h / p.heads_per_group;
  const int lpr = L.lanes_per_row;
  const int lane_r = threadIdx.x & (lpr - 1);
  const int ngrp = SSU_CUDA_THREADS / lpr;
  const int rpt = L.rows_per_thread;
  const int P = static_cast<int>(p.dim), N = static_cast<int>(p.dstate);
  const int row0 = tile * L.rows_per_block + static_cast<int>(threadIdx.x) / lpr;
  // Only one block per sequence reports, so a bad index costs one atomic.
  const bool reporter = threadIdx.x == 0 && h == 0 && tile == 0;

  // Tokens of this sequence: [tok0, tok0 + ntok).
  int64_t tok0 = 0, ntok = p.ntokens;
  if (f & SSU_F_VARLEN) {
    tok0 = load_index(p.cu_seqlens, p.seqlen_dtype, b * p.cu_seqlens_stride);
    ntok = load_index(p.cu_seqlens, p.seqlen_dtype, (b + 1) * p.cu_seqlens_stride) - tok0;
    if (ntok <= 0) return;
    if (ntok > p.ntokens) {
      if (reporter) report(p.error_word, SSU_BIT_SEQLEN);
      ntok = p.ntokens;
    }
  }

  // Initial slot.
  int64_t s0 = b;
  if (f & SSU_F_HAS_SRC) {
    int64_t col = 0;
    if (f & SSU_F_HAS_ACCEPTED) {
      col = load_index(p.num_accepted, p.accepted_dtype, b * p.num_accepted_stride) - 1;
      col = col < 0 ? 0 : (col >= p.ntokens ? p.ntokens - 1 : col);
    }
    s0 = load_index(p.src_index, p.index_dtype, b * p.src_stride_b + col * p.src_stride_t);
  }
  bool pad = is_pad(s0, p.pad_slot_id);
  if (!pad && s0 >= p.nslots) {
    if (reporter) report(p.error_word, SSU_BIT_INDEX);
    pad = true;
  }

  IT* const out_bh = static_cast<IT*>(p.out) + b * p.out_stride_b + h * p.out_stride_h;
  if (pad) {  // block-uniform: outputs are exactly zero, no pool is touched
    if (lane_r == 0) {
      for (int64_t t = 0; t < ntok; ++t) {
        IT* o = out_bh + (tok0 + t) * p.out_stride_t;
        for (int j = 0; j < rpt; ++j) {
          const int row = row0 + j * ngrp;
          if (row < P) o[row] = from_f32<IT>(0.f);
        }
      }
    }
    return;
  }

  const int64_t head_off = h * P * N;
  ST* const state = static_cast<ST*>(p.state);

  // Load the initial state rows (all loads issued before any use).
  float hs[MAXR][E];
  {
    const ST* base = state + s0 * p.state_stride_slot + head_off;
#pragma unroll
    for (int j = 0; j < MAXR; ++j) {
      const int row = row0 + j * ngrp;
      const bool rv = j < rpt && row < P;
#pragma unroll
      for (int k = 0; k < KC; ++k) {
        const int n0 = (lane_r + k * lpr) * VEC;
        if (rv && n0 < N) {
          load_chunk<ST, VEC>(base + row * N + n0, &hs[j][k * VEC]);
        } else {
#pragma unroll
          for (int v = 0; v < VEC; ++v) hs[j][k * VEC + v] = 0.f;
        }
      }
    }
  }

  const bool a_per_head = !(f & SSU_F_A_PER_CHANNEL);
  const float a_head = a_per_head ? load_param(p.A, p.A_dtype, h * p.A_stride_h) : 0.f;
  ST* const inter = static_cast<ST*>(p.inter_states);

  int64_t inter_slot = -1;
  if (f & SSU_F_HAS_INTER) {
    inter_slot = (f & SSU_F_HAS_INTER_INDEX)
                     ? load_index(p.inter_index, p.inter_index_dtype, b * p.inter_index_stride)
                     : s0;
    if (is_pad(inter_slot, p.pad_slot_id)) {
      inter_slot = -1;
    } else if (inter_slot >= p.n_intermediate) {
      if (reporter) report(p.error_word, SSU_BIT_INDEX);
      inter_slot = -1;
    }
  }

#pragma unroll 1
  for (int64_t t = 0; t < ntok; ++t) {
    const int64_t tok = tok0 + t;
    float Bv[E], Cv[E];
    {
      const IT* Br = static_cast<const IT*>(p.B) + b * p.B_stride_b + tok * p.B_stride_t +
                     g * p.B_stride_g;
      const IT* Cr = static_cast<const IT*>(p.C) + b * p.C_stride_b + tok * p.C_stride_t +
                     g * p.C_stride_g;
#pragma unroll
      for (int k = 0; k < KC; ++k) {
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
          const int n = (lane_r + k * lpr) * VEC + v;
          Bv[k * VEC + v] = n < N ? to_f32(__ldg(Br + n)) : 0.f;
          Cv[k * VEC + v] = n < N ? to_f32(__ldg(Cr + n)) : 0.f;
        }
      }
    }

    // Where this token's state goes, besides registers.
    ST* tok_dst = nullptr;
    if ((f & SSU_F_DST_PER_TOKEN) && !(f & SSU_F_DISABLE_UPDATE)) {
      const int64_t d =
          load_index(p.dst_index, p.index_dtype, b * p.dst_stride_b + t * p.dst_stride_t);
      if (!is_pad(d, p.pad_slot_id)) {
        if (d < p.nslots) {
          tok_dst = state + d * p.state_stride_slot + head_off;
        } else if (reporter) {
          report(p.error_word, SSU_BIT_INDEX);
        }
      }
    }
    ST* const tok_inter =
        inter_slot >= 0 ? inter + inter_slot * p.inter_stride_i + t * p.inter_stride_t + head_off
                        : nullptr;

    const IT* const xr =
        static_cast<const IT*>(p.x) + b * p.x_stride_b + tok * p.x_stride_t + h * p.x_stride_h;
    const IT* const zr =
        static_cast<const IT*>(p.z) + b * p.z_stride_b + tok * p.z_stride_t + h * p.z_stride_h;
    IT* const outr = out_bh + tok * p.out_stride_t;
    const int64_t dto = b * p.dt_stride_b + tok * p.dt_stride_t + h * p.dt_stride_h;
#pragma unroll
    for (int j = 0; j < MAXR; ++j) {
      if (j >= rpt) break;  // uniform across the block
      const int row = row0 + j * ngrp;
      const bool rv = row < P;
      const int r = rv ? row : 0;  // rows past P compute on row 0, store nothing

      const float xv = to_f32(__ldg(xr + r));
      float dt = load_param(p.dt, p.dt_dtype, dto + r * p.dt_stride_p);
      if (f & SSU_F_HAS_DT_BIAS)
        dt += load_param(p.dt_bias, p.dt_bias_dtype,
                         h * p.dt_bias_stride_h + r * p.dt_bias_stride_p);
      if (f & SSU_F_DT_SOFTPLUS) dt = softplus20(dt);
      const float dtx = dt * xv;

      float acc = 0.f;
      if (a_per_head) {
        const float dA = expf(a_head * dt);
#pragma unroll
        for (int e = 0; e < E; ++e) {
          hs[j][e] = fmaf(hs[j][e], dA, Bv[e] * dtx);
          acc = fmaf(hs[j][e], Cv[e], acc);
        }
      } else {
        const int64_t ao = h * p.A_stride_h + r * p.A_stride_p;
#pragma unroll
        for (int k = 0; k < KC; ++k) {
#pragma unroll
          for (int v = 0; v < VEC; ++v) {
            const int e = k * VEC + v;
            const int n = (lane_r + k * lpr) * VEC + v;
            const float a = n < N ? load_param(p.A, p.A_dtype, ao + n * p.A_stride_n) : 0.f;
            hs[j][e] = fmaf(hs[j][e], __expf(a * dt), Bv[e] * dtx);
            acc = fmaf(hs[j][e], Cv[e], acc);
          }
        }
      }
      for (int off = lpr >> 1; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);

      if (rv && lane_r == 0) {
        float y = acc;
        if (f & SSU_F_HAS_D)
          y += load_param(p.D, p.D_dtype, h * p.D_stride_h + r * p.D_stride_p) * xv;
        if (f & SSU_F_HAS_Z) y *= silu(to_f32(__ldg(zr + r)));
        outr[r] = from_f32<IT>(y);
      }

      if (rv && (tok_dst || tok_inter)) {
#pragma unroll
        for (int k = 0; k < KC; ++k) {
          const int n0 = (lane_r + k * lpr) * VEC;
          if (n0 >= N) continue;
          if (tok_dst) store_chunk<ST, VEC>(tok_dst + r * N + n0, &hs[j][k * VEC]);
          if (tok_inter) store_chunk<ST, VEC>(tok_inter + r * N + n0, &hs[j][k * VEC]);
        }
      }
    }
  }

  // Final store.
  if ((f & (SSU_F_DISABLE_UPDATE | SSU_F_DST_PER_TOKEN)) == 0) {
    int64_t d = s0;
    if (f & SSU_F_HAS_DST) {
      d = load_index(p.dst_index, p.index_dtype, b * p.dst_stride_b);
      if (is_pad(d, p.pad_slot_id)) return;
      if (d >= p.nslots) {
        if (reporter) report(p.error_word, SSU_BIT_INDEX);
        return;
      }
    }
    ST* base = state + d * p.state_stride_slot + head_off;
#pragma unroll
    for (int j = 0; j < MAXR; ++j) {
      if (j >= rpt) break;
      const int row = row0 + j * ngrp;
      if (row >= P) continue;
#pragma unroll
      for (int k = 0; k < KC; ++k) {
        const int n0 = (lane_r + k * lpr) * VEC;
        if (n0 < N) store_chunk<ST, VEC>(base + row * N + n0, &hs[j][k * VEC]);
      }
    }
  }
}

}  // namespace

#define SSU_KERNEL(name, ST, IT, VEC, KC)                                    \
  extern "C" __global__ void __launch_bounds__(SSU_CUDA_THREADS)             \
      name(const __grid_constant__ ssu_cuda_update_launch launch) {          \
    update_body<ST, IT, VEC, KC>(launch);                                    \
  }

// Vectorized: one or two 16-byte chunks of the row per lane.
#define SSU_KERNELS_FOR(sname, ST)                                           \
  SSU_KERNEL(ssu_update_##sname##_f32_vec1, ST, float, 16 / sizeof(ST), 1)  \
  SSU_KERNEL(ssu_update_##sname##_f16_vec1, ST, f16, 16 / sizeof(ST), 1)    \
  SSU_KERNEL(ssu_update_##sname##_bf16_vec1, ST, bf16, 16 / sizeof(ST), 1)  \
  SSU_KERNEL(ssu_update_##sname##_f32_gen, ST, float, 1, 8)                 \
  SSU_KERNEL(ssu_update_##sname##_f16_gen, ST, f16, 1, 8)                   \
  SSU_KERNEL(ssu_update_##sname##_bf16_gen, ST, bf16, 1, 8)

SSU_KERNELS_FOR(f32, float)
SSU_KERNELS_FOR(f16, f16)
SSU_KERNELS_FOR(bf16, bf16)
// f32 rows longer than 128 elements need two 16-byte chunks per lane.
SSU_KERNEL(ssu_update_f32_f32_vec2, float, float, 4, 2)
SSU_KERNEL(ssu_update_f32_f16_vec2, float, f16, 4, 2)
SSU_KERNEL(ssu_update_f32_bf16_vec2, float, bf16, 4, 2)
