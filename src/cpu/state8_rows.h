// The 8-bit block-scaled rows (SSU_DTYPE_I8, SSU_DTYPE_F8E4M3) of the CPU
// backend: a row's load (code * decode scale) and store (the row's encode
// factor, the codes, the decode scale) with the encoders of ssu_state8.h,
// which the CUDA kernels also run, so that both backends store the same
// bits. The plain update (kernel_impl.h) and the replay (replay.cpp) share
// them, so a flush stores the bits the plain update stores.
//
// The row maximum and the round-to-nearest stores run eight lanes at a
// time in GCC vector types (each ISA build compiles them for its own
// instructions), lane for lane the scalar functions' operations: integer
// operations and exact selects, no contraction. The row maximum is an
// integer maximum of the magnitude bits (NaN wins). e4m3's stochastic store
// stays scalar. Internal linkage (an unnamed namespace): each ISA build of
// kernel_impl.h compiles its own copy, so that none runs another's
// instructions. (Scalar, the row maximum and the int8 store made an int8
// update 5x slower than a bf16 one on two Xeon cores.)
#ifndef SSU_CPU_STATE8_ROWS_H_
#define SSU_CPU_STATE8_ROWS_H_

#include <cstdint>
#include <cstring>

#if defined(__AVX2__)
#  include <immintrin.h>
#endif

#include "cpu/convert.h"
#include "ssu_math.h"
#include "ssu_state8.h"

namespace ssu {
namespace cpu {
namespace {

typedef float rowf8 __attribute__((vector_size(32)));
typedef int32_t rowi8 __attribute__((vector_size(32)));
typedef uint32_t rowu8 __attribute__((vector_size(32)));
typedef uint8_t rowb8 __attribute__((vector_size(8)));

// The low bytes of eight lanes holding -128..255 (an int8 code's value or
// an e4m3 code), stored to dst. (GCC's generic narrowing extracts lane by
// lane; AVX2 packs them.)
inline void row_store_bytes8(rowi8 q, void* dst) {
#if defined(__AVX2__)
  const __m256i v = (__m256i)q;
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i lo = _mm_and_si128(w, _mm_set1_epi16(0xff));  // the low byte of each
  _mm_storel_epi64(static_cast<__m128i*>(dst), _mm_packus_epi16(lo, lo));
#else
  const rowb8 b = __builtin_convertvector(q, rowb8);
  std::memcpy(dst, &b, sizeof b);
#endif
}

inline rowf8 row_load8(const float* p) {
  rowf8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// max |v[i]| as the integer maximum of the magnitude bits, which orders
// non-negative floats (zeros, subnormals, Inf) as their values and puts
// every NaN above Inf, so a row holding NaN gets a NaN (the CUDA kernels'
// rule; ssu_math::int16_amax_step's compare-and-select chain gives the same
// value except for which NaN, and was the loop's latency bound).
inline float row_amax(const float* v, int64_t n) {
  uint32_t m = 0;
  int64_t i = 0;
  if (n >= 8) {
    rowu8 mv{};
    for (; i + 8 <= n; i += 8) {
      const rowu8 b = (rowu8)row_load8(v + i) & 0x7fffffffu;
      mv = b > mv ? b : mv;
    }
    for (int l = 0; l < 8; ++l) m = mv[l] > m ? mv[l] : m;
  }
  for (; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, v + i, sizeof b);
    b &= 0x7fffffffu;
    m = b > m ? b : m;
  }
  return ssu_math::bits_to_float(m);
}

// ssu_math::int8_quantize on eight lanes (codes as int32 lanes).
inline rowi8 int8_quantize8(rowf8 v, float enc) {
  rowf8 s = v * enc;
  const rowi8 nan = s != s;
  s = s < -ssu_math::kI8Max ? rowf8{} - ssu_math::kI8Max : s;
  s = s > ssu_math::kI8Max ? rowf8{} + ssu_math::kI8Max : s;
  const rowi8 q = (rowi8)(s + ssu_math::kExpShift) - 0x4B400000;
  return nan ? rowi8{} : q;
}

// ssu_math::e4m3_encode_rn(ssu_math::e4m3_scaled(v, enc)) on eight lanes
// (a representable row: enc > 0; codes as int32 lanes).
inline rowi8 e4m3_rn8(rowf8 v, float enc) {
  rowf8 s = v * enc;
  s = s != s ? rowf8{} : s;
  s = s < -ssu_math::kE4m3Max ? rowf8{} - ssu_math::kE4m3Max : s;
  s = s > ssu_math::kE4m3Max ? rowf8{} + ssu_math::kE4m3Max : s;
  const rowu8 u = (rowu8)s;
  const rowu8 sign = (u >> 24) & 0x80u;
  const rowu8 mag = u & 0x7fffffffu;
  const rowu8 normal = ((mag + 0x7FFFFu + ((mag >> 20) & 1u)) >> 20) - 0x3C0u;
  const rowf8 k = ((rowf8)mag * 512.0f + ssu_math::kExpShift) - ssu_math::kExpShift;
  const rowu8 sub = (rowu8)__builtin_convertvector(k, rowi8);
  return (rowi8)(sign | (mag >= 0x3C800000u ? normal : sub));
}

inline void load_state_row(const int8_t* src, int64_t n, float* dst, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale;
}
inline void store_state_row(const float* v, int64_t n, int8_t* dst, float* scale,
                            const uint32_t*) {
  const float enc = ssu_math::state8_encode_factor(row_amax(v, n), ssu_math::kI8Max);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    row_store_bytes8(int8_quantize8(row_load8(v + i), enc), dst + i);
  }
  for (; i < n; ++i) dst[i] = ssu_math::int8_quantize(v[i], enc);
  *scale = 1.0f / enc;
}

// The value of every E4M3 code, decoded once (a load is then a lookup).
struct E4m3Table {
  float v[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) v[c] = ssu_math::e4m3_decode(static_cast<uint8_t>(c));
  }
};
inline const float* e4m3_values() {
  static const E4m3Table table;
  return table.v;
}

inline void load_state_row(const e4m3_t* src, int64_t n, float* dst, float scale) {
  // (A table lookup. Decoding eight codes at a time, their bits moved into
  // an fp32 exponent field and multiplied by 2^120, measured 15-25 % slower
  // on two Xeon cores; likely the subnormal products' microcode assists.)
  const float* values = e4m3_values();
  for (int64_t i = 0; i < n; ++i) dst[i] = values[src[i].bits] * scale;
}
// `words`: the elements' random words when the store rounds stochastically.
inline void store_state_row(const float* v, int64_t n, e4m3_t* dst, float* scale,
                            const uint32_t* words) {
  const float enc = ssu_math::state8_encode_factor(row_amax(v, n), ssu_math::kE4m3Max);
  if (ssu_math::e4m3_row_unrepresentable(enc)) {
    for (int64_t i = 0; i < n; ++i) dst[i].bits = ssu_math::kE4m3Nan;
  } else if (words) {
    for (int64_t i = 0; i < n; ++i)
      dst[i].bits = ssu_math::e4m3_encode_sr(ssu_math::e4m3_scaled(v[i], enc), words[i]);
  } else {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      row_store_bytes8(e4m3_rn8(row_load8(v + i), enc), dst + i);
    }
    for (; i < n; ++i) dst[i].bits = ssu_math::e4m3_encode_rn(ssu_math::e4m3_scaled(v[i], enc));
  }
  *scale = 1.0f / enc;
}

}  // namespace
}  // namespace cpu
}  // namespace ssu

#endif  // SSU_CPU_STATE8_ROWS_H_
