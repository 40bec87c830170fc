// What ssu-bench needs from a device: memory, a copy-bandwidth ceiling and a
// timer for update calls. One implementation per backend.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ssu.h"

namespace ssu_bench {

class BenchDevice {
 public:
  virtual ~BenchDevice() = default;
  virtual std::string name() const = 0;
  // Memory the context's backend can address (host for CPU, device for CUDA).
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Copies host bytes into memory from alloc().
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  // Median seconds of one copy of `bytes` bytes (src -> dst, both from
  // alloc()), measured the same way update calls are timed.
  virtual double time_copy(void* dst, const void* src, size_t bytes, int iters) = 0;
  // Median seconds per call of ssu_plan_execute_update(plan, &calls[i % n]),
  // rotating through `calls` so that consecutive calls touch different
  // memory. Throws std::runtime_error on a failed call.
  virtual double time_update(ssu_plan_t plan, const std::vector<ssu_update_args_t>& calls,
                             int iters) = 0;
  // Median host seconds spent inside one ssu_plan_execute_update call.
  virtual double host_time_update(ssu_plan_t plan, const std::vector<ssu_update_args_t>& calls,
                                  int iters) = 0;
};

// `threads`: the worker count the CPU context was created with (0 = every
// hardware thread), so the copy ceiling uses as many threads as the update.
std::unique_ptr<BenchDevice> make_cpu_bench_device(ssu_context_t ctx, int threads);
// The largest CPU cache in bytes (32 MiB if the system does not say).
size_t last_level_cache_bytes();
// Defined in bench_cuda.cpp when the CUDA backend is built; nullptr otherwise.
std::unique_ptr<BenchDevice> make_cuda_bench_device(ssu_context_t ctx);

}  // namespace ssu_bench
