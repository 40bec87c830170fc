// Every case of the update table on the CPU backend, each element checked
// against the float64 reference.
//
// Environment (for reproducing a failure):
//   SSU_TEST_FILTER=<substring>  run only cases whose description contains it
//   SSU_TEST_CASE=<n>            run only case number n of the table
//   SSU_TEST_VERBOSE=1           print every case as it runs
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness.h"

using namespace ssutest;

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

}  // namespace

TEST_CASE("cpu: every update case matches the float64 reference") {
  Context two(2), one(1);
  HostMemory mem;
  const std::vector<UpdateCase> table = update_case_table();
  const char* filter = std::getenv("SSU_TEST_FILTER");
  const char* only = std::getenv("SSU_TEST_CASE");
  const bool verbose = std::getenv("SSU_TEST_VERBOSE") != nullptr;
  // SSU_TEST_EVERY=k runs every k-th case (the sanitizer build in .ci/run).
  const char* every_env = std::getenv("SSU_TEST_EVERY");
  const size_t every = every_env && std::atoi(every_env) > 1 ? size_t(std::atoi(every_env)) : 1;

  const auto t0 = std::chrono::steady_clock::now();
  int64_t run = 0, failed = 0, elements = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const UpdateCase& c = table[i];
    const std::string d = describe(c);
    if (i % every != 0) continue;
    if (only && std::to_string(i) != only) continue;
    if (filter && d.find(filter) == std::string::npos) continue;
    if (verbose) {
      std::printf("[%zu] %s\n", i, d.c_str());
      std::fflush(stdout);
    }
    // A quarter of the cases run on the caller's thread only.
    const CheckResult r = run_update_case(i % 4 == 3 ? one.ctx : two.ctx, mem, c);
    ++run;
    elements += r.elements;
    if (!r.ok) {
      ++failed;
      if (failed <= 25)
        FAIL_CHECK("case " << i << " (" << (i % 4 == 3 ? 1 : 2) << " threads) " << r.message);
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("cpu update: %lld cases run (of %zu in the table), %lld failed, %lld elements "
              "checked, %.1f s\n",
              (long long)run, table.size(), (long long)failed, (long long)elements, secs);
  CHECK(failed == 0);
  if (!filter && !only) CHECK(run == int64_t((table.size() + every - 1) / every));
}

TEST_CASE("cpu: sizes that are no multiple of anything") {
  Context two(2);
  HostMemory mem;
  const std::vector<UpdateCase> table = odd_size_case_table();
  int64_t failed = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const CheckResult r = run_update_case(two.ctx, mem, table[i]);
    if (!r.ok && ++failed <= 10) FAIL_CHECK("odd-size case " << i << " " << r.message);
  }
  std::printf("cpu odd sizes: %zu cases run, %lld failed\n", table.size(), (long long)failed);
  CHECK(failed == 0);
}

TEST_CASE("cpu: the state-bits table (every mode x every way of storing a state)") {
  Context two(2);
  HostMemory mem;
  const std::vector<UpdateCase> table = state_bits_case_table();
  int64_t failed = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const CheckResult r = run_update_case(two.ctx, mem, table[i]);
    if (!r.ok && ++failed <= 10) FAIL_CHECK("state-bits case " << i << " " << r.message);
  }
  std::printf("cpu state bits: %zu cases run, %lld failed\n", table.size(), (long long)failed);
  CHECK(failed == 0);
}

TEST_CASE("cpu: 8-bit block-scaled states (i8, f8e4m3), every mode") {
  Context two(2), one(1);
  HostMemory mem;
  const std::vector<UpdateCase> table = state8_case_table();
  const char* filter = std::getenv("SSU_TEST_FILTER");
  int64_t run = 0, failed = 0, elements = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    if (filter && describe(table[i]).find(filter) == std::string::npos) continue;
    const CheckResult r = run_update_case(i % 4 == 3 ? one.ctx : two.ctx, mem, table[i]);
    ++run;
    elements += r.elements;
    if (!r.ok && ++failed <= 10) FAIL_CHECK("8-bit case " << i << " " << r.message);
  }
  std::printf("cpu 8-bit states: %lld cases run, %lld failed, %lld elements checked\n",
              (long long)run, (long long)failed, (long long)elements);
  CHECK(failed == 0);
  // Every form and store mode, each format, with model-like and exact values.
  auto has = [&](auto pred) {
    for (const auto& c : table)
      if (pred(c)) return true;
    return false;
  };
  for (ssu_dtype_t st : {SSU_DTYPE_I8, SSU_DTYPE_F8E4M3})
    for (Form f : {Form::Single, Form::Multi, Form::Varlen})
      for (Store s : {Store::Final, Store::DstPerToken, Store::Intermediate})
        for (bool exact : {false, true})
          if (f != Form::Single || s == Store::Final)
            CHECK(has([&](const UpdateCase& c) {
              return c.state == st && c.form == f && c.store == s && c.exact_values == exact &&
                     !c.stochastic;
            }));
  for (Store s : {Store::Final, Store::DstPerToken, Store::Intermediate})
    CHECK(has([&](const UpdateCase& c) {
      return c.state == SSU_DTYPE_F8E4M3 && c.stochastic && c.exact_values && c.store == s;
    }));
}

TEST_CASE("cpu: the case table covers every axis value") {
  const std::vector<UpdateCase> table = update_case_table();
  auto has = [&](auto pred) {
    for (const auto& c : table)
      if (pred(c)) return true;
    return false;
  };
  for (int64_t N : {16, 32, 64, 96, 128, 256})
    CHECK_MESSAGE(has([&](const UpdateCase& c) { return c.N == N; }), "N=" << N);
  for (int64_t P : {64, 80, 128, 2064})
    CHECK_MESSAGE(has([&](const UpdateCase& c) { return c.P == P; }), "P=" << P);
  for (int64_t H : {1, 2, 8, 64}) {
    CHECK_MESSAGE(has([&](const UpdateCase& c) { return c.H == H; }), "H=" << H);
    CHECK_MESSAGE(has([&](const UpdateCase& c) { return c.G == H; }), "G=" << H);
  }
  for (int64_t B : {1, 3, 64})
    CHECK_MESSAGE(has([&](const UpdateCase& c) { return c.batch == B; }), "Bt=" << B);
  for (int64_t T : {1, 2, 4, 8})
    CHECK_MESSAGE(has([&](const UpdateCase& c) { return c.form != Form::Single && c.T == T; }),
                  "T=" << T);
  const ssu_dtype_t fl[] = {SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16};
  for (Form f : {Form::Single, Form::Multi, Form::Varlen})
    for (ssu_dtype_t s : fl)
      for (ssu_dtype_t in : fl)
        for (ssu_dtype_t p : fl)
          CHECK(has([&](const UpdateCase& c) {
            return c.form == f && c.state == s && c.input == in && c.dt == p && c.A == p;
          }));
  for (ssu_dtype_t idx : {SSU_DTYPE_I32, SSU_DTYPE_I64})
    for (Store st : {Store::Final, Store::DstPerToken, Store::Intermediate})
      CHECK(has([&](const UpdateCase& c) { return c.index == idx && c.store == st; }));
  for (Pad p : {Pad::None, Pad::Negative, Pad::PadSlotId, Pad::PadSlotIdInRange})
    CHECK(has([&](const UpdateCase& c) { return c.pad == p; }));
  CHECK(has([](const UpdateCase& c) { return c.disable_update && c.store == Store::Intermediate; }));
  CHECK(has([](const UpdateCase& c) { return c.num_accepted && c.form == Form::Varlen; }));
  CHECK(has([](const UpdateCase& c) { return c.dst_is_src; }));
  CHECK(has([](const UpdateCase& c) { return c.dt != c.A || c.A != c.D || c.D != c.dt_bias; }));
  // int16 states and stochastic rounding: every form and store mode, with
  // model-like and with exact values.
  for (Form f : {Form::Single, Form::Multi, Form::Varlen})
    for (bool exact : {false, true}) {
      CHECK(has([&](const UpdateCase& c) {
        return c.form == f && c.state == SSU_DTYPE_I16 && c.exact_values == exact;
      }));
      for (ssu_dtype_t s : {SSU_DTYPE_F16, SSU_DTYPE_BF16})
        CHECK(has([&](const UpdateCase& c) {
          return c.form == f && c.state == s && c.stochastic && c.exact_values == exact;
        }));
    }
  for (Store st : {Store::Final, Store::DstPerToken, Store::Intermediate}) {
    CHECK(has([&](const UpdateCase& c) {
      return c.store == st && c.state == SSU_DTYPE_I16 && c.exact_values;
    }));
    CHECK(has([&](const UpdateCase& c) { return c.store == st && c.stochastic && c.exact_values; }));
  }
  CHECK(has([](const UpdateCase& c) { return c.stochastic && c.has_dst && c.exact_values; }));
  CHECK(has([](const UpdateCase& c) { return c.stochastic && c.num_accepted && c.exact_values; }));
  CHECK(has([](const UpdateCase& c) { return c.state == SSU_DTYPE_I16 && c.num_accepted; }));
  CHECK(has([](const UpdateCase& c) { return c.state == SSU_DTYPE_I16 && c.pad != Pad::None; }));
  for (uint32_t rounds : {0u, 1u, 32u})
    CHECK(has([&](const UpdateCase& c) { return c.stochastic && c.rounding_rounds == rounds; }));
}
