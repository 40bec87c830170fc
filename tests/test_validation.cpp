// Every class of bad input to the update: the documented status, a message
// that names the argument, out-parameters untouched, and nothing written
// (every buffer, pool and outputs included, compared bit for bit with its
// poisoned snapshot). Plus execute-time mismatches against the plan.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"

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

enum Base { kSingle, kMulti, kVarlen, kInter, kMamba1, kI16, kI16Inter, kSR };

UpdateCase base_case(Base b) {
  UpdateCase c;
  c.shape(4, 2, 64, 16);
  c.batch = 3;
  c.dtypes(SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F32);
  c.index = SSU_DTYPE_I32;
  c.seed = 77 + uint64_t(b);
  switch (b) {
    case kSingle:
      c.tag = "validation_single";
      c.single();
      c.has_dst = true;
      break;
    case kMulti:
      c.tag = "validation_multi";
      c.multi(4);
      c.src_2d = true;
      c.num_accepted = true;
      c.store = Store::DstPerToken;
      c.index = SSU_DTYPE_I64;
      c.dtypes(SSU_DTYPE_BF16, SSU_DTYPE_F16, SSU_DTYPE_F32);
      break;
    case kVarlen:
      c.tag = "validation_varlen";
      c.varlen(4);
      c.batch = 4;
      c.has_dst = true;
      break;
    case kInter:
      c.tag = "validation_intermediate";
      c.multi(3);
      c.store = Store::Intermediate;
      c.inter_index = true;
      break;
    case kMamba1:
      c.tag = "validation_mamba1";
      c.single();
      c.mamba1();
      c.P = 128;
      break;
    case kI16:  // int16 pool with scales, single token, 1-D dst
      c.tag = "validation_i16";
      c.single();
      c.has_dst = true;
      c.state = SSU_DTYPE_I16;
      break;
    case kI16Inter:  // int16 pool, intermediate buffer with its scales
      c.tag = "validation_i16_intermediate";
      c.multi(3);
      c.store = Store::Intermediate;
      c.inter_index = true;
      c.state = SSU_DTYPE_I16;
      break;
    case kSR:  // bf16 pool, stochastic rounding with 7 rounds, per-token dst
      c.tag = "validation_sr";
      c.multi(4);
      c.src_2d = true;
      c.num_accepted = true;
      c.store = Store::DstPerToken;
      c.dtypes(SSU_DTYPE_BF16, SSU_DTYPE_F16, SSU_DTYPE_F32);
      c.sr(0x5eed, 7);
      break;
  }
  return c;
}

// True if `msg` contains `name` as a whole identifier.
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

using Mutate = std::function<void(ssu_update_args_t&, ssu_state_pool_t&, const UpdateProblem&)>;

struct BadInput {
  std::string what;
  Base base;
  Mutate mutate;
  std::vector<ssu_status_t> codes;
  std::vector<std::string> arg_names;  // the message names one of these
};

// Spare valid memory for descriptors that the base problem does not have.
std::vector<int64_t>& spare() {
  static std::vector<int64_t> v(4096, 0);
  return v;
}
ssu_tensor_t index_tensor(ssu_dtype_t dtype, std::vector<int64_t> shape) {
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

std::vector<BadInput> bad_inputs() {
  using A = ssu_update_args_t;
  using Pl = ssu_state_pool_t;
  using Pr = UpdateProblem;
  std::vector<BadInput> v;
  auto add = [&](std::string what, Base base, Mutate m, std::vector<ssu_status_t> codes,
                 std::vector<std::string> arg_names) {
    v.push_back({std::move(what), base, std::move(m), std::move(codes), std::move(arg_names)});
  };
  const int64_t H = 4, G = 2, P = 64, N = 16, Bt = 3;
  (void)G;

  // --- NULL pointers -------------------------------------------------------
  add("pool NULL", kSingle, [](A& a, Pl&, const Pr&) { a.pool = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"pool"});
  add("pool state data NULL", kSingle, [](A&, Pl& p, const Pr&) { p.state.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"state"});
  add("x data NULL", kSingle, [](A& a, Pl&, const Pr&) { a.x.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"x"});
  add("dt data NULL", kSingle, [](A& a, Pl&, const Pr&) { a.dt.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"dt"});
  add("A data NULL", kSingle, [](A& a, Pl&, const Pr&) { a.A.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"A"});
  add("B data NULL", kSingle, [](A& a, Pl&, const Pr&) { a.B.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"B"});
  add("C data NULL", kSingle, [](A& a, Pl&, const Pr&) { a.C.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"C"});
  add("out data NULL", kSingle, [](A& a, Pl&, const Pr&) { a.out.data = nullptr; },
      {SSU_ERROR_NULL_POINTER}, {"out"});
  add("intermediate_states NULL with intermediate_index", kInter,
      [](A& a, Pl&, const Pr&) { a.intermediate_states.data = nullptr; },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"intermediate_index", "intermediate_states"});

  // --- ranks -----------------------------------------------------------------
  auto rank = [&](const char* name, Base base, ssu_tensor_t A::*field, int32_t ndim) {
    add(std::string(name) + ".ndim=" + std::to_string(ndim), base,
        [field, ndim](A& a, Pl&, const Pr&) {
          ssu_tensor_t& t = a.*field;
          for (int k = t.ndim; k < SSU_MAX_DIMS; ++k) {
            t.shape[k] = 1;
            t.strides[k] = 1;
          }
          t.ndim = ndim;
        },
        {SSU_ERROR_BAD_RANK}, {name});
  };
  rank("x", kSingle, &A::x, 2);
  rank("x", kSingle, &A::x, 5);
  rank("x", kSingle, &A::x, 0);
  rank("x", kSingle, &A::x, -1);
  rank("x", kSingle, &A::x, 7);
  rank("B", kSingle, &A::B, 2);
  rank("C", kSingle, &A::C, 4);
  rank("dt", kSingle, &A::dt, 1);
  rank("dt", kSingle, &A::dt, 4);
  rank("A", kSingle, &A::A, 2);
  rank("A", kSingle, &A::A, 4);
  rank("D", kSingle, &A::D, 3);
  rank("dt_bias", kSingle, &A::dt_bias, 3);
  rank("z", kSingle, &A::z, 2);
  rank("out", kSingle, &A::out, 4);
  rank("B", kMulti, &A::B, 3);
  rank("out", kMulti, &A::out, 3);
  rank("src_index", kMulti, &A::src_index, 3);
  rank("dst_index", kMulti, &A::dst_index, 3);
  rank("num_accepted_tokens", kMulti, &A::num_accepted_tokens, 2);
  rank("cu_seqlens", kVarlen, &A::cu_seqlens, 2);
  rank("intermediate_states", kInter, &A::intermediate_states, 4);
  rank("intermediate_index", kInter, &A::intermediate_index, 2);
  add("state.ndim=3", kSingle, [](A&, Pl& p, const Pr&) { p.state.ndim = 3; },
      {SSU_ERROR_BAD_RANK}, {"state"});
  add("state.ndim=7", kSingle, [](A&, Pl& p, const Pr&) { p.state.ndim = 7; },
      {SSU_ERROR_BAD_RANK}, {"state"});

  // --- shapes ------------------------------------------------------------------
  auto shape = [&](std::string what, Base base, ssu_tensor_t A::*field, int dim, int64_t value,
                   std::vector<std::string> nm) {
    add(what, base, [field, dim, value](A& a, Pl&, const Pr&) { (a.*field).shape[dim] = value; },
        {SSU_ERROR_BAD_SHAPE}, std::move(nm));
  };
  shape("x heads", kSingle, &A::x, 1, H + 1, {"x", "state"});
  shape("x dim", kSingle, &A::x, 2, P / 2, {"x", "state"});
  shape("x dim negative", kSingle, &A::x, 2, -P, {"x"});
  shape("B batch", kSingle, &A::B, 0, Bt + 1, {"B"});
  shape("C batch", kSingle, &A::C, 0, Bt - 1, {"C"});
  shape("dt batch", kSingle, &A::dt, 0, Bt + 1, {"dt"});
  shape("z batch", kSingle, &A::z, 0, Bt + 1, {"z"});
  shape("out batch", kSingle, &A::out, 0, Bt + 1, {"out"});
  shape("src batch", kSingle, &A::src_index, 0, Bt + 1, {"src_index"});
  shape("dst batch", kSingle, &A::dst_index, 0, Bt - 1, {"dst_index"});
  shape("B dstate", kSingle, &A::B, 2, N + 1, {"B", "state"});
  shape("C dstate", kSingle, &A::C, 2, N * 2, {"C", "state"});
  shape("C groups", kSingle, &A::C, 1, 4, {"C", "B"});
  shape("dt heads", kSingle, &A::dt, 1, H + 1, {"dt"});
  shape("A heads", kSingle, &A::A, 0, H - 1, {"A"});
  shape("D heads", kSingle, &A::D, 0, H + 1, {"D"});
  shape("dt_bias heads", kSingle, &A::dt_bias, 0, 1, {"dt_bias"});
  shape("z dim", kSingle, &A::z, 2, P - 1, {"z"});
  shape("out heads", kSingle, &A::out, 1, H - 1, {"out"});
  shape("out dim", kSingle, &A::out, 2, P + 16, {"out"});
  add("state dim", kSingle, [](A&, Pl& p, const Pr&) { p.state.shape[2] = 2 * P; },
      {SSU_ERROR_BAD_SHAPE, SSU_ERROR_BAD_STRIDE}, {"state", "x"});
  add("state heads", kSingle, [](A&, Pl& p, const Pr&) { p.state.shape[1] = H / 2; },
      {SSU_ERROR_BAD_SHAPE, SSU_ERROR_BAD_STRIDE}, {"state", "x"});
  add("state dstate", kSingle, [](A&, Pl& p, const Pr&) { p.state.shape[3] = 2 * N; },
      {SSU_ERROR_BAD_SHAPE, SSU_ERROR_BAD_STRIDE}, {"state", "B"});
  add("state slots negative", kSingle, [](A&, Pl& p, const Pr&) { p.state.shape[0] = -1; },
      {SSU_ERROR_BAD_SHAPE}, {"state"});
  shape("mamba1 dt dim", kMamba1, &A::dt, 2, 127, {"dt"});
  shape("mamba1 A dstate", kMamba1, &A::A, 2, 17, {"A"});
  shape("mamba1 A dim", kMamba1, &A::A, 1, 64, {"A"});
  shape("mamba1 D dim", kMamba1, &A::D, 1, 129, {"D"});
  shape("mamba1 dt_bias dim", kMamba1, &A::dt_bias, 1, 64, {"dt_bias"});
  shape("multi B tokens", kMulti, &A::B, 1, 5, {"B"});
  shape("multi dt tokens", kMulti, &A::dt, 1, 3, {"dt"});
  shape("multi out tokens", kMulti, &A::out, 1, 5, {"out"});
  shape("multi z tokens", kMulti, &A::z, 1, 2, {"z"});
  shape("multi src tokens", kMulti, &A::src_index, 1, 5, {"src_index"});
  shape("multi dst tokens", kMulti, &A::dst_index, 1, 3, {"dst_index"});
  shape("multi num_accepted batch", kMulti, &A::num_accepted_tokens, 0, Bt + 1,
        {"num_accepted_tokens"});
  shape("varlen cu_seqlens length", kVarlen, &A::cu_seqlens, 0, 6,
        {"cu_seqlens", "src_index", "dst_index"});
  add("varlen B tokens", kVarlen, [](A& a, Pl&, const Pr&) { a.B.shape[0] += 1; },
      {SSU_ERROR_BAD_SHAPE}, {"B"});
  add("varlen out tokens", kVarlen, [](A& a, Pl&, const Pr&) { a.out.shape[0] -= 1; },
      {SSU_ERROR_BAD_SHAPE}, {"out"});
  shape("intermediate tokens", kInter, &A::intermediate_states, 1, 4, {"intermediate_states"});
  shape("intermediate heads", kInter, &A::intermediate_states, 2, H + 1, {"intermediate_states"});
  shape("intermediate dim", kInter, &A::intermediate_states, 3, P / 2, {"intermediate_states"});
  shape("intermediate dstate", kInter, &A::intermediate_states, 4, N + 1,
        {"intermediate_states"});
  shape("intermediate_index batch", kInter, &A::intermediate_index, 0, Bt + 1,
        {"intermediate_index"});
  add("H % G != 0", kSingle,
      [](A& a, Pl&, const Pr&) {
        a.B.shape[1] = 3;
        a.C.shape[1] = 3;
      },
      {SSU_ERROR_BAD_SHAPE, SSU_ERROR_INVALID_ARGUMENT}, {"B", "C", "G", "ngroups", "groups"});

  // --- strides -----------------------------------------------------------------
  auto last_stride = [&](const char* name, Base base, ssu_tensor_t A::*field, int64_t s) {
    add(std::string(name) + " last stride " + std::to_string(s), base,
        [field, s](A& a, Pl&, const Pr&) { (a.*field).strides[(a.*field).ndim - 1] = s; },
        {SSU_ERROR_BAD_STRIDE}, {name});
  };
  last_stride("x", kSingle, &A::x, 2);
  last_stride("x", kSingle, &A::x, 0);
  last_stride("B", kSingle, &A::B, 2);
  last_stride("C", kSingle, &A::C, -1);
  last_stride("z", kSingle, &A::z, 3);
  last_stride("out", kSingle, &A::out, 2);
  last_stride("out", kMulti, &A::out, 0);
  last_stride("x", kVarlen, &A::x, 2);
  auto pool_stride = [&](std::string what, int dim, std::function<int64_t(int64_t)> f) {
    add("state " + what, kSingle,
        [dim, f](A&, Pl& p, const Pr&) { p.state.strides[dim] = f(p.state.strides[dim]); },
        {SSU_ERROR_BAD_STRIDE}, {"state"});
  };
  pool_stride("dstate stride 2", 3, [](int64_t) { return 2; });
  pool_stride("dim stride N+1", 2, [](int64_t s) { return s + 1; });
  pool_stride("head stride P*N+N", 1, [](int64_t s) { return s + N; });
  pool_stride("slot stride < H*P*N", 0, [](int64_t) { return H * P * N - 1; });
  pool_stride("slot stride 0", 0, [](int64_t) { return 0; });
  add("intermediate dstate stride", kInter,
      [](A& a, Pl&, const Pr&) { a.intermediate_states.strides[4] = 2; },
      {SSU_ERROR_BAD_STRIDE}, {"intermediate_states"});
  add("intermediate dim stride", kInter,
      [](A& a, Pl&, const Pr&) { a.intermediate_states.strides[3] += 1; },
      {SSU_ERROR_BAD_STRIDE}, {"intermediate_states"});
  add("intermediate rows overlap", kInter,
      [](A& a, Pl&, const Pr&) {
        a.intermediate_states.strides[1] = a.intermediate_states.strides[2] * H / 2;
      },
      {SSU_ERROR_BAD_STRIDE}, {"intermediate_states"});
  add("intermediate token and entry strides equal", kInter,
      [](A& a, Pl&, const Pr&) {
        a.intermediate_states.strides[0] = a.intermediate_states.strides[1];
      },
      {SSU_ERROR_BAD_STRIDE}, {"intermediate_states"});

  // --- dtypes ------------------------------------------------------------------
  auto set_inputs = [](A& a, ssu_dtype_t d) {
    a.x.dtype = a.B.dtype = a.C.dtype = a.z.dtype = a.out.dtype = d;
  };
  const std::vector<std::string> input_names = {"x", "B", "C", "z", "out"};
  add("inputs i32", kSingle, [=](A& a, Pl&, const Pr&) { set_inputs(a, SSU_DTYPE_I32); },
      {SSU_ERROR_BAD_DTYPE}, input_names);
  add("inputs invalid dtype", kSingle,
      [=](A& a, Pl&, const Pr&) { set_inputs(a, SSU_DTYPE_INVALID); }, {SSU_ERROR_BAD_DTYPE},
      input_names);
  add("inputs dtype 99", kSingle, [=](A& a, Pl&, const Pr&) { set_inputs(a, 99); },
      {SSU_ERROR_BAD_DTYPE}, input_names);
  add("state i32", kSingle, [](A&, Pl& p, const Pr&) { p.state.dtype = SSU_DTYPE_I32; },
      {SSU_ERROR_BAD_DTYPE}, {"state"});
  add("state i16 without state_scale", kSingle,
      [](A&, Pl& p, const Pr&) { p.state.dtype = SSU_DTYPE_I16; }, {SSU_ERROR_NULL_POINTER},
      {"state_scale"});
  auto dtype = [&](const char* name, Base base, ssu_tensor_t A::*field, ssu_dtype_t d,
                   ssu_status_t code) {
    add(std::string(name) + " dtype " + std::to_string(d), base,
        [field, d](A& a, Pl&, const Pr&) { (a.*field).dtype = d; }, {code}, {name});
  };
  dtype("dt", kSingle, &A::dt, SSU_DTYPE_I64, SSU_ERROR_BAD_DTYPE);
  dtype("dt", kSingle, &A::dt, SSU_DTYPE_INVALID, SSU_ERROR_BAD_DTYPE);
  dtype("A", kSingle, &A::A, SSU_DTYPE_I32, SSU_ERROR_BAD_DTYPE);
  dtype("D", kSingle, &A::D, SSU_DTYPE_I16, SSU_ERROR_BAD_DTYPE);
  dtype("dt_bias", kSingle, &A::dt_bias, SSU_DTYPE_I64, SSU_ERROR_BAD_DTYPE);
  dtype("cu_seqlens", kVarlen, &A::cu_seqlens, SSU_DTYPE_F32, SSU_ERROR_BAD_DTYPE);
  dtype("num_accepted_tokens", kMulti, &A::num_accepted_tokens, SSU_DTYPE_F16,
        SSU_ERROR_BAD_DTYPE);
  dtype("intermediate_index", kInter, &A::intermediate_index, SSU_DTYPE_F32,
        SSU_ERROR_BAD_DTYPE);
  add("src and dst f32", kSingle,
      [](A& a, Pl&, const Pr&) { a.src_index.dtype = a.dst_index.dtype = SSU_DTYPE_F32; },
      {SSU_ERROR_BAD_DTYPE}, {"src_index", "dst_index"});
  add("src and dst i16", kMulti,
      [](A& a, Pl&, const Pr&) { a.src_index.dtype = a.dst_index.dtype = SSU_DTYPE_I16; },
      {SSU_ERROR_BAD_DTYPE}, {"src_index", "dst_index"});
  dtype("B", kSingle, &A::B, SSU_DTYPE_F32, SSU_ERROR_DTYPE_MISMATCH);
  dtype("C", kSingle, &A::C, SSU_DTYPE_F16, SSU_ERROR_DTYPE_MISMATCH);
  dtype("z", kSingle, &A::z, SSU_DTYPE_F32, SSU_ERROR_DTYPE_MISMATCH);
  dtype("out", kSingle, &A::out, SSU_DTYPE_F32, SSU_ERROR_DTYPE_MISMATCH);
  dtype("out", kMulti, &A::out, SSU_DTYPE_BF16, SSU_ERROR_DTYPE_MISMATCH);
  dtype("dst_index", kSingle, &A::dst_index, SSU_DTYPE_I64, SSU_ERROR_DTYPE_MISMATCH);
  dtype("dst_index", kMulti, &A::dst_index, SSU_DTYPE_I32, SSU_ERROR_DTYPE_MISMATCH);
  dtype("intermediate_states", kInter, &A::intermediate_states, SSU_DTYPE_BF16,
        SSU_ERROR_DTYPE_MISMATCH);

  // --- options that exclude each other -----------------------------------------
  add("2-D dst with an intermediate buffer", kInter,
      [](A& a, Pl&, const Pr&) { a.dst_index = index_tensor(SSU_DTYPE_I32, {3, 3}); },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"dst_index", "intermediate_states"});
  add("num_accepted_tokens with a 1-D src", kInter,
      [](A& a, Pl&, const Pr&) { a.num_accepted_tokens = index_tensor(SSU_DTYPE_I32, {3}); },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"num_accepted_tokens"});
  add("num_accepted_tokens without src", kMulti,
      [](A& a, Pl&, const Pr&) { a.src_index.data = nullptr; },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"num_accepted_tokens", "src_index"});
  add("num_accepted_tokens in the single-token form", kSingle,
      [](A& a, Pl&, const Pr&) { a.num_accepted_tokens = index_tensor(SSU_DTYPE_I32, {3}); },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"num_accepted_tokens"});
  add("intermediate_index without a buffer", kSingle,
      [](A& a, Pl&, const Pr&) { a.intermediate_index = index_tensor(SSU_DTYPE_I32, {3}); },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"intermediate_index"});
  add("2-D src in the single-token form", kSingle,
      [](A& a, Pl&, const Pr&) {
        a.src_index = index_tensor(SSU_DTYPE_I32, {3, 1});
        a.dst_index.data = nullptr;
      },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS, SSU_ERROR_BAD_RANK}, {"src_index"});
  add("2-D dst in the single-token form", kSingle,
      [](A& a, Pl&, const Pr&) {
        a.src_index.data = nullptr;
        a.dst_index = index_tensor(SSU_DTYPE_I32, {3, 1});
      },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS, SSU_ERROR_BAD_RANK}, {"dst_index"});
  add("cu_seqlens with a 4-D x", kMulti,
      [](A& a, Pl&, const Pr&) { a.cu_seqlens = index_tensor(SSU_DTYPE_I32, {4}); },
      {SSU_ERROR_INCOMPATIBLE_OPTIONS, SSU_ERROR_BAD_RANK}, {"cu_seqlens", "x"});
  add("varlen max_tokens 0", kVarlen, [](A& a, Pl&, const Pr&) { a.max_tokens = 0; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"max_tokens"});
  add("varlen max_tokens -4", kVarlen, [](A& a, Pl&, const Pr&) { a.max_tokens = -4; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"max_tokens"});
  add("pool reserved0", kSingle, [](A&, Pl& p, const Pr&) { p.reserved0 = 1; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"reserved0", "pool"});
  add("state_scale with a float state", kSingle,
      [](A&, Pl& p, const Pr&) {
        p.state_scale = index_tensor(SSU_DTYPE_F32, {p.state.shape[0], H, P});
      },
      {SSU_ERROR_INVALID_ARGUMENT, SSU_ERROR_INCOMPATIBLE_OPTIONS, SSU_ERROR_NOT_SUPPORTED},
      {"state_scale"});

  // --- int16 scales, stochastic rounding ------------------------------------------
  static uint64_t seed_value = 1234;
  const std::vector<ssu_status_t> kMissing = {SSU_ERROR_NULL_POINTER};
  const std::vector<ssu_status_t> kExcluded = {SSU_ERROR_INCOMPATIBLE_OPTIONS};
  add("i16 state_scale data NULL", kI16, [](A&, Pl& p, const Pr&) { p.state_scale.data = nullptr; },
      kMissing, {"state_scale"});
  add("state_scale with a bf16 state", kMulti,
      [](A&, Pl& p, const Pr&) {
        p.state_scale = index_tensor(SSU_DTYPE_F32, {p.state.shape[0], H, P});
      },
      kExcluded, {"state_scale"});
  auto scale_change = [&](std::string what, std::function<void(ssu_tensor_t&)> f,
                          ssu_status_t code) {
    add("state_scale " + what, kI16, [f](A&, Pl& p, const Pr&) { f(p.state_scale); }, {code},
        {"state_scale"});
  };
  scale_change("dtype f16", [](ssu_tensor_t& t) { t.dtype = SSU_DTYPE_F16; }, SSU_ERROR_BAD_DTYPE);
  scale_change("dtype bf16", [](ssu_tensor_t& t) { t.dtype = SSU_DTYPE_BF16; }, SSU_ERROR_BAD_DTYPE);
  scale_change("dtype i32", [](ssu_tensor_t& t) { t.dtype = SSU_DTYPE_I32; }, SSU_ERROR_BAD_DTYPE);
  scale_change("ndim 2", [](ssu_tensor_t& t) { t.ndim = 2; }, SSU_ERROR_BAD_RANK);
  scale_change("ndim 4", [](ssu_tensor_t& t) { t.ndim = 4; t.shape[3] = 1; t.strides[3] = 1; },
               SSU_ERROR_BAD_RANK);
  scale_change("slots S+1", [](ssu_tensor_t& t) { t.shape[0] += 1; }, SSU_ERROR_BAD_SHAPE);
  scale_change("slots S-1", [](ssu_tensor_t& t) { t.shape[0] -= 1; }, SSU_ERROR_BAD_SHAPE);
  scale_change("heads H+1", [](ssu_tensor_t& t) { t.shape[1] = H + 1; }, SSU_ERROR_BAD_SHAPE);
  scale_change("dim P-1", [](ssu_tensor_t& t) { t.shape[2] = P - 1; }, SSU_ERROR_BAD_SHAPE);
  scale_change("dim stride 2", [](ssu_tensor_t& t) { t.strides[2] = 2; }, SSU_ERROR_BAD_STRIDE);
  scale_change("head stride P+1", [](ssu_tensor_t& t) { t.strides[1] = P + 1; },
               SSU_ERROR_BAD_STRIDE);
  scale_change("slot stride H*P-1", [](ssu_tensor_t& t) { t.strides[0] = H * P - 1; },
               SSU_ERROR_BAD_STRIDE);
  scale_change("slot stride 0", [](ssu_tensor_t& t) { t.strides[0] = 0; }, SSU_ERROR_BAD_STRIDE);

  add("i16 intermediate_scales data NULL", kI16Inter,
      [](A& a, Pl&, const Pr&) { a.intermediate_scales.data = nullptr; },
      {SSU_ERROR_NULL_POINTER, SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"intermediate_scales"});
  add("intermediate_scales with an f32 state", kInter,
      [](A& a, Pl&, const Pr&) {
        a.intermediate_scales = index_tensor(SSU_DTYPE_F32, {a.intermediate_states.shape[0], 3, H, P});
      },
      kExcluded, {"intermediate_scales"});
  add("intermediate_scales without intermediate_states", kI16,
      [](A& a, Pl&, const Pr&) { a.intermediate_scales = index_tensor(SSU_DTYPE_F32, {3, 1, H, P}); },
      kExcluded, {"intermediate_scales", "intermediate_states"});
  auto iscale_change = [&](std::string what, std::function<void(ssu_tensor_t&)> f,
                           ssu_status_t code) {
    add("intermediate_scales " + what, kI16Inter,
        [f](A& a, Pl&, const Pr&) { f(a.intermediate_scales); }, {code},
        {"intermediate_scales"});
  };
  iscale_change("dtype bf16", [](ssu_tensor_t& t) { t.dtype = SSU_DTYPE_BF16; }, SSU_ERROR_BAD_DTYPE);
  iscale_change("dtype i16", [](ssu_tensor_t& t) { t.dtype = SSU_DTYPE_I16; }, SSU_ERROR_BAD_DTYPE);
  iscale_change("ndim 3", [](ssu_tensor_t& t) { t.ndim = 3; }, SSU_ERROR_BAD_RANK);
  iscale_change("ndim 5", [](ssu_tensor_t& t) { t.ndim = 5; t.shape[4] = 1; t.strides[4] = 1; },
                SSU_ERROR_BAD_RANK);
  iscale_change("entries I+1", [](ssu_tensor_t& t) { t.shape[0] += 1; }, SSU_ERROR_BAD_SHAPE);
  iscale_change("tokens T-1", [](ssu_tensor_t& t) { t.shape[1] -= 1; }, SSU_ERROR_BAD_SHAPE);
  iscale_change("heads H-1", [](ssu_tensor_t& t) { t.shape[2] = H - 1; }, SSU_ERROR_BAD_SHAPE);
  iscale_change("dim 2P", [](ssu_tensor_t& t) { t.shape[3] = 2 * P; }, SSU_ERROR_BAD_SHAPE);
  iscale_change("dim stride 2", [](ssu_tensor_t& t) { t.strides[3] = 2; }, SSU_ERROR_BAD_STRIDE);
  iscale_change("head stride P+3", [](ssu_tensor_t& t) { t.strides[2] = P + 3; },
                SSU_ERROR_BAD_STRIDE);

  // 8-bit states (i8, f8e4m3): block-scaled like i16 (same scale rules), no
  // stochastic rounding for i8, never an input dtype.
  for (ssu_dtype_t st : {SSU_DTYPE_I8, SSU_DTYPE_F8E4M3}) {
    const std::string nm = ssu_dtype_name(st);
    add(nm + " state_scale data NULL", kI16,
        [st](A&, Pl& p, const Pr&) {
          p.state.dtype = st;
          p.state_scale.data = nullptr;
        },
        kMissing, {"state_scale", nm.c_str()});
    add(nm + " intermediate_scales data NULL", kI16Inter,
        [st](A& a, Pl& p, const Pr&) {
          p.state.dtype = st;
          a.intermediate_states.dtype = st;
          a.intermediate_scales.data = nullptr;
        },
        {SSU_ERROR_NULL_POINTER, SSU_ERROR_INCOMPATIBLE_OPTIONS}, {"intermediate_scales"});
    add(nm + " intermediate_states with an i16 pool", kI16Inter,
        [st](A& a, Pl&, const Pr&) { a.intermediate_states.dtype = st; },
        {SSU_ERROR_DTYPE_MISMATCH}, {"intermediate_states"});
    add("x, z, out dtype " + nm, kSingle,
        [st](A& a, Pl&, const Pr&) { a.x.dtype = a.z.dtype = a.out.dtype = st; },
        {SSU_ERROR_BAD_DTYPE}, {"x"});
    add("B, C dtype " + nm, kSingle, [st](A& a, Pl&, const Pr&) { a.B.dtype = a.C.dtype = st; },
        {SSU_ERROR_DTYPE_MISMATCH, SSU_ERROR_BAD_DTYPE}, {"B"});
    add("A dtype " + nm, kSingle, [st](A& a, Pl&, const Pr&) { a.A.dtype = st; },
        {SSU_ERROR_BAD_DTYPE}, {"A"});
    add("dt dtype " + nm, kSingle, [st](A& a, Pl&, const Pr&) { a.dt.dtype = st; },
        {SSU_ERROR_BAD_DTYPE}, {"dt"});
  }
  add("rounding_seed with an i8 state", kI16,
      [](A& a, Pl& p, const Pr&) {
        p.state.dtype = SSU_DTYPE_I8;
        a.rounding_seed = &seed_value;
      },
      kExcluded, {"rounding_seed", "i8"});
  add("rounding_seed with an f32 state", kSingle,
      [](A& a, Pl&, const Pr&) { a.rounding_seed = &seed_value; }, kExcluded, {"rounding_seed"});
  add("rounding_seed with an i16 state", kI16,
      [](A& a, Pl&, const Pr&) { a.rounding_seed = &seed_value; }, kExcluded, {"rounding_seed"});
  add("rounding_seed with an f32 intermediate buffer", kInter,
      [](A& a, Pl&, const Pr&) {
        a.rounding_seed = &seed_value;
        a.rounding_rounds = 10;
      },
      kExcluded, {"rounding_seed"});
  for (uint32_t bad_rounds : {33u, 64u, 0xffffffffu})
    add("rounding_rounds " + std::to_string(bad_rounds), kSR,
        [bad_rounds](A& a, Pl&, const Pr&) { a.rounding_rounds = bad_rounds; },
        {SSU_ERROR_INVALID_ARGUMENT}, {"rounding_rounds"});
  add("rounding_rounds without a seed", kMulti,
      [](A& a, Pl&, const Pr&) { a.rounding_rounds = 10; }, kExcluded,
      {"rounding_rounds", "rounding_seed"});
  add("rounding_rounds 1 without a seed (SR base)", kSR,
      [](A& a, Pl&, const Pr&) {
        a.rounding_seed = nullptr;
        a.rounding_rounds = 1;
      },
      kExcluded, {"rounding_rounds", "rounding_seed"});
  add("reserved1", kSingle, [](A& a, Pl&, const Pr&) { a.reserved1 = 1; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"reserved1"});
  add("reserved1 (SR base)", kSR, [](A& a, Pl&, const Pr&) { a.reserved1 = 0x80000000u; },
      {SSU_ERROR_INVALID_ARGUMENT}, {"reserved1"});

  // --- flags and struct sizes ----------------------------------------------------
  add("unknown flag 0x4", kSingle, [](A& a, Pl&, const Pr&) { a.flags |= 0x4u; },
      {SSU_ERROR_UNKNOWN_FLAG}, {"flags"});
  add("unknown flag 0x80000000", kMulti, [](A& a, Pl&, const Pr&) { a.flags |= 0x80000000u; },
      {SSU_ERROR_UNKNOWN_FLAG}, {"flags"});
  add("args struct_size 0", kSingle, [](A& a, Pl&, const Pr&) { a.struct_size = 0; },
      {SSU_ERROR_STRUCT_SIZE}, {"args", "struct_size"});
  add("args struct_size 8", kSingle, [](A& a, Pl&, const Pr&) { a.struct_size = 8; },
      {SSU_ERROR_STRUCT_SIZE}, {"args", "struct_size"});
  add("pool struct_size 0", kSingle, [](A&, Pl& p, const Pr&) { p.struct_size = 0; },
      {SSU_ERROR_STRUCT_SIZE}, {"pool", "struct_size"});
  add("pool struct_size 4", kSingle, [](A&, Pl& p, const Pr&) { p.struct_size = 4; },
      {SSU_ERROR_STRUCT_SIZE}, {"pool", "struct_size"});
  // Found by tests/fuzz: sizes between the 0.1 and 0.2 layouts that end
  // inside a field (here half of rounding_seed, half of angle_state's shape)
  // used to be read as torn values.
  add("args struct_size inside rounding_seed", kSR,
      [](A& a, Pl&, const Pr&) {
        a.struct_size = uint32_t(offsetof(ssu_update_args_t, rounding_seed) + 4);
      },
      {SSU_ERROR_STRUCT_SIZE}, {"args", "struct_size"});
  add("pool struct_size inside angle_state", kSingle,
      [](A&, Pl& p, const Pr&) {
        p.struct_size = uint32_t(offsetof(ssu_state_pool_t, angle_state) + 20);
      },
      {SSU_ERROR_STRUCT_SIZE}, {"pool", "struct_size"});
  return v;
}

}  // namespace

TEST_CASE("validation: every bad input is refused at plan and at execute, nothing written") {
  CpuContext c;
  HostMemory mem;
  const auto table = bad_inputs();
  int checked = 0;
  for (const BadInput& bad : table) {
    CAPTURE(bad.what);
    UpdateProblem p(base_case(bad.base), mem);
    ssu_state_pool_t pool = *p.pool();
    ssu_update_args_t a = p.args();
    a.pool = a.pool ? &pool : nullptr;
    bad.mutate(a, pool, p);

    // Plan creation.
    ssu_plan_t plan = kSentinelPlan;
    const ssu_status_t st = ssu_plan_create_update(c.ctx, &a, nullptr, &plan);
    const std::string msg = ssu_last_error_message();
    CHECK_MESSAGE(one_of(st, bad.codes), "plan: got " << st << " (" << std::string(ssu_status_string(st))
                                                      << "), expected " << codes_text(bad.codes)
                                                      << "; message: " << msg);
    CHECK(plan == kSentinelPlan);
    CHECK_MESSAGE(names_any(msg, bad.arg_names),
                  "plan: the message does not name the argument: '" << msg << "'");
    if (std::getenv("SSU_TEST_VERBOSE"))
      std::printf("%-50s -> %d %s\n", bad.what.c_str(), st, msg.c_str());

    // Execute with a plan made from the valid arguments.
    const ssu_update_args_t good = p.args();
    ssu_plan_t gplan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_update(c.ctx, &good, nullptr, &gplan) == SSU_SUCCESS,
                    std::string(ssu_last_error_message()));
    const ssu_status_t est = ssu_plan_execute_update(gplan, &a, nullptr);
    const std::string emsg = ssu_last_error_message();
    CHECK_MESSAGE((one_of(est, bad.codes) || est == SSU_ERROR_PLAN_MISMATCH),
                  "execute: got " << est << " (" << std::string(ssu_status_string(est)) << "), expected "
                                  << codes_text(bad.codes) << " or PLAN_MISMATCH; message: "
                                  << emsg);
    CHECK(!emsg.empty());
    ssu_plan_destroy(gplan);
    const CheckResult r = p.check_unchanged();
    CHECK_MESSAGE(r.ok, r.message);
    ++checked;
  }
  MESSAGE(checked << " bad-input cases checked");
  CHECK(checked == int(table.size()));
}

// ---------------------------------------------------------------------------
TEST_CASE("validation: NULL and foreign handles, NULL args and out-parameters") {
  CpuContext c;
  HostMemory mem;
  UpdateProblem p(base_case(kSingle), mem);
  const ssu_update_args_t a = p.args();

  ssu_plan_t plan = kSentinelPlan;
  CHECK(ssu_plan_create_update(c.ctx, nullptr, nullptr, &plan) == SSU_ERROR_NULL_POINTER);
  CHECK(names(ssu_last_error_message(), "args"));
  CHECK(plan == kSentinelPlan);
  CHECK(ssu_plan_create_update(c.ctx, &a, nullptr, nullptr) == SSU_ERROR_NULL_POINTER);
  CHECK((names(ssu_last_error_message(), "out_plan") || names(ssu_last_error_message(), "plan")));
  CHECK(ssu_plan_create_update(nullptr, &a, nullptr, &plan) == SSU_ERROR_BAD_HANDLE);
  CHECK(names(ssu_last_error_message(), "context"));
  CHECK(plan == kSentinelPlan);

  CHECK(ssu_plan_execute_update(nullptr, &a, nullptr) == SSU_ERROR_BAD_HANDLE);
  CHECK(names(ssu_last_error_message(), "plan"));

  plan = nullptr;
  REQUIRE(ssu_plan_create_update(c.ctx, &a, nullptr, &plan) == SSU_SUCCESS);
  CHECK(ssu_plan_execute_update(plan, nullptr, nullptr) == SSU_ERROR_NULL_POINTER);
  CHECK(names(ssu_last_error_message(), "args"));

  // A handle of the other kind is recognized, not trusted.
  CHECK(ssu_plan_execute_update(reinterpret_cast<ssu_plan_t>(c.ctx), &a, nullptr) ==
        SSU_ERROR_BAD_HANDLE);
  ssu_plan_t other = kSentinelPlan;
  CHECK(ssu_plan_create_update(reinterpret_cast<ssu_context_t>(plan), &a, nullptr, &other) ==
        SSU_ERROR_BAD_HANDLE);
  CHECK(other == kSentinelPlan);
  ssu_plan_info_t info = SSU_PLAN_INFO_INIT;
  info.backend = 42;
  CHECK(ssu_plan_get_info(reinterpret_cast<ssu_plan_t>(c.ctx), &info) == SSU_ERROR_BAD_HANDLE);
  CHECK(info.backend == 42);
  ssu_backend_t b = 42;
  CHECK(ssu_context_get_backend(reinterpret_cast<ssu_context_t>(plan), &b) ==
        SSU_ERROR_BAD_HANDLE);
  CHECK(b == 42);

  const CheckResult r = p.check_unchanged();
  CHECK_MESSAGE(r.ok, r.message);

  // The plan still works after all that.
  REQUIRE(ssu_plan_execute_update(plan, &a, nullptr) == SSU_SUCCESS);
  const CheckResult r2 = p.check();
  CHECK_MESSAGE(r2.ok, r2.message);
  ssu_plan_destroy(plan);
}

// ---------------------------------------------------------------------------
// Errors that depend on tensor data: plan creation (which reads no data)
// succeeds, execute refuses before writing anything.
namespace {
struct BadData {
  std::string what;
  Base base;
  std::function<void(UpdateProblem&, ssu_update_args_t&)> apply;
  std::vector<ssu_status_t> codes;
  std::vector<std::string> arg_names;
};
}  // namespace

TEST_CASE("validation: out-of-range data is refused at execute, nothing written") {
  CpuContext c;
  HostMemory mem;
  std::vector<BadData> table;
  auto add = [&](std::string what, Base base,
                 std::function<void(UpdateProblem&, ssu_update_args_t&)> f,
                 std::vector<ssu_status_t> codes, std::vector<std::string> nm) {
    table.push_back({std::move(what), base, std::move(f), std::move(codes), std::move(nm)});
  };
  const int64_t Bt = 3, T = 4;
  // The bad entry is in the last sequence: earlier sequences must not have
  // been processed either.
  add("src == S", kSingle, [](UpdateProblem& p, ssu_update_args_t&) {
        p.poke_index("src_index", 2, p.slots());
      }, {SSU_ERROR_INDEX_OUT_OF_RANGE}, {"src_index"});
  add("src >> S", kSingle, [](UpdateProblem& p, ssu_update_args_t&) {
        p.poke_index("src_index", 2, p.slots() + 100000);
      }, {SSU_ERROR_INDEX_OUT_OF_RANGE}, {"src_index"});
  add("dst == S", kSingle, [](UpdateProblem& p, ssu_update_args_t&) {
        p.poke_index("dst_index", 2, p.slots());
      }, {SSU_ERROR_INDEX_OUT_OF_RANGE}, {"dst_index"});
  add("2-D src column selected by num_accepted == S", kMulti,
      [=](UpdateProblem& p, ssu_update_args_t&) {
        p.poke_index("num_accepted_tokens", Bt - 1, 2);  // column 1
        p.poke_index("src_index", (Bt - 1) * T + 1, p.slots());
      }, {SSU_ERROR_INDEX_OUT_OF_RANGE}, {"src_index"});
  add("2-D dst entry == S", kMulti, [=](UpdateProblem& p, ssu_update_args_t&) {
        p.poke_index("num_accepted_tokens", Bt - 1, 1);  // keep the sequence live
        p.poke_index("src_index", (Bt - 1) * T, 0);
        p.poke_index("dst_index", (Bt - 1) * T + T - 1, p.slots() + 3);
      }, {SSU_ERROR_INDEX_OUT_OF_RANGE}, {"dst_index"});
  add("num_accepted > T", kMulti, [=](UpdateProblem& p, ssu_update_args_t&) {
        p.poke_index("num_accepted_tokens", Bt - 1, T + 1);
      }, {SSU_ERROR_INDEX_OUT_OF_RANGE}, {"num_accepted_tokens"});
  add("intermediate_index == I", kInter, [=](UpdateProblem& p, ssu_update_args_t& a) {
        p.poke_index("intermediate_index", Bt - 1, a.intermediate_states.shape[0]);
      }, {SSU_ERROR_INDEX_OUT_OF_RANGE}, {"intermediate_index"});
  add("varlen length > max_tokens", kVarlen, [](UpdateProblem&, ssu_update_args_t& a) {
        a.max_tokens -= 1;  // the table makes one sequence exactly max_tokens long
      }, {SSU_ERROR_SEQLEN_OUT_OF_RANGE}, {"cu_seqlens", "max_tokens"});
  add("varlen cu_seqlens beyond the packed tokens", kVarlen,
      [](UpdateProblem&, ssu_update_args_t& a) {
        for (ssu_tensor_t* t : {&a.x, &a.dt, &a.B, &a.C, &a.z, &a.out}) t->shape[0] -= 1;
      }, {SSU_ERROR_INDEX_OUT_OF_RANGE, SSU_ERROR_SEQLEN_OUT_OF_RANGE,
          SSU_ERROR_INVALID_ARGUMENT, SSU_ERROR_BAD_SHAPE}, {"cu_seqlens"});
  add("varlen cu_seqlens[0] < 0", kVarlen, [](UpdateProblem& p, ssu_update_args_t&) {
        p.poke_index("cu_seqlens", 0, -1);
      }, {SSU_ERROR_INDEX_OUT_OF_RANGE, SSU_ERROR_SEQLEN_OUT_OF_RANGE,
          SSU_ERROR_INVALID_ARGUMENT}, {"cu_seqlens"});

  for (const BadData& bad : table) {
    CAPTURE(bad.what);
    UpdateProblem p(base_case(bad.base), mem);
    ssu_update_args_t a = p.args();
    bad.apply(p, a);
    ssu_plan_t plan = nullptr;
    const ssu_status_t pst = ssu_plan_create_update(c.ctx, &a, nullptr, &plan);
    REQUIRE_MESSAGE(pst == SSU_SUCCESS, "plan creation must not read data: "
                                            << pst << " " << std::string(ssu_last_error_message()));
    const ssu_status_t st = ssu_plan_execute_update(plan, &a, nullptr);
    const std::string msg = ssu_last_error_message();
    CHECK_MESSAGE(one_of(st, bad.codes), "got " << st << " (" << std::string(ssu_status_string(st))
                                                << "), expected " << codes_text(bad.codes)
                                                << "; message: " << msg);
    CHECK_MESSAGE(names_any(msg, bad.arg_names),
                  "the message does not name the argument: '" << msg << "'");
    if (std::getenv("SSU_TEST_VERBOSE"))
      std::printf("%-50s -> %d %s\n", bad.what.c_str(), st, msg.c_str());
    ssu_plan_destroy(plan);
    const CheckResult r = p.check_unchanged();
    CHECK_MESSAGE(r.ok, r.message);
  }
}

// ---------------------------------------------------------------------------
TEST_CASE("validation: execute refuses arguments that do not fit the plan") {
  CpuContext c;
  HostMemory mem;
  struct Change {
    const char* what;
    Base base;
    std::function<void(UpdateCase&)> change;
  };
  const ssu_dtype_t F32 = SSU_DTYPE_F32, BF16 = SSU_DTYPE_BF16, F16 = SSU_DTYPE_F16;
  const std::vector<Change> changes = {
      {"heads", kSingle, [](UpdateCase& u) { u.H = 8; }},
      {"dim", kSingle, [](UpdateCase& u) { u.P = 80; }},
      {"dstate", kSingle, [](UpdateCase& u) { u.N = 32; }},
      {"groups", kSingle, [](UpdateCase& u) { u.G = 1; }},
      {"tokens", kMulti, [](UpdateCase& u) { u.T = 2; }},
      {"varlen max_tokens", kVarlen, [](UpdateCase& u) { u.T = 8; }},
      {"state dtype", kSingle, [=](UpdateCase& u) { u.state = BF16; }},
      {"input dtype", kSingle, [=](UpdateCase& u) { u.input = F32; }},
      {"dt dtype", kSingle, [=](UpdateCase& u) { u.dt = F16; }},
      {"A dtype", kSingle, [=](UpdateCase& u) { u.A = BF16; }},
      {"D dtype", kSingle, [=](UpdateCase& u) { u.D = F16; }},
      {"dt_bias dtype", kSingle, [=](UpdateCase& u) { u.dt_bias = BF16; }},
      {"index dtype", kSingle, [](UpdateCase& u) { u.index = SSU_DTYPE_I64; }},
      {"D absent", kSingle, [](UpdateCase& u) { u.has_D = false; }},
      {"dt_bias absent", kSingle, [](UpdateCase& u) { u.has_dt_bias = false; }},
      {"z absent", kSingle, [](UpdateCase& u) { u.has_z = false; }},
      {"softplus flag", kSingle, [](UpdateCase& u) { u.softplus = false; }},
      {"disable flag", kSingle, [](UpdateCase& u) { u.disable_update = true; }},
      {"dt per channel", kSingle, [](UpdateCase& u) { u.dt_per_channel = true; }},
      {"A per channel", kSingle, [](UpdateCase& u) { u.A_per_channel = true; }},
      {"D per channel", kSingle, [](UpdateCase& u) { u.D_per_channel = true; }},
      {"dt_bias per channel", kSingle, [](UpdateCase& u) { u.dt_bias_per_channel = true; }},
      {"src absent", kSingle, [](UpdateCase& u) { u.has_src = false; }},
      {"dst absent", kSingle, [](UpdateCase& u) { u.has_dst = false; }},
      {"single -> multi", kSingle, [](UpdateCase& u) { u.multi(1); }},
      {"multi -> varlen", kMulti, [](UpdateCase& u) { u.form = Form::Varlen; }},
      {"2-D src -> 1-D", kMulti, [](UpdateCase& u) { u.src_2d = false; u.num_accepted = false; }},
      {"num_accepted absent", kMulti, [](UpdateCase& u) { u.num_accepted = false; }},
      {"per-token dst -> final", kMulti, [](UpdateCase& u) { u.store = Store::Final; }},
      {"intermediate absent", kInter, [](UpdateCase& u) { u.store = Store::Final; u.inter_index = false; }},
      {"intermediate_index absent", kInter, [](UpdateCase& u) { u.inter_index = false; }},
      {"stochastic rounding on -> off", kSR, [](UpdateCase& u) { u.stochastic = false; }},
      {"stochastic rounding off -> on", kMulti, [](UpdateCase& u) { u.sr(99); }},
      {"rounding rounds 7 -> 3", kSR, [](UpdateCase& u) { u.rounding_rounds = 3; }},
      {"rounding rounds 7 -> default", kSR, [](UpdateCase& u) { u.rounding_rounds = 0; }},
      {"int16 -> f32 state", kI16, [=](UpdateCase& u) { u.state = F32; }},
      {"f32 -> int16 state", kSingle, [](UpdateCase& u) { u.state = SSU_DTYPE_I16; }},
      {"int16 -> bf16 state", kI16Inter, [=](UpdateCase& u) { u.state = BF16; }},
  };
  for (const Change& ch : changes) {
    CAPTURE(std::string(ch.what));
    UpdateProblem planned(base_case(ch.base), mem);
    UpdateCase other_case = base_case(ch.base);
    ch.change(other_case);
    other_case.seed += 1000;
    UpdateProblem other(other_case, mem);
    const ssu_update_args_t pa = planned.args();
    ssu_plan_t plan = nullptr;
    REQUIRE(ssu_plan_create_update(c.ctx, &pa, nullptr, &plan) == SSU_SUCCESS);
    // The other arguments are valid on their own.
    const ssu_update_args_t oa = other.args();
    ssu_plan_t oplan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_update(c.ctx, &oa, nullptr, &oplan) == SSU_SUCCESS,
                    std::string(ssu_last_error_message()));
    ssu_plan_destroy(oplan);
    const ssu_status_t st = ssu_plan_execute_update(plan, &oa, nullptr);
    CHECK_MESSAGE(st == SSU_ERROR_PLAN_MISMATCH,
                  "got " << st << " (" << std::string(ssu_status_string(st)) << "): "
                         << std::string(ssu_last_error_message()));
    CHECK(std::strlen(ssu_last_error_message()) > 0);
    ssu_plan_destroy(plan);
    const CheckResult r1 = other.check_unchanged();
    CHECK_MESSAGE(r1.ok, r1.message);
    const CheckResult r2 = planned.check_unchanged();
    CHECK_MESSAGE(r2.ok, r2.message);
  }
}

TEST_CASE("validation: execute accepts another batch size, slot count and strides") {
  CpuContext c;
  HostMemory mem;
  for (Base base : {kSingle, kMulti, kVarlen, kInter, kMamba1, kI16, kI16Inter, kSR}) {
    CAPTURE(int(base));
    UpdateProblem planned(base_case(base), mem);
    const ssu_update_args_t pa = planned.args();
    ssu_plan_t plan = nullptr;
    REQUIRE(ssu_plan_create_update(c.ctx, &pa, nullptr, &plan) == SSU_SUCCESS);
    int variant = 0;
    for (int64_t batch : {1, 7, 2}) {
      UpdateCase u = base_case(base);
      u.batch = batch;
      u.extra_slots = 2 + 5 * variant;
      u.layout = variant == 0 ? kPadded : variant == 1 ? (kOddPadded | kTransposed) : kDense;
      u.seed = 500 + uint64_t(variant);
      ++variant;
      UpdateProblem p(u, mem);
      const ssu_update_args_t a = p.args();
      const ssu_status_t st = ssu_plan_execute_update(plan, &a, nullptr);
      REQUIRE_MESSAGE(st == SSU_SUCCESS, describe(u) << ": " << std::string(ssu_last_error_message()));
      const CheckResult r = p.check();
      CHECK_MESSAGE(r.ok, r.message);
    }
    ssu_plan_destroy(plan);
  }
}

TEST_CASE("validation: a dstate beyond what the backend supports is refused cleanly") {
  // SPEC.md bounds no N for the update; a backend may still refuse with
  // SSU_ERROR_NOT_SUPPORTED (naming dstate), or run it correctly.
  CpuContext c;
  HostMemory mem;
  UpdateCase u = base_case(kSingle);
  u.N = 512;
  u.H = 2;
  UpdateProblem p(u, mem);
  const ssu_update_args_t a = p.args();
  ssu_plan_t plan = kSentinelPlan;
  const ssu_status_t st = ssu_plan_create_update(c.ctx, &a, nullptr, &plan);
  if (st == SSU_SUCCESS) {
    REQUIRE(ssu_plan_execute_update(plan, &a, nullptr) == SSU_SUCCESS);
    const CheckResult r = p.check();
    CHECK_MESSAGE(r.ok, r.message);
    ssu_plan_destroy(plan);
    return;
  }
  const std::string msg = ssu_last_error_message();
  CHECK_MESSAGE(st == SSU_ERROR_NOT_SUPPORTED, st << ": " << msg);
  CHECK(plan == kSentinelPlan);
  CHECK((names(msg, "dstate") || names(msg, "N") || names(msg, "state")));
  MESSAGE("N=512 is refused: " << msg);
  const CheckResult r = p.check_unchanged();
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("validation: cu_seqlens at the int64 extremes and an empty sequence's num_accepted") {
  // Found by tests/fuzz. An empty varlen sequence (length <= 0) is skipped,
  // whatever its num_accepted entry holds; the CPU backend used to resolve
  // its src column from that entry first and read far outside src_index.
  // cu_seqlens entries at INT64_MIN / INT64_MAX used to overflow the length.
  CpuContext c;
  HostMemory mem;
  UpdateCase u;
  u.tag = "validation_varlen_extremes";
  u.varlen(3).shape(2, 1, 16, 8);
  u.batch = 3;
  u.index = SSU_DTYPE_I64;
  u.src_2d = true;
  u.num_accepted = true;
  u.seed = 91;
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  {
    UpdateProblem p(u, mem);
    p.poke_index("cu_seqlens", 3, kMin);  // the last sequence is empty
    p.poke_index("num_accepted_tokens", 2, int64_t(1) << 40);
    const ssu_update_args_t a = p.args();
    ssu_plan_t plan = nullptr;
    REQUIRE(ssu_plan_create_update(c.ctx, &a, nullptr, &plan) == SSU_SUCCESS);
    const ssu_status_t st = ssu_plan_execute_update(plan, &a, nullptr);
    ssu_plan_destroy(plan);
    REQUIRE_MESSAGE(st == SSU_SUCCESS, std::string(ssu_last_error_message()));
    const CheckResult r = p.check();
    CHECK_MESSAGE(r.ok, r.message);
  }
  for (const auto& entry : {std::make_pair(int64_t(0), kMin),
                            std::make_pair(int64_t(3), std::numeric_limits<int64_t>::max())}) {
    CAPTURE(entry.first);
    UpdateProblem p(u, mem);
    p.poke_index("cu_seqlens", entry.first, entry.second);  // a length beyond any T
    const ssu_update_args_t a = p.args();
    ssu_plan_t plan = nullptr;
    REQUIRE(ssu_plan_create_update(c.ctx, &a, nullptr, &plan) == SSU_SUCCESS);
    const ssu_status_t st = ssu_plan_execute_update(plan, &a, nullptr);
    const std::string msg = ssu_last_error_message();
    ssu_plan_destroy(plan);
    CHECK_MESSAGE(st == SSU_ERROR_SEQLEN_OUT_OF_RANGE, st << ": " << msg);
    CHECK(names(msg, "cu_seqlens"));
    const CheckResult r = p.check_unchanged();
    CHECK_MESSAGE(r.ok, r.message);
  }
}
