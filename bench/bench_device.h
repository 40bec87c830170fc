// What ssu-bench needs from a device: memory, a copy-bandwidth ceiling, a
// row gather/scatter and a timer for library calls. One implementation per
// backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ssu.h"

namespace ssu_bench {

// One timed operation: runs (CPU) or enqueues on `stream` (CUDA) operation
// number i of a rotation of n. It may issue several library calls and row
// copies; the time of the whole is what is measured. Throws
// std::runtime_error on a failed call.
using Op = std::function<void(size_t i, ssu_stream_t stream)>;

// The copy ceiling for a number of bytes: the device's own ways of moving
// them, each timed the way operations are (median seconds per copy).
struct CopyTiming {
  double best_s = 0;    // the fastest copy below: the ceiling
  // CUDA: graph-captured cuMemcpyDtoDAsync; CPU: the better of a one-thread
  // and a multi-thread memcpy.
  double memcpy_s = 0;
  // ssu-bench's own copy (0: none). CUDA: a 16-byte vectorized copy kernel;
  // CPU: a streaming-store copy loop, the better of one and all threads.
  double kernel_s = 0;
  // CUDA: a read-only stream of as many bytes as the copy moves (its source
  // and destination both read), for reference; never the ceiling (0: none).
  double read_s = 0;
  std::string winner;   // which copy gave best_s
};

class BenchDevice {
 public:
  virtual ~BenchDevice() = default;
  virtual std::string name() const = 0;
  // The driver under the device ("" where there is none to name).
  virtual std::string driver() const { return ""; }
  // Memory the context's backend can address (host for CPU, device for CUDA).
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Copies host bytes into memory from alloc() (complete before any later
  // operation of this device starts).
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  // Copies bytes of memory from alloc() to the host, after every operation
  // issued before.
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // The copy ceiling of `bytes` bytes, between buffers of the device's
  // choosing (CUDA: a pair from alloc() and its rotation; the CPU: a
  // rotation it keeps for the whole run): each of the device's copies timed
  // the same way operations are.
  virtual CopyTiming time_copy(size_t bytes, int iters) = 0;
  // Median seconds per operation of op(i % n, stream), rotating through the
  // n operations so that consecutive ones touch different memory.
  virtual double time_ops(const Op& op, size_t n, int iters) = 0;
  // Enqueues a copy of `bytes` bytes (src -> dst, both from alloc()) as the
  // device's own copy kernel (CUDA; the CPU copies at once): a producer
  // kernel ahead of an operation, for --pdl. early: the kernel lets the
  // next one launch at once (griddepcontrol.launch_dependents), as kernels
  // written for programmatic dependent launch do.
  virtual void enqueue_copy(void* dst, const void* src, size_t bytes, ssu_stream_t stream,
                            bool early) = 0;
  // Median host seconds spent issuing one operation.
  virtual double host_time_ops(const Op& op, size_t n, int iters) = 0;
  // Median seconds per operation of whole passes op(0), ..., op(n-1) in that
  // order: one untimed pass, then `iters` timed ones (CUDA: the pass, repeated
  // up to at least 20 operations, captured as one graph, replayed once
  // untimed and then `iters` times). Every pass is complete, so state that
  // the operations carry from one to the next (replay counters) ends each
  // pass as it began.
  virtual double time_sequence(const Op& op, size_t n, int iters) = 0;
  // Runs op(0), ..., op(n-1) once, in order, after every upload, and waits
  // for them.
  virtual void run_ops(const Op& op, size_t n) = 0;
  // Median host seconds of launching an empty kernel whose parameter block
  // is as large as the update kernels' (`*param_bytes`), measured as
  // host_time_ops measures; 0 where launches are not a thing (CPU).
  // small_s: the same for an 8-byte parameter block.
  virtual double launch_floor(int iters, size_t* param_bytes, double* small_s) {
    (void)iters;
    *param_bytes = 0;
    *small_s = 0;
    return 0;
  }
  // Copies `rows` rows of `row_bytes` bytes (a multiple of 16; both buffers
  // from alloc() and 16-byte aligned): row i of the copy reads src row
  // src_index[i] (i when src_index is null) and writes dst row dst_index[i]
  // (i when null). The index arrays are int32 in memory from alloc(). Rows
  // lie row_bytes apart in both buffers. Runs in stream order on CUDA.
  virtual void copy_rows(void* dst, const int32_t* dst_index, const void* src,
                         const int32_t* src_index, size_t row_bytes, int64_t rows,
                         ssu_stream_t stream) = 0;

  // ssu_plan_execute_update(plan, &calls[i % n]) timed with time_ops /
  // host_time_ops.
  double time_update(ssu_plan_t plan, const std::vector<ssu_update_args_t>& calls, int iters) {
    return time_ops(update_op(plan, calls), calls.size(), iters);
  }
  double host_time_update(ssu_plan_t plan, const std::vector<ssu_update_args_t>& calls,
                          int iters) {
    return host_time_ops(update_op(plan, calls), calls.size(), iters);
  }

  static Op update_op(ssu_plan_t plan, const std::vector<ssu_update_args_t>& calls) {
    if (calls.empty()) throw std::runtime_error("time_update: no calls");
    return [plan, &calls](size_t i, ssu_stream_t stream) {
      check(ssu_plan_execute_update(plan, &calls[i], stream), "ssu_plan_execute_update");
    };
  }
  static void check(ssu_status_t s, const char* call) {
    if (s != SSU_SUCCESS)
      throw std::runtime_error(std::string(call) + ": " + ssu_status_string(s) + ": " +
                               ssu_last_error_message());
  }
};

// `threads`: the worker count the CPU context was created with (0 = every
// hardware thread), so the copy ceiling uses as many threads as the update.
std::unique_ptr<BenchDevice> make_cpu_bench_device(ssu_context_t ctx, int threads);
// The largest CPU cache in bytes (32 MiB if the system does not say).
size_t last_level_cache_bytes();
// On the CPU, the bytes that a configuration's calls (its state pool) and the
// copy ceiling's copies rotate through: 4x the last-level cache, so that each
// finds its data in memory.
size_t cpu_rotation_bytes();
// The CPU copy ceiling times each copy in this many rounds and keeps its best.
constexpr int kCpuCopyRounds = 3;
// On CUDA, the bytes that a configuration's calls (its state pool) and the
// copy ceiling's copies rotate through, so that each finds its data out of
// L2 (50-60 MB on Hopper).
constexpr size_t kCudaRotationBytes = size_t{256} << 20;
// Defined in bench_cuda.cpp when the CUDA backend is built; nullptr otherwise.
std::unique_ptr<BenchDevice> make_cuda_bench_device(ssu_context_t ctx);

}  // namespace ssu_bench
