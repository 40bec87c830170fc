// Test harness for the checkpointed (replay) decode, SPEC.md section 7.
//
// A ReplayCase describes a layer, a ring and a decode loop; the harness
// builds a slot pool (more slots than the batch, slots served in a different
// order every step, padding rows mixed in), fresh model-like random inputs
// for every step, and runs the loop on a backend through the Memory
// interface of harness.h (host memory for the CPU suite, device memory for
// the GPU suite). At every step it checks every element of every buffer:
//  - outputs against the float64 reference of reference_replay.h within the
//    tolerances of SPEC section 6, padded outputs exactly zero;
//  - a checkpoint the step flushed within the state tolerance of the
//    logical state (the reference then continues from the stored values);
//  - ring entries the step appended: x and B bit for bit, the step size
//    within fp32 rounding of the float64 delta;
//  - both counters of every slot equal to the reference's;
//  - everything else (slots not named, other ring entries, scales, inputs,
//    gaps and guards) bit-identical to before the step.
// Ring entries at or beyond committed + pending are set to NaN before every
// step, so reading one shows in the outputs. A final flush op over every slot
// in use is checked the same way. Round-trip cases also run the plain update
// (ssu_plan_execute_update) on a copy of the pool, fed exactly the tokens the
// replay commits, and compare the pools at the end; flush-exact cases run it
// at every checkpoint store over the tokens the store folds and compare the
// stored bits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "reference_replay.h"
#include "ssu.h"

namespace ssutest {

// Memory layouts of the pool and the ring (all legal per ssu.h).
enum ReplayLayout : uint32_t {
  kReplayDense = 0,
  kReplayPadded = 1u << 0,      // padded slot, entry and row strides everywhere
  kReplayEntryMajor = 1u << 1,  // ring tensors stored entry-major: (L, S, ...) in memory
};

struct ReplayCase {
  Form form = Form::Single;  // single (T = 1), multi (Bt, T, ...), varlen
  int64_t T = 1;             // tokens per call (max_tokens for varlen)
  int64_t L = 4;             // ring capacity
  int steps = 12;            // replay steps before the final flush op

  int64_t H = 2, G = 1, P = 32, N = 16;
  int64_t batch = 3;

  ssu_dtype_t state = SSU_DTYPE_F32;  // f32, bf16, f16; i16, i8, f8e4m3 (with a scale pool)
  ssu_dtype_t input = SSU_DTYPE_F32;  // x, B, C, z, out and the x / B rings
  ssu_dtype_t param = SSU_DTYPE_F32;  // dt, A, D, dt_bias
  ssu_dtype_t index = SSU_DTYPE_I32;  // src_index and cu_seqlens; INVALID: no src_index
  ssu_dtype_t accepted = SSU_DTYPE_INVALID;  // num_accepted dtype; INVALID: like index

  // Mamba-1: H = G = 1, A (1, P, N), D and dt_bias (1, P), dt per channel;
  // with mamba1_dt_per_head the dt is (.., 1) per head and only dt_bias
  // makes the step size per channel.
  bool mamba1 = false;
  bool mamba1_dt_per_head = false;

  bool has_D = true, has_dt_bias = true, has_z = true, softplus = true;
  bool large_dt = false;       // now and then a dt beyond softplus' threshold
  bool speculative = false;    // num_accepted given, random in 0..pending
  Pad pad = Pad::None;         // padding rows (see harness.h)
  int disable_every = 0;       // every k-th step runs with DISABLE_STATE_UPDATE
  bool warm_start = false;     // slots start with random counters and ring entries
  uint32_t layout = kReplayDense;
  int extra_slots = 3;         // pool slots never used
  int spare_active = 1;        // slots in use beyond the batch (not served every step)

  bool stochastic = false;     // stochastic rounding of f16 / bf16 / f8e4m3 checkpoint stores
  uint64_t rounding_seed = 0;
  uint32_t rounding_rounds = 0;

  // Also run the plain update on a copy of the pool and compare at the end
  // (SPEC section 7's round trip); the rounding seed stays the same through
  // the loop.
  bool round_trip = false;
  // Also run the plain update on a copy of the pool at every checkpoint
  // store, over exactly the tokens that store folds (one multi-token call
  // from the same previous checkpoint, the same rounding seed): the stored
  // bits must agree for every state format (ssu.h: "exactly as the plain
  // update would store it after the same tokens").
  bool flush_exact = false;

  uint64_t seed = 1;
  const char* tag = "";

  ReplayCase& single() { form = Form::Single; T = 1; return *this; }
  ReplayCase& multi(int64_t t) { form = Form::Multi; T = t; return *this; }
  ReplayCase& varlen(int64_t t) { form = Form::Varlen; T = t; return *this; }
  ReplayCase& ring(int64_t l) { L = l; return *this; }
  ReplayCase& dtypes(ssu_dtype_t st, ssu_dtype_t in, ssu_dtype_t par = SSU_DTYPE_F32) {
    state = st; input = in; param = par; return *this;
  }
  ReplayCase& shape(int64_t h, int64_t g, int64_t p, int64_t n) {
    H = h; G = g; P = p; N = n; return *this;
  }
  ReplayCase& sr(uint64_t seed_value, uint32_t rounds = 0) {
    stochastic = true; rounding_seed = seed_value; rounding_rounds = rounds; return *this;
  }
  ReplayCase& mamba1_layer(int64_t p = 128, int64_t n = 16) {
    mamba1 = true; H = G = 1; P = p; N = n; return *this;
  }
  ReplayCase& run(int n) { steps = n; return *this; }
};

// One line describing a case, enough to rebuild it.
std::string describe(const ReplayCase& c);

// A caller error injected into one step (or the final flush op).
enum class ReplayFault {
  None,
  SlotOutOfRange,        // a live sequence's slot >= S
  AcceptedAbovePending,  // num_accepted > pending (speculative cases)
  SeqlenAboveT,          // a varlen length > T (varlen cases; host semantics only)
  CountersOutOfRange,    // a live slot's counters outside 0 <= committed, 0 <= pending,
                         // committed + pending <= L (restored after the call)
};

// How steps and flush ops are launched; the default calls the library
// directly. The GPU suite captures them into CUDA graphs instead.
class ReplayLauncher {
 public:
  virtual ~ReplayLauncher() = default;
  virtual ssu_status_t step(ssu_plan_t plan, const ssu_replay_args_t& args, ssu_stream_t stream) {
    return ssu_plan_execute_replay(plan, &args, stream);
  }
  virtual ssu_status_t flush(ssu_plan_t plan, const ssu_replay_flush_args_t& args,
                             ssu_stream_t stream) {
    return ssu_plan_execute_replay_flush(plan, &args, stream);
  }
};

struct ReplayOptions {
  ssu_stream_t stream = nullptr;
  const ssu_plan_options_t* plan_options = nullptr;
  ReplayLauncher* launcher = nullptr;  // NULL: direct calls
  // Record the bytes of the pool, scales, rings and counters (and of out)
  // after every step and after the flush op, to compare two runs bit for bit.
  bool keep_snapshots = false;
  // Caller errors behave as on the CUDA backend: an error word is passed;
  // a slot >= S or counters out of range make the sequence padding,
  // num_accepted > pending is clamped; the documented bit must be set and
  // the step runs. Otherwise
  // (the CPU backend) the call must be refused with nothing written, and
  // the step is then run again without the fault.
  bool device_semantics = false;
  ReplayFault fault = ReplayFault::None;
  int fault_step = -1;  // the step the fault hits; == steps: the flush op
};

struct ReplayResult {
  bool ok = true;
  std::string message;   // the case and the first bad elements when !ok
  int64_t elements = 0;  // elements compared
  int steps_run = 0;
  int flushes = 0;       // checkpoint stores seen (steps and flush op)
  ssu_algorithm_t algorithm = -1;
  uint32_t error_bits = 0;  // OR of the error words seen (device semantics)
  // Round trip: RMS float64 error of the replay and of the plain update
  // pools against the float64 trajectory (slots in use, every element).
  bool round_trip = false;
  // Also run the plain update on a copy of the pool at every checkpoint
  // store, over exactly the tokens that store folds (one multi-token call
  // from the same previous checkpoint, the same rounding seed): the stored
  // bits must agree for every state format (ssu.h: "exactly as the plain
  // update would store it after the same tokens").
  bool flush_exact = false;
  double replay_rms = 0.0, plain_rms = 0.0;
  // With keep_snapshots: per step (then the flush op), the bytes of every
  // buffer named in snapshot_names, guards and gaps included.
  std::vector<std::string> snapshot_names;
  std::vector<size_t> snapshot_esize;  // bytes per element of each
  std::vector<std::vector<std::vector<uint8_t>>> snapshots;
  std::vector<std::vector<uint8_t>> out_snapshots;  // out's bytes per step
};

class ReplayProblem {
 public:
  ReplayProblem(const ReplayCase& c, Memory& mem);
  ~ReplayProblem();
  ReplayProblem(const ReplayProblem&) = delete;
  ReplayProblem& operator=(const ReplayProblem&) = delete;

  const ReplayCase& spec() const;
  int64_t slots() const;
  // Generates and uploads the inputs of the next step: fresh tokens, the
  // slots served, lengths and num_accepted (from the reference's counters).
  void prepare_step();
  // Generates and uploads the slot list of a flush op over every slot in use.
  void prepare_flush();
  // Arguments of the prepared step / flush op (fresh copies, pointing into
  // this object: tests may mutate them).
  ssu_replay_args_t args(bool disable = false) const;
  ssu_replay_flush_args_t flush_args() const;
  const ssu_state_pool_t* pool() const;
  const ssu_replay_ring_t* ring() const;
  // Every buffer bit-identical to what it held after the last check.
  CheckResult check_unchanged() const;
  // Runs the case: plans, steps, checks, the flush op and the round trip.
  // Call once, on a fresh problem.
  ReplayResult run(ssu_context_t context, const ReplayOptions& options);

  struct Impl;  // opaque

 private:
  std::unique_ptr<Impl> impl_;
};

// Builds the case and runs it.
ReplayResult run_replay_case(ssu_context_t context, Memory& mem, const ReplayCase& c,
                             const ReplayOptions& options = ReplayOptions());

// The replay case table (replay_cases.cpp): every L and T, every state and
// input dtype, Mamba-1, varlen, num_accepted, padding, disable_state_update,
// stochastic rounding, index dtypes, layouts, warm starts, round trips.
std::vector<ReplayCase> replay_case_table();
// Longer runs at serving-like sizes (SSU_LONG_TESTS=1).
std::vector<ReplayCase> replay_long_case_table();

}  // namespace ssutest
