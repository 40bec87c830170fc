// Float64 reference of the Mamba-3 decode step and of the Mamba-3 rotary
// step (SPEC.md section 3).
//
// Written from the specification alone: it shares no code with the library.
// It works on one dense float64 problem per call, one sequence per batch row:
// the caller gathers each live sequence's pool rows (its source slot) into
// the per-sequence arrays, hands in every input already rounded to its dtype
// (the values the library reads) and scatters the results back where the
// contract says they go. Slot addressing, padding and what stays untouched
// are the harness's business (tests/mamba3_harness.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "ssu.h"

namespace ssutest {

// ---------------------------------------------------------------------------
// The step: per sequence b, head h, row p, column n
//   alpha = exp(A dt); gamma = trap dt; beta = (1 - trap) dt alpha
//   H'[p,n] = alpha H[p,n] + sum_r xproj[r,p] (gamma x[p] B[r,n] + beta xprev[p] Bprev[r,n])
//   y_r[p]  = sum_n H'[p,n] C[r,n] + D x[p] xproj[r,p]
//   with outproj: y_r *= silu(z[p] zproj[r,p]) if z; out[p] = sum_r y_r[p] outproj[r,p]
//   without:      out[r,p] = y_r[p]
// ---------------------------------------------------------------------------
struct Mamba3StepRef {
  int64_t batch = 0, H = 0, P = 0, N = 0, R = 0;
  bool has_D = false, has_z = false, has_outproj = false;

  std::vector<double> A, dt, trap;          // (Bt, H)
  std::vector<double> B, C;                 // (Bt, R, H, N)
  std::vector<double> x, z;                 // (Bt, H, P); z only with has_z
  std::vector<double> D;                    // (H,), only with has_D
  std::vector<double> xproj, zproj, outproj;  // (R, H, P); zproj with has_z,
                                              // outproj with has_outproj
  // Each sequence's pool rows before the step.
  std::vector<double> state;   // (Bt, H, P, N)
  std::vector<double> prev_B;  // (Bt, R, H, N)
  std::vector<double> prev_x;  // (Bt, H, P)
};

struct Mamba3StepResult {
  std::vector<double> state;  // (Bt, H, P, N): H', unrounded
  std::vector<double> out;    // (Bt, H, P) with outproj, else (Bt, R, H, P)
};

Mamba3StepResult reference_mamba3_step(const Mamba3StepRef& problem);

// ---------------------------------------------------------------------------
// The rotary step: per sequence b, head h
//   theta[i] = angle[i] + tanh(rate[i]) pi dt, reduced to [0, 2 pi)
//   v = q + q_bias (k + k_bias); for i < Sa the pair (v[a], v[c]) with
//   (a, c) = (2i, 2i+1), or (i, i + N/2) halved, is rotated by theta[i]:
//   (v[a] cos - v[c] sin, v[a] sin + v[c] cos); other elements keep v.
// ---------------------------------------------------------------------------
struct RotaryRef {
  int64_t batch = 0, H = 0, N = 0, R = 0, Sa = 0;
  bool halved = false, has_q_bias = false, has_k_bias = false;

  std::vector<double> angle;  // (Bt, H, Sa): each sequence's angles before the step
  std::vector<double> rate;   // (Bt, H, Sa)
  std::vector<double> dt;     // (Bt, H)
  std::vector<double> q, k;   // (Bt, R, H, N)
  std::vector<double> q_bias, k_bias;  // (R, H, N), when present
};

struct RotaryResult {
  std::vector<double> angle;  // (Bt, H, Sa), in [0, 2 pi)
  std::vector<double> q, k;   // (Bt, R, H, N), unrounded
};

RotaryResult reference_mamba3_rotary(const RotaryRef& problem);

// The partner of element n in a rotated pair (a, c), or -1 when n passes
// through unrotated; *angle_index is the pair's angle i.
int64_t rotary_partner(int64_t n, int64_t N, int64_t Sa, bool halved, int64_t* angle_index);

// The exact value of a pass-through element as the contract computes it:
// the fp32 sum of the two loaded values, rounded to the output dtype.
double rotary_passthrough(double value, double bias, ssu_dtype_t out_dtype);

// The distance between two angles on the circle (0 <= d <= pi).
double angle_distance(double a, double b);

}  // namespace ssutest
