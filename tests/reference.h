// Float64 reference of the selective state update (SPEC.md sections 1 and 2).
//
// Written from the specification alone: it shares no code with the library.
// The caller hands it float64 copies of every input, already rounded to the
// input's dtype (the values the library reads), laid out densely along the
// logical axes; the reference keeps the state in float64 across tokens and
// returns the expected outputs and the expected contents of the whole state
// pool and intermediate buffer, each element tagged with how it must be
// compared (within tolerance, exactly zero, or bit-identical to before).
// Also the exact stores of sections 4 and 5 (int16 rows, Philox and
// stochastic rounding), as functions of the fp32 value stored.
#pragma once

#include <cstdint>
#include <vector>

#include "ssu.h"

namespace ssutest {

// ---------------------------------------------------------------------------
// Element conversions (round to nearest even on the way in, exact on the way
// out). Independent of the library's own conversions.
// ---------------------------------------------------------------------------
float bf16_bits_to_float(uint16_t bits);
float f16_bits_to_float(uint16_t bits);
uint16_t float_to_bf16_bits(float value);  // RNE; NaN stays NaN
uint16_t float_to_f16_bits(float value);   // RNE, subnormals, overflow to Inf

// Reads element `index` of an array of `dtype` (any float or integer dtype).
double load_element(const void* base, ssu_dtype_t dtype, int64_t index);
// Writes `value` rounded to `dtype` (floats: RNE through float; integers:
// truncation toward zero).
void store_element(void* base, ssu_dtype_t dtype, int64_t index, double value);
// The value `value` takes once stored in `dtype` and read back.
double round_to_dtype(double value, ssu_dtype_t dtype);
bool is_float_dtype(ssu_dtype_t dtype);

// softplus with the threshold of SPEC.md: v > 20 ? v : log(1 + e^v).
double softplus20(double v);

// ---------------------------------------------------------------------------
// Exact state stores (SPEC.md sections 4 and 5), written from the text of the
// specification alone. Each is defined on the fp32 value the library stores.
// ---------------------------------------------------------------------------
struct Philox4 {
  uint32_t v[4];
};
// Philox-4x32 with `rounds` rounds: key (lo32, hi32) of `seed`, counter
// (lo32, hi32) of `counter`, then 0, 0.
Philox4 ref_philox4x32(uint64_t seed, uint64_t counter, uint32_t rounds);
// The random word of pool element offset L: component L mod 4 of
// philox(seed, L - L mod 4). `rounds` 0 means 10.
uint32_t ref_sr_word(uint64_t seed, uint64_t L, uint32_t rounds);
// Stochastic rounding of an fp32 value with random word `rnd`; the raw
// 16-bit patterns. f16 adds the low 13 bits to the magnitude and truncates
// (below 2^-14: signed zero; overflow: Inf); bf16 adds the low 16 bits.
// NaN gives a quiet NaN, +-Inf stays +-Inf, the sign is kept.
uint16_t ref_f16_sr(float value, uint32_t rnd);
uint16_t ref_bf16_sr(float value, uint32_t rnd);

// The int16 store of an fp32 row v[0..n): amax = max|v|, enc = amax == 0 ?
// 1 : 32767 / amax, scale = 1 / enc, q = round_half_even(clamp(v * enc,
// +-32767)). A row holding NaN stores codes 0 and a NaN scale, a row holding
// +-Inf (and no NaN) codes 0 and an Inf scale (ssu.h).
struct QuantizedRow {
  std::vector<int16_t> q;
  float scale = 0.0f;
};
QuantizedRow ref_quantize_row(const float* v, int64_t n);
// The value an int16 element loads as: float(q) * scale, rounded to fp32.
float ref_dequantize(int16_t q, float scale);

// The 8-bit block-scaled formats (ssu.h: i8 and f8e4m3), written from the
// text of the header alone. OCP FP8 E4M3: sign, exponent bias 7, 3 mantissa
// bits, subnormals k * 2^-9, largest 448, 0x7F / 0xFF NaN, no infinities.
float ref_e4m3_value(uint8_t code);  // exact; NaN for 0x7F / 0xFF
// The nearest E4M3 number to |x| <= 448, ties to the even code (the sign is
// kept, -0 included).
uint8_t ref_e4m3_rn(float x);
// Stochastic rounding of |x| <= 448 with random word `rnd` (ssu.h,
// ssu_update_args_t: d random bits below the step of |x|).
uint8_t ref_e4m3_sr(float x, uint32_t rnd);
// The store of an fp32 row in i8 or f8e4m3: amax, enc = amax == 0 ? 1 :
// QMAX / amax, scale = 1 / enc, codes of clamp(v * enc, +-QMAX) rounded to
// nearest (or stochastically with words[n], f8e4m3 only). A NaN / Inf row
// stores its NaN / Inf scale and codes 0 (i8) or 0x7F (f8e4m3).
struct QuantizedRow8 {
  std::vector<uint8_t> q;  // raw codes (int8 as two's complement)
  float scale = 0.0f;
};
QuantizedRow8 ref_quantize_row8(const float* v, int64_t n, ssu_dtype_t dtype,
                                const uint32_t* words = nullptr);
// The value an 8-bit element loads as: value(code) * scale, rounded to fp32.
float ref_dequantize8(uint8_t code, ssu_dtype_t dtype, float scale);
// SPEC section 8's check of one stored 8-bit element against its float64
// reference `ref`, with the row's reference decode scale `scale`: the code
// is not the format's invalid one (0x80 for i8, NaN for f8e4m3) and its
// value `got` is within 2 decode scales (i8) or 2^-3 |ref| plus 2 subnormal
// steps (f8e4m3), plus 1e-4 |ref|. *lim receives the bound.
bool ref_state8_element_ok(uint8_t code, double got, double ref, double scale, ssu_dtype_t dtype,
                           double* lim);
// The largest code value of a block-scaled format: 32767, 127 or 448.
double ref_qmax(ssu_dtype_t dtype);
bool is_scaled_dtype(ssu_dtype_t dtype);

// ---------------------------------------------------------------------------
// The problem in logical, dense float64 form.
// ---------------------------------------------------------------------------
enum class RefForm { Single, Multi, Varlen };

struct RefProblem {
  RefForm form = RefForm::Single;
  int64_t S = 0, H = 0, P = 0, N = 0, G = 0;
  int64_t batch = 0;   // Bt
  int64_t T = 1;       // tokens per sequence (max_tokens for varlen)
  int64_t rows = 0;    // token rows: Bt (single), Bt*T (multi), TT (varlen)
  int64_t I = 0;       // intermediate buffer entries (0: no buffer)

  bool softplus = false;
  bool disable_update = false;
  bool has_D = false, has_dt_bias = false, has_z = false;

  // Per-token tensors, row-major over (row, h|g, p|n). Row of (b, t):
  // single b, multi b*T + t, varlen cu_seqlens[b] + t.
  std::vector<double> x, z, dt;  // (rows, H, P); dt expanded over P when per head
  std::vector<double> B, C;      // (rows, G, N)
  // Parameters, expanded to per channel.
  std::vector<double> A;         // (H, P, N)
  std::vector<double> D;         // (H, P)
  std::vector<double> dt_bias;   // (H, P)
  // Initial pool (S, H, P, N) and intermediate buffer (I, T, H, P, N).
  std::vector<double> state;

  // Slot indices. Empty vectors mean "absent".
  std::vector<int64_t> src;  // (Bt) or (Bt, T) when src_2d
  bool src_2d = false;
  std::vector<int64_t> dst;  // (Bt) or (Bt, T) when dst_2d
  bool dst_2d = false;
  std::vector<int64_t> cu_seqlens;     // (Bt + 1), varlen only
  std::vector<int64_t> num_accepted;   // (Bt)
  std::vector<int64_t> inter_index;    // (Bt)
  int64_t pad_slot_id = -1;

  bool is_padding(int64_t slot) const { return slot < 0 || slot == pad_slot_id; }
};

// How an element of the result must be compared.
enum class Expect : uint8_t {
  Unchanged = 0,  // bit-identical to its contents before the call
  Close = 1,      // within the dtype's tolerance of `value`
  Zero = 2,       // exactly +0 or -0 (padded outputs)
};

struct RefResult {
  std::vector<double> out;          // (rows, H, P)
  std::vector<Expect> out_expect;
  std::vector<double> state;        // (S, H, P, N) expected pool contents
  std::vector<Expect> state_expect;
  std::vector<double> inter;        // (I, T, H, P, N)
  std::vector<Expect> inter_expect;
  // Where each sequence's initial state came from (-1 when padded or empty);
  // for diagnostics.
  std::vector<int64_t> initial_slot;
  // For every state row (S, H, P) and intermediate row (I, T, H, P) that is
  // stored: the initial slot of the sequence that stored it (-1: not
  // stored). A stochastically rounded store of row (h, p) draws the random
  // words of offsets L = initial_slot * slot_stride + (h*P + p)*N + n.
  std::vector<int64_t> state_row_src;
  std::vector<int64_t> inter_row_src;
};

// Runs the reference. Throws std::logic_error if the problem is not a valid
// one (an index out of range, a length above T): the harness builds only
// valid problems, invalid ones belong to the validation tests.
RefResult reference_update(const RefProblem& problem);

}  // namespace ssutest
