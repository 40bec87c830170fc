// Small checks of caller tensor descriptors, shared by the validators. Each
// throws Error with a message naming the tensor, the axis and the values.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "ssu.h"

namespace ssu {
namespace checks {

inline bool present(const ssu_tensor_t& t) { return t.data != nullptr; }

inline bool is_float(ssu_dtype_t d) {
  return d == SSU_DTYPE_F32 || d == SSU_DTYPE_F16 || d == SSU_DTYPE_BF16;
}
// Block-scaled state formats: codes plus an f32 decode-scale pool.
inline bool is_scaled_state(ssu_dtype_t d) {
  return d == SSU_DTYPE_I16 || d == SSU_DTYPE_I8 || d == SSU_DTYPE_F8E4M3;
}
inline bool is_index(ssu_dtype_t d) { return d == SSU_DTYPE_I32 || d == SSU_DTYPE_I64; }

inline std::string shape_str(const ssu_tensor_t& t) {
  std::string s = "(";
  for (int i = 0; i < t.ndim && i < SSU_MAX_DIMS; ++i) {
    if (i) s += ", ";
    s += std::to_string(t.shape[i]);
  }
  return s + ")";
}

inline std::string strides_str(const ssu_tensor_t& t) {
  std::string s = "(";
  for (int i = 0; i < t.ndim && i < SSU_MAX_DIMS; ++i) {
    if (i) s += ", ";
    s += std::to_string(t.strides[i]);
  }
  return s + ")";
}

// A sane rank, non-negative sizes and strides. Returns the rank.
inline int check_basic(const ssu_tensor_t& t, const char* name) {
  if (t.ndim < 1 || t.ndim > SSU_MAX_DIMS)
    fail(SSU_ERROR_BAD_RANK, "%s.ndim=%d is outside [1, %d]", name, t.ndim, SSU_MAX_DIMS);
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0)
      fail(SSU_ERROR_BAD_SHAPE, "%s.shape[%d]=%" PRId64 " is negative", name, i, t.shape[i]);
    if (t.strides[i] < 0)
      fail(SSU_ERROR_BAD_STRIDE, "%s.strides[%d]=%" PRId64 " is negative (strides must be >= 0)",
           name, i, t.strides[i]);
  }
  return t.ndim;
}

inline void require(const ssu_tensor_t& t, const char* name) {
  if (!present(t)) fail(SSU_ERROR_NULL_POINTER, "%s.data is NULL but %s is required", name, name);
}

inline void check_rank(const ssu_tensor_t& t, const char* name, int want, const char* layout) {
  check_basic(t, name);
  if (t.ndim != want)
    fail(SSU_ERROR_BAD_RANK, "%s.ndim=%d but it must be %d: %s", name, t.ndim, want, layout);
}

inline void check_dim(const ssu_tensor_t& t, const char* name, int axis, int64_t want,
                      const char* what) {
  if (t.shape[axis] != want)
    fail(SSU_ERROR_BAD_SHAPE, "%s.shape[%d]=%" PRId64 " but %s is %" PRId64 " (%s.shape=%s)", name,
         axis, t.shape[axis], what, want, name, shape_str(t).c_str());
}

inline void check_float_dtype(const ssu_tensor_t& t, const char* name) {
  if (!is_float(t.dtype))
    fail(SSU_ERROR_BAD_DTYPE, "%s.dtype=%s but it must be f32, bf16 or f16", name,
         ssu_dtype_name(t.dtype));
}

inline void check_index_dtype(const ssu_tensor_t& t, const char* name) {
  if (!is_index(t.dtype))
    fail(SSU_ERROR_BAD_DTYPE, "%s.dtype=%s but it must be i32 or i64", name,
         ssu_dtype_name(t.dtype));
}

inline void check_same_dtype(const ssu_tensor_t& t, const char* name, ssu_dtype_t want,
                             const char* ref_name) {
  if (t.dtype != want)
    fail(SSU_ERROR_DTYPE_MISMATCH, "%s.dtype=%s but %s.dtype=%s; they must match", name,
         ssu_dtype_name(t.dtype), ref_name, ssu_dtype_name(want));
}

inline void check_unit_stride(const ssu_tensor_t& t, const char* name, int axis) {
  if (t.shape[axis] > 1 && t.strides[axis] != 1)
    fail(SSU_ERROR_BAD_STRIDE,
         "%s.strides[%d]=%" PRId64 " but its last axis must be dense (stride 1)", name, axis,
         t.strides[axis]);
}

}  // namespace checks
}  // namespace ssu
