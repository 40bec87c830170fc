#include "core/validate_replay.h"

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstring>

#include "core/error.h"
#include "core/tensor_checks.h"
#include "core/validate_update.h"

namespace ssu {
namespace {

using namespace checks;

constexpr uint32_t kKnownFlags = SSU_UPDATE_DT_SOFTPLUS | SSU_UPDATE_DISABLE_STATE_UPDATE;
// The CUDA kernels count a sequence's blocks in the high 16 bits of its
// pending counter, so pending (<= L) must fit the low 16 bits; and the whole
// ring of a sequence is staged in shared memory there.
constexpr int64_t kMaxRingLen = 4096;

template <typename T>
T read_struct(const T* in, const char* name, const char* init_macro) {
  if (in->struct_size < sizeof(T))
    fail(SSU_ERROR_STRUCT_SIZE, "%s->struct_size=%u is smaller than %zu; initialize it with %s",
         name, in->struct_size, sizeof(T), init_macro);
  T v;
  std::memcpy(&v, in, sizeof v);
  return v;
}

// A ring tensor (S, L, A1[, A2]): rank, dtype, shape, dense last axis.
void check_ring_tensor(const ssu_tensor_t& t, const char* name, int rank, const char* layout,
                       ssu_dtype_t dtype, const char* dtype_what, const int64_t* dims,
                       const char* const* dim_what) {
  require(t, name);
  check_rank(t, name, rank, layout);
  if (t.dtype != dtype)
    fail(SSU_ERROR_DTYPE_MISMATCH, "%s.dtype=%s but it must be %s (%s)", name,
         ssu_dtype_name(t.dtype), ssu_dtype_name(dtype), dtype_what);
  for (int i = 0; i < rank; ++i)
    if (dims[i] >= 0) check_dim(t, name, i, dims[i], dim_what[i]);
  check_unit_stride(t, name, rank - 1);
}

void check_counter(const ssu_tensor_t& t, const char* name, int64_t S) {
  require(t, name);
  check_rank(t, name, 1, "(S,)");
  if (t.dtype != SSU_DTYPE_I32)
    fail(SSU_ERROR_BAD_DTYPE, "%s.dtype=%s but the replay counters are i32", name,
         ssu_dtype_name(t.dtype));
  check_dim(t, name, 0, S, "the slot count S (pool.state.shape[0])");
}

// Fills the ring part of `r` from `ring` for a pool of S slots with the
// update problem `u` (shapes, input dtype, per-channel step size).
void read_ring(const ssu_replay_ring_t* ring_in, const ssu_update_params& u, ssu_replay_params* r) {
  if (!ring_in) fail(SSU_ERROR_NULL_POINTER, "args->ring is NULL but the replay ring is required");
  const ssu_replay_ring_t ring = read_struct(ring_in, "ring", "SSU_REPLAY_RING_INIT");
  if (ring.reserved0 != 0)
    fail(SSU_ERROR_INVALID_ARGUMENT, "ring->reserved0=%u but it must be 0", ring.reserved0);
  const int64_t S = u.nslots, H = u.nheads, P = u.dim, N = u.dstate, G = u.ngroups;
  require(ring.x, "ring.x");
  check_rank(ring.x, "ring.x", 4, "(S, L, H, P)");
  const int64_t L = ring.x.shape[1];
  if (L < 1)
    fail(SSU_ERROR_BAD_SHAPE, "ring.x.shape[1] (ring capacity L)=%" PRId64 " but L must be >= 1", L);
  if (L > kMaxRingLen)
    fail(SSU_ERROR_NOT_SUPPORTED, "ring.x.shape[1] (ring capacity L)=%" PRId64 " but L <= %" PRId64
         " is supported", L, kMaxRingLen);
  const char* sl_what[] = {"the slot count S (pool.state.shape[0])", "the ring capacity L (ring.x.shape[1])",
                           "nheads H (pool.state.shape[1])", "dim P (pool.state.shape[2])"};
  const int64_t x_dims[] = {S, L, H, P};
  check_ring_tensor(ring.x, "ring.x", 4, "(S, L, H, P)", u.input_dtype, "the input dtype, x.dtype",
                    x_dims, sl_what);
  const char* b_what[] = {sl_what[0], sl_what[1], "ngroups G (B.shape of the call)",
                          "dstate N (pool.state.shape[3])"};
  const int64_t b_dims[] = {S, L, G, N};
  check_ring_tensor(ring.B, "ring.B", 4, "(S, L, G, N)", u.input_dtype, "the input dtype, x.dtype",
                    b_dims, b_what);
  const bool per_channel = u.features & SSU_F_DT_PER_CHANNEL;
  const int64_t dt_dims[] = {S, L, H, P};
  // With P = 1 a per-channel step size is a per-head one (the update
  // classifies it so), and the Mamba-1 layout's (S, L, H, 1) ring holds
  // exactly the values of an (S, L, H) one: both are accepted.
  const bool dt_rank4 = per_channel || (P == 1 && present(ring.dt) && ring.dt.ndim == 4);
  if (present(ring.dt) && per_channel && ring.dt.ndim != 4)
    fail(SSU_ERROR_BAD_RANK, "ring.dt.ndim=%d but the step size is per channel (dt or dt_bias has "
         "a P axis), so the ring holds (S, L, H, P) f32", ring.dt.ndim);
  if (present(ring.dt) && !dt_rank4 && ring.dt.ndim != 3)
    fail(SSU_ERROR_BAD_RANK, "ring.dt.ndim=%d but the step size is per head, so the ring holds "
         "(S, L, H) f32", ring.dt.ndim);
  check_ring_tensor(ring.dt, "ring.dt", dt_rank4 ? 4 : 3,
                    dt_rank4 ? "(S, L, H, P)" : "(S, L, H)", SSU_DTYPE_F32,
                    "the ring holds the step size in f32", dt_dims, sl_what);
  check_counter(ring.committed, "ring.committed", S);
  check_counter(ring.pending, "ring.pending", S);

  r->ring_len = L;
  r->ring_x = ring.x.data;
  r->ring_x_stride_s = ring.x.strides[0];
  r->ring_x_stride_l = ring.x.strides[1];
  r->ring_x_stride_h = ring.x.strides[2];
  r->ring_B = ring.B.data;
  r->ring_B_stride_s = ring.B.strides[0];
  r->ring_B_stride_l = ring.B.strides[1];
  r->ring_B_stride_g = ring.B.strides[2];
  r->ring_dt = static_cast<float*>(ring.dt.data);
  r->ring_dt_stride_s = ring.dt.strides[0];
  r->ring_dt_stride_l = ring.dt.strides[1];
  r->ring_dt_stride_h = ring.dt.strides[2];
  r->ring_dt_stride_p = per_channel ? ring.dt.strides[3] : 0;
  if (per_channel) r->rflags |= SSU_RF_DT_RING_PER_CHANNEL;
  r->committed = static_cast<int32_t*>(ring.committed.data);
  r->committed_stride = ring.committed.strides[0];
  r->pending = static_cast<int32_t*>(ring.pending.data);
  r->pending_stride = ring.pending.strides[0];
}

void read_accepted(const ssu_tensor_t& t, int64_t batch, const char* batch_what,
                   ssu_replay_params* r) {
  r->accepted_dtype = SSU_DTYPE_I32;
  if (!present(t)) return;
  check_rank(t, "num_accepted", 1, "(Bt,)");
  check_index_dtype(t, "num_accepted");
  check_dim(t, "num_accepted", 0, batch, batch_what);
  r->num_accepted = t.data;
  r->num_accepted_stride = t.strides[0];
  r->accepted_dtype = t.dtype;
  r->rflags |= SSU_RF_HAS_ACCEPTED;
}

}  // namespace

ssu_replay_params normalize_replay(const ssu_replay_args_t* args_in) {
  if (!args_in) fail(SSU_ERROR_NULL_POINTER, "args is NULL");
  const ssu_replay_args_t a = read_struct(args_in, "args", "SSU_REPLAY_ARGS_INIT");
  if (a.flags & ~kKnownFlags)
    fail(SSU_ERROR_UNKNOWN_FLAG, "args->flags=0x%x has unknown bits 0x%x", a.flags,
         a.flags & ~kKnownFlags);

  // The per-token tensors and the pool are exactly an update's.
  ssu_update_args_t ua;
  std::memset(&ua, 0, sizeof ua);
  ua.struct_size = sizeof ua;
  ua.flags = a.flags;
  ua.pad_slot_id = a.pad_slot_id;
  ua.max_tokens = a.max_tokens;
  ua.pool = a.pool;
  ua.x = a.x;
  ua.dt = a.dt;
  ua.A = a.A;
  ua.B = a.B;
  ua.C = a.C;
  ua.D = a.D;
  ua.dt_bias = a.dt_bias;
  ua.z = a.z;
  ua.out = a.out;
  ua.src_index = a.src_index;
  ua.cu_seqlens = a.cu_seqlens;
  ua.error_word = a.error_word;
  ua.rounding_seed = a.rounding_seed;
  ua.rounding_rounds = a.rounding_rounds;
  ua.reserved1 = a.reserved1;

  ssu_replay_params r;
  std::memset(&r, 0, sizeof r);
  // The checkpoint is the update's pool: its dtype, scale pool and
  // stochastic rounding (f16, bf16, f8e4m3; refused for i8) are checked
  // there. Backends without a format's replay kernels refuse it at plan time.
  r.u = normalize_update(&ua);
  if (r.u.src_stride_t != 0 || (present(a.src_index) && a.src_index.ndim != 1))
    fail(SSU_ERROR_BAD_RANK, "src_index.ndim=%d but a replay step takes one slot per sequence, "
         "(Bt,)", a.src_index.ndim);
  read_ring(a.ring, r.u, &r);
  if (r.u.ntokens > r.ring_len)
    fail(SSU_ERROR_BAD_SHAPE, "the call has T=%" PRId64 " tokens per sequence (%s) but the ring "
         "holds L=%" PRId64 " entries (ring.x.shape[1]); T <= L is required",
         r.u.ntokens, (r.u.features & SSU_F_VARLEN) ? "max_tokens" : "x.shape[1]", r.ring_len);
  read_accepted(a.num_accepted, r.u.batch, "the batch Bt", &r);
  return r;
}

ssu_replay_params normalize_replay_flush(const ssu_replay_flush_args_t* args_in,
                                         const ssu_replay_params& plan) {
  if (!args_in) fail(SSU_ERROR_NULL_POINTER, "args is NULL");
  const ssu_replay_flush_args_t a =
      read_struct(args_in, "args", "SSU_REPLAY_FLUSH_ARGS_INIT");
  if (a.flags != 0)
    fail(SSU_ERROR_UNKNOWN_FLAG, "args->flags=0x%x has unknown bits 0x%x", a.flags, a.flags);
  if (a.reserved1 != 0)
    fail(SSU_ERROR_INVALID_ARGUMENT, "args->reserved1=%u but it must be 0", a.reserved1);
  const ssu_update_params& pu = plan.u;

  ssu_replay_params r;
  std::memset(&r, 0, sizeof r);
  ssu_update_params& u = r.u;
  // Shapes, dtypes and per-channel layouts from the plan; pointers below.
  u.nheads = pu.nheads;
  u.dim = pu.dim;
  u.dstate = pu.dstate;
  u.ngroups = pu.ngroups;
  u.heads_per_group = pu.heads_per_group;
  u.input_dtype = pu.input_dtype;
  u.state_dtype = pu.state_dtype;
  u.dt_dtype = pu.dt_dtype;
  u.D_dtype = pu.D_dtype;
  u.dt_bias_dtype = pu.dt_bias_dtype;
  u.seqlen_dtype = pu.seqlen_dtype;
  u.accepted_dtype = pu.accepted_dtype;
  u.inter_index_dtype = pu.inter_index_dtype;
  u.pad_slot_id = a.pad_slot_id;
  u.error_word = a.error_word;
  u.ntokens = 0;
  u.features = pu.features & (SSU_F_DT_PER_CHANNEL | SSU_F_A_PER_CHANNEL);
  u.features |= SSU_F_HAS_SRC;

  // ---- pool: the plan's state shape and format -------------------------------
  if (!a.pool) fail(SSU_ERROR_NULL_POINTER, "args->pool is NULL but the state pool is required");
  const ssu_state_pool_t pool = read_state_pool(a.pool);
  const ssu_tensor_t& st = pool.state;
  require(st, "pool.state");
  check_rank(st, "pool.state", 4, "(slots, nheads, dim, dstate)");
  check_same_dtype(st, "pool.state", pu.state_dtype, "the plan's pool.state");
  check_dim(st, "pool.state", 1, pu.nheads, "the plan's nheads H");
  check_dim(st, "pool.state", 2, pu.dim, "the plan's dim P");
  check_dim(st, "pool.state", 3, pu.dstate, "the plan's dstate N");
  const int64_t S = st.shape[0], H = pu.nheads, P = pu.dim, N = pu.dstate;
  if (st.strides[3] != 1 || st.strides[2] != N || st.strides[1] != P * N)
    fail(SSU_ERROR_BAD_STRIDE, "pool.state.strides=%s but its inner three axes must be dense: "
         "strides[1..3] = (%" PRId64 ", %" PRId64 ", 1)", strides_str(st).c_str(), P * N, N);
  if (S > 1 && st.strides[0] < H * P * N)
    fail(SSU_ERROR_BAD_STRIDE, "pool.state.strides[0] (slot stride)=%" PRId64 " is smaller than "
         "H*P*N=%" PRId64 "; slots would overlap", st.strides[0], H * P * N);
  if (pool.prev_B.data || pool.prev_x.data || pool.angle_state.data)
    fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "pool holds Mamba-3 pools but a replay flush uses none");
  if (is_scaled_state(pu.state_dtype)) {  // i16, i8, f8e4m3: codes and a scale per row
    const ssu_tensor_t& sc = pool.state_scale;
    if (!present(sc))
      fail(SSU_ERROR_NULL_POINTER, "pool.state_scale.data is NULL but pool.state.dtype=%s needs its "
           "decode scales, an (S, H, P) f32 pool", ssu_dtype_name(st.dtype));
    check_rank(sc, "pool.state_scale", 3, "(slots, nheads, dim)");
    if (sc.dtype != SSU_DTYPE_F32)
      fail(SSU_ERROR_BAD_DTYPE, "pool.state_scale.dtype=%s but it must be f32",
           ssu_dtype_name(sc.dtype));
    check_dim(sc, "pool.state_scale", 0, S, "the slot count S (pool.state.shape[0])");
    check_dim(sc, "pool.state_scale", 1, H, "nheads H");
    check_dim(sc, "pool.state_scale", 2, P, "dim P");
    if ((P > 1 && sc.strides[2] != 1) || (H > 1 && sc.strides[1] != P))
      fail(SSU_ERROR_BAD_STRIDE, "pool.state_scale.strides=%s but its inner two axes must be "
           "dense: strides[1..2] = (%" PRId64 ", 1)", strides_str(sc).c_str(), P);
    if (S > 1 && sc.strides[0] < H * P)
      fail(SSU_ERROR_BAD_STRIDE, "pool.state_scale.strides[0]=%" PRId64 " is smaller than H*P=%"
           PRId64 "; slots would overlap", sc.strides[0], H * P);
    u.state_scale = static_cast<float*>(sc.data);
    u.state_scale_stride_slot = sc.strides[0];
  } else if (present(pool.state_scale)) {
    fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "pool.state_scale is given but pool.state.dtype=%s; "
         "decode scales belong to i16, i8 and f8e4m3 (block-scaled) states only",
         ssu_dtype_name(st.dtype));
  }
  u.state = st.data;
  u.state_stride_slot = st.strides[0];
  u.nslots = S;

  // ---- A: the plan's layout and dtype ----------------------------------------
  require(a.A, "A");
  check_basic(a.A, "A");
  check_same_dtype(a.A, "A", pu.A_dtype, "the plan's A");
  const bool a_pc = pu.features & SSU_F_A_PER_CHANNEL;
  if (a.A.ndim != 1 && a.A.ndim != 3)
    fail(SSU_ERROR_BAD_RANK, "A.ndim=%d but it must be 1 (H,) or 3 (H, P, N)", a.A.ndim);
  check_dim(a.A, "A", 0, H, "the plan's nheads H");
  u.A_stride_h = a.A.strides[0];
  if (a.A.ndim == 3) {
    check_dim(a.A, "A", 1, P, "the plan's dim P");
    check_dim(a.A, "A", 2, N, "the plan's dstate N");
    u.A_stride_p = P > 1 ? a.A.strides[1] : 0;
    u.A_stride_n = N > 1 ? a.A.strides[2] : 0;
  }
  if ((u.A_stride_p != 0 || u.A_stride_n != 0) != a_pc)
    fail(SSU_ERROR_PLAN_MISMATCH, "A is per %s but the plan was made for a per-%s A",
         a_pc ? "head" : "channel", a_pc ? "channel" : "head");
  u.A = a.A.data;
  u.A_dtype = a.A.dtype;

  // ---- slots ---------------------------------------------------------------------
  require(a.src_index, "src_index");
  check_rank(a.src_index, "src_index", 1, "(K,), the slots to flush");
  check_index_dtype(a.src_index, "src_index");
  u.src_index = a.src_index.data;
  u.src_stride_b = a.src_index.strides[0];
  u.index_dtype = a.src_index.dtype;
  u.batch = a.src_index.shape[0];
  u.total_tokens = 0;

  // ---- stochastic rounding: exactly when the plan has it ------------------------
  if (a.rounding_rounds > 32)
    fail(SSU_ERROR_INVALID_ARGUMENT, "rounding_rounds=%u but Philox rounds must be 1..32 (0 means "
         "10)", a.rounding_rounds);
  const bool plan_sr = pu.features & SSU_F_STOCHASTIC;
  if (plan_sr != (a.rounding_seed != nullptr))
    fail(SSU_ERROR_PLAN_MISMATCH, "rounding_seed is %s but the replay plan was made %s "
         "stochastic rounding", a.rounding_seed ? "given" : "NULL", plan_sr ? "with" : "without");
  if (plan_sr) {
    const uint32_t rounds = a.rounding_rounds == 0 ? 10u : a.rounding_rounds;
    if (rounds != pu.sr_rounds)
      fail(SSU_ERROR_PLAN_MISMATCH, "rounding_rounds gives %u Philox rounds but the plan was made "
           "for %u", rounds, pu.sr_rounds);
    u.sr_seed = a.rounding_seed;
    u.sr_rounds = rounds;
    u.features |= SSU_F_STOCHASTIC;
  } else if (a.rounding_rounds != 0) {
    fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "rounding_rounds=%u but rounding_seed is NULL",
         a.rounding_rounds);
  }

  read_ring(a.ring, u, &r);
  if (r.ring_len != plan.ring_len)
    fail(SSU_ERROR_PLAN_MISMATCH, "ring.x.shape[1] (L)=%" PRId64 " but the plan was made for L=%"
         PRId64, r.ring_len, plan.ring_len);
  read_accepted(a.num_accepted, u.batch, "the slot count K (src_index.shape[0])", &r);
  r.rflags |= SSU_RF_FLUSH_OP;
  return r;
}

void check_fits_replay_plan(const ssu_replay_params& plan, const ssu_replay_params& p) {
  check_fits_plan(plan.u, p.u);
  if (p.ring_len != plan.ring_len)
    fail(SSU_ERROR_PLAN_MISMATCH, "ring.x.shape[1] (L)=%" PRId64 " but the plan was made for L=%"
         PRId64, p.ring_len, plan.ring_len);
  const uint32_t diff = p.rflags ^ plan.rflags;
  if (diff & SSU_RF_HAS_ACCEPTED)
    fail(SSU_ERROR_PLAN_MISMATCH, "the presence of num_accepted: the call %s it but the plan was "
         "made %s it", (p.rflags & SSU_RF_HAS_ACCEPTED) ? "has" : "lacks",
         (plan.rflags & SSU_RF_HAS_ACCEPTED) ? "with" : "without");
  if ((p.rflags & SSU_RF_HAS_ACCEPTED) && p.accepted_dtype != plan.accepted_dtype)
    fail(SSU_ERROR_PLAN_MISMATCH, "num_accepted.dtype is %s but the plan was made for %s",
         ssu_dtype_name(p.accepted_dtype), ssu_dtype_name(plan.accepted_dtype));
}

}  // namespace ssu
