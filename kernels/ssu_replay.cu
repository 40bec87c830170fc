// Checkpointed (replay) decode, SPEC.md section 7: the replay step and the
// flush op for every state format (f32, f16, bf16; int16, int8 and e4m3
// block-scaled) and input dtype; extern "C" entry points
// ssu_replay_<state>_<input> and ssu_replay_warp_<state>_<input>.
//
// A block owns one (sequence, head) pair and a tile of rows. In three
// dependent round trips (slot; counters with the checkpoint tile; committed
// ring entries) it stages the call's inputs and the committed entries in
// shared memory by cp.async, each in its own array, decides commit / flush /
// append for its sequence, and reads the checkpoint rows once:
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

// What thread 0 decides from the slot's counters, for the whole block.
struct ReplaySeq {
  int c;      // committed entries after the commit
  int newc;   // committed after the call (0 when flushing)
  int state;  // 1: counters out of range (handled as padding), 2: active
  int flush;
  int last;   // this block is the sequence's last to count itself in
};

// 16-byte chunks a lane keeps in flight: the chunks of a batch of rows are
// requested together, the first batch before the block stages its operands.
constexpr int kReplayChunksInFlight = 8;
// Resident blocks per SM the register budget must allow (eight blocks of 128
// threads: 64 registers). The append path fits; the fold path (flush steps,
// per-channel layouts) spills a few values to local memory.
constexpr int kReplayMinBlocks = 8 * 128 / SSU_CUDA_REPLAY_THREADS;

// Converts a lane's raw chunks of a row (KC at most 2) to fp32 v[k*VEC ..]
// (block-scaled codes times the row's decode scale, as the plain update
// loads them); chunks past the row (ci >= chunks) are zeros.
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
      if constexpr (StateFormat<ST>::kScaled) e *= scale;
      v[k * VEC + i] = in ? e : 0.f;
    }
  }
}

// Starts copying `count` rows of `len` elements (row i at src + i * stride,
// its elements dense) to shared dst[i * len], unconverted: 16-byte cp.async
// where the rows allow (nothing waits on them before the block's
// cp.async.wait_all), element copies otherwise. Rows that follow each other
// (one row, or stride == len) are copied as one run, with no row index to
// work out; a lane copies a handful of chunks at most, so the loops are not
// unrolled (each call used to cost a warp ~80 instructions of set-up, six
// calls per append step).
template <typename T, int NT = SSU_CUDA_REPLAY_THREADS>
__device__ __forceinline__ void stage_async(T* dst, const T* src, int64_t stride, int count,
                                            int len, int tid) {
  if (count <= 0 || len <= 0) return;
  constexpr int V = 16 / sizeof(T);
  const bool vec = len % V == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0 &&
                   (stride * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  if (vec) {
    const int per = len / V;  // chunks per row
    if (count == 1 || stride == len) {
#pragma unroll 1
      for (int q = tid; q < count * per; q += NT) cp_async_16(dst + q * V, src + q * V);
    } else {
      const bool p2 = (per & (per - 1)) == 0;
      const int sh = __ffs(per) - 1;
#pragma unroll 1
      for (int q = tid; q < count * per; q += NT) {
        const int i = p2 ? q >> sh : q / per;
        const int k = q - i * per;
        cp_async_16(dst + i * len + k * V, src + i * stride + k * V);
      }
    }
    return;
  }
#pragma unroll 1
  for (int q = tid; q < count * len; q += NT) {
    const int i = q / len;
    const int k = q - i * len;
    dst[i * len + k] = src[i * stride + k];
  }
}

// Four consecutive elements of an input row in shared memory, as fp32.
__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
template <typename IT>
__device__ __forceinline__ float4 load4(const IT* p) {
  union {
    uint2 u;
    IT e[4];
  } c;
  c.u = *reinterpret_cast<const uint2*>(p);
  return make_float4(to_f32(c.e[0]), to_f32(c.e[1]), to_f32(c.e[2]), to_f32(c.e[3]));
}

// The VEC elements of an input row at p (aligned to VEC elements) as fp32.
template <typename IT, int VEC>
__device__ __forceinline__ void load_vec(const IT* p, float* out) {
#pragma unroll
  for (int i = 0; i < VEC; i += 4) {
    const float4 v = load4(p + i);
    out[i] = v.x, out[i + 1] = v.y, out[i + 2] = v.z, out[i + 3] = v.w;
  }
}

// load_vec with bf16 pairs widened by a shift and a mask (one operation
// per element; the generic conversion spends two on the high half).
template <typename IT, int VEC>
__device__ __forceinline__ void widen_vec(const IT* p, float* out) {
  if constexpr (std::is_same<IT, bf16>::value) {
#pragma unroll
    for (int i = 0; i < VEC; i += 4) {
      const uint2 w = *reinterpret_cast<const uint2*>(p + i);
      out[i] = __uint_as_float(w.x << 16);
      out[i + 1] = __uint_as_float(w.x & 0xffff0000u);
      out[i + 2] = __uint_as_float(w.y << 16);
      out[i + 3] = __uint_as_float(w.y & 0xffff0000u);
    }
  } else {
    load_vec<IT, VEC>(p, out);
  }
}

// Tensor-core dot products for the 16-bit checkpoints whose inputs have the
// same dtype (bf16 with bf16, f16 with f16): the h0 . C_t of an append of 2
// to 4 tokens take the checkpoint's raw chunks as the A fragment of an
// m16n8k16 mma (products exact in fp32, fp32 accumulation), with no
// widening and no per-element FMA; see the row loop for the mapping.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
constexpr bool kHaveMma16 = true;
#else
constexpr bool kHaveMma16 = false;
#endif
template <typename ST, typename IT>
constexpr bool kReplayMmaDots =
    kHaveMma16 && std::is_same<ST, IT>::value &&
    (std::is_same<ST, bf16>::value || std::is_same<ST, f16>::value);

// d += A * B for one m16n8k16 tile of 16-bit pairs (row-major A, column-major B).
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same<T, bf16>::value)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// Sums D values (D = 1, 2, 4 or 8) of every lane over the 8 lanes of its
// group (l8 = lane & 7), transposed: at each xor stage a lane keeps half of
// its values and sends the other half, so D sums take D - 1 + log2(8 / D)
// shuffles. Leaves the sum of value idx (returned: l8 >> log2(8 / D)) in
// v[0], complete in every lane with l8 % (8 / D) == 0.
template <int D>
__device__ __forceinline__ int transpose_reduce8(float* v, int l8) {
  static_assert(D == 1 || D == 2 || D == 4 || D == 8, "D lanes values");
  constexpr unsigned kAll = 0xffffffffu;
  int idx = 0;
  int n = D;
#pragma unroll
  for (int m = 4; m >= 1; m >>= 1) {
    if (n > 1) {
      const bool up = l8 & m;
      const int h = n / 2;
#pragma unroll
      for (int i = 0; i < D / 2; ++i) {
        if (i < h) {
          const float send = up ? v[i] : v[i + h];
          const float keep = up ? v[i + h] : v[i];
          v[i] = keep + __shfl_xor_sync(kAll, send, m);
        }
      }
      idx = idx * 2 + (up ? 1 : 0);
      n = h;
    } else {
      v[0] += __shfl_xor_sync(kAll, v[0], m);
    }
  }
  return idx;
}

// The warp kernels' block-level f32 rows (L.off_group_Bf): 16 bytes of
// padding after every 32 elements, so the 8 lanes of a row, reading 16 or 32
// bytes apart, hit distinct banks. Element n of a row sits at padded_f32(n);
// a row takes padded_f32_row(N) floats (N a multiple of 32).
__device__ __forceinline__ int padded_f32(int n) { return n + (n >> 5) * 4; }
__device__ __forceinline__ int padded_f32_row(int N) { return N + N / 8; }

// ---- pieces both replay kernel families share ---------------------------------
// NT threads (a block's or a warp's) with ids tid = 0 .. NT-1 take part.

// The sequence's tokens [tok0, tok0 + T); false for a varlen sequence of no
// tokens (skipped: nothing of its slot is touched). Longer than max_tokens:
// clamped, and the reporter sets SSU_BIT_SEQLEN.
__device__ __forceinline__ bool replay_tokens(const ssu_update_params& p, int64_t b, bool reporter,
                                              int64_t* tok0, int* T) {
  *tok0 = 0;
  *T = static_cast<int>(p.ntokens);
  if (!(p.features & SSU_F_VARLEN)) return true;
  *tok0 = load_index(p.cu_seqlens, p.seqlen_dtype, b * p.cu_seqlens_stride);
  const int64_t len = sequence_length(
      *tok0, load_index(p.cu_seqlens, p.seqlen_dtype, (b + 1) * p.cu_seqlens_stride));
  if (len > p.ntokens && reporter) report(p.error_word, SSU_BIT_SEQLEN);
  *T = static_cast<int>(len <= 0 ? 0 : (len > p.ntokens ? p.ntokens : len));
  return len > 0;
}

// Starts copying this call's B, C (T x N) and x, z (T x rows from row r0)
// of sequence b, head h, group g into shared memory (one commit group).
template <typename IT, int NT>
__device__ __forceinline__ void stage_inputs(const ssu_update_params& p, int64_t b, int64_t h,
                                             int64_t g, int64_t tok0, int T, int r0, int rows,
                                             IT* s_Bt, IT* s_C, IT* s_xt, IT* s_z, int tid) {
  const int N = static_cast<int>(p.dstate);
  stage_async<IT, NT>(s_Bt, static_cast<const IT*>(p.B) + b * p.B_stride_b +
                                tok0 * p.B_stride_t + g * p.B_stride_g,
                      p.B_stride_t, T, N, tid);
  stage_async<IT, NT>(s_C, static_cast<const IT*>(p.C) + b * p.C_stride_b +
                               tok0 * p.C_stride_t + g * p.C_stride_g,
                      p.C_stride_t, T, N, tid);
  stage_async<IT, NT>(s_xt, static_cast<const IT*>(p.x) + b * p.x_stride_b +
                                tok0 * p.x_stride_t + h * p.x_stride_h + r0,
                      p.x_stride_t, T, rows, tid);
  if (p.features & SSU_F_HAS_Z)
    stage_async<IT, NT>(s_z, static_cast<const IT*>(p.z) + b * p.z_stride_b +
                                 tok0 * p.z_stride_t + h * p.z_stride_h + r0,
                        p.z_stride_t, T, rows, tid);
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Commit, flush and append decided from slot s's counters (every caller
// reads the same values). Counters out of range: state 1 (padding) and
// SSU_BIT_COUNTERS; num_accepted outside 0..pending: clamped and
// SSU_BIT_ACCEPTED (the reporter reports).
__device__ __forceinline__ ReplaySeq replay_decide(const ssu_replay_params& rp, int64_t b,
                                                   int64_t s, int T, bool reporter) {
  const ssu_update_params& p = rp.u;
  const int Lr = static_cast<int>(rp.ring_len);
  ReplaySeq q;
  q.c = q.newc = q.flush = q.last = 0;
  q.state = 2;
  // Other blocks or warps of the sequence may already have counted
  // themselves in the high bits of pending; its low 16 bits stay the
  // caller's value.
  const int committed = rp.committed[s * rp.committed_stride];
  const int pend = *reinterpret_cast<volatile int*>(rp.pending + s * rp.pending_stride) & 0xffff;
  int64_t a = pend;
  if (rp.rflags & SSU_RF_HAS_ACCEPTED)
    a = load_index(rp.num_accepted, rp.accepted_dtype, b * rp.num_accepted_stride);
  if (committed < 0 || committed > Lr || pend > Lr || committed + pend > Lr) {
    if (reporter) report(p.error_word, SSU_BIT_COUNTERS);
    q.state = 1;
    return q;
  }
  if (a < 0 || a > pend) {
    if (reporter) report(p.error_word, SSU_BIT_ACCEPTED);
    a = a < 0 ? 0 : pend;
  }
  q.c = committed + static_cast<int>(a);
  q.flush = (rp.rflags & SSU_RF_FLUSH_OP) ? (q.c > 0) : (q.c + T > Lr);
  q.newc = q.flush ? 0 : q.c;
  return q;
}

// Appends this call's x rows (T x rows, from shared memory) to the ring at
// dst (entry stride stride_l).
template <typename IT, int NT>
__device__ __forceinline__ void append_x_rows(IT* dst, int64_t stride_l, const IT* s_xt, int T,
                                              int rows, int tid) {
  constexpr int V = 16 / sizeof(IT);
  const bool vec = rows % V == 0 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0 &&
                   (stride_l * static_cast<int64_t>(sizeof(IT))) % 16 == 0;
  const int per = vec ? rows / V : rows;
  for (int q = tid; q < T * per; q += NT) {
    const int t = q / per, k = q - t * per;
    if (vec)
      *reinterpret_cast<uint4*>(dst + t * stride_l + k * V) =
          *reinterpret_cast<const uint4*>(s_xt + t * rows + k * V);
    else
      dst[t * stride_l + k] = s_xt[t * rows + k];
  }
}

// B_j . C_t over the eight lanes l8 = 0..7 of a lane group (every lane
// holds the sum), 4-element vector loads where N allows.
template <typename IT>
__device__ __forceinline__ float entry_dot8(const IT* Bj, const IT* Ct, int N, int l8) {
  float dot = 0.f;
  if (N % 4 == 0) {
    for (int n = l8 * 4; n < N; n += 32) {
      const float4 bq = load4(Bj + n), cq = load4(Ct + n);
      dot = __fmaf_rn(bq.x, cq.x, dot);
      dot = __fmaf_rn(bq.y, cq.y, dot);
      dot = __fmaf_rn(bq.z, cq.z, dot);
      dot = __fmaf_rn(bq.w, cq.w, dot);
    }
  } else {
    for (int n = l8; n < N; n += 8) dot = __fmaf_rn(to_f32(Bj[n]), to_f32(Ct[n]), dot);
  }
  dot += __shfl_xor_sync(0xffffffffu, dot, 4);
  dot += __shfl_xor_sync(0xffffffffu, dot, 2);
  dot += __shfl_xor_sync(0xffffffffu, dot, 1);
  return dot;
}

// The closed form's weights (append steps, per-head step size and A):
// coef[t][j] = e^{A (sum_{i=j+1..c+t} delta_i)} delta_j (B_j . C_t) for
// j <= c + t (0 above), and dec[t] = e^{A sum_{i<=c+t} delta_i} after them.
// Entry j < c is the ring's (s_Br), j >= c this call's token j - c. Eight
// lanes per (t, j), 4-element vector loads where N allows.
template <typename IT, int NT>
__device__ __forceinline__ void replay_weights(const IT* s_Br, const IT* s_Bt, const IT* s_C,
                                               const float* s_delta, float A_h, int c, int T,
                                               int N, float* s_coef, int tid) {
  const int E = c + T;
  const int l8 = tid & 7;
  for (int base = 0; base < T * E; base += NT / 8) {
    const int q = min(base + (tid >> 3), T * E - 1);
    const int t = q / E, j = q - t * E;
    const float dot = entry_dot8(j < c ? s_Br + j * N : s_Bt + (j - c) * N, s_C + t * N, N, l8);
    if (l8 == 0 && base + (tid >> 3) < T * E) {
      float w = 0.f;
      if (j <= c + t) {
        float span = 0.f;
        for (int i = j + 1; i <= c + t; ++i) span += s_delta[i];
        w = ssu_math::exp(A_h * span) * s_delta[j] * dot;
      }
      s_coef[q] = w;
    }
  }
  float* const s_dec = s_coef + T * E;
  for (int t = tid; t < T; t += NT) {
    float span = 0.f;
    for (int i = 0; i <= c + t; ++i) span += s_delta[i];
    s_dec[t] = ssu_math::exp(A_h * span);
  }
}

// Stores a folded row exactly as the plain update stores a row: the lane's
// chunks lane_r + k * lpr (k < kc, below `chunks`) of v, encoded (round to
// nearest, stochastic rounding with the Philox words of pool offset row_off
// + element, block-scaled codes with the row's decode scale to *scale_dst).
// Every lane of the row group calls it (a block-scaled row's encode factor
// is a reduction over them); only `valid` rows store.
template <typename ST, int VEC, int KCMAX>
__device__ __forceinline__ void store_folded_row(const float* v, bool valid, ST* dst_row,
                                                 uint64_t row_off, int lane_r, int lpr, int kc,
                                                 int chunks, bool sr, uint64_t seed,
                                                 uint32_t rounds, float* scale_dst) {
  RowStore rs;
  rs.seed = seed;
  rs.rounds = rounds;
  rs.enc = 1.f;
  if constexpr (StateFormat<ST>::kScaled) rs.enc = row_encode_factor<KCMAX * VEC, ST>(v, lpr);
  if (!valid) return;
#pragma unroll
  for (int k = 0; k < KCMAX; ++k) {
    const int ci = lane_r + k * lpr;
    if (k < kc && ci < chunks) {
      rs.L0 = row_off + static_cast<uint64_t>(ci * VEC);
      Chunk<ST, VEC> cc;
      if (sr)
        encode_chunk<ST, VEC, true>(cc, v + k * VEC, rs);
      else
        encode_chunk<ST, VEC, false>(cc, v + k * VEC, rs);
      store_encoded<ST, VEC>(dst_row + ci * VEC, cc, VEC);
    }
  }
  if constexpr (StateFormat<ST>::kScaled)
    if (lane_r == 0) *scale_dst = 1.f / rs.enc;
}

// The outputs of rows [r0, r0 + rows) of head h for this call's T tokens:
// s_y holds the row sums (h0 . C_t for the closed form, the folded state's
// otherwise); the closed form adds the decay and the weighted ring x.
template <typename IT, int NT>
__device__ __forceinline__ void write_outputs(const ssu_update_params& p, IT* out_bh, int64_t tok0,
                                              int r0, int rows, int T, int c, bool closed,
                                              const float* s_y, const float* s_coef,
                                              const float* s_D, const IT* s_xr, const IT* s_xt,
                                              const IT* s_z, int tid) {
  const int E = c + T;
  const float* const s_dec = s_coef + T * E;
  // (t, r) of i stepped along, not divided out; the committed entries and
  // the call's tokens summed in two loops, in the same order as one.
  int t = tid / rows, r = tid - t * rows;
  for (int i = tid; i < T * rows; i += NT) {
    float y = s_y[i];
    if (closed) {
      y *= s_dec[t];
      const float* coef = s_coef + t * E;
      const IT* xr = s_xr + r;
      for (int j = 0; j < c; ++j, xr += rows) y += coef[j] * to_f32(*xr);
      const IT* xt = s_xt + r;
      for (int j = c; j <= c + t; ++j, xt += rows) y += coef[j] * to_f32(*xt);
    }
    y += s_D[r] * to_f32(s_xt[i]);
    if (p.features & SSU_F_HAS_Z) y *= silu(to_f32(s_z[i]));
    out_bh[(tok0 + t) * p.out_stride_t + r0 + r] = from_f32<IT>(y);
    for (r += NT; r >= rows; r -= rows) ++t;
  }
}

// The sequence's last block or warp: this call's B and delta entries (shared
// by the heads of a group / every head, so written only once every reader
// has counted itself in) and the counters; with entries false the counters
// only (append steps write their new entries as they have them: nobody in
// the call reads those).
// B goes 16 bytes at a time where the rows allow, each thread's loads of a
// round issued before its stores, an index divided per chunk: one value an
// iteration cost a warp a round trip and two divisions per value (32 of
// each for a bf16 call's B of 8 x 128 at the end of every flush step).
template <typename IT, int NT>
__device__ __forceinline__ void write_shared_entries(const ssu_replay_params& rp, int64_t b,
                                                     int64_t s, int64_t tok0, int T, int newc,
                                                     int tid, bool entries = true,
                                                     bool dt_entries = true) {
  const ssu_update_params& p = rp.u;
  const uint32_t f = p.features;
  if (entries && !(rp.rflags & SSU_RF_FLUSH_OP)) {
    const int G = static_cast<int>(p.ngroups), N = static_cast<int>(p.dstate);
    IT* const Bw = static_cast<IT*>(rp.ring_B) + s * rp.ring_B_stride_s + newc * rp.ring_B_stride_l;
    const IT* const Bs = static_cast<const IT*>(p.B) + b * p.B_stride_b + tok0 * p.B_stride_t;
    // B: T x G rows of N values, as 16-byte chunks where the rows allow
    // (KB chunks a thread and round), else one value at a time.
    constexpr int V = 16 / sizeof(IT);
    constexpr int KB = NT >= 64 ? 1 : 64 / NT;
    const bool vec = N % V == 0 &&
                     ((reinterpret_cast<uintptr_t>(Bw) | reinterpret_cast<uintptr_t>(Bs)) & 15) == 0 &&
                     ((rp.ring_B_stride_l | rp.ring_B_stride_g | p.B_stride_t | p.B_stride_g) *
                      static_cast<int64_t>(sizeof(IT))) % 16 == 0;
    if (vec) {
      const int cpr = N / V, total = T * G * cpr;
      for (int base = tid; base < total; base += KB * NT) {
        uint4 v[KB];
        uint4* dst[KB];
#pragma unroll
        for (int k = 0; k < KB; ++k) {
          const int i = base + k * NT;
          if (i < total) {
            const int row = i / cpr, n = (i - row * cpr) * V, t = row / G, gg = row - t * G;
            v[k] = __ldg(reinterpret_cast<const uint4*>(Bs + t * p.B_stride_t + gg * p.B_stride_g + n));
            dst[k] = reinterpret_cast<uint4*>(Bw + t * rp.ring_B_stride_l + gg * rp.ring_B_stride_g + n);
          }
        }
#pragma unroll
        for (int k = 0; k < KB; ++k)
          if (base + k * NT < total) *dst[k] = v[k];
      }
    } else {
      for (int i = tid; i < T * G * N; i += NT) {
        const int t = i / (G * N), rem = i - t * G * N, gg = rem / N, n = rem - gg * N;
        Bw[t * rp.ring_B_stride_l + gg * rp.ring_B_stride_g + n] =
            Bs[t * p.B_stride_t + gg * p.B_stride_g + n];
      }
    }
    // delta: T x H (x P per channel) values (with one token, H: a few
    // values a thread), unless each head's warp wrote its own.
    const int H = dt_entries ? static_cast<int>(p.nheads) : 0;
    const int per = (f & SSU_F_DT_PER_CHANNEL) ? static_cast<int>(p.dim) : 1;
    float* const dw = rp.ring_dt + s * rp.ring_dt_stride_s + newc * rp.ring_dt_stride_l;
    for (int i = tid; i < T * H * per; i += NT) {
      const int t = i / (H * per), rem = i - t * H * per, hh = rem / per, pp = rem - hh * per;
      const int64_t tok = tok0 + t;
      float v = load_param(p.dt, p.dt_dtype,
                           b * p.dt_stride_b + tok * p.dt_stride_t + hh * p.dt_stride_h +
                               static_cast<int64_t>(pp) * p.dt_stride_p);
      if (f & SSU_F_HAS_DT_BIAS)
        v += load_param(p.dt_bias, p.dt_bias_dtype,
                        hh * p.dt_bias_stride_h + static_cast<int64_t>(pp) * p.dt_bias_stride_p);
      if (f & SSU_F_DT_SOFTPLUS) v = softplus20(v);
      dw[t * rp.ring_dt_stride_l + hh * rp.ring_dt_stride_h +
         static_cast<int64_t>(pp) * rp.ring_dt_stride_p] = v;
    }
  }
  if (tid == 0) {
    rp.committed[s * rp.committed_stride] = newc;
    rp.pending[s * rp.pending_stride] = (rp.rflags & SSU_RF_FLUSH_OP) ? 0 : T;
  }
}

template <typename ST, typename IT>
__device__ __forceinline__ void replay_body(const ssu_cuda_replay_launch& L) {
  constexpr int VEC = 16 / sizeof(ST);
  // Chunks a lane holds per row: two for f32 rows of 256, else one (16
  // elements of an 8-bit row).
  constexpr int KCMAX = VEC > 8 ? 1 : 8 / VEC;
  constexpr int EL = KCMAX * VEC;  // row elements per lane
  constexpr bool QUANT = StateFormat<ST>::kScaled;
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
  const bool reporter = h == 0 && tile == 0;

  // Shared memory (launch offsets): the per-token inputs and the committed
  // ring entries arrive unconverted, each in its own array, because they are
  // requested before the counters say where the call's tokens go.
  IT* const s_Br = reinterpret_cast<IT*>(smem + L.off_Br);  // [L][N] committed B
  IT* const s_Bt = reinterpret_cast<IT*>(smem + L.off_Bt);  // [T][N]
  IT* const s_C = reinterpret_cast<IT*>(smem + L.off_C);    // [T][N]
  IT* const s_xr = reinterpret_cast<IT*>(smem + L.off_xr);  // [L][rows] committed x
  IT* const s_xt = reinterpret_cast<IT*>(smem + L.off_xt);  // [T][rows]
  IT* const s_z = reinterpret_cast<IT*>(smem + L.off_z);    // [T][rows]
  float* const s_delta = reinterpret_cast<float*>(smem + L.off_delta);
  float* const s_dA = reinterpret_cast<float*>(smem + L.off_dA);
  float* const s_dtt = reinterpret_cast<float*>(smem + L.off_dtt);
  float* const s_D = reinterpret_cast<float*>(smem + L.off_D);
  float* const s_y = reinterpret_cast<float*>(smem + L.off_y);
  float* const s_coef = reinterpret_cast<float*>(smem + L.off_coef);
  float* const s_scale = reinterpret_cast<float*>(smem + L.off_scale);
  ST* const s_tile = reinterpret_cast<ST*>(smem + L.off_tile);

  // The block's latency is a chain of dependent memory round trips; it is
  // kept to three: (1) the slot index, with this call's inputs in flight;
  // (2) the counters, with the checkpoint tile in flight; (3) the committed
  // ring entries, the counters having said how many.

  // ---- 1. the sequence: tokens and slot, and this call's inputs ------------
  int64_t tok0;
  int T;
  int state = 2;  // 1: padding, 2: active
  const int64_t slot =
      (f & SSU_F_HAS_SRC) ? load_index(p.src_index, p.index_dtype, b * p.src_stride_b) : b;
  if (!replay_tokens(p, b, reporter && tid == 0, &tok0, &T)) return;
  stage_inputs<IT, SSU_CUDA_REPLAY_THREADS>(p, b, h, g, tok0, T, r0, rows, s_Bt, s_C, s_xt, s_z,
                                            tid);

  if (state == 2 && is_pad(slot, p.pad_slot_id)) state = 1;
  if (state == 2 && slot >= p.nslots) {
    if (reporter && tid == 0) report(p.error_word, SSU_BIT_INDEX);
    state = 1;
  }
  IT* const out_bh = static_cast<IT*>(p.out) + b * p.out_stride_b + h * p.out_stride_h;
  auto zero_outputs = [&] {  // padding: exact zeros, nothing of the slot touched
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    for (int i = tid; i < T * rows; i += SSU_CUDA_REPLAY_THREADS) {
      const int t = i / rows;
      out_bh[(tok0 + t) * p.out_stride_t + r0 + (i - t * rows)] = from_f32<IT>(0.f);
    }
  };
  if (state == 1) {
    zero_outputs();
    return;
  }
  const int64_t s = slot;

  // ---- 2. the counters (one thread), with the checkpoint tile in flight ------
  const int lpr = L.lanes_per_row;
  const int lane_r = tid & (lpr - 1);
  const int grp = tid / lpr;
  const int ngrp = SSU_CUDA_REPLAY_THREADS / lpr;
  const int chunks = N / VEC;
  const int kc = (chunks + lpr - 1) / lpr;
  ST* const state_pool = static_cast<ST*>(p.state);
  const int64_t head_off = h * static_cast<int64_t>(P) * N;
  ST* const ckpt_tile = state_pool + s * p.state_stride_slot + head_off + static_cast<int64_t>(r0) * N;
  // Per-head layouts copy the checkpoint tile (one contiguous run) into
  // shared memory with cp.async: all of it in flight at once, for no
  // registers. The per-channel layouts hold rows in registers instead.
  const bool tile_ok = !dt_pc && !A_pc && (T > 0 || flush_op);
  if (tile_ok) {
    const int n16 = rows * chunks;
    for (int q = tid; q < n16; q += SSU_CUDA_REPLAY_THREADS)
      cp_async_16(s_tile + q * VEC, ckpt_tile + q * VEC);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  constexpr int RB = kReplayChunksInFlight / KCMAX;
  uint4 raw[RB][KCMAX];
  auto request_rows = [&](int rb, int row_end) {
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
  if (!tile_ok) request_rows(0, T > 0 || flush_op ? rows : 0);

  if (tid == 0) sq = replay_decide(rp, b, s, T, reporter);

  // This call's step sizes, D and (int16) the tile's decode scales: loads
  // that are in flight together with the counters.
  const float A_h = A_pc ? 0.f : load_param(p.A, p.A_dtype, h * p.A_stride_h);
  auto token_delta = [&](int t, int row) {
    const int64_t tok = tok0 + t;
    float v = load_param(p.dt, p.dt_dtype,
                         b * p.dt_stride_b + tok * p.dt_stride_t + h * p.dt_stride_h +
                             static_cast<int64_t>(row) * p.dt_stride_p);
    if (f & SSU_F_HAS_DT_BIAS)
      v += load_param(p.dt_bias, p.dt_bias_dtype,
                      h * p.dt_bias_stride_h + static_cast<int64_t>(row) * p.dt_bias_stride_p);
    if (f & SSU_F_DT_SOFTPLUS) v = softplus20(v);
    return v;
  };
  for (int r = tid; r < rows; r += SSU_CUDA_REPLAY_THREADS) {
    s_D[r] = (f & SSU_F_HAS_D)
                 ? load_param(p.D, p.D_dtype, h * p.D_stride_h + (r0 + r) * p.D_stride_p)
                 : 0.f;
    if (QUANT) s_scale[r] = p.state_scale[s * p.state_scale_stride_slot + h * P + r0 + r];
  }
  if (!dt_pc) {
    for (int t = tid; t < T; t += SSU_CUDA_REPLAY_THREADS) s_dtt[t] = token_delta(t, 0);
  } else {
    for (int i = tid; i < T * rows; i += SSU_CUDA_REPLAY_THREADS) {
      const int t = i / rows, r = i - t * rows;
      s_dtt[i] = token_delta(t, r0 + r);
    }
  }
  __syncthreads();

  const ReplaySeq sqv = sq;
  if (sqv.state == 1) {  // counters out of range: handled as padding
    zero_outputs();
    return;
  }
  const int c = sqv.c, E = c + T;
  const bool flush = sqv.flush;
  // Per-head step size and A, no flush: the closed form (no fold).
  const bool closed = !flush && !dt_pc && !A_pc;
  // (A flush op on a slot with nothing committed only resets its counters.)
  const int row_end = (T > 0 || flush) ? rows : 0;

  // ---- 3. the committed ring entries ------------------------------------------
  const IT* const x_ring = static_cast<const IT*>(rp.ring_x) + s * rp.ring_x_stride_s +
                           h * rp.ring_x_stride_h + r0;
  const IT* const B_ring = static_cast<const IT*>(rp.ring_B) + s * rp.ring_B_stride_s +
                           g * rp.ring_B_stride_g;
  const float* const dt_ring = rp.ring_dt + s * rp.ring_dt_stride_s + h * rp.ring_dt_stride_h;
  stage_async<IT>(s_Br, B_ring, rp.ring_B_stride_l, c, N, tid);
  stage_async<IT>(s_xr, x_ring, rp.ring_x_stride_l, c, rows, tid);
  if (dt_pc) stage_async<float>(s_delta, dt_ring + r0, rp.ring_dt_stride_l, c, rows, tid);
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  if (!dt_pc) {
    for (int j = tid; j < E; j += SSU_CUDA_REPLAY_THREADS) {
      const float d = j < c ? dt_ring[j * rp.ring_dt_stride_l] : s_dtt[j - c];
      s_delta[j] = d;
      if (!A_pc) s_dA[j] = ssu_math::exp(A_h * d);
    }
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();

  // Every ring entry and counter this block reads is read: count it in
  // (the result tells, at the end, whether this is the sequence's last).
  // (No fence: a value already read cannot change, and the last block
  // writes only after every block of the sequence counted in.)
  int arrived = 0;
  if (writes && tid == 0) arrived = atomicAdd(rp.pending + s * rp.pending_stride, 0x10000) >> 16;

  // Entry j of the call (committed entries, then this call's tokens).
  auto B_of = [&](int j) -> const IT* { return j < c ? s_Br + j * N : s_Bt + (j - c) * N; };
  auto x_of = [&](int j, int r) {
    return to_f32(j < c ? s_xr[j * rows + r] : s_xt[(j - c) * rows + r]);
  };
  auto delta_of = [&](int j, int r) {
    if (!dt_pc) return s_delta[j];
    return j < c ? s_delta[j * rows + r] : s_dtt[(j - c) * rows + r];
  };

  // ---- append this call's x rows (the block's own rows; no other block
  // reads them) ------------------------------------------------------------------
  if (writes && !flush_op && T > 0)
    append_x_rows<IT, SSU_CUDA_REPLAY_THREADS>(
        static_cast<IT*>(rp.ring_x) + s * rp.ring_x_stride_s + h * rp.ring_x_stride_h + r0 +
            sqv.newc * rp.ring_x_stride_l,
        rp.ring_x_stride_l, s_xt, T, rows, tid);
  // An append step's new entries c .. c + T - 1 are read by no one in this
  // call, so the blocks write them now instead of the sequence's last block
  // once every reader is in (as the warp kernels do, which measured faster):
  // each block its rows' step sizes (per-channel) or the head's first tile
  // the head's (per-head), the first tile of a group's first head the
  // group's B rows. A flush step's new entry 0 waits for the last block.
  const bool own_entries = L.early_entries && writes && !flush_op && !flush && T > 0;
  if (own_entries) {
    float* const dt_dst = rp.ring_dt + s * rp.ring_dt_stride_s + h * rp.ring_dt_stride_h +
                          sqv.newc * rp.ring_dt_stride_l;
    if (dt_pc) {
      for (int i = tid; i < T * rows; i += SSU_CUDA_REPLAY_THREADS) {
        const int t = i / rows, r = i - t * rows;
        dt_dst[t * rp.ring_dt_stride_l + static_cast<int64_t>(r0 + r) * rp.ring_dt_stride_p] =
            s_dtt[i];
      }
    } else if (r0 == 0) {
      for (int t = tid; t < T; t += SSU_CUDA_REPLAY_THREADS) dt_dst[t * rp.ring_dt_stride_l] = s_dtt[t];
    }
    if (r0 == 0 && h % p.heads_per_group == 0)
      append_x_rows<IT, SSU_CUDA_REPLAY_THREADS>(
          static_cast<IT*>(rp.ring_B) + s * rp.ring_B_stride_s + g * rp.ring_B_stride_g +
              sqv.newc * rp.ring_B_stride_l,
          rp.ring_B_stride_l, s_Bt, T, static_cast<int>(N), tid);
  }

  // ---- closed form: decays and weights per (token, entry) (a block's fixed
  // cost: it does not shrink with the tile) ------------------------------------
  if (closed)
    replay_weights<IT, SSU_CUDA_REPLAY_THREADS>(s_Br, s_Bt, s_C, s_delta, A_h, c, T, N, s_coef,
                                                tid);

  // ---- rows ---------------------------------------------------------------
  // Lane l of a row group holds chunk k at elements (l + k * lpr) * VEC; a
  // row's dot products with C reduce over the group's lpr lanes.
  auto row_dot = [&](const float* v, const IT* Ct) {
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < KCMAX; ++k) {
      const int n0 = (lane_r + k * lpr) * VEC;
      if (k < kc && n0 < N) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) dot = __fmaf_rn(v[k * VEC + i], to_f32(Ct[n0 + i]), dot);
      }
    }
    for (int off = lpr >> 1; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    return dot;
  };
  // A lane's raw chunks of row r: from the shared tile, or the registers
  // requested from global memory (batch slot ib).
  auto row_raw = [&](int r, int ib, uint4* out) {
#pragma unroll
    for (int k = 0; k < KCMAX; ++k) {
      const int ci = lane_r + k * lpr;
      if (tile_ok) {
        out[k] = ci < chunks ? *reinterpret_cast<const uint4*>(s_tile + r * N + ci * VEC)
                             : make_uint4(0u, 0u, 0u, 0u);
      } else {
#pragma unroll
        for (int i = 0; i < RB; ++i)
          if (i == ib) out[k] = raw[i][k];
      }
    }
  };
  const bool tiled = tile_ok && closed && chunks % 8 == 0 && row_end > 0;
  if (tiled) {
    // Append step from the shared tile: eight lanes per row (a row's 16-byte
    // chunks ci = lane + 8k, so each quarter warp reads 128 contiguous bytes),
    // four rows per warp and instruction.
    const int l8 = tid & 7, k8 = chunks >> 3;
    for (int rb = 0; rb < rows; rb += SSU_CUDA_REPLAY_THREADS / 8) {
      const int r = rb + (tid >> 3);
      const int rr = r < rows ? r : rows - 1;
      for (int t = 0; t < T; ++t) {
        const IT* Ct = s_C + t * N;
        float dot = 0.f;
#pragma unroll 4
        for (int k = 0; k < k8; ++k) {
          const int ci = l8 + 8 * k;
          Chunk<ST, VEC> cc;
          cc.u = *reinterpret_cast<const uint4*>(s_tile + rr * N + ci * VEC);
#pragma unroll
          for (int i = 0; i < VEC; i += 4) {
            const float4 c4 = load4(Ct + ci * VEC + i);
            dot = __fmaf_rn(to_f32(cc.e[i]), c4.x, dot);
            dot = __fmaf_rn(to_f32(cc.e[i + 1]), c4.y, dot);
            dot = __fmaf_rn(to_f32(cc.e[i + 2]), c4.z, dot);
            dot = __fmaf_rn(to_f32(cc.e[i + 3]), c4.w, dot);
          }
        }
        dot += __shfl_xor_sync(0xffffffffu, dot, 4);
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        if (QUANT) dot *= s_scale[rr];
        if (r < rows && l8 == 0) s_y[t * rows + r] = dot;
      }
    }
  } else if (closed) {
    // Append step: h0 . C_t per row; the checkpoint is only read.
    for (int rb = 0; rb < row_end; rb += RB * ngrp) {
      if (rb > 0 && !tile_ok) request_rows(rb, row_end);
#pragma unroll
      for (int ib = 0; ib < RB; ++ib) {
        if (rb + ib * ngrp < row_end) {  // uniform over the block
          const int r = rb + grp + ib * ngrp;
          const bool valid = r < rows;
          float v[EL];
          uint4 rw[KCMAX];
          row_raw(valid ? r : 0, ib, rw);
          unpack_row<ST, VEC, KCMAX>(rw, lane_r, lpr, valid ? chunks : 0,
                                     QUANT && valid ? s_scale[r] : 1.f, v);
          for (int t = 0; t < T; ++t) {
            const float dot = row_dot(v, s_C + t * N);
            if (valid && lane_r == 0) s_y[t * rows + r] = dot;
          }
        }
      }
    }
  } else if (tile_ok && !dt_pc && !A_pc) {
    // Flush step, per-head layout: fold the committed entries into each row
    // of the shared tile with the update's own fp32 sequence, store the row
    // exactly as the plain update would, then run the call's tokens. A
    // thread folds MR rows at once (grp + m * ngrp of a pass): MR
    // independent chains per element, one B chunk load for all of them.
    constexpr int MR = 2;
    const bool sr = f & SSU_F_STOCHASTIC;
    const uint64_t seed = sr ? *p.sr_seed : 0;
    for (int rb = 0; rb < row_end; rb += MR * ngrp) {
      float v[MR][EL];
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        const int r = rb + grp + m * ngrp;
        const bool valid = r < rows;
        uint4 rw[KCMAX];
        row_raw(valid ? r : 0, 0, rw);
        unpack_row<ST, VEC, KCMAX>(rw, lane_r, lpr, valid ? chunks : 0,
                                   QUANT && valid ? s_scale[r] : 1.f, v[m]);
      }
      auto advance = [&](int j) {
        const float dA = s_dA[j];
        const float dl = s_delta[j];
        const IT* const Bj = B_of(j);
        float dtx[MR];
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          const int r = rb + grp + m * ngrp;
          dtx[m] = dl * x_of(j, r < rows ? r : 0);
        }
#pragma unroll
        for (int k = 0; k < KCMAX; ++k) {
          const int n0 = (lane_r + k * lpr) * VEC;
          if (k < kc && n0 < N) {
            float bv[VEC];
            load_vec<IT, VEC>(Bj + n0, bv);
#pragma unroll
            for (int m = 0; m < MR; ++m)
#pragma unroll
              for (int i = 0; i < VEC; ++i)
                v[m][k * VEC + i] = v[m][k * VEC + i] * dA + bv[i] * dtx[m];
          }
        }
      };
      for (int j = 0; j < c; ++j) advance(j);
#pragma unroll
      for (int m = 0; m < MR; ++m) {
        const int r = rb + grp + m * ngrp;
        const bool valid = r < rows;
        const int row = r0 + (valid ? r : 0);
        if (flush && writes)
          store_folded_row<ST, VEC, KCMAX>(
              v[m], valid, ckpt_tile + static_cast<int64_t>(valid ? r : 0) * N,
              static_cast<uint64_t>(s * p.state_stride_slot + head_off +
                                    static_cast<int64_t>(row) * N),
              lane_r, lpr, kc, chunks, sr, seed, p.sr_rounds,
              QUANT ? p.state_scale + s * p.state_scale_stride_slot + h * P + row : nullptr);
      }
      for (int t = 0; t < T; ++t) {
        advance(c + t);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          const int r = rb + grp + m * ngrp;
          const float dot = row_dot(v[m], s_C + t * N);
          if (r < rows && lane_r == 0) s_y[t * rows + r] = dot;
        }
      }
    }
  } else {
    // Flush steps and the per-channel layout: fold the committed entries
    // into each row, store it when flushing, then run the call's tokens.
    const bool sr = f & SSU_F_STOCHASTIC;
    const uint64_t seed = sr ? *p.sr_seed : 0;
    for (int rb = 0; rb < row_end; rb += RB * ngrp) {
      if (rb > 0 && !tile_ok) request_rows(rb, row_end);
#pragma unroll 1
      for (int ib = 0; ib < RB; ++ib) {
        if (rb + ib * ngrp >= row_end) break;  // uniform over the block
        const int r = rb + grp + ib * ngrp;
        const bool valid = r < rows;
        const int rr = valid ? r : 0;
        const int row = r0 + rr;
        float v[EL];
        {
          uint4 rw[KCMAX];
          row_raw(rr, ib, rw);
          unpack_row<ST, VEC, KCMAX>(rw, lane_r, lpr, valid ? chunks : 0,
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
          const float d = delta_of(j, rr);
          const float dtx = d * x_of(j, rr);
          const float dAh = A_pc ? 0.f : (dt_pc ? ssu_math::exp(A_h * d) : s_dA[j]);
          const IT* const Bj = B_of(j);
#pragma unroll
          for (int k = 0; k < KCMAX; ++k) {
            const int n0 = (lane_r + k * lpr) * VEC;
            if (k < kc && n0 < N) {
#pragma unroll
              for (int i = 0; i < VEC; ++i) {
                const float dA = A_pc ? ssu_math::exp(a[k * VEC + i] * d) : dAh;
                v[k * VEC + i] = v[k * VEC + i] * dA + to_f32(Bj[n0 + i]) * dtx;
              }
            }
          }
        };
        for (int j = 0; j < c; ++j) advance(j);
        if (flush && writes)  // exactly as the plain update stores a row
          store_folded_row<ST, VEC, KCMAX>(
              v, valid, ckpt_tile + static_cast<int64_t>(rr) * N,
              static_cast<uint64_t>(s * p.state_stride_slot + head_off +
                                    static_cast<int64_t>(row) * N),
              lane_r, lpr, kc, chunks, sr, seed, p.sr_rounds,
              QUANT ? p.state_scale + s * p.state_scale_stride_slot + h * P + row : nullptr);
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
  write_outputs<IT, SSU_CUDA_REPLAY_THREADS>(p, out_bh, tok0, r0, rows, T, c, closed, s_y, s_coef,
                                             s_D, s_xr, s_xt, s_z, tid);
  if (!writes) return;

  // ---- the sequence's last block: shared ring entries and the counters ----
  if (tid == 0) {
    const int blocks = static_cast<int>(p.nheads) * tiles;
    sq.last = (arrived & 0x7fff) == blocks - 1;
    if (sq.last) __threadfence();
  }
  __syncthreads();
  if (!sq.last) return;
  write_shared_entries<IT, SSU_CUDA_REPLAY_THREADS>(rp, b, s, tok0, T, sqv.newc, tid,
                                                    !own_entries);
}


// replay_weights for a block whose warps are heads of one group (warp
// kernels, L.group_share): the block computes the T x E dots B_j . C_t once
// into s_gdot (eight lanes each; every warp's own s_Bt and s_C hold the same
// group's values), then each warp its head's weights from them, with the
// spans taken as differences of prefix sums S_j = delta_0 + ... + delta_j
// (a warp scan into s_S): one exp per weight and no loop over its span,
// which the outputs' tolerance allows. Every thread of the block calls it.
template <typename IT>
__device__ __forceinline__ void replay_weights_shared(const IT* s_Br, const IT* s_Bt,
                                                      const IT* s_C, const float* s_delta,
                                                      float* s_S, float A_h, int c, int T,
                                                      int N, float* s_gdot, float* s_coef,
                                                      int lane) {
  const int E = c + T;
  const int tid = threadIdx.x, l8 = tid & 7;
  float carry = 0.f;
  for (int base = 0; base < E; base += 32) {
    const int j = base + lane;
    float v = j < E ? s_delta[j] : 0.f;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float u = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += u;
    }
    v += carry;
    if (j < E) s_S[j] = v;
    carry = __shfl_sync(0xffffffffu, v, 31);
  }
  for (int base = 0; base < T * E; base += SSU_CUDA_REPLAY_THREADS / 8) {
    const int q = min(base + (tid >> 3), T * E - 1);
    const int t = q / E, j = q - t * E;
    const float dot = entry_dot8(j < c ? s_Br + j * N : s_Bt + (j - c) * N, s_C + t * N, N, l8);
    if (l8 == 0 && base + (tid >> 3) < T * E) s_gdot[q] = dot;
  }
  __syncthreads();  // s_gdot (and this warp's s_S)
  for (int q = lane; q < T * E; q += 32) {
    const int t = q / E, j = q - t * E;
    s_coef[q] = j <= c + t
                    ? ssu_math::exp(A_h * (s_S[c + t] - s_S[j])) * s_delta[j] * s_gdot[q]
                    : 0.f;
  }
  float* const s_dec = s_coef + T * E;
  for (int t = lane; t < T; t += 32) s_dec[t] = ssu_math::exp(A_h * s_S[c + t]);
}

// ---- one warp per (sequence, head) ------------------------------------------
// The kernels above stage a block's checkpoint tile in shared memory and
// synchronize four warps at every phase; at serving batch their barriers
// and per-block bookkeeping, not the memory system, set the pace. Here one
// warp owns a whole head: it streams the head's rows through registers
// (two or four row steps in flight), stages only the small per-token inputs and the
// committed ring entries in its own slice of shared memory, and never waits
// for another warp (below serving batch a head is split into parts of whole
// row steps, a warp each, with the same prologue: more warps in flight where
// there are few heads). Per-head step size and A only, rows of 8 lanes with up
// to 16 state elements per lane (N * sizeof(state) a multiple of 128 bytes,
// at most 512 for f32, 256 for 16-bit and 128 for 8-bit states); the
// planner sends other shapes to the block kernels.
constexpr int kReplayWarpEl = 16;  // state elements per lane and row
// Row steps in flight per warp (a step: 4 rows, 2 KiB of an f32 state), and
// the blocks per SM the registers allow: f32 and 16-bit states at four
// blocks (128 registers), 8-bit states at five (96). At batch 512 the f32
// kernels' four steps measured 5 % faster than two at five blocks. The
// 16-bit kernels take four blocks for their flushes, which fold two rows
// per B load at 128 registers (below): a flush warp's ~24 K instructions
// are what a step waits for when only a few sequences flush (H200, bf16
// batch 8 / 64 / 256: 17.1 / 73.1 / 246.9 -> 15.4 / 71.4 / 253.2 us per
// step in whole cycles (with two parts at batch 8), 31.3 / 100.0 / 286.1 ->
// 22.4 / 96.8 / 287.0 with the sequences' cycles out of step; batch 512
// +2 % either way). Eight steps in flight (128 registers for 16-bit, 96 for
// 8-bit states) measured no faster: bf16 batch 512 +6 %, int8 +2 %.
template <typename ST>
constexpr int kReplayWarpDepth = 4;
template <typename ST>
constexpr int kReplayWarpMinBlocks = (sizeof(ST) != 1 ? 4 : 5) * 128 / SSU_CUDA_REPLAY_THREADS;

// ONE: the call has one token per sequence (a plan of max_tokens 1, not
// the flush op), so the multi-token paths are compiled out: the kernel is
// about a quarter shorter, and at small batch an append warp spent a third
// of its stall samples waiting for instructions (H200, bf16 batch 8).
template <typename ST, typename IT, bool ONE>
__device__ __forceinline__ void replay_warp_body(const ssu_cuda_replay_launch& L) {
  constexpr int VEC = 16 / sizeof(ST);
  constexpr int KC = kReplayWarpEl / VEC;  // 16-byte chunks per lane and row, at most
  constexpr bool QUANT = StateFormat<ST>::kScaled;
  constexpr unsigned kAll = 0xffffffffu;
  extern __shared__ __align__(16) unsigned char smem[];

  const ssu_replay_params& rp = L.p;
  const ssu_update_params& p = rp.u;
  const uint32_t f = p.features;
  const bool flush_op = rp.rflags & SSU_RF_FLUSH_OP;
  const bool writes = !(f & SSU_F_DISABLE_UPDATE);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // A head's rows in L.tiles_per_head parts of L.rows_per_block rows (whole
  // row steps), a warp each: at small batch, more warps than heads keep
  // more of the checkpoint in flight and shorten each warp's row loop.
  const int parts = L.tiles_per_head;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * SSU_CUDA_REPLAY_WARPS + warp;
  if (item >= p.batch * p.nheads * parts) return;
  const int64_t bh = item / parts;
  const int part = static_cast<int>(item - bh * parts);
  const int64_t b = bh / p.nheads;
  const int64_t h = bh - b * p.nheads;
  const int64_t g = h / p.heads_per_group;
  // P: this warp's rows, from row r0 of the head's Pf.
  const int Pf = static_cast<int>(p.dim), N = static_cast<int>(p.dstate);
  const int P = L.rows_per_block, r0 = part * P;
  const bool reporter = h == 0 && part == 0 && lane == 0;

  // This warp's slice of shared memory (offsets as for the block kernels,
  // with rows = P, within a slice of L.warp_slice bytes).
  unsigned char* const ws = smem + static_cast<int64_t>(warp) * L.warp_slice;
  // [L][N] committed B: the block's, shared by its warps (L.group_share),
  // or the warp's own.
  const bool share = L.group_share;
  IT* const s_Br = share ? reinterpret_cast<IT*>(smem + L.off_group_B)
                         : reinterpret_cast<IT*>(ws + L.off_Br);
  IT* const s_Bt = reinterpret_cast<IT*>(ws + L.off_Bt);  // [T][N]
  IT* const s_C = reinterpret_cast<IT*>(ws + L.off_C);    // [T][N]
  IT* const s_xr = reinterpret_cast<IT*>(ws + L.off_xr);  // [L][P] committed x
  IT* const s_xt = reinterpret_cast<IT*>(ws + L.off_xt);  // [T][P]
  IT* const s_z = reinterpret_cast<IT*>(ws + L.off_z);    // [T][P]
  float* const s_delta = reinterpret_cast<float*>(ws + L.off_delta);  // [E]
  float* const s_dA = reinterpret_cast<float*>(ws + L.off_dA);        // [E]
  float* const s_dtt = reinterpret_cast<float*>(ws + L.off_dtt);      // [T]
  float* const s_D = reinterpret_cast<float*>(ws + L.off_D);          // [P]
  float* const s_y = reinterpret_cast<float*>(ws + L.off_y);          // [T][P]
  float* const s_coef = reinterpret_cast<float*>(ws + L.off_coef);    // [T][E], [T]
  float* const s_scale = reinterpret_cast<float*>(ws + L.off_scale);  // [P]

  // ---- 1. the sequence: tokens and slot, and this call's inputs ------------
  int64_t tok0;
  int T;
  const int64_t slot =
      (f & SSU_F_HAS_SRC) ? load_index(p.src_index, p.index_dtype, b * p.src_stride_b) : b;
  if (!replay_tokens(p, b, reporter, &tok0, &T)) return;
  if constexpr (ONE) T = 1;  // (max_tokens 1: a sequence runs 0 or 1 tokens)
  stage_inputs<IT, 32>(p, b, h, g, tok0, T, r0, P, s_Bt, s_C, s_xt, s_z, lane);
  // The per-head parameters and this call's step sizes do not depend on the
  // slot: requested now, they arrive with it instead of a round trip after
  // the counters.
  const float A_h = load_param(p.A, p.A_dtype, h * p.A_stride_h);
  auto token_delta = [&](int t) {
    const int64_t tok = tok0 + t;
    float v = load_param(p.dt, p.dt_dtype, b * p.dt_stride_b + tok * p.dt_stride_t + h * p.dt_stride_h);
    if (f & SSU_F_HAS_DT_BIAS) v += load_param(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride_h);
    if (f & SSU_F_DT_SOFTPLUS) v = softplus20(v);
    return v;
  };
  for (int t = lane; t < T; t += 32) s_dtt[t] = token_delta(t);
  for (int r = lane; r < P; r += 32)
    s_D[r] = (f & SSU_F_HAS_D)
                 ? load_param(p.D, p.D_dtype, h * p.D_stride_h + (r0 + r) * p.D_stride_p)
                 : 0.f;

  IT* const out_bh = static_cast<IT*>(p.out) + b * p.out_stride_b + h * p.out_stride_h + r0;
  auto zero_outputs = [&] {  // padding: exact zeros, nothing of the slot touched
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    for (int i = lane; i < T * P; i += 32) {
      const int t = i / P;
      out_bh[(tok0 + t) * p.out_stride_t + (i - t * P)] = from_f32<IT>(0.f);
    }
  };
  if (is_pad(slot, p.pad_slot_id)) {
    zero_outputs();
    return;
  }
  if (slot >= p.nslots) {
    if (reporter) report(p.error_word, SSU_BIT_INDEX);
    zero_outputs();
    return;
  }
  const int64_t s = slot;

  // ---- 2. the counters, with the first two row steps of the checkpoint in
  // flight. Row step rs covers rows 4 rs + grp; lane l8 of a row holds its
  // 16-byte chunks l8 + 8 k (a quarter warp reads 128 contiguous bytes).
  const int grp = lane >> 3, l8 = lane & 7;
  const int kc = N / VEC / 8;
  const int nsteps = (P + 3) / 4;
  const int64_t head_off = (h * static_cast<int64_t>(Pf) + r0) * N;
  ST* const ckpt = static_cast<ST*>(p.state) + s * p.state_stride_slot + head_off;
  // The lane's first chunk of row step 0; a step is 4 rows further, chunk k
  // 8 k chunks further (immediate offsets).
  const uint4* const lane_src = reinterpret_cast<const uint4*>(ckpt + grp * N) + l8;
  const int step_chunks = 4 * N / VEC;
  // With 4- and 2-byte states a chunk not loaded (a row beyond P, a chunk
  // beyond kc) keeps what its register held (zeros from the start for a
  // chunk beyond kc, or an earlier row step's values for a row beyond P): no
  // row beyond P is stored or written out, and each row's values (its dots,
  // mma rows, encode factor) stay its own; the zeroing was 8 of a one-token
  // row step's ~50 instructions (H100 f32 batch 64, launches alone: appends
  // -6 %, flushes -5 %). The 8-bit-state kernels (96 registers) keep it.
  // (The step's address as one 32 x 32 + 64-bit multiply-add, chunk k at an
  // immediate offset from it.)
  const uint32_t step_bytes = static_cast<uint32_t>(step_chunks) * 16u;
  auto load_step = [&](int rs, uint4* raw) {
    const bool in = rs * 4 + grp < P;
    const uint4* const src = reinterpret_cast<const uint4*>(
        reinterpret_cast<const char*>(lane_src) + static_cast<uint32_t>(rs) * step_bytes);
#pragma unroll
    for (int k = 0; k < KC; ++k) {
      if constexpr (sizeof(ST) == 1) raw[k] = make_uint4(0u, 0u, 0u, 0u);
      if (in && k < kc) raw[k] = __ldcs(src + 8 * k);
    }
  };
  // Row steps in flight per warp: a warp streams its head alone, so its
  // bytes in flight (2-4 KiB) set its pace.
  // (Two before the counters are known: a flush folds with two, its
  // registers going to the fold.)
  constexpr int DEPTH = kReplayWarpDepth<ST>;
  uint4 raw[DEPTH][KC];
#pragma unroll
  for (int d = 0; d < DEPTH; ++d)
#pragma unroll
    for (int k = 0; k < KC; ++k) raw[d][k] = make_uint4(0u, 0u, 0u, 0u);
  load_step(0, raw[0]);
  load_step(1, raw[1]);
  // Registers hold only DEPTH row steps; the steps L.prefetch_steps ahead
  // can be asked of L2 (a bulk prefetch by lane 0, whose lane_src is the
  // head's start: no registers, no shared memory). Whole steps only; the
  // first request takes steps [2, pfd) at once (the head's rows are one
  // contiguous run). The host's default for 16-bit states, 4, asks for
  // steps 2 and 3 alone: further ahead measured slower once the kernels
  // issued fewer instructions per head (f32 states: 6; docs/cuda.md).
  const int pfd = min(L.prefetch_steps, P / 4);
  auto prefetch_steps = [&](int from, int count) {
    if (lane == 0)
      prefetch_l2(lane_src + from * step_chunks, static_cast<uint32_t>(count * step_chunks * 16));
  };
  if (pfd > 2) prefetch_steps(2, pfd - 2);
  // Before the d row steps from rs go into registers, the d steps pfd
  // further are asked of L2 in one request (one a step cost a warp ~200
  // instructions of a one-token append).
  auto prefetch_ahead = [&](int rs, int d) {
    const int from = rs + pfd, left = P / 4 - from;
    if (pfd > d && left > 0) prefetch_steps(from, left < d ? left : d);
  };

  const ReplaySeq sqv = replay_decide(rp, b, s, T, reporter);
  if (QUANT)
    for (int r = lane; r < P; r += 32)
      s_scale[r] = p.state_scale[s * p.state_scale_stride_slot + h * Pf + r0 + r];
  if (sqv.state == 1) {  // counters out of range: handled as padding
    zero_outputs();
    return;
  }
  const int c = sqv.c, E = c + T;
  const bool flush = sqv.flush;
  const int newc = sqv.newc;
  const bool closed = !flush;

  // ---- 3. the committed ring entries ------------------------------------------
  {
    const IT* const B_ring =
        static_cast<const IT*>(rp.ring_B) + s * rp.ring_B_stride_s + g * rp.ring_B_stride_g;
    if (share)  // every warp of the block has the same sequence, slot and c
      stage_async<IT, SSU_CUDA_REPLAY_THREADS>(s_Br, B_ring, rp.ring_B_stride_l, c, N,
                                               threadIdx.x);
    else
      stage_async<IT, 32>(s_Br, B_ring, rp.ring_B_stride_l, c, N, lane);
  }
  stage_async<IT, 32>(s_xr, static_cast<const IT*>(rp.ring_x) + s * rp.ring_x_stride_s +
                                h * rp.ring_x_stride_h + r0,
                      rp.ring_x_stride_l, c, P, lane);
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  __syncwarp();  // s_dtt
  const float* const dt_ring = rp.ring_dt + s * rp.ring_dt_stride_s + h * rp.ring_dt_stride_h;
  for (int j = lane; j < E; j += 32) {
    const float d = j < c ? dt_ring[j * rp.ring_dt_stride_l] : s_dtt[j - c];
    s_delta[j] = d;
    s_dA[j] = ssu_math::exp(A_h * d);
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  if (share)
    __syncthreads();
  else
    __syncwarp();

  // Flush step with a shared group: the block widens the committed B
  // entries once into f32 rows padded by 16 bytes every 32 elements, so the
  // fold reads them with 16-byte loads free of bank conflicts (the lanes of
  // a row read 16 or 32 bytes apart) and widens nothing. (Uniform over the
  // block: one sequence.)
  float* const s_Bf =
      share && flush && L.off_group_Bf > 0 ? reinterpret_cast<float*>(smem + L.off_group_Bf) : nullptr;
  // With 4-byte states the call's B and C rows follow at rows Lr and
  // Lr + T, for the tokens that run on each folded row (H100, flush launch
  // alone: f32 T = 4 -7 %, T = 1 -4 %; the 16-bit-state kernels spilled
  // with it and their flushes slowed).
  constexpr bool kFlushTokensF32 = sizeof(ST) == 4;
  const int Lr = static_cast<int>(rp.ring_len);
  if (s_Bf) {
    const int ldb = padded_f32_row(N);
    if constexpr (kFlushTokensF32) {
      for (int i = threadIdx.x; i < (c + 2 * T) * N; i += SSU_CUDA_REPLAY_THREADS) {
        const int j = i / N, n = i - j * N;
        const float b = j < c ? to_f32(s_Br[i])
                              : to_f32(j < c + T ? s_Bt[i - c * N] : s_C[i - (c + T) * N]);
        s_Bf[(j < c ? j : Lr + j - c) * ldb + padded_f32(n)] = b;
      }
    } else {
      for (int i = threadIdx.x; i < c * N; i += SSU_CUDA_REPLAY_THREADS) {
        const int j = i / N, n = i - j * N;
        s_Bf[j * ldb + padded_f32(n)] = to_f32(s_Br[i]);
      }
    }
    __syncthreads();
  }

  // Every ring entry and counter this warp reads is read: count it in.
  // (Its result is looked at only at the end: a use here would hold the
  // warp for the atomic's round trip, about 1 us of a warp's life.)
  int arrived = 0;
  if (writes && lane == 0) arrived = atomicAdd(rp.pending + s * rp.pending_stride, 0x10000);

  auto B_of = [&](int j) -> const IT* { return j < c ? s_Br + j * N : s_Bt + (j - c) * N; };
  auto x_of = [&](int j, int r) {
    return to_f32(j < c ? s_xr[j * P + r] : s_xt[(j - c) * P + r]);
  };

  // ---- append this call's x rows (only this warp reads this head's rows) ---
  if (writes && !flush_op && T > 0)
    append_x_rows<IT, 32>(static_cast<IT*>(rp.ring_x) + s * rp.ring_x_stride_s +
                              h * rp.ring_x_stride_h + newc * rp.ring_x_stride_l + r0,
                          rp.ring_x_stride_l, s_xt, T, P, lane);
  // An append step's new entries c .. c + T - 1 are read by no one in this
  // call (readers take entries below c from the ring, the call's tokens from
  // its inputs), so each warp writes its head's step sizes and the first
  // warp of each group the group's B rows, now, instead of the sequence's
  // last warp writing them all once every reader is in: that warp's copy
  // loop sat at the end of the launch (H100, f32 batch 64: 5-9 us of an
  // append launch, measured on the append path alone). A flush step's new
  // entry 0 is still being read by the other warps: the last warp writes it,
  // except the step sizes with one warp a head: only this warp reads this
  // head's, and it has (lane t read entry t above), so it writes the call's
  // (a loop of dependent loads, softplus and stores off the last warp's
  // tail: H200, bf16 with the sequences' cycles out of step, batch 16
  // 37.4 -> 35.0 us per step, batch 64 87.9 -> 87.0).
  const bool own_entries = L.early_entries && writes && !flush_op && !flush && T > 0;
  const bool own_dt =
      own_entries ? part == 0 : L.early_entries && writes && !flush_op && T > 0 && parts == 1;
  if (own_dt) {
    float* const dt_dst = rp.ring_dt + s * rp.ring_dt_stride_s + h * rp.ring_dt_stride_h;
    for (int t = lane; t < T; t += 32) dt_dst[(newc + t) * rp.ring_dt_stride_l] = s_dtt[t];
  }
  if (own_entries && part == 0) {
    if (h % p.heads_per_group == 0)
      append_x_rows<IT, 32>(static_cast<IT*>(rp.ring_B) + s * rp.ring_B_stride_s +
                                g * rp.ring_B_stride_g + newc * rp.ring_B_stride_l,
                            rp.ring_B_stride_l, s_Bt, T, N, lane);
  }

  // ---- closed form: the weights of the committed entries and tokens -------
  if (closed) {  // (uniform over the block: one sequence)
    if (share)
      // (s_dA, the fold's, holds the prefix sums here: an append does not fold.)
      replay_weights_shared<IT>(s_Br, s_Bt, s_C, s_delta, s_dA, A_h, c, T, N,
                                reinterpret_cast<float*>(smem + L.off_group_dot), s_coef, lane);
    else
      replay_weights<IT, 32>(s_Br, s_Bt, s_C, s_delta, A_h, c, T, N, s_coef, lane);
  }

  // ---- rows -----------------------------------------------------------------
  // A lane's elements of row step rs as fp32 (decode scale applied when asked).
  auto unpack = [&](const uint4* raw, float scale, float* v) {
#pragma unroll
    for (int k = 0; k < KC; ++k) {
      if constexpr (std::is_same<ST, bf16>::value) {
        // a shift and a mask per pair's element (the generic conversion
        // spends two operations on the high half: 128 of a one-token
        // append's ~3900 instructions per warp)
        const uint32_t w[4] = {raw[k].x, raw[k].y, raw[k].z, raw[k].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          v[k * VEC + 2 * i] = __uint_as_float(w[i] << 16);
          v[k * VEC + 2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
      } else if constexpr (QUANT && sizeof(ST) == 1) {
        // 8-bit codes as the plain update's kernels decode them (int8: a
        // byte permute and a subtraction each), the same values.
        scaled_chunk_to_f32<ST>(raw[k], scale, v + k * VEC);
      } else {
        Chunk<ST, VEC> cc;
        cc.u = raw[k];
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          float e = to_f32(cc.e[i]);
          if constexpr (QUANT) e *= scale;
          v[k * VEC + i] = e;
        }
      }
    }
  };
  // The row's dot product with C_t over its 8 lanes.
  auto row_dot = [&](const float* v, const IT* Ct) {
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < KC; ++k) {
      if (k < kc) {
        const int n0 = (l8 + 8 * k) * VEC;
#pragma unroll
        for (int i = 0; i < VEC; i += 4) {
          const float4 c4 = load4(Ct + n0 + i);
          dot = __fmaf_rn(v[k * VEC + i], c4.x, dot);
          dot = __fmaf_rn(v[k * VEC + i + 1], c4.y, dot);
          dot = __fmaf_rn(v[k * VEC + i + 2], c4.z, dot);
          dot = __fmaf_rn(v[k * VEC + i + 3], c4.w, dot);
        }
      }
    }
    dot += __shfl_xor_sync(kAll, dot, 4);
    dot += __shfl_xor_sync(kAll, dot, 2);
    dot += __shfl_xor_sync(kAll, dot, 1);
    return dot;
  };
  const bool sr = f & SSU_F_STOCHASTIC;
  const uint64_t seed = sr && flush && writes ? *p.sr_seed : 0;
  // Flush step: fold the committed entries into the row with the update's
  // own fp32 operation sequence, store it exactly as the plain update would,
  // then run the call's tokens. (Append steps, below: h0 . C_t per row, the
  // checkpoint only read.)
  // Every row step, the next D in flight (steps 0 .. D-1 already are).
  auto run_steps = [&](auto depth, auto&& step) {
    constexpr int D = decltype(depth)::value;
    for (int rs = 0; rs < nsteps; rs += D) {
      prefetch_ahead(rs, D);
#pragma unroll
      for (int d = 0; d < D; ++d) {
        if (rs + d < nsteps) step(rs + d, raw[d]);
        load_step(rs + d + D, raw[d]);
      }
    }
  };
  // The committed entries folded into a lane's values of one row (va: row
  // ra) or, with 4- and 2-byte states, two at once (vb: row rb, the same
  // columns), in the update's fp32 sequence v * dA_j + B_j * (delta_j *
  // x_j): the flush's arithmetic, most of its instructions. Two rows share
  // each B load and give the scheduler two independent chains (8-bit
  // states' kernels have 96 registers; at 96 the 16-bit ones spilled 112
  // bytes with it).
  // F32B: B from the block's f32 copy (L.off_group_Bf, 16-byte loads,
  // nothing widened), else widened from s_Br by bit operations; Full: the
  // lane holds KC chunks (kc == KC), so no chunk is tested.
  constexpr bool kFoldPairs = sizeof(ST) >= 2;
  auto fold_rows = [&](auto full, auto f32b, float* va, float* vb, int ra, int rb) {
    constexpr bool Full = decltype(full)::value;
    constexpr bool F32B = decltype(f32b)::value;
    constexpr bool Two = kFoldPairs;
    const int lane_b = F32B ? padded_f32(l8 * VEC) : l8 * VEC;
    const IT* xj = s_xr;
    for (int j = 0; j < c; ++j, xj += P) {
      const float dA = s_dA[j];
      const float dtxa = s_delta[j] * to_f32(xj[ra]);
      [[maybe_unused]] const float dtxb = Two ? s_delta[j] * to_f32(xj[rb]) : 0.f;
#pragma unroll
      for (int k = 0; k < KC; ++k) {
        if (Full || k < kc) {
          float bv[VEC];
          if constexpr (F32B) {
            // chunk l8 + 8 k: 8 k VEC elements further, padding included
            const float* const bk =
                s_Bf + j * padded_f32_row(N) + lane_b + padded_f32(8 * k * VEC);
#pragma unroll
            for (int i = 0; i < VEC; i += 4) {
              const float4 b4 = *reinterpret_cast<const float4*>(bk + i);
              bv[i] = b4.x;
              bv[i + 1] = b4.y;
              bv[i + 2] = b4.z;
              bv[i + 3] = b4.w;
            }
          } else {
            widen_vec<IT, VEC>(s_Br + j * N + lane_b + 8 * k * VEC, bv);
          }
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            va[k * VEC + i] = va[k * VEC + i] * dA + bv[i] * dtxa;
            if constexpr (Two) vb[k * VEC + i] = vb[k * VEC + i] * dA + bv[i] * dtxb;
          }
        }
      }
    }
  };
  // A folded row: stored exactly as the plain update stores a row, then the
  // call's tokens run on it.
  auto finish_row = [&](int row, float* v) {
    const bool valid = row < P;
    const int rr = valid ? row : 0;
    if (writes)
      store_folded_row<ST, VEC, KC>(
          v, valid, ckpt + static_cast<int64_t>(rr) * N,
          static_cast<uint64_t>(s * p.state_stride_slot + head_off + static_cast<int64_t>(rr) * N),
          l8, 8, kc, N / VEC, sr, seed, p.sr_rounds,
          QUANT ? p.state_scale + s * p.state_scale_stride_slot + h * Pf + r0 + rr : nullptr);
    if (kFlushTokensF32 && s_Bf) {  // the call's B and C from the block's f32 copy
      const int ldb = padded_f32_row(N);
      const float* const lane_f = s_Bf + padded_f32(l8 * VEC);
      for (int t = 0; t < T; ++t) {
        const int j = c + t;
        const float dA = s_dA[j];
        const float dtx = s_delta[j] * x_of(j, rr);
        const float* const Bj = lane_f + (Lr + t) * ldb;
        const float* const Cj = lane_f + (Lr + T + t) * ldb;
        float dot = 0.f;
#pragma unroll
        for (int k = 0; k < KC; ++k) {
          if (k < kc) {
            const int o = padded_f32(8 * k * VEC);
#pragma unroll
            for (int i = 0; i < VEC; i += 4) {
              const float4 b4 = *reinterpret_cast<const float4*>(Bj + o + i);
              const float4 c4 = *reinterpret_cast<const float4*>(Cj + o + i);
              float* const w = v + k * VEC + i;
              w[0] = w[0] * dA + b4.x * dtx;
              w[1] = w[1] * dA + b4.y * dtx;
              w[2] = w[2] * dA + b4.z * dtx;
              w[3] = w[3] * dA + b4.w * dtx;
              dot = __fmaf_rn(w[0], c4.x, dot);
              dot = __fmaf_rn(w[1], c4.y, dot);
              dot = __fmaf_rn(w[2], c4.z, dot);
              dot = __fmaf_rn(w[3], c4.w, dot);
            }
          }
        }
        dot += __shfl_xor_sync(kAll, dot, 4);
        dot += __shfl_xor_sync(kAll, dot, 2);
        dot += __shfl_xor_sync(kAll, dot, 1);
        if (valid && l8 == 0) s_y[t * P + row] = dot;
      }
      return;
    }
    for (int t = 0; t < T; ++t) {
      const int j = c + t;
      const float dA = s_dA[j];
      const float dtx = s_delta[j] * x_of(j, rr);
      const IT* const Bj = B_of(j);
#pragma unroll
      for (int k = 0; k < KC; ++k) {
        if (k < kc) {
          float bv[VEC];
          load_vec<IT, VEC>(Bj + (l8 + 8 * k) * VEC, bv);
#pragma unroll
          for (int i = 0; i < VEC; ++i) v[k * VEC + i] = v[k * VEC + i] * dA + bv[i] * dtx;
        }
      }
      const float dot = row_dot(v, s_C + t * N);
      if (valid && l8 == 0) s_y[t * P + row] = dot;
    }
  };
  auto fold_dispatch = [&](float* va, float* vb, int ca, int cb) {
    if (s_Bf) {
      if (kc == KC)
        fold_rows(std::true_type(), std::true_type(), va, vb, ca, cb);
      else
        fold_rows(std::false_type(), std::true_type(), va, vb, ca, cb);
    } else if (kc == KC) {
      fold_rows(std::true_type(), std::false_type(), va, vb, ca, cb);
    } else {
      fold_rows(std::false_type(), std::false_type(), va, vb, ca, cb);
    }
  };
  // Flush step: with 4- and 2-byte states two row steps at a time (rows
  // rs * 4 + grp and 4 further), the next two requested as soon as these
  // are in registers; else one at a time.
  auto fold_all = [&] {
    if constexpr (!kFoldPairs) {
      run_steps(std::integral_constant<int, 2>(), [&](int rs, const uint4* raw) {
        const int row = rs * 4 + grp;
        const int rr = row < P ? row : 0;
        float v[KC * VEC];
        unpack(raw, QUANT ? s_scale[rr] : 1.f, v);
        fold_dispatch(v, v, rr, rr);
        finish_row(row, v);
      });
    } else {
      for (int rs = 0; rs < nsteps; rs += 2) {
        const int ra = rs * 4 + grp, rb = ra + 4;
        const int ca = ra < P ? ra : 0, cb = rb < P ? rb : 0;
        float va[KC * VEC], vb[KC * VEC];
        unpack(raw[0], QUANT ? s_scale[ca] : 1.f, va);
        unpack(raw[1], QUANT ? s_scale[cb] : 1.f, vb);
        load_step(rs + 2, raw[0]);
        load_step(rs + 3, raw[1]);
        prefetch_ahead(rs, 2);
        fold_dispatch(va, vb, ca, cb);
        finish_row(ra, va);
        finish_row(rb, vb);
      }
    }
  };
  __syncwarp();  // s_coef, s_dec
  if (flush) {
    fold_all();
  } else if (T > 0) {
#pragma unroll
    for (int d = 2; d < DEPTH; ++d) load_step(d, raw[d]);
  }
  if (flush) {
  } else if (T > 1 && T <= 4 && kReplayMmaDots<ST, IT>) {
    // 2 to 4 tokens, a 16-bit checkpoint and inputs of its dtype: a row
    // step's dots by tensor cores, one m16n8k16 mma per chunk k of the
    // lanes and token pair q, the raw chunks as A, widening nothing (the
    // T > 1 path below widens C and runs T FMA chains per element: H200,
    // bf16 batch 64-256, 3 tokens -13 to -15 % per step, 4 tokens -8 to
    // -10 %, 2 tokens -6 %). Pairs: 1 for 2 tokens, 2 for 3-4 (a token past
    // T has zeros for C and is not stored). Four pairs for 5-8 tokens
    // measured -13 % there, but their registers made ptxas allocate the
    // whole kernel differently and one-token appends 3 % slower.
    // Lane (g = lane / 4, t = lane % 4 in the mma's terms) gives its chunk's
    // 16-byte words in order as the A fragment: elements 0-1 and 4-5 are row
    // g (k = 2t.. and 2t + 8..), elements 2-3 and 6-7 row g + 8. Rows g and
    // g ^ 1 hold different chunks of the same checkpoint row (lanes 8 grp ..
    // 8 grp + 7), rows g + 8 other elements of them, so each kind has its
    // own column of B: column 0 / 1 for rows g with g even / odd (elements
    // 0-1, 4-5 of the chunk of lane 4 (g & 1) + t), 2 / 3 for rows g + 8
    // (elements 2-3, 6-7). B column n comes from lane 4 n + t, whose own
    // chunk is that chunk: its B pairs are its C elements 0-1, 4-5 or 2-3,
    // 6-7 by bit 3 of the lane, of token 2 q for columns 0-3 and 2 q + 1
    // for 4-7 (lanes 16-31). So D[g][g & 1] (lane t = 0; t = 2 for the second
    // token) plus D[g + 8][2 + (g & 1)] (t = 1; t = 3), over g and g ^ 1, is
    // the row's dot: two shuffles (xor 1, xor 4) sum both tokens'. A chunk
    // beyond kc is zeros in A and B. (With one token the same loop, the
    // second token's columns taking the next row step, measured 1-2 %
    // slower than the FMA loop below: a one-token append is not bound by
    // its row loop's instructions.)
    const bool hi = (lane >> 3) & 1, godd = (lane >> 2) & 1;
    const int t4 = lane & 3, tb = lane >> 4;
    auto tokens_mma = [&](auto pairs) {
      constexpr int Q = decltype(pairs)::value;
      uint32_t cb[Q][KC][2];
#pragma unroll
      for (int q = 0; q < Q; ++q)
#pragma unroll
        for (int k = 0; k < KC; ++k) {
          uint4 v4 = make_uint4(0u, 0u, 0u, 0u);
          if (k < kc && 2 * q + tb < T)
            v4 = *reinterpret_cast<const uint4*>(s_C + (2 * q + tb) * N + (l8 + 8 * k) * VEC);
          cb[q][k][0] = hi ? v4.y : v4.x;
          cb[q][k][1] = hi ? v4.w : v4.z;
        }
      run_steps(std::integral_constant<int, DEPTH>(), [&](int rs, const uint4* raw) {
        const int row = rs * 4 + grp;
#pragma unroll
        for (int q = 0; q < Q; ++q) {
          float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
          for (int k = 0; k < KC; ++k)
            mma16816<ST>(acc, raw[k].x, raw[k].y, raw[k].z, raw[k].w, cb[q][k][0], cb[q][k][1]);
          const float lo = godd ? acc[1] : acc[0], hv = godd ? acc[3] : acc[2];
          float w = (t4 & 1) ? hv : lo;
          w += __shfl_xor_sync(kAll, w, 1);
          w += __shfl_xor_sync(kAll, w, 4);
          const int t = 2 * q + (l8 >> 1);
          if (row < P && (l8 == 0 || l8 == 2) && t < T) s_y[t * P + row] = w;
        }
      });
    };
    if (T == 2)
      tokens_mma(std::integral_constant<int, 1>());
    else
      tokens_mma(std::integral_constant<int, 2>());
  } else if (T == 1) {
    // One token (the common decode step): the lane's C elements stay in
    // registers for every row.
    float c0[KC * VEC];
#pragma unroll
    for (int k = 0; k < KC; ++k)
      if (k < kc) load_vec<IT, VEC>(s_C + (l8 + 8 * k) * VEC, c0 + k * VEC);
    // DEPTH row steps at a time: each lane's partial dot of every step, the
    // next steps' loads, then one transposing reduction over the row's 8
    // lanes (DEPTH values in DEPTH - 1 + log2(8 / DEPTH) shuffles, not
    // 3 DEPTH, and independent of one another).
    for (int rs = 0; rs < nsteps; rs += DEPTH) {
      prefetch_ahead(rs, DEPTH);
      float part[DEPTH];
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) {
        float v[KC * VEC];
        unpack(raw[d], 1.f, v);
        float dot = 0.f;
#pragma unroll
        for (int k = 0; k < KC; ++k)
          if (k < kc)
#pragma unroll
            for (int i = 0; i < VEC; ++i) dot = __fmaf_rn(v[k * VEC + i], c0[k * VEC + i], dot);
        part[d] = dot;
        load_step(rs + d + DEPTH, raw[d]);
      }
      const int idx = transpose_reduce8<DEPTH>(part, l8);
      const int row = (rs + idx) * 4 + grp;
      float dot = part[0];
      if constexpr (QUANT) dot *= s_scale[row < P ? row : 0];
      if (row < P && (l8 & (8 / DEPTH - 1)) == 0) s_y[row] = dot;
    }
  } else if (T > 1) {
    // Several tokens. With a shared group the 16-bit-state kernels' block
    // first widens the call's C rows into the region the flush's f32 B copy
    // uses (free on an append step), padded the same way; then, for 2 or 4
    // tokens, a row step's T partial dots of a lane are reduced together by
    // the transposing shuffle (T - 1 + log2(8 / T) shuffles instead of 3 T)
    // and nothing is widened per row (H100 bf16 batch 64, appends alone:
    // T = 4 -13 %, T = 2 -9 %). The f32-state kernels, at their register
    // limit, spilled with it and their one-token appends slowed by 3 %.
    // (Uniform over the block: one sequence.)
    // (8-bit states hold 16 elements per lane and row, as 16-bit ones do.)
    constexpr bool kTokensF32 = sizeof(ST) <= 2;
    float* const s_Cf = kTokensF32 && share && L.off_group_Bf > 0
                            ? reinterpret_cast<float*>(smem + L.off_group_Bf)
                            : nullptr;
    const int ldc = padded_f32_row(N);
    if (s_Cf) {
      for (int i = threadIdx.x; i < T * N; i += SSU_CUDA_REPLAY_THREADS) {
        const int t = i / N, n = i - t * N;
        s_Cf[t * ldc + padded_f32(n)] = to_f32(s_C[i]);
      }
      __syncthreads();
    }
    auto tokens_f32 = [&](auto tt) {
      constexpr int TT = decltype(tt)::value;
      const float* const c_lane = s_Cf + padded_f32(l8 * VEC);
      run_steps(std::integral_constant<int, DEPTH>(), [&](int rs, const uint4* raw) {
        const int row = rs * 4 + grp;
        float v[KC * VEC];
        unpack(raw, 1.f, v);
        float part[TT];
#pragma unroll
        for (int t = 0; t < TT; ++t) {
          float dot = 0.f;
#pragma unroll
          for (int k = 0; k < KC; ++k) {
            if (k < kc) {
              const float* const ck = c_lane + t * ldc + padded_f32(8 * k * VEC);
#pragma unroll
              for (int i = 0; i < VEC; i += 4) {
                const float4 c4 = *reinterpret_cast<const float4*>(ck + i);
                dot = __fmaf_rn(v[k * VEC + i], c4.x, dot);
                dot = __fmaf_rn(v[k * VEC + i + 1], c4.y, dot);
                dot = __fmaf_rn(v[k * VEC + i + 2], c4.z, dot);
                dot = __fmaf_rn(v[k * VEC + i + 3], c4.w, dot);
              }
            }
          }
          part[t] = dot;
        }
        const int t = transpose_reduce8<TT>(part, l8);
        float dot = part[0];
        if constexpr (QUANT) dot *= s_scale[row < P ? row : 0];
        if (row < P && (l8 & (8 / TT - 1)) == 0) s_y[t * P + row] = dot;
      });
    };
    if (s_Cf && T == 2) {
      tokens_f32(std::integral_constant<int, 2>());
    } else if (s_Cf && T == 4) {
      tokens_f32(std::integral_constant<int, 4>());
    } else {
      run_steps(std::integral_constant<int, DEPTH>(), [&](int rs, const uint4* raw) {
        const int row = rs * 4 + grp;
        float v[KC * VEC];
        unpack(raw, 1.f, v);
        for (int t = 0; t < T; ++t) {
          float dot = row_dot(v, s_C + t * N);
          if constexpr (QUANT) dot *= s_scale[row < P ? row : 0];
          if (row < P && l8 == 0) s_y[t * P + row] = dot;
        }
      });
    }
  }
  __syncwarp();

  // ---- outputs --------------------------------------------------------------
  write_outputs<IT, 32>(p, out_bh, tok0, 0, P, T, c, closed, s_y, s_coef, s_D, s_xr, s_xt, s_z,
                        lane);
  if (!writes) return;

  // ---- the sequence's last warp: shared ring entries and the counters -----
  const bool last =
      __shfl_sync(kAll, (arrived >> 16 & 0x7fff) == static_cast<int>(p.nheads) * parts - 1, 0);
  if (!last) return;
  __threadfence();
  write_shared_entries<IT, 32>(rp, b, s, tok0, T, newc, lane, !own_entries,
                               !(flush && own_dt));
}

}  // namespace

// A warp-per-head kernel: ssu_replay_warp<KIND>_<state>_<input>, KIND empty
// for the general kernel and 1 for the one-token one (ONE).
#define SSU_REPLAY_WARP_KERNEL(KIND, ONE, SNAME, ST, INAME, IT)                          \
  extern "C" __global__ void __launch_bounds__(SSU_CUDA_REPLAY_THREADS, kReplayWarpMinBlocks<ST>) \
      ssu_replay_warp##KIND##_##SNAME##_##INAME(const ssu_cuda_replay_launch L) {         \
    pdl_wait();                                                                          \
    replay_warp_body<ST, IT, ONE>(L);                                                    \
  }
#define SSU_REPLAY_KERNEL(SNAME, ST, INAME, IT)                                          \
  extern "C" __global__ void __launch_bounds__(SSU_CUDA_REPLAY_THREADS, kReplayMinBlocks)                         \
      ssu_replay_##SNAME##_##INAME(const ssu_cuda_replay_launch L) {                      \
    pdl_wait();                                                                          \
    replay_body<ST, IT>(L);                                                              \
  }                                                                                      \
  SSU_REPLAY_WARP_KERNEL(, false, SNAME, ST, INAME, IT)
// The one-token warp kernels for 16-bit inputs only (serving's; f32 inputs
// take the general kernel).
#define SSU_REPLAY_KERNELS(SNAME, ST)                    \
  SSU_REPLAY_KERNEL(SNAME, ST, f32, float)               \
  SSU_REPLAY_KERNEL(SNAME, ST, f16, f16)                 \
  SSU_REPLAY_KERNEL(SNAME, ST, bf16, bf16)               \
  SSU_REPLAY_WARP_KERNEL(1, true, SNAME, ST, f16, f16)   \
  SSU_REPLAY_WARP_KERNEL(1, true, SNAME, ST, bf16, bf16)
SSU_REPLAY_KERNELS(f32, float)
SSU_REPLAY_KERNELS(f16, f16)
SSU_REPLAY_KERNELS(bf16, bf16)
SSU_REPLAY_KERNELS(i16, int16_t)
SSU_REPLAY_KERNELS(i8, int8_t)
SSU_REPLAY_KERNELS(f8e4m3, e4m3)
#undef SSU_REPLAY_KERNELS
#undef SSU_REPLAY_WARP_KERNEL
#undef SSU_REPLAY_KERNEL
