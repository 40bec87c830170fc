// Scalar conversions between the storage dtypes and fp32, exact to the
// rounding rules of the specification (round to nearest even; NaN stays a
// quiet NaN; overflow to infinity).
#pragma once

#include <cstdint>
#include <cstring>

#include "ssu.h"

namespace ssu {
namespace cpu {

struct bf16_t {
  uint16_t bits;
};
using f16_t = _Float16;
// An OCP FP8 E4M3 code (ssu_state8.h).
struct e4m3_t {
  uint8_t bits;
};

// The block-scaled state formats: codes plus an f32 decode scale per row.
inline bool is_scaled_state(int32_t dtype) {
  return dtype == SSU_DTYPE_I16 || dtype == SSU_DTYPE_I8 || dtype == SSU_DTYPE_F8E4M3;
}

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float to_float(float v) { return v; }
inline float to_float(f16_t v) { return static_cast<float>(v); }
inline float to_float(bf16_t v) { return bits_to_float(static_cast<uint32_t>(v.bits) << 16); }

template <typename T>
inline T from_float(float v);
template <>
inline float from_float<float>(float v) { return v; }
template <>
inline f16_t from_float<f16_t>(float v) { return static_cast<f16_t>(v); }
template <>
inline bf16_t from_float<bf16_t>(float v) {
  uint32_t u = float_to_bits(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

// Loads element `off` of a float tensor whose dtype is known at run time.
inline float load_float(const void* base, int32_t dtype, int64_t off) {
  switch (dtype) {
    case SSU_DTYPE_F32: return static_cast<const float*>(base)[off];
    case SSU_DTYPE_F16: return to_float(static_cast<const f16_t*>(base)[off]);
    default: return to_float(static_cast<const bf16_t*>(base)[off]);
  }
}

// Stores v, rounded to nearest even, as element `off` of a float tensor.
inline void store_float(void* base, int32_t dtype, int64_t off, float v) {
  switch (dtype) {
    case SSU_DTYPE_F32: static_cast<float*>(base)[off] = v; break;
    case SSU_DTYPE_F16: static_cast<f16_t*>(base)[off] = from_float<f16_t>(v); break;
    default: static_cast<bf16_t*>(base)[off] = from_float<bf16_t>(v); break;
  }
}

// Converts n consecutive elements to fp32.
inline void load_row(const void* base, int32_t dtype, int64_t off, int64_t n, float* out) {
  switch (dtype) {
    case SSU_DTYPE_F32:
      std::memcpy(out, static_cast<const float*>(base) + off, static_cast<size_t>(n) * 4);
      break;
    case SSU_DTYPE_F16: {
      const f16_t* p = static_cast<const f16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) out[i] = to_float(p[i]);
      break;
    }
    default: {
      const uint16_t* p = static_cast<const uint16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) out[i] = bits_to_float(static_cast<uint32_t>(p[i]) << 16);
      break;
    }
  }
}

inline int64_t load_index(const void* base, int32_t dtype, int64_t off) {
  return dtype == SSU_DTYPE_I64 ? static_cast<const int64_t*>(base)[off]
                                : static_cast<int64_t>(static_cast<const int32_t*>(base)[off]);
}

}  // namespace cpu
}  // namespace ssu
