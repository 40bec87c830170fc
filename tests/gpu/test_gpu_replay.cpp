// The replay (checkpointed decode) on the CUDA backend: every case of the
// shared replay table (per-head cases also with N = 64, for the
// warp-per-head kernels) against the float64 reference at every step, and bit
// for bit against the CPU backend (checkpoint pool in every format, int16
// codes and scales and stochastically rounded bits included, rings and
// counters, after every step and after the flush op); replay steps and
// flush ops captured into CUDA graphs and replayed with new slots, tokens
// and counters in device memory, equal to eager calls; caller errors set the
// documented bits of the error word and leave the sequence alone. 8-bit
// checkpoint cases (i8, f8e4m3) run a third time with N = 128, the 8-bit
// rows the warp-per-head kernels take.
//
// Without a usable GPU the program prints why and exits 77 (meson's skip).
//
// Environment:
//   SSU_TEST_FILTER=<substring>  only table cases whose description contains it
//   SSU_TEST_CASE=<n>            only case n of the table
//   SSU_TEST_EVERY=<k>           only every k-th table case (sanitizer runs)
//   SSU_TEST_VERBOSE=1           print every case as it runs
//   SSU_LONG_TESTS=1             also the long table (serving-sized batches)
//   SSU_CUDA_REPLAY_WARP=0       the block kernels only (default here: 1, the
//                                warp-per-head kernels wherever the shape allows)
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../../src/cuda/cuda_driver.h"
#include "gpu_main.h"
#include "replay_harness.h"

using namespace ssutest;
using namespace ssu_cuda;
using namespace ssutest::gpu;

namespace {

ssu_context_t g_cpu = nullptr;

std::vector<ReplayCase> selected(const std::vector<ReplayCase>& table, bool apply_every) {
  const char* filter = std::getenv("SSU_TEST_FILTER");
  const char* only = std::getenv("SSU_TEST_CASE");
  const char* every_s = std::getenv("SSU_TEST_EVERY");
  const long every = apply_every && every_s ? std::max(1L, std::strtol(every_s, nullptr, 10)) : 1;
  std::vector<ReplayCase> out;
  for (size_t i = 0; i < table.size(); ++i) {
    if (only && std::to_string(i) != only) continue;
    if (filter && describe(table[i]).find(filter) == std::string::npos) continue;
    if (long(i) % every) continue;
    out.push_back(table[i]);
  }
  return out;
}

// "" when the two runs left the same bytes in every recorded buffer after
// every step and after the flush op; else where they first differ.
std::string compare_snapshots(const ReplayResult& a, const ReplayResult& b, const char* an,
                              const char* bn, bool with_out, size_t out_esize = 2) {
  if (a.snapshots.size() != b.snapshots.size() || a.snapshot_names != b.snapshot_names)
    return "the runs recorded different steps or buffers";
  std::string msg;
  int shown = 0;
  int64_t differing = 0;
  auto compare = [&](const std::vector<uint8_t>& x, const std::vector<uint8_t>& y,
                     const std::string& what, size_t es) {
    if (x.size() != y.size()) {
      msg += "\n    " + what + ": sizes differ";
      ++differing;
      return;
    }
    for (size_t i = 0; i + es <= x.size(); i += es) {
      if (std::memcmp(&x[i], &y[i], es) == 0) continue;
      ++differing;
      if (shown++ < 8) {
        uint64_t va = 0, vb = 0;
        std::memcpy(&va, &x[i], es);
        std::memcpy(&vb, &y[i], es);
        char line[200];
        std::snprintf(line, sizeof line, "\n    %s element %zu (guards included): %s 0x%llx, %s 0x%llx",
                      what.c_str(), i / es, an, (unsigned long long)va, bn,
                      (unsigned long long)vb);
        msg += line;
      }
    }
  };
  for (size_t s = 0; s < a.snapshots.size(); ++s) {
    const std::string when =
        s + 1 == a.snapshots.size() ? std::string("after the flush op")
                                    : "after step " + std::to_string(s);
    for (size_t j = 0; j < a.snapshot_names.size(); ++j) {
      compare(a.snapshots[s][j], b.snapshots[s][j], a.snapshot_names[j] + " " + when,
              a.snapshot_esize[j]);
    }
    if (with_out) compare(a.out_snapshots[s], b.out_snapshots[s], "out " + when, out_esize);
  }
  if (!differing) return "";
  return std::to_string(differing) + " element(s) differ" + msg;
}

// Captures the first call of each plan and operation into a CUDA graph (in
// global mode, the strictest: any call that is not allowed during capture
// fails it) and replays that graph for it and every later call. The
// arguments must be those of the capture (the same pointers and shapes):
// what changes between replays is the data in device memory (tokens, slot
// indices, num_accepted, counters, the seed).
class GraphLauncher final : public ReplayLauncher {
 public:
  GraphLauncher() { ok(g_drv.StreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~GraphLauncher() override {
    for (auto& kv : graphs_) {
      g_drv.GraphExecDestroy(kv.second.exec);
      g_drv.GraphDestroy(kv.second.graph);
    }
    g_drv.StreamDestroy(stream_);
  }
  ssu_status_t step(ssu_plan_t plan, const ssu_replay_args_t& args, ssu_stream_t) override {
    return run(plan, 0, &args, sizeof args, [&](ssu_stream_t s) {
      return ssu_plan_execute_replay(plan, &args, s);
    });
  }
  ssu_status_t flush(ssu_plan_t plan, const ssu_replay_flush_args_t& args, ssu_stream_t) override {
    return run(plan, 1, &args, sizeof args, [&](ssu_stream_t s) {
      return ssu_plan_execute_replay_flush(plan, &args, s);
    });
  }
  int captures = 0, launches = 0;
  std::string error;

 private:
  struct Entry {
    std::vector<uint8_t> args;
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
  };
  template <typename Fn>
  ssu_status_t run(ssu_plan_t plan, int op, const void* args, size_t size, Fn execute) {
    const auto key = std::make_pair(reinterpret_cast<uintptr_t>(plan), op);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      Entry e;
      e.args.assign(static_cast<const uint8_t*>(args), static_cast<const uint8_t*>(args) + size);
      ok(g_drv.StreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
      const ssu_status_t st = execute(reinterpret_cast<ssu_stream_t>(stream_));
      const std::string msg = st == SSU_SUCCESS ? "" : ssu_last_error_message();
      ok(g_drv.StreamEndCapture(stream_, &e.graph), "cuStreamEndCapture");
      if (st != SSU_SUCCESS) {
        error = "captured call failed: " + msg;
        g_drv.GraphDestroy(e.graph);
        return st;
      }
      ok(g_drv.GraphInstantiate(&e.exec, e.graph, 0), "cuGraphInstantiateWithFlags");
      ++captures;
      it = graphs_.emplace(key, std::move(e)).first;
    } else if (it->second.args.size() != size ||
               std::memcmp(it->second.args.data(), args, size) != 0) {
      error = "the arguments changed since the capture (a graph replays fixed arguments)";
      return SSU_ERROR_INVALID_ARGUMENT;
    }
    ok(g_drv.CtxSynchronize(), "cuCtxSynchronize");  // uploads are done
    ok(g_drv.GraphLaunch(it->second.exec, stream_), "cuGraphLaunch");
    ok(g_drv.StreamSynchronize(stream_), "cuStreamSynchronize");
    ++launches;
    return SSU_SUCCESS;
  }
  CUstream stream_ = nullptr;
  std::map<std::pair<uintptr_t, int>, Entry> graphs_;
};

int setup() {
  ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
  o.backend = SSU_BACKEND_CPU;
  o.num_threads = 0;
  if (ssu_context_create(&o, &g_cpu) != SSU_SUCCESS) {
    std::printf("cannot create the CPU context: %s\n", ssu_last_error_message());
    return 1;
  }
  return 0;
}
void teardown() { ssu_context_destroy(g_cpu); }

}  // namespace

TEST_CASE("gpu: every replay case matches the float64 reference and the CPU backend's bits") {
  CudaMemory dmem;
  HostMemory hmem;
  std::vector<ReplayCase> table = replay_case_table();
  if (long_tests_enabled()) {
    const std::vector<ReplayCase> more = replay_long_case_table();
    table.insert(table.end(), more.begin(), more.end());
  }
  // The table's rows of 16 elements run on the block kernels; every per-head
  // case runs again with N = 64 (rows of a multiple of 128 bytes), which
  // the warp-per-head kernels take, and an 8-bit one with N = 128 too
  // (64-byte rows go to the block kernels).
  const size_t shared_cases = table.size();
  for (size_t i = 0; i < shared_cases; ++i) {
    ReplayCase c = table[i];
    if (c.mamba1 || c.N == 64) continue;
    c.N = 64;
    table.push_back(c);
    if (c.state == SSU_DTYPE_I8 || c.state == SSU_DTYPE_F8E4M3) {
      c.N = 128;
      table.push_back(c);
    }
  }
  const std::vector<ReplayCase> cases = selected(table, true);
  // Every other case the warp-per-head kernels can take runs again on a
  // context whose planner never splits a head over several warps
  // (SSU_CUDA_REPLAY_WARP_PARTS=1, read at context creation): at the table's
  // batches the default splits most heads, and a flush step with one warp a
  // head takes a path of its own (the warp writes its head's delta entry).
  std::string why_ctx;
  const ssu_context_t one_part =
      create_cuda_context_with("SSU_CUDA_REPLAY_WARP_PARTS", "1", &why_ctx);
  REQUIRE_MESSAGE(one_part != nullptr, why_ctx);
  int one_part_cases = 0;
  const bool verbose = std::getenv("SSU_TEST_VERBOSE") != nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  int failed = 0;
  int64_t elements = 0, stores = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ReplayCase& c = cases[i];
    if (verbose) {
      std::printf("[%zu] %s\n", i, describe(c).c_str());
      std::fflush(stdout);
    }
    ReplayOptions o;
    o.keep_snapshots = true;
    const ReplayResult g = run_replay_case(g_cuda, dmem, c, o);
    const ReplayResult h = run_replay_case(g_cpu, hmem, c, o);
    elements += g.elements;
    stores += g.flushes;
    std::string why;
    if (!g.ok) why += "\n  cuda: " + g.message;
    if (!h.ok) why += "\n  cpu: " + h.message;
    if (g.ok && g.algorithm != SSU_ALGORITHM_CUDA_REPLAY)
      why += "\n  the CUDA plan chose algorithm " + std::to_string(g.algorithm) +
             ", expected cuda_replay";
    auto same_as_cpu = [&](const ReplayResult& cu, const char* name) {
      if (!cu.ok || !h.ok) return;
      const std::string d = compare_snapshots(h, cu, "cpu", name, false);
      if (!d.empty()) why += "\n  " + describe(c) + "\n  CPU and CUDA differ: " + d;
    };
    same_as_cpu(g, "cuda");
    if (!c.mamba1 && c.N >= 64 && i % 2 == 0) {
      ++one_part_cases;
      const ReplayResult g1 = run_replay_case(one_part, dmem, c, o);
      if (!g1.ok) why += "\n  cuda, one warp a head: " + g1.message;
      same_as_cpu(g1, "cuda (one warp a head)");
    }
    if (!why.empty() && ++failed <= 25) FAIL_CHECK("case " << i << why);
  }
  ssu_context_destroy(one_part);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gpu replay: %zu cases (%d again with one warp a head), %d failed, %lld "
              "checkpoint stores, %lld elements checked (CUDA), %.1f s\n",
              cases.size(), one_part_cases, failed, (long long)stores, (long long)elements, secs);
  CHECK(failed == 0);
}

// One replay step (and the flush op) captured once each, then replayed for
// every step of the loop with new tokens, slots, num_accepted, seeds and the
// counters the previous replay left: every replay is checked against the
// float64 reference like an eager call, and the whole run must leave the
// same bits as the eager run, outputs included.
TEST_CASE("gpu: replay steps and flush ops captured in CUDA graphs (and with SSU_PLAN_PDL) replay like eager calls") {
  CudaMemory mem;
  std::vector<ReplayCase> cases;
  {
    ReplayCase c;
    c.tag = "graph";
    c.single().ring(7).run(24).shape(4, 1, 64, 64);
    c.pad = Pad::Negative;
    c.batch = 6;
    c.seed = 4242;
    cases.push_back(c);
    c.multi(4).ring(8).run(16).dtypes(SSU_DTYPE_BF16, SSU_DTYPE_BF16).sr(0x5eed);
    c.speculative = true;
    c.index = SSU_DTYPE_I64;
    c.pad = Pad::PadSlotId;
    c.seed = 4243;
    cases.push_back(c);
    c = ReplayCase();
    c.tag = "graph";
    c.multi(2).ring(7).run(16).dtypes(SSU_DTYPE_I16, SSU_DTYPE_F16).shape(2, 1, 32, 16);
    c.speculative = true;
    c.disable_every = 3;  // a second plan: a second graph
    c.pad = Pad::Negative;
    c.seed = 4244;
    cases.push_back(c);
    c = ReplayCase();
    c.tag = "graph";
    c.mamba1_layer(256, 16).single().ring(16).run(40).dtypes(SSU_DTYPE_F16, SSU_DTYPE_BF16);
    c.layout = kReplayPadded;
    c.seed = 4245;
    cases.push_back(c);
    c = ReplayCase();
    c.tag = "graph";  // an 8-bit checkpoint, stochastically rounded, on the warp kernels
    c.multi(2).ring(8).run(16).dtypes(SSU_DTYPE_F8E4M3, SSU_DTYPE_BF16).shape(4, 2, 32, 128);
    c.sr(0x5eee);
    c.speculative = true;
    c.pad = Pad::PadSlotId;
    c.seed = 4246;
    cases.push_back(c);
    c = ReplayCase();
    c.tag = "graph";  // one token, N = 128, groups of four heads: the serving shape
    c.single().ring(16).run(40).dtypes(SSU_DTYPE_BF16, SSU_DTYPE_BF16).shape(8, 2, 32, 128);
    c.speculative = true;
    c.pad = Pad::PadSlotId;
    c.seed = 4247;
    cases.push_back(c);
  }
  for (const ReplayCase& c : selected(cases, false)) {
    CAPTURE(describe(c));
    ReplayOptions o;
    o.keep_snapshots = true;
    const ReplayResult eager = run_replay_case(g_cuda, mem, c, o);
    GraphLauncher graphs;
    o.launcher = &graphs;
    const ReplayResult replayed = run_replay_case(g_cuda, mem, c, o);
    CHECK_MESSAGE(eager.ok, "eager: " << eager.message);
    CHECK_MESSAGE(replayed.ok, "graph: " << replayed.message << " " << graphs.error);
    if (!eager.ok || !replayed.ok) continue;
    CHECK(graphs.captures == (c.disable_every ? 3 : 2));
    CHECK(graphs.launches == c.steps + 1);
    const std::string d = compare_snapshots(eager, replayed, "eager", "graph", true,
                                            ssu_dtype_size(c.input));
    CHECK_MESSAGE(d.empty(), "graph replays differ from eager calls: " << d);
    // The same plan with programmatic dependent launch (SSU_PLAN_PDL), eager
    // and captured: the same bits as ordinary launches.
    ssu_plan_options_t po = SSU_PLAN_OPTIONS_INIT;
    po.flags = SSU_PLAN_PDL;
    ReplayOptions op;
    op.keep_snapshots = true;
    op.plan_options = &po;
    const ReplayResult pdl_eager = run_replay_case(g_cuda, mem, c, op);
    GraphLauncher pdl_graphs;
    op.launcher = &pdl_graphs;
    const ReplayResult pdl_graph = run_replay_case(g_cuda, mem, c, op);
    CHECK_MESSAGE(pdl_eager.ok, "pdl eager: " << pdl_eager.message);
    CHECK_MESSAGE(pdl_graph.ok, "pdl graph: " << pdl_graph.message << " " << pdl_graphs.error);
    if (!pdl_eager.ok || !pdl_graph.ok) continue;
    for (const ReplayResult* r : {&pdl_eager, &pdl_graph}) {
      const std::string e = compare_snapshots(eager, *r, "eager", "pdl", true,
                                              ssu_dtype_size(c.input));
      CHECK_MESSAGE(e.empty(), "launches with SSU_PLAN_PDL differ from ordinary ones: " << e);
    }
  }
}

// Caller errors on the device: a slot >= S (int32 and int64 slots) and
// counters out of range make the sequence padding (zero outputs, nothing of
// any slot touched), num_accepted > pending is clamped to pending; each sets
// its bit in the error word, in a step and in the flush op, eager and inside
// a graph. The harness checks the outputs, every buffer and the word.
TEST_CASE("gpu: slot >= S, num_accepted > pending and bad counters set the error word") {
  CudaMemory mem;
  ReplayCase base;
  base.tag = "error_word";
  base.multi(4).ring(7).run(8).shape(2, 1, 32, 16).dtypes(SSU_DTYPE_BF16, SSU_DTYPE_BF16);
  base.speculative = true;
  base.pad = Pad::Negative;
  struct Fault {
    ReplayCase c;
    ReplayFault fault;
    int step;
    bool graph;
  };
  std::vector<Fault> faults;
  for (ssu_dtype_t idx : {SSU_DTYPE_I32, SSU_DTYPE_I64}) {
    for (uint64_t s : {600u, 601u}) {  // int64: a slot of 2^40 + S with odd seeds
      ReplayCase c = base;
      c.index = idx;
      c.seed = s + uint64_t(idx) * 10;
      faults.push_back({c, ReplayFault::SlotOutOfRange, 0, false});
      faults.push_back({c, ReplayFault::SlotOutOfRange, 5, false});
      faults.push_back({c, ReplayFault::SlotOutOfRange, c.steps, false});
    }
  }
  {
    ReplayCase c = base;
    c.seed = 620;
    faults.push_back({c, ReplayFault::AcceptedAbovePending, 3, false});
    faults.push_back({c, ReplayFault::AcceptedAbovePending, c.steps, false});
    faults.push_back({c, ReplayFault::CountersOutOfRange, 2, false});
    faults.push_back({c, ReplayFault::CountersOutOfRange, 6, false});
    faults.push_back({c, ReplayFault::CountersOutOfRange, c.steps, false});
    faults.push_back({c, ReplayFault::SlotOutOfRange, 4, true});
    faults.push_back({c, ReplayFault::AcceptedAbovePending, 4, true});
    c.state = SSU_DTYPE_I16;
    c.seed = 621;
    faults.push_back({c, ReplayFault::SlotOutOfRange, 4, false});
    faults.push_back({c, ReplayFault::AcceptedAbovePending, 4, false});
    faults.push_back({c, ReplayFault::CountersOutOfRange, 4, true});
  }
  {
    // One token at N = 128 with groups of four heads: the warp kernels' serving shape.
    ReplayCase c = base;
    c.single().ring(16).shape(8, 2, 32, 128);
    c.seed = 630;
    faults.push_back({c, ReplayFault::SlotOutOfRange, 3, false});
    faults.push_back({c, ReplayFault::AcceptedAbovePending, 3, false});
    faults.push_back({c, ReplayFault::CountersOutOfRange, 2, false});
    faults.push_back({c, ReplayFault::CountersOutOfRange, 5, true});
  }
  for (const Fault& f : faults) {
    ReplayOptions o;
    o.device_semantics = true;
    o.fault = f.fault;
    o.fault_step = f.step;
    GraphLauncher graphs;
    if (f.graph) o.launcher = &graphs;
    const ReplayResult r = run_replay_case(g_cuda, mem, f.c, o);
    CHECK_MESSAGE(r.ok, "fault " << int(f.fault) << " at step " << f.step
                                 << (f.graph ? " (graph)" : "") << ": " << r.message << " "
                                 << graphs.error);
    const uint32_t bit = f.fault == ReplayFault::SlotOutOfRange ? SSU_ERROR_BIT_INDEX
                         : f.fault == ReplayFault::AcceptedAbovePending ? SSU_ERROR_BIT_ACCEPTED
                                                                        : SSU_ERROR_BIT_COUNTERS;
    CHECK(r.error_bits == bit);
  }
}

int main(int argc, char** argv) {
  // The warp-per-head kernels at every batch (unless the environment says
  // otherwise), so that the table's small batches exercise them too.
  setenv("SSU_CUDA_REPLAY_WARP", "1", 0);
  return run_gpu_tests(argc, argv, setup, teardown);
}
