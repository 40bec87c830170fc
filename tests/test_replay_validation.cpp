// Every class of bad input to the replay operations (ssu_plan_create_replay,
// ssu_plan_execute_replay, ssu_plan_execute_replay_flush): the documented
// status, a message that names the argument, the out-plan untouched, and
// nothing written (every buffer of the problem, pool, scales, rings,
// counters and outputs included, compared bit for bit). Then execute
// arguments that do not fit the plan, flush arguments that do not fit it,
// and handles of the wrong kind.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "replay_harness.h"

using namespace ssutest;

namespace {

const ssu_plan_t kSentinelPlan = reinterpret_cast<ssu_plan_t>(uintptr_t(0x5d5d5d5d));

struct CpuContext {
  ssu_context_t ctx = nullptr;
  CpuContext() {
    ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
    o.backend = SSU_BACKEND_CPU;
    o.num_threads = 2;
    REQUIRE(ssu_context_create(&o, &ctx) == SSU_SUCCESS);
  }
  ~CpuContext() { ssu_context_destroy(ctx); }
};

// H = 4, G = 2, P = 32, N = 16, Bt = 3 everywhere (the mutations rely on it).
const int64_t H = 4, G = 2, P = 32, N = 16, Bt = 3;

enum Base { kSingle, kMulti, kVarlen, kMamba1, kI16, kSR, kI8, kF8, kF8SR };

ReplayCase base_case(Base b) {
  ReplayCase c;
  c.shape(H, G, P, N);
  c.batch = Bt;
  c.dtypes(SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F32);
  c.index = SSU_DTYPE_I32;
  c.pad = Pad::Negative;
  c.seed = 500 + uint64_t(b);
  c.ring(7);
  switch (b) {
    case kSingle:
      c.tag = "validation_single";
      c.single();
      break;
    case kMulti:  // speculative, i64 slots, (Bt, T, ...) tensors
      c.tag = "validation_multi";
      c.multi(4);
      c.speculative = true;
      c.index = SSU_DTYPE_I64;
      c.dtypes(SSU_DTYPE_BF16, SSU_DTYPE_F16, SSU_DTYPE_F32);
      break;
    case kVarlen:
      c.tag = "validation_varlen";
      c.varlen(4);
      break;
    case kMamba1:  // per-channel step size: the dt ring is (S, L, H, P)
      c.tag = "validation_mamba1";
      c.single();
      c.mamba1 = true;
      c.H = c.G = 1;
      c.P = 64;
      break;
    case kI16:
      c.tag = "validation_i16";
      c.single();
      c.state = SSU_DTYPE_I16;
      break;
    case kSR:  // bf16 checkpoints rounded stochastically with 7 rounds
      c.tag = "validation_sr";
      c.multi(2);
      c.dtypes(SSU_DTYPE_BF16, SSU_DTYPE_BF16, SSU_DTYPE_F32);
      c.sr(0x5eed, 7);
      break;
    case kI8:
      c.tag = "validation_i8";
      c.single();
      c.state = SSU_DTYPE_I8;
      break;
    case kF8:  // e4m3 checkpoints rounded to nearest, speculative
      c.tag = "validation_f8e4m3";
      c.multi(2);
      c.speculative = true;
      c.dtypes(SSU_DTYPE_F8E4M3, SSU_DTYPE_F16, SSU_DTYPE_F32);
      break;
    case kF8SR:  // e4m3 checkpoints rounded stochastically with 5 rounds
      c.tag = "validation_f8e4m3_sr";
      c.varlen(4);
      c.dtypes(SSU_DTYPE_F8E4M3, SSU_DTYPE_BF16, SSU_DTYPE_F32);
      c.sr(0xf8, 5);
      break;
  }
  return c;
}

bool names(const std::string& msg, const std::string& name) {
  auto ident = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
  };
  for (size_t at = msg.find(name); at != std::string::npos; at = msg.find(name, at + 1)) {
    const bool left = at == 0 || !ident(msg[at - 1]);
    const bool right = at + name.size() >= msg.size() || !ident(msg[at + name.size()]);
    if (left && right) return true;
  }
  return false;
}

bool names_any(const std::string& msg, const std::vector<std::string>& list) {
  for (const auto& n : list)
    if (names(msg, n)) return true;
  return list.empty();
}

std::string codes_text(const std::vector<ssu_status_t>& codes) {
  std::ostringstream o;
  for (size_t i = 0; i < codes.size(); ++i)
    o << (i ? " or " : "") << codes[i] << " (" << ssu_status_string(codes[i]) << ")";
  return o.str();
}

bool one_of(ssu_status_t st, const std::vector<ssu_status_t>& codes) {
  return std::find(codes.begin(), codes.end(), st) != codes.end();
}

// Spare valid memory for descriptors the base problem does not have.
std::vector<int64_t>& spare() {
  static std::vector<int64_t> v(1 << 16, 0);
  return v;
}
ssu_tensor_t spare_tensor(ssu_dtype_t dtype, std::vector<int64_t> shape) {
  ssu_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = spare().data();
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

void set_rank(ssu_tensor_t& t, int32_t ndim) {
  for (int k = std::max(t.ndim, 0); k < SSU_MAX_DIMS; ++k) {
    t.shape[k] = 1;
    t.strides[k] = 1;
  }
  t.ndim = ndim;
}

// ---------------------------------------------------------------------------
// Replay step arguments.
// ---------------------------------------------------------------------------
using Mutate = std::function<void(ssu_replay_args_t&, ssu_state_pool_t&, ssu_replay_ring_t&)>;

struct BadInput {
  std::string what;
  Base base;
  Mutate mutate;
  std::vector<ssu_status_t> codes;
  std::vector<std::string> arg_names;  // the message names one of these
};

std::vector<BadInput> bad_inputs() {
  using A = ssu_replay_args_t;
  using Pl = ssu_state_pool_t;
  using R = ssu_replay_ring_t;
  std::vector<BadInput> v;
  auto add = [&](std::string what, Base base, Mutate m, std::vector<ssu_status_t> codes,
                 std::vector<std::string> nm) {
    v.push_back({std::move(what), base, std::move(m), std::move(codes), std::move(nm)});
  };
  using RT = ssu_tensor_t R::*;
  const std::pair<const char*, RT> ring_tensors[] = {
      {"ring.x", &R::x}, {"ring.B", &R::B}, {"ring.dt", &R::dt},
      {"ring.committed", &R::committed}, {"ring.pending", &R::pending}};

  // --- the ring struct ---------------------------------------------------------
  add("ring NULL", kSingle, [](A& a, Pl&, R&) { a.ring = nullptr; }, {SSU_ERROR_NULL_POINTER},
      {"ring"});
  add("ring struct_size 0", kSingle, [](A&, Pl&, R& r) { r.struct_size = 0; },
      {SSU_ERROR_STRUCT_SIZE}, {"ring", "struct_size"});
  add("ring struct_size 8", kMulti, [](A&, Pl&, R& r) { r.struct_size = 8; },
      {SSU_ERROR_STRUCT_SIZE}, {"ring", "struct_size"});
  add("ring reserved0", kSingle, [](A&, Pl&, R& r) { r.reserved0 = 1; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"reserved0", "ring"});
  for (const auto& rt : ring_tensors) {
    const RT f = rt.second;
    add(std::string(rt.first) + " data NULL", kSingle, [f](A&, Pl&, R& r) { (r.*f).data = nullptr; },
        {SSU_ERROR_NULL_POINTER}, {rt.first});
  }

  // --- ranks -------------------------------------------------------------------------
  auto rank = [&](const char* name, Base base, RT f, int32_t ndim) {
    add(std::string(name) + ".ndim=" + std::to_string(ndim), base,
        [f, ndim](A&, Pl&, R& r) { set_rank(r.*f, ndim); }, {SSU_ERROR_BAD_RANK}, {name});
  };
  rank("ring.x", kSingle, &R::x, 3);
  rank("ring.x", kSingle, &R::x, 5);
  rank("ring.x", kSingle, &R::x, 0);
  rank("ring.x", kMulti, &R::x, 7);
  rank("ring.B", kSingle, &R::B, 3);
  rank("ring.B", kVarlen, &R::B, 2);
  rank("ring.dt", kSingle, &R::dt, 4);   // per-head step: (S, L, H)
  rank("ring.dt", kSingle, &R::dt, 2);
  rank("ring.dt", kMamba1, &R::dt, 3);   // per-channel step: (S, L, H, P)
  rank("ring.committed", kSingle, &R::committed, 2);
  rank("ring.committed", kSingle, &R::committed, 0);
  rank("ring.pending", kMulti, &R::pending, 2);

  // --- shapes ------------------------------------------------------------------------
  auto shape = [&](std::string what, Base base, const char* name, RT f, int dim,
                   std::function<int64_t(int64_t)> value, std::vector<std::string> nm = {}) {
    if (nm.empty()) nm = {name};
    add(what, base, [f, dim, value](A&, Pl&, R& r) { (r.*f).shape[dim] = value((r.*f).shape[dim]); },
        {SSU_ERROR_BAD_SHAPE}, nm);
  };
  auto plus = [](int64_t d) { return [d](int64_t v) { return v + d; }; };
  auto times = [](int64_t k) { return [k](int64_t v) { return v * k; }; };
  shape("ring.x slots S-1", kSingle, "ring.x", &R::x, 0, plus(-1));
  shape("ring.x slots S+1", kMulti, "ring.x", &R::x, 0, plus(1));
  shape("ring.x heads H+1", kSingle, "ring.x", &R::x, 2, plus(1));
  shape("ring.x dim P-1", kSingle, "ring.x", &R::x, 3, plus(-1));
  shape("ring.x L=0", kSingle, "ring.x", &R::x, 1, [](int64_t) { return int64_t(0); });
  shape("ring.B slots S+1", kSingle, "ring.B", &R::B, 0, plus(1));
  shape("ring.B L+1", kSingle, "ring.B", &R::B, 1, plus(1));
  shape("ring.B L-1", kMulti, "ring.B", &R::B, 1, plus(-1));
  shape("ring.B groups G+1", kSingle, "ring.B", &R::B, 2, plus(1));
  shape("ring.B dstate 2N", kSingle, "ring.B", &R::B, 3, times(2));
  shape("ring.dt slots S-1", kSingle, "ring.dt", &R::dt, 0, plus(-1));
  shape("ring.dt L+1", kSingle, "ring.dt", &R::dt, 1, plus(1));
  shape("ring.dt heads H-1", kVarlen, "ring.dt", &R::dt, 2, plus(-1));
  shape("ring.dt dim P+1 (mamba1)", kMamba1, "ring.dt", &R::dt, 3, plus(1));
  shape("ring.committed S+1", kSingle, "ring.committed", &R::committed, 0, plus(1));
  shape("ring.pending S-1", kSingle, "ring.pending", &R::pending, 0, plus(-1));
  shape("ring.x negative slots", kSingle, "ring.x", &R::x, 0, [](int64_t) { return int64_t(-3); });
  add("ring.x L=5000 (beyond the supported capacity)", kSingle,
      [](A&, Pl&, R& r) { r.x.shape[1] = r.B.shape[1] = r.dt.shape[1] = 5000; },
      {SSU_ERROR_NOT_SUPPORTED}, {"ring.x", "L"});
  // T > L: the ring holds fewer entries than a call's tokens.
  add("T=4 > L=2 (multi)", kMulti,
      [](A&, Pl&, R& r) { r.x.shape[1] = r.B.shape[1] = r.dt.shape[1] = 2; },
      {SSU_ERROR_BAD_SHAPE}, {"ring.x", "x", "L", "T"});
  add("max_tokens=8 > L=7 (varlen)", kVarlen, [](A& a, Pl&, R&) { a.max_tokens = 8; },
      {SSU_ERROR_BAD_SHAPE}, {"max_tokens", "ring.x", "L"});

  // --- dtypes ----------------------------------------------------------------------------
  auto dtype = [&](const char* name, Base base, RT f, ssu_dtype_t d, ssu_status_t code) {
    add(std::string(name) + " dtype " + ssu_dtype_name(d), base,
        [f, d](A&, Pl&, R& r) { (r.*f).dtype = d; }, {code}, {name});
  };
  dtype("ring.x", kSingle, &R::x, SSU_DTYPE_F32, SSU_ERROR_DTYPE_MISMATCH);  // input is bf16
  dtype("ring.x", kMulti, &R::x, SSU_DTYPE_BF16, SSU_ERROR_DTYPE_MISMATCH);  // input is f16
  dtype("ring.B", kSingle, &R::B, SSU_DTYPE_F16, SSU_ERROR_DTYPE_MISMATCH);
  dtype("ring.B", kSingle, &R::B, SSU_DTYPE_I32, SSU_ERROR_DTYPE_MISMATCH);
  dtype("ring.dt", kSingle, &R::dt, SSU_DTYPE_BF16, SSU_ERROR_DTYPE_MISMATCH);
  dtype("ring.dt", kMamba1, &R::dt, SSU_DTYPE_F16, SSU_ERROR_DTYPE_MISMATCH);
  dtype("ring.committed", kSingle, &R::committed, SSU_DTYPE_I64, SSU_ERROR_BAD_DTYPE);
  dtype("ring.committed", kSingle, &R::committed, SSU_DTYPE_F32, SSU_ERROR_BAD_DTYPE);
  dtype("ring.pending", kMulti, &R::pending, SSU_DTYPE_I16, SSU_ERROR_BAD_DTYPE);

  // --- strides -------------------------------------------------------------------------
  auto last_stride = [&](const char* name, Base base, RT f, int64_t s) {
    add(std::string(name) + " last stride " + std::to_string(s), base,
        [f, s](A&, Pl&, R& r) { (r.*f).strides[(r.*f).ndim - 1] = s; }, {SSU_ERROR_BAD_STRIDE},
        {name});
  };
  last_stride("ring.x", kSingle, &R::x, 2);
  last_stride("ring.x", kVarlen, &R::x, 0);
  last_stride("ring.B", kSingle, &R::B, 2);
  last_stride("ring.B", kMulti, &R::B, 0);
  last_stride("ring.dt", kSingle, &R::dt, 2);   // (S, L, H): H = 4 must be dense
  last_stride("ring.dt", kMamba1, &R::dt, 3);   // (S, L, H, P)
  add("ring.x negative slot stride", kSingle, [](A&, Pl&, R& r) { r.x.strides[0] = -1; },
      {SSU_ERROR_BAD_STRIDE}, {"ring.x"});
  add("ring.committed negative stride", kSingle, [](A&, Pl&, R& r) { r.committed.strides[0] = -2; },
      {SSU_ERROR_BAD_STRIDE}, {"ring.committed"});

  // --- slots and num_accepted ------------------------------------------------------------
  add("2-D src_index (multi)", kMulti,
      [](A& a, Pl&, R&) { a.src_index = spare_tensor(SSU_DTYPE_I64, {Bt, 4}); },
      {SSU_ERROR_BAD_RANK, SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"src_index"});
  add("2-D src_index (single)", kSingle,
      [](A& a, Pl&, R&) { a.src_index = spare_tensor(SSU_DTYPE_I32, {Bt, 1}); },
      {SSU_ERROR_BAD_RANK, SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"src_index"});
  add("src_index dtype f32", kSingle, [](A& a, Pl&, R&) { a.src_index.dtype = SSU_DTYPE_F32; },
      {SSU_ERROR_BAD_DTYPE}, {"src_index"});
  add("src_index batch Bt+1", kSingle, [](A& a, Pl&, R&) { a.src_index.shape[0] = Bt + 1; },
      {SSU_ERROR_BAD_SHAPE}, {"src_index"});
  add("num_accepted ndim 2", kMulti, [](A& a, Pl&, R&) { set_rank(a.num_accepted, 2); },
      {SSU_ERROR_BAD_RANK}, {"num_accepted"});
  add("num_accepted dtype f32", kMulti, [](A& a, Pl&, R&) { a.num_accepted.dtype = SSU_DTYPE_F32; },
      {SSU_ERROR_BAD_DTYPE}, {"num_accepted"});
  add("num_accepted dtype i16", kMulti, [](A& a, Pl&, R&) { a.num_accepted.dtype = SSU_DTYPE_I16; },
      {SSU_ERROR_BAD_DTYPE}, {"num_accepted"});
  add("num_accepted batch Bt+1", kMulti, [](A& a, Pl&, R&) { a.num_accepted.shape[0] = Bt + 1; },
      {SSU_ERROR_BAD_SHAPE}, {"num_accepted"});

  // --- the update's own arguments (shared validation) ------------------------------------
  add("pool NULL", kSingle, [](A& a, Pl&, R&) { a.pool = nullptr; }, {SSU_ERROR_NULL_POINTER},
      {"pool"});
  add("pool state data NULL", kSingle, [](A&, Pl& p, R&) { p.state.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"state", "pool.state"});
  add("x data NULL", kSingle, [](A& a, Pl&, R&) { a.x.data = nullptr; }, {SSU_ERROR_NULL_POINTER},
      {"x"});
  add("out data NULL", kMulti, [](A& a, Pl&, R&) { a.out.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"out"});
  add("C batch Bt-1", kSingle, [](A& a, Pl&, R&) { a.C.shape[0] = Bt - 1; }, {SSU_ERROR_BAD_SHAPE},
      {"C"});
  add("B dstate N+1", kMulti, [](A& a, Pl&, R&) { a.B.shape[3] = N + 1; }, {SSU_ERROR_BAD_SHAPE},
      {"B", "state"});
  add("i16 state_scale data NULL", kI16, [](A&, Pl& p, R&) { p.state_scale.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"state_scale"});
  // 8-bit checkpoints: the scale pool exactly as for i16 (SPEC section 8).
  add("i8 state_scale data NULL", kI8, [](A&, Pl& p, R&) { p.state_scale.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"state_scale"});
  add("f8e4m3 state_scale data NULL", kF8, [](A&, Pl& p, R&) { p.state_scale.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"state_scale"});
  add("f8e4m3 (stochastic) state_scale absent", kF8SR,
      [](A&, Pl& p, R&) { std::memset(&p.state_scale, 0, sizeof p.state_scale); },
      {SSU_ERROR_NULL_POINTER}, {"state_scale"});
  add("i8 state_scale dtype f16", kI8, [](A&, Pl& p, R&) { p.state_scale.dtype = SSU_DTYPE_F16; },
      {SSU_ERROR_BAD_DTYPE}, {"state_scale"});
  add("f8e4m3 state_scale dtype f8e4m3", kF8,
      [](A&, Pl& p, R&) { p.state_scale.dtype = SSU_DTYPE_F8E4M3; }, {SSU_ERROR_BAD_DTYPE},
      {"state_scale"});
  add("i8 state_scale slots S+1", kI8, [](A&, Pl& p, R&) { p.state_scale.shape[0] += 1; },
      {SSU_ERROR_BAD_SHAPE}, {"state_scale"});
  add("f8e4m3 state_scale heads H-1", kF8, [](A&, Pl& p, R&) { p.state_scale.shape[1] -= 1; },
      {SSU_ERROR_BAD_SHAPE}, {"state_scale"});
  add("f8e4m3 (stochastic) state_scale dim P+1", kF8SR,
      [](A&, Pl& p, R&) { p.state_scale.shape[2] += 1; }, {SSU_ERROR_BAD_SHAPE}, {"state_scale"});
  add("i8 state_scale ndim 4", kI8, [](A&, Pl& p, R&) { set_rank(p.state_scale, 4); },
      {SSU_ERROR_BAD_RANK}, {"state_scale"});
  add("f8e4m3 state_scale dim stride 2", kF8, [](A&, Pl& p, R&) { p.state_scale.strides[2] = 2; },
      {SSU_ERROR_BAD_STRIDE}, {"state_scale"});
  add("state_scale with an f32 state", kSingle,
      [](A&, Pl& p, R&) { p.state_scale = spare_tensor(SSU_DTYPE_F32, {p.state.shape[0], H, P}); },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS, SSU_ERROR_INVALID_ARGUMENT}, {"state_scale"});
  static uint64_t seed_value = 1234;
  add("rounding_seed with an f32 state", kSingle, [](A& a, Pl&, R&) { a.rounding_seed = &seed_value; },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"rounding_seed"});
  add("rounding_seed with an i16 state", kI16, [](A& a, Pl&, R&) { a.rounding_seed = &seed_value; },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"rounding_seed"});
  // int8 codes always round to nearest (the plain update's rule).
  add("rounding_seed with an i8 state", kI8, [](A& a, Pl&, R&) { a.rounding_seed = &seed_value; },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"rounding_seed"});
  add("rounding_seed and rounds with an i8 state", kI8, [](A& a, Pl&, R&) {
        a.rounding_seed = &seed_value;
        a.rounding_rounds = 7;
      }, {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"rounding_seed"});
  add("rounding_rounds 33", kSR, [](A& a, Pl&, R&) { a.rounding_rounds = 33; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"rounding_rounds"});
  add("rounding_rounds without a seed", kMulti, [](A& a, Pl&, R&) { a.rounding_rounds = 10; },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"rounding_rounds", "rounding_seed"});
  add("varlen max_tokens 0", kVarlen, [](A& a, Pl&, R&) { a.max_tokens = 0; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"max_tokens"});

  // --- flags, struct sizes, reserved fields ------------------------------------------------
  add("unknown flag 0x4", kSingle, [](A& a, Pl&, R&) { a.flags |= 0x4u; }, {SSU_ERROR_UNKNOWN_FLAG},
      {"flags"});
  add("unknown flag 0x80000000", kMulti, [](A& a, Pl&, R&) { a.flags |= 0x80000000u; },
      {SSU_ERROR_UNKNOWN_FLAG}, {"flags"});
  add("args struct_size 0", kSingle, [](A& a, Pl&, R&) { a.struct_size = 0; },
      {SSU_ERROR_STRUCT_SIZE}, {"args", "struct_size"});
  add("args struct_size one byte short", kMulti,
      [](A& a, Pl&, R&) { a.struct_size = uint32_t(sizeof(ssu_replay_args_t) - 1); },
      {SSU_ERROR_STRUCT_SIZE}, {"args", "struct_size"});
  add("args reserved1", kSingle, [](A& a, Pl&, R&) { a.reserved1 = 1; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"reserved1"});
  add("pool struct_size 4", kSingle, [](A&, Pl& p, R&) { p.struct_size = 4; },
      {SSU_ERROR_STRUCT_SIZE}, {"pool", "struct_size"});
  return v;
}

// Builds the base problem with a prepared step (and flush list).
struct Built {
  HostMemory mem;
  ReplayProblem p;
  explicit Built(Base b) : p(base_case(b), mem) {
    p.prepare_step();
    p.prepare_flush();
  }
};

ssu_plan_t make_plan(ssu_context_t ctx, const ReplayProblem& p, bool disable = false) {
  const ssu_replay_args_t a = p.args(disable);
  ssu_plan_t plan = nullptr;
  const ssu_status_t st = ssu_plan_create_replay(ctx, &a, nullptr, &plan);
  REQUIRE_MESSAGE(st == SSU_SUCCESS, "plan of the valid arguments: " << ssu_status_string(st)
                                                                     << ": "
                                                                     << ssu_last_error_message());
  return plan;
}

}  // namespace

TEST_CASE("validation: every bad replay input is refused at plan and at execute, nothing written") {
  CpuContext c;
  const auto table = bad_inputs();
  int checked = 0;
  for (const BadInput& bad : table) {
    CAPTURE(bad.what);
    Built b(bad.base);
    ssu_state_pool_t pool = *b.p.pool();
    ssu_replay_ring_t ring = *b.p.ring();
    ssu_replay_args_t a = b.p.args();
    a.pool = &pool;
    a.ring = &ring;
    bad.mutate(a, pool, ring);

    ssu_plan_t plan = kSentinelPlan;
    const ssu_status_t st = ssu_plan_create_replay(c.ctx, &a, nullptr, &plan);
    const std::string msg = ssu_last_error_message();
    CHECK_MESSAGE(one_of(st, bad.codes), "plan: got " << st << " ("
                                                      << std::string(ssu_status_string(st))
                                                      << "), expected " << codes_text(bad.codes)
                                                      << "; message: " << msg);
    CHECK(plan == kSentinelPlan);
    CHECK_MESSAGE(names_any(msg, bad.arg_names),
                  "plan: the message does not name the argument: '" << msg << "'");
    if (std::getenv("SSU_TEST_VERBOSE"))
      std::printf("%-48s -> %d %s\n", bad.what.c_str(), st, msg.c_str());

    ssu_plan_t good = make_plan(c.ctx, b.p);
    const ssu_status_t est = ssu_plan_execute_replay(good, &a, nullptr);
    const std::string emsg = ssu_last_error_message();
    CHECK_MESSAGE((one_of(est, bad.codes) || est == SSU_ERROR_PLAN_MISMATCH),
                  "execute: got " << est << " (" << std::string(ssu_status_string(est))
                                  << "), expected " << codes_text(bad.codes)
                                  << " or PLAN_MISMATCH; message: " << emsg);
    CHECK(!emsg.empty());
    ssu_plan_destroy(good);
    const CheckResult r = b.p.check_unchanged();
    CHECK_MESSAGE(r.ok, r.message);
    ++checked;
  }
  MESSAGE(checked << " bad replay inputs checked");
  CHECK(checked == int(table.size()));
}

// ---------------------------------------------------------------------------
// Execute arguments of another kind of problem than the plan's.
TEST_CASE("validation: replay execute arguments that do not fit the plan") {
  CpuContext c;
  struct Mismatch {
    const char* what;
    Base base;
    std::function<void(ReplayCase&)> other;
    bool disable = false;  // the call with DISABLE_STATE_UPDATE, the plan without
  };
  const std::vector<Mismatch> table = {
      {"another ring capacity L", kSingle, [](ReplayCase& x) { x.L = 8; }},
      {"another ring capacity L (multi)", kMulti, [](ReplayCase& x) { x.L = 5; }},
      {"num_accepted absent", kMulti, [](ReplayCase& x) { x.speculative = false; }},
      {"num_accepted present", kSingle,
       [](ReplayCase& x) { x.multi(1).speculative = true; }},
      {"num_accepted dtype", kMulti, [](ReplayCase& x) { x.accepted = SSU_DTYPE_I32; }},
      {"input dtype", kSingle, [](ReplayCase& x) { x.input = SSU_DTYPE_F16; }},
      {"state dtype", kSingle, [](ReplayCase& x) { x.state = SSU_DTYPE_BF16; }},
      {"state dtype i16", kMulti, [](ReplayCase& x) { x.state = SSU_DTYPE_I16; }},
      {"param dtype", kSingle, [](ReplayCase& x) { x.param = SSU_DTYPE_BF16; }},
      {"index dtype", kSingle, [](ReplayCase& x) { x.index = SSU_DTYPE_I64; }},
      {"src_index absent", kSingle, [](ReplayCase& x) { x.index = SSU_DTYPE_INVALID; x.pad = Pad::None; }},
      {"tokens T", kMulti, [](ReplayCase& x) { x.T = 2; }},
      {"varlen form", kMulti, [](ReplayCase& x) { x.varlen(4); }},
      {"multi form", kVarlen, [](ReplayCase& x) { x.multi(4); }},
      {"stochastic rounding absent", kSR, [](ReplayCase& x) { x.stochastic = false; }},
      {"stochastic rounding rounds", kSR, [](ReplayCase& x) { x.rounding_rounds = 5; }},
      {"state dtype f8e4m3 (plan i8)", kI8, [](ReplayCase& x) { x.state = SSU_DTYPE_F8E4M3; }},
      {"state dtype i16 (plan f8e4m3)", kF8, [](ReplayCase& x) { x.state = SSU_DTYPE_I16; }},
      {"stochastic rounding absent (f8e4m3)", kF8SR, [](ReplayCase& x) { x.stochastic = false; }},
      {"stochastic rounding present (f8e4m3)", kF8, [](ReplayCase& x) { x.sr(3); }},
      {"z absent", kSingle, [](ReplayCase& x) { x.has_z = false; }},
      {"D absent", kMulti, [](ReplayCase& x) { x.has_D = false; }},
      {"softplus flag", kSingle, [](ReplayCase& x) { x.softplus = false; }},
      {"per-channel step (mamba1 layout) vs per-head", kMamba1,
       [](ReplayCase& x) { x.mamba1 = false; }},
      {"disable_state_update flag", kSingle, [](ReplayCase&) {}, true},
  };
  for (const Mismatch& mm : table) {
    CAPTURE(mm.what);
    HostMemory mem;
    const ReplayCase pc = base_case(mm.base);
    ReplayCase oc = pc;
    mm.other(oc);
    oc.seed += 1000;
    ReplayProblem planned(pc, mem), other(oc, mem);
    planned.prepare_step();
    other.prepare_step();
    ssu_plan_t plan = make_plan(c.ctx, planned);
    const ssu_replay_args_t a = other.args(mm.disable);
    const ssu_status_t st = ssu_plan_execute_replay(plan, &a, nullptr);
    const std::string msg = ssu_last_error_message();
    CHECK_MESSAGE(st == SSU_ERROR_PLAN_MISMATCH,
                  "got " << st << " (" << std::string(ssu_status_string(st)) << "): " << msg);
    CHECK(!msg.empty());
    if (std::getenv("SSU_TEST_VERBOSE"))
      std::printf("%-48s -> %d %s\n", mm.what, st, msg.c_str());
    const CheckResult r1 = other.check_unchanged(), r2 = planned.check_unchanged();
    CHECK_MESSAGE(r1.ok, r1.message);
    CHECK_MESSAGE(r2.ok, r2.message);
    ssu_plan_destroy(plan);
  }
}

// A plan fixes the kind of problem, not its sizes: another batch size, slot
// count, strides and ring layout run with it.
TEST_CASE("validation: a replay plan serves other batch sizes, pools and ring layouts") {
  CpuContext c;
  HostMemory mem;
  for (Base base : {kSingle, kMulti, kVarlen, kMamba1, kI16, kSR, kI8, kF8, kF8SR}) {
    const ReplayCase pc = base_case(base);
    ReplayCase oc = pc;
    oc.batch = 6;
    oc.extra_slots = 9;
    oc.layout = kReplayPadded | kReplayEntryMajor;
    oc.seed += 77;
    ReplayProblem planned(pc, mem), other(oc, mem);
    planned.prepare_step();
    other.prepare_step();
    other.prepare_flush();
    ssu_plan_t plan = make_plan(c.ctx, planned);
    const ssu_replay_args_t a = other.args();
    ssu_status_t st = ssu_plan_execute_replay(plan, &a, nullptr);
    CHECK_MESSAGE(st == SSU_SUCCESS, pc.tag << ": " << ssu_last_error_message());
    const ssu_replay_flush_args_t f = other.flush_args();
    st = ssu_plan_execute_replay_flush(plan, &f, nullptr);
    CHECK_MESSAGE(st == SSU_SUCCESS, pc.tag << " flush: " << ssu_last_error_message());
    ssu_plan_destroy(plan);
  }
}

// ---------------------------------------------------------------------------
// Flush op arguments.
// ---------------------------------------------------------------------------
TEST_CASE("validation: every bad flush input is refused, nothing written") {
  using F = ssu_replay_flush_args_t;
  using Pl = ssu_state_pool_t;
  using R = ssu_replay_ring_t;
  using FM = std::function<void(F&, Pl&, R&)>;
  struct BadFlush {
    std::string what;
    Base base;
    FM mutate;
    std::vector<ssu_status_t> codes;
    std::vector<std::string> nm;
  };
  static uint64_t seed_value = 99;
  std::vector<BadFlush> v = {
      {"args struct_size 0", kSingle, [](F& a, Pl&, R&) { a.struct_size = 0; },
       {SSU_ERROR_STRUCT_SIZE}, {"args", "struct_size"}},
      {"args struct_size one byte short", kSR,
       [](F& a, Pl&, R&) { a.struct_size = uint32_t(sizeof(F) - 1); }, {SSU_ERROR_STRUCT_SIZE},
       {"args", "struct_size"}},
      {"flags 1", kSingle, [](F& a, Pl&, R&) { a.flags = 1; }, {SSU_ERROR_UNKNOWN_FLAG}, {"flags"}},
      {"flags 0x80000000", kMulti, [](F& a, Pl&, R&) { a.flags = 0x80000000u; },
       {SSU_ERROR_UNKNOWN_FLAG}, {"flags"}},
      {"reserved1", kSingle, [](F& a, Pl&, R&) { a.reserved1 = 3; }, {SSU_ERROR_INVALID_ARGUMENT},
       {"reserved1"}},
      // pool
      {"pool NULL", kSingle, [](F& a, Pl&, R&) { a.pool = nullptr; }, {SSU_ERROR_NULL_POINTER},
       {"pool"}},
      {"pool state data NULL", kSingle, [](F&, Pl& p, R&) { p.state.data = nullptr; },
       {SSU_ERROR_NULL_POINTER}, {"pool.state"}},
      {"pool state dtype other than the plan's", kSingle,
       [](F&, Pl& p, R&) { p.state.dtype = SSU_DTYPE_BF16; },
       {SSU_ERROR_DTYPE_MISMATCH, SSU_ERROR_PLAN_MISMATCH}, {"pool.state"}},
      {"pool state heads H+1", kSingle, [](F&, Pl& p, R&) { p.state.shape[1] = H + 1; },
       {SSU_ERROR_BAD_SHAPE, SSU_ERROR_PLAN_MISMATCH}, {"pool.state"}},
      {"pool state dim P/2", kMulti, [](F&, Pl& p, R&) { p.state.shape[2] = P / 2; },
       {SSU_ERROR_BAD_SHAPE, SSU_ERROR_PLAN_MISMATCH}, {"pool.state"}},
      {"pool state dstate N+1", kSingle, [](F&, Pl& p, R&) { p.state.shape[3] = N + 1; },
       {SSU_ERROR_BAD_SHAPE, SSU_ERROR_PLAN_MISMATCH}, {"pool.state"}},
      {"pool state ndim 3", kSingle, [](F&, Pl& p, R&) { set_rank(p.state, 3); },
       {SSU_ERROR_BAD_RANK}, {"pool.state"}},
      {"pool state dstate stride 2", kSingle, [](F&, Pl& p, R&) { p.state.strides[3] = 2; },
       {SSU_ERROR_BAD_STRIDE}, {"pool.state"}},
      {"pool state slot stride < H*P*N", kSingle,
       [](F&, Pl& p, R&) { p.state.strides[0] = H * P * N - 1; }, {SSU_ERROR_BAD_STRIDE},
       {"pool.state"}},
      {"pool with a Mamba-3 prev_x pool", kSingle,
       [](F&, Pl& p, R&) { p.prev_x = spare_tensor(SSU_DTYPE_BF16, {p.state.shape[0], H, P}); },
       {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"pool", "prev_x"}},
      {"i16 state_scale NULL", kI16, [](F&, Pl& p, R&) { p.state_scale.data = nullptr; },
       {SSU_ERROR_NULL_POINTER}, {"pool.state_scale"}},
      {"i16 state_scale dtype bf16", kI16, [](F&, Pl& p, R&) { p.state_scale.dtype = SSU_DTYPE_BF16; },
       {SSU_ERROR_BAD_DTYPE}, {"pool.state_scale"}},
      {"i16 state_scale slots S+1", kI16, [](F&, Pl& p, R&) { p.state_scale.shape[0] += 1; },
       {SSU_ERROR_BAD_SHAPE}, {"pool.state_scale"}},
      {"i16 state_scale dim stride 2", kI16, [](F&, Pl& p, R&) { p.state_scale.strides[2] = 2; },
       {SSU_ERROR_BAD_STRIDE}, {"pool.state_scale"}},
      {"state_scale with an f32 state", kSingle,
       [](F&, Pl& p, R&) { p.state_scale = spare_tensor(SSU_DTYPE_F32, {p.state.shape[0], H, P}); },
       {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"pool.state_scale", "state_scale"}},
      {"i8 state_scale NULL", kI8, [](F&, Pl& p, R&) { p.state_scale.data = nullptr; },
       {SSU_ERROR_NULL_POINTER}, {"pool.state_scale"}},
      {"f8e4m3 state_scale NULL", kF8SR, [](F&, Pl& p, R&) { p.state_scale.data = nullptr; },
       {SSU_ERROR_NULL_POINTER}, {"pool.state_scale"}},
      {"i8 state_scale dtype f32 -> i32", kI8,
       [](F&, Pl& p, R&) { p.state_scale.dtype = SSU_DTYPE_I32; }, {SSU_ERROR_BAD_DTYPE},
       {"pool.state_scale"}},
      {"f8e4m3 state_scale dtype bf16", kF8,
       [](F&, Pl& p, R&) { p.state_scale.dtype = SSU_DTYPE_BF16; }, {SSU_ERROR_BAD_DTYPE},
       {"pool.state_scale"}},
      {"i8 state_scale heads H+1", kI8, [](F&, Pl& p, R&) { p.state_scale.shape[1] += 1; },
       {SSU_ERROR_BAD_SHAPE}, {"pool.state_scale"}},
      {"f8e4m3 state_scale slots S-1", kF8, [](F&, Pl& p, R&) { p.state_scale.shape[0] -= 1; },
       {SSU_ERROR_BAD_SHAPE}, {"pool.state_scale"}},
      {"f8e4m3 state_scale ndim 2", kF8SR, [](F&, Pl& p, R&) { set_rank(p.state_scale, 2); },
       {SSU_ERROR_BAD_RANK}, {"pool.state_scale"}},
      {"i8 state_scale head stride P+1", kI8,
       [](F&, Pl& p, R&) { p.state_scale.strides[1] = P + 1; }, {SSU_ERROR_BAD_STRIDE},
       {"pool.state_scale"}},
      {"pool state dtype i8 (plan f8e4m3)", kF8, [](F&, Pl& p, R&) { p.state.dtype = SSU_DTYPE_I8; },
       {SSU_ERROR_DTYPE_MISMATCH, SSU_ERROR_PLAN_MISMATCH}, {"pool.state"}},
      {"rounding_seed given (i8 plan)", kI8,
       [](F& a, Pl&, R&) { a.rounding_seed = &seed_value; }, {SSU_ERROR_PLAN_MISMATCH},
       {"rounding_seed"}},
      {"rounding_seed missing (f8e4m3 SR plan)", kF8SR, [](F& a, Pl&, R&) {
         a.rounding_seed = nullptr;
         a.rounding_rounds = 0;
       }, {SSU_ERROR_PLAN_MISMATCH}, {"rounding_seed"}},
      // A
      {"A NULL", kSingle, [](F& a, Pl&, R&) { a.A.data = nullptr; }, {SSU_ERROR_NULL_POINTER},
       {"A"}},
      {"A ndim 2", kSingle, [](F& a, Pl&, R&) { set_rank(a.A, 2); }, {SSU_ERROR_BAD_RANK}, {"A"}},
      {"A heads H+1", kSingle, [](F& a, Pl&, R&) { a.A.shape[0] = H + 1; }, {SSU_ERROR_BAD_SHAPE},
       {"A"}},
      {"A dtype bf16 (plan f32)", kSingle, [](F& a, Pl&, R&) { a.A.dtype = SSU_DTYPE_BF16; },
       {SSU_ERROR_DTYPE_MISMATCH, SSU_ERROR_PLAN_MISMATCH}, {"A"}},
      {"A per channel for a per-head plan", kSingle,
       [](F& a, Pl&, R&) { a.A = spare_tensor(SSU_DTYPE_F32, {H, P, N}); },
       {SSU_ERROR_PLAN_MISMATCH}, {"A"}},
      {"A per head for a per-channel plan", kMamba1,
       [](F& a, Pl&, R&) { a.A = spare_tensor(SSU_DTYPE_F32, {1}); }, {SSU_ERROR_PLAN_MISMATCH},
       {"A"}},
      {"A (1, P, N) dim P-1 (mamba1)", kMamba1, [](F& a, Pl&, R&) { a.A.shape[1] -= 1; },
       {SSU_ERROR_BAD_SHAPE}, {"A"}},
      // slots
      {"src_index NULL", kSingle, [](F& a, Pl&, R&) { a.src_index.data = nullptr; },
       {SSU_ERROR_NULL_POINTER}, {"src_index"}},
      {"src_index 2-D", kMulti, [](F& a, Pl&, R&) { a.src_index = spare_tensor(SSU_DTYPE_I64, {2, 2}); },
       {SSU_ERROR_BAD_RANK}, {"src_index"}},
      {"src_index dtype f32", kSingle, [](F& a, Pl&, R&) { a.src_index.dtype = SSU_DTYPE_F32; },
       {SSU_ERROR_BAD_DTYPE}, {"src_index"}},
      {"num_accepted K+1", kMulti, [](F& a, Pl&, R&) { a.num_accepted.shape[0] += 1; },
       {SSU_ERROR_BAD_SHAPE}, {"num_accepted"}},
      {"num_accepted dtype f16", kMulti, [](F& a, Pl&, R&) { a.num_accepted.dtype = SSU_DTYPE_F16; },
       {SSU_ERROR_BAD_DTYPE}, {"num_accepted"}},
      {"num_accepted ndim 2", kMulti, [](F& a, Pl&, R&) { set_rank(a.num_accepted, 2); },
       {SSU_ERROR_BAD_RANK}, {"num_accepted"}},
      // stochastic rounding: exactly when the plan has it, with its rounds
      {"rounding_seed missing (SR plan)", kSR, [](F& a, Pl&, R&) {
         a.rounding_seed = nullptr;
         a.rounding_rounds = 0;
       }, {SSU_ERROR_PLAN_MISMATCH}, {"rounding_seed"}},
      {"rounding_seed given (plan without SR)", kMulti,
       [](F& a, Pl&, R&) { a.rounding_seed = &seed_value; }, {SSU_ERROR_PLAN_MISMATCH},
       {"rounding_seed"}},
      {"rounding_rounds 5 (plan 7)", kSR, [](F& a, Pl&, R&) { a.rounding_rounds = 5; },
       {SSU_ERROR_PLAN_MISMATCH}, {"rounding_rounds"}},
      {"rounding_rounds 33", kSR, [](F& a, Pl&, R&) { a.rounding_rounds = 33; },
       {SSU_ERROR_INVALID_ARGUMENT}, {"rounding_rounds"}},
      {"rounding_rounds without a seed", kSingle, [](F& a, Pl&, R&) { a.rounding_rounds = 4; },
       {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"rounding_rounds", "rounding_seed"}},
      // ring
      {"ring NULL", kSingle, [](F& a, Pl&, R&) { a.ring = nullptr; }, {SSU_ERROR_NULL_POINTER},
       {"ring"}},
      {"ring struct_size 0", kSingle, [](F&, Pl&, R& r) { r.struct_size = 0; },
       {SSU_ERROR_STRUCT_SIZE}, {"ring", "struct_size"}},
      {"ring L other than the plan's", kSingle,
       [](F&, Pl&, R& r) { r.x.shape[1] = r.B.shape[1] = r.dt.shape[1] = 6; },
       {SSU_ERROR_PLAN_MISMATCH}, {"ring.x", "L"}},
      {"ring.x dtype f16 (input bf16)", kSingle, [](F&, Pl&, R& r) { r.x.dtype = SSU_DTYPE_F16; },
       {SSU_ERROR_DTYPE_MISMATCH}, {"ring.x"}},
      {"ring.dt ndim 3 for a per-channel plan", kMamba1, [](F&, Pl&, R& r) { set_rank(r.dt, 3); },
       {SSU_ERROR_BAD_RANK}, {"ring.dt"}},
      {"ring.committed dtype i64", kSingle,
       [](F&, Pl&, R& r) { r.committed.dtype = SSU_DTYPE_I64; }, {SSU_ERROR_BAD_DTYPE},
       {"ring.committed"}},
      {"ring.pending slots S+1", kSingle, [](F&, Pl&, R& r) { r.pending.shape[0] += 1; },
       {SSU_ERROR_BAD_SHAPE}, {"ring.pending"}},
  };
  CpuContext c;
  int checked = 0;
  for (const BadFlush& bad : v) {
    CAPTURE(bad.what);
    Built b(bad.base);
    ssu_state_pool_t pool = *b.p.pool();
    ssu_replay_ring_t ring = *b.p.ring();
    ssu_replay_flush_args_t a = b.p.flush_args();
    a.pool = &pool;
    a.ring = &ring;
    bad.mutate(a, pool, ring);
    ssu_plan_t plan = make_plan(c.ctx, b.p);
    const ssu_status_t st = ssu_plan_execute_replay_flush(plan, &a, nullptr);
    const std::string msg = ssu_last_error_message();
    CHECK_MESSAGE(one_of(st, bad.codes), "got " << st << " (" << std::string(ssu_status_string(st))
                                                << "), expected " << codes_text(bad.codes)
                                                << "; message: " << msg);
    CHECK_MESSAGE(names_any(msg, bad.nm), "the message does not name the argument: '" << msg << "'");
    if (std::getenv("SSU_TEST_VERBOSE"))
      std::printf("%-48s -> %d %s\n", bad.what.c_str(), st, msg.c_str());
    ssu_plan_destroy(plan);
    const CheckResult r = b.p.check_unchanged();
    CHECK_MESSAGE(r.ok, r.message);
    ++checked;
  }
  MESSAGE(checked << " bad flush inputs checked");
  // NULL args.
  Built b(kSingle);
  ssu_plan_t plan = make_plan(c.ctx, b.p);
  CHECK(ssu_plan_execute_replay_flush(plan, nullptr, nullptr) == SSU_ERROR_NULL_POINTER);
  CHECK(names(ssu_last_error_message(), "args"));
  ssu_plan_destroy(plan);
  const CheckResult r = b.p.check_unchanged();
  CHECK_MESSAGE(r.ok, r.message);
}

// ---------------------------------------------------------------------------
TEST_CASE("validation: replay handles, NULL arguments and plans of other operations") {
  CpuContext c;
  Built b(kMulti);
  const ssu_replay_args_t a = b.p.args();
  const ssu_replay_flush_args_t f = b.p.flush_args();

  ssu_plan_t plan = kSentinelPlan;
  CHECK(ssu_plan_create_replay(nullptr, &a, nullptr, &plan) == SSU_ERROR_BAD_HANDLE);
  CHECK(plan == kSentinelPlan);
  CHECK(ssu_plan_create_replay(c.ctx, nullptr, nullptr, &plan) == SSU_ERROR_NULL_POINTER);
  CHECK(names(ssu_last_error_message(), "args"));
  CHECK(plan == kSentinelPlan);
  CHECK(ssu_plan_create_replay(c.ctx, &a, nullptr, nullptr) == SSU_ERROR_NULL_POINTER);
  CHECK(names(ssu_last_error_message(), "out_plan"));
  ssu_plan_options_t small = SSU_PLAN_OPTIONS_INIT;
  small.struct_size = 2;
  CHECK(ssu_plan_create_replay(c.ctx, &a, &small, &plan) == SSU_ERROR_STRUCT_SIZE);
  ssu_plan_options_t cuda_alg = SSU_PLAN_OPTIONS_INIT;
  cuda_alg.algorithm = SSU_ALGORITHM_CUDA_REPLAY;
  CHECK(ssu_plan_create_replay(c.ctx, &a, &cuda_alg, &plan) == SSU_ERROR_ALGORITHM_UNAVAILABLE);
  CHECK(plan == kSentinelPlan);

  CHECK(ssu_plan_execute_replay(nullptr, &a, nullptr) == SSU_ERROR_BAD_HANDLE);
  CHECK(ssu_plan_execute_replay_flush(nullptr, &f, nullptr) == SSU_ERROR_BAD_HANDLE);

  ssu_plan_t rplan = make_plan(c.ctx, b.p);
  ssu_plan_info_t info = SSU_PLAN_INFO_INIT;
  REQUIRE(ssu_plan_get_info(rplan, &info) == SSU_SUCCESS);
  CHECK(info.backend == SSU_BACKEND_CPU);
  CHECK(info.algorithm == SSU_ALGORITHM_CPU_ROWS);
  CHECK(ssu_plan_execute_replay(rplan, nullptr, nullptr) == SSU_ERROR_NULL_POINTER);

  // An update plan for the replay entry points, and the other way round.
  UpdateCase uc;
  uc.shape(H, G, P, N);
  uc.batch = Bt;
  HostMemory mem;
  UpdateProblem up(uc, mem);
  const ssu_update_args_t ua = up.args();
  ssu_plan_t uplan = nullptr;
  REQUIRE(ssu_plan_create_update(c.ctx, &ua, nullptr, &uplan) == SSU_SUCCESS);
  CHECK(ssu_plan_execute_replay(uplan, &a, nullptr) == SSU_ERROR_PLAN_MISMATCH);
  CHECK(ssu_plan_execute_replay_flush(uplan, &f, nullptr) == SSU_ERROR_PLAN_MISMATCH);
  CHECK(ssu_plan_execute_update(rplan, &ua, nullptr) == SSU_ERROR_PLAN_MISMATCH);
  CHECK(!std::string(ssu_last_error_message()).empty());
  ssu_plan_destroy(uplan);
  ssu_plan_destroy(rplan);

  const CheckResult r = b.p.check_unchanged();
  CHECK_MESSAGE(r.ok, r.message);
  const CheckResult ru = up.check_unchanged();
  CHECK_MESSAGE(ru.ok, ru.message);
}
