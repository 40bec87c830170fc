// The non-numeric API: versions, status and dtype helpers, contexts, plans,
// struct versioning, thread safety and the per-thread error message.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

using namespace ssutest;

namespace {

ssu_context_t cpu_context(int threads) {
  ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
  o.backend = SSU_BACKEND_CPU;
  o.num_threads = threads;
  ssu_context_t ctx = nullptr;
  const ssu_status_t st = ssu_context_create(&o, &ctx);
  REQUIRE_MESSAGE(st == SSU_SUCCESS, std::string(ssu_last_error_message()));
  REQUIRE(ctx != nullptr);
  return ctx;
}

struct CpuContext {
  ssu_context_t ctx;
  explicit CpuContext(int threads = 2) : ctx(cpu_context(threads)) {}
  ~CpuContext() { ssu_context_destroy(ctx); }
};

const ssu_context_t kSentinelContext = reinterpret_cast<ssu_context_t>(uintptr_t(0x5c5c5c5c));
const ssu_plan_t kSentinelPlan = reinterpret_cast<ssu_plan_t>(uintptr_t(0x5d5d5d5d));

UpdateCase small_case(uint64_t seed) {
  UpdateCase c;
  c.tag = "api";
  c.multi(2);
  c.shape(4, 2, 64, 16);
  c.batch = 3;
  c.has_dst = true;
  c.pad = Pad::Negative;
  c.dtypes(SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F32);
  c.seed = seed;
  return c;
}

const ssu_status_t kAllStatuses[] = {
    SSU_SUCCESS,
    SSU_ERROR_INVALID_ARGUMENT, SSU_ERROR_NULL_POINTER, SSU_ERROR_BAD_RANK,
    SSU_ERROR_BAD_SHAPE, SSU_ERROR_BAD_STRIDE, SSU_ERROR_BAD_DTYPE,
    SSU_ERROR_DTYPE_MISMATCH, SSU_ERROR_INDEX_OUT_OF_RANGE, SSU_ERROR_SEQLEN_OUT_OF_RANGE,
    SSU_ERROR_INCOMPATIBLE_OPTIONS, SSU_ERROR_UNKNOWN_FLAG, SSU_ERROR_STRUCT_SIZE,
    SSU_ERROR_PLAN_MISMATCH, SSU_ERROR_BAD_HANDLE,
    SSU_ERROR_NOT_SUPPORTED, SSU_ERROR_BACKEND_UNAVAILABLE, SSU_ERROR_ALGORITHM_UNAVAILABLE,
    SSU_ERROR_DRIVER_NOT_FOUND, SSU_ERROR_DRIVER_TOO_OLD, SSU_ERROR_NO_DEVICE,
    SSU_ERROR_DEVICE_UNSUPPORTED, SSU_ERROR_CUDA,
    SSU_ERROR_OUT_OF_MEMORY, SSU_ERROR_RESOURCES,
    SSU_ERROR_INTERNAL,
    SSU_ERROR_VERSION,
};

}  // namespace

// ---------------------------------------------------------------------------
TEST_CASE("api: version macros agree with the library") {
  CHECK(SSU_VERSION == SSU_VERSION_MAJOR * 10000 + SSU_VERSION_MINOR * 100 + SSU_VERSION_PATCH);
  CHECK(ssu_version() == uint32_t(SSU_VERSION));
  char want[32];
  std::snprintf(want, sizeof want, "%d.%d.%d", SSU_VERSION_MAJOR, SSU_VERSION_MINOR,
                SSU_VERSION_PATCH);
  REQUIRE(ssu_version_string() != nullptr);
  CHECK(std::string(ssu_version_string()) == want);
}

TEST_CASE("api: status strings and families") {
  std::set<std::string> seen;
  for (ssu_status_t s : kAllStatuses) {
    const char* text = ssu_status_string(s);
    REQUIRE(text != nullptr);
    INFO("status " << s << " -> '" << text << "'");
    CHECK(std::strlen(text) > 0);
    CHECK(std::string(text) != "unknown status");
    CHECK(seen.insert(text).second);  // every code has its own text
    CHECK(SSU_STATUS_FAMILY(s) == s / 100);
  }
  CHECK(SSU_STATUS_FAMILY(SSU_SUCCESS) == 0);
  CHECK(SSU_STATUS_FAMILY(SSU_ERROR_BAD_HANDLE) == 1);
  CHECK(SSU_STATUS_FAMILY(SSU_ERROR_ALGORITHM_UNAVAILABLE) == 2);
  CHECK(SSU_STATUS_FAMILY(SSU_ERROR_CUDA) == 3);
  CHECK(SSU_STATUS_FAMILY(SSU_ERROR_RESOURCES) == 4);
  CHECK(SSU_STATUS_FAMILY(SSU_ERROR_INTERNAL) == 5);
  CHECK(SSU_STATUS_FAMILY(SSU_ERROR_VERSION) == 6);
  for (ssu_status_t s : {-1, 1, 99, 114, 150, 199, 203, 305, 402, 501, 601, 700, 100000,
                         int32_t(0x7fffffff), int32_t(-0x7fffffff - 1)}) {
    const char* text = ssu_status_string(s);
    REQUIRE(text != nullptr);
    CHECK_MESSAGE(std::string(text) == "unknown status", "status " << s << " -> " << text);
  }
}

TEST_CASE("api: dtype helpers") {
  CHECK(ssu_dtype_size(SSU_DTYPE_F32) == 4);
  CHECK(ssu_dtype_size(SSU_DTYPE_F16) == 2);
  CHECK(ssu_dtype_size(SSU_DTYPE_BF16) == 2);
  CHECK(ssu_dtype_size(SSU_DTYPE_I16) == 2);
  CHECK(ssu_dtype_size(SSU_DTYPE_I32) == 4);
  CHECK(ssu_dtype_size(SSU_DTYPE_I64) == 8);
  CHECK(ssu_dtype_size(SSU_DTYPE_I8) == 1);
  CHECK(ssu_dtype_size(SSU_DTYPE_F8E4M3) == 1);
  CHECK(ssu_dtype_size(SSU_DTYPE_INVALID) == 0);
  CHECK(ssu_dtype_size(9) == 0);
  CHECK(ssu_dtype_size(-1) == 0);
  CHECK(std::string(ssu_dtype_name(SSU_DTYPE_F32)) == "f32");
  CHECK(std::string(ssu_dtype_name(SSU_DTYPE_F16)) == "f16");
  CHECK(std::string(ssu_dtype_name(SSU_DTYPE_BF16)) == "bf16");
  CHECK(std::string(ssu_dtype_name(SSU_DTYPE_I8)) == "i8");
  CHECK(std::string(ssu_dtype_name(SSU_DTYPE_F8E4M3)) == "f8e4m3");
  // Existing values are never renumbered; the 8-bit formats were appended.
  CHECK(SSU_DTYPE_I64 == 6);
  CHECK(SSU_DTYPE_I8 == 7);
  CHECK(SSU_DTYPE_F8E4M3 == 8);
  std::set<std::string> names;
  for (ssu_dtype_t d : {SSU_DTYPE_F32, SSU_DTYPE_F16, SSU_DTYPE_BF16, SSU_DTYPE_I16,
                        SSU_DTYPE_I32, SSU_DTYPE_I64, SSU_DTYPE_I8, SSU_DTYPE_F8E4M3}) {
    REQUIRE(ssu_dtype_name(d) != nullptr);
    CHECK(std::string(ssu_dtype_name(d)) != "invalid");
    CHECK(names.insert(ssu_dtype_name(d)).second);
  }
  CHECK(std::string(ssu_dtype_name(SSU_DTYPE_INVALID)) == "invalid");
  CHECK(std::string(ssu_dtype_name(9)) == "invalid");
  CHECK(std::string(ssu_dtype_name(-3)) == "invalid");
  CHECK(std::string(ssu_backend_name(SSU_BACKEND_CPU)) == "cpu");
  CHECK(std::string(ssu_backend_name(SSU_BACKEND_CUDA)) == "cuda");
  CHECK(std::string(ssu_backend_name(SSU_BACKEND_AUTO)) == "auto");
  CHECK(std::string(ssu_backend_name(3)) == "invalid");
  CHECK(std::string(ssu_backend_name(-1)) == "invalid");
}

// ---------------------------------------------------------------------------
TEST_CASE("api: CPU contexts") {
  for (int threads : {1, 2, 0}) {
    CAPTURE(threads);
    ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
    o.backend = SSU_BACKEND_CPU;
    o.num_threads = threads;
    ssu_context_t ctx = nullptr;
    REQUIRE(ssu_context_create(&o, &ctx) == SSU_SUCCESS);
    CHECK(std::string(ssu_last_error_message()).empty());
    ssu_backend_t b = SSU_BACKEND_AUTO;
    CHECK(ssu_context_get_backend(ctx, &b) == SSU_SUCCESS);
    CHECK(b == SSU_BACKEND_CPU);
    const char* name = ssu_context_device_name(ctx);
    REQUIRE(name != nullptr);
    CHECK(std::string(name).find("cpu") != std::string::npos);
    CHECK(ssu_context_destroy(ctx) == SSU_SUCCESS);
  }
  CHECK(ssu_context_destroy(nullptr) == SSU_SUCCESS);
  CHECK(ssu_plan_destroy(nullptr) == SSU_SUCCESS);
}

TEST_CASE("api: default and AUTO contexts run somewhere") {
  ssu_context_t ctx = nullptr;
  REQUIRE_MESSAGE(ssu_context_create(nullptr, &ctx) == SSU_SUCCESS, std::string(ssu_last_error_message()));
  ssu_backend_t b = SSU_BACKEND_AUTO;
  CHECK(ssu_context_get_backend(ctx, &b) == SSU_SUCCESS);
  CHECK((b == SSU_BACKEND_CPU || b == SSU_BACKEND_CUDA));  // never AUTO
  CHECK(ssu_context_destroy(ctx) == SSU_SUCCESS);
}

TEST_CASE("api: context creation errors leave the out-parameter alone") {
  struct Bad {
    const char* what;
    ssu_context_options_t o;
    std::vector<ssu_status_t> codes;
  };
  std::vector<Bad> bad;
  {
    ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
    o.backend = 7;
    bad.push_back({"unknown backend", o, {SSU_ERROR_INVALID_ARGUMENT}});
    o = SSU_CONTEXT_OPTIONS_INIT;
    o.backend = SSU_BACKEND_CPU;
    o.num_threads = -1;
    bad.push_back({"negative num_threads", o, {SSU_ERROR_INVALID_ARGUMENT}});
    o = SSU_CONTEXT_OPTIONS_INIT;
    o.backend = SSU_BACKEND_CPU;
    o.device_ordinal = 1;
    bad.push_back({"CPU device_ordinal != 0", o, {SSU_ERROR_INVALID_ARGUMENT, SSU_ERROR_NO_DEVICE}});
    o = SSU_CONTEXT_OPTIONS_INIT;
    o.struct_size = 0;
    bad.push_back({"struct_size 0", o, {SSU_ERROR_STRUCT_SIZE}});
    o = SSU_CONTEXT_OPTIONS_INIT;
    o.struct_size = 4;
    bad.push_back({"struct_size 4", o, {SSU_ERROR_STRUCT_SIZE}});
  }
  for (const Bad& b : bad) {
    CAPTURE(std::string(b.what));
    ssu_context_t ctx = kSentinelContext;
    const ssu_status_t st = ssu_context_create(&b.o, &ctx);
    CHECK_MESSAGE(std::find(b.codes.begin(), b.codes.end(), st) != b.codes.end(),
                  "status " << st << " (" << std::string(ssu_status_string(st)) << ")");
    CHECK(ctx == kSentinelContext);
    CHECK(std::strlen(ssu_last_error_message()) > 0);
  }
  CHECK(ssu_context_create(nullptr, nullptr) == SSU_ERROR_NULL_POINTER);
  CHECK(std::strlen(ssu_last_error_message()) > 0);
  ssu_backend_t b = 99;
  CHECK(ssu_context_get_backend(nullptr, &b) == SSU_ERROR_BAD_HANDLE);
  CHECK(b == 99);
  CpuContext c;
  CHECK(ssu_context_get_backend(c.ctx, nullptr) == SSU_ERROR_NULL_POINTER);
}

TEST_CASE("api: the CUDA backend is refused cleanly where it cannot run") {
  ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
  o.backend = SSU_BACKEND_CUDA;
  ssu_context_t ctx = kSentinelContext;
  const ssu_status_t st = ssu_context_create(&o, &ctx);
  if (st == SSU_SUCCESS) {
    // A machine with a GPU and a CUDA build: nothing to check here.
    ssu_backend_t b = SSU_BACKEND_AUTO;
    CHECK(ssu_context_get_backend(ctx, &b) == SSU_SUCCESS);
    CHECK(b == SSU_BACKEND_CUDA);
    ssu_context_destroy(ctx);
    MESSAGE("a CUDA device is usable here; the refusal path was not exercised");
    return;
  }
  INFO("status " << st << " (" << std::string(ssu_status_string(st)) << "): " << std::string(ssu_last_error_message()));
  CHECK((SSU_STATUS_FAMILY(st) == 3 || st == SSU_ERROR_BACKEND_UNAVAILABLE));
  CHECK(ctx == kSentinelContext);
  CHECK(std::strlen(ssu_last_error_message()) > 0);

  // A device ordinal that cannot exist is refused too.
  o.device_ordinal = 4096;
  ctx = kSentinelContext;
  const ssu_status_t st2 = ssu_context_create(&o, &ctx);
  CHECK(st2 != SSU_SUCCESS);
  CHECK(ctx == kSentinelContext);
}

// ---------------------------------------------------------------------------
TEST_CASE("api: plan info and pinned algorithms") {
  CpuContext c;
  HostMemory mem;
  UpdateProblem p(small_case(11), mem);
  const ssu_update_args_t args = p.args();

  ssu_plan_t plan = nullptr;
  REQUIRE_MESSAGE(ssu_plan_create_update(c.ctx, &args, nullptr, &plan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));
  ssu_plan_info_t info = SSU_PLAN_INFO_INIT;
  REQUIRE(ssu_plan_get_info(plan, &info) == SSU_SUCCESS);
  CHECK(info.backend == SSU_BACKEND_CPU);
  CHECK(info.algorithm == SSU_ALGORITHM_CPU_ROWS);  // AUTO resolves to a concrete one
  REQUIRE(info.algorithm_name != nullptr);
  CHECK(std::strlen(info.algorithm_name) > 0);

  // Bad info arguments leave *info alone.
  ssu_plan_info_t small;
  std::memset(&small, 0x77, sizeof small);
  small.struct_size = 0;
  CHECK(ssu_plan_get_info(plan, &small) == SSU_ERROR_STRUCT_SIZE);
  CHECK(small.backend == 0x77777777);
  CHECK(ssu_plan_get_info(plan, nullptr) == SSU_ERROR_NULL_POINTER);
  ssu_plan_info_t untouched = SSU_PLAN_INFO_INIT;
  untouched.backend = 55;
  CHECK(ssu_plan_get_info(nullptr, &untouched) == SSU_ERROR_BAD_HANDLE);
  CHECK(untouched.backend == 55);
  ssu_plan_destroy(plan);

  // Pinning the CPU algorithm works; a CUDA algorithm is unavailable here.
  ssu_plan_options_t po = SSU_PLAN_OPTIONS_INIT;
  po.algorithm = SSU_ALGORITHM_CPU_ROWS;
  plan = nullptr;
  REQUIRE(ssu_plan_create_update(c.ctx, &args, &po, &plan) == SSU_SUCCESS);
  info = SSU_PLAN_INFO_INIT;
  REQUIRE(ssu_plan_get_info(plan, &info) == SSU_SUCCESS);
  CHECK(info.algorithm == SSU_ALGORITHM_CPU_ROWS);
  REQUIRE(ssu_plan_execute_update(plan, &args, nullptr) == SSU_SUCCESS);
  const CheckResult r = p.check();
  CHECK_MESSAGE(r.ok, r.message);
  ssu_plan_destroy(plan);

  for (ssu_algorithm_t a : {SSU_ALGORITHM_CUDA_SIMPLE, SSU_ALGORITHM_CUDA_PIPELINED,
                            SSU_ALGORITHM_CUDA_REPLAY}) {
    po.algorithm = a;
    plan = kSentinelPlan;
    CHECK(ssu_plan_create_update(c.ctx, &args, &po, &plan) == SSU_ERROR_ALGORITHM_UNAVAILABLE);
    CHECK(plan == kSentinelPlan);
    CHECK(std::strlen(ssu_last_error_message()) > 0);
  }
  po = SSU_PLAN_OPTIONS_INIT;
  po.struct_size = 0;
  CHECK(ssu_plan_create_update(c.ctx, &args, &po, &plan) == SSU_ERROR_STRUCT_SIZE);
  CHECK(plan == kSentinelPlan);
}

TEST_CASE("api: plan flags: SSU_PLAN_PDL, unknown bits refused, 0.3's options size still read") {
  CpuContext c;
  HostMemory mem;
  UpdateProblem p(small_case(13), mem);
  const ssu_update_args_t args = p.args();
  // SSU_PLAN_PDL has no effect on the CPU backend: the plan runs as usual.
  ssu_plan_options_t po = SSU_PLAN_OPTIONS_INIT;
  po.flags = SSU_PLAN_PDL;
  ssu_plan_t plan = nullptr;
  REQUIRE_MESSAGE(ssu_plan_create_update(c.ctx, &args, &po, &plan) == SSU_SUCCESS,
                  ssu_last_error_message());
  REQUIRE(ssu_plan_execute_update(plan, &args, nullptr) == SSU_SUCCESS);
  CheckResult r = p.check();
  CHECK_MESSAGE(r.ok, r.message);
  ssu_plan_destroy(plan);
  // Bits ssu.h does not define: refused, no plan.
  for (uint32_t bad : {0x2u, 0x80000000u, 0x3u}) {
    CAPTURE(bad);
    po.flags = bad;
    plan = kSentinelPlan;
    CHECK(ssu_plan_create_update(c.ctx, &args, &po, &plan) == SSU_ERROR_UNKNOWN_FLAG);
    CHECK(plan == kSentinelPlan);
    CHECK(std::strstr(ssu_last_error_message(), "flags") != nullptr);
  }
  // A caller built against 0.3's header passes 8 bytes (no flags): read, flags 0.
  struct OldOptions {
    uint32_t struct_size;
    ssu_algorithm_t algorithm;
  } old = {sizeof(OldOptions), SSU_ALGORITHM_AUTO};
  static_assert(sizeof(OldOptions) == 8, "0.3's ssu_plan_options_t");
  plan = nullptr;
  p.reset();
  REQUIRE(ssu_plan_create_update(c.ctx, &args, reinterpret_cast<const ssu_plan_options_t*>(&old),
                                 &plan) == SSU_SUCCESS);
  REQUIRE(ssu_plan_execute_update(plan, &args, nullptr) == SSU_SUCCESS);
  r = p.check();
  CHECK_MESSAGE(r.ok, r.message);
  ssu_plan_destroy(plan);
  // Below the old layout, or ending inside `flags`: refused.
  struct Padded {
    OldOptions o;
    uint32_t tail;
  } padded = {old, 0};
  for (uint32_t size : {7u, 9u, 11u}) {
    CAPTURE(size);
    padded.o.struct_size = size;
    plan = kSentinelPlan;
    CHECK(ssu_plan_create_update(c.ctx, &args, reinterpret_cast<const ssu_plan_options_t*>(&padded),
                                 &plan) == SSU_ERROR_STRUCT_SIZE);
    CHECK(plan == kSentinelPlan);
  }
}

TEST_CASE("api: algorithm values ssu.h does not define are refused") {
  // 3 was SSU_ALGORITHM_CUDA_TMA until 0.2; 0.3 removed it, and a program
  // built against the old header that still pins it must get the refusal
  // any other unknown value gets, from every operation, with no plan.
  CpuContext c;
  HostMemory mem;
  UpdateProblem p(small_case(12), mem);
  const ssu_update_args_t args = p.args();
  for (ssu_algorithm_t a : {3, 6, 99, -1, INT32_MIN}) {
    CAPTURE(a);
    ssu_plan_options_t po = SSU_PLAN_OPTIONS_INIT;
    po.algorithm = a;
    ssu_plan_t plan = kSentinelPlan;
    CHECK(ssu_plan_create_update(c.ctx, &args, &po, &plan) == SSU_ERROR_ALGORITHM_UNAVAILABLE);
    CHECK(plan == kSentinelPlan);
    const std::string msg = ssu_last_error_message();
    CHECK_MESSAGE(msg.find("algorithm=" + std::to_string(a) + " is not an algorithm") !=
                      std::string::npos, msg);
    // The other operations read their options the same way, before their
    // arguments, so NULL arguments still get the algorithm's refusal.
    plan = kSentinelPlan;
    CHECK(ssu_plan_create_mamba3_step(c.ctx, nullptr, &po, &plan) ==
          SSU_ERROR_ALGORITHM_UNAVAILABLE);
    CHECK(ssu_plan_create_mamba3_rotary(c.ctx, nullptr, &po, &plan) ==
          SSU_ERROR_ALGORITHM_UNAVAILABLE);
    CHECK(ssu_plan_create_replay(c.ctx, nullptr, &po, &plan) == SSU_ERROR_ALGORITHM_UNAVAILABLE);
    CHECK(plan == kSentinelPlan);
  }
}

TEST_CASE("api: the message is empty after a successful call") {
  CHECK(ssu_plan_create_update(nullptr, nullptr, nullptr, nullptr) != SSU_SUCCESS);
  CHECK(std::strlen(ssu_last_error_message()) > 0);
  CpuContext c;
  CHECK(std::string(ssu_last_error_message()).empty());
}

TEST_CASE("api: one plan serves many calls with different batches and pools") {
  CpuContext c;
  HostMemory mem;
  UpdateProblem first(small_case(100), mem);
  const ssu_update_args_t a0 = first.args();
  ssu_plan_t plan = nullptr;
  REQUIRE(ssu_plan_create_update(c.ctx, &a0, nullptr, &plan) == SSU_SUCCESS);
  int failures = 0;
  for (int i = 0; i < 40; ++i) {
    UpdateCase uc = small_case(200 + uint64_t(i));
    uc.batch = 1 + i % 7;
    uc.extra_slots = i % 5;
    uc.layout = (i % 3 == 0) ? kDense : (i % 3 == 1) ? kPadded : (kOddPadded | kTransposed);
    UpdateProblem p(uc, mem);
    const ssu_update_args_t a = p.args();
    const ssu_status_t st = ssu_plan_execute_update(plan, &a, nullptr);
    if (st != SSU_SUCCESS) {
      ++failures;
      FAIL_CHECK("iteration " << i << ": " << st << " " << std::string(ssu_last_error_message()));
      continue;
    }
    const CheckResult r = p.check();
    if (!r.ok) {
      ++failures;
      FAIL_CHECK("iteration " << i << ": " << r.message);
    }
  }
  CHECK(failures == 0);
  ssu_plan_destroy(plan);
}

TEST_CASE("api: a decode loop: the same buffers, new slot tables, one plan") {
  CpuContext c;
  HostMemory mem;
  UpdateCase uc = small_case(600);
  uc.single();
  uc.has_dst = false;
  uc.pad = Pad::None;
  uc.batch = 4;
  uc.extra_slots = 4;  // 8 slots for 4 sequences
  UpdateProblem p(uc, mem);
  const ssu_update_args_t a = p.args();
  ssu_plan_t plan = nullptr;
  REQUIRE(ssu_plan_create_update(c.ctx, &a, nullptr, &plan) == SSU_SUCCESS);
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    // Sequences move between slots (as a serving engine reorders its batch);
    // one of them is padding now and then.
    for (int64_t b = 0; b < uc.batch; ++b) {
      const int64_t slot = (b * 3 + step) % p.slots();
      p.poke_index("src_index", b, (step % 3 == 2 && b == 1) ? -1 : slot);
    }
    p.reset();
    REQUIRE(ssu_plan_execute_update(plan, &a, nullptr) == SSU_SUCCESS);
    const CheckResult r = p.check();
    CHECK_MESSAGE(r.ok, r.message);
  }
  ssu_plan_destroy(plan);
}

TEST_CASE("api: one plan used from two threads at once") {
  CpuContext c;
  HostMemory mem;
  UpdateProblem first(small_case(300), mem);
  const ssu_update_args_t a0 = first.args();
  ssu_plan_t plan = nullptr;
  REQUIRE(ssu_plan_create_update(c.ctx, &a0, nullptr, &plan) == SSU_SUCCESS);
  std::atomic<int> failures{0};
  std::vector<std::string> first_failure(2);
  auto worker = [&](int id) {
    for (int i = 0; i < 25; ++i) {
      UpdateCase uc = small_case(1000 + uint64_t(id) * 100 + uint64_t(i));
      uc.batch = 2 + (i + id) % 5;
      UpdateProblem p(uc, mem);
      const ssu_update_args_t a = p.args();
      const ssu_status_t st = ssu_plan_execute_update(plan, &a, nullptr);
      CheckResult r;
      if (st != SSU_SUCCESS) {
        r.ok = false;
        r.message = std::string("execute failed: ") + ssu_last_error_message();
      } else {
        r = p.check();
      }
      if (!r.ok && failures++ == 0) first_failure[size_t(id)] = r.message;
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  CHECK_MESSAGE(failures.load() == 0, first_failure[0] << first_failure[1]);
  ssu_plan_destroy(plan);
}

// ---------------------------------------------------------------------------
TEST_CASE("api: structs from a newer header (larger struct_size, zero tail) are accepted") {
  CpuContext c;
  HostMemory mem;
  UpdateProblem p(small_case(400), mem);

  struct NewerArgs {
    ssu_update_args_t a;
    uint64_t tail[4];
  } na;
  std::memset(&na, 0, sizeof na);
  na.a = p.args();
  na.a.struct_size = uint32_t(sizeof na);
  struct NewerPool {
    ssu_state_pool_t pool;
    uint64_t tail[4];
  } np;
  std::memset(&np, 0, sizeof np);
  np.pool = *p.pool();
  np.pool.struct_size = uint32_t(sizeof np);
  na.a.pool = &np.pool;
  struct NewerPlanOptions {
    ssu_plan_options_t o;
    uint64_t tail[2];
  } npo;
  std::memset(&npo, 0, sizeof npo);
  npo.o.struct_size = uint32_t(sizeof npo);

  ssu_plan_t plan = nullptr;
  REQUIRE_MESSAGE(ssu_plan_create_update(c.ctx, &na.a, &npo.o, &plan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));
  REQUIRE_MESSAGE(ssu_plan_execute_update(plan, &na.a, nullptr) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));
  const CheckResult r = p.check();
  CHECK_MESSAGE(r.ok, r.message);

  // An output struct: the library writes only the fields it knows.
  struct NewerInfo {
    ssu_plan_info_t info;
    uint8_t tail[16];
  } ni;
  std::memset(&ni, 0, sizeof ni);
  std::memset(ni.tail, 0xab, sizeof ni.tail);
  ni.info.struct_size = uint32_t(sizeof ni);
  REQUIRE(ssu_plan_get_info(plan, &ni.info) == SSU_SUCCESS);
  CHECK(ni.info.backend == SSU_BACKEND_CPU);
  for (uint8_t v : ni.tail) CHECK(v == 0xab);
  ssu_plan_destroy(plan);

  struct NewerContextOptions {
    ssu_context_options_t o;
    uint64_t tail[3];
  } nco;
  std::memset(&nco, 0, sizeof nco);
  nco.o.struct_size = uint32_t(sizeof nco);
  nco.o.backend = SSU_BACKEND_CPU;
  nco.o.num_threads = 1;
  ssu_context_t ctx = nullptr;
  CHECK(ssu_context_create(&nco.o, &ctx) == SSU_SUCCESS);
  ssu_context_destroy(ctx);
}

TEST_CASE("api: the error message is per thread") {
  // This thread fails with a message naming `args`.
  CHECK(ssu_plan_create_update(nullptr, nullptr, nullptr, nullptr) != SSU_SUCCESS);
  const std::string mine = ssu_last_error_message();
  REQUIRE(!mine.empty());

  std::string other_error, other_after_success;
  std::thread t([&] {
    // A fresh thread starts with an empty message.
    other_after_success = ssu_last_error_message();
    ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
    o.backend = 7;
    ssu_context_t ctx = nullptr;
    (void)ssu_context_create(&o, &ctx);
    other_error = ssu_last_error_message();
  });
  t.join();
  CHECK(other_after_success.empty());
  CHECK(!other_error.empty());
  CHECK(other_error != mine);
  CHECK(std::string(ssu_last_error_message()) == mine);  // untouched by the other thread
}

TEST_CASE("api: the CPU backend ignores error_word and streams") {
  CpuContext c;
  HostMemory mem;
  UpdateProblem p(small_case(500), mem);
  ssu_update_args_t a = p.args();
  uint32_t word = 0x12345678u;
  a.error_word = &word;
  ssu_plan_t plan = nullptr;
  REQUIRE(ssu_plan_create_update(c.ctx, &a, nullptr, &plan) == SSU_SUCCESS);
  // Any stream value: the CPU backend runs synchronously and ignores it.
  REQUIRE(ssu_plan_execute_update(plan, &a, reinterpret_cast<ssu_stream_t>(uintptr_t(0x1000))) ==
          SSU_SUCCESS);
  CHECK(word == 0x12345678u);
  const CheckResult r = p.check();
  CHECK_MESSAGE(r.ok, r.message);
  ssu_plan_destroy(plan);
}

// Found by tests/fuzz: a thread's thread_local objects are destroyed before
// the program's static objects, so a context or plan released by a static
// destructor (a global that owns it) ran libssu after the calling thread's
// error message was gone. ASan (the sanitizer build of CI) reports a use
// after free if it comes back.
namespace {
struct ReleasedAtExit {
  ssu_context_t ctx = nullptr;
  ~ReleasedAtExit() {
    if (ssu_plan_create_update(ctx, nullptr, nullptr, nullptr) != SSU_ERROR_NULL_POINTER ||
        std::strlen(ssu_last_error_message()) == 0 || ssu_context_destroy(ctx) != SSU_SUCCESS ||
        ssu_last_error_message()[0] != '\0') {
      std::fprintf(stderr, "libssu calls from a static destructor failed\n");
      std::abort();
    }
  }
};
ReleasedAtExit g_released_at_exit;
}  // namespace

TEST_CASE("api: contexts and plans may be released by static destructors") {
  ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
  o.backend = SSU_BACKEND_CPU;
  o.num_threads = 1;
  REQUIRE(ssu_context_create(&o, &g_released_at_exit.ctx) == SSU_SUCCESS);
  CHECK(ssu_plan_create_update(nullptr, nullptr, nullptr, nullptr) != SSU_SUCCESS);
}
