/*
 * The 8-bit block-scaled state formats (ssu.h: SSU_DTYPE_I8, SSU_DTYPE_F8E4M3)
 * as scalar fp32 functions: the row's encode factor, the element encoders
 * (round to nearest even; stochastic for E4M3) and the E4M3 decoder. Written
 * with integer operations and exact selects only, and plain C++ that nvcc
 * also accepts, so that a CUDA implementation can store the same bits as
 * the CPU backend (which is the only one using them so far).
 *
 * A row is stored as codes q[n] and one decode scale: value = decode(q) *
 * scale. The encode factor and the scale follow the int16 format's
 * operation order exactly (ssu_math.h: int16_encode_factor, 1 / enc), with
 * the format's largest code value in place of 32767.
 */
#ifndef SSU_STATE8_H_
#define SSU_STATE8_H_

#include <stdint.h>

#include "ssu_math.h"

namespace ssu_math {

constexpr float kI8Max = 127.0f;
constexpr float kE4m3Max = 448.0f;
constexpr uint8_t kE4m3Nan = 0x7f;

// enc = amax == 0 ? 1 : qmax / amax; the row maximum itself comes from
// int16_amax_step (NaN wins, so a NaN row gets a NaN factor and an Inf row
// the factor 0).
SSU_HD float state8_encode_factor(float amax, float qmax) {
  return amax == 0.0f ? 1.0f : qmax / amax;
}

// int8: round_half_even(clamp(v * enc, -127, 127)); NaN gives 0 (the int16
// rule: a NaN or Inf row stores codes 0 and its NaN / Inf scale). Adding
// 1.5 * 2^23 rounds |s| <= 127 to an integer, half to even, in the low
// mantissa bits, as the default rounding mode would.
SSU_HD int8_t int8_quantize(float v, float enc) {
  float s = v * enc;
  if (s != s) return 0;
  s = s < -kI8Max ? -kI8Max : s;
  s = s > kI8Max ? kI8Max : s;
  return static_cast<int8_t>(static_cast<int32_t>(float_to_bits(s + kExpShift)) - 0x4B400000);
}

// The clamped, scaled magnitude bits of an E4M3 element, or a NaN marker:
// a row holding NaN (enc NaN) or Inf (enc 0) cannot be represented and every
// code becomes 0x7F. A finite row whose factor overflowed to Inf (amax below
// 448 / FLT_MAX) gives 0 * Inf = NaN for its zeros: those store 0, like the
// int16 format's rule.
SSU_HD bool e4m3_row_unrepresentable(float enc) { return !(enc > 0.0f); }

SSU_HD float e4m3_scaled(float v, float enc) {
  float s = v * enc;
  if (s != s) return 0.0f;
  s = s < -kE4m3Max ? -kE4m3Max : s;
  return s > kE4m3Max ? kE4m3Max : s;
}

// The E4M3 code of the magnitude bits `mag` of a value on the E4M3 grid in
// [2^-6, 448]: fp32 exponent 121..135 maps to E4M3 exponent 1..15 and the
// top three mantissa bits carry over ((121 - 1) << 3 = 0x3C0).
SSU_HD uint32_t e4m3_normal_code(uint32_t mag) { return (mag >> 20) - 0x3C0u; }

// Round to nearest even of |s| <= 448 (s = e4m3_scaled(v, enc)).
//  - normal range (|s| >= 2^-6): round the fp32 pattern at bit 20, ties to
//    even (the bf16 trick at another position); a carry moves into the
//    exponent, and nothing at or below 448 rounds above it.
//  - subnormal range: k = round_half_even(|s| * 2^9) in 0..8 (the scaling
//    is exact); k = 8 is 2^-6, whose code 0x08 is the smallest normal.
SSU_HD uint8_t e4m3_encode_rn(float s) {
  const uint32_t u = float_to_bits(s);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t mag = u & 0x7fffffffu;
  uint32_t code;
  if (mag >= 0x3C800000u) {
    code = e4m3_normal_code(mag + 0x7FFFFu + ((mag >> 20) & 1u));
  } else {
    const float k = (bits_to_float(mag) * 512.0f + kExpShift) - kExpShift;
    code = static_cast<uint32_t>(k);
  }
  return static_cast<uint8_t>(sign | code);
}

// Stochastic rounding of |s| <= 448 with the element's random word `rnd`
// (ssu.h, ssu_update_args_t.rounding_seed): d random bits below the E4M3
// step of |s|, added and truncated.
//  - normal range: d = 20 on the fp32 pattern; the sum cannot pass 448's
//    pattern, whose low 20 bits are zero.
//  - subnormal range: with the 24-bit significand M and unbiased exponent e
//    (|s| = M * 2^(e-23); an fp32 subnormal has e = -126 and no implicit
//    bit) the step 2^-9 is 2^d units of M with d = 14 - e >= 21, so
//    k = (M + (rnd mod 2^d)) >> d is the subnormal multiple (0..8). This is
//    the pattern add of the normal range while d <= 23 and extends it below
//    2^-9, where the pattern add would leave the E4M3 grid. Past d = 32 the
//    word has too few bits: M is truncated to its top bits first.
SSU_HD uint8_t e4m3_encode_sr(float s, uint32_t rnd) {
  const uint32_t u = float_to_bits(s);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t mag = u & 0x7fffffffu;
  uint32_t code;
  if (mag >= 0x3C800000u) {
    code = e4m3_normal_code((mag + (rnd & 0xFFFFFu)) & ~0xFFFFFu);
  } else {
    const uint32_t biased = mag >> 23;
    const uint64_t M = biased ? ((mag & 0x7FFFFFu) | 0x800000u) : mag;
    const int32_t e = biased ? static_cast<int32_t>(biased) - 127 : -126;
    const int32_t d = 14 - e;
    uint64_t k;
    if (d <= 32) {
      const uint64_t mask = (uint64_t{1} << d) - 1u;
      k = (M + (rnd & mask)) >> d;
    } else {
      const uint64_t top = d - 32 >= 24 ? 0u : (M >> (d - 32));
      k = (top + rnd) >> 32;
    }
    code = static_cast<uint32_t>(k);
  }
  return static_cast<uint8_t>(sign | code);
}

// The fp32 value of an E4M3 code (exact): NaN for 0x7F / 0xFF, k * 2^-9 for
// exponent field 0, else (8 + m) * 2^(e - 10) built as an fp32 pattern.
SSU_HD float e4m3_decode(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t e = (code >> 3) & 0xFu, m = code & 7u;
  if (e == 15u && m == 7u) return bits_to_float(sign | 0x7FC00000u);
  if (e == 0u) {
    const float mag = static_cast<float>(m) * (1.0f / 512.0f);
    return sign ? -mag : mag;
  }
  return bits_to_float(sign | ((e + 120u) << 23) | (m << 20));
}

}  // namespace ssu_math

#endif /* SSU_STATE8_H_ */
