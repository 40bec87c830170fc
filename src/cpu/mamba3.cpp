// The CPU loops of the Mamba-3 decode step and rotary step. One work item is
// one (sequence b, head h): every row p of a head reads the head's previous
// B and x, which the step may overwrite in place, so an item owns the whole
// head and stores prev_B / prev_x only after its last read. All arithmetic is
// fp32 in the order the CUDA kernels use too (this file is compiled with
// -ffp-contract=off, so no product is fused into an add).
#include "cpu/mamba3.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "cpu/convert.h"
#include "ssu_math.h"

namespace ssu {
namespace cpu {
namespace {

constexpr int64_t kMaxDstate = 256;
constexpr int64_t kMaxRank = 8;
constexpr float kPi = 3.14159265358979323846f;
constexpr float kTwoPi = 6.28318530717958647692f;

size_t elem_size(int32_t dtype) { return dtype == SSU_DTYPE_F32 ? 4 : 2; }

// Rounds n fp32 values to `dtype` and stores them consecutively from `off`.
void store_row(void* base, int32_t dtype, int64_t off, int64_t n, const float* v) {
  switch (dtype) {
    case SSU_DTYPE_F32:
      std::memcpy(static_cast<float*>(base) + off, v, static_cast<size_t>(n) * 4);
      break;
    case SSU_DTYPE_F16: {
      f16_t* d = static_cast<f16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) d[i] = from_float<f16_t>(v[i]);
      break;
    }
    default: {
      bf16_t* d = static_cast<bf16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) d[i] = from_float<bf16_t>(v[i]);
      break;
    }
  }
}

// Writes n zeros of `dtype` consecutively from `off`.
void zero_row(void* base, int32_t dtype, int64_t off, int64_t n) {
  const size_t es = elem_size(dtype);
  std::memset(static_cast<char*>(base) + off * static_cast<int64_t>(es), 0,
              static_cast<size_t>(n) * es);
}

// The slots of one sequence: src (padding when negative or pad_slot_id) and
// dst (defaults to src; a padding dst skips the stores).
struct Slots {
  int64_t src, dst;
  bool pad, store;
};

template <typename Params>
Slots resolve(const Params& p, int64_t b, uint32_t has_src, uint32_t has_dst) {
  Slots s;
  s.src = (p.features & has_src) ? load_index(p.src_index, p.index_dtype, b * p.src_stride) : b;
  s.pad = s.src < 0 || s.src == p.pad_slot_id;
  s.dst = (p.features & has_dst) ? load_index(p.dst_index, p.index_dtype, b * p.dst_stride)
                                 : s.src;
  s.store = !(s.dst < 0 || s.dst == p.pad_slot_id);
  return s;
}

// Every slot index of the call, before anything is written.
template <typename Params>
void check_slots(const Params& p, uint32_t has_src, uint32_t has_dst) {
  for (int64_t b = 0; b < p.batch; ++b) {
    const Slots s = resolve(p, b, has_src, has_dst);
    if (s.pad) continue;
    if (s.src >= p.nslots) {
      if (p.features & has_src)
        fail(SSU_ERROR_INDEX_OUT_OF_RANGE, "src_index[%" PRId64 "]=%" PRId64 " but the pool has %"
             PRId64 " slots", b, s.src, p.nslots);
      fail(SSU_ERROR_INDEX_OUT_OF_RANGE, "no src_index is given, so sequence %" PRId64
           " uses slot %" PRId64 ", but the pool has %" PRId64 " slots", b, b, p.nslots);
    }
    if ((p.features & has_dst) && s.store && s.dst >= p.nslots)
      fail(SSU_ERROR_INDEX_OUT_OF_RANGE, "dst_index[%" PRId64 "]=%" PRId64 " but the pool has %"
           PRId64 " slots", b, s.dst, p.nslots);
  }
}

// Work items per chunk: about 64 KiB of state each, but enough chunks for
// every thread.
int64_t grain_for(int64_t items, int64_t item_bytes, int threads) {
  const int64_t g = std::max<int64_t>(1, (64 << 10) / std::max<int64_t>(1, item_bytes));
  return std::min<int64_t>(g, std::max<int64_t>(1, items / (4 * threads)));
}

// ---------------------------------------------------------------------------
// Step

void step_item(const ssu_mamba3_params& p, int64_t b, int64_t h) {
  const int64_t P = p.dim, N = p.dstate, R = p.rank;
  const uint32_t f = p.features;
  const int32_t in = p.input_dtype;
  const bool has_outproj = (f & SSU_M3_HAS_OUTPROJ) != 0;
  const bool has_z = (f & SSU_M3_HAS_Z) != 0;
  const Slots s = resolve(p, b, SSU_M3_HAS_SRC, SSU_M3_HAS_DST);

  const int64_t out_base = b * p.out_stride_b + h * p.out_stride_h;
  if (s.pad) {
    if (has_outproj) {
      zero_row(p.out, in, out_base, P);
    } else {
      for (int64_t r = 0; r < R; ++r) zero_row(p.out, in, out_base + r * p.out_stride_r, P);
    }
    return;
  }

  // Per (b, h) scalars.
  const float A = load_float(p.A, p.A_dtype, b * p.A_stride_b + h * p.A_stride_h);
  const float dt = load_float(p.dt, p.dt_dtype, b * p.dt_stride_b + h * p.dt_stride_h);
  const float trap = load_float(p.trap, p.trap_dtype, b * p.trap_stride_b + h * p.trap_stride_h);
  const float D = (f & SSU_M3_HAS_D) ? load_float(p.D, p.D_dtype, h * p.D_stride_h) : 0.0f;
  const float alpha = ssu_math::exp(A * dt);
  const float gamma = trap * dt;
  const float beta = ((1.0f - trap) * dt) * alpha;

  // The head's B, C and previous B, in fp32.
  alignas(64) float Bv[kMaxRank * kMaxDstate];
  alignas(64) float Cv[kMaxRank * kMaxDstate];
  alignas(64) float Bp[kMaxRank * kMaxDstate];
  for (int64_t r = 0; r < R; ++r) {
    load_row(p.B, in, b * p.B_stride_b + r * p.B_stride_r + h * p.B_stride_h, N, Bv + r * N);
    load_row(p.C, in, b * p.C_stride_b + r * p.C_stride_r + h * p.C_stride_h, N, Cv + r * N);
    load_row(p.prev_B, in,
             s.src * p.prev_B_stride_slot + r * p.prev_B_stride_r + h * p.prev_B_stride_h, N,
             Bp + r * N);
  }

  const int64_t x_base = b * p.x_stride_b + h * p.x_stride_h;
  const int64_t xprev_base = s.src * p.prev_x_stride_slot + h * p.prev_x_stride_h;
  const int64_t z_base = b * p.z_stride_b + h * p.z_stride_h;
  const int64_t head_off = h * P * N;
  const int64_t src_off = s.src * p.state_stride_slot + head_off;
  // A padding dst (e.g. INT64_MIN as pad_slot_id) is never stored to, so its
  // offset is formed only for a real slot: the product could overflow.
  const int64_t dst_off = s.store ? s.dst * p.state_stride_slot + head_off : 0;

  alignas(64) float row[kMaxDstate];
  float y[kMaxRank];
  for (int64_t pi = 0; pi < P; ++pi) {
    const float x = load_float(p.x, in, x_base + pi);
    const float xprev = load_float(p.prev_x, in, xprev_base + pi);
    const float gx = gamma * x;
    const float bx = beta * xprev;
    const float dx = D * x;

    load_row(p.state, p.state_dtype, src_off + pi * N, N, row);
    for (int64_t n = 0; n < N; ++n) row[n] = alpha * row[n];
    for (int64_t r = 0; r < R; ++r) {
      const float xp = load_float(p.xproj, p.xproj_dtype,
                                  r * p.xproj_stride_r + h * p.xproj_stride_h +
                                      pi * p.xproj_stride_p);
      const float xg = xp * gx;
      const float xb = xp * bx;
      const float* br = Bv + r * N;
      const float* bpr = Bp + r * N;
      for (int64_t n = 0; n < N; ++n) {
        float v = row[n] + xg * br[n];
        row[n] = v + xb * bpr[n];
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      const float* cr = Cv + r * N;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t n = 0; n < N; ++n) acc += row[n] * cr[n];
      const float xp = load_float(p.xproj, p.xproj_dtype,
                                  r * p.xproj_stride_r + h * p.xproj_stride_h +
                                      pi * p.xproj_stride_p);
      y[r] = acc + dx * xp;
    }
    if (s.store) store_row(p.state, p.state_dtype, dst_off + pi * N, N, row);

    if (has_outproj) {
      const float z = has_z ? load_float(p.z, in, z_base + pi) : 0.0f;
      float o = 0.0f;
      for (int64_t r = 0; r < R; ++r) {
        float yr = y[r];
        if (has_z) {
          const float zp = load_float(p.zproj, p.zproj_dtype,
                                      r * p.zproj_stride_r + h * p.zproj_stride_h +
                                          pi * p.zproj_stride_p);
          const float g = z * zp;
          yr = yr * (g / (1.0f + ssu_math::exp(-g)));
        }
        const float op = load_float(p.outproj, p.outproj_dtype,
                                    r * p.outproj_stride_r + h * p.outproj_stride_h +
                                        pi * p.outproj_stride_p);
        o = r == 0 ? yr * op : o + yr * op;
      }
      store_float(p.out, in, out_base + pi, o);
    } else {
      for (int64_t r = 0; r < R; ++r) store_float(p.out, in, out_base + r * p.out_stride_r + pi, y[r]);
    }
  }

  // This step's B and x become the previous ones, after every read above.
  if ((f & SSU_M3_UPDATE_PREV) && s.store) {
    const size_t es = elem_size(in);
    for (int64_t r = 0; r < R; ++r) {
      char* d = static_cast<char*>(p.prev_B) +
                (s.dst * p.prev_B_stride_slot + r * p.prev_B_stride_r + h * p.prev_B_stride_h) *
                    static_cast<int64_t>(es);
      const char* src = static_cast<const char*>(p.B) +
                        (b * p.B_stride_b + r * p.B_stride_r + h * p.B_stride_h) *
                            static_cast<int64_t>(es);
      std::memmove(d, src, static_cast<size_t>(N) * es);
    }
    char* d = static_cast<char*>(p.prev_x) +
              (s.dst * p.prev_x_stride_slot + h * p.prev_x_stride_h) * static_cast<int64_t>(es);
    const char* src = static_cast<const char*>(p.x) + x_base * static_cast<int64_t>(es);
    std::memmove(d, src, static_cast<size_t>(P) * es);
  }
}

void run_step(void* ctx, int64_t begin, int64_t end) {
  const ssu_mamba3_params& p = *static_cast<const ssu_mamba3_params*>(ctx);
  for (int64_t i = begin; i < end; ++i) step_item(p, i / p.nheads, i % p.nheads);
}

// ---------------------------------------------------------------------------
// Rotary

// Rotates one (N,) row: v = in + bias, pairs i < Sa turned by theta[i],
// rounded into out. `in` and `out` may be the same row.
void rotate_row(const ssu_rotary_params& p, const void* in, int64_t in_off, void* out,
                int64_t out_off, const void* bias, int32_t bias_dtype, int64_t bias_off,
                int64_t bias_stride_n, const float* c, const float* sn) {
  const int64_t N = p.dstate, Sa = p.nangles;
  alignas(64) float v[kMaxDstate];
  load_row(in, p.qk_dtype, in_off, N, v);
  if (bias)
    for (int64_t n = 0; n < N; ++n)
      v[n] = v[n] + load_float(bias, bias_dtype, bias_off + n * bias_stride_n);
  const bool halved = (p.features & SSU_ROT_HALVED) != 0;
  for (int64_t i = 0; i < Sa; ++i) {
    const int64_t a = halved ? i : 2 * i;
    const int64_t b = halved ? i + N / 2 : 2 * i + 1;
    const float va = v[a], vb = v[b];
    v[a] = va * c[i] - vb * sn[i];
    v[b] = va * sn[i] + vb * c[i];
  }
  store_row(out, p.qk_dtype, out_off, N, v);
}

void rotary_item(const ssu_rotary_params& p, int64_t b, int64_t h) {
  const int64_t N = p.dstate, R = p.rank, Sa = p.nangles;
  const uint32_t f = p.features;
  const Slots s = resolve(p, b, SSU_ROT_HAS_SRC, SSU_ROT_HAS_DST);
  if (s.pad) {
    for (int64_t r = 0; r < R; ++r) {
      zero_row(p.q_out, p.qk_dtype, b * p.q_out_stride_b + r * p.q_out_stride_r + h * p.q_out_stride_h, N);
      zero_row(p.k_out, p.qk_dtype, b * p.k_out_stride_b + r * p.k_out_stride_r + h * p.k_out_stride_h, N);
    }
    return;
  }

  const float dt = load_float(p.dt, p.dt_dtype, b * p.dt_stride_b + h * p.dt_stride_h);
  const float* angle = p.angle_state + s.src * p.angle_stride_slot + h * p.angle_stride_h;
  alignas(64) float theta[kMaxDstate / 2];
  alignas(64) float c[kMaxDstate / 2];
  alignas(64) float sn[kMaxDstate / 2];
  for (int64_t i = 0; i < Sa; ++i) {
    const float rate = load_float(p.angle_rate, p.rate_dtype,
                                  b * p.rate_stride_b + h * p.rate_stride_h + i * p.rate_stride_i);
    const float t = std::tanh(rate);
    float th = angle[i] + (t * kPi) * dt;
    th = th - kTwoPi * std::floor(th / kTwoPi);
    if (th >= kTwoPi) th = th - kTwoPi;
    if (th < 0.0f) th = th + kTwoPi;
    theta[i] = th;
    c[i] = std::cos(th);
    sn[i] = std::sin(th);
  }
  if (s.store) {
    float* dst = p.angle_state + s.dst * p.angle_stride_slot + h * p.angle_stride_h;
    std::memcpy(dst, theta, static_cast<size_t>(Sa) * sizeof(float));
  }

  const bool qb = (f & SSU_ROT_HAS_Q_BIAS) != 0, kb = (f & SSU_ROT_HAS_K_BIAS) != 0;
  for (int64_t r = 0; r < R; ++r) {
    rotate_row(p, p.q, b * p.q_stride_b + r * p.q_stride_r + h * p.q_stride_h, p.q_out,
               b * p.q_out_stride_b + r * p.q_out_stride_r + h * p.q_out_stride_h,
               qb ? p.q_bias : nullptr, p.q_bias_dtype,
               r * p.q_bias_stride_r + h * p.q_bias_stride_h, p.q_bias_stride_n, c, sn);
    rotate_row(p, p.k, b * p.k_stride_b + r * p.k_stride_r + h * p.k_stride_h, p.k_out,
               b * p.k_out_stride_b + r * p.k_out_stride_r + h * p.k_out_stride_h,
               kb ? p.k_bias : nullptr, p.k_bias_dtype,
               r * p.k_bias_stride_r + h * p.k_bias_stride_h, p.k_bias_stride_n, c, sn);
  }
}

void run_rotary(void* ctx, int64_t begin, int64_t end) {
  const ssu_rotary_params& p = *static_cast<const ssu_rotary_params*>(ctx);
  for (int64_t i = begin; i < end; ++i) rotary_item(p, i / p.nheads, i % p.nheads);
}

}  // namespace

void mamba3_step(const ssu_mamba3_params& p, ThreadPool& pool) {
  check_slots(p, SSU_M3_HAS_SRC, SSU_M3_HAS_DST);
  const int64_t items = p.batch * p.nheads;
  if (items == 0) return;
  const int64_t item_bytes = p.dim * p.dstate * 4;
  pool.parallel_for(items, grain_for(items, item_bytes, pool.size()), &run_step,
                    const_cast<ssu_mamba3_params*>(&p));
}

void mamba3_rotary(const ssu_rotary_params& p, ThreadPool& pool) {
  check_slots(p, SSU_ROT_HAS_SRC, SSU_ROT_HAS_DST);
  const int64_t items = p.batch * p.nheads;
  if (items == 0) return;
  const int64_t item_bytes = 2 * p.rank * p.dstate * 4;
  pool.parallel_for(items, grain_for(items, item_bytes, pool.size()), &run_rotary,
                    const_cast<ssu_rotary_params*>(&p));
}

}  // namespace cpu
}  // namespace ssu
