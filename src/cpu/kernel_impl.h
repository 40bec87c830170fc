// The CPU update loops. Included once per instruction-set variant, each
// time with SSU_CPU_NS naming the variant's namespace (see kernels_*.cpp).
//
// Work is split into items of (sequence b, head h, block of rows). Rows of a
// head evolve independently, so an item carries its rows through all the
// sequence's tokens in an fp32 scratch tile and stores them as the write
// mode demands. All arithmetic is fp32, in the order of the specification.
#include <cmath>
#include <cstdint>

#include "cpu/convert.h"
#include "cpu/sequence.h"
#include "ssu_update_params.h"

#ifndef SSU_CPU_NS
#error "define SSU_CPU_NS before including kernel_impl.h"
#endif

namespace ssu {
namespace cpu {
namespace SSU_CPU_NS {
namespace {

constexpr int64_t kMaxDstate = 256;
constexpr int64_t kTileFloats = 4096;  // scratch tile: rows * N <= this
constexpr int64_t kMaxRows = 256;      // rows per work item

// The polynomials shared by the scalar and the eight-lane functions below
// (T is float or the v8f vector type).
// e^r for |r| <= ln(2)/2, Taylor to degree 7.
template <typename T>
__attribute__((always_inline)) inline T exp_poly(T r) {
  T q = T{} + 1.0f / 5040.0f;
  q = q * r + 1.0f / 720.0f;
  q = q * r + 1.0f / 120.0f;
  q = q * r + 1.0f / 24.0f;
  q = q * r + 1.0f / 6.0f;
  q = q * r + 0.5f;
  q = q * r + 1.0f;
  return q * r + 1.0f;
}
// atanh(f)/f as a series in f2 = f*f, for |f| <= 0.172.
template <typename T>
__attribute__((always_inline)) inline T atanh_poly(T f2) {
  T q = T{} + 1.0f / 9.0f;
  q = q * f2 + 1.0f / 7.0f;
  q = q * f2 + 1.0f / 5.0f;
  q = q * f2 + 1.0f / 3.0f;
  return q * f2 + 1.0f;
}

// exp(x) on [-87, 88] to about 2 ulp; 0 below, +inf above, NaN stays NaN.
// Branch-free so that loops over dstate vectorize.
__attribute__((always_inline)) inline float exp_fast(float x) {
  const float lo = x < -87.0f ? -87.0f : x;
  const float xc = lo > 88.0f ? 88.0f : lo;
  const float kShift = 12582912.0f;  // 1.5 * 2^23: rounds to an integer
  const float k = (xc * 1.44269504088896341f + kShift) - kShift;
  float r = xc - k * 0.693145751953125f;
  r = r - k * 1.428606765330187045e-06f;
  const float q = exp_poly(r);
  const int32_t ki = static_cast<int32_t>(k);
  const float scale = bits_to_float(static_cast<uint32_t>(ki + 127) << 23);
  float e = q * scale;
  e = x < -87.0f ? 0.0f : e;
  e = x > 88.0f ? INFINITY : e;
  e = x != x ? x : e;
  return e;
}

// log(1 + e) for e >= 0, to a few ulp; branch-free.
__attribute__((always_inline)) inline float log1p_fast(float e) {
  const float y = 1.0f + e;
  // y = m * 2^k with m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh((m-1)/(m+1)).
  const uint32_t u = float_to_bits(y) - 0x3f3504f3u;  // bits of sqrt(1/2)
  const int32_t k = static_cast<int32_t>(u) >> 23;
  const float m = bits_to_float((u & 0x007fffffu) + 0x3f3504f3u);
  // Correct the rounding of 1 + e (exact for small e), then the series.
  const float c = (e - (y - 1.0f)) / y;
  const float f = (m - 1.0f) / (m + 1.0f);
  const float f2 = f * f;
  const float q = atanh_poly(f2);
  const float r = static_cast<float>(k) * 0.693147180559945309f + 2.0f * f * q + c;
  return y == 1.0f ? e : r;
}

// softplus with the threshold of the specification: v > 20 ? v : log(1 + e^v).
__attribute__((always_inline)) inline float softplus20_fast(float v) { return v > 20.0f ? v : log1p_fast(exp_fast(v)); }
inline float softplus20(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

// Eight-lane versions for the per-channel-A loops (Mamba-1: dstate 16, an
// exp per state element). GCC/Clang vector extensions: AVX in the avx2
// build, pairs of SSE registers in the baseline build.
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

__attribute__((always_inline)) inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

__attribute__((always_inline)) inline v8f exp_fast8(v8f x) {
  const v8f lo = x < -87.0f ? v8f{} - 87.0f : x;
  const v8f xc = lo > 88.0f ? v8f{} + 88.0f : lo;
  const v8f k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  v8f r = xc - k * 0.693145751953125f;
  r = r - k * 1.428606765330187045e-06f;
  const v8f q = exp_poly(r);
  const v8i ki = __builtin_convertvector(k, v8i);
  const v8f scale = (v8f)((ki + 127) << 23);  // same-size vector cast: a bit cast
  v8f e = q * scale;
  e = x < -87.0f ? v8f{} : e;
  e = x > 88.0f ? v8f{} + INFINITY : e;
  return x != x ? x : e;
}

__attribute__((always_inline)) inline v8f log1p_fast8(v8f e) {
  const v8f y = 1.0f + e;
  const v8i u = (v8i)y - 0x3f3504f3;
  const v8i k = u >> 23;
  const v8f m = (v8f)((u & 0x007fffff) + 0x3f3504f3);
  const v8f c = (e - (y - 1.0f)) / y;
  const v8f f = (m - 1.0f) / (m + 1.0f);
  const v8f f2 = f * f;
  const v8f q = atanh_poly(f2);
  const v8f r = __builtin_convertvector(k, v8f) * 0.693147180559945309f + 2.0f * f * q + c;
  return y == 1.0f ? e : r;
}

// a[i] = f(a[i]) over n floats, eight at a time (f8) with a scalar tail (f1).
template <typename F8, typename F1>
__attribute__((always_inline)) inline void map_rows(float* a, int64_t n, F8 f8, F1 f1) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(a + i, f8(load8(a + i)));
  for (; i < n; ++i) a[i] = f1(a[i]);
}

// One row of the per-channel-A update: st = st*exp(A*dt) + (B*dt)*x,
// returns sum(st*C). dB holds B*dt when dt is per head (dtv ignored), else
// null and B*dtv is formed here.
__attribute__((always_inline)) inline float row_update_pcA(float* st, const float* Af,
                                                           const float* Bf, const float* dB,
                                                           const float* Cf, float dtv, float xv,
                                                           int64_t N) {
  float y = 0.0f;
  int64_t n = 0;
  if (N >= 8) {
    v8f yv{};
    for (; n + 8 <= N; n += 8) {
      const v8f b = dB ? load8(dB + n) : load8(Bf + n) * dtv;
      const v8f hn = load8(st + n) * exp_fast8(load8(Af + n) * dtv) + b * xv;
      store8(st + n, hn);
      yv += hn * load8(Cf + n);
    }
    for (int i = 0; i < 8; ++i) y += yv[i];
  }
  for (; n < N; ++n) {
    const float b = dB ? dB[n] : Bf[n] * dtv;
    const float hn = st[n] * exp_fast(Af[n] * dtv) + b * xv;
    st[n] = hn;
    y += hn * Cf[n];
  }
  return y;
}

template <typename S>
inline void load_state_row(const S* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
template <typename S>
inline void store_state_row(const float* src, int64_t n, S* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = from_float<S>(src[i]);
}

template <typename S>
void run_items(const ssu_update_params& p, int64_t rows_per_item, int64_t begin, int64_t end) {
  const int64_t H = p.nheads, P = p.dim, N = p.dstate;
  const int64_t blocks = (P + rows_per_item - 1) / rows_per_item;
  const uint32_t f = p.features;
  const bool dt_pc = f & SSU_F_DT_PER_CHANNEL;
  const bool A_pc = f & SSU_F_A_PER_CHANNEL;
  const bool softplus = f & SSU_F_DT_SOFTPLUS;
  const int64_t head_elems = P * N;
  S* const state = static_cast<S*>(p.state);
  S* const inter = static_cast<S*>(p.inter_states);

  alignas(64) float tile[kTileFloats];
  alignas(64) float Bf[kMaxDstate], Cf[kMaxDstate], dB[kMaxDstate], Af[kMaxDstate];
  alignas(64) float xr[kMaxRows], zr[kMaxRows], yr[kMaxRows], dtr[kMaxRows], dAr[kMaxRows];

  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / (H * blocks);
    const int64_t h = (item / blocks) % H;
    const int64_t r0 = (item % blocks) * rows_per_item;
    const int64_t rows = std::min(rows_per_item, P - r0);
    const int64_t g = h / p.heads_per_group;
    const Sequence s = resolve_sequence(p, b);
    if (s.len <= 0) continue;
    const int64_t len = std::min(s.len, p.ntokens);

    if (s.pad) {  // exact zeros, no pool access
      for (int64_t t = 0; t < len; ++t) {
        const int64_t tok = s.tok0 + t;
        const int64_t o = b * p.out_stride_b + tok * p.out_stride_t + h * p.out_stride_h + r0;
        for (int64_t r = 0; r < rows; ++r) store_float(p.out, p.input_dtype, o + r, 0.0f);
      }
      continue;
    }

    const S* src_head = state + s.src * p.state_stride_slot + h * head_elems + r0 * N;
    for (int64_t r = 0; r < rows; ++r) load_state_row(src_head + r * N, N, tile + r * N);

    const float A_h = A_pc ? 0.0f : load_float(p.A, p.A_dtype, h * p.A_stride_h);
    const bool has_D = f & SSU_F_HAS_D, has_bias = f & SSU_F_HAS_DT_BIAS, has_z = f & SSU_F_HAS_Z;
    auto load_A_row = [&](int64_t row) {
      const int64_t base = h * p.A_stride_h + row * p.A_stride_p;
      if (p.A_stride_n == 1) {
        load_row(p.A, p.A_dtype, base, N, Af);
      } else {
        for (int64_t n = 0; n < N; ++n) Af[n] = load_float(p.A, p.A_dtype, base + n * p.A_stride_n);
      }
    };
    const int64_t inter_slot =
        (f & SSU_F_HAS_INTER) ? intermediate_slot(p, b, s) : -1;

    for (int64_t t = 0; t < len; ++t) {
      const int64_t tok = s.tok0 + t;
      load_row(p.B, p.input_dtype, b * p.B_stride_b + tok * p.B_stride_t + g * p.B_stride_g, N, Bf);
      load_row(p.C, p.input_dtype, b * p.C_stride_b + tok * p.C_stride_t + g * p.C_stride_g, N, Cf);
      const int64_t dt_row = b * p.dt_stride_b + tok * p.dt_stride_t + h * p.dt_stride_h;

      // Per-head step: the same for every row unless dt is per channel.
      float dt_h = 0.0f, dA_h = 0.0f;
      if (!dt_pc) {
        dt_h = load_float(p.dt, p.dt_dtype, dt_row);
        if (has_bias) dt_h += load_float(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride_h);
        if (softplus) dt_h = softplus20(dt_h);
        for (int64_t n = 0; n < N; ++n) dB[n] = Bf[n] * dt_h;
        if (!A_pc) dA_h = std::exp(A_h * dt_h);
      }

      int64_t dst_t = -1;  // per-token store target of this token
      if (f & SSU_F_DST_PER_TOKEN && !(f & SSU_F_DISABLE_UPDATE)) {
        dst_t = dst_slot(p, b, t);
        if (is_pad(p, dst_t)) dst_t = -1;
      }

      // Per-row inputs of this token, gathered first so that the per-row
      // transcendental functions (softplus, exp, silu) run as vector loops.
      const int64_t x_row = b * p.x_stride_b + tok * p.x_stride_t + h * p.x_stride_h;
      const int64_t z_row = b * p.z_stride_b + tok * p.z_stride_t + h * p.z_stride_h;
      const int64_t o_row = b * p.out_stride_b + tok * p.out_stride_t + h * p.out_stride_h;
      for (int64_t r = 0; r < rows; ++r) xr[r] = load_float(p.x, p.input_dtype, x_row + r0 + r);
      if (dt_pc) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t row = r0 + r;
          float v = load_float(p.dt, p.dt_dtype, dt_row + row * p.dt_stride_p);
          if (has_bias)
            v += load_float(p.dt_bias, p.dt_bias_dtype,
                            h * p.dt_bias_stride_h + row * p.dt_bias_stride_p);
          dtr[r] = v;
        }
        if (softplus)
          map_rows(
              dtr, rows,
              [](v8f v) { return v > 20.0f ? v : log1p_fast8(exp_fast8(v)); },
              [](float v) { return softplus20_fast(v); });
        if (!A_pc) {
          for (int64_t r = 0; r < rows; ++r) dAr[r] = A_h * dtr[r];
          map_rows(dAr, rows, [](v8f v) { return exp_fast8(v); }, [](float v) { return exp_fast(v); });
        }
      }

      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = r0 + r;
        float* st = tile + r * N;
        const float xv = xr[r];
        float y = 0.0f;
        if (!dt_pc) {
          if (!A_pc) {
            const float dA = dA_h;
#pragma omp simd reduction(+ : y)
            for (int64_t n = 0; n < N; ++n) {
              const float hn = st[n] * dA + dB[n] * xv;
              st[n] = hn;
              y += hn * Cf[n];
            }
          } else {
            load_A_row(row);
            y = row_update_pcA(st, Af, Bf, dB, Cf, dt_h, xv, N);
          }
        } else {
          const float dtv = dtr[r];
          if (!A_pc) {
            const float dA = dAr[r];
#pragma omp simd reduction(+ : y)
            for (int64_t n = 0; n < N; ++n) {
              const float hn = st[n] * dA + (Bf[n] * dtv) * xv;
              st[n] = hn;
              y += hn * Cf[n];
            }
          } else {
            load_A_row(row);
            y = row_update_pcA(st, Af, Bf, nullptr, Cf, dtv, xv, N);
          }
        }
        yr[r] = y;
        if (dst_t >= 0)
          store_state_row(st, N, state + dst_t * p.state_stride_slot + h * head_elems + row * N);
        if (inter_slot >= 0 && !is_pad(p, inter_slot))
          store_state_row(st, N, inter + inter_slot * p.inter_stride_i + t * p.inter_stride_t +
                                     h * head_elems + row * N);
      }

      // Output: y + D*x, gated by silu(z), rounded to out's dtype.
      if (has_D)
        for (int64_t r = 0; r < rows; ++r)
          yr[r] += load_float(p.D, p.D_dtype, h * p.D_stride_h + (r0 + r) * p.D_stride_p) * xr[r];
      if (has_z) {
        for (int64_t r = 0; r < rows; ++r) zr[r] = load_float(p.z, p.input_dtype, z_row + r0 + r);
        map_rows(
            zr, rows, [](v8f v) { return v / (1.0f + exp_fast8(-v)); },
            [](float v) { return v / (1.0f + exp_fast(-v)); });
        for (int64_t r = 0; r < rows; ++r) yr[r] *= zr[r];
      }
      for (int64_t r = 0; r < rows; ++r) store_float(p.out, p.input_dtype, o_row + r0 + r, yr[r]);
    }

    // Final store (the default write mode).
    if (!(f & (SSU_F_DISABLE_UPDATE | SSU_F_DST_PER_TOKEN))) {
      const int64_t d = (f & SSU_F_HAS_DST) ? dst_slot(p, b, 0) : s.src;
      if (!is_pad(p, d)) {
        S* dst_head = state + d * p.state_stride_slot + h * head_elems + r0 * N;
        for (int64_t r = 0; r < rows; ++r) store_state_row(tile + r * N, N, dst_head + r * N);
      }
    }
  }
}

}  // namespace

void update_items(const ssu_update_params& p, int64_t rows_per_item, int64_t begin, int64_t end) {
  switch (p.state_dtype) {
    case SSU_DTYPE_F32: run_items<float>(p, rows_per_item, begin, end); break;
    case SSU_DTYPE_F16: run_items<f16_t>(p, rows_per_item, begin, end); break;
    default: run_items<bf16_t>(p, rows_per_item, begin, end); break;
  }
}

}  // namespace SSU_CPU_NS
}  // namespace cpu
}  // namespace ssu
