// Selective state update (Mamba-1 / Mamba-2), single- and multi-token, every
// write mode of SPEC.md sections 1 and 2, for f32, f16 and bf16 states and
// the block-scaled int16, int8 and fp8 e4m3 states (a decode scale per row,
// see StateFormat), and f32, f16 and bf16 inputs. One template; its
// instances are extern "C" entry points named
//   ssu_update_<state>_<input>_<variant>
// with variant vec1 / vec2 (16-byte state accesses, 1 or 2 chunks per lane)
// or gen (element accesses, any N <= 256 and any alignment). Everything that
// does not change the code path (sizes, strides, flags, the dtypes of dt, A,
// D, dt_bias and of the indices) is a run-time value.
//
// The kernel is memory bound: each state row is read once (16-byte loads
// where the plan allows), kept in fp32 registers across all tokens, and
// written once per required store. Small per-token operands (B, C, x, dt, z)
// come through the read-only cache; they are shared by every row of a block.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "ssu_cuda_launch.h"
#include "ssu_math.h"
#include "ssu_state8.h"

// Values of SSU_DTYPE_* and SSU_ERROR_BIT_* (ssu.h, which nvcc does not need).
#define SSU_DT_F32 1
#define SSU_DT_F16 2
#define SSU_DT_BF16 3
#define SSU_DT_I32 5
#define SSU_DT_I64 6
#define SSU_BIT_INDEX 0x1u
#define SSU_BIT_SEQLEN 0x2u

namespace {

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(f16 v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(bf16 v) { return __bfloat162float(v); }
// An OCP FP8 E4M3 code (ssu_state8.h) as a state element.
struct e4m3 {
  uint8_t bits;
};

// int16 and int8 codes: the row's decode scale is applied by the caller.
// Exact integer-to-float through the mantissa of 1.5 * 2^23 (two fast
// instructions instead of one on the slow conversion pipe).
__device__ __forceinline__ float to_f32(int16_t v) {
  return __int_as_float(0x4B400000 + static_cast<int>(v)) - 12582912.0f;
}
__device__ __forceinline__ float to_f32(int8_t v) {
  return __int_as_float(0x4B400000 + static_cast<int>(v)) - 12582912.0f;
}
// The E4M3 number of a code (exact, what ssu_math::e4m3_decode gives): the
// seven magnitude bits moved to the top of an fp32 exponent field read as
// 2^(e-127) (1 + m/8) (an fp32 subnormal m * 2^-129 for e = 0), times
// 2^120 for E4M3's bias of 7; codes 0x7F / 0xFF are NaN.
__device__ __forceinline__ float to_f32(e4m3 v) {
  const uint32_t mag = v.bits & 0x7fu;
  const float a = __uint_as_float(mag << 20) * 0x1p120f;
  const uint32_t u = mag == 0x7fu ? 0x7fc00000u : __float_as_uint(a);
  return __uint_as_float(u | (static_cast<uint32_t>(v.bits & 0x80u) << 24));
}

// How a state format is stored. The block-scaled ones (kScaled) hold codes
// and one fp32 decode scale per row: an element is to_f32(code) * scale; a
// row of fp32 values v is stored with the row's encode factor
// enc = encode_factor(max |v|) as codes encode(v[n], enc) and the scale
// 1 / enc (ssu.h, ssu_state_pool_t; ssu_math.h and ssu_state8.h, whose
// functions the CPU backend runs too). kSr: the format has a stochastic
// store (encode_sr with the element's Philox word).
template <typename ST>
struct StateFormat {  // f32, f16, bf16: no scale, rounded by from_f32
  static constexpr bool kScaled = false;
  static constexpr bool kSr = sizeof(ST) == 2;
};
template <>
struct StateFormat<int16_t> {
  static constexpr bool kScaled = true;
  static constexpr bool kSr = false;
  __device__ static __forceinline__ float encode_factor(float amax) {
    return ssu_math::int16_encode_factor(amax);
  }
  __device__ static __forceinline__ int16_t encode(float v, float enc) {
    return ssu_math::int16_quantize(v, enc);
  }
  // A row whose every v * enc is a number (no NaN, Inf or overflowed
  // factor): |v| <= amax and enc = fl(QMAX / amax) give |fl(v * enc)| <=
  // QMAX (1 + 2^-24)^2 < QMAX + 1/2, which rounds to at most QMAX in
  // magnitude, so the NaN test and the clamp never change a code.
  __device__ static __forceinline__ int16_t encode_finite(float v, float enc) {
    return static_cast<int16_t>(__float_as_int(v * enc + 12582912.0f) - 0x4B400000);
  }
};
template <>
struct StateFormat<int8_t> {
  static constexpr bool kScaled = true;
  static constexpr bool kSr = false;
  __device__ static __forceinline__ float encode_factor(float amax) {
    return ssu_math::state8_encode_factor(amax, ssu_math::kI8Max);
  }
  __device__ static __forceinline__ int8_t encode(float v, float enc) {
    return ssu_math::int8_quantize(v, enc);
  }
  __device__ static __forceinline__ int8_t encode_finite(float v, float enc) {  // as int16
    return static_cast<int8_t>(__float_as_int(v * enc + 12582912.0f) - 0x4B400000);
  }
};
// Round to nearest even of a finite s on the E4M3 grid by the hardware
// conversion (sm_89 and later): with satfinite a value beyond +-448
// saturates to +-448, as the clamp of ssu_math::e4m3_scaled does, and the
// rest rounds as ssu_math::e4m3_encode_rn (OCP E4M3, ties to even,
// subnormals), one instruction instead of about a dozen. The sign bit is
// OR-ed in so that an fp32 subnormal s, which the conversion may flush to
// +0, keeps it as the software encoder does (0x80 for a negative zero).
__device__ __forceinline__ uint8_t e4m3_rn_finite(float s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  unsigned short pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(s));
  return static_cast<uint8_t>((pair & 0xffu) | ((__float_as_uint(s) >> 24) & 0x80u));
#else
  return ssu_math::e4m3_encode_rn(ssu_math::e4m3_scaled(s, 1.0f));
#endif
}

template <>
struct StateFormat<e4m3> {
  static constexpr bool kScaled = true;
  static constexpr bool kSr = true;
  __device__ static __forceinline__ float encode_factor(float amax) {
    return ssu_math::state8_encode_factor(amax, ssu_math::kE4m3Max);
  }
  // A row holding NaN or Inf (enc NaN or 0) stores 0x7F everywhere.
  __device__ static __forceinline__ e4m3 encode(float v, float enc) {
    if (ssu_math::e4m3_row_unrepresentable(enc)) return e4m3{ssu_math::kE4m3Nan};
    return e4m3{ssu_math::e4m3_encode_rn(ssu_math::e4m3_scaled(v, enc))};
  }
  __device__ static __forceinline__ e4m3 encode_sr(float v, float enc, uint32_t word) {
    if (ssu_math::e4m3_row_unrepresentable(enc)) return e4m3{ssu_math::kE4m3Nan};
    return e4m3{ssu_math::e4m3_encode_sr(ssu_math::e4m3_scaled(v, enc), word)};
  }
  // A finite row with a finite factor (enc > 0 then): v * enc is a number;
  // its clamp to +-448 stays (a stochastic store of a value just above 448
  // could carry into the NaN code).
  __device__ static __forceinline__ e4m3 encode_finite(float v, float enc) {
    return e4m3{e4m3_rn_finite(v * enc)};
  }
  __device__ static __forceinline__ e4m3 encode_sr_finite(float v, float enc, uint32_t word) {
    return e4m3{ssu_math::e4m3_encode_sr(ssu_math::e4m3_scaled(v, enc), word)};
  }
};

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ f16 from_f32<f16>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) { return __float2bfloat16_rn(v); }

// A value of a tensor whose dtype is only known at run time (dt, A, D,
// dt_bias). The branch is uniform across the grid.
__device__ __forceinline__ float load_param(const void* p, int32_t dtype, int64_t i) {
  if (dtype == SSU_DT_F32) return __ldg(static_cast<const float*>(p) + i);
  const unsigned short u = __ldg(static_cast<const unsigned short*>(p) + i);
  return dtype == SSU_DT_BF16 ? __uint_as_float(static_cast<uint32_t>(u) << 16)
                              : __half2float(__ushort_as_half(u));
}

__device__ __forceinline__ int64_t load_index(const void* p, int32_t dtype, int64_t i) {
  if (dtype == SSU_DT_I64) return __ldg(static_cast<const long long*>(p) + i);
  return __ldg(static_cast<const int*>(p) + i);
}

// cu_seqlens[b + 1] - cu_seqlens[b] without overflow, as the CPU backend
// computes it: entries as far apart as INT64_MIN and INT64_MAX give a
// length beyond any T (or below zero).
__device__ __forceinline__ int64_t sequence_length(int64_t tok0, int64_t tok1) {
  const int64_t len =
      static_cast<int64_t>(static_cast<uint64_t>(tok1) - static_cast<uint64_t>(tok0));
  if (((tok1 ^ tok0) & (tok1 ^ len)) < 0) return tok1 > tok0 ? INT64_MAX : INT64_MIN;
  return len;
}

// The step size and decay use the library's own exp / log1p (ssu_math.h),
// exactly as the CPU backend does, so that both store the same state bits.
__device__ __forceinline__ float softplus20(float v) { return ssu_math::softplus20(v); }
// The gate feeds outputs only (never a stored state), so it is free to use
// the fast exp and division (a few ulp; an accurate expf and an IEEE
// division cost ~35 instructions and a branch per row).
__device__ __forceinline__ float silu(float v) { return __fdividef(v, 1.f + __expf(-v)); }

__device__ __forceinline__ void report(uint32_t* word, uint32_t bit) {
  if (word) atomicOr(word, bit);
}

// One chunk of VEC state elements: a 16-byte access when VEC*sizeof(T) is 16,
// element accesses otherwise. State traffic is streamed (evict-first): each
// byte is touched once per call.
template <typename T, int VEC>
__device__ __forceinline__ void load_chunk(const T* src, float* v) {
  if constexpr (VEC * sizeof(T) == 16) {
    union {
      uint4 u;
      T e[VEC];
    } c;
    c.u = __ldcs(reinterpret_cast<const uint4*>(src));
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = to_f32(c.e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = to_f32(src[i]);
  }
}

// How a row is stored: round to nearest (f32 / f16 / bf16), stochastically
// (f16 / bf16 / e4m3 with a seed: element n of the row draws the Philox word
// of pool offset L0 + n), or quantized (block-scaled formats) with the row's
// encode factor.
struct RowStore {
  uint64_t seed;
  uint64_t L0;  // pool offset of this lane chunk's first element
  float enc;    // block-scaled formats only
  uint32_t rounds;
};

template <typename T>
__device__ __forceinline__ uint16_t sr_bits(float v, uint32_t word);
template <>
__device__ __forceinline__ uint16_t sr_bits<f16>(float v, uint32_t word) {
  return ssu_math::f32_to_f16_sr(v, word);
}
template <>
__device__ __forceinline__ uint16_t sr_bits<bf16>(float v, uint32_t word) {
  return ssu_math::f32_to_bf16_sr(v, word);
}

__device__ __forceinline__ uint32_t pick(const ssu_math::u32x4& r, uint32_t j) {
  return j == 0 ? r.v[0] : j == 1 ? r.v[1] : j == 2 ? r.v[2] : r.v[3];
}

// Calls f(i, word) for each of the VEC elements of a chunk with the
// element's random word (element i has pool offset rs.L0 + i).
template <int VEC, typename F>
__device__ __forceinline__ void for_each_sr_word(const RowStore& rs, F f) {
  if ((rs.L0 & 3) == 0 && VEC % 4 == 0) {
    // Four elements per Philox call, the words in order.
#pragma unroll
    for (int q = 0; q < VEC; q += 4) {
      // The default round count gets the unrolled generator.
      const ssu_math::u32x4 r = rs.rounds == 10
                                    ? ssu_math::philox4x32_fixed<10>(rs.seed, rs.L0 + q)
                                    : ssu_math::philox4x32(rs.seed, rs.L0 + q, rs.rounds);
#pragma unroll
      for (int j = 0; j < 4; ++j) f(q + j, r.v[j]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const uint64_t L = rs.L0 + i;
      const ssu_math::u32x4 r = ssu_math::philox4x32(rs.seed, L & ~uint64_t{3}, rs.rounds);
      f(i, pick(r, static_cast<uint32_t>(L & 3)));
    }
  }
}

// One lane's chunk of a row, encoded once and stored to one or two places
// (a per-token store and an intermediate-buffer store share the bits).
template <typename T, int VEC>
union Chunk {
  uint4 u;
  T e[VEC];
};

// Whether every v * enc of a block-scaled row with encode factor enc
// (StateFormat::encode_factor) is a number: the row holds no NaN or Inf
// (whose factors are NaN and 0) and the factor of a tiny maximum did not
// overflow (0 * Inf is NaN). Such a row may take the encoders' finite paths.
__device__ __forceinline__ bool scaled_row_finite(float enc) {
  return enc > 0.f && enc < 3.0e38f;
}

// A finite e4m3 row's chunk of 16 values times enc as codes rounded to
// nearest: StateFormat<e4m3>::encode_finite's codes, two per hardware
// conversion where there is one (encode_finite converts one beside a zero),
// with each value's sign put back as it does (a flushed fp32 subnormal
// keeps it): about 2 instructions per element fewer.
__device__ __forceinline__ uint4 e4m3_chunk_rn_finite(const float* h, float enc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t wd[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    uint32_t pr[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float lo = h[4 * k + 2 * j] * enc, hi = h[4 * k + 2 * j + 1] * enc;
      unsigned short pair;
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
      // lo's top byte to byte 0, hi's to byte 1: their sign bits at 7 and 15.
      const uint32_t signs = __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x73u);
      pr[j] = static_cast<uint32_t>(pair) | (signs & 0x8080u);
    }
    wd[k] = __byte_perm(pr[0], pr[1], 0x5410u);
  }
  return make_uint4(wd[0], wd[1], wd[2], wd[3]);
#else
  uint32_t wd[4] = {0, 0, 0, 0};
#pragma unroll
  for (int e = 0; e < 16; ++e)
    wd[e / 4] |= static_cast<uint32_t>(StateFormat<e4m3>::encode_finite(h[e], enc).bits) << (8 * (e % 4));
  return make_uint4(wd[0], wd[1], wd[2], wd[3]);
#endif
}

// A finite e4m3 row's chunk of 16 values times enc rounded stochastically
// with the elements' Philox words w: StateFormat<e4m3>::encode_sr_finite's
// codes. Where every |v * enc| of the chunk is in the normal range (>= 2^-6;
// nearly always, since the row's largest magnitude maps to 448) a code is
// e4m3_encode_sr's pattern add alone, computed without a branch per element
// (the subtraction of the exponent offset folded into the add, the signs put
// on four codes at once); a chunk holding a smaller magnitude, zeros
// included, takes the per-element encoder.
__device__ __forceinline__ uint4 e4m3_chunk_sr_finite(const float* h, float enc,
                                                      const uint32_t* w) {
  // The chunk's smallest |v| * enc (rounding is monotonic, so it is the
  // smallest of the products) decides the path.
  float amin = fabsf(h[0]);
#pragma unroll
  for (int e = 1; e < 16; ++e) amin = fminf(amin, fabsf(h[e]));
  uint32_t wd[4] = {0, 0, 0, 0};
  if (amin * enc >= 0x1p-6f) {
    // (mag + rnd - (120 << 23)) >> 20 is e4m3_normal_code of the sum: at
    // most 0x7E, so each code is the low byte of its word.
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint32_t c[4], u[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        u[j] = __float_as_uint(h[4 * k + j] * enc);
        const uint32_t mag = min(u[j] & 0x7fffffffu, 0x43E00000u);  // clamped to 448
        c[j] = (mag + (w[4 * k + j] & 0xFFFFFu) - 0x3C000000u) >> 20;
      }
      const uint32_t codes =
          __byte_perm(__byte_perm(c[0], c[1], 0x40u), __byte_perm(c[2], c[3], 0x40u), 0x5410u);
      const uint32_t signs = __byte_perm(__byte_perm(u[0], u[1], 0x73u),
                                         __byte_perm(u[2], u[3], 0x73u), 0x5410u);
      wd[k] = codes | (signs & 0x80808080u);
    }
  } else {
#pragma unroll
    for (int e = 0; e < 16; ++e)
      wd[e / 4] |= static_cast<uint32_t>(StateFormat<e4m3>::encode_sr_finite(h[e], enc, w[e]).bits)
                   << (8 * (e % 4));
  }
  return make_uint4(wd[0], wd[1], wd[2], wd[3]);
}

// The VEC stored values of one chunk as raw element bits, in the chunk's
// element order. Elements past `left` are never stored (their bits are
// computed from the padding zeros and dropped).
template <typename T, int VEC, bool SR>
__device__ __forceinline__ void encode_chunk(Chunk<T, VEC>& c, const float* v,
                                             const RowStore& rs) {
  using F = StateFormat<T>;
  T* const e = c.e;
  if constexpr (F::kSr && SR && !F::kScaled) {  // f16, bf16
    uint16_t bits[VEC];
    for_each_sr_word<VEC>(rs, [&](int i, uint32_t w) { bits[i] = sr_bits<T>(v[i], w); });
#pragma unroll
    for (int i = 0; i < VEC; ++i) e[i] = *reinterpret_cast<const T*>(&bits[i]);
  } else if constexpr (F::kSr && SR) {  // e4m3, with the row's encode factor
    for_each_sr_word<VEC>(rs, [&](int i, uint32_t w) { e[i] = F::encode_sr(v[i], rs.enc, w); });
  } else if constexpr (std::is_same<T, e4m3>::value && VEC == 16) {
    // A finite row (scaled_row_finite) takes the hardware pairs
    // (e4m3_chunk_rn_finite): the same codes as F::encode.
    if (scaled_row_finite(rs.enc)) {
      c.u = e4m3_chunk_rn_finite(v, rs.enc);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) e[i] = F::encode(v[i], rs.enc);
    }
  } else if constexpr (F::kScaled) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) e[i] = F::encode(v[i], rs.enc);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) e[i] = from_f32<T>(v[i]);
  }
}

// Stores an encoded chunk: one 16-byte streaming store in the vectorized
// kernels; element stores (at most `left`) in the general ones.
template <typename T, int VEC>
__device__ __forceinline__ void store_encoded(T* dst, const Chunk<T, VEC>& c, int left) {
  if constexpr (VEC * sizeof(T) == 16) {
    __stcs(reinterpret_cast<uint4*>(dst), c.u);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      if (i < left) dst[i] = c.e[i];
  }
}

// The encode factor of a block-scaled row (int16 unless ST says otherwise)
// spread over `lpr` lanes (E values per lane; values past N are zeros, which
// do not change the maximum). Every lane of the row group must call it.
template <int E, typename ST = int16_t>
__device__ __forceinline__ float row_encode_factor(const float* hs, int lpr) {
  float amax = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) amax = ssu_math::int16_amax_step(amax, hs[e]);
  for (int off = lpr >> 1; off > 0; off >>= 1)
    amax = ssu_math::int16_amax_step(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  return StateFormat<ST>::encode_factor(amax);
}

// Programmatic dependent launch (a plan's SSU_PLAN_PDL): such a launch may
// start while the stream's previous kernel finishes, so the update and
// replay kernels wait for that kernel's completion and memory before
// touching any tensor. Without it (or with no previous kernel) the wait
// returns at once.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// A slot value is padding when negative or equal to the call's pad id.
__device__ __forceinline__ bool is_pad(int64_t slot, int64_t pad_id) {
  return slot < 0 || slot == pad_id;
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

// Asks L2 for `bytes` (a multiple of 16) from p (16-byte aligned): one
// bulk request on sm_90 and later, a line at a time by this thread before.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#else
  for (uint32_t o = 0; o < bytes; o += 128)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(static_cast<const char*>(p) + o));
#endif
}

// One block: one (sequence, head) pair and a tile of consecutive rows.
//  1. slot lookup (padding: zero outputs, return);
//  2. the tile's state rows, one contiguous run of memory, are copied to
//     shared memory with 16-byte cp.async (vectorized kernels): many bytes in
//     flight per SM for few registers;
//  3. B and C of every token (fp32), the per-head step size of every token
//     and the per-token store slots are staged in shared memory;
//  4. rows are processed one per lane group, row-outer and token-inner: a
//     row's state stays in fp32 registers across all tokens, and every store
//     is a 16-byte store straight from registers.
// ST int16_t, int8_t, e4m3: block-scaled rows (decode scale per row). SR:
// stochastic rounding of f16 / bf16 / e4m3 stores.
template <typename ST, typename IT, int VEC, int KC, bool ASYNC, bool SR>
__device__ __forceinline__ void update_body(const ssu_cuda_update_launch& L) {
  constexpr bool QUANT = StateFormat<ST>::kScaled;
  constexpr int E = VEC * KC;  // state elements per lane per row
  // A token's B, C (and per-channel A) columns are read and used W at a
  // time: an 8-bit chunk's 16 of each, all at once, made the kernels spill.
  constexpr int W = VEC > 8 ? 4 : VEC;
  extern __shared__ __align__(16) unsigned char smem[];
  const ssu_update_params& p = L.p;
  const uint32_t f = p.features;

  const int tiles = L.tiles_per_head;
  const int64_t blk = blockIdx.x;
  const int64_t bh = blk / tiles;
  const int tile = static_cast<int>(blk - bh * tiles);
  const int64_t b = bh / p.nheads;
  const int64_t h = bh - b * p.nheads;
  const int64_t g = h / p.heads_per_group;
  const int tid = threadIdx.x;
  const int lpr = L.lanes_per_row;
  const int lane_r = tid & (lpr - 1);
  const int ngrp = SSU_CUDA_THREADS / lpr;
  const int P = static_cast<int>(p.dim), N = static_cast<int>(p.dstate);
  const int r0 = tile * L.rows_per_block;
  const int r1 = min(P, r0 + L.rows_per_block);
  // Only one block per sequence reports, so a bad index costs one atomic.
  const bool reporter = tid == 0 && h == 0 && tile == 0;

  // Tokens of this sequence: [tok0, tok0 + ntok).
  int64_t tok0 = 0, ntok64 = p.ntokens;
  if (f & SSU_F_VARLEN) {
    tok0 = load_index(p.cu_seqlens, p.seqlen_dtype, b * p.cu_seqlens_stride);
    ntok64 = sequence_length(tok0,
                             load_index(p.cu_seqlens, p.seqlen_dtype, (b + 1) * p.cu_seqlens_stride));
    if (ntok64 <= 0) return;
    if (ntok64 > p.ntokens) {
      if (reporter) report(p.error_word, SSU_BIT_SEQLEN);
      ntok64 = p.ntokens;
    }
  }
  const int ntok = static_cast<int>(ntok64);

  // Initial slot.
  int64_t s0 = b;
  if (f & SSU_F_HAS_SRC) {
    int64_t col = 0;
    if (f & SSU_F_HAS_ACCEPTED) {
      col = load_index(p.num_accepted, p.accepted_dtype, b * p.num_accepted_stride) - 1;
      col = col < 0 ? 0 : (col >= p.ntokens ? p.ntokens - 1 : col);
    }
    s0 = load_index(p.src_index, p.index_dtype, b * p.src_stride_b + col * p.src_stride_t);
  }
  bool pad = is_pad(s0, p.pad_slot_id);
  if (!pad && s0 >= p.nslots) {
    if (reporter) report(p.error_word, SSU_BIT_INDEX);
    pad = true;
  }

  IT* const out_bh = static_cast<IT*>(p.out) + b * p.out_stride_b + h * p.out_stride_h;
  if (pad) {  // block-uniform: outputs are exactly zero, no pool is touched
    const int rows = r1 - r0;
    for (int i = tid; i < ntok * rows; i += SSU_CUDA_THREADS) {
      const int t = i / rows;
      out_bh[(tok0 + t) * p.out_stride_t + r0 + (i - t * rows)] = from_f32<IT>(0.f);
    }
    return;
  }

  const int64_t head_off = h * P * N;
  ST* const state = static_cast<ST*>(p.state);
  const ST* const src_tile = state + s0 * p.state_stride_slot + head_off + (int64_t)r0 * N;

  // Shared memory (byte offsets from the launch block, see ssu_cuda_launch.h).
  const int rows = r1 - r0;
  ST* const s_state = reinterpret_cast<ST*>(smem);
  float* const s_B = reinterpret_cast<float*>(smem + L.off_B);
  float* const s_C = reinterpret_cast<float*>(smem + L.off_C);
  float* const s_dt = reinterpret_cast<float*>(smem + L.off_dt);
  float* const s_x = reinterpret_cast<float*>(smem + L.off_x);
  float* const s_z = reinterpret_cast<float*>(smem + L.off_z);
  float* const s_D = reinterpret_cast<float*>(smem + L.off_D);
  float* const s_A = reinterpret_cast<float*>(smem + L.off_A);
  long long* const s_dst = reinterpret_cast<long long*>(smem + L.off_dst);
  float* const s_scale = reinterpret_cast<float*>(smem + L.off_scale);

  // Everything the rows need is requested at once (state through cp.async,
  // the rest through plain loads), so one round trip covers them all.
  // A dense per-channel A tile (f32 rows, the usual Mamba-1 layout) is one
  // more contiguous run, committed before the state so that waiting for the
  // first state half also covers it.
  const int64_t a_base = h * p.A_stride_h + r0 * p.A_stride_p;
  const float* const a_f32 = static_cast<const float*>(p.A) + a_base;
  const bool a_async = ASYNC && (f & SSU_F_A_PER_CHANNEL) && p.A_dtype == SSU_DT_F32 &&
                       p.A_stride_n == 1 && p.A_stride_p == N && (N & 3) == 0 &&
                       (reinterpret_cast<uintptr_t>(a_f32) & 15) == 0;
  if (a_async) {
    for (int c = tid; c < rows * N / 4; c += SSU_CUDA_THREADS) cp_async_16(s_A + 4 * c, a_f32 + 4 * c);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  if (ASYNC) {
    const int split = min(rows, ((rows + ngrp - 1) / ngrp + 1) / 2 * ngrp) * N / VEC;
    const int chunks = rows * N / VEC;
    for (int c = tid; c < split; c += SSU_CUDA_THREADS)
      cp_async_16(s_state + c * VEC, src_tile + c * VEC);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    for (int c = split + tid; c < chunks; c += SSU_CUDA_THREADS)
      cp_async_16(s_state + c * VEC, src_tile + c * VEC);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  {
    const IT* Bb = static_cast<const IT*>(p.B) + b * p.B_stride_b + g * p.B_stride_g;
    const IT* Cb = static_cast<const IT*>(p.C) + b * p.C_stride_b + g * p.C_stride_g;
    // Four elements per thread per pass, all loads issued before any use:
    // several tokens cost one round trip, not one per token.
    constexpr int U = 4;
    for (int i0 = tid; i0 < ntok * N; i0 += U * SSU_CUDA_THREADS) {
      IT bv[U], cv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = i0 + u * SSU_CUDA_THREADS;
        if (i < ntok * N) {
          const int t = i / N, n = i - t * N;
          bv[u] = __ldg(Bb + (tok0 + t) * p.B_stride_t + n);
          cv[u] = __ldg(Cb + (tok0 + t) * p.C_stride_t + n);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = i0 + u * SSU_CUDA_THREADS;
        if (i < ntok * N) {
          s_B[i] = to_f32(bv[u]);
          s_C[i] = to_f32(cv[u]);
        }
      }
    }
  }
  const bool dt_per_head =
      p.dt_stride_p == 0 && (!(f & SSU_F_HAS_DT_BIAS) || p.dt_bias_stride_p == 0);
  {
    const IT* xb = static_cast<const IT*>(p.x) + b * p.x_stride_b + h * p.x_stride_h + r0;
    const IT* zb = static_cast<const IT*>(p.z) + b * p.z_stride_b + h * p.z_stride_h + r0;
    const int64_t dtb = b * p.dt_stride_b + h * p.dt_stride_h + r0 * p.dt_stride_p;
    for (int i = tid; i < ntok * rows; i += SSU_CUDA_THREADS) {
      const int t = i / rows, r = i - t * rows;
      const int64_t tok = tok0 + t;
      s_x[i] = to_f32(__ldg(xb + tok * p.x_stride_t + r));
      if (f & SSU_F_HAS_Z) s_z[i] = silu(to_f32(__ldg(zb + tok * p.z_stride_t + r)));
      if (!dt_per_head) {
        float dt = load_param(p.dt, p.dt_dtype, dtb + tok * p.dt_stride_t + r * p.dt_stride_p);
        if (f & SSU_F_HAS_DT_BIAS)
          dt += load_param(p.dt_bias, p.dt_bias_dtype,
                           h * p.dt_bias_stride_h + (r0 + r) * p.dt_bias_stride_p);
        if (f & SSU_F_DT_SOFTPLUS) dt = softplus20(dt);
        s_dt[i] = dt;
      }
    }
    if (QUANT) {
      const float* sc = p.state_scale + s0 * p.state_scale_stride_slot + h * P + r0;
      for (int r = tid; r < rows; r += SSU_CUDA_THREADS) s_scale[r] = __ldg(sc + r);
    }
    for (int r = tid; r < rows; r += SSU_CUDA_THREADS)
      s_D[r] = (f & SSU_F_HAS_D)
                   ? load_param(p.D, p.D_dtype, h * p.D_stride_h + (r0 + r) * p.D_stride_p)
                   : 0.f;
    if ((f & SSU_F_A_PER_CHANNEL) && !a_async) {
      for (int i = tid; i < rows * N; i += SSU_CUDA_THREADS) {
        const int r = i / N, n = i - r * N;
        s_A[i] = load_param(p.A, p.A_dtype, a_base + r * p.A_stride_p + n * p.A_stride_n);
      }
    }
  }
  if (tid < ntok) {
    const int t = tid;
    if (dt_per_head) {
      float dt = load_param(p.dt, p.dt_dtype,
                            b * p.dt_stride_b + (tok0 + t) * p.dt_stride_t + h * p.dt_stride_h);
      if (f & SSU_F_HAS_DT_BIAS)
        dt += load_param(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride_h);
      if (f & SSU_F_DT_SOFTPLUS) dt = softplus20(dt);
      s_dt[t] = dt;
      if (!(f & SSU_F_A_PER_CHANNEL))
        s_dt[p.ntokens + t] =
            ssu_math::exp(load_param(p.A, p.A_dtype, h * p.A_stride_h) * dt);
    }
    long long d = -1;
    if ((f & SSU_F_DST_PER_TOKEN) && !(f & SSU_F_DISABLE_UPDATE)) {
      d = load_index(p.dst_index, p.index_dtype, b * p.dst_stride_b + t * p.dst_stride_t);
      if (is_pad(d, p.pad_slot_id)) {
        d = -1;
      } else if (d >= p.nslots) {
        if (tile == 0 && h == 0) report(p.error_word, SSU_BIT_INDEX);
        d = -1;
      }
    }
    s_dst[t] = d;
  }

  int64_t inter_slot = -1;
  if (f & SSU_F_HAS_INTER) {
    inter_slot = (f & SSU_F_HAS_INTER_INDEX)
                     ? load_index(p.inter_index, p.inter_index_dtype, b * p.inter_index_stride)
                     : s0;
    if (is_pad(inter_slot, p.pad_slot_id)) {
      inter_slot = -1;
    } else if (inter_slot >= p.n_intermediate) {
      if (reporter) report(p.error_word, SSU_BIT_INDEX);
      inter_slot = -1;
    }
  }
  ST* const inter_base = inter_slot >= 0 ? static_cast<ST*>(p.inter_states) +
                                               inter_slot * p.inter_stride_i + head_off
                                         : nullptr;
  const bool final_store = (f & (SSU_F_DISABLE_UPDATE | SSU_F_DST_PER_TOKEN)) == 0;
  ST* final_base = nullptr;
  int64_t final_slot = -1;
  if (final_store) {
    int64_t d = s0;
    if (f & SSU_F_HAS_DST) {
      d = load_index(p.dst_index, p.index_dtype, b * p.dst_stride_b);
      if (is_pad(d, p.pad_slot_id)) {
        d = -1;
      } else if (d >= p.nslots) {
        if (reporter) report(p.error_word, SSU_BIT_INDEX);
        d = -1;
      }
    }
    if (d >= 0) final_base = state + d * p.state_stride_slot + head_off;
    final_slot = d;
  }
  RowStore rs;
  rs.seed = SR ? *p.sr_seed : 0;
  rs.rounds = p.sr_rounds;
  rs.enc = 1.f;
  rs.L0 = 0;
  const int64_t scale_head = h * P;
  const bool a_per_head = !(f & SSU_F_A_PER_CHANNEL);
  // Per-head A with a per-channel step size: exp(A*dt) per row and token.
  const float a_head =
      a_per_head && !dt_per_head ? load_param(p.A, p.A_dtype, h * p.A_stride_h) : 0.f;

  // The tile arrives in two halves (two cp.async groups); the rows of the
  // first half are processed while the second is still in flight.
  const int row_iters = (rows + ngrp - 1) / ngrp;
  const int first_iters = (row_iters + 1) / 2;
  // The A group (if any) was committed first: the first half covers it.
  if (ASYNC) asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  __syncthreads();

  // Rows: one per lane group at a time. All lanes of a group take the same
  // rows, so the shuffles of a group always have all their lanes.
#pragma unroll 1
  for (int it = 0; it < row_iters; ++it) {
    if (ASYNC && it == first_iters) {
      asm volatile("cp.async.wait_all;\n" ::: "memory");
      __syncthreads();
    }
    const int lr_raw = it * ngrp + tid / lpr;  // row within the tile
    const bool rv = lr_raw < rows;
    const int lr = rv ? lr_raw : 0;
    const int row = r0 + lr;
    float hs[E];
    const float row_scale = QUANT ? s_scale[lr] : 1.f;
#pragma unroll
    for (int k = 0; k < KC; ++k) {
      const int n0 = (lane_r + k * lpr) * VEC;
      if (n0 < N) {
        if (ASYNC) {
          const ST* sp = s_state + lr * N + n0;
          if constexpr (VEC * sizeof(ST) == 16) {
            union {
              uint4 u;
              ST e[VEC];
            } c;
            c.u = *reinterpret_cast<const uint4*>(sp);
#pragma unroll
            for (int v = 0; v < VEC; ++v) hs[k * VEC + v] = to_f32(c.e[v]);
          } else {
#pragma unroll
            for (int v = 0; v < VEC; ++v) hs[k * VEC + v] = to_f32(sp[v]);
          }
          if (QUANT) {
#pragma unroll
            for (int v = 0; v < VEC; ++v) hs[k * VEC + v] = hs[k * VEC + v] * row_scale;
          }
        } else {
#pragma unroll
          for (int v = 0; v < VEC; ++v)
            hs[k * VEC + v] =
                n0 + v < N ? (QUANT ? to_f32(src_tile[lr * N + n0 + v]) * row_scale
                                    : to_f32(src_tile[lr * N + n0 + v]))
                           : 0.f;
        }
      } else {
#pragma unroll
        for (int v = 0; v < VEC; ++v) hs[k * VEC + v] = 0.f;
      }
    }
    const float d_row = s_D[lr];

#pragma unroll 1
    for (int t = 0; t < ntok; ++t) {
      const int64_t tok = tok0 + t;
      const float xv = s_x[t * rows + lr];
      const float dt = dt_per_head ? s_dt[t] : s_dt[t * rows + lr];
      const float dtx = dt * xv;
      const float dA_head =
          !a_per_head ? 0.f : dt_per_head ? s_dt[p.ntokens + t] : ssu_math::exp(a_head * dt);
      const float* Bt = s_B + t * N;
      const float* Ct = s_C + t * N;
      const float* Ar = s_A + lr * N;
      float acc = 0.f;
#pragma unroll
      for (int k = 0; k < KC; ++k) {
        const int n0 = (lane_r + k * lpr) * VEC;
#pragma unroll
        for (int w0 = 0; w0 < VEC; w0 += W) {
          float Bv[W], Cv[W], Av[W];
          if (n0 < N) {
            if constexpr (W % 4 == 0) {
#pragma unroll
              for (int v = 0; v < W; v += 4) {
                const int n = n0 + w0 + v;
                const float4 b4 = *reinterpret_cast<const float4*>(Bt + n);
                const float4 c4 = *reinterpret_cast<const float4*>(Ct + n);
                Bv[v] = b4.x; Bv[v + 1] = b4.y; Bv[v + 2] = b4.z; Bv[v + 3] = b4.w;
                Cv[v] = c4.x; Cv[v + 1] = c4.y; Cv[v + 2] = c4.z; Cv[v + 3] = c4.w;
                if (!a_per_head) {
                  const float4 a4 = *reinterpret_cast<const float4*>(Ar + n);
                  Av[v] = a4.x; Av[v + 1] = a4.y; Av[v + 2] = a4.z; Av[v + 3] = a4.w;
                }
              }
            } else {
#pragma unroll
              for (int v = 0; v < W; ++v) {
                const int n = n0 + w0 + v;
                Bv[v] = n < N ? Bt[n] : 0.f;
                Cv[v] = n < N ? Ct[n] : 0.f;
                if (!a_per_head) Av[v] = n < N ? Ar[n] : 0.f;
              }
            }
          } else {
#pragma unroll
            for (int v = 0; v < W; ++v) Bv[v] = Cv[v] = Av[v] = 0.f;
          }
#pragma unroll
          for (int v = 0; v < W; ++v) {
            const int e = k * VEC + w0 + v;
            float dA = dA_head;
            if (!a_per_head) dA = ssu_math::exp(Av[v] * dt);
            // Two roundings, as on the CPU (compiled with -fmad=false).
            hs[e] = hs[e] * dA + Bv[v] * dtx;
            acc = fmaf(hs[e], Cv[v], acc);
          }
        }
      }
      for (int off = lpr >> 1; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);

      if (rv && lane_r == 0) {
        float y = acc + d_row * xv;
        if (f & SSU_F_HAS_Z) y *= s_z[t * rows + lr];
        out_bh[tok * p.out_stride_t + row] = from_f32<IT>(y);
      }

      const long long d = s_dst[t];
      if (d >= 0 || inter_base) {  // block-uniform
        if constexpr (QUANT) rs.enc = row_encode_factor<E, ST>(hs, lpr);
        if (rv) {
          ST* dstp =
              d >= 0 ? state + d * p.state_stride_slot + head_off + (int64_t)row * N : nullptr;
          ST* intp = inter_base ? inter_base + t * p.inter_stride_t + (int64_t)row * N : nullptr;
#pragma unroll
          for (int k = 0; k < KC; ++k) {
            const int n0 = (lane_r + k * lpr) * VEC;
            if (n0 >= N) continue;
            if (SR) rs.L0 = s0 * p.state_stride_slot + head_off + (int64_t)row * N + n0;
            Chunk<ST, VEC> c;
            encode_chunk<ST, VEC, SR>(c, &hs[k * VEC], rs);
            if (dstp) store_encoded<ST, VEC>(dstp + n0, c, N - n0);
            if (intp) store_encoded<ST, VEC>(intp + n0, c, N - n0);
          }
          if (QUANT && lane_r == 0) {
            const float dec = 1.0f / rs.enc;
            if (d >= 0) p.state_scale[d * p.state_scale_stride_slot + scale_head + row] = dec;
            if (inter_base)
              p.inter_scale[inter_slot * p.inter_scale_stride_i + t * p.inter_scale_stride_t +
                            scale_head + row] = dec;
          }
        }
      }
    }

    if (final_base) {  // block-uniform
      if constexpr (QUANT) rs.enc = row_encode_factor<E, ST>(hs, lpr);
      if (rv) {
#pragma unroll
        for (int k = 0; k < KC; ++k) {
          const int n0 = (lane_r + k * lpr) * VEC;
          if (n0 >= N) continue;
          if (SR) rs.L0 = s0 * p.state_stride_slot + head_off + (int64_t)row * N + n0;
          Chunk<ST, VEC> c;
          encode_chunk<ST, VEC, SR>(c, &hs[k * VEC], rs);
          store_encoded<ST, VEC>(final_base + (int64_t)row * N + n0, c, N - n0);
        }
        if (QUANT && lane_r == 0)
          p.state_scale[final_slot * p.state_scale_stride_slot + scale_head + row] = 1.0f / rs.enc;
      }
    }
  }
}

}  // namespace

// MINB: resident blocks per SM the register allocation must allow (ptxas,
// sm_90a: the vectorized kernels fit 8 without spilling, the general ones 6).
#define SSU_KERNEL(name, ST, IT, VEC, KC, ASYNC, SR, MINB)                   \
  extern "C" __global__ void __launch_bounds__(SSU_CUDA_THREADS, MINB)        \
      name(const __grid_constant__ ssu_cuda_update_launch launch) {          \
    pdl_wait();                                                              \
    update_body<ST, IT, VEC, KC, ASYNC, SR>(launch);                         \
  }

// Per state dtype and rounding: one 16-byte chunk of the row per lane
// (vec1), or element accesses (gen) for any N and alignment. The
// block-scaled and stochastic kernels carry more live values (row maximum,
// Philox state): they are allowed more registers (fewer resident blocks)
// instead of spilling (ptxas, sm_90a: the e4m3 vec1 kernels, whose encoder
// has two paths per element for 16 elements a lane, spilled at 96).
#define SSU_KERNELS_FOR(sname, ST, SR, suffix, MINB_VEC, MINB_GEN)                                    \
  SSU_KERNEL(ssu_update_##sname##_f32_vec1##suffix, ST, float, 16 / sizeof(ST), 1, true, SR, MINB_VEC) \
  SSU_KERNEL(ssu_update_##sname##_f16_vec1##suffix, ST, f16, 16 / sizeof(ST), 1, true, SR, MINB_VEC)   \
  SSU_KERNEL(ssu_update_##sname##_bf16_vec1##suffix, ST, bf16, 16 / sizeof(ST), 1, true, SR, MINB_VEC) \
  SSU_KERNEL(ssu_update_##sname##_f32_gen##suffix, ST, float, 1, 8, false, SR, MINB_GEN)               \
  SSU_KERNEL(ssu_update_##sname##_f16_gen##suffix, ST, f16, 1, 8, false, SR, MINB_GEN)                 \
  SSU_KERNEL(ssu_update_##sname##_bf16_gen##suffix, ST, bf16, 1, 8, false, SR, MINB_GEN)

SSU_KERNELS_FOR(f32, float, false, , 8, 6)
SSU_KERNELS_FOR(f16, f16, false, , 8, 6)
SSU_KERNELS_FOR(bf16, bf16, false, , 8, 6)
SSU_KERNELS_FOR(i16, int16_t, false, , 5, 4)
SSU_KERNELS_FOR(i8, int8_t, false, , 5, 4)
SSU_KERNELS_FOR(f8e4m3, e4m3, false, , 4, 4)
SSU_KERNELS_FOR(f16, f16, true, _sr, 4, 4)
SSU_KERNELS_FOR(bf16, bf16, true, _sr, 4, 4)
SSU_KERNELS_FOR(f8e4m3, e4m3, true, _sr, 4, 4)
// f32 rows longer than 128 elements need two 16-byte chunks per lane.
SSU_KERNEL(ssu_update_f32_f32_vec2, float, float, 4, 2, true, false, 8)
SSU_KERNEL(ssu_update_f32_f16_vec2, float, f16, 4, 2, true, false, 8)
SSU_KERNEL(ssu_update_f32_bf16_vec2, float, bf16, 4, 2, true, false, 8)
