// The Mamba-3 step and rotary step on the CPU backend: every case of the
// tables against the float64 reference, the pooled call against gather ->
// dense -> scatter, and a 2000-step rotary + step run. The GPU suite
// (tests/gpu/test_gpu_mamba3.cpp) runs the same bodies on CUDA.
//
// Environment (for reproducing a failure):
//   SSU_TEST_FILTER=<substring>  run only cases whose description contains it
//   SSU_TEST_VERBOSE=1           print every case as it runs
#include <doctest/doctest.h>

#include <string>

#include "mamba3_harness.h"

using namespace ssutest;
using namespace ssutest::m3;

namespace {

struct Context {
  ssu_context_t ctx = nullptr;
  explicit Context(int threads) {
    ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
    o.backend = SSU_BACKEND_CPU;
    o.num_threads = threads;
    const ssu_status_t st = ssu_context_create(&o, &ctx);
    REQUIRE_MESSAGE(st == SSU_SUCCESS, std::string(ssu_last_error_message()));
  }
  ~Context() { ssu_context_destroy(ctx); }
};

void report(const SuiteResult& r) {
  for (const std::string& m : r.failures) FAIL_CHECK(m);
  CHECK(r.failed == 0);
  CHECK(r.run > 0);
}

}  // namespace

TEST_CASE("cpu mamba3: every step case matches the float64 reference") {
  Context two(2), one(1);
  HostMemory mem;
  // A quarter of the cases run on the caller's thread only.
  report(run_step_table(two.ctx, mem, "cpu", one.ctx));
}

TEST_CASE("cpu mamba3: the pooled step equals gather -> dense -> scatter, bit for bit") {
  Context two(2);
  HostMemory mem;
  report(run_gather_scatter_table(two.ctx, mem, "cpu"));
}

TEST_CASE("cpu mamba3: every rotary case matches the float64 reference") {
  Context two(2), one(1);
  HostMemory mem;
  report(run_rotary_table(two.ctx, mem, "cpu", one.ctx));
}

TEST_CASE("cpu mamba3: 2000 steps of rotary + step track the float64 run") {
  Context two(2);
  HostMemory mem;
  report(run_chains(two.ctx, mem, "cpu"));
}

TEST_CASE("cpu mamba3: the case tables cover every axis value") {
  CHECK(table_coverage_problems().empty());
  for (const std::string& m : table_coverage_problems()) FAIL_CHECK(m);
}
