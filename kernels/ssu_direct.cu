// The direct single-token update: each warp owns a few consecutive rows of
// one (sequence, head) and takes them from global memory to registers and
// back, with no shared memory and no block barrier. Meant for calls too small
// to fill the GPU twice (batch 1 to a few sequences at serving shapes), whose
// time is the latency of one short chain per warp rather than bandwidth:
//   1. every load that does not depend on the slot index is issued at once
//      (src and dst slot, dt, A, D, dt_bias, the lane's B and C columns, x
//      and z of the warp's rows);
//   2. the warp's state rows are requested as K 16-byte loads per lane (one
//      coalesced 512-byte run per instruction) as soon as the slot is known,
//      while the step size and decay are computed;
//   3. each row is updated as its load lands, summed across its lanes by a
//      butterfly, and stored with 16-byte streaming stores.
// Warps finish at different times, so the stores of early warps overlap the
// loads of late ones, as in a device copy.
//
// Form (the host checks it, see cuda_backend.cpp): one token, no varlen, no
// per-token or intermediate stores, per-head A, dt, dt_bias and D (Mamba-2),
// every state format: f32 / f16 / bf16 and the block-scaled int16 / int8 /
// e4m3 rounded to nearest, f16 / bf16 / e4m3 rounded stochastically (SR)
// (a block-scaled row's codes stay in registers until its step, and its
// encode factor is a reduction over its lanes), state rows of C = N *
// sizeof (state) / 16 chunks with
// C a power of two <= 32, a 16-byte aligned pool. The _pc kernels (PC) take
// the Mamba-1 form instead: dense f32 A rows (H, P, N) 16-byte aligned, dt,
// dt_bias and D per head or per channel (read at each row, a zero P stride
// for per-head ones), states rounded to nearest; each lane also loads its
// chunk of the row's A and the row's step size and D with step 1.
//
// The arithmetic is that of the simple kernel (ssu_update.cu) with lanes per
// row = C: the same state bits (and the CPU's), the same output bits. With
// SR a chunk draws the Philox words of its elements' source-pool offsets
// (a multiple of 8 elements: the pool is 16-byte aligned with a slot stride
// of whole chunks), with the pipelined kernels' word and packing helpers.

namespace {

// The VEC consecutive elements at `src` as f32, through loads of V (uint2 or
// uint4) each.
template <typename V, typename IT, int VEC>
__device__ __forceinline__ void direct_load_wide(const IT* src, float* v) {
  constexpr int E = static_cast<int>(sizeof(V) / sizeof(IT));
#pragma unroll
  for (int j = 0; j < VEC / E; ++j) {
    union {
      V u;
      IT e[E];
    } c;
    c.u = __ldg(reinterpret_cast<const V*>(src) + j);
#pragma unroll
    for (int i = 0; i < E; ++i) v[j * E + i] = to_f32(c.e[i]);
  }
}

// VEC consecutive elements of an input tensor as f32: 16- or 8-byte loads
// where `wide` (the host checked the alignment), element loads otherwise.
template <typename IT, int VEC>
__device__ __forceinline__ void direct_load_cols(const IT* src, bool wide, float* v) {
  constexpr int BYTES = VEC * static_cast<int>(sizeof(IT));
  if (wide && BYTES % 16 == 0) {
    direct_load_wide<uint4, IT, VEC>(src, v);
  } else if (wide && BYTES % 8 == 0) {
    direct_load_wide<uint2, IT, VEC>(src, v);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = to_f32(__ldg(src + i));
  }
}

// K: 16-byte chunks per lane at most (the warp's rows are chunks_per_lane *
// 32 / C).
template <typename ST, typename IT, bool SR, int K, bool PC = false>
__device__ __forceinline__ void direct_body(const ssu_cuda_direct_launch& L) {
  constexpr int VEC = 16 / sizeof(ST);
  constexpr bool QUANT = StateFormat<ST>::kScaled;
  static_assert(!SR || StateFormat<ST>::kSr, "stochastic rounding: f16, bf16 and e4m3 states");
  static_assert(!PC || (!SR && !QUANT), "the per-channel form: f32, f16, bf16 rounded to nearest");
  const ssu_update_params& p = L.p;
  const uint32_t f = p.features;
  const int lane = threadIdx.x & 31;
  // Divisions by the host's magic numbers: on the path to the first load.
  const int warp = static_cast<int>((blockIdx.x * SSU_CUDA_THREADS + threadIdx.x) >> 5);
  if (warp >= L.warps) return;  // warp-uniform
  const int item = pipe_div(warp, L.div_warps_per_head);
  const int wh = warp - item * L.warps_per_head;
  const int64_t b = pipe_div(item, L.div_heads);
  const int64_t h = item - b * p.nheads;
  const int64_t g = pipe_div(static_cast<int>(h), L.div_heads_per_group);
  const int lg = L.log2_chunks_per_row;
  const int C = 1 << lg;
  const int P = static_cast<int>(p.dim), N = static_cast<int>(p.dstate);
  const int row0 = wh * ((L.chunks_per_lane * 32) >> lg);  // first row of the warp
  const int col = lane & (C - 1);                          // the lane's chunk of a row
  const bool reporter = lane == 0 && h == 0 && wh == 0;
  const bool store = !(f & SSU_F_DISABLE_UPDATE);
  const bool own_dst = store && (f & SSU_F_HAS_DST);

  // 1. Everything that does not depend on the slot index, at once.
  const int64_t s0 =
      (f & SSU_F_HAS_SRC) ? load_index(p.src_index, p.index_dtype, b * p.src_stride_b) : b;
  int64_t d = own_dst ? load_index(p.dst_index, p.index_dtype, b * p.dst_stride_b) : -1;
  float dt = PC ? 0.f : load_param(p.dt, p.dt_dtype, b * p.dt_stride_b + h * p.dt_stride_h);
  const float bias = !PC && (f & SSU_F_HAS_DT_BIAS)
                         ? load_param(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride_h)
                         : 0.f;
  const float a = PC ? 0.f : load_param(p.A, p.A_dtype, h * p.A_stride_h);
  const float Dh =
      !PC && (f & SSU_F_HAS_D) ? load_param(p.D, p.D_dtype, h * p.D_stride_h) : 0.f;
  float Bv[VEC], Cv[VEC];
  {
    const IT* Bb = static_cast<const IT*>(p.B) + b * p.B_stride_b + g * p.B_stride_g + col * VEC;
    const IT* Cb = static_cast<const IT*>(p.C) + b * p.C_stride_b + g * p.C_stride_g + col * VEC;
    direct_load_cols<IT, VEC>(Bb, L.ops_vec, Bv);
    direct_load_cols<IT, VEC>(Cb, L.ops_vec, Cv);
  }
  // The lane's row of chunk k, and whether it exists.
  int row[K];
  bool rv[K];
  float xv[K], zv[K];
  const IT* xb = static_cast<const IT*>(p.x) + b * p.x_stride_b + h * p.x_stride_h;
  const IT* zb = static_cast<const IT*>(p.z) + b * p.z_stride_b + h * p.z_stride_h;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    row[k] = row0 + ((k * 32 + lane) >> lg);
    rv[k] = row[k] < P && k < L.chunks_per_lane;
    xv[k] = rv[k] ? to_f32(__ldg(xb + row[k])) : 0.f;
    zv[k] = rv[k] && (f & SSU_F_HAS_Z) ? to_f32(__ldg(zb + row[k])) : 0.f;
  }
  // Per-channel form: the row's step size, bias and D, and the lane's chunk
  // of the row's A (f32: VEC values at the state chunk's columns).
  [[maybe_unused]] float dtk[PC ? K : 1], biask[PC ? K : 1], Dk[PC ? K : 1];
  [[maybe_unused]] float Ak[PC ? K : 1][PC ? VEC : 1];
  if constexpr (PC) {
    const int64_t dtb = b * p.dt_stride_b + h * p.dt_stride_h;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      dtk[k] = biask[k] = Dk[k] = 0.f;
#pragma unroll
      for (int v = 0; v < VEC; ++v) Ak[k][v] = 0.f;
      if (!rv[k]) continue;
      const int r = row[k];
      dtk[k] = load_param(p.dt, p.dt_dtype, dtb + r * p.dt_stride_p);
      if (f & SSU_F_HAS_DT_BIAS)
        biask[k] = load_param(p.dt_bias, p.dt_bias_dtype,
                              h * p.dt_bias_stride_h + r * p.dt_bias_stride_p);
      if (f & SSU_F_HAS_D)
        Dk[k] = load_param(p.D, p.D_dtype, h * p.D_stride_h + r * p.D_stride_p);
      const float* Ar = static_cast<const float*>(p.A) + h * p.A_stride_h + r * p.A_stride_p +
                        col * VEC;
      direct_load_wide<uint4, float, VEC>(Ar, Ak[k]);
    }
  }

  bool pad = is_pad(s0, p.pad_slot_id);
  if (!pad && s0 >= p.nslots) {
    if (reporter) report(p.error_word, SSU_BIT_INDEX);
    pad = true;
  }
  IT* const out_bh = static_cast<IT*>(p.out) + b * p.out_stride_b + h * p.out_stride_h;
  if (pad) {  // warp-uniform: zero outputs, no pool touched
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (rv[k] && col == 0) out_bh[row[k]] = from_f32<IT>(0.f);
    return;
  }

  // 2. The warp's rows: one contiguous run of chunks_per_lane * 512 bytes.
  ST* const state = static_cast<ST*>(p.state);
  const int64_t head_off = h * int64_t(P) * N;
  const int64_t src_off = s0 * p.state_stride_slot + head_off + int64_t(row0) * N + lane * VEC;
  const ST* const src = state + src_off;
  // Block-scaled rows stay codes until their step (4 registers a chunk
  // instead of VEC), with the row's decode scale beside them.
  float hs[QUANT ? 1 : K][VEC];
  [[maybe_unused]] uint4 raw[QUANT ? K : 1];
  [[maybe_unused]] float rs[QUANT ? K : 1];
  const int64_t scale_head = h * P;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if constexpr (QUANT) {
      raw[k] = rv[k] ? __ldcs(reinterpret_cast<const uint4*>(src + k * 32 * VEC))
                     : make_uint4(0, 0, 0, 0);
      rs[k] = rv[k] ? p.state_scale[s0 * p.state_scale_stride_slot + scale_head + row[k]] : 0.f;
    } else if (rv[k]) {
      load_chunk<ST, VEC>(src + k * 32 * VEC, hs[k]);
    } else {
#pragma unroll
      for (int v = 0; v < VEC; ++v) hs[k][v] = 0.f;
    }
  }
  // While the rows are in flight: the step size, the decay, the store slot.
  if constexpr (!PC) {
    dt += bias;
    if (f & SSU_F_DT_SOFTPLUS) dt = softplus20(dt);
  }
  const float dA = PC ? 0.f : ssu_math::exp(a * dt);
  if constexpr (PC) {
    // (Only the warp's chunks: a softplus is about 40 instructions, a
    // tenth of a one-chunk warp's whole work.)
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k >= L.chunks_per_lane) break;  // warp-uniform
      float v = dtk[k];
      if (f & SSU_F_HAS_DT_BIAS) v += biask[k];
      if (f & SSU_F_DT_SOFTPLUS) v = softplus20(v);
      dtk[k] = v;
    }
  }
  uint64_t seed = 0;
  if constexpr (SR) seed = *p.sr_seed;
  const PipeKeys keys = pipe_keys(seed);
  if (!own_dst) {
    d = store ? s0 : -1;
  } else if (is_pad(d, p.pad_slot_id)) {
    d = -1;
  } else if (d >= p.nslots) {
    if (reporter) report(p.error_word, SSU_BIT_INDEX);
    d = -1;
  }
  ST* const dst = d >= 0 ? state + d * p.state_stride_slot + head_off + int64_t(row0) * N + lane * VEC
                         : nullptr;
  [[maybe_unused]] float* const scale_dst =
      QUANT && d >= 0 ? p.state_scale + d * p.state_scale_stride_slot + scale_head : nullptr;
  // 3. Rows in order of their loads.
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k >= L.chunks_per_lane) break;  // warp-uniform
    const float dtr = PC ? dtk[k] : dt;
    const float dtx = dtr * xv[k];
    float acc = 0.f;
    float* const hk = hs[QUANT ? 0 : k];
    if constexpr (QUANT) scaled_chunk_to_f32<ST>(raw[k], rs[k], hk);
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      const float dAv = PC ? ssu_math::exp(Ak[k][v] * dtr) : dA;
      // Rounded as on the CPU (compiled with -fmad=false).
      hk[v] = hk[v] * dAv + Bv[v] * dtx;
      acc = fmaf(hk[v], Cv[v], acc);
    }
    // A block-scaled row's encode factor: every lane of the row group takes
    // part (a row that does not exist has zeros).
    [[maybe_unused]] bool finite = true;
    [[maybe_unused]] float enc = 1.f;
    if constexpr (QUANT) enc = pipe_encode_factor<ST, VEC>(hk, C, &finite);
    for (int off = C >> 1; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (rv[k]) {
      if (col == 0) {
        float y = acc + (PC ? Dk[k] : Dh) * xv[k];
        if (f & SSU_F_HAS_Z) y *= silu(zv[k]);
        out_bh[row[k]] = from_f32<IT>(y);
      }
      if (dst) {
        Chunk<ST, VEC> c;
        uint32_t w[SR ? VEC : 1];
        if constexpr (SR) {
#pragma unroll
          for (int q = 0; q < VEC; q += 8)
            pipe_sr_words(w + q, seed, keys, static_cast<uint64_t>(src_off + k * 32 * VEC + q),
                          p.sr_rounds);
        }
        if constexpr (QUANT) {
          c.u = scaled_chunk_encode<ST, SR>(hk, enc, finite, w);
          if (col == 0) scale_dst[row[k]] = 1.0f / enc;
        } else if constexpr (SR) {
          c.u = pipe_sr_pack<ST>(hk, w);
        } else {
#pragma unroll
          for (int v = 0; v < VEC; ++v) c.e[v] = from_f32<ST>(hk[v]);
        }
        store_encoded<ST, VEC>(dst + k * 32 * VEC, c, VEC);
      }
    }
  }
}

}  // namespace

#define SSU_DIRECT_KERNEL(sname, ST, iname, IT, SR, PC, suffix)                   \
  extern "C" __global__ void __launch_bounds__(SSU_CUDA_THREADS)                  \
      ssu_direct_##sname##_##iname##suffix(const __grid_constant__ ssu_cuda_direct_launch launch) { \
    pdl_wait();                                                                    \
    direct_body<ST, IT, SR, SSU_CUDA_DIRECT_K, PC>(launch);                        \
  }
#define SSU_DIRECT_KERNELS(sname, ST, SR, PC, suffix)        \
  SSU_DIRECT_KERNEL(sname, ST, f32, float, SR, PC, suffix)   \
  SSU_DIRECT_KERNEL(sname, ST, f16, f16, SR, PC, suffix)     \
  SSU_DIRECT_KERNEL(sname, ST, bf16, bf16, SR, PC, suffix)

SSU_DIRECT_KERNELS(f32, float, false, false, )
SSU_DIRECT_KERNELS(f16, f16, false, false, )
SSU_DIRECT_KERNELS(bf16, bf16, false, false, )
SSU_DIRECT_KERNELS(i16, int16_t, false, false, )
SSU_DIRECT_KERNELS(i8, int8_t, false, false, )
SSU_DIRECT_KERNELS(f8e4m3, e4m3, false, false, )
SSU_DIRECT_KERNELS(f16, f16, true, false, _sr)
SSU_DIRECT_KERNELS(bf16, bf16, true, false, _sr)
SSU_DIRECT_KERNELS(f8e4m3, e4m3, true, false, _sr)
SSU_DIRECT_KERNELS(f32, float, false, true, _pc)
SSU_DIRECT_KERNELS(f16, f16, false, true, _pc)
SSU_DIRECT_KERNELS(bf16, bf16, false, true, _pc)
