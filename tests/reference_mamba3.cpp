// Float64 reference of the Mamba-3 step and rotary step; see reference_mamba3.h.
#include "reference_mamba3.h"

#include <cmath>
#include <stdexcept>

#include "reference.h"

namespace ssutest {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kTwoPi = 2.0 * kPi;

void need(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("Mamba-3 reference: ") + what);
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

}  // namespace

Mamba3StepResult reference_mamba3_step(const Mamba3StepRef& m) {
  const int64_t Bt = m.batch, H = m.H, P = m.P, N = m.N, R = m.R;
  need(Bt >= 0 && H >= 1 && P >= 1 && N >= 1 && R >= 1, "bad sizes");
  need(m.A.size() == size_t(Bt * H) && m.dt.size() == m.A.size() && m.trap.size() == m.A.size(),
       "A, dt, trap must be (Bt, H)");
  need(m.B.size() == size_t(Bt * R * H * N) && m.C.size() == m.B.size(), "B, C must be (Bt, R, H, N)");
  need(m.x.size() == size_t(Bt * H * P), "x must be (Bt, H, P)");
  need(!m.has_z || m.z.size() == m.x.size(), "z must be (Bt, H, P)");
  need(!m.has_z || m.has_outproj, "z needs outproj");
  need(!m.has_D || m.D.size() == size_t(H), "D must be (H,)");
  need(m.xproj.size() == size_t(R * H * P), "xproj must be (R, H, P)");
  need(!m.has_z || m.zproj.size() == m.xproj.size(), "zproj must be (R, H, P)");
  need(!m.has_outproj || m.outproj.size() == m.xproj.size(), "outproj must be (R, H, P)");
  need(m.state.size() == size_t(Bt * H * P * N), "state must be (Bt, H, P, N)");
  need(m.prev_B.size() == m.B.size(), "prev_B must be (Bt, R, H, N)");
  need(m.prev_x.size() == m.x.size(), "prev_x must be (Bt, H, P)");

  Mamba3StepResult res;
  res.state.assign(m.state.size(), 0.0);
  res.out.assign(size_t(Bt * (m.has_outproj ? 1 : R) * H * P), 0.0);
  std::vector<double> y(static_cast<size_t>(R));
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const size_t bh = size_t(b * H + h);
      const double dt = m.dt[bh], trap = m.trap[bh];
      const double alpha = std::exp(m.A[bh] * dt);
      const double gamma = trap * dt;
      const double beta = (1.0 - trap) * dt * alpha;
      auto bn = [&](const std::vector<double>& v, int64_t r, int64_t n) {
        return v[size_t(((b * R + r) * H + h) * N + n)];
      };
      auto rp = [&](const std::vector<double>& v, int64_t r, int64_t p) {
        return v[size_t((r * H + h) * P + p)];
      };
      for (int64_t p = 0; p < P; ++p) {
        const size_t xp = size_t((b * H + h) * P + p);
        const double x = m.x[xp], xprev = m.prev_x[xp];
        for (int64_t r = 0; r < R; ++r) y[size_t(r)] = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          const size_t at = size_t(((b * H + h) * P + p) * N + n);
          double hn = alpha * m.state[at];
          for (int64_t r = 0; r < R; ++r)
            hn += rp(m.xproj, r, p) * (gamma * x * bn(m.B, r, n) + beta * xprev * bn(m.prev_B, r, n));
          res.state[at] = hn;
          for (int64_t r = 0; r < R; ++r) y[size_t(r)] += hn * bn(m.C, r, n);
        }
        for (int64_t r = 0; r < R; ++r)
          if (m.has_D) y[size_t(r)] += m.D[size_t(h)] * x * rp(m.xproj, r, p);
        if (m.has_outproj) {
          double o = 0.0;
          for (int64_t r = 0; r < R; ++r) {
            double yr = y[size_t(r)];
            if (m.has_z) yr *= silu(m.z[xp] * rp(m.zproj, r, p));
            o += yr * rp(m.outproj, r, p);
          }
          res.out[xp] = o;
        } else {
          for (int64_t r = 0; r < R; ++r)
            res.out[size_t(((b * R + r) * H + h) * P + p)] = y[size_t(r)];
        }
      }
    }
  return res;
}

int64_t rotary_partner(int64_t n, int64_t N, int64_t Sa, bool halved, int64_t* angle_index) {
  int64_t i = -1, partner = -1;
  if (halved) {
    const int64_t half = N / 2;
    if (n < half && n < Sa) {
      i = n;
      partner = n + half;
    } else if (n >= half && n - half < Sa) {
      i = n - half;
      partner = n - half;
    }
  } else if (n / 2 < Sa) {
    i = n / 2;
    partner = n ^ 1;
  }
  if (angle_index) *angle_index = i;
  return partner;
}

double rotary_passthrough(double value, double bias, ssu_dtype_t out_dtype) {
  const float sum = float(value) + float(bias);  // one fp32 add
  return round_to_dtype(double(sum), out_dtype);
}

double angle_distance(double a, double b) {
  double d = std::fmod(std::fabs(a - b), kTwoPi);
  if (d > kPi) d = kTwoPi - d;
  return d;
}

RotaryResult reference_mamba3_rotary(const RotaryRef& m) {
  const int64_t Bt = m.batch, H = m.H, N = m.N, R = m.R, Sa = m.Sa;
  need(Bt >= 0 && H >= 1 && N >= 2 && R >= 1 && Sa >= 1 && Sa <= N / 2, "bad sizes");
  need(m.angle.size() == size_t(Bt * H * Sa) && m.rate.size() == m.angle.size(),
       "angle, rate must be (Bt, H, Sa)");
  need(m.dt.size() == size_t(Bt * H), "dt must be (Bt, H)");
  need(m.q.size() == size_t(Bt * R * H * N) && m.k.size() == m.q.size(), "q, k must be (Bt, R, H, N)");
  need(!m.has_q_bias || m.q_bias.size() == size_t(R * H * N), "q_bias must be (R, H, N)");
  need(!m.has_k_bias || m.k_bias.size() == size_t(R * H * N), "k_bias must be (R, H, N)");

  RotaryResult res;
  res.angle.assign(m.angle.size(), 0.0);
  res.q.assign(m.q.size(), 0.0);
  res.k.assign(m.k.size(), 0.0);
  for (int64_t b = 0; b < Bt; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const double dt = m.dt[size_t(b * H + h)];
      for (int64_t i = 0; i < Sa; ++i) {
        const size_t at = size_t((b * H + h) * Sa + i);
        double theta = m.angle[at] + std::tanh(m.rate[at]) * kPi * dt;
        theta -= kTwoPi * std::floor(theta / kTwoPi);
        if (theta >= kTwoPi) theta -= kTwoPi;
        if (theta < 0.0) theta = 0.0;
        res.angle[at] = theta;
      }
      for (int64_t r = 0; r < R; ++r)
        for (int which = 0; which < 2; ++which) {
          const std::vector<double>& in = which ? m.k : m.q;
          const std::vector<double>& bias = which ? m.k_bias : m.q_bias;
          const bool has_bias = which ? m.has_k_bias : m.has_q_bias;
          std::vector<double>& out = which ? res.k : res.q;
          const size_t row = size_t(((b * R + r) * H + h) * N);
          const size_t brow = size_t((r * H + h) * N);
          auto v = [&](int64_t n) {
            return in[row + size_t(n)] + (has_bias ? bias[brow + size_t(n)] : 0.0);
          };
          for (int64_t n = 0; n < N; ++n) {
            int64_t i = -1;
            const int64_t c = rotary_partner(n, N, Sa, m.halved, &i);
            if (c < 0) {
              out[row + size_t(n)] = v(n);
              continue;
            }
            const double theta = res.angle[size_t((b * H + h) * Sa + i)];
            const double cs = std::cos(theta), sn = std::sin(theta);
            // n is the first of its pair when it is the smaller index.
            out[row + size_t(n)] = n < c ? v(n) * cs - v(c) * sn : v(c) * sn + v(n) * cs;
          }
        }
    }
  return res;
}

}  // namespace ssutest
