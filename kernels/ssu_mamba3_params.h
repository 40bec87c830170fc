/*
 * The normalized Mamba-3 step and rotary problems: POD structs filled by the
 * core after validation (src/core/validate_mamba3.cpp) and consumed by the
 * CPU loops and the CUDA kernels (by value). Plain C; included by g++ and
 * nvcc alike. Strides are in elements, 64-bit; axes a tensor does not have
 * get stride 0. The last axis of every per-call activation tensor and the
 * inner three axes of the state pool are dense.
 */
#ifndef SSU_MAMBA3_PARAMS_H_
#define SSU_MAMBA3_PARAMS_H_

#include <stdint.h>

/* ssu_mamba3_params.features */
#define SSU_M3_HAS_D 0x01u
#define SSU_M3_HAS_Z 0x02u       /* z and zproj                          */
#define SSU_M3_HAS_OUTPROJ 0x04u /* out is (Bt, H, P), else (Bt, R, H, P) */
#define SSU_M3_HAS_SRC 0x08u     /* else slot = b                        */
#define SSU_M3_HAS_DST 0x10u     /* else dst = src                       */
#define SSU_M3_UPDATE_PREV 0x20u /* store B, x into prev_B, prev_x        */

typedef struct ssu_mamba3_params {
  int64_t batch;  /* Bt */
  int64_t nheads; /* H  */
  int64_t dim;    /* P  */
  int64_t dstate; /* N  */
  int64_t rank;   /* R  */
  int64_t nslots; /* S  */
  int64_t pad_slot_id;

  uint32_t features; /* SSU_M3_* */
  int32_t state_dtype;
  int32_t input_dtype; /* x, B, C, z, out, prev_B, prev_x */
  int32_t A_dtype, dt_dtype, trap_dtype;
  int32_t D_dtype, xproj_dtype, zproj_dtype, outproj_dtype;
  int32_t index_dtype; /* src, dst */
  int32_t reserved0;

  /* pools */
  void* state; /* (S, H, P, N): h stride P*N, p stride N */
  int64_t state_stride_slot;
  void* prev_B; /* (S, R, H, N), n stride 1 */
  int64_t prev_B_stride_slot, prev_B_stride_r, prev_B_stride_h;
  void* prev_x; /* (S, H, P), p stride 1 */
  int64_t prev_x_stride_slot, prev_x_stride_h;

  /* per-call (b, h) scalars */
  const void* A;
  int64_t A_stride_b, A_stride_h;
  const void* dt;
  int64_t dt_stride_b, dt_stride_h;
  const void* trap;
  int64_t trap_stride_b, trap_stride_h;

  /* per-call activations; last axis dense */
  const void* B; /* (Bt, R, H, N) */
  int64_t B_stride_b, B_stride_r, B_stride_h;
  const void* C;
  int64_t C_stride_b, C_stride_r, C_stride_h;
  const void* x; /* (Bt, H, P) */
  int64_t x_stride_b, x_stride_h;
  const void* z;
  int64_t z_stride_b, z_stride_h;
  void* out; /* (Bt, H, P) with outproj (out_stride_r = 0), else (Bt, R, H, P) */
  int64_t out_stride_b, out_stride_r, out_stride_h;

  /* weights, any strides */
  const void* D; /* (H,) */
  int64_t D_stride_h;
  const void* xproj; /* (R, H, P) */
  int64_t xproj_stride_r, xproj_stride_h, xproj_stride_p;
  const void* zproj;
  int64_t zproj_stride_r, zproj_stride_h, zproj_stride_p;
  const void* outproj;
  int64_t outproj_stride_r, outproj_stride_h, outproj_stride_p;

  /* slot indices (Bt,) */
  const void* src_index;
  int64_t src_stride;
  const void* dst_index;
  int64_t dst_stride;

  uint32_t* error_word;

  /* A launch choice of the CUDA backend, not part of the problem (the core
   * leaves it 0): 1 = copy the head's state tile into shared memory first. */
  int32_t cuda_stage_state;
  int32_t reserved1;
} ssu_mamba3_params;

/* ssu_rotary_params.features */
#define SSU_ROT_HALVED 0x01u /* pairs (i, i + N/2), else (2i, 2i + 1) */
#define SSU_ROT_HAS_Q_BIAS 0x02u
#define SSU_ROT_HAS_K_BIAS 0x04u
#define SSU_ROT_HAS_SRC 0x08u
#define SSU_ROT_HAS_DST 0x10u

typedef struct ssu_rotary_params {
  int64_t batch;  /* Bt */
  int64_t nheads; /* H  */
  int64_t dstate; /* N  */
  int64_t rank;   /* R  */
  int64_t nangles; /* Sa, 1 <= Sa <= N/2 */
  int64_t nslots; /* S  */
  int64_t pad_slot_id;

  uint32_t features; /* SSU_ROT_* */
  int32_t qk_dtype;  /* q, k, q_out, k_out */
  int32_t rate_dtype, dt_dtype, q_bias_dtype, k_bias_dtype;
  int32_t index_dtype;
  int32_t reserved0;

  float* angle_state; /* (S, H, Sa), i stride 1 */
  int64_t angle_stride_slot, angle_stride_h;
  const void* angle_rate; /* (Bt, H, Sa) any strides */
  int64_t rate_stride_b, rate_stride_h, rate_stride_i;
  const void* dt; /* (Bt, H) */
  int64_t dt_stride_b, dt_stride_h;

  /* (Bt, R, H, N), last axis dense */
  const void* q;
  int64_t q_stride_b, q_stride_r, q_stride_h;
  const void* k;
  int64_t k_stride_b, k_stride_r, k_stride_h;
  void* q_out;
  int64_t q_out_stride_b, q_out_stride_r, q_out_stride_h;
  void* k_out;
  int64_t k_out_stride_b, k_out_stride_r, k_out_stride_h;
  /* (R, H, N), any strides */
  const void* q_bias;
  int64_t q_bias_stride_r, q_bias_stride_h, q_bias_stride_n;
  const void* k_bias;
  int64_t k_bias_stride_r, k_bias_stride_h, k_bias_stride_n;

  const void* src_index;
  int64_t src_stride;
  const void* dst_index;
  int64_t dst_stride;

  uint32_t* error_word;
} ssu_rotary_params;

#endif /* SSU_MAMBA3_PARAMS_H_ */
