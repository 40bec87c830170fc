#include "core/validate_mamba3.h"

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

// Both argument structs first appeared in 0.2: a caller's struct_size may
// not be smaller than that layout. Fields appended later read as zero.
constexpr uint32_t kMinStepArgsSize = sizeof(ssu_mamba3_step_args_t);
constexpr uint32_t kMinRotaryArgsSize = sizeof(ssu_mamba3_rotary_args_t);
constexpr uint32_t kKnownStepFlags = SSU_MAMBA3_UPDATE_PREV;
constexpr uint32_t kKnownRotaryFlags = SSU_MAMBA3_ROTARY_HALVED;

template <typename T>
T read_args(const T* in, uint32_t min_size, const char* what, const char* init) {
  if (!in) fail(SSU_ERROR_NULL_POINTER, "args is NULL");
  if (in->struct_size < min_size)
    fail(SSU_ERROR_STRUCT_SIZE, "args->struct_size=%u is smaller than %s (%u); initialize it "
         "with %s", in->struct_size, what, min_size, init);
  T a;
  std::memset(&a, 0, sizeof a);
  std::memcpy(&a, in, std::min<size_t>(in->struct_size, sizeof a));
  return a;
}

bool supported_dstate(int64_t n) {
  return n == 16 || n == 32 || n == 64 || n == 128 || n == 256;
}
bool supported_rank(int64_t r) { return r == 1 || r == 2 || r == 4 || r == 8; }

// Slot indices of the Mamba-3 operations: (Bt,) i32/i64, src and dst of one
// dtype. Fills the pointers, strides, dtype and returns the feature bits.
template <typename Params>
uint32_t check_indices(const ssu_tensor_t& src, const ssu_tensor_t& dst, int64_t batch,
                       Params* p, uint32_t has_src, uint32_t has_dst) {
  uint32_t features = 0;
  p->index_dtype = SSU_DTYPE_I32;
  if (present(src)) {
    check_rank(src, "src_index", 1, "(Bt,)");
    check_index_dtype(src, "src_index");
    check_dim(src, "src_index", 0, batch, "the batch Bt (x.shape[0])");
    p->src_index = src.data;
    p->src_stride = src.strides[0];
    p->index_dtype = src.dtype;
    features |= has_src;
  }
  if (present(dst)) {
    check_rank(dst, "dst_index", 1, "(Bt,)");
    check_index_dtype(dst, "dst_index");
    check_dim(dst, "dst_index", 0, batch, "the batch Bt (x.shape[0])");
    if (present(src)) check_same_dtype(dst, "dst_index", src.dtype, "src_index");
    p->dst_index = dst.data;
    p->dst_stride = dst.strides[0];
    p->index_dtype = dst.dtype;
    features |= has_dst;
  }
  return features;
}

// An output that must either be exactly its input (in place) or not overlap
// it. Only what is cheap to see is refused: the same first element with a
// different layout.
void check_alias(const ssu_tensor_t& out, const char* out_name, const ssu_tensor_t& in,
                 const char* in_name) {
  if (out.data != in.data) return;
  for (int i = 0; i < out.ndim; ++i)
    if (out.shape[i] > 1 && out.strides[i] != in.strides[i])
      fail(SSU_ERROR_BAD_STRIDE, "%s shares its data pointer with %s but its strides %s differ "
           "from %s.strides=%s; an output must be exactly its input (same pointer and strides) "
           "or not overlap it", out_name, in_name, strides_str(out).c_str(), in_name,
           strides_str(in).c_str());
}

}  // namespace

// ---------------------------------------------------------------------------
// Mamba-3 step

ssu_mamba3_params normalize_mamba3_step(const ssu_mamba3_step_args_t* args_in) {
  const ssu_mamba3_step_args_t a = read_args(args_in, kMinStepArgsSize, "ssu_mamba3_step_args_t",
                                             "SSU_MAMBA3_STEP_ARGS_INIT");
  if (a.flags & ~kKnownStepFlags)
    fail(SSU_ERROR_UNKNOWN_FLAG, "args->flags=0x%x has unknown bits 0x%x", a.flags,
         a.flags & ~kKnownStepFlags);
  if (!a.pool)
    fail(SSU_ERROR_NULL_POINTER, "args->pool is NULL but the state, prev_B and prev_x pools are "
         "required");
  const ssu_state_pool_t pool = read_state_pool(a.pool);

  ssu_mamba3_params p;
  std::memset(&p, 0, sizeof p);
  p.pad_slot_id = a.pad_slot_id;
  p.error_word = a.error_word;

  // ---- state pool: (S, H, P, N) -------------------------------------------
  const ssu_tensor_t& st = pool.state;
  require(st, "pool.state");
  check_rank(st, "pool.state", 4, "(slots, nheads, dim, dstate)");
  if (is_scaled_state(st.dtype))
    fail(SSU_ERROR_NOT_SUPPORTED, "pool.state.dtype=%s (block-scaled) but the Mamba-3 step "
         "supports f32, bf16 and f16 states only", ssu_dtype_name(st.dtype));
  if (present(pool.state_scale))
    fail(SSU_ERROR_NOT_SUPPORTED, "pool.state_scale is given but the Mamba-3 step supports f32, "
         "bf16 and f16 states only");
  check_float_dtype(st, "pool.state");
  const int64_t S = st.shape[0], H = st.shape[1], P = st.shape[2], N = st.shape[3];
  if (H < 1 || P < 1 || N < 1)
    fail(SSU_ERROR_BAD_SHAPE, "pool.state.shape=%s: nheads, dim and dstate must be >= 1",
         shape_str(st).c_str());
  if (!supported_dstate(N))
    fail(SSU_ERROR_NOT_SUPPORTED, "pool.state.shape[3] (dstate N)=%" PRId64 " but the Mamba-3 "
         "step supports N in {16, 32, 64, 128, 256}", N);
  if (P % 16 != 0)
    fail(SSU_ERROR_NOT_SUPPORTED, "pool.state.shape[2] (dim P)=%" PRId64 " but the Mamba-3 step "
         "supports P a multiple of 16", P);
  if (st.strides[3] != 1 || st.strides[2] != N || st.strides[1] != P * N)
    fail(SSU_ERROR_BAD_STRIDE, "pool.state.strides=(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
         ") but its inner three axes must be dense: strides[1..3] = (%" PRId64 ", %" PRId64 ", 1)",
         st.strides[0], st.strides[1], st.strides[2], st.strides[3], P * N, N);
  if (S > 1 && st.strides[0] < H * P * N)
    fail(SSU_ERROR_BAD_STRIDE, "pool.state.strides[0] (slot stride)=%" PRId64 " is smaller than "
         "H*P*N=%" PRId64 "; slots would overlap", st.strides[0], H * P * N);
  p.state = st.data;
  p.state_dtype = st.dtype;
  p.state_stride_slot = st.strides[0];
  p.nslots = S;
  p.nheads = H;
  p.dim = P;
  p.dstate = N;

  // ---- x: (Bt, H, P) fixes Bt and the input dtype ----------------------------
  require(a.x, "x");
  check_rank(a.x, "x", 3, "(Bt, H, P)");
  check_float_dtype(a.x, "x");
  const int64_t Bt = a.x.shape[0];
  p.batch = Bt;
  p.input_dtype = a.x.dtype;
  auto check_bhp = [&](const ssu_tensor_t& t, const char* name, int64_t* sb, int64_t* sh) {
    check_rank(t, name, 3, "(Bt, H, P)");
    check_same_dtype(t, name, p.input_dtype, "x");
    check_dim(t, name, 0, Bt, "the batch Bt (x.shape[0])");
    check_dim(t, name, 1, H, "nheads H (pool.state.shape[1])");
    check_dim(t, name, 2, P, "dim P (pool.state.shape[2])");
    check_unit_stride(t, name, 2);
    *sb = t.strides[0];
    *sh = t.strides[1];
  };
  check_bhp(a.x, "x", &p.x_stride_b, &p.x_stride_h);
  p.x = a.x.data;

  // ---- B, C: (Bt, R, H, N); B fixes R -----------------------------------------
  require(a.B, "B");
  check_rank(a.B, "B", 4, "(Bt, R, H, N)");
  const int64_t R = a.B.shape[1];
  if (R < 1) fail(SSU_ERROR_BAD_SHAPE, "B.shape[1] (rank R)=0 but R must be >= 1");
  if (!supported_rank(R))
    fail(SSU_ERROR_NOT_SUPPORTED, "B.shape[1] (rank R)=%" PRId64 " but the Mamba-3 step supports "
         "R in {1, 2, 4, 8}", R);
  p.rank = R;
  auto check_brhn = [&](const ssu_tensor_t& t, const char* name, int64_t* sb, int64_t* sr,
                        int64_t* sh) {
    require(t, name);
    check_rank(t, name, 4, "(Bt, R, H, N)");
    check_same_dtype(t, name, p.input_dtype, "x");
    check_dim(t, name, 0, Bt, "the batch Bt (x.shape[0])");
    check_dim(t, name, 1, R, "the rank R (B.shape[1])");
    check_dim(t, name, 2, H, "nheads H (pool.state.shape[1])");
    check_dim(t, name, 3, N, "dstate N (pool.state.shape[3])");
    check_unit_stride(t, name, 3);
    *sb = t.strides[0];
    *sr = t.strides[1];
    *sh = t.strides[2];
  };
  check_brhn(a.B, "B", &p.B_stride_b, &p.B_stride_r, &p.B_stride_h);
  check_brhn(a.C, "C", &p.C_stride_b, &p.C_stride_r, &p.C_stride_h);
  p.B = a.B.data;
  p.C = a.C.data;

  // ---- prev_B (S, R, H, N), prev_x (S, H, P): input dtype, last axis dense ----
  {
    const ssu_tensor_t& t = pool.prev_B;
    const char* name = "pool.prev_B";
    require(t, name);
    check_rank(t, name, 4, "(slots, R, H, N)");
    check_same_dtype(t, name, p.input_dtype, "x");
    check_dim(t, name, 0, S, "the slot count S (pool.state.shape[0])");
    check_dim(t, name, 1, R, "the rank R (B.shape[1])");
    check_dim(t, name, 2, H, "nheads H (pool.state.shape[1])");
    check_dim(t, name, 3, N, "dstate N (pool.state.shape[3])");
    check_unit_stride(t, name, 3);
    p.prev_B = t.data;
    p.prev_B_stride_slot = t.strides[0];
    p.prev_B_stride_r = t.strides[1];
    p.prev_B_stride_h = t.strides[2];
  }
  {
    const ssu_tensor_t& t = pool.prev_x;
    const char* name = "pool.prev_x";
    require(t, name);
    check_rank(t, name, 3, "(slots, H, P)");
    check_same_dtype(t, name, p.input_dtype, "x");
    check_dim(t, name, 0, S, "the slot count S (pool.state.shape[0])");
    check_dim(t, name, 1, H, "nheads H (pool.state.shape[1])");
    check_dim(t, name, 2, P, "dim P (pool.state.shape[2])");
    check_unit_stride(t, name, 2);
    p.prev_x = t.data;
    p.prev_x_stride_slot = t.strides[0];
    p.prev_x_stride_h = t.strides[1];
  }

  // ---- A, dt, trap: (Bt, H), any float dtype and strides ---------------------
  auto check_bh = [&](const ssu_tensor_t& t, const char* name, int64_t* sb, int64_t* sh,
                      int32_t* dtype) {
    require(t, name);
    check_rank(t, name, 2, "(Bt, H)");
    check_float_dtype(t, name);
    check_dim(t, name, 0, Bt, "the batch Bt (x.shape[0])");
    check_dim(t, name, 1, H, "nheads H (pool.state.shape[1])");
    *sb = t.strides[0];
    *sh = t.strides[1];
    *dtype = t.dtype;
  };
  check_bh(a.A, "A", &p.A_stride_b, &p.A_stride_h, &p.A_dtype);
  check_bh(a.dt, "dt", &p.dt_stride_b, &p.dt_stride_h, &p.dt_dtype);
  check_bh(a.trap, "trap", &p.trap_stride_b, &p.trap_stride_h, &p.trap_dtype);
  p.A = a.A.data;
  p.dt = a.dt.data;
  p.trap = a.trap.data;

  // ---- weights: D (H,), xproj / zproj / outproj (R, H, P) --------------------
  p.D_dtype = p.zproj_dtype = p.outproj_dtype = SSU_DTYPE_F32;
  if (present(a.D)) {
    check_rank(a.D, "D", 1, "(H,)");
    check_float_dtype(a.D, "D");
    check_dim(a.D, "D", 0, H, "nheads H (pool.state.shape[1])");
    p.D = a.D.data;
    p.D_stride_h = a.D.strides[0];
    p.D_dtype = a.D.dtype;
    p.features |= SSU_M3_HAS_D;
  }
  auto check_rhp = [&](const ssu_tensor_t& t, const char* name, int64_t* sr, int64_t* sh,
                       int64_t* sp, int32_t* dtype) {
    check_rank(t, name, 3, "(R, H, P)");
    check_float_dtype(t, name);
    check_dim(t, name, 0, R, "the rank R (B.shape[1])");
    check_dim(t, name, 1, H, "nheads H (pool.state.shape[1])");
    check_dim(t, name, 2, P, "dim P (pool.state.shape[2])");
    *sr = t.strides[0];
    *sh = t.strides[1];
    *sp = t.strides[2];
    *dtype = t.dtype;
  };
  require(a.xproj, "xproj");
  check_rhp(a.xproj, "xproj", &p.xproj_stride_r, &p.xproj_stride_h, &p.xproj_stride_p,
            &p.xproj_dtype);
  p.xproj = a.xproj.data;

  if (present(a.outproj)) {
    check_rhp(a.outproj, "outproj", &p.outproj_stride_r, &p.outproj_stride_h,
              &p.outproj_stride_p, &p.outproj_dtype);
    p.outproj = a.outproj.data;
    p.features |= SSU_M3_HAS_OUTPROJ;
  }
  if (present(a.z) != present(a.zproj))
    fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "%s is given but %s is not; z and zproj come together",
         present(a.z) ? "z" : "zproj", present(a.z) ? "zproj" : "z");
  if (present(a.z)) {
    if (!present(a.outproj))
      fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "z is given but outproj is not; the gate is applied "
           "only with the output projection (without it the caller gates)");
    check_bhp(a.z, "z", &p.z_stride_b, &p.z_stride_h);
    p.z = a.z.data;
    check_rhp(a.zproj, "zproj", &p.zproj_stride_r, &p.zproj_stride_h, &p.zproj_stride_p,
              &p.zproj_dtype);
    p.zproj = a.zproj.data;
    p.features |= SSU_M3_HAS_Z;
  }

  // ---- out: (Bt, H, P) with outproj, (Bt, R, H, P) without ---------------------
  require(a.out, "out");
  check_basic(a.out, "out");
  if (present(a.outproj)) {
    if (a.out.ndim != 3)
      fail(SSU_ERROR_BAD_RANK, "out.ndim=%d but with outproj it must be 3: (Bt, H, P)",
           a.out.ndim);
    check_bhp(a.out, "out", &p.out_stride_b, &p.out_stride_h);
    p.out_stride_r = 0;
  } else {
    if (a.out.ndim != 4)
      fail(SSU_ERROR_BAD_RANK, "out.ndim=%d but without outproj it must be 4: (Bt, R, H, P)",
           a.out.ndim);
    check_same_dtype(a.out, "out", p.input_dtype, "x");
    check_dim(a.out, "out", 0, Bt, "the batch Bt (x.shape[0])");
    check_dim(a.out, "out", 1, R, "the rank R (B.shape[1])");
    check_dim(a.out, "out", 2, H, "nheads H (pool.state.shape[1])");
    check_dim(a.out, "out", 3, P, "dim P (pool.state.shape[2])");
    check_unit_stride(a.out, "out", 3);
    p.out_stride_b = a.out.strides[0];
    p.out_stride_r = a.out.strides[1];
    p.out_stride_h = a.out.strides[2];
  }
  p.out = a.out.data;

  // ---- slots -------------------------------------------------------------------
  p.features |= check_indices(a.src_index, a.dst_index, Bt, &p, SSU_M3_HAS_SRC, SSU_M3_HAS_DST);
  if (a.flags & SSU_MAMBA3_UPDATE_PREV) p.features |= SSU_M3_UPDATE_PREV;
  return p;
}

#define SSU_FIT_(field, what)                                                                    \
  if (p.field != plan.field)                                                                     \
    fail(SSU_ERROR_PLAN_MISMATCH, "%s is %" PRId64 " but the plan was made for %" PRId64, what,  \
         static_cast<int64_t>(p.field), static_cast<int64_t>(plan.field));
#define SSU_FIT_DTYPE_(field, what)                                              \
  if (p.field != plan.field)                                                     \
    fail(SSU_ERROR_PLAN_MISMATCH, "%s is %s but the plan was made for %s", what, \
         ssu_dtype_name(p.field), ssu_dtype_name(plan.field));

namespace {

struct FeatureName {
  uint32_t bit;
  const char* what;
};

template <size_t K>
void check_features(uint32_t plan, uint32_t got, const FeatureName (&names)[K]) {
  if (plan == got) return;
  const uint32_t diff = plan ^ got;
  for (const auto& n : names)
    if (diff & n.bit)
      fail(SSU_ERROR_PLAN_MISMATCH, "%s: the call %s it but the plan was made %s it", n.what,
           (got & n.bit) ? "has" : "lacks", (plan & n.bit) ? "with" : "without");
  fail(SSU_ERROR_PLAN_MISMATCH, "the call's features 0x%x differ from the plan's 0x%x", got, plan);
}

}  // namespace

void check_fits_plan(const ssu_mamba3_params& plan, const ssu_mamba3_params& p) {
  SSU_FIT_(nheads, "nheads H")
  SSU_FIT_(dim, "dim P")
  SSU_FIT_(dstate, "dstate N")
  SSU_FIT_(rank, "the rank R")
  SSU_FIT_DTYPE_(state_dtype, "pool.state.dtype")
  SSU_FIT_DTYPE_(input_dtype, "x.dtype")
  SSU_FIT_DTYPE_(A_dtype, "A.dtype")
  SSU_FIT_DTYPE_(dt_dtype, "dt.dtype")
  SSU_FIT_DTYPE_(trap_dtype, "trap.dtype")
  SSU_FIT_DTYPE_(D_dtype, "D.dtype")
  SSU_FIT_DTYPE_(xproj_dtype, "xproj.dtype")
  SSU_FIT_DTYPE_(zproj_dtype, "zproj.dtype")
  SSU_FIT_DTYPE_(outproj_dtype, "outproj.dtype")
  SSU_FIT_DTYPE_(index_dtype, "the slot index dtype")
  static const FeatureName kNames[] = {
      {SSU_M3_HAS_D, "the presence of D"},
      {SSU_M3_HAS_Z, "the presence of z and zproj"},
      {SSU_M3_HAS_OUTPROJ, "the presence of outproj"},
      {SSU_M3_HAS_SRC, "the presence of src_index"},
      {SSU_M3_HAS_DST, "the presence of dst_index"},
      {SSU_M3_UPDATE_PREV, "flag SSU_MAMBA3_UPDATE_PREV"},
  };
  check_features(plan.features, p.features, kNames);
}

// ---------------------------------------------------------------------------
// Mamba-3 rotary step

ssu_rotary_params normalize_mamba3_rotary(const ssu_mamba3_rotary_args_t* args_in) {
  const ssu_mamba3_rotary_args_t a = read_args(
      args_in, kMinRotaryArgsSize, "ssu_mamba3_rotary_args_t", "SSU_MAMBA3_ROTARY_ARGS_INIT");
  if (a.flags & ~kKnownRotaryFlags)
    fail(SSU_ERROR_UNKNOWN_FLAG, "args->flags=0x%x has unknown bits 0x%x", a.flags,
         a.flags & ~kKnownRotaryFlags);
  if (!a.pool)
    fail(SSU_ERROR_NULL_POINTER, "args->pool is NULL but the angle_state pool is required");
  const ssu_state_pool_t pool = read_state_pool(a.pool);

  ssu_rotary_params p;
  std::memset(&p, 0, sizeof p);
  p.pad_slot_id = a.pad_slot_id;
  p.error_word = a.error_word;

  // ---- q: (Bt, R, H, N) fixes Bt, R, H, N and the dtype ----------------------
  require(a.q, "q");
  check_rank(a.q, "q", 4, "(Bt, R, H, N)");
  check_float_dtype(a.q, "q");
  const int64_t Bt = a.q.shape[0], R = a.q.shape[1], H = a.q.shape[2], N = a.q.shape[3];
  if (R < 1 || H < 1 || N < 1)
    fail(SSU_ERROR_BAD_SHAPE, "q.shape=%s: the rank R, nheads H and dstate N must be >= 1",
         shape_str(a.q).c_str());
  if (N > 256)
    fail(SSU_ERROR_NOT_SUPPORTED, "q.shape[3] (dstate N)=%" PRId64 " but N <= 256 is supported",
         N);
  p.batch = Bt;
  p.rank = R;
  p.nheads = H;
  p.dstate = N;
  p.qk_dtype = a.q.dtype;
  if (a.flags & SSU_MAMBA3_ROTARY_HALVED) {
    if (N % 2 != 0)
      fail(SSU_ERROR_BAD_SHAPE, "flag SSU_MAMBA3_ROTARY_HALVED pairs (i, i + N/2) but "
           "dstate N=%" PRId64 " (q.shape[3]) is odd", N);
    p.features |= SSU_ROT_HALVED;
  }
  auto check_qk = [&](const ssu_tensor_t& t, const char* name, int64_t* sb, int64_t* sr,
                      int64_t* sh) {
    require(t, name);
    check_rank(t, name, 4, "(Bt, R, H, N)");
    check_same_dtype(t, name, p.qk_dtype, "q");
    check_dim(t, name, 0, Bt, "the batch Bt (q.shape[0])");
    check_dim(t, name, 1, R, "the rank R (q.shape[1])");
    check_dim(t, name, 2, H, "nheads H (q.shape[2])");
    check_dim(t, name, 3, N, "dstate N (q.shape[3])");
    check_unit_stride(t, name, 3);
    *sb = t.strides[0];
    *sr = t.strides[1];
    *sh = t.strides[2];
  };
  check_qk(a.q, "q", &p.q_stride_b, &p.q_stride_r, &p.q_stride_h);
  check_qk(a.k, "k", &p.k_stride_b, &p.k_stride_r, &p.k_stride_h);
  check_qk(a.q_out, "q_out", &p.q_out_stride_b, &p.q_out_stride_r, &p.q_out_stride_h);
  check_qk(a.k_out, "k_out", &p.k_out_stride_b, &p.k_out_stride_r, &p.k_out_stride_h);
  check_alias(a.q_out, "q_out", a.q, "q");
  check_alias(a.k_out, "k_out", a.k, "k");
  if (a.q_out.data == a.k.data)
    fail(SSU_ERROR_INVALID_ARGUMENT, "q_out and k share a data pointer; q_out may only alias q");
  if (a.k_out.data == a.q.data)
    fail(SSU_ERROR_INVALID_ARGUMENT, "k_out and q share a data pointer; k_out may only alias k");
  if (a.q_out.data == a.k_out.data)
    fail(SSU_ERROR_INVALID_ARGUMENT, "q_out and k_out share a data pointer; they must not "
         "overlap");
  p.q = a.q.data;
  p.k = a.k.data;
  p.q_out = a.q_out.data;
  p.k_out = a.k_out.data;

  // ---- angle_state (S, H, Sa) f32, last axis dense ------------------------------
  const ssu_tensor_t& as = pool.angle_state;
  require(as, "pool.angle_state");
  check_rank(as, "pool.angle_state", 3, "(slots, H, Sa)");
  if (as.dtype != SSU_DTYPE_F32)
    fail(SSU_ERROR_BAD_DTYPE, "pool.angle_state.dtype=%s but it must be f32",
         ssu_dtype_name(as.dtype));
  check_dim(as, "pool.angle_state", 1, H, "nheads H (q.shape[2])");
  const int64_t Sa = as.shape[2];
  if (Sa < 1 || Sa > N / 2)
    fail(SSU_ERROR_BAD_SHAPE, "pool.angle_state.shape[2] (angles Sa)=%" PRId64 " but it must be "
         "in [1, N/2] with dstate N=%" PRId64 " (q.shape[3])", Sa, N);
  check_unit_stride(as, "pool.angle_state", 2);
  p.angle_state = static_cast<float*>(as.data);
  p.nslots = as.shape[0];
  p.nangles = Sa;
  p.angle_stride_slot = as.strides[0];
  p.angle_stride_h = as.strides[1];

  // ---- angle_rate (Bt, H, Sa), dt (Bt, H): any float dtype and strides ----------
  require(a.angle_rate, "angle_rate");
  check_rank(a.angle_rate, "angle_rate", 3, "(Bt, H, Sa)");
  check_float_dtype(a.angle_rate, "angle_rate");
  check_dim(a.angle_rate, "angle_rate", 0, Bt, "the batch Bt (q.shape[0])");
  check_dim(a.angle_rate, "angle_rate", 1, H, "nheads H (q.shape[2])");
  check_dim(a.angle_rate, "angle_rate", 2, Sa, "the angle count Sa (pool.angle_state.shape[2])");
  p.angle_rate = a.angle_rate.data;
  p.rate_dtype = a.angle_rate.dtype;
  p.rate_stride_b = a.angle_rate.strides[0];
  p.rate_stride_h = a.angle_rate.strides[1];
  p.rate_stride_i = a.angle_rate.strides[2];

  require(a.dt, "dt");
  check_rank(a.dt, "dt", 2, "(Bt, H)");
  check_float_dtype(a.dt, "dt");
  check_dim(a.dt, "dt", 0, Bt, "the batch Bt (q.shape[0])");
  check_dim(a.dt, "dt", 1, H, "nheads H (q.shape[2])");
  p.dt = a.dt.data;
  p.dt_dtype = a.dt.dtype;
  p.dt_stride_b = a.dt.strides[0];
  p.dt_stride_h = a.dt.strides[1];

  // ---- biases (R, H, N): any float dtype and strides ------------------------------
  auto check_bias = [&](const ssu_tensor_t& t, const char* name, int64_t* sr, int64_t* sh,
                        int64_t* sn, int32_t* dtype) {
    check_rank(t, name, 3, "(R, H, N)");
    check_float_dtype(t, name);
    check_dim(t, name, 0, R, "the rank R (q.shape[1])");
    check_dim(t, name, 1, H, "nheads H (q.shape[2])");
    check_dim(t, name, 2, N, "dstate N (q.shape[3])");
    *sr = t.strides[0];
    *sh = t.strides[1];
    *sn = t.strides[2];
    *dtype = t.dtype;
  };
  p.q_bias_dtype = p.k_bias_dtype = SSU_DTYPE_F32;
  if (present(a.q_bias)) {
    check_bias(a.q_bias, "q_bias", &p.q_bias_stride_r, &p.q_bias_stride_h, &p.q_bias_stride_n,
               &p.q_bias_dtype);
    p.q_bias = a.q_bias.data;
    p.features |= SSU_ROT_HAS_Q_BIAS;
  }
  if (present(a.k_bias)) {
    check_bias(a.k_bias, "k_bias", &p.k_bias_stride_r, &p.k_bias_stride_h, &p.k_bias_stride_n,
               &p.k_bias_dtype);
    p.k_bias = a.k_bias.data;
    p.features |= SSU_ROT_HAS_K_BIAS;
  }

  p.features |=
      check_indices(a.src_index, a.dst_index, Bt, &p, SSU_ROT_HAS_SRC, SSU_ROT_HAS_DST);
  return p;
}

void check_fits_plan(const ssu_rotary_params& plan, const ssu_rotary_params& p) {
  SSU_FIT_(nheads, "nheads H")
  SSU_FIT_(dstate, "dstate N")
  SSU_FIT_(rank, "the rank R")
  SSU_FIT_(nangles, "the angle count Sa")
  SSU_FIT_DTYPE_(qk_dtype, "q.dtype")
  SSU_FIT_DTYPE_(rate_dtype, "angle_rate.dtype")
  SSU_FIT_DTYPE_(dt_dtype, "dt.dtype")
  SSU_FIT_DTYPE_(q_bias_dtype, "q_bias.dtype")
  SSU_FIT_DTYPE_(k_bias_dtype, "k_bias.dtype")
  SSU_FIT_DTYPE_(index_dtype, "the slot index dtype")
  static const FeatureName kNames[] = {
      {SSU_ROT_HALVED, "flag SSU_MAMBA3_ROTARY_HALVED"},
      {SSU_ROT_HAS_Q_BIAS, "the presence of q_bias"},
      {SSU_ROT_HAS_K_BIAS, "the presence of k_bias"},
      {SSU_ROT_HAS_SRC, "the presence of src_index"},
      {SSU_ROT_HAS_DST, "the presence of dst_index"},
  };
  check_features(plan.features, p.features, kNames);
}

#undef SSU_FIT_
#undef SSU_FIT_DTYPE_

}  // namespace ssu
