// The CUDA and CPU backends store the same state bits: every store mode of
// the update with every way of storing a state (f32, f16 and bf16 rounded to
// nearest, f16 and bf16 stochastically rounded, int16 and int8 codes and
// scales, e4m3 codes and scales rounded to nearest and stochastically) is
// run on both backends on identical inputs, and the pool, its scales and the
// intermediate buffers must be bit-identical (outputs are checked against
// the float64 reference on each side, within tolerance). Then the rounding
// seed advanced on the device inside a captured CUDA graph: two replays
// draw different bits, each equal to the CPU's for that seed.
//
// Without a usable GPU the program prints why and exits 77 (meson's skip).
//
// Environment:
//   SSU_TEST_FILTER=<substring>  only cases whose description contains it
//   SSU_TEST_VERBOSE=1           print every case as it runs
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

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

ssu_context_t g_cpu = nullptr;
// A CUDA context whose pipelined kernels run on three blocks (see main).
ssu_context_t g_cuda_few = nullptr;

const char* const kStateBuffers[] = {"state", "state_scale", "intermediate_states",
                                     "intermediate_scales"};

// Whether v (the raw bits of a value of that dtype) is a NaN.
bool is_nan_bits(uint32_t v, ssu_dtype_t dtype) {
  switch (dtype) {
    case SSU_DTYPE_F32: return (v & 0x7f800000u) == 0x7f800000u && (v & 0x7fffffu) != 0;
    case SSU_DTYPE_F16: return (v & 0x7c00u) == 0x7c00u && (v & 0x3ffu) != 0;
    case SSU_DTYPE_BF16: return (v & 0x7f80u) == 0x7f80u && (v & 0x7fu) != 0;
    case SSU_DTYPE_F8E4M3: return (v & 0x7fu) == 0x7fu;
    default: return false;
  }
}

// "" if every state buffer of the two problems holds the same bytes, else
// where the first difference is. nan_any: a NaN matches any NaN (the
// arithmetic before a store may give a NaN another sign or payload on each
// backend: x86 keeps a NaN's sign, the GPU returns its canonical NaN).
std::string compare_state_bits(const UpdateProblem& cpu, const UpdateProblem& gpu,
                               bool nan_any = false) {
  for (const char* name : kStateBuffers) {
    if (!cpu.has_buffer(name)) continue;
    const std::vector<uint8_t> a = cpu.download(name), b = gpu.download(name);
    if (a.size() != b.size()) return std::string(name) + ": sizes differ";
    const bool scales = std::string(name).find("scale") != std::string::npos;
    const ssu_dtype_t dtype = scales ? SSU_DTYPE_F32 : cpu.spec().state;
    const size_t es = ssu_dtype_size(dtype);
    int shown = 0;
    std::string msg;
    int64_t differing = 0;
    for (size_t i = 0; i + es <= a.size(); i += es) {
      uint32_t va = 0, vb = 0;
      std::memcpy(&va, &a[i], es);
      std::memcpy(&vb, &b[i], es);
      if (va == vb || (nan_any && is_nan_bits(va, dtype) && is_nan_bits(vb, dtype))) continue;
      ++differing;
      if (shown++ < 6) {
        char line[160];
        std::snprintf(line, sizeof line, "\n    %s byte %zu (element %zu of the buffer, guards "
                                         "included): cpu 0x%x cuda 0x%x",
                      name, i, i / es, va, vb);
        msg += line;
      }
    }
    if (differing) return std::to_string(differing) + " element(s) differ" + msg;
  }
  return "";
}

// Runs the update on `ctx`; "" or the library's status and message.
std::string execute_only(ssu_context_t ctx, UpdateProblem& p, ssu_stream_t stream, Memory& mem) {
  const ssu_update_args_t args = p.args();
  ssu_plan_t plan = nullptr;
  ssu_status_t st = ssu_plan_create_update(ctx, &args, nullptr, &plan);
  if (st == SSU_SUCCESS) {
    st = ssu_plan_execute_update(plan, &args, stream);
    mem.synchronize(stream);
    ssu_plan_destroy(plan);
  }
  return st == SSU_SUCCESS ? "" : std::string(ssu_status_string(st)) + ": " + ssu_last_error_message();
}

// Runs the update and checks it against the float64 reference.
CheckResult run_on(ssu_context_t ctx, UpdateProblem& p, ssu_stream_t stream, Memory& mem) {
  const std::string why = execute_only(ctx, p, stream, mem);
  if (!why.empty()) {
    CheckResult r;
    r.ok = false;
    r.message = std::string(ctx == g_cpu ? "cpu" : "cuda") + ": " + why;
    return r;
  }
  return p.check();
}

}  // namespace

TEST_CASE("gpu: CPU and CUDA store identical state bits in every mode and dtype") {
  CudaMemory dmem;
  HostMemory hmem;
  const char* filter = std::getenv("SSU_TEST_FILTER");
  const bool verbose = std::getenv("SSU_TEST_VERBOSE") != nullptr;
  std::vector<UpdateCase> cases = state_bits_case_table();
  // The exact-value cases of the shared table, where the reference knows
  // the stored bits too.
  for (const UpdateCase& c : update_case_table())
    if (c.exact_values) cases.push_back(c);
  // The 8-bit states, every mode, model-like and exact values.
  for (const UpdateCase& c : state8_gpu_case_table()) cases.push_back(c);
  int failed = 0, run = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const UpdateCase& c = cases[i];
    const std::string d = describe(c);
    if (filter && d.find(filter) == std::string::npos) continue;
    if (verbose) {
      std::printf("[%zu] %s\n", i, d.c_str());
      std::fflush(stdout);
    }
    ++run;
    UpdateProblem host(c, hmem), dev(c, dmem);
    const CheckResult rc = run_on(g_cpu, host, nullptr, hmem);
    const CheckResult rg = run_on(g_cuda, dev, nullptr, dmem);
    // The same call on three persistent blocks, so that the pipelined
    // kernels run it whenever they can (the default context runs small calls
    // of their form on the direct kernels, or on the simple ones with
    // SSU_CUDA_DIRECT=0; tools/gpu-check.sh runs this program both ways).
    UpdateProblem devp(c, dmem);
    const CheckResult rp = run_on(g_cuda_few, devp, nullptr, dmem);
    std::string why;
    if (!rc.ok) why += "\n  cpu vs reference: " + rc.message;
    if (!rg.ok) why += "\n  cuda vs reference: " + rg.message;
    if (!rp.ok) why += "\n  cuda (three blocks) vs reference: " + rp.message;
    const std::string diff = compare_state_bits(host, dev);
    if (!diff.empty()) why += "\n  cpu vs cuda state bits: " + diff;
    const std::string diffp = compare_state_bits(host, devp);
    if (!diffp.empty()) why += "\n  cpu vs cuda (three blocks) state bits: " + diffp;
    if (!why.empty() && ++failed <= 20) FAIL_CHECK("case " << i << ": " << d << why);
  }
  std::printf("gpu state bits: %d cases, %d failed\n", run, failed);
  CHECK(failed == 0);
}

// The special cases of each store, through every kernel that runs them: a
// pool with Inf, NaN, the largest finite values, subnormals and signed
// zeros; x zero on every other row (there the new state is the old one
// times the decay, so subnormal and tiny values stay tiny: f16 flushes them
// to zero); a growing head (A > 0), whose largest values overflow to Inf.
// int16 pools get NaN, Inf, zero and huge decode scales instead; int8 and
// e4m3 pools (e4m3 rounded to nearest and stochastically) both: such scales
// and the codes' edges (the rails, int8's -128, e4m3's NaN codes 0x7F /
// 0xFF, subnormals, signed zeros), and all-zero rows. CPU and CUDA (the
// default context: direct kernels for these small calls, simple ones for
// block-scaled states or with SSU_CUDA_DIRECT=0; three blocks: pipelined
// kernels) must store the same bits. Special values go on every third element, then
// on one in 61: alone among finite neighbours, since the pipelined SR
// kernels take one rare-value branch for a row pair's 16 values, which a
// lone special value must still send there.
TEST_CASE("gpu: special state values are stored alike by the CPU and CUDA backends") {
  CudaMemory dmem;
  HostMemory hmem;
  const uint16_t f16_special[] = {0x7c00, 0xfc00, 0x7e00, 0xfd01, 0x7bff, 0xfbff, 0x0001,
                                  0x83ff, 0x0400, 0x8400, 0x8000, 0x0000, 0x3c00, 0x7bf0};
  const uint16_t bf16_special[] = {0x7f80, 0xff80, 0x7fc0, 0xffa1, 0x7f7f, 0xff7f, 0x0001,
                                   0x807f, 0x0080, 0x8080, 0x8000, 0x0000, 0x3f80, 0x7f70};
  const uint32_t scale_special[] = {0x7f800000u, 0x7fc00000u, 0x00000000u, 0x7f7fffffu,
                                    0x3f800000u, 0x00000001u};
  const uint8_t i8_special[] = {0x7f, 0x81, 0x80, 0x00, 0x01, 0xff, 0x40, 0xc0,
                                0x7e, 0x82, 0x10, 0xf0, 0x02, 0xfe};
  const uint8_t e4m3_special[] = {0x7f, 0xff, 0x7e, 0xfe, 0x01, 0x81, 0x08, 0x88,
                                  0x80, 0x00, 0x38, 0x07, 0x77, 0xf7};
  struct Store {
    ssu_dtype_t state;
    bool sr;
  };
  int run = 0;
  for (const Store& s : {Store{SSU_DTYPE_F16, true}, Store{SSU_DTYPE_BF16, true},
                         Store{SSU_DTYPE_F16, false}, Store{SSU_DTYPE_BF16, false},
                         Store{SSU_DTYPE_I16, false}, Store{SSU_DTYPE_I8, false},
                         Store{SSU_DTYPE_F8E4M3, false}, Store{SSU_DTYPE_F8E4M3, true}})
    for (int64_t N : {int64_t(64), int64_t(128)})
    for (uint64_t every : {uint64_t(3), uint64_t(61)}) {
      UpdateCase c;
      c.dtypes(s.state, SSU_DTYPE_BF16, SSU_DTYPE_F32).shape(2, 1, 64, N);
      c.batch = 4;
      c.seed = 4242 + uint64_t(N) + 10 * uint64_t(s.state) + 1000 * every;
      // Block-scaled: special decode scales on one row in 5, then one in 61.
      const int64_t scale_every = every == 3 ? 5 : int64_t(every);
      const bool is8 = s.state == SSU_DTYPE_I8 || s.state == SSU_DTYPE_F8E4M3;
      c.tag = "special_values";
      if (s.sr) c.sr(0x5eed0000ull + uint64_t(N), 0);
      CAPTURE(describe(c));
      UpdateProblem host(c, hmem), dev(c, dmem), devp(c, dmem);
      for (UpdateProblem* p : {&host, &dev, &devp}) {
        p->rewrite("A", [](uint8_t* e, int64_t i) {
          if (i == 1) {
            const float grow = 0.25f;
            std::memcpy(e, &grow, 4);
          }
        });
        p->rewrite("x", [&](uint8_t* e, int64_t i) {
          if ((i % c.P) % 2 == 0) std::memset(e, 0, 2);
        });
        if (s.state == SSU_DTYPE_I16 || is8) {
          p->rewrite("state_scale", [&](uint8_t* e, int64_t i) {
            if (i % scale_every == 0) std::memcpy(e, &scale_special[(i / scale_every) % 6], 4);
          });
        }
        if (is8) {
          // Codes at their edges, then one row in 7 all zero.
          const uint8_t* sp = s.state == SSU_DTYPE_I8 ? i8_special : e4m3_special;
          p->rewrite("state", [&](uint8_t* e, int64_t i) {
            uint64_t h = (uint64_t(i) + c.seed) * 0x9E3779B97F4A7C15ull;
            h ^= h >> 29;
            if (h % every == 0) *e = sp[(h / every) % 14];
            if ((i / c.N) % 7 == 3) *e = 0;
          });
        } else if (s.state != SSU_DTYPE_I16) {
          const uint16_t* sp = s.state == SSU_DTYPE_F16 ? f16_special : bf16_special;
          p->rewrite("state", [&](uint8_t* e, int64_t i) {
            uint64_t h = (uint64_t(i) + c.seed) * 0x9E3779B97F4A7C15ull;
            h ^= h >> 29;
            if (h % every == 0) std::memcpy(e, &sp[(h / every) % 14], 2);
          });
        }
      }
      const std::string eh = execute_only(g_cpu, host, nullptr, hmem);
      const std::string ed = execute_only(g_cuda, dev, nullptr, dmem);
      const std::string ep = execute_only(g_cuda_few, devp, nullptr, dmem);
      REQUIRE_MESSAGE(eh.empty(), eh);
      REQUIRE_MESSAGE(ed.empty(), ed);
      REQUIRE_MESSAGE(ep.empty(), ep);
      for (UpdateProblem* d : {&dev, &devp}) {
        const std::string why = compare_state_bits(host, *d, /*nan_any=*/true);
        CHECK_MESSAGE(why == "", why);
      }
      ++run;
    }
  std::printf("special state values: %d cases\n", run);
}

// update + ssu_advance_seed captured into one graph; two replays from the
// same initial pool use seeds s and s + 1.
TEST_CASE("gpu: the seed advanced inside a captured graph; each replay matches the CPU") {
  CudaMemory dmem;
  HostMemory hmem;
  for (ssu_dtype_t st : {SSU_DTYPE_BF16, SSU_DTYPE_F16, SSU_DTYPE_F8E4M3}) {
    UpdateCase c;
    c.multi(3).dtypes(st, SSU_DTYPE_BF16, SSU_DTYPE_F32).shape(4, 2, 64, 64);
    c.store = Store::Intermediate;
    c.has_dst = true;
    c.batch = 5;
    c.pad = Pad::Negative;
    c.seed = 31337 + uint64_t(st);
    c.tag = "graph_sr";
    const uint64_t s0 = 0xfffffffffffffffeull;  // the advance wraps between replays
    c.sr(s0, 0);
    CAPTURE(describe(c));
    UpdateProblem dev(c, dmem), host(c, hmem);
    const ssu_update_args_t args = dev.args();
    ssu_plan_t plan = nullptr;
    REQUIRE_MESSAGE(ssu_plan_create_update(g_cuda, &args, nullptr, &plan) == SSU_SUCCESS,
                    std::string(ssu_last_error_message()));

    CUstream stream = nullptr;
    ok(g_drv.StreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    const ssu_stream_t sst = reinterpret_cast<ssu_stream_t>(stream);
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    ok(g_drv.StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    const ssu_status_t e1 = ssu_plan_execute_update(plan, &args, sst);
    const std::string m1 = ssu_last_error_message();
    const ssu_status_t e2 = ssu_advance_seed(g_cuda, dev.rounding_seed_ptr(), 1, sst);
    const std::string m2 = ssu_last_error_message();
    ok(g_drv.StreamEndCapture(stream, &graph), "cuStreamEndCapture");
    REQUIRE_MESSAGE(e1 == SSU_SUCCESS, m1);
    REQUIRE_MESSAGE(e2 == SSU_SUCCESS, m2);
    ok(g_drv.GraphInstantiate(&exec, graph, 0), "cuGraphInstantiateWithFlags");

    // The scales of an e4m3 pool and buffer, one after the other.
    auto scales = [](const UpdateProblem& p) {
      std::vector<uint8_t> v;
      for (const char* name : {"state_scale", "intermediate_scales"})
        if (p.has_buffer(name)) {
          const std::vector<uint8_t> b = p.download(name);
          v.insert(v.end(), b.begin(), b.end());
        }
      return v;
    };
    std::vector<std::vector<uint8_t>> replay_state, replay_inter, replay_scales;
    for (int replay = 0; replay < 2; ++replay) {
      dev.reset_outputs();  // the same initial pool; the seed stays advanced
      ok(g_drv.GraphLaunch(exec, stream), "cuGraphLaunch");
      ok(g_drv.StreamSynchronize(stream), "cuStreamSynchronize");
      replay_state.push_back(dev.download("state"));
      replay_inter.push_back(dev.download("intermediate_states"));
      replay_scales.push_back(scales(dev));
      // Within tolerance of the reference; the seed is now s0 + replay + 1
      // (written by the graph, so that is what the check expects).
      dev.set_rounding_seed(s0 + uint64_t(replay) + 1);
      const CheckResult r = dev.check();
      CHECK_MESSAGE(r.ok, r.message);
    }
    std::vector<uint8_t> seed_bytes = dev.download("rounding_seed");
    uint64_t seed_now = 0;
    std::memcpy(&seed_now, seed_bytes.data() + 64, 8);  // after the 64-byte guard
    CHECK(seed_now == s0 + 2);
    CHECK(replay_state[0] != replay_state[1]);
    CHECK(replay_inter[0] != replay_inter[1]);

    for (int replay = 0; replay < 2; ++replay) {
      CAPTURE(replay);
      host.reset_outputs();
      host.set_rounding_seed(s0 + uint64_t(replay));
      const CheckResult r = run_on(g_cpu, host, nullptr, hmem);
      CHECK_MESSAGE(r.ok, r.message);
      CHECK(host.download("state") == replay_state[size_t(replay)]);
      CHECK(host.download("intermediate_states") == replay_inter[size_t(replay)]);
      CHECK(scales(host) == replay_scales[size_t(replay)]);
    }
    g_drv.GraphExecDestroy(exec);
    g_drv.GraphDestroy(graph);
    g_drv.StreamDestroy(stream);
    ssu_plan_destroy(plan);
  }
}

int main(int argc, char** argv) {
  // The CPU context every comparison runs against.
  const auto setup = []() -> int {
    ssu_context_options_t co = SSU_CONTEXT_OPTIONS_INIT;
    co.backend = SSU_BACKEND_CPU;
    co.num_threads = 2;
    if (ssu_context_create(&co, &g_cpu) != SSU_SUCCESS) {
      std::printf("ssu_context_create(CPU) failed: %s\n", ssu_last_error_message());
      return 1;
    }
    std::string why;
    g_cuda_few = create_capped_pipeline_context(3, &why);
    if (!g_cuda_few) {
      std::printf("ssu_context_create(CUDA, three blocks) failed: %s\n", why.c_str());
      return 1;
    }
    return 0;
  };
  return run_gpu_tests(argc, argv, setup, [] {
    ssu_context_destroy(g_cuda_few);
    ssu_context_destroy(g_cpu);
  });
}
