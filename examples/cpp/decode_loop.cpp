// decode_loop.cpp -- a serving-style decode loop over a libssu state pool
// (C++ version; see examples/README.md).
//
// Requests join and leave kBatch batch entries over the steps; each request
// owns a pool slot while it runs, and idle entries are padding (slot -1).
// Inputs come from splitmix64, so the C, C++, Rust and Python versions feed
// the library bit-identical data and print the same checksum of the pool.
//
//   c++ -std=c++17 decode_loop.cpp $(pkg-config --cflags --libs ssu) -o decode_loop
//   ./decode_loop [steps]              SSU_BACKEND=cuda ./decode_loop
//
// With SSU_BACKEND=cuda the buffers live in device memory, allocated through
// the CUDA driver API opened with dlopen (no CUDA headers or link needed).

#include <dlfcn.h>
#include <ssu.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kSlots = 16, kBatch = 8, kH = 8, kP = 64, kN = 16, kG = 1, kMaxLen = 24;
constexpr size_t kSlotElems = size_t(kH) * kP * kN;

// ---- deterministic inputs --------------------------------------------------

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // A value in [-1, 1) on a 2^-23 grid: exact in float and double.
  double sym() { return double(next() >> 40) / 8388608.0 - 1.0; }
  void fill(float* v, size_t n, double scale) {
    for (size_t i = 0; i < n; ++i) v[i] = float(sym() * scale);
  }

 private:
  uint64_t state_;
};

uint64_t fnv1a64(const void* data, size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// ---- memory: host, or CUDA device memory through the driver API -----------

struct Cuda {
  int (*MemAlloc)(uint64_t*, size_t) = nullptr;
  int (*MemcpyHtoD)(uint64_t, const void*, size_t) = nullptr;
  int (*MemcpyDtoH)(void*, uint64_t, size_t) = nullptr;
  int (*MemFree)(uint64_t) = nullptr;
  int (*CtxSynchronize)() = nullptr;

  Cuda() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) throw std::runtime_error("SSU_BACKEND=cuda but libcuda.so.1 cannot be loaded");
    auto load = [lib](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) throw std::runtime_error(std::string("libcuda.so.1 lacks ") + name);
    };
    int (*Init)(unsigned) = nullptr;
    int (*DeviceGet)(int*, int) = nullptr;
    int (*Retain)(void**, int) = nullptr;
    int (*SetCurrent)(void*) = nullptr;
    load(Init, "cuInit");
    load(DeviceGet, "cuDeviceGet");
    load(Retain, "cuDevicePrimaryCtxRetain");
    load(SetCurrent, "cuCtxSetCurrent");
    load(MemAlloc, "cuMemAlloc_v2");
    load(MemcpyHtoD, "cuMemcpyHtoD_v2");
    load(MemcpyDtoH, "cuMemcpyDtoH_v2");
    load(MemFree, "cuMemFree_v2");
    load(CtxSynchronize, "cuCtxSynchronize");
    int dev = 0;
    void* ctx = nullptr;
    // The primary context: the same one libssu retains.
    if (Init(0) || DeviceGet(&dev, 0) || Retain(&ctx, dev) || SetCurrent(ctx))
      throw std::runtime_error("cannot make CUDA device 0's primary context current");
  }
};

// A buffer of T with a host copy and, with a Cuda, a device copy.
template <typename T>
class Buffer {
 public:
  Buffer(const Cuda* cuda, size_t n) : cuda_(cuda), host_(n) {
    if (cuda_ && (cuda_->MemAlloc(&dev_, bytes()) || cuda_->MemcpyHtoD(dev_, host_.data(), bytes())))
      throw std::runtime_error("cuMemAlloc / cuMemcpyHtoD failed");
  }
  ~Buffer() {
    if (cuda_) cuda_->MemFree(dev_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* host() { return host_.data(); }
  size_t bytes() const { return host_.size() * sizeof(T); }
  void* data() { return cuda_ ? reinterpret_cast<void*>(uintptr_t(dev_)) : host_.data(); }
  void upload(size_t first = 0, size_t count = size_t(-1)) {
    if (count == size_t(-1)) count = host_.size() - first;
    if (cuda_ && cuda_->MemcpyHtoD(dev_ + first * sizeof(T), host_.data() + first, count * sizeof(T)))
      throw std::runtime_error("cuMemcpyHtoD failed");
  }
  void download() {
    if (cuda_ && cuda_->MemcpyDtoH(host_.data(), dev_, bytes()))
      throw std::runtime_error("cuMemcpyDtoH failed");
  }

 private:
  const Cuda* cuda_;
  std::vector<T> host_;
  uint64_t dev_ = 0;
};

// ---- libssu ----------------------------------------------------------------

void check(ssu_status_t s, const char* what) {
  if (s != SSU_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + ssu_status_string(s) + ": " +
                             ssu_last_error_message());
}

template <typename T>
ssu_tensor_t dense(Buffer<T>& b, ssu_dtype_t dtype, std::initializer_list<int64_t> shape) {
  ssu_tensor_t t{};
  t.data = b.data();
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape.begin()[d];
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

struct ContextDeleter {
  void operator()(ssu_context_s* c) const { ssu_context_destroy(c); }
};
struct PlanDeleter {
  void operator()(ssu_plan_s* p) const { ssu_plan_destroy(p); }
};

int run(int steps) {
  const char* env = std::getenv("SSU_BACKEND");
  const std::string backend = env ? env : "cpu";
  if (backend != "cpu" && backend != "cuda") throw std::runtime_error("SSU_BACKEND must be cpu or cuda");
  std::unique_ptr<Cuda> cuda;
  if (backend == "cuda") cuda = std::make_unique<Cuda>();
  const Cuda* cu = cuda.get();
  SplitMix64 rng(0x5EED);

  Buffer<float> pool(cu, kSlots * kSlotElems), x(cu, kBatch * kH * kP), z(cu, kBatch * kH * kP),
      out(cu, kBatch * kH * kP), dt(cu, kBatch * kH), B(cu, kBatch * kG * kN),
      C(cu, kBatch * kG * kN), A(cu, kH), D(cu, kH), dt_bias(cu, kH);
  Buffer<int32_t> slot_index(cu, kBatch);

  // Layer parameters: A in [-2, -1), dt_bias in [-4, -3), D in [-1, 1).
  for (int h = 0; h < kH; ++h) A.host()[h] = float(-1.0 - (rng.sym() + 1.0) * 0.5);
  for (int h = 0; h < kH; ++h) dt_bias.host()[h] = float(-4.0 + (rng.sym() + 1.0) * 0.5);
  rng.fill(D.host(), kH, 1.0);
  A.upload();
  D.upload();
  dt_bias.upload();

  ssu_context_options_t copt = SSU_CONTEXT_OPTIONS_INIT;
  copt.backend = cu ? SSU_BACKEND_CUDA : SSU_BACKEND_CPU;
  ssu_context_t raw_ctx = nullptr;
  check(ssu_context_create(&copt, &raw_ctx), "ssu_context_create");
  std::unique_ptr<ssu_context_s, ContextDeleter> ctx(raw_ctx);

  ssu_state_pool_t state_pool = SSU_STATE_POOL_INIT;
  state_pool.state = dense(pool, SSU_DTYPE_F32, {kSlots, kH, kP, kN});
  ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;
  args.flags = SSU_UPDATE_DT_SOFTPLUS;
  args.pool = &state_pool;
  args.x = dense(x, SSU_DTYPE_F32, {kBatch, kH, kP});
  args.z = dense(z, SSU_DTYPE_F32, {kBatch, kH, kP});
  args.out = dense(out, SSU_DTYPE_F32, {kBatch, kH, kP});
  args.B = dense(B, SSU_DTYPE_F32, {kBatch, kG, kN});
  args.C = dense(C, SSU_DTYPE_F32, {kBatch, kG, kN});
  args.dt = dense(dt, SSU_DTYPE_F32, {kBatch, kH});
  args.A = dense(A, SSU_DTYPE_F32, {kH});
  args.D = dense(D, SSU_DTYPE_F32, {kH});
  args.dt_bias = dense(dt_bias, SSU_DTYPE_F32, {kH});
  args.src_index = dense(slot_index, SSU_DTYPE_I32, {kBatch});

  ssu_plan_t raw_plan = nullptr;
  check(ssu_plan_create_update(ctx.get(), &args, nullptr, &raw_plan), "ssu_plan_create_update");
  std::unique_ptr<ssu_plan_s, PlanDeleter> plan(raw_plan);

  bool active[kBatch] = {}, used[kSlots] = {};
  int slot_of[kBatch] = {}, remaining[kBatch] = {};
  long tokens = 0;
  std::chrono::duration<double> busy{0};
  for (int step = 0; step < steps; ++step) {
    for (int e = 0; e < kBatch; ++e)  // finished requests leave
      if (active[e] && remaining[e] == 0) {
        used[slot_of[e]] = false;
        active[e] = false;
      }
    for (int e = 0; e < kBatch; ++e) {  // new requests join idle entries
      if (active[e] || rng.next() % 4 == 0) continue;
      int s = 0;
      while (used[s]) ++s;  // kSlots > kBatch: a free slot exists
      used[s] = true;
      slot_of[e] = s;
      remaining[e] = 1 + int(rng.next() % kMaxLen);
      active[e] = true;
      rng.fill(pool.host() + s * kSlotElems, kSlotElems, 0.5);  // the prefill's state
      pool.upload(s * kSlotElems, kSlotElems);
    }
    for (int e = 0; e < kBatch; ++e) slot_index.host()[e] = active[e] ? slot_of[e] : -1;
    rng.fill(x.host(), kBatch * kH * kP, 1.0);
    rng.fill(dt.host(), kBatch * kH, 0.5);
    rng.fill(B.host(), kBatch * kG * kN, 1.0);
    rng.fill(C.host(), kBatch * kG * kN, 1.0);
    rng.fill(z.host(), kBatch * kH * kP, 1.0);
    slot_index.upload();
    x.upload();
    dt.upload();
    B.upload();
    C.upload();
    z.upload();

    auto t0 = std::chrono::steady_clock::now();
    check(ssu_plan_execute_update(plan.get(), &args, nullptr), "ssu_plan_execute_update");
    if (cu && cu->CtxSynchronize()) throw std::runtime_error("cuCtxSynchronize failed");
    busy += std::chrono::steady_clock::now() - t0;

    for (int e = 0; e < kBatch; ++e)
      if (active[e]) {
        --remaining[e];
        ++tokens;
      }
  }
  pool.download();

  std::printf("ssu decode example (C++): backend %s [%s], %d steps, %ld tokens\n", backend.c_str(),
              ssu_context_device_name(ctx.get()), steps, tokens);
  const double secs = busy.count();
  std::printf("throughput: %.0f tokens/s (%.2f us/step)\n", secs > 0 ? tokens / secs : 0.0,
              steps ? 1e6 * secs / steps : 0.0);
  std::printf("state checksum: 0x%016" PRIx64 "\n", fnv1a64(pool.host(), pool.bytes()));
  plan.reset();  // plans before their context
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc > 1 ? std::atoi(argv[1]) : 200);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_loop: %s\n", e.what());
    return 1;
  }
}
