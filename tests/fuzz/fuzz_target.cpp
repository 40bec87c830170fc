// The fuzz target (see fuzz_target.h): bytes -> one call description -> the
// library on the CPU backend -> the contract checked, abort() on a breach.
//
// Problems are built by the suites' harnesses (tests/harness.h,
// tests/mamba3_harness.h, tests/replay_harness.h): they lay out random
// model-like inputs in poisoned, guarded buffers with dense, padded, odd,
// broadcast or transposed strides, and check every byte of every buffer
// against the float64 references. The bytes choose the case (operation,
// shapes, dtypes, form, layout, optional tensors, flags, padding) and then,
// for most inputs, a fault on top of it. Each fault states what the library
// must do with it:
//  - refuse: the arguments break a rule of ssu.h (a NULL required pointer, a
//    rank, shape, dtype, stride, struct_size, flag or reserved field out of
//    its domain): the call must fail, nothing written;
//  - either: the library may refuse it, but if it accepts it the result must
//    still be the reference's (overlapping output strides, an index poked
//    out of range, where the float64 reference itself says whether the
//    indices are valid, plan reuse across plan-fixed properties);
//  - must succeed: the change keeps the call valid (a padding index, a larger
//    struct_size, a stride of an axis of extent 1, the CPU algorithm pinned);
//  - plan only: a stride no real buffer fits (2^32 - 1, 2^62, ...), so only
//    plan creation runs, which reads no tensor data.
#include "fuzz_target.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.h"
#include "mamba3_harness.h"
#include "replay_harness.h"
#include "ssu.h"

// The sanitizers' hook to run a function before a report aborts: weak, so
// that a build without a sanitizer runtime links (and has no hook).
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace ssufuzz {
namespace {

using namespace ssutest;

enum Operation { kUpdate, kStep, kRotary, kReplay, kReplayFlush };

Stats g_stats;
bool g_verbose = false;
const uint8_t* g_data = nullptr;
size_t g_size = 0;

// ---------------------------------------------------------------------------
// Bytes: the input as a stream of choices. Past its end every read is 0, so
// short inputs decode to the simplest valid call.
// ---------------------------------------------------------------------------
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(u8()) << (8 * i);
    return v;
  }
  uint64_t u64() { return uint64_t(u32()) | (uint64_t(u32()) << 32); }
  // Uniform enough in [0, n) for the small n used here.
  int64_t below(int64_t n) {
    if (n <= 1) return 0;
    return n <= 256 ? int64_t(u8()) % n : int64_t(u32() % uint64_t(n));
  }
  bool percent(int p) { return int(u8() % 100) < p; }
  bool flip() { return (u8() & 1) != 0; }
  template <typename T>
  T pick(std::initializer_list<T> list) {
    return *(list.begin() + below(int64_t(list.size())));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

std::string hex_input() {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < g_size; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", g_data[i]);
    s += buf;
  }
  return s;
}

// ---------------------------------------------------------------------------
// Trial: what one input does and what the library must do with it.
// ---------------------------------------------------------------------------
struct Trial {
  Operation op = kUpdate;
  ssu_dtype_t state = SSU_DTYPE_INVALID;  // the update's and replay's, for the summary
  std::string description;
  bool must_fail = false;     // a documented rule is broken
  bool data_fault = false;    // ... in tensor data: refused at execute, not at plan
  bool must_succeed = true;   // nothing the library may refuse
  bool no_execute = false;    // plan creation only
  bool at_execute = false;    // the plan is made from the good arguments
  bool reference_decides = false;  // an accepted call's validity is the reference's
  // Faults of the call itself rather than of its arguments.
  bool null_context = false, null_out_plan = false, null_args = false;
  bool null_plan = false, foreign_plan = false;
  bool options_given = false;
  ssu_plan_options_t options = SSU_PLAN_OPTIONS_INIT;
  uint32_t info_size = 0;  // != 0: ssu_plan_get_info with this struct_size
  // Sizes the library does not support, which a harness may not be able to
  // build a reference for either; `built` once the problem exists.
  bool unsupported_sizes = false, built = false;

  void note(const std::string& s) { description += "\n    " + s; }
  void refuse(const std::string& s) {
    must_fail = true;
    must_succeed = false;
    note("[must be refused] " + s);
  }
  void either(const std::string& s) {
    must_succeed = false;
    note("[may be refused] " + s);
  }
  void keep(const std::string& s) { note("[must succeed] " + s); }
  void plan_only(const std::string& s) {
    no_execute = true;
    must_succeed = false;
    note("[plan only] " + s);
  }
};

// The trial running now, for a sanitizer report's reproducer.
const Trial* g_current = nullptr;

void print_current() {
  if (!g_current) return;
  std::fprintf(stderr,
               "\n=== ssu_fuzz: the input that was running ===\noperation: %s\ncall: %s\n"
               "input (%zu bytes, replay with `ssu_fuzz --hex <bytes>`):\n%s\n",
               operation_name(g_current->op), g_current->description.c_str(), g_size,
               hex_input().c_str());
}

[[noreturn]] void violation(const Trial& tr, const std::string& what) {
  std::fprintf(stderr,
               "\n=== ssu_fuzz: contract violation ===\n"
               "operation: %s\n"
               "call: %s\n"
               "violation: %s\n"
               "input (%zu bytes, replay with `ssu_fuzz --hex <bytes>`):\n%s\n",
               operation_name(tr.op), tr.description.c_str(), what.c_str(), g_size,
               hex_input().c_str());
  std::fflush(stderr);
  std::abort();
}

std::string status_text(ssu_status_t st) {
  return std::to_string(st) + " (" + ssu_status_string(st) + ")";
}

const ssu_plan_t kSentinelPlan = reinterpret_cast<ssu_plan_t>(uintptr_t(0x5d5d5d5d));

// ---------------------------------------------------------------------------
// Contexts and plans of every operation, for handle faults, made once.
// ---------------------------------------------------------------------------
struct Shared {
  ssu_context_t two_threads = nullptr, one_thread = nullptr;
  ssu_plan_t plans[kOperations] = {};

  Shared() {
    ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
    o.backend = SSU_BACKEND_CPU;
    o.num_threads = 2;
    if (ssu_context_create(&o, &two_threads) != SSU_SUCCESS) fatal("nothing (ssu_context_create, 2 threads)");
    o.num_threads = 1;
    if (ssu_context_create(&o, &one_thread) != SSU_SUCCESS) fatal("nothing (ssu_context_create, 1 thread)");

    UpdateCase uc;
    uc.shape(1, 1, 4, 4).batch = 1;
    plans[kUpdate] = plan_of<UpdateProblem>(uc, ssu_plan_create_update, "the update");
    m3::StepCase sc;
    sc.H = 1;
    sc.P = 16;
    sc.batch = 1;
    plans[kStep] = plan_of<m3::StepProblem>(sc, ssu_plan_create_mamba3_step, "the Mamba-3 step");
    m3::RotaryCase rc;
    rc.H = 1;
    rc.N = 4;
    rc.Sa = 2;
    rc.batch = 1;
    plans[kRotary] = plan_of<m3::RotaryProblem>(rc, ssu_plan_create_mamba3_rotary, "the rotary step");
    HostMemory mem;
    ReplayCase pc;
    pc.shape(1, 1, 4, 4).batch = 1;
    ReplayProblem pp(pc, mem);
    pp.prepare_step();
    const ssu_replay_args_t pa = pp.args();
    if (ssu_plan_create_replay(two_threads, &pa, nullptr, &plans[kReplay]) != SSU_SUCCESS)
      fatal("replay");
    plans[kReplayFlush] = plans[kReplay];
  }
  ~Shared() {
    for (int i = 0; i < kReplayFlush; ++i) ssu_plan_destroy(plans[i]);
    ssu_context_destroy(two_threads);
    ssu_context_destroy(one_thread);
  }
  // A plan of a small valid problem of `c`.
  template <typename Problem, typename Case, typename Args>
  ssu_plan_t plan_of(const Case& c,
                     ssu_status_t (*create)(ssu_context_t, const Args*, const ssu_plan_options_t*,
                                            ssu_plan_t*),
                     const char* what) {
    HostMemory mem;
    Problem p(c, mem);
    const Args a = p.args();
    ssu_plan_t plan = nullptr;
    if (create(two_threads, &a, nullptr, &plan) != SSU_SUCCESS) fatal(what);
    return plan;
  }
  [[noreturn]] static void fatal(const char* what) {
    std::fprintf(stderr, "ssu_fuzz: setup: a plan of %s failed: %s\n", what, ssu_last_error_message());
    std::abort();
  }
  // A plan of an operation whose execute entry point is not `op`'s.
  ssu_plan_t foreign(Operation op, Bytes& in) const {
    const int other = int(in.below(kOperations - 1));  // replay and its flush share a plan
    if (other != op && !(op == kReplayFlush && other == kReplay)) return plans[other];
    return plans[op == kUpdate ? kStep : kUpdate];
  }
};

Shared& shared() {
  static Shared s;
  return s;
}

// ---------------------------------------------------------------------------
// Running a trial against its expectations.
// ---------------------------------------------------------------------------
template <typename Args>
struct Api {
  ssu_status_t (*create)(ssu_context_t, const Args*, const ssu_plan_options_t*, ssu_plan_t*);
  ssu_status_t (*execute)(ssu_plan_t, const Args*, ssu_stream_t);
};

// `check` judges an accepted call (it may throw std::logic_error when the
// float64 reference finds the call invalid), `unchanged` a refused one.
struct Judges {
  std::function<CheckResult()> check;
  std::function<CheckResult()> unchanged;
};

void judge_refusal(const Trial& tr, const Judges& j, const char* stage, ssu_status_t st,
                   const std::string& msg) {
  if (tr.must_succeed)
    violation(tr, std::string(stage) + " refused a valid call: " + status_text(st) + ": " + msg);
  if (msg.empty()) violation(tr, std::string(stage) + " failed with " + status_text(st) +
                                 " but ssu_last_error_message() is empty");
  if (SSU_STATUS_FAMILY(st) != 1 && SSU_STATUS_FAMILY(st) != 2)
    violation(tr, std::string(stage) + " failed with " + status_text(st) +
                  ", not an argument or not-supported status: " + msg);
  const CheckResult r = j.unchanged();
  if (!r.ok) violation(tr, std::string(stage) + " failed (" + status_text(st) + ": " + msg +
                           ") but wrote memory:\n" + r.message);
  ++g_stats.refused[st];
}

void judge_success(const Trial& tr, const Judges& j) {
  if (tr.must_fail) violation(tr, "the call succeeded although it breaks a documented rule");
  const std::string msg = ssu_last_error_message();
  if (!msg.empty()) violation(tr, "the call succeeded but the error message is '" + msg + "'");
  CheckResult r;
  try {
    r = j.check();
  } catch (const std::logic_error& e) {
    if (!tr.reference_decides) throw;
    violation(tr, std::string("the call succeeded but the float64 reference finds it invalid: ") +
                      e.what());
  }
  if (!r.ok) violation(tr, "the results differ from the float64 reference:\n" + r.message);
  ++g_stats.succeeded;
}

template <typename Args>
void run_trial(const Trial& tr, Bytes& in, ssu_context_t ctx, Api<Args> api, const Args& good,
               const Args& bad, const Judges& j) {
  if (g_verbose) std::printf("%s: %s\n", operation_name(tr.op), tr.description.c_str());
  const ssu_plan_options_t* options = tr.options_given ? &tr.options : nullptr;
  // A fault that is only planned (no execute) goes to plan creation.
  const bool plan_only = tr.no_execute && !tr.must_fail;
  const bool fault_at_plan = (!tr.at_execute || plan_only) && !tr.data_fault;
  ssu_plan_t plan = kSentinelPlan;
  ssu_status_t st = api.create(tr.null_context ? nullptr : ctx,
                               tr.null_args && fault_at_plan ? nullptr : fault_at_plan ? &bad : &good,
                               options, tr.null_out_plan ? nullptr : &plan);
  std::string msg = st == SSU_SUCCESS ? "" : ssu_last_error_message();
  const bool plan_fault = fault_at_plan && (tr.must_fail || !tr.must_succeed) &&
                          !tr.null_plan && !tr.foreign_plan;
  if (st != SSU_SUCCESS) {
    if (plan != kSentinelPlan) violation(tr, "plan creation failed but wrote *out_plan");
    if (!plan_fault)
      violation(tr, "plan creation refused arguments that only execute may refuse: " +
                        status_text(st) + ": " + msg);
    judge_refusal(tr, j, "plan creation", st, msg);
    return;
  }
  if (plan == kSentinelPlan || plan == nullptr) violation(tr, "plan creation succeeded without a plan");
  struct PlanGuard {
    ssu_plan_t p;
    ~PlanGuard() { ssu_plan_destroy(p); }
  } guard{plan};
  if (fault_at_plan && tr.must_fail && !tr.null_plan && !tr.foreign_plan)
    violation(tr, "plan creation accepted arguments that break a documented rule");
  if (tr.info_size) {
    ssu_plan_info_t info;
    std::memset(&info, 0x7b, sizeof info);
    info.struct_size = tr.info_size;
    const ssu_plan_info_t before = info;
    const ssu_status_t ist = ssu_plan_get_info(plan, &info);
    if (tr.info_size < sizeof(ssu_plan_info_t)) {
      if (ist != SSU_ERROR_STRUCT_SIZE || std::memcmp(&info, &before, sizeof info) != 0)
        violation(tr, "ssu_plan_get_info with struct_size " + std::to_string(tr.info_size) +
                          " gave " + status_text(ist) + " or wrote the struct");
    } else if (ist != SSU_SUCCESS || info.backend != SSU_BACKEND_CPU ||
               info.algorithm != SSU_ALGORITHM_CPU_ROWS || !info.algorithm_name) {
      violation(tr, "ssu_plan_get_info failed or does not describe a CPU plan: " + status_text(ist));
    }
  }
  // A call that must be refused is executed even with strides no buffer
  // fits: the library must refuse it before it touches memory.
  if (plan_only) {
    ++g_stats.plan_only;
    return;
  }
  ssu_plan_t exec_plan = tr.null_plan ? nullptr : tr.foreign_plan ? shared().foreign(tr.op, in) : plan;
  st = api.execute(exec_plan, tr.null_args ? nullptr : &bad, nullptr);
  msg = st == SSU_SUCCESS ? "" : ssu_last_error_message();
  if (st != SSU_SUCCESS) {
    judge_refusal(tr, j, "execute", st, msg);
    return;
  }
  if (tr.null_plan || tr.foreign_plan || tr.null_args)
    violation(tr, "execute succeeded with a bad plan handle or NULL arguments");
  judge_success(tr, j);
}

// Plan reuse: executes a plan made from `good` with the arguments of another
// problem built from `other`, which judges the call.
template <typename Problem, typename Args, typename Case>
void run_other_problem(Trial& tr, Bytes& in, ssu_context_t ctx, Api<Args> api, const Args& good,
                       const Case& other, Memory& mem) {
  Problem p(other, mem);
  const Args a = p.args();
  const Judges j{[&] { return p.check(); }, [&] { return p.check_unchanged(); }};
  tr.at_execute = true;
  run_trial(tr, in, ctx, api, good, a, j);
}

// ---------------------------------------------------------------------------
// State formats.
// ---------------------------------------------------------------------------
ssu_dtype_t float_dtype(Bytes& in) {
  return in.pick<ssu_dtype_t>({SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16});
}

// Block-scaled states (i16, i8, f8e4m3): codes plus an f32 decode-scale pool
// (S, H, P), and, with an intermediate buffer, intermediate_scales. ssu.h
// requires the scales exactly for these and refuses them otherwise.
bool block_scaled(ssu_dtype_t state) {
  return state == SSU_DTYPE_I16 || state == SSU_DTYPE_I8 || state == SSU_DTYPE_F8E4M3;
}

// States whose stores ssu.h lets round stochastically (a rounding seed):
// f16, bf16, f8e4m3. A seed with f32, i16 or i8 is refused.
bool rounds_stochastically(ssu_dtype_t state) {
  return state == SSU_DTYPE_F16 || state == SSU_DTYPE_BF16 || state == SSU_DTYPE_F8E4M3;
}

// A state dtype of the update and replay: every format of ssu.h, the
// block-scaled ones with their scale pools.
ssu_dtype_t state_dtype(Bytes& in) {
  return in.pick<ssu_dtype_t>({SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16, SSU_DTYPE_I16,
                               SSU_DTYPE_I8, SSU_DTYPE_F8E4M3});
}

// ---------------------------------------------------------------------------
// Descriptor faults, shared by every operation.
// ---------------------------------------------------------------------------
enum Role : uint32_t {
  kRequired = 1u << 0,      // NULL data is refused
  kWritten = 1u << 1,       // the call writes it
  kDenseLast = 1u << 2,     // the last axis must be dense
  kDenseInner3 = 1u << 3,   // the inner three axes must be dense (state-like)
  kDenseInner2 = 1u << 4,   // the inner two axes must be dense (scales)
  kIndex = 1u << 5,         // i32 / i64 indices
  kFreeAxis0 = 1u << 6,     // axis 0's size is the call's own (S, I, K, Bt + 1)
  kTiedDtype = 1u << 7,     // shares its dtype with other tensors
  kF32Only = 1u << 8,
  kI32Only = 1u << 9,
  kDisjointRows = 1u << 10, // axis 0 (and 1 when kRowPairs) must not overlap
  kRowPairs = 1u << 11,     // (I, T) rows of an intermediate buffer
  kState = 1u << 12,        // the state pool: f32/bf16/f16, or i16/i8/f8e4m3 with scales
};

struct Field {
  const char* name;
  ssu_tensor_t* t;
  uint32_t role;
};

int64_t inner_extent(const ssu_tensor_t& t, int axis) {
  // The element span of the axes inside `axis` of a dense row-major tensor.
  int64_t e = 1;
  for (int k = axis + 1; k < t.ndim; ++k) e *= std::max<int64_t>(t.shape[k], 1);
  return e;
}

std::string axis_text(const Field& f, int k) {
  return std::string(f.name) + " axis " + std::to_string(k) + " (shape " +
         std::to_string(f.t->shape[k]) + ", stride " + std::to_string(f.t->strides[k]) + ")";
}

// Applies one fault to one of `fields` (present ones only). `checkable`:
// an accepted call with changed strides can be judged against the
// reference; otherwise such faults run plan creation only.
void descriptor_fault(Bytes& in, Trial& tr, std::vector<Field> fields, bool checkable) {
  fields.erase(std::remove_if(fields.begin(), fields.end(),
                              [](const Field& f) { return f.t->data == nullptr; }),
               fields.end());
  if (fields.empty()) return;
  Field& f = fields[size_t(in.below(int64_t(fields.size())))];
  ssu_tensor_t& t = *f.t;
  const int nd = t.ndim;
  const std::string name = f.name;
  // A negative size or stride on some axis.
  auto set_negative = [&](int64_t* values, const char* what) {
    const int k = int(in.below(nd));
    const int64_t v = in.pick<int64_t>({-1, values[k] >= 0 ? -values[k] - 1 : -2,
                                        std::numeric_limits<int64_t>::min()});
    tr.refuse(axis_text(f, k) + ": " + what + " " + std::to_string(v));
    values[k] = v;
  };
  auto either_or_plan = [&](const std::string& what) {
    if (checkable) tr.either(what);
    else tr.plan_only(what);
  };
  switch (in.below(11)) {
    case 0:
      if (f.role & kRequired) {
        t.data = nullptr;
        tr.refuse(name + ".data = NULL (required)");
        return;
      }
      [[fallthrough]];
    case 1: {
      const int32_t v = in.pick<int32_t>({0, -1, SSU_MAX_DIMS + 1, 64, std::numeric_limits<int32_t>::min()});
      tr.refuse(name + ".ndim = " + std::to_string(v) + " (was " + std::to_string(nd) + ")");
      t.ndim = v;
      return;
    }
    case 2:
      if (nd < SSU_MAX_DIMS) {
        t.shape[nd] = -3;
        t.strides[nd] = 1;
        t.ndim = nd + 1;
        tr.refuse(name + ".ndim = " + std::to_string(nd + 1) + " with a new axis of size -3");
        return;
      }
      [[fallthrough]];
    case 3:
      set_negative(t.shape, "size");
      return;
    case 4: {
      int k = int(in.below(nd));
      if (k == 0 && (f.role & kFreeAxis0)) {
        if (nd == 1) {
          tr.refuse(axis_text(f, 0) + ": size -1");
          t.shape[0] = -1;
          return;
        }
        k = 1 + int(in.below(nd - 1));
      }
      const int64_t old = t.shape[k];
      int64_t v = old + 1 + in.below(3);
      if (old > 1 && in.flip()) v = old - 1 - in.below(old - 1);
      tr.refuse(axis_text(f, k) + ": size " + std::to_string(v) + " that no other tensor has");
      t.shape[k] = v;
      return;
    }
    case 5:
      set_negative(t.strides, "stride");
      return;
    case 6: {
      // Strides that look negative as 32-bit values or that no buffer fits.
      const int k = int(in.below(nd));
      const int64_t v = in.pick<int64_t>({int64_t(0xffffffff), int64_t(0x80000000),
                                          int64_t(1) << 40, int64_t(1) << 62,
                                          std::numeric_limits<int64_t>::max()});
      const std::string what = axis_text(f, k) + ": stride " + std::to_string(v);
      t.strides[k] = v;
      const bool dense_rule = (k == nd - 1 && (f.role & (kDenseLast | kDenseInner2 | kDenseInner3))) ||
                              (k >= nd - 3 && (f.role & kDenseInner3)) ||
                              (k >= nd - 2 && (f.role & kDenseInner2));
      if (t.shape[k] > 1) {
        if (dense_rule) tr.refuse(what + " on an axis that must be dense");
        tr.plan_only(what);
      } else if (dense_rule && (f.role & kDenseInner3) && (f.role & kState)) {
        tr.refuse(what + " (the state's inner axes must be dense whatever their size)");
      } else {
        either_or_plan(what + " on an axis of size <= 1");
      }
      return;
    }
    case 7:
      if (f.role & (kDenseLast | kDenseInner2 | kDenseInner3)) {
        const int span = (f.role & kDenseInner3) ? 3 : (f.role & kDenseInner2) ? 2 : 1;
        const int k = nd - 1 - int(in.below(std::min(span, nd)));
        const int64_t want = t.strides[k];
        int64_t v = in.pick<int64_t>({0, 2, 3});
        if (k < nd - 1) v = want + in.pick<int64_t>({1, -1, 7});
        if (v == want) v = want + 1;
        const std::string what = axis_text(f, k) + ": stride " + std::to_string(v) +
                                 " on an axis that must be dense";
        t.strides[k] = v;
        if (t.shape[k] > 1 || (f.role & kState)) {
          tr.refuse(what);
          if (v > want) tr.plan_only("(a wider stride than the buffer holds)");
        } else {
          either_or_plan(what + " (size <= 1)");
        }
        return;
      }
      [[fallthrough]];
    case 8: {
      // Overlapping strides on an axis with more than one element.
      std::vector<int> axes;
      for (int k = 0; k + 1 < nd; ++k)
        if (t.shape[k] > 1) axes.push_back(k);
      if (axes.empty() || !(f.role & kWritten)) break;
      const int k = axes[size_t(in.below(int64_t(axes.size())))];
      const bool documented = ((f.role & kDisjointRows) && k == 0) ||
                              ((f.role & kRowPairs) && k <= 1) ||
                              ((f.role & kDenseInner3) && k >= nd - 3) ||
                              ((f.role & kDenseInner2) && k >= nd - 2);
      int64_t v = 0;
      if (!documented && in.flip()) v = std::max<int64_t>(inner_extent(t, k) - 1, 0);
      const std::string what = axis_text(f, k) + ": stride " + std::to_string(v) + " (elements overlap)";
      t.strides[k] = v;
      // Where ssu.h forbids the overlap (state slots, intermediate rows) the
      // call must be refused. Elsewhere (outputs, the Mamba-3 pools, rings)
      // it leaves these strides free, so two elements written through one
      // address are the caller's problem and have no defined result: plan
      // creation only.
      if (documented) tr.refuse(what + ", which ssu.h forbids");
      else tr.plan_only(what + " of a written tensor (no defined result)");
      return;
    }
    case 9: {
      // The stride of an axis of extent 1 never moves a pointer.
      std::vector<int> axes;
      for (int k = 0; k < nd; ++k)
        if (t.shape[k] == 1) axes.push_back(k);
      if (axes.empty()) break;
      const int k = axes[size_t(in.below(int64_t(axes.size())))];
      const int64_t v = in.pick<int64_t>({0, 3, 12345, int64_t(1) << 40});
      const std::string what = axis_text(f, k) + ": stride " + std::to_string(v) + " on an axis of size 1";
      t.strides[k] = v;
      if ((f.role & kState) && k >= nd - 3) tr.refuse(what + " (the state's inner axes must be dense)");
      else either_or_plan(what);
      return;
    }
    default: {
      ssu_dtype_t v;
      if (in.flip()) {
        // No dtype of ssu.h: the first value past its last one (7 until the
        // 8-bit formats took 7 and 8), far values, negative ones.
        v = in.pick<ssu_dtype_t>({SSU_DTYPE_INVALID, SSU_DTYPE_F8E4M3 + 1, 99, -1,
                                  std::numeric_limits<int32_t>::max()});
      } else if (f.role & kIndex) {
        v = in.pick<ssu_dtype_t>({SSU_DTYPE_F32, SSU_DTYPE_F16, SSU_DTYPE_BF16, SSU_DTYPE_I16,
                                  SSU_DTYPE_I8});
      } else if (f.role & kI32Only) {
        v = in.pick<ssu_dtype_t>({SSU_DTYPE_I64, SSU_DTYPE_F32, SSU_DTYPE_I16, SSU_DTYPE_I8});
      } else if (f.role & kState) {
        // Across the block-scaled line only, so the scales are wrong either
        // way (given with a float state, missing with a block-scaled one).
        // Not from one block-scaled format to another: i8 <-> f8e4m3 with
        // its scales is a valid call (other codes), and to or from i16 the
        // element size changes under strides the buffer was made for.
        v = block_scaled(t.dtype) ? float_dtype(in)
                                  : in.pick<ssu_dtype_t>({SSU_DTYPE_I16, SSU_DTYPE_I8, SSU_DTYPE_F8E4M3});
      } else if (f.role & (kTiedDtype | kF32Only)) {
        // The block-scaled dtypes too: a scale pool in its codes' dtype, an
        // input or intermediate buffer in another state format.
        v = in.pick<ssu_dtype_t>({SSU_DTYPE_F32, SSU_DTYPE_F16, SSU_DTYPE_BF16, SSU_DTYPE_I32,
                                  SSU_DTYPE_I16, SSU_DTYPE_I8, SSU_DTYPE_F8E4M3});
        if (v == t.dtype) v = SSU_DTYPE_I64;
      } else {
        // The 8-bit dtypes are state formats only (ssu.h), never a parameter's.
        v = in.pick<ssu_dtype_t>({SSU_DTYPE_I32, SSU_DTYPE_I64, SSU_DTYPE_I16, SSU_DTYPE_I8,
                                  SSU_DTYPE_F8E4M3});
      }
      tr.refuse(name + ".dtype = " + std::to_string(v) + " (was " + ssu_dtype_name(t.dtype) + ")");
      t.dtype = v;
      return;
    }
  }
  // Fallback of the cases that found nothing to change: a bad rank.
  tr.refuse(name + ".ndim = 0");
  t.ndim = 0;
}

// struct_size faults: below `min` refused, from `min` on the fields the
// caller's struct lacks read as zero (`zero_tail_ok`: the case uses none of
// them), beyond sizeof the library reads only what it knows.
void struct_size_fault(Bytes& in, Trial& tr, const char* what, uint32_t* size, uint32_t min,
                       uint32_t full, bool zero_tail_ok, bool checkable) {
  uint32_t v;
  switch (in.below(4)) {
    case 0: v = in.pick<uint32_t>({0, 1, 4, min - 1}); break;
    case 1: v = min + uint32_t(in.below(int64_t(full - min) + 1)); break;
    case 2: v = full + uint32_t(in.pick<uint32_t>({4, 8, 4096})); break;
    default: v = std::numeric_limits<uint32_t>::max(); break;
  }
  const std::string text = std::string(what) + "->struct_size = " + std::to_string(v) +
                           " (sizeof " + std::to_string(full) + ", oldest " + std::to_string(min) + ")";
  *size = v;
  // Between the oldest layout and this one only the oldest size itself is a
  // layout; any other size ends inside a field.
  if (v < min || (v > min && v < full)) tr.refuse(text);
  else if (v < full && !zero_tail_ok) {
    if (checkable) tr.either(text + ", dropping fields the call uses");
    else tr.plan_only(text + ", dropping fields the call uses");
  } else {
    tr.keep(text);
  }
}

// Faults of the call itself: handles, options, the info struct.
void call_fault(Bytes& in, Trial& tr) {
  tr.at_execute = false;  // handle and option faults belong to their own call
  switch (in.below(8)) {
    case 0: tr.null_context = true; tr.refuse("context = NULL"); break;
    case 1: tr.null_out_plan = true; tr.refuse("out_plan = NULL"); break;
    case 2: tr.null_args = true; tr.refuse("args = NULL"); tr.at_execute = in.flip(); break;
    case 3: tr.null_plan = true; tr.refuse("plan = NULL at execute"); break;
    case 4: tr.foreign_plan = true; tr.refuse("a plan of another operation at execute"); break;
    case 5: {
      tr.options_given = true;
      // 3 (cuda_tma until 0.2) stays in its place among the unknown values,
      // so that a given input still picks the same value.
      const ssu_algorithm_t a = in.pick<ssu_algorithm_t>(
          {SSU_ALGORITHM_AUTO, SSU_ALGORITHM_CPU_ROWS, SSU_ALGORITHM_CUDA_SIMPLE, 3,
           SSU_ALGORITHM_CUDA_PIPELINED, SSU_ALGORITHM_CUDA_REPLAY, -1, 99});
      tr.options.algorithm = a;
      if (a == SSU_ALGORITHM_AUTO || a == SSU_ALGORITHM_CPU_ROWS)
        tr.keep("options.algorithm = " + std::to_string(a));
      else
        tr.refuse("options.algorithm = " + std::to_string(a) + " on a CPU context");
      break;
    }
    case 6: {
      tr.options_given = true;
      // Below 0.3's 8 bytes, or ending inside `flags` (only 8 itself reads).
      tr.options.struct_size = in.pick<uint32_t>({0, 4, 7, 9, uint32_t(sizeof(ssu_plan_options_t)) - 1});
      tr.refuse("options->struct_size = " + std::to_string(tr.options.struct_size));
      break;
    }
    default:
      tr.info_size = in.pick<uint32_t>({1, 8, uint32_t(sizeof(ssu_plan_info_t)),
                                        uint32_t(sizeof(ssu_plan_info_t)) + 16});
      tr.keep("ssu_plan_get_info with struct_size " + std::to_string(tr.info_size));
      break;
  }
}

Pad pad_mode(Bytes& in) {
  return in.pick<Pad>({Pad::None, Pad::None, Pad::Negative, Pad::PadSlotId, Pad::PadSlotIdInRange});
}

// A padding value for an index of `dtype`.
int64_t padding_value(Bytes& in, ssu_dtype_t dtype) {
  return in.pick<int64_t>({-1, -2, -1000,
                           dtype == SSU_DTYPE_I64 ? std::numeric_limits<int64_t>::min()
                                                  : int64_t(std::numeric_limits<int32_t>::min())});
}

// A slot value at or beyond `bound` that `dtype` can hold. `via_double`:
// the harness writes it through a double, so it must be exact there.
int64_t beyond_value(Bytes& in, ssu_dtype_t dtype, int64_t bound, bool via_double = false) {
  const int64_t top = dtype != SSU_DTYPE_I64 ? int64_t(std::numeric_limits<int32_t>::max())
                      : via_double           ? int64_t(1) << 62
                                             : std::numeric_limits<int64_t>::max();
  return in.pick<int64_t>({bound, bound + 1, bound + 7, top,
                           dtype == SSU_DTYPE_I64 ? (int64_t(1) << 40) + bound : top - 1});
}

// ---------------------------------------------------------------------------
// The update (SPEC sections 1, 2, 4, 5).
// ---------------------------------------------------------------------------
UpdateCase decode_update(Bytes& in, Trial& tr) {
  UpdateCase c;
  c.tag = "fuzz";
  switch (in.below(3)) {
    case 0: c.single(); break;
    case 1: c.multi(1 + in.below(4)); break;
    default: c.varlen(1 + in.below(4)); break;
  }
  if (c.form != Form::Single)
    c.store = in.pick<Store>({Store::Final, Store::Final, Store::DstPerToken, Store::Intermediate});
  c.state = state_dtype(in);
  c.input = float_dtype(in);
  c.params(float_dtype(in), float_dtype(in), float_dtype(in), float_dtype(in));
  c.index = in.pick<ssu_dtype_t>({SSU_DTYPE_I32, SSU_DTYPE_I64, SSU_DTYPE_I32, SSU_DTYPE_I64,
                                  SSU_DTYPE_INVALID});
  c.H = 1 + in.below(4);
  const int64_t divisors[4][3] = {{1, 1, 1}, {1, 2, 2}, {1, 3, 3}, {1, 2, 4}};
  c.G = divisors[c.H - 1][in.below(3)];
  c.P = in.pick<int64_t>({1, 2, 3, 4, 8, 16, 17});
  c.N = in.pick<int64_t>({1, 2, 4, 7, 8, 16});
  // An int16 row of one element has the decode scale |v| / 32767, so SPEC
  // section 6's bound for it (two scales plus 1e-4 |v|) is tighter than the
  // fp32 arithmetic the spec prescribes when v comes from cancellation:
  // rows of at least two elements only. The 8-bit bounds (two scales of
  // |v| / 127; 2^-3 |v| plus two subnormal steps of |v| / 448) are wider
  // but just as relative to the row's own value, so a long run would meet
  // the same cancellation: every block-scaled format gets N >= 2.
  if (block_scaled(c.state) && c.N == 1) c.N = 2;
  if (in.percent(3)) {
    c.N = in.pick<int64_t>({257, 300});
    c.P = 1;
    c.H = c.G = 1;
    tr.refuse("dstate N = " + std::to_string(c.N) + " > 256 (not supported)");
    tr.unsupported_sizes = true;
  }
  c.batch = 1 + in.below(4);
  const uint32_t bits = in.u32();
  auto bit = [&](int i) { return ((bits >> i) & 1u) != 0; };
  c.A_per_channel = bit(0) && bit(1);
  c.dt_per_channel = bit(2) && bit(3);
  c.D_per_channel = bit(4);
  c.dt_bias_per_channel = bit(5) && bit(6);
  c.has_D = !bit(7) || bit(8);
  c.has_dt_bias = !bit(9) || bit(10);
  c.has_z = !bit(11);
  c.softplus = !bit(12);
  c.disable_update = bit(13) && bit(14);
  c.has_src = !(bit(15) && bit(16));
  c.src_2d = bit(17);
  c.has_dst = bit(18);
  c.dst_is_src = bit(19);
  c.num_accepted = bit(20);
  c.inter_index = bit(21);
  c.shared_src = bit(22);
  c.large_dt = bit(23) && bit(24);
  c.pad = pad_mode(in);
  c.layout = uint32_t(in.below(16));
  c.extra_slots = int(in.below(4));
  if (rounds_stochastically(c.state) && in.percent(25)) c.sr(in.u64(), uint32_t(in.below(33)));
  if (!c.softplus && in.percent(15)) c.exact();
  c.seed = in.u32();
  return c;
}

// The state pool and its scales (the update and replay).
std::vector<Field> state_pool_fields(ssu_state_pool_t& pool, bool scaled) {
  return {
      {"pool.state", &pool.state, kRequired | kWritten | kDenseInner3 | kFreeAxis0 | kDisjointRows | kState},
      {"pool.state_scale", &pool.state_scale,
       (scaled ? kRequired : 0u) | kWritten | kDenseInner2 | kFreeAxis0 | kDisjointRows | kF32Only},
  };
}

// The tensors of the update's arguments that replay's arguments share.
template <typename Args>
std::vector<Field> update_tensor_fields(Args& a) {
  const uint32_t in = kDenseLast | kTiedDtype;
  return {
      {"x", &a.x, kRequired | in},
      {"dt", &a.dt, kRequired},
      {"A", &a.A, kRequired},
      {"B", &a.B, kRequired | in},
      {"C", &a.C, kRequired | in},
      {"D", &a.D, 0},
      {"dt_bias", &a.dt_bias, 0},
      {"z", &a.z, in},
      {"out", &a.out, kRequired | kWritten | in},
  };
}

std::vector<Field> operator+(std::vector<Field> a, const std::vector<Field>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<Field> update_fields(ssu_update_args_t& a, ssu_state_pool_t& pool, const UpdateCase& c) {
  return state_pool_fields(pool, block_scaled(c.state)) + update_tensor_fields(a) + std::vector<Field>{
      {"src_index", &a.src_index, kIndex | (a.num_accepted_tokens.data ? kRequired : 0u)},
      {"dst_index", &a.dst_index, kIndex},
      {"cu_seqlens", &a.cu_seqlens, kIndex | kFreeAxis0},
      {"num_accepted_tokens", &a.num_accepted_tokens, kIndex},
      {"intermediate_states", &a.intermediate_states,
       (a.intermediate_index.data || a.intermediate_scales.data ? kRequired : 0u) | kWritten |
           kDenseInner3 | kFreeAxis0 | kRowPairs | kTiedDtype},
      {"intermediate_index", &a.intermediate_index, kIndex},
      {"intermediate_scales", &a.intermediate_scales,
       kRequired | kWritten | kDenseInner2 | kFreeAxis0 | kRowPairs | kF32Only},
  };
}

// Faults of the update's own fields (flags, reserved fields, rounding,
// max_tokens, pad_slot_id, the Mamba-3 pools, struct sizes).
void update_struct_fault(Bytes& in, Trial& tr, ssu_update_args_t& a, ssu_state_pool_t& pool,
                         const UpdateCase& c, int64_t S, uint64_t* spare) {
  const bool uses_tail = a.intermediate_scales.data || a.rounding_seed || a.rounding_rounds;
  switch (in.below(10)) {
    case 0:
      struct_size_fault(in, tr, "args", &a.struct_size,
                        uint32_t(offsetof(ssu_update_args_t, intermediate_scales)),
                        uint32_t(sizeof a), !uses_tail, true);
      break;
    case 1:
      struct_size_fault(in, tr, "pool", &pool.struct_size,
                        uint32_t(offsetof(ssu_state_pool_t, prev_B)), uint32_t(sizeof pool), true, true);
      break;
    case 2: {
      const uint32_t f = 1u << (2 + in.below(30));
      a.flags |= f;
      tr.refuse("flags |= " + std::to_string(f) + " (unknown)");
      break;
    }
    case 3:
      if (in.flip()) {
        a.reserved1 = 1 + uint32_t(in.below(1000));
        tr.refuse("args->reserved1 = " + std::to_string(a.reserved1));
      } else {
        pool.reserved0 = 1 + uint32_t(in.below(1000));
        tr.refuse("pool->reserved0 = " + std::to_string(pool.reserved0));
      }
      break;
    case 4:
      if (a.rounding_seed) {
        a.rounding_rounds = 33 + uint32_t(in.below(1000));
        tr.refuse("rounding_rounds = " + std::to_string(a.rounding_rounds) + " (1..32)");
      } else if (in.flip()) {
        a.rounding_rounds = 1 + uint32_t(in.below(32));
        tr.refuse("rounding_rounds = " + std::to_string(a.rounding_rounds) + " without a seed");
      } else {
        a.rounding_seed = spare;
        // f16, bf16 and f8e4m3 may round stochastically; f32, i16 and i8
        // (integer codes always round to nearest) must refuse a seed.
        if (!rounds_stochastically(c.state))
          tr.refuse(std::string("rounding_seed with a ") + ssu_dtype_name(c.state) + " state");
        else if (!c.exact_values)
          tr.either("rounding_seed given (stochastic rounding of the stores)");
        else
          tr.plan_only("rounding_seed given (the harness expects round-to-nearest bits)");
      }
      break;
    case 5:
      if (c.form == Form::Varlen) {
        if (in.flip()) {
          a.max_tokens = in.pick<int64_t>({0, -1, std::numeric_limits<int64_t>::min()});
          tr.refuse("max_tokens = " + std::to_string(a.max_tokens) + " in the varlen form");
        } else if (!a.intermediate_states.data && !(a.src_index.data && a.src_index.ndim == 2) &&
                   !(a.dst_index.data && a.dst_index.ndim == 2)) {
          a.max_tokens += 1 + in.below(3);
          const std::string what = "max_tokens = " + std::to_string(a.max_tokens) + " (larger)";
          if (tr.at_execute) tr.either(what + ", which the plan fixes");
          else tr.keep(what + "; no buffer depends on it");
        } else {
          a.max_tokens = c.T - 1 > 0 ? c.T - 1 : -1;
          tr.refuse("max_tokens = " + std::to_string(a.max_tokens) + " (a tensor has T = " +
                    std::to_string(c.T) + ")");
        }
      } else {
        a.max_tokens = in.pick<int64_t>({c.T + 1, -1, std::numeric_limits<int64_t>::max()});
        tr.refuse("max_tokens = " + std::to_string(a.max_tokens) + " outside the varlen form");
      }
      break;
    case 6:
      if (c.pad == Pad::None || c.pad == Pad::Negative) {
        a.pad_slot_id = in.pick<int64_t>({-5, S + 100, std::numeric_limits<int64_t>::max(),
                                          std::numeric_limits<int64_t>::min()});
        tr.keep("pad_slot_id = " + std::to_string(a.pad_slot_id) + " (no index holds it)");
      } else if (c.pad == Pad::PadSlotId) {
        a.pad_slot_id = S + 1000;
        tr.either("pad_slot_id moved: indices holding the old one are now beyond the pool");
      } else {
        a.pad_slot_id = -1;
        tr.either("pad_slot_id of an in-pool slot dropped");
        tr.plan_only("(padding rows would become live ones)");
      }
      break;
    case 7: {
      ssu_tensor_t* m3 = in.pick<ssu_tensor_t*>({&pool.prev_B, &pool.prev_x, &pool.angle_state});
      *m3 = a.x;
      tr.refuse("a Mamba-3 pool given to the update");
      break;
    }
    case 8:
      a.error_word = reinterpret_cast<uint32_t*>(spare);
      tr.keep("error_word given (the CPU backend ignores it)");
      break;
    default:
      // Shrinks the pool: accepted exactly when every index stays below S'.
      if (S > 1) {
        const int64_t s2 = 1 + in.below(S - 1);
        pool.state.shape[0] = s2;
        if (pool.state_scale.data) pool.state_scale.shape[0] = s2;
        // The reference covers the whole buffer: slots beyond S' are named
        // by no valid call, so they must stay unchanged either way.
        tr.either("pool slots S = " + std::to_string(s2) + " (was " + std::to_string(S) + ")");
      } else {
        a.flags |= 0x80000000u;
        tr.refuse("flags |= 0x80000000 (unknown)");
      }
      break;
  }
}

// An index poked by the update's fault mode; returns false when the case
// has no index to poke.
bool update_index_fault(Bytes& in, Trial& tr, UpdateProblem& p, const UpdateCase& c,
                        const ssu_update_args_t& a) {
  struct Target {
    const char* name;
    const ssu_tensor_t* t;
  };
  std::vector<Target> targets;
  for (Target t : {Target{"src_index", &a.src_index}, Target{"dst_index", &a.dst_index},
                   Target{"cu_seqlens", &a.cu_seqlens},
                   Target{"num_accepted_tokens", &a.num_accepted_tokens},
                   Target{"intermediate_index", &a.intermediate_index}})
    if (t.t->data) targets.push_back(t);
  if (targets.empty()) return false;
  const Target& t = targets[size_t(in.below(int64_t(targets.size())))];
  int64_t count = 1;
  for (int k = 0; k < t.t->ndim; ++k) count *= t.t->shape[k];
  const int64_t e = in.below(count);
  const ssu_dtype_t d = t.t->dtype;
  const std::string name = t.name;
  int64_t v;
  tr.data_fault = true;
  tr.reference_decides = true;
  if (name == "cu_seqlens") {
    // Values that cannot make two live sequences share packed rows (which
    // ssu.h leaves undefined): an inner entry goes far out or below zero,
    // the first and last ones anywhere.
    const bool inner = e > 0 && e + 1 < count;
    v = inner ? in.pick<int64_t>({-1, 1000, int64_t(1) << 33, std::numeric_limits<int32_t>::min(),
                                  std::numeric_limits<int32_t>::max()})
              : in.pick<int64_t>({-1, c.T + 1, c.T + 2, 1000, int64_t(1) << 33,
                                  std::numeric_limits<int32_t>::min(),
                                  std::numeric_limits<int32_t>::max()});
    if (d == SSU_DTYPE_I32) v = int64_t(int32_t(v));
    else if (in.percent(30)) v = in.pick<int64_t>({std::numeric_limits<int64_t>::min(),
                                                   std::numeric_limits<int64_t>::max()});
    tr.either(name + "[" + std::to_string(e) + "] = " + std::to_string(v));
  } else if (name == "num_accepted_tokens") {
    if (in.flip()) {
      v = -3 + in.below(c.T + 4);
      tr.keep(name + "[" + std::to_string(e) + "] = " + std::to_string(v) + " (T = " +
              std::to_string(c.T) + ")");
      tr.data_fault = false;
    } else {
      v = beyond_value(in, d, c.T + 1);
      tr.either(name + "[" + std::to_string(e) + "] = " + std::to_string(v) + " > T");
    }
  } else if (in.flip()) {
    v = padding_value(in, d);
    tr.keep(name + "[" + std::to_string(e) + "] = " + std::to_string(v) + " (padding)");
    tr.data_fault = false;
  } else {
    v = beyond_value(in, d, name == "intermediate_index" ? a.intermediate_states.shape[0]
                                                         : p.slots());
    tr.either(name + "[" + std::to_string(e) + "] = " + std::to_string(v) + " (beyond its bound)");
  }
  // A per-token dst_index may be the src_index tensor itself.
  const bool alias = t.t == &a.dst_index && a.dst_index.data == a.src_index.data;
  p.poke_index(alias ? "src_index" : name, e, v);
  return true;
}

// The plan-free and the plan-fixed properties of an update case, for plan reuse.
UpdateCase other_update(Bytes& in, Trial& tr, UpdateCase c) {
  c.batch = 1 + in.below(4);
  c.layout = uint32_t(in.below(16));
  c.extra_slots = int(in.below(4));
  // Without slot indices the seed's parity picks cu_seqlens' dtype (plan-fixed).
  c.seed = (in.u32() & ~uint64_t(1)) | (c.seed & 1);
  if (c.index != SSU_DTYPE_INVALID) c.pad = pad_mode(in);
  if (in.percent(40)) {
    switch (in.below(5)) {
      case 0: c.input = float_dtype(in); break;
      case 1: c.has_z = !c.has_z; break;
      case 2: c.softplus = !c.softplus; c.exact_values = false; break;
      case 3: c.dt = float_dtype(in); break;
      default:
        if (c.form != Form::Single) c.T = 1 + in.below(4);
        break;
    }
    tr.either("executed with another problem, which may differ in a plan-fixed property: " +
              describe(c));
  } else {
    tr.keep("executed with another problem (batch, layout, slots, padding): " + describe(c));
  }
  return c;
}

void fuzz_update(Bytes& in, Trial& tr, ssu_context_t ctx) {
  UpdateCase c = decode_update(in, tr);
  tr.state = c.state;
  tr.description = describe(c) + tr.description;
  HostMemory mem;
  UpdateProblem p(c, mem);
  tr.built = true;
  ssu_state_pool_t pool = *p.pool();
  ssu_update_args_t good = p.args();
  ssu_update_args_t bad = good;
  bad.pool = &pool;
  uint64_t spare[4] = {0x5eed, 0, 0, 0};
  Judges j{[&] { return p.check(); }, [&] { return p.check_unchanged(); }};
  const Api<ssu_update_args_t> api{ssu_plan_create_update, ssu_plan_execute_update};
  const int mode = int(in.below(100));
  if (mode < 35 || tr.must_fail) {
    if (!tr.must_fail && in.percent(10)) call_fault(in, tr);
  } else if (mode < 55) {
    if (!update_index_fault(in, tr, p, c, good)) call_fault(in, tr);
  } else if (mode < 80) {
    tr.at_execute = in.percent(30);
    // One fault at a time: two can cancel out (an i16 state made f32 with
    // its scales dropped is a valid f32 state).
    descriptor_fault(in, tr, update_fields(bad, pool, c), true);
  } else if (mode < 90) {
    tr.at_execute = in.percent(30);
    update_struct_fault(in, tr, bad, pool, c, p.slots(), spare);
  } else if (mode < 96) {
    run_other_problem<UpdateProblem>(tr, in, ctx, api, good, other_update(in, tr, c), mem);
    return;
  } else {
    call_fault(in, tr);
  }
  run_trial(tr, in, ctx, api, good, bad, j);
}

// ---------------------------------------------------------------------------
// The Mamba-3 step and rotary step (SPEC section 3).
// ---------------------------------------------------------------------------
m3::StepCase decode_step(Bytes& in, Trial& tr) {
  m3::StepCase c;
  c.tag = "fuzz";
  c.state = float_dtype(in);
  c.input = float_dtype(in);
  c.param = float_dtype(in);
  c.weight = float_dtype(in);
  c.index = in.pick<ssu_dtype_t>({SSU_DTYPE_I32, SSU_DTYPE_I64});
  c.H = 1 + in.below(2);
  c.P = in.pick<int64_t>({16, 32, 16});
  c.N = in.pick<int64_t>({16, 32, 16});
  c.R = in.pick<int64_t>({1, 2, 4, 8});
  if (in.percent(6)) {
    switch (in.below(3)) {
      case 0: c.P = in.pick<int64_t>({8, 24, 1}); break;
      case 1: c.N = in.pick<int64_t>({8, 24, 512}); break;
      default: c.R = in.pick<int64_t>({3, 5, 16}); break;
    }
    tr.refuse("P = " + std::to_string(c.P) + ", N = " + std::to_string(c.N) + ", R = " +
              std::to_string(c.R) + " (not supported)");
    tr.unsupported_sizes = true;
  }
  c.batch = 1 + in.below(3);
  const uint32_t bits = in.u32();
  auto bit = [&](int i) { return ((bits >> i) & 1u) != 0; };
  c.has_D = !bit(0);
  c.outproj = !bit(1);
  c.has_z = c.outproj && bit(2);
  c.update_prev = !bit(3);
  c.has_src = !(bit(4) && bit(5));
  c.dst = in.pick<m3::Dst>({m3::Dst::Same, m3::Dst::Distinct, m3::Dst::Equal});
  c.pad = c.has_src ? pad_mode(in) : Pad::None;
  c.dst_pad = c.dst != m3::Dst::Same && bit(6);
  c.layout = int(in.below(3));
  c.extra_slots = int(in.below(4));
  c.seed = in.u32();
  return c;
}

m3::RotaryCase decode_rotary(Bytes& in, Trial& tr) {
  m3::RotaryCase c;
  c.tag = "fuzz";
  c.qk = float_dtype(in);
  c.rate = float_dtype(in);
  c.dt = float_dtype(in);
  c.bias = float_dtype(in);
  c.index = in.pick<ssu_dtype_t>({SSU_DTYPE_I32, SSU_DTYPE_I64});
  c.H = 1 + in.below(2);
  c.N = in.pick<int64_t>({2, 4, 6, 8, 16, 32});
  c.R = 1 + in.below(3);
  const uint32_t bits = in.u32();
  auto bit = [&](int i) { return ((bits >> i) & 1u) != 0; };
  c.halved = bit(0);
  c.Sa = 1 + in.below(c.N / 2);
  if (in.percent(6)) {
    if (in.flip()) {
      c.N = in.pick<int64_t>({258, 512});
      c.Sa = 2;
    } else {
      c.N = in.pick<int64_t>({5, 7});
      c.Sa = 1;
      c.halved = true;
    }
    tr.refuse("N = " + std::to_string(c.N) + ", Sa = " + std::to_string(c.Sa) +
              (c.halved ? ", halved" : "") + " (outside the supported sizes)");
    tr.unsupported_sizes = true;
  }
  c.batch = 1 + in.below(3);
  c.q_bias = !bit(1);
  c.k_bias = !bit(2);
  c.in_place = bit(3);
  c.has_src = !(bit(4) && bit(5));
  c.dst = in.pick<m3::Dst>({m3::Dst::Same, m3::Dst::Distinct, m3::Dst::Equal});
  c.pad = c.has_src ? pad_mode(in) : Pad::None;
  c.layout = int(in.below(3));
  c.extra_slots = int(in.below(4));
  c.seed = in.u32();
  return c;
}

std::vector<Field> step_fields(ssu_mamba3_step_args_t& a, ssu_state_pool_t& pool) {
  const uint32_t in = kDenseLast | kTiedDtype;
  return {
      {"pool.state", &pool.state, kRequired | kWritten | kDenseInner3 | kFreeAxis0 | kDisjointRows | kState},
      {"pool.prev_B", &pool.prev_B, kRequired | kWritten | kFreeAxis0 | in},
      {"pool.prev_x", &pool.prev_x, kRequired | kWritten | kFreeAxis0 | in},
      {"A", &a.A, kRequired},
      {"dt", &a.dt, kRequired},
      {"trap", &a.trap, kRequired},
      {"B", &a.B, kRequired | in},
      {"C", &a.C, kRequired | in},
      {"x", &a.x, kRequired | in},
      {"D", &a.D, 0},
      {"xproj", &a.xproj, kRequired},
      {"z", &a.z, kRequired | in},
      {"zproj", &a.zproj, kRequired},
      {"outproj", &a.outproj, kRequired},
      {"out", &a.out, kRequired | kWritten | in},
      {"src_index", &a.src_index, kIndex},
      {"dst_index", &a.dst_index, kIndex},
  };
}

std::vector<Field> rotary_fields(ssu_mamba3_rotary_args_t& a, ssu_state_pool_t& pool) {
  const uint32_t in = kDenseLast | kTiedDtype;
  return {
      {"pool.angle_state", &pool.angle_state, kRequired | kWritten | kDenseLast | kFreeAxis0 | kF32Only},
      {"angle_rate", &a.angle_rate, kRequired},
      {"dt", &a.dt, kRequired},
      {"q", &a.q, kRequired | in},
      {"k", &a.k, kRequired | in},
      {"q_bias", &a.q_bias, 0},
      {"k_bias", &a.k_bias, 0},
      {"q_out", &a.q_out, kRequired | kWritten | in},
      {"k_out", &a.k_out, kRequired | kWritten | in},
      {"src_index", &a.src_index, kIndex},
      {"dst_index", &a.dst_index, kIndex},
  };
}

// Faults common to both Mamba-3 argument structs.
template <typename Args>
void mamba3_struct_fault(Bytes& in, Trial& tr, Args& a, ssu_state_pool_t& pool, uint32_t known_flags,
                         uint64_t* spare, Pad pad) {
  switch (in.below(5)) {
    case 0:
      struct_size_fault(in, tr, "args", &a.struct_size, uint32_t(sizeof a), uint32_t(sizeof a), true, true);
      break;
    case 1:
      if (in.flip()) {
        pool.struct_size = in.pick<uint32_t>({0, 8, uint32_t(offsetof(ssu_state_pool_t, prev_B))});
        tr.refuse("pool->struct_size = " + std::to_string(pool.struct_size) +
                  " (ends before the Mamba-3 pools)");
      } else {
        pool.reserved0 = 1;
        tr.refuse("pool->reserved0 = 1");
      }
      break;
    case 2: {
      uint32_t f = 1u << in.below(32);
      if (f & known_flags) f <<= 1;
      a.flags |= f;
      tr.refuse("flags |= " + std::to_string(f) + " (unknown)");
      break;
    }
    case 3:
      a.error_word = reinterpret_cast<uint32_t*>(spare);
      tr.keep("error_word given (the CPU backend ignores it)");
      break;
    default:
      a.pad_slot_id = in.pick<int64_t>({-7, std::numeric_limits<int64_t>::min()});
      if (pad == Pad::PadSlotId) {
        tr.either("pad_slot_id changed: indices holding the old one are now beyond the pool");
      } else if (pad == Pad::PadSlotIdInRange) {
        tr.either("pad_slot_id changed");
        tr.plan_only("(padding rows would become live ones)");
      } else {
        tr.keep("pad_slot_id = " + std::to_string(a.pad_slot_id) + " (negative: padding anyway)");
      }
      break;
  }
}

// Pokes a src or dst entry of a Mamba-3 problem (either operation).
template <typename Problem>
bool mamba3_index_fault(Bytes& in, Trial& tr, Problem& p, const ssu_tensor_t& src,
                        const ssu_tensor_t& dst, int64_t batch) {
  const bool to_dst = dst.data && (!src.data || in.flip());
  const ssu_tensor_t& t = to_dst ? dst : src;
  if (!t.data) return false;
  const int64_t b = in.below(batch);
  const bool live = p.slots().live.at(size_t(b));
  if (!to_dst && in.flip()) {
    const int64_t v = padding_value(in, t.dtype);
    p.poke_index(false, b, v);
    p.expect_padded(b);
    tr.keep("src_index[" + std::to_string(b) + "] = " + std::to_string(v) + " (padding)");
    return true;
  }
  const int64_t v = beyond_value(in, t.dtype, p.slots().S, true);
  p.poke_index(to_dst, b, v);
  tr.data_fault = true;
  const std::string what = std::string(to_dst ? "dst_index[" : "src_index[") + std::to_string(b) +
                           "] = " + std::to_string(v) + " >= S = " + std::to_string(p.slots().S);
  if (live || !to_dst) tr.refuse(what);
  else tr.either(what + " on a padded sequence");
  return true;
}

template <typename Case, typename Problem, typename Args>
void fuzz_mamba3(Bytes& in, Trial& tr, ssu_context_t ctx, const Case& c, Api<Args> api,
                 std::vector<Field> (*fields)(Args&, ssu_state_pool_t&), uint32_t known_flags,
                 Case (*other)(Bytes&, Trial&, Case)) {
  tr.description = m3::describe(c) + tr.description;
  HostMemory mem;
  Problem p(c, mem);
  tr.built = true;
  ssu_state_pool_t pool = *p.pool();
  const Args good = p.args();
  Args bad = good;
  bad.pool = &pool;
  uint64_t spare[4] = {0, 0, 0, 0};
  Judges j{[&] { return p.check(); }, [&] { return p.check_unchanged(); }};
  const int mode = int(in.below(100));
  if (mode < 35 || tr.must_fail) {
    if (!tr.must_fail && in.percent(10)) call_fault(in, tr);
  } else if (mode < 50) {
    if (!mamba3_index_fault(in, tr, p, good.src_index, good.dst_index, c.batch)) call_fault(in, tr);
  } else if (mode < 80) {
    tr.at_execute = in.percent(30);
    descriptor_fault(in, tr, fields(bad, pool), true);
  } else if (mode < 90) {
    tr.at_execute = in.percent(30);
    mamba3_struct_fault(in, tr, bad, pool, known_flags, spare, c.pad);
  } else if (mode < 96) {
    run_other_problem<Problem>(tr, in, ctx, api, good, other(in, tr, c), mem);
    return;
  } else {
    call_fault(in, tr);
  }
  run_trial(tr, in, ctx, api, good, bad, j);
}

template <typename Case>
Case other_mamba3(Bytes& in, Trial& tr, Case c) {
  c.batch = 1 + in.below(3);
  c.layout = int(in.below(3));
  c.extra_slots = int(in.below(4));
  c.seed = in.u32();
  if (c.has_src) c.pad = pad_mode(in);
  tr.keep("executed with another problem (batch, layout, slots, padding): " + m3::describe(c));
  return c;
}

m3::StepCase other_step(Bytes& in, Trial& tr, m3::StepCase c) {
  if (in.percent(40)) {
    switch (in.below(4)) {
      case 0: c.state = float_dtype(in); break;
      case 1: c.input = float_dtype(in); break;
      case 2: c.R = in.pick<int64_t>({1, 2, 4, 8}); break;
      default: c.update_prev = !c.update_prev; break;
    }
    c.seed = in.u32();
    tr.either("executed with another problem, which may differ in a plan-fixed property: " +
              m3::describe(c));
    return c;
  }
  return other_mamba3(in, tr, c);
}

m3::RotaryCase other_rotary(Bytes& in, Trial& tr, m3::RotaryCase c) {
  if (in.percent(40)) {
    switch (in.below(4)) {
      case 0: c.qk = float_dtype(in); break;
      case 1: c.halved = !c.halved; break;
      case 2: c.Sa = 1 + in.below(c.N / 2); break;
      default: c.in_place = !c.in_place; break;
    }
    c.seed = in.u32();
    tr.either("executed with another problem, which may differ in a plan-fixed property: " +
              m3::describe(c));
    return c;
  }
  return other_mamba3(in, tr, c);
}

// The rotary outputs may alias their inputs only exactly (in place); ssu.h
// names the aliasing it refuses: an output sharing its input's pointer with
// other strides, or sharing a pointer with the other input or output.
bool rotary_alias_fault(Bytes& in, Trial& tr, ssu_mamba3_rotary_args_t& a) {
  switch (in.below(3)) {
    case 0:
      a.q_out.data = a.k.data;
      tr.refuse("q_out.data = k.data");
      return true;
    case 1:
      a.k_out.data = a.q_out.data;
      tr.refuse("k_out.data = q_out.data");
      return true;
    default:
      if (a.q_out.ndim >= 2 && a.q.shape[a.q.ndim - 2] > 1) {
        a.q_out.data = a.q.data;
        a.q_out.strides[a.q.ndim - 2] = a.q.strides[a.q.ndim - 2] + 1;
        tr.refuse("q_out.data = q.data with other strides");
        tr.plan_only("(q_out's strides no longer fit its buffer)");
        return true;
      }
      a.k_out.data = a.q.data;
      tr.refuse("k_out.data = q.data");
      return true;
  }
}

void fuzz_step(Bytes& in, Trial& tr, ssu_context_t ctx) {
  const m3::StepCase c = decode_step(in, tr);
  fuzz_mamba3<m3::StepCase, m3::StepProblem, ssu_mamba3_step_args_t>(
      in, tr, ctx, c, {ssu_plan_create_mamba3_step, ssu_plan_execute_mamba3_step}, step_fields,
      SSU_MAMBA3_UPDATE_PREV, other_step);
}

void fuzz_rotary(Bytes& in, Trial& tr, ssu_context_t ctx) {
  const m3::RotaryCase c = decode_rotary(in, tr);
  if (!tr.must_fail && in.percent(8)) {
    // Aliasing faults need the problem's own pointers.
    tr.description = m3::describe(c) + tr.description;
    HostMemory mem;
    m3::RotaryProblem p(c, mem);
    tr.built = true;
    ssu_state_pool_t pool = *p.pool();
    const ssu_mamba3_rotary_args_t good = p.args();
    ssu_mamba3_rotary_args_t bad = good;
    bad.pool = &pool;
    rotary_alias_fault(in, tr, bad);
    tr.at_execute = in.flip();
    const Judges j{[&] { return p.check(); }, [&] { return p.check_unchanged(); }};
    run_trial(tr, in, ctx, Api<ssu_mamba3_rotary_args_t>{ssu_plan_create_mamba3_rotary,
                                                         ssu_plan_execute_mamba3_rotary},
              good, bad, j);
    return;
  }
  fuzz_mamba3<m3::RotaryCase, m3::RotaryProblem, ssu_mamba3_rotary_args_t>(
      in, tr, ctx, c, {ssu_plan_create_mamba3_rotary, ssu_plan_execute_mamba3_rotary},
      rotary_fields, SSU_MAMBA3_ROTARY_HALVED, other_rotary);
}

// ---------------------------------------------------------------------------
// Replay (SPEC section 7): decode loops through the harness, or one faulty
// step / flush op judged bit for bit as "nothing written".
// ---------------------------------------------------------------------------
ReplayCase decode_replay(Bytes& in) {
  ReplayCase c;
  c.tag = "fuzz";
  switch (in.below(3)) {
    case 0: c.single(); break;
    case 1: c.multi(1 + in.below(3)); break;
    default: c.varlen(1 + in.below(3)); break;
  }
  c.L = c.T + in.below(3);
  c.steps = 1 + int(in.below(3));
  c.H = 1 + in.below(2);
  c.G = c.H == 2 ? in.pick<int64_t>({1, 2}) : 1;
  c.P = in.pick<int64_t>({1, 2, 4, 8, 16});
  c.N = in.pick<int64_t>({1, 2, 4, 8, 16});
  c.batch = 1 + in.below(3);
  // Every state format as a checkpoint: the CPU backend stores i8 and
  // f8e4m3 ones too (the CUDA backend refuses them in this version).
  c.state = state_dtype(in);
  if (block_scaled(c.state) && c.N == 1) c.N = 2;  // see decode_update
  c.input = float_dtype(in);
  c.param = float_dtype(in);
  c.index = in.pick<ssu_dtype_t>({SSU_DTYPE_I32, SSU_DTYPE_I64, SSU_DTYPE_I32, SSU_DTYPE_INVALID});
  c.accepted = in.pick<ssu_dtype_t>({SSU_DTYPE_INVALID, SSU_DTYPE_I32, SSU_DTYPE_I64});
  const uint32_t bits = in.u32();
  auto bit = [&](int i) { return ((bits >> i) & 1u) != 0; };
  c.mamba1 = bit(0) && bit(1);
  c.mamba1_dt_per_head = c.mamba1 && bit(2);
  c.has_D = !bit(3);
  c.has_dt_bias = !bit(4);
  c.has_z = !bit(5);
  c.softplus = !bit(6);
  c.large_dt = bit(7) && bit(8);
  c.speculative = bit(9);
  c.warm_start = bit(10);
  c.disable_every = bit(11) ? 1 + int(in.below(2)) : 0;
  c.pad = c.index != SSU_DTYPE_INVALID ? pad_mode(in) : Pad::None;
  c.layout = uint32_t(in.below(4));
  c.extra_slots = int(in.below(3));
  c.spare_active = int(in.below(3));
  if (rounds_stochastically(c.state) && bit(12)) c.sr(in.u64(), uint32_t(in.below(33)));
  // flush_exact: every checkpoint store bit for bit against the plain
  // update. (Not round_trip: its "RMS error no worse than the plain
  // update's" is a statistical bound, meant for the table's sizes, that a
  // pool of a few dozen elements fails by chance.)
  c.flush_exact = !c.warm_start && bit(13);
  c.seed = in.u32();
  return c;
}

std::vector<Field> ring_fields(ssu_replay_ring_t& ring) {
  const uint32_t r = kRequired | kWritten | kFreeAxis0;
  return {
      {"ring.x", &ring.x, r | kDenseLast | kTiedDtype},
      {"ring.B", &ring.B, r | kDenseLast | kTiedDtype},
      {"ring.dt", &ring.dt, r | kDenseLast | kF32Only},
      {"ring.committed", &ring.committed, r | kI32Only},
      {"ring.pending", &ring.pending, r | kI32Only},
  };
}

std::vector<Field> replay_fields(ssu_replay_args_t& a, ssu_state_pool_t& pool, ssu_replay_ring_t& ring,
                                 bool scaled) {
  return state_pool_fields(pool, scaled) + ring_fields(ring) + update_tensor_fields(a) + std::vector<Field>{
      {"src_index", &a.src_index, kIndex},
      {"cu_seqlens", &a.cu_seqlens, kIndex | kFreeAxis0},
      {"num_accepted", &a.num_accepted, kIndex},
  };
}

std::vector<Field> flush_fields(ssu_replay_flush_args_t& a, ssu_state_pool_t& pool,
                                ssu_replay_ring_t& ring, bool scaled) {
  return state_pool_fields(pool, scaled) + ring_fields(ring) + std::vector<Field>{
      {"A", &a.A, kRequired},
      {"src_index", &a.src_index, kRequired | kIndex | kFreeAxis0},
      {"num_accepted", &a.num_accepted, kIndex},
  };
}

// Faults of the replay structs' own fields.
template <typename Args>
void replay_struct_fault(Bytes& in, Trial& tr, Args& a, ssu_state_pool_t& pool,
                         ssu_replay_ring_t& ring, uint32_t known_flags, uint64_t* spare,
                         bool stochastic, ssu_dtype_t state) {
  switch (in.below(7)) {
    case 0:
      struct_size_fault(in, tr, "args", &a.struct_size, uint32_t(sizeof a), uint32_t(sizeof a), true, false);
      break;
    case 1:
      if (in.flip()) {
        struct_size_fault(in, tr, "ring", &ring.struct_size, uint32_t(sizeof ring),
                          uint32_t(sizeof ring), true, false);
      } else {
        ring.reserved0 = 1 + uint32_t(in.below(9));
        tr.refuse("ring->reserved0 = " + std::to_string(ring.reserved0));
      }
      break;
    case 2:
      if (in.flip()) {
        pool.reserved0 = 1;
        tr.refuse("pool->reserved0 = 1");
      } else {
        a.reserved1 = 1 + uint32_t(in.below(9));
        tr.refuse("args->reserved1 = " + std::to_string(a.reserved1));
      }
      break;
    case 3: {
      uint32_t f = 1u << in.below(32);
      while (f & known_flags) f <<= 1;
      if (!f) f = 0x80000000u;
      a.flags |= f;
      tr.refuse("flags |= " + std::to_string(f) + " (unknown)");
      break;
    }
    case 4:
      if (stochastic) {
        if (in.flip()) {
          a.rounding_seed = nullptr;
          if (tr.at_execute) tr.refuse("rounding_seed = NULL for a plan that rounds stochastically");
          else tr.keep("rounding_seed = NULL (a plan that rounds to nearest)");
        } else {
          a.rounding_rounds = 33 + uint32_t(in.below(99));
          tr.refuse("rounding_rounds = " + std::to_string(a.rounding_rounds));
        }
      } else if (in.flip()) {
        a.rounding_rounds = 1 + uint32_t(in.below(32));
        tr.refuse("rounding_rounds = " + std::to_string(a.rounding_rounds) + " without a seed");
      } else if (!rounds_stochastically(state)) {
        // "As for the update, refused for i8" (ssu.h), and for f32 and i16:
        // no plan of these states rounds stochastically, so the flush op,
        // which takes a seed exactly when its plan does, refuses it too.
        a.rounding_seed = spare;
        tr.refuse(std::string("rounding_seed with a ") + ssu_dtype_name(state) + " checkpoint");
      } else {
        a.rounding_seed = spare;
        tr.either("rounding_seed given");
        tr.plan_only("(a call of another kind than the plan's)");
      }
      break;
    case 5:
      if (!a.pool || !a.ring) break;
      if (in.flip()) {
        a.pool = nullptr;
        tr.refuse("args->pool = NULL");
      } else {
        a.ring = nullptr;
        tr.refuse("args->ring = NULL");
      }
      break;
    default:
      if (in.flip()) {
        pool.state_scale = pool.state_scale.data ? ssu_tensor_t{} : pool.state;
        tr.refuse(pool.state_scale.data ? "state_scale given with a float state"
                                        : std::string("state_scale dropped from a block-scaled (") +
                                              ssu_dtype_name(state) + ") state");
      } else {
        a.error_word = reinterpret_cast<uint32_t*>(spare);
        tr.keep("error_word given (the CPU backend ignores it)");
        tr.no_execute = true;  // the harness judges executes only through its loop
      }
      break;
  }
  if (!tr.must_fail && !tr.no_execute) tr.plan_only("(replay calls are judged in the harness's loop)");
}

void fuzz_replay(Bytes& in, Trial& tr, ssu_context_t ctx, bool flush) {
  const ReplayCase c = decode_replay(in);
  tr.state = c.state;
  tr.description = describe(c) + tr.description;
  HostMemory mem;
  const int mode = int(in.below(100));
  if (!flush && mode < 60) {
    // The harness's decode loop, plain or with a data fault in one step or
    // in the flush op: the CPU backend must refuse that call, nothing
    // written, and the loop then goes on without it.
    ReplayOptions o;
    if (mode >= 35) {
      std::vector<ReplayFault> faults = {ReplayFault::CountersOutOfRange};
      if (c.index != SSU_DTYPE_INVALID) faults.push_back(ReplayFault::SlotOutOfRange);
      if (c.speculative) faults.push_back(ReplayFault::AcceptedAbovePending);
      if (c.form == Form::Varlen) faults.push_back(ReplayFault::SeqlenAboveT);
      o.fault = faults[size_t(in.below(int64_t(faults.size())))];
      o.fault_step = int(in.below(c.steps + (o.fault == ReplayFault::SeqlenAboveT ? 0 : 1)));
      tr.note(std::string("[must be refused] replay fault ") + std::to_string(int(o.fault)) +
              " at step " + std::to_string(o.fault_step));
    }
    if (g_verbose) std::printf("%s: %s\n", operation_name(tr.op), tr.description.c_str());
    const ReplayResult r = run_replay_case(ctx, mem, c, o);
    if (!r.ok) {
      if (o.fault != ReplayFault::None && r.message.find("does not apply") != std::string::npos) {
        ++g_stats.not_applicable;
        return;
      }
      violation(tr, r.message);
    }
    ++g_stats.succeeded;
    return;
  }
  ReplayProblem p(c, mem);
  p.prepare_step();
  ssu_state_pool_t pool = *p.pool();
  ssu_replay_ring_t ring = *p.ring();
  uint64_t spare[4] = {0, 0, 0, 0};
  const Judges j{[&]() -> CheckResult {
                   throw std::logic_error("a replay call outside the harness's loop succeeded");
                 },
                 [&] { return p.check_unchanged(); }};
  const bool scaled = block_scaled(c.state);
  const ssu_replay_args_t good = p.args();
  if (!flush) {
    ssu_replay_args_t bad = good;
    bad.pool = &pool;
    bad.ring = &ring;
    tr.at_execute = in.percent(30);
    if (mode < 85) descriptor_fault(in, tr, replay_fields(bad, pool, ring, scaled), false);
    else if (mode < 95) replay_struct_fault(in, tr, bad, pool, ring,
                                            SSU_UPDATE_DT_SOFTPLUS | SSU_UPDATE_DISABLE_STATE_UPDATE,
                                            spare, c.stochastic, c.state);
    else call_fault(in, tr);
    if (!tr.must_fail) tr.no_execute = true;
    run_trial(tr, in, ctx, Api<ssu_replay_args_t>{ssu_plan_create_replay, ssu_plan_execute_replay},
              good, bad, j);
    return;
  }
  // The flush op runs with a plan made from the step's arguments.
  p.prepare_flush();
  const ssu_replay_flush_args_t fgood = p.flush_args();
  ssu_replay_flush_args_t fbad = fgood;
  fbad.pool = &pool;
  fbad.ring = &ring;
  tr.at_execute = true;  // the flush op's arguments only ever meet an execute
  if (mode < 70) descriptor_fault(in, tr, flush_fields(fbad, pool, ring, scaled), false);
  else if (mode < 90) replay_struct_fault(in, tr, fbad, pool, ring, 0u, spare, c.stochastic, c.state);
  else {
    switch (in.below(3)) {
      case 0: tr.null_plan = true; tr.refuse("plan = NULL"); break;
      case 1: tr.foreign_plan = true; tr.refuse("a plan of another operation"); break;
      default: tr.null_args = true; tr.refuse("args = NULL"); break;
    }
  }
  if (!tr.must_fail) {
    // A fault the flush op may accept: an accepted flush op is judged in
    // the harness's loop only.
    ++g_stats.not_applicable;
    return;
  }
  if (g_verbose) std::printf("%s: %s\n", operation_name(tr.op), tr.description.c_str());
  ssu_plan_t plan = nullptr;
  if (ssu_plan_create_replay(ctx, &good, nullptr, &plan) != SSU_SUCCESS)
    violation(tr, std::string("a replay plan of the harness's arguments: ") + ssu_last_error_message());
  ssu_plan_t exec = tr.null_plan ? nullptr : tr.foreign_plan ? shared().foreign(kReplayFlush, in) : plan;
  const ssu_status_t st = ssu_plan_execute_replay_flush(exec, tr.null_args ? nullptr : &fbad, nullptr);
  const std::string msg = st == SSU_SUCCESS ? "" : ssu_last_error_message();
  ssu_plan_destroy(plan);
  if (st == SSU_SUCCESS) violation(tr, "the flush op succeeded although it breaks a documented rule");
  judge_refusal(tr, j, "the flush op", st, msg);
}

}  // namespace

const Stats& stats() { return g_stats; }
void set_verbose(bool verbose) { g_verbose = verbose; }

const char* operation_name(int operation) {
  switch (operation) {
    case kUpdate: return "update";
    case kStep: return "mamba3_step";
    case kRotary: return "mamba3_rotary";
    case kReplay: return "replay";
    case kReplayFlush: return "replay_flush";
    default: return "?";
  }
}

}  // namespace ssufuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ssufuzz;
  g_data = data;
  g_size = size;
  Bytes in(data, size);
  static const bool callback_set = [] {
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(print_current);
    return true;
  }();
  (void)callback_set;
  Trial tr;
  g_current = &tr;
  struct Clear {
    ~Clear() { g_current = nullptr; }
  } clear_current;
  tr.op = Operation(in.below(100) < 40 ? kUpdate : Operation(in.below(kOperations)));
  ++g_stats.inputs;
  ++g_stats.by_operation[tr.op];
  ssu_context_t ctx = in.percent(25) ? shared().one_thread : shared().two_threads;
  const int64_t succeeded_before = g_stats.succeeded;
  struct CountState {
    const Trial& tr;
    int64_t before;
    ~CountState() {
      if (tr.state == SSU_DTYPE_INVALID) return;
      Stats::PerState& s = g_stats.by_state[tr.state];
      ++s.inputs;
      s.succeeded += g_stats.succeeded - before;
    }
  } count_state{tr, succeeded_before};
  try {
    switch (tr.op) {
      case kUpdate: fuzz_update(in, tr, ctx); break;
      case kStep: fuzz_step(in, tr, ctx); break;
      case kRotary: fuzz_rotary(in, tr, ctx); break;
      case kReplay: fuzz_replay(in, tr, ctx, false); break;
      case kReplayFlush: fuzz_replay(in, tr, ctx, true); break;
    }
  } catch (const std::exception& e) {
    if (tr.unsupported_sizes && !tr.built) {
      ++g_stats.not_applicable;
      return 0;
    }
    violation(tr, std::string("exception in the harness: ") + e.what());
  }
  return 0;
}
