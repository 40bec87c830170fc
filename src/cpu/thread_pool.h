// A fixed set of worker threads that run one parallel loop at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace ssu {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: 1 runs everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(ctx, begin, end) over [0, n) in chunks of `grain`, on the
  // workers and the calling thread, and returns when all chunks are done.
  // Calls from several threads are serialized. fn must not throw.
  using Fn = void (*)(void* ctx, int64_t begin, int64_t end);
  void parallel_for(int64_t n, int64_t grain, Fn fn, void* ctx);

 private:
  void worker_main();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int active_ = 0;  // workers still inside the current job

  // The current job.
  Fn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
};

}  // namespace ssu
