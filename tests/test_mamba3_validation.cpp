// Every class of bad input to the Mamba-3 step and rotary step: the
// documented status at plan creation and at execute, a message that names
// the argument, the out-plan untouched, and nothing written (every buffer,
// pool and output compared bit for bit with its poisoned snapshot). Plus
// execute-time mismatches against the plan, between the operations
// included.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "mamba3_harness.h"

using namespace ssutest;
using namespace ssutest::m3;

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

// True if `msg` contains one of `names` as a whole identifier (or `names` is empty).
bool names_any(const std::string& msg, const std::vector<std::string>& names) {
  auto ident = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
  };
  for (const std::string& name : names)
    for (size_t at = msg.find(name); at != std::string::npos; at = msg.find(name, at + 1)) {
      const bool left = at == 0 || !ident(msg[at - 1]);
      const bool right = at + name.size() >= msg.size() || !ident(msg[at + name.size()]);
      if (left && right) return true;
    }
  return names.empty();
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

// Valid memory for descriptors the base problem does not have (never written:
// every call that sees them fails validation first).
void* spare() {
  static std::vector<double> v(1 << 16, 0.0);
  return v.data();
}
ssu_tensor_t spare_tensor(ssu_dtype_t dtype, std::vector<int64_t> shape) {
  ssu_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = spare();
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
// The step
// ---------------------------------------------------------------------------
enum StepBase { kWithOutproj, kPerRank };

constexpr int64_t kH = 2, kP = 16, kN = 16, kR = 2, kBt = 3;

StepCase step_base(StepBase b) {
  StepCase c;
  c.tag = b == kWithOutproj ? "validation_outproj" : "validation_per_rank";
  c.H = kH; c.P = kP; c.N = kN; c.R = kR; c.batch = kBt;
  c.state = SSU_DTYPE_F32;
  c.input = SSU_DTYPE_BF16;
  c.index = SSU_DTYPE_I32;
  c.dst = Dst::Distinct;
  c.pad = Pad::Negative;
  c.outproj = b == kWithOutproj;
  c.has_z = b == kWithOutproj;
  c.has_D = true;
  c.update_prev = true;
  c.seed = 41 + uint64_t(b);
  return c;
}

using SA = ssu_mamba3_step_args_t;
using Pl = ssu_state_pool_t;
using StepMutate = std::function<void(SA&, Pl&)>;

struct BadStep {
  std::string what;
  StepBase base;
  StepMutate mutate;
  std::vector<ssu_status_t> codes;
  std::vector<std::string> names;
};

// Every tensor whose shape carries the axis: used to change R, N or P
// consistently, so that only the size itself is wrong.
void resize_axis_P(SA& a, Pl& p, int64_t P) {
  p.state.shape[2] = P;
  p.state.strides[1] = P * p.state.shape[3];
  p.prev_x.shape[2] = P;
  a.x.shape[2] = P;
  if (a.z.data) a.z.shape[2] = P;
  a.out.shape[a.out.ndim - 1] = P;
  for (ssu_tensor_t* t : {&a.xproj, &a.zproj, &a.outproj})
    if (t->data) t->shape[2] = P;
}
void resize_axis_N(SA& a, Pl& p, int64_t N) {
  p.state.shape[3] = N;
  p.state.strides[2] = N;
  p.state.strides[1] = p.state.shape[2] * N;
  p.state.strides[0] = std::max(p.state.strides[0], p.state.shape[1] * p.state.shape[2] * N);
  p.prev_B.shape[3] = N;
  p.prev_B.strides[2] = std::max(p.prev_B.strides[2], N);
  p.prev_B.strides[1] = std::max(p.prev_B.strides[1], p.prev_B.shape[2] * p.prev_B.strides[2]);
  p.prev_B.strides[0] = std::max(p.prev_B.strides[0], p.prev_B.shape[1] * p.prev_B.strides[1]);
  for (ssu_tensor_t* t : {&a.B, &a.C}) {
    t->shape[3] = N;
    t->strides[2] = std::max(t->strides[2], N);
    t->strides[1] = std::max(t->strides[1], t->shape[2] * t->strides[2]);
    t->strides[0] = std::max(t->strides[0], t->shape[1] * t->strides[1]);
  }
}
void resize_axis_R(SA& a, Pl& p, int64_t R) {
  p.prev_B.shape[1] = R;
  p.prev_B.strides[0] = std::max(p.prev_B.strides[0], R * p.prev_B.strides[1]);
  for (ssu_tensor_t* t : {&a.B, &a.C}) {
    t->shape[1] = R;
    t->strides[0] = std::max(t->strides[0], R * t->strides[1]);
  }
  if (a.out.ndim == 4) {
    a.out.shape[1] = R;
    a.out.strides[0] = std::max(a.out.strides[0], R * a.out.strides[1]);
  }
  for (ssu_tensor_t* t : {&a.xproj, &a.zproj, &a.outproj})
    if (t->data) t->shape[0] = R;
}

std::vector<BadStep> bad_steps() {
  std::vector<BadStep> v;
  auto add = [&](std::string what, StepBase base, StepMutate m, std::vector<ssu_status_t> codes,
                 std::vector<std::string> names) {
    v.push_back({std::move(what), base, std::move(m), std::move(codes), std::move(names)});
  };
  const ssu_status_t NUL = SSU_ERROR_NULL_POINTER, RANK = SSU_ERROR_BAD_RANK,
                     SHAPE = SSU_ERROR_BAD_SHAPE, STRIDE = SSU_ERROR_BAD_STRIDE,
                     DTYPE = SSU_ERROR_BAD_DTYPE, MISMATCH = SSU_ERROR_DTYPE_MISMATCH,
                     NOTSUP = SSU_ERROR_NOT_SUPPORTED, INCOMPAT = SSU_ERROR_INCOMPATIBLE_OPTIONS;

  // --- missing required tensors ---------------------------------------------
  add("pool NULL", kWithOutproj, [](SA& a, Pl&) { a.pool = nullptr; }, {NUL}, {"pool"});
  add("pool.state NULL", kWithOutproj, [](SA&, Pl& p) { p.state.data = nullptr; }, {NUL}, {"state"});
  add("pool.prev_B NULL", kWithOutproj, [](SA&, Pl& p) { p.prev_B.data = nullptr; }, {NUL}, {"prev_B"});
  add("pool.prev_x NULL", kWithOutproj, [](SA&, Pl& p) { p.prev_x.data = nullptr; }, {NUL}, {"prev_x"});
  add("pool of 0.1 (no Mamba-3 fields)", kWithOutproj,
      [](SA&, Pl& p) { p.struct_size = uint32_t(offsetof(ssu_state_pool_t, prev_B)); }, {NUL},
      {"prev_B", "prev_x", "pool"});
  struct Req {
    const char* name;
    ssu_tensor_t SA::*field;
  };
  for (Req r : {Req{"A", &SA::A}, Req{"dt", &SA::dt}, Req{"trap", &SA::trap}, Req{"B", &SA::B},
                Req{"C", &SA::C}, Req{"x", &SA::x}, Req{"xproj", &SA::xproj}, Req{"out", &SA::out}})
    add(std::string(r.name) + " NULL", kWithOutproj,
        [f = r.field](SA& a, Pl&) { (a.*f).data = nullptr; }, {NUL}, {r.name});

  // --- options that go together ------------------------------------------------
  add("z without zproj", kWithOutproj, [](SA& a, Pl&) { a.zproj.data = nullptr; },
      {INCOMPAT, NUL}, {"z", "zproj"});
  add("zproj without z", kWithOutproj, [](SA& a, Pl&) { a.z.data = nullptr; }, {INCOMPAT, NUL},
      {"z", "zproj"});
  add("z without outproj", kPerRank,
      [](SA& a, Pl&) {
        a.z = spare_tensor(SSU_DTYPE_BF16, {kBt, kH, kP});
        a.zproj = spare_tensor(SSU_DTYPE_F32, {kR, kH, kP});
      },
      {INCOMPAT}, {"z", "outproj"});
  add("pool.state_scale with a float state", kWithOutproj,
      [](SA&, Pl& p) { p.state_scale = spare_tensor(SSU_DTYPE_F32, {p.state.shape[0], kH, kP}); },
      {SSU_ERROR_INVALID_ARGUMENT, INCOMPAT, NOTSUP}, {"state_scale"});

  // --- ranks ---------------------------------------------------------------------
  struct Rk {
    const char* name;
    ssu_tensor_t SA::*field;
    int32_t ndim;
    StepBase base;
  };
  for (Rk r : {Rk{"A", &SA::A, 1, kWithOutproj}, Rk{"dt", &SA::dt, 3, kWithOutproj},
               Rk{"trap", &SA::trap, 1, kWithOutproj}, Rk{"B", &SA::B, 3, kWithOutproj},
               Rk{"C", &SA::C, 5, kWithOutproj}, Rk{"x", &SA::x, 2, kWithOutproj},
               Rk{"x", &SA::x, 0, kWithOutproj}, Rk{"x", &SA::x, -1, kWithOutproj},
               Rk{"x", &SA::x, 7, kWithOutproj}, Rk{"z", &SA::z, 4, kWithOutproj},
               Rk{"D", &SA::D, 2, kWithOutproj}, Rk{"xproj", &SA::xproj, 2, kWithOutproj},
               Rk{"zproj", &SA::zproj, 4, kWithOutproj}, Rk{"outproj", &SA::outproj, 2, kWithOutproj},
               Rk{"out", &SA::out, 4, kWithOutproj}, Rk{"out", &SA::out, 3, kPerRank},
               Rk{"src_index", &SA::src_index, 2, kWithOutproj},
               Rk{"dst_index", &SA::dst_index, 2, kPerRank}})
    add(std::string(r.name) + ".ndim=" + std::to_string(r.ndim) +
            (r.base == kPerRank ? " (per-rank outputs)" : ""),
        r.base, [f = r.field, nd = r.ndim](SA& a, Pl&) { set_rank(a.*f, nd); }, {RANK}, {r.name});
  add("pool.state.ndim=3", kWithOutproj, [](SA&, Pl& p) { set_rank(p.state, 3); }, {RANK}, {"state"});
  add("pool.prev_B.ndim=3", kWithOutproj, [](SA&, Pl& p) { set_rank(p.prev_B, 3); }, {RANK}, {"prev_B"});
  add("pool.prev_x.ndim=4", kPerRank, [](SA&, Pl& p) { set_rank(p.prev_x, 4); }, {RANK}, {"prev_x"});

  // --- shapes --------------------------------------------------------------------
  struct Sh {
    const char* what;
    ssu_tensor_t SA::*field;
    int dim;
    int64_t value;
    std::vector<std::string> names;
    StepBase base;
  };
  const std::vector<Sh> shapes = {
      {"A batch", &SA::A, 0, kBt + 1, {"A"}, kWithOutproj},
      {"A heads", &SA::A, 1, kH + 1, {"A"}, kWithOutproj},
      {"dt heads", &SA::dt, 1, kH - 1, {"dt"}, kWithOutproj},
      {"trap batch", &SA::trap, 0, kBt - 1, {"trap"}, kWithOutproj},
      {"B batch", &SA::B, 0, kBt + 1, {"B"}, kWithOutproj},
      {"C rank", &SA::C, 1, kR * 2, {"C", "B"}, kWithOutproj},
      {"B heads", &SA::B, 2, kH + 1, {"B", "state"}, kWithOutproj},
      {"C dstate", &SA::C, 3, kN / 2, {"C", "state"}, kWithOutproj},
      {"x batch", &SA::x, 0, kBt + 2, {"x"}, kWithOutproj},
      {"x heads", &SA::x, 1, kH + 1, {"x", "state"}, kWithOutproj},
      {"x dim", &SA::x, 2, kP - 1, {"x", "state"}, kWithOutproj},
      {"z dim", &SA::z, 2, kP + 16, {"z"}, kWithOutproj},
      {"D heads", &SA::D, 0, kH + 1, {"D"}, kWithOutproj},
      {"xproj rank", &SA::xproj, 0, kR + 1, {"xproj"}, kWithOutproj},
      {"xproj heads", &SA::xproj, 1, 1, {"xproj"}, kWithOutproj},
      {"zproj dim", &SA::zproj, 2, kP * 2, {"zproj"}, kWithOutproj},
      {"outproj rank", &SA::outproj, 0, 1, {"outproj"}, kWithOutproj},
      {"out batch", &SA::out, 0, kBt - 1, {"out"}, kWithOutproj},
      {"out dim", &SA::out, 2, kP + 1, {"out"}, kWithOutproj},
      {"out rank (per-rank outputs)", &SA::out, 1, kR + 2, {"out"}, kPerRank},
      {"out heads (per-rank outputs)", &SA::out, 2, kH * 2, {"out"}, kPerRank},
      {"src_index batch", &SA::src_index, 0, kBt + 1, {"src_index"}, kWithOutproj},
      {"dst_index batch", &SA::dst_index, 0, kBt - 1, {"dst_index"}, kWithOutproj},
  };
  for (const Sh& s : shapes)
    add(s.what, s.base, [f = s.field, d = s.dim, val = s.value](SA& a, Pl&) { (a.*f).shape[d] = val; },
        {SHAPE}, s.names);
  add("pool.prev_B slots", kWithOutproj, [](SA&, Pl& p) { p.prev_B.shape[0] -= 1; }, {SHAPE},
      {"prev_B", "state"});
  add("pool.prev_B rank", kWithOutproj, [](SA&, Pl& p) { p.prev_B.shape[1] = 1; }, {SHAPE},
      {"prev_B", "B"});
  add("pool.prev_B heads", kWithOutproj, [](SA&, Pl& p) { p.prev_B.shape[2] = 1; }, {SHAPE, STRIDE},
      {"prev_B", "state"});
  add("pool.prev_B dstate", kWithOutproj, [](SA&, Pl& p) { p.prev_B.shape[3] = kN / 2; }, {SHAPE},
      {"prev_B", "state", "B"});
  add("pool.prev_x slots", kPerRank, [](SA&, Pl& p) { p.prev_x.shape[0] += 1; }, {SHAPE, STRIDE},
      {"prev_x", "state"});
  add("pool.prev_x dim", kWithOutproj, [](SA&, Pl& p) { p.prev_x.shape[2] = kP / 2; }, {SHAPE},
      {"prev_x", "state", "x"});
  add("pool.state slots negative", kWithOutproj, [](SA&, Pl& p) { p.state.shape[0] = -1; }, {SHAPE},
      {"state"});

  // --- sizes the step does not support --------------------------------------------
  for (int64_t R : {3, 16})
    add("R=" + std::to_string(R), kWithOutproj, [R](SA& a, Pl& p) { resize_axis_R(a, p, R); },
        {NOTSUP}, {"R", "rank", "B"});
  for (int64_t N : {8, 48, 512})
    add("N=" + std::to_string(N), kWithOutproj, [N](SA& a, Pl& p) { resize_axis_N(a, p, N); },
        {NOTSUP}, {"N", "dstate", "state", "B"});
  for (int64_t P : {8, 24})
    add("P=" + std::to_string(P) + " (not a multiple of 16)", kPerRank,
        [P](SA& a, Pl& p) { resize_axis_P(a, p, P); }, {NOTSUP}, {"P", "dim", "state", "x"});

  // --- strides ---------------------------------------------------------------------
  struct St {
    const char* name;
    ssu_tensor_t SA::*field;
    int64_t stride;
  };
  for (St s : {St{"B", &SA::B, 2}, St{"C", &SA::C, 0}, St{"x", &SA::x, 2}, St{"z", &SA::z, 3},
               St{"out", &SA::out, 2}, St{"x", &SA::x, -1}})
    add(std::string(s.name) + " last stride " + std::to_string(s.stride), kWithOutproj,
        [f = s.field, st = s.stride](SA& a, Pl&) { (a.*f).strides[(a.*f).ndim - 1] = st; }, {STRIDE},
        {s.name});
  add("A negative stride", kWithOutproj, [](SA& a, Pl&) { a.A.strides[1] = -1; }, {STRIDE}, {"A"});
  add("xproj negative stride", kWithOutproj, [](SA& a, Pl&) { a.xproj.strides[0] = -2; }, {STRIDE},
      {"xproj"});
  add("pool.state dstate stride 2", kWithOutproj, [](SA&, Pl& p) { p.state.strides[3] = 2; },
      {STRIDE}, {"state"});
  add("pool.state dim stride N+1", kWithOutproj, [](SA&, Pl& p) { p.state.strides[2] += 1; },
      {STRIDE}, {"state"});
  add("pool.state slot stride < H*P*N", kWithOutproj,
      [](SA&, Pl& p) { p.state.strides[0] = kH * kP * kN - 1; }, {STRIDE}, {"state"});
  add("pool.prev_B last stride 2", kWithOutproj, [](SA&, Pl& p) { p.prev_B.strides[3] = 2; },
      {STRIDE}, {"prev_B"});
  add("pool.prev_x last stride 0", kWithOutproj, [](SA&, Pl& p) { p.prev_x.strides[2] = 0; },
      {STRIDE}, {"prev_x"});

  // --- dtypes ------------------------------------------------------------------------
  add("inputs i32", kWithOutproj,
      [](SA& a, Pl& p) {
        for (ssu_tensor_t* t : {&a.B, &a.C, &a.x, &a.z, &a.out, &p.prev_B, &p.prev_x})
          t->dtype = SSU_DTYPE_I32;
      },
      {DTYPE}, {"x", "B", "C", "z", "out", "prev_B", "prev_x"});
  add("inputs dtype 99", kPerRank,
      [](SA& a, Pl& p) {
        for (ssu_tensor_t* t : {&a.B, &a.C, &a.x, &a.out, &p.prev_B, &p.prev_x}) t->dtype = 99;
      },
      {DTYPE}, {"x", "B", "C", "out", "prev_B", "prev_x"});
  add("state i32", kWithOutproj, [](SA&, Pl& p) { p.state.dtype = SSU_DTYPE_I32; }, {DTYPE, NOTSUP},
      {"state"});
  add("state i16 (block-scaled)", kWithOutproj, [](SA&, Pl& p) { p.state.dtype = SSU_DTYPE_I16; },
      {NOTSUP, DTYPE, NUL}, {"state", "state_scale"});
  add("state i8 (block-scaled)", kWithOutproj, [](SA&, Pl& p) { p.state.dtype = SSU_DTYPE_I8; },
      {NOTSUP}, {"state", "i8"});
  add("state f8e4m3 (block-scaled)", kWithOutproj,
      [](SA&, Pl& p) { p.state.dtype = SSU_DTYPE_F8E4M3; }, {NOTSUP}, {"state", "f8e4m3"});
  struct Dt {
    const char* name;
    ssu_tensor_t SA::*field;
    ssu_dtype_t dtype;
    ssu_status_t code;
  };
  for (Dt d : {Dt{"A", &SA::A, SSU_DTYPE_I32, DTYPE}, Dt{"dt", &SA::dt, SSU_DTYPE_I64, DTYPE},
               Dt{"trap", &SA::trap, SSU_DTYPE_INVALID, DTYPE}, Dt{"D", &SA::D, SSU_DTYPE_I16, DTYPE},
               Dt{"xproj", &SA::xproj, SSU_DTYPE_I32, DTYPE},
               Dt{"zproj", &SA::zproj, SSU_DTYPE_I64, DTYPE},
               Dt{"outproj", &SA::outproj, 77, DTYPE}, Dt{"B", &SA::B, SSU_DTYPE_F32, MISMATCH},
               Dt{"C", &SA::C, SSU_DTYPE_F16, MISMATCH}, Dt{"x", &SA::x, SSU_DTYPE_F32, MISMATCH},
               Dt{"z", &SA::z, SSU_DTYPE_F32, MISMATCH}, Dt{"out", &SA::out, SSU_DTYPE_F32, MISMATCH},
               Dt{"dst_index", &SA::dst_index, SSU_DTYPE_I64, MISMATCH}})
    add(std::string(d.name) + " dtype " + std::to_string(d.dtype), kWithOutproj,
        [f = d.field, dt = d.dtype](SA& a, Pl&) { (a.*f).dtype = dt; }, {d.code}, {d.name});
  add("pool.prev_B f32 (inputs bf16)", kWithOutproj, [](SA&, Pl& p) { p.prev_B.dtype = SSU_DTYPE_F32; },
      {MISMATCH}, {"prev_B"});
  add("pool.prev_x f16 (inputs bf16)", kWithOutproj, [](SA&, Pl& p) { p.prev_x.dtype = SSU_DTYPE_F16; },
      {MISMATCH}, {"prev_x"});
  add("src and dst f32", kWithOutproj,
      [](SA& a, Pl&) { a.src_index.dtype = a.dst_index.dtype = SSU_DTYPE_F32; }, {DTYPE},
      {"src_index", "dst_index"});

  // --- flags, struct sizes, reserved fields -------------------------------------------
  add("unknown flag 0x2", kWithOutproj, [](SA& a, Pl&) { a.flags |= 0x2u; },
      {SSU_ERROR_UNKNOWN_FLAG}, {"flags"});
  add("unknown flag 0x80000000", kPerRank, [](SA& a, Pl&) { a.flags |= 0x80000000u; },
      {SSU_ERROR_UNKNOWN_FLAG}, {"flags"});
  add("args struct_size 0", kWithOutproj, [](SA& a, Pl&) { a.struct_size = 0; },
      {SSU_ERROR_STRUCT_SIZE}, {"args", "struct_size"});
  add("args struct_size 8", kWithOutproj, [](SA& a, Pl&) { a.struct_size = 8; },
      {SSU_ERROR_STRUCT_SIZE}, {"args", "struct_size"});
  add("pool struct_size 0", kWithOutproj, [](SA&, Pl& p) { p.struct_size = 0; },
      {SSU_ERROR_STRUCT_SIZE}, {"pool", "struct_size"});
  add("pool reserved0", kWithOutproj, [](SA&, Pl& p) { p.reserved0 = 1; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"reserved0", "pool"});
  return v;
}

// Runs one bad input through plan creation and through execute with a plan
// made from the valid arguments; nothing may be written.
template <typename Problem, typename Args, typename Create, typename Execute>
void check_refused(ssu_context_t ctx, Problem& p, const Args& bad, const ssu_state_pool_t*,
                   const std::vector<ssu_status_t>& codes, const std::vector<std::string>& nm,
                   const std::string& what, Create create, Execute execute) {
  CAPTURE(what);
  ssu_plan_t plan = kSentinelPlan;
  const ssu_status_t st = create(ctx, &bad, nullptr, &plan);
  const std::string msg = ssu_last_error_message();
  CHECK_MESSAGE(one_of(st, codes), "plan: got " << st << " (" << std::string(ssu_status_string(st))
                                                << "), expected " << codes_text(codes)
                                                << "; message: " << msg);
  CHECK(plan == kSentinelPlan);
  CHECK_MESSAGE(names_any(msg, nm), "plan: the message does not name the argument: '" << msg << "'");
  if (std::getenv("SSU_TEST_VERBOSE")) std::printf("%-45s -> %d %s\n", what.c_str(), st, msg.c_str());
  if (st == SSU_SUCCESS) ssu_plan_destroy(plan);

  const Args good = p.args();
  ssu_plan_t gplan = nullptr;
  REQUIRE_MESSAGE(create(ctx, &good, nullptr, &gplan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));
  const ssu_status_t est = execute(gplan, &bad, nullptr);
  const std::string emsg = ssu_last_error_message();
  CHECK_MESSAGE((one_of(est, codes) || est == SSU_ERROR_PLAN_MISMATCH),
                "execute: got " << est << " (" << std::string(ssu_status_string(est)) << "), expected "
                                << codes_text(codes) << " or PLAN_MISMATCH; message: " << emsg);
  CHECK(!emsg.empty());
  ssu_plan_destroy(gplan);
  const CheckResult r = p.check_unchanged();
  CHECK_MESSAGE(r.ok, r.message);
}

}  // namespace

TEST_CASE("mamba3 validation: every bad step input is refused, nothing written") {
  CpuContext c;
  HostMemory mem;
  for (const BadStep& bad : bad_steps()) {
    StepProblem p(step_base(bad.base), mem);
    ssu_state_pool_t pool = *p.pool();
    ssu_mamba3_step_args_t a = p.args();
    a.pool = &pool;
    bad.mutate(a, pool);
    check_refused(c.ctx, p, a, &pool, bad.codes, bad.names, bad.what, ssu_plan_create_mamba3_step,
                  ssu_plan_execute_mamba3_step);
  }
}

TEST_CASE("mamba3 validation: slot indices beyond the pool are refused at execute") {
  CpuContext c;
  HostMemory mem;
  struct Poke {
    const char* what;
    bool dst;
    int64_t delta;  // the index becomes S + delta
  };
  for (Poke k : {Poke{"src == S", false, 0}, Poke{"src >> S", false, 100000},
                 Poke{"dst == S", true, 0}, Poke{"dst == S + 7", true, 7}}) {
    CAPTURE(std::string(k.what));
    StepProblem p(step_base(kWithOutproj), mem);
    const ssu_mamba3_step_args_t a = p.args();
    ssu_plan_t plan = nullptr;
    REQUIRE(ssu_plan_create_mamba3_step(c.ctx, &a, nullptr, &plan) == SSU_SUCCESS);
    // The last live sequence gets the bad index.
    int64_t b = kBt - 1;
    while (b > 0 && !p.slots().live[size_t(b)]) --b;
    p.poke_index(k.dst, b, p.slots().S + k.delta);
    const ssu_status_t st = ssu_plan_execute_mamba3_step(plan, &a, nullptr);
    const std::string msg = ssu_last_error_message();
    CHECK_MESSAGE(st == SSU_ERROR_INDEX_OUT_OF_RANGE, st << ": " << msg);
    CHECK(names_any(msg, {k.dst ? "dst_index" : "src_index"}));
    ssu_plan_destroy(plan);
    const CheckResult r = p.check_unchanged();
    CHECK_MESSAGE(r.ok, r.message);

    RotaryCase rc;
    rc.dst = Dst::Distinct;
    rc.pad = Pad::Negative;
    rc.seed = 9;
    RotaryProblem rp(rc, mem);
    const ssu_mamba3_rotary_args_t ra = rp.args();
    REQUIRE(ssu_plan_create_mamba3_rotary(c.ctx, &ra, nullptr, &plan) == SSU_SUCCESS);
    b = rc.batch - 1;
    while (b > 0 && !rp.slots().live[size_t(b)]) --b;
    rp.poke_index(k.dst, b, rp.slots().S + k.delta);
    const ssu_status_t rst = ssu_plan_execute_mamba3_rotary(plan, &ra, nullptr);
    CHECK_MESSAGE(rst == SSU_ERROR_INDEX_OUT_OF_RANGE, rst << ": " << ssu_last_error_message());
    ssu_plan_destroy(plan);
    const CheckResult rr = rp.check_unchanged();
    CHECK_MESSAGE(rr.ok, rr.message);
  }
}

// ---------------------------------------------------------------------------
TEST_CASE("mamba3 validation: execute refuses step arguments that do not fit the plan") {
  CpuContext c;
  HostMemory mem;
  struct Change {
    const char* what;
    StepBase base;
    std::function<void(StepCase&)> change;
  };
  const ssu_dtype_t F32 = SSU_DTYPE_F32, BF16 = SSU_DTYPE_BF16, F16 = SSU_DTYPE_F16;
  const std::vector<Change> changes = {
      {"heads", kWithOutproj, [](StepCase& s) { s.H = 4; }},
      {"dim", kWithOutproj, [](StepCase& s) { s.P = 32; }},
      {"dstate", kWithOutproj, [](StepCase& s) { s.N = 32; }},
      {"rank", kWithOutproj, [](StepCase& s) { s.R = 4; }},
      {"state dtype", kWithOutproj, [=](StepCase& s) { s.state = BF16; }},
      {"input dtype", kWithOutproj, [=](StepCase& s) { s.input = F16; }},
      {"A/dt/trap dtype", kWithOutproj, [=](StepCase& s) { s.param = BF16; }},
      {"weight dtype", kWithOutproj, [=](StepCase& s) { s.weight = F16; }},
      {"index dtype", kWithOutproj, [](StepCase& s) { s.index = SSU_DTYPE_I64; }},
      {"D absent", kWithOutproj, [](StepCase& s) { s.has_D = false; }},
      {"z absent", kWithOutproj, [](StepCase& s) { s.has_z = false; }},
      {"outproj absent", kWithOutproj, [](StepCase& s) { s.outproj = false; s.has_z = false; }},
      {"outproj present", kPerRank, [](StepCase& s) { s.outproj = true; }},
      {"UPDATE_PREV off", kWithOutproj, [](StepCase& s) { s.update_prev = false; }},
      {"src absent", kPerRank, [](StepCase& s) { s.has_src = false; s.pad = Pad::None; }},
      {"dst absent", kWithOutproj, [](StepCase& s) { s.dst = Dst::Same; }},
  };
  (void)F32;
  for (const Change& ch : changes) {
    CAPTURE(std::string(ch.what));
    StepProblem planned(step_base(ch.base), mem);
    StepCase oc = step_base(ch.base);
    ch.change(oc);
    oc.seed += 1000;
    StepProblem other(oc, mem);
    const ssu_mamba3_step_args_t pa = planned.args();
    ssu_plan_t plan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_mamba3_step(c.ctx, &pa, nullptr, &plan) == SSU_SUCCESS,
                    std::string(ssu_last_error_message()));
    const ssu_mamba3_step_args_t oa = other.args();
    ssu_plan_t oplan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_mamba3_step(c.ctx, &oa, nullptr, &oplan) == SSU_SUCCESS,
                    std::string(ssu_last_error_message()));
    ssu_plan_destroy(oplan);
    const ssu_status_t st = ssu_plan_execute_mamba3_step(plan, &oa, nullptr);
    CHECK_MESSAGE(st == SSU_ERROR_PLAN_MISMATCH, "got " << st << " (" << std::string(ssu_status_string(st))
                                                        << "): " << std::string(ssu_last_error_message()));
    CHECK(std::strlen(ssu_last_error_message()) > 0);
    ssu_plan_destroy(plan);
    const CheckResult r1 = other.check_unchanged();
    CHECK_MESSAGE(r1.ok, r1.message);
    const CheckResult r2 = planned.check_unchanged();
    CHECK_MESSAGE(r2.ok, r2.message);
  }
}

TEST_CASE("mamba3 validation: execute accepts another batch size, slot count and strides") {
  CpuContext c;
  HostMemory mem;
  for (StepBase base : {kWithOutproj, kPerRank}) {
    StepProblem planned(step_base(base), mem);
    const ssu_mamba3_step_args_t pa = planned.args();
    ssu_plan_t plan = nullptr;
    REQUIRE(ssu_plan_create_mamba3_step(c.ctx, &pa, nullptr, &plan) == SSU_SUCCESS);
    int variant = 0;
    for (int64_t batch : {1, 7}) {
      StepCase s = step_base(base);
      s.batch = batch;
      s.extra_slots = 2 + 5 * variant;
      s.layout = variant ? kOdd : kDenseLayout;
      s.pad = batch == 1 ? Pad::None : Pad::Negative;
      s.seed = 500 + uint64_t(variant++);
      StepProblem p(s, mem);
      const ssu_mamba3_step_args_t a = p.args();
      const ssu_status_t st = ssu_plan_execute_mamba3_step(plan, &a, nullptr);
      REQUIRE_MESSAGE(st == SSU_SUCCESS, describe(s) << ": " << std::string(ssu_last_error_message()));
      const CheckResult r = p.check();
      CHECK_MESSAGE(r.ok, r.message);
    }
    ssu_plan_destroy(plan);
  }
}

TEST_CASE("mamba3 validation: a plan of one operation is refused by the others' execute") {
  CpuContext c;
  HostMemory mem;
  StepProblem sp(step_base(kWithOutproj), mem);
  RotaryCase rc;
  rc.seed = 5;
  RotaryProblem rp(rc, mem);
  UpdateCase uc;
  uc.dtypes(SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F32).shape(2, 1, 64, 16);
  uc.seed = 6;
  uc.tag = "update_for_mamba3_validation";
  UpdateProblem up(uc, mem);

  const ssu_mamba3_step_args_t sa = sp.args();
  const ssu_mamba3_rotary_args_t ra = rp.args();
  const ssu_update_args_t ua = up.args();
  ssu_plan_t splan = nullptr, rplan = nullptr, uplan = nullptr;
  REQUIRE_MESSAGE(ssu_plan_create_mamba3_step(c.ctx, &sa, nullptr, &splan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));
  REQUIRE_MESSAGE(ssu_plan_create_mamba3_rotary(c.ctx, &ra, nullptr, &rplan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));
  REQUIRE_MESSAGE(ssu_plan_create_update(c.ctx, &ua, nullptr, &uplan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));

  auto expect_mismatch = [](ssu_status_t st, const char* what) {
    CHECK_MESSAGE(st == SSU_ERROR_PLAN_MISMATCH, what << ": got " << st << " ("
                                                      << std::string(ssu_status_string(st)) << "): "
                                                      << std::string(ssu_last_error_message()));
  };
  expect_mismatch(ssu_plan_execute_update(splan, &ua, nullptr), "step plan, execute_update");
  expect_mismatch(ssu_plan_execute_update(rplan, &ua, nullptr), "rotary plan, execute_update");
  expect_mismatch(ssu_plan_execute_mamba3_step(uplan, &sa, nullptr), "update plan, execute_mamba3_step");
  expect_mismatch(ssu_plan_execute_mamba3_step(rplan, &sa, nullptr), "rotary plan, execute_mamba3_step");
  expect_mismatch(ssu_plan_execute_mamba3_rotary(uplan, &ra, nullptr), "update plan, execute_mamba3_rotary");
  expect_mismatch(ssu_plan_execute_mamba3_rotary(splan, &ra, nullptr), "step plan, execute_mamba3_rotary");
  ssu_plan_destroy(splan);
  ssu_plan_destroy(rplan);
  ssu_plan_destroy(uplan);
  for (const CheckResult& r : {sp.check_unchanged(), rp.check_unchanged(), up.check_unchanged()})
    CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("mamba3 validation: the update refuses the Mamba-3 pools") {
  CpuContext c;
  HostMemory mem;
  UpdateCase uc;
  uc.dtypes(SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F32).shape(2, 1, 64, 16);
  uc.seed = 8;
  uc.tag = "update_with_mamba3_pools";
  UpdateProblem up(uc, mem);
  for (int which = 0; which < 3; ++which) {
    CAPTURE(which);
    ssu_state_pool_t pool = *up.pool();
    ssu_tensor_t& t = which == 0 ? pool.prev_B : which == 1 ? pool.prev_x : pool.angle_state;
    t = which == 0 ? spare_tensor(SSU_DTYPE_BF16, {pool.state.shape[0], 1, 2, 16})
        : which == 1 ? spare_tensor(SSU_DTYPE_BF16, {pool.state.shape[0], 2, 64})
                     : spare_tensor(SSU_DTYPE_F32, {pool.state.shape[0], 2, 8});
    ssu_update_args_t a = up.args();
    a.pool = &pool;
    ssu_plan_t plan = kSentinelPlan;
    const ssu_status_t st = ssu_plan_create_update(c.ctx, &a, nullptr, &plan);
    const std::string msg = ssu_last_error_message();
    CHECK_MESSAGE(one_of(st, {SSU_ERROR_INCOMPATIBLE_OPTIONS, SSU_ERROR_INVALID_ARGUMENT}),
                  st << ": " << msg);
    CHECK(plan == kSentinelPlan);
    CHECK(names_any(msg, {"prev_B", "prev_x", "angle_state"}));
  }
  const CheckResult r = up.check_unchanged();
  CHECK_MESSAGE(r.ok, r.message);
}

// ---------------------------------------------------------------------------
// The rotary step
// ---------------------------------------------------------------------------
namespace {

using RA = ssu_mamba3_rotary_args_t;
struct BadRotary {
  std::string what;
  std::function<void(RA&, Pl&)> mutate;
  std::vector<ssu_status_t> codes;
  std::vector<std::string> names;
};

RotaryCase rotary_base() {
  RotaryCase c;
  c.tag = "validation_rotary";
  c.qk = SSU_DTYPE_BF16;
  c.H = 2;
  c.N = 32;
  c.R = 2;
  c.Sa = 8;
  c.batch = 3;
  c.dst = Dst::Distinct;
  c.pad = Pad::Negative;
  c.seed = 61;
  return c;
}

std::vector<BadRotary> bad_rotaries() {
  std::vector<BadRotary> v;
  auto add = [&](std::string what, std::function<void(RA&, Pl&)> m, std::vector<ssu_status_t> codes,
                 std::vector<std::string> names) {
    v.push_back({std::move(what), std::move(m), std::move(codes), std::move(names)});
  };
  const ssu_status_t NUL = SSU_ERROR_NULL_POINTER, RANK = SSU_ERROR_BAD_RANK,
                     SHAPE = SSU_ERROR_BAD_SHAPE, STRIDE = SSU_ERROR_BAD_STRIDE,
                     DTYPE = SSU_ERROR_BAD_DTYPE, MISMATCH = SSU_ERROR_DTYPE_MISMATCH;
  add("pool NULL", [](RA& a, Pl&) { a.pool = nullptr; }, {NUL}, {"pool"});
  add("pool.angle_state NULL", [](RA&, Pl& p) { p.angle_state.data = nullptr; }, {NUL},
      {"angle_state"});
  for (auto f : {std::pair<const char*, ssu_tensor_t RA::*>{"angle_rate", &RA::angle_rate},
                 {"dt", &RA::dt}, {"q", &RA::q}, {"k", &RA::k}, {"q_out", &RA::q_out},
                 {"k_out", &RA::k_out}})
    add(std::string(f.first) + " NULL", [m = f.second](RA& a, Pl&) { (a.*m).data = nullptr; }, {NUL},
        {f.first});
  add("angle_state bf16", [](RA&, Pl& p) { p.angle_state.dtype = SSU_DTYPE_BF16; }, {DTYPE},
      {"angle_state"});
  add("angle_state.ndim=2", [](RA&, Pl& p) { set_rank(p.angle_state, 2); }, {RANK}, {"angle_state"});
  add("angle_state last stride 2", [](RA&, Pl& p) { p.angle_state.strides[2] = 2; }, {STRIDE},
      {"angle_state"});
  add("Sa > N/2",
      [](RA& a, Pl& p) {
        p.angle_state.shape[2] = a.angle_rate.shape[2] = a.q.shape[3] / 2 + 1;
        p.angle_state.strides[1] = std::max(p.angle_state.strides[1], p.angle_state.shape[2]);
        p.angle_state.strides[0] =
            std::max(p.angle_state.strides[0], p.angle_state.shape[1] * p.angle_state.strides[1]);
      },
      {SHAPE, SSU_ERROR_INVALID_ARGUMENT}, {"angle_state", "Sa", "angle_rate"});
  add("Sa = 0", [](RA& a, Pl& p) { p.angle_state.shape[2] = a.angle_rate.shape[2] = 0; },
      {SHAPE, SSU_ERROR_INVALID_ARGUMENT}, {"angle_state", "Sa", "angle_rate"});
  add("angle_rate angles", [](RA& a, Pl&) { a.angle_rate.shape[2] -= 1; }, {SHAPE},
      {"angle_rate", "angle_state"});
  add("angle_rate heads", [](RA& a, Pl&) { a.angle_rate.shape[1] += 1; }, {SHAPE}, {"angle_rate"});
  add("angle_state heads", [](RA&, Pl& p) { p.angle_state.shape[1] += 1; }, {SHAPE, STRIDE},
      {"angle_state", "q"});
  add("dt batch", [](RA& a, Pl&) { a.dt.shape[0] += 1; }, {SHAPE}, {"dt"});
  add("dt.ndim=1", [](RA& a, Pl&) { set_rank(a.dt, 1); }, {RANK}, {"dt"});
  add("k batch", [](RA& a, Pl&) { a.k.shape[0] += 1; }, {SHAPE}, {"k", "q"});
  add("k rank", [](RA& a, Pl&) { a.k.shape[1] = 1; }, {SHAPE}, {"k", "q"});
  add("q_out dstate", [](RA& a, Pl&) { a.q_out.shape[3] = 16; }, {SHAPE}, {"q_out"});
  add("q_bias heads", [](RA& a, Pl&) { a.q_bias.shape[1] = 1; }, {SHAPE}, {"q_bias"});
  add("k_bias.ndim=2", [](RA& a, Pl&) { set_rank(a.k_bias, 2); }, {RANK}, {"k_bias"});
  add("q.ndim=3", [](RA& a, Pl&) { set_rank(a.q, 3); }, {RANK}, {"q"});
  add("q last stride 2", [](RA& a, Pl&) { a.q.strides[3] = 2; }, {STRIDE}, {"q"});
  add("k_out last stride 0", [](RA& a, Pl&) { a.k_out.strides[3] = 0; }, {STRIDE}, {"k_out"});
  add("q_out = q with other strides",
      [](RA& a, Pl&) {
        a.q_out.data = a.q.data;
        a.q_out.strides[0] = a.q.strides[0];
        a.q_out.strides[1] = a.q.strides[1];
        a.q_out.strides[2] = a.q.strides[2] + 1;
      },
      {STRIDE, SSU_ERROR_INVALID_ARGUMENT}, {"q_out", "q"});
  add("q f32, k bf16", [](RA& a, Pl&) { a.q.dtype = SSU_DTYPE_F32; }, {MISMATCH}, {"q", "k"});
  add("k_out f16", [](RA& a, Pl&) { a.k_out.dtype = SSU_DTYPE_F16; }, {MISMATCH}, {"k_out"});
  add("q and k i32",
      [](RA& a, Pl&) { a.q.dtype = a.k.dtype = a.q_out.dtype = a.k_out.dtype = SSU_DTYPE_I32; },
      {DTYPE}, {"q", "k", "q_out", "k_out"});
  add("angle_rate i32", [](RA& a, Pl&) { a.angle_rate.dtype = SSU_DTYPE_I32; }, {DTYPE},
      {"angle_rate"});
  add("dt invalid", [](RA& a, Pl&) { a.dt.dtype = SSU_DTYPE_INVALID; }, {DTYPE}, {"dt"});
  add("q_bias i16", [](RA& a, Pl&) { a.q_bias.dtype = SSU_DTYPE_I16; }, {DTYPE}, {"q_bias"});
  add("src f32", [](RA& a, Pl&) { a.src_index.dtype = a.dst_index.dtype = SSU_DTYPE_F32; }, {DTYPE},
      {"src_index", "dst_index"});
  add("dst i64, src i32", [](RA& a, Pl&) { a.dst_index.dtype = SSU_DTYPE_I64; }, {MISMATCH},
      {"dst_index"});
  add("src_index batch", [](RA& a, Pl&) { a.src_index.shape[0] += 1; }, {SHAPE}, {"src_index"});
  add("unknown flag 0x2", [](RA& a, Pl&) { a.flags |= 0x2u; }, {SSU_ERROR_UNKNOWN_FLAG}, {"flags"});
  add("args struct_size 4", [](RA& a, Pl&) { a.struct_size = 4; }, {SSU_ERROR_STRUCT_SIZE},
      {"args", "struct_size"});
  add("pool of 0.1 (no angle_state)",
      [](RA&, Pl& p) { p.struct_size = uint32_t(offsetof(ssu_state_pool_t, prev_B)); }, {NUL},
      {"angle_state", "pool"});
  return v;
}

}  // namespace

TEST_CASE("mamba3 validation: every bad rotary input is refused, nothing written") {
  CpuContext c;
  HostMemory mem;
  for (const BadRotary& bad : bad_rotaries()) {
    RotaryProblem p(rotary_base(), mem);
    ssu_state_pool_t pool = *p.pool();
    ssu_mamba3_rotary_args_t a = p.args();
    a.pool = &pool;
    bad.mutate(a, pool);
    check_refused(c.ctx, p, a, &pool, bad.codes, bad.names, bad.what, ssu_plan_create_mamba3_rotary,
                  ssu_plan_execute_mamba3_rotary);
  }
}

TEST_CASE("mamba3 validation: execute refuses rotary arguments that do not fit the plan") {
  CpuContext c;
  HostMemory mem;
  const std::vector<std::pair<const char*, std::function<void(RotaryCase&)>>> changes = {
      {"heads", [](RotaryCase& r) { r.H = 4; }},
      {"dstate", [](RotaryCase& r) { r.N = 64; }},
      {"rank", [](RotaryCase& r) { r.R = 1; }},
      {"angles", [](RotaryCase& r) { r.Sa = 4; }},
      {"halved", [](RotaryCase& r) { r.halved = true; }},
      {"q/k dtype", [](RotaryCase& r) { r.qk = SSU_DTYPE_F32; }},
      {"rate dtype", [](RotaryCase& r) { r.rate = SSU_DTYPE_BF16; }},
      {"q_bias absent", [](RotaryCase& r) { r.q_bias = false; }},
      {"k_bias absent", [](RotaryCase& r) { r.k_bias = false; }},
      {"index dtype", [](RotaryCase& r) { r.index = SSU_DTYPE_I64; }},
      {"dst absent", [](RotaryCase& r) { r.dst = Dst::Same; }},
  };
  for (const auto& ch : changes) {
    CAPTURE(std::string(ch.first));
    RotaryProblem planned(rotary_base(), mem);
    RotaryCase oc = rotary_base();
    ch.second(oc);
    oc.seed += 1000;
    RotaryProblem other(oc, mem);
    const ssu_mamba3_rotary_args_t pa = planned.args();
    ssu_plan_t plan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_mamba3_rotary(c.ctx, &pa, nullptr, &plan) == SSU_SUCCESS,
                    std::string(ssu_last_error_message()));
    const ssu_mamba3_rotary_args_t oa = other.args();
    ssu_plan_t oplan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_mamba3_rotary(c.ctx, &oa, nullptr, &oplan) == SSU_SUCCESS,
                    std::string(ssu_last_error_message()));
    ssu_plan_destroy(oplan);
    const ssu_status_t st = ssu_plan_execute_mamba3_rotary(plan, &oa, nullptr);
    CHECK_MESSAGE(st == SSU_ERROR_PLAN_MISMATCH, "got " << st << ": " << std::string(ssu_last_error_message()));
    ssu_plan_destroy(plan);
    const CheckResult r1 = other.check_unchanged();
    CHECK_MESSAGE(r1.ok, r1.message);
    const CheckResult r2 = planned.check_unchanged();
    CHECK_MESSAGE(r2.ok, r2.message);
  }
}

TEST_CASE("mamba3 validation: SSU_PLAN_PDL is refused by Mamba-3 plans, with no plan") {
  CpuContext c;
  HostMemory mem;
  ssu_plan_options_t po = SSU_PLAN_OPTIONS_INIT;
  po.flags = SSU_PLAN_PDL;
  StepProblem p(step_base(kWithOutproj), mem);
  const ssu_mamba3_step_args_t a = p.args();
  ssu_plan_t plan = kSentinelPlan;
  CHECK(ssu_plan_create_mamba3_step(c.ctx, &a, &po, &plan) == SSU_ERROR_NOT_SUPPORTED);
  CHECK(plan == kSentinelPlan);
  CHECK(std::string(ssu_last_error_message()).find("SSU_PLAN_PDL") != std::string::npos);
  RotaryCase rc;
  rc.seed = 10;
  RotaryProblem rp(rc, mem);
  const ssu_mamba3_rotary_args_t ra = rp.args();
  CHECK(ssu_plan_create_mamba3_rotary(c.ctx, &ra, &po, &plan) == SSU_ERROR_NOT_SUPPORTED);
  CHECK(plan == kSentinelPlan);
}
