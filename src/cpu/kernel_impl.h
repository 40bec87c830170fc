// The CPU update loops. Included once per instruction-set variant, each
// time with SSU_CPU_NS naming the variant's namespace (see kernels_*.cpp).
//
// Work is split into items of (sequence b, head h, block of rows). Rows of a
// head evolve independently, so an item carries its rows through all the
// sequence's tokens in an fp32 scratch tile and stores them as the write
// mode demands. All arithmetic is fp32, in the order of the specification;
// everything that feeds a stored state uses ssu_math.h and no contracted
// multiply-add (these sources are compiled with -ffp-contract=off), so the
// baseline and AVX2 builds and the CUDA kernels store the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#  include <immintrin.h>
#endif

#include "cpu/convert.h"
#include "cpu/sequence.h"
#include "cpu/state8_rows.h"
#include "ssu_math.h"
#include "ssu_state8.h"
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

// Eight-lane versions of ssu_math::exp / log1p / softplus20 for the
// per-row and per-channel-A loops (Mamba-1: dstate 16, an exp per state
// element). GCC/Clang vector extensions: AVX in the avx2 build, pairs of SSE
// registers in the baseline build. Each lane evaluates exactly the scalar
// function's operations in the same order (the polynomials are the same
// templates), so a value that feeds a stored state has the same bits
// whichever path and build computed it.
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

__attribute__((always_inline)) inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// a * b + c per lane with one rounding (ssu_math::fmadd): the FMA instruction
// in the avx2 build, the C library's fmaf per lane in the baseline one (an
// FMA instruction where the target has one; a correctly rounded emulation
// on x86-64 processors without FMA, which are slow but give the same bits).
struct V8MulAdd {
  __attribute__((always_inline)) v8f operator()(v8f a, v8f b, float c) const {
#if defined(__FMA__)
    return (v8f)_mm256_fmadd_ps((__m256)a, (__m256)b, _mm256_set1_ps(c));
#else
    v8f r;
    for (int i = 0; i < 8; ++i) r[i] = __builtin_fmaf(a[i], b[i], c);
    return r;
#endif
  }
  __attribute__((always_inline)) v8f operator()(v8f a, float b, v8f c) const {
#if defined(__FMA__)
    return (v8f)_mm256_fmadd_ps((__m256)a, _mm256_set1_ps(b), (__m256)c);
#else
    v8f r;
    for (int i = 0; i < 8; ++i) r[i] = __builtin_fmaf(a[i], b, c[i]);
    return r;
#endif
  }
};

__attribute__((always_inline)) inline v8f exp8(v8f x) {
  using namespace ssu_math;
  const V8MulAdd madd;
  const v8f lo = x < -88.0f ? v8f{} - 88.0f : x;
  const v8f xc = lo > 89.0f ? v8f{} + 89.0f : lo;
  const v8f kb = madd(xc, kLog2e, v8f{} + kExpShift);
  const v8f k = kb - kExpShift;
  v8f r = madd(k, -kLn2Hi, xc);
  r = madd(k, -kLn2Lo, r);
  const v8f q = exp_poly(r, madd);
  const v8i ki = (v8i)kb - 0x4B400000;        // same-size vector cast: a bit cast
  const v8f scale = (v8f)((ki + 127) << 23);  // k in [-127, 128]: 0 ... +Inf
  return q * scale;
}

__attribute__((always_inline)) inline v8f log1p8(v8f e) {
  using namespace ssu_math;
  const v8f y = 1.0f + e;
  const v8i u = (v8i)y - static_cast<int32_t>(kSqrtHalfBits);
  const v8i k = u >> 23;
  const v8f m = (v8f)((u & 0x007fffff) + static_cast<int32_t>(kSqrtHalfBits));
  const v8f c = (e - (y - 1.0f)) / y;
  const v8f f = (m - 1.0f) / (m + 1.0f);
  const v8f f2 = f * f;
  const v8f q = atanh_poly(f2);
  const v8f r = __builtin_convertvector(k, v8f) * kLn2 + 2.0f * f * q + c;
  return y == 1.0f ? e : r;
}

__attribute__((always_inline)) inline v8f softplus20_8(v8f v) {
  return v > 20.0f ? v : log1p8(exp8(v));
}

// a[i] = f(a[i]) over n floats, eight at a time (f8) with a scalar tail (f1).
template <typename F8, typename F1>
__attribute__((always_inline)) inline void map_rows(float* a, int64_t n, F8 f8, F1 f1) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(a + i, f8(load8(a + i)));
  for (; i < n; ++i) a[i] = f1(a[i]);
}

// One token of one row, the canonical fp32 step:
//   dA = exp(A[n] * delta) (per-channel A: Af given) or dA_h,
//   h[n] = h[n] * dA + B[n] * dtx            (dtx = delta * x, no fused ops)
// Returns sum_n h[n] * C[n] (for the output only; its order is free).
__attribute__((always_inline)) inline float row_step(float* st, const float* Af, float dA_h,
                                                     const float* Bf, const float* Cf,
                                                     float delta, float dtx, int64_t N) {
  float y = 0.0f;
  if (Af) {
    int64_t n = 0;
    if (N >= 8) {
      v8f yv{};
      for (; n + 8 <= N; n += 8) {
        const v8f dA = exp8(load8(Af + n) * delta);
        const v8f hn = load8(st + n) * dA + load8(Bf + n) * dtx;
        store8(st + n, hn);
        yv += hn * load8(Cf + n);
      }
      for (int i = 0; i < 8; ++i) y += yv[i];
    }
    for (; n < N; ++n) {
      const float dA = ssu_math::exp(Af[n] * delta);
      const float hn = st[n] * dA + Bf[n] * dtx;
      st[n] = hn;
      y += hn * Cf[n];
    }
  } else {
#pragma omp simd reduction(+ : y)
    for (int64_t n = 0; n < N; ++n) {
      const float hn = st[n] * dA_h + Bf[n] * dtx;
      st[n] = hn;
      y += hn * Cf[n];
    }
  }
  return y;
}

// ---------------------------------------------------------------------------
// State rows: loads to fp32 and stores of an fp32 row in the pool's dtype.
// `scale` is the row's decode scale (block-scaled formats only); `words`
// the row's random words when f16 / bf16 / e4m3 stores round
// stochastically, else null.

inline void load_state_row(const float* src, int64_t n, float* dst, float) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
inline void load_state_row(const f16_t* src, int64_t n, float* dst, float) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
inline void load_state_row(const int16_t* src, int64_t n, float* dst, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale;
}

// Eight-lane forms of the ssu_math.h stores, lane for lane the same
// results (integer operations and exact selects; the int16 rounding adds and
// subtracts 1.5 * 2^23, which rounds |s| <= 32767 half to even exactly as
// the default rounding mode does).
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef int16_t v8s __attribute__((vector_size(16)));

__attribute__((always_inline)) inline v8u loadu8(const uint32_t* p) {
  v8u v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ssu_math::f32_to_bf16_sr on eight lanes.
__attribute__((always_inline)) inline v8h bf16_sr8(v8f v, v8u rnd) {
  const v8u u = (v8u)v;
  const v8u sign = u & 0x80000000u;
  const v8u mag = u & 0x7fffffffu;
  v8u m = mag + (rnd & 0xffffu);
  m = m > 0x7f7fffffu ? v8u{} + 0x7f800000u : m;
  v8u r = (sign | m) >> 16;
  r = mag == 0x7f800000u ? u >> 16 : r;
  r = mag > 0x7f800000u ? (sign | 0x7fc00000u) >> 16 : r;
  return __builtin_convertvector(r, v8h);
}

// ssu_math::f32_to_f16_sr on eight lanes.
__attribute__((always_inline)) inline v8h f16_sr8(v8f v, v8u rnd) {
  const v8u u = (v8u)v;
  const v8u sign = (u >> 16) & 0x8000u;
  const v8u mag = u & 0x7fffffffu;
  const v8u m = mag + (rnd & 0x1fffu);
  const v8i e = (v8i)(m >> 23) - (127 - 15);
  v8u r = sign | ((v8u)e << 10) | ((m >> 13) & 0x3ffu);
  r = e <= 0 ? sign : r;
  r = e >= 31 ? sign | 0x7c00u : r;
  r = mag == 0x7f800000u ? sign | 0x7c00u : r;
  r = mag > 0x7f800000u ? sign | 0x7e00u : r;
  return __builtin_convertvector(r, v8h);
}

// ssu_math::int16_quantize on eight lanes.
__attribute__((always_inline)) inline v8s quantize8(v8f v, float enc) {
  v8f s = v * enc;
  const v8i nan = s != s;
  s = s < -32767.0f ? v8f{} - 32767.0f : s;
  s = s > 32767.0f ? v8f{} + 32767.0f : s;
  const v8f r = (s + ssu_math::kExpShift) - ssu_math::kExpShift;
  const v8i q = nan ? v8i{} : __builtin_convertvector(r, v8i);
  return __builtin_convertvector(q, v8s);
}

// from_float<bf16_t> (round to nearest even, NaN stays quiet) on eight lanes.
__attribute__((always_inline)) inline v8h bf16_rn8(v8f v) {
  const v8u u = (v8u)v;
  v8u r = (u + (0x7fffu + ((u >> 16) & 1u))) >> 16;
  r = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r;
  return __builtin_convertvector(r, v8h);
}

inline void load_state_row(const bf16_t* src, int64_t n, float* dst, float) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8h h;
    std::memcpy(&h, src + i, sizeof h);
    store8(dst + i, (v8f)(__builtin_convertvector(h, v8u) << 16));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

inline void store_state_row(const float* v, int64_t n, float* dst, float*, const uint32_t*) {
  std::memcpy(dst, v, static_cast<size_t>(n) * sizeof(float));
}
inline void store_state_row(const float* v, int64_t n, f16_t* dst, float*, const uint32_t* words) {
  if (words) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const v8h h = f16_sr8(load8(v + i), loadu8(words + i));
      std::memcpy(dst + i, &h, sizeof h);
    }
    for (; i < n; ++i) {
      const uint16_t bits = ssu_math::f32_to_f16_sr(v[i], words[i]);
      std::memcpy(dst + i, &bits, sizeof bits);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = from_float<f16_t>(v[i]);
  }
}
inline void store_state_row(const float* v, int64_t n, bf16_t* dst, float*, const uint32_t* words) {
  if (words) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const v8h h = bf16_sr8(load8(v + i), loadu8(words + i));
      std::memcpy(dst + i, &h, sizeof h);
    }
    for (; i < n; ++i) dst[i].bits = ssu_math::f32_to_bf16_sr(v[i], words[i]);
  } else {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const v8h h = bf16_rn8(load8(v + i));
      std::memcpy(dst + i, &h, sizeof h);
    }
    for (; i < n; ++i) dst[i] = from_float<bf16_t>(v[i]);
  }
}
// int16: codes and the row's decode scale (ssu_state_pool_t). The row
// maximum does not depend on the order (NaN wins), so lanes may split it.
inline void store_state_row(const float* v, int64_t n, int16_t* dst, float* scale,
                            const uint32_t*) {
  float amax = 0.0f;
  int64_t i = 0;
  if (n >= 8) {
    v8f am{};
    for (; i + 8 <= n; i += 8) {
      const v8f x = load8(v + i);
      const v8f a = x < 0.0f ? -x : x;
      am = (a > am || a != a) ? a : am;
    }
    for (int l = 0; l < 8; ++l) amax = ssu_math::int16_amax_step(amax, am[l]);
  }
  for (; i < n; ++i) amax = ssu_math::int16_amax_step(amax, v[i]);
  const float enc = ssu_math::int16_encode_factor(amax);
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8s q = quantize8(load8(v + i), enc);
    std::memcpy(dst + i, &q, sizeof q);
  }
  for (; i < n; ++i) dst[i] = ssu_math::int16_quantize(v[i], enc);
  *scale = 1.0f / enc;
}

// 8-bit block-scaled rows: cpu/state8_rows.h (shared with the replay).
using ssu::cpu::load_state_row;
using ssu::cpu::store_state_row;

// Philox-4x32 (ssu_math::philox4x32) for eight counters at once: both
// halves of the 32x32-bit products come from the even/odd widening
// multiplies (pmuludq). (Plain 64-bit vector multiplies by a constant would
// be strength-reduced into long shift-and-add chains.)
__attribute__((always_inline)) inline void mulhilo8(uint32_t a, v8u b, v8u* hi, v8u* lo) {
#if defined(__AVX2__)
  const __m256i av = _mm256_set1_epi32(static_cast<int>(a));
  const __m256i bv = (__m256i)b;
  const __m256i even = _mm256_mul_epu32(bv, av);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(bv, 32), av);
  *hi = (v8u)_mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
  *lo = (v8u)_mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xaa);
#elif defined(__SSE2__)
  const __m128i av = _mm_set1_epi32(static_cast<int>(a));
  const __m128i mask = _mm_set1_epi64x(static_cast<long long>(0xffffffff00000000ull));
  __m128i h[2], l[2];
  std::memcpy(h, &b, sizeof h);
  for (int k = 0; k < 2; ++k) {
    const __m128i even = _mm_mul_epu32(h[k], av);
    const __m128i odd = _mm_mul_epu32(_mm_srli_epi64(h[k], 32), av);
    l[k] = _mm_or_si128(_mm_andnot_si128(mask, even), _mm_slli_epi64(odd, 32));
    h[k] = _mm_or_si128(_mm_srli_epi64(even, 32), _mm_and_si128(odd, mask));
  }
  std::memcpy(hi, h, sizeof h);
  std::memcpy(lo, l, sizeof l);
#else
  for (int k = 0; k < 8; ++k) (*hi)[k] = ssu_math::mulhi32(a, b[k]);
  *lo = b * a;
#endif
}

// The random words of the pool elements at offsets [L0, L0 + n): word
// (L mod 4) of Philox(seed, L - L mod 4). One generator call per aligned
// group of four, eight groups at a time. Returns where the word of L0 lies
// in `raw`, which holds n + 3 rounded up to 32 words.
inline const uint32_t* fill_sr_words(uint64_t seed, uint32_t rounds, uint64_t L0, int64_t n,
                                     uint32_t* raw) {
  const uint64_t base = L0 & ~uint64_t{3};
  const int64_t groups = (static_cast<int64_t>(L0 - base) + n + 3) / 4;
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int64_t g0 = 0; g0 < groups; g0 += 8) {
    v8u c0, c1, c2 = v8u{}, c3 = v8u{};
    for (int l = 0; l < 8; ++l) {
      const uint64_t ctr = base + 4 * static_cast<uint64_t>(g0 + l);
      c0[l] = static_cast<uint32_t>(ctr);
      c1[l] = static_cast<uint32_t>(ctr >> 32);
    }
    uint32_t r0 = k0, r1 = k1;
    for (uint32_t i = 0; i < rounds; ++i) {
      v8u hi0, lo0, hi2, lo2;
      mulhilo8(0xD2511F53u, c0, &hi0, &lo0);
      mulhilo8(0xCD9E8D57u, c2, &hi2, &lo2);
      c0 = hi2 ^ c1 ^ r0;
      c1 = lo2;
      c2 = hi0 ^ c3 ^ r1;
      c3 = lo0;
      r0 += 0x9E3779B9u;
      r1 += 0xBB67AE85u;
    }
    uint32_t* out = raw + 4 * g0;
#if defined(__AVX2__)
    // 4 x 8 transpose: out[4 l + j] = cj[l].
    const __m256i a01 = _mm256_unpacklo_epi32((__m256i)c0, (__m256i)c1);  // groups 0,1 | 4,5
    const __m256i b01 = _mm256_unpackhi_epi32((__m256i)c0, (__m256i)c1);  // groups 2,3 | 6,7
    const __m256i a23 = _mm256_unpacklo_epi32((__m256i)c2, (__m256i)c3);
    const __m256i b23 = _mm256_unpackhi_epi32((__m256i)c2, (__m256i)c3);
    const __m256i g04 = _mm256_unpacklo_epi64(a01, a23);  // group 0 | group 4
    const __m256i g15 = _mm256_unpackhi_epi64(a01, a23);
    const __m256i g26 = _mm256_unpacklo_epi64(b01, b23);
    const __m256i g37 = _mm256_unpackhi_epi64(b01, b23);
    __m256i* o = reinterpret_cast<__m256i*>(out);
    _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(g04, g15, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(g26, g37, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(g04, g15, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(g26, g37, 0x31));
#else
    for (int l = 0; l < 8; ++l) {
      out[4 * l + 0] = c0[l];
      out[4 * l + 1] = c1[l];
      out[4 * l + 2] = c2[l];
      out[4 * l + 3] = c3[l];
    }
#endif
  }
  return raw + (L0 - base);
}

template <typename S>
void run_items(const ssu_update_params& p, int64_t rows_per_item, int64_t begin, int64_t end) {
  const int64_t H = p.nheads, P = p.dim, N = p.dstate;
  const int64_t blocks = (P + rows_per_item - 1) / rows_per_item;
  const uint32_t f = p.features;
  const bool dt_pc = f & SSU_F_DT_PER_CHANNEL;
  const bool A_pc = f & SSU_F_A_PER_CHANNEL;
  const bool softplus = f & SSU_F_DT_SOFTPLUS;
  const bool has_D = f & SSU_F_HAS_D, has_bias = f & SSU_F_HAS_DT_BIAS, has_z = f & SSU_F_HAS_Z;
  const bool scaled = is_scaled_state(p.state_dtype);
  const bool stochastic = f & SSU_F_STOCHASTIC;
  // The seed is read when the update runs (ssu_update_args_t.rounding_seed).
  const uint64_t seed = stochastic ? *p.sr_seed : 0;
  const int64_t head_elems = P * N;
  S* const state = static_cast<S*>(p.state);
  S* const inter = static_cast<S*>(p.inter_states);
  float dummy_scale = 0.0f;  // the scale target of unscaled dtypes (never read)

  alignas(64) float tile[kTileFloats];
  // Stochastic rounding: the random words of the tile's elements.
  alignas(64) uint32_t sr_raw[kTileFloats + 64];
  alignas(64) float Bf[kMaxDstate], Cf[kMaxDstate], Af[kMaxDstate];
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

    // Offsets (elements) of this item's first row in a state slot and in a
    // scale row; the rows of an item are consecutive in both.
    const int64_t row_off = h * head_elems + r0 * N;
    const int64_t scale_off = h * P + r0;
    const S* src_head = state + s.src * p.state_stride_slot + row_off;
    for (int64_t r = 0; r < rows; ++r) {
      const float sc = scaled ? p.state_scale[s.src * p.state_scale_stride_slot + scale_off + r]
                              : 0.0f;
      load_state_row(src_head + r * N, N, tile + r * N, sc);
    }

    // Every store of this call uses the random words of the source
    // elements; they are drawn once, at the first store.
    const uint32_t* words = nullptr;
    auto row_words = [&](int64_t r) -> const uint32_t* {
      if (!stochastic) return nullptr;
      if (!words)
        words = fill_sr_words(seed, p.sr_rounds,
                              static_cast<uint64_t>(s.src * p.state_stride_slot + row_off),
                              rows * N, sr_raw);
      return words + r * N;
    };
    // Stores row r of the tile to a state slot (pool) or an intermediate entry.
    auto store_pool_row = [&](int64_t r, int64_t slot) {
      float* sc = scaled ? p.state_scale + slot * p.state_scale_stride_slot + scale_off + r
                         : &dummy_scale;
      store_state_row(tile + r * N, N, state + slot * p.state_stride_slot + row_off + r * N, sc,
                      row_words(r));
    };
    auto store_inter_row = [&](int64_t r, int64_t i, int64_t t) {
      float* sc = scaled ? p.inter_scale + i * p.inter_scale_stride_i + t * p.inter_scale_stride_t +
                               scale_off + r
                         : &dummy_scale;
      store_state_row(tile + r * N, N,
                      inter + i * p.inter_stride_i + t * p.inter_stride_t + row_off + r * N, sc,
                      row_words(r));
    };

    const float A_h = A_pc ? 0.0f : load_float(p.A, p.A_dtype, h * p.A_stride_h);
    auto load_A_row = [&](int64_t row) {
      const int64_t base = h * p.A_stride_h + row * p.A_stride_p;
      if (p.A_stride_n == 1) {
        load_row(p.A, p.A_dtype, base, N, Af);
      } else {
        for (int64_t n = 0; n < N; ++n) Af[n] = load_float(p.A, p.A_dtype, base + n * p.A_stride_n);
      }
    };
    int64_t inter_slot = (f & SSU_F_HAS_INTER) ? intermediate_slot(p, b, s) : -1;
    if (inter_slot >= 0 && is_pad(p, inter_slot)) inter_slot = -1;

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
        if (softplus) dt_h = ssu_math::softplus20(dt_h);
        if (!A_pc) dA_h = ssu_math::exp(A_h * dt_h);
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
              dtr, rows, [](v8f v) { return softplus20_8(v); },
              [](float v) { return ssu_math::softplus20(v); });
        if (!A_pc) {
          for (int64_t r = 0; r < rows; ++r) dAr[r] = A_h * dtr[r];
          map_rows(
              dAr, rows, [](v8f v) { return exp8(v); }, [](float v) { return ssu_math::exp(v); });
        }
      }

      for (int64_t r = 0; r < rows; ++r) {
        const float delta = dt_pc ? dtr[r] : dt_h;
        const float dA = dt_pc ? dAr[r] : dA_h;
        const float dtx = delta * xr[r];
        if (A_pc) load_A_row(r0 + r);
        yr[r] = row_step(tile + r * N, A_pc ? Af : nullptr, dA, Bf, Cf, delta, dtx, N);
        if (dst_t >= 0) store_pool_row(r, dst_t);
        if (inter_slot >= 0) store_inter_row(r, inter_slot, t);
      }

      // Output: y + D*x, gated by silu(z), rounded to out's dtype.
      if (has_D)
        for (int64_t r = 0; r < rows; ++r)
          yr[r] += load_float(p.D, p.D_dtype, h * p.D_stride_h + (r0 + r) * p.D_stride_p) * xr[r];
      if (has_z) {
        for (int64_t r = 0; r < rows; ++r) zr[r] = load_float(p.z, p.input_dtype, z_row + r0 + r);
        map_rows(
            zr, rows, [](v8f v) { return v / (1.0f + exp8(-v)); },
            [](float v) { return v / (1.0f + ssu_math::exp(-v)); });
        for (int64_t r = 0; r < rows; ++r) yr[r] *= zr[r];
      }
      for (int64_t r = 0; r < rows; ++r) store_float(p.out, p.input_dtype, o_row + r0 + r, yr[r]);
    }

    // Final store (the default write mode).
    if (!(f & (SSU_F_DISABLE_UPDATE | SSU_F_DST_PER_TOKEN))) {
      const int64_t d = (f & SSU_F_HAS_DST) ? dst_slot(p, b, 0) : s.src;
      if (!is_pad(p, d))
        for (int64_t r = 0; r < rows; ++r) store_pool_row(r, d);
    }
  }
}

}  // namespace

void update_items(const ssu_update_params& p, int64_t rows_per_item, int64_t begin, int64_t end) {
  switch (p.state_dtype) {
    case SSU_DTYPE_F32: run_items<float>(p, rows_per_item, begin, end); break;
    case SSU_DTYPE_F16: run_items<f16_t>(p, rows_per_item, begin, end); break;
    case SSU_DTYPE_I16: run_items<int16_t>(p, rows_per_item, begin, end); break;
    case SSU_DTYPE_I8: run_items<int8_t>(p, rows_per_item, begin, end); break;
    case SSU_DTYPE_F8E4M3: run_items<e4m3_t>(p, rows_per_item, begin, end); break;
    default: run_items<bf16_t>(p, rows_per_item, begin, end); break;
  }
}

}  // namespace SSU_CPU_NS
}  // namespace cpu
}  // namespace ssu
