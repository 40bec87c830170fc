// Exact state stores, function by function, and their effect over many
// steps through the API (CPU backend):
//  - Philox-4x32 known answers, through the library's generator and the
//    reference's own;
//  - stochastic rounding to f16 / bf16: hand-written bit patterns at every
//    edge (exactly representable values, ties, the carry into the exponent,
//    f16 flush to zero, overflow to Inf, NaN, Inf, signed zero), then the
//    library's and the reference's conversions on many random values;
//  - the library's exp (the decay of every state): accuracy and specials;
//  - the int16 row quantizer: zero rows, the clip rails, ties to even, the
//    NaN / Inf row policy;
//  - statistics: stochastic rounding is unbiased and neighbouring elements
//    round independently;
//  - 2000 decode steps in the regime where every step changes the state by
//    less than half an ulp: stochastic rounding follows the f32 trajectory,
//    round-to-nearest stalls; an int16 state follows the float64 reference.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ios>
#include <limits>
#include <string>
#include <vector>

#include "../kernels/ssu_math.h"
#include "../kernels/ssu_state8.h"
#include "reference.h"
#include "rng.h"
#include "ssu.h"

using namespace ssutest;

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}


// Both implementations of one conversion must give `want` (hex) for `in`.
struct Sr {
  const char* name;
  uint16_t (*lib)(float, uint32_t);
  uint16_t (*ref)(float, uint32_t);
};
uint16_t lib_f16(float v, uint32_t r) { return ssu_math::f32_to_f16_sr(v, r); }
uint16_t lib_bf16(float v, uint32_t r) { return ssu_math::f32_to_bf16_sr(v, r); }
const Sr kF16{"f16", lib_f16, ref_f16_sr};
const Sr kBF16{"bf16", lib_bf16, ref_bf16_sr};

std::string hex_line(const char* what, uint32_t in, uint32_t rnd, uint32_t want, uint32_t lib,
                     uint32_t ref) {
  char b[200];
  std::snprintf(b, sizeof b, "%s input 0x%08x rnd 0x%08x: want 0x%04x, library 0x%04x, reference 0x%04x",
                what, in, rnd, want, lib, ref);
  return b;
}

void expect_bits(const Sr& sr, uint32_t in_bits, uint32_t rnd, uint16_t want) {
  const float v = float_of(in_bits);
  const uint16_t got_lib = sr.lib(v, rnd), got_ref = sr.ref(v, rnd);
  INFO(hex_line(sr.name, in_bits, rnd, want, got_lib, got_ref));
  CHECK(got_lib == want);
  CHECK(got_ref == want);
}

bool is_quiet_nan16(const Sr& sr, uint16_t b) {
  if (sr.lib == lib_f16) return (b & 0x7c00u) == 0x7c00u && (b & 0x0200u) != 0;
  return (b & 0x7f80u) == 0x7f80u && (b & 0x0040u) != 0;
}

// The library's row store, as the numerics contract spells it out.
struct LibRow {
  std::vector<int16_t> q;
  float scale;
};
LibRow lib_quantize(const std::vector<float>& v) {
  float amax = 0.0f;
  for (float x : v) amax = ssu_math::int16_amax_step(amax, x);
  const float enc = ssu_math::int16_encode_factor(amax);
  LibRow r;
  r.scale = 1.0f / enc;
  for (float x : v) r.q.push_back(ssu_math::int16_quantize(x, enc));
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------
TEST_CASE("philox4x32: the known answers of the specification") {
  struct Kat {
    uint64_t seed, counter;
    uint32_t rounds;
    uint32_t want[4];
  };
  const Kat kats[] = {
      {0, 0, 10, {0x6627E8D5u, 0xE169C58Du, 0xBC57AC4Cu, 0x9B00DBD8u}},
      {42, 1, 10, {0xFCDB2127u, 0x53BA6CFDu, 0x838F5A6Eu, 0x744E06FBu}},
      {0xDEADBEEFull, uint64_t(1) << 32, 10, {0x4DFFA72Fu, 0xA4A4544Fu, 0x8CFFF1B9u, 0xFFAE73C7u}},
      {12345, 7, 5, {0x3633E955u, 0xF454F6BFu, 0xEEAD40EEu, 0x81CE0FE0u}},
  };
  for (const Kat& k : kats) {
    CAPTURE(k.seed);
    CAPTURE(k.counter);
    const ssu_math::u32x4 lib = ssu_math::philox4x32(k.seed, k.counter, k.rounds);
    const Philox4 ref = ref_philox4x32(k.seed, k.counter, k.rounds);
    for (int i = 0; i < 4; ++i) {
      CHECK(lib.v[i] == k.want[i]);
      CHECK(ref.v[i] == k.want[i]);
    }
  }
}

TEST_CASE("philox4x32: library and reference agree; the element word is lane L mod 4") {
  Rng rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t seed = rng.next(), counter = rng.next();
    const uint32_t rounds = 1 + uint32_t(rng.next() % 32);
    const ssu_math::u32x4 lib = ssu_math::philox4x32(seed, counter, rounds);
    const Philox4 ref = ref_philox4x32(seed, counter, rounds);
    bool same = true;
    for (int j = 0; j < 4; ++j) same = same && lib.v[j] == ref.v[j];
    if (!same) FAIL_CHECK("philox differs: seed " << seed << " counter " << counter << " rounds " << rounds);
    const uint64_t L = counter >> (rng.next() % 64);
    const uint32_t want = ref_philox4x32(seed, L - L % 4, rounds).v[L % 4];
    if (ssu_math::sr_word(seed, L, rounds) != want || ref_sr_word(seed, L, rounds) != want)
      FAIL_CHECK("sr_word differs: seed " << seed << " L " << L << " rounds " << rounds);
  }
  // rounds 0 means the default, 10.
  CHECK(ref_sr_word(99, 6, 0) == ssu_math::sr_word(99, 6, 10));
}

// ---------------------------------------------------------------------------
TEST_CASE("stochastic rounding to bf16: edge cases, bit for bit") {
  const Sr& s = kBF16;
  // Exactly representable values never change, whatever the random bits.
  for (uint32_t rnd : {0u, 1u, 0x7fffu, 0x8000u, 0xffffu, 0xffffffffu, 0x12345678u}) {
    expect_bits(s, 0x3F800000u, rnd, 0x3F80);   // 1
    expect_bits(s, 0xC0490000u, rnd, 0xC049);   // -3.140625
    expect_bits(s, 0x7F7F0000u, rnd, 0x7F7F);   // the largest finite bf16
    expect_bits(s, 0x00010000u, rnd, 0x0001);   // a subnormal bf16
    expect_bits(s, 0x00000000u, rnd, 0x0000);   // +0
    expect_bits(s, 0x80000000u, rnd, 0x8000);   // -0 keeps its sign
    expect_bits(s, 0x7F800000u, rnd, 0x7F80);   // +Inf
    expect_bits(s, 0xFF800000u, rnd, 0xFF80);   // -Inf
  }
  // A value one fp32 ulp above 1: rounds up only when all low 16 random bits are set.
  expect_bits(s, 0x3F800001u, 0xfffeu, 0x3F80);
  expect_bits(s, 0x3F800001u, 0xffffu, 0x3F81);
  expect_bits(s, 0x3F800001u, 0xabcdffffu, 0x3F81);  // only the low 16 bits count
  // Exactly half way (1 + 2^-8): up for random bits >= 0x8000.
  expect_bits(s, 0x3F808000u, 0x7fffu, 0x3F80);
  expect_bits(s, 0x3F808000u, 0x8000u, 0x3F81);
  expect_bits(s, 0xBF808000u, 0x8000u, 0xBF81);  // magnitude rounding: away from zero
  expect_bits(s, 0xBF808000u, 0x7fffu, 0xBF80);
  // The carry runs into the exponent: just below 2 becomes 2.
  expect_bits(s, 0x3FFFFFFFu, 0u, 0x3FFF);
  expect_bits(s, 0x3FFFFFFFu, 1u, 0x4000);
  // Subnormal fp32 inputs round into the smallest bf16 subnormal.
  expect_bits(s, 0x00000001u, 0xfffeu, 0x0000);
  expect_bits(s, 0x00000001u, 0xffffu, 0x0001);
  expect_bits(s, 0x80008000u, 0x8000u, 0x8001);
  // Near FLT_MAX: past the largest finite bf16 is Inf, with the sign.
  expect_bits(s, 0x7F7FFFFFu, 0u, 0x7F7F);
  expect_bits(s, 0x7F7FFFFFu, 1u, 0x7F80);
  expect_bits(s, 0xFF7FFFFFu, 1u, 0xFF80);
  expect_bits(s, 0x7F7F8000u, 0x8000u, 0x7F80);
  expect_bits(s, 0x7F7F8000u, 0x7fffu, 0x7F7F);
  // NaN stays a quiet NaN with its sign, signalling ones too.
  for (uint32_t in : {0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFFC00001u, 0xFF800001u})
    for (uint32_t rnd : {0u, 0xffffu}) {
      const uint16_t a = s.lib(float_of(in), rnd), b = s.ref(float_of(in), rnd);
      INFO(hex_line(s.name, in, rnd, 0, a, b));
      CHECK(is_quiet_nan16(s, a));
      CHECK(is_quiet_nan16(s, b));
      CHECK((a >> 15) == (in >> 31));
      CHECK((b >> 15) == (in >> 31));
    }
}

TEST_CASE("stochastic rounding to f16: edge cases, bit for bit") {
  const Sr& s = kF16;
  for (uint32_t rnd : {0u, 1u, 0xfffu, 0x1000u, 0x1fffu, 0xffffffffu, 0x12345678u}) {
    expect_bits(s, 0x3F800000u, rnd, 0x3C00);  // 1
    expect_bits(s, 0xC0490000u, rnd, 0xC248);  // -3.140625
    expect_bits(s, 0x477FE000u, rnd, 0x7BFF);  // 65504, the largest finite f16
    expect_bits(s, 0x38800000u, rnd, 0x0400);  // 2^-14, the smallest normal f16
    expect_bits(s, 0xB8800000u, rnd, 0x8400);
    expect_bits(s, 0x00000000u, rnd, 0x0000);
    expect_bits(s, 0x80000000u, rnd, 0x8000);
    expect_bits(s, 0x7F800000u, rnd, 0x7C00);
    expect_bits(s, 0xFF800000u, rnd, 0xFC00);
    // Values that would be f16 subnormals flush to a signed zero, whatever
    // the random bits (2^-15, 2^-24, a float subnormal).
    expect_bits(s, 0x38000000u, rnd, 0x0000);
    expect_bits(s, 0xB8000000u, rnd, 0x8000);
    expect_bits(s, 0x33800000u, rnd, 0x0000);
    expect_bits(s, 0x00000001u, rnd, 0x0000);
    expect_bits(s, 0x80400000u, rnd, 0x8000);
    // 2^16 and beyond (and anything far above) are Inf.
    expect_bits(s, 0x47800000u, rnd, 0x7C00);
    expect_bits(s, 0xC7800000u, rnd, 0xFC00);
    expect_bits(s, 0x7F7FFFFFu, rnd, 0x7C00);
    expect_bits(s, 0x501502F9u, rnd, 0x7C00);  // 1e10
  }
  // One fp32 ulp above 1: up only when the 13 random bits are all set.
  expect_bits(s, 0x3F800001u, 0x1ffeu, 0x3C00);
  expect_bits(s, 0x3F800001u, 0x1fffu, 0x3C01);
  expect_bits(s, 0x3F800001u, 0xffffe000u | 0x1ffeu, 0x3C00);  // only the low 13 bits count
  // Half way (1 + 2^-11): up for random bits >= 0x1000.
  expect_bits(s, 0x3F801000u, 0x0fffu, 0x3C00);
  expect_bits(s, 0x3F801000u, 0x1000u, 0x3C01);
  expect_bits(s, 0xBF801000u, 0x1000u, 0xBC01);
  // The carry into the exponent: just below 2 becomes 2.
  expect_bits(s, 0x3FFFFFFFu, 0u, 0x3FFF);  // truncates to 2 - 2^-10
  expect_bits(s, 0x3FFFFFFFu, 1u, 0x4000);
  // Just below 2^-14: flushes, or carries into the smallest normal.
  expect_bits(s, 0x387FFFFFu, 0u, 0x0000);
  expect_bits(s, 0x387FFFFFu, 1u, 0x0400);
  expect_bits(s, 0xB87FFFFFu, 1u, 0x8400);
  // Above 65504: truncation keeps 65504 until the sum reaches 2^16. 65520
  // (Inf when rounded to nearest) stays finite for small random bits.
  expect_bits(s, 0x477FFFFFu, 0u, 0x7BFF);
  expect_bits(s, 0x477FFFFFu, 1u, 0x7C00);
  expect_bits(s, 0x477FF000u, 0x0fffu, 0x7BFF);
  expect_bits(s, 0x477FF000u, 0x1000u, 0x7C00);
  expect_bits(s, 0xC77FF000u, 0x1000u, 0xFC00);
  for (uint32_t in : {0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFFC00001u, 0xFF800001u})
    for (uint32_t rnd : {0u, 0x1fffu}) {
      const uint16_t a = s.lib(float_of(in), rnd), b = s.ref(float_of(in), rnd);
      INFO(hex_line(s.name, in, rnd, 0, a, b));
      CHECK(is_quiet_nan16(s, a));
      CHECK(is_quiet_nan16(s, b));
      CHECK((a >> 15) == (in >> 31));
      CHECK((b >> 15) == (in >> 31));
    }
}

TEST_CASE("stochastic rounding: random bits never change a representable value") {
  Rng rng(11);
  // Every bf16 pattern but NaN.
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu)) continue;
    const float v = float_of(h << 16);
    const uint32_t r = rng.u32();
    if (ssu_math::f32_to_bf16_sr(v, r) != h || ref_bf16_sr(v, r) != h)
      FAIL_CHECK(hex_line("bf16 (representable)", h << 16, r, h, 0, 0));
  }
  // Every f16 pattern but NaN and subnormals (which flush to zero).
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint32_t e = (h >> 10) & 0x1fu;
    if ((e == 0x1f && (h & 0x3ffu)) || (e == 0 && (h & 0x3ffu))) continue;
    const float v = f16_bits_to_float(uint16_t(h));
    const uint32_t r = rng.u32();
    if (ssu_math::f32_to_f16_sr(v, r) != h || ref_f16_sr(v, r) != h)
      FAIL_CHECK(hex_line("f16 (representable)", h, r, h, 0, 0));
  }
}

TEST_CASE("stochastic rounding: library and reference agree on random values") {
  Rng rng(12);
  int bad = 0;
  for (int i = 0; i < 400000; ++i) {
    // Any fp32 pattern, and values concentrated in the f16 range.
    uint32_t u = rng.u32();
    if (i % 2) {
      const float m = float(rng.uniform() * 2.0 - 1.0);
      u = bits_of(std::ldexp(m, int(rng.next() % 48) - 30));
    }
    const float v = float_of(u);
    const uint32_t r = rng.u32();
    for (const Sr* s : {&kF16, &kBF16}) {
      const uint16_t a = s->lib(v, r), b = s->ref(v, r);
      const bool ok = std::isnan(v) ? (is_quiet_nan16(*s, a) && is_quiet_nan16(*s, b)) : a == b;
      if (!ok && ++bad <= 10)
        FAIL_CHECK(hex_line(s->name, u, r, 0, a, b));
    }
  }
  CHECK(bad == 0);
}

// ---------------------------------------------------------------------------
// The library's exp (ssu_math.h), which both backends use for the decay
// exp(A * dt): within 1 ulp of the exact value where that is a normal
// number (its fused multiply-adds must really be fused: unfused, the bound
// fails), and the documented values outside: a subnormal or zero below,
// zero from -87.7 down, +Inf from 88.38 up, NaN for NaN.
TEST_CASE("library exp: within 1 ulp on [-87.3, 88.3]; 0 below, Inf above, NaN stays NaN") {
  auto ulps = [](float x) {
    const double ref = std::exp(double(x));
    const double ulp = std::ldexp(1.0, std::ilogb(float(ref)) - 23);
    return std::fabs(double(ssu_math::exp(x)) - ref) / ulp;
  };
  double worst = 0.0;
  for (float x = -87.3f; x <= 88.3f; x += 1.0f / 256) worst = std::max(worst, ulps(x));
  Rng rng(5);
  for (int i = 0; i < 2000000; ++i) worst = std::max(worst, ulps(float(rng.uniform(-87.3, 88.3))));
  for (int i = 0; i < 200000; ++i) worst = std::max(worst, ulps(float(rng.uniform(-1e-3, 1e-3))));
  INFO("worst error: " << worst << " ulp");
  CHECK(worst < 1.0);
  CHECK(ssu_math::exp(0.0f) == 1.0f);
  // Below the normal range: a subnormal within 2^-149 of e^x, then 0.
  for (float x = -87.6f; x > -87.34f; x += 0.01f) {
    INFO("x = " << x);
    const float e = ssu_math::exp(x);
    CHECK(e < std::numeric_limits<float>::min());
    CHECK(std::fabs(double(e) - std::exp(double(x))) <= std::ldexp(1.0, -149));
  }
  for (float x : {-87.7f, -88.0f, -88.5f, -100.0f, -1e30f, -std::numeric_limits<float>::infinity()})
    CHECK(bits_of(ssu_math::exp(x)) == 0u);
  CHECK(ssu_math::exp(88.3f) < std::numeric_limits<float>::max());
  for (float x : {88.38f, 88.5f, 100.0f, 1e30f, std::numeric_limits<float>::infinity()})
    CHECK(ssu_math::exp(x) == std::numeric_limits<float>::infinity());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(ssu_math::exp(nan)));
  CHECK(std::isnan(ssu_math::exp(-nan)));
}

TEST_CASE("int16 quantizer: zero rows, rails, ties to even, NaN and Inf rows") {
  auto both = [](const std::vector<float>& v) {
    const LibRow lib = lib_quantize(v);
    const QuantizedRow ref = ref_quantize_row(v.data(), int64_t(v.size()));
    return std::make_pair(lib, ref);
  };
  auto codes_are = [](const std::vector<int16_t>& got, const std::vector<int16_t>& want) {
    return got == want;
  };
  {  // all zero (either sign): scale 1, codes 0
    const auto r = both({0.0f, -0.0f, 0.0f, 0.0f});
    CHECK(r.first.scale == 1.0f);
    CHECK(r.second.scale == 1.0f);
    CHECK(codes_are(r.first.q, {0, 0, 0, 0}));
    CHECK(codes_are(r.second.q, {0, 0, 0, 0}));
  }
  {  // amax 1: enc 32767; -16383.5 ties to the even -16384; 8191.75 -> 8192
    const auto r = both({1.0f, -0.5f, 0.25f, 0.0f});
    const std::vector<int16_t> want = {32767, -16384, 8192, 0};
    CHECK(codes_are(r.first.q, want));
    CHECK(codes_are(r.second.q, want));
    CHECK(bits_of(r.first.scale) == bits_of(1.0f / 32767.0f));
    CHECK(bits_of(r.second.scale) == bits_of(1.0f / 32767.0f));
  }
  {  // amax 32767: enc 1, every .5 ties to even
    const auto r = both({-32767.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 100.5f, -32766.5f});
    const std::vector<int16_t> want = {-32767, 0, 2, 2, 0, -2, 100, -32766};
    CHECK(codes_are(r.first.q, want));
    CHECK(codes_are(r.second.q, want));
    CHECK(r.first.scale == 1.0f);
    CHECK(r.second.scale == 1.0f);
  }
  {  // the element holding amax lands on a rail, never on -32768
    Rng rng(3);
    for (int i = 0; i < 20000; ++i) {
      std::vector<float> v(1 + rng.next() % 40);
      const float big = float(std::ldexp(1.0 + rng.uniform(), int(rng.next() % 60) - 29));
      for (auto& x : v)
        x = big * float((rng.uniform() * 2 - 1) * std::ldexp(1.0, -int(rng.next() % 20)));
      const size_t at = size_t(rng.next() % v.size());
      v[at] = rng.next() % 2 ? big : -big;
      const auto r = both(v);
      bool ok = r.first.q == r.second.q && bits_of(r.first.scale) == bits_of(r.second.scale);
      ok = ok && (r.first.q[at] == 32767 || r.first.q[at] == -32767);
      for (int16_t q : r.first.q) ok = ok && q != -32768;
      if (!ok) FAIL_CHECK("row " << i << " (amax " << big << "): library and reference differ "
                                 "or amax is off the rails");
    }
  }
  {  // NaN row: codes 0, NaN scale; Inf row: codes 0, +Inf scale; both load as NaN
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (const std::vector<float>& v :
         {std::vector<float>{1.0f, nan, 2.0f}, std::vector<float>{nan, inf, -3.0f},
          std::vector<float>{-nan, 0.0f}}) {
      const auto r = both(v);
      CHECK(std::isnan(r.first.scale));
      CHECK(std::isnan(r.second.scale));
      CHECK(codes_are(r.first.q, std::vector<int16_t>(v.size(), 0)));
      CHECK(codes_are(r.second.q, std::vector<int16_t>(v.size(), 0)));
      CHECK(std::isnan(ref_dequantize(0, r.first.scale)));
    }
    for (const std::vector<float>& v :
         {std::vector<float>{1.0f, inf, -2.0f}, std::vector<float>{-inf, 0.5f},
          std::vector<float>{-inf, inf}}) {
      const auto r = both(v);
      CHECK(r.first.scale == inf);
      CHECK(r.second.scale == inf);
      CHECK(codes_are(r.first.q, std::vector<int16_t>(v.size(), 0)));
      CHECK(codes_are(r.second.q, std::vector<int16_t>(v.size(), 0)));
      CHECK(std::isnan(ref_dequantize(0, r.first.scale)));
    }
  }
}

// The pipelined CUDA kernel quantizes a finite row without the clamp to
// +-32767 (kernels/ssu_pipelined.cu): |fl(v * enc)| <= fl(amax * enc) must
// stay below 32767.5 for every finite amax whose factor is finite. Scaling
// amax by a power of two scales enc exactly, so every mantissa of [1, 2)
// (and subnormal and huge amax on their own) covers the cases.
TEST_CASE("int16 quantizer: on a finite row the clamp never changes a code") {
  auto check_amax = [](float amax) {
    const float enc = ssu_math::int16_encode_factor(amax);
    if (!(enc < 3.0e38f)) return true;  // the kernel's other path
    const float top = amax * enc;
    if (!(top < 32767.5f)) return false;
    for (float v : {amax, -amax, amax * 0.75f, -amax * 0.999f}) {
      const float prod = v * enc;
      if (static_cast<int16_t>(std::nearbyint(prod)) != ssu_math::int16_quantize(v, enc))
        return false;
    }
    return true;
  };
  int64_t bad = 0;
  for (uint32_t m = 0; m < (1u << 23); ++m) {
    float amax;
    const uint32_t bits = 0x3f800000u | m;
    std::memcpy(&amax, &bits, sizeof amax);
    if (!check_amax(amax)) ++bad;
  }
  CHECK(bad == 0);
  Rng rng(11);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng.u32() & 0x7f7fffffu;  // any finite magnitude, subnormals included
    float amax;
    std::memcpy(&amax, &bits, sizeof amax);
    if (amax == 0.0f) continue;
    if (!check_amax(amax)) ++bad;
  }
  CHECK(bad == 0);
}

// ---------------------------------------------------------------------------
// The rounding of a value v with the word of element offset L under many
// seeds: the mean is v (unbiased) and the up/down decisions of neighbouring
// elements are uncorrelated.
TEST_CASE("stochastic rounding: unbiased, and neighbours round independently") {
  const int M = 200000;  // seeds
  struct Probe {
    const Sr* sr;
    float v;
  };
  const Probe probes[] = {
      {&kBF16, 1.0f + 1.0f / 3.0f * 0.0078125f},   // a third of a bf16 ulp above 1
      {&kBF16, -37.2f},
      {&kBF16, 3.0e-3f},
      {&kF16, 1.0f + 0.9f * 0.0009765625f},        // 0.9 of an f16 ulp above 1
      {&kF16, -1234.567f},
      {&kF16, 7.0e-5f},                            // in the smallest f16 binade
  };
  auto value = [](const Sr& s, uint16_t b) {
    return s.lib == lib_f16 ? double(f16_bits_to_float(b)) : double(bf16_bits_to_float(b));
  };
  for (const Probe& pr : probes) {
    const std::string sr_name = pr.sr->name;
    CAPTURE(sr_name);
    CAPTURE(pr.v);
    const double lo = value(*pr.sr, pr.sr->lib(pr.v, 0u));  // truncation
    const double hi_bits_rnd = value(*pr.sr, pr.sr->lib(pr.v, 0xffffffffu));
    REQUIRE(hi_bits_rnd != lo);  // v lies strictly between two neighbours
    const double ulp = std::fabs(hi_bits_rnd - lo);
    const double p = std::fabs(double(pr.v) - lo) / ulp;  // P(round away from zero)
    double sum = 0.0;
    // Up/down indicators of elements L = 0..7 under each seed.
    std::vector<double> up(8 * size_t(M));
    for (int k = 0; k < M; ++k) {
      const uint64_t seed = 0x5eed0000ull + uint64_t(k) * 0x9E3779B97F4A7C15ull;
      for (uint64_t L = 0; L < 8; ++L) {
        const double got = value(*pr.sr, pr.sr->lib(pr.v, ssu_math::sr_word(seed, L, 10)));
        up[size_t(k) * 8 + L] = got != lo ? 1.0 : 0.0;
        if (L == 5) sum += got;
      }
    }
    // The mean of M roundings: within 5 standard deviations of the binomial.
    const double mean = sum / M;
    const double sigma = ulp * std::sqrt(p * (1 - p) / M);
    INFO("mean " << mean << " v " << pr.v << " sigma " << sigma << " p " << p);
    CHECK(std::fabs(mean - double(pr.v)) <= 5 * sigma + 1e-12 * std::fabs(double(pr.v)));
    // Correlation of the decisions of neighbours, inside one Philox call
    // (L, L+1) and across two (3, 4): |r| <= 5 / sqrt(M).
    for (auto pair : {std::pair<int, int>{0, 1}, {1, 2}, {2, 3}, {3, 4}, {0, 4}, {5, 6}}) {
      double sa = 0, sb = 0, sab = 0, saa = 0, sbb = 0;
      for (int k = 0; k < M; ++k) {
        const double a = up[size_t(k) * 8 + size_t(pair.first)];
        const double b = up[size_t(k) * 8 + size_t(pair.second)];
        sa += a; sb += b; sab += a * b; saa += a * a; sbb += b * b;
      }
      const double cov = sab / M - (sa / M) * (sb / M);
      const double va = saa / M - (sa / M) * (sa / M), vb = sbb / M - (sb / M) * (sb / M);
      const double r = cov / std::sqrt(va * vb);
      INFO("elements " << pair.first << ", " << pair.second << ": correlation " << r);
      CHECK(std::fabs(r) <= 5.0 / std::sqrt(double(M)));
      CHECK(std::fabs(sa / M - p) <= 5 * std::sqrt(p * (1 - p) / M));
    }
  }
}

// ---------------------------------------------------------------------------
// Decode loops through the API on the CPU backend.
namespace {

ssu_tensor_t tensor(void* data, ssu_dtype_t dtype, std::vector<int64_t> shape) {
  ssu_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  int64_t s = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    t.shape[k] = shape[size_t(k)];
    t.strides[k] = s;
    s *= shape[size_t(k)];
  }
  return t;
}

struct Cpu {
  ssu_context_t ctx = nullptr;
  Cpu() {
    ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
    o.backend = SSU_BACKEND_CPU;
    o.num_threads = 2;
    REQUIRE(ssu_context_create(&o, &ctx) == SSU_SUCCESS);
  }
  ~Cpu() { ssu_context_destroy(ctx); }
};

// One head of P x N elements, all on the same trajectory: x = 1, B = b,
// dt = d, A = a (no softplus), starting from 1. Returns the state after
// `steps` single-token updates, as floats.
std::vector<double> drift_run(ssu_context_t ctx, ssu_dtype_t state_dtype, bool sr, int steps,
                              int64_t P, int64_t N, float a, float b, float d) {
  std::vector<uint16_t> s16(size_t(P * N));
  std::vector<float> s32(size_t(P * N), 1.0f);
  for (auto& v : s16) v = state_dtype == SSU_DTYPE_F16 ? 0x3C00 : 0x3F80;  // 1.0
  std::vector<float> x(size_t(P), 1.0f), B(size_t(N), b), C(size_t(N), 0.0f),
      out(static_cast<size_t>(P));
  float dt = d, A = a;
  uint64_t seed = 0x0123456789abcdefull;
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  pool.state = tensor(state_dtype == SSU_DTYPE_F32 ? static_cast<void*>(s32.data())
                                                   : static_cast<void*>(s16.data()),
                      state_dtype, {1, 1, P, N});
  ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;
  args.pool = &pool;
  args.x = tensor(x.data(), SSU_DTYPE_F32, {1, 1, P});
  args.dt = tensor(&dt, SSU_DTYPE_F32, {1, 1});
  args.A = tensor(&A, SSU_DTYPE_F32, {1});
  args.B = tensor(B.data(), SSU_DTYPE_F32, {1, 1, N});
  args.C = tensor(C.data(), SSU_DTYPE_F32, {1, 1, N});
  args.out = tensor(out.data(), SSU_DTYPE_F32, {1, 1, P});
  if (sr) args.rounding_seed = &seed;
  ssu_plan_t plan = nullptr;
  REQUIRE_MESSAGE(ssu_plan_create_update(ctx, &args, nullptr, &plan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));
  for (int k = 0; k < steps; ++k) {
    REQUIRE(ssu_plan_execute_update(plan, &args, nullptr) == SSU_SUCCESS);
    if (sr) REQUIRE(ssu_advance_seed(ctx, &seed, 1, nullptr) == SSU_SUCCESS);
  }
  ssu_plan_destroy(plan);
  std::vector<double> r(size_t(P * N));
  for (size_t i = 0; i < r.size(); ++i)
    r[i] = state_dtype == SSU_DTYPE_F32 ? double(s32[i])
           : state_dtype == SSU_DTYPE_F16 ? double(f16_bits_to_float(s16[i]))
                                          : double(bf16_bits_to_float(s16[i]));
  return r;
}

}  // namespace

TEST_CASE("drift: below half an ulp per step, stochastic rounding follows f32, nearest stalls") {
  Cpu cpu;
  // Each step: h <- h * exp(-1e-5) + 2e-4, i.e. about +1.9e-4 near 1: less
  // than half an ulp of f16 (4.9e-4) and of bf16 (3.9e-3) on [1, 2). After
  // 2000 steps the f32 state is about 1.37.
  const int steps = 2000;
  const int64_t P = 64, N = 16;
  const float a = -1e-3f, b = 0.02f, d = 0.01f;
  const std::vector<double> f32 = drift_run(cpu.ctx, SSU_DTYPE_F32, false, steps, P, N, a, b, d);
  for (double v : f32) REQUIRE(v == f32[0]);
  const double target = f32[0];
  CHECK(target > 1.3);
  CHECK(target < 1.45);
  for (ssu_dtype_t st : {SSU_DTYPE_F16, SSU_DTYPE_BF16}) {
    const std::string name = st == SSU_DTYPE_F16 ? "f16" : "bf16";
    CAPTURE(name);
    const double ulp = st == SSU_DTYPE_F16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    // Round to nearest: every element is still exactly 1.
    const std::vector<double> rn = drift_run(cpu.ctx, st, false, steps, P, N, a, b, d);
    for (double v : rn) REQUIRE(v == 1.0);
    // Stochastic rounding: each step adds an independent, zero-mean error of
    // at most one ulp (variance <= ulp^2 / 4) that decays by at most 2% over
    // the run, so after `steps` steps an element's error has a standard
    // deviation below sqrt(steps) * ulp / 2, and the mean over the P*N
    // elements (independent random words) one sqrt(P*N) times smaller.
    const std::vector<double> srv = drift_run(cpu.ctx, st, true, steps, P, N, a, b, d);
    const double elem_sigma = std::sqrt(double(steps)) * ulp / 2;
    const double mean_sigma = elem_sigma / std::sqrt(double(P * N));
    double mean = 0, worst = 0;
    for (double v : srv) {
      mean += v;
      worst = std::max(worst, std::fabs(v - target));
    }
    mean /= double(srv.size());
    INFO("f32 " << target << " sr mean " << mean << " (6 sigma " << 6 * mean_sigma
                << ") worst element " << worst << " (7 sigma " << 7 * elem_sigma << ")");
    MESSAGE(name << ": f32 " << target << ", stochastic mean " << mean << " (bound "
                 << 6 * mean_sigma << "), worst element off by " << worst << " (bound "
                 << 7 * elem_sigma << "); round to nearest stays at 1");
    CHECK(std::fabs(mean - target) <= 6 * mean_sigma);
    CHECK(worst <= 7 * elem_sigma);
    // ... a bound that round to nearest, stuck at 1, misses by far.
    CHECK(std::fabs(1.0 - target) > 5 * 6 * mean_sigma);
  }
}

TEST_CASE("drift: an int16 state over 2000 steps stays within tolerance of float64") {
  Cpu cpu;
  const int steps = 2000;
  const int64_t H = 2, P = 16, N = 16, HPN = H * P * N;
  Rng rng(2024);
  std::vector<int16_t> q(size_t(HPN), 0);
  std::vector<float> scale(size_t(H * P), 1.0f);  // all-zero rows to start
  std::vector<float> x(static_cast<size_t>(H * P)), B(static_cast<size_t>(N)),
      C(static_cast<size_t>(N)), dt(static_cast<size_t>(H)), out(static_cast<size_t>(H * P));
  std::vector<float> A = {-2.0f, -1.0f};
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  pool.state = tensor(q.data(), SSU_DTYPE_I16, {1, H, P, N});
  pool.state_scale = tensor(scale.data(), SSU_DTYPE_F32, {1, H, P});
  ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;
  args.pool = &pool;
  args.x = tensor(x.data(), SSU_DTYPE_F32, {1, H, P});
  args.dt = tensor(dt.data(), SSU_DTYPE_F32, {1, H});
  args.A = tensor(A.data(), SSU_DTYPE_F32, {H});
  args.B = tensor(B.data(), SSU_DTYPE_F32, {1, 1, N});
  args.C = tensor(C.data(), SSU_DTYPE_F32, {1, 1, N});
  args.out = tensor(out.data(), SSU_DTYPE_F32, {1, H, P});
  ssu_plan_t plan = nullptr;
  REQUIRE_MESSAGE(ssu_plan_create_update(cpu.ctx, &args, nullptr, &plan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));

  RefProblem pr;
  pr.form = RefForm::Single;
  pr.S = 1; pr.H = H; pr.P = P; pr.N = N; pr.G = 1;
  pr.batch = 1; pr.T = 1; pr.rows = 1;
  pr.state.assign(size_t(HPN), 0.0);
  pr.A.resize(size_t(HPN));
  for (int64_t i = 0; i < HPN; ++i) pr.A[size_t(i)] = A[size_t(i / (P * N))];
  int bad = 0;
  double worst = 0;  // in units of the allowed error
  for (int k = 0; k < steps; ++k) {
    // Fresh inputs each step; A * dt between -1.5 and -0.5, so the state
    // forgets old errors quickly and stays of order one.
    for (auto& v : x) v = float(rng.uniform() * 2 - 1);
    for (auto& v : B) v = float(rng.uniform() * 2 - 1);
    for (auto& v : dt) v = float(0.5 + 0.25 * rng.uniform());
    REQUIRE(ssu_plan_execute_update(plan, &args, nullptr) == SSU_SUCCESS);
    pr.x.assign(x.begin(), x.end());
    pr.B.assign(B.begin(), B.end());
    pr.C.assign(C.begin(), C.end());
    pr.dt.resize(size_t(H * P));
    for (int64_t i = 0; i < H * P; ++i) pr.dt[size_t(i)] = dt[size_t(i / P)];
    const RefResult r = reference_update(pr);
    pr.state = r.state;  // the reference keeps float64 between tokens
    for (int64_t row = 0; row < H * P; ++row) {
      // SPEC.md section 6: |got - ref| <= 2 * decode scale + 1e-4 * |ref|.
      for (int64_t n = 0; n < N; ++n) {
        const size_t i = size_t(row * N + n);
        const double got = double(ref_dequantize(q[i], scale[size_t(row)]));
        const double lim = 2.0 * double(scale[size_t(row)]) + 1e-4 * std::fabs(r.state[i]);
        worst = std::max(worst, std::fabs(got - r.state[i]) / lim);
        if (!(std::fabs(got - r.state[i]) <= lim) && ++bad <= 10)
          FAIL_CHECK("step " << k << " row " << row << " n " << n << ": got " << got << " ref "
                             << r.state[i] << " tol " << lim);
      }
    }
  }
  MESSAGE("int16 2000 steps: worst error " << worst << " of the tolerance");
  CHECK(bad == 0);
  ssu_plan_destroy(plan);
}

TEST_CASE("ssu_advance_seed on the CPU: adds in place, wraps, refuses NULL") {
  Cpu cpu;
  uint64_t seed = 41;
  CHECK(ssu_advance_seed(cpu.ctx, &seed, 1, nullptr) == SSU_SUCCESS);
  CHECK(seed == 42);
  seed = ~uint64_t(0);
  CHECK(ssu_advance_seed(cpu.ctx, &seed, 3, nullptr) == SSU_SUCCESS);
  CHECK(seed == 2);
  CHECK(ssu_advance_seed(cpu.ctx, &seed, 0, nullptr) == SSU_SUCCESS);
  CHECK(seed == 2);
  CHECK(ssu_advance_seed(cpu.ctx, nullptr, 1, nullptr) == SSU_ERROR_NULL_POINTER);
  CHECK(ssu_advance_seed(nullptr, &seed, 1, nullptr) == SSU_ERROR_BAD_HANDLE);
  CHECK(seed == 2);
}

// ---------------------------------------------------------------------------
// 8-bit block-scaled formats (ssu.h: i8, f8e4m3): the element conversions
// over all 256 E4M3 codes, the row quantizers' edges, stochastic rounding's
// bits and statistics, and rows with special values through the API.
namespace {

// The library's store of a row (kernels/ssu_state8.h), as the CPU backend
// composes it.
ssutest::QuantizedRow8 lib_quantize8(const std::vector<float>& v, ssu_dtype_t dtype,
                                     const uint32_t* words = nullptr) {
  float amax = 0.0f;
  for (float x : v) amax = ssu_math::int16_amax_step(amax, x);
  const bool fp8 = dtype == SSU_DTYPE_F8E4M3;
  const float enc =
      ssu_math::state8_encode_factor(amax, fp8 ? ssu_math::kE4m3Max : ssu_math::kI8Max);
  ssutest::QuantizedRow8 r;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!fp8)
      r.q.push_back(uint8_t(ssu_math::int8_quantize(v[i], enc)));
    else if (ssu_math::e4m3_row_unrepresentable(enc))
      r.q.push_back(ssu_math::kE4m3Nan);
    else if (words)
      r.q.push_back(ssu_math::e4m3_encode_sr(ssu_math::e4m3_scaled(v[i], enc), words[i]));
    else
      r.q.push_back(ssu_math::e4m3_encode_rn(ssu_math::e4m3_scaled(v[i], enc)));
  }
  r.scale = 1.0f / enc;
  return r;
}

}  // namespace

TEST_CASE("e4m3: every code decodes to its OCP E4M3 value; encoding the value gives the code") {
  // Hand-written values of the format: bias 7, 3 mantissa bits, subnormals
  // k * 2^-9, 448 the largest, 0x7F / 0xFF NaN.
  const struct {
    uint8_t code;
    float value;
  } known[] = {{0x00, 0.0f},         {0x01, 0.001953125f}, {0x07, 0.013671875f},
               {0x08, 0.015625f},    {0x38, 1.0f},         {0x39, 1.125f},
               {0x3F, 1.875f},       {0x40, 2.0f},         {0x77, 240.0f},
               {0x7E, 448.0f},       {0x80, -0.0f},        {0x81, -0.001953125f},
               {0xB8, -1.0f},        {0xFE, -448.0f}};
  for (const auto& k : known) {
    CAPTURE(int(k.code));
    CHECK(bits_of(ssu_math::e4m3_decode(k.code)) == bits_of(k.value));
    CHECK(bits_of(ref_e4m3_value(k.code)) == bits_of(k.value));
  }
  int nan_codes = 0;
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = uint8_t(c);
    CAPTURE(c);
    const float lib = ssu_math::e4m3_decode(code), ref = ref_e4m3_value(code);
    if ((c & 0x7f) == 0x7f) {
      CHECK(std::isnan(lib));
      CHECK(std::isnan(ref));
      ++nan_codes;
      continue;
    }
    CHECK(bits_of(lib) == bits_of(ref));
    CHECK(std::fabs(lib) <= 448.0f);
    // Encoding an exact value returns its code, to nearest and under any
    // random bits.
    CHECK(ssu_math::e4m3_encode_rn(lib) == code);
    CHECK(ref_e4m3_rn(lib) == code);
    for (uint32_t rnd : {0u, 1u, 0x7FFFFu, 0xFFFFFu, 0x00FFFFFFu, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
      CHECK(ssu_math::e4m3_encode_sr(lib, rnd) == code);
      CHECK(ref_e4m3_sr(lib, rnd) == code);
    }
  }
  CHECK(nan_codes == 2);
  // Codes increase with the value: the positive codes 0..0x7E are sorted.
  for (int c = 0; c < 0x7E; ++c) CHECK(ssu_math::e4m3_decode(uint8_t(c)) < ssu_math::e4m3_decode(uint8_t(c + 1)));
}

TEST_CASE("e4m3: round to nearest, ties to the even code, at every midpoint") {
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = ssu_math::e4m3_decode(uint8_t(c)), hi = ssu_math::e4m3_decode(uint8_t(c + 1));
    const float mid = 0.5f * (lo + hi);  // 4 significant bits: exact
    REQUIRE(double(mid) == 0.5 * (double(lo) + double(hi)));
    const uint8_t even = uint8_t(c % 2 == 0 ? c : c + 1);
    CAPTURE(c);
    for (float sign : {1.0f, -1.0f}) {
      const uint8_t s = sign < 0 ? 0x80 : 0;
      CHECK(ssu_math::e4m3_encode_rn(sign * mid) == (s | even));
      CHECK(ref_e4m3_rn(sign * mid) == (s | even));
      const float below = std::nextafter(mid, 0.0f), above = std::nextafter(mid, 1000.0f);
      CHECK(ssu_math::e4m3_encode_rn(sign * below) == (s | c));
      CHECK(ssu_math::e4m3_encode_rn(sign * above) == (s | (c + 1)));
      CHECK(ref_e4m3_rn(sign * below) == (s | c));
      CHECK(ref_e4m3_rn(sign * above) == (s | (c + 1)));
    }
  }
  // Below half the smallest subnormal: zero of the value's sign; f32
  // subnormals included.
  CHECK(ssu_math::e4m3_encode_rn(std::ldexp(1.0f, -11)) == 0x00);
  CHECK(ssu_math::e4m3_encode_rn(-std::ldexp(1.0f, -140)) == 0x80);
  CHECK(ssu_math::e4m3_encode_rn(std::ldexp(1.0f, -10)) == 0x00);  // tie: even 0
  CHECK(ssu_math::e4m3_encode_rn(std::nextafter(std::ldexp(1.0f, -10), 1.0f)) == 0x01);
  CHECK(ssu_math::e4m3_encode_rn(448.0f) == 0x7E);
  CHECK(ssu_math::e4m3_encode_rn(-448.0f) == 0xFE);
}

TEST_CASE("e4m3 stochastic rounding: library and reference agree bit for bit; one of two neighbours") {
  Rng rng(77);
  int bad = 0;
  for (int i = 0; i < 400000; ++i) {
    // Magnitudes over the whole range, the subnormal one and far below
    // (fp32 subnormals too), and the top of it.
    float a;
    switch (i % 4) {
      case 0: a = float(rng.uniform(0.0, 448.0)); break;
      case 1: a = float(std::ldexp(rng.uniform(1.0, 2.0), -int(rng.next() % 24) - 6)); break;
      case 2: a = float(std::ldexp(rng.uniform(1.0, 2.0), -int(rng.next() % 140) - 6)); break;
      default: a = float(448.0 - std::ldexp(rng.uniform(), -int(rng.next() % 30))); break;
    }
    if (!(a <= 448.0f)) a = 448.0f;
    const float x = rng.chance(0.5) ? -a : a;
    const uint32_t rnd = rng.u32();
    const uint8_t lib = ssu_math::e4m3_encode_sr(x, rnd), ref = ref_e4m3_sr(x, rnd);
    const uint8_t down = uint8_t((x < 0 ? 0x80 : 0) |
                                 (ref_e4m3_value(ref_e4m3_rn(a)) <= a ? ref_e4m3_rn(a)
                                                                       : ref_e4m3_rn(a) - 1));
    const bool neighbour = (lib & 0x7f) == (down & 0x7f) || (lib & 0x7f) == (down & 0x7f) + 1;
    if ((lib != ref || !neighbour || (lib & 0x7f) > 0x7E || (lib & 0x80) != (down & 0x80)) &&
        ++bad <= 10)
      FAIL_CHECK("x " << x << " (0x" << std::hex << bits_of(x) << ") rnd 0x" << rnd
                      << ": library 0x" << int(lib) << " reference 0x" << int(ref)
                      << " round-down 0x" << int(down) << std::dec);
  }
  CHECK(bad == 0);
  // The bit-pattern definition of the header where d <= 23: the low d bits
  // added to the pattern, then cleared.
  for (int i = 0; i < 100000; ++i) {
    const float a = float(std::ldexp(rng.uniform(1.0, 2.0), -int(rng.next() % 4) - 6)) *
                    (i % 2 ? 1.0f : 64.0f);  // [2^-9, 2^-5) and [2^-3, 2^1)
    const uint32_t u = bits_of(a), rnd = rng.u32();
    const int e = int(u >> 23) - 127;
    const int d = a >= std::ldexp(1.0f, -6) ? 20 : 20 + (-6 - e);
    const uint32_t mask = (1u << d) - 1u;
    const float want = float_of((u + (rnd & mask)) & ~mask);
    if (ssu_math::e4m3_decode(ssu_math::e4m3_encode_sr(a, rnd)) != want && ++bad <= 10)
      FAIL_CHECK("pattern rule: a " << a << " rnd " << rnd << " d " << d);
  }
  CHECK(bad == 0);
}

TEST_CASE("e4m3 stochastic rounding is unbiased: the mean over Philox words is the value") {
  // Values in the normal range, in the subnormal range, below the smallest
  // subnormal, just below 448, and an fp32 subnormal. Each drawn with the
  // element words of many seeds; the mean of the rounded values must be
  // within 5 standard errors of x (the words are uniform: a rounding of x
  // between lo and hi has variance (x - lo)(hi - x)).
  const float xs[] = {1.3f,   -0.7f,     5.0e-3f, 1.2e-3f, -3.0e-4f,
                      2.0e-5f, 440.0f,   0.0159f, 7.1e-8f, std::ldexp(1.5f, -130)};
  const int draws = 40000;
  for (float x : xs) {
    CAPTURE(x);
    const double a = std::fabs(double(x));
    const uint8_t near = ref_e4m3_rn(std::fabs(x));
    const double nv = ref_e4m3_value(near);
    const double lo = nv <= a ? nv : ref_e4m3_value(uint8_t(near - 1));
    const double hi = nv <= a ? (lo == a ? a : ref_e4m3_value(uint8_t(near + 1))) : nv;
    double sum = 0;
    for (int k = 0; k < draws; ++k) {
      const uint32_t w = ssu_math::sr_word(0x9E3779B97F4A7C15ull * uint64_t(k + 1), uint64_t(k), 10);
      sum += double(ssu_math::e4m3_decode(ssu_math::e4m3_encode_sr(x, w)));
    }
    const double mean = sum / draws;
    const double sigma = std::sqrt((a - lo) * (hi - a) / draws);
    INFO("mean " << mean << " sigma " << sigma);
    // Below 2^-18 the header allows a bias of 2^-41.
    CHECK(std::fabs(mean - double(x)) <= 5 * sigma + std::ldexp(1.0, -41));
  }
}

TEST_CASE("8-bit row quantizers: zero rows, rails, ties, subnormal codes, NaN and Inf rows") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto same = [](const ssutest::QuantizedRow8& a, const ssutest::QuantizedRow8& b) {
    return a.q == b.q && bits_of(a.scale) == bits_of(b.scale);
  };
  for (ssu_dtype_t dt : {SSU_DTYPE_I8, SSU_DTYPE_F8E4M3}) {
    const bool fp8 = dt == SSU_DTYPE_F8E4M3;
    CAPTURE(fp8);
    auto both = [&](const std::vector<float>& v) {
      const auto lib = lib_quantize8(v, dt);
      const auto ref = ref_quantize_row8(v.data(), int64_t(v.size()), dt);
      CHECK(lib.q == ref.q);
      CHECK((bits_of(lib.scale) == bits_of(ref.scale) ||
             (std::isnan(lib.scale) && std::isnan(ref.scale))));
      return lib;
    };
    {  // zero row: scale 1, codes 0
      const auto r = both({0.0f, 0.0f, 0.0f});
      CHECK(r.scale == 1.0f);
      CHECK(r.q == std::vector<uint8_t>(3, 0));
    }
    {  // the rails: amax lands on +-QMAX, the factor and scale as in the header
      const float qmax = fp8 ? 448.0f : 127.0f;
      const auto r = both({-3.0f, 1.5f, 3.0f});
      CHECK(bits_of(r.scale) == bits_of(1.0f / (qmax / 3.0f)));
      CHECK(r.q[0] == (fp8 ? 0xFE : uint8_t(int8_t(-127))));
      CHECK(r.q[2] == (fp8 ? 0x7E : 127));
      CHECK(r.q[1] == (fp8 ? 0x76 : 64));  // 224 exactly; 63.5 ties to even 64
    }
    if (!fp8) {  // amax 127: enc 1, every .5 ties to even, never -128
      const auto r = both({-127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 100.5f, -126.5f});
      const std::vector<int> want = {-127, 0, 2, 2, 0, -2, 100, -126};
      for (size_t i = 0; i < want.size(); ++i) CHECK(int(int8_t(r.q[i])) == want[i]);
      CHECK(r.scale == 1.0f);
    } else {  // amax 448: enc 1; values landing on the subnormal codes k * 2^-9
      std::vector<float> v = {448.0f};
      for (int k = 1; k < 8; ++k) v.push_back(std::ldexp(float(k), -9) * (k % 2 ? 1.0f : -1.0f));
      v.push_back(std::ldexp(1.0f, -10));  // half the smallest subnormal: ties to 0
      v.push_back(std::ldexp(3.0f, -10));  // 1.5 steps: ties to the even 2
      const auto r = both(v);
      CHECK(r.scale == 1.0f);
      CHECK(r.q[0] == 0x7E);
      for (int k = 1; k < 8; ++k) CHECK(r.q[size_t(k)] == ((k % 2 ? 0 : 0x80) | k));
      CHECK(r.q[8] == 0x00);
      CHECK(r.q[9] == 0x02);
    }
    {  // random rows: library and reference agree, the amax element on a rail
      Rng rng(11);
      for (int i = 0; i < 5000; ++i) {
        std::vector<float> v(1 + rng.next() % 40);
        const float big = float(std::ldexp(1.0 + rng.uniform(), int(rng.next() % 60) - 29));
        for (auto& x : v) x = big * float((rng.uniform() * 2 - 1) * std::ldexp(1.0, -int(rng.next() % 20)));
        const size_t at = size_t(rng.next() % v.size());
        v[at] = rng.next() % 2 ? big : -big;
        const auto lib = lib_quantize8(v, dt);
        const auto ref = ref_quantize_row8(v.data(), int64_t(v.size()), dt);
        bool ok = same(lib, ref) && (lib.q[at] & (fp8 ? 0x7f : 0xff)) ==
                                        (fp8 ? 0x7e : (v[at] > 0 ? 127 : 0x81));
        for (uint8_t q : lib.q) ok = ok && (fp8 ? (q & 0x7f) != 0x7f : q != 0x80);
        if (!ok) FAIL_CHECK("row " << i << ": library and reference differ or amax off the rails");
      }
    }
    // NaN row: NaN scale; Inf row: Inf scale; codes 0 (i8) or 0x7F (e4m3);
    // either loads back as all NaN.
    const uint8_t bad_code = fp8 ? 0x7f : 0;
    for (const std::vector<float>& v :
         {std::vector<float>{1.0f, nan, 2.0f}, std::vector<float>{nan, inf, -3.0f}}) {
      const auto r = both(v);
      CHECK(std::isnan(r.scale));
      CHECK(r.q == std::vector<uint8_t>(v.size(), bad_code));
      CHECK(std::isnan(ref_dequantize8(r.q[0], dt, r.scale)));
    }
    for (const std::vector<float>& v :
         {std::vector<float>{1.0f, inf, -2.0f}, std::vector<float>{-inf, 0.0f}}) {
      const auto r = both(v);
      CHECK(r.scale == inf);
      CHECK(r.q == std::vector<uint8_t>(v.size(), bad_code));
      CHECK(std::isnan(ref_dequantize8(r.q[1], dt, r.scale)));
    }
  }
}

TEST_CASE("8-bit states through the API: special rows stored as the header says") {
  // One token with A = 0 and B = 0: every state row is loaded and stored
  // unchanged in fp32, so each stored row is the quantizer's output for the
  // loaded row: NaN rows, Inf rows, zero rows, rails, subnormal codes.
  Cpu cpu;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t H = 1, P = 6, N = 10;
  for (ssu_dtype_t dt : {SSU_DTYPE_I8, SSU_DTYPE_F8E4M3}) {
    const bool fp8 = dt == SSU_DTYPE_F8E4M3;
    CAPTURE(fp8);
    std::vector<uint8_t> q(size_t(2 * H * P * N), 0);
    std::vector<float> scale(size_t(2 * H * P), 1.0f);
    auto row = [&](int64_t p) { return &q[size_t(p * N)]; };
    // Row 0: a NaN (e4m3 code 0x7F; i8 via a NaN scale). Row 1: overflows
    // to Inf on load. Row 2: zeros with a scale of 5. Row 3: the rails and
    // small codes (e4m3 subnormals). Rows 4, 5: random codes, random scales.
    for (int64_t n = 0; n < N; ++n) row(0)[n] = uint8_t(n + 1);
    if (fp8) row(0)[3] = 0x7F; else scale[0] = nan;
    for (int64_t n = 0; n < N; ++n) row(1)[n] = fp8 ? uint8_t(0x70 + n) : uint8_t(100 + n);
    scale[1] = 3.0e38f;
    scale[2] = 5.0f;
    // (No -0: the update adds B * dt * x = +0, which makes it +0.)
    const uint8_t rails[10] = {0x7E, 0xFE, 0x01, 0x81, 0x07, 0x08, 0x03, 0x00, 0x86, 0x3C};
    const uint8_t irails[10] = {127, 0x81, 1, 0xFF, 7, 8, 3, 0, 0, 60};
    for (int64_t n = 0; n < N; ++n) row(3)[n] = fp8 ? rails[n] : irails[n];
    Rng rng(5);
    for (int64_t p = 4; p < 6; ++p) {
      for (int64_t n = 0; n < N; ++n) {
        uint8_t c;
        do c = uint8_t(rng.u32()); while (fp8 ? (c & 0x7f) == 0x7f : c == 0x80);
        row(p)[n] = c;
      }
      scale[size_t(p)] = float(std::ldexp(rng.uniform(1.0, 2.0), int(rng.next() % 20) - 10));
    }
    // The fp32 row each loads as (the header's load rule).
    std::vector<std::vector<float>> loaded;
    for (int64_t p = 0; p < P; ++p) {
      std::vector<float> v;
      for (int64_t n = 0; n < N; ++n) v.push_back(ref_dequantize8(row(p)[n], dt, scale[size_t(p)]));
      loaded.push_back(v);
    }
    CHECK(std::isinf(loaded[1][N - 1]));
    std::vector<float> x(size_t(H * P), 1.0f), dtv(1, 1.0f), A(1, 0.0f), B(size_t(N), 0.0f),
        C(size_t(N), 1.0f), out(size_t(H * P), 0.0f);
    std::vector<int32_t> src = {0}, dst = {1};
    ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
    pool.state = tensor(q.data(), dt, {2, H, P, N});
    pool.state_scale = tensor(scale.data(), SSU_DTYPE_F32, {2, H, P});
    ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;
    args.pool = &pool;
    args.x = tensor(x.data(), SSU_DTYPE_F32, {1, H, P});
    args.dt = tensor(dtv.data(), SSU_DTYPE_F32, {1, H});
    args.A = tensor(A.data(), SSU_DTYPE_F32, {H});
    args.B = tensor(B.data(), SSU_DTYPE_F32, {1, 1, N});
    args.C = tensor(C.data(), SSU_DTYPE_F32, {1, 1, N});
    args.out = tensor(out.data(), SSU_DTYPE_F32, {1, H, P});
    args.src_index = tensor(src.data(), SSU_DTYPE_I32, {1});
    args.dst_index = tensor(dst.data(), SSU_DTYPE_I32, {1});
    ssu_plan_t plan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_update(cpu.ctx, &args, nullptr, &plan) == SSU_SUCCESS,
                    std::string(ssu_last_error_message()));
    REQUIRE(ssu_plan_execute_update(plan, &args, nullptr) == SSU_SUCCESS);
    ssu_plan_destroy(plan);
    for (int64_t p = 0; p < P; ++p) {
      CAPTURE(p);
      const auto want = ref_quantize_row8(loaded[size_t(p)].data(), N, dt);
      const float got_scale = scale[size_t(P + p)];
      const std::vector<uint8_t> got(row(P + p), row(P + p) + N);
      CHECK(got == want.q);
      CHECK((bits_of(got_scale) == bits_of(want.scale) ||
             (std::isnan(got_scale) && std::isnan(want.scale))));
    }
    const uint8_t bad_code = fp8 ? 0x7f : 0;
    CHECK(std::isnan(scale[size_t(P + 0)]));
    CHECK(std::vector<uint8_t>(row(P), row(P) + N) == std::vector<uint8_t>(size_t(N), bad_code));
    CHECK(scale[size_t(P + 1)] == inf);
    CHECK(std::vector<uint8_t>(row(P + 1), row(P + 1) + N) ==
          std::vector<uint8_t>(size_t(N), bad_code));
    CHECK(scale[size_t(P + 2)] == 1.0f);
    CHECK(std::vector<uint8_t>(row(P + 2), row(P + 2) + N) == std::vector<uint8_t>(size_t(N), 0));
    // Rails and small codes come back unchanged (amax on the rail: enc = 1
    // / scale exactly here, scale 1).
    CHECK(std::vector<uint8_t>(row(P + 3), row(P + 3) + N) ==
          std::vector<uint8_t>(row(3), row(3) + N));
    CHECK(scale[size_t(P + 3)] == 1.0f);
    // Source slot untouched.
    CHECK(std::isnan(loaded[0][fp8 ? 3 : 0]));
  }
}

TEST_CASE("8-bit states through the API: e4m3 stochastic rounding is unbiased over seeds") {
  // A = 0, dt = 1, x = 1: the new state is state + B exactly. Element 0 of
  // every row holds 28 (code 0x7E with scale 2^-4) and B[0] = 0, so amax =
  // 28 and enc = 16 exactly; the other elements start at 0 and become B[n]:
  // values in the normal and subnormal E4M3 ranges and below them. The mean
  // of the stored value over many seeds (and the P rows, each with its own
  // words) must be B[n] within 5 standard errors; round to nearest misses
  // it by far for most of them.
  Cpu cpu;
  const int64_t H = 1, P = 8, N = 8;
  const float Bv[N] = {0.0f, 0.3f, 0.0123f, 7.3e-4f, 2.1e-4f, 9.0e-5f, 3.0e-6f, -0.047f};
  std::vector<uint8_t> q(size_t(2 * H * P * N), 0);
  std::vector<float> scale(size_t(2 * H * P), 1.0f);
  for (int64_t p = 0; p < P; ++p) {
    q[size_t(p * N)] = 0x7E;
    scale[size_t(p)] = 0.0625f;
  }
  std::vector<float> x(size_t(H * P), 1.0f), dtv(1, 1.0f), A(1, 0.0f), B(Bv, Bv + N),
      C(size_t(N), 1.0f), out(size_t(H * P), 0.0f);
  std::vector<int32_t> src = {0}, dst = {1};
  uint64_t seed = 0;
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  pool.state = tensor(q.data(), SSU_DTYPE_F8E4M3, {2, H, P, N});
  pool.state_scale = tensor(scale.data(), SSU_DTYPE_F32, {2, H, P});
  ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;
  args.pool = &pool;
  args.x = tensor(x.data(), SSU_DTYPE_F32, {1, H, P});
  args.dt = tensor(dtv.data(), SSU_DTYPE_F32, {1, H});
  args.A = tensor(A.data(), SSU_DTYPE_F32, {H});
  args.B = tensor(B.data(), SSU_DTYPE_F32, {1, 1, N});
  args.C = tensor(C.data(), SSU_DTYPE_F32, {1, 1, N});
  args.out = tensor(out.data(), SSU_DTYPE_F32, {1, H, P});
  args.src_index = tensor(src.data(), SSU_DTYPE_I32, {1});
  args.dst_index = tensor(dst.data(), SSU_DTYPE_I32, {1});
  args.rounding_seed = &seed;
  ssu_plan_t plan = nullptr;
  REQUIRE_MESSAGE(ssu_plan_create_update(cpu.ctx, &args, nullptr, &plan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));
  const int seeds = 3000;
  std::vector<double> sum(size_t(N), 0.0);
  for (int k = 0; k < seeds; ++k) {
    seed = 0x1234567ull + uint64_t(k) * 0x9E3779B97F4A7C15ull;
    REQUIRE(ssu_plan_execute_update(plan, &args, nullptr) == SSU_SUCCESS);
    REQUIRE(scale[size_t(P)] == 0.0625f);
    for (int64_t p = 0; p < P; ++p)
      for (int64_t n = 0; n < N; ++n)
        sum[size_t(n)] += double(ref_dequantize8(q[size_t((P + p) * N + n)], SSU_DTYPE_F8E4M3,
                                                 scale[size_t(P + p)]));
  }
  ssu_plan_destroy(plan);
  const double draws = double(seeds) * double(P);
  for (int64_t n = 1; n < N; ++n) {
    const double v = double(Bv[n]), s = std::fabs(v) * 16.0;  // the scaled value
    const uint8_t near = ref_e4m3_rn(float(s));
    const double nv = ref_e4m3_value(near);
    const double lo = nv <= s ? nv : ref_e4m3_value(uint8_t(near - 1));
    const double hi = nv <= s ? (lo == s ? s : ref_e4m3_value(uint8_t(near + 1))) : nv;
    const double sigma = std::sqrt((s - lo) * (hi - s) / draws) / 16.0;
    const double mean = sum[size_t(n)] / draws;
    CAPTURE(n);
    INFO("B " << v << " mean " << mean << " sigma " << sigma << " nearest "
              << (v < 0 ? -nv : nv) / 16.0);
    CHECK(std::fabs(mean - v) <= 5 * sigma + 1e-12);
  }
  CHECK(sum[0] == 448.0 * 0.0625 * draws);
}
