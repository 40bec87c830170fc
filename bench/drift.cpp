// ssu-drift: how far each state format drifts from exact arithmetic over a
// long decode. Runs the same sequence of single-token updates on one state
// pool per format (CPU backend, public API only) beside a float64 reference
// that keeps its own state, and reports, at logarithmically spaced steps, the
// state's and the output's error against that reference.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "ssu.h"

namespace {

using bench_cli::parse_double;
using bench_cli::parse_positive;
using bench_cli::shell_quote;
using bench_cli::usage_error;

const char kUsage[] =
    "usage: ssu-drift [options]\n"
    "\n"
    "Runs STEPS single-token selective state updates on the CPU backend with the\n"
    "same inputs for every state format, and compares each format's state pool and\n"
    "outputs with a float64 reference trajectory that keeps its own state (it is\n"
    "never reset from the library's). Every sequence starts from a zero state.\n"
    "\n"
    "Default configuration (Mamba-2-like): batch 4, H=8 P=64 N=128 G=1; x, B, C,\n"
    "z standard normal; dt = softplus(dt_raw + dt_bias) with dt_raw ~ N(0, 1) per\n"
    "step and dt_bias per head, so dt ~ softplus(N(-3, 1)) (mean about 0.07);\n"
    "A = -exp(u) per head with u stratified uniform on [log a_min, log a_max]\n"
    "(head h draws from the h-th of H equal slices, so every run spans the range;\n"
    "defaults 1e-3 and 1, i.e. memories of roughly 12 to 12000 steps at the mean\n"
    "dt); D ~ U(0.5, 1.5) per head; outputs gated by silu(z).\n"
    "\n"
    "Formats: f32, bf16, bf16-sr, f16, f16-sr, i16, i8, e4m3, e4m3-sr (-sr:\n"
    "stochastic rounding, a fixed seed advanced by one per step; i16, i8, e4m3\n"
    "with their f32 decode scale per row).\n"
    "\n"
    "Metrics at each logged step, over the whole pool:\n"
    "  state_rel_rms   ||s - s_ref|| / ||s_ref||\n"
    "  state_max_row   max over rows of max_n |s - s_ref| / max_n |s_ref|\n"
    "  state_row_p99   the 99th percentile of that ratio over the rows\n"
    "  state_mean      mean(s - s_ref) / rms(s_ref)            (signed error)\n"
    "  state_bias      mean((s - s_ref) * sign(s_ref)) / rms(s_ref): > 0 when the\n"
    "                  stored magnitudes run ahead of the exact ones, < 0 when\n"
    "                  they fall behind (a signed mean over values of both signs\n"
    "                  can cancel a real bias; this cannot)\n"
    "  out_rel_rms     ||out - out_ref|| / ||out_ref||\n"
    "\n"
    "options:\n"
    "  --steps K          decode steps (default 2000)\n"
    "  --seed K           seed of the inputs and of stochastic rounding (default 1)\n"
    "  --batch B          sequences (default 4)\n"
    "  --heads H  --dim P  --dstate N  --groups G   shape (default 8 64 128 1)\n"
    "  --input-dtype f32|bf16   x, B, C, z, out dtype (default f32, so the output\n"
    "                     error is the state's, not bf16's rounding of out; with\n"
    "                     bf16 the inputs are bf16 values and out is rounded too)\n"
    "  --a-min X  --a-max X     range of -A (default 0.001 1)\n"
    "  --dt-bias-mean X   mean of dt_bias (default -3); per head it is drawn from\n"
    "                     N(X, 0.5)\n"
    "  --formats LIST     comma-separated subset of the formats (default all)\n"
    "  --every-step       compare the state at every step, not only the logged ones\n"
    "                     (the worst row error then covers every step; slower)\n"
    "  --threads K        CPU worker threads incl. the caller (default 1: the\n"
    "                     pool is small, and on a loaded machine waking a second\n"
    "                     thread every call costs more than it saves)\n"
    "  --json FILE        also write every logged step as JSON to FILE\n"
    "  --help             this text\n";

// ---------------------------------------------------------------------------
// Options

struct Options {
  int64_t steps = 2000;
  uint64_t seed = 1;
  int64_t batch = 4, heads = 8, dim = 64, dstate = 128, groups = 1;
  ssu_dtype_t input_dtype = SSU_DTYPE_F32;
  double a_min = 1e-3, a_max = 1.0;
  double dt_bias_mean = -3.0;
  std::vector<std::string> formats;  // empty: all
  int threads = 1;
  bool every_step = false;
  std::string json;
  std::string command_line;
};

const char* const kAllFormats[] = {"f32", "bf16", "bf16-sr", "f16", "f16-sr",
                                   "i16", "i8",   "e4m3",    "e4m3-sr"};

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 0; i < argc; ++i) {
    if (i) o.command_line += ' ';
    o.command_line += shell_quote(argv[i]);
  }
  for (int i = 1; i < argc; ++i) {
    bench_cli::Option opt(argc, argv, &i);
    const std::string& a = opt.name;
    auto value = [&] { return opt.value(); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--steps") {
      o.steps = parse_positive(a, value());
    } else if (a == "--seed") {
      const std::string v = value();
      errno = 0;
      char* end = nullptr;
      o.seed = std::strtoull(v.c_str(), &end, 0);
      if (v.empty() || *end != '\0' || errno != 0) usage_error("--seed needs an integer");
    } else if (a == "--batch") {
      o.batch = parse_positive(a, value());
    } else if (a == "--heads") {
      o.heads = parse_positive(a, value());
    } else if (a == "--dim") {
      o.dim = parse_positive(a, value());
    } else if (a == "--dstate") {
      o.dstate = parse_positive(a, value());
    } else if (a == "--groups") {
      o.groups = parse_positive(a, value());
    } else if (a == "--input-dtype") {
      const std::string v = value();
      if (v == "f32") o.input_dtype = SSU_DTYPE_F32;
      else if (v == "bf16") o.input_dtype = SSU_DTYPE_BF16;
      else usage_error("--input-dtype must be f32 or bf16, got '" + v + "'");
    } else if (a == "--a-min") {
      o.a_min = parse_double(a, value());
    } else if (a == "--a-max") {
      o.a_max = parse_double(a, value());
    } else if (a == "--dt-bias-mean") {
      o.dt_bias_mean = parse_double(a, value());
    } else if (a == "--formats") {
      std::stringstream ss(value());
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (std::find(std::begin(kAllFormats), std::end(kAllFormats), item) ==
            std::end(kAllFormats))
          usage_error("unknown format '" + item + "'");
        o.formats.push_back(item);
      }
      if (o.formats.empty()) usage_error("--formats needs a list such as bf16,bf16-sr");
    } else if (a == "--every-step") {
      o.every_step = true;
    } else if (a == "--threads") {
      o.threads = int(parse_positive(a, value()));
    } else if (a == "--json") {
      o.json = value();
      if (o.json.empty()) usage_error("--json needs a file name");
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (o.heads % o.groups != 0) usage_error("--heads must be a multiple of --groups");
  if (!(o.a_min > 0 && o.a_max >= o.a_min)) usage_error("need 0 < --a-min <= --a-max");
  if (o.formats.empty()) o.formats.assign(std::begin(kAllFormats), std::end(kAllFormats));
  return o;
}

// ---------------------------------------------------------------------------
// Random inputs: splitmix64 and Box-Muller, so that a seed gives the same
// inputs with every compiler and standard library.

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x5d1f7ull) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal() {
    double u1 = uniform();
    while (u1 <= 1e-300) u1 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * uniform());
  }
};

// ---------------------------------------------------------------------------
// Element decoders, written from ssu.h's description of each format (the
// library's own conversions are not public, and reusing them would hide a
// conversion bug from the study).

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bf16_value(uint16_t b) { return bits_float(uint32_t(b) << 16); }

float f16_value(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    const float mag = std::ldexp(float(m), -24);
    return sign ? -mag : mag;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// The bf16 value nearest to v, ties to even: what a bf16 input holds.
uint16_t bf16_rne(float v) {
  uint32_t u = float_bits(v);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// OCP E4M3: bias 7, 3 mantissa bits, subnormals m * 2^-9, 0x7F / 0xFF NaN.
std::vector<double> e4m3_table() {
  std::vector<double> t(256);
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 15, m = c & 7;
    double mag = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    if (e == 15 && m == 7) mag = NAN;
    t[size_t(c)] = (c & 0x80) ? -mag : mag;
  }
  return t;
}

// ---------------------------------------------------------------------------
// The problem

struct Shape {
  int64_t Bt, H, P, N, G;
  int64_t rows() const { return Bt * H * P; }    // state rows (b, h, p)
  int64_t elements() const { return rows() * N; }
};

ssu_tensor_t tensor(void* data, ssu_dtype_t dtype, std::vector<int64_t> shape) {
  ssu_tensor_t t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  int64_t stride = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    t.shape[k] = shape[size_t(k)];
    t.strides[k] = stride;
    stride *= shape[size_t(k)];
  }
  return t;
}

// Per-head parameters and one step's inputs as the library reads them: f32
// values (each exact in double for the reference), and for bf16 inputs the
// bf16 bits of the same values.
struct Params {
  std::vector<float> A, D, dt_bias;  // (H,)
};

struct StepInputs {
  // The values, already rounded to the input dtype.
  std::vector<float> x, z;      // (Bt, H, P)
  std::vector<float> B, C;      // (Bt, G, N)
  std::vector<float> dt;        // (Bt, H), f32 always
  // bf16 copies when the inputs are bf16.
  std::vector<uint16_t> x16, z16, B16, C16;
};

Params make_params(const Options& o, Rng& rng) {
  Params p;
  const double lo = std::log(o.a_min), hi = std::log(o.a_max);
  for (int64_t h = 0; h < o.heads; ++h) {
    // Stratified: head h draws from slice h of [lo, hi], so even 8 heads span
    // short and long memories.
    const double u = (double(h) + rng.uniform()) / double(o.heads);
    p.A.push_back(float(-std::exp(lo + u * (hi - lo))));
    p.D.push_back(float(0.5 + rng.uniform()));
    p.dt_bias.push_back(float(o.dt_bias_mean + 0.5 * rng.normal()));
  }
  return p;
}

void draw_inputs(const Options& o, const Shape& s, Rng& rng, StepInputs& in) {
  const bool bf16 = o.input_dtype == SSU_DTYPE_BF16;
  auto fill = [&](std::vector<float>& v, std::vector<uint16_t>& v16, int64_t n) {
    v.resize(size_t(n));
    if (bf16) v16.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      const float f = float(rng.normal());
      if (bf16) {
        v16[size_t(i)] = bf16_rne(f);
        v[size_t(i)] = bf16_value(v16[size_t(i)]);
      } else {
        v[size_t(i)] = f;
      }
    }
  };
  fill(in.x, in.x16, s.Bt * s.H * s.P);
  fill(in.z, in.z16, s.Bt * s.H * s.P);
  fill(in.B, in.B16, s.Bt * s.G * s.N);
  fill(in.C, in.C16, s.Bt * s.G * s.N);
  in.dt.resize(size_t(s.Bt * s.H));
  for (auto& v : in.dt) v = float(rng.normal());
}

// The float64 reference (ssu.h, ssu_update_args_t): per sequence b, head h,
// row p, with delta = softplus(dt + dt_bias) (threshold 20),
//   s[n] = exp(A * delta) * s[n] + (B[n] * delta) * x[p]
//   out  = (sum_n s[n] * C[n] + D * x[p]) * silu(z[p]).
// Its state is its own: it starts from zero and never reads the library's.
struct Reference {
  Shape s;
  std::vector<double> state;  // (Bt, H, P, N)
  std::vector<double> out;    // (Bt, H, P)
  explicit Reference(const Shape& shape)
      : s(shape), state(size_t(shape.elements()), 0.0), out(size_t(shape.rows()), 0.0) {}

  void step(const Params& prm, const StepInputs& in) {
    const int64_t heads_per_group = s.H / s.G;
    for (int64_t b = 0; b < s.Bt; ++b)
      for (int64_t h = 0; h < s.H; ++h) {
        const double v = double(in.dt[size_t(b * s.H + h)]) + double(prm.dt_bias[size_t(h)]);
        const double delta = v > 20.0 ? v : std::log1p(std::exp(v));
        const double dA = std::exp(double(prm.A[size_t(h)]) * delta);
        const int64_t g = h / heads_per_group;
        const float* B = &in.B[size_t((b * s.G + g) * s.N)];
        const float* C = &in.C[size_t((b * s.G + g) * s.N)];
        for (int64_t p = 0; p < s.P; ++p) {
          const int64_t row = (b * s.H + h) * s.P + p;
          const double x = in.x[size_t(row)], z = in.z[size_t(row)];
          double* st = &state[size_t(row * s.N)];
          double y = 0.0;
          for (int64_t n = 0; n < s.N; ++n) {
            st[n] = dA * st[n] + (double(B[n]) * delta) * x;
            y += st[n] * double(C[n]);
          }
          y += double(prm.D[size_t(h)]) * x;
          out[size_t(row)] = y * (z / (1.0 + std::exp(-z)));
        }
      }
  }
};

// ---------------------------------------------------------------------------
// One state format under study: its pool, its plan and its error history.

struct Metrics {
  int64_t step = 0;
  double state_rel_rms = 0, state_max_row = 0, state_row_p99 = 0, state_mean = 0,
         state_bias = 0;
  double out_rel_rms = 0;
  std::vector<double> head_rel_rms;  // per head, over sequences, rows, columns
};

struct Format {
  std::string name;
  ssu_dtype_t dtype = SSU_DTYPE_F32;
  bool sr = false;
  std::vector<unsigned char> state;  // (Bt, H, P, N) codes
  std::vector<float> scale;          // (Bt, H, P) for the scaled formats
  std::vector<unsigned char> out;    // (Bt, H, P) in the input dtype
  uint64_t seed = 0;
  ssu_plan_t plan = nullptr;
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  std::vector<Metrics> log;
  double worst_max_row = 0;  // over the compared steps
  int64_t worst_step = 0;
  double seconds = 0;        // library time spent in this format's updates
  bool scaled() const {
    return dtype == SSU_DTYPE_I16 || dtype == SSU_DTYPE_I8 || dtype == SSU_DTYPE_F8E4M3;
  }
};

ssu_dtype_t format_dtype(const std::string& name) {
  const std::string base = name.substr(0, name.find('-'));
  if (base == "f32") return SSU_DTYPE_F32;
  if (base == "bf16") return SSU_DTYPE_BF16;
  if (base == "f16") return SSU_DTYPE_F16;
  if (base == "i16") return SSU_DTYPE_I16;
  if (base == "i8") return SSU_DTYPE_I8;
  return SSU_DTYPE_F8E4M3;
}

// Decodes row `row` of a format's pool into `v` (N doubles).
struct Decoder {
  std::vector<double> e4m3 = e4m3_table();
  void row(const Format& f, int64_t row, int64_t N, double* v) const {
    const size_t base = size_t(row * N);
    switch (f.dtype) {
      case SSU_DTYPE_F32: {
        const float* q = reinterpret_cast<const float*>(f.state.data()) + base;
        for (int64_t n = 0; n < N; ++n) v[n] = q[n];
        return;
      }
      case SSU_DTYPE_BF16: {
        const uint16_t* q = reinterpret_cast<const uint16_t*>(f.state.data()) + base;
        for (int64_t n = 0; n < N; ++n) v[n] = bf16_value(q[n]);
        return;
      }
      case SSU_DTYPE_F16: {
        const uint16_t* q = reinterpret_cast<const uint16_t*>(f.state.data()) + base;
        for (int64_t n = 0; n < N; ++n) v[n] = f16_value(q[n]);
        return;
      }
      // Scaled rows load as value(q) * scale rounded to fp32 (ssu.h).
      case SSU_DTYPE_I16: {
        const int16_t* q = reinterpret_cast<const int16_t*>(f.state.data()) + base;
        const float sc = f.scale[size_t(row)];
        for (int64_t n = 0; n < N; ++n) v[n] = float(q[n]) * sc;
        return;
      }
      case SSU_DTYPE_I8: {
        const int8_t* q = reinterpret_cast<const int8_t*>(f.state.data()) + base;
        const float sc = f.scale[size_t(row)];
        for (int64_t n = 0; n < N; ++n) v[n] = float(q[n]) * sc;
        return;
      }
      default: {
        const uint8_t* q = f.state.data() + base;
        const float sc = f.scale[size_t(row)];
        for (int64_t n = 0; n < N; ++n) v[n] = float(e4m3[q[n]]) * sc;
        return;
      }
    }
  }
};

[[noreturn]] void api_fail(const char* what, ssu_status_t st) {
  std::fprintf(stderr, "ssu-drift: %s failed: %s (%s)\n", what, ssu_status_string(st),
               ssu_last_error_message());
  std::exit(1);
}

// The update arguments of one format on the current step's inputs.
ssu_update_args_t update_args(Format& f, const Shape& s, const Options& o, Params& prm,
                              StepInputs& in) {
  const bool bf16 = o.input_dtype == SSU_DTYPE_BF16;
  const ssu_dtype_t it = o.input_dtype;
  auto input = [&](std::vector<float>& v, std::vector<uint16_t>& v16) -> void* {
    return bf16 ? static_cast<void*>(v16.data()) : static_cast<void*>(v.data());
  };
  f.pool = SSU_STATE_POOL_INIT;
  f.pool.state = tensor(f.state.data(), f.dtype, {s.Bt, s.H, s.P, s.N});
  if (f.scaled()) f.pool.state_scale = tensor(f.scale.data(), SSU_DTYPE_F32, {s.Bt, s.H, s.P});
  ssu_update_args_t a = SSU_UPDATE_ARGS_INIT;
  a.flags = SSU_UPDATE_DT_SOFTPLUS;
  a.pool = &f.pool;
  a.x = tensor(input(in.x, in.x16), it, {s.Bt, s.H, s.P});
  a.z = tensor(input(in.z, in.z16), it, {s.Bt, s.H, s.P});
  a.B = tensor(input(in.B, in.B16), it, {s.Bt, s.G, s.N});
  a.C = tensor(input(in.C, in.C16), it, {s.Bt, s.G, s.N});
  a.dt = tensor(in.dt.data(), SSU_DTYPE_F32, {s.Bt, s.H});
  a.A = tensor(prm.A.data(), SSU_DTYPE_F32, {s.H});
  a.D = tensor(prm.D.data(), SSU_DTYPE_F32, {s.H});
  a.dt_bias = tensor(prm.dt_bias.data(), SSU_DTYPE_F32, {s.H});
  a.out = tensor(f.out.data(), it, {s.Bt, s.H, s.P});
  if (f.sr) a.rounding_seed = &f.seed;
  return a;
}

// Compares a format's pool and outputs with the reference: one pass over the
// pool, which costs more than most formats' update itself, hence only at the
// logged steps unless --every-step.
Metrics compare(const Format& f, const Shape& s, const Reference& ref, const Decoder& dec,
                ssu_dtype_t input_dtype, int64_t step) {
  Metrics m;
  m.step = step;
  std::vector<double> v(size_t(s.N));
  double err2 = 0, ref2 = 0, sum = 0, toward = 0, worst_row = 0;
  std::vector<double> row_ratio;  // max_n |s - s_ref| / max_n |s_ref| per row
  row_ratio.reserve(size_t(s.rows()));
  std::vector<double> head_err2(size_t(s.H), 0.0), head_ref2(size_t(s.H), 0.0);
  for (int64_t row = 0; row < s.rows(); ++row) {
    dec.row(f, row, s.N, v.data());
    const double* r = &ref.state[size_t(row * s.N)];
    double e2 = 0, r2 = 0, emax = 0, rmax = 0;
    for (int64_t n = 0; n < s.N; ++n) {
      const double d = v[size_t(n)] - r[n];
      e2 += d * d;
      r2 += r[n] * r[n];
      sum += d;
      toward += r[n] < 0 ? -d : d;
      emax = std::max(emax, std::fabs(d));
      rmax = std::max(rmax, std::fabs(r[n]));
    }
    // A NaN anywhere must show, not vanish in max().
    if (std::isnan(e2)) emax = NAN;
    if (rmax > 0) {
      worst_row = std::isnan(emax) ? NAN : std::max(worst_row, emax / rmax);
      row_ratio.push_back(std::isnan(emax) ? INFINITY : emax / rmax);
    }
    err2 += e2;
    ref2 += r2;
    const int64_t h = (row / s.P) % s.H;
    head_err2[size_t(h)] += e2;
    head_ref2[size_t(h)] += r2;
  }
  const double count = double(s.elements());
  const double ref_rms = std::sqrt(ref2 / count);
  m.state_rel_rms = std::sqrt(err2 / ref2);
  m.state_max_row = worst_row;
  // The worst row alone can be one outlier among thousands; the 99th
  // percentile says whether it is.
  if (!row_ratio.empty()) {
    const size_t k = size_t(0.99 * double(row_ratio.size() - 1));
    std::nth_element(row_ratio.begin(), row_ratio.begin() + std::ptrdiff_t(k), row_ratio.end());
    m.state_row_p99 = row_ratio[k];
  }
  m.state_mean = sum / count / ref_rms;
  m.state_bias = toward / count / ref_rms;
  for (int64_t h = 0; h < s.H; ++h)
    m.head_rel_rms.push_back(std::sqrt(head_err2[size_t(h)] / head_ref2[size_t(h)]));

  double oe2 = 0, or2 = 0;
  for (int64_t i = 0; i < s.rows(); ++i) {
    const double got =
        input_dtype == SSU_DTYPE_BF16
            ? double(bf16_value(reinterpret_cast<const uint16_t*>(f.out.data())[i]))
            : double(reinterpret_cast<const float*>(f.out.data())[i]);
    const double d = got - ref.out[size_t(i)];
    oe2 += d * d;
    or2 += ref.out[size_t(i)] * ref.out[size_t(i)];
  }
  m.out_rel_rms = std::sqrt(oe2 / or2);
  return m;
}

// Steps that are logged: every step up to 10, then about 24 per decade, the
// table's steps and the last one.
std::vector<int64_t> logged_steps(int64_t steps, const std::vector<int64_t>& table) {
  std::vector<int64_t> out;
  for (int64_t k = 1; k <= std::min<int64_t>(steps, 10); ++k) out.push_back(k);
  for (double e = 1.0; e <= std::log10(double(steps)) + 1e-9; e += 1.0 / 24.0) {
    const int64_t k = int64_t(std::llround(std::pow(10.0, e)));
    if (k <= steps) out.push_back(k);
  }
  for (int64_t k : table)
    if (k <= steps) out.push_back(k);
  out.push_back(steps);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// ---------------------------------------------------------------------------
// Output

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += char(c);
    }
  }
  return o;
}

// JSON has no NaN or Inf: those become null.
std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4e", v);
  return buf;
}

template <typename F>
std::string series(const std::vector<Metrics>& log, F get) {
  std::string s = "[";
  for (size_t i = 0; i < log.size(); ++i) s += (i ? ", " : "") + num(get(log[i]));
  return s + "]";
}

void write_json(const std::string& path, const Options& o, const Shape& s, const Params& prm,
                const std::string& device, const std::string& date,
                const std::vector<Format>& formats, double wall_s) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "ssu-drift: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  auto floats = [](const std::vector<float>& v) {
    std::string r = "[";
    for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + num(double(v[i]));
    return r + "]";
  };
  std::fprintf(f, "{\n  \"tool\": \"ssu-drift\",\n");
  std::fprintf(f, "  \"libssu_version\": \"%s\",\n", json_escape(ssu_version_string()).c_str());
  std::fprintf(f, "  \"device\": \"%s\",\n", json_escape(device).c_str());
  std::fprintf(f, "  \"date\": \"%s\",\n", date.c_str());
  std::fprintf(f, "  \"command\": \"%s\",\n", json_escape(o.command_line).c_str());
  std::fprintf(f, "  \"wall_s\": %.2f,\n", wall_s);
  std::fprintf(f,
               "  \"config\": {\"steps\": %lld, \"seed\": %llu, \"batch\": %lld, \"heads\": %lld, "
               "\"dim\": %lld, \"dstate\": %lld, \"groups\": %lld, \"input_dtype\": \"%s\", "
               "\"a_min\": %g, \"a_max\": %g, \"dt_bias_mean\": %g, \"threads\": %d, "
               "\"every_step\": %s, \"dt_softplus\": true, \"z\": true, \"D\": true, \"initial_state\": \"zero\",\n"
               "    \"A\": %s,\n    \"dt_bias\": %s,\n    \"D_values\": %s},\n",
               (long long)o.steps, (unsigned long long)o.seed, (long long)s.Bt, (long long)s.H,
               (long long)s.P, (long long)s.N, (long long)s.G, ssu_dtype_name(o.input_dtype),
               o.a_min, o.a_max, o.dt_bias_mean, o.threads, o.every_step ? "true" : "false", floats(prm.A).c_str(),
               floats(prm.dt_bias).c_str(), floats(prm.D).c_str());
  std::fprintf(f,
               "  \"metrics\": {\"state_rel_rms\": \"||s - s_ref|| / ||s_ref|| over the pool\", "
               "\"state_max_row\": \"max over rows of max|s - s_ref| / max|s_ref|\", "
               "\"state_row_p99\": \"99th percentile over rows of the same ratio\", "
               "\"state_mean\": \"mean(s - s_ref) / rms(s_ref)\", "
               "\"state_bias\": \"mean((s - s_ref) * sign(s_ref)) / rms(s_ref)\", "
               "\"out_rel_rms\": \"||out - out_ref|| / ||out_ref||\", "
               "\"head_rel_rms\": \"state_rel_rms of each head (rows: steps)\"},\n");
  std::fprintf(f, "  \"formats\": [\n");
  for (size_t i = 0; i < formats.size(); ++i) {
    const Format& fm = formats[i];
    std::string steps = "[";
    for (size_t k = 0; k < fm.log.size(); ++k)
      steps += (k ? ", " : "") + std::to_string(fm.log[k].step);
    steps += "]";
    std::string heads = "[";
    for (size_t k = 0; k < fm.log.size(); ++k) {
      heads += k ? ",\n        [" : "\n        [";
      for (size_t h = 0; h < fm.log[k].head_rel_rms.size(); ++h)
        heads += (h ? ", " : "") + num(fm.log[k].head_rel_rms[h]);
      heads += "]";
    }
    heads += "]";
    std::fprintf(
        f,
        "    {\"name\": \"%s\", \"state_dtype\": \"%s\", \"rounding\": \"%s\", "
        "\"update_seconds\": %.3f, \"worst_state_max_row\": %s, \"worst_step\": %lld,\n"
        "     \"steps\": %s,\n     \"state_rel_rms\": %s,\n     \"state_max_row\": %s,\n"
        "     \"state_row_p99\": %s,\n"
        "     \"state_mean\": %s,\n     \"state_bias\": %s,\n     \"out_rel_rms\": %s,\n"
        "     \"head_rel_rms\": %s}%s\n",
        fm.name.c_str(), ssu_dtype_name(fm.dtype), fm.sr ? "stochastic" : "nearest", fm.seconds,
        num(fm.worst_max_row).c_str(), (long long)fm.worst_step, steps.c_str(),
        series(fm.log, [](const Metrics& m) { return m.state_rel_rms; }).c_str(),
        series(fm.log, [](const Metrics& m) { return m.state_max_row; }).c_str(),
        series(fm.log, [](const Metrics& m) { return m.state_row_p99; }).c_str(),
        series(fm.log, [](const Metrics& m) { return m.state_mean; }).c_str(),
        series(fm.log, [](const Metrics& m) { return m.state_bias; }).c_str(),
        series(fm.log, [](const Metrics& m) { return m.out_rel_rms; }).c_str(), heads.c_str(),
        i + 1 < formats.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
}

// One markdown table per metric: rows are the table's steps, columns formats.
void print_tables(const std::vector<Format>& formats, const std::vector<int64_t>& table,
                  bool every_step) {
  struct Col {
    const char* title;
    double (*get)(const Metrics&);
    const char* fmt;
  };
  const Col cols[] = {
      {"state relative RMS error ||s - s_ref|| / ||s_ref||",
       [](const Metrics& m) { return m.state_rel_rms; }, "%.2e"},
      {"state max abs error / row max |s_ref| (worst row)",
       [](const Metrics& m) { return m.state_max_row; }, "%.2e"},
      {"state max abs error / row max |s_ref|, 99th percentile of the rows",
       [](const Metrics& m) { return m.state_row_p99; }, "%.2e"},
      {"state signed mean error / rms(s_ref)", [](const Metrics& m) { return m.state_mean; },
       "%+.1e"},
      {"state bias mean((s - s_ref) * sign(s_ref)) / rms(s_ref)",
       [](const Metrics& m) { return m.state_bias; }, "%+.1e"},
      {"output relative RMS error", [](const Metrics& m) { return m.out_rel_rms; }, "%.2e"},
  };
  for (const Col& c : cols) {
    std::printf("\n%s\n\n| step |", c.title);
    for (const Format& f : formats) std::printf(" %s |", f.name.c_str());
    std::printf("\n|---:|");
    for (size_t i = 0; i < formats.size(); ++i) std::printf("---:|");
    std::printf("\n");
    for (int64_t k : table) {
      bool any = false;
      std::string line = "| " + std::to_string(k) + " |";
      for (const Format& f : formats) {
        const auto it = std::find_if(f.log.begin(), f.log.end(),
                                     [&](const Metrics& m) { return m.step == k; });
        char buf[32] = "-";
        if (it != f.log.end()) {
          std::snprintf(buf, sizeof buf, c.fmt, c.get(*it));
          any = true;
        }
        line += std::string(" ") + buf + " |";
      }
      if (any) std::printf("%s\n", line.c_str());
    }
  }
  std::printf("\nworst state max abs error / row max over the compared steps (%s)\n\n"
              "| format | worst | at step |\n|---|---:|---:|\n",
              every_step ? "every step" : "the logged steps; --every-step for all");
  for (const Format& f : formats)
    std::printf("| %s | %.2e | %lld |\n", f.name.c_str(), f.worst_max_row,
                (long long)f.worst_step);
}

}  // namespace

int main(int argc, char** argv) {
  bench_cli::program() = "ssu-drift";
  const Options o = parse_args(argc, argv);
  const Shape s{o.batch, o.heads, o.dim, o.dstate, o.groups};

  ssu_context_options_t copt = SSU_CONTEXT_OPTIONS_INIT;
  copt.backend = SSU_BACKEND_CPU;
  copt.num_threads = o.threads;
  ssu_context_t ctx = nullptr;
  if (ssu_status_t st = ssu_context_create(&copt, &ctx)) api_fail("ssu_context_create", st);
  const std::string device = ssu_context_device_name(ctx);
  const std::string date = utc_now();

  // Parameters first, then the per-step inputs from the same stream: a seed
  // fixes the whole run.
  Rng rng(o.seed);
  Params prm = make_params(o, rng);
  StepInputs in;
  draw_inputs(o, s, rng, in);  // shapes only for planning; redrawn per step
  Rng step_rng(o.seed ^ 0xD1F7D1F7ull);

  const size_t in_bytes = o.input_dtype == SSU_DTYPE_BF16 ? 2 : 4;
  std::vector<Format> formats;
  for (const std::string& name : o.formats) {
    Format f;
    f.name = name;
    f.dtype = format_dtype(name);
    f.sr = name.size() > 3 && name.compare(name.size() - 3, 3, "-sr") == 0;
    f.state.assign(size_t(s.elements()) * ssu_dtype_size(f.dtype), 0);  // zero in every format
    if (f.scaled()) f.scale.assign(size_t(s.rows()), 1.0f);
    f.out.assign(size_t(s.rows()) * in_bytes, 0);
    // A distinct seed per format, so that two stochastic formats do not
    // share their random words.
    f.seed = o.seed * 0x2545F4914F6CDD1Dull + uint64_t(formats.size()) + 1;
    formats.push_back(std::move(f));
  }
  for (Format& f : formats) {
    ssu_update_args_t a = update_args(f, s, o, prm, in);
    if (ssu_status_t st = ssu_plan_create_update(ctx, &a, nullptr, &f.plan))
      api_fail(("ssu_plan_create_update (" + f.name + ")").c_str(), st);
  }

  // The table's steps; a longer run adds rows past the default 2000.
  const std::vector<int64_t> table = {1, 10, 100, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
  std::vector<int64_t> table_steps;
  for (int64_t k : table)
    if (k <= o.steps) table_steps.push_back(k);
  if (table_steps.empty() || table_steps.back() != o.steps) table_steps.push_back(o.steps);
  const std::vector<int64_t> logged = logged_steps(o.steps, table_steps);

  std::printf("ssu-drift: %s, libssu %s, %s\n", device.c_str(), ssu_version_string(), date.c_str());
  std::printf("batch %lld, H=%lld P=%lld N=%lld G=%lld, %s inputs, %lld steps, seed %llu\n",
              (long long)s.Bt, (long long)s.H, (long long)s.P, (long long)s.N, (long long)s.G,
              ssu_dtype_name(o.input_dtype), (long long)o.steps, (unsigned long long)o.seed);
  std::printf("A per head:");
  for (float a : prm.A) std::printf(" %.4g", double(a));
  std::printf("\ndt_bias per head:");
  for (float b : prm.dt_bias) std::printf(" %.3g", double(b));
  std::printf("\n");

  Reference ref(s);
  Decoder dec;
  const auto t0 = std::chrono::steady_clock::now();
  size_t next_log = 0;
  for (int64_t step = 1; step <= o.steps; ++step) {
    draw_inputs(o, s, step_rng, in);
    ref.step(prm, in);
    const bool log_now = next_log < logged.size() && logged[next_log] == step;
    for (Format& f : formats) {
      ssu_update_args_t a = update_args(f, s, o, prm, in);
      const auto u0 = std::chrono::steady_clock::now();
      if (ssu_status_t st = ssu_plan_execute_update(f.plan, &a, nullptr))
        api_fail(("ssu_plan_execute_update (" + f.name + ")").c_str(), st);
      f.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - u0).count();
      // Fresh random words for the next step's stores.
      if (f.sr)
        if (ssu_status_t st = ssu_advance_seed(ctx, &f.seed, 1, nullptr))
          api_fail("ssu_advance_seed", st);
      if (!log_now && !o.every_step) continue;
      Metrics m = compare(f, s, ref, dec, o.input_dtype, step);
      if (!(m.state_max_row <= f.worst_max_row)) {
        f.worst_max_row = m.state_max_row;
        f.worst_step = step;
      }
      if (log_now) f.log.push_back(std::move(m));
    }
    if (log_now) ++next_log;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  print_tables(formats, table_steps, o.every_step);
  std::printf("\nlibrary update time per format (s):");
  for (const Format& f : formats) std::printf(" %s %.2f", f.name.c_str(), f.seconds);
  std::printf("\nwall time %.1f s\n", wall);
  if (!o.json.empty()) write_json(o.json, o, s, prm, device, date, formats, wall);

  for (Format& f : formats) ssu_plan_destroy(f.plan);
  ssu_context_destroy(ctx);
  return 0;
}
