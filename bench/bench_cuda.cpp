// The CUDA side of ssu-bench: device memory, a copy ceiling (the faster of
// the driver's device-to-device memcpy and a vectorized copy kernel, with a
// read-only stream for reference), a row gather/scatter kernel and library
// calls, all timed the same way: a batch of operations captured once into a
// CUDA graph, the graph replayed many times between CUDA events, the median
// replay divided by the operations it holds. The driver is reached through
// the same dlopen'ed table as the library (no libcuda or libcudart link); the
// bench's kernels come from its own embedded fatbin (bench_kernels.cu).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../kernels/ssu_cuda_launch.h"
#include "../src/cuda/cuda_driver.h"
#include "bench_device.h"

// The fatbin of bench_kernels.cu, embedded by bench/meson.build.
extern "C" const unsigned char ssu_bench_fatbin_data[];

namespace ssu_bench {
namespace {

using namespace ssu_cuda;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

class CudaBenchDevice final : public BenchDevice {
 public:
  explicit CudaBenchDevice(ssu_context_t ctx) : name_(ssu_context_device_name(ctx)) {
    std::string msg;
    CUresult init = CUDA_SUCCESS;
    if (ssu_cuda::load_driver(d_, &msg, &init) != ssu_cuda::LoadError::none)
      throw std::runtime_error(msg);
    // The context's device: ssu-bench creates CUDA contexts on ordinal 0.
    ok(d_.DeviceGet(&dev_, 0), "cuDeviceGet");
    ok(d_.DevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
    ok(d_.CtxPushCurrent(ctx_), "cuCtxPushCurrent");
    ok(d_.StreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    ok(d_.EventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
    ok(d_.EventCreate(&stop_, CU_EVENT_DEFAULT), "cuEventCreate");
    ok(d_.LibraryLoadData(&lib_, ssu_bench_fatbin_data, nullptr, nullptr, 0, nullptr, nullptr, 0),
       "cuLibraryLoadData (ssu-bench kernels)");
    CUkernel k = nullptr;
    ok(d_.LibraryGetKernel(&k, lib_, "ssu_bench_copy_rows"), "cuLibraryGetKernel");
    ok(d_.KernelGetFunction(&copy_rows_, k), "cuKernelGetFunction");
    ok(d_.LibraryGetKernel(&k, lib_, "ssu_bench_copy"), "cuLibraryGetKernel");
    ok(d_.KernelGetFunction(&copy_, k), "cuKernelGetFunction");
    ok(d_.LibraryGetKernel(&k, lib_, "ssu_bench_copy_early"), "cuLibraryGetKernel");
    ok(d_.KernelGetFunction(&copy_early_, k), "cuKernelGetFunction");
    ok(d_.LibraryGetKernel(&k, lib_, "ssu_bench_read"), "cuLibraryGetKernel");
    ok(d_.KernelGetFunction(&read_, k), "cuKernelGetFunction");
    ok(d_.LibraryGetKernel(&k, lib_, "ssu_bench_empty"), "cuLibraryGetKernel");
    ok(d_.KernelGetFunction(&empty_, k), "cuKernelGetFunction");
    ok(d_.LibraryGetKernel(&k, lib_, "ssu_bench_empty_small"), "cuLibraryGetKernel");
    ok(d_.KernelGetFunction(&empty_small_, k), "cuKernelGetFunction");
  }

  ~CudaBenchDevice() override {
    if (lib_) d_.LibraryUnload(lib_);
    d_.EventDestroy(start_);
    d_.EventDestroy(stop_);
    d_.StreamDestroy(stream_);
    CUcontext popped = nullptr;
    d_.CtxPopCurrent(&popped);
    d_.DevicePrimaryCtxRelease(dev_);
  }

  std::string name() const override { return name_; }
  std::string driver() const override {
    return "CUDA driver API " + std::to_string(d_.version / 1000) + "." +
           std::to_string(d_.version % 1000 / 10);
  }

  void* alloc(size_t bytes) override {
    CUdeviceptr p = 0;
    ok(d_.MemAlloc(&p, bytes), "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
  void release(void* p) override { d_.MemFree(reinterpret_cast<CUdeviceptr>(p)); }
  // cuMemcpyHtoD from pageable memory may return before its DMA lands, and
  // the bench's stream does not wait for the legacy stream: synchronize.
  void upload(void* dst, const void* src, size_t bytes) override {
    ok(d_.MemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, bytes), "cuMemcpyHtoD");
    ok(d_.CtxSynchronize(), "cuCtxSynchronize");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    ok(d_.CtxSynchronize(), "cuCtxSynchronize");
    ok(d_.MemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), bytes), "cuMemcpyDtoH");
  }

  // The copy rotates over copies of its own (src, dst) pair until the copies
  // of one replay touch at least kCudaRotationBytes, as the update's calls
  // rotate through their state pool: copying one small pair again and again
  // would time the L2 cache, not device memory. The driver's memcpy, the
  // copy kernel and the read-only stream run over the same pairs, one graph
  // each, back to back.
  CopyTiming time_copy(size_t bytes, int iters) override {
    void* src = alloc(bytes);
    void* dst = nullptr;
    try {
      dst = alloc(bytes);
      const CopyTiming c = time_copy_pair(dst, src, bytes, iters);
      release(dst);
      release(src);
      return c;
    } catch (...) {
      if (dst) release(dst);
      release(src);
      throw;
    }
  }
  CopyTiming time_copy_pair(void* dst, const void* src, size_t bytes, int iters) {
    const size_t per_pair = 2 * std::max<size_t>(bytes, 1);
    const size_t pairs = std::min<size_t>(
        kMaxCopyPairs, std::max<size_t>(1, (kCudaRotationBytes + per_pair - 1) / per_pair));
    std::vector<CUdeviceptr> d{reinterpret_cast<CUdeviceptr>(dst)};
    std::vector<CUdeviceptr> s{reinterpret_cast<CUdeviceptr>(src)};
    struct Extra {
      Driver* d;
      std::vector<CUdeviceptr> mem;
      ~Extra() {
        for (CUdeviceptr p : mem) d->MemFree(p);
      }
    } extra{&d_, {}};
    for (size_t i = 1; i < pairs; ++i) {
      for (auto* v : {&d, &s}) {
        CUdeviceptr p = 0;
        ok(d_.MemAlloc(&p, std::max<size_t>(bytes, 1)), "cuMemAlloc (copy rotation)");
        extra.mem.push_back(p);
        v->push_back(p);
      }
    }
    const int per_graph = static_cast<int>(std::max<size_t>(pairs, kCallsPerGraph));
    ok(d_.CtxSynchronize(), "cuCtxSynchronize");
    CopyTiming c;
    c.memcpy_s = time_graph(
        [&](CUstream st) {
          for (int i = 0; i < per_graph; ++i)
            ok(d_.MemcpyDtoDAsync(d[i % pairs], s[i % pairs], bytes, st), "cuMemcpyDtoDAsync");
        },
        per_graph, iters);
    // One-shot blocks over the whole copy (kernels in bench_kernels.cu).
    const unsigned long long words = bytes / 16;
    const unsigned copy_blocks = grid_for(words, kCopyThreads);
    const unsigned read_blocks = grid_for(2 * words, kReadThreads * kReadWords);
    CUdeviceptr sums = 0;
    ok(d_.MemAlloc(&sums, size_t{read_blocks} * sizeof(unsigned)), "cuMemAlloc (read sums)");
    extra.mem.push_back(sums);
    unsigned long long n = bytes;
    c.kernel_s = time_graph(
        [&](CUstream st) {
          for (int i = 0; i < per_graph; ++i) {
            CUdeviceptr to = d[i % pairs], from = s[i % pairs];
            void* params[] = {&to, &from, &n};
            ok(d_.LaunchKernel(copy_, copy_blocks, 1, 1, kCopyThreads, 1, 1, 0, st, params,
                               nullptr),
               "cuLaunchKernel (ssu_bench_copy)");
          }
        },
        per_graph, iters);
    c.read_s = time_graph(
        [&](CUstream st) {
          for (int i = 0; i < per_graph; ++i) {
            CUdeviceptr a = s[i % pairs], b = d[i % pairs];
            void* params[] = {&a, &b, &n, &sums};
            ok(d_.LaunchKernel(read_, read_blocks, 1, 1, kReadThreads, 1, 1, 0, st, params,
                               nullptr),
               "cuLaunchKernel (ssu_bench_read)");
          }
        },
        per_graph, iters);
    const bool kernel_wins = c.kernel_s < c.memcpy_s;
    c.best_s = kernel_wins ? c.kernel_s : c.memcpy_s;
    c.winner = kernel_wins ? "copy kernel" : "memcpy";
    return c;
  }

  void enqueue_copy(void* dst, const void* src, size_t bytes, ssu_stream_t stream,
                    bool early) override {
    CUdeviceptr to = reinterpret_cast<CUdeviceptr>(dst), from = reinterpret_cast<CUdeviceptr>(src);
    unsigned long long n = bytes;
    void* params[] = {&to, &from, &n};
    ok(d_.LaunchKernel(early ? copy_early_ : copy_, grid_for(bytes / 16, kCopyThreads), 1, 1, kCopyThreads, 1, 1, 0,
                       reinterpret_cast<CUstream>(stream), params, nullptr),
       "cuLaunchKernel (ssu_bench_copy)");
  }

  double time_ops(const Op& op, size_t n, int iters) override {
    if (n == 0) throw std::runtime_error("time_ops: no operations");
    const int per_graph = static_cast<int>(std::max<size_t>(n, kCallsPerGraph));
    // One untimed pass outside capture (first-touch effects), then the graph.
    run_ops(op, n);
    return time_graph(
        [&](CUstream st) {
          for (int i = 0; i < per_graph; ++i) op(static_cast<size_t>(i) % n, as_ssu(st));
        },
        per_graph, iters);
  }

  double time_sequence(const Op& op, size_t n, int iters) override {
    if (n == 0) throw std::runtime_error("time_sequence: no operations");
    run_ops(op, n);  // untimed, outside capture
    // Whole passes only, enough of them for at least kCallsPerGraph operations.
    const size_t passes = std::max<size_t>(1, (kCallsPerGraph + n - 1) / n);
    if (passes * n > size_t{1} << 30) throw std::runtime_error("time_sequence: too many operations");
    return time_graph(
        [&](CUstream st) {
          for (size_t p = 0; p < passes; ++p)
            for (size_t i = 0; i < n; ++i) op(i, as_ssu(st));
        },
        static_cast<int>(passes * n), iters);
  }

  void run_ops(const Op& op, size_t n) override {
    ok(d_.CtxSynchronize(), "cuCtxSynchronize");
    for (size_t i = 0; i < n; ++i) op(i, as_ssu(stream_));
    ok(d_.StreamSynchronize(stream_), "cuStreamSynchronize");
  }

  double host_time_ops(const Op& op, size_t n, int iters) override {
    if (n == 0) throw std::runtime_error("host_time_ops: no operations");
    using Clock = std::chrono::steady_clock;
    std::vector<double> t;
    t.reserve(static_cast<size_t>(iters));
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      op(static_cast<size_t>(i) % n, as_ssu(stream_));
      const auto t1 = Clock::now();
      t.push_back(std::chrono::duration<double>(t1 - t0).count());
      // Keep the launch queue short so that no call blocks on a full queue.
      if (i % 64 == 63) ok(d_.StreamSynchronize(stream_), "cuStreamSynchronize");
    }
    ok(d_.StreamSynchronize(stream_), "cuStreamSynchronize");
    return median(t);
  }

  double launch_floor(int iters, size_t* param_bytes, double* small_s) override {
    ssu_cuda_pipe_launch L;
    std::memset(&L, 0, sizeof L);
    long long v = 0;
    *param_bytes = sizeof L;
    auto time_empty = [&](CUfunction fn, void** params) {
      return host_time_ops(
          [&](size_t, ssu_stream_t st) {
            ok(d_.LaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(st), params,
                               nullptr),
               "cuLaunchKernel (ssu_bench_empty)");
          },
          1, iters);
    };
    void* small_params[] = {&v};
    *small_s = time_empty(empty_small_, small_params);
    void* params[] = {&L};
    return time_empty(empty_, params);
  }

  void copy_rows(void* dst, const int32_t* dst_index, const void* src, const int32_t* src_index,
                 size_t row_bytes, int64_t rows, ssu_stream_t stream) override {
    if (rows <= 0) return;
    if (row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(src) % 16 != 0)
      throw std::runtime_error("copy_rows: rows must be 16-byte multiples at 16-byte alignment");
    if (rows > 65535) throw std::runtime_error("copy_rows: more than 65535 rows");
    // Four 16-byte words per thread, 256 threads per block.
    const unsigned long long words = row_bytes / 16;
    const unsigned long long per_block = 256ull * 4;
    const unsigned blocks_x =
        static_cast<unsigned>(std::min<unsigned long long>((words + per_block - 1) / per_block, 65535));
    CUdeviceptr d = reinterpret_cast<CUdeviceptr>(dst);
    CUdeviceptr di = reinterpret_cast<CUdeviceptr>(dst_index);
    CUdeviceptr s = reinterpret_cast<CUdeviceptr>(src);
    CUdeviceptr si = reinterpret_cast<CUdeviceptr>(src_index);
    unsigned long long rb = row_bytes;
    void* params[] = {&d, &di, &s, &si, &rb};
    ok(d_.LaunchKernel(copy_rows_, blocks_x, static_cast<unsigned>(rows), 1, 256, 1, 1, 0,
                       reinterpret_cast<CUstream>(stream), params, nullptr),
       "cuLaunchKernel (ssu_bench_copy_rows)");
  }

 private:
  static constexpr int kCallsPerGraph = 20;
  static constexpr size_t kMaxCopyPairs = 64;
  // The launch shapes of ssu_bench_copy and ssu_bench_read: the values of
  // SSU_BENCH_COPY_THREADS, SSU_BENCH_READ_THREADS and SSU_BENCH_READ_WORDS
  // in bench_kernels.cu.
  static constexpr unsigned kCopyThreads = 1024;
  static constexpr unsigned kReadThreads = 512;
  static constexpr unsigned kReadWords = 4;

  // Blocks that cover `words` words at `per_block` words a block (at least
  // one, at most the grid's x limit; the kernels loop beyond it).
  static unsigned grid_for(unsigned long long words, unsigned long long per_block) {
    const unsigned long long blocks = (words + per_block - 1) / per_block;
    return static_cast<unsigned>(std::max<unsigned long long>(1, std::min(blocks, 0x7fffffffull)));
  }

  void ok(CUresult r, const char* call) const {
    if (r != CUDA_SUCCESS) throw std::runtime_error(ssu_cuda::describe(d_, call, r));
  }

  static ssu_stream_t as_ssu(CUstream st) { return reinterpret_cast<ssu_stream_t>(st); }

  // Captures `record(stream)` (which enqueues `calls` operations) into a
  // graph, replays it once untimed, then `iters` times between events, and
  // returns the median seconds per operation.
  template <typename Record>
  double time_graph(Record record, int calls, int iters) {
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    ok(d_.StreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    try {
      record(stream_);
    } catch (...) {
      d_.StreamEndCapture(stream_, &graph);
      if (graph) d_.GraphDestroy(graph);
      throw;
    }
    ok(d_.StreamEndCapture(stream_, &graph), "cuStreamEndCapture");
    ok(d_.GraphInstantiate(&exec, graph, 0), "cuGraphInstantiateWithFlags");
    std::vector<double> t;
    t.reserve(static_cast<size_t>(iters));
    ok(d_.GraphLaunch(exec, stream_), "cuGraphLaunch");
    for (int i = 0; i < iters; ++i) {
      ok(d_.EventRecord(start_, stream_), "cuEventRecord");
      ok(d_.GraphLaunch(exec, stream_), "cuGraphLaunch");
      ok(d_.EventRecord(stop_, stream_), "cuEventRecord");
      ok(d_.EventSynchronize(stop_), "cuEventSynchronize");
      float ms = 0.f;
      ok(d_.EventElapsedTime(&ms, start_, stop_), "cuEventElapsedTime");
      t.push_back(ms * 1e-3 / calls);
    }
    d_.GraphExecDestroy(exec);
    d_.GraphDestroy(graph);
    return median(t);
  }

  Driver d_;
  std::string name_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUevent start_ = nullptr, stop_ = nullptr;
  CUlibrary lib_ = nullptr;
  CUfunction copy_rows_ = nullptr;
  CUfunction empty_ = nullptr, empty_small_ = nullptr;
  CUfunction copy_ = nullptr, copy_early_ = nullptr, read_ = nullptr;
};

}  // namespace

std::unique_ptr<BenchDevice> make_cuda_bench_device(ssu_context_t ctx) {
  return std::make_unique<CudaBenchDevice>(ctx);
}

}  // namespace ssu_bench
