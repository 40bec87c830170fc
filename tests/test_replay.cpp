// The replay (checkpointed decode) table on the CPU backend: every case's
// decode loop checked step by step against the float64 reference of SPEC.md
// section 7, the final flush op, the round trips against the plain update,
// and caller errors that only the data shows (refused, nothing written).
//
// Environment (for reproducing a failure):
//   SSU_TEST_FILTER=<substring>  run only cases whose description contains it
//   SSU_TEST_CASE=<n>            run only case number n of the table
//   SSU_TEST_VERBOSE=1           print every case as it runs
//   SSU_LONG_TESTS=1             also the long table (serving-sized batches)
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "replay_harness.h"

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

TEST_CASE("cpu: every replay case matches the float64 reference at every step") {
  Context two(2), one(1);
  HostMemory mem;
  std::vector<ReplayCase> table = replay_case_table();
  const char* long_tests = std::getenv("SSU_LONG_TESTS");
  if (long_tests && *long_tests && std::string(long_tests) != "0") {
    const std::vector<ReplayCase> more = replay_long_case_table();
    table.insert(table.end(), more.begin(), more.end());
  }
  const char* filter = std::getenv("SSU_TEST_FILTER");
  const char* only = std::getenv("SSU_TEST_CASE");
  const bool verbose = std::getenv("SSU_TEST_VERBOSE") != nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t run = 0, failed = 0, elements = 0, steps = 0, stores = 0, trips = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const ReplayCase& c = table[i];
    const std::string d = describe(c);
    if (only && std::to_string(i) != only) continue;
    if (filter && d.find(filter) == std::string::npos) continue;
    if (verbose) {
      std::printf("[%zu] %s\n", i, d.c_str());
      std::fflush(stdout);
    }
    // A quarter of the cases run on the caller's thread only.
    const ReplayResult r = run_replay_case(i % 4 == 3 ? one.ctx : two.ctx, mem, c);
    ++run;
    elements += r.elements;
    steps += r.steps_run;
    stores += r.flushes;
    if (r.round_trip) {
      ++trips;
      if (verbose)
        std::printf("    round trip: float64 RMS error replay %.3g, plain update %.3g\n",
                    r.replay_rms, r.plain_rms);
    }
    if (!r.ok) {
      ++failed;
      if (failed <= 25) FAIL_CHECK("case " << i << " " << r.message);
    } else if (r.flushes == 0 && c.disable_every != 1) {
      ++failed;
      FAIL_CHECK("case " << i << " " << d << "\n  stored no checkpoint: the case tests too little");
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("cpu replay: %lld cases run (of %zu in the table), %lld failed, %lld steps, %lld "
              "checkpoint stores, %lld round trips, %lld elements checked, %.1f s\n",
              (long long)run, table.size(), (long long)failed, (long long)steps,
              (long long)stores, (long long)trips, (long long)elements, secs);
  CHECK(failed == 0);
  if (!filter && !only) CHECK(run == int64_t(table.size()));
}

// Data errors the CPU backend finds before writing (a slot >= S, num_accepted
// above pending, a varlen length above T, counters outside 0 <= committed,
// 0 <= pending, committed + pending <= L): the call is refused with a
// message naming the argument and every buffer (pool, scales, rings,
// counters, out) is bit-identical; the loop then goes on without the fault.
TEST_CASE("cpu: slot >= S, num_accepted > pending, length > T and bad counters are refused, "
          "nothing written") {
  Context two(2);
  HostMemory mem;
  struct Fault {
    ReplayCase c;
    ReplayFault fault;
    int step;  // == c.steps: the flush op
  };
  std::vector<Fault> faults;
  ReplayCase base;
  base.tag = "refused";
  base.multi(4).ring(7).run(8).shape(2, 1, 16, 16).dtypes(SSU_DTYPE_BF16, SSU_DTYPE_BF16);
  base.speculative = true;
  base.pad = Pad::Negative;
  for (ssu_dtype_t idx : {SSU_DTYPE_I32, SSU_DTYPE_I64}) {
    ReplayCase c = base;
    c.index = idx;
    c.seed = 300 + uint64_t(idx);
    faults.push_back({c, ReplayFault::SlotOutOfRange, 0});
    faults.push_back({c, ReplayFault::SlotOutOfRange, 5});
    faults.push_back({c, ReplayFault::SlotOutOfRange, c.steps});
    faults.push_back({c, ReplayFault::AcceptedAbovePending, 3});
    faults.push_back({c, ReplayFault::AcceptedAbovePending, c.steps});
    faults.push_back({c, ReplayFault::CountersOutOfRange, 2});
    faults.push_back({c, ReplayFault::CountersOutOfRange, 6});
    faults.push_back({c, ReplayFault::CountersOutOfRange, c.steps});
    c.state = SSU_DTYPE_I16;
    c.seed += 7;
    faults.push_back({c, ReplayFault::SlotOutOfRange, 4});
    faults.push_back({c, ReplayFault::AcceptedAbovePending, 4});
  }
  {
    ReplayCase c = base;
    c.varlen(4).sr(99);
    c.seed = 310;
    faults.push_back({c, ReplayFault::SeqlenAboveT, 2});
    faults.push_back({c, ReplayFault::AcceptedAbovePending, 6});
    c.speculative = false;
    c.single().ring(2);
    c.dtypes(SSU_DTYPE_F32, SSU_DTYPE_F32);
    c.stochastic = false;
    faults.push_back({c, ReplayFault::SlotOutOfRange, 3});
  }
  for (const Fault& f : faults) {
    ReplayOptions o;
    o.fault = f.fault;
    o.fault_step = f.step;
    const ReplayResult r = run_replay_case(two.ctx, mem, f.c, o);
    CHECK_MESSAGE(r.ok, "fault " << int(f.fault) << " at step " << f.step << ": " << r.message);
  }
}

// The same loop on one and on two worker threads leaves the same bits in
// every buffer after every step (checkpoints, scales, rings, counters and
// outputs).
TEST_CASE("cpu: replay results do not depend on the thread count") {
  Context two(2), one(1);
  HostMemory mem;
  const std::vector<ReplayCase> table = replay_case_table();
  int compared = 0;
  for (size_t i = 0; i < table.size(); i += 5) {
    ReplayOptions o;
    o.keep_snapshots = true;
    const ReplayResult a = run_replay_case(one.ctx, mem, table[i], o);
    const ReplayResult b = run_replay_case(two.ctx, mem, table[i], o);
    REQUIRE_MESSAGE(a.ok, a.message);
    REQUIRE_MESSAGE(b.ok, b.message);
    REQUIRE(a.snapshots.size() == b.snapshots.size());
    REQUIRE(!a.snapshots.empty());
    for (size_t k = 0; k < a.snapshots.size(); ++k) {
      for (size_t j = 0; j < a.snapshot_names.size(); ++j)
        CHECK_MESSAGE(a.snapshots[k][j] == b.snapshots[k][j],
                      "case " << i << " " << a.snapshot_names[j] << " after call " << k);
      CHECK_MESSAGE(a.out_snapshots[k] == b.out_snapshots[k], "case " << i << " out after call " << k);
    }
    ++compared;
  }
  CHECK(compared > 10);
}

// Found by tests/fuzz: with P = 1 a per-channel step size is a per-head one,
// and plan creation used to refuse the Mamba-1 layout's (S, L, H, 1) dt ring
// that goes with a per-channel dt (..., H, 1).
TEST_CASE("cpu: a Mamba-1 layer with dim P = 1 takes the (S, L, H, P) dt ring") {
  Context two(2);
  HostMemory mem;
  for (const bool dt_per_head : {false, true}) {
    ReplayCase c;
    c.tag = "mamba1_p1";
    c.mamba1_layer(1, 8).ring(3).multi(2);
    c.mamba1_dt_per_head = dt_per_head;
    c.speculative = true;
    c.seed = 17;
    const ReplayResult r = run_replay_case(two.ctx, mem, c);
    CHECK_MESSAGE(r.ok, r.message);
  }
}

TEST_CASE("cpu: the replay table covers every axis value") {
  const std::vector<ReplayCase> table = replay_case_table();
  auto has = [&](auto pred) {
    for (const auto& c : table)
      if (pred(c)) return true;
    return false;
  };
  auto T_of = [](const ReplayCase& c) { return c.form == Form::Single ? int64_t(1) : c.T; };
  for (int64_t L : {1, 2, 7, 16, 32})
    CHECK_MESSAGE(has([&](const ReplayCase& c) { return c.L == L; }), "L=" << L);
  for (int64_t T : {1, 2, 4, 8})
    CHECK_MESSAGE(has([&](const ReplayCase& c) { return T_of(c) == T; }), "T=" << T);
  for (int64_t T : {2, 4, 8}) {
    CHECK_MESSAGE(has([&](const ReplayCase& c) { return T_of(c) == T && c.L == T; }),
                  "T=L=" << T);
    CHECK_MESSAGE(has([&](const ReplayCase& c) { return T_of(c) == T && c.speculative; }),
                  "speculative T=" << T);
  }
  for (Form f : {Form::Single, Form::Multi, Form::Varlen})
    CHECK(has([&](const ReplayCase& c) { return c.form == f; }));
  const ssu_dtype_t states[] = {SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16, SSU_DTYPE_I16};
  const ssu_dtype_t inputs[] = {SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16};
  for (ssu_dtype_t st : states) {
    for (ssu_dtype_t in : inputs)
      CHECK_MESSAGE(has([&](const ReplayCase& c) { return c.state == st && c.input == in; }),
                    "state " << st << " input " << in);
    CHECK(has([&](const ReplayCase& c) { return c.state == st && c.speculative; }));
    CHECK(has([&](const ReplayCase& c) { return c.state == st && c.round_trip; }));
  }
  for (ssu_dtype_t p : inputs)
    CHECK(has([&](const ReplayCase& c) { return c.param == p; }));
  for (ssu_dtype_t st : {SSU_DTYPE_BF16, SSU_DTYPE_F16}) {
    CHECK(has([&](const ReplayCase& c) { return c.state == st && c.stochastic; }));
    CHECK(has([&](const ReplayCase& c) { return c.state == st && c.stochastic && c.round_trip; }));
  }
  for (ssu_dtype_t idx : {SSU_DTYPE_I32, SSU_DTYPE_I64, SSU_DTYPE_INVALID})
    CHECK(has([&](const ReplayCase& c) { return c.index == idx; }));
  CHECK(has([](const ReplayCase& c) { return c.speculative && c.accepted == SSU_DTYPE_I64 && c.index == SSU_DTYPE_I32; }));
  CHECK(has([](const ReplayCase& c) { return c.speculative && c.accepted == SSU_DTYPE_I32 && c.index == SSU_DTYPE_I64; }));
  for (Pad p : {Pad::None, Pad::Negative, Pad::PadSlotId, Pad::PadSlotIdInRange})
    CHECK(has([&](const ReplayCase& c) { return c.pad == p; }));
  CHECK(has([](const ReplayCase& c) { return c.mamba1 && !c.mamba1_dt_per_head; }));
  CHECK(has([](const ReplayCase& c) { return c.mamba1 && c.mamba1_dt_per_head; }));
  CHECK(has([](const ReplayCase& c) { return c.mamba1 && c.speculative; }));
  CHECK(has([](const ReplayCase& c) { return c.form == Form::Varlen && c.speculative; }));
  CHECK(has([](const ReplayCase& c) { return c.disable_every > 1; }));
  CHECK(has([](const ReplayCase& c) { return c.disable_every == 1 && c.warm_start; }));
  CHECK(has([](const ReplayCase& c) { return c.disable_every > 0 && c.speculative; }));
  CHECK(has([](const ReplayCase& c) { return c.layout & kReplayPadded; }));
  CHECK(has([](const ReplayCase& c) { return c.layout & kReplayEntryMajor; }));
  CHECK(has([](const ReplayCase& c) { return c.G > 1; }));
  CHECK(has([](const ReplayCase& c) { return c.batch == 1; }));
  CHECK(has([](const ReplayCase& c) { return !c.has_D; }));
  CHECK(has([](const ReplayCase& c) { return !c.has_z; }));
  CHECK(has([](const ReplayCase& c) { return !c.has_dt_bias; }));
  CHECK(has([](const ReplayCase& c) { return !c.softplus; }));
  CHECK(has([](const ReplayCase& c) { return c.large_dt; }));
  // SPEC section 7's round trip: L in {1, 2, 7, 16}, T in {1, 4}, random
  // num_accepted, padding mixed in.
  for (int64_t L : {1, 2, 7, 16}) {
    CHECK_MESSAGE(has([&](const ReplayCase& c) {
      return c.round_trip && c.L == L && T_of(c) == 1 && !c.speculative && c.pad != Pad::None;
    }), "round trip L=" << L);
    CHECK_MESSAGE(has([&](const ReplayCase& c) {
      return c.round_trip && c.L == L && c.speculative && c.pad != Pad::None;
    }), "speculative round trip L=" << L);
  }
  CHECK(has([&](const ReplayCase& c) { return c.round_trip && c.speculative && T_of(c) == 4; }));
  // Checkpoint stores bit for bit against the plain update in every format.
  for (ssu_dtype_t st : states)
    CHECK_MESSAGE(has([&](const ReplayCase& c) { return c.flush_exact && c.state == st; }),
                  "flush_exact state " << st);
  for (ssu_dtype_t st : {SSU_DTYPE_BF16, SSU_DTYPE_F16})
    CHECK(has([&](const ReplayCase& c) { return c.flush_exact && c.stochastic && c.state == st; }));
  CHECK(has([](const ReplayCase& c) { return c.flush_exact && c.speculative; }));
  CHECK(has([](const ReplayCase& c) { return c.flush_exact && c.form == Form::Varlen; }));
  CHECK(has([](const ReplayCase& c) { return c.flush_exact && c.mamba1; }));
}
