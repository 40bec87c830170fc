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

// exp(x) on [-87, 88] to about 2 ulp; 0 below, +inf above, NaN stays NaN.
// Branch-free so that loops over dstate vectorize.
inline float exp_fast(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float kShift = 12582912.0f;  // 1.5 * 2^23: rounds to an integer
  const float k = (xc * 1.44269504088896341f + kShift) - kShift;
  float r = xc - k * 0.693145751953125f;
  r = r - k * 1.428606765330187045e-06f;
  float q = 1.0f / 5040.0f;
  q = q * r + 1.0f / 720.0f;
  q = q * r + 1.0f / 120.0f;
  q = q * r + 1.0f / 24.0f;
  q = q * r + 1.0f / 6.0f;
  q = q * r + 0.5f;
  q = q * r + 1.0f;
  q = q * r + 1.0f;
  const int32_t ki = static_cast<int32_t>(k);
  const float scale = bits_to_float(static_cast<uint32_t>(ki + 127) << 23);
  float e = q * scale;
  e = x < -87.0f ? 0.0f : e;
  e = x > 88.0f ? INFINITY : e;
  return x != x ? x : e;
}

inline float softplus20(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }
inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

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

      const int64_t x_row = b * p.x_stride_b + tok * p.x_stride_t + h * p.x_stride_h;
      const int64_t z_row = b * p.z_stride_b + tok * p.z_stride_t + h * p.z_stride_h;
      const int64_t o_row = b * p.out_stride_b + tok * p.out_stride_t + h * p.out_stride_h;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = r0 + r;
        float* st = tile + r * N;
        const float xv = load_float(p.x, p.input_dtype, x_row + row);
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
#pragma omp simd reduction(+ : y)
            for (int64_t n = 0; n < N; ++n) {
              const float hn = st[n] * exp_fast(Af[n] * dt_h) + dB[n] * xv;
              st[n] = hn;
              y += hn * Cf[n];
            }
          }
        } else {
          float dtv = load_float(p.dt, p.dt_dtype, dt_row + row * p.dt_stride_p);
          if (has_bias)
            dtv += load_float(p.dt_bias, p.dt_bias_dtype,
                              h * p.dt_bias_stride_h + row * p.dt_bias_stride_p);
          if (softplus) dtv = softplus20(dtv);
          if (!A_pc) {
            const float dA = std::exp(A_h * dtv);
#pragma omp simd reduction(+ : y)
            for (int64_t n = 0; n < N; ++n) {
              const float hn = st[n] * dA + (Bf[n] * dtv) * xv;
              st[n] = hn;
              y += hn * Cf[n];
            }
          } else {
            load_A_row(row);
#pragma omp simd reduction(+ : y)
            for (int64_t n = 0; n < N; ++n) {
              const float hn = st[n] * exp_fast(Af[n] * dtv) + (Bf[n] * dtv) * xv;
              st[n] = hn;
              y += hn * Cf[n];
            }
          }
        }
        if (has_D)
          y += load_float(p.D, p.D_dtype, h * p.D_stride_h + row * p.D_stride_p) * xv;
        if (has_z) y *= silu(load_float(p.z, p.input_dtype, z_row + row));
        store_float(p.out, p.input_dtype, o_row + row, y);

        if (dst_t >= 0)
          store_state_row(st, N, state + dst_t * p.state_stride_slot + h * head_elems + row * N);
        if (inter_slot >= 0 && !is_pad(p, inter_slot))
          store_state_row(st, N, inter + inter_slot * p.inter_stride_i + t * p.inter_stride_t +
                                     h * head_elems + row * N);
      }
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
