// The Mamba-1 form with N = 16 in one token (per-channel A, f32 / f16 /
// bf16 states rounded to nearest): a lane owns one state row (a channel of
// a head) and steps it for each of a run of sequences; extern "C" entry
// points ssu_m1_<state>_<input>.
//
// Why a kernel of its own: a Mamba-1 row is 16 elements (64 bytes of f32),
// so whatever a kernel does per item (a tile of rows of one sequence:
// staging, addresses, barriers) weighs as much as the rows' arithmetic. A
// block here owns kM1Threads rows of one head and `seqs` consecutive
// sequences. It reads the rows' A (16 f32 per row, shared by every
// sequence), dt_bias and D once, the sequences' slots, B and C once into
// shared memory; then each warp streams its 32 rows through the sequences
// with the next kM1Depth - 1 sequences' rows in flight (a ring in the warp's
// own shared memory), with no block barrier in the loop. The arithmetic is
// the pipelined _pc16 kernels' (ssu_pipelined.cu, pipe_pc_step): the same
// state bits, and the output's chunk sums added in the same order, so the
// same output bits.
//
// Form (the host checks it, cuda_backend.cpp): one token, no varlen, per-token
// or intermediate stores; A per channel as dense, 16-byte aligned f32 rows
// of 16; a 16-byte aligned pool whose slot stride is whole rows.

namespace {

constexpr int kM1Threads = SSU_CUDA_M1_THREADS;
// Sequences a block may own (its slots, B and C rows in shared memory).
constexpr int kM1MaxSeqs = SSU_CUDA_M1_MAX_SEQS;
// Sequences of a warp's rows in shared memory: this one's and the next ones.
constexpr int kM1Depth = SSU_CUDA_M1_DEPTH;

template <typename ST, typename IT>
__device__ __forceinline__ void m1_body(const ssu_cuda_m1_launch& L) {
  constexpr int VEC = 16 / sizeof(ST);
  constexpr int CPR = 16 / VEC;  // 16-byte chunks per row of 16 elements
  __shared__ int64_t s_src[kM1MaxSeqs], s_dst[kM1MaxSeqs];
  __shared__ __align__(16) float s_B[kM1MaxSeqs][16];
  __shared__ __align__(16) float s_C[kM1MaxSeqs][16];

  const ssu_update_params& p = L.p;
  const uint32_t f = p.features;
  const int tid = threadIdx.x;
  const int run = static_cast<int>(blockIdx.x / L.tiles);
  const int tile = static_cast<int>(blockIdx.x - run * L.tiles);
  const int64_t h = tile / L.tiles_per_head;
  const int P = static_cast<int>(p.dim);
  const int r = static_cast<int>(tile - h * L.tiles_per_head) * kM1Threads + tid;
  const bool valid = r < P;
  const int64_t b0 = static_cast<int64_t>(run) * L.seqs;
  const int nb = static_cast<int>(min(static_cast<int64_t>(L.seqs), p.batch - b0));
  const int64_t g = h / p.heads_per_group;

  // The run's slots (-1: padding, or no store; as the pipelined kernels
  // resolve them), B and C rows.
  for (int i = tid; i < nb; i += kM1Threads) {
    const int64_t b = b0 + i;
    const PipeSlots sl = pipe_resolve(p, pipe_load_indices(p, b), tile == 0);
    s_src[i] = sl.src;
    s_dst[i] = sl.dst;
  }
  for (int i = tid; i < nb * 16; i += kM1Threads) {
    const int64_t b = b0 + (i >> 4);
    const int n = i & 15;
    s_B[i >> 4][n] = to_f32(static_cast<const IT*>(p.B)[b * p.B_stride_b + g * p.B_stride_g + n]);
    s_C[i >> 4][n] = to_f32(static_cast<const IT*>(p.C)[b * p.C_stride_b + g * p.C_stride_g + n]);
  }
  // The row's own operands, for every sequence of the run.
  float A[16];
  float bias = 0.f, Dr = 0.f;
  if (valid) {
    const float4* const A4 = reinterpret_cast<const float4*>(
        static_cast<const float*>(p.A) + h * p.A_stride_h + r * p.A_stride_p);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 a = __ldg(A4 + q);
      A[4 * q] = a.x;
      A[4 * q + 1] = a.y;
      A[4 * q + 2] = a.z;
      A[4 * q + 3] = a.w;
    }
    if (f & SSU_F_HAS_DT_BIAS)
      bias = load_param(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride_h + r * p.dt_bias_stride_p);
    if (f & SSU_F_HAS_D) Dr = load_param(p.D, p.D_dtype, h * p.D_stride_h + r * p.D_stride_p);
  } else {
#pragma unroll
    for (int n = 0; n < 16; ++n) A[n] = 0.f;
  }
  __syncthreads();

  // Each warp streams its 32 rows through a ring of kM1Depth stages of
  // its own shared memory: sequence i's rows (one contiguous run of the
  // slot) arrive by 16-byte cp.async, CPR per lane, each
  // instruction 512 contiguous bytes; a lane steps its row from there
  // (chunk k of row q at pipe_rl_chunk(q * CPR + k): the eight lanes of a
  // load phase hit different banks), puts the new row back, and the warp
  // stores the run the way it came. No block barrier in the loop.
  constexpr int RUN = 32 * CPR;  // 16-byte chunks per run
  extern __shared__ __align__(16) unsigned char m1_smem[];
  const int lane = tid & 31, warp = tid >> 5;
  uint4* const ring = reinterpret_cast<uint4*>(m1_smem) + warp * kM1Depth * RUN;
  ST* const state = static_cast<ST*>(p.state);
  const int r0w = r - lane;                                // the warp's first row
  const int64_t run_off = (h * P + r0w) * 16;              // in a slot, elements
  const int run_rows = max(0, min(32, P - r0w));           // rows of the run that exist
  const IT* const xr = static_cast<const IT*>(p.x) + h * p.x_stride_h + r;
  const IT* const zr = static_cast<const IT*>(p.z) + h * p.z_stride_h + r;
  IT* const outr = static_cast<IT*>(p.out) + h * p.out_stride_h + r;
  const int64_t dt_row = h * p.dt_stride_h + r * p.dt_stride_p;
  const bool has_z = f & SSU_F_HAS_Z;

  // Sequence i's run into stage q (a padded sequence copies nothing; every
  // lane commits one group per sequence either way), and the lane's step
  // size, x and z.
  struct Ops {
    float dt, x, z;
  };
  auto issue = [&](int i, int q, Ops& o) {
    const int64_t b = b0 + i;
    const int64_t s = s_src[i];
    if (s >= 0) {
      const uint4* const src =
          reinterpret_cast<const uint4*>(state + s * p.state_stride_slot + run_off);
#pragma unroll
      for (int j = 0; j < CPR; ++j) {
        const int c = j * 32 + lane;
        if (c / CPR < run_rows) cp_async_16(ring + q * RUN + pipe_rl_chunk<CPR>(c), src + c);
      }
      if (valid) {
        o.dt = load_param(p.dt, p.dt_dtype, b * p.dt_stride_b + dt_row);
        o.x = to_f32(xr[b * p.x_stride_b]);
        o.z = has_z ? to_f32(zr[b * p.z_stride_b]) : 0.f;
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  auto step = [&](int i, int q, const Ops& o) {
    const int64_t b = b0 + i;
    const int64_t s = s_src[i], d = s_dst[i];
    if (s < 0) {  // padding: an exact zero, nothing of the pool touched
      if (valid) outr[b * p.out_stride_b] = from_f32<IT>(0.f);
      return;
    }
    uint4* const st = ring + q * RUN;
    if (valid) {
      float dt = o.dt + bias;
      if (f & SSU_F_DT_SOFTPLUS) dt = softplus20(dt);
      const float dtx = dt * o.x;
      float acc[CPR];
#pragma unroll
      for (int k = 0; k < CPR; ++k) {
        uint4* const at = st + pipe_rl_chunk<CPR>(lane * CPR + k);
        Chunk<ST, VEC> c;
        c.u = *at;
        acc[k] = 0.f;
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
          const int n = k * VEC + v;
          float hv = to_f32(c.e[v]);
          pipe_pc_step(hv, A[n], s_B[i][n], s_C[i][n], dt, dtx, acc[k]);
          c.e[v] = from_f32<ST>(hv);
        }
        *at = c.u;
      }
      // The _pc16 kernels' order of the chunk sums.
      const float sum = CPR == 4 ? (acc[0] + acc[CPR / 2]) + (acc[1] + acc[CPR - 1])
                                 : acc[0] + acc[CPR - 1];
      float y = sum + Dr * o.x;
      if (has_z) y *= silu(o.z);
      outr[b * p.out_stride_b] = from_f32<IT>(y);
    }
    __syncwarp();  // the run's new rows, before the stores read them
    if (d >= 0) {
      uint4* const dst = reinterpret_cast<uint4*>(state + d * p.state_stride_slot + run_off);
#pragma unroll
      for (int j = 0; j < CPR; ++j) {
        const int c = j * 32 + lane;
        if (c / CPR < run_rows) __stcs(dst + c, st[pipe_rl_chunk<CPR>(c)]);
      }
    }
    __syncwarp();  // every lane has read the stage before it is refilled
  };

  Ops o[kM1Depth];
#pragma unroll
  for (int q = 0; q < kM1Depth; ++q) o[q].dt = o[q].x = o[q].z = 0.f;
#pragma unroll
  for (int q = 0; q < kM1Depth - 1; ++q) {
    if (q < nb) issue(q, q, o[q]);
    else asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  for (int i = 0; i < nb; i += kM1Depth) {
#pragma unroll
    for (int q = 0; q < kM1Depth; ++q) {
      if (i + q >= nb) break;
      constexpr int kAhead = kM1Depth - 1;
      const int qn = (q + kAhead) % kM1Depth;
      if (i + q + kAhead < nb) issue(i + q + kAhead, qn, o[qn]);
      else asm volatile("cp.async.commit_group;\n" ::: "memory");
      // The groups of the kAhead sequences after this one may be in flight.
      asm volatile("cp.async.wait_group %0;\n" ::"n"(kAhead) : "memory");
      __syncwarp();
      step(i + q, q, o[q]);
    }
  }
}

}  // namespace

#define SSU_M1_KERNEL(SNAME, ST, INAME, IT)                                             \
  extern "C" __global__ void __launch_bounds__(kM1Threads)                              \
      ssu_m1_##SNAME##_##INAME(const __grid_constant__ ssu_cuda_m1_launch L) {          \
    pdl_wait();                                                                         \
    m1_body<ST, IT>(L);                                                                 \
  }
#define SSU_M1_KERNELS(SNAME, ST)       \
  SSU_M1_KERNEL(SNAME, ST, f32, float)  \
  SSU_M1_KERNEL(SNAME, ST, f16, f16)    \
  SSU_M1_KERNEL(SNAME, ST, bf16, bf16)
SSU_M1_KERNELS(f32, float)
SSU_M1_KERNELS(f16, f16)
SSU_M1_KERNELS(bf16, bf16)
#undef SSU_M1_KERNELS
#undef SSU_M1_KERNEL
