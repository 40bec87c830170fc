// The tests' random numbers: splitmix64, tiny and reproducible on every
// platform, with the distributions the case generators use.
#pragma once

#include <cmath>
#include <cstdint>

namespace ssutest {

struct Rng {
  uint64_t s;
  // Starts from the raw state `state`.
  explicit Rng(uint64_t state) : s(state) {}
  // Starts from a mixed seed; `salt` keeps the streams of different
  // generators (update cases, Mamba-3 cases) apart.
  static Rng seeded(uint64_t seed, uint64_t salt) { return Rng(seed * 0x9E3779B97F4A7C15ull + salt); }

  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t u32() { return uint32_t(next() >> 32); }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  int64_t below(int64_t n) { return n <= 0 ? 0 : int64_t(next() % uint64_t(n)); }
  bool chance(double p) { return uniform() < p; }
  double normal() {
    double u1 = uniform();
    while (u1 <= 1e-300) u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // A standard normal value kept away from zero (|v| >= 0.05): zeros would
  // hide a missing term.
  double nonzero_normal() {
    const double v = normal();
    if (std::fabs(v) >= 0.05) return v;
    return v < 0 ? v - 0.05 : v + 0.05;
  }
  // Log-uniform in [a, b].
  double log_uniform(double a, double b) { return std::exp(uniform(std::log(a), std::log(b))); }
};

}  // namespace ssutest
