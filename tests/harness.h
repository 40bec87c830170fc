// Test harness for the selective state update: builds a problem from a
// compact case description, fills fresh model-like random inputs, lays them
// out in (possibly strided) device or host buffers, runs the library and
// checks every element of every buffer against the float64 reference.
//
// Memory is reached only through the small Memory interface, so the same
// harness and case table drive the CPU suite (HostMemory) and the GPU suite
// (a CUDA implementation in tests/gpu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reference.h"
#include "ssu.h"

namespace ssutest {

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------
class Memory {
 public:
  virtual ~Memory() = default;
  virtual const char* name() const = 0;
  // Returns `bytes` of memory the backend can address (never NULL; throws on
  // failure). alloc(0) returns a valid, unique pointer.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  virtual void upload(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void download(void* dst_host, const void* src, size_t bytes) = 0;
  // Waits until work issued to `stream` is done (host: nothing to wait for).
  virtual void synchronize(ssu_stream_t stream) { (void)stream; }
};

class HostMemory final : public Memory {
 public:
  const char* name() const override { return "host"; }
  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void upload(void* dst, const void* src_host, size_t bytes) override;
  void download(void* dst_host, const void* src, size_t bytes) override;
};

// ---------------------------------------------------------------------------
// Case descriptions
// ---------------------------------------------------------------------------
using Form = RefForm;

// Where states are stored (one per call).
enum class Store {
  Final,         // after the last token, to dst (1-D) or the initial slot
  DstPerToken,   // dst_index (Bt, T): after every token
  Intermediate,  // intermediate_states buffer after every token, plus final
};

// How padded sequences are marked.
enum class Pad {
  None,
  Negative,          // negative slot indices (-1, -2, INT_MIN, ...)
  PadSlotId,         // pad_slot_id = S + 5 (beyond the pool), plus negatives
  PadSlotIdInRange,  // pad_slot_id = an unused slot of the pool
};

// Memory layout variations (bit flags), all legal per ssu.h.
enum LayoutFlags : uint32_t {
  kDense = 0,
  kPadded = 1u << 0,      // padded strides that keep 16-byte alignment
  kOddPadded = 1u << 1,   // odd padded strides (element alignment only)
  kBroadcast = 1u << 2,   // per-head params given through per-channel shapes
                          // with stride-0 axes; dt with a stride-0 P axis
  kTransposed = 1u << 3,  // token-major multi-token tensors, column-major
                          // 2-D indices
};

struct UpdateCase {
  Form form = Form::Single;
  Store store = Store::Final;

  ssu_dtype_t state = SSU_DTYPE_F32;
  ssu_dtype_t input = SSU_DTYPE_F32;  // x, B, C, z, out
  ssu_dtype_t dt = SSU_DTYPE_F32;
  ssu_dtype_t A = SSU_DTYPE_F32;
  ssu_dtype_t D = SSU_DTYPE_F32;
  ssu_dtype_t dt_bias = SSU_DTYPE_F32;
  ssu_dtype_t index = SSU_DTYPE_I32;  // src/dst/cu_seqlens/...; INVALID: no slot index

  int64_t H = 2, G = 1, P = 64, N = 16;
  int64_t batch = 3;
  int64_t T = 1;  // ignored (1) in the single-token form

  bool A_per_channel = false, dt_per_channel = false;
  bool D_per_channel = false, dt_bias_per_channel = false;
  bool has_D = true, has_dt_bias = true, has_z = true;
  bool softplus = true;
  bool disable_update = false;

  bool has_src = true;     // src_index given (needs index != INVALID)
  bool src_2d = false;     // src_index (Bt, T)
  bool has_dst = false;    // dst_index given: (Bt,) for Final/Intermediate
  bool dst_is_src = false; // DstPerToken: dst_index is the src tensor itself
  bool num_accepted = false;
  bool inter_index = false;  // Intermediate: explicit intermediate_index
  bool shared_src = false;   // sequences may share a src slot (beam search);
                             // honoured only where no two writes collide

  Pad pad = Pad::None;
  uint32_t layout = kDense;
  bool large_dt = false;   // some steps beyond softplus' threshold of 20
  int extra_slots = 3;     // unused pool slots beyond what the case needs
  uint64_t seed = 1;
  const char* tag = "";    // a short name of what the case exercises
  // Left out of the GPU suite's default run (SSU_LONG_TESTS=1 runs it): a
  // case whose size costs far more host time (inputs, float64 reference,
  // checks) than the paths it reaches, which smaller cases reach too.
  bool long_only = false;

  // state = SSU_DTYPE_I16, _I8 or _F8E4M3 gives a block-scaled pool:
  // state_scale (and, with
  // an intermediate buffer, intermediate_scales) come with it.
  // Stochastic rounding of f16 / bf16 state stores: rounding_seed points at
  // a uint64 holding `rounding_seed` in the backend's memory.
  bool stochastic = false;
  uint64_t rounding_seed = 0;
  uint32_t rounding_rounds = 0;  // 0: the library's default (10)
  // Inputs for which every fp32 state value is exact (A = 0 so dA = 1, no
  // softplus, dt, dt_bias and x small powers of two, B and the state on a
  // 2^-12 grid): the float64 reference then knows the fp32 value the
  // library stores, and check() compares stored state bits exactly (RN, SR
  // and int16 codes and scales), not within tolerance.
  bool exact_values = false;

  // Fluent setters for readable case tables.
  UpdateCase& single() { form = Form::Single; T = 1; return *this; }
  UpdateCase& multi(int64_t t) { form = Form::Multi; T = t; return *this; }
  UpdateCase& varlen(int64_t t) { form = Form::Varlen; T = t; return *this; }
  UpdateCase& dtypes(ssu_dtype_t st, ssu_dtype_t in, ssu_dtype_t param) {
    state = st; input = in; dt = A = D = dt_bias = param; return *this;
  }
  UpdateCase& params(ssu_dtype_t dt_, ssu_dtype_t A_, ssu_dtype_t D_, ssu_dtype_t dtb_) {
    dt = dt_; A = A_; D = D_; dt_bias = dtb_; return *this;
  }
  UpdateCase& shape(int64_t h, int64_t g, int64_t p, int64_t n) {
    H = h; G = g; P = p; N = n; return *this;
  }
  UpdateCase& sr(uint64_t seed_value, uint32_t rounds = 0) {
    stochastic = true; rounding_seed = seed_value; rounding_rounds = rounds; return *this;
  }
  UpdateCase& exact() { exact_values = true; softplus = false; large_dt = false; return *this; }
  UpdateCase& mamba1() {
    H = G = 1;
    A_per_channel = dt_per_channel = D_per_channel = dt_bias_per_channel = true;
    return *this;
  }
};

// One line describing a case, enough to rebuild it.
std::string describe(const UpdateCase& c);

// ---------------------------------------------------------------------------
// A built problem: buffers in `Memory`, their initial host images, the
// reference inputs.
// ---------------------------------------------------------------------------
struct CheckResult {
  bool ok = true;
  std::string message;   // the case and the first bad elements when !ok
  int64_t elements = 0;  // elements compared
};

class UpdateProblem {
 public:
  UpdateProblem(const UpdateCase& c, Memory& mem);
  ~UpdateProblem();
  UpdateProblem(const UpdateProblem&) = delete;
  UpdateProblem& operator=(const UpdateProblem&) = delete;

  const UpdateCase& spec() const { return case_; }
  Memory& memory() const { return mem_; }
  // Arguments addressing this problem's buffers; `pool` points into this
  // object. A fresh copy per call, so tests can mutate it freely.
  ssu_update_args_t args() const;
  const ssu_state_pool_t* pool() const { return &pool_; }
  int64_t slots() const { return S_; }
  int64_t rows() const { return rows_; }
  // Restores every buffer to its initial (poisoned) contents.
  void reset();
  // Restores only what the library may write (outputs, pool, scales,
  // intermediate buffers), leaving inputs such as the rounding seed as they
  // are in the backend's memory.
  void reset_outputs();
  // Sets the rounding seed (initial image, backend memory and the
  // expectations of check()). The case must be stochastic.
  void set_rounding_seed(uint64_t value);
  // The raw bytes of a named buffer ("state", "state_scale", "out",
  // "intermediate_states", "intermediate_scales", "rounding_seed", ...),
  // guards and gaps included, as they are now in the backend's memory.
  std::vector<uint8_t> download(const std::string& buffer) const;
  bool has_buffer(const std::string& buffer) const;
  // Pointer to the rounding seed in the backend's memory (NULL if the case
  // is not stochastic).
  uint64_t* rounding_seed_ptr() const;
  // Downloads every buffer and checks each element against the reference.
  CheckResult check() const;
  // Downloads every buffer and checks it is bit-identical to its initial
  // contents (nothing written).
  CheckResult check_unchanged() const;
  // Sets logical element `element` (row-major over the tensor's shape) of a
  // named index tensor ("src_index", "dst_index", "cu_seqlens",
  // "num_accepted_tokens", "intermediate_index") in the initial image, on
  // the device and in the reference: check() stays valid after a valid poke
  // (after an invalid one, use check_unchanged() or inspect by hand).
  void poke_index(const std::string& buffer, int64_t element, int64_t value);
  // Rewrites elements of a named tensor ("state", "state_scale", "x", "A",
  // ...) in the initial image and the backend's memory: f gets each
  // element's bytes and its logical index (row-major over the shape). The
  // float64 reference does not follow, so check() no longer applies: compare
  // the backends' bits instead.
  void rewrite(const std::string& tensor, const std::function<void(uint8_t*, int64_t)>& f);

 private:
  struct Buffer;
  struct Impl;
  UpdateCase case_;
  Memory& mem_;
  int64_t S_ = 0, rows_ = 0;
  ssu_state_pool_t pool_;
  std::unique_ptr<Impl> impl_;
};

// Plans, executes on `stream` and checks one case. The plan is created and
// destroyed here; `plan_options` may be NULL. `algorithm`, if not NULL,
// receives the algorithm the plan chose.
CheckResult run_update_case(ssu_context_t context, Memory& mem, const UpdateCase& c,
                            ssu_stream_t stream = nullptr,
                            const ssu_plan_options_t* plan_options = nullptr,
                            ssu_algorithm_t* algorithm = nullptr);

// The same on a problem built earlier. With `restore`, every buffer is first
// reset to its initial contents, so a case can run again (another algorithm,
// another context) without building its inputs and float64 reference again,
// which costs far more than the call itself.
CheckResult run_update_problem(ssu_context_t context, UpdateProblem& problem, bool restore,
                               ssu_stream_t stream = nullptr,
                               const ssu_plan_options_t* plan_options = nullptr,
                               ssu_algorithm_t* algorithm = nullptr);

// The table of update cases (SPEC sections 1 and 2), deterministic: a fixed
// seed per case. Covers every form and store mode with every dtype
// combination, every value of every shape axis, and seeded random mixes.
std::vector<UpdateCase> update_case_table();

// The 8-bit block-scaled states (i8, f8e4m3 rounded to nearest, f8e4m3
// rounded stochastically), every mode, model-like and exact values, plus
// odd and larger sizes. The GPU suites run it too, with more row lengths
// (tests/gpu/gpu_main.h, state8_gpu_case_table).
std::vector<UpdateCase> state8_case_table();

// Every mode of the table with every way of storing a state (f32, f16 and
// bf16 rounded to nearest, f16 and bf16 stochastically rounded, int16 with
// scales), model-like values: for comparing the stored bits of two backends.
std::vector<UpdateCase> state_bits_case_table();

// Sizes that are no power of two or multiple of a tile (N in {1, 7, 17, 100,
// 255}, P in {1, 3, 17, 65, 130}, H = 3, 5, 6): SPEC.md sets no bound on P or
// N for the update, so a backend must handle them (or refuse them with
// SSU_ERROR_NOT_SUPPORTED, which the suites report as a failure too).
std::vector<UpdateCase> odd_size_case_table();

}  // namespace ssutest
