#include "core/validate_update.h"

#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/tensor_checks.h"

namespace ssu {
namespace {

using namespace checks;

// The first released layouts (0.1): a caller's struct_size may not be
// smaller. Fields appended later read as zero when the caller's struct ends
// before them.
constexpr uint32_t kMinArgsSize = offsetof(ssu_update_args_t, intermediate_scales);
constexpr uint32_t kMinPoolSize = offsetof(ssu_state_pool_t, prev_B);
constexpr uint32_t kKnownFlags = SSU_UPDATE_DT_SOFTPLUS | SSU_UPDATE_DISABLE_STATE_UPDATE;

// The call's form and the leading ("token row") axes every per-token
// tensor starts with: (Bt) single, (Bt, T) multi, (TT) varlen.
struct Form {
  bool varlen = false;
  bool multi = false;
  int64_t batch = 0;   // Bt
  int64_t tokens = 1;  // T
  int64_t total = 0;   // TT (varlen) or Bt*T
  int lead() const { return multi && !varlen ? 2 : 1; }
};

struct RowStrides {
  int64_t b = 0, t = 0;
};

// Checks the leading axes of a per-token tensor and returns their strides.
RowStrides check_lead(const ssu_tensor_t& t, const char* name, const Form& f) {
  RowStrides r;
  if (f.varlen) {
    check_dim(t, name, 0, f.total, "the packed token count TT (x.shape[0])");
    r.t = t.strides[0];
  } else if (f.multi) {
    check_dim(t, name, 0, f.batch, "the batch Bt (x.shape[0])");
    check_dim(t, name, 1, f.tokens, "the token count T (x.shape[1])");
    r.b = t.strides[0];
    r.t = t.strides[1];
  } else {
    check_dim(t, name, 0, f.batch, "the batch Bt (x.shape[0])");
    r.b = t.strides[0];
  }
  return r;
}

const char* lead_layout(const Form& f) {
  return f.varlen ? "(TT, " : (f.multi ? "(Bt, T, " : "(Bt, ");
}

// Index tensors: (Bt,) or, in the multi-token forms, (Bt, T).
struct IndexInfo {
  int64_t sb = 0, st = 0;
  bool two_d = false;
};

IndexInfo check_slot_index(const ssu_tensor_t& t, const char* name, const Form& f) {
  IndexInfo r;
  int nd = check_basic(t, name);
  check_index_dtype(t, name);
  if (nd == 2) {
    if (!f.multi)
      fail(SSU_ERROR_INCOMPATIBLE_OPTIONS,
           "%s is 2-D (per token) but the call is single-token (x is (Bt, H, P)); per-token "
           "indices need the multi-token or varlen form",
           name);
    check_dim(t, name, 0, f.batch, "the batch Bt");
    check_dim(t, name, 1, f.tokens, "the token count T");
    r.sb = t.strides[0];
    r.st = t.strides[1];
    r.two_d = true;
  } else if (nd == 1) {
    check_dim(t, name, 0, f.batch, "the batch Bt");
    r.sb = t.strides[0];
  } else {
    fail(SSU_ERROR_BAD_RANK, "%s.ndim=%d but it must be 1 (Bt,) or 2 (Bt, T)", name, nd);
  }
  return r;
}

// A per-sequence index vector (Bt,) of i32/i64; returns its stride.
int64_t check_batch_index(const ssu_tensor_t& t, const char* name, const Form& f) {
  check_rank(t, name, 1, "(Bt,)");
  check_index_dtype(t, name);
  check_dim(t, name, 0, f.batch, "the batch Bt");
  return t.strides[0];
}

// (H,) or (H, P) parameters. Returns true when per channel (a P axis with a
// non-zero stride).
bool check_head_param(const ssu_tensor_t& t, const char* name, int64_t H, int64_t P,
                      int64_t* sh, int64_t* sp) {
  int nd = check_basic(t, name);
  check_float_dtype(t, name);
  if (nd != 1 && nd != 2)
    fail(SSU_ERROR_BAD_RANK, "%s.ndim=%d but it must be 1 (H,) or 2 (H, P)", name, nd);
  check_dim(t, name, 0, H, "nheads H (state.shape[1])");
  *sh = t.strides[0];
  *sp = 0;
  if (nd == 2) {
    check_dim(t, name, 1, P, "dim P (state.shape[2])");
    *sp = t.strides[1];
  }
  return *sp != 0 && P > 1;
}

// The (I, T) rows of `row` elements each of an intermediate buffer (axes 0
// and 1 of t) must not overlap: order the two axes by stride.
void check_rows_disjoint(const ssu_tensor_t& t, const char* name, int64_t row,
                         const char* row_what) {
  int64_t s_lo = t.strides[0], n_lo = t.shape[0], s_hi = t.strides[1], n_hi = t.shape[1];
  if (s_lo > s_hi || (s_lo == s_hi && n_lo > n_hi)) {
    std::swap(s_lo, s_hi);
    std::swap(n_lo, n_hi);
  }
  const bool ok =
      (n_lo <= 1 || s_lo >= row) && (n_hi <= 1 || s_hi >= (n_lo <= 1 ? row : s_lo * n_lo));
  if (!ok)
    fail(SSU_ERROR_BAD_STRIDE, "%s.strides[0..1]=(%" PRId64 ", %" PRId64 ") make (I, T) rows of "
         "%s=%" PRId64 " elements overlap", name, t.strides[0], t.strides[1], row_what, row);
}

}  // namespace

ssu_state_pool_t read_state_pool(const ssu_state_pool_t* in) {
  if (in->struct_size < kMinPoolSize)
    fail(SSU_ERROR_STRUCT_SIZE, "pool->struct_size=%u is smaller than ssu_state_pool_t (%u); "
         "initialize it with SSU_STATE_POOL_INIT",
         in->struct_size, kMinPoolSize);
  // Between the two released layouts only the 0.1 size itself: a size that
  // ends inside a field (half a pointer) would be read as a torn value.
  if (in->struct_size < sizeof(ssu_state_pool_t) && in->struct_size != kMinPoolSize)
    fail(SSU_ERROR_STRUCT_SIZE, "pool->struct_size=%u is neither the 0.1 layout's %u nor at least "
         "%zu; initialize it with SSU_STATE_POOL_INIT",
         in->struct_size, kMinPoolSize, sizeof(ssu_state_pool_t));
  ssu_state_pool_t pool;
  std::memset(&pool, 0, sizeof pool);
  std::memcpy(&pool, in, std::min<size_t>(in->struct_size, sizeof pool));
  if (pool.reserved0 != 0)
    fail(SSU_ERROR_INVALID_ARGUMENT, "pool->reserved0=%u but it must be 0", pool.reserved0);
  return pool;
}

ssu_update_params normalize_update(const ssu_update_args_t* args_in) {
  if (!args_in) fail(SSU_ERROR_NULL_POINTER, "args is NULL");
  if (args_in->struct_size < kMinArgsSize)
    fail(SSU_ERROR_STRUCT_SIZE, "args->struct_size=%u is smaller than ssu_update_args_t (%u); "
         "initialize it with SSU_UPDATE_ARGS_INIT",
         args_in->struct_size, kMinArgsSize);
  // Between the two released layouts only the 0.1 size itself: a size that
  // ends inside a field (half of rounding_seed) would be read as a torn value.
  if (args_in->struct_size < sizeof(ssu_update_args_t) && args_in->struct_size != kMinArgsSize)
    fail(SSU_ERROR_STRUCT_SIZE, "args->struct_size=%u is neither the 0.1 layout's %u nor at least "
         "%zu; initialize it with SSU_UPDATE_ARGS_INIT",
         args_in->struct_size, kMinArgsSize, sizeof(ssu_update_args_t));
  // Read what this library knows; later versions' appended fields are ignored.
  ssu_update_args_t a;
  std::memset(&a, 0, sizeof a);
  std::memcpy(&a, args_in, std::min<size_t>(args_in->struct_size, sizeof a));

  if (a.flags & ~kKnownFlags)
    fail(SSU_ERROR_UNKNOWN_FLAG, "args->flags=0x%x has unknown bits 0x%x", a.flags,
         a.flags & ~kKnownFlags);
  if (!a.pool) fail(SSU_ERROR_NULL_POINTER, "args->pool is NULL but the state pool is required");
  const ssu_state_pool_t pool = read_state_pool(a.pool);
  if (pool.prev_B.data || pool.prev_x.data || pool.angle_state.data)
    fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "pool.%s is given but the selective state update uses "
         "no Mamba-3 pools", pool.prev_B.data ? "prev_B" : pool.prev_x.data ? "prev_x" : "angle_state");

  ssu_update_params p;
  std::memset(&p, 0, sizeof p);
  p.pad_slot_id = a.pad_slot_id;
  p.error_word = a.error_word;

  // ---- state pool: (S, H, P, N) -------------------------------------------
  const ssu_tensor_t& st = pool.state;
  require(st, "pool.state");
  check_rank(st, "pool.state", 4, "(slots, nheads, dim, dstate)");
  // i16, i8 and f8e4m3 are block-scaled: codes plus a decode scale per row.
  const bool scaled = is_scaled_state(st.dtype);
  if (!scaled && !is_float(st.dtype))
    fail(SSU_ERROR_BAD_DTYPE, "pool.state.dtype=%s but it must be f32, bf16, f16, or i16, i8 or "
         "f8e4m3 with pool.state_scale", ssu_dtype_name(st.dtype));
  if (!scaled && present(pool.state_scale))
    fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "pool.state_scale is given but pool.state.dtype=%s; decode "
         "scales belong to i16, i8 and f8e4m3 (block-scaled) states only",
         ssu_dtype_name(st.dtype));
  if (scaled && !present(pool.state_scale))
    fail(SSU_ERROR_NULL_POINTER, "pool.state_scale.data is NULL but pool.state.dtype=%s needs its "
         "decode scales, an (S, H, P) f32 pool", ssu_dtype_name(st.dtype));
  const int64_t S = st.shape[0], H = st.shape[1], P = st.shape[2], N = st.shape[3];
  if (H < 1 || P < 1 || N < 1)
    fail(SSU_ERROR_BAD_SHAPE, "pool.state.shape=%s: nheads, dim and dstate must be >= 1",
         shape_str(st).c_str());
  if (N > 256)
    fail(SSU_ERROR_NOT_SUPPORTED, "pool.state.shape[3] (dstate N)=%" PRId64 " but N <= 256 is "
         "supported", N);
  if (st.strides[3] != 1 || st.strides[2] != N || st.strides[1] != P * N)
    fail(SSU_ERROR_BAD_STRIDE, "pool.state.strides=(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
         ") but its inner three axes must be dense: strides[1..3] = (%" PRId64 ", %" PRId64 ", 1)",
         st.strides[0], st.strides[1], st.strides[2], st.strides[3], P * N, N);
  if (S > 1 && st.strides[0] < H * P * N)
    fail(SSU_ERROR_BAD_STRIDE, "pool.state.strides[0] (slot stride)=%" PRId64 " is smaller than "
         "H*P*N=%" PRId64 "; slots would overlap", st.strides[0], H * P * N);
  if (scaled) {
    const ssu_tensor_t& sc = pool.state_scale;
    const char* name = "pool.state_scale";
    check_rank(sc, name, 3, "(slots, nheads, dim) of pool.state");
    if (sc.dtype != SSU_DTYPE_F32)
      fail(SSU_ERROR_BAD_DTYPE, "%s.dtype=%s but it must be f32", name, ssu_dtype_name(sc.dtype));
    check_dim(sc, name, 0, S, "the slot count S (pool.state.shape[0])");
    check_dim(sc, name, 1, H, "nheads H (pool.state.shape[1])");
    check_dim(sc, name, 2, P, "dim P (pool.state.shape[2])");
    if ((P > 1 && sc.strides[2] != 1) || (H > 1 && sc.strides[1] != P))
      fail(SSU_ERROR_BAD_STRIDE, "%s.strides=(%" PRId64 ", %" PRId64 ", %" PRId64 ") but its inner "
           "two axes must be dense: strides[1..2] = (%" PRId64 ", 1)", name, sc.strides[0],
           sc.strides[1], sc.strides[2], P);
    if (S > 1 && sc.strides[0] < H * P)
      fail(SSU_ERROR_BAD_STRIDE, "%s.strides[0] (slot stride)=%" PRId64 " is smaller than "
           "H*P=%" PRId64 "; slots would overlap", name, sc.strides[0], H * P);
    p.state_scale = static_cast<float*>(sc.data);
    p.state_scale_stride_slot = sc.strides[0];
  }
  p.state = st.data;
  p.state_dtype = st.dtype;
  p.state_stride_slot = st.strides[0];
  p.nslots = S;
  p.nheads = H;
  p.dim = P;
  p.dstate = N;

  // ---- form: single / multi / varlen, from x and cu_seqlens -----------------
  require(a.x, "x");
  check_basic(a.x, "x");
  Form f;
  if (present(a.cu_seqlens)) {
    check_rank(a.cu_seqlens, "cu_seqlens", 1, "(Bt + 1,)");
    check_index_dtype(a.cu_seqlens, "cu_seqlens");
    if (a.cu_seqlens.shape[0] < 1)
      fail(SSU_ERROR_BAD_SHAPE, "cu_seqlens.shape[0]=0 but it must be Bt + 1 >= 1");
    if (a.x.ndim != 3)
      fail(SSU_ERROR_BAD_RANK, "x.ndim=%d but with cu_seqlens (varlen) x must be 3-D (TT, H, P)",
           a.x.ndim);
    if (a.max_tokens < 1)
      fail(SSU_ERROR_INVALID_ARGUMENT, "max_tokens=%" PRId64 " but the varlen form (cu_seqlens "
           "given) needs max_tokens >= 1, the longest sequence the call may hold",
           a.max_tokens);
    f.varlen = f.multi = true;
    f.batch = a.cu_seqlens.shape[0] - 1;
    f.tokens = a.max_tokens;
    f.total = a.x.shape[0];
    p.cu_seqlens = a.cu_seqlens.data;
    p.cu_seqlens_stride = a.cu_seqlens.strides[0];
    p.seqlen_dtype = a.cu_seqlens.dtype;
    p.features |= SSU_F_VARLEN | SSU_F_MULTI_TOKEN;
  } else if (a.x.ndim == 4) {
    f.multi = true;
    f.batch = a.x.shape[0];
    f.tokens = a.x.shape[1];
    if (f.tokens < 1)
      fail(SSU_ERROR_BAD_SHAPE, "x.shape[1] (tokens T)=0 but T must be >= 1");
    f.total = f.batch * f.tokens;
    p.features |= SSU_F_MULTI_TOKEN;
  } else if (a.x.ndim == 3) {
    f.batch = a.x.shape[0];
    f.total = f.batch;
  } else {
    fail(SSU_ERROR_BAD_RANK, "x.ndim=%d but x must be (Bt, H, P), (Bt, T, H, P), or (TT, H, P) "
         "with cu_seqlens", a.x.ndim);
  }
  if (!f.varlen && a.max_tokens != 0 && a.max_tokens != f.tokens)
    fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "max_tokens=%" PRId64 " is for the varlen form only "
         "(no cu_seqlens given); leave it 0", a.max_tokens);
  p.batch = f.batch;
  p.ntokens = f.tokens;
  p.total_tokens = f.total;
  const int lead = f.lead();

  // ---- x, z, out: lead + (H, P) ----------------------------------------------
  auto check_xlike = [&](const ssu_tensor_t& t, const char* name, int64_t* sb, int64_t* stt,
                         int64_t* sh) {
    check_basic(t, name);
    if (t.ndim != lead + 2)
      fail(SSU_ERROR_BAD_RANK, "%s.ndim=%d but it must be %d: %sH, P)", name, t.ndim, lead + 2,
           lead_layout(f));
    RowStrides r = check_lead(t, name, f);
    check_dim(t, name, lead, H, "nheads H (state.shape[1])");
    check_dim(t, name, lead + 1, P, "dim P (state.shape[2])");
    check_unit_stride(t, name, lead + 1);
    *sb = r.b;
    *stt = r.t;
    *sh = t.strides[lead];
  };
  check_float_dtype(a.x, "x");
  p.input_dtype = a.x.dtype;
  check_xlike(a.x, "x", &p.x_stride_b, &p.x_stride_t, &p.x_stride_h);
  p.x = a.x.data;

  require(a.out, "out");
  check_same_dtype(a.out, "out", p.input_dtype, "x");
  check_xlike(a.out, "out", &p.out_stride_b, &p.out_stride_t, &p.out_stride_h);
  p.out = a.out.data;

  if (present(a.z)) {
    check_same_dtype(a.z, "z", p.input_dtype, "x");
    check_xlike(a.z, "z", &p.z_stride_b, &p.z_stride_t, &p.z_stride_h);
    p.z = a.z.data;
    p.features |= SSU_F_HAS_Z;
  }

  // ---- B, C: lead + (G, N) ---------------------------------------------------
  auto check_bc = [&](const ssu_tensor_t& t, const char* name, int64_t* sb, int64_t* stt,
                      int64_t* sg) {
    require(t, name);
    check_basic(t, name);
    check_same_dtype(t, name, p.input_dtype, "x");
    if (t.ndim != lead + 2)
      fail(SSU_ERROR_BAD_RANK, "%s.ndim=%d but it must be %d: %sG, N)", name, t.ndim, lead + 2,
           lead_layout(f));
    RowStrides r = check_lead(t, name, f);
    check_dim(t, name, lead + 1, N, "dstate N (state.shape[3])");
    check_unit_stride(t, name, lead + 1);
    *sb = r.b;
    *stt = r.t;
    *sg = t.strides[lead];
    return t.shape[lead];
  };
  const int64_t G = check_bc(a.B, "B", &p.B_stride_b, &p.B_stride_t, &p.B_stride_g);
  if (G < 1) fail(SSU_ERROR_BAD_SHAPE, "B.shape[%d] (ngroups G)=0 but G must be >= 1", lead);
  if (H % G != 0)
    fail(SSU_ERROR_BAD_SHAPE, "nheads H=%" PRId64 " is not a multiple of ngroups G=%" PRId64
         " (B.shape[%d])", H, G, lead);
  check_bc(a.C, "C", &p.C_stride_b, &p.C_stride_t, &p.C_stride_g);
  check_dim(a.C, "C", lead, G, "ngroups G (B's groups axis)");
  p.B = a.B.data;
  p.C = a.C.data;
  p.ngroups = G;
  p.heads_per_group = H / G;

  // ---- dt: lead + (H) or lead + (H, P) -------------------------------------
  require(a.dt, "dt");
  check_basic(a.dt, "dt");
  check_float_dtype(a.dt, "dt");
  if (a.dt.ndim != lead + 1 && a.dt.ndim != lead + 2)
    fail(SSU_ERROR_BAD_RANK, "dt.ndim=%d but it must be %d %sH) per head or %d %sH, P) per "
         "channel", a.dt.ndim, lead + 1, lead_layout(f), lead + 2, lead_layout(f));
  {
    RowStrides r = check_lead(a.dt, "dt", f);
    check_dim(a.dt, "dt", lead, H, "nheads H (state.shape[1])");
    p.dt_stride_b = r.b;
    p.dt_stride_t = r.t;
    p.dt_stride_h = a.dt.strides[lead];
    if (a.dt.ndim == lead + 2) {
      check_dim(a.dt, "dt", lead + 1, P, "dim P (state.shape[2])");
      p.dt_stride_p = P > 1 ? a.dt.strides[lead + 1] : 0;
    }
    if (p.dt_stride_p != 0) p.features |= SSU_F_DT_PER_CHANNEL;
  }
  p.dt = a.dt.data;
  p.dt_dtype = a.dt.dtype;

  // ---- A: (H,) or (H, P, N) ------------------------------------------------
  require(a.A, "A");
  check_basic(a.A, "A");
  check_float_dtype(a.A, "A");
  if (a.A.ndim != 1 && a.A.ndim != 3)
    fail(SSU_ERROR_BAD_RANK, "A.ndim=%d but it must be 1 (H,) per head or 3 (H, P, N) per channel",
         a.A.ndim);
  check_dim(a.A, "A", 0, H, "nheads H (state.shape[1])");
  p.A_stride_h = a.A.strides[0];
  if (a.A.ndim == 3) {
    check_dim(a.A, "A", 1, P, "dim P (state.shape[2])");
    check_dim(a.A, "A", 2, N, "dstate N (state.shape[3])");
    p.A_stride_p = P > 1 ? a.A.strides[1] : 0;
    p.A_stride_n = N > 1 ? a.A.strides[2] : 0;
    if (p.A_stride_p != 0 || p.A_stride_n != 0) p.features |= SSU_F_A_PER_CHANNEL;
  }
  p.A = a.A.data;
  p.A_dtype = a.A.dtype;

  // ---- D, dt_bias (optional): (H,) or (H, P) ---------------------------------
  p.D_dtype = p.dt_bias_dtype = SSU_DTYPE_F32;
  if (present(a.D)) {
    if (check_head_param(a.D, "D", H, P, &p.D_stride_h, &p.D_stride_p))
      p.features |= SSU_F_D_PER_CHANNEL;
    p.D = a.D.data;
    p.D_dtype = a.D.dtype;
    p.features |= SSU_F_HAS_D;
  }
  if (present(a.dt_bias)) {
    if (check_head_param(a.dt_bias, "dt_bias", H, P, &p.dt_bias_stride_h, &p.dt_bias_stride_p))
      p.features |= SSU_F_DT_BIAS_PER_CHANNEL;
    p.dt_bias = a.dt_bias.data;
    p.dt_bias_dtype = a.dt_bias.dtype;
    p.features |= SSU_F_HAS_DT_BIAS;
    // The step size is dt + dt_bias: a per-channel bias makes it per channel.
    if (p.features & SSU_F_DT_BIAS_PER_CHANNEL) p.features |= SSU_F_DT_PER_CHANNEL;
  }

  // ---- slot indices ----------------------------------------------------------
  p.index_dtype = SSU_DTYPE_I32;
  bool src_2d = false, dst_2d = false;
  if (present(a.src_index)) {
    IndexInfo r = check_slot_index(a.src_index, "src_index", f);
    p.src_index = a.src_index.data;
    p.src_stride_b = r.sb;
    p.src_stride_t = r.st;
    p.index_dtype = a.src_index.dtype;
    src_2d = r.two_d;
    p.features |= SSU_F_HAS_SRC;
  }
  if (present(a.dst_index)) {
    IndexInfo r = check_slot_index(a.dst_index, "dst_index", f);
    if (present(a.src_index))
      check_same_dtype(a.dst_index, "dst_index", a.src_index.dtype, "src_index");
    p.dst_index = a.dst_index.data;
    p.dst_stride_b = r.sb;
    p.dst_stride_t = r.st;
    p.index_dtype = a.dst_index.dtype;
    dst_2d = r.two_d;
    p.features |= dst_2d ? SSU_F_DST_PER_TOKEN : SSU_F_HAS_DST;
  }
  p.accepted_dtype = SSU_DTYPE_I32;
  if (present(a.num_accepted_tokens)) {
    if (!src_2d)
      fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "num_accepted_tokens is given but src_index is not "
           "2-D (Bt, T); the accepted count selects a column of a per-token src_index");
    p.num_accepted_stride = check_batch_index(a.num_accepted_tokens, "num_accepted_tokens", f);
    p.num_accepted = a.num_accepted_tokens.data;
    p.accepted_dtype = a.num_accepted_tokens.dtype;
    p.features |= SSU_F_HAS_ACCEPTED;
  }

  // ---- intermediate buffer -------------------------------------------------
  p.inter_index_dtype = SSU_DTYPE_I32;
  if (present(a.intermediate_states)) {
    const ssu_tensor_t& t = a.intermediate_states;
    const char* name = "intermediate_states";
    if (!f.multi)
      fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "intermediate_states needs the multi-token or varlen "
           "form; x is single-token (Bt, H, P)");
    if (dst_2d)
      fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "intermediate_states and a 2-D (per-token) dst_index "
           "exclude each other");
    check_rank(t, name, 5, "(I, T, H, P, N)");
    check_same_dtype(t, name, p.state_dtype, "pool.state");
    check_dim(t, name, 1, f.tokens, "the token count T");
    check_dim(t, name, 2, H, "nheads H");
    check_dim(t, name, 3, P, "dim P");
    check_dim(t, name, 4, N, "dstate N");
    if (t.strides[4] != 1 || t.strides[3] != N || t.strides[2] != P * N)
      fail(SSU_ERROR_BAD_STRIDE, "intermediate_states.strides[2..4]=(%" PRId64 ", %" PRId64 ", %"
           PRId64 ") but its inner three axes must be dense: (%" PRId64 ", %" PRId64 ", 1)",
           t.strides[2], t.strides[3], t.strides[4], P * N, N);
    check_rows_disjoint(t, name, H * P * N, "H*P*N");
    p.inter_states = t.data;
    p.n_intermediate = t.shape[0];
    p.inter_stride_i = t.strides[0];
    p.inter_stride_t = t.strides[1];
    p.features |= SSU_F_HAS_INTER;
  }
  if (present(a.intermediate_index)) {
    if (!present(a.intermediate_states))
      fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "intermediate_index is given without "
           "intermediate_states");
    p.inter_index_stride = check_batch_index(a.intermediate_index, "intermediate_index", f);
    p.inter_index = a.intermediate_index.data;
    p.inter_index_dtype = a.intermediate_index.dtype;
    p.features |= SSU_F_HAS_INTER_INDEX;
  }

  // ---- intermediate scales (block-scaled state with an intermediate buffer) --
  if (scaled && present(a.intermediate_states)) {
    const ssu_tensor_t& t = a.intermediate_scales;
    const char* name = "intermediate_scales";
    if (!present(t))
      fail(SSU_ERROR_NULL_POINTER, "intermediate_scales.data is NULL but pool.state.dtype=%s with "
           "intermediate_states needs its decode scales, an (I, T, H, P) f32 buffer",
           ssu_dtype_name(st.dtype));
    check_rank(t, name, 4, "(I, T, H, P) like intermediate_states");
    if (t.dtype != SSU_DTYPE_F32)
      fail(SSU_ERROR_BAD_DTYPE, "%s.dtype=%s but it must be f32", name, ssu_dtype_name(t.dtype));
    check_dim(t, name, 0, p.n_intermediate, "I (intermediate_states.shape[0])");
    check_dim(t, name, 1, f.tokens, "the token count T (intermediate_states.shape[1])");
    check_dim(t, name, 2, H, "nheads H");
    check_dim(t, name, 3, P, "dim P");
    if ((P > 1 && t.strides[3] != 1) || (H > 1 && t.strides[2] != P))
      fail(SSU_ERROR_BAD_STRIDE, "%s.strides[2..3]=(%" PRId64 ", %" PRId64 ") but its inner two "
           "axes must be dense: (%" PRId64 ", 1)", name, t.strides[2], t.strides[3], P);
    check_rows_disjoint(t, name, H * P, "H*P");
    p.inter_scale = static_cast<float*>(t.data);
    p.inter_scale_stride_i = t.strides[0];
    p.inter_scale_stride_t = t.strides[1];
  } else if (present(a.intermediate_scales)) {
    if (scaled)
      fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "intermediate_scales is given without "
           "intermediate_states; the scales belong to a %s intermediate buffer",
           ssu_dtype_name(st.dtype));
    fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "intermediate_scales is given but pool.state.dtype=%s; "
         "decode scales belong to i16, i8 and f8e4m3 (block-scaled) states only",
         ssu_dtype_name(st.dtype));
  }

  // ---- stochastic rounding ---------------------------------------------------
  if (a.reserved1 != 0)
    fail(SSU_ERROR_INVALID_ARGUMENT, "args->reserved1=%u but it must be 0", a.reserved1);
  if (a.rounding_rounds > 32)
    fail(SSU_ERROR_INVALID_ARGUMENT, "rounding_rounds=%u but Philox rounds must be 1..32 (0 means "
         "10)", a.rounding_rounds);
  if (a.rounding_seed) {
    // int8 codes always round to nearest: an integer stochastic rounding
    // is not defined (yet), so a seed with an i8 state is refused.
    if (st.dtype != SSU_DTYPE_F16 && st.dtype != SSU_DTYPE_BF16 && st.dtype != SSU_DTYPE_F8E4M3)
      fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "rounding_seed is given but pool.state.dtype=%s; "
           "stochastic rounding applies to f16, bf16 and f8e4m3 states only",
           ssu_dtype_name(st.dtype));
    p.sr_seed = a.rounding_seed;
    p.sr_rounds = a.rounding_rounds == 0 ? 10u : a.rounding_rounds;
    p.features |= SSU_F_STOCHASTIC;
  } else if (a.rounding_rounds != 0) {
    fail(SSU_ERROR_INCOMPATIBLE_OPTIONS, "rounding_rounds=%u but rounding_seed is NULL; the rounds "
         "apply to stochastic rounding, which needs a seed", a.rounding_rounds);
  }

  if (a.flags & SSU_UPDATE_DT_SOFTPLUS) p.features |= SSU_F_DT_SOFTPLUS;
  if (a.flags & SSU_UPDATE_DISABLE_STATE_UPDATE) p.features |= SSU_F_DISABLE_UPDATE;
  return p;
}

void check_fits_plan(const ssu_update_params& plan, const ssu_update_params& p) {
#define SSU_FIT_(field, what)                                                                    \
  if (p.field != plan.field)                                                                     \
    fail(SSU_ERROR_PLAN_MISMATCH, "%s is %" PRId64 " but the plan was made for %" PRId64, what,  \
         static_cast<int64_t>(p.field), static_cast<int64_t>(plan.field));
  SSU_FIT_(nheads, "nheads H")
  SSU_FIT_(dim, "dim P")
  SSU_FIT_(dstate, "dstate N")
  SSU_FIT_(ngroups, "ngroups G")
  SSU_FIT_(ntokens, "the token count T")
  if (p.sr_rounds != plan.sr_rounds && (p.features & plan.features & SSU_F_STOCHASTIC))
    fail(SSU_ERROR_PLAN_MISMATCH, "rounding_rounds gives %u Philox rounds but the plan was made "
         "for %u", p.sr_rounds, plan.sr_rounds);
#undef SSU_FIT_
#define SSU_FIT_DTYPE_(field, what)                                                       \
  if (p.field != plan.field)                                                              \
    fail(SSU_ERROR_PLAN_MISMATCH, "%s is %s but the plan was made for %s", what,          \
         ssu_dtype_name(p.field), ssu_dtype_name(plan.field));
  SSU_FIT_DTYPE_(state_dtype, "pool.state.dtype")
  SSU_FIT_DTYPE_(input_dtype, "x.dtype")
  SSU_FIT_DTYPE_(dt_dtype, "dt.dtype")
  SSU_FIT_DTYPE_(A_dtype, "A.dtype")
  SSU_FIT_DTYPE_(D_dtype, "D.dtype")
  SSU_FIT_DTYPE_(dt_bias_dtype, "dt_bias.dtype")
  SSU_FIT_DTYPE_(index_dtype, "the slot index dtype")
  SSU_FIT_DTYPE_(seqlen_dtype, "cu_seqlens.dtype")
  SSU_FIT_DTYPE_(accepted_dtype, "num_accepted_tokens.dtype")
  SSU_FIT_DTYPE_(inter_index_dtype, "intermediate_index.dtype")
#undef SSU_FIT_DTYPE_
  if (p.features != plan.features) {
    static const struct {
      uint32_t bit;
      const char* what;
    } kNames[] = {
        {SSU_F_DT_SOFTPLUS, "flag SSU_UPDATE_DT_SOFTPLUS"},
        {SSU_F_DISABLE_UPDATE, "flag SSU_UPDATE_DISABLE_STATE_UPDATE"},
        {SSU_F_HAS_D, "the presence of D"},
        {SSU_F_HAS_DT_BIAS, "the presence of dt_bias"},
        {SSU_F_HAS_Z, "the presence of z"},
        {SSU_F_VARLEN, "the varlen form (cu_seqlens)"},
        {SSU_F_HAS_SRC, "the presence of src_index"},
        {SSU_F_HAS_DST, "a 1-D dst_index"},
        {SSU_F_DST_PER_TOKEN, "a 2-D (per-token) dst_index"},
        {SSU_F_HAS_ACCEPTED, "the presence of num_accepted_tokens"},
        {SSU_F_HAS_INTER, "the presence of intermediate_states"},
        {SSU_F_HAS_INTER_INDEX, "the presence of intermediate_index"},
        {SSU_F_DT_PER_CHANNEL, "per-channel dt"},
        {SSU_F_A_PER_CHANNEL, "per-channel A"},
        {SSU_F_D_PER_CHANNEL, "per-channel D"},
        {SSU_F_DT_BIAS_PER_CHANNEL, "per-channel dt_bias"},
        {SSU_F_MULTI_TOKEN, "the multi-token form (x with a token axis)"},
        {SSU_F_STOCHASTIC, "stochastic rounding (rounding_seed)"},
    };
    const uint32_t diff = p.features ^ plan.features;
    for (const auto& n : kNames)
      if (diff & n.bit)
        fail(SSU_ERROR_PLAN_MISMATCH, "%s: the call %s it but the plan was made %s it", n.what,
             (p.features & n.bit) ? "has" : "lacks", (plan.features & n.bit) ? "with" : "without");
    fail(SSU_ERROR_PLAN_MISMATCH, "the call's features 0x%x differ from the plan's 0x%x",
         p.features, plan.features);
  }
}

}  // namespace ssu
