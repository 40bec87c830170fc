// What every GPU test program shares: the driver table for the test's own
// device allocations, device memory behind the harness's Memory interface,
// and a main() body that skips (exit 77) without a usable CUDA device.
// Include after <doctest/doctest.h> (with DOCTEST_CONFIG_IMPLEMENT).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../src/cuda/cuda_driver.h"
#include "harness.h"
#include "ssu.h"

namespace ssutest {
namespace gpu {

inline ssu_cuda::Driver g_drv;

// SSU_LONG_TESTS=1 (any value but empty or 0): the whole tables and every
// serving-sized case. By default the GPU programs keep one representative of
// every code path and leave out repeated large sizes, whose host-side inputs
// and float64 reference cost most of their run time (tests/README.md).
inline bool long_tests_enabled() {
  const char* v = std::getenv("SSU_LONG_TESTS");
  return v && *v && std::string(v) != "0";
}
// The CUDA context under test, created before any other CUDA work (the graph
// tests rely on nothing being loaded lazily afterwards).
inline ssu_context_t g_cuda = nullptr;

inline void ok(ssu_cuda::CUresult r, const char* call) {
  if (r != ssu_cuda::CUDA_SUCCESS) throw std::runtime_error(ssu_cuda::describe(g_drv, call, r));
}

// A second CUDA context whose pipelined kernels run on at most `blocks`
// persistent blocks (SSU_CUDA_PIPE_MAX_BLOCKS, read at context creation),
// so that every case they can take goes through them and every block walks
// many items through both stages of its ring. Null with the library's
// message in *why on failure.
// A CUDA context created with the environment variable `name` set to
// `value` (the backend reads its knobs at context creation), then unset.
// Null with the library's message in *why on failure.
inline ssu_context_t create_cuda_context_with(const char* name, const std::string& value,
                                              std::string* why) {
  setenv(name, value.c_str(), 1);
  ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
  o.backend = SSU_BACKEND_CUDA;
  ssu_context_t c = nullptr;
  const ssu_status_t st = ssu_context_create(&o, &c);
  unsetenv(name);
  if (st != SSU_SUCCESS) {
    *why = ssu_last_error_message();
    return nullptr;
  }
  return c;
}

inline ssu_context_t create_capped_pipeline_context(int blocks, std::string* why) {
  return create_cuda_context_with("SSU_CUDA_PIPE_MAX_BLOCKS", std::to_string(blocks), why);
}

// The capped context with two blocks, created on first use and kept for the
// program's lifetime (throws with the library's message on failure).
inline ssu_context_t few_blocks_context() {
  static const ssu_context_t ctx = [] {
    std::string why;
    const ssu_context_t c = create_capped_pipeline_context(2, &why);
    if (!c) throw std::runtime_error(why);
    return c;
  }();
  return ctx;
}

// The 8-bit state cases (i8, f8e4m3 rounded to nearest and stochastically)
// the GPU suites run: the CPU suite's table (state8_case_table: every mode,
// rows of 1 to 255 codes, mostly at most four 16-byte chunks) and each of
// its cases again with rows of 128 or 256 codes (8 or 16 lanes per row in
// the vectorized and pipelined kernels; the case's layout still decides
// whether rows are 16-byte aligned), at most 16 rows per head (the host's
// inputs and float64 reference cost far more than the calls), on a seed of
// its own.
inline std::vector<UpdateCase> state8_gpu_case_table() {
  std::vector<UpdateCase> cases = state8_case_table();
  const size_t n = cases.size();
  for (size_t i = 0; i < n; ++i) {
    UpdateCase c = cases[i];
    c.N = i % 2 ? 256 : 128;
    c.P = std::min<int64_t>(c.P, 16);
    c.seed += 100000;
    cases.push_back(c);
  }
  return cases;
}

// Device memory of ordinal 0 through the driver API; the primary context is
// current on the test's thread (see run_gpu_tests).
class CudaMemory final : public Memory {
 public:
  const char* name() const override { return "cuda"; }
  void* alloc(size_t bytes) override {
    ssu_cuda::CUdeviceptr p = 0;
    ok(g_drv.MemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
  void free(void* p) override {
    if (p) g_drv.MemFree(reinterpret_cast<ssu_cuda::CUdeviceptr>(p));
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes)
      ok(g_drv.MemcpyHtoD(reinterpret_cast<ssu_cuda::CUdeviceptr>(dst), src, bytes),
         "cuMemcpyHtoD");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes)
      ok(g_drv.MemcpyDtoH(dst, reinterpret_cast<ssu_cuda::CUdeviceptr>(src), bytes),
         "cuMemcpyDtoH");
  }
  void synchronize(ssu_stream_t) override { ok(g_drv.CtxSynchronize(), "cuCtxSynchronize"); }
};

// The body of a GPU test program's main(): creates g_cuda (exit 77 when no
// usable device), runs `setup` (non-zero return: exit with it), makes the
// device's primary context current for the test's own allocations, runs the
// doctest cases, then `teardown` and cleanup.
inline int run_gpu_tests(int argc, char** argv, int (*setup)() = nullptr,
                         void (*teardown)() = nullptr) {
  ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
  o.backend = SSU_BACKEND_CUDA;
  const ssu_status_t st = ssu_context_create(&o, &g_cuda);
  if (st == SSU_ERROR_DRIVER_NOT_FOUND || st == SSU_ERROR_NO_DEVICE ||
      st == SSU_ERROR_BACKEND_UNAVAILABLE || st == SSU_ERROR_DEVICE_UNSUPPORTED) {
    std::printf("SKIP: no usable CUDA device: %s (%s)\n", ssu_last_error_message(),
                ssu_status_string(st));
    return 77;
  }
  if (st != SSU_SUCCESS) {
    std::printf("ssu_context_create(CUDA) failed: %s: %s\n", ssu_status_string(st),
                ssu_last_error_message());
    return 1;
  }
  std::printf("device: %s\n", ssu_context_device_name(g_cuda));
  if (setup) {
    const int rc = setup();
    if (rc != 0) return rc;
  }
  std::string msg;
  ssu_cuda::CUresult init = ssu_cuda::CUDA_SUCCESS;
  if (ssu_cuda::load_driver(g_drv, &msg, &init) != ssu_cuda::LoadError::none) {
    std::printf("cannot load the driver for the test's own allocations: %s\n", msg.c_str());
    return 1;
  }
  ssu_cuda::CUdevice dev = 0;
  ssu_cuda::CUcontext ctx = nullptr;
  ok(g_drv.DeviceGet(&dev, 0), "cuDeviceGet");
  ok(g_drv.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  ok(g_drv.CtxPushCurrent(ctx), "cuCtxPushCurrent");

  doctest::Context dc(argc, argv);
  const int rc = dc.run();
  if (teardown) teardown();
  ssu_context_destroy(g_cuda);
  ssu_cuda::CUcontext popped = nullptr;
  g_drv.CtxPopCurrent(&popped);
  g_drv.DevicePrimaryCtxRelease(dev);
  return rc;
}

}  // namespace gpu
}  // namespace ssutest
