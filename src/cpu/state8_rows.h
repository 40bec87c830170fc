// The 8-bit block-scaled rows (SSU_DTYPE_I8, SSU_DTYPE_F8E4M3) of the CPU
// backend: a row's load (code * decode scale) and store (the row's encode
// factor, the codes, the decode scale) with the encoders of ssu_state8.h,
// which the CUDA kernels also run, so that both backends store the same
// bits. The plain update (kernel_impl.h) and the replay (replay.cpp) share
// them, so a flush stores the bits the plain update stores.
//
// Scalar: the formats' stores are checked bit for bit against the
// reference, so every ISA build runs the same plain loops (the compiler may
// still vectorize them). The row maximum is that of the int16 format (NaN
// wins). Internal linkage (an unnamed namespace): each ISA build of
// kernel_impl.h compiles its own copy, so that none runs another's
// instructions.
#ifndef SSU_CPU_STATE8_ROWS_H_
#define SSU_CPU_STATE8_ROWS_H_

#include <cstdint>

#include "cpu/convert.h"
#include "ssu_math.h"
#include "ssu_state8.h"

namespace ssu {
namespace cpu {
namespace {

inline float row_amax(const float* v, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = ssu_math::int16_amax_step(amax, v[i]);
  return amax;
}

inline void load_state_row(const int8_t* src, int64_t n, float* dst, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale;
}
inline void store_state_row(const float* v, int64_t n, int8_t* dst, float* scale,
                            const uint32_t*) {
  const float enc = ssu_math::state8_encode_factor(row_amax(v, n), ssu_math::kI8Max);
  for (int64_t i = 0; i < n; ++i) dst[i] = ssu_math::int8_quantize(v[i], enc);
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
    for (int64_t i = 0; i < n; ++i)
      dst[i].bits = ssu_math::e4m3_encode_rn(ssu_math::e4m3_scaled(v[i], enc));
  }
  *scale = 1.0f / enc;
}

}  // namespace
}  // namespace cpu
}  // namespace ssu

#endif  // SSU_CPU_STATE8_ROWS_H_
