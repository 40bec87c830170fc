// The CPU loops of the replay (checkpointed decode) step and flush op.
//
// A serial pass first reads every sequence's counters (and num_accepted),
// checks them and decides what the sequence does: how many ring entries make
// up its logical state, whether it flushes and where its tokens go in the
// ring. Work items of (sequence, head, block of rows) then fold those entries
// into the checkpoint rows in fp32, store the rows when flushing, and run
// this call's tokens for the outputs. An item owns its rows of the x ring
// (and of a per-channel dt ring), so it appends to them after its own
// reads. B entries are shared by the heads of a group and per-head dt
// entries by the row blocks of a head; both are appended, and the counters
// written, in a last serial pass after every item has read the old entries.
//
// The fold is the plain update's recurrence with its operation order
// (dA = exp(A * delta), h = h * dA + B * (delta * x), two roundings), and
// the stores are the plain update's (ssu_math.h, and ssu_state8.h for the
// 8-bit formats), so a flush stores the bits the update stores after the
// same tokens, in every state format. This file is compiled with
// -ffp-contract=off: no product is fused into an add.
#include "cpu/replay.h"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "cpu/convert.h"
#include "cpu/sequence.h"
#include "cpu/state8_rows.h"
#include "ssu_math.h"
#include "ssu_state8.h"

namespace ssu {
namespace cpu {
namespace {

constexpr int64_t kMaxDstate = 256;
constexpr int64_t kTileFloats = 4096;  // scratch tile: rows * N <= this
constexpr int64_t kMaxRows = 256;      // rows per work item

size_t elem_size(int32_t dtype) { return dtype == SSU_DTYPE_F32 ? 4 : 2; }

// What one sequence of the call does, decided before any item runs.
struct SeqPlan {
  int64_t slot = -1;
  int64_t tok0 = 0, len = 0;  // this call's tokens (packed rows from tok0)
  int64_t fold = 0;           // ring entries 0 .. fold-1 precede the tokens
  int64_t base = 0;           // ring entry of the first token (committed after the step)
  bool skip = true;           // no rows at all (varlen length <= 0)
  bool pad = false;           // zero outputs, no slot access
  bool flush = false;         // store the logical state to ckpt[slot]
};

// ---------------------------------------------------------------------------
// State rows: fp32 loads and the plain update's stores.

inline void load_state_row(const float* src, int64_t n, float* dst, float) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
inline void load_state_row(const f16_t* src, int64_t n, float* dst, float) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
inline void load_state_row(const bf16_t* src, int64_t n, float* dst, float) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
inline void load_state_row(const int16_t* src, int64_t n, float* dst, float scale) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale;
}

inline void store_state_row(const float* v, int64_t n, float* dst, float*, const uint32_t*) {
  std::memcpy(dst, v, static_cast<size_t>(n) * sizeof(float));
}
inline void store_state_row(const float* v, int64_t n, f16_t* dst, float*, const uint32_t* words) {
  if (words) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t bits = ssu_math::f32_to_f16_sr(v[i], words[i]);
      std::memcpy(dst + i, &bits, sizeof bits);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = from_float<f16_t>(v[i]);
  }
}
inline void store_state_row(const float* v, int64_t n, bf16_t* dst, float*, const uint32_t* words) {
  if (words) {
    for (int64_t i = 0; i < n; ++i) dst[i].bits = ssu_math::f32_to_bf16_sr(v[i], words[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = from_float<bf16_t>(v[i]);
  }
}
// int16: codes and the row's decode scale.
inline void store_state_row(const float* v, int64_t n, int16_t* dst, float* scale,
                            const uint32_t*) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = ssu_math::int16_amax_step(amax, v[i]);
  const float enc = ssu_math::int16_encode_factor(amax);
  for (int64_t i = 0; i < n; ++i) dst[i] = ssu_math::int16_quantize(v[i], enc);
  *scale = 1.0f / enc;
}

// 8-bit block-scaled rows (i8, f8e4m3): cpu/state8_rows.h, the plain
// update's own loads and stores.

// The stochastic-rounding words of the pool elements [L0, L0 + n): word
// (L mod 4) of Philox(seed, L - L mod 4).
void fill_sr_words(uint64_t seed, uint32_t rounds, uint64_t L0, int64_t n, uint32_t* out) {
  uint64_t L = L0;
  int64_t i = 0;
  while (i < n) {
    const ssu_math::u32x4 r = ssu_math::philox4x32(seed, L & ~uint64_t{3}, rounds);
    for (uint64_t k = L & 3; k < 4 && i < n; ++k, ++i, ++L) out[i] = r.v[k];
  }
}

// ---------------------------------------------------------------------------
// One recurrence step of one row: h[n] = h[n] * dA + B[n] * dtx with
// dA = exp(A[n] * delta) for a per-channel A (Af given), else dA_h.
inline void row_step(float* st, const float* Af, float dA_h, const float* Bf, float delta,
                     float dtx, int64_t N) {
  if (Af) {
    for (int64_t n = 0; n < N; ++n) {
      const float dA = ssu_math::exp(Af[n] * delta);
      st[n] = st[n] * dA + Bf[n] * dtx;
    }
  } else {
#pragma omp simd
    for (int64_t n = 0; n < N; ++n) st[n] = st[n] * dA_h + Bf[n] * dtx;
  }
}

// The same, returning sum_n h[n] * C[n] (an output; its order is free).
inline float row_step_out(float* st, const float* Af, float dA_h, const float* Bf,
                          const float* Cf, float delta, float dtx, int64_t N) {
  float y = 0.0f;
  if (Af) {
    for (int64_t n = 0; n < N; ++n) {
      const float dA = ssu_math::exp(Af[n] * delta);
      const float hn = st[n] * dA + Bf[n] * dtx;
      st[n] = hn;
      y += hn * Cf[n];
    }
  } else {
#pragma omp simd reduction(+ : y)
    for (int64_t n = 0; n < N; ++n) {
      const float hn = st[n] * dA_h + Bf[n] * dtx;
      st[n] = hn;
      y += hn * Cf[n];
    }
  }
  return y;
}

// delta = dt + dt_bias, softplus20 when asked: the step of (b, token, h, row).
inline float token_delta(const ssu_update_params& p, int64_t b, int64_t tok, int64_t h,
                         int64_t row) {
  float v = load_float(p.dt, p.dt_dtype,
                       b * p.dt_stride_b + tok * p.dt_stride_t + h * p.dt_stride_h +
                           row * p.dt_stride_p);
  if (p.features & SSU_F_HAS_DT_BIAS)
    v += load_float(p.dt_bias, p.dt_bias_dtype, h * p.dt_bias_stride_h + row * p.dt_bias_stride_p);
  if (p.features & SSU_F_DT_SOFTPLUS) v = ssu_math::softplus20(v);
  return v;
}

struct Job {
  const ssu_replay_params* p;
  const SeqPlan* seqs;
  int64_t rows_per_item;
  uint64_t seed;
};

template <typename S>
void run_items(const Job& job, int64_t begin, int64_t end) {
  const ssu_replay_params& rp = *job.p;
  const ssu_update_params& p = rp.u;
  const int64_t H = p.nheads, P = p.dim, N = p.dstate;
  const int64_t rows_per_item = job.rows_per_item;
  const int64_t blocks = (P + rows_per_item - 1) / rows_per_item;
  const uint32_t f = p.features;
  const bool flush_op = rp.rflags & SSU_RF_FLUSH_OP;
  const bool dt_pc = f & SSU_F_DT_PER_CHANNEL;
  const bool A_pc = f & SSU_F_A_PER_CHANNEL;
  const bool has_D = f & SSU_F_HAS_D, has_z = f & SSU_F_HAS_Z;
  const bool write = !(f & SSU_F_DISABLE_UPDATE);
  const bool scaled = is_scaled_state(p.state_dtype);  // i16, i8, f8e4m3
  const bool stochastic = f & SSU_F_STOCHASTIC;
  const bool dt_ring_pc = rp.rflags & SSU_RF_DT_RING_PER_CHANNEL;
  const int64_t head_elems = P * N;
  const size_t in_size = elem_size(p.input_dtype);
  S* const state = static_cast<S*>(p.state);
  float dummy_scale = 0.0f;  // the scale target of unscaled dtypes (never read)

  alignas(64) float tile[kTileFloats];
  alignas(64) float Atile[kTileFloats];
  alignas(64) uint32_t words[kMaxDstate];
  alignas(64) float Bf[kMaxDstate], Cf[kMaxDstate];
  alignas(64) float xr[kMaxRows], dtr[kMaxRows], dAr[kMaxRows], yr[kMaxRows], zr[kMaxRows];

  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / (H * blocks);
    const int64_t h = (item / blocks) % H;
    const int64_t r0 = (item % blocks) * rows_per_item;
    const int64_t rows = std::min(rows_per_item, P - r0);
    const int64_t g = h / p.heads_per_group;
    const SeqPlan& q = job.seqs[b];
    if (q.skip) continue;

    if (q.pad) {  // exact zeros, nothing of the slot touched
      for (int64_t t = 0; t < q.len; ++t) {
        const int64_t tok = q.tok0 + t;
        const int64_t o = b * p.out_stride_b + tok * p.out_stride_t + h * p.out_stride_h + r0;
        for (int64_t r = 0; r < rows; ++r) store_float(p.out, p.input_dtype, o + r, 0.0f);
      }
      continue;
    }

    if (flush_op && !q.flush) continue;  // an empty ring: only the counters change

    const int64_t s = q.slot;
    // Offsets (elements) of this item's first row in a state slot and in a
    // scale row; the rows of an item are consecutive in both.
    const int64_t row_off = h * head_elems + r0 * N;
    const int64_t scale_off = h * P + r0;
    S* const ckpt = state + s * p.state_stride_slot + row_off;
    float* const ckpt_scale =
        scaled ? p.state_scale + s * p.state_scale_stride_slot + scale_off : nullptr;
    for (int64_t r = 0; r < rows; ++r)
      load_state_row(ckpt + r * N, N, tile + r * N, scaled ? ckpt_scale[r] : 0.0f);

    const float A_h = A_pc ? 0.0f : load_float(p.A, p.A_dtype, h * p.A_stride_h);
    if (A_pc)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < N; ++n)
          Atile[r * N + n] = load_float(
              p.A, p.A_dtype, h * p.A_stride_h + (r0 + r) * p.A_stride_p + n * p.A_stride_n);
    auto A_row = [&](int64_t r) -> const float* { return A_pc ? Atile + r * N : nullptr; };

    // ---- fold: the logical state, ckpt advanced by ring entries 0 .. fold-1
    const int64_t x_ring_row = s * rp.ring_x_stride_s + h * rp.ring_x_stride_h + r0;
    const int64_t dt_ring_row =
        s * rp.ring_dt_stride_s + h * rp.ring_dt_stride_h + r0 * rp.ring_dt_stride_p;
    for (int64_t j = 0; j < q.fold; ++j) {
      load_row(rp.ring_B, p.input_dtype,
               s * rp.ring_B_stride_s + j * rp.ring_B_stride_l + g * rp.ring_B_stride_g, N, Bf);
      load_row(rp.ring_x, p.input_dtype, x_ring_row + j * rp.ring_x_stride_l, rows, xr);
      const float* dt_j = rp.ring_dt + dt_ring_row + j * rp.ring_dt_stride_l;
      if (dt_ring_pc) {
        for (int64_t r = 0; r < rows; ++r) dtr[r] = dt_j[r * rp.ring_dt_stride_p];
        if (!A_pc)
          for (int64_t r = 0; r < rows; ++r) dAr[r] = ssu_math::exp(A_h * dtr[r]);
        for (int64_t r = 0; r < rows; ++r)
          row_step(tile + r * N, A_row(r), A_pc ? 0.0f : dAr[r], Bf, dtr[r], dtr[r] * xr[r], N);
      } else {
        const float delta = dt_j[0];
        const float dA = A_pc ? 0.0f : ssu_math::exp(A_h * delta);
        for (int64_t r = 0; r < rows; ++r)
          row_step(tile + r * N, A_row(r), dA, Bf, delta, delta * xr[r], N);
      }
    }

    if (q.flush && write) {
      const uint64_t L0 = static_cast<uint64_t>(s * p.state_stride_slot + row_off);
      for (int64_t r = 0; r < rows; ++r) {
        const uint32_t* w = nullptr;
        if (stochastic) {
          fill_sr_words(job.seed, p.sr_rounds, L0 + static_cast<uint64_t>(r * N), N, words);
          w = words;
        }
        store_state_row(tile + r * N, N, ckpt + r * N, scaled ? ckpt_scale + r : &dummy_scale,
                        w);
      }
    }
    if (flush_op) continue;

    // ---- this call's tokens: outputs, and the x (and per-channel dt) ring
    for (int64_t t = 0; t < q.len; ++t) {
      const int64_t tok = q.tok0 + t;
      load_row(p.B, p.input_dtype, b * p.B_stride_b + tok * p.B_stride_t + g * p.B_stride_g, N, Bf);
      load_row(p.C, p.input_dtype, b * p.C_stride_b + tok * p.C_stride_t + g * p.C_stride_g, N, Cf);
      const int64_t x_row = b * p.x_stride_b + tok * p.x_stride_t + h * p.x_stride_h + r0;
      const int64_t z_row = b * p.z_stride_b + tok * p.z_stride_t + h * p.z_stride_h + r0;
      const int64_t o_row = b * p.out_stride_b + tok * p.out_stride_t + h * p.out_stride_h + r0;
      load_row(p.x, p.input_dtype, x_row, rows, xr);

      if (dt_pc) {
        for (int64_t r = 0; r < rows; ++r) dtr[r] = token_delta(p, b, tok, h, r0 + r);
        if (!A_pc)
          for (int64_t r = 0; r < rows; ++r) dAr[r] = ssu_math::exp(A_h * dtr[r]);
        for (int64_t r = 0; r < rows; ++r)
          yr[r] = row_step_out(tile + r * N, A_row(r), A_pc ? 0.0f : dAr[r], Bf, Cf, dtr[r],
                               dtr[r] * xr[r], N);
      } else {
        const float delta = token_delta(p, b, tok, h, 0);
        const float dA = A_pc ? 0.0f : ssu_math::exp(A_h * delta);
        for (int64_t r = 0; r < rows; ++r) {
          dtr[r] = delta;
          yr[r] = row_step_out(tile + r * N, A_row(r), dA, Bf, Cf, delta, delta * xr[r], N);
        }
      }

      // Output: y + D*x, gated by silu(z), rounded to out's dtype.
      if (has_D)
        for (int64_t r = 0; r < rows; ++r)
          yr[r] += load_float(p.D, p.D_dtype, h * p.D_stride_h + (r0 + r) * p.D_stride_p) * xr[r];
      if (has_z) {
        load_row(p.z, p.input_dtype, z_row, rows, zr);
        for (int64_t r = 0; r < rows; ++r) yr[r] *= zr[r] / (1.0f + ssu_math::exp(-zr[r]));
      }
      for (int64_t r = 0; r < rows; ++r) store_float(p.out, p.input_dtype, o_row + r, yr[r]);

      if (write) {
        const int64_t e = q.base + t;
        std::memcpy(static_cast<char*>(rp.ring_x) +
                        (x_ring_row + e * rp.ring_x_stride_l) * static_cast<int64_t>(in_size),
                    static_cast<const char*>(p.x) + x_row * static_cast<int64_t>(in_size),
                    static_cast<size_t>(rows) * in_size);
        if (dt_ring_pc) {
          float* d = rp.ring_dt + dt_ring_row + e * rp.ring_dt_stride_l;
          for (int64_t r = 0; r < rows; ++r) d[r * rp.ring_dt_stride_p] = dtr[r];
        }
      }
    }
  }
}

void run(void* ctx, int64_t begin, int64_t end) {
  const Job& job = *static_cast<const Job*>(ctx);
  switch (job.p->u.state_dtype) {
    case SSU_DTYPE_F32: run_items<float>(job, begin, end); break;
    case SSU_DTYPE_F16: run_items<f16_t>(job, begin, end); break;
    case SSU_DTYPE_I16: run_items<int16_t>(job, begin, end); break;
    case SSU_DTYPE_I8: run_items<int8_t>(job, begin, end); break;
    case SSU_DTYPE_F8E4M3: run_items<e4m3_t>(job, begin, end); break;
    default: run_items<bf16_t>(job, begin, end); break;
  }
}

// Reads the counters (and num_accepted) of every sequence, checks them, and
// decides what each sequence does. Writes nothing.
std::vector<SeqPlan> plan_sequences(const ssu_replay_params& rp) {
  const ssu_update_params& p = rp.u;
  const bool flush_op = rp.rflags & SSU_RF_FLUSH_OP;
  const bool has_acc = rp.rflags & SSU_RF_HAS_ACCEPTED;
  std::vector<SeqPlan> seqs(static_cast<size_t>(p.batch));
  for (int64_t b = 0; b < p.batch; ++b) {
    SeqPlan& q = seqs[static_cast<size_t>(b)];
    const Sequence sq = resolve_sequence(p, b);
    if ((p.features & SSU_F_VARLEN) && sq.len <= 0) continue;  // no rows: skipped
    q.skip = false;
    q.tok0 = sq.tok0;
    q.len = flush_op ? 0 : std::min(sq.len, p.ntokens);
    if (sq.pad) {
      q.pad = true;
      continue;
    }
    const int64_t s = sq.src;
    q.slot = s;
    const int64_t committed = rp.committed[s * rp.committed_stride];
    const int64_t pending = rp.pending[s * rp.pending_stride];
    if (committed < 0 || pending < 0 || committed + pending > rp.ring_len)
      fail(SSU_ERROR_INVALID_ARGUMENT,
           "ring.committed[%" PRId64 "]=%" PRId64 " and ring.pending[%" PRId64 "]=%" PRId64
           " (slot of %s %" PRId64 ") but both must be >= 0 with a sum <= L=%" PRId64
           "; a fresh slot has both 0",
           s, committed, s, pending, flush_op ? "src_index entry" : "sequence", b, rp.ring_len);
    int64_t accepted = pending;
    if (has_acc) {
      accepted = load_index(rp.num_accepted, rp.accepted_dtype, b * rp.num_accepted_stride);
      if (accepted < 0 || accepted > pending)
        fail(SSU_ERROR_INVALID_ARGUMENT,
             "num_accepted[%" PRId64 "]=%" PRId64 " but ring.pending[%" PRId64 "]=%" PRId64
             "; a sequence accepts 0 .. pending of the previous call's tokens",
             b, accepted, s, pending);
    }
    q.fold = committed + accepted;
    q.flush = flush_op ? q.fold > 0 : q.fold + q.len > rp.ring_len;
    q.base = q.flush ? 0 : q.fold;
  }
  return seqs;
}

// The ring appends shared between items (B entries, per-head dt entries)
// and the counters, once every item has read the old entries.
void append_and_commit(const ssu_replay_params& rp, const std::vector<SeqPlan>& seqs) {
  const ssu_update_params& p = rp.u;
  const bool flush_op = rp.rflags & SSU_RF_FLUSH_OP;
  const bool dt_ring_pc = rp.rflags & SSU_RF_DT_RING_PER_CHANNEL;
  const int64_t G = p.ngroups, H = p.nheads, N = p.dstate;
  const int64_t in_size = static_cast<int64_t>(elem_size(p.input_dtype));
  for (int64_t b = 0; b < p.batch; ++b) {
    const SeqPlan& q = seqs[static_cast<size_t>(b)];
    if (q.skip || q.pad) continue;
    const int64_t s = q.slot;
    if (flush_op) {
      rp.committed[s * rp.committed_stride] = 0;
      rp.pending[s * rp.pending_stride] = 0;
      continue;
    }
    for (int64_t t = 0; t < q.len; ++t) {
      const int64_t tok = q.tok0 + t;
      const int64_t e = q.base + t;
      for (int64_t g = 0; g < G; ++g)
        std::memcpy(static_cast<char*>(rp.ring_B) +
                        (s * rp.ring_B_stride_s + e * rp.ring_B_stride_l + g * rp.ring_B_stride_g) *
                            in_size,
                    static_cast<const char*>(p.B) +
                        (b * p.B_stride_b + tok * p.B_stride_t + g * p.B_stride_g) * in_size,
                    static_cast<size_t>(N * in_size));
      if (!dt_ring_pc)
        for (int64_t h = 0; h < H; ++h)
          rp.ring_dt[s * rp.ring_dt_stride_s + e * rp.ring_dt_stride_l + h * rp.ring_dt_stride_h] =
              token_delta(p, b, tok, h, 0);
    }
    rp.committed[s * rp.committed_stride] = static_cast<int32_t>(q.base);
    rp.pending[s * rp.pending_stride] = static_cast<int32_t>(q.len);
  }
}

}  // namespace

void replay(const ssu_replay_params& rp, ThreadPool& pool) {
  const ssu_update_params& p = rp.u;
  const std::vector<SeqPlan> seqs = plan_sequences(rp);

  Job job;
  job.p = &rp;
  job.seqs = seqs.data();
  // Row blocks small enough for an L1-resident fp32 tile.
  job.rows_per_item = std::max<int64_t>(
      1, std::min<int64_t>(p.dim, std::min<int64_t>(kMaxRows, kTileFloats / p.dstate)));
  // The seed is read when the step runs (a device word on CUDA).
  job.seed = (p.features & SSU_F_STOCHASTIC) ? *p.sr_seed : 0;
  const int64_t blocks = (p.dim + job.rows_per_item - 1) / job.rows_per_item;
  const int64_t items = p.batch * p.nheads * blocks;
  // Aim for ~64 KiB of state per chunk so that small calls stay on one thread.
  const int64_t item_bytes = job.rows_per_item * p.dstate * 4;
  const int64_t grain = std::max<int64_t>(1, (64 << 10) / item_bytes);
  pool.parallel_for(items,
                    std::min<int64_t>(grain, std::max<int64_t>(1, items / (4 * pool.size()))),
                    &run, &job);

  if (!(p.features & SSU_F_DISABLE_UPDATE)) append_and_commit(rp, seqs);
}

}  // namespace cpu
}  // namespace ssu
