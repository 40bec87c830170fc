// ssu-bench: times a model-shaped selective state update on one backend and
// compares its bandwidth with the device's own copy of the same bytes.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "bench_device.h"
#include "ssu.h"


namespace {

using bench_cli::parse_positive;
using bench_cli::shell_quote;
using bench_cli::usage_error;

using namespace ssu_bench;

constexpr size_t kMiB = size_t{1} << 20;
// Upper bound on the number of rotated call sets (tiny states only).
constexpr int64_t kMaxSets = 16384;

const char kUsage[] =
    "usage: ssu-bench [options]\n"
    "\n"
    "Times ssu_plan_execute_update on a model-shaped decode step for a sweep of\n"
    "batch sizes and prints, per batch: the median time of one call, the achieved\n"
    "bandwidth (bytes that must move / time), the device's copy bandwidth for the\n"
    "same number of bytes measured in the same run (CPU: the fastest of memcpy and\n"
    "a streaming-store copy loop, each on one and on all threads; CUDA: the faster\n"
    "of a graph-captured device-to-device memcpy and ssu-bench's 16-byte\n"
    "vectorized copy kernel, with a read-only stream of the same bytes for\n"
    "reference), their ratio, and the host time of\n"
    "one execute call. On CUDA the header also gives the launch\n"
    "floor: the host time of cuLaunchKernel of an empty kernel with a parameter\n"
    "block as large as the update kernels' (and with an 8-byte one).\n"
    "\n"
    "Default configuration (Mamba-2 layer): H=128 P=64 N=128 G=8, x/B/C/z/out bf16,\n"
    "state f32, dt/A/D/dt_bias f32 per head, dt_softplus, z, D and dt_bias present,\n"
    "int32 source slot indices (the final state returns to the source slot).\n"
    "\n"
    "options:\n"
    "  --backend auto|cpu|cuda  backend (default auto: CUDA if usable, else CPU)\n"
    "  --batch LIST             comma-separated batch sizes (default CPU 1,8,64;\n"
    "                           CUDA 1,2,4,...,512)\n"
    "  --long                   the CPU's full sweep, batches 1,2,4,...,64 (about\n"
    "                           twice the default run's time); CUDA's default is\n"
    "                           its full sweep already; --batch overrides both\n"
    "  --state-dtype f32|bf16|f16|i16|i8|f8e4m3   state pool dtype (default f32);\n"
    "                           i16, i8 and f8e4m3 are the block-scaled pools\n"
    "                           with their f32 scale pool (S, H, P)\n"
    "  --input-dtype f32|bf16|f16   x, B, C, z, out dtype (default bf16)\n"
    "  --heads H  --dim P  --dstate N  --groups G   shape (default 128 64 128 8)\n"
    "  --tokens T               T tokens per sequence (multi-token form, final\n"
    "                           state stored once; default 1 = single-token form)\n"
    "  --intermediate           speculative verify as engines run it without replay:\n"
    "                           the state after every one of the T tokens stored to\n"
    "                           intermediate_states (Bt, T, H, P, N) (+ scales), the\n"
    "                           pool only read (DISABLE_STATE_UPDATE); one buffer of\n"
    "                           Bt rows, not rotated (nothing reads it back)\n"
    "  --mamba1                 Mamba-1 preset: H=G=1, P=5120, N=16, A (1,P,N),\n"
    "                           dt (Bt,1,P), D and dt_bias (1,P), f32 state;\n"
    "                           options given explicitly still apply\n"
    "  --sr                     stochastic rounding of the f16/bf16/f8e4m3 state\n"
    "                           stores (a fixed uint64 seed in device memory; the\n"
    "                           state dtype defaults to bf16)\n"
    "  --sr-compare             time round-to-nearest and stochastic rounding back\n"
    "                           to back on the same data for each batch and print\n"
    "                           the overhead of stochastic rounding in percent\n"
    "  --pdl                    also time, per batch, each call behind a copy kernel\n"
    "                           that writes its x (the producer an engine's graph\n"
    "                           has), with and without SSU_PLAN_PDL, and print the\n"
    "                           saving (the plain update only)\n"
    "  --mamba3                 time ssu_plan_execute_mamba3_step instead: H=64 P=64\n"
    "                           N=128 R=4, f32 state, bf16 B/C/x/z/out, f32 A/dt/trap,\n"
    "                           D, z with zproj, outproj, UPDATE_PREV, random int32\n"
    "                           src slots and disjoint dst slots; also times, in the\n"
    "                           same run, the gather path (rows of the three pools\n"
    "                           gathered into dense buffers, the step on them without\n"
    "                           indices, the rows scattered back to the dst slots)\n"
    "  --rank R                 Mamba-3 MIMO rank (default 4)\n"
    "  --replay L               time checkpointed (replay) decode with a ring of L\n"
    "                           tokens per slot (ssu_plan_execute_replay) beside the\n"
    "                           plain update of the same shape and batch: whole ring\n"
    "                           cycles, reported per step (see below); with --tokens T\n"
    "                           each step takes T tokens and passes num_accepted\n"
    "  --accept K               with --replay: num_accepted of every step after the\n"
    "                           first (default T: all tokens kept); with T = 1 and no\n"
    "                           --accept, num_accepted is absent (the step commits\n"
    "                           the previous step's token)\n"
    "  --stagger                with --replay: the sequences of a call at different\n"
    "                           points of their cycles (sequence i of a call i mod c\n"
    "                           steps in), so that every step flushes about 1/c of\n"
    "                           them, as in a server whose sequences started at\n"
    "                           different times (default: all flush on one step)\n"
    "  --algorithm NAME         pin the plan's algorithm (update or Mamba-3 step):\n"
    "                           auto (default), cuda_simple, cuda_pipelined, cpu_rows\n"
    "  --threads K              CPU worker threads (default: all hardware threads)\n"
    "  --iters K                timed iterations per batch: calls on the CPU,\n"
    "                           replays of a graph of calls on CUDA, and for\n"
    "                           --replay also the timed passes of whole cycles\n"
    "                           (default: about 1 s of work per batch size on\n"
    "                           CUDA; on the CPU about 0.3 s, at least 11 calls)\n"
    "  --json FILE              also write every result as JSON to FILE\n"
    "  --help                   this text\n"
    "\n"
    "Bytes that must move per call (sizes in bytes of each tensor's dtype):\n"
    "  state  Bt*H*P*N*sizeof(state)*2              (read once, written once)\n"
    "  scales Bt*H*P*4*2      (i16, i8, f8e4m3 states: the f32 scale pool, read and\n"
    "                         written)\n"
    "  x, z, out  Bt*T*H*P*sizeof(input) each\n"
    "  B, C   Bt*T*G*N*sizeof(input) each\n"
    "  dt     Bt*T*H*sizeof(dt)   (per channel: Bt*T*H*P*sizeof(dt))\n"
    "  A      H*sizeof(A)         (per channel: H*P*N*sizeof(A))\n"
    "  D, dt_bias  H*4 each       (per channel: H*P*4 each)\n"
    "  slot indices  Bt*4\n"
    "Mamba-3 step (--mamba3):\n"
    "  state  Bt*H*P*N*sizeof(state)*2;  prev_B  Bt*R*H*N*sizeof(input)*2;\n"
    "  prev_x  Bt*H*P*sizeof(input)*2;  B, C  Bt*R*H*N*sizeof(input) each;\n"
    "  x, z, out  Bt*H*P*sizeof(input) each;  A, dt, trap  Bt*H*4 each;\n"
    "  D  H*4;  xproj, zproj, outproj  R*H*P*4 each;  src, dst slots  Bt*4 each\n"
    "bandwidth = bytes / median time; copy = a copy of bytes/2 bytes (which moves\n"
    "the same number of bytes: each read once and written once), from cold memory:\n"
    "copies rotate through buffer pairs of at least 256 MiB in all (CUDA) or about\n"
    "4x the last-level cache in all (CPU; each copy there is timed as the best of\n"
    "three medians, and its iterations are scaled to the bytes). Ratios are to the\n"
    "faster copy.\n"
    "\n"
    "Calls rotate through disjoint random sets of slots of a state pool of at least\n"
    "4x the last-level cache (CPU) or 256 MiB (CUDA), with model-like random data.\n"
    "A configuration the library cannot plan (status printed) is skipped; the rows\n"
    "measured before it are kept and the exit status stays 0.\n"
    "\n"
    "Replay (--replay L, T tokens per step, num_accepted K, default K = T):\n"
    "  the slots' counters are zeroed and every set of slots takes one first step\n"
    "  (num_accepted 0 where given); from then on a cycle of c = (L - T) / K + 1\n"
    "  steps (L / T when K = T divides L) holds c - 1 append steps and one flush\n"
    "  step, and leaves the counters as it found them. One timed pass runs one\n"
    "  cycle on every set: step j of every set before step j + 1 of any, each\n"
    "  step on fresh inputs (CUDA: the pass captured as one graph; one untimed\n"
    "  pass first). us/step = pass time / (c * sets). With --stagger, warm-up\n"
    "  steps after the first ones (num_accepted K or 0 per sequence) leave\n"
    "  sequence i of a call i mod c steps into its cycle, so that each step\n"
    "  flushes about Bt / c of them; a cycle's bytes are the same.\n"
    "  Bytes of a step on Bt sequences whose commit leaves e ring entries to\n"
    "  read (e = j*K at step j = 1..c of the cycle), entry = H*P*sizeof(in) +\n"
    "  G*N*sizeof(in) + H[*P]*4 (x row, B rows, delta):\n"
    "    checkpoint Bt*H*P*N*sizeof(state) [+ i16 scales Bt*H*P*4] read\n"
    "    (and written again at the flush step), ring Bt*e*entry read,\n"
    "    Bt*T*entry appended, x, z, out Bt*T*H*P*sizeof(in) each, B, C\n"
    "    Bt*T*G*N*sizeof(in) each, dt Bt*T*H[*P]*4, A, D, dt_bias as above,\n"
    "    src Bt*4, counters Bt*16 (two int32 read and written), num_accepted\n"
    "    Bt*4 where given.\n"
    "  floor = the cycle's mean step bytes / the copy ceiling of that many\n"
    "  bytes (same run); floor / time is how close a step comes to it.\n";

// ---------------------------------------------------------------------------
// Options

struct Options {
  ssu_backend_t backend = SSU_BACKEND_AUTO;
  std::vector<int64_t> batches;  // empty: the backend's default sweep
  ssu_dtype_t state_dtype = SSU_DTYPE_F32;
  ssu_dtype_t input_dtype = SSU_DTYPE_BF16;
  int64_t heads = 128, dim = 64, dstate = 128, groups = 8, tokens = 1;
  bool mamba1 = false;
  bool sr = false, sr_compare = false;
  bool pdl = false;
  bool mamba3 = false;
  int64_t rank = 4;
  int64_t replay = 0;  // ring capacity L; 0: no replay
  int64_t accept = 0;  // num_accepted of a replay step; 0: T
  bool stagger = false;  // replay: the sequences' cycles out of step
  bool intermediate = false;  // plain update: store every token's state, not the pool
  ssu_algorithm_t algorithm = SSU_ALGORITHM_AUTO;
  int threads = 0;
  int iters = 0;  // 0: automatic
  bool long_sweep = false;  // --long: the CPU's full batch sweep
  std::string json;
  std::string command_line;
};

ssu_dtype_t parse_float_dtype(const std::string& opt, const std::string& v) {
  if (v == "f32" || v == "fp32" || v == "float32") return SSU_DTYPE_F32;
  if (v == "bf16" || v == "bfloat16") return SSU_DTYPE_BF16;
  if (v == "f16" || v == "fp16" || v == "float16") return SSU_DTYPE_F16;
  usage_error(opt + " must be f32, bf16 or f16, got '" + v + "'");
}

ssu_dtype_t parse_state_dtype(const std::string& opt, const std::string& v) {
  if (v == "i16" || v == "int16") return SSU_DTYPE_I16;
  if (v == "i8" || v == "int8") return SSU_DTYPE_I8;
  if (v == "f8e4m3" || v == "e4m3" || v == "float8_e4m3fn") return SSU_DTYPE_F8E4M3;
  if (v == "f32" || v == "fp32" || v == "float32" || v == "bf16" || v == "bfloat16" ||
      v == "f16" || v == "fp16" || v == "float16")
    return parse_float_dtype(opt, v);
  usage_error(opt + " must be f32, bf16, f16, i16, i8 or f8e4m3, got '" + v + "'");
}

// The block-scaled state dtypes: codes plus an f32 decode scale per row.
bool is_scaled(ssu_dtype_t d) {
  return d == SSU_DTYPE_I16 || d == SSU_DTYPE_I8 || d == SSU_DTYPE_F8E4M3;
}

Options parse_args(int argc, char** argv) {
  Options o;
  bool set_heads = false, set_dim = false, set_dstate = false, set_groups = false,
       set_state = false, set_rank = false, set_tokens = false, set_accept = false;
  for (int i = 0; i < argc; ++i) {
    if (i) o.command_line += ' ';
    o.command_line += shell_quote(argv[i]);
  }
  for (int i = 1; i < argc; ++i) {
    bench_cli::Option opt(argc, argv, &i);
    const std::string& a = opt.name;
    auto value = [&] { return opt.value(); };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--backend") {
      const std::string v = value();
      if (v == "auto") o.backend = SSU_BACKEND_AUTO;
      else if (v == "cpu") o.backend = SSU_BACKEND_CPU;
      else if (v == "cuda") o.backend = SSU_BACKEND_CUDA;
      else usage_error("--backend must be auto, cpu or cuda, got '" + v + "'");
    } else if (a == "--batch") {
      const std::string v = value();
      o.batches.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) o.batches.push_back(parse_positive("--batch", item));
      if (o.batches.empty()) usage_error("--batch needs a list such as 1,8,64");
    } else if (a == "--long") {
      o.long_sweep = true;
    } else if (a == "--state-dtype") {
      o.state_dtype = parse_state_dtype(a, value());
      set_state = true;
    } else if (a == "--input-dtype") {
      o.input_dtype = parse_float_dtype(a, value());
    } else if (a == "--heads") {
      o.heads = parse_positive(a, value());
      set_heads = true;
    } else if (a == "--dim") {
      o.dim = parse_positive(a, value());
      set_dim = true;
    } else if (a == "--dstate") {
      o.dstate = parse_positive(a, value());
      set_dstate = true;
    } else if (a == "--groups") {
      o.groups = parse_positive(a, value());
      set_groups = true;
    } else if (a == "--tokens") {
      o.tokens = parse_positive(a, value());
      set_tokens = true;
    } else if (a == "--mamba1") {
      o.mamba1 = true;
    } else if (a == "--sr") {
      o.sr = true;
    } else if (a == "--pdl") {
      o.pdl = true;
    } else if (a == "--sr-compare") {
      o.sr_compare = true;
    } else if (a == "--mamba3") {
      o.mamba3 = true;
    } else if (a == "--replay") {
      o.replay = parse_positive(a, value());
    } else if (a == "--intermediate") {
      o.intermediate = true;
    } else if (a == "--stagger") {
      o.stagger = true;
    } else if (a == "--accept") {
      o.accept = parse_positive(a, value());
      set_accept = true;
    } else if (a == "--rank") {
      o.rank = parse_positive(a, value());
      set_rank = true;
    } else if (a == "--algorithm") {
      const std::string v = value();
      if (v == "auto") o.algorithm = SSU_ALGORITHM_AUTO;
      else if (v == "cuda_simple") o.algorithm = SSU_ALGORITHM_CUDA_SIMPLE;
      else if (v == "cuda_pipelined") o.algorithm = SSU_ALGORITHM_CUDA_PIPELINED;
      else if (v == "cpu_rows") o.algorithm = SSU_ALGORITHM_CPU_ROWS;
      else usage_error("--algorithm must be auto, cuda_simple, cuda_pipelined or cpu_rows, got '" + v + "'");
    } else if (a == "--threads") {
      o.threads = static_cast<int>(parse_positive(a, value()));
    } else if (a == "--iters") {
      o.iters = static_cast<int>(parse_positive(a, value()));
    } else if (a == "--json") {
      o.json = value();
      if (o.json.empty()) usage_error("--json needs a file name");
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (set_accept && !o.replay) usage_error("--accept applies to --replay only");
  if (o.stagger && !o.replay) usage_error("--stagger applies to --replay only");
  if (o.intermediate && (o.replay || o.mamba3 || o.sr_compare || o.pdl))
    usage_error("--intermediate applies to the plain update (not --replay, --mamba3, "
                "--sr-compare or --pdl)");
  if (o.intermediate && o.tokens < 2)
    usage_error("--intermediate stores the state after each of several tokens (--tokens >= 2)");
  if (o.pdl && (o.replay || o.mamba3 || o.sr_compare))
    usage_error("--pdl applies to the plain update (not --replay, --mamba3 or --sr-compare)");
  if (o.replay) {
    if (o.mamba3) usage_error("--replay applies to the Mamba-1/2 update, not --mamba3");
    if (o.sr_compare) usage_error("--replay and --sr-compare exclude each other");
    if (o.tokens > o.replay)
      usage_error("--tokens (" + std::to_string(o.tokens) + ") must be at most the ring (--replay " +
                  std::to_string(o.replay) + ")");
    if (set_accept && o.accept > o.tokens)
      usage_error("--accept (" + std::to_string(o.accept) + ") must be at most --tokens (" +
                  std::to_string(o.tokens) + ")");
  }
  if (o.mamba3) {
    if (o.mamba1) usage_error("--mamba3 and --mamba1 exclude each other");
    if (o.sr || o.sr_compare) usage_error("the Mamba-3 step has no stochastic rounding");
    if (set_tokens && o.tokens != 1) usage_error("the Mamba-3 step takes one token (--tokens 1)");
    if (set_groups) usage_error("--groups does not apply to --mamba3 (B and C are per head)");
    if (is_scaled(o.state_dtype))
      usage_error("the Mamba-3 step has no " + std::string(ssu_dtype_name(o.state_dtype)) +
                  " state (f32, bf16 or f16)");
    if (!set_heads) o.heads = 64;
    if (!set_dim) o.dim = 64;
    if (!set_dstate) o.dstate = 128;
    return o;
  }
  if (set_rank) usage_error("--rank applies to --mamba3 only");
  if (o.sr || o.sr_compare) {
    if (!set_state) o.state_dtype = SSU_DTYPE_BF16;
    if (o.state_dtype != SSU_DTYPE_BF16 && o.state_dtype != SSU_DTYPE_F16 &&
        o.state_dtype != SSU_DTYPE_F8E4M3)
      usage_error("stochastic rounding applies to f16, bf16 and f8e4m3 states, not " +
                  std::string(ssu_dtype_name(o.state_dtype)));
  }
  if (o.mamba1) {
    if (!set_heads) o.heads = 1;
    if (!set_groups) o.groups = 1;
    if (!set_dim) o.dim = 5120;
    if (!set_dstate) o.dstate = 16;
    if (!set_state && !o.sr && !o.sr_compare) o.state_dtype = SSU_DTYPE_F32;
  }
  if (o.heads % o.groups != 0)
    usage_error("--heads (" + std::to_string(o.heads) + ") must be a multiple of --groups (" +
                std::to_string(o.groups) + ")");
  return o;
}

// ---------------------------------------------------------------------------
// Model-like random data

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (ax < 0x38800000u) {  // below 2^-14: f16 subnormal, exact scaling then RNE
    float v;
    std::memcpy(&v, &ax, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(v * 16777216.0f)));
  }
  ax += 0xfffu + ((ax >> 13) & 1u);
  ax -= 112u << 23;
  return static_cast<uint16_t>(sign | (ax >> 13));
}

// `n` values converted to `dtype` (f32, bf16, f16) at `out`. One loop per
// dtype: a dtype test per element kept the f32 case from being one copy.
void encode_into(const float* values, size_t n, ssu_dtype_t dtype, unsigned char* out) {
  if (n == 0) return;
  if (dtype == SSU_DTYPE_F32) {
    std::memcpy(out, values, n * sizeof(float));
  } else if (dtype == SSU_DTYPE_BF16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_bf16(values[i]);
      std::memcpy(out + i * 2, &h, 2);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = f32_to_f16(values[i]);
      std::memcpy(out + i * 2, &h, 2);
    }
  }
}

// `values` converted to `dtype` as raw bytes.
std::vector<unsigned char> encode(const std::vector<float>& values, ssu_dtype_t dtype) {
  std::vector<unsigned char> out(values.size() * ssu_dtype_size(dtype));
  encode_into(values.data(), values.size(), dtype, out.data());
  return out;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  float normal(float sigma) { return std::normal_distribution<float>(0.0f, sigma)(gen_); }
  std::vector<float> normals(size_t n, float sigma) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& e : v) e = d(gen_);
    return v;
  }
  std::vector<float> uniforms(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& e : v) e = d(gen_);
    return v;
  }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

// ---------------------------------------------------------------------------
// Device buffers

struct Buffer {
  BenchDevice* dev = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
  Buffer() = default;
  Buffer(BenchDevice* d, size_t n) : dev(d), ptr(d->alloc(n)), bytes(n) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : dev(o.dev), ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      dev = o.dev;
      ptr = o.ptr;
      bytes = o.bytes;
      o.ptr = nullptr;
    }
    return *this;
  }
  ~Buffer() { reset(); }
  void reset() {
    if (ptr) dev->release(ptr);
    ptr = nullptr;
  }
  char* at(size_t offset) const { return static_cast<char*>(ptr) + offset; }
};

Buffer upload_floats(BenchDevice* dev, const std::vector<float>& v, ssu_dtype_t dtype) {
  const auto bytes = encode(v, dtype);
  Buffer b(dev, bytes.size());
  dev->upload(b.ptr, bytes.data(), bytes.size());
  return b;
}

ssu_tensor_t dense(void* data, ssu_dtype_t dtype, std::initializer_list<int64_t> shape) {
  ssu_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

// ---------------------------------------------------------------------------
// Timing helpers shared by every mode

struct Timed {
  double time_s = 0, host_s = 0;
  int iters = 0;
};

// Times `op` over its n rotated operations. With iters == 0 it picks the
// count: on CUDA about 1 s of timed work, an iteration being one replay of a
// graph of max(n, 20) operations (see bench_cuda.cpp), whose event timings
// are steadier; on the CPU, where an iteration is one call, about
// kCpuTimedSeconds and at least kCpuMinIters calls. A batch-64 call moves
// 515 MiB and takes 20-30 ms on two cores: 1 s of them per row, timed twice
// (once more as host time), made most of a minute of the default run.
constexpr double kCpuTimedSeconds = 0.3;
constexpr int kCpuMinIters = 11;

Timed measure(BenchDevice* dev, const Op& op, size_t n, int iters, bool cuda) {
  Timed t;
  if (iters == 0) {
    const double est = std::max(dev->time_ops(op, n, 3), 1e-9);
    if (cuda) {
      const double per_iter = est * double(std::max<size_t>(n, 20));
      iters = static_cast<int>(std::min(200.0, std::max(10.0, 1.0 / per_iter)));
    } else {
      iters = static_cast<int>(
          std::min(2000.0, std::max(double(kCpuMinIters), kCpuTimedSeconds / est)));
    }
  }
  t.iters = iters;
  t.time_s = dev->time_ops(op, n, iters);
  // The CPU backend's calls are synchronous: a call's host time is its
  // time, and timing the calls a second time would only lengthen the run.
  t.host_s = cuda ? dev->host_time_ops(op, n, std::min(iters, 200)) : t.time_s;
  return t;
}

// The copy ceiling for `bytes` bytes that must move: bytes/2 read and
// bytes/2 written.
CopyTiming time_matched_copy(BenchDevice* dev, size_t bytes, int iters) {
  return dev->time_copy(bytes / 2, std::min(std::max(iters, 10), 200));
}

// Plan creation that may fail because the library cannot run this
// configuration here: returns nullptr and sets *why to the status and message.
ssu_plan_t create_update_plan(ssu_context_t ctx, const ssu_update_args_t& args,
                              ssu_algorithm_t algorithm, std::string* why) {
  ssu_plan_t plan = nullptr;
  ssu_plan_options_t o = SSU_PLAN_OPTIONS_INIT;
  o.algorithm = algorithm;
  const ssu_status_t st = ssu_plan_create_update(ctx, &args, &o, &plan);
  if (st == SSU_SUCCESS) return plan;
  *why = std::string("ssu_plan_create_update: ") + ssu_status_string(st) + ": " +
         ssu_last_error_message();
  return nullptr;
}

ssu_plan_t create_mamba3_plan(ssu_context_t ctx, const ssu_mamba3_step_args_t& args,
                              ssu_algorithm_t algorithm, std::string* why) {
  ssu_plan_options_t o = SSU_PLAN_OPTIONS_INIT;
  o.algorithm = algorithm;
  ssu_plan_t plan = nullptr;
  const ssu_status_t st = ssu_plan_create_mamba3_step(ctx, &args, &o, &plan);
  if (st == SSU_SUCCESS) return plan;
  *why = std::string("ssu_plan_create_mamba3_step: ") + ssu_status_string(st) + ": " +
         ssu_last_error_message();
  return nullptr;
}

// Destroys a plan on every exit path.
struct PlanGuard {
  ssu_plan_t plan = nullptr;
  explicit PlanGuard(ssu_plan_t p) : plan(p) {}
  PlanGuard(const PlanGuard&) = delete;
  PlanGuard& operator=(const PlanGuard&) = delete;
  ~PlanGuard() { ssu_plan_destroy(plan); }
};

std::string algorithm_of(ssu_plan_t plan) {
  ssu_plan_info_t info = SSU_PLAN_INFO_INIT;
  if (ssu_plan_get_info(plan, &info) == SSU_SUCCESS && info.algorithm_name)
    return info.algorithm_name;
  return "?";
}

// A fast generator (splitmix64) for data that reaches gigabytes on GPUs.
class FastRng {
 public:
  explicit FastRng(Rng& rng) : s_(rng.gen()()) {}
  // The generator after `n` more calls of sum2(): each call advances the
  // state by one fixed step, so the threads of a fill can each start at
  // their own chunk and still give the values that one thread would.
  FastRng ahead(uint64_t n) const {
    FastRng r(*this);
    r.s_ += n * kStep;
    return r;
  }
  // The sum of two uniforms in (-1, 1) from 24 bits each: sigma ~0.82.
  float sum2() {
    uint64_t z = (s_ += kStep);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    const uint64_t r = z ^ (z >> 31);
    const float u0 = (float(uint32_t(r) >> 8) + 0.5f) * (1.0f / 8388608.0f) - 1.0f;
    const float u1 = (float(uint32_t(r >> 32) >> 8) + 0.5f) * (1.0f / 8388608.0f) - 1.0f;
    return u0 + u1;
  }

 private:
  static constexpr uint64_t kStep = 0x9e3779b97f4a7c15ull;
  uint64_t s_;
};

// Runs work(0), ..., work(n - 1) over the machine's hardware threads (at
// most `max_threads`) and returns when all are done. For filling buffers
// only, which is not timed: a state pool of over a GiB took seconds per
// batch row on one thread. `work` must not throw.
void on_threads(size_t n, size_t max_threads, const std::function<void(size_t)>& work) {
  const size_t threads = std::min(n, max_threads);
  std::atomic<size_t> next{0};
  const auto loop = [&] {
    for (size_t i = next++; i < n; i = next++) work(i);
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(loop);
  loop();
  for (std::thread& h : helpers) h.join();
}

// The OCP FP8 E4M3 code nearest to x (|x| <= 448), ties to the even code:
// from 2^-6 up the fp32 pattern rounded at its bit 20 (a carry moves into
// the exponent; exponent 121 is E4M3's 1), below it the nearest multiple of
// 2^-9. (A search over the 127 magnitudes took most of a minute to fill an
// e4m3 pool of a few GiB.)
uint8_t e4m3_nearest(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t sign = (u >> 24) & 0x80u, mag = u & 0x7fffffffu;
  const uint32_t code = mag >= 0x3C800000u
                            ? ((mag + 0x7FFFFu + ((mag >> 20) & 1u)) >> 20) - 0x3C0u
                            : static_cast<uint32_t>(std::nearbyint(std::fabs(x) * 512.0f));
  return static_cast<uint8_t>(sign | code);
}

// Quantizes `rows` rows of N values as the library stores a block-scaled
// row (i16, i8, f8e4m3): the codes at `q`, each row's decode scale at `sc`.
void quantize_rows(const float* v, size_t rows, size_t N, ssu_dtype_t dtype, unsigned char* q,
                   float* sc) {
  const float qmax = dtype == SSU_DTYPE_I16 ? 32767.0f
                     : dtype == SSU_DTYPE_I8  ? 127.0f
                                              : 448.0f;
  for (size_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (size_t k = 0; k < N; ++k) amax = std::max(amax, std::fabs(v[r * N + k]));
    const float enc = amax == 0.0f ? 1.0f : qmax / amax;
    sc[r] = 1.0f / enc;
    for (size_t k = 0; k < N; ++k) {
      const size_t i = r * N + k;
      const float c = std::min(qmax, std::max(-qmax, v[i] * enc));
      if (dtype == SSU_DTYPE_F8E4M3) {
        q[i] = e4m3_nearest(c);
      } else if (dtype == SSU_DTYPE_I8) {
        q[i] = static_cast<unsigned char>(static_cast<int8_t>(std::nearbyint(c)));
      } else {
        const int16_t c16 = static_cast<int16_t>(std::nearbyint(c));
        std::memcpy(&q[i * 2], &c16, 2);
      }
    }
  }
}

// At most this many threads fill a buffer, each with a chunk of about 4 Mi
// values in flight (host memory: 16-32 MiB per thread).
constexpr size_t kMaxFillThreads = 8;

// Fills `rows` rows of N values of `dtype` at the start of `buf`: value i is
// mult * (the i-th sum2() of `fr`), or `instead` where that is zero. A
// block-scaled dtype gets each row quantized (quantize_rows) with its
// scale in `scale`. Chunks of rows are generated on several threads and
// uploaded in order from this one (the CUDA driver's context is this
// thread's); the bytes are the same whatever the thread count.
void fill_values(BenchDevice* dev, Buffer& buf, Buffer* scale, size_t rows, size_t N,
                 ssu_dtype_t dtype, float mult, float instead, const FastRng& fr) {
  const size_t chunk_rows = std::max<size_t>(1, (size_t{4} << 20) / N);  // per upload
  const size_t es = ssu_dtype_size(dtype);
  const bool scaled = is_scaled(dtype), raw_f32 = dtype == SSU_DTYPE_F32;
  const size_t lanes = std::min<size_t>(
      kMaxFillThreads, std::max(1u, std::thread::hardware_concurrency()));
  struct Lane {
    std::vector<float> values, scales;
    std::vector<unsigned char> codes;  // what is uploaded unless the values are (f32)
  };
  std::vector<Lane> lane(std::min(lanes, (rows + chunk_rows - 1) / chunk_rows));
  const size_t lane_rows = std::min(chunk_rows, rows);
  for (Lane& l : lane) {
    l.values.resize(lane_rows * N);
    if (!raw_f32) l.codes.resize(lane_rows * N * es);
    if (scaled) l.scales.resize(lane_rows);
  }
  for (size_t g0 = 0; g0 < rows; g0 += lane.size() * chunk_rows) {
    const size_t chunks = std::min(lane.size(), (rows - g0 + chunk_rows - 1) / chunk_rows);
    on_threads(chunks, lane.size(), [&](size_t c) {
      const size_t r0 = g0 + c * chunk_rows, n = std::min(chunk_rows, rows - r0) * N;
      Lane& l = lane[c];
      FastRng g = fr.ahead(r0 * N);
      for (size_t i = 0; i < n; ++i) {
        const float x = mult * g.sum2();
        l.values[i] = x != 0.0f ? x : instead;
      }
      if (scaled)
        quantize_rows(l.values.data(), n / N, N, dtype, l.codes.data(), l.scales.data());
      else if (!raw_f32)
        encode_into(l.values.data(), n, dtype, l.codes.data());
    });
    for (size_t c = 0; c < chunks; ++c) {
      const size_t r0 = g0 + c * chunk_rows, nr = std::min(chunk_rows, rows - r0);
      const Lane& l = lane[c];
      const void* bytes = raw_f32 ? static_cast<const void*>(l.values.data()) : l.codes.data();
      dev->upload(buf.at(r0 * N * es), bytes, nr * N * es);
      if (scaled) dev->upload(scale->at(r0 * 4), l.scales.data(), nr * 4);
    }
  }
}

// Fills `count` values of `dtype` (f32, bf16, f16) at the start of `buf`
// with roughly normal values of standard deviation `sigma`, never zero.
void fill_normalish(BenchDevice* dev, Buffer& buf, size_t count, ssu_dtype_t dtype, float sigma,
                    Rng& rng) {
  fill_values(dev, buf, nullptr, count, 1, dtype, sigma / 0.8165f, 0.25f * sigma, FastRng(rng));
}

// Fills `rows` state rows of N elements with values spread like a trained
// state (roughly N(0, 0.5) as the sum of two uniforms, never zero), with a
// fast generator: pools reach gigabytes on GPUs. A block-scaled pool (i16,
// i8, f8e4m3) gets each row quantized as the library stores it (amax,
// codes, decode scale in `scale`).
void fill_state(BenchDevice* dev, Buffer& buf, Buffer* scale, size_t rows, size_t N,
                ssu_dtype_t dtype, Rng& rng) {
  fill_values(dev, buf, scale, rows, N, dtype, 0.6f, 0.25f, FastRng(rng));
}

// A random permutation of `slots` slots, uploaded as int32.
Buffer random_slots(BenchDevice* dev, int64_t slots, Rng& rng, std::vector<int32_t>* host) {
  std::vector<int32_t> perm(static_cast<size_t>(slots));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen());
  Buffer b(dev, perm.size() * sizeof(int32_t));
  dev->upload(b.ptr, perm.data(), perm.size() * sizeof(int32_t));
  if (host) *host = std::move(perm);
  return b;
}

// Rotated sets of Bt slots over a pool of at least `pool_target` bytes.
int64_t set_count(size_t slot_bytes, int64_t Bt, size_t pool_target) {
  const size_t set_bytes = size_t(Bt) * slot_bytes;
  const int64_t sets = std::max<int64_t>(2, int64_t((pool_target + set_bytes - 1) / set_bytes));
  return std::min(sets, kMaxSets);
}

// ---------------------------------------------------------------------------
// The selective state update (Mamba-1 / Mamba-2)

struct Shape {
  int64_t H, P, N, G, T;
  bool per_channel;  // Mamba-1: dt, A, D, dt_bias per channel
  ssu_dtype_t state_dtype, input_dtype;
  static constexpr ssu_dtype_t param_dtype = SSU_DTYPE_F32;
  static constexpr ssu_dtype_t index_dtype = SSU_DTYPE_I32;
  bool intermediate = false;  // --intermediate: T states stored per sequence, the pool read

  size_t state_slot_bytes() const { return size_t(H * P * N) * ssu_dtype_size(state_dtype); }
  // The f32 scale rows of a block-scaled state (0 for float states).
  size_t scale_slot_bytes() const {
    return is_scaled(state_dtype) ? size_t(H * P) * sizeof(float) : 0;
  }
  size_t slot_bytes() const { return state_slot_bytes() + scale_slot_bytes(); }
  // Bytes that must move for a call on Bt sequences (see kUsage).
  size_t bytes(int64_t Bt) const {
    const size_t is = ssu_dtype_size(input_dtype), ps = ssu_dtype_size(param_dtype);
    size_t b = size_t(Bt) * slot_bytes() * 2;                 // state (+ scales)
    if (intermediate)  // the pool read, T states (+ scales) stored, their index read
      b = size_t(Bt) * slot_bytes() * size_t(1 + T) + size_t(Bt) * ssu_dtype_size(index_dtype);
    b += 3 * size_t(Bt * T * H * P) * is;                     // x, z, out
    b += 2 * size_t(Bt * T * G * N) * is;                     // B, C
    b += size_t(Bt * T * H * (per_channel ? P : 1)) * ps;     // dt
    b += size_t(H * (per_channel ? P * N : 1)) * ps;          // A
    b += 2 * size_t(H * (per_channel ? P : 1)) * ps;          // D, dt_bias
    b += size_t(Bt) * ssu_dtype_size(index_dtype);            // src slot index
    return b;
  }
};

// One measured batch size. `alt` is the second timing of the mode: the
// round-to-nearest baseline of --sr-compare, the gather path of --mamba3.
struct Row {
  int64_t batch;
  size_t bytes;
  int64_t slots;
  int64_t sets;
  double pool_mib;
  int iters;
  double time_s, host_s;
  CopyTiming copy;  // the copy ceiling of `bytes`
  double alt_s = 0, alt_host_s = 0;
  double gbps() const { return bytes / time_s / 1e9; }
  // Copies of bytes/2 bytes move bytes/2*2 bytes.
  static double rate(size_t bytes, double s) { return s > 0 ? double(bytes / 2 * 2) / s / 1e9 : 0; }
  double copy_gbps() const { return rate(bytes, copy.best_s); }
  double memcpy_gbps() const { return rate(bytes, copy.memcpy_s); }
  double kernel_gbps() const { return rate(bytes, copy.kernel_s); }
  double read_gbps() const { return rate(bytes, copy.read_s); }
  double ratio() const { return gbps() / copy_gbps(); }
  double alt_gbps() const { return bytes / alt_s / 1e9; }
};

// Everything one batch size needs: a state pool, per-set inputs and the
// rotated calls.
struct Problem {
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  Buffer state, scale, seed, x, z, out, B, C, dt, A, D, dt_bias, index;
  Buffer inter, inter_scale, inter_index;  // --intermediate
  std::vector<ssu_update_args_t> calls;
  std::vector<int32_t> index_host;  // the slots of set k: index_host[k*Bt .. (k+1)*Bt)
  int64_t slots = 0, sets = 0;
};

// The seed of --sr (any fixed value; the bench does not advance it).
constexpr uint64_t kRoundingSeed = 0x243f6a8885a308d3ull;

void build_problem(Problem& pr, BenchDevice* dev, const Shape& s, int64_t Bt, size_t pool_target,
                   bool sr, Rng& rng) {
  const int64_t H = s.H, P = s.P, N = s.N, G = s.G, T = s.T;
  const bool multi = T > 1;
  pr.sets = set_count(s.slot_bytes(), Bt, pool_target);
  pr.slots = pr.sets * Bt;
  const int64_t S = pr.slots, R = pr.sets * Bt;  // R: sequence rows over all sets

  pr.state = Buffer(dev, size_t(S) * s.state_slot_bytes());
  if (is_scaled(s.state_dtype)) {
    pr.scale = Buffer(dev, size_t(S) * s.scale_slot_bytes());
    pr.pool.state_scale = dense(pr.scale.ptr, SSU_DTYPE_F32, {S, H, P});
  }
  fill_state(dev, pr.state, &pr.scale, size_t(S * H * P), size_t(N), s.state_dtype, rng);
  pr.pool.state = dense(pr.state.ptr, s.state_dtype, {S, H, P, N});
  if (sr) {
    pr.seed = Buffer(dev, sizeof(uint64_t));
    dev->upload(pr.seed.ptr, &kRoundingSeed, sizeof kRoundingSeed);
  }

  pr.x = upload_floats(dev, rng.normals(size_t(R * T * H * P), 1.0f), s.input_dtype);
  pr.z = upload_floats(dev, rng.normals(size_t(R * T * H * P), 1.0f), s.input_dtype);
  pr.B = upload_floats(dev, rng.normals(size_t(R * T * G * N), 1.0f), s.input_dtype);
  pr.C = upload_floats(dev, rng.normals(size_t(R * T * G * N), 1.0f), s.input_dtype);
  pr.out = upload_floats(dev, std::vector<float>(size_t(R * T * H * P), 0.0f), s.input_dtype);
  const int64_t dtP = s.per_channel ? P : 1;
  // Raw dt before softplus; with dt_bias in [-4, -3] this gives dt ~ 0.01..0.1.
  pr.dt = upload_floats(dev, rng.normals(size_t(R * T * H * dtP), 0.5f), Shape::param_dtype);
  std::vector<float> A;
  if (s.per_channel) {  // S4D-real-like: A[p, n] ~ -(n + 1)
    A.resize(size_t(H * P * N));
    for (int64_t i = 0; i < H * P * N; ++i) A[i] = -float(i % N + 1) * rng.uniform(0.5f, 1.5f);
  } else {
    A.resize(size_t(H));
    for (auto& a : A) a = -std::exp(rng.uniform(0.0f, std::log(16.0f)));
  }
  pr.A = upload_floats(dev, A, Shape::param_dtype);
  pr.D = upload_floats(dev, rng.uniforms(size_t(H * dtP), 0.5f, 1.5f), Shape::param_dtype);
  pr.dt_bias = upload_floats(dev, rng.uniforms(size_t(H * dtP), -4.0f, -3.0f), Shape::param_dtype);

  // A random permutation of the pool split into disjoint sets of Bt slots.
  pr.index = random_slots(dev, S, rng, &pr.index_host);
  if (s.intermediate) {  // row b of every call's intermediate states is sequence b's
    pr.inter = Buffer(dev, size_t(Bt * T) * s.state_slot_bytes());
    if (is_scaled(s.state_dtype)) pr.inter_scale = Buffer(dev, size_t(Bt * T) * s.scale_slot_bytes());
    std::vector<int32_t> rows(static_cast<size_t>(Bt));
    for (int64_t b = 0; b < Bt; ++b) rows[size_t(b)] = static_cast<int32_t>(b);
    pr.inter_index = Buffer(dev, rows.size() * sizeof(int32_t));
    dev->upload(pr.inter_index.ptr, rows.data(), rows.size() * sizeof(int32_t));
  }

  const size_t is = ssu_dtype_size(s.input_dtype), ps = ssu_dtype_size(Shape::param_dtype);
  pr.calls.clear();
  pr.calls.reserve(size_t(pr.sets));
  for (int64_t k = 0; k < pr.sets; ++k) {
    const size_t r0 = size_t(k * Bt);  // first sequence row of this set
    ssu_update_args_t a = SSU_UPDATE_ARGS_INIT;
    a.flags = SSU_UPDATE_DT_SOFTPLUS;
    a.pool = &pr.pool;
    const size_t xo = r0 * size_t(T * H * P) * is, bo = r0 * size_t(T * G * N) * is;
    if (multi) {
      a.x = dense(pr.x.at(xo), s.input_dtype, {Bt, T, H, P});
      a.z = dense(pr.z.at(xo), s.input_dtype, {Bt, T, H, P});
      a.out = dense(pr.out.at(xo), s.input_dtype, {Bt, T, H, P});
      a.B = dense(pr.B.at(bo), s.input_dtype, {Bt, T, G, N});
      a.C = dense(pr.C.at(bo), s.input_dtype, {Bt, T, G, N});
      void* dtp = pr.dt.at(r0 * size_t(T * H * dtP) * ps);
      a.dt = s.per_channel ? dense(dtp, Shape::param_dtype, {Bt, T, H, P})
                           : dense(dtp, Shape::param_dtype, {Bt, T, H});
    } else {
      a.x = dense(pr.x.at(xo), s.input_dtype, {Bt, H, P});
      a.z = dense(pr.z.at(xo), s.input_dtype, {Bt, H, P});
      a.out = dense(pr.out.at(xo), s.input_dtype, {Bt, H, P});
      a.B = dense(pr.B.at(bo), s.input_dtype, {Bt, G, N});
      a.C = dense(pr.C.at(bo), s.input_dtype, {Bt, G, N});
      void* dtp = pr.dt.at(r0 * size_t(H * dtP) * ps);
      a.dt = s.per_channel ? dense(dtp, Shape::param_dtype, {Bt, H, P})
                           : dense(dtp, Shape::param_dtype, {Bt, H});
    }
    if (s.per_channel) {
      a.A = dense(pr.A.ptr, Shape::param_dtype, {H, P, N});
      a.D = dense(pr.D.ptr, Shape::param_dtype, {H, P});
      a.dt_bias = dense(pr.dt_bias.ptr, Shape::param_dtype, {H, P});
    } else {
      a.A = dense(pr.A.ptr, Shape::param_dtype, {H});
      a.D = dense(pr.D.ptr, Shape::param_dtype, {H});
      a.dt_bias = dense(pr.dt_bias.ptr, Shape::param_dtype, {H});
    }
    a.src_index = dense(pr.index.at(r0 * sizeof(int32_t)), Shape::index_dtype, {Bt});
    if (sr) a.rounding_seed = static_cast<const uint64_t*>(pr.seed.ptr);
    if (s.intermediate) {
      a.flags |= SSU_UPDATE_DISABLE_STATE_UPDATE;
      a.intermediate_states = dense(pr.inter.ptr, s.state_dtype, {Bt, T, H, P, N});
      a.intermediate_index = dense(pr.inter_index.ptr, Shape::index_dtype, {Bt});
      if (is_scaled(s.state_dtype))
        a.intermediate_scales = dense(pr.inter_scale.ptr, SSU_DTYPE_F32, {Bt, T, H, P});
    }
    pr.calls.push_back(a);
  }
}

// ---------------------------------------------------------------------------
// The Mamba-3 step

struct M3Shape {
  int64_t H, P, N, R;
  ssu_dtype_t state_dtype, input_dtype;
  static constexpr ssu_dtype_t param_dtype = SSU_DTYPE_F32;  // A, dt, trap, D, projections
  static constexpr ssu_dtype_t index_dtype = SSU_DTYPE_I32;

  size_t state_row() const { return size_t(H * P * N) * ssu_dtype_size(state_dtype); }
  size_t prev_B_row() const { return size_t(R * H * N) * ssu_dtype_size(input_dtype); }
  size_t prev_x_row() const { return size_t(H * P) * ssu_dtype_size(input_dtype); }
  size_t slot_bytes() const { return state_row() + prev_B_row() + prev_x_row(); }
  // Bytes that must move for a step on Bt sequences (see kUsage).
  size_t bytes(int64_t Bt) const {
    const size_t is = ssu_dtype_size(input_dtype), ps = ssu_dtype_size(param_dtype);
    size_t b = size_t(Bt) * slot_bytes() * 2;       // state, prev_B, prev_x read and written
    b += 2 * size_t(Bt * R * H * N) * is;           // B, C
    b += 3 * size_t(Bt * H * P) * is;               // x, z, out
    b += 3 * size_t(Bt * H) * ps;                   // A, dt, trap
    b += size_t(H) * ps + 3 * size_t(R * H * P) * ps;  // D, xproj, zproj, outproj
    b += 2 * size_t(Bt) * ssu_dtype_size(index_dtype);  // src, dst slots
    return b;
  }
};

// A slot pool of the three Mamba-3 pools and its calls: `calls` address it
// through src/dst indices; `dense_calls` run the same inputs on the dense
// buffers (slot = b) that the gather path fills.
struct M3Problem {
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT, dense_pool = SSU_STATE_POOL_INIT;
  Buffer state, prev_B, prev_x, dstate, dprev_B, dprev_x;
  Buffer A, dt, trap, B, C, x, z, out, D, xproj, zproj, outproj, src, dst;
  std::vector<ssu_mamba3_step_args_t> calls, dense_calls;
  int64_t slots = 0, sets = 0;
};

void build_mamba3(M3Problem& pr, BenchDevice* dev, const M3Shape& s, int64_t Bt,
                  size_t pool_target, Rng& rng) {
  const int64_t H = s.H, P = s.P, N = s.N, R = s.R;
  const ssu_dtype_t in = s.input_dtype, pd = M3Shape::param_dtype;
  pr.sets = set_count(s.slot_bytes(), Bt, pool_target);
  pr.slots = pr.sets * Bt;
  const int64_t S = pr.slots, rows = pr.sets * Bt;

  pr.state = Buffer(dev, size_t(S) * s.state_row());
  pr.prev_B = Buffer(dev, size_t(S) * s.prev_B_row());
  pr.prev_x = Buffer(dev, size_t(S) * s.prev_x_row());
  fill_state(dev, pr.state, nullptr, size_t(S * H * P), size_t(N), s.state_dtype, rng);
  fill_state(dev, pr.prev_B, nullptr, size_t(S * R * H), size_t(N), in, rng);
  fill_state(dev, pr.prev_x, nullptr, size_t(S * H), size_t(P), in, rng);
  pr.pool.state = dense(pr.state.ptr, s.state_dtype, {S, H, P, N});
  pr.pool.prev_B = dense(pr.prev_B.ptr, in, {S, R, H, N});
  pr.pool.prev_x = dense(pr.prev_x.ptr, in, {S, H, P});

  pr.dstate = Buffer(dev, size_t(Bt) * s.state_row());
  pr.dprev_B = Buffer(dev, size_t(Bt) * s.prev_B_row());
  pr.dprev_x = Buffer(dev, size_t(Bt) * s.prev_x_row());
  pr.dense_pool.state = dense(pr.dstate.ptr, s.state_dtype, {Bt, H, P, N});
  pr.dense_pool.prev_B = dense(pr.dprev_B.ptr, in, {Bt, R, H, N});
  pr.dense_pool.prev_x = dense(pr.dprev_x.ptr, in, {Bt, H, P});

  // alpha = exp(A*dt) in about [0.2, 1); trap = sigma(...) in (0, 1).
  std::vector<float> A(size_t(rows * H));
  for (auto& a : A) a = -std::exp(rng.uniform(0.0f, std::log(16.0f)));
  pr.A = upload_floats(dev, A, pd);
  pr.dt = upload_floats(dev, rng.uniforms(size_t(rows * H), 0.01f, 0.1f), pd);
  pr.trap = upload_floats(dev, rng.uniforms(size_t(rows * H), 0.05f, 0.95f), pd);
  pr.B = upload_floats(dev, rng.normals(size_t(rows * R * H * N), 1.0f), in);
  pr.C = upload_floats(dev, rng.normals(size_t(rows * R * H * N), 1.0f), in);
  pr.x = upload_floats(dev, rng.normals(size_t(rows * H * P), 1.0f), in);
  pr.z = upload_floats(dev, rng.normals(size_t(rows * H * P), 1.0f), in);
  pr.out = upload_floats(dev, std::vector<float>(size_t(rows * H * P), 0.0f), in);
  pr.D = upload_floats(dev, rng.uniforms(size_t(H), 0.5f, 1.5f), pd);
  const float wr = 1.0f / std::sqrt(float(R));
  pr.xproj = upload_floats(dev, rng.uniforms(size_t(R * H * P), 0.5f, 1.5f), pd);
  pr.zproj = upload_floats(dev, rng.normals(size_t(R * H * P), 1.0f), pd);
  pr.outproj = upload_floats(dev, rng.normals(size_t(R * H * P), wr), pd);

  // src: a random permutation split into sets of Bt; dst of set k: the src
  // slots of set k+1, so that no call writes a slot it reads.
  std::vector<int32_t> perm;
  pr.src = random_slots(dev, S, rng, &perm);
  std::vector<int32_t> dst(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) dst[i] = perm[(i + size_t(Bt)) % perm.size()];
  pr.dst = Buffer(dev, dst.size() * sizeof(int32_t));
  dev->upload(pr.dst.ptr, dst.data(), dst.size() * sizeof(int32_t));

  const size_t is = ssu_dtype_size(in), ps = ssu_dtype_size(pd);
  pr.calls.clear();
  pr.dense_calls.clear();
  for (int64_t k = 0; k < pr.sets; ++k) {
    const size_t r0 = size_t(k * Bt);
    ssu_mamba3_step_args_t a = SSU_MAMBA3_STEP_ARGS_INIT;
    a.flags = SSU_MAMBA3_UPDATE_PREV;
    a.A = dense(pr.A.at(r0 * size_t(H) * ps), pd, {Bt, H});
    a.dt = dense(pr.dt.at(r0 * size_t(H) * ps), pd, {Bt, H});
    a.trap = dense(pr.trap.at(r0 * size_t(H) * ps), pd, {Bt, H});
    a.B = dense(pr.B.at(r0 * size_t(R * H * N) * is), in, {Bt, R, H, N});
    a.C = dense(pr.C.at(r0 * size_t(R * H * N) * is), in, {Bt, R, H, N});
    a.x = dense(pr.x.at(r0 * size_t(H * P) * is), in, {Bt, H, P});
    a.z = dense(pr.z.at(r0 * size_t(H * P) * is), in, {Bt, H, P});
    a.out = dense(pr.out.at(r0 * size_t(H * P) * is), in, {Bt, H, P});
    a.D = dense(pr.D.ptr, pd, {H});
    a.xproj = dense(pr.xproj.ptr, pd, {R, H, P});
    a.zproj = dense(pr.zproj.ptr, pd, {R, H, P});
    a.outproj = dense(pr.outproj.ptr, pd, {R, H, P});
    ssu_mamba3_step_args_t d = a;
    d.pool = &pr.dense_pool;
    pr.dense_calls.push_back(d);
    a.pool = &pr.pool;
    a.src_index = dense(pr.src.at(r0 * sizeof(int32_t)), M3Shape::index_dtype, {Bt});
    a.dst_index = dense(pr.dst.at(r0 * sizeof(int32_t)), M3Shape::index_dtype, {Bt});
    pr.calls.push_back(a);
  }
}

// ---------------------------------------------------------------------------
// Output

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(&out[0], size_t(n) + 1, fmt, again);
  va_end(again);
  return out;
}

const char* rounding_name(const Options& o) {
  return o.sr_compare ? "nearest_vs_stochastic" : o.sr ? "stochastic" : "nearest";
}

std::string config_text(const Options& o, const Shape& s) {
  return format("H=%lld P=%lld N=%lld G=%lld T=%lld%s, state %s%s, x/B/C/z/out %s, "
                "dt/A/D/dt_bias f32 %s, dt_softplus, z, D, dt_bias, int32 src slots%s",
                (long long)s.H, (long long)s.P, (long long)s.N, (long long)s.G, (long long)s.T,
                s.intermediate ? " (every token's state stored to intermediate_states, pool read)"
                : s.T > 1      ? " (multi-token, final state)"
                               : "",
                ssu_dtype_name(s.state_dtype),
                is_scaled(s.state_dtype) ? " (+ f32 scale per row)" : "",
                ssu_dtype_name(s.input_dtype), s.per_channel ? "per channel" : "per head",
                o.sr_compare ? ", round-to-nearest vs stochastic rounding"
                : o.sr       ? ", stochastic rounding"
                             : "");
}

std::string config_text(const M3Shape& s) {
  return format("Mamba-3 step H=%lld P=%lld N=%lld R=%lld, state %s, B/C/x/z/out/prev_B/prev_x "
                "%s, A/dt/trap/D/xproj/zproj/outproj f32, z, outproj, UPDATE_PREV, int32 src "
                "and dst slots",
                (long long)s.H, (long long)s.P, (long long)s.N, (long long)s.R,
                ssu_dtype_name(s.state_dtype), ssu_dtype_name(s.input_dtype));
}

// What every mode writes: the run's identity, its configuration (a JSON
// object), the bytes formula and one JSON object per row.
struct Report {
  std::string mode;  // "update", "sr_compare", "mamba3_step", "replay"
  std::string device, driver, backend, algorithm = "?", date;
  std::string replay_algorithm;  // replay mode: the replay plan's algorithm
  std::string replay_skipped;    // replay mode: why replay was not timed
  std::string config_json, bytes_formula;
  std::string ceiling;  // CPU: how the copy ceiling was measured
  std::vector<std::string> rows;
  std::string skipped;  // why the configuration was skipped, if it was
  std::string error;    // why the sweep stopped, if it failed
  // Host time of launching an empty kernel with a parameter block as large
  // as the update kernels' (CUDA; 0 on the CPU).
  double launch_floor_us = 0, launch_small_us = 0;
  size_t launch_param_bytes = 0;
};

void write_json(const std::string& path, const Options& o, const Report& r) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "ssu-bench: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  std::fprintf(f, "{\n");
  std::fprintf(f, "  \"tool\": \"ssu-bench\",\n");
  std::fprintf(f, "  \"libssu_version\": \"%s\",\n", json_escape(ssu_version_string()).c_str());
  std::fprintf(f, "  \"device\": \"%s\",\n", json_escape(r.device).c_str());
  std::fprintf(f, "  \"driver\": \"%s\",\n", json_escape(r.driver).c_str());
  std::fprintf(f, "  \"backend\": \"%s\",\n", r.backend.c_str());
  std::fprintf(f, "  \"algorithm\": \"%s\",\n", json_escape(r.algorithm).c_str());
  if (!r.replay_algorithm.empty())
    std::fprintf(f, "  \"replay_algorithm\": \"%s\",\n", json_escape(r.replay_algorithm).c_str());
  std::fprintf(f, "  \"date\": \"%s\",\n", r.date.c_str());
  std::fprintf(f, "  \"command\": \"%s\",\n", json_escape(o.command_line).c_str());
  std::fprintf(f, "  \"mode\": \"%s\",\n", r.mode.c_str());
  std::fprintf(f, "  \"config\": %s,\n", r.config_json.c_str());
  std::fprintf(f, "  \"bytes_formula\": \"%s\",\n", json_escape(r.bytes_formula).c_str());
  if (!r.ceiling.empty())
    std::fprintf(f, "  \"copy_ceiling\": \"%s\",\n", json_escape(r.ceiling).c_str());
  if (r.launch_param_bytes)
    std::fprintf(f,
                 "  \"launch_floor_us\": %.3f,\n  \"launch_param_bytes\": %zu,\n"
                 "  \"launch_floor_8_byte_params_us\": %.3f,\n",
                 r.launch_floor_us, r.launch_param_bytes, r.launch_small_us);
  if (!r.skipped.empty())
    std::fprintf(f, "  \"skipped\": \"%s\",\n", json_escape(r.skipped).c_str());
  if (!r.replay_skipped.empty())
    std::fprintf(f, "  \"replay_skipped\": \"%s\",\n", json_escape(r.replay_skipped).c_str());
  if (!r.error.empty())
    std::fprintf(f, "  \"error\": \"%s\",\n", json_escape(r.error).c_str());
  std::fprintf(f, "  \"rows\": [\n");
  for (size_t i = 0; i < r.rows.size(); ++i)
    std::fprintf(f, "    %s%s\n", r.rows[i].c_str(), i + 1 < r.rows.size() ? "," : "");
  std::fprintf(f, "  ]\n}\n");
  if (std::fclose(f) != 0) {
    std::fprintf(stderr, "ssu-bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

// A rate for JSON: null where it was not measured.
std::string json_rate(double gbps) { return gbps > 0 ? format("%.3f", gbps) : "null"; }

// The copy ceiling's fields of a row (bytes: the bytes it moves), with a
// leading ", " and the given prefix on every name.
std::string json_copy(const char* prefix, size_t bytes, const CopyTiming& c) {
  return format(", \"%scopy_gbps\": %s, \"%smemcpy_gbps\": %s, \"%scopy_kernel_gbps\": %s, "
                "\"%sread_gbps\": %s, \"%scopy_winner\": \"%s\"",
                prefix, json_rate(Row::rate(bytes, c.best_s)).c_str(), prefix,
                json_rate(Row::rate(bytes, c.memcpy_s)).c_str(), prefix,
                json_rate(Row::rate(bytes, c.kernel_s)).c_str(), prefix,
                json_rate(Row::rate(bytes, c.read_s)).c_str(), prefix,
                json_escape(c.winner).c_str());
}

// The fields every row has, without the closing brace.
std::string json_row_common(const Row& r) {
  return format("{\"batch\": %lld, \"bytes\": %zu, \"time_us\": %.3f, \"gbps\": %.3f, "
                "\"ratio_to_copy\": %.4f, \"host_us\": %.3f, "
                "\"pool_slots\": %lld, \"pool_mib\": %.1f, \"rotated_calls\": %lld, "
                "\"iters\": %d",
                (long long)r.batch, r.bytes, r.time_s * 1e6, r.gbps(), r.ratio(),
                r.host_s * 1e6, (long long)r.slots, r.pool_mib, (long long)r.sets, r.iters) +
         json_copy("", r.bytes, r.copy);
}

void print_header(const Report& rep, double best_copy, bool cuda, const std::string& config) {
  std::printf("\nssu-bench %s | %s backend | device: %s%s%s | algorithm: %s\n",
              ssu_version_string(), rep.backend.c_str(), rep.device.c_str(),
              rep.driver.empty() ? "" : ", ", rep.driver.c_str(), rep.algorithm.c_str());
  std::printf("copy ceiling: %s, up to %.2f GB/s in this run\n",
              cuda ? "the faster of a graph-captured device-to-device memcpy and a 16-byte "
                     "vectorized copy kernel (each rotated over 256 MiB) of the same bytes"
                   : rep.ceiling.c_str(),
              best_copy);
  if (rep.launch_param_bytes)
    std::printf("launch floor: %.2f us of host time per cuLaunchKernel of an empty kernel with a "
                "%zu-byte parameter block (as large as the update kernels'), %.2f us with an "
                "8-byte one, measured as the host time column is\n",
                rep.launch_floor_us, rep.launch_param_bytes, rep.launch_small_us);
  std::printf("config: %s\n\n", config.c_str());
}

// The copy ceiling of each row on CUDA: both copies, which won, and the
// read-only stream of the same bytes.
struct CeilingRow {
  int64_t batch;
  size_t bytes;
  CopyTiming copy;
};

void print_ceiling(const std::vector<CeilingRow>& rows, bool cuda) {
  if (!cuda || rows.empty()) return;
  std::printf("\ncopy ceiling per row (the row's bytes, this run): ratios are to the faster copy\n\n");
  std::printf("| batch | MiB moved | memcpy GB/s | copy kernel GB/s | faster | read-only stream GB/s |\n");
  std::printf("|------:|----------:|------------:|-----------------:|:-------|----------------------:|\n");
  for (const CeilingRow& r : rows)
    std::printf("| %lld | %.2f | %.2f | %.2f | %s | %.2f |\n", (long long)r.batch,
                double(r.bytes) / double(kMiB), Row::rate(r.bytes, r.copy.memcpy_s),
                Row::rate(r.bytes, r.copy.kernel_s), r.copy.winner.c_str(),
                Row::rate(r.bytes, r.copy.read_s));
}

std::vector<CeilingRow> ceiling_rows(const std::vector<Row>& rows) {
  std::vector<CeilingRow> c;
  for (const Row& r : rows) c.push_back({r.batch, r.bytes, r.copy});
  return c;
}

// ---------------------------------------------------------------------------
// Runs

struct Env {
  ssu_context_t ctx;
  BenchDevice* dev;
  bool cuda;
  std::vector<int64_t> batches;
  size_t pool_target;
};

// The update sweep: one timing per batch (round-to-nearest or, with --sr,
// stochastic rounding), or both back to back with --sr-compare.
void run_update(const Options& o, const Env& env, Report& rep) {
  Shape shape{o.heads, o.dim, o.dstate, o.groups, o.tokens, o.mamba1,
              o.state_dtype, o.input_dtype};
  shape.intermediate = o.intermediate;
  const bool compare = o.sr_compare;
  rep.mode = compare ? "sr_compare" : "update";
  std::fprintf(stderr, "ssu-bench: %s\n", config_text(o, shape).c_str());
  rep.config_json = format(
      "{\"heads\": %lld, \"dim\": %lld, \"dstate\": %lld, \"groups\": %lld, "
      "\"tokens\": %lld, \"form\": \"%s\", \"mamba1\": %s, \"state_dtype\": \"%s\", "
      "\"state_scale\": %s, \"rounding\": \"%s\", "
      "\"input_dtype\": \"%s\", \"param_dtype\": \"f32\", \"param_layout\": \"%s\", "
      "\"dt_softplus\": true, \"z\": true, \"D\": true, \"dt_bias\": true, "
      "\"index_dtype\": \"i32\", \"threads\": %d, \"intermediate\": %s}",
      (long long)shape.H, (long long)shape.P, (long long)shape.N, (long long)shape.G,
      (long long)shape.T, shape.T > 1 ? "multi_token" : "single_token",
      o.mamba1 ? "true" : "false", ssu_dtype_name(shape.state_dtype),
      is_scaled(shape.state_dtype) ? "true" : "false", rounding_name(o),
      ssu_dtype_name(shape.input_dtype), shape.per_channel ? "per_channel" : "per_head",
      o.threads, shape.intermediate ? "true" : "false");
  rep.bytes_formula =
      shape.intermediate
          ? "state Bt*H*P*N*sizeof(state)*(1 + T) [+ i16/i8/f8e4m3 scales Bt*H*P*4*(1 + T)] "
            "(the pool read, T intermediate states stored) + x,z,out Bt*T*H*P*sizeof(in) each + "
            "B,C Bt*T*G*N*sizeof(in) each + dt Bt*T*H[*P]*4 + A H[*P*N]*4 + D,dt_bias H[*P]*4 "
            "each + src and intermediate index Bt*4 each"
          : "state Bt*H*P*N*sizeof(state)*2 [+ i16/i8/f8e4m3 scales Bt*H*P*4*2] + "
            "x,z,out Bt*T*H*P*sizeof(in) each + B,C Bt*T*G*N*sizeof(in) each + dt "
            "Bt*T*H[*P]*4 + A H[*P*N]*4 + D,dt_bias H[*P]*4 each + src index Bt*4";

  std::vector<Row> rows;
  Rng rng(0x55u);
  for (int64_t Bt : env.batches) try {
    Problem pr;
    build_problem(pr, env.dev, shape, Bt, env.pool_target, o.sr || compare, rng);
    // --sr-compare: `calls` carry the seed; `rn_calls` are the same calls
    // without it.
    std::vector<ssu_update_args_t> rn_calls;
    if (compare) {
      rn_calls = pr.calls;
      for (auto& c : rn_calls) c.rounding_seed = nullptr;
    }
    PlanGuard plan(create_update_plan(env.ctx, pr.calls[0], o.algorithm, &rep.skipped));
    if (!plan.plan) break;
    PlanGuard rn_plan(compare ? create_update_plan(env.ctx, rn_calls[0], o.algorithm, &rep.skipped) : nullptr);
    if (compare && !rn_plan.plan) break;
    rep.algorithm = algorithm_of(plan.plan);

    Row r{};
    r.batch = Bt;
    r.bytes = shape.bytes(Bt);
    r.slots = pr.slots;
    r.sets = pr.sets;
    r.pool_mib = double(pr.slots) * double(shape.slot_bytes()) / double(kMiB);
    if (compare) {
      const Timed rn = measure(env.dev, BenchDevice::update_op(rn_plan.plan, rn_calls),
                               rn_calls.size(), o.iters, env.cuda);
      r.alt_s = rn.time_s;
      r.alt_host_s = rn.host_s;
    }
    const Timed t = measure(env.dev, BenchDevice::update_op(plan.plan, pr.calls),
                            pr.calls.size(), o.iters, env.cuda);
    r.time_s = t.time_s;
    r.host_s = t.host_s;
    r.iters = t.iters;
    r.copy = time_matched_copy(env.dev, r.bytes, t.iters);
    // --pdl: each call behind a copy kernel that writes its x (from the
    // first call's x), with this plan and with SSU_PLAN_PDL; the copy as an
    // ordinary kernel and as one that lets its dependents launch at once.
    double pdl_s[2][3] = {};  // [early producer][copy alone, + update, + update with PDL]
    if (o.pdl) {
      ssu_plan_options_t po = SSU_PLAN_OPTIONS_INIT;
      po.algorithm = o.algorithm;
      po.flags = SSU_PLAN_PDL;
      ssu_plan_t raw = nullptr;
      if (ssu_plan_create_update(env.ctx, &pr.calls[0], &po, &raw) != SSU_SUCCESS)
        throw std::runtime_error(std::string("ssu_plan_create_update (SSU_PLAN_PDL): ") +
                                 ssu_last_error_message());
      PlanGuard pdl_plan(raw);
      const ssu_tensor_t& x0 = pr.calls[0].x;
      size_t xbytes = ssu_dtype_size(x0.dtype);
      for (int d = 0; d < x0.ndim; ++d) xbytes *= size_t(x0.shape[d]);
      const int it = std::max(t.iters, 10);
      for (int early = 0; early < 2; ++early) {
        auto behind_copy = [&](ssu_plan_t p) -> Op {
          return [&, p](size_t i, ssu_stream_t st) {
            env.dev->enqueue_copy(pr.calls[i].x.data, x0.data, xbytes, st, early != 0);
            if (p)
              BenchDevice::check(ssu_plan_execute_update(p, &pr.calls[i], st),
                                 "ssu_plan_execute_update");
          };
        };
        const ssu_plan_t plans[3] = {nullptr, plan.plan, pdl_plan.plan};
        for (int k = 0; k < 3; ++k)
          pdl_s[early][k] =
              measure(env.dev, behind_copy(plans[k]), pr.calls.size(), it, env.cuda).time_s;
        std::fprintf(stderr,
                     "  batch %5lld, %s copy of x (%.1f us): + update %.1f us, with SSU_PLAN_PDL "
                     "%.1f us (saving %.2f us)\n",
                     (long long)Bt, early ? "early-trigger" : "ordinary", pdl_s[early][0] * 1e6,
                     pdl_s[early][1] * 1e6, pdl_s[early][2] * 1e6,
                     (pdl_s[early][1] - pdl_s[early][2]) * 1e6);
      }
    }
    if (compare)
      std::fprintf(stderr,
                   "  batch %5lld: RN %10.1f us  SR %10.1f us  (SR overhead %+.1f%%, SR %.2fx "
                   "copy)\n",
                   (long long)Bt, r.alt_s * 1e6, r.time_s * 1e6, (r.time_s / r.alt_s - 1) * 100,
                   r.ratio());
    else
      std::fprintf(stderr, "  batch %5lld: %10.1f us  %8.2f GB/s  (copy %8.2f GB/s, %.2fx; %s)\n",
                   (long long)Bt, r.time_s * 1e6, r.gbps(), r.copy_gbps(), r.ratio(),
                   r.copy.winner.c_str());
    rows.push_back(r);
    std::string j = json_row_common(r);
    if (compare)
      j += format(", \"rounding\": \"stochastic\", \"rn_time_us\": %.3f, \"rn_gbps\": %.3f, "
                  "\"rn_ratio_to_copy\": %.4f, \"rn_host_us\": %.3f, \"sr_overhead_pct\": %.2f",
                  r.alt_s * 1e6, r.alt_gbps(), r.alt_gbps() / r.copy_gbps(), r.alt_host_s * 1e6,
                  (r.time_s / r.alt_s - 1) * 100);
    if (o.pdl)
      for (int early = 0; early < 2; ++early)
        j += format(", \"pdl_%s_producer\": {\"copy_of_x_us\": %.3f, \"copy_then_update_us\": "
                    "%.3f, \"copy_then_update_pdl_us\": %.3f, \"saving_us\": %.3f}",
                    early ? "early" : "ordinary", pdl_s[early][0] * 1e6, pdl_s[early][1] * 1e6,
                    pdl_s[early][2] * 1e6, (pdl_s[early][1] - pdl_s[early][2]) * 1e6);
    rep.rows.push_back(j + "}");
  } catch (const std::exception& e) {
    rep.error = e.what();
    break;
  }

  if (rows.empty()) return;
  double best_copy = 0.0;
  for (const Row& r : rows) best_copy = std::max(best_copy, r.copy_gbps());
  print_header(rep, best_copy, env.cuda, config_text(o, shape));
  if (compare) {
    std::printf("| batch | MiB moved | RN time (us) | SR time (us) | SR overhead | RN GB/s | "
                "SR GB/s | copy GB/s | RN ratio | SR ratio |\n");
    std::printf("|------:|----------:|-------------:|-------------:|------------:|--------:|"
                "--------:|----------:|---------:|---------:|\n");
    for (const Row& r : rows)
      std::printf("| %lld | %.2f | %.1f | %.1f | %+.1f%% | %.2f | %.2f | %.2f | %.3f | %.3f |\n",
                  (long long)r.batch, double(r.bytes) / double(kMiB), r.alt_s * 1e6,
                  r.time_s * 1e6, (r.time_s / r.alt_s - 1) * 100, r.alt_gbps(), r.gbps(),
                  r.copy_gbps(), r.alt_gbps() / r.copy_gbps(), r.ratio());
  } else {
    std::printf("| batch | MiB moved | time (us) | GB/s | copy GB/s | ratio to copy | host us/call |\n");
    std::printf("|------:|----------:|----------:|-----:|----------:|--------------:|-------------:|\n");
    for (const Row& r : rows)
      std::printf("| %lld | %.2f | %.1f | %.2f | %.2f | %.3f | %.1f |\n", (long long)r.batch,
                  double(r.bytes) / double(kMiB), r.time_s * 1e6, r.gbps(), r.copy_gbps(),
                  r.ratio(), r.host_s * 1e6);
  }
  print_ceiling(ceiling_rows(rows), env.cuda);
}

// The Mamba-3 sweep: the step on the pools through src/dst slots, and the
// gather path an engine runs without slot support, back to back.
void run_mamba3(const Options& o, const Env& env, Report& rep) {
  const M3Shape shape{o.heads, o.dim, o.dstate, o.rank, o.state_dtype, o.input_dtype};
  rep.mode = "mamba3_step";
  std::fprintf(stderr, "ssu-bench: %s\n", config_text(shape).c_str());
  rep.config_json = format(
      "{\"op\": \"mamba3_step\", \"heads\": %lld, \"dim\": %lld, \"dstate\": %lld, "
      "\"rank\": %lld, \"state_dtype\": \"%s\", \"input_dtype\": \"%s\", "
      "\"param_dtype\": \"f32\", \"D\": true, \"z\": true, \"outproj\": true, "
      "\"update_prev\": true, \"index_dtype\": \"i32\", \"dst\": \"disjoint from src\", "
      "\"threads\": %d}",
      (long long)shape.H, (long long)shape.P, (long long)shape.N, (long long)shape.R,
      ssu_dtype_name(shape.state_dtype), ssu_dtype_name(shape.input_dtype), o.threads);
  rep.bytes_formula =
      "state Bt*H*P*N*sizeof(state)*2 + prev_B Bt*R*H*N*sizeof(in)*2 + prev_x "
      "Bt*H*P*sizeof(in)*2 + B,C Bt*R*H*N*sizeof(in) each + x,z,out Bt*H*P*sizeof(in) each + "
      "A,dt,trap Bt*H*4 each + D H*4 + xproj,zproj,outproj R*H*P*4 each + src,dst Bt*4 each";

  std::vector<Row> rows;
  Rng rng(0x33u);
  for (int64_t Bt : env.batches) try {
    M3Problem pr;
    build_mamba3(pr, env.dev, shape, Bt, env.pool_target, rng);
    PlanGuard plan(create_mamba3_plan(env.ctx, pr.calls[0], o.algorithm, &rep.skipped));
    if (!plan.plan) break;
    PlanGuard dense_plan(create_mamba3_plan(env.ctx, pr.dense_calls[0], o.algorithm, &rep.skipped));
    if (!dense_plan.plan) break;
    rep.algorithm = algorithm_of(plan.plan);

    const Op direct = [&](size_t k, ssu_stream_t st) {
      BenchDevice::check(ssu_plan_execute_mamba3_step(plan.plan, &pr.calls[k], st),
                         "ssu_plan_execute_mamba3_step");
    };
    BenchDevice* dev = env.dev;
    const Op gathered = [&](size_t k, ssu_stream_t st) {
      const auto* src = reinterpret_cast<const int32_t*>(pr.src.at(k * size_t(Bt) * 4));
      const auto* dst = reinterpret_cast<const int32_t*>(pr.dst.at(k * size_t(Bt) * 4));
      dev->copy_rows(pr.dstate.ptr, nullptr, pr.state.ptr, src, shape.state_row(), Bt, st);
      dev->copy_rows(pr.dprev_B.ptr, nullptr, pr.prev_B.ptr, src, shape.prev_B_row(), Bt, st);
      dev->copy_rows(pr.dprev_x.ptr, nullptr, pr.prev_x.ptr, src, shape.prev_x_row(), Bt, st);
      BenchDevice::check(ssu_plan_execute_mamba3_step(dense_plan.plan, &pr.dense_calls[k], st),
                         "ssu_plan_execute_mamba3_step (dense)");
      dev->copy_rows(pr.state.ptr, dst, pr.dstate.ptr, nullptr, shape.state_row(), Bt, st);
      dev->copy_rows(pr.prev_B.ptr, dst, pr.dprev_B.ptr, nullptr, shape.prev_B_row(), Bt, st);
      dev->copy_rows(pr.prev_x.ptr, dst, pr.dprev_x.ptr, nullptr, shape.prev_x_row(), Bt, st);
    };

    Row r{};
    r.batch = Bt;
    r.bytes = shape.bytes(Bt);
    r.slots = pr.slots;
    r.sets = pr.sets;
    r.pool_mib = double(pr.slots) * double(shape.slot_bytes()) / double(kMiB);
    const Timed t = measure(env.dev, direct, pr.calls.size(), o.iters, env.cuda);
    r.time_s = t.time_s;
    r.host_s = t.host_s;
    r.iters = t.iters;
    const Timed g = measure(env.dev, gathered, pr.calls.size(), o.iters, env.cuda);
    r.alt_s = g.time_s;
    r.alt_host_s = g.host_s;
    r.copy = time_matched_copy(env.dev, r.bytes, t.iters);
    std::fprintf(stderr,
                 "  batch %5lld: %10.1f us  %8.2f GB/s  (copy %8.2f GB/s, %.2fx); gather path "
                 "%10.1f us (%.2fx the time)\n",
                 (long long)Bt, r.time_s * 1e6, r.gbps(), r.copy_gbps(), r.ratio(), r.alt_s * 1e6,
                 r.alt_s / r.time_s);
    rows.push_back(r);
    rep.rows.push_back(json_row_common(r) +
                       format(", \"gather_time_us\": %.3f, \"gather_host_us\": %.3f, "
                              "\"gather_over_direct\": %.4f}",
                              r.alt_s * 1e6, r.alt_host_s * 1e6, r.alt_s / r.time_s));
  } catch (const std::exception& e) {
    rep.error = e.what();
    break;
  }

  if (rows.empty()) return;
  double best_copy = 0.0;
  for (const Row& r : rows) best_copy = std::max(best_copy, r.copy_gbps());
  print_header(rep, best_copy, env.cuda, config_text(shape));
  std::printf("gather path: gather the rows of state, prev_B, prev_x into dense buffers, the "
              "step without slot indices, scatter the rows to the dst slots (%s)\n\n",
              env.cuda ? "row copy kernel" : "memcpy per row");
  std::printf("| batch | MiB moved | time (us) | GB/s | copy GB/s | ratio to copy | gather path (us) "
              "| gather / direct | host us/call |\n");
  std::printf("|------:|----------:|----------:|-----:|----------:|--------------:|-----------------:"
              "|----------------:|-------------:|\n");
  for (const Row& r : rows)
    std::printf("| %lld | %.2f | %.1f | %.2f | %.2f | %.3f | %.1f | %.2f | %.1f |\n",
                (long long)r.batch, double(r.bytes) / double(kMiB), r.time_s * 1e6, r.gbps(),
                r.copy_gbps(), r.ratio(), r.alt_s * 1e6, r.alt_s / r.time_s, r.host_s * 1e6);
  print_ceiling(ceiling_rows(rows), env.cuda);
}

// ---------------------------------------------------------------------------
// Checkpointed (replay) decode

// The most replay calls one timed pass (a cycle of every set) may hold, so
// that its CUDA graph stays quick to instantiate; sets beyond are not used.
constexpr int64_t kMaxReplayCalls = 4096;

struct ReplayCfg {
  int64_t L, T, K;  // ring capacity, tokens per step, num_accepted of a step
  bool accepted;    // num_accepted passed (else each step commits pending)
  bool stagger;     // sequence i of a call starts its cycle phase(i) steps in
  // Steps per cycle: after a commit the ring holds j*K entries at step j,
  // and step j flushes once j*K + T > L.
  int64_t cycle() const { return (L - T) / K + 1; }
  // Steps into its cycle that sequence i of a call starts (--stagger).
  int64_t phase(int64_t i) const { return stagger ? i % cycle() : 0; }
};

// Bytes that must move for a replay step on Bt sequences whose commit leaves
// `e` ring entries to read; `flush`: the step also stores the checkpoint.
size_t replay_step_bytes(const Shape& s, const ReplayCfg& c, int64_t Bt, int64_t e, bool flush) {
  const int64_t H = s.H, P = s.P, N = s.N, G = s.G, T = s.T, dtP = s.per_channel ? P : 1;
  const size_t is = ssu_dtype_size(s.input_dtype), ps = ssu_dtype_size(Shape::param_dtype);
  const size_t entry = size_t(H * P) * is + size_t(G * N) * is + size_t(H * dtP) * ps;
  size_t b = size_t(Bt) * s.slot_bytes() * (flush ? 2 : 1);  // checkpoint (+ scales)
  b += size_t(Bt * e) * entry;                                // ring entries read
  b += size_t(Bt * T) * entry;                                // ring entries appended
  b += 3 * size_t(Bt * T * H * P) * is;                       // x, z, out
  b += 2 * size_t(Bt * T * G * N) * is;                       // B, C
  b += size_t(Bt * T * H * dtP) * ps;                         // dt
  b += size_t(H * (s.per_channel ? P * N : 1)) * ps;          // A
  b += 2 * size_t(H * dtP) * ps;                              // D, dt_bias
  b += size_t(Bt) * ssu_dtype_size(Shape::index_dtype);       // src slot index
  b += size_t(Bt) * 4 * 4;                                    // counters read and written
  if (c.accepted) b += size_t(Bt) * 4;                        // num_accepted
  return b;
}

struct ReplayBytes {
  double mean = 0;         // over the cycle
  double append_mean = 0;  // over its append steps (0 when every step flushes)
  size_t flush = 0;        // the flush step
};

ReplayBytes replay_bytes(const Shape& s, const ReplayCfg& c, int64_t Bt) {
  ReplayBytes r;
  const int64_t n = c.cycle();
  double appends = 0;
  for (int64_t j = 1; j < n; ++j) appends += double(replay_step_bytes(s, c, Bt, j * c.K, false));
  r.flush = replay_step_bytes(s, c, Bt, n * c.K, true);
  r.mean = (appends + double(r.flush)) / double(n);
  r.append_mean = n > 1 ? appends / double(n - 1) : 0;
  return r;
}

// The rings of a pool and the calls of one cycle on each of `sets` sets of
// slots of that pool (the sets of the plain update's Problem), each step on
// fresh inputs.
struct ReplayProblem {
  ssu_replay_ring_t ring = SSU_REPLAY_RING_INIT;
  Buffer rx, rB, rdt, committed, pending, accepted, accepted0, error_word;
  Buffer x, z, B, C, dt, out;
  std::vector<ssu_replay_args_t> calls;  // calls[j * sets + k]: step j of set k's cycle
  std::vector<ssu_replay_args_t> first;  // first[k]: set k's first step
  // --stagger: after the first steps, warm[(w - 1) * sets + k] is set k's
  // w-th warm-up step (w = 1 .. cycle - 1), in which the sequences at least w
  // steps into their cycle commit K tokens and the others 0, so that
  // sequence i enters the timed cycles with phase(i) * K committed entries.
  std::vector<ssu_replay_args_t> warm;
  std::vector<Buffer> warm_accepted;
  int64_t sets = 0, steps = 0;
  size_t ring_bytes = 0;
};

void build_replay(ReplayProblem& rp, BenchDevice* dev, const Shape& s, const ReplayCfg& c,
                  const Problem& pr, int64_t Bt, bool cuda, Rng& rng) {
  const int64_t H = s.H, P = s.P, N = s.N, G = s.G, T = s.T, L = c.L, S = pr.slots;
  const int64_t dtP = s.per_channel ? P : 1;
  const bool multi = T > 1;
  const ssu_dtype_t in = s.input_dtype, pd = Shape::param_dtype;
  const size_t is = ssu_dtype_size(in), ps = ssu_dtype_size(pd);
  rp.steps = c.cycle();
  rp.sets = std::min(pr.sets, std::max<int64_t>(2, kMaxReplayCalls / rp.steps));

  rp.rx = Buffer(dev, size_t(S * L * H * P) * is);
  rp.rB = Buffer(dev, size_t(S * L * G * N) * is);
  rp.rdt = Buffer(dev, size_t(S * L * H * dtP) * ps);
  rp.committed = Buffer(dev, size_t(S) * sizeof(int32_t));
  rp.pending = Buffer(dev, size_t(S) * sizeof(int32_t));
  rp.ring_bytes = rp.rx.bytes + rp.rB.bytes + rp.rdt.bytes + rp.committed.bytes + rp.pending.bytes;
  rp.ring.x = dense(rp.rx.ptr, in, {S, L, H, P});
  rp.ring.B = dense(rp.rB.ptr, in, {S, L, G, N});
  rp.ring.dt = s.per_channel ? dense(rp.rdt.ptr, pd, {S, L, H, P}) : dense(rp.rdt.ptr, pd, {S, L, H});
  rp.ring.committed = dense(rp.committed.ptr, SSU_DTYPE_I32, {S});
  rp.ring.pending = dense(rp.pending.ptr, SSU_DTYPE_I32, {S});

  // Sequence rows of every (step, set), T tokens each.
  const int64_t rows = rp.steps * rp.sets * Bt;
  auto inputs = [&](Buffer& b, int64_t per_row, ssu_dtype_t dtype, float sigma) {
    const size_t count = size_t(rows * T * per_row);
    b = Buffer(dev, count * ssu_dtype_size(dtype));
    if (sigma > 0) fill_normalish(dev, b, count, dtype, sigma, rng);
  };
  inputs(rp.x, H * P, in, 1.0f);
  inputs(rp.z, H * P, in, 1.0f);
  inputs(rp.B, G * N, in, 1.0f);
  inputs(rp.C, G * N, in, 1.0f);
  inputs(rp.dt, H * dtP, pd, 0.5f);  // raw dt before bias and softplus, as the update's
  inputs(rp.out, H * P, in, 0.0f);   // written by every call

  const std::vector<int32_t> keep(size_t(Bt), int32_t(c.K)), none(size_t(Bt), 0);
  rp.accepted = Buffer(dev, keep.size() * sizeof(int32_t));
  dev->upload(rp.accepted.ptr, keep.data(), keep.size() * sizeof(int32_t));
  rp.accepted0 = Buffer(dev, none.size() * sizeof(int32_t));
  dev->upload(rp.accepted0.ptr, none.data(), none.size() * sizeof(int32_t));
  if (cuda) rp.error_word = Buffer(dev, sizeof(uint32_t));

  rp.calls.clear();
  rp.first.clear();
  rp.warm.clear();
  rp.warm_accepted.clear();
  if (c.stagger)
    for (int64_t w = 1; w < rp.steps; ++w) {
      std::vector<int32_t> acc(static_cast<size_t>(Bt));
      for (int64_t i = 0; i < Bt; ++i) acc[size_t(i)] = c.phase(i) >= w ? int32_t(c.K) : 0;
      Buffer b(dev, acc.size() * sizeof(int32_t));
      dev->upload(b.ptr, acc.data(), acc.size() * sizeof(int32_t));
      rp.warm_accepted.push_back(std::move(b));
    }
  for (int64_t j = 0; j < rp.steps; ++j) {
    for (int64_t k = 0; k < rp.sets; ++k) {
      const ssu_update_args_t& u = pr.calls[size_t(k)];
      const size_t r0 = size_t((j * rp.sets + k) * Bt);  // first sequence row of the call
      ssu_replay_args_t a = SSU_REPLAY_ARGS_INIT;
      a.flags = SSU_UPDATE_DT_SOFTPLUS;
      a.pool = &pr.pool;
      a.ring = &rp.ring;
      const size_t xo = r0 * size_t(T * H * P) * is, bo = r0 * size_t(T * G * N) * is;
      void* dtp = rp.dt.at(r0 * size_t(T * H * dtP) * ps);
      if (multi) {
        a.x = dense(rp.x.at(xo), in, {Bt, T, H, P});
        a.z = dense(rp.z.at(xo), in, {Bt, T, H, P});
        a.out = dense(rp.out.at(xo), in, {Bt, T, H, P});
        a.B = dense(rp.B.at(bo), in, {Bt, T, G, N});
        a.C = dense(rp.C.at(bo), in, {Bt, T, G, N});
        a.dt = s.per_channel ? dense(dtp, pd, {Bt, T, H, P}) : dense(dtp, pd, {Bt, T, H});
      } else {
        a.x = dense(rp.x.at(xo), in, {Bt, H, P});
        a.z = dense(rp.z.at(xo), in, {Bt, H, P});
        a.out = dense(rp.out.at(xo), in, {Bt, H, P});
        a.B = dense(rp.B.at(bo), in, {Bt, G, N});
        a.C = dense(rp.C.at(bo), in, {Bt, G, N});
        a.dt = s.per_channel ? dense(dtp, pd, {Bt, H, P}) : dense(dtp, pd, {Bt, H});
      }
      a.A = u.A;
      a.D = u.D;
      a.dt_bias = u.dt_bias;
      a.src_index = u.src_index;
      a.rounding_seed = u.rounding_seed;
      if (c.accepted) a.num_accepted = dense(rp.accepted.ptr, SSU_DTYPE_I32, {Bt});
      if (cuda) a.error_word = static_cast<uint32_t*>(rp.error_word.ptr);
      rp.calls.push_back(a);
      if (j == 0) {
        // A fresh slot has nothing pending: its first step keeps 0 tokens.
        if (c.accepted) a.num_accepted = dense(rp.accepted0.ptr, SSU_DTYPE_I32, {Bt});
        rp.first.push_back(a);
      }
    }
  }
  // The warm-up steps reuse step 0's inputs (their outputs are not looked at).
  for (size_t w = 0; w < rp.warm_accepted.size(); ++w)
    for (int64_t k = 0; k < rp.sets; ++k) {
      ssu_replay_args_t a = rp.calls[size_t(k)];
      a.num_accepted = dense(rp.warm_accepted[w].ptr, SSU_DTYPE_I32, {Bt});
      rp.warm.push_back(a);
    }
}

// Zeroes every slot's counters (and the error word): all slots fresh.
void reset_counters(BenchDevice* dev, ReplayProblem& rp) {
  const std::vector<int32_t> zeros(rp.committed.bytes / sizeof(int32_t), 0);
  dev->upload(rp.committed.ptr, zeros.data(), rp.committed.bytes);
  dev->upload(rp.pending.ptr, zeros.data(), rp.pending.bytes);
  if (rp.error_word.ptr) {
    const uint32_t w = 0;
    dev->upload(rp.error_word.ptr, &w, sizeof w);
  }
}

// After the first steps (and warm-up steps) and whole cycles, every slot of
// the sets used is back where they left it (committed phase(i) * K for
// sequence i, pending T: a cycle returns each sequence to its phase) and
// every other slot is still fresh. Returns "" when so, else what differs.
std::string check_counters(BenchDevice* dev, const ReplayProblem& rp, const Problem& pr,
                           const ReplayCfg& rc, int64_t Bt, int64_t T) {
  std::vector<int32_t> committed(rp.committed.bytes / sizeof(int32_t)),
      pending(rp.pending.bytes / sizeof(int32_t));
  dev->download(committed.data(), rp.committed.ptr, rp.committed.bytes);
  dev->download(pending.data(), rp.pending.ptr, rp.pending.bytes);
  std::vector<char> used(committed.size(), 0);
  std::vector<int32_t> want_c(committed.size(), 0);
  for (size_t i = 0; i < size_t(rp.sets * Bt); ++i) {
    used[size_t(pr.index_host[i])] = 1;
    want_c[size_t(pr.index_host[i])] = int32_t(rc.phase(int64_t(i) % Bt) * rc.K);
  }
  for (size_t s = 0; s < committed.size(); ++s) {
    const int32_t want_p = used[s] ? int32_t(T) : 0;
    if (committed[s] != want_c[s] || pending[s] != want_p)
      return format("slot %zu has committed %d, pending %d after whole cycles (expected %d, %d)",
                    s, committed[s], pending[s], want_c[s], want_p);
  }
  if (rp.error_word.ptr) {
    uint32_t w = 0;
    dev->download(&w, rp.error_word.ptr, sizeof w);
    if (w != 0) return format("the error word reads 0x%x", w);
  }
  return "";
}

// One batch size of the replay mode: the plain update and, unless replay
// was skipped, the replay cycle.
struct ReplayRow {
  Row plain{};         // the plain update (bytes, time, copy ceiling)
  bool timed = false;  // replay measured
  double time_s = 0, host_s = 0;  // per replay step (host: per execute call, CUDA)
  ReplayBytes bytes;
  CopyTiming copy;     // the ceiling of the mean step's bytes
  int iters = 0;
  int64_t sets = 0, steps = 0;
  double ring_mib = 0;
  std::string error, check;  // replay failure; counter check ("" = fine)
  size_t mean_bytes() const { return size_t(bytes.mean + 0.5); }
  double gbps() const { return bytes.mean / time_s / 1e9; }
  double copy_gbps() const { return Row::rate(mean_bytes(), copy.best_s); }
  double floor_s() const { return bytes.mean / (copy_gbps() * 1e9); }
};

// Times the replay cycle of one batch size into `r`. Returns false, with
// rep.replay_skipped set, when the library cannot plan replay here.
bool time_replay(const Options& o, const Env& env, const Shape& shape, const ReplayCfg& rc,
                 const Problem& pr, int64_t Bt, Rng& rng, ReplayRow& r, Report& rep) {
  ReplayProblem rp;
  build_replay(rp, env.dev, shape, rc, pr, Bt, env.cuda, rng);
  r.sets = rp.sets;
  r.steps = rp.steps;
  r.ring_mib = double(rp.ring_bytes) / double(kMiB);

  ssu_plan_options_t po = SSU_PLAN_OPTIONS_INIT;
  ssu_plan_t p = nullptr;
  const ssu_status_t st = ssu_plan_create_replay(env.ctx, &rp.calls[0], &po, &p);
  if (st != SSU_SUCCESS) {
    rep.replay_skipped = std::string("ssu_plan_create_replay: ") + ssu_status_string(st) + ": " +
                         ssu_last_error_message();
    std::fprintf(stderr, "ssu-bench: replay not timed: %s\n", rep.replay_skipped.c_str());
    return false;
  }
  PlanGuard plan(p);
  rep.replay_algorithm = algorithm_of(p);

  const Op first = [&](size_t k, ssu_stream_t s) {
    BenchDevice::check(ssu_plan_execute_replay(p, &rp.first[k], s), "ssu_plan_execute_replay");
  };
  const Op cycle = [&](size_t i, ssu_stream_t s) {
    BenchDevice::check(ssu_plan_execute_replay(p, &rp.calls[i], s), "ssu_plan_execute_replay");
  };
  const size_t n = rp.calls.size();
  // Fresh slots, each set's first step (and the warm-up steps that put its
  // sequences out of step), then whole cycles only.
  reset_counters(env.dev, rp);
  env.dev->run_ops(first, rp.first.size());
  if (!rp.warm.empty()) {
    // (A plan fixes whether num_accepted is passed: the warm-up steps, which
    // pass it, have their own where the timed steps do not.)
    ssu_plan_t wp = nullptr;
    if (!rc.accepted)
      BenchDevice::check(ssu_plan_create_replay(env.ctx, &rp.warm[0], &po, &wp),
                         "ssu_plan_create_replay (warm-up steps)");
    PlanGuard warm_plan(wp);
    const Op warm = [&](size_t k, ssu_stream_t s) {
      BenchDevice::check(ssu_plan_execute_replay(wp ? wp : p, &rp.warm[k], s),
                         "ssu_plan_execute_replay");
    };
    env.dev->run_ops(warm, rp.warm.size());
  }
  int iters = o.iters;
  if (iters == 0) {
    const double pass = std::max(env.dev->time_sequence(cycle, n, 1) * double(n), 1e-9);
    iters = env.cuda ? static_cast<int>(std::min(200.0, std::max(10.0, 1.0 / pass)))
                     : static_cast<int>(std::min(100.0, std::max(3.0, 1.0 / pass)));
  }
  r.time_s = env.dev->time_sequence(cycle, n, iters);
  r.iters = iters;
  r.check = check_counters(env.dev, rp, pr, rc, Bt, shape.T);
  if (!r.check.empty())
    std::fprintf(stderr, "ssu-bench: batch %lld: replay counters: %s\n", (long long)Bt,
                 r.check.c_str());
  // The host time of an execute call (CUDA; the CPU's calls are synchronous).
  if (env.cuda) r.host_s = env.dev->host_time_ops(cycle, n, static_cast<int>(std::min<size_t>(n, 200)));
  r.bytes = replay_bytes(shape, rc, Bt);
  r.copy = time_matched_copy(env.dev, r.mean_bytes(), iters);
  r.timed = true;
  return true;
}

std::string replay_cfg_text(const ReplayCfg& c) {
  return format("replay ring L=%lld, T=%lld token%s per step, num_accepted %s; cycle = %lld "
                "step%s (%lld append + 1 flush)%s",
                (long long)c.L, (long long)c.T, c.T > 1 ? "s" : "",
                c.accepted ? format("%lld (the first step 0)", (long long)c.K).c_str()
                           : "absent (a step commits the previous one's token)",
                (long long)c.cycle(), c.cycle() > 1 ? "s" : "", (long long)c.cycle() - 1,
                c.stagger ? ", sequences staggered over the cycle" : "");
}

// The replay sweep: per batch, the plain update and a replay cycle of the
// same shape on the same pool, per step, against the floor of the step's
// bytes.
void run_replay(const Options& o, const Env& env, Report& rep) {
  const Shape shape{o.heads, o.dim, o.dstate, o.groups, o.tokens, o.mamba1,
                    o.state_dtype, o.input_dtype};
  const ReplayCfg rc{o.replay, o.tokens, o.accept ? o.accept : o.tokens,
                     o.accept != 0 || o.tokens > 1, o.stagger};
  rep.mode = "replay";
  const std::string cfg = config_text(o, shape) + "; " + replay_cfg_text(rc);
  std::fprintf(stderr, "ssu-bench: %s\n", cfg.c_str());
  rep.config_json = format(
      "{\"op\": \"replay\", \"heads\": %lld, \"dim\": %lld, \"dstate\": %lld, \"groups\": %lld, "
      "\"tokens\": %lld, \"form\": \"%s\", \"mamba1\": %s, \"state_dtype\": \"%s\", "
      "\"state_scale\": %s, \"rounding\": \"%s\", "
      "\"input_dtype\": \"%s\", \"param_dtype\": \"f32\", \"param_layout\": \"%s\", "
      "\"dt_softplus\": true, \"z\": true, \"D\": true, \"dt_bias\": true, "
      "\"index_dtype\": \"i32\", \"threads\": %d, \"ring_len\": %lld, \"num_accepted\": %s, "
      "\"cycle_steps\": %lld, \"stagger\": %s, \"ring_dt_dtype\": \"f32\"}",
      (long long)shape.H, (long long)shape.P, (long long)shape.N, (long long)shape.G,
      (long long)shape.T, shape.T > 1 ? "multi_token" : "single_token",
      o.mamba1 ? "true" : "false", ssu_dtype_name(shape.state_dtype),
      is_scaled(shape.state_dtype) ? "true" : "false", rounding_name(o),
      ssu_dtype_name(shape.input_dtype), shape.per_channel ? "per_channel" : "per_head",
      o.threads, (long long)rc.L,
      rc.accepted ? std::to_string(rc.K).c_str() : "null", (long long)rc.cycle(),
      rc.stagger ? "true" : "false");
  rep.bytes_formula =
      "replay step with e ring entries read (e = j*K at step j = 1..c): checkpoint "
      "Bt*H*P*N*sizeof(state) [+ i16 scales Bt*H*P*4] read (and written at the flush step) + "
      "ring Bt*e*entry read + Bt*T*entry appended (entry = H*P*sizeof(in) + G*N*sizeof(in) + "
      "H[*P]*4) + x,z,out Bt*T*H*P*sizeof(in) each + B,C Bt*T*G*N*sizeof(in) each + dt "
      "Bt*T*H[*P]*4 + A H[*P*N]*4 + D,dt_bias H[*P]*4 each + src Bt*4 + counters Bt*16 [+ "
      "num_accepted Bt*4]; step_bytes_mean over the cycle; plain: the update's bytes";

  std::vector<ReplayRow> rows;
  Rng rng(0x77u);
  for (int64_t Bt : env.batches) try {
    Problem pr;
    build_problem(pr, env.dev, shape, Bt, env.pool_target, o.sr, rng);
    PlanGuard plan(create_update_plan(env.ctx, pr.calls[0], o.algorithm, &rep.skipped));
    if (!plan.plan) break;
    rep.algorithm = algorithm_of(plan.plan);

    ReplayRow r;
    Row& u = r.plain;
    u.batch = Bt;
    u.bytes = shape.bytes(Bt);
    u.slots = pr.slots;
    u.sets = pr.sets;
    u.pool_mib = double(pr.slots) * double(shape.slot_bytes()) / double(kMiB);
    const Timed t = measure(env.dev, BenchDevice::update_op(plan.plan, pr.calls),
                            pr.calls.size(), o.iters, env.cuda);
    u.time_s = t.time_s;
    u.host_s = t.host_s;
    u.iters = t.iters;
    u.copy = time_matched_copy(env.dev, u.bytes, t.iters);

    if (rep.replay_skipped.empty()) {
      try {
        time_replay(o, env, shape, rc, pr, Bt, rng, r, rep);
      } catch (const std::exception& e) {
        r.error = e.what();
        std::fprintf(stderr, "ssu-bench: batch %lld: replay failed: %s\n", (long long)Bt, e.what());
      }
    }
    if (r.timed)
      std::fprintf(stderr,
                   "  batch %5lld: replay %9.1f us/step  plain %9.1f us/step  (%.2fx)  floor "
                   "%8.1f us (%.2f of it)\n",
                   (long long)Bt, r.time_s * 1e6, u.time_s * 1e6, u.time_s / r.time_s,
                   r.floor_s() * 1e6, r.floor_s() / r.time_s);
    else
      std::fprintf(stderr, "  batch %5lld: plain %9.1f us/step (replay not timed)\n",
                   (long long)Bt, u.time_s * 1e6);

    std::string j = format("{\"batch\": %lld, \"ring_len\": %lld, \"tokens\": %lld, "
                           "\"num_accepted\": %s, \"cycle_steps\": %lld",
                           (long long)Bt, (long long)rc.L, (long long)rc.T,
                           rc.accepted ? std::to_string(rc.K).c_str() : "null",
                           (long long)rc.cycle());
    if (r.timed) {
      j += format(", \"time_us\": %.3f, \"host_us\": %s, \"step_bytes_mean\": %.1f, "
                  "\"append_step_bytes_mean\": %.1f, \"flush_step_bytes\": %zu, \"gbps\": %.3f, "
                  "\"floor_us\": %.3f, \"floor_over_time\": %.4f, \"speedup_vs_plain\": %.4f, "
                  "\"replay_sets\": %lld, \"calls_per_pass\": %lld, \"ring_mib\": %.1f, "
                  "\"iters\": %d, \"counters_ok\": %s",
                  r.time_s * 1e6, env.cuda ? format("%.3f", r.host_s * 1e6).c_str() : "null",
                  r.bytes.mean, r.bytes.append_mean, r.bytes.flush, r.gbps(), r.floor_s() * 1e6,
                  r.floor_s() / r.time_s, u.time_s / r.time_s, (long long)r.sets,
                  (long long)(r.sets * r.steps), r.ring_mib, r.iters,
                  r.check.empty() ? "true" : "false");
      j += json_copy("", r.mean_bytes(), r.copy);
      if (!r.check.empty()) j += format(", \"counters_error\": \"%s\"", json_escape(r.check).c_str());
    } else {
      j += ", \"time_us\": null";
      if (!r.error.empty()) j += format(", \"replay_error\": \"%s\"", json_escape(r.error).c_str());
    }
    j += format(", \"plain_time_us\": %.3f, \"plain_host_us\": %.3f, \"plain_bytes\": %zu, "
                "\"plain_gbps\": %.3f, \"plain_ratio_to_copy\": %.4f, \"plain_iters\": %d, "
                "\"pool_slots\": %lld, \"pool_mib\": %.1f, \"plain_rotated_calls\": %lld",
                u.time_s * 1e6, u.host_s * 1e6, u.bytes, u.gbps(), u.ratio(), u.iters,
                (long long)u.slots, u.pool_mib, (long long)u.sets);
    j += json_copy("plain_", u.bytes, u.copy);
    rep.rows.push_back(j + "}");
    rows.push_back(std::move(r));
  } catch (const std::exception& e) {
    rep.error = e.what();
    break;
  }

  if (rows.empty()) return;
  double best_copy = 0.0;
  for (const ReplayRow& r : rows)
    best_copy = std::max({best_copy, r.plain.copy_gbps(), r.timed ? r.copy_gbps() : 0.0});
  print_header(rep, best_copy, env.cuda, cfg);
  if (!rep.replay_algorithm.empty())
    std::printf("replay algorithm: %s; each pass runs one cycle on every set of slots, step by "
                "step; us/step = pass time / calls\n\n",
                rep.replay_algorithm.c_str());
  if (!rep.replay_skipped.empty())
    std::printf("replay not timed: %s\n\n", rep.replay_skipped.c_str());
  std::printf("| batch | replay us/step | plain us/step | speedup | floor us/step | floor / "
              "replay | step MiB (mean) | replay GB/s | ceiling GB/s | plain ratio to copy | "
              "replay host us/call |\n");
  std::printf("|------:|---------------:|--------------:|--------:|--------------:|--------------"
              ":|----------------:|------------:|-------------:|--------------------:|"
              "--------------------:|\n");
  for (const ReplayRow& r : rows) {
    const Row& u = r.plain;
    if (r.timed)
      std::printf("| %lld | %.1f | %.1f | %.2f | %.1f | %.3f | %.2f | %.2f | %.2f | %.3f | %s |\n",
                  (long long)u.batch, r.time_s * 1e6, u.time_s * 1e6, u.time_s / r.time_s,
                  r.floor_s() * 1e6, r.floor_s() / r.time_s, r.bytes.mean / double(kMiB),
                  r.gbps(), r.copy_gbps(), u.ratio(),
                  env.cuda ? format("%.1f", r.host_s * 1e6).c_str() : "-");
    else
      std::printf("| %lld | - | %.1f | - | - | - | - | - | %.2f | %.3f | - |\n", (long long)u.batch,
                  u.time_s * 1e6, u.copy_gbps(), u.ratio());
  }
  for (const ReplayRow& r : rows)
    if (!r.check.empty())
      std::printf("batch %lld: replay counters: %s\n", (long long)r.plain.batch, r.check.c_str());
  std::vector<CeilingRow> ceil;
  for (const ReplayRow& r : rows) {
    if (r.timed) ceil.push_back({r.plain.batch, r.mean_bytes(), r.copy});
    ceil.push_back({r.plain.batch, r.plain.bytes, r.plain.copy});
  }
  print_ceiling(ceil, env.cuda);
}

int run(const Options& o) {
  ssu_context_options_t copt = SSU_CONTEXT_OPTIONS_INIT;
  copt.backend = o.backend;
  copt.num_threads = o.threads;
  ssu_context_t ctx = nullptr;
  ssu_status_t st = ssu_context_create(&copt, &ctx);
  if (st != SSU_SUCCESS) {
    std::fprintf(stderr, "ssu-bench: cannot create a %s context: %s: %s\n",
                 ssu_backend_name(o.backend), ssu_status_string(st), ssu_last_error_message());
    return 1;
  }
  ssu_backend_t backend = SSU_BACKEND_CPU;
  ssu_context_get_backend(ctx, &backend);
  std::unique_ptr<BenchDevice> dev;
  if (backend == SSU_BACKEND_CUDA) {
    dev = make_cuda_bench_device(ctx);
    if (!dev) {
      std::fprintf(stderr,
                   "ssu-bench: the context runs the CUDA backend, but this ssu-bench was built "
                   "without CUDA timing support (configure with the CUDA backend enabled)\n");
      ssu_context_destroy(ctx);
      return 1;
    }
  } else {
    dev = make_cpu_bench_device(ctx, o.threads);
  }

  Env env{ctx, dev.get(), backend == SSU_BACKEND_CUDA, o.batches, 0};
  if (env.batches.empty()) {
    if (env.cuda) {
      env.batches = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    } else if (o.long_sweep) {
      env.batches = {1, 2, 4, 8, 16, 32, 64};
    } else {
      // Each CPU row fills and rotates through a pool of 4x the last-level
      // cache and moves up to 515 MiB a call: three rows, a factor of 8
      // apart, keep the default run well within half a minute on two cores.
      env.batches = {1, 8, 64};
    }
  }
  env.pool_target = env.cuda ? kCudaRotationBytes : cpu_rotation_bytes();

  Report rep;
  rep.device = dev->name();
  rep.driver = dev->driver();
  rep.backend = ssu_backend_name(backend);
  rep.date = utc_now();
  if (!env.cuda)
    rep.ceiling = format("the fastest of memcpy and a streaming-store copy loop, each on one and "
                         "on all threads, of the same bytes (each row's own, copied between "
                         "buffer pairs rotated over about %zu MiB, 4x the %zu MiB last-level "
                         "cache; each copy's time the best of %d medians)",
                         cpu_rotation_bytes() / kMiB, last_level_cache_bytes() / kMiB,
                         kCpuCopyRounds);
  rep.launch_floor_us =
      dev->launch_floor(200, &rep.launch_param_bytes, &rep.launch_small_us) * 1e6;
  rep.launch_small_us *= 1e6;
  std::fprintf(stderr, "ssu-bench: %s backend on %s\n", rep.backend.c_str(), rep.device.c_str());

  // A sweep stops at its first failure and prints the rows measured before.
  if (o.mamba3)
    run_mamba3(o, env, rep);
  else if (o.replay)
    run_replay(o, env, rep);
  else
    run_update(o, env, rep);
  int rc = 0;
  if (!rep.skipped.empty()) {
    // Not supported here: say so and keep what was measured.
    std::fprintf(stderr, "ssu-bench: configuration skipped: %s\n", rep.skipped.c_str());
    std::printf("skipped: %s\n", rep.skipped.c_str());
  }
  if (!rep.error.empty()) {
    std::fprintf(stderr, "ssu-bench: %s\n", rep.error.c_str());
    rc = 1;
  }
  std::fflush(stdout);
  if (!o.json.empty()) write_json(o.json, o, rep);
  dev.reset();
  ssu_context_destroy(ctx);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ssu-bench: %s\n", e.what());
    return 1;
  }
}
