// Float64 reference of SPEC.md section 7; see reference_replay.h.
#include "reference_replay.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace ssutest {

ReplayReference::ReplayReference(ReplayModel model, int64_t slots,
                                 const std::vector<double>& initial_ckpt)
    : m_(std::move(model)) {
  const int64_t H = m_.H, P = m_.P, N = m_.N, G = m_.G, L = m_.L;
  if (H < 1 || P < 1 || N < 1 || G < 1 || H % G || L < 1)
    throw std::logic_error("ReplayReference: bad sizes");
  const int64_t HPN = H * P * N;
  if (int64_t(initial_ckpt.size()) != slots * HPN)
    throw std::logic_error("ReplayReference: the initial pool has the wrong size");
  if (int64_t(m_.A.size()) != HPN || (m_.has_D && int64_t(m_.D.size()) != H * P) ||
      (m_.has_dt_bias && int64_t(m_.dt_bias.size()) != H * P))
    throw std::logic_error("ReplayReference: parameters have the wrong size");
  slot_.resize(size_t(slots));
  for (int64_t s = 0; s < slots; ++s) {
    ReplaySlotState& st = slot_[size_t(s)];
    st.ckpt.assign(initial_ckpt.begin() + s * HPN, initial_ckpt.begin() + (s + 1) * HPN);
    st.ring_x.assign(size_t(L * H * P), 0.0);
    st.ring_B.assign(size_t(L * G * N), 0.0);
    st.ring_delta.assign(size_t(L * H * P), 0.0);
  }
}

double ReplayReference::delta(double dt, int64_t h, int64_t p) const {
  double d = dt;
  if (m_.has_dt_bias) d += m_.dt_bias[size_t(h * m_.P + p)];
  if (m_.softplus) d = softplus20(d);
  return d;
}

void ReplayReference::advance(std::vector<double>& h, const double* x, const double* delta,
                              const double* B) const {
  const int64_t H = m_.H, P = m_.P, N = m_.N, hpg = m_.H / m_.G;
  for (int64_t hh = 0; hh < H; ++hh) {
    const double* Bg = B + (hh / hpg) * N;
    for (int64_t p = 0; p < P; ++p) {
      const int64_t hp = hh * P + p;
      const double d = delta[hp], xv = x[hp];
      double* row = &h[size_t(hp * N)];
      const double* Arow = &m_.A[size_t(hp * N)];
      for (int64_t n = 0; n < N; ++n) row[n] = row[n] * std::exp(Arow[n] * d) + (Bg[n] * d) * xv;
    }
  }
}

void ReplayReference::token_output(const std::vector<double>& h, const ReplayToken& tok,
                                   double* out) const {
  const int64_t H = m_.H, P = m_.P, N = m_.N, hpg = m_.H / m_.G;
  for (int64_t hh = 0; hh < H; ++hh) {
    const double* Cg = &tok.C[size_t((hh / hpg) * N)];
    for (int64_t p = 0; p < P; ++p) {
      const int64_t hp = hh * P + p;
      const double* row = &h[size_t(hp * N)];
      double y = 0.0;
      for (int64_t n = 0; n < N; ++n) y += row[n] * Cg[n];
      if (m_.has_D) y += m_.D[size_t(hp)] * tok.x[size_t(hp)];
      if (m_.has_z) {
        const double zv = tok.z[size_t(hp)];
        y *= zv / (1.0 + std::exp(-zv));
      }
      out[hp] = y;
    }
  }
}

std::vector<double> ReplayReference::logical_state(int64_t s, int64_t count) const {
  ReplaySlotState& st = slot_[size_t(s)];
  if (count < 0) count = st.committed;
  if (count > m_.L) throw std::logic_error("ReplayReference: more ring entries than L");
  // Entries are written only behind committed + pending and the checkpoint
  // only by a store, which drops the cache: a cached prefix stays valid.
  if (st.cached_count < 0 || st.cached_count > count) {
    st.cached = st.ckpt;
    st.cached_count = 0;
  }
  const int64_t HP = m_.H * m_.P, GN = m_.G * m_.N;
  for (int64_t e = st.cached_count; e < count; ++e)
    advance(st.cached, &st.ring_x[size_t(e * HP)], &st.ring_delta[size_t(e * HP)],
            &st.ring_B[size_t(e * GN)]);
  st.cached_count = count;
  return st.cached;
}

std::vector<double> ReplayReference::run_tokens(std::vector<double> h,
                                                const std::vector<ReplayToken>& tokens) const {
  const int64_t H = m_.H, P = m_.P, HP = H * P;
  std::vector<double> out(tokens.size() * size_t(HP));
  std::vector<double> d(static_cast<size_t>(HP));
  for (size_t t = 0; t < tokens.size(); ++t) {
    const ReplayToken& tok = tokens[t];
    for (int64_t hh = 0; hh < H; ++hh)
      for (int64_t p = 0; p < P; ++p)
        d[size_t(hh * P + p)] = delta(tok.dt[size_t(hh * P + p)], hh, p);
    advance(h, tok.x.data(), d.data(), tok.B.data());
    token_output(h, tok, &out[t * size_t(HP)]);
  }
  return out;
}

ReplayCommit ReplayReference::begin_step(int64_t s, int64_t accepted, int64_t tokens) {
  ReplaySlotState& st = slot_[size_t(s)];
  if (tokens < 1 || tokens > m_.L) throw std::logic_error("ReplayReference: bad token count");
  const int64_t take = accepted < 0 ? st.pending : accepted;
  if (take > st.pending)
    throw std::logic_error("ReplayReference: num_accepted " + std::to_string(take) +
                           " > pending " + std::to_string(st.pending));
  // 1. Commit.
  st.committed += take;
  st.pending = 0;
  // 2. Flush if the call's tokens do not fit behind the committed ones.
  ReplayCommit r;
  if (st.committed + tokens > m_.L) {
    r.flushed = true;
    r.stored = logical_state(s);
    st.ckpt = r.stored;
    st.committed = 0;
    st.cached_count = -1;
  }
  return r;
}

void ReplayReference::set_checkpoint(int64_t s, const std::vector<double>& values) {
  ReplaySlotState& st = slot_[size_t(s)];
  if (values.size() != st.ckpt.size()) throw std::logic_error("set_checkpoint: wrong size");
  st.ckpt = values;
  st.cached_count = -1;
}

std::vector<double> ReplayReference::finish_step(int64_t s, const std::vector<ReplayToken>& tokens,
                                                 int64_t* first_entry) {
  ReplaySlotState& st = slot_[size_t(s)];
  const int64_t Tb = int64_t(tokens.size());
  if (st.committed + Tb > m_.L) throw std::logic_error("finish_step: the ring would overflow");
  // 3. Outputs from the logical state and this call's tokens.
  const std::vector<double> out = run_tokens(logical_state(s), tokens);
  // 4. Append.
  const int64_t H = m_.H, P = m_.P, HP = H * P, GN = m_.G * m_.N;
  for (int64_t t = 0; t < Tb; ++t) {
    const int64_t e = st.committed + t;
    const ReplayToken& tok = tokens[size_t(t)];
    for (int64_t i = 0; i < HP; ++i) {
      st.ring_x[size_t(e * HP + i)] = tok.x[size_t(i)];
      st.ring_delta[size_t(e * HP + i)] = delta(tok.dt[size_t(i)], i / P, i % P);
    }
    for (int64_t i = 0; i < GN; ++i) st.ring_B[size_t(e * GN + i)] = tok.B[size_t(i)];
  }
  if (first_entry) *first_entry = st.committed;
  st.pending = Tb;
  return out;
}

std::vector<double> ReplayReference::outputs_without_update(
    int64_t s, int64_t accepted, const std::vector<ReplayToken>& tokens) const {
  const ReplaySlotState& st = slot_[size_t(s)];
  const int64_t take = accepted < 0 ? st.pending : accepted;
  if (take > st.pending) throw std::logic_error("outputs_without_update: num_accepted > pending");
  return run_tokens(logical_state(s, st.committed + take), tokens);
}

ReplayCommit ReplayReference::flush_op(int64_t s, int64_t accepted) {
  ReplaySlotState& st = slot_[size_t(s)];
  const int64_t take = accepted < 0 ? st.pending : accepted;
  if (take > st.pending) throw std::logic_error("flush_op: num_accepted > pending");
  st.committed += take;
  st.pending = 0;
  ReplayCommit r;
  if (st.committed > 0) {
    r.flushed = true;
    r.stored = logical_state(s);
    st.ckpt = r.stored;
  }
  st.cached_count = -1;
  st.committed = 0;
  st.pending = 0;
  return r;
}

// ---------------------------------------------------------------------------
void plain_update_f64(const ReplayModel& m, int64_t slots, std::vector<double>& pool,
                      const std::vector<int64_t>& slot_of_entry,
                      const std::vector<std::vector<ReplayToken>>& tokens) {
  const int64_t H = m.H, P = m.P, N = m.N, G = m.G, HP = H * P, GN = G * N;
  RefProblem pr;
  pr.form = RefForm::Varlen;
  pr.S = slots;
  pr.H = H;
  pr.P = P;
  pr.N = N;
  pr.G = G;
  pr.batch = int64_t(slot_of_entry.size());
  pr.softplus = m.softplus;
  pr.has_D = m.has_D;
  pr.has_dt_bias = m.has_dt_bias;
  pr.has_z = m.has_z;
  pr.A = m.A;
  pr.D = m.D;
  pr.dt_bias = m.dt_bias;
  pr.state = pool;
  pr.src = slot_of_entry;
  pr.cu_seqlens.assign(1, 0);
  int64_t T = 1;
  for (const auto& run : tokens) {
    T = std::max<int64_t>(T, int64_t(run.size()));
    pr.cu_seqlens.push_back(pr.cu_seqlens.back() + int64_t(run.size()));
  }
  pr.T = T;
  pr.rows = pr.cu_seqlens.back();
  if (pr.batch == 0 || pr.rows == 0) return;
  for (const auto& run : tokens)
    for (const ReplayToken& tok : run) {
      pr.x.insert(pr.x.end(), tok.x.begin(), tok.x.end());
      pr.dt.insert(pr.dt.end(), tok.dt.begin(), tok.dt.end());
      pr.B.insert(pr.B.end(), tok.B.begin(), tok.B.end());
      pr.C.insert(pr.C.end(), tok.C.begin(), tok.C.end());
      if (m.has_z) pr.z.insert(pr.z.end(), tok.z.begin(), tok.z.end());
      if (int64_t(tok.x.size()) != HP || int64_t(tok.B.size()) != GN)
        throw std::logic_error("plain_update_f64: a token has the wrong size");
    }
  const RefResult r = reference_update(pr);
  pool = r.state;
}

}  // namespace ssutest
