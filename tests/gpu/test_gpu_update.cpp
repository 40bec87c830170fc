// The CUDA backend against the float64 reference: every case of the shared
// update table, plus what only a GPU run can show (large batches, pools whose
// element offsets pass 2^31, CUDA-graph capture and replay, the device error
// word) and agreement with the CPU backend.
//
// Without a usable GPU the program prints why and exits 77 (meson's skip).
//
// Environment:
//   SSU_LONG_TESTS=1             everything: the whole table (by default its
//                                largest random mixes, UpdateCase::long_only,
//                                are left out) and every large-batch case (by
//                                default one per dtype pair and layout)
//   SSU_TEST_FILTER=<substring>  only table cases whose description contains it
//   SSU_TEST_CASE=<n>            only case n of the table
//                                (both pick from the whole table; the
//                                8-bit states have a table of their own,
//                                state8_gpu_case_table, numbered apart)
//   SSU_TEST_EVERY=<k>           only every k-th table case (sanitizer runs)
//   SSU_TEST_VERBOSE=1           print every case as it runs
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../src/cuda/cuda_driver.h"
#include "gpu_main.h"
#include "harness.h"

using namespace ssutest;
using namespace ssu_cuda;
using namespace ssutest::gpu;

namespace {

// A case to run and its number in the table it came from (what failure
// messages print and SSU_TEST_CASE takes).
struct Selected {
  size_t index;
  UpdateCase c;
};

// The cases of `table` to run. Without SSU_TEST_CASE / SSU_TEST_FILTER and
// SSU_LONG_TESTS, the long-only ones are left out; SSU_TEST_EVERY thins
// whatever remains by table number.
std::vector<Selected> selected(const std::vector<UpdateCase>& table, bool apply_every) {
  const char* filter = std::getenv("SSU_TEST_FILTER");
  const char* only = std::getenv("SSU_TEST_CASE");
  const char* every_s = std::getenv("SSU_TEST_EVERY");
  const long every = apply_every && every_s ? std::max(1L, std::strtol(every_s, nullptr, 10)) : 1;
  const bool all = long_tests_enabled() || filter || only;
  std::vector<Selected> out;
  for (size_t i = 0; i < table.size(); ++i) {
    if (only && std::to_string(i) != only) continue;
    if (filter && describe(table[i]).find(filter) == std::string::npos) continue;
    if (long(i) % every) continue;
    if (table[i].long_only && !all) continue;
    out.push_back({i, table[i]});
  }
  return out;
}

// Runs every case with the plan's own choice; a case the pipelined kernels
// take runs again pinned to cuda_simple and, with `few_blocks`, on two
// persistent blocks (which also takes calls too small for the grid). The
// reruns reuse the case's buffers and float64 reference, restored to their
// initial contents: building those costs far more than the calls.
int run_cases(const std::vector<Selected>& cases, size_t of, const char* what, bool few_blocks) {
  CudaMemory mem;
  const bool verbose = std::getenv("SSU_TEST_VERBOSE") != nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  int failed = 0, pipelined = 0;
  int64_t elements = 0;
  auto record = [&](const CheckResult& r, size_t i, const char* how) {
    elements += r.elements;
    if (!r.ok && ++failed <= 25) FAIL_CHECK(what << " case " << i << how << ": " << r.message);
  };
  for (const Selected& s : cases) {
    if (verbose) {
      std::printf("[%zu] %s\n", s.index, describe(s.c).c_str());
      std::fflush(stdout);
    }
    UpdateProblem problem(s.c, mem);
    ssu_algorithm_t algorithm = -1;
    record(run_update_problem(g_cuda, problem, false, nullptr, nullptr, &algorithm), s.index, "");
    if (algorithm == SSU_ALGORITHM_CUDA_PIPELINED) {
      ++pipelined;
      ssu_plan_options_t o = SSU_PLAN_OPTIONS_INIT;
      o.algorithm = SSU_ALGORITHM_CUDA_SIMPLE;
      record(run_update_problem(g_cuda, problem, true, nullptr, &o), s.index, " (cuda_simple)");
      if (few_blocks) {
        o.algorithm = SSU_ALGORITHM_CUDA_PIPELINED;
        record(run_update_problem(few_blocks_context(), problem, true, nullptr, &o), s.index,
               " (cuda_pipelined on two blocks)");
      }
    }
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gpu %s: %zu cases (of %zu%s; %d pipelined, also run pinned to cuda_simple%s), "
              "%d failed, %lld elements checked, %.1f s\n",
              what, cases.size(), of, long_tests_enabled() ? ", SSU_LONG_TESTS=1" : "", pipelined,
              few_blocks ? " and on two pipelined blocks" : "", failed, (long long)elements, secs);
  return failed;
}

}  // namespace

TEST_CASE("gpu: every update case of the table matches the float64 reference") {
  const std::vector<UpdateCase> table = update_case_table();
  CHECK(run_cases(selected(table, true), table.size(), "table", true) == 0);
}

// The 8-bit block-scaled states (i8, f8e4m3 to nearest and stochastic), every
// mode; the CPU backend's bits are compared in test_gpu_rounding.
TEST_CASE("gpu: 8-bit states (i8 and f8e4m3) in every mode match the float64 reference") {
  const std::vector<UpdateCase> table = state8_gpu_case_table();
  CHECK(run_cases(selected(table, true), table.size(), "8-bit", true) == 0);
}

TEST_CASE("gpu: large batches, every dtype pair, fast and general paths") {
  // Host time grows with the pool (inputs, float64 reference, checks: about
  // 100 ns an element), and these pools hold 8 to 135 million elements. The
  // default run keeps every (state, input) pair once across the three forms
  // and every layout once; SSU_LONG_TESTS=1 runs every pair in every form and
  // every layout with every N (the seeds do not depend on what runs).
  std::vector<UpdateCase> cases;
  const ssu_dtype_t fl[3] = {SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F16};
  uint64_t seed = 900;
  for (int si = 0; si < 3; ++si)
    for (int ii = 0; ii < 3; ++ii) {
      const ssu_dtype_t st = fl[si], in = fl[ii];
      UpdateCase c;
      c.dtypes(st, in, SSU_DTYPE_F32).shape(8, 2, 64, 128);
      c.batch = 512;
      c.pad = Pad::Negative;
      c.seed = seed++;
      c.tag = "large_batch";
      c.long_only = (si + ii) % 3 != 0;
      cases.push_back(c);
      UpdateCase m = c;  // multi-token, intermediate buffer
      m.multi(4);
      m.store = Store::Intermediate;
      m.batch = 64;
      m.seed = seed++;
      m.long_only = (si + ii) % 3 != 1;
      cases.push_back(m);
      UpdateCase f = c;  // multi-token, final state only (the pipelined kernels)
      f.multi(4);
      f.batch = 128;
      f.seed = seed++;
      f.tag = "large_batch_multi_final";
      f.long_only = (si + ii) % 3 != 2;
      cases.push_back(f);
    }
  // The 8-bit states at a batch whose calls fill the default pipelined grid
  // (single token), and with several tokens and an intermediate buffer; one
  // of each by default.
  int k8 = 0;
  for (ssu_dtype_t st : {SSU_DTYPE_I8, SSU_DTYPE_F8E4M3})
    for (bool sr : {false, true}) {
      if (sr && st != SSU_DTYPE_F8E4M3) continue;
      UpdateCase c;
      c.dtypes(st, fl[k8 % 3], SSU_DTYPE_F32).shape(8, 2, 64, 128);
      c.batch = 128;
      c.pad = Pad::Negative;
      c.seed = seed++;
      c.tag = "large_batch_8bit";
      if (sr) c.sr(0x8b17ull + uint64_t(k8));
      c.long_only = k8 != 2;
      cases.push_back(c);
      UpdateCase m = c;
      m.multi(4);
      m.store = Store::Intermediate;
      m.batch = 32;
      m.seed = seed++;
      m.long_only = k8 != 0;
      cases.push_back(m);
      ++k8;
    }
  // The Mamba-1 form (N = 16, per-channel A) at batches whose calls the
  // Mamba-1 kernels take by default: a batch that is no multiple of their
  // sequences per block, three row tiles of which the last is partial
  // (P = 320), padding, a destination pool; f32 and bf16 states.
  for (ssu_dtype_t st : {SSU_DTYPE_F32, SSU_DTYPE_BF16}) {
    UpdateCase c;
    c.dtypes(st, st == SSU_DTYPE_F32 ? SSU_DTYPE_BF16 : SSU_DTYPE_F16, SSU_DTYPE_F32)
        .shape(1, 1, 320, 16);
    c.single();
    c.mamba1();
    c.batch = 301;
    c.pad = Pad::Negative;
    c.has_dst = st == SSU_DTYPE_BF16;
    c.seed = seed++;
    c.tag = "large_batch_mamba1";
    cases.push_back(c);
  }
  // The default serving shape at batch 512; odd strides force the general path.
  int li = 0;
  for (uint32_t layout : {uint32_t(kDense), uint32_t(kPadded), uint32_t(kOddPadded)}) {
    int ni = 0;
    for (int64_t N : {16, 64, 128, 256}) {
      UpdateCase c;
      c.dtypes(SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F32).shape(16, 2, 64, N);
      c.batch = 512;
      c.layout = layout;
      c.seed = seed++;
      c.tag = "large_batch_layouts";
      c.long_only = ni++ != li;  // dense N=16, padded N=64, odd N=128
      cases.push_back(c);
    }
    ++li;
  }
  CHECK(run_cases(selected(cases, false), cases.size(), "large", false) == 0);
}

// A bf16 pool whose last slots start past element 2^31, run on the GPU and,
// on a dense copy of the same slots, on the CPU backend: both must agree with
// each other (and nothing outside the named slots may change).
TEST_CASE("gpu: pool offsets beyond 2^31 elements agree with the CPU backend") {
  const int64_t H = 2, P = 64, N = 128, HPN = H * P * N, G = 1;
  const int64_t stride = HPN * 8 + 8;  // non-dense slot stride, 16-byte aligned
  const int64_t S = (int64_t(1) << 31) / stride + 3;
  REQUIRE(S * stride > (int64_t(1) << 31));
  const int64_t Bt = 4;
  const int64_t slots[Bt] = {S - 1, S - 2, 5, S - 3};

  ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
  o.backend = SSU_BACKEND_CPU;
  o.num_threads = 1;
  ssu_context_t cpu = nullptr;
  REQUIRE(ssu_context_create(&o, &cpu) == SSU_SUCCESS);

  CudaMemory mem;
  const size_t pool_bytes = size_t(S * stride) * 2;
  void* dpool = mem.alloc(pool_bytes);
  ok(g_drv.MemsetD8(reinterpret_cast<CUdeviceptr>(dpool), 0x5a, pool_bytes), "cuMemsetD8");

  uint64_t rng = 12345;
  auto rnd = [&]() {  // uniform in [-1, 1)
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return float((rng >> 40) & 0xffffff) / float(1 << 23) - 1.f;
  };
  auto bf = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return uint16_t(u >> 16);
  };
  std::vector<uint16_t> hstate(size_t(Bt * HPN)), x(size_t(Bt * H * P)), z(x.size()),
      Bm(size_t(Bt * G * N)), Cm(Bm.size());
  std::vector<float> dt(static_cast<size_t>(Bt * H)), A(static_cast<size_t>(H)), D(static_cast<size_t>(H)), dtb(static_cast<size_t>(H));
  for (auto& v : hstate) v = bf(rnd());
  for (auto& v : x) v = bf(rnd());
  for (auto& v : z) v = bf(rnd());
  for (auto& v : Bm) v = bf(rnd());
  for (auto& v : Cm) v = bf(rnd());
  for (auto& v : dt) v = rnd();
  for (int64_t h = 0; h < H; ++h) {
    A[size_t(h)] = -1.f - float(h);
    D[size_t(h)] = 0.5f;
    dtb[size_t(h)] = -3.5f;
  }
  for (int64_t b = 0; b < Bt; ++b)
    mem.upload(static_cast<uint16_t*>(dpool) + slots[b] * stride, &hstate[size_t(b * HPN)],
               size_t(HPN) * 2);

  auto t = [](void* data, ssu_dtype_t dtype, std::vector<int64_t> shape,
              std::vector<int64_t> strides) {
    ssu_tensor_t d;
    std::memset(&d, 0, sizeof d);
    d.data = data;
    d.dtype = dtype;
    d.ndim = int32_t(shape.size());
    for (size_t k = 0; k < shape.size(); ++k) {
      d.shape[k] = shape[k];
      d.strides[k] = strides[k];
    }
    return d;
  };
  struct Side {
    void *state, *x, *z, *B, *C, *dt, *A, *D, *dtb, *out, *src;
  };
  auto make_args = [&](const Side& s, ssu_state_pool_t* pool, int64_t nslots, int64_t sstride) {
    pool->state = t(s.state, SSU_DTYPE_BF16, {nslots, H, P, N}, {sstride, P * N, N, 1});
    ssu_update_args_t a = SSU_UPDATE_ARGS_INIT;
    a.flags = SSU_UPDATE_DT_SOFTPLUS;
    a.pool = pool;
    a.x = t(s.x, SSU_DTYPE_BF16, {Bt, H, P}, {H * P, P, 1});
    a.z = t(s.z, SSU_DTYPE_BF16, {Bt, H, P}, {H * P, P, 1});
    a.out = t(s.out, SSU_DTYPE_BF16, {Bt, H, P}, {H * P, P, 1});
    a.B = t(s.B, SSU_DTYPE_BF16, {Bt, G, N}, {G * N, N, 1});
    a.C = t(s.C, SSU_DTYPE_BF16, {Bt, G, N}, {G * N, N, 1});
    a.dt = t(s.dt, SSU_DTYPE_F32, {Bt, H}, {H, 1});
    a.A = t(s.A, SSU_DTYPE_F32, {H}, {1});
    a.D = t(s.D, SSU_DTYPE_F32, {H}, {1});
    a.dt_bias = t(s.dtb, SSU_DTYPE_F32, {H}, {1});
    a.src_index = t(s.src, SSU_DTYPE_I64, {Bt}, {1});
    return a;
  };
  auto dev_copy = [&](const void* host, size_t bytes) {
    void* p = mem.alloc(bytes);
    mem.upload(p, host, bytes);
    return p;
  };
  std::vector<int64_t> src(slots, slots + Bt), src_cpu = {0, 1, 2, 3};
  Side g{dpool,
         dev_copy(x.data(), x.size() * 2),
         dev_copy(z.data(), z.size() * 2),
         dev_copy(Bm.data(), Bm.size() * 2),
         dev_copy(Cm.data(), Cm.size() * 2),
         dev_copy(dt.data(), dt.size() * 4),
         dev_copy(A.data(), A.size() * 4),
         dev_copy(D.data(), D.size() * 4),
         dev_copy(dtb.data(), dtb.size() * 4),
         mem.alloc(x.size() * 2),
         dev_copy(src.data(), src.size() * 8)};
  std::vector<uint16_t> cstate = hstate, cout(x.size());
  Side c{cstate.data(), x.data(), z.data(), Bm.data(), Cm.data(), dt.data(), A.data(),
         D.data(), dtb.data(), cout.data(), src_cpu.data()};
  ssu_state_pool_t gpool = SSU_STATE_POOL_INIT, cpool = SSU_STATE_POOL_INIT;
  const ssu_update_args_t ga = make_args(g, &gpool, S, stride);
  const ssu_update_args_t ca = make_args(c, &cpool, Bt, HPN);

  for (auto [ctx, args] : {std::pair{g_cuda, &ga}, std::pair{cpu, &ca}}) {
    ssu_plan_t plan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_update(ctx, args, nullptr, &plan) == SSU_SUCCESS,
                    ssu_last_error_message());
    REQUIRE_MESSAGE(ssu_plan_execute_update(plan, args, nullptr) == SSU_SUCCESS,
                    ssu_last_error_message());
    ssu_plan_destroy(plan);
  }
  mem.synchronize(nullptr);

  auto f32 = [](uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  std::vector<uint16_t> gout(x.size()), gstate(static_cast<size_t>(HPN));
  mem.download(gout.data(), g.out, gout.size() * 2);
  int bad = 0;
  for (size_t i = 0; i < gout.size(); ++i) {
    const float a = f32(gout[i]), b = f32(cout[i]);
    if (!(std::fabs(a - b) <= 1e-3f + 1e-2f * std::fabs(b)) && ++bad <= 5)
      FAIL_CHECK("out[" << i << "] gpu " << a << " cpu " << b);
  }
  for (int64_t b = 0; b < Bt; ++b) {
    mem.download(gstate.data(), static_cast<uint16_t*>(dpool) + slots[b] * stride,
                 size_t(HPN) * 2);
    for (int64_t i = 0; i < HPN; ++i) {
      const float a = f32(gstate[size_t(i)]), r = f32(cstate[size_t(b * HPN + i)]);
      if (!(std::fabs(a - r) <= 1e-2f + 1e-2f * std::fabs(r)) && ++bad <= 10)
        FAIL_CHECK("state slot " << slots[b] << " [" << i << "] gpu " << a << " cpu " << r);
    }
  }
  // The padding between slots of the last slot is untouched.
  std::vector<uint16_t> gap(static_cast<size_t>(stride - HPN));
  mem.download(gap.data(), static_cast<uint16_t*>(dpool) + (S - 1) * stride + HPN,
               gap.size() * 2);
  for (auto v : gap)
    if (v != 0x5a5a && ++bad <= 12) FAIL_CHECK("slot padding written: " << v);
  CHECK(bad == 0);
  for (void* p : {g.x, g.z, g.B, g.C, g.dt, g.A, g.D, g.dtb, g.out, g.src, dpool}) mem.free(p);
  ssu_context_destroy(cpu);
}

// Captured once in global mode (the strictest: any forbidden call during
// capture fails), replayed with changed indices and padding.
TEST_CASE("gpu: execute is capturable in a CUDA graph and replays with new indices") {
  CudaMemory mem;
  UpdateCase c;
  c.dtypes(SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F32).shape(8, 2, 64, 128);
  c.batch = 6;
  c.index = SSU_DTYPE_I32;
  c.seed = 4242;
  c.extra_slots = 4;
  c.tag = "graph";
  UpdateProblem problem(c, mem);
  const ssu_update_args_t args = problem.args();
  ssu_plan_t plan = nullptr;
  REQUIRE_MESSAGE(ssu_plan_create_update(g_cuda, &args, nullptr, &plan) == SSU_SUCCESS,
                  ssu_last_error_message());

  CUstream stream = nullptr;
  ok(g_drv.StreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ok(g_drv.StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  const ssu_status_t st =
      ssu_plan_execute_update(plan, &args, reinterpret_cast<ssu_stream_t>(stream));
  const std::string msg = ssu_last_error_message();
  ok(g_drv.StreamEndCapture(stream, &graph), "cuStreamEndCapture");
  REQUIRE_MESSAGE(st == SSU_SUCCESS, msg);
  ok(g_drv.GraphInstantiate(&exec, graph, 0), "cuGraphInstantiateWithFlags");

  // Replay 1: the captured indices.
  ok(g_drv.GraphLaunch(exec, stream), "cuGraphLaunch");
  ok(g_drv.StreamSynchronize(stream), "cuStreamSynchronize");
  CheckResult r = problem.check();
  CHECK_MESSAGE(r.ok, r.message);

  // Replay 2: rotate the source slots among the sequences and pad one.
  std::vector<int32_t> src(size_t(c.batch));
  mem.download(src.data(), args.src_index.data, src.size() * 4);
  for (int64_t b = 0; b < c.batch; ++b)
    problem.poke_index("src_index", b, b == 2 ? -1 : src[size_t((b + 1) % c.batch)]);
  problem.reset();
  ok(g_drv.GraphLaunch(exec, stream), "cuGraphLaunch");
  ok(g_drv.StreamSynchronize(stream), "cuStreamSynchronize");
  r = problem.check();
  CHECK_MESSAGE(r.ok, r.message);

  g_drv.GraphExecDestroy(exec);
  g_drv.GraphDestroy(graph);
  g_drv.StreamDestroy(stream);
  ssu_plan_destroy(plan);
}

// SSU_PLAN_PDL: a second update whose x is the first one's out, launched
// right after it with programmatic dependent launch (eagerly, and captured
// into one graph, where the edge between the two kernel nodes becomes a
// programmatic one): the same bits as ordinary launches. Without its wait
// the second kernel would read the first's poisoned out. Batch 6 runs the
// direct kernels, batch 256 the pipelined ones.
TEST_CASE("gpu: SSU_PLAN_PDL launches read what the previous kernel wrote, eagerly and in a graph") {
  CudaMemory mem;
  CUstream stream = nullptr;
  ok(g_drv.StreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  const ssu_stream_t s = reinterpret_cast<ssu_stream_t>(stream);
  for (int64_t batch : {int64_t(6), int64_t(256)}) {
    CAPTURE(batch);
    UpdateCase c;
    c.dtypes(SSU_DTYPE_F32, SSU_DTYPE_BF16, SSU_DTYPE_F32).shape(8, 2, 64, 128);
    c.batch = batch;
    c.index = SSU_DTYPE_I32;
    c.seed = 5150 + uint64_t(batch);
    c.tag = "pdl";
    UpdateCase c2 = c;
    c2.seed += 1;
    UpdateProblem first(c, mem), second(c2, mem);
    const ssu_update_args_t a1 = first.args();
    ssu_update_args_t a2 = second.args();
    a2.x = a1.out;
    ssu_plan_options_t po = SSU_PLAN_OPTIONS_INIT;
    po.flags = SSU_PLAN_PDL;
    ssu_plan_t plain1 = nullptr, plain2 = nullptr, pdl1 = nullptr, pdl2 = nullptr;
    REQUIRE(ssu_plan_create_update(g_cuda, &a1, nullptr, &plain1) == SSU_SUCCESS);
    REQUIRE(ssu_plan_create_update(g_cuda, &a2, nullptr, &plain2) == SSU_SUCCESS);
    REQUIRE(ssu_plan_create_update(g_cuda, &a1, &po, &pdl1) == SSU_SUCCESS);
    REQUIRE(ssu_plan_create_update(g_cuda, &a2, &po, &pdl2) == SSU_SUCCESS);
    auto run = [&](ssu_plan_t p1, ssu_plan_t p2) {
      REQUIRE(ssu_plan_execute_update(p1, &a1, s) == SSU_SUCCESS);
      REQUIRE(ssu_plan_execute_update(p2, &a2, s) == SSU_SUCCESS);
    };
    auto fresh = [&] {
      first.reset();
      second.reset();
      ok(g_drv.CtxSynchronize(), "cuCtxSynchronize");
    };
    auto results = [&] {
      ok(g_drv.StreamSynchronize(stream), "cuStreamSynchronize");
      return std::make_pair(second.download("out"), second.download("state"));
    };
    fresh();
    run(plain1, plain2);
    const auto expect = results();
    CheckResult r = first.check();  // the producer itself is right
    CHECK_MESSAGE(r.ok, r.message);

    fresh();
    run(pdl1, pdl2);
    CHECK_MESSAGE(results() == expect, "eager launches with SSU_PLAN_PDL differ");
    fresh();
    run(plain1, pdl2);
    CHECK_MESSAGE(results() == expect, "a PDL launch after an ordinary one differs");

    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    ok(g_drv.StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    const ssu_status_t st1 = ssu_plan_execute_update(pdl1, &a1, s);
    const ssu_status_t st2 = ssu_plan_execute_update(pdl2, &a2, s);
    ok(g_drv.StreamEndCapture(stream, &graph), "cuStreamEndCapture");
    REQUIRE(st1 == SSU_SUCCESS);
    REQUIRE(st2 == SSU_SUCCESS);
    ok(g_drv.GraphInstantiate(&exec, graph, 0), "cuGraphInstantiateWithFlags");
    for (int rep = 0; rep < 3; ++rep) {
      fresh();
      ok(g_drv.GraphLaunch(exec, stream), "cuGraphLaunch");
      CHECK_MESSAGE(results() == expect, "graph launch " << rep << " with SSU_PLAN_PDL differs");
    }
    g_drv.GraphExecDestroy(exec);
    g_drv.GraphDestroy(graph);
    for (ssu_plan_t p : {plain1, plain2, pdl1, pdl2}) ssu_plan_destroy(p);
  }
  g_drv.StreamDestroy(stream);
}

TEST_CASE("gpu: slot indices beyond the pool are padding and set the error word") {
  CudaMemory mem;
  for (ssu_dtype_t idx : {SSU_DTYPE_I32, SSU_DTYPE_I64}) {
    UpdateCase c;
    c.dtypes(SSU_DTYPE_BF16, SSU_DTYPE_BF16, SSU_DTYPE_F32).shape(4, 1, 64, 64);
    c.batch = 3;
    c.index = idx;
    c.has_dst = true;
    c.seed = 77;
    UpdateProblem problem(c, mem);
    ssu_update_args_t args = problem.args();
    ssu_plan_t plan = nullptr;
    REQUIRE(ssu_plan_create_update(g_cuda, &args, nullptr, &plan) == SSU_SUCCESS);
    uint32_t* word = static_cast<uint32_t*>(mem.alloc(4));
    const uint32_t zero = 0;
    mem.upload(word, &zero, 4);
    args.error_word = word;
    // A bad dst on a live sequence: that store is skipped, the rest runs.
    problem.poke_index("dst_index", 0, problem.slots() + 7);
    REQUIRE(ssu_plan_execute_update(plan, &args, nullptr) == SSU_SUCCESS);
    uint32_t got = 0;
    mem.synchronize(nullptr);
    mem.download(&got, word, 4);
    CHECK(got == SSU_ERROR_BIT_INDEX);
    // A bad src: the sequence is padding (zero output, no pool access).
    mem.upload(word, &zero, 4);
    problem.poke_index("src_index", 1, problem.slots());
    problem.reset();
    REQUIRE(ssu_plan_execute_update(plan, &args, nullptr) == SSU_SUCCESS);
    mem.synchronize(nullptr);
    mem.download(&got, word, 4);
    CHECK(got == SSU_ERROR_BIT_INDEX);
    std::vector<uint16_t> out(size_t(c.H * c.P));
    mem.download(out.data(),
                 static_cast<const uint16_t*>(args.out.data) + args.out.strides[0],
                 out.size() * 2);
    for (uint16_t v : out) CHECK(v == 0);
    mem.free(word);
    ssu_plan_destroy(plan);
  }
}

int main(int argc, char** argv) { return run_gpu_tests(argc, argv); }
