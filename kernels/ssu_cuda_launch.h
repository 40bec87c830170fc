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
 * SSU_CUDA_THREADS/lanes_per_row row groups walk the tile's rows_per_block
 * rows; a head needs tiles_per_head = ceil(P / rows_per_block) blocks. Small
 * batches get smaller tiles, hence more blocks (dim tiling).
 *
 * Dynamic shared memory: the state tile at offset 0 (vectorized kernels only),
 * then the per-token and per-row operands at the offsets below, all staged
 * before the rows are processed so that the row loop reads shared memory only.
 *
 * Grid: a 1-D grid of batch * nheads * tiles_per_head blocks, ordered
 * (sequence, head, tile) with the tile fastest.
 */
#ifndef SSU_CUDA_LAUNCH_H_
#define SSU_CUDA_LAUNCH_H_

#include "ssu_mamba3_params.h"
#include "ssu_replay_params.h"
#include "ssu_update_params.h"

#define SSU_CUDA_THREADS 128
typedef struct ssu_cuda_update_launch {
  ssu_update_params p;
  int32_t lanes_per_row;   /* power of two, 1..32                          */
  int32_t rows_per_block;  /* rows of the tile a block owns               */
  int32_t tiles_per_head;  /* ceil(dim / rows_per_block)                   */
  /* byte offsets into dynamic shared memory (each 16-byte aligned) */
  int32_t off_B;   /* B of every token, f32 [T][N]                        */
  int32_t off_C;   /* C of every token, f32 [T][N]                        */
  int32_t off_dt;  /* step size, f32: [T] per head, [T][rows] per channel */
  int32_t off_x;   /* x, f32 [T][rows]                                    */
  int32_t off_z;   /* z, f32 [T][rows]                                    */
  int32_t off_D;   /* D, f32 [rows]                                       */
  int32_t off_A;   /* per-channel A, f32 [rows][N]                        */
  int32_t off_dst; /* per-token store slot, int64 [T] (-1: none)          */
  int32_t off_scale; /* int16 states: the tile's decode scales, f32 [rows] */
  int32_t reserved0;
} ssu_cuda_update_launch;

/* n / d == (umulhi(n, magic) + n) >> shift for 0 <= n < 2^31 */
typedef struct ssu_cuda_fastdiv {
  uint32_t magic, shift;
} ssu_cuda_fastdiv;

/*
 * The direct single-token kernels (kernels/ssu_direct.cu): warp w of the grid
 * (blocks of SSU_CUDA_THREADS) owns rows [wh * R, wh * R + R) of (sequence,
 * head) item = w / warps_per_head, wh = w % warps_per_head, where R =
 * chunks_per_lane * 32 / (chunks per row); a lane holds chunks_per_lane
 * (<= SSU_CUDA_DIRECT_K) 16-byte chunks of them. No shared memory.
 */
#define SSU_CUDA_DIRECT_K 4
typedef struct ssu_cuda_direct_launch {
  ssu_update_params p;
  ssu_cuda_fastdiv div_warps_per_head;
  ssu_cuda_fastdiv div_heads;
  ssu_cuda_fastdiv div_heads_per_group;
  int32_t warps;               /* batch * nheads * warps_per_head < 2^31   */
  int32_t warps_per_head;
  int32_t log2_chunks_per_row; /* N * sizeof(state) / 16 = 1 << this, <= 32 */
  int32_t chunks_per_lane;     /* 1..SSU_CUDA_DIRECT_K                      */
  int32_t ops_vec;             /* B and C rows 16-byte aligned: wide loads  */
} ssu_cuda_direct_launch;

/*
 * The Mamba-1 kernels (kernels/ssu_mamba1.cu), one token, N = 16, per-channel
 * A: block k owns rows [t * SSU_CUDA_M1_THREADS, +SSU_CUDA_M1_THREADS) of head
 * t / tiles_per_head (t = k % tiles, rows counted within the head) for the
 * sequences [(k / tiles) * seqs, +seqs), seqs <= SSU_CUDA_M1_MAX_SEQS.
 * Dynamic shared memory: SSU_CUDA_M1_THREADS / 32 * SSU_CUDA_M1_DEPTH * 512 *
 * sizeof(state) bytes (each warp's ring of its 32 rows).
 */
#define SSU_CUDA_M1_THREADS 128
#define SSU_CUDA_M1_MAX_SEQS 64
#define SSU_CUDA_M1_DEPTH 4 /* sequences per warp in shared memory at once */
typedef struct ssu_cuda_m1_launch {
  ssu_update_params p;
  int32_t tiles;          /* nheads * tiles_per_head                     */
  int32_t tiles_per_head; /* ceil(dim / SSU_CUDA_M1_THREADS)             */
  int32_t seqs;           /* sequences per block                         */
} ssu_cuda_m1_launch;

/*
 * The pipelined single-token kernels (kernels/ssu_pipelined.cu): a grid of
 * persistent blocks walks `items` = batch * nheads * tiles_per_head work
 * items with a stride of the grid size. Dynamic shared memory holds two
 * stages of `stage_bytes` each; within a stage the state tile sits at offset
 * 0 and the fp32 operands at the offsets below.
 */

typedef struct ssu_cuda_pipe_launch {
  ssu_update_params p;
  int64_t items;
  ssu_cuda_fastdiv div_tiles;           /* by tiles_per_head            */
  ssu_cuda_fastdiv div_heads;           /* by nheads                    */
  ssu_cuda_fastdiv div_heads_per_group; /* by heads_per_group           */
  ssu_cuda_fastdiv div_items_per_seq;   /* by nheads * tiles_per_head   */
  int32_t log2_dstate;      /* dstate is a power of two here              */
  int32_t row_stride;       /* x / z stride per token in a stage: the power
                               of two >= rows_per_tile                    */
  int32_t log2_row_stride;
  int32_t off_raw;          /* 0, or (one token, per-head A) the operands'
                               16-byte chunks as loaded, [B | C | x | z] in
                               the input dtype, copied by cp.async: B, C, x
                               and z rows 16-byte aligned, N and the tile
                               rows multiples of 16 / sizeof(input)        */
  int32_t lanes_per_row;  /* N / (16 / sizeof(state)), a power of two <= 32 */
  int32_t rows_per_tile;  /* <= 256                                         */
  int32_t tiles_per_head;
  int32_t stage_bytes;
  int32_t off_B;     /* f32 [T][N]; one token, per-head A, 16- and
                        8-bit states: 4 floats of padding after
                        every 16 / sizeof(state) (kPipePadBC)    */
  int32_t off_C;     /* f32 [T][N], the same                     */
  int32_t off_x;     /* f32 [T][row_stride]                      */
  int32_t off_z;     /* f32 [T][row_stride], silu(z)             */
  int32_t off_scale; /* f32 [rows], int16 decode scales          */
  int32_t off_scal;  /* f32 [2T+1]: per token step size and exp(A*dt), then D */
  int32_t off_A;       /* per-channel form: f32 [rows][N] A tile         */
  int32_t off_dt_rows; /* per-channel form: f32 [rows] step size         */
  int32_t off_D_rows;  /* per-channel form: f32 [rows] D                 */
  int32_t off_part;    /* f32 partial row sums: 0 = in the state tile's own
                          rows (T <= 4), else [rows][T][lanes_per_row]     */
  int32_t log2_heads_per_item; /* 0, or 1: head pairs (one token, per-head A,
                          8-bit states): an item is heads 2k and
                          2k + 1 of one group, whose state rows, scales,
                          x, z and out rows are each one run; div_heads is
                          then by nheads / 2 and off_scal holds both
                          heads' scalars                                   */
} ssu_cuda_pipe_launch;

/*
 * The pipelined Mamba-3 step kernels (kernels/ssu_mamba3_pipe.cu): a grid of
 * persistent blocks walks `items` = batch * nheads (sequence, head) pairs
 * with a stride of the grid size; a head is processed in chunks of
 * `chunk_rows` rows. One producer warp per block fills a two-stage
 * shared-memory ring (the chunk's state rows by cp.async, the head's B,
 * prev_B and C as f32, the chunk's per-row tables) while four consumer warps
 * compute the previous stage. Within a stage (`stage_bytes`, 16-byte aligned
 * offsets): a header at 0, then the arrays below.
 */
typedef struct ssu_cuda_m3_pipe_launch {
  ssu_mamba3_params p;
  int64_t items;           /* batch * nheads                               */
  int32_t chunk_rows;      /* rows of the head per stage                   */
  int32_t chunks_per_head; /* ceil(dim / chunk_rows)                       */
  int32_t stage_bytes;
  int32_t ops_vec;  /* B, C, prev_B readable as 16-byte vectors           */
  int32_t off_tile; /* state rows, [chunk_rows][N] in the state's dtype    */
  int32_t off_B;    /* f32 [R][N]; B, prev_B and C are adjacent           */
  int32_t off_Bp;   /* f32 [R][N], prev_B of the src slot                 */
  int32_t off_C;    /* f32 [R][N]                                         */
  int32_t off_xg;   /* f32 [chunk_rows][R], xproj * (gamma * x)           */
  int32_t off_xb;   /* f32 [chunk_rows][R], xproj * (beta * prev_x)       */
  int32_t off_w;    /* f32 [chunk_rows][R], readout weight                */
  int32_t off_e;    /* f32 [chunk_rows][R], D x xproj (times w with outproj) */
} ssu_cuda_m3_pipe_launch;

/*
 * The replay kernels (kernels/ssu_replay.cu): one block of SSU_CUDA_REPLAY_THREADS
 * per (sequence, head, tile of rows_per_block rows), ordered with the tile
 * fastest. A state row is spread over lanes_per_row lanes (a power of two
 * <= 32), each holding up to two 16-byte chunks. The call's inputs and the
 * committed ring entries are copied unconverted (input dtype) to dynamic
 * shared memory at the offsets below (16-byte aligned); the rest is f32.
 * Every block of a sequence counts itself in the high 16 bits of the slot's
 * pending counter; the last one writes the shared ring entries (B, delta)
 * and the counters, so no block reads a counter or entry another changed.
 */
#ifndef SSU_CUDA_REPLAY_THREADS
#define SSU_CUDA_REPLAY_THREADS 128
#endif
/* The warp-per-head replay kernels: one warp per (sequence, head, part of
 * rows_per_block rows; tiles_per_head parts), this many to a block of
 * SSU_CUDA_REPLAY_THREADS, each with its own slice of shared memory and no
 * block-wide barrier. */
#define SSU_CUDA_REPLAY_WARPS (SSU_CUDA_REPLAY_THREADS / 32)
typedef struct ssu_cuda_replay_launch {
  ssu_replay_params p;
  int32_t lanes_per_row;
  int32_t rows_per_block;
  int32_t tiles_per_head;
  int32_t off_Br;     /* [L][N] committed B entries, input dtype          */
  int32_t off_Bt;     /* [T][N] this call's B, input dtype                */
  int32_t off_C;      /* [T][N] input dtype                               */
  int32_t off_xr;     /* [L][rows] committed x entries, input dtype       */
  int32_t off_xt;     /* [T][rows] this call's x, input dtype             */
  int32_t off_z;      /* [T][rows] input dtype                            */
  int32_t off_delta;  /* per head [E] (committed, then the call's tokens);
                         per channel [L][rows] committed entries only     */
  int32_t off_dA;     /* [E] exp(A * delta), per-head A and delta only    */
  int32_t off_dtt;    /* [T] (per channel [T][rows]) this call's delta    */
  int32_t off_D;      /* [rows]                                           */
  int32_t off_y;      /* [T][rows] row sums                               */
  int32_t off_coef;   /* [T][E] closed-form weights, then [T] decays      */
  int32_t off_scale;  /* [rows] int16 decode scales                       */
  int32_t off_tile;   /* [rows][N] the checkpoint tile, in the state dtype
                         (per-head layouts)                              */
  int32_t warp_slice; /* warp-per-head kernels: bytes of shared memory per
                         warp; the offsets above are within a warp's slice
                         (rows = rows_per_block, no tile)                */
  int32_t group_share; /* warp-per-head kernels: 1 = a block's warps are
                          heads of one group and share its committed B
                          entries and B . C dots (below; off_Br unused)   */
  int32_t off_group_B;   /* block-level: [L][N] committed B, input dtype  */
  int32_t off_group_dot; /* block-level: [T][E] B_j . C_t                 */
  int32_t prefetch_steps; /* warp-per-head kernels: row steps (4 rows) asked
                             of L2 ahead of the one being read; <= the
                             register depth: none                        */
  int32_t early_entries; /* 1 = append steps write their new B and delta
                            entries as they have them, not the
                            sequence's last warp / block               */
  int32_t off_group_Bf;  /* warp-per-head kernels with group_share, 0 =
                            none: block-level [L + 2 T][N + N/8] f32 rows,
                            16 bytes of padding after every 32 elements
                            (no bank conflicts): a flush step's committed
                            B entries, then (f32 states) the call's B and
                            C rows; an append step's C rows (16-bit
                            states, several tokens)                     */
} ssu_cuda_replay_launch;

#endif /* SSU_CUDA_LAUNCH_H_ */
