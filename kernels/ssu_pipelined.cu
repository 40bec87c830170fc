// The pipelined update (algorithm cuda_pipelined): persistent
// blocks, each walking work items (sequence, head, row tile) with a stride of
// the grid size, with a two-stage shared-memory ring. While a block computes
// item i from one stage, the state tile of item i+1 is already in flight into
// the other (16-byte cp.async), its small operands (B, C, x, z) are on their
// way either into the stage as 16-byte chunks (one token, aligned rows:
// pipe_issue_raw) or into registers, its step size into registers, and the
// slot indices of item i+2 are being loaded. On sm_90 and later the
// stochastic-rounding and block-scaled kernels, whose row loops keep the
// issue slots busy, move the tile and the operand chunks with one bulk copy each
// (one thread, completion on an mbarrier) instead. A
// block therefore always has a tile's bytes in flight, instead of the
// load -> compute -> store phases of a block that owns one tile.
//
// Scope (the host checks it; everything else runs on ssu_update.cu):
// one token per sequence, or (f32 / f16 / bf16 states rounded to nearest)
// up to 8 tokens with the final-state store only; no varlen, per-token
// stores or intermediate buffer; per-head A and step size (Mamba-2),
// per-head or no D, or (one token, round to nearest) per-channel A as dense
// f32 rows with per-channel or per-head dt, dt_bias and D (Mamba-1; with N =
// 16 one lane per row, A read from global memory); state rows of N = lanes_per_row * VEC elements (one
// 16-byte chunk per lane, lanes_per_row a power of two), 16-byte aligned
// state rows. With one token every state format: f32, f16 and bf16 (round
// to nearest or stochastic), int16, int8 and e4m3 (round to nearest or
// stochastic) with row scales. The state step is the canonical one of
// ssu_math.h, so the stored bits equal the CPU backend's and the simple
// kernels'.
//
// Included by ssu_kernels.cu after ssu_update.cu, whose helpers it uses.
#include "ssu_cuda_launch.h"

namespace {

__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}

// The sum of `v` over a row's `lpr` lanes (a power of two <= 32): five
// butterfly levels that every lane always takes, the levels at or past the
// row's width selecting the lane's own value. Shuffles under a condition
// compile to a convergence check and a branch per level (about six
// instructions, twice the three here), although lpr is uniform.
__device__ __forceinline__ float pipe_row_sum(float v, int lpr) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = off < lpr ? v + o : v;
  }
  return v;
}

// log2 of a row's lanes (a power of two): the row-group arithmetic below is
// shifts by it (a division by the run-time lane count is a ~20-instruction
// sequence, and nvcc repeats the group geometry for every item).
static_assert(SSU_CUDA_THREADS == 128, "the shifts below take 128 threads");
constexpr int kLogThreads = 7;
// A thread's place in the row groups of SSU_CUDA_THREADS / lpr rows.
struct PipeGroups {
  int lpr, lg;     // lanes per row and its log2
  int lane_r;      // this lane within its row
  int grp, ngrp;   // this thread's row group, and the block's groups
  int gpw, q0;     // groups per warp, and this lane's group within the warp
  __device__ __forceinline__ explicit PipeGroups(const ssu_cuda_pipe_launch& L) {
    const int tid = threadIdx.x;
    lpr = L.lanes_per_row;
    lg = __ffs(lpr) - 1;
    lane_r = tid & (lpr - 1);
    grp = tid >> lg;
    ngrp = SSU_CUDA_THREADS >> lg;
    gpw = 32 >> lg;
    q0 = (tid & 31) >> lg;
  }
};

// n / d for 0 <= n < 2^31 through the host's magic number (ssu_cuda_fastdiv).
__device__ __forceinline__ int pipe_div(int n, const ssu_cuda_fastdiv& d) {
  const unsigned t = __umulhi(static_cast<unsigned>(n), d.magic);
  return static_cast<int>((t + static_cast<unsigned>(n)) >> d.shift);
}

// Where an item's state comes from and goes to. src < 0: padding (zero
// outputs, no pool touched); dst < 0: no store.
struct PipeSlots {
  int64_t src, dst;
};

// An item's slot indices as loaded (resolved one iteration later, so that
// the loads are in flight while the block computes). An int32 index is held
// zero-extended and gets its sign in pipe_resolve: extended at the load, the
// load was waited for there (long-scoreboard stalls, SR bf16 batch 256).
struct PipeIndexBits {
  uint64_t src, dst;
};

// An item's small operands in registers between their load and their
// staging: B and C ([B | C] of every token, 2*T*N <= OPS*128 values) and x
// and z ([x | z] of every token, 2*T*rows <= OPS*128 values), as loaded;
// thread t < T holds token t's step size and the per-head scalars.
template <typename IT, int OPS, int RPT>
struct PipeOps {
  IT bc[OPS];
  IT xz[OPS];
  float dt, A, D, bias;
  // Per-channel form: rows tid + 128 k (k < RPT) of the tile (rows <= 128 RPT).
  float dt_r[RPT], bias_r[RPT], D_r[RPT];
};

struct PipeItem {
  int b, h, g;  // the host keeps items (hence batch * nheads) below 2^31
  int r0, rows;
  bool reporter;  // reports this sequence's index errors (one block per sequence)
};

// Whether a kernel may run head pairs (ssu_cuda_pipe_launch::
// log2_heads_per_item): one token, per-head A, 8-bit rows. A 16-bit head of
// N = 128 fills a tile alone, and the pairs' live values cost the other
// kernels registers (spills per item).
template <typename ST, bool MT, bool PC>
constexpr bool kPipePairs = sizeof(ST) == 1 && !MT && !PC;

// PAIRS: the kernel may run head pairs (kPipePairs).
template <bool PAIRS>
__device__ __forceinline__ PipeItem pipe_item(const ssu_cuda_pipe_launch& L, int64_t item) {
  PipeItem it;
  const int i32 = static_cast<int>(item);
  const int bh = pipe_div(i32, L.div_tiles);
  const int tile = i32 - bh * L.tiles_per_head;
  // With head pairs (L.log2_heads_per_item = 1) an item is two adjacent
  // heads of one group, their rows one run (the host checked the layouts).
  const int k = PAIRS ? L.log2_heads_per_item : 0;
  it.b = pipe_div(bh, L.div_heads);
  it.h = (bh - it.b * (static_cast<int>(L.p.nheads) >> k)) << k;
  it.g = pipe_div(it.h, L.div_heads_per_group);
  it.r0 = tile * L.rows_per_tile;
  it.rows = min((static_cast<int>(L.p.dim) << k) - it.r0, L.rows_per_tile);
  it.reporter = it.h == 0 && tile == 0 && threadIdx.x == 0;
  return it;
}

// The sequence of an item (for loading its indices ahead).
__device__ __forceinline__ int pipe_item_seq(const ssu_cuda_pipe_launch& L, int64_t item) {
  return pipe_div(static_cast<int>(item), L.div_items_per_seq);
}

__device__ __forceinline__ uint64_t pipe_load_index_bits(const void* p, int32_t dtype, int64_t i) {
  if (dtype == SSU_DT_I64) return __ldg(static_cast<const unsigned long long*>(p) + i);
  return __ldg(static_cast<const unsigned*>(p) + i);
}

__device__ __forceinline__ int64_t pipe_index_value(uint64_t bits, int32_t dtype) {
  if (dtype == SSU_DT_I64) return static_cast<int64_t>(bits);
  return static_cast<int32_t>(static_cast<uint32_t>(bits));
}

__device__ __forceinline__ PipeIndexBits pipe_load_indices(const ssu_update_params& p,
                                                           int64_t b) {
  PipeIndexBits r;
  r.src = (p.features & SSU_F_HAS_SRC)
              ? pipe_load_index_bits(p.src_index, p.index_dtype, b * p.src_stride_b)
              : static_cast<uint64_t>(b);
  r.dst = (p.features & SSU_F_HAS_DST) && !(p.features & SSU_F_DISABLE_UPDATE)
              ? pipe_load_index_bits(p.dst_index, p.index_dtype, b * p.dst_stride_b)
              : 0;
  return r;
}

// Padding and out-of-range slots, exactly as the simple kernels treat them.
__device__ __forceinline__ PipeSlots pipe_resolve(const ssu_update_params& p,
                                                  const PipeIndexBits& r, bool reporter) {
  PipeSlots s{-1, -1};
  const int64_t src = (p.features & SSU_F_HAS_SRC) ? pipe_index_value(r.src, p.index_dtype)
                                                   : static_cast<int64_t>(r.src);
  const int64_t dst = pipe_index_value(r.dst, p.index_dtype);
  if (is_pad(src, p.pad_slot_id)) return s;
  if (src >= p.nslots) {
    if (reporter) report(p.error_word, SSU_BIT_INDEX);
    return s;
  }
  s.src = src;
  if (p.features & SSU_F_DISABLE_UPDATE) return s;
  s.dst = src;
  if (p.features & SSU_F_HAS_DST) {
    s.dst = dst;
    if (is_pad(dst, p.pad_slot_id)) {
      s.dst = -1;
    } else if (dst >= p.nslots) {
      if (reporter) report(p.error_word, SSU_BIT_INDEX);
      s.dst = -1;
    }
  }
  return s;
}

// Shared memory of one stage (byte offsets from the stage's start).
template <typename ST>
struct PipeStage {
  ST* state;
  float *B, *C, *x, *z, *scale, *scal;  // scal: step size, exp(A*dt), D
  float *A, *dt_r, *D_r;                  // per-channel form
  unsigned char* raw;                     // operands as loaded (L.off_raw)
  __device__ __forceinline__ PipeStage(const ssu_cuda_pipe_launch& L, int s) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char* base = smem + s * L.stage_bytes;
    raw = base + L.off_raw;
    state = reinterpret_cast<ST*>(base);
    B = reinterpret_cast<float*>(base + L.off_B);
    C = reinterpret_cast<float*>(base + L.off_C);
    x = reinterpret_cast<float*>(base + L.off_x);
    z = reinterpret_cast<float*>(base + L.off_z);
    scale = reinterpret_cast<float*>(base + L.off_scale);
    scal = reinterpret_cast<float*>(base + L.off_scal);
    A = reinterpret_cast<float*>(base + L.off_A);
    dt_r = reinterpret_cast<float*>(base + L.off_dt_rows);
    D_r = reinterpret_cast<float*>(base + L.off_D_rows);
  }
};

// The row-per-lane layout (RL: the Mamba-1 form with N = 16, one lane per
// state row): 16-byte chunk c of a tile of CPR chunks per row (row c / CPR,
// column c % CPR) is kept at chunk c ^ ((c >> 3) & (CPR - 1)), so that the
// eight lanes of a 16-byte shared-memory load phase, which read one column of
// eight consecutive rows, hit eight different groups of four banks.
template <int CPR>
__device__ __forceinline__ int pipe_rl_swizzle(int c) {
  return (c >> 3) & (CPR - 1);
}
template <int CPR>
__device__ __forceinline__ int pipe_rl_chunk(int c) {
  return c ^ pipe_rl_swizzle<CPR>(c);
}

// Bulk copies (sm_90 and later): one thread of the block moves an item's
// state tile, and its operand chunks where L.off_raw is set, with one
// cp.async.bulk each, completing on an mbarrier per stage and kind, instead
// of every thread issuing and tracking 16-byte cp.async copies. Older
// architectures take the cp.async path.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SSU_PIPE_BULK 1
#else
#define SSU_PIPE_BULK 0
#endif

__device__ __forceinline__ unsigned pipe_smem(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void pipe_mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(pipe_smem(bar)) : "memory");
}
// Arms the barrier's current phase for `bytes` of copies (one arrival).
__device__ __forceinline__ void pipe_mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile(
      "{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(
          pipe_smem(bar)),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void pipe_bulk_copy(void* smem, const void* gmem, uint32_t bytes,
                                               uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(pipe_smem(smem)),
      "l"(gmem), "r"(bytes), "r"(pipe_smem(bar))
      : "memory");
}
// Waits for the completion of the barrier's phase of parity `parity`.
__device__ __forceinline__ void pipe_mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(pipe_smem(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// The operand chunks of an item with one token (L.off_raw set): chunk j
// of [B | C | x | z] (nb chunks of B, nb of C, nx of x, nx of z, 16 bytes of
// the input dtype each), or -1 past the last. Thread tid copies chunks tid,
// tid + 128, ... and converts the same ones (pipe_stage_ops), so that its
// own cp.async completion is all it waits for.
template <typename IT>
struct PipeRawOps {
  static constexpr int VI = 16 / sizeof(IT);  // elements per chunk
  int nb, nx, total;
  // A thread's first chunk (then every 128th): runs of 8 chunks (128 bytes)
  // go to the warps in turn, so that the four warps share the conversions
  // instead of the first warps doing all of them while the others wait at
  // the next barrier; the silu of z (its 8 chunks at 64 rows of 16-bit
  // values) stays on one warp (spread over two, it cost that many more
  // instructions).
  static __device__ __forceinline__ int first(int tid) {
    return (tid & 7) | ((tid >> 5) << 3) | (((tid >> 3) & 3) << 5);
  }
  __device__ __forceinline__ PipeRawOps(const ssu_cuda_pipe_launch& L, const PipeItem& it) {
    nb = static_cast<int>(L.p.dstate) / VI;
    nx = it.rows / VI;
    total = 2 * nb + ((L.p.features & SSU_F_HAS_Z) ? 2 : 1) * nx;
  }
};

// Issues an item's operand chunks by cp.async (one token, L.off_raw set):
// a few 16-byte copies per block instead of a bounds-checked element load
// per value and thread.
template <typename ST, typename IT>
__device__ __forceinline__ void pipe_issue_raw(const ssu_cuda_pipe_launch& L, const PipeItem& it,
                                               const PipeSlots& sl, const PipeStage<ST>& st) {
  const ssu_update_params& p = L.p;
  if (sl.src < 0) return;
  const PipeRawOps<IT> o(L, it);
  constexpr int VI = PipeRawOps<IT>::VI;
  const IT* Bb = static_cast<const IT*>(p.B) + it.b * p.B_stride_b + it.g * p.B_stride_g;
  const IT* Cb = static_cast<const IT*>(p.C) + it.b * p.C_stride_b + it.g * p.C_stride_g;
  const IT* xb = static_cast<const IT*>(p.x) + it.b * p.x_stride_b + it.h * p.x_stride_h + it.r0;
  const IT* zb = static_cast<const IT*>(p.z) + it.b * p.z_stride_b + it.h * p.z_stride_h + it.r0;
#pragma unroll 1
  for (int j = PipeRawOps<IT>::first(threadIdx.x); j < o.total; j += SSU_CUDA_THREADS) {
    const int k = j - 2 * o.nb;
    const IT* src = j < o.nb       ? Bb + j * VI
                    : k < 0        ? Cb + (j - o.nb) * VI
                    : k < o.nx     ? xb + k * VI
                                   : zb + (k - o.nx) * VI;
    cp_async_16(st.raw + j * 16, src);
  }
}

// Issues an item's loads: the state tile (and block-scaled row scales) by cp.async
// into stage `st`, the operands into registers. T: tokens per sequence.
// The bulk copies of an item (thread 0; not for padding): its operand
// chunks [B | C | x | z] into the stage's raw region (L.off_raw set) on
// bars[2 + s], its state tile on bars[s].
template <typename ST, typename IT>
__device__ __forceinline__ void pipe_bulk_issue(const ssu_cuda_pipe_launch& L, const PipeItem& it,
                                                const PipeSlots& sl, const PipeStage<ST>& st,
                                                uint64_t* bars, int s) {
  const ssu_update_params& p = L.p;
  const int N = static_cast<int>(p.dstate);
  if (L.off_raw) {
    constexpr uint32_t EB = sizeof(IT);
    const uint32_t nb = N * EB, nx = it.rows * EB;
    const bool has_z = p.features & SSU_F_HAS_Z;
    pipe_mbar_expect(bars + 2 + s, 2 * nb + (has_z ? 2 : 1) * nx);
    const IT* in = static_cast<const IT*>(p.B) + it.b * p.B_stride_b + it.g * p.B_stride_g;
    pipe_bulk_copy(st.raw, in, nb, bars + 2 + s);
    in = static_cast<const IT*>(p.C) + it.b * p.C_stride_b + it.g * p.C_stride_g;
    pipe_bulk_copy(st.raw + nb, in, nb, bars + 2 + s);
    in = static_cast<const IT*>(p.x) + it.b * p.x_stride_b + it.h * p.x_stride_h + it.r0;
    pipe_bulk_copy(st.raw + 2 * nb, in, nx, bars + 2 + s);
    if (has_z) {
      in = static_cast<const IT*>(p.z) + it.b * p.z_stride_b + it.h * p.z_stride_h + it.r0;
      pipe_bulk_copy(st.raw + 2 * nb + nx, in, nx, bars + 2 + s);
    }
  }
  const uint32_t bytes = it.rows * N * sizeof(ST);
  pipe_mbar_expect(bars + s, bytes);
  pipe_bulk_copy(st.state,
                 static_cast<const ST*>(p.state) + sl.src * p.state_stride_slot +
                     it.h * p.dim * N + static_cast<int64_t>(it.r0) * N,
                 bytes, bars + s);
}

// TILE: whether to copy the state tile here (false: pipe_bulk_issue does).
template <bool PC, bool RL, bool MT, bool TILE, typename ST, typename IT, int OPS, int RPT>
__device__ __forceinline__ void pipe_issue(const ssu_cuda_pipe_launch& L, const PipeItem& it,
                                           const PipeSlots& sl, const PipeStage<ST>& st,
                                           PipeOps<IT, OPS, RPT>& ops, int T) {
  constexpr int VEC = 16 / sizeof(ST);
  const ssu_update_params& p = L.p;
  const int tid = threadIdx.x;
  if (sl.src < 0) return;
  const int N = static_cast<int>(p.dstate);
  const ST* src = static_cast<const ST*>(p.state) + sl.src * p.state_stride_slot +
                  it.h * p.dim * N + static_cast<int64_t>(it.r0) * N;
  const int chunks = it.rows * N / VEC;
  if constexpr (TILE && RL) {
    for (int c = tid; c < chunks; c += SSU_CUDA_THREADS)
      cp_async_16(st.state + pipe_rl_chunk<16 / VEC>(c) * VEC, src + c * VEC);
  } else if constexpr (TILE) {
    // Byte pointers stepped by the block's 2 KiB (the 64-bit element
    // address of `src + c * VEC` was rederived for every chunk).
    const unsigned char* g = reinterpret_cast<const unsigned char*>(src) + tid * 16;
    unsigned char* sm = reinterpret_cast<unsigned char*>(st.state) + tid * 16;
    for (int c = tid; c < chunks; c += SSU_CUDA_THREADS) {
      cp_async_16(sm, g);
      g += SSU_CUDA_THREADS * 16;
      sm += SSU_CUDA_THREADS * 16;
    }
  }
  if constexpr (StateFormat<ST>::kScaled) {
    const float* sc = p.state_scale + sl.src * p.state_scale_stride_slot + it.h * p.dim + it.r0;
    for (int r = tid; r < it.rows; r += SSU_CUDA_THREADS) cp_async_4(st.scale + r, sc + r);
  }
  const IT* Bb = static_cast<const IT*>(p.B) + it.b * p.B_stride_b + it.g * p.B_stride_g;
  const IT* Cb = static_cast<const IT*>(p.C) + it.b * p.C_stride_b + it.g * p.C_stride_g;
  const IT* xb = static_cast<const IT*>(p.x) + it.b * p.x_stride_b + it.h * p.x_stride_h + it.r0;
  const IT* zb = static_cast<const IT*>(p.z) + it.b * p.z_stride_b + it.h * p.z_stride_h + it.r0;
  const bool has_z = p.features & SSU_F_HAS_Z;
  if constexpr (!MT) {
    // One token: B | C and x | z as two runs each, no token arithmetic
    // (unless pipe_issue_raw has copied them).
    const int R = L.row_stride;
    if (PC || !L.off_raw) {  // block-uniform
#pragma unroll
      for (int k = 0; k < OPS; ++k) {
        const int j = tid + k * SSU_CUDA_THREADS;
        if (j < 2 * N) ops.bc[k] = __ldg(j < N ? Bb + j : Cb + (j - N));
        const int r = j < R ? j : j - R;
        if (r < it.rows && (j < R || (has_z && j < 2 * R)))
          ops.xz[k] = __ldg((j < R ? xb : zb) + r);
      }
    }
  } else {
    const int TN = T * N, TR = T * L.row_stride;
#pragma unroll
    for (int k = 0; k < OPS; ++k) {
      const int j = tid + k * SSU_CUDA_THREADS;
      if (j < 2 * TN) {
        const int jj = j < TN ? j : j - TN;
        const int t = jj >> L.log2_dstate, n = jj & (N - 1);
        ops.bc[k] = j < TN ? __ldg(Bb + t * p.B_stride_t + n) : __ldg(Cb + t * p.C_stride_t + n);
      }
      // x and z of token t at [t * R + r] (R = L.row_stride, a power of two).
      const int jj = j < TR ? j : j - TR;
      const int t = jj >> L.log2_row_stride, r = jj & (L.row_stride - 1);
      if (r < it.rows && (j < TR || (has_z && j < 2 * TR)))
        ops.xz[k] = j < TR ? __ldg(xb + t * p.x_stride_t + r) : __ldg(zb + t * p.z_stride_t + r);
    }
  }
  if constexpr (PC) {
    // The tile's per-channel A rows (dense f32, checked by the host), and
    // each row's step size, bias and D.
    // (RL: the rows read their A straight from global memory.)
    if constexpr (!RL) {
      const float* a = static_cast<const float*>(p.A) + it.h * p.A_stride_h +
                       static_cast<int64_t>(it.r0) * N;
      for (int c = tid; c < it.rows * N / 4; c += SSU_CUDA_THREADS) cp_async_16(st.A + 4 * c, a + 4 * c);
    }
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
      const int r = tid + k * SSU_CUDA_THREADS;
      if (r < it.rows) {
        const int64_t row = it.r0 + r;
        ops.dt_r[k] = load_param(p.dt, p.dt_dtype,
                                 it.b * p.dt_stride_b + it.h * p.dt_stride_h + row * p.dt_stride_p);
        ops.bias_r[k] = (p.features & SSU_F_HAS_DT_BIAS)
                            ? load_param(p.dt_bias, p.dt_bias_dtype,
                                         it.h * p.dt_bias_stride_h + row * p.dt_bias_stride_p)
                            : 0.f;
        ops.D_r[k] = (p.features & SSU_F_HAS_D)
                         ? load_param(p.D, p.D_dtype, it.h * p.D_stride_h + row * p.D_stride_p)
                         : 0.f;
      }
    }
    return;
  }
  // Token t's scalars of head it.h + e on thread 64 + (t << k) + e
  // (pipe_stage_ops; e = 0 without head pairs).
  const int k = kPipePairs<ST, MT, PC> ? L.log2_heads_per_item : 0;
  const int u = tid - 64;
  if (u >= 0 && u < (T << k)) {
    const int t = u >> k;
    const int64_t h = it.h + (u & ((1 << k) - 1));
    ops.dt = load_param(p.dt, p.dt_dtype,
                        it.b * p.dt_stride_b + t * p.dt_stride_t + h * p.dt_stride_h);
    ops.bias = (p.features & SSU_F_HAS_DT_BIAS)
                   ? load_param(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride_h)
                   : 0.f;
    ops.A = load_param(p.A, p.A_dtype, h * p.A_stride_h);
    ops.D = (p.features & SSU_F_HAS_D) ? load_param(p.D, p.D_dtype, h * p.D_stride_h) : 0.f;
  }
}

// One token with per-head A and a 16- or 8-bit state (the row loop of
// pipe_rows16): B and C carry 4 floats (16 bytes) of padding after every
// lane's 16 / sizeof(state) columns in the stage (pipe_layout on the host
// allocates them), so that the 8 lanes of a row, which read their columns
// 32 or 64 bytes apart, hit different banks (H200, int8 state batch 256:
// each of those 16-byte loads took 16 shared-memory wavefronts, not 4).
template <typename ST, bool MT, bool PC>
constexpr bool kPipePadBC = sizeof(ST) <= 2 && !MT && !PC;

// Writes an item's operands into its stage: fp32 B [T][N], C [T][N], x
// [T][rows], silu(z) [T][rows], and per token the step size and decay as
// the simple kernels compute them (scal[2t], scal[2t+1]), then D (scal[2T]).
template <bool PC, bool PAD_BC, typename ST, typename IT, int OPS, int RPT>
__device__ __forceinline__ void pipe_stage_ops(const ssu_cuda_pipe_launch& L, const PipeItem& it,
                                               const PipeSlots& sl, const PipeStage<ST>& st,
                                               const PipeOps<IT, OPS, RPT>& ops, int T) {
  const ssu_update_params& p = L.p;
  const int tid = threadIdx.x;
  if (sl.src < 0) return;
  const int N = static_cast<int>(p.dstate);
  const bool has_z = p.features & SSU_F_HAS_Z;
  const int TN = T * N, TR = T * L.row_stride;
  // B and C take bc_pad floats of padding after every VEC (kPipePadBC).
  constexpr int VEC = 16 / sizeof(ST);
  constexpr int bc_pad = PAD_BC ? 4 : 0;
  if (!PC && L.off_raw) {  // block-uniform: the chunks this thread copied
    // B, C and x are adjacent in the stage (off_C = off_B + 4N plus B's
    // padding, off_x = off_C + the same, with one token and N a multiple
    // of 4: pipe_layout); a chunk (VI elements) never straddles a pad.
    const PipeRawOps<IT> o(L, it);
    constexpr int VI = PipeRawOps<IT>::VI;
    const int zj = 2 * o.nb + o.nx;  // the first chunk of z
#pragma unroll 1
    for (int j = PipeRawOps<IT>::first(tid); j < o.total; j += SSU_CUDA_THREADS) {
      Chunk<IT, VI> c;
      c.u = *reinterpret_cast<const uint4*>(st.raw + j * 16);
      float v[VI];
#pragma unroll
      for (int e = 0; e < VI; ++e) v[e] = to_f32(c.e[e]);
      const int n = j * VI;
      float* d = st.B + n + min(n, 2 * N) / VEC * bc_pad;
      if (j >= zj) {
#pragma unroll
        for (int e = 0; e < VI; ++e) v[e] = silu(v[e]);
        d = st.z + (j - zj) * VI;
      }
#pragma unroll
      for (int e = 0; e < VI; e += 4)
        *reinterpret_cast<float4*>(d + e) = make_float4(v[e], v[e + 1], v[e + 2], v[e + 3]);
    }
  } else {
#pragma unroll
  for (int k = 0; k < OPS; ++k) {
    const int j = tid + k * SSU_CUDA_THREADS;
    if (j < TN) st.B[j + j / VEC * bc_pad] = to_f32(ops.bc[k]);
    else if (j < 2 * TN) st.C[j - TN + (j - TN) / VEC * bc_pad] = to_f32(ops.bc[k]);
    const int r = (j < TR ? j : j - TR) & (L.row_stride - 1);
    if (r < it.rows) {
      if (j < TR) st.x[j] = to_f32(ops.xz[k]);
      else if (has_z && j < 2 * TR) st.z[j - TR] = silu(to_f32(ops.xz[k]));
    }
  }
  }
  if constexpr (PC) {
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
      const int r = tid + k * SSU_CUDA_THREADS;
      if (r < it.rows) {
        float dt = ops.dt_r[k];
        if (p.features & SSU_F_HAS_DT_BIAS) dt += ops.bias_r[k];
        if (p.features & SSU_F_DT_SOFTPLUS) dt = softplus20(dt);
        st.dt_r[r] = dt;
        st.D_r[r] = ops.D_r[k];
      }
    }
    return;
  }
  // Token t's step size on thread 64 + t (at most 8 tokens; the first warp
  // issues the bulk copies, the second has the silu of z with 64 rows);
  // with head pairs (one token) head e's on thread 64 + e, its scalars at
  // scal[e * (2T + 1)].
  const int k = PAD_BC && sizeof(ST) == 1 ? L.log2_heads_per_item : 0;  // kPipePairs
  const int u = tid - 64;
  if (u >= 0 && u < (T << k)) {
    const int t = u >> k;
    float* const scal = st.scal + (u & ((1 << k) - 1)) * (2 * T + 1);
    float dt = ops.dt;
    if (p.features & SSU_F_HAS_DT_BIAS) dt += ops.bias;
    if (p.features & SSU_F_DT_SOFTPLUS) dt = softplus20(dt);
    scal[2 * t] = dt;
    scal[2 * t + 1] = ssu_math::exp(ops.A * dt);
    if (t == 0) scal[2 * T] = ops.D;
  }
}

// The Philox key schedule of a seed for the default 10 rounds, computed
// once per block (it depends on the seed only), so that a round costs its
// two wide multiplies and two three-input XORs.
struct PipeKeys {
  uint32_t k0[10], k1[10];
  // The keys of rounds i and i + 1 (i even): k0[i], k1[i], k0[i+1], k1[i+1].
  __device__ __forceinline__ uint4 pair(int i) const {
    return make_uint4(k0[i], k1[i], k0[i + 1], k1[i + 1]);
  }
};

// The same schedule in shared memory, [k0[0], k1[0], k0[1], k1[1], ...],
// read two rounds at a time where a round needs its keys. Held as values,
// ptxas keeps the 20 keys in uniform registers only between uses and
// recomputes them from the seed for every chunk (18 uniform adds per 8
// elements); one 16-byte shared load per two rounds is 5. The loads are
// volatile so that they stay where the rounds are (hoisted out of the row
// loop they would take 20 registers).
struct PipeSmemKeys {
  unsigned at;  // shared address of k0[0]
  // Held in a register: ptxas otherwise rebuilds the address from the CTA id
  // before every load (S2UR + ULEA, the S2UR's latency exposed).
  __device__ __forceinline__ explicit PipeSmemKeys(unsigned a) : at(a) {
    asm volatile("" : "+r"(at));
  }
  __device__ __forceinline__ uint4 pair(int i) const {
    uint4 k;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(k.x), "=r"(k.y), "=r"(k.z), "=r"(k.w)
                 : "r"(at + 8 * i));
    return k;
  }
};

__device__ __forceinline__ PipeKeys pipe_keys(uint64_t seed) {
  PipeKeys k;
#pragma unroll
  for (int i = 0; i < 10; ++i) {
    k.k0[i] = static_cast<uint32_t>(seed) + static_cast<uint32_t>(i) * 0x9E3779B9u;
    k.k1[i] = static_cast<uint32_t>(seed >> 32) + static_cast<uint32_t>(i) * 0xBB67AE85u;
  }
  return k;
}

// Philox rounds FIRST..9 (FIRST even) of NC counters side by side, k the
// keys of rounds FIRST and FIRST + 1 (each further pair is loaded while the
// two rounds before it run), then the counters' words in order.
template <int FIRST, int NC = 2, typename Keys>
__device__ __forceinline__ void pipe_sr_rounds(uint32_t* w, uint32_t* c0, uint32_t* c1,
                                               uint32_t* c2, uint32_t* c3, const Keys& keys,
                                               uint4 k) {
#pragma unroll
  for (int i = FIRST; i < 10; i += 2) {
    const uint4 kn = i + 2 < 10 ? keys.pair(i + 2) : k;
#pragma unroll
    for (int q = 0; q < NC; ++q) ssu_math::philox_round(c0[q], c1[q], c2[q], c3[q], k.x, k.y);
#pragma unroll
    for (int q = 0; q < NC; ++q) ssu_math::philox_round(c0[q], c1[q], c2[q], c3[q], k.z, k.w);
    k = kn;
  }
#pragma unroll
  for (int q = 0; q < NC; ++q) {
    w[4 * q] = c0[q];
    w[4 * q + 1] = c1[q];
    w[4 * q + 2] = c2[q];
    w[4 * q + 3] = c3[q];
  }
}

// The Philox words of a 16-byte chunk of 8 elements whose first element has
// pool offset L0, a multiple of 4 (the host guarantees it): two calls, their
// words in order (ssu_math::philox4x32 with the keys above for 10 rounds,
// the generic loop otherwise). With 10 rounds the two calls run round by
// round side by side, so that each round's keys serve both and their
// multiply chains overlap.
template <typename Keys>
__device__ __forceinline__ void pipe_sr_words(uint32_t* w, uint64_t seed, const Keys& keys,
                                              uint64_t L0, uint32_t rounds) {
  if (rounds == 10) {
    uint32_t c0[2], c1[2], c2[2] = {0, 0}, c3[2] = {0, 0};
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint64_t ctr = L0 + 4 * q;
      c0[q] = static_cast<uint32_t>(ctr);
      c1[q] = static_cast<uint32_t>(ctr >> 32);
    }
    pipe_sr_rounds<0>(w, c0, c1, c2, c3, keys, keys.pair(0));
  } else {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const ssu_math::u32x4 r = ssu_math::philox4x32(seed, L0 + 4 * q, rounds);
#pragma unroll
      for (int j = 0; j < 4; ++j) w[4 * q + j] = r.v[j];
    }
  }
}

// The first two Philox rounds of the offsets of an item whose offsets share
// their high word (the counter's c1): round 1 leaves c0 = c1 ^ k0, the same
// for every counter, so round 2's product of it is the item's (c0p, and
// ulo and x = high word ^ k1 of round 2), computed once per item.
struct PipeSrHead {
  uint32_t c0p, ulo, x;
};

template <typename Keys>
__device__ __forceinline__ PipeSrHead pipe_sr_head(const Keys& keys, uint64_t L_first) {
  const uint4 k = keys.pair(0);  // k0[0], k1[0], k0[1], k1[1]
  PipeSrHead hd;
  hd.c0p = static_cast<uint32_t>(L_first >> 32) ^ k.x;
  uint32_t uhi;
  ssu_math::mul_wide_u32(hd.c0p, 0xD2511F53u, hd.ulo, uhi);
  hd.x = uhi ^ k.w;
  return hd;
}

// pipe_sr_words with 10 rounds for NC / 2 chunks of such an item, chunk c's
// first element at the low offset word lo[c] (a multiple of 4; lo[c] + 4
// does not carry), its words at w + 8 c: rounds 1 and 2 cost one wide
// multiply each per counter instead of three for both, and the same words.
// (The chunks of a row pair run round by round together, each round's keys
// loaded once for both.)
template <int NC, typename Keys>
__device__ __forceinline__ void pipe_sr_words10(uint32_t* w, const Keys& keys,
                                                const PipeSrHead& hd, const uint32_t* lo) {
  uint32_t c0[NC], c1[NC], c2[NC], c3[NC];
  const uint4 k = keys.pair(0);
  const uint4 k2 = keys.pair(2);
#pragma unroll
  for (int q = 0; q < NC; ++q) {
    uint32_t l1, h1, l2, h2;
    ssu_math::mul_wide_u32(lo[q >> 1] + 4 * (q & 1), 0xD2511F53u, l1, h1);  // round 1: c0 * M1
    const uint32_t r1c2 = h1 ^ k.y;                            // round 1's c2 (c3 = l1)
    ssu_math::mul_wide_u32(r1c2, 0xCD9E8D57u, l2, h2);         // round 2: c2 * M0
    c0[q] = h2 ^ k.z;   // round 1's c1 is 0
    c1[q] = l2;
    c2[q] = l1 ^ hd.x;  // mulhi(M1, c0p) ^ c3 ^ k1[1]
    c3[q] = hd.ulo;
  }
  pipe_sr_rounds<2, NC>(w, c0, c1, c2, c3, keys, k2);
}

// The stochastically rounded bits of 8 values with their random words,
// exactly ssu_math::f32_to_bf16_sr / f32_to_f16_sr. Values that need those
// functions' special cases take them on a rarely executed branch; the common
// path is:
// - bf16: the sum of the value's bits and the word's low 16 bits (no carry
//   reaches the sign for a number), both upper halves packed by one byte
//   permute. The branch: a NaN (one unordered compare per pair of values).
// - f16 (sm_80 and later): the sum with the low 13 bits, as a float t; a
//   conversion toward zero of two values at once, which truncates the low 13
//   bits of a number in f16's normal range and gives an f16 subnormal or
//   zero for |t| below 2^-14; a paired f16 multiply by 1 that flushes
//   subnormals to zeros of their sign. The branch: a NaN or infinite value,
//   or one large enough that its sum may reach 2^16 (Inf in f16, where the
//   conversion would give the largest finite value).
// pipe_sr_pack_fast is the common path: *rare is set where a value needs
// the exact functions, whose results pipe_sr_pack_exact then gives.
template <typename ST>
__device__ __forceinline__ uint4 pipe_sr_pack_fast(const float* v, const uint32_t* w,
                                                   bool* rare_out) {
  uint32_t out[4];
  bool rare = false;
  if constexpr (std::is_same<ST, bf16>::value) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      rare |= v[2 * k] != v[2 * k] || v[2 * k + 1] != v[2 * k + 1];
      out[k] = __byte_perm(__float_as_uint(v[2 * k]) + (w[2 * k] & 0xffffu),
                           __float_as_uint(v[2 * k + 1]) + (w[2 * k + 1] & 0xffffu), 0x7632);
    }
  } else {
#if __CUDA_ARCH__ >= 800
    // The largest |v| whose sum stays below 2^16: 0x47800000 - 0x1fff.
    const float big = __uint_as_float(0x477FE001u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float t[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // Unordered: a NaN is rare too (its sum could carry into the sign).
        rare |= !(fabsf(v[2 * k + j]) < big);
        t[j] = __uint_as_float(__float_as_uint(v[2 * k + j]) + (w[2 * k + j] & 0x1fffu));
      }
      uint32_t h;
      asm("cvt.rz.f16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(t[1]), "f"(t[0]));
      // Times 1 with subnormals flushed: the f16 subnormals are the sums
      // below 2^-14, which become zeros of their sign.
      asm("mul.rn.ftz.f16x2 %0, %1, %2;" : "=r"(out[k]) : "r"(h), "r"(0x3C003C00u));
    }
#else
    rare = true;
#endif
  }
  *rare_out |= rare;
  return make_uint4(out[0], out[1], out[2], out[3]);
}

template <typename ST>
__device__ __forceinline__ uint4 pipe_sr_pack_exact(const float* v, const uint32_t* w) {
  uint32_t out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    out[k] = static_cast<uint32_t>(sr_bits<ST>(v[2 * k], w[2 * k])) |
             static_cast<uint32_t>(sr_bits<ST>(v[2 * k + 1], w[2 * k + 1])) << 16;
  return make_uint4(out[0], out[1], out[2], out[3]);
}

template <typename ST>
__device__ __forceinline__ uint4 pipe_sr_pack(const float* v, const uint32_t* w) {
  bool rare = false;
  const uint4 out = pipe_sr_pack_fast<ST>(v, w, &rare);
  return rare ? pipe_sr_pack_exact<ST>(v, w) : out;
}

// max(a, b), NaN if either is NaN (the canonical NaN).
__device__ __forceinline__ float pipe_max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// The encode factor of a block-scaled row (format ST) spread over `lpr`
// lanes (a power of two): from the row's largest magnitude, where a NaN
// wins as in ssu_math::int16_amax_step and a row holding Inf gets an Inf
// maximum. Returns the factor; *finite says whether every v * factor is a
// number.
template <typename ST, int E>
__device__ __forceinline__ float pipe_encode_factor(const float* hs, int lpr, bool* finite) {
  // The lane's maximum magnitude as a tree of NaN-propagating fp32 maxima
  // (the magnitudes are operand modifiers: one instruction per element),
  // then the row's over its lanes by butterfly shuffles of the whole warp
  // (every lane of the warp runs this; a row's lanes are an aligned group).
  // A redux.sync per row group ran once per group, one group after another
  // (H200, the int8 kernel: 13 % of its stall samples). The fp32 maximum
  // orders magnitudes as their bits do and gives a NaN for a NaN, as the
  // CPU's integer maximum of the magnitude bits does; the factor, codes and
  // scale of a NaN row are the same for any NaN pattern.
  float a[E];
#pragma unroll
  for (int e = 0; e < E; ++e) a[e] = fabsf(hs[e]);
#pragma unroll
  for (int w = 1; w < E; w *= 2)
#pragma unroll
    for (int e = 0; e + w < E; e += 2 * w) a[e] = pipe_max_nan(a[e], a[e + w]);
#pragma unroll
  for (int off = 1; off < 32; off *= 2)
    if (off < lpr) a[0] = pipe_max_nan(a[0], __shfl_xor_sync(0xffffffffu, a[0], off));
  const uint32_t m = __float_as_uint(a[0]);
  const float enc = StateFormat<ST>::encode_factor(a[0]);
  // A tiny nonzero maximum gives an infinite factor (0 * enc is NaN there).
  // (scaled_row_finite(enc) states the same rule from the factor alone; this
  // form, from the maximum's bits, measured 0.5-1 % faster in the int8
  // kernel on an H200.)
  *finite = m < 0x7f800000u && enc < 3.0e38f;
  return enc;
}

// Row sums are deferred (DEFER below: several tokens, 16- and 8-bit states): a lane
// does not reduce its row's partial sum across the row's lanes at once
// (five shuffle levels, each a branch on the run-time lane count, and an
// output store per row). It puts the partial into shared memory, and after
// the tile each lane of the warp sums one of the warp's rows (and tokens)
// from there, in the order of the butterfly
// reduction (level lpr/2 first), so the sum has the same bits, and stores
// its output. The partials of a row go into the row's own state bytes,
// which the row's lanes have read by then (T <= 4 partials of 4 bytes fit in
// a lane's 16-byte chunk), or into a separate stage region for T > 4.
//
// The partial of (row slot, token t; lane lane_r) sits at float (row *
// row_floats + t * lpr + lane_r) with the row's 16-byte columns XOR-swizzled
// by s = ((slot * T) ^ t) & smask (smask + 1 columns; none below 4 lanes per
// row), so that the lanes summing consecutive tasks (slot * T + t) read
// different banks; s changes with t by one XOR (a uniform value per token).
__device__ __forceinline__ int pipe_part_smask(int lpr) { return (lpr >> 2) - 1 + (lpr < 4); }

__device__ __forceinline__ int pipe_part_swizzle(int slot, int t, int T, int lpr) {
  return ((slot * T) ^ t) & pipe_part_smask(lpr);
}

// Butterfly levels OFF, OFF/2, ..., 1 of v, each a template instance: an
// inner loop bounded by the outer one's counter stays a loop over local
// memory in nvcc.
template <int OFF>
__device__ __forceinline__ void pipe_fold(float* v) {
#pragma unroll
  for (int l = 0; l < OFF; ++l) v[l] += v[l + OFF];
  if constexpr (OFF > 1) pipe_fold<OFF / 2>(v);
}

// The sum of a row's `lpr` partials in butterfly order: level off adds
// element l + off to element l for l < off, from off = lpr / 2 down to 1
// (what lane 0 of a shuffle-xor reduction computes; every lane of it ends
// with the same bits, since each addition commutes). One instance per row
// width, so that every index is a constant (registers, no local memory).
template <int LPR>
__device__ __forceinline__ float pipe_part_sum_n(const float* part, int s) {
  auto col = [&](int m) { return *reinterpret_cast<const float4*>(part + ((m ^ s) << 2)); };
  if constexpr (LPR == 4) {
    const float4 f = col(0);
    return (f.x + f.z) + (f.y + f.w);
  } else {
    // The first level as the columns arrive: v[l] = part[l] + part[l + LPR/2].
    constexpr int HC = LPR / 8;  // 16-byte columns per half
    float v[LPR / 2];
#pragma unroll
    for (int m = 0; m < HC; ++m) {
      const float4 a = col(m), b = col(m + HC);
      v[4 * m] = a.x + b.x;
      v[4 * m + 1] = a.y + b.y;
      v[4 * m + 2] = a.z + b.z;
      v[4 * m + 3] = a.w + b.w;
    }
    pipe_fold<LPR / 4>(v);
    return v[0];
  }
}

__device__ __forceinline__ float pipe_part_sum(const float* part, int lpr, int s) {
  switch (lpr) {
    case 32: return pipe_part_sum_n<32>(part, s);
    case 16: return pipe_part_sum_n<16>(part, s);
    case 8: return pipe_part_sum_n<8>(part, s);
    case 4: return pipe_part_sum_n<4>(part, s);
    case 2: return part[0] + part[1];
    default: return part[0];
  }
}

// A lane's 16-byte chunk of tile row r as fp32 (f32, f16 and bf16 states;
// block-scaled rows go through pipe_rows16). A lane past the tile's rows (valid
// false) reads nothing, since row 0's bytes may hold another warp's partial
// sums by then, and gets zeros.
template <typename ST, int VEC>
__device__ __forceinline__ void pipe_load_chunk(const PipeStage<ST>& st, int r, bool valid, int N,
                                                int n0, float* h) {
  static_assert(!StateFormat<ST>::kScaled, "block-scaled rows: pipe_rows16");
  Chunk<ST, VEC> c;
  c.u = valid ? *reinterpret_cast<const uint4*>(st.state + r * N + n0) : make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int v = 0; v < VEC; ++v) h[v] = to_f32(c.e[v]);
}

// A lane's VEC columns of B and C (fp32 in the stage) into registers.
template <int VEC>
__device__ __forceinline__ void pipe_load_cols(const float* B, const float* C, float* Bv,
                                               float* Cv) {
#pragma unroll
  for (int v = 0; v < VEC; v += 4) {
    const float4 b4 = *reinterpret_cast<const float4*>(B + v);
    const float4 c4 = *reinterpret_cast<const float4*>(C + v);
    Bv[v] = b4.x; Bv[v + 1] = b4.y; Bv[v + 2] = b4.z; Bv[v + 3] = b4.w;
    Cv[v] = c4.x; Cv[v + 1] = c4.y; Cv[v + 2] = c4.z; Cv[v + 3] = c4.w;
  }
}

// One state element of the per-channel form: h = h * exp(a * dt) + b * (dt *
// x) with two roundings, as on the CPU, and its term of the output sum.
__device__ __forceinline__ void pipe_pc_step(float& h, float a, float b, float c, float dt,
                                             float dtx, float& acc) {
  const float dA = ssu_math::exp(a * dt);
  h = h * dA + b * dtx;
  acc = fmaf(h, c, acc);
}

// A 16-byte chunk of block-scaled codes (int16, int8, e4m3) as fp32 values:
// code * rs, with rs the row's decode scale (the CPU's operations, so the
// same bits).
template <typename ST>
__device__ __forceinline__ void scaled_chunk_to_f32(const uint4& u, float rs, float* h,
                                                    uint32_t i8_magic = 0x4B400000u) {
  static_assert(StateFormat<ST>::kScaled, "block-scaled codes");
  constexpr int VEC = 16 / sizeof(ST);
  if constexpr (std::is_same<ST, int16_t>::value) {
    // Codes through the conversion pipe (one instruction, where the
    // mantissa trick of to_f32 takes three; 8 per lane and row keep that
    // pipe a fraction busy).
    Chunk<ST, VEC> c;
    c.u = u;
#pragma unroll
    for (int e = 0; e < VEC; ++e) h[e] = static_cast<float>(c.e[e]) * rs;
  } else if constexpr (std::is_same<ST, int8_t>::value) {
    // int8 codes, 16 per chunk (on the conversion pipe they would be its
    // limit): code + 128 (the sign bit flipped) as the low byte of 1.5 *
    // 2^23's pattern, one byte permute each, then one subtract gives the
    // code exactly. (With the pattern as a constant, ptxas makes it each
    // permute's immediate and moves the selector into a register, one more
    // instruction per element, which an empty asm around the pattern does
    // not prevent: callers in a row loop pass i8_magic from a shuffle.)
    const uint32_t wd[4] = {u.x ^ 0x80808080u, u.y ^ 0x80808080u, u.z ^ 0x80808080u,
                            u.w ^ 0x80808080u};
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        h[4 * k + j] =
            (__uint_as_float(__byte_perm(wd[k], i8_magic, 0x7650u + j)) - 12583040.0f) * rs;
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    // e4m3 codes two at a time through the hardware conversion to f16x2
    // (exact: every E4M3 value is an f16 value; the low byte goes to the
    // low half), then to fp32 (exact): about 3 instructions per element
    // where to_f32's integer decoder takes 8. A NaN code gives a NaN either
    // way, which the multiply by rs makes the GPU's canonical NaN.
    const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const unsigned short pair = static_cast<unsigned short>(wd[k] >> (16 * j));
        uint32_t h2;
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
        h[4 * k + 2 * j] = f.x * rs;
        h[4 * k + 2 * j + 1] = f.y * rs;
      }
#else
    // e4m3 codes through to_f32's integer and fp32 operations.
    Chunk<ST, VEC> c;
    c.u = u;
#pragma unroll
    for (int e = 0; e < VEC; ++e) h[e] = to_f32(c.e[e]) * rs;
#endif
  }
}

// A row's chunk of fp32 values h as block-scaled codes with the row's
// encode factor enc (pipe_encode_factor; finite: every h * enc is a
// number), rounded to nearest or (SR, e4m3) with the elements' Philox words w.
template <typename ST, bool SR>
__device__ __forceinline__ uint4 scaled_chunk_encode(const float* h, float enc, bool finite,
                                                     const uint32_t* w) {
  using F = StateFormat<ST>;
  constexpr int VEC = 16 / sizeof(ST);
  Chunk<ST, VEC> c;
  if constexpr (SR) {
    // A row of NaN or Inf stores 0x7F everywhere.
    if (finite) {
      if constexpr (std::is_same<ST, e4m3>::value) {
        return e4m3_chunk_sr_finite(h, enc, w);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) c.e[e] = F::encode_sr_finite(h[e], enc, w[e]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) c.e[e] = F::encode_sr(h[e], enc, w[e]);
    }
  } else {
    (void)w;
    // A finite row with a finite factor takes StateFormat's encode_finite
    // (no NaN test; no clamp for the integer formats).
    if (finite) {
      if constexpr (std::is_same<ST, e4m3>::value) {
        return e4m3_chunk_rn_finite(h, enc);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) c.e[e] = F::encode_finite(h[e], enc);
      }
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) c.e[e] = F::encode(h[e], enc);
    }
  }
  return c.u;
}

// The row loop of the 16- and 8-bit states (f16 and bf16 rounded to nearest
// or stochastically, int16, int8, e4m3 rounded to nearest or
// stochastically) with one token and per-head A and step size: one 16-byte
// chunk (VEC = 8 or 16 elements) per lane and row, row sums deferred (their
// partials go into the rows' own bytes). Row r = i * ngrp + grp of step i
// starts at tile element r * N; the lane's chunk of it sits at element
// (128 i + tid) * VEC, of the stage and of the destination alike, so that a
// step moves every address by a constant and the loop keeps pointers, not
// indices. 16-bit steps go two rows at a time where the kernels may hold
// that many registers (one warp barrier for both, the second row's loads in
// flight with the first's), rows known to exist; a last step or two of rows
// that may not exist takes predicated accesses.
template <typename ST, bool SR, int LPRC>
__device__ __forceinline__ void pipe_rows16(const ssu_cuda_pipe_launch& L, const PipeItem& it,
                                            const PipeStage<ST>& st, ST* dst,
                                            uint64_t L_row0, uint64_t seed, const PipeSmemKeys& keys,
                                            const float* Bs, const float* Cs, float dt,
                                            float dA, int row1, const float* scal1) {
  constexpr int VEC = 16 / sizeof(ST);
  using F = StateFormat<ST>;
  constexpr bool QUANT = F::kScaled;
  static_assert(sizeof(ST) <= 2 && (!SR || F::kSr), "16- and 8-bit states");
  // Two rows per step where the kernel may hold 96 registers (below). An
  // 8-bit chunk's 16 values (and 16 Philox words) leave no room for a
  // second row.
  constexpr bool PAIR = sizeof(ST) == 2 && (SR || QUANT);
  const int tid = threadIdx.x;
  // The row group geometry: from the lanes per row LPRC where the caller
  // knows them at compile time (the row maximum's shuffle levels, the
  // steps' strides and the partials' swizzle then fold into immediates;
  // read from the launch, ptxas recomputed them at every step), else from
  // the launch.
  const PipeGroups g(L);
  constexpr int kLgC = LPRC >= 32 ? 5 : LPRC >= 16 ? 4 : LPRC >= 8 ? 3 : LPRC >= 4 ? 2 : LPRC >= 2 ? 1 : 0;
  static_assert(LPRC == 0 || (1 << kLgC) == LPRC, "lanes per row: a power of two <= 32");
  const int lpr = LPRC ? LPRC : g.lpr;
  const int lg = LPRC ? kLgC : g.lg;
  const int lane_r = tid & (lpr - 1), grp = tid >> lg, ngrp = SSU_CUDA_THREADS >> lg,
            gpw = 32 >> lg, q0 = (tid & 31) >> lg;
  // Per-lane constants, held in registers.
  int smask = pipe_part_smask(lpr);
  if constexpr (LPRC == 0) asm volatile("" : "+r"(smask));
  unsigned char* const chunk0 = reinterpret_cast<unsigned char*>(st.state) + tid * 16;
  unsigned char* const row0 = chunk0 - lane_r * 16;  // the row's first byte
  // The lane's partial within its row's bytes: pipe_part_swizzle(i * gpw +
  // q0, 0, 1, lpr) = ((i * gpw) & smask) ^ (q0 & smask), the first term
  // uniform per step (bits of its own, as q0 < gpw).
  const int pofs = (((lane_r >> 2) ^ (q0 & smask)) << 4) | ((lane_r & 3) << 2);
  const float* const xg = st.x + grp;
  const float* const sg = st.scale + grp;
  ST* const dg = dst ? dst + tid * VEC : nullptr;
  const uint64_t Lg = L_row0 + static_cast<uint64_t>(tid) * VEC;
  const ssu_update_params& p = L.p;

  // int8 codes' byte permutes take 1.5 * 2^23's pattern from a register
  // (a shuffle, which ptxas does not fold): given it as a constant, ptxas
  // made it the permutes' immediate and moved each one's selector into a
  // register instead, one more instruction per element.
  [[maybe_unused]] const uint32_t i8_magic =
      std::is_same<ST, int8_t>::value ? __shfl_sync(0xffffffffu, 0x4B400000u, 0) : 0u;
  // Step i's chunk as fp32 (zeros for a row that does not exist).
  auto load = [&](int i, bool v, float* h) {
    Chunk<ST, VEC> c;
    c.u = v ? *reinterpret_cast<const uint4*>(chunk0 + i * (SSU_CUDA_THREADS * 16))
            : make_uint4(0, 0, 0, 0);
    if constexpr (QUANT) {
      scaled_chunk_to_f32<ST>(c.u, v ? sg[i * ngrp] : 0.f, h, i8_magic);
    } else if constexpr (std::is_same<ST, bf16>::value) {
      // A pair's two values straight from its word (to_f32 of the upper
      // element compiles to a permute and a shift).
      const uint32_t wd[4] = {c.u.x, c.u.y, c.u.z, c.u.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        h[2 * k] = __uint_as_float(wd[k] << 16);
        h[2 * k + 1] = __uint_as_float(wd[k] & 0xffff0000u);
      }
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) h[e] = to_f32(c.e[e]);
    }
  };
  // Head pairs: from row row1 on (the second head's first row; past the
  // tile otherwise) the lane's rows step with the second head's step size
  // and decay, scal1[0] and scal1[1], loaded when its step i1 comes (held
  // in registers for the whole tile, they cost the kernels spills).
  constexpr bool PAIRS = kPipePairs<ST, false, false>;
  [[maybe_unused]] const int i1 =
      PAIRS && row1 < it.rows ? (row1 - grp + ngrp - 1) >> (kLogThreads - lg) : 1 << 30;
  // The state step and the lane's partial of the row sum, put in the row's bytes.
  // The lane's B and C columns are read again for each row (or row pair):
  // held for the whole tile, their 16 registers made the kernels spill.
  auto step_bc = [&](int i, bool v, float* h, const float* Bv, const float* Cv) {
    const float dtx = dt * (v ? xg[i * ngrp] : 0.f);
    float acc = 0.f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      h[e] = h[e] * dA + Bv[e] * dtx;  // two roundings, as on the CPU
      acc = fmaf(h[e], Cv[e], acc);
    }
    const int sw = ((i * gpw) & smask) << 4;
    if (v) *reinterpret_cast<float*>(row0 + i * (SSU_CUDA_THREADS * 16) + (pofs ^ sw)) = acc;
  };
  auto step = [&](int i, bool v, float* h) {
    if constexpr (VEC > 8) {
      // 8-bit rows: the columns four at a time (16 of B and of C at once
      // made the kernels spill); the same operations in the same order.
      const float dtx = dt * (v ? xg[i * ngrp] : 0.f);
      float acc = 0.f;
#pragma unroll
      for (int e0 = 0; e0 < VEC; e0 += 4) {
        float Bv[4], Cv[4];
        pipe_load_cols<4>(Bs + e0, Cs + e0, Bv, Cv);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          h[e0 + e] = h[e0 + e] * dA + Bv[e] * dtx;  // two roundings, as on the CPU
          acc = fmaf(h[e0 + e], Cv[e], acc);
        }
      }
      const int sw = ((i * gpw) & smask) << 4;
      if (v) *reinterpret_cast<float*>(row0 + i * (SSU_CUDA_THREADS * 16) + (pofs ^ sw)) = acc;
    } else {
      float Bv[VEC], Cv[VEC];
      pipe_load_cols<VEC>(Bs, Cs, Bv, Cv);
      step_bc(i, v, h, Bv, Cv);
    }
  };
  // The row's new state, encoded and stored (and its decode scale).
  // The Philox words of the chunks of NR consecutive steps from step i, VEC
  // per chunk in runs of 8 (R10: the default rounds, one high offset word;
  // the runs' counters then run round by round together).
  PipeSrHead hd{0, 0, 0};
  auto words = [&](uint32_t* w, int i, auto r10, auto nr) {
    constexpr int NR = decltype(nr)::value;
    constexpr int R8 = VEC / 8;  // runs of 8 elements per chunk
    if constexpr (decltype(r10)::value) {
      uint32_t lo[NR * R8];
#pragma unroll
      for (int r = 0; r < NR; ++r)
#pragma unroll
        for (int q = 0; q < R8; ++q)
          lo[r * R8 + q] = static_cast<uint32_t>(Lg) + (i + r) * (SSU_CUDA_THREADS * VEC) + 8 * q;
      pipe_sr_words10<2 * NR * R8>(w, keys, hd, lo);
    } else {
#pragma unroll
      for (int r = 0; r < NR; ++r)
#pragma unroll
        for (int q = 0; q < R8; ++q)
          pipe_sr_words(w + r * VEC + 8 * q, seed, keys,
                        Lg + static_cast<uint64_t>(i + r) * (SSU_CUDA_THREADS * VEC) + 8 * q,
                        p.sr_rounds);
    }
  };
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  auto store = [&](int i, bool v, const float* h, auto r10) {
    Chunk<ST, VEC> c;
    float enc = 1.f;
    if constexpr (QUANT) {
      bool finite;
      enc = pipe_encode_factor<ST, VEC>(h, lpr, &finite);
      uint32_t w[SR ? VEC : 1];
      if constexpr (SR) words(w, i, r10, One{});
      c.u = scaled_chunk_encode<ST, SR>(h, enc, finite, w);
    } else if constexpr (SR) {
      uint32_t w[VEC];
      words(w, i, r10, One{});
      c.u = pipe_sr_pack<ST>(h, w);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) c.e[e] = from_f32<ST>(h[e]);
    }
    if (v) {
      __stcs(reinterpret_cast<uint4*>(dg + i * (SSU_CUDA_THREADS * VEC)), c.u);
      // The decode scale 1 / enc is stored after the tile (pipe_compute),
      // one division per lane for up to 32 rows instead of one per row
      // step: the row's encode factor waits in its bytes, past its partial
      // sums (float lpr of the row).
      if (QUANT && lane_r == 0)
        *reinterpret_cast<float*>(row0 + i * (SSU_CUDA_THREADS * 16) + lpr * 4) = enc;
    }
  };
  auto steps = [&](auto has_dst, auto r10) {
    // Steps whose rows all exist (8-bit rows do not use it).
    [[maybe_unused]] const int full = it.rows >> (kLogThreads - lg);
    const int iters = (it.rows + ngrp - 1) >> (kLogThreads - lg);
    int i = 0;
    if constexpr (PAIR) {
#pragma unroll 1
      for (; i + 2 <= full; i += 2) {
        float ha[VEC], hb[VEC];
        load(i, true, ha);
        load(i + 1, true, hb);
        // The rows' bytes take their partials below: all their lanes have read.
        __syncwarp();
        if constexpr (SR) {
          // One read of the columns for both rows. (The int16 kernels, at
          // 102 registers, measured 2.5 % slower with it.)
          float Bv[VEC], Cv[VEC];
          pipe_load_cols<VEC>(Bs, Cs, Bv, Cv);
          step_bc(i, true, ha, Bv, Cv);
          step_bc(i + 1, true, hb, Bv, Cv);
        } else {
          step(i, true, ha);
          step(i + 1, true, hb);
        }
        if constexpr (decltype(has_dst)::value) {
          if constexpr (SR) {
            // Both rows' common paths, then one branch for values that need
            // the exact conversion: the pair's Philox chains and packs form
            // one basic block, the four chains of the default rounds run
            // round by round.
            uint32_t w[2 * VEC];
            words(w, i, r10, Two{});
            const uint32_t* const wa = w;
            const uint32_t* const wb = w + VEC;
            bool rare = false;
            uint4 oa = pipe_sr_pack_fast<ST>(ha, wa, &rare);
            uint4 ob = pipe_sr_pack_fast<ST>(hb, wb, &rare);
            if (rare) {
              oa = pipe_sr_pack_exact<ST>(ha, wa);
              ob = pipe_sr_pack_exact<ST>(hb, wb);
            }
            __stcs(reinterpret_cast<uint4*>(dg + i * (SSU_CUDA_THREADS * VEC)), oa);
            __stcs(reinterpret_cast<uint4*>(dg + (i + 1) * (SSU_CUDA_THREADS * VEC)), ob);
          } else {
            store(i, true, ha, r10);
            store(i + 1, true, hb, r10);
          }
        }
      }
    } else if constexpr (sizeof(ST) == 2) {
      // One row per step (16-bit rows rounded to nearest). 8-bit rows take
      // the predicated loop below for every step: with this loop as well
      // they spilled.
#pragma unroll 1
      for (; i < full; ++i) {
        float h[VEC];
        load(i, true, h);
        __syncwarp();
        step(i, true, h);
        if constexpr (decltype(has_dst)::value) store(i, true, h, r10);
      }
    }
#pragma unroll 1
    for (; i < iters; ++i) {
      if constexpr (PAIRS) {
        if (i == i1) {
          dt = scal1[0];
          dA = scal1[1];
        }
      }
      const bool v = i * ngrp + grp < it.rows;
      float h[VEC];
      load(i, v, h);
      __syncwarp();
      step(i, v, h);
      if constexpr (decltype(has_dst)::value) store(i, v, h, r10);
    }
  };
  auto run = [&](auto r10) {
    if (dst)  // block-uniform
      steps(std::true_type{}, r10);
    else
      steps(std::false_type{}, r10);
  };
  // The default 10 Philox rounds decided once per item, not per chunk: the
  // row loop is then one basic block, in which ptxas interleaves a row's
  // Philox chains with the loads and arithmetic of the rows around it. (An
  // item whose offsets cross a multiple of 2^32 takes the general form.)
  if constexpr (SR) {
    const uint64_t L_last = L_row0 + static_cast<uint64_t>(it.rows) * p.dstate - 1;
    if (p.sr_rounds == 10 && (L_row0 >> 32) == (L_last >> 32)) {
      hd = pipe_sr_head(keys, L_row0);
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
  } else {
    run(std::false_type{});
  }
}

// Computes an item from its stage: one row per lane group at a time. With
// one token the lane's B and C columns stay in registers for the whole tile
// (f32 and per-channel kernels; the 16- and 8-bit ones run pipe_rows16); with T > 1
// (MT) a row's state stays in registers across the tokens and each token's
// B and C columns come from shared memory.
template <typename ST, typename IT, bool SR, bool MT, bool PC, bool RL>
__device__ __forceinline__ void pipe_compute(const ssu_cuda_pipe_launch& L, const PipeItem& it,
                                             const PipeSlots& sl, const PipeStage<ST>& st,
                                             uint64_t seed, const PipeSmemKeys& keys, int T) {
  constexpr int VEC = 16 / sizeof(ST);
  constexpr bool QUANT = StateFormat<ST>::kScaled;
  // Deferred row sums paid off where a row's reduction was a long chain
  // (T = 4: one per token and row, +35-39 %) and for 16-bit states (+5 %), but
  // cost the f32 and per-channel kernels 1-5 % (H200; the per-channel one
  // measured again with its cheaper exp): those reduce at once.
  constexpr bool DEFER = MT || (sizeof(ST) <= 2 && !PC);
  const ssu_update_params& p = L.p;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const PipeGroups g(L);
  const int lpr = g.lpr, lg = g.lg, lane_r = g.lane_r, grp = g.grp, ngrp = g.ngrp;
  const int gpw = g.gpw;               // groups per warp
  const int wgrp0 = (tid >> 5) * gpw;  // the warp's first group
  IT* const out = static_cast<IT*>(p.out) + it.b * p.out_stride_b + it.h * p.out_stride_h + it.r0;
  if (sl.src < 0) {
    for (int i = tid; i < T * it.rows; i += SSU_CUDA_THREADS) {
      const int t = MT ? i / it.rows : 0;
      out[t * p.out_stride_t + (i - t * it.rows)] = from_f32<IT>(0.f);
    }
    return;
  }
  const int N = static_cast<int>(p.dstate);
  const int n0 = lane_r * VEC;
  const int nbc = lane_r * (VEC + (kPipePadBC<ST, MT, PC> ? 4 : 0));  // its B and C columns
  // The lane's B and C columns for the whole tile (the f32 and per-channel
  // row loop below; unused, hence not loaded, elsewhere).
  float Bv[VEC], Cv[VEC];
  pipe_load_cols<VEC>(st.B + nbc, st.C + nbc, Bv, Cv);
  const float dt = PC ? 0.f : st.scal[0], dA = PC ? 0.f : st.scal[1],
              Dh = PC ? 0.f : st.scal[2 * T];
  // Head pairs (kPipePairs): the second head's first row in the tile (past
  // the tile otherwise); its step size, decay and D are scal[3..5].
  const bool pair = kPipePairs<ST, MT, PC> && L.log2_heads_per_item != 0;
  const int row1 = pair ? static_cast<int>(p.dim) : 1 << 30;
  const bool has_z = p.features & SSU_F_HAS_Z;
  const int64_t row0 = it.h * p.dim * N + static_cast<int64_t>(it.r0) * N;  // in a slot
  ST* const dst = sl.dst >= 0 ? static_cast<ST*>(p.state) + sl.dst * p.state_stride_slot + row0
                              : nullptr;
  const uint64_t L_row0 = static_cast<uint64_t>(sl.src * p.state_stride_slot + row0);
  if constexpr (RL) {
    // One lane per row of N = 16 (Mamba-1): no reduction across lanes and
    // one output per lane. A row's CPR chunk sums are added in the order of
    // the lane-group kernels' butterfly ((c0 + c2) + (c1 + c3), c0 + c1), so
    // the output has the same bits; the state step is the same. A (one f32
    // row per channel, shared by every sequence, hence in L2) is read from
    // global memory, so that the stages hold state tiles only (the host
    // takes 8 KiB tiles: on an H100 16 KiB were slower).
    constexpr int CPR = 16 / VEC;
    static_assert(PC && !MT && !SR && !QUANT, "row per lane: the per-channel RN form");
    const float4* const A4 = reinterpret_cast<const float4*>(
        static_cast<const float*>(p.A) + it.h * p.A_stride_h + static_cast<int64_t>(it.r0) * 16);
    // f32 rows (64 bytes): a row's new state goes back over its own bytes of
    // the stage, and each warp then stores its 32 rows as four 512-byte runs
    // (16 bytes a lane) instead of one 16-byte piece per row every 64 bytes
    // (16 lines per store instruction). On an H100: -12 % time at batch 64,
    // -4 % at 128, +2.6 % at 512. 16-bit rows (32 bytes, 8 lines per store
    // instruction) store from registers: there the round trip through shared
    // memory measured 2-5 % slower.
    constexpr bool VIA_STAGE = CPR == 4;
    // The warp's first tile chunk c0 is a multiple of 32 * CPR in every
    // pass, so chunk c0 + 32 m + lane sits at c0 + 32 m + pipe_rl_chunk(lane).
    const int lsw = pipe_rl_chunk<CPR>(lane);
    auto row = [&](const int r) {
      // Row r's chunk k sits at r * CPR + (k ^ sw) (pipe_rl_chunk, k < CPR).
      const int sw = pipe_rl_swizzle<CPR>(r * CPR);
      float4 arow[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) arow[q] = __ldg(A4 + r * 4 + q);
      const float dtr = st.dt_r[r];
      const float dtx = dtr * st.x[r];
      float acc[CPR];
#pragma unroll
      for (int k = 0; k < CPR; ++k) {
        float hs[VEC];
        pipe_load_chunk<ST, VEC>(st, r, true, 16, (k ^ sw) * VEC, hs);
        acc[k] = 0.f;
#pragma unroll
        for (int v = 0; v < VEC; v += 4) {
          const int n = k * VEC + v;
          const float4 a4 = arow[n >> 2];
          const float4 b4 = *reinterpret_cast<const float4*>(st.B + n);
          const float4 c4 = *reinterpret_cast<const float4*>(st.C + n);
          const float aa[4] = {a4.x, a4.y, a4.z, a4.w}, bb[4] = {b4.x, b4.y, b4.z, b4.w},
                      cc[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) pipe_pc_step(hs[v + j], aa[j], bb[j], cc[j], dtr, dtx, acc[k]);
        }
        if (dst) {  // block-uniform
          Chunk<ST, VEC> c;
#pragma unroll
          for (int v = 0; v < VEC; ++v) c.e[v] = from_f32<ST>(hs[v]);
          if constexpr (VIA_STAGE)
            *reinterpret_cast<uint4*>(st.state + r * 16 + (k ^ sw) * VEC) = c.u;
          else
            __stcs(reinterpret_cast<uint4*>(dst + (r * 16 + k * VEC)), c.u);
        }
      }
      const float sum = CPR == 4 ? (acc[0] + acc[CPR / 2]) + (acc[1] + acc[CPR - 1])
                                 : acc[0] + acc[CPR - 1];
      float y = sum + st.D_r[r] * st.x[r];
      if (has_z) y *= st.z[r];
      out[r] = from_f32<IT>(y);
    };
    // Each warp's runs of 32 rows from tile row rb on (after its rows' row()).
    auto store_runs = [&](const int rb) {
      __syncwarp();
      const int c0 = (rb + (tid & ~31)) * CPR;
      const int left = it.rows * CPR - c0;  // the tile's chunks from c0 on
      const uint4* const from = reinterpret_cast<const uint4*>(st.state + (c0 + lsw) * VEC);
      uint4* const to = reinterpret_cast<uint4*>(dst + (c0 + lane) * VEC);
      if (left >= 32 * CPR) {
#pragma unroll
        for (int m = 0; m < CPR; ++m) __stcs(to + 32 * m, from[32 * m]);
      } else {
#pragma unroll
        for (int m = 0; m < CPR; ++m)
          if (lane + 32 * m < left) __stcs(to + 32 * m, from[32 * m]);
      }
    };
    if constexpr (VIA_STAGE) {
#pragma unroll 1
      for (int rb = 0; rb < it.rows; rb += SSU_CUDA_THREADS) {
        if (rb + tid < it.rows) row(rb + tid);
        if (dst) store_runs(rb);  // block-uniform
      }
    } else {
      for (int r = tid; r < it.rows; r += SSU_CUDA_THREADS) row(r);
    }
    return;
  }
  const int iters = (it.rows + ngrp - 1) >> (kLogThreads - lg);
  float* const part = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(st.state) + L.off_part);
  const int row_floats = L.off_part ? T * lpr : 4 * lpr;
  const int q0 = g.q0;  // this lane's group within the warp
  if constexpr (MT) {
    // Several tokens: a lane group takes two rows at a time through the
    // tokens, so that the two rows' chains overlap and share each token's B,
    // C, step size and decay loads; a row's state stays in registers across
    // the tokens. Every group runs the same number of iterations (so
    // __syncwarp has all its lanes).
    const int lr4 = lane_r >> 2, lr3 = lane_r & 3;
    const int smask = pipe_part_smask(lpr);
    // Kept in a register: rederiving it from the launch parameters costs
    // five uniform instructions per use in the token loop.
    int smask4 = smask << 2;
    asm volatile("" : "+r"(smask4));
#pragma unroll 1
    for (int i = 0; i < iters; i += 2) {
      const int ra_raw = i * ngrp + grp, rb_raw = ra_raw + ngrp;
      const bool va = ra_raw < it.rows, vb = rb_raw < it.rows;
      const int ra = va ? ra_raw : 0, rb = vb ? rb_raw : 0;
      float ha[VEC], hb[VEC];
      pipe_load_chunk<ST, VEC>(st, ra, va, N, n0, ha);
      pipe_load_chunk<ST, VEC>(st, rb, vb, N, n0, hb);
      // The rows' bytes take their partial sums below: all their lanes have read.
      __syncwarp();
      // The rows' partials (pipe_part_swizzle; slots i * gpw + q0 and the
      // next iteration's): token t's column lr4 ^ s is, in floats,
      // ca4 ^ ((4 * t) & smask4).
      const int ca4 = (lr4 ^ (((i * gpw + q0) * T) & smask)) << 2;
      const int cb4 = (lr4 ^ (((i * gpw + gpw + q0) * T) & smask)) << 2;
      float* pa = part + ra * row_floats + lr3;
      float* pb = part + rb * row_floats + lr3;
      const float* const xa = st.x + ra;
      const float* const xb = st.x + rb;
#pragma unroll 1
      for (int t = 0; t < T; ++t) {
        const float2 sc = *reinterpret_cast<const float2*>(st.scal + 2 * t);  // dt, exp(A*dt)
        const float dtxa = sc.x * xa[t * L.row_stride];
        const float dtxb = sc.x * xb[t * L.row_stride];
        const float* Bt = st.B + t * N + n0;
        const float* Ct = st.C + t * N + n0;
        float acca = 0.f, accb = 0.f;
#pragma unroll
        for (int v = 0; v < VEC; v += 4) {
          const float4 b4 = *reinterpret_cast<const float4*>(Bt + v);
          const float4 c4 = *reinterpret_cast<const float4*>(Ct + v);
          const float bb[4] = {b4.x, b4.y, b4.z, b4.w}, cc[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            ha[v + j] = ha[v + j] * sc.y + bb[j] * dtxa;  // two roundings, as on the CPU
            hb[v + j] = hb[v + j] * sc.y + bb[j] * dtxb;
            acca = fmaf(ha[v + j], cc[j], acca);
            accb = fmaf(hb[v + j], cc[j], accb);
          }
        }
        const int ts4 = (4 * t) & smask4;
        float* const qa = pa + (ca4 ^ ts4);
        float* const qb = pb + (cb4 ^ ts4);
        if (va) *qa = acca;
        if (vb) *qb = accb;
        pa += lpr;
        pb += lpr;
      }
      if (dst) {  // block-uniform
        Chunk<ST, VEC> c;
        if (va) {
#pragma unroll
          for (int v = 0; v < VEC; ++v) c.e[v] = from_f32<ST>(ha[v]);
          __stcs(reinterpret_cast<uint4*>(dst + static_cast<int64_t>(ra) * N + n0), c.u);
        }
        if (vb) {
#pragma unroll
          for (int v = 0; v < VEC; ++v) c.e[v] = from_f32<ST>(hb[v]);
          __stcs(reinterpret_cast<uint4*>(dst + static_cast<int64_t>(rb) * N + n0), c.u);
        }
      }
    }
  } else if constexpr (sizeof(ST) <= 2 && !PC) {
    // Rows of N = 128 (the common state size) with the lanes per row as a
    // constant, others from the launch.
    constexpr int kLpr128 = 128 * static_cast<int>(sizeof(ST)) / 16;
    if (lpr == kLpr128)
      pipe_rows16<ST, SR, kLpr128>(L, it, st, dst, L_row0, seed, keys, st.B + nbc,
                                   st.C + nbc, dt, dA, row1, st.scal + 3);
    else
      pipe_rows16<ST, SR, 0>(L, it, st, dst, L_row0, seed, keys, st.B + nbc,
                             st.C + nbc, dt, dA, row1, st.scal + 3);
  } else {
    // f32 states, and the per-channel form (row sums at once).
    static_assert(!DEFER && !SR && !QUANT, "the f32 and per-channel row loop");
    // (Per-channel: a row's offset is added to dst, the lane's pointer spills at 80.)
    ST* const dst_lane = dst && !PC ? dst + n0 : nullptr;
    // Every group runs the same number of iterations. Two rows are
    // interleaved where a lane has little independent work per row (f32: 4
    // elements).
#pragma unroll(VEC == 4 ? 2 : 1)
    for (int i = 0; i < iters; ++i) {
      const int r_raw = i * ngrp + grp;
      const bool rv = r_raw < it.rows;
      const int r = rv ? r_raw : 0;
      float hs[VEC];
      pipe_load_chunk<ST, VEC>(st, r, rv, N, n0, hs);
      float acc = 0.f;
      if constexpr (PC) {
        // Per-channel A: dA = exp(A[r][n] * dt[r]) per element.
        const float dtx = st.dt_r[r] * st.x[r];
        const float dtr = st.dt_r[r];
#pragma unroll
        for (int v = 0; v < VEC; v += 4) {
          const float4 a4 = *reinterpret_cast<const float4*>(st.A + r * N + n0 + v);
          const float aa[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
          for (int j = 0; j < 4; ++j)
            pipe_pc_step(hs[v + j], aa[j], Bv[v + j], Cv[v + j], dtr, dtx, acc);
        }
      } else {
        const float dtx = dt * st.x[r];
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
          hs[v] = hs[v] * dA + Bv[v] * dtx;  // two roundings, as on the CPU
          acc = fmaf(hs[v], Cv[v], acc);
        }
      }
      acc = pipe_row_sum(acc, lpr);
      if (rv && lane_r == 0) {
        float y = acc + (PC ? st.D_r[r] : Dh) * st.x[r];
        if (has_z) y *= st.z[r];
        out[r] = from_f32<IT>(y);
      }
      if (dst) {  // block-uniform
        Chunk<ST, VEC> c;
#pragma unroll
        for (int v = 0; v < VEC; ++v) c.e[v] = from_f32<ST>(hs[v]);
        if (rv) __stcs(reinterpret_cast<uint4*>(PC ? dst + (r * N + n0) : dst_lane + r * N), c.u);
      }
    }
  }
  // Each lane sums tasks (row slot, token) of its warp and stores their
  // outputs: the warp's rows are i * ngrp + wgrp0 + q for q < gpw.
  if constexpr (DEFER) {
    __syncwarp();
    // Block-scaled rows (one token): pipe_rows16 left each stored row's
    // encode factor after its partials.
    [[maybe_unused]] float* const scale_dst =
        QUANT && dst ? p.state_scale + sl.dst * p.state_scale_stride_slot + it.h * p.dim + it.r0
                     : nullptr;
    const int tasks = iters * gpw * T;
    for (int tau = lane; tau < tasks; tau += 32) {
      const int slot = MT ? tau / T : tau;
      const int t = MT ? tau - slot * T : 0;
      const int i = slot >> (5 - lg);  // slot / gpw
      const int r = i * ngrp + wgrp0 + (slot - i * gpw);
      if (r < it.rows) {
        const float acc =
            pipe_part_sum(part + r * row_floats + t * lpr, lpr, pipe_part_swizzle(slot, t, T, lpr));
        const float xv = st.x[t * L.row_stride + r];
        float y = acc + (PC ? st.D_r[r] : kPipePairs<ST, MT, PC> && r >= row1 ? st.scal[5] : Dh) * xv;
        if (has_z) y *= st.z[t * L.row_stride + r];
        out[t * p.out_stride_t + r] = from_f32<IT>(y);
        if constexpr (QUANT) {
          static_assert(!MT, "block-scaled rows: one token");
          if (scale_dst) scale_dst[r] = 1.0f / part[r * row_floats + lpr];
        }
      }
    }
  }
}

// MODE 0: one token, per-head A and step size; 1: several tokens (MT);
// 2: one token, per-channel A, step size and D (PC, the Mamba-1 layout);
// 3: mode 2 with N = 16, one lane per state row (RL).
template <typename ST, typename IT, bool SR, int MODE>
__device__ __forceinline__ void pipe_body(const ssu_cuda_pipe_launch& L) {
  constexpr bool MT = MODE == 1, PC = MODE >= 2, RL = MODE == 3;
  constexpr int OPS = MT ? 8 : 4;
  const ssu_update_params& p = L.p;
  const int64_t items = L.items;
  const int64_t stride = gridDim.x;
  const int T = MT ? static_cast<int>(p.ntokens) : 1;
  const uint64_t seed = SR ? *p.sr_seed : 0;
  // The key schedule (stochastic rounding), visible to every thread after
  // the first barrier of the item loop.
  __shared__ __align__(16) uint32_t key_smem[SR ? 20 : 4];
  if (SR && threadIdx.x < 10) {  // round i = threadIdx.x, as pipe_keys
    const uint32_t i = threadIdx.x;
    key_smem[2 * i] = static_cast<uint32_t>(seed) + i * 0x9E3779B9u;
    key_smem[2 * i + 1] = static_cast<uint32_t>(seed >> 32) + i * 0xBB67AE85u;
  }
  const PipeSmemKeys keys{pipe_smem(key_smem)};
  // Rows per thread of the per-channel operands: f32 rows of one lane each
  // come in tiles of at most 128 rows (the host caps them).
  constexpr int RPT = RL && sizeof(ST) == 4 ? 1 : 2;
  PipeOps<IT, OPS, RPT> ops;

  // Prologue: the first item's loads (its indices waited for), the second
  // item's indices requested.
  int64_t item = blockIdx.x;
  PipeItem cur = pipe_item<kPipePairs<ST, MT, PC>>(L, item);
  PipeSlots cur_sl = pipe_resolve(p, pipe_load_indices(p, cur.b), cur.reporter);
  // Each item's copies form two cp.async groups where its operand chunks
  // are copied by cp.async (ops_group below): the chunks, then the state
  // tile, so that an item's operands can be staged while its tile may still
  // be in flight; one group, the tile's, otherwise. With bulk copies (BULK)
  // that group holds the row scales (block-scaled states) only, and the tile
  // and operand chunks complete on bars: the tile of stage 0 / 1, the
  // operands of stage 0 / 1; bit k of `parity` is the parity of bars[k]'s
  // next phase. A padding item (block-uniform) arms and waits for nothing.
  constexpr bool RAW = !MT && !PC;
  // Bulk copies where the row loop keeps the issue slots busy (stochastic
  // rounding, block-scaled rows): there they free them (H100, batch 256: SR
  // bf16 476 -> 465 us, int16 452 -> 442 us). The memory-bound
  // round-to-nearest kernels measured slower with them (bf16 394 -> 403 us,
  // f32 774 -> 800).
  constexpr bool BULK = RAW && (SR || StateFormat<ST>::kScaled) && SSU_PIPE_BULK;
  // The operand chunks form a cp.async group of their own only where they
  // are copied by cp.async (block-uniform). An empty group committed ahead
  // of each tile, with the waits counted for two groups, cost a third of the
  // several-token and per-channel kernels' speed and 2.5 % in the SR ones
  // (H100: T = 4 f32 state 342 -> 232 us at batch 64; Mamba-1 f32 94 -> 79
  // us at batch 256; SR bf16 418 -> 410 us at batch 256).
  const bool ops_group = RAW && !BULK && L.off_raw;
  __shared__ uint64_t bars[BULK ? 4 : 1];
  uint32_t parity = 0;
  if constexpr (BULK) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int k = 0; k < 4; ++k) pipe_mbar_init(bars + k);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
  }
  auto issue_ops = [&](const PipeItem& it, const PipeSlots& sl, const PipeStage<ST>& st, int s) {
    if constexpr (BULK) {
      if (sl.src >= 0 && threadIdx.x == 0) pipe_bulk_issue<ST, IT>(L, it, sl, st, bars, s);
    } else if (RAW && L.off_raw) {
      pipe_issue_raw<ST, IT>(L, it, sl, st);
    }
  };
  // Before staging an item's operands: their chunks have landed.
  auto wait_ops = [&](const PipeSlots& sl, int s) {
    if (BULK && L.off_raw) {
      if (sl.src >= 0) {
        pipe_mbar_wait(bars + 2 + s, (parity >> (2 + s)) & 1);
        parity ^= 4u << s;
      }
    } else if (ops_group) {
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // this thread's own copies
    }
  };
  auto commit_ops = [&] {
    if (ops_group) asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  {
    const PipeStage<ST> first(L, 0);
    issue_ops(cur, cur_sl, first, 0);
    commit_ops();
    pipe_issue<PC, RL, MT, !BULK>(L, cur, cur_sl, first, ops, T);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    wait_ops(cur_sl, 0);
    pipe_stage_ops<PC, kPipePadBC<ST, MT, PC>>(L, cur, cur_sl, first, ops, T);
  }
  PipeIndexBits next_bits{0, 0};
  if (item + stride < items) next_bits = pipe_load_indices(p, pipe_item_seq(L, item + stride));

#pragma unroll 1
  for (int s = 0; item < items; item += stride, s ^= 1) {
    const PipeStage<ST> here(L, s), there(L, s ^ 1);
    // The other stage was last read by the previous item's rows (and
    // written: partial sums), through the generic proxy, which the bulk
    // copies into it must follow.
    if constexpr (BULK) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int64_t nitem = item + stride;
    PipeItem nxt;
    PipeSlots nxt_sl{-1, -1};
    if (nitem < items) {
      nxt = pipe_item<kPipePairs<ST, MT, PC>>(L, nitem);
      nxt_sl = pipe_resolve(p, next_bits, nxt.reporter);
      issue_ops(nxt, nxt_sl, there, s ^ 1);
    }
    commit_ops();
    if (nitem < items) {
      pipe_issue<PC, RL, MT, !BULK>(L, nxt, nxt_sl, there, ops, T);
      if (nitem + stride < items) next_bits = pipe_load_indices(p, pipe_item_seq(L, nitem + stride));
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    // All but the next item's group(s): this item's tile has landed.
    if (ops_group)
      asm volatile("cp.async.wait_group 2;\n" ::: "memory");
    else
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    if (BULK && cur_sl.src >= 0) {
      pipe_mbar_wait(bars + s, (parity >> s) & 1);
      parity ^= 1u << s;
    }
    // The tile is visible to every thread that waited for it on its bulk
    // barrier; a barrier of the block is needed for the copies of other
    // threads (cp.async, the row scales of block-scaled states). The operands were staged
    // before the loop's first barrier. Without this one, a warp that is
    // done with its tile starts its rows (SR bf16, batch 256: 8.8 % of the
    // warps' stall samples sat here, waiting for the block's slowest warp).
    if constexpr (!BULK || StateFormat<ST>::kScaled) __syncthreads();
    pipe_compute<ST, IT, SR, MT, PC, RL>(L, cur, cur_sl, here, seed, keys, T);
    if (nitem < items) {
      wait_ops(nxt_sl, s ^ 1);
      pipe_stage_ops<PC, kPipePadBC<ST, MT, PC>>(L, nxt, nxt_sl, there, ops, T);
    }
    cur = nxt;
    cur_sl = nxt_sl;
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace

// At most 80 registers (6 resident blocks, which the two stages of a 16 KiB
// tile also allow); block-scaled rows (the row maximum) and several tokens (two
// rows in flight, whose stages with B and C of every token allow 5 blocks at
// T = 4 anyway) may use 102 (5 blocks) instead of spilling. The stochastic
// kernels take 128 (4 blocks): at 96 their row loop (a pair of rows, four
// Philox chains and both rows' packing in one basic block) spilled, and
// with its Philox in blocks of their own it ran 7 % slower (H100, SR bf16
// batch 256: 462 us at 5 blocks, 434 us at 4).
#define SSU_PIPE_KERNEL(name, ST, IT, SR, MODE)                                   \
  extern "C" __global__ void __launch_bounds__(                                   \
      SSU_CUDA_THREADS, SR ? 4 : MODE == 1 || StateFormat<ST>::kScaled ? 5 : 6)         \
      name(const __grid_constant__ ssu_cuda_pipe_launch launch) {                 \
    pdl_wait();                                                                   \
    pipe_body<ST, IT, SR, MODE>(launch);                                          \
  }
#define SSU_PIPE_KERNELS_FOR(sname, ST, SR, MODE, suffix)                 \
  SSU_PIPE_KERNEL(ssu_pipe_##sname##_f32##suffix, ST, float, SR, MODE)    \
  SSU_PIPE_KERNEL(ssu_pipe_##sname##_f16##suffix, ST, f16, SR, MODE)      \
  SSU_PIPE_KERNEL(ssu_pipe_##sname##_bf16##suffix, ST, bf16, SR, MODE)

SSU_PIPE_KERNELS_FOR(f32, float, false, 0, )
SSU_PIPE_KERNELS_FOR(f16, f16, false, 0, )
SSU_PIPE_KERNELS_FOR(bf16, bf16, false, 0, )
SSU_PIPE_KERNELS_FOR(i16, int16_t, false, 0, )
SSU_PIPE_KERNELS_FOR(i8, int8_t, false, 0, )
SSU_PIPE_KERNELS_FOR(f8e4m3, e4m3, false, 0, )
SSU_PIPE_KERNELS_FOR(f16, f16, true, 0, _sr)
SSU_PIPE_KERNELS_FOR(bf16, bf16, true, 0, _sr)
SSU_PIPE_KERNELS_FOR(f8e4m3, e4m3, true, 0, _sr)
// Several tokens per sequence (final-state store), round to nearest.
SSU_PIPE_KERNELS_FOR(f32, float, false, 1, _mt)
SSU_PIPE_KERNELS_FOR(f16, f16, false, 1, _mt)
SSU_PIPE_KERNELS_FOR(bf16, bf16, false, 1, _mt)
// Per-channel A, step size and D (Mamba-1), one token, round to nearest.
SSU_PIPE_KERNELS_FOR(f32, float, false, 2, _pc)
SSU_PIPE_KERNELS_FOR(f16, f16, false, 2, _pc)
SSU_PIPE_KERNELS_FOR(bf16, bf16, false, 2, _pc)
// The same with N = 16, one lane per state row (Mamba-1 as released).
SSU_PIPE_KERNELS_FOR(f32, float, false, 3, _pc16)
SSU_PIPE_KERNELS_FOR(f16, f16, false, 3, _pc16)
SSU_PIPE_KERNELS_FOR(bf16, bf16, false, 3, _pc16)
