// ssu-bench: times a model-shaped selective state update on one backend and
// compares its bandwidth with the device's own copy of the same bytes.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_device.h"
#include "ssu.h"


namespace {

using namespace ssu_bench;

constexpr size_t kMiB = size_t{1} << 20;
// The state pool of one configuration spans at least this many bytes so that
// consecutive calls find their state out of cache.
constexpr size_t kCudaPoolBytes = 256 * kMiB;
// Upper bound on the number of rotated call sets (tiny states only).
constexpr int64_t kMaxSets = 16384;

const char kUsage[] =
    "usage: ssu-bench [options]\n"
    "\n"
    "Times ssu_plan_execute_update on a model-shaped decode step for a sweep of\n"
    "batch sizes and prints, per batch: the median time of one call, the achieved\n"
    "bandwidth (bytes that must move / time), the device's copy bandwidth for the\n"
    "same number of bytes measured in the same run (CPU: the better of one-thread\n"
    "and multi-thread memcpy; CUDA: device-to-device copy), their ratio, and the\n"
    "host time of one execute call.\n"
    "\n"
    "Default configuration (Mamba-2 layer): H=128 P=64 N=128 G=8, x/B/C/z/out bf16,\n"
    "state f32, dt/A/D/dt_bias f32 per head, dt_softplus, z, D and dt_bias present,\n"
    "int32 source slot indices (the final state returns to the source slot).\n"
    "\n"
    "options:\n"
    "  --backend auto|cpu|cuda  backend (default auto: CUDA if usable, else CPU)\n"
    "  --batch LIST             comma-separated batch sizes (default CPU\n"
    "                           1,2,4,8,16,32,64; CUDA 1,2,...,512)\n"
    "  --state-dtype f32|bf16|f16   state pool dtype (default f32)\n"
    "  --input-dtype f32|bf16|f16   x, B, C, z, out dtype (default bf16)\n"
    "  --heads H  --dim P  --dstate N  --groups G   shape (default 128 64 128 8)\n"
    "  --tokens T               T tokens per sequence (multi-token form, final\n"
    "                           state stored once; default 1 = single-token form)\n"
    "  --mamba1                 Mamba-1 preset: H=G=1, P=5120, N=16, A (1,P,N),\n"
    "                           dt (Bt,1,P), D and dt_bias (1,P), f32 state;\n"
    "                           options given explicitly still apply\n"
    "  --threads K              CPU worker threads (default: all hardware threads)\n"
    "  --iters K                timed iterations per batch: calls on the CPU,\n"
    "                           replays of a graph of calls on CUDA (default:\n"
    "                           about 1 s of work per batch size)\n"
    "  --json FILE              also write every result as JSON to FILE\n"
    "  --help                   this text\n"
    "\n"
    "Bytes that must move per call (sizes in bytes of each tensor's dtype):\n"
    "  state  Bt*H*P*N*sizeof(state)*2              (read once, written once)\n"
    "  x, z, out  Bt*T*H*P*sizeof(input) each\n"
    "  B, C   Bt*T*G*N*sizeof(input) each\n"
    "  dt     Bt*T*H*sizeof(dt)   (per channel: Bt*T*H*P*sizeof(dt))\n"
    "  A      H*sizeof(A)         (per channel: H*P*N*sizeof(A))\n"
    "  D, dt_bias  H*4 each       (per channel: H*P*4 each)\n"
    "  slot indices  Bt*4\n"
    "bandwidth = bytes / median time; copy = a copy of bytes/2 bytes (which moves\n"
    "the same number of bytes: each read once and written once).\n"
    "\n"
    "Calls rotate through disjoint random sets of slots of a state pool of at least\n"
    "4x the last-level cache (CPU) or 256 MiB (CUDA), with model-like random data.\n";

// ---------------------------------------------------------------------------
// Options

struct Options {
  ssu_backend_t backend = SSU_BACKEND_AUTO;
  std::vector<int64_t> batches;  // empty: the backend's default sweep
  ssu_dtype_t state_dtype = SSU_DTYPE_F32;
  ssu_dtype_t input_dtype = SSU_DTYPE_BF16;
  int64_t heads = 128, dim = 64, dstate = 128, groups = 8, tokens = 1;
  bool mamba1 = false;
  int threads = 0;
  int iters = 0;  // 0: automatic
  std::string json;
  std::string command_line;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "ssu-bench: %s\n(run ssu-bench --help for the options)\n", msg.c_str());
  std::exit(2);
}

int64_t parse_positive(const std::string& opt, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n <= 0)
    usage_error(opt + " needs a positive integer, got '" + v + "'");
  return n;
}

ssu_dtype_t parse_float_dtype(const std::string& opt, const std::string& v) {
  if (v == "f32" || v == "fp32" || v == "float32") return SSU_DTYPE_F32;
  if (v == "bf16" || v == "bfloat16") return SSU_DTYPE_BF16;
  if (v == "f16" || v == "fp16" || v == "float16") return SSU_DTYPE_F16;
  usage_error(opt + " must be f32, bf16 or f16, got '" + v + "'");
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_=./,:+@%") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Options parse_args(int argc, char** argv) {
  Options o;
  bool set_heads = false, set_dim = false, set_dstate = false, set_groups = false,
       set_state = false;
  for (int i = 0; i < argc; ++i) {
    if (i) o.command_line += ' ';
    o.command_line += shell_quote(argv[i]);
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string val;
    bool has_inline = false;
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      val = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    auto value = [&]() -> std::string {
      if (has_inline) return val;
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
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
    } else if (a == "--state-dtype") {
      o.state_dtype = parse_float_dtype(a, value());
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
    } else if (a == "--mamba1") {
      o.mamba1 = true;
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
  if (o.mamba1) {
    if (!set_heads) o.heads = 1;
    if (!set_groups) o.groups = 1;
    if (!set_dim) o.dim = 5120;
    if (!set_dstate) o.dstate = 16;
    if (!set_state) o.state_dtype = SSU_DTYPE_F32;
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

// Appends `values` converted to `dtype` to raw bytes.
std::vector<unsigned char> encode(const std::vector<float>& values, ssu_dtype_t dtype) {
  std::vector<unsigned char> out(values.size() * ssu_dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == SSU_DTYPE_F32) {
      std::memcpy(&out[i * 4], &values[i], 4);
    } else {
      const uint16_t h = dtype == SSU_DTYPE_BF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
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
// One configuration

struct Shape {
  int64_t H, P, N, G, T;
  bool per_channel;  // Mamba-1: dt, A, D, dt_bias per channel
  ssu_dtype_t state_dtype, input_dtype;
  static constexpr ssu_dtype_t param_dtype = SSU_DTYPE_F32;
  static constexpr ssu_dtype_t index_dtype = SSU_DTYPE_I32;

  size_t slot_bytes() const { return size_t(H * P * N) * ssu_dtype_size(state_dtype); }
  // Bytes that must move for a call on Bt sequences (see kUsage).
  size_t bytes(int64_t Bt) const {
    const size_t is = ssu_dtype_size(input_dtype), ps = ssu_dtype_size(param_dtype);
    size_t b = size_t(Bt) * slot_bytes() * 2;
    b += 3 * size_t(Bt * T * H * P) * is;                     // x, z, out
    b += 2 * size_t(Bt * T * G * N) * is;                     // B, C
    b += size_t(Bt * T * H * (per_channel ? P : 1)) * ps;     // dt
    b += size_t(H * (per_channel ? P * N : 1)) * ps;          // A
    b += 2 * size_t(H * (per_channel ? P : 1)) * ps;          // D, dt_bias
    b += size_t(Bt) * ssu_dtype_size(index_dtype);            // src slot index
    return b;
  }
};

struct Row {
  int64_t batch;
  size_t bytes;
  int64_t slots;
  int64_t sets;
  int iters;
  double time_s, host_s, copy_s;
  double gbps() const { return bytes / time_s / 1e9; }
  double copy_gbps() const { return (bytes / 2 * 2) / copy_s / 1e9; }
  double ratio() const { return gbps() / copy_gbps(); }
};

// Everything one batch size needs: a state pool, per-set inputs and the
// rotated calls.
struct Problem {
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  Buffer state, x, z, out, B, C, dt, A, D, dt_bias, index;
  std::vector<ssu_update_args_t> calls;
  int64_t slots = 0, sets = 0;
};

// Fills the pool with values spread like a trained state (roughly N(0, 0.5)
// as the sum of two uniforms, never zero), with a fast generator: pools reach
// gigabytes on GPUs.
void fill_state(BenchDevice* dev, Buffer& buf, size_t count, ssu_dtype_t dtype, Rng& rng) {
  const size_t chunk = size_t{4} << 20;  // elements per upload
  const size_t es = ssu_dtype_size(dtype);
  uint64_t sm = rng.gen()();
  auto next = [&sm]() {  // splitmix64
    uint64_t z = (sm += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::vector<float> v(std::min(chunk, count));
  for (size_t off = 0; off < count; off += chunk) {
    const size_t n = std::min(chunk, count - off);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t r = next();
      // Two uniforms in (-1, 1) from 24 bits each; their sum has sigma ~0.82.
      const float u0 = (float(uint32_t(r) >> 8) + 0.5f) * (1.0f / 8388608.0f) - 1.0f;
      const float u1 = (float(uint32_t(r >> 32) >> 8) + 0.5f) * (1.0f / 8388608.0f) - 1.0f;
      const float x = 0.6f * (u0 + u1);
      v[i] = x != 0.0f ? x : 0.25f;
    }
    v.resize(n);
    const auto bytes = encode(v, dtype);
    dev->upload(buf.at(off * es), bytes.data(), bytes.size());
  }
}

void build_problem(Problem& pr, BenchDevice* dev, const Shape& s, int64_t Bt, size_t pool_target,
                   Rng& rng) {
  const int64_t H = s.H, P = s.P, N = s.N, G = s.G, T = s.T;
  const bool multi = T > 1;
  const size_t set_bytes = size_t(Bt) * s.slot_bytes();
  pr.sets = std::max<int64_t>(2, int64_t((pool_target + set_bytes - 1) / set_bytes));
  pr.sets = std::min(pr.sets, kMaxSets);
  pr.slots = pr.sets * Bt;
  const int64_t S = pr.slots, R = pr.sets * Bt;  // R: sequence rows over all sets

  pr.state = Buffer(dev, size_t(S) * s.slot_bytes());
  fill_state(dev, pr.state, size_t(S * H * P * N), s.state_dtype, rng);
  pr.pool.state = dense(pr.state.ptr, s.state_dtype, {S, H, P, N});

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
  std::vector<int32_t> perm(static_cast<size_t>(S));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen());
  pr.index = Buffer(dev, perm.size() * sizeof(int32_t));
  dev->upload(pr.index.ptr, perm.data(), perm.size() * sizeof(int32_t));

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

std::string config_text(const Shape& s) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "H=%lld P=%lld N=%lld G=%lld T=%lld%s, state %s, x/B/C/z/out %s, "
                "dt/A/D/dt_bias f32 %s, dt_softplus, z, D, dt_bias, int32 src slots",
                (long long)s.H, (long long)s.P, (long long)s.N, (long long)s.G, (long long)s.T,
                s.T > 1 ? " (multi-token, final state)" : "", ssu_dtype_name(s.state_dtype),
                ssu_dtype_name(s.input_dtype), s.per_channel ? "per channel" : "per head");
  return buf;
}

void write_json(const std::string& path, const Options& o, const std::string& device,
                const char* backend, const char* algorithm, const Shape& s,
                const std::vector<Row>& rows, const std::string& date) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "ssu-bench: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
  std::fprintf(f, "{\n");
  std::fprintf(f, "  \"tool\": \"ssu-bench\",\n");
  std::fprintf(f, "  \"libssu_version\": \"%s\",\n", json_escape(ssu_version_string()).c_str());
  std::fprintf(f, "  \"device\": \"%s\",\n", json_escape(device).c_str());
  std::fprintf(f, "  \"backend\": \"%s\",\n", backend);
  std::fprintf(f, "  \"algorithm\": \"%s\",\n", json_escape(algorithm).c_str());
  std::fprintf(f, "  \"date\": \"%s\",\n", date.c_str());
  std::fprintf(f, "  \"command\": \"%s\",\n", json_escape(o.command_line).c_str());
  std::fprintf(f,
               "  \"config\": {\"heads\": %lld, \"dim\": %lld, \"dstate\": %lld, \"groups\": %lld, "
               "\"tokens\": %lld, \"form\": \"%s\", \"mamba1\": %s, \"state_dtype\": \"%s\", "
               "\"input_dtype\": \"%s\", \"param_dtype\": \"f32\", \"param_layout\": \"%s\", "
               "\"dt_softplus\": true, \"z\": true, \"D\": true, \"dt_bias\": true, "
               "\"index_dtype\": \"i32\", \"threads\": %d},\n",
               (long long)s.H, (long long)s.P, (long long)s.N, (long long)s.G, (long long)s.T,
               s.T > 1 ? "multi_token" : "single_token", o.mamba1 ? "true" : "false",
               ssu_dtype_name(s.state_dtype), ssu_dtype_name(s.input_dtype),
               s.per_channel ? "per_channel" : "per_head", o.threads);
  std::fprintf(f,
               "  \"bytes_formula\": \"state Bt*H*P*N*sizeof(state)*2 + x,z,out Bt*T*H*P*sizeof(in) "
               "each + B,C Bt*T*G*N*sizeof(in) each + dt Bt*T*H[*P]*4 + A H[*P*N]*4 + "
               "D,dt_bias H[*P]*4 each + src index Bt*4\",\n");
  std::fprintf(f, "  \"rows\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f,
                 "    {\"batch\": %lld, \"bytes\": %zu, \"time_us\": %.3f, \"gbps\": %.3f, "
                 "\"copy_gbps\": %.3f, \"ratio_to_copy\": %.4f, \"host_us\": %.3f, "
                 "\"pool_slots\": %lld, \"pool_mib\": %.1f, \"rotated_calls\": %lld, "
                 "\"iters\": %d}%s\n",
                 (long long)r.batch, r.bytes, r.time_s * 1e6, r.gbps(), r.copy_gbps(), r.ratio(),
                 r.host_s * 1e6, (long long)r.slots,
                 double(r.slots) * double(s.slot_bytes()) / double(kMiB), (long long)r.sets,
                 r.iters, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  if (std::fclose(f) != 0) {
    std::fprintf(stderr, "ssu-bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
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

  std::vector<int64_t> batches = o.batches;
  if (batches.empty()) {
    batches = {1, 2, 4, 8, 16, 32, 64};
    if (backend == SSU_BACKEND_CUDA)
      for (int64_t b : {128, 256, 512}) batches.push_back(b);
  }
  const Shape shape{o.heads, o.dim, o.dstate, o.groups, o.tokens, o.mamba1,
                    o.state_dtype, o.input_dtype};
  const size_t pool_target =
      backend == SSU_BACKEND_CUDA ? kCudaPoolBytes : 4 * last_level_cache_bytes();
  const std::string device = dev->name();
  const std::string date = utc_now();
  std::string algorithm = "?";

  std::fprintf(stderr, "ssu-bench: %s backend on %s\nssu-bench: %s\n", ssu_backend_name(backend),
               device.c_str(), config_text(shape).c_str());

  std::vector<Row> rows;
  Rng rng(0x55u);
  int rc = 0;
  try {
    for (int64_t Bt : batches) {
      Problem pr;
      build_problem(pr, dev.get(), shape, Bt, pool_target, rng);
      ssu_plan_t plan = nullptr;
      st = ssu_plan_create_update(ctx, &pr.calls[0], nullptr, &plan);
      if (st != SSU_SUCCESS)
        throw std::runtime_error(std::string("ssu_plan_create_update: ") + ssu_status_string(st) +
                                 ": " + ssu_last_error_message());
      ssu_plan_info_t info = SSU_PLAN_INFO_INIT;
      if (ssu_plan_get_info(plan, &info) == SSU_SUCCESS && info.algorithm_name)
        algorithm = info.algorithm_name;

      Row r{};
      r.batch = Bt;
      r.bytes = shape.bytes(Bt);
      r.slots = pr.slots;
      r.sets = pr.sets;
      int iters = o.iters;
      if (iters == 0) {
        // About 1 s of timed work per batch size. An iteration is one call on
        // the CPU and one replay of a graph of max(rotated calls, 20) calls
        // on CUDA (see bench_cuda.cpp), whose event timings are steadier.
        const double est = std::max(dev->time_update(plan, pr.calls, 3), 1e-9);
        if (backend == SSU_BACKEND_CUDA) {
          const double per_iter = est * double(std::max<int64_t>(pr.sets, 20));
          iters = static_cast<int>(std::min(200.0, std::max(10.0, 1.0 / per_iter)));
        } else {
          iters = static_cast<int>(std::min(2000.0, std::max(20.0, 1.0 / est)));
        }
      }
      r.iters = iters;
      try {
        r.time_s = dev->time_update(plan, pr.calls, iters);
        r.host_s = dev->host_time_update(plan, pr.calls, std::min(iters, 200));
      } catch (...) {
        ssu_plan_destroy(plan);
        throw;
      }
      ssu_plan_destroy(plan);

      // The copy ceiling for the same bytes: bytes/2 read and bytes/2 written.
      {
        const size_t half = r.bytes / 2;
        Buffer src(dev.get(), half), dst(dev.get(), half);
        r.copy_s = dev->time_copy(dst.ptr, src.ptr, half, std::min(std::max(iters, 10), 200));
      }
      std::fprintf(stderr, "  batch %5lld: %10.1f us  %8.2f GB/s  (copy %8.2f GB/s, %.2fx)\n",
                   (long long)Bt, r.time_s * 1e6, r.gbps(), r.copy_gbps(), r.ratio());
      rows.push_back(r);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ssu-bench: %s\n", e.what());
    rc = 1;
  }

  if (!rows.empty()) {
    double best_copy = 0.0;
    for (const Row& r : rows) best_copy = std::max(best_copy, r.copy_gbps());
    std::printf("\nssu-bench %s | %s backend | device: %s | algorithm: %s\n", ssu_version_string(),
                ssu_backend_name(backend), device.c_str(), algorithm.c_str());
    std::printf("copy ceiling: %s of the same bytes, up to %.2f GB/s in this run\n",
                backend == SSU_BACKEND_CUDA ? "device-to-device copy"
                                            : "best of 1-thread and multi-thread memcpy",
                best_copy);
    std::printf("config: %s\n\n", config_text(shape).c_str());
    std::printf("| batch | MiB moved | time (us) | GB/s | copy GB/s | ratio to copy | host us/call |\n");
    std::printf("|------:|----------:|----------:|-----:|----------:|--------------:|-------------:|\n");
    for (const Row& r : rows)
      std::printf("| %lld | %.2f | %.1f | %.2f | %.2f | %.3f | %.1f |\n", (long long)r.batch,
                  double(r.bytes) / double(kMiB), r.time_s * 1e6, r.gbps(), r.copy_gbps(),
                  r.ratio(), r.host_s * 1e6);
    std::fflush(stdout);
    if (!o.json.empty())
      write_json(o.json, o, device, ssu_backend_name(backend), algorithm.c_str(), shape, rows,
                 date);
  }
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
