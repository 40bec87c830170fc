// Float64 reference of SPEC.md sections 1 and 2; see reference.h.
#include "reference.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace ssutest {

// ---------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------
static uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float bf16_bits_to_float(uint16_t bits) { return bits_float(uint32_t(bits) << 16); }

float f16_bits_to_float(uint16_t bits) {
  const uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t man = bits & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // Inf/NaN
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24.
    const float mag = std::ldexp(float(man), -24);
    return sign ? -mag : mag;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t float_to_bf16_bits(float value) {
  uint32_t u = float_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

uint16_t float_to_f16_bits(float value) {
  const uint32_t u = float_bits(value);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) return uint16_t(sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (mag >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: Inf
  const uint32_t e = mag >> 23;
  if (mag < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal k * 2^-24.
    const uint32_t shift = 126u - e;
    if (e == 0 || shift >= 25) return sign;  // below half of 2^-24 (or a float subnormal)
    const uint32_t m = (mag & 0x7fffffu) | 0x800000u;
    uint32_t k = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (k & 1u))) ++k;
    return uint16_t(sign | k);
  }
  uint32_t h = ((e - 112u) << 10) | ((mag & 0x7fffffu) >> 13);
  const uint32_t rem = mag & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

bool is_float_dtype(ssu_dtype_t dtype) {
  return dtype == SSU_DTYPE_F32 || dtype == SSU_DTYPE_F16 || dtype == SSU_DTYPE_BF16;
}

double load_element(const void* base, ssu_dtype_t dtype, int64_t index) {
  switch (dtype) {
    case SSU_DTYPE_F32: return static_cast<const float*>(base)[index];
    case SSU_DTYPE_F16: return f16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case SSU_DTYPE_BF16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[index]);
    case SSU_DTYPE_I16: return static_cast<const int16_t*>(base)[index];
    case SSU_DTYPE_I8: return static_cast<const int8_t*>(base)[index];
    case SSU_DTYPE_F8E4M3: return static_cast<const uint8_t*>(base)[index];  // the code
    case SSU_DTYPE_I32: return static_cast<const int32_t*>(base)[index];
    case SSU_DTYPE_I64: return double(static_cast<const int64_t*>(base)[index]);
    default: throw std::logic_error("load_element: bad dtype " + std::to_string(dtype));
  }
}

void store_element(void* base, ssu_dtype_t dtype, int64_t index, double value) {
  switch (dtype) {
    case SSU_DTYPE_F32: static_cast<float*>(base)[index] = float(value); return;
    case SSU_DTYPE_F16:
      static_cast<uint16_t*>(base)[index] = float_to_f16_bits(float(value));
      return;
    case SSU_DTYPE_BF16:
      static_cast<uint16_t*>(base)[index] = float_to_bf16_bits(float(value));
      return;
    case SSU_DTYPE_I16: static_cast<int16_t*>(base)[index] = int16_t(value); return;
    case SSU_DTYPE_I8: static_cast<int8_t*>(base)[index] = int8_t(value); return;
    case SSU_DTYPE_F8E4M3: static_cast<uint8_t*>(base)[index] = uint8_t(value); return;
    case SSU_DTYPE_I32: static_cast<int32_t*>(base)[index] = int32_t(value); return;
    case SSU_DTYPE_I64: static_cast<int64_t*>(base)[index] = int64_t(value); return;
    default: throw std::logic_error("store_element: bad dtype " + std::to_string(dtype));
  }
}

double round_to_dtype(double value, ssu_dtype_t dtype) {
  unsigned char buf[8];
  store_element(buf, dtype, 0, value);
  return load_element(buf, dtype, 0);
}

double softplus20(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

// ---------------------------------------------------------------------------
// Exact stores
// ---------------------------------------------------------------------------
Philox4 ref_philox4x32(uint64_t seed, uint64_t counter, uint32_t rounds) {
  // Named after the specification's (c0, c1, c2, c3) and (k0, k1).
  uint32_t c[4] = {uint32_t(counter & 0xffffffffu), uint32_t(counter >> 32), 0u, 0u};
  uint32_t k[2] = {uint32_t(seed & 0xffffffffu), uint32_t(seed >> 32)};
  for (uint32_t round = 0; round < rounds; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * uint64_t(c[0]);
    const uint64_t p2 = uint64_t(0xCD9E8D57u) * uint64_t(c[2]);
    const uint32_t next[4] = {
        uint32_t(p2 >> 32) ^ c[1] ^ k[0],
        uint32_t(p2),
        uint32_t(p0 >> 32) ^ c[3] ^ k[1],
        uint32_t(p0),
    };
    for (int i = 0; i < 4; ++i) c[i] = next[i];
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  Philox4 r;
  for (int i = 0; i < 4; ++i) r.v[i] = c[i];
  return r;
}

uint32_t ref_sr_word(uint64_t seed, uint64_t L, uint32_t rounds) {
  const uint64_t lane = L % 4;
  return ref_philox4x32(seed, L - lane, rounds == 0 ? 10u : rounds).v[lane];
}

uint16_t ref_bf16_sr(float value, uint32_t rnd) {
  const uint32_t u = float_bits(value);
  const uint32_t sign = u >> 31;
  const uint32_t mag = u & 0x7fffffffu;
  if (std::isnan(value)) return uint16_t((sign << 15) | 0x7fc0u);
  if (std::isinf(value)) return uint16_t((sign << 15) | 0x7f80u);
  // The magnitude plus the random bits, in 64 bits so nothing can wrap.
  const uint64_t sum = uint64_t(mag) + (rnd & 0xffffu);
  uint64_t kept = sum >> 16;                 // bf16 magnitude bits
  if (kept >= 0x7f80u) kept = 0x7f80u;       // past the largest finite: Inf
  return uint16_t((sign << 15) | uint32_t(kept));
}

uint16_t ref_f16_sr(float value, uint32_t rnd) {
  const uint32_t u = float_bits(value);
  const uint32_t sign = u >> 31;
  if (std::isnan(value)) return uint16_t((sign << 15) | 0x7e00u);
  if (std::isinf(value)) return uint16_t((sign << 15) | 0x7c00u);
  const uint64_t sum = uint64_t(u & 0x7fffffffu) + (rnd & 0x1fffu);
  // The fp32 fields of the sum; truncation keeps the top 10 mantissa bits.
  const int64_t exp32 = int64_t(sum >> 23);  // biased by 127
  const uint32_t man10 = uint32_t((sum >> 13) & 0x3ffu);
  const int64_t exp16 = exp32 - 127 + 15;
  if (exp16 < 1) return uint16_t(sign << 15);                  // below 2^-14: signed zero
  if (exp16 > 30) return uint16_t((sign << 15) | 0x7c00u);     // 2^16 and beyond: Inf
  return uint16_t((sign << 15) | (uint32_t(exp16) << 10) | man10);
}

// A block-scaled row's largest finite magnitude (*amax), or false with the
// scale such a row stores (NaN if it holds a NaN, else Inf if it holds an
// Inf) in *nonfinite_scale: the int16 and 8-bit formats share this rule.
static bool row_finite_amax(const float* v, int64_t n, float* amax, float* nonfinite_scale) {
  bool has_nan = false, has_inf = false;
  *amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(v[i])) has_nan = true;
    else if (std::isinf(v[i])) has_inf = true;
    else *amax = std::max(*amax, std::fabs(v[i]));
  }
  if (!has_nan && !has_inf) return true;
  *nonfinite_scale = has_nan ? std::numeric_limits<float>::quiet_NaN()
                             : std::numeric_limits<float>::infinity();
  return false;
}

QuantizedRow ref_quantize_row(const float* v, int64_t n) {
  QuantizedRow r;
  r.q.assign(size_t(n), 0);
  float amax = 0.0f;
  if (!row_finite_amax(v, n, &amax, &r.scale)) {
    return r;
  }
  const float enc = amax == 0.0f ? 1.0f : 32767.0f / amax;
  r.scale = 1.0f / enc;
  for (int64_t i = 0; i < n; ++i) {
    float s = v[i] * enc;
    s = std::min(32767.0f, std::max(-32767.0f, s));
    // Round half to even by hand: floor, then look at the fraction.
    const double f = std::floor(double(s));
    const double frac = double(s) - f;
    double k = f;
    if (frac > 0.5 || (frac == 0.5 && std::fmod(f, 2.0) != 0.0)) k = f + 1.0;
    r.q[size_t(i)] = int16_t(k);
  }
  return r;
}

float ref_dequantize(int16_t q, float scale) { return float(q) * scale; }

// ---------------------------------------------------------------------------
// 8-bit formats
// ---------------------------------------------------------------------------
bool is_scaled_dtype(ssu_dtype_t d) {
  return d == SSU_DTYPE_I16 || d == SSU_DTYPE_I8 || d == SSU_DTYPE_F8E4M3;
}

bool ref_state8_element_ok(uint8_t code, double got, double ref, double scale, ssu_dtype_t dtype,
                           double* lim) {
  const bool fp8 = dtype == SSU_DTYPE_F8E4M3;
  *lim = fp8 ? 0.125 * std::fabs(ref) + 1e-4 * std::fabs(ref) + 2.0 * std::ldexp(scale, -9)
             : 2.0 * scale + 1e-4 * std::fabs(ref);
  const bool bad_code = fp8 ? (code & 0x7f) == 0x7f : code == 0x80;
  return !bad_code && std::fabs(got - ref) <= *lim;
}

double ref_qmax(ssu_dtype_t d) {
  return d == SSU_DTYPE_I16 ? 32767.0 : d == SSU_DTYPE_I8 ? 127.0 : 448.0;
}

float ref_e4m3_value(uint8_t code) {
  const int sign = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return float(sign ? -mag : mag);
}

namespace {

// The 127 finite non-negative E4M3 values, increasing with the code.
const std::vector<double>& e4m3_magnitudes() {
  static const std::vector<double> v = [] {
    std::vector<double> r;
    for (int c = 0; c < 0x7f; ++c) r.push_back(ref_e4m3_value(uint8_t(c)));
    return r;
  }();
  return v;
}

uint8_t e4m3_code_of_magnitude(double a) {
  const std::vector<double>& v = e4m3_magnitudes();
  const auto it = std::lower_bound(v.begin(), v.end(), a);
  if (it == v.end() || *it != a)
    throw std::logic_error("e4m3: " + std::to_string(a) + " is not an E4M3 magnitude");
  return uint8_t(it - v.begin());
}

}  // namespace

uint8_t ref_e4m3_rn(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (!(a <= 448.0)) throw std::logic_error("ref_e4m3_rn: |x| > 448 or NaN");
  const std::vector<double>& v = e4m3_magnitudes();
  const size_t hi = size_t(std::lower_bound(v.begin(), v.end(), a) - v.begin());
  if (v[hi] == a) return uint8_t(sign | hi);
  const size_t lo = hi - 1;  // v[lo] < a < v[hi]
  const double dlo = a - v[lo], dhi = v[hi] - a;
  const size_t pick = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  return uint8_t(sign | pick);
}

uint8_t ref_e4m3_sr(float x, uint32_t rnd) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (!(a <= 448.0)) throw std::logic_error("ref_e4m3_sr: |x| > 448 or NaN");
  if (a == 0.0) return sign;
  // a = M * 2^(e - 23) with the 24-bit significand M (fp32 subnormals:
  // e = -126, M below 2^23).
  int e2;
  std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  const int e = std::max(e2 - 1, -126);
  const double M = std::ldexp(a, 23 - e);  // an integer
  // The E4M3 step at a: 2^(e-3) in the normal range, 2^-9 below 2^-6; in
  // units of M that is 2^d.
  const int d = a >= std::ldexp(1.0, -6) ? 20 : 14 - e;
  double k;
  if (d <= 32) {
    const double r = double(uint64_t(rnd) & ((uint64_t(1) << d) - 1));
    k = std::floor((M + r) / std::ldexp(1.0, d));
  } else {
    const double top = std::floor(M / std::ldexp(1.0, d - 32));
    k = std::floor((top + double(rnd)) / std::ldexp(1.0, 32));
  }
  return uint8_t(sign | e4m3_code_of_magnitude(std::ldexp(k, e - 23 + d)));
}

QuantizedRow8 ref_quantize_row8(const float* v, int64_t n, ssu_dtype_t dtype,
                                const uint32_t* words) {
  const bool fp8 = dtype == SSU_DTYPE_F8E4M3;
  QuantizedRow8 r;
  r.q.assign(size_t(n), 0);
  float amax = 0.0f;
  if (!row_finite_amax(v, n, &amax, &r.scale)) {
    if (fp8) r.q.assign(size_t(n), 0x7f);
    return r;
  }
  const float qmax = float(ref_qmax(dtype));
  const float enc = amax == 0.0f ? 1.0f : qmax / amax;
  r.scale = 1.0f / enc;
  for (int64_t i = 0; i < n; ++i) {
    float s = v[i] * enc;
    if (std::isnan(s)) s = 0.0f;  // 0 * Inf: a factor that overflowed
    s = std::min(qmax, std::max(-qmax, s));
    if (fp8) {
      r.q[size_t(i)] = words ? ref_e4m3_sr(s, words[i]) : ref_e4m3_rn(s);
    } else {
      const double f = std::floor(double(s));
      const double frac = double(s) - f;
      double k = f;
      if (frac > 0.5 || (frac == 0.5 && std::fmod(f, 2.0) != 0.0)) k = f + 1.0;
      r.q[size_t(i)] = uint8_t(int8_t(k));
    }
  }
  return r;
}

float ref_dequantize8(uint8_t code, ssu_dtype_t dtype, float scale) {
  const float value = dtype == SSU_DTYPE_F8E4M3 ? ref_e4m3_value(code) : float(int8_t(code));
  return value * scale;
}

// ---------------------------------------------------------------------------
// The update
// ---------------------------------------------------------------------------
namespace {

[[noreturn]] void invalid(const std::string& what) {
  throw std::logic_error("reference_update: invalid problem: " + what);
}

void check_size(const char* name, size_t got, int64_t want) {
  if (int64_t(got) != want)
    invalid(std::string(name) + " has " + std::to_string(got) + " elements, expected " +
            std::to_string(want));
}

}  // namespace

RefResult reference_update(const RefProblem& pr) {
  const int64_t S = pr.S, H = pr.H, P = pr.P, N = pr.N, G = pr.G, Bt = pr.batch, T = pr.T;
  if (H <= 0 || P <= 0 || N <= 0 || G <= 0 || H % G != 0) invalid("bad H/P/N/G");
  if (T < 1) invalid("T < 1");
  const int64_t heads_per_group = H / G;
  const bool multi = pr.form != RefForm::Single;
  const int64_t HP = H * P, HPN = H * P * N;

  check_size("x", pr.x.size(), pr.rows * HP);
  check_size("dt", pr.dt.size(), pr.rows * HP);
  check_size("B", pr.B.size(), pr.rows * G * N);
  check_size("C", pr.C.size(), pr.rows * G * N);
  if (pr.has_z) check_size("z", pr.z.size(), pr.rows * HP);
  check_size("A", pr.A.size(), HPN);
  if (pr.has_D) check_size("D", pr.D.size(), HP);
  if (pr.has_dt_bias) check_size("dt_bias", pr.dt_bias.size(), HP);
  check_size("state", pr.state.size(), S * HPN);
  if (!pr.src.empty()) check_size("src", pr.src.size(), pr.src_2d ? Bt * T : Bt);
  if (!pr.dst.empty()) check_size("dst", pr.dst.size(), pr.dst_2d ? Bt * T : Bt);
  if ((pr.src_2d || pr.dst_2d) && !multi) invalid("2-D indices in the single-token form");
  if (!pr.num_accepted.empty()) {
    check_size("num_accepted", pr.num_accepted.size(), Bt);
    if (!pr.src_2d) invalid("num_accepted without a 2-D src");
  }
  if (pr.I > 0 && pr.dst_2d) invalid("intermediate buffer with a 2-D dst");
  if (!pr.inter_index.empty()) {
    check_size("inter_index", pr.inter_index.size(), Bt);
    if (pr.I == 0) invalid("intermediate index without a buffer");
  }
  if (pr.form == RefForm::Varlen) {
    check_size("cu_seqlens", pr.cu_seqlens.size(), Bt + 1);
  } else if (pr.rows != (pr.form == RefForm::Single ? Bt : Bt * T)) {
    invalid("rows does not match the form");
  }

  RefResult r;
  r.out.assign(size_t(pr.rows * HP), 0.0);
  r.out_expect.assign(size_t(pr.rows * HP), Expect::Unchanged);
  r.state = pr.state;
  r.state_expect.assign(pr.state.size(), Expect::Unchanged);
  r.inter.assign(size_t(pr.I * T * HPN), 0.0);
  r.inter_expect.assign(r.inter.size(), Expect::Unchanged);
  r.initial_slot.assign(size_t(Bt), -1);

  auto check_slot = [&](int64_t slot, const char* what, int64_t b) {
    if (slot >= S)
      invalid(std::string(what) + " of sequence " + std::to_string(b) + " is " +
              std::to_string(slot) + " >= S=" + std::to_string(S));
  };
  r.state_row_src.assign(size_t(S * HP), -1);
  r.inter_row_src.assign(size_t(pr.I * T * HP), -1);
  auto store_state = [&](std::vector<double>& dstv, std::vector<Expect>& expect,
                         std::vector<int64_t>& row_src, int64_t base, int64_t src_slot,
                         const std::vector<double>& h) {
    for (int64_t i = 0; i < HPN; ++i) {
      dstv[size_t(base + i)] = h[size_t(i)];
      expect[size_t(base + i)] = Expect::Close;
    }
    for (int64_t i = 0; i < HP; ++i) row_src[size_t(base / N + i)] = src_slot;
  };

  std::vector<double> h(static_cast<size_t>(HPN));
  for (int64_t b = 0; b < Bt; ++b) {
    // Token rows owned by this sequence.
    int64_t first_row = 0, length = 1;
    if (pr.form == RefForm::Single) {
      first_row = b;
      length = 1;
    } else if (pr.form == RefForm::Multi) {
      first_row = b * T;
      length = T;
    } else {
      first_row = pr.cu_seqlens[size_t(b)];
      // Entries as far apart as INT64_MIN and INT64_MAX: a length beyond T
      // (or below zero), not an overflow.
      if (__builtin_sub_overflow(pr.cu_seqlens[size_t(b + 1)], first_row, &length))
        length = pr.cu_seqlens[size_t(b + 1)] > first_row ? T + 1 : 0;
      if (length > T) invalid("sequence " + std::to_string(b) + " is longer than T");
      if (length <= 0) continue;  // nothing is written for b
      if (first_row < 0 || first_row + length > pr.rows) invalid("cu_seqlens out of rows");
    }

    // The initial slot.
    int64_t init_col = 0;
    if (!pr.num_accepted.empty()) {
      const int64_t na = pr.num_accepted[size_t(b)];
      if (na > T) invalid("num_accepted > T");
      init_col = na - 1 > 0 ? na - 1 : 0;
    }
    int64_t s0 = b;
    if (!pr.src.empty()) s0 = pr.src_2d ? pr.src[size_t(b * T + init_col)] : pr.src[size_t(b)];
    if (pr.is_padding(s0)) {
      for (int64_t t = 0; t < length; ++t)
        for (int64_t i = 0; i < HP; ++i) {
          r.out[size_t((first_row + t) * HP + i)] = 0.0;
          r.out_expect[size_t((first_row + t) * HP + i)] = Expect::Zero;
        }
      continue;
    }
    check_slot(s0, "initial slot", b);
    r.initial_slot[size_t(b)] = s0;

    // Intermediate stores go to inter_index[b] (default: the initial slot);
    // a padding index skips them.
    int64_t ii = s0;
    if (pr.I > 0 && !pr.inter_index.empty()) ii = pr.inter_index[size_t(b)];
    const bool inter_store = pr.I > 0 && !pr.is_padding(ii);
    if (inter_store && ii >= pr.I) invalid("intermediate index out of range");

    for (int64_t i = 0; i < HPN; ++i) h[size_t(i)] = pr.state[size_t(s0 * HPN + i)];

    for (int64_t t = 0; t < length; ++t) {
      const int64_t row = first_row + t;
      for (int64_t hh = 0; hh < H; ++hh) {
        const int64_t g = hh / heads_per_group;
        const double* Brow = &pr.B[size_t((row * G + g) * N)];
        const double* Crow = &pr.C[size_t((row * G + g) * N)];
        for (int64_t p = 0; p < P; ++p) {
          const int64_t hp = hh * P + p;
          const double xv = pr.x[size_t(row * HP + hp)];
          double delta = pr.dt[size_t(row * HP + hp)];
          if (pr.has_dt_bias) delta += pr.dt_bias[size_t(hp)];
          if (pr.softplus) delta = softplus20(delta);
          double y = 0.0;
          double* hrow = &h[size_t(hp * N)];
          const double* Arow = &pr.A[size_t(hp * N)];
          for (int64_t n = 0; n < N; ++n) {
            const double dA = std::exp(Arow[n] * delta);
            hrow[n] = hrow[n] * dA + (Brow[n] * delta) * xv;
            y += hrow[n] * Crow[n];
          }
          if (pr.has_D) y += pr.D[size_t(hp)] * xv;
          if (pr.has_z) {
            const double zv = pr.z[size_t(row * HP + hp)];
            y *= zv / (1.0 + std::exp(-zv));
          }
          r.out[size_t(row * HP + hp)] = y;
          r.out_expect[size_t(row * HP + hp)] = Expect::Close;
        }
      }
      // Per-token stores.
      if (pr.dst_2d && !pr.disable_update) {
        const int64_t d = pr.dst[size_t(b * T + t)];
        if (!pr.is_padding(d)) {
          check_slot(d, "dst", b);
          store_state(r.state, r.state_expect, r.state_row_src, d * HPN, s0, h);
        }
      }
      if (inter_store)
        store_state(r.inter, r.inter_expect, r.inter_row_src, (ii * T + t) * HPN, s0, h);
    }

    // Final store.
    if (!pr.dst_2d && !pr.disable_update) {
      const int64_t d = pr.dst.empty() ? s0 : pr.dst[size_t(b)];
      if (!pr.is_padding(d)) {
        check_slot(d, "dst", b);
        store_state(r.state, r.state_expect, r.state_row_src, d * HPN, s0, h);
      }
    }
  }
  return r;
}

}  // namespace ssutest
