/*
 * The normalized replay (checkpointed decode) problem: the call seen as an
 * update (ssu_update_params: the checkpoint pool, the per-token inputs, the
 * slot index as src_index) plus the ring and its counters. Filled by the
 * core after validation, consumed by the CPU loops and the CUDA kernels.
 * Plain C; included by g++ and nvcc alike.
 *
 * Ring tensors are base pointers and 64-bit element strides over (slot,
 * entry, head|group[, row]); their last axis is dense.
 */
#ifndef SSU_REPLAY_PARAMS_H_
#define SSU_REPLAY_PARAMS_H_

#include <stdint.h>

#include "ssu_update_params.h"

/* ssu_replay_params.rflags */
#define SSU_RF_HAS_ACCEPTED 0x1u /* num_accepted given                      */
#define SSU_RF_FLUSH_OP 0x2u     /* the flush op: no tokens, fold and reset  */
#define SSU_RF_DT_RING_PER_CHANNEL 0x4u /* dt ring is (S, L, H, P)          */

typedef struct ssu_replay_params {
  /* The call as an update. For the flush op: batch = K listed slots,
   * ntokens = 0, no per-token tensors; A, the pool and src_index are set. */
  ssu_update_params u;

  int64_t ring_len; /* L */
  uint32_t rflags;  /* SSU_RF_* */
  int32_t accepted_dtype;

  /* x ring (S, L, H, P), input dtype */
  void* ring_x;
  int64_t ring_x_stride_s, ring_x_stride_l, ring_x_stride_h;
  /* B ring (S, L, G, N), input dtype */
  void* ring_B;
  int64_t ring_B_stride_s, ring_B_stride_l, ring_B_stride_g;
  /* delta ring (S, L, H[, P]) f32; stride_p is 0 for the per-head form */
  float* ring_dt;
  int64_t ring_dt_stride_s, ring_dt_stride_l, ring_dt_stride_h, ring_dt_stride_p;
  /* counters (S,) int32 */
  int32_t* committed;
  int64_t committed_stride;
  int32_t* pending;
  int64_t pending_stride;
  /* num_accepted (Bt,) int32/int64 */
  const void* num_accepted;
  int64_t num_accepted_stride;
} ssu_replay_params;

#endif /* SSU_REPLAY_PARAMS_H_ */
