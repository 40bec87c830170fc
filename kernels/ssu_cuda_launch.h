/*
 * The parameter block of the CUDA selective-state-update kernels: the
 * normalized problem plus the launch geometry the host chose for it. Passed
 * by value as the kernel's only parameter. Plain C; included by g++ and nvcc.
 *
 * Geometry. A block of SSU_CUDA_THREADS threads owns one (sequence, head)
 * pair and a tile of rows p of it. Each state row of N elements is spread
 * over `lanes_per_row` consecutive lanes (a power of two <= 32); a lane holds
 * KC chunks of VEC contiguous elements of the row (VEC*sizeof(state) = 16
 * bytes in the vectorized kernels, 1 element in the general ones), chunk k of
 * lane l starting at element (l + k*lanes_per_row)*VEC. The block's
 * SSU_CUDA_THREADS/lanes_per_row row groups each take `rows_per_thread` rows,
 * so one block covers rows_per_block = groups*rows_per_thread rows and a head
 * needs tiles_per_head = ceil(P / rows_per_block) blocks. Small batches get
 * fewer rows per thread, hence more blocks (dim tiling).
 *
 * Grid: a 1-D grid of batch * nheads * tiles_per_head blocks, ordered
 * (sequence, head, tile) with the tile fastest.
 */
#ifndef SSU_CUDA_LAUNCH_H_
#define SSU_CUDA_LAUNCH_H_

#include "ssu_update_params.h"

#define SSU_CUDA_THREADS 128
#define SSU_CUDA_MAX_ROWS_PER_THREAD 2

typedef struct ssu_cuda_update_launch {
  ssu_update_params p;
  int32_t lanes_per_row;   /* power of two, 1..32                          */
  int32_t rows_per_thread; /* 1..SSU_CUDA_MAX_ROWS_PER_THREAD               */
  int32_t rows_per_block;  /* SSU_CUDA_THREADS/lanes_per_row*rows_per_thread */
  int32_t tiles_per_head;  /* ceil(dim / rows_per_block)                   */
} ssu_cuda_update_launch;

#endif /* SSU_CUDA_LAUNCH_H_ */
