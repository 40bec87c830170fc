// Checkpointed (replay) decode, SPEC.md section 7: the replay step and the
// flush op for every state format (f32, f16, bf16, int16 block-scaled) and
// input dtype; extern "C" entry points ssu_replay_<state>_<input>.
//
// A block owns one (sequence, head) pair and a tile of rows. It reads the
// slot's counters, decides commit / flush / append for its sequence, stages
// the entries of the call in shared memory (the committed ring entries, then
// the call's tokens) and streams the checkpoint rows once through registers:
//  - append steps (per-head step size and A) read the checkpoint and never
//    write it: out_t = e^{A S_t} (h0 . C_t) + sum_j w_tj (B_j . C_t) x_j + D x_t
//    with S_t the step sizes summed from the checkpoint to token t and
//    w_tj = e^{A (S_t - S_j)} delta_j (the closed form of the recurrence);
//  - flush steps fold the committed entries into each row with the update's
//    own fp32 operation sequence (state * dA + B * (delta * x)), store the
//    row exactly as the plain update would, then run the call's tokens;
//  - the per-channel (Mamba-1) layout folds in registers on every step.
// Ring x rows belong to one (head, row) each and are appended by their
// block. B and delta entries are shared by the blocks of a group / head,
// and counters by every block of the sequence, so the last block of the
// sequence to finish (counted in the high 16 bits of the pending counter)
// writes them after every block has read what it needed.

#define SSU_BIT_ACCEPTED 0x4u
#define SSU_BIT_COUNTERS 0x8u

namespace {

// Elements of input dtype IT at a run-time offset.
template <typename IT>
__device__ __forceinline__ float load_in(const void* base, int64_t off) {
  return to_f32(static_cast<const IT*>(base)[off]);
}

struct ReplaySeq {
  long long slot;
  long long tok0;
  int len;      // tokens of this call (0 for the flush op)
  int c;        // committed entries after the commit
  int newc;     // committed after the call (0 when flushing)
  int state;    // 0: skip (no tokens), 1: padding (zero outputs), 2: active
  int flush;
  int last;     // this block is the sequence's last to arrive
};

// 16-byte chunks a lane keeps in flight: the chunks of a batch of rows are
// requested together, the first batch before the block stages its operands.
constexpr int kReplayChunksInFlight = 8;
// Resident blocks per SM the register budget must allow: the append path
// needs few registers beyond its chunks in flight; the fold path (flush
// steps, per-channel layouts) fits the same budget.
constexpr int kReplayMinBlocks = 6;

// Converts a lane's raw chunks of a row (KC at most 2) to fp32 v[k*VEC ..];
// chunks past the row (ci >= chunks) are zeros.
template <typename ST, int VEC, int KCMAX>
__device__ __forceinline__ void unpack_row(const uint4* raw, int lane_r, int lpr, int chunks,
                                           float scale, float* v) {
#pragma unroll
  for (int k = 0; k < KCMAX; ++k) {
    Chunk<ST, VEC> c;
    c.u = raw[k];
    const bool in = lane_r + k * lpr < chunks;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      float e = to_f32(c.e[i]);
      if constexpr (std::is_same<ST, int16_t>::value) e *= scale;
      v[k * VEC + i] = in ? e : 0.f;
    }
  }
}

template <typename ST, typename IT>
__device__ __forceinline__ void replay_body(const ssu_cuda_replay_launch& L) {
  constexpr int VEC = 16 / sizeof(ST);
  constexpr int KCMAX = 8 / VEC;  // two chunks for f32 rows of 256
  constexpr int EL = 8;           // row elements per lane
  constexpr bool QUANT = std::is_same<ST, int16_t>::value;
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ ReplaySeq sq;

  const ssu_replay_params& rp = L.p;
  const ssu_update_params& p = rp.u;
  const uint32_t f = p.features;
  const bool flush_op = rp.rflags & SSU_RF_FLUSH_OP;
  const bool writes = !(f & SSU_F_DISABLE_UPDATE);
  const bool dt_pc = f & SSU_F_DT_PER_CHANNEL;
  const bool A_pc = f & SSU_F_A_PER_CHANNEL;

  const int tiles = L.tiles_per_head;
  const int64_t blk = blockIdx.x;
  const int64_t bh = blk / tiles;
  const int tile = static_cast<int>(blk - bh * tiles);
  const int64_t b = bh / p.nheads;
  const int64_t h = bh - b * p.nheads;
  const int64_t g = h / p.heads_per_group;
  const int tid = threadIdx.x;
  const int P = static_cast<int>(p.dim), N = static_cast<int>(p.dstate);
  const int r0 = tile * L.rows_per_block;
  const int rows = min(P, r0 + L.rows_per_block) - r0;
  const int Lr = static_cast<int>(rp.ring_len);
  const bool reporter = h == 0 && tile == 0;

  if (tid == 0) {
    ReplaySeq s;
    s.tok0 = 0;
    s.len = static_cast<int>(p.ntokens);
    s.state = 2;
    s.c = s.newc = s.flush = s.last = 0;
    if (f & SSU_F_VARLEN) {
      s.tok0 = load_index(p.cu_seqlens, p.seqlen_dtype, b * p.cu_seqlens_stride);
      const int64_t len = load_index(p.cu_seqlens, p.seqlen_dtype, (b + 1) * p.cu_seqlens_stride) -
                          s.tok0;
      if (len > p.ntokens && reporter) report(p.error_word, SSU_BIT_SEQLEN);
      s.len = static_cast<int>(len <= 0 ? 0 : (len > p.ntokens ? p.ntokens : len));
      if (len <= 0) s.state = 0;
    }
    s.slot = (f & SSU_F_HAS_SRC) ? load_index(p.src_index, p.index_dtype, b * p.src_stride_b) : b;
    if (s.state == 2 && is_pad(s.slot, p.pad_slot_id)) s.state = 1;
    if (s.state == 2 && s.slot >= p.nslots) {
      if (reporter) report(p.error_word, SSU_BIT_INDEX);
      s.state = 1;
    }
    if (s.state == 2) {
      // Other blocks of the sequence may already have counted themselves in
      // the high bits of pending; its low 16 bits stay the caller's value.
      const int committed = rp.committed[s.slot * rp.committed_stride];
      const int pend_raw = *reinterpret_cast<volatile int*>(rp.pending + s.slot * rp.pending_stride);
      const int pend = pend_raw & 0xffff;
      if (committed < 0 || committed > Lr || pend > Lr || committed + pend > Lr) {
        if (reporter) report(p.error_word, SSU_BIT_COUNTERS);
        s.state = 1;
      } else {
        int acc = pend;
        if (rp.rflags & SSU_RF_HAS_ACCEPTED) {
          const int64_t a = load_index(rp.num_accepted, rp.accepted_dtype, b * rp.num_accepted_stride);
          if (a < 0 || a > pend) {
            if (reporter) report(p.error_word, SSU_BIT_ACCEPTED);
            acc = a < 0 ? 0 : pend;
          } else {
            acc = static_cast<int>(a);
          }
        }
        s.c = committed + acc;
        s.flush = flush_op ? (s.c > 0) : (s.c + s.len > Lr);
        s.newc = s.flush ? 0 : s.c;
      }
    }
    sq = s;
  }
  __syncthreads();
  const ReplaySeq sqv = sq;
  if (sqv.state == 0) return;
  const int T = sqv.len;
  IT* const out_bh = static_cast<IT*>(p.out) + b * p.out_stride_b + h * p.out_stride_h;
  if (sqv.state == 1) {  // padding: exact zeros, nothing of the slot touched
    for (int i = tid; i < T * rows; i += SSU_CUDA_THREADS) {
      const int t = i / rows;
      out_bh[(sqv.tok0 + t) * p.out_stride_t + r0 + (i - t * rows)] = from_f32<IT>(0.f);
    }
    return;
  }
  const int64_t s = sqv.slot;
  const int c = sqv.c, E = c + T;
  const bool flush = sqv.flush;
  // Per-head step size and A, no flush: the closed form (no fold).
  const bool closed = !flush && !dt_pc && !A_pc;

  float* const s_delta = reinterpret_cast<float*>(smem + L.off_delta);
  float* const s_dA = reinterpret_cast<float*>(smem + L.off_dA);
  float* const s_B = reinterpret_cast<float*>(smem + L.off_B);
  float* const s_C = reinterpret_cast<float*>(smem + L.off_C);
  float* const s_x = reinterpret_cast<float*>(smem + L.off_x);
  float* const s_z = reinterpret_cast<float*>(smem + L.off_z);
  float* const s_D = reinterpret_cast<float*>(smem + L.off_D);
  float* const s_y = reinterpret_cast<float*>(smem + L.off_y);
  float* const s_coef = reinterpret_cast<float*>(smem + L.off_coef);
  float* const s_scale = reinterpret_cast<float*>(smem + L.off_scale);

  // ---- the checkpoint rows: the first lane-row batch is requested before
  // the staging below, so its latency overlaps the operand loads ----------
  const int lpr = L.lanes_per_row;
  const int lane_r = tid & (lpr - 1);
  const int grp = tid / lpr;
  const int ngrp = SSU_CUDA_THREADS / lpr;
  const int chunks = N / VEC;
  const int kc = (chunks + lpr - 1) / lpr;
  ST* const state = static_cast<ST*>(p.state);
  const int64_t head_off = h * static_cast<int64_t>(P) * N;
  ST* const ckpt_tile = state + s * p.state_stride_slot + head_off + static_cast<int64_t>(r0) * N;
  // (A flush op on a slot with nothing committed only resets its counters.)
  const int row_end = (T > 0 || flush) ? rows : 0;
  constexpr int RB = kReplayChunksInFlight / KCMAX;
  uint4 raw[RB][KCMAX];
  auto request_rows = [&](int rb) {
#pragma unroll
    for (int i = 0; i < RB; ++i) {
      const int r = rb + grp + i * ngrp;
#pragma unroll
      for (int k = 0; k < KCMAX; ++k) {
        const int ci = lane_r + k * lpr;
        raw[i][k] = make_uint4(0u, 0u, 0u, 0u);
        if (r < row_end && ci < chunks)
          raw[i][k] = __ldcs(reinterpret_cast<const uint4*>(ckpt_tile + static_cast<int64_t>(r) * N +
                                                            ci * VEC));
      }
    }
  };
  request_rows(0);

  // ---- staging: entries j < c from the ring, j >= c from this call --------
  const float A_h = A_pc ? 0.f : load_param(p.A, p.A_dtype, h * p.A_stride_h);
  const IT* const x_ring = static_cast<const IT*>(rp.ring_x) + s * rp.ring_x_stride_s +
                           h * rp.ring_x_stride_h + r0;
  const IT* const B_ring = static_cast<const IT*>(rp.ring_B) + s * rp.ring_B_stride_s +
                           g * rp.ring_B_stride_g;
  const float* const dt_ring = rp.ring_dt + s * rp.ring_dt_stride_s + h * rp.ring_dt_stride_h;
  auto token_delta = [&](int t, int row) {
    const int64_t tok = sqv.tok0 + t;
    float v = load_param(p.dt, p.dt_dtype,
                         b * p.dt_stride_b + tok * p.dt_stride_t + h * p.dt_stride_h +
                             static_cast<int64_t>(row) * p.dt_stride_p);
    if (f & SSU_F_HAS_DT_BIAS)
      v += load_param(p.dt_bias, p.dt_bias_dtype,
                      h * p.dt_bias_stride_h + static_cast<int64_t>(row) * p.dt_bias_stride_p);
    if (f & SSU_F_DT_SOFTPLUS) v = softplus20(v);
    return v;
  };
  if (!dt_pc) {
    for (int j = tid; j < E; j += SSU_CUDA_THREADS) {
      const float d = j < c ? dt_ring[j * rp.ring_dt_stride_l] : token_delta(j - c, 0);
      s_delta[j] = d;
      if (!A_pc) s_dA[j] = ssu_math::exp(A_h * d);
    }
  } else {
    for (int i = tid; i < E * rows; i += SSU_CUDA_THREADS) {
      const int j = i / rows, r = i - j * rows;
      s_delta[i] = j < c ? dt_ring[j * rp.ring_dt_stride_l + (r0 + r) * rp.ring_dt_stride_p]
                         : token_delta(j - c, r0 + r);
    }
  }
  for (int i = tid; i < E * N; i += SSU_CUDA_THREADS) {
    const int j = i / N, n = i - j * N;
    s_B[i] = j < c ? load_in<IT>(B_ring, j * rp.ring_B_stride_l + n)
                   : load_in<IT>(p.B, b * p.B_stride_b + (sqv.tok0 + j - c) * p.B_stride_t +
                                          g * p.B_stride_g + n);
  }
  for (int i = tid; i < T * N; i += SSU_CUDA_THREADS) {
    const int t = i / N, n = i - t * N;
    s_C[i] = load_in<IT>(p.C, b * p.C_stride_b + (sqv.tok0 + t) * p.C_stride_t +
                                  g * p.C_stride_g + n);
  }
  for (int i = tid; i < E * rows; i += SSU_CUDA_THREADS) {
    const int j = i / rows, r = i - j * rows;
    s_x[i] = j < c ? load_in<IT>(x_ring, j * rp.ring_x_stride_l + r)
                   : load_in<IT>(p.x, b * p.x_stride_b + (sqv.tok0 + j - c) * p.x_stride_t +
                                          h * p.x_stride_h + r0 + r);
  }
  if (f & SSU_F_HAS_Z)
    for (int i = tid; i < T * rows; i += SSU_CUDA_THREADS) {
      const int t = i / rows, r = i - t * rows;
      s_z[i] = silu(load_in<IT>(p.z, b * p.z_stride_b + (sqv.tok0 + t) * p.z_stride_t +
                                         h * p.z_stride_h + r0 + r));
    }
  for (int r = tid; r < rows; r += SSU_CUDA_THREADS) {
    s_D[r] = (f & SSU_F_HAS_D)
                 ? load_param(p.D, p.D_dtype, h * p.D_stride_h + (r0 + r) * p.D_stride_p)
                 : 0.f;
    if (QUANT)
      s_scale[r] = p.state_scale[s * p.state_scale_stride_slot + h * P + r0 + r];
  }
  __syncthreads();

  // ---- append this call's x rows (the block's own rows; on a flush they
  // overwrite entries staged above, which no other block reads) ------------
  if (writes && !flush_op) {
    IT* const xr = static_cast<IT*>(rp.ring_x) + s * rp.ring_x_stride_s + h * rp.ring_x_stride_h + r0;
    for (int i = tid; i < T * rows; i += SSU_CUDA_THREADS) {
      const int t = i / rows, r = i - t * rows;
      xr[(sqv.newc + t) * rp.ring_x_stride_l + r] = static_cast<const IT*>(
          p.x)[b * p.x_stride_b + (sqv.tok0 + t) * p.x_stride_t + h * p.x_stride_h + r0 + r];
    }
  }

  // ---- closed form: decays and weights per (token, entry) -----------------
  // coef[t][j] = e^{A (sum_{i=j+1..c+t} delta_i)} delta_j (B_j . C_t) for
  // j <= c + t; dec[t] = e^{A sum_{i<=c+t} delta_i}. One warp per (t, j).
  float* const s_dec = s_coef + T * E;
  if (closed) {
    const int warp = tid >> 5, lane = tid & 31;
    for (int q = warp; q < T * E; q += SSU_CUDA_THREADS / 32) {
      const int t = q / E, j = q - t * E;
      if (j > c + t) {
        if (lane == 0) s_coef[q] = 0.f;
        continue;
      }
      float dot = 0.f;
      for (int n = lane; n < N; n += 32) dot += s_B[j * N + n] * s_C[t * N + n];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      if (lane == 0) {
        float span = 0.f;
        for (int i = j + 1; i <= c + t; ++i) span += s_delta[i];
        s_coef[q] = ssu_math::exp(A_h * span) * s_delta[j] * dot;
      }
    }
    for (int t = tid; t < T; t += SSU_CUDA_THREADS) {
      float span = 0.f;
      for (int i = 0; i <= c + t; ++i) span += s_delta[i];
      s_dec[t] = ssu_math::exp(A_h * span);
    }
  }

  // ---- rows ---------------------------------------------------------------
  // Lane l of a row group holds chunk k at elements (l + k * lpr) * VEC; a
  // row's dot products with C reduce over the group's lpr lanes.
  auto row_dot = [&](const float* v, const float* Ct) {
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < KCMAX; ++k) {
      const int n0 = (lane_r + k * lpr) * VEC;
      if (k < kc && n0 < N) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) dot = __fmaf_rn(v[k * VEC + i], Ct[n0 + i], dot);
      }
    }
    for (int off = lpr >> 1; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    return dot;
  };
  if (closed) {
    // Append step: h0 . C_t per row; the checkpoint is only read.
    for (int rb = 0; rb < row_end; rb += RB * ngrp) {
      if (rb > 0) request_rows(rb);
#pragma unroll
      for (int ib = 0; ib < RB; ++ib) {
        if (rb + ib * ngrp < row_end) {  // uniform over the block
          const int r = rb + grp + ib * ngrp;
          const bool valid = r < rows;
          float v[EL];
          unpack_row<ST, VEC, KCMAX>(raw[ib], lane_r, lpr, valid ? chunks : 0,
                                     QUANT && valid ? s_scale[r] : 1.f, v);
          for (int t = 0; t < T; ++t) {
            const float dot = row_dot(v, s_C + t * N);
            if (valid && lane_r == 0) s_y[t * rows + r] = dot;
          }
        }
      }
    }
  } else {
    // Flush steps and the per-channel layout: fold the committed entries
    // into each row, store it when flushing, then run the call's tokens.
    const bool sr = f & SSU_F_STOCHASTIC;
    const uint64_t seed = sr ? *p.sr_seed : 0;
    for (int rb = 0; rb < row_end; rb += RB * ngrp) {
      if (rb > 0) request_rows(rb);
#pragma unroll 1
      for (int ib = 0; ib < RB; ++ib) {
        if (rb + ib * ngrp >= row_end) break;  // uniform over the block
        const int r = rb + grp + ib * ngrp;
        const bool valid = r < rows;
        const int rr = valid ? r : 0;
        const int row = r0 + rr;
        float v[EL];
        {
          uint4 pick_raw[KCMAX];
#pragma unroll
          for (int i = 0; i < RB; ++i)
            if (i == ib) {
#pragma unroll
              for (int k = 0; k < KCMAX; ++k) pick_raw[k] = raw[i][k];
            }
          unpack_row<ST, VEC, KCMAX>(pick_raw, lane_r, lpr, valid ? chunks : 0,
                                     QUANT && valid ? s_scale[r] : 1.f, v);
        }
        // Per-channel A of this lane's elements (Mamba-1), loaded once per row.
        float a[EL];
#pragma unroll
        for (int k = 0; k < KCMAX; ++k) {
          const int n0 = (lane_r + k * lpr) * VEC;
#pragma unroll
          for (int i = 0; i < VEC; ++i)
            a[k * VEC + i] = A_pc && k < kc && n0 < N
                                 ? load_param(p.A, p.A_dtype,
                                              h * p.A_stride_h + row * p.A_stride_p +
                                                  (n0 + i) * p.A_stride_n)
                                 : 0.f;
        }
        // One token of the update's recurrence on this lane's elements: the
        // same fp32 operations, in the same order, as the plain update.
        auto advance = [&](int j) {
          const float d = dt_pc ? s_delta[j * rows + rr] : s_delta[j];
          const float dtx = d * s_x[j * rows + rr];
          const float dAh = A_pc ? 0.f : (dt_pc ? ssu_math::exp(A_h * d) : s_dA[j]);
#pragma unroll
          for (int k = 0; k < KCMAX; ++k) {
            const int n0 = (lane_r + k * lpr) * VEC;
            if (k < kc && n0 < N) {
#pragma unroll
              for (int i = 0; i < VEC; ++i) {
                const float dA = A_pc ? ssu_math::exp(a[k * VEC + i] * d) : dAh;
                v[k * VEC + i] = v[k * VEC + i] * dA + s_B[j * N + n0 + i] * dtx;
              }
            }
          }
        };
        for (int j = 0; j < c; ++j) advance(j);
        if (flush && writes) {
          // Store the folded row exactly as the plain update stores a row.
          RowStore rs;
          rs.seed = seed;
          rs.rounds = p.sr_rounds;
          rs.enc = 1.f;
          if constexpr (QUANT) rs.enc = row_encode_factor<EL>(v, lpr);
          if (valid) {
            ST* const dst_row = ckpt_tile + static_cast<int64_t>(r) * N;
#pragma unroll
            for (int k = 0; k < KCMAX; ++k) {
              const int ci = lane_r + k * lpr;
              if (k < kc && ci < chunks) {
                rs.L0 = static_cast<uint64_t>(s * p.state_stride_slot + head_off +
                                              static_cast<int64_t>(row) * N + ci * VEC);
                Chunk<ST, VEC> cc;
                if (sr)
                  encode_chunk<ST, VEC, true>(cc.e, v + k * VEC, rs);
                else
                  encode_chunk<ST, VEC, false>(cc.e, v + k * VEC, rs);
                store_encoded<ST, VEC>(dst_row + ci * VEC, cc, VEC);
              }
            }
            if constexpr (QUANT)
              if (lane_r == 0)
                p.state_scale[s * p.state_scale_stride_slot + h * P + row] = 1.f / rs.enc;
          }
        }
        for (int t = 0; t < T; ++t) {
          advance(c + t);
          const float dot = row_dot(v, s_C + t * N);
          if (valid && lane_r == 0) s_y[t * rows + r] = dot;
        }
      }
    }
  }
  __syncthreads();

  // ---- outputs --------------------------------------------------------------
  for (int i = tid; i < T * rows; i += SSU_CUDA_THREADS) {
    const int t = i / rows, r = i - t * rows;
    float y = s_y[i];
    if (closed) {
      y *= s_dec[t];
      const float* coef = s_coef + t * E;
      for (int j = 0; j <= c + t; ++j) y += coef[j] * s_x[j * rows + r];
    }
    y += s_D[r] * s_x[(c + t) * rows + r];
    if (f & SSU_F_HAS_Z) y *= s_z[i];
    out_bh[(sqv.tok0 + t) * p.out_stride_t + r0 + r] = from_f32<IT>(y);
  }
  if (!writes) return;

  // ---- the sequence's last block: shared ring entries and the counters ----
  if (tid == 0) {
    int32_t* const pend = rp.pending + s * rp.pending_stride;
    __threadfence();
    const int arrived = atomicAdd(pend, 0x10000) >> 16;
    const int blocks = static_cast<int>(p.nheads) * tiles;
    sq.last = (arrived & 0x7fff) == blocks - 1;
    if (sq.last) __threadfence();
  }
  __syncthreads();
  if (!sq.last) return;
  if (!flush_op) {
    const int G = static_cast<int>(p.ngroups);
    IT* const Bw = static_cast<IT*>(rp.ring_B) + s * rp.ring_B_stride_s;
    for (int i = tid; i < T * G * N; i += SSU_CUDA_THREADS) {
      const int t = i / (G * N), rem = i - t * G * N, gg = rem / N, n = rem - gg * N;
      Bw[(sqv.newc + t) * rp.ring_B_stride_l + gg * rp.ring_B_stride_g + n] =
          static_cast<const IT*>(p.B)[b * p.B_stride_b + (sqv.tok0 + t) * p.B_stride_t +
                                      gg * p.B_stride_g + n];
    }
    const int H = static_cast<int>(p.nheads);
    const int per = dt_pc ? P : 1;
    float* const dw = rp.ring_dt + s * rp.ring_dt_stride_s;
    for (int i = tid; i < T * H * per; i += SSU_CUDA_THREADS) {
      const int t = i / (H * per), rem = i - t * H * per, hh = rem / per, pp = rem - hh * per;
      const int64_t tok = sqv.tok0 + t;
      float v = load_param(p.dt, p.dt_dtype,
                           b * p.dt_stride_b + tok * p.dt_stride_t + hh * p.dt_stride_h +
                               static_cast<int64_t>(pp) * p.dt_stride_p);
      if (f & SSU_F_HAS_DT_BIAS)
        v += load_param(p.dt_bias, p.dt_bias_dtype,
                        hh * p.dt_bias_stride_h + static_cast<int64_t>(pp) * p.dt_bias_stride_p);
      if (f & SSU_F_DT_SOFTPLUS) v = softplus20(v);
      dw[(sqv.newc + t) * rp.ring_dt_stride_l + hh * rp.ring_dt_stride_h +
         static_cast<int64_t>(pp) * rp.ring_dt_stride_p] = v;
    }
  }
  if (tid == 0) {
    rp.committed[s * rp.committed_stride] = sqv.newc;
    rp.pending[s * rp.pending_stride] = flush_op ? 0 : T;
  }
}

}  // namespace

#define SSU_REPLAY_KERNEL(SNAME, ST, INAME, IT)                                          \
  extern "C" __global__ void __launch_bounds__(SSU_CUDA_THREADS, kReplayMinBlocks)                         \
      ssu_replay_##SNAME##_##INAME(const ssu_cuda_replay_launch L) {                      \
    replay_body<ST, IT>(L);                                                              \
  }
#define SSU_REPLAY_KERNELS(SNAME, ST)       \
  SSU_REPLAY_KERNEL(SNAME, ST, f32, float)  \
  SSU_REPLAY_KERNEL(SNAME, ST, f16, f16)    \
  SSU_REPLAY_KERNEL(SNAME, ST, bf16, bf16)
SSU_REPLAY_KERNELS(f32, float)
SSU_REPLAY_KERNELS(f16, f16)
SSU_REPLAY_KERNELS(bf16, bf16)
SSU_REPLAY_KERNELS(i16, int16_t)
#undef SSU_REPLAY_KERNELS
#undef SSU_REPLAY_KERNEL
