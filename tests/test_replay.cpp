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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "replay_harness.h"
#include "rng.h"

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
    // 8-bit checkpoints: codes and scales untouched too.
    c.state = SSU_DTYPE_I8;
    c.seed += 7;
    faults.push_back({c, ReplayFault::CountersOutOfRange, 3});
    faults.push_back({c, ReplayFault::AcceptedAbovePending, c.steps});
    c.state = SSU_DTYPE_F8E4M3;
    c.sr(0xf8);
    c.seed += 7;
    faults.push_back({c, ReplayFault::SlotOutOfRange, 5});
    faults.push_back({c, ReplayFault::CountersOutOfRange, c.steps});
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
  const ssu_dtype_t states[] = {SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16,
                                SSU_DTYPE_I16, SSU_DTYPE_I8,   SSU_DTYPE_F8E4M3};
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
  for (ssu_dtype_t st : {SSU_DTYPE_BF16, SSU_DTYPE_F16, SSU_DTYPE_F8E4M3}) {
    CHECK(has([&](const ReplayCase& c) { return c.state == st && c.stochastic; }));
    CHECK(has([&](const ReplayCase& c) { return c.state == st && c.stochastic && c.round_trip; }));
    CHECK(has([&](const ReplayCase& c) { return c.state == st && c.stochastic && c.speculative; }));
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
  for (ssu_dtype_t st : {SSU_DTYPE_BF16, SSU_DTYPE_F16, SSU_DTYPE_F8E4M3})
    CHECK(has([&](const ReplayCase& c) { return c.flush_exact && c.stochastic && c.state == st; }));
  // 8-bit checkpoints: SPEC section 7's round trip (L in {1, 2, 7, 16}, T in
  // {1, 4}) in both formats, Mamba-1, varlen and the layouts.
  for (ssu_dtype_t st : {SSU_DTYPE_I8, SSU_DTYPE_F8E4M3}) {
    for (int64_t L : {1, 2, 7, 16})
      CHECK_MESSAGE(has([&](const ReplayCase& c) { return c.round_trip && c.state == st && c.L == L; }),
                    "round trip state " << st << " L=" << L);
    CHECK(has([&](const ReplayCase& c) { return c.round_trip && c.state == st && T_of(c) == 4; }));
    CHECK(has([&](const ReplayCase& c) { return c.mamba1 && c.state == st; }));
    CHECK(has([&](const ReplayCase& c) { return c.flush_exact && c.mamba1 && c.state == st; }));
    CHECK(has([&](const ReplayCase& c) { return c.form == Form::Varlen && c.state == st; }));
    CHECK(has([&](const ReplayCase& c) { return c.layout != kReplayDense && c.state == st; }));
    CHECK(has([&](const ReplayCase& c) { return c.warm_start && c.state == st; }));
    CHECK(has([&](const ReplayCase& c) { return c.disable_every > 0 && c.state == st; }));
  }
  CHECK(has([](const ReplayCase& c) { return c.flush_exact && c.speculative; }));
  CHECK(has([](const ReplayCase& c) { return c.flush_exact && c.form == Form::Varlen; }));
  CHECK(has([](const ReplayCase& c) { return c.flush_exact && c.mamba1; }));
}

namespace {

ssu_tensor_t dense(void* data, ssu_dtype_t dtype, std::initializer_list<int64_t> shape) {
  ssu_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  int k = 0;
  for (int64_t v : shape) t.shape[k++] = v;
  int64_t stride = 1;
  for (k = t.ndim - 1; k >= 0; --k) {
    t.strides[k] = stride;
    stride *= t.shape[k];
  }
  return t;
}

}  // namespace

// SPEC section 8's special rows through a checkpoint fold (the table's pools
// hold neither): a NaN row (a NaN scale; e4m3 codes 0x7F) and an all-zero
// row (codes 0, scale 1, whose x stays 0) of an 8-bit checkpoint go through
// three replay steps and the flush op, and the pool then holds exactly the
// codes and scales that the plain update stores after the same three tokens
// from the same pool (one multi-token call, the same rounding seed): the NaN
// row stays a NaN row, the zero row a zero row (the amax == 0 branch).
TEST_CASE("cpu: NaN and zero rows of i8 / f8e4m3 checkpoints fold through a flush to the plain "
          "update's bits") {
  Context two(2);
  const int64_t S = 3, H = 2, P = 4, N = 16, L = 4, M = 3, slot = 1;
  const int64_t nan_row = (slot * H + 0) * P + 1, zero_row = (slot * H + 1) * P + 2;
  const int64_t zero_h = 1, zero_p = 2;
  struct Fmt {
    ssu_dtype_t state;
    bool sr;
  };
  for (const Fmt f : {Fmt{SSU_DTYPE_I8, false}, Fmt{SSU_DTYPE_F8E4M3, false},
                      Fmt{SSU_DTYPE_F8E4M3, true}}) {
    const bool fp8 = f.state == SSU_DTYPE_F8E4M3;
    const std::string format = std::string(ssu_dtype_name(f.state)) + (f.sr ? " (SR)" : "");
    CAPTURE(format);
    Rng rng = Rng::seeded(31 + uint64_t(f.state) + (f.sr ? 100 : 0), 0x8b17);
    std::vector<uint8_t> codes(size_t(S * H * P * N));
    std::vector<float> scales(size_t(S * H * P));
    std::vector<float> row(static_cast<size_t>(N));
    for (int64_t r = 0; r < S * H * P; ++r) {
      for (auto& v : row) v = float(rng.normal());
      const QuantizedRow8 q = ref_quantize_row8(row.data(), N, f.state);
      std::memcpy(&codes[size_t(r * N)], q.q.data(), size_t(N));
      scales[size_t(r)] = q.scale;
    }
    std::memset(&codes[size_t(nan_row * N)], fp8 ? 0x7f : 0, size_t(N));
    scales[size_t(nan_row)] = std::numeric_limits<float>::quiet_NaN();
    std::memset(&codes[size_t(zero_row * N)], 0, size_t(N));
    scales[size_t(zero_row)] = 1.0f;

    // Tokens (f32): x (M, H, P) with the zero row's x 0, dt (M, H), B and C
    // (M, 1, N); A (H,) per head, softplus on.
    std::vector<float> x(size_t(M * H * P)), dt(size_t(M * H)), B(size_t(M * N)),
        C(size_t(M * N)), A = {-1.5f, -6.0f};
    for (auto& v : x) v = float(rng.normal());
    for (int64_t t = 0; t < M; ++t) x[size_t((t * H + zero_h) * P + zero_p)] = 0.0f;
    for (auto& v : dt) v = float(rng.uniform(-4.0, -2.0));
    for (auto& v : B) v = float(rng.normal());
    for (auto& v : C) v = float(rng.normal());
    uint64_t seed = 0x5eed0 + uint64_t(f.state);

    // The replay pool and its ring.
    std::vector<uint8_t> rcodes = codes;
    std::vector<float> rscales = scales;
    std::vector<float> ring_x(size_t(S * L * H * P), 0.0f), ring_B(size_t(S * L * N), 0.0f),
        ring_dt(size_t(S * L * H), 0.0f);
    std::vector<int32_t> committed(size_t(S), 0), pending(size_t(S), 0);
    std::vector<float> out(size_t(H * P));
    int32_t src = int32_t(slot);
    ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
    pool.state = dense(rcodes.data(), f.state, {S, H, P, N});
    pool.state_scale = dense(rscales.data(), SSU_DTYPE_F32, {S, H, P});
    ssu_replay_ring_t ring = SSU_REPLAY_RING_INIT;
    ring.x = dense(ring_x.data(), SSU_DTYPE_F32, {S, L, H, P});
    ring.B = dense(ring_B.data(), SSU_DTYPE_F32, {S, L, 1, N});
    ring.dt = dense(ring_dt.data(), SSU_DTYPE_F32, {S, L, H});
    ring.committed = dense(committed.data(), SSU_DTYPE_I32, {S});
    ring.pending = dense(pending.data(), SSU_DTYPE_I32, {S});
    ssu_replay_args_t ra = SSU_REPLAY_ARGS_INIT;
    ra.flags = SSU_UPDATE_DT_SOFTPLUS;
    ra.pool = &pool;
    ra.ring = &ring;
    ra.A = dense(A.data(), SSU_DTYPE_F32, {H});
    ra.out = dense(out.data(), SSU_DTYPE_F32, {1, H, P});
    ra.src_index = dense(&src, SSU_DTYPE_I32, {1});
    ra.rounding_seed = f.sr ? &seed : nullptr;
    auto token = [&](int64_t t) {
      ra.x = dense(&x[size_t(t * H * P)], SSU_DTYPE_F32, {1, H, P});
      ra.dt = dense(&dt[size_t(t * H)], SSU_DTYPE_F32, {1, H});
      ra.B = dense(&B[size_t(t * N)], SSU_DTYPE_F32, {1, 1, N});
      ra.C = dense(&C[size_t(t * N)], SSU_DTYPE_F32, {1, 1, N});
    };
    token(0);
    ssu_plan_t plan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_replay(two.ctx, &ra, nullptr, &plan) == SSU_SUCCESS,
                    ssu_last_error_message());
    for (int64_t t = 0; t < M; ++t) {
      token(t);
      REQUIRE_MESSAGE(ssu_plan_execute_replay(plan, &ra, nullptr) == SSU_SUCCESS,
                      ssu_last_error_message());
    }
    // L = 4 holds the three tokens: nothing stored before the flush op.
    CHECK(std::memcmp(rcodes.data(), codes.data(), codes.size()) == 0);
    ssu_replay_flush_args_t fa = SSU_REPLAY_FLUSH_ARGS_INIT;
    fa.pool = &pool;
    fa.ring = &ring;
    fa.A = ra.A;
    fa.src_index = ra.src_index;
    fa.rounding_seed = ra.rounding_seed;
    REQUIRE_MESSAGE(ssu_plan_execute_replay_flush(plan, &fa, nullptr) == SSU_SUCCESS,
                    ssu_last_error_message());
    ssu_plan_destroy(plan);
    CHECK(committed[size_t(slot)] == 0);
    CHECK(pending[size_t(slot)] == 0);

    // The plain update: the three tokens in one multi-token call.
    std::vector<uint8_t> pcodes = codes;
    std::vector<float> pscales = scales, pout(size_t(M * H * P));
    ssu_state_pool_t ppool = SSU_STATE_POOL_INIT;
    ppool.state = dense(pcodes.data(), f.state, {S, H, P, N});
    ppool.state_scale = dense(pscales.data(), SSU_DTYPE_F32, {S, H, P});
    ssu_update_args_t ua = SSU_UPDATE_ARGS_INIT;
    ua.flags = SSU_UPDATE_DT_SOFTPLUS;
    ua.pool = &ppool;
    ua.x = dense(x.data(), SSU_DTYPE_F32, {1, M, H, P});
    ua.dt = dense(dt.data(), SSU_DTYPE_F32, {1, M, H});
    ua.A = ra.A;
    ua.B = dense(B.data(), SSU_DTYPE_F32, {1, M, 1, N});
    ua.C = dense(C.data(), SSU_DTYPE_F32, {1, M, 1, N});
    ua.out = dense(pout.data(), SSU_DTYPE_F32, {1, M, H, P});
    ua.src_index = ra.src_index;
    ua.rounding_seed = ra.rounding_seed;
    ssu_plan_t uplan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_update(two.ctx, &ua, nullptr, &uplan) == SSU_SUCCESS,
                    ssu_last_error_message());
    REQUIRE_MESSAGE(ssu_plan_execute_update(uplan, &ua, nullptr) == SSU_SUCCESS,
                    ssu_last_error_message());
    ssu_plan_destroy(uplan);

    int bad_codes = 0, bad_scales = 0;
    std::string first;
    for (size_t i = 0; i < codes.size(); ++i)
      if (rcodes[i] != pcodes[i] && bad_codes++ == 0)
        first += "code " + std::to_string(i) + " (row " + std::to_string(i / size_t(N)) +
                 "): replay " + std::to_string(rcodes[i]) + ", plain update " +
                 std::to_string(pcodes[i]) + "; ";
    for (size_t r = 0; r < scales.size(); ++r)
      if (std::memcmp(&rscales[r], &pscales[r], 4) != 0 && bad_scales++ == 0)
        first += "scale of row " + std::to_string(r) + ": replay " + std::to_string(rscales[r]) +
                 ", plain update " + std::to_string(pscales[r]);
    CHECK_MESSAGE(bad_codes + bad_scales == 0, bad_codes << " codes and " << bad_scales
                                                         << " scales differ from the plain "
                                                            "update's; first: " << first);
    // What both must hold: the NaN row unrepresentable, the zero row zero,
    // the slot's other rows stored anew, the other slots untouched.
    CHECK(std::isnan(rscales[size_t(nan_row)]));
    CHECK(rscales[size_t(zero_row)] == 1.0f);
    for (int64_t n = 0; n < N; ++n) {
      CHECK(rcodes[size_t(nan_row * N + n)] == (fp8 ? 0x7f : 0));
      CHECK(rcodes[size_t(zero_row * N + n)] == 0);
    }
    CHECK(std::memcmp(&rcodes[size_t(slot * H * P * N)], &codes[size_t(slot * H * P * N)],
                      size_t(H * P * N)) != 0);
    for (int64_t s = 0; s < S; ++s) {
      if (s == slot) continue;
      CHECK(std::memcmp(&rcodes[size_t(s * H * P * N)], &codes[size_t(s * H * P * N)],
                        size_t(H * P * N)) == 0);
      CHECK(std::memcmp(&rscales[size_t(s * H * P)], &scales[size_t(s * H * P)],
                        size_t(H * P) * 4) == 0);
    }
  }
}
