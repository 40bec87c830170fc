// Test harness for the Mamba-3 step and rotary step (SPEC.md section 3).
//
// Builds problems from compact case descriptions with fresh model-like random
// inputs, lays them out in (possibly strided) buffers reached through the
// Memory interface of harness.h, so that one body drives the CPU suite
// (HostMemory) and the GPU suite, runs the library and checks every element
// of every buffer: outputs and pool rows against the float64 reference of
// reference_mamba3.h, everything else (inputs, untouched slots, gaps between
// rows, guards around every buffer) bit for bit against its poisoned image.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "reference_mamba3.h"
#include "ssu.h"

namespace ssutest {
namespace m3 {

// ---------------------------------------------------------------------------
// TensorSet: tensors in their own allocations with poisoned guards, a host
// image of each (the initial contents), and an expectation per element.
// ---------------------------------------------------------------------------
class TensorSet {
 public:
  explicit TensorSet(Memory& mem);
  ~TensorSet();
  TensorSet(const TensorSet&) = delete;
  TensorSet& operator=(const TensorSet&) = delete;

  // Adds a tensor of `shape` with element `strides`, poisoned; returns its id.
  int add(const std::string& name, ssu_dtype_t dtype, const std::vector<int64_t>& shape,
          const std::vector<int64_t>& strides);
  // Allocates (once) and uploads every image / one image.
  void upload();
  void upload(int id);

  int64_t element(int id, std::initializer_list<int64_t> idx) const;  // in the buffer, guards included
  void set(int id, std::initializer_list<int64_t> idx, double value);  // into the image, rounded
  double get(int id, std::initializer_list<int64_t> idx) const;        // from the image
  // Raw bits of one image element (zero-extended).
  uint64_t bits(int id, std::initializer_list<int64_t> idx) const;
  // Copies the image bits of element `from` of tensor `src` of `from_set`
  // into element `to` of this set's tensor `dst`.
  void copy_bits(int dst, std::initializer_list<int64_t> to, const TensorSet& from_set, int src,
                 std::initializer_list<int64_t> from);

  ssu_tensor_t desc(int id) const;  // id < 0: an absent tensor (all zero)
  const std::vector<int64_t>& shape(int id) const;
  ssu_dtype_t dtype(int id) const;
  const std::string& name(int id) const;
  int count() const { return int(bufs_.size()); }

  // Expectations for the next check(); elements without one must keep the
  // bits of their image.
  void clear_expectations();
  void expect_close(int id, std::initializer_list<int64_t> idx, double ref, double rtol,
                    double atol);
  void expect_zero(int id, std::initializer_list<int64_t> idx);  // +0 or -0
  void expect_value(int id, std::initializer_list<int64_t> idx, double exact);
  void expect_bits(int id, std::initializer_list<int64_t> idx, uint64_t bits);
  // An angle in [0, 2 pi] within `atol` of `ref` on the circle.
  void expect_angle(int id, std::initializer_list<int64_t> idx, double ref, double atol);

  // Downloads every buffer and checks every element (with `unchanged_only`,
  // that every element keeps the bits of its image).
  CheckResult check(const std::string& header, bool unchanged_only = false) const;
  // Downloads one buffer (guards included) and returns its raw bytes.
  std::vector<uint8_t> fetch(int id) const;
  // Raw bits of element `e` (buffer position) of a fetched buffer.
  uint64_t bits_at(int id, const std::vector<uint8_t>& fetched, int64_t e) const;

 private:
  struct Buf;
  Memory& mem_;
  std::vector<std::unique_ptr<Buf>> bufs_;
};

// Strides of a tensor of `shape`: `order` lists the axes from outermost to
// innermost in memory (empty: row-major), `pad[axis]` extra elements follow
// each run of that axis.
std::vector<int64_t> strides_of(const std::vector<int64_t>& shape, std::vector<int> order = {},
                                std::vector<int64_t> pad = {});

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------
enum class Dst {
  Same,      // no dst_index: stores go back to the src slot
  Distinct,  // dst_index naming other slots
  Equal,     // dst_index given, with the values of src_index
};

enum Layout : int {
  kDenseLayout = 0,
  kAligned = 1,  // padded strides keeping 16-byte alignment, broadcast and
                 // transposed parameter tensors, strided slot indices
  kOdd = 2,      // as kAligned with odd paddings (element alignment only)
};

struct StepCase {
  ssu_dtype_t state = SSU_DTYPE_F32;
  ssu_dtype_t input = SSU_DTYPE_F32;   // B, C, x, z, out, prev_B, prev_x
  ssu_dtype_t param = SSU_DTYPE_F32;   // A, dt, trap
  ssu_dtype_t weight = SSU_DTYPE_F32;  // D, xproj, zproj, outproj
  ssu_dtype_t index = SSU_DTYPE_I32;
  int64_t H = 2, P = 64, N = 16, R = 1, batch = 3;
  bool has_D = true, has_z = false, outproj = true, update_prev = true;
  bool has_src = true;
  Dst dst = Dst::Same;
  Pad pad = Pad::None;
  bool dst_pad = false;  // one live sequence gets a padding dst entry: its
                         // stores are skipped, its output is computed
  int layout = kAligned;
  int extra_slots = 3;
  uint64_t seed = 1;
  const char* tag = "";
};
std::string describe(const StepCase& c);

struct RotaryCase {
  ssu_dtype_t qk = SSU_DTYPE_F32;  // q, k, q_out, k_out
  ssu_dtype_t rate = SSU_DTYPE_F32, dt = SSU_DTYPE_F32, bias = SSU_DTYPE_F32;
  ssu_dtype_t index = SSU_DTYPE_I32;
  int64_t H = 2, N = 64, R = 1, Sa = 32, batch = 3;
  bool halved = false, q_bias = true, k_bias = true, in_place = false;
  bool has_src = true;
  Dst dst = Dst::Same;
  Pad pad = Pad::None;
  int layout = kAligned;
  int extra_slots = 3;
  uint64_t seed = 1;
  const char* tag = "";
};
std::string describe(const RotaryCase& c);

// ---------------------------------------------------------------------------
// Problems
// ---------------------------------------------------------------------------
// Slot assignment shared by both problems.
struct Slots {
  int64_t S = 0;
  int64_t pad_slot_id = -1;
  std::vector<int64_t> src, dst;  // logical values (dst empty when absent)
  std::vector<bool> live;         // src not padding
};

class StepProblem {
 public:
  StepProblem(const StepCase& c, Memory& mem);
  const StepCase& spec() const { return c_; }
  ssu_mamba3_step_args_t args() const;  // `pool` points into this object
  const ssu_state_pool_t* pool() const { return &pool_; }
  TensorSet& tensors() { return t_; }
  const TensorSet& tensors() const { return t_; }
  const Slots& slots() const { return slots_; }
  void reset() { t_.upload(); }
  CheckResult check() const;            // the reference's expectations
  CheckResult check_unchanged() const;  // nothing written
  // Sets element b of src_index / dst_index in the image and on the device
  // (the expectations are not updated: for validation tests).
  void poke_index(bool dst, int64_t b, int64_t value);
  // Expects sequence b to be treated as padding from now on (e.g. after a
  // src index >= S was poked in, which the CUDA backend treats so).
  void expect_padded(int64_t b);

  // Tensor ids (-1: absent).
  int state = -1, prev_B = -1, prev_x = -1, A = -1, dt = -1, trap = -1, B = -1, C = -1, x = -1,
      z = -1, D = -1, xproj = -1, zproj = -1, outproj = -1, out = -1, src = -1, dst = -1;

 private:
  void expect_reference();
  StepCase c_;
  TensorSet t_;
  Slots slots_;
  ssu_state_pool_t pool_;
};

class RotaryProblem {
 public:
  RotaryProblem(const RotaryCase& c, Memory& mem);
  const RotaryCase& spec() const { return c_; }
  ssu_mamba3_rotary_args_t args() const;
  const ssu_state_pool_t* pool() const { return &pool_; }
  TensorSet& tensors() { return t_; }
  const Slots& slots() const { return slots_; }
  void reset() { t_.upload(); }
  CheckResult check() const;
  CheckResult check_unchanged() const;
  void poke_index(bool dst, int64_t b, int64_t value);
  void expect_padded(int64_t b);

  int angle = -1, rate = -1, dt = -1, q = -1, k = -1, q_bias = -1, k_bias = -1, q_out = -1,
      k_out = -1, src = -1, dst = -1;

 private:
  void expect_reference();
  RotaryCase c_;
  TensorSet t_;
  Slots slots_;
  ssu_state_pool_t pool_;
};

// ---------------------------------------------------------------------------
// Runners (plan, execute, synchronize, check). Each returns the check; a
// failed library call is a failed check naming the call and its message.
// ---------------------------------------------------------------------------
CheckResult run_step_case(ssu_context_t ctx, Memory& mem, const StepCase& c);
CheckResult run_rotary_case(ssu_context_t ctx, Memory& mem, const RotaryCase& c);
// The pooled call against gather -> dense call without indices -> scatter:
// outputs and every pool must be bit-identical.
CheckResult run_gather_scatter_case(ssu_context_t ctx, Memory& mem, const StepCase& c);

struct ChainConfig {
  int64_t H = 2, P = 16, N = 32, R = 2, Sa = 8, batch = 3;
  bool halved = true, has_z = true, outproj = true;
  int64_t steps = 2000, check_every = 100;
  uint64_t seed = 1;
  const char* tag = "chain";
};
std::string describe(const ChainConfig& c);
// Rotary + step for `steps` tokens over a few slots of f32 pools, each step
// feeding its B and x to the next through SSU_MAMBA3_UPDATE_PREV, against a
// float64 reference run of the same length (checked every check_every steps
// and at the end).
CheckResult run_chain(ssu_context_t ctx, Memory& mem, const ChainConfig& c);

// Deterministic case tables.
std::vector<StepCase> step_case_table();
std::vector<StepCase> gather_scatter_case_table();
std::vector<RotaryCase> rotary_case_table();
std::vector<ChainConfig> chain_configs();

// ---------------------------------------------------------------------------
// Suites: the same bodies for the CPU and the GPU programs. `second`, when
// given, runs every fourth case (e.g. a one-thread CPU context). Failures
// come back as messages for the caller's test framework.
// ---------------------------------------------------------------------------
struct SuiteResult {
  int64_t run = 0, failed = 0, elements = 0;
  std::vector<std::string> failures;  // the first few
  void add(const CheckResult& r, const std::string& what);
};
SuiteResult run_step_table(ssu_context_t ctx, Memory& mem, const char* label,
                           ssu_context_t second = nullptr);
SuiteResult run_gather_scatter_table(ssu_context_t ctx, Memory& mem, const char* label);
SuiteResult run_rotary_table(ssu_context_t ctx, Memory& mem, const char* label,
                             ssu_context_t second = nullptr);
SuiteResult run_chains(ssu_context_t ctx, Memory& mem, const char* label);
// What the tables fail to cover (empty when they cover every required value).
std::vector<std::string> table_coverage_problems();

// Tolerances of SPEC.md section 6 for the Mamba-3 step.
struct Tolerance {
  double rtol, atol;
};
Tolerance out_tolerance(ssu_dtype_t out_dtype);
Tolerance state_tolerance(ssu_dtype_t state_dtype);
constexpr double kAngleAtol = 1e-5;       // one rotary step
constexpr double kChainAngleAtol = 1e-4;  // after thousands of f32 stores

}  // namespace m3
}  // namespace ssutest
