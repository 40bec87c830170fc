/*
 * The fp32 numerics that the CPU backend and the CUDA kernels share, so that
 * both store bit-identical states: the library's own exp and log1p, the
 * Philox-4x32 generator, stochastic rounding to f16 / bf16 and the int16 row
 * quantizer. Included by g++ (host) and nvcc (host and device).
 *
 * Bit identity needs every fp32 operation to round the same way on both
 * sides: the CPU sources are compiled with -ffp-contract=off and the kernels
 * with -fmad=false, so a * b + c is always two roundings unless written as
 * ssu_math::fmadd (one rounding on both sides: an IEEE fused multiply-add is
 * exact up to its single rounding, whichever hardware evaluates it). No
 * library transcendental is used on a stored path; division is IEEE division
 * on both sides.
 */
#ifndef SSU_MATH_H_
#define SSU_MATH_H_

#include <stdint.h>

#if defined(__CUDACC__)
#  define SSU_HD __host__ __device__ __forceinline__
#else
#  include <cmath>
#  include <cstring>
#  define SSU_HD inline __attribute__((always_inline))
#endif

namespace ssu_math {

SSU_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}
SSU_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

// ---------------------------------------------------------------------------
// exp and log1p. The polynomials are templates so that the CPU's eight-lane
// vector code evaluates exactly the same operations as the scalar code.

// a * b + c with a single rounding (FFMA on the GPU; FMA instructions or the
// C library's fmaf on the host).
SSU_HD float fmadd(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

// e^r for |r| <= ln(2)/2, Taylor to degree 7, evaluated by Horner's rule with
// fused multiply-adds: madd(a, b, c) must be a * b + c rounded once (fmadd,
// or the CPU's eight-lane equivalent).
template <typename T, typename MulAdd>
SSU_HD T exp_poly(T r, MulAdd madd) {
  T q = madd(T{} + 1.0f / 5040.0f, r, 1.0f / 720.0f);
  q = madd(q, r, 1.0f / 120.0f);
  q = madd(q, r, 1.0f / 24.0f);
  q = madd(q, r, 1.0f / 6.0f);
  q = madd(q, r, 0.5f);
  q = madd(q, r, 1.0f);
  return madd(q, r, 1.0f);
}
struct ScalarMulAdd {
  SSU_HD float operator()(float a, float b, float c) const { return fmadd(a, b, c); }
};
// atanh(f)/f as a series in f2 = f*f, for |f| <= 0.172.
template <typename T>
SSU_HD T atanh_poly(T f2) {
  T q = T{} + 1.0f / 9.0f;
  q = q * f2 + 1.0f / 7.0f;
  q = q * f2 + 1.0f / 5.0f;
  q = q * f2 + 1.0f / 3.0f;
  return q * f2 + 1.0f;
}

constexpr float kExpShift = 12582912.0f;  // 1.5 * 2^23: x + shift - shift rounds x
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693145751953125f;
constexpr float kLn2Lo = 1.428606765330187045e-06f;
constexpr float kLn2 = 0.693147180559945309f;
constexpr uint32_t kSqrtHalfBits = 0x3f3504f3u;

// exp(x): within 1 ulp where e^x is a normal number, [-87.3, 88.3]; a
// subnormal or 0 below (0 below -87.7), +Inf from 88.38 (where 2^k
// overflows: a little early, e^x <= FLT_MAX up to 88.72); a NaN gives a NaN.
// k = round(x / ln 2) is read from the low mantissa bits of
// x * log2(e) + 1.5 * 2^23; r = x - k ln 2 (ln 2 in two parts) lies in
// [-ln(2)/2, ln(2)/2]; e^x = e^r * 2^k, with 2^k built from k's bits: x is
// clamped to [-88, 89] so that k lies in [-127, 128], whose ends give the
// bit patterns of 0 and +Inf, and no special case needs a select. Every
// multiply-add is fused: 15 instructions on sm_90, for an exp per state
// element in the Mamba-1 layout.
SSU_HD float exp(float x) {
  // The comparisons keep a NaN (FMNMX.NAN on the GPU), which then
  // propagates through the arithmetic.
  const float lo = x < -88.0f ? -88.0f : x;
  const float xc = lo > 89.0f ? 89.0f : lo;
  const float kb = fmadd(xc, kLog2e, kExpShift);
  const float k = kb - kExpShift;
  float r = fmadd(k, -kLn2Hi, xc);
  r = fmadd(k, -kLn2Lo, r);
  const float q = exp_poly(r, ScalarMulAdd{});
  const int32_t ki = static_cast<int32_t>(float_to_bits(kb)) - 0x4B400000;
  const float scale = bits_to_float(static_cast<uint32_t>(ki + 127) << 23);
  return q * scale;
}

// log(1 + e) for e >= 0 (and NaN), to a few ulp.
SSU_HD float log1p(float e) {
  const float y = 1.0f + e;
  // y = m * 2^k with m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh((m-1)/(m+1)).
  const uint32_t u = float_to_bits(y) - kSqrtHalfBits;
  const int32_t k = static_cast<int32_t>(u) >> 23;
  const float m = bits_to_float((u & 0x007fffffu) + kSqrtHalfBits);
  const float c = (e - (y - 1.0f)) / y;  // the rounding error of 1 + e
  const float f = (m - 1.0f) / (m + 1.0f);
  const float f2 = f * f;
  const float q = atanh_poly(f2);
  const float r = static_cast<float>(k) * kLn2 + 2.0f * f * q + c;
  return y == 1.0f ? e : r;
}

// v > 20 ? v : log(1 + e^v), the specification's softplus.
SSU_HD float softplus20(float v) { return v > 20.0f ? v : log1p(exp(v)); }

// ---------------------------------------------------------------------------
// Philox-4x32 (Salmon et al., Random123), `rounds` rounds.
struct u32x4 {
  uint32_t v[4];
};

SSU_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// The 64-bit product of two 32-bit words as its low and high word: on the
// GPU one wide multiply, written as such. From the C++ product of a
// constant above 2^31, nvcc makes a wide multiply plus an add of a zero
// register to the high word, or a full 64-bit multiply where the operand
// came from a 64-bit value (about 40 % more instructions per Philox round).
SSU_HD void mul_wide_u32(uint32_t a, uint32_t b, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__)
  asm("{\n\t.reg .u64 t;\n\tmul.wide.u32 t, %2, %3;\n\tmov.b64 {%0, %1}, t;\n\t}"
      : "=r"(lo), "=r"(hi)
      : "r"(a), "r"(b));
#else
  const uint64_t p = static_cast<uint64_t>(a) * b;
  lo = static_cast<uint32_t>(p);
  hi = static_cast<uint32_t>(p >> 32);
#endif
}

// One round: two 32x32 -> 64-bit products, each giving a high and a low word.
SSU_HD void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0,
                         uint32_t k1) {
  uint32_t lo0, hi0, lo2, hi2;
  mul_wide_u32(c0, 0xD2511F53u, lo0, hi0);
  mul_wide_u32(c2, 0xCD9E8D57u, lo2, hi2);
  const uint32_t n0 = hi2 ^ c1 ^ k0;
  const uint32_t n2 = hi0 ^ c3 ^ k1;
  c1 = lo2;
  c3 = lo0;
  c0 = n0;
  c2 = n2;
}

SSU_HD u32x4 philox4x32(uint64_t seed, uint64_t counter, uint32_t rounds) {
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  for (uint32_t i = 0; i < rounds; ++i) {
    philox_round(c0, c1, c2, c3, k0, k1);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  u32x4 r;
  r.v[0] = c0;
  r.v[1] = c1;
  r.v[2] = c2;
  r.v[3] = c3;
  return r;
}

// The same with a compile-time round count, fully unrolled: the key
// schedule is then independent of the counter (hoisted out of loops that
// draw many words) and the zero initial c2, c3 fold away.
template <int ROUNDS>
SSU_HD u32x4 philox4x32_fixed(uint64_t seed, uint64_t counter) {
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
#if defined(__CUDA_ARCH__)
#  pragma unroll
#endif
  for (int i = 0; i < ROUNDS; ++i)
    philox_round(c0, c1, c2, c3, k0 + static_cast<uint32_t>(i) * 0x9E3779B9u,
                 k1 + static_cast<uint32_t>(i) * 0xBB67AE85u);
  u32x4 r;
  r.v[0] = c0;
  r.v[1] = c1;
  r.v[2] = c2;
  r.v[3] = c3;
  return r;
}

// The random word of the element at offset L (elements) of a state pool.
SSU_HD uint32_t sr_word(uint64_t seed, uint64_t L, uint32_t rounds) {
  const u32x4 r = philox4x32(seed, L & ~uint64_t{3}, rounds);
  return r.v[L & 3];
}

// ---------------------------------------------------------------------------
// Stochastic rounding: add random bits below the last kept bit of the
// magnitude, then truncate. Results are the raw 16-bit patterns.

// bf16: add the low 16 bits of `rnd`, keep the high 16 bits. Written
// without branches: the sum cannot carry into the sign (the magnitude is at
// most 0x7f7fffff + 0xffff for finite values), a finite value rounded past
// the largest one truncates to Inf (0x7f80), and Inf plus any bits stays
// Inf; NaN becomes the quiet NaN of its sign.
SSU_HD uint16_t f32_to_bf16_sr(float v, uint32_t rnd) {
  const uint32_t u = float_to_bits(v);
  const uint32_t mag = u & 0x7fffffffu;
  const uint32_t rounded = (u + (rnd & 0xffffu)) >> 16;
  const uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  return static_cast<uint16_t>(mag > 0x7f800000u ? nan : rounded);
}

// f16: add the low 13 bits of `rnd` to the fp32 magnitude, then truncate
// to f16: exponent rebias, magnitudes below 2^-14 flush to a signed zero,
// 2^16 and above become Inf; NaN becomes the quiet NaN of its sign. Written
// as selects over the rebiased truncation ((m >> 13) - (112 << 10) is the
// f16 exponent and mantissa for m in [2^-14, 2^16) as fp32 bits).
SSU_HD uint16_t f32_to_f16_sr(float v, uint32_t rnd) {
  const uint32_t u = float_to_bits(v);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t mag = u & 0x7fffffffu;
  const uint32_t m = mag + (rnd & 0x1fffu);
  uint32_t r = (m >> 13) - 0x1C000u;
  r = m < 0x38800000u ? 0u : r;        // below 2^-14: signed zero
  r = m >= 0x47800000u ? 0x7c00u : r;  // 2^16 and above, and Inf: Inf
  r = mag > 0x7f800000u ? 0x7e00u : r; // NaN
  return static_cast<uint16_t>(sign | r);
}

// ---------------------------------------------------------------------------
// int16 block-scaled rows. The encode factor of a row with largest
// magnitude amax; its decode scale is 1 / encode.
SSU_HD float int16_encode_factor(float amax) { return amax == 0.0f ? 1.0f : 32767.0f / amax; }

// One step of the row maximum of |v|; NaN wins, so a row holding NaN gets a
// NaN amax (and a row holding Inf an Inf amax) whatever the order.
SSU_HD float int16_amax_step(float amax, float v) {
  const float a = v < 0.0f ? -v : v;
  return (a > amax || a != a) ? a : amax;
}

// round_half_even(clamp(v * enc, -32767, 32767)); NaN gives 0. A row with
// NaN or Inf thus stores codes 0 and a NaN or Inf scale (amax NaN: enc NaN;
// amax Inf: enc 0, scale Inf) and loads back as all NaN.
SSU_HD int16_t int16_quantize(float v, float enc) {
  float s = v * enc;
  if (s != s) return 0;
  s = s < -32767.0f ? -32767.0f : s;
  s = s > 32767.0f ? 32767.0f : s;
#if defined(__CUDA_ARCH__)
  // Adding 1.5 * 2^23 rounds |s| < 2^22 to an integer, to nearest even, in
  // the low mantissa bits: the same result as a conversion instruction,
  // without the slow conversion pipe.
  return static_cast<int16_t>(__float_as_int(s + 12582912.0f) - 0x4B400000);
#else
  return static_cast<int16_t>(std::nearbyint(s));  // default rounding mode: half-even
#endif
}

}  // namespace ssu_math

#endif /* SSU_MATH_H_ */
