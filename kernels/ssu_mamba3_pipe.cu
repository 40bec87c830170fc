// The pipelined Mamba-3 step: persistent blocks with a producer warp.
// Included by ssu_kernels.cu after ssu_mamba3.cu, whose element helpers
// (ld, st, ld_index, StateIO, lds4) it uses. Entry points:
//   ssu_mamba3_pipe_<state>_r<R>   R = 1, 2, 4, 8; N = 16 .. 128
//
// Geometry (launch block: ssu_cuda_m3_pipe_launch). A grid of as many
// blocks as stay resident walks the (sequence, head) items with a stride of
// the grid size, each head in chunks of `chunk_rows` rows. A block is four
// consumer warps and one producer warp around a two-stage shared-memory
// ring. One block barrier per step: between barriers k and k + 1 the
// consumers compute chunk k from stage k & 1 while the producer fills stage
// (k + 1) & 1 with chunk k + 1, so each side waits only when the other is
// slower, and a stage is never written while it is read.
//
// What the producer stages per chunk: the chunk's state rows by cp.async; this step's B, the src
// slot's prev_B and C, converted to f32; and the chunk's per-row tables
// (xproj * gamma x, xproj * beta prev_x, the readout weight, the skip
// term). It also resolves the slot indices (one item ahead), writes the zero
// outputs of padded sequences (which take no stage), and stores this step's
// B and x into the dst slot's prev_B / prev_x once it has read the src
// slot's (each element by the lane that read it, after the read).
//
// The consumers hold the row layout of ssu_mamba3.cu: a row of N state
// elements over N / 4 lanes, four columns per lane, this step's B for the
// lane's columns in registers; two rows per thread at a time share the
// prev_B and C reads. The arithmetic, the reduction order and the output
// sums are those of ssu_mamba3_step_*: both kernels store the same bits.

#define M3P_CONSUMERS 128
#define M3P_THREADS 160

namespace {

constexpr uint32_t kM3pEnd = 1;

struct M3pHeader {
  int64_t b, h;
  int64_t dst;  // slot of the state store, -1: none
  float alpha;
  int32_t row0, nrows, flags;
};
static_assert(sizeof(M3pHeader) <= 64, "the stage header takes 64 bytes");

// The block barrier that ends a step of the ring: the consumers are done
// with the stage they computed and the producer has filled the other.
__device__ __forceinline__ void m3p_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(M3P_THREADS) : "memory");
}

// R consecutive f32 of shared memory (R-aligned).
template <int R>
__device__ __forceinline__ void m3p_ldr(const float* p, float* v) {
  if constexpr (R % 4 == 0) {
#pragma unroll
    for (int q = 0; q < R; q += 4) {
      const float4 t = *reinterpret_cast<const float4*>(p + q);
      v[q] = t.x; v[q + 1] = t.y; v[q + 2] = t.z; v[q + 3] = t.w;
    }
  } else if constexpr (R == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    v[0] = t.x; v[1] = t.y;
  } else {
    v[0] = p[0];
  }
}

// sum_v h[v] * c[v], fused, in the order of the simple step kernel.
__device__ __forceinline__ float m3p_dot4(const float* h, const float* c) {
  float acc = 0.f;
#pragma unroll
  for (int v = 0; v < 4; ++v) acc = fmaf(h[v], c[v], acc);
  return acc;
}

// Two rows' sums over their `lpr` lanes (a power of two <= 32), with the
// simple step kernel's butterfly order; levels are taken or skipped by the
// whole block.
__device__ __forceinline__ void m3p_row_sums(float (&acc)[2], int lpr) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    if (off < lpr) {
#pragma unroll
      for (int j = 0; j < 2; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
    }
  }
}

// Pool elements are read with coherent loads: the kernel writes the pools.
__device__ __forceinline__ float m3p_ld_pool(const void* p, int32_t dtype, int64_t i) {
  if (dtype == kF32) return static_cast<const float*>(p)[i];
  const unsigned short u = static_cast<const unsigned short*>(p)[i];
  return dtype == kBF16 ? __uint_as_float(static_cast<uint32_t>(u) << 16) : m3_f16_to_f32(u);
}
// Raw bits of one element (f32 or a 2-byte dtype), and back to f32 / memory.
__device__ __forceinline__ uint32_t m3p_ld_raw(const void* p, int32_t dtype, int64_t i) {
  if (dtype == kF32) return __ldg(static_cast<const unsigned*>(p) + i);
  return __ldg(static_cast<const unsigned short*>(p) + i);
}
__device__ __forceinline__ float m3p_raw_f32(uint32_t u, int32_t dtype) {
  if (dtype == kF32) return __uint_as_float(u);
  return dtype == kBF16 ? __uint_as_float(u << 16) : m3_f16_to_f32(static_cast<unsigned short>(u));
}
__device__ __forceinline__ void m3p_st_raw(void* p, int32_t dtype, int64_t i, uint32_t u) {
  if (dtype == kF32)
    static_cast<unsigned*>(p)[i] = u;
  else
    static_cast<unsigned short*>(p)[i] = static_cast<unsigned short>(u);
}

// Eight (2-byte dtypes) or four (f32) f32 values of one 16-byte vector.
__device__ __forceinline__ void m3p_store_vec(float* d, uint4 q, int32_t dtype) {
  if (dtype == kF32) {
    *reinterpret_cast<float4*>(d) =
        make_float4(__uint_as_float(q.x), __uint_as_float(q.y), __uint_as_float(q.z),
                    __uint_as_float(q.w));
    return;
  }
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  float v[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (dtype == kBF16) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      v[2 * i] = m3_f16_to_f32(static_cast<unsigned short>(w[i] & 0xffffu));
      v[2 * i + 1] = m3_f16_to_f32(static_cast<unsigned short>(w[i] >> 16));
    }
  }
  *reinterpret_cast<float4*>(d) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(d + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

// The loaded operands of one row's tables, and where they come from.
template <int R>
struct M3pRowIn {
  uint32_t xr;  // x, raw bits
  float vxp, vz;
  float vj[R], vw[R], vzp[R];
};
template <int R>
struct M3pRowOps {
  int64_t ox, oxp, oz, oj, ow, ozp;  // element offsets of the chunk's row 0
  __device__ __forceinline__ void load(const ssu_mamba3_params& p, int row, bool outproj,
                                       bool has_z, M3pRowIn<R>& in) const {
    const int32_t it = p.input_dtype;
    in.xr = m3p_ld_raw(p.x, it, ox + row);
    in.vxp = m3p_ld_pool(p.prev_x, it, oxp + row);
    in.vz = has_z ? ld(p.z, it, oz + row) : 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      in.vj[r] = ld(p.xproj, p.xproj_dtype, oj + r * p.xproj_stride_r + row * p.xproj_stride_p);
      in.vw[r] = outproj ? ld(p.outproj, p.outproj_dtype,
                              ow + r * p.outproj_stride_r + row * p.outproj_stride_p)
                         : 1.f;
      in.vzp[r] = has_z ? ld(p.zproj, p.zproj_dtype,
                             ozp + r * p.zproj_stride_r + row * p.zproj_stride_p)
                        : 0.f;
    }
  }
};

// Per-item values the producer loads one item ahead.
struct M3pNext {
  int64_t src, dst;  // as loaded
  float A, dt, trap, D;
};

// The producer warp (lane = 0..31). Every element of a pool it reads from
// the src slot and writes to the dst slot (prev_B, prev_x) is written by
// the lane that read it, after the read in program order, so the store can
// never overtake the read when dst == src.
template <typename SD, int R>
__device__ __forceinline__ void m3p_produce(const ssu_cuda_m3_pipe_launch& L, char* sm,
                                            int lane) {
  const ssu_mamba3_params& p = L.p;
  const int P = static_cast<int>(p.dim), N = static_cast<int>(p.dstate);
  const uint32_t f = p.features;
  const uint32_t H = static_cast<uint32_t>(p.nheads);
  const int32_t it = p.input_dtype;
  const bool outproj = f & SSU_M3_HAS_OUTPROJ, has_z = f & SSU_M3_HAS_Z;
  const bool update_prev = f & SSU_M3_UPDATE_PREV;
  const uint32_t items = static_cast<uint32_t>(L.items), G = gridDim.x;
  SD* const state = static_cast<SD*>(p.state);
  int k = 0;  // chunks produced

  M3pNext nx;
  auto load_next = [&](uint32_t i) {
    const int64_t b = i / H, h = i - b * H;
    nx.src = (f & SSU_M3_HAS_SRC) ? ld_index(p.src_index, p.index_dtype, b * p.src_stride) : b;
    nx.dst = (f & SSU_M3_HAS_DST) ? ld_index(p.dst_index, p.index_dtype, b * p.dst_stride) : 0;
    nx.A = ld(p.A, p.A_dtype, b * p.A_stride_b + h * p.A_stride_h);
    nx.dt = ld(p.dt, p.dt_dtype, b * p.dt_stride_b + h * p.dt_stride_h);
    nx.trap = ld(p.trap, p.trap_dtype, b * p.trap_stride_b + h * p.trap_stride_h);
    nx.D = (f & SSU_M3_HAS_D) ? ld(p.D, p.D_dtype, h * p.D_stride_h) : 0.f;
  };
  if (blockIdx.x < items) load_next(blockIdx.x);

  for (uint32_t item = blockIdx.x; item < items; item += G) {
    const int64_t b = item / H, h = item - b * H;
    const M3pNext cur = nx;
    if (item + G < items) load_next(item + G);
    const int64_t src = cur.src;
    int64_t dst = cur.dst;
    bool pad = pad_slot(src, p.pad_slot_id);
    if (!pad && src >= p.nslots) {
      if (lane == 0 && h == 0) report_index(p.error_word);
      pad = true;
    }
    if (pad) {  // zero outputs; no stage, no pool touched
      const int nout = outproj ? P : R * P;
      for (int i = lane; i < nout; i += 32) {
        const int r = i / P, pp = i - r * P;
        st(p.out, it, b * p.out_stride_b + r * p.out_stride_r + h * p.out_stride_h + pp, 0.f);
      }
      continue;
    }
    if (f & SSU_M3_HAS_DST) {
      if (pad_slot(dst, p.pad_slot_id)) {
        dst = -1;
      } else if (dst >= p.nslots) {
        if (lane == 0 && h == 0) report_index(p.error_word);
        dst = -1;
      }
    } else {
      dst = src;
    }
    const bool store_prev = update_prev && dst >= 0;

    const float alpha = ssu_math::exp(cur.A * cur.dt);
    const float gamma = cur.trap * cur.dt;
    const float beta = ((1.0f - cur.trap) * cur.dt) * alpha;
    const float D = cur.D;
    const SD* const src_head = state + src * p.state_stride_slot + h * int64_t(P) * N;

    for (int c = 0; c < L.chunks_per_head; ++c) {
      const int s = k & 1;
      char* const stg = sm + s * L.stage_bytes;
      const int row0 = c * L.chunk_rows;
      const int nrows = min(L.chunk_rows, P - row0);
      // The head's B, prev_B and C are read from global memory by its first
      // chunk only (later chunks copy them from the other stage), so prev_B
      // of dst gets this step's B right there, each element after its read.
      const bool store_B = store_prev && c == 0;

      // The chunk's state rows (contiguous in the head).
      {
        const char* g = reinterpret_cast<const char*>(src_head + int64_t(row0) * N);
        const unsigned d =
            static_cast<unsigned>(__cvta_generic_to_shared(stg + L.off_tile));
        const int n16 = static_cast<int>(int64_t(nrows) * N * sizeof(SD) / 16);
        for (int i = lane; i < n16; i += 32)
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d + 16 * i),
                       "l"(g + 16 * i)
                       : "memory");
        asm volatile("cp.async.commit_group;\n" ::: "memory");
      }

      // The chunk's per-row tables, [row][R]; a lane takes whole rows. The
      // loads of the lane's first rows are issued before the B / C / prev_B
      // round trip below, so that both are in flight together.
      float* const txg = reinterpret_cast<float*>(stg + L.off_xg);
      float* const txb = reinterpret_cast<float*>(stg + L.off_xb);
      float* const tw = reinterpret_cast<float*>(stg + L.off_w);
      float* const te = reinterpret_cast<float*>(stg + L.off_e);
      M3pRowOps<R> ro;
      ro.ox = b * p.x_stride_b + h * p.x_stride_h + row0;
      ro.oxp = src * p.prev_x_stride_slot + h * p.prev_x_stride_h + row0;
      ro.oz = b * p.z_stride_b + h * p.z_stride_h + row0;
      ro.oj = h * p.xproj_stride_h + row0 * p.xproj_stride_p;
      ro.ow = h * p.outproj_stride_h + row0 * p.outproj_stride_p;
      ro.ozp = h * p.zproj_stride_h + row0 * p.zproj_stride_p;
      const int64_t oxd = dst * p.prev_x_stride_slot + h * p.prev_x_stride_h + row0;
      constexpr int kEarly = R <= 2 ? 2 : R == 4 ? 1 : 0;  // rows per lane loaded early
      M3pRowIn<R> early[kEarly > 0 ? kEarly : 1];
#pragma unroll
      for (int j = 0; j < kEarly; ++j)
        if (lane + 32 * j < nrows) ro.load(p, lane + 32 * j, outproj, has_z, early[j]);

      // B, prev_B (src slot) and C as f32 [R][N].
      float* const sB = reinterpret_cast<float*>(stg + L.off_B);
      float* const sBp = reinterpret_cast<float*>(stg + L.off_Bp);
      float* const sC = reinterpret_cast<float*>(stg + L.off_C);
      const int RN = R * N;
      if (c > 0) {
        // Chunk c - 1 of the same head sits in the other stage (the
        // consumers only read it meanwhile); B, prev_B and C are adjacent.
        const float4* from =
            reinterpret_cast<const float4*>(sm + (s ^ 1) * L.stage_bytes + L.off_B);
        float4* to = reinterpret_cast<float4*>(sB);
        const int n4 = 3 * RN / 4;
#pragma unroll 4
        for (int i = lane; i < n4; i += 32) to[i] = from[i];
      } else if (L.ops_vec) {
        const int es = it == kF32 ? 4 : 2;
        const int epv = 16 / es;  // elements per 16-byte vector
        const int nv = RN / epv;
        const char* const Bh =
            static_cast<const char*>(p.B) + es * (b * p.B_stride_b + h * p.B_stride_h);
        const char* const Ch =
            static_cast<const char*>(p.C) + es * (b * p.C_stride_b + h * p.C_stride_h);
        const char* const Bph = static_cast<const char*>(p.prev_B) +
                                es * (src * p.prev_B_stride_slot + h * p.prev_B_stride_h);
        char* const Bpd = static_cast<char*>(p.prev_B) +
                          es * (dst * p.prev_B_stride_slot + h * p.prev_B_stride_h);
        constexpr int kU = R == 4 ? 1 : 2;  // vectors per lane in flight (registers)
        for (int i0 = lane; i0 < nv; i0 += kU * 32) {
          uint4 vb[kU], vc[kU], vp[kU];
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            const int i = i0 + 32 * u;
            if (i < nv) {
              const int e = i * epv, r = e / N, n = e - r * N;
              vb[u] = __ldg(reinterpret_cast<const uint4*>(Bh + es * (r * p.B_stride_r + n)));
              vc[u] = __ldg(reinterpret_cast<const uint4*>(Ch + es * (r * p.C_stride_r + n)));
              vp[u] = *reinterpret_cast<const uint4*>(Bph + es * (r * p.prev_B_stride_r + n));
            }
          }
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            const int i = i0 + 32 * u;
            if (i < nv) {
              m3p_store_vec(sB + i * epv, vb[u], it);
              m3p_store_vec(sC + i * epv, vc[u], it);
              m3p_store_vec(sBp + i * epv, vp[u], it);
              if (store_B) {
                const int e = i * epv, r = e / N, n = e - r * N;
                *reinterpret_cast<uint4*>(Bpd + es * (r * p.prev_B_stride_r + n)) = vb[u];
              }
            }
          }
        }
      } else {
        for (int i0 = lane; i0 < RN; i0 += 2 * 32) {
          uint32_t vb[2];
          float vc[2], vp[2];
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int i = i0 + 32 * u;
            if (i < RN) {
              const int r = i / N, n = i - r * N;
              vb[u] = m3p_ld_raw(p.B, it, b * p.B_stride_b + r * p.B_stride_r + h * p.B_stride_h + n);
              vc[u] = ld(p.C, it, b * p.C_stride_b + r * p.C_stride_r + h * p.C_stride_h + n);
              vp[u] = m3p_ld_pool(p.prev_B, it,
                                  src * p.prev_B_stride_slot + r * p.prev_B_stride_r +
                                      h * p.prev_B_stride_h + n);
            }
          }
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int i = i0 + 32 * u;
            if (i < RN) {
              sB[i] = m3p_raw_f32(vb[u], it);
              sC[i] = vc[u];
              sBp[i] = vp[u];
              if (store_B) {
                const int r = i / N, n = i - r * N;
                m3p_st_raw(p.prev_B, it,
                           dst * p.prev_B_stride_slot + r * p.prev_B_stride_r +
                               h * p.prev_B_stride_h + n,
                           vb[u]);
              }
            }
          }
        }
      }

      auto put_row = [&](int row, const M3pRowIn<R>& in) {
        const float x = m3p_raw_f32(in.xr, it);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int i = row * R + r;
          const float xpj = in.vj[r];
          txg[i] = xpj * (gamma * x);
          txb[i] = xpj * (beta * in.vxp);
          const float e = (D * x) * xpj;
          float w = in.vw[r];
          if (has_z) {
            const float v = in.vz * in.vzp[r];
            w = w * (v / (1.0f + expf(-v)));
          }
          tw[i] = w;
          te[i] = outproj ? w * e : e;
        }
        // The lane read prev_x[src] of this row above (dst may equal src).
        if (store_prev) m3p_st_raw(p.prev_x, it, oxd + row, in.xr);
      };
#pragma unroll
      for (int j = 0; j < kEarly; ++j)
        if (lane + 32 * j < nrows) put_row(lane + 32 * j, early[j]);
#pragma unroll 1
      for (int row = lane + 32 * kEarly; row < nrows; row += 32) {
        M3pRowIn<R> in;
        ro.load(p, row, outproj, has_z, in);
        put_row(row, in);
      }

      if (lane == 0) {
        M3pHeader* hd = reinterpret_cast<M3pHeader*>(stg);
        hd->b = b;
        hd->h = h;
        hd->dst = dst;
        hd->alpha = alpha;
        hd->row0 = row0;
        hd->nrows = nrows;
        hd->flags = 0;
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");
      __syncwarp();
      m3p_sync();  // chunk k is staged; the consumers are done with chunk k - 1
      ++k;
    }
  }

  // The end marker.
  if (lane == 0) reinterpret_cast<M3pHeader*>(sm + (k & 1) * L.stage_bytes)->flags = kM3pEnd;
  __syncwarp();
  m3p_sync();
}

// The four consumer warps (tid = 0..127).
template <typename SD, typename IO, int R>
__device__ __forceinline__ void m3p_consume(const ssu_cuda_m3_pipe_launch& L, char* sm,
                                            int tid) {
  const ssu_mamba3_params& p = L.p;
  const int P = static_cast<int>(p.dim), N = static_cast<int>(p.dstate);
  const int lpr = N >> 2;  // lanes per row: 4 .. 32
  const int lane = tid & (lpr - 1), n0 = lane * 4;
  const int rpp = M3P_CONSUMERS / lpr;  // rows per pass
  const int rip = tid / lpr;
  const bool outproj = p.features & SSU_M3_HAS_OUTPROJ;
  const int32_t it = p.input_dtype;
  SD* const state = static_cast<SD*>(p.state);

  m3p_sync();  // chunk 0 is staged
  for (int k = 0;; ++k) {
    const int s = k & 1;
    const char* const stg = sm + s * L.stage_bytes;
    const M3pHeader hd = *reinterpret_cast<const M3pHeader*>(stg);
    if (hd.flags & kM3pEnd) break;
    const SD* const tile = reinterpret_cast<const SD*>(stg + L.off_tile);
    const float* const sB = reinterpret_cast<const float*>(stg + L.off_B);
    const float* const sBp = reinterpret_cast<const float*>(stg + L.off_Bp);
    const float* const sC = reinterpret_cast<const float*>(stg + L.off_C);
    const float* const txg = reinterpret_cast<const float*>(stg + L.off_xg);
    const float* const txb = reinterpret_cast<const float*>(stg + L.off_xb);
    const float* const tw = reinterpret_cast<const float*>(stg + L.off_w);
    const float* const te = reinterpret_cast<const float*>(stg + L.off_e);
    float bv[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r) lds4(sB + r * N + n0, bv[r]);
    SD* const dst_rows =
        hd.dst >= 0 ? state + hd.dst * p.state_stride_slot + hd.h * int64_t(P) * N +
                          int64_t(hd.row0) * N
                    : nullptr;
    const int64_t obase = hd.b * p.out_stride_b + hd.h * p.out_stride_h + hd.row0;
    const float alpha = hd.alpha;

    for (int base = 0; base < hd.nrows; base += 2 * rpp) {
      int row[2];
      bool valid[2];
      float hh[2][4], xg[2][R], xb[2][R];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        row[j] = base + j * rpp + rip;
        valid[j] = row[j] < hd.nrows;
        const int pr = valid[j] ? row[j] : 0;
        IO::load_shared(tile + pr * N + n0, hh[j]);
#pragma unroll
        for (int v = 0; v < 4; ++v) hh[j][v] = alpha * hh[j][v];
        m3p_ldr<R>(txg + pr * R, xg[j]);
        m3p_ldr<R>(txb + pr * R, xb[j]);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float bp4[4];
        lds4(sBp + r * N + n0, bp4);
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            hh[j][v] = fmaf(xg[j][r], bv[r][v], hh[j][v]);
            hh[j][v] = fmaf(xb[j][r], bp4[v], hh[j][v]);
          }
      }
      if (dst_rows) {
#pragma unroll
        for (int j = 0; j < 2; ++j)
          if (valid[j]) IO::store(dst_rows + row[j] * N + n0, hh[j]);
      }

      // Readout.
      if (outproj) {
        float w[2][R], cc[2][4], acc[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          m3p_ldr<R>(tw + (valid[j] ? row[j] : 0) * R, w[j]);
#pragma unroll
          for (int v = 0; v < 4; ++v) cc[j][v] = 0.f;
        }
#pragma unroll
        for (int q = 0; q < R; ++q) {
          float c4[4];
          lds4(sC + q * N + n0, c4);
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) cc[j][v] = fmaf(w[j][q], c4[v], cc[j][v]);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) acc[j] = m3p_dot4(hh[j], cc[j]);
        m3p_row_sums(acc, lpr);
        if (lane == 0) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (valid[j]) {
              float e[R];
              m3p_ldr<R>(te + row[j] * R, e);
              float y = acc[j];
#pragma unroll
              for (int q = 0; q < R; ++q) y += e[q];
              st(p.out, it, obase + row[j], y);
            }
          }
        }
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float c4[4], acc[2];
          lds4(sC + r * N + n0, c4);
#pragma unroll
          for (int j = 0; j < 2; ++j) acc[j] = m3p_dot4(hh[j], c4);
          m3p_row_sums(acc, lpr);
          if (lane == 0) {
#pragma unroll
            for (int j = 0; j < 2; ++j)
              if (valid[j])
                st(p.out, it, obase + r * p.out_stride_r + row[j], acc[j] + te[row[j] * R + r]);
          }
        }
      }
    }
    m3p_sync();  // done with chunk k; chunk k + 1 is staged
  }
}

template <typename SD, typename IO, int R>
__device__ __forceinline__ void m3p_body(const ssu_cuda_m3_pipe_launch& L) {
  extern __shared__ __align__(16) char m3p_sm[];
  if (threadIdx.x >= M3P_CONSUMERS)
    m3p_produce<SD, R>(L, m3p_sm, threadIdx.x - M3P_CONSUMERS);
  else
    m3p_consume<SD, IO, R>(L, m3p_sm, threadIdx.x);
}

}  // namespace

// Resident blocks asked of the register allocator: four (R <= 4) or three.
#define M3P_KERNEL(sname, SD, IO, R)                                                   \
  extern "C" __global__ void __launch_bounds__(M3P_THREADS, (R) <= 4 ? 4 : 3)          \
      ssu_mamba3_pipe_##sname##_r##R(const __grid_constant__ ssu_cuda_m3_pipe_launch L) { \
    m3p_body<SD, IO, R>(L);                                                            \
  }
#define M3P_KERNELS(sname, SD, IO) \
  M3P_KERNEL(sname, SD, IO, 1)     \
  M3P_KERNEL(sname, SD, IO, 2)     \
  M3P_KERNEL(sname, SD, IO, 4)     \
  M3P_KERNEL(sname, SD, IO, 8)

M3P_KERNELS(f32, float, StateIO<float>)
M3P_KERNELS(f16, unsigned short, StateIO16<kF16>)
M3P_KERNELS(bf16, unsigned short, StateIO16<kBF16>)
