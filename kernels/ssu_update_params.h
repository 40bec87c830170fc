/*
 * The normalized selective-state-update problem: one POD struct that the
 * core fills from the caller's descriptors after validation, and that every
 * backend consumes (the CPU loops and the CUDA kernels, which get it by value
 * as their only parameter). Plain C; included by g++ and nvcc alike.
 *
 * Every tensor is reduced to a base pointer and 64-bit element strides over
 * fixed logical axes. Axes a tensor does not have get stride 0, so one
 * indexing formula serves every form:
 *   token row of (b, t):  b * stride_b + (tok0[b] + t) * stride_t
 * where tok0[b] = cu_seqlens[b] in the varlen form (stride_b = 0 there) and 0
 * otherwise. Per-head tensors read along a per-channel axis have stride 0.
 * The last axis of x, B, C, z, out and the inner three axes of the state and
 * intermediate buffers are dense (stride 1 / P*N, N, 1).
 */
#ifndef SSU_UPDATE_PARAMS_H_
#define SSU_UPDATE_PARAMS_H_

#include <stdint.h>

/* ssu_update_params.features */
#define SSU_F_DT_SOFTPLUS 0x0001u
#define SSU_F_DISABLE_UPDATE 0x0002u /* no final and no per-token dst store */
#define SSU_F_HAS_D 0x0004u
#define SSU_F_HAS_DT_BIAS 0x0008u
#define SSU_F_HAS_Z 0x0010u
#define SSU_F_VARLEN 0x0020u
#define SSU_F_HAS_SRC 0x0040u       /* else slot = b                     */
#define SSU_F_HAS_DST 0x0080u       /* 1-D dst: final store goes there   */
#define SSU_F_DST_PER_TOKEN 0x0100u /* 2-D dst: store after every token  */
#define SSU_F_HAS_ACCEPTED 0x0200u  /* num_accepted_tokens selects src column */
#define SSU_F_HAS_INTER 0x0400u     /* intermediate_states buffer        */
#define SSU_F_HAS_INTER_INDEX 0x0800u
#define SSU_F_DT_PER_CHANNEL 0x1000u /* the step dt + dt_bias varies along P */
#define SSU_F_A_PER_CHANNEL 0x2000u
#define SSU_F_D_PER_CHANNEL 0x4000u
#define SSU_F_DT_BIAS_PER_CHANNEL 0x8000u
#define SSU_F_MULTI_TOKEN 0x10000u /* x had a token axis (or varlen)      */
#define SSU_F_STOCHASTIC 0x20000u  /* f16/bf16 state stores round stochastically */
#define SSU_F_LAUNCH_PDL 0x40000u  /* the plan's SSU_PLAN_PDL: launch with programmatic
                                      dependent launch (set at execute, not by the args) */
/* An i16 state (state_dtype == SSU_DTYPE_I16) always has state_scale, and
 * inter_scale when it has an intermediate buffer. */

typedef struct ssu_update_params {
  /* sizes */
  int64_t batch;           /* Bt                                        */
  int64_t ntokens;         /* T (1 for the single-token form)          */
  int64_t nheads;          /* H                                         */
  int64_t dim;             /* P                                         */
  int64_t dstate;          /* N                                         */
  int64_t ngroups;         /* G                                         */
  int64_t heads_per_group; /* H / G                                     */
  int64_t nslots;          /* S                                         */
  int64_t n_intermediate;  /* I (0 without intermediate_states)         */
  int64_t pad_slot_id;
  int64_t total_tokens;    /* TT in the varlen form, else Bt*T          */

  uint32_t features; /* SSU_F_* */
  /* dtypes (SSU_DTYPE_*) */
  int32_t state_dtype;
  int32_t input_dtype; /* x, B, C, z, out */
  int32_t dt_dtype;
  int32_t A_dtype;
  int32_t D_dtype;
  int32_t dt_bias_dtype;
  int32_t index_dtype;    /* src, dst (I32 or I64) */
  int32_t seqlen_dtype;   /* cu_seqlens            */
  int32_t accepted_dtype; /* num_accepted_tokens   */
  int32_t inter_index_dtype;
  int32_t reserved0;

  /* state pool (S, H, P, N): h stride P*N, p stride N, n stride 1 */
  void* state;
  int64_t state_stride_slot;

  /* per-token tensors: (b, t, h|g, p|n) */
  const void* x;
  int64_t x_stride_b, x_stride_t, x_stride_h;
  const void* dt;
  int64_t dt_stride_b, dt_stride_t, dt_stride_h, dt_stride_p;
  const void* B;
  int64_t B_stride_b, B_stride_t, B_stride_g;
  const void* C;
  int64_t C_stride_b, C_stride_t, C_stride_g;
  const void* z;
  int64_t z_stride_b, z_stride_t, z_stride_h;
  void* out;
  int64_t out_stride_b, out_stride_t, out_stride_h;

  /* per-head / per-channel parameters */
  const void* A;
  int64_t A_stride_h, A_stride_p, A_stride_n;
  const void* D;
  int64_t D_stride_h, D_stride_p;
  const void* dt_bias;
  int64_t dt_bias_stride_h, dt_bias_stride_p;

  /* slot indices (b, t); t stride 0 when 1-D */
  const void* src_index;
  int64_t src_stride_b, src_stride_t;
  const void* dst_index;
  int64_t dst_stride_b, dst_stride_t;
  const void* cu_seqlens;
  int64_t cu_seqlens_stride;
  const void* num_accepted;
  int64_t num_accepted_stride;

  /* intermediate buffer (I, T, H, P, N) */
  void* inter_states;
  int64_t inter_stride_i, inter_stride_t;
  const void* inter_index;
  int64_t inter_index_stride;

  uint32_t* error_word;

  /* int16 block-scaled states: decode scales (S, H, P) and (I, T, H, P), f32,
   * h stride P, p stride 1 */
  float* state_scale;
  int64_t state_scale_stride_slot;
  float* inter_scale;
  int64_t inter_scale_stride_i, inter_scale_stride_t;

  /* stochastic rounding (SSU_F_STOCHASTIC): the seed is read where the
   * update runs; Philox rounds */
  const uint64_t* sr_seed;
  uint32_t sr_rounds;
  uint32_t reserved1;
} ssu_update_params;

#endif /* SSU_UPDATE_PARAMS_H_ */
