// The CPU side of ssu-bench: host memory, a memcpy ceiling, per-row memcpy
// gathers and wall-clock timing of synchronous library calls.
//
// The copy ceiling is the fastest of memcpy and a streaming-store copy loop,
// each on one thread and split over the context's worker count, each timed
// on cold buffers (the last-level cache is swept between iterations, as the
// update calls sweep it by rotating through a state pool several times its
// size).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_device.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#endif

namespace ssu_bench {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

}  // namespace

// The largest CPU cache of cpu0 in bytes (32 MiB if sysfs does not say).
// Also used by ssu_bench.cpp to size the state pool.
// "model name" of /proc/cpuinfo, e.g. "Intel(R) Xeon(R) Processor @ 2.50GHz";
// empty where the file does not say.
static std::string cpu_model_name() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "";
  char line[512];
  std::string model;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "model name", 10) != 0) continue;
    const char* colon = std::strchr(line, ':');
    if (!colon) continue;
    model = colon + 1;
    break;
  }
  std::fclose(f);
  const size_t b = model.find_first_not_of(" \t");
  const size_t e = model.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : model.substr(b, e - b + 1);
}

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string path =
        "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;
    char buf[64] = {0};
    if (std::fgets(buf, sizeof buf, f)) {
      char* end = nullptr;
      size_t v = std::strtoull(buf, &end, 10);
      if (end && (*end == 'K' || *end == 'k')) v <<= 10;
      else if (end && (*end == 'M' || *end == 'm')) v <<= 20;
      best = std::max(best, v);
    }
    std::fclose(f);
  }
  return best ? best : (size_t{32} << 20);
}

namespace {

// ssu-bench's own copy loop: 16-byte loads and non-temporal 16-byte stores
// (SSE2, part of every x86-64 processor), which write whole lines without
// first reading the destination into the cache as plain stores do; a
// memcpy may or may not stream, depending on the C library and the size.
// Elsewhere a plain memcpy.
void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__) || defined(_M_X64)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();  // the streamed lines are in memory before the clock stops
#else
  std::memcpy(dst, src, bytes);
#endif
}

// A fixed team of threads that runs one function per worker index; the
// caller is worker 0. Used for the multi-threaded memcpy only.
class Team {
 public:
  explicit Team(int n) : n_(std::max(1, n)) {
    for (int i = 1; i < n_; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~Team() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return n_; }
  void run(const std::function<void(int)>& fn) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      pending_ = n_ - 1;
      ++generation_;
    }
    cv_.notify_all();
    fn(0);
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* fn;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        fn = fn_;
      }
      (*fn)(index);
      {
        std::lock_guard<std::mutex> lk(mu_);
        if (--pending_ == 0) done_cv_.notify_one();
      }
    }
  }

  int n_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  const std::function<void(int)>* fn_ = nullptr;
};

class CpuBenchDevice final : public BenchDevice {
 public:
  CpuBenchDevice(ssu_context_t ctx, int threads)
      : name_(describe(ctx)),
        team_(resolve_threads(threads)),
        sweep_(2 * last_level_cache_bytes() / sizeof(uint64_t), 1) {}

  std::string name() const override { return name_; }

  void* alloc(size_t bytes) override {
    // Page-aligned, and touched here so that page faults are not timed.
    const size_t align = 4096;
    const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }

  void download(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }

  CopyTiming time_copy(void* dst, const void* src, size_t bytes, int iters) override {
    // Each iteration first sweeps the last-level cache (twice its size), so
    // the four medians take at most 15 iterations each.
    iters = std::min(std::max(iters, 1), 15);
    CopyTiming best;
    for (const bool streaming : {false, true}) {
      void (*const copy)(void*, const void*, size_t) =
          streaming ? stream_copy : [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); };
      for (int threads : {1, team_.size()}) {
        std::vector<double> t;
        t.reserve(iters);
        for (int i = 0; i < iters + 1; ++i) {
          sweep_cache();
          const auto t0 = Clock::now();
          if (threads == 1) {
            copy(dst, src, bytes);
          } else {
            const size_t chunk = (bytes / threads + 63) / 64 * 64;
            team_.run([&](int w) {
              const size_t begin = std::min(bytes, chunk * w);
              const size_t end = std::min(bytes, begin + chunk);
              copy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin,
                   end - begin);
            });
          }
          const auto t1 = Clock::now();
          if (i > 0) t.push_back(std::chrono::duration<double>(t1 - t0).count());
        }
        const double m = median(t);
        double& own = streaming ? best.kernel_s : best.memcpy_s;
        if (own == 0.0 || m < own) own = m;
        if (best.best_s == 0.0 || m < best.best_s) {
          best.best_s = m;
          best.winner = std::string(streaming ? "streaming copy" : "memcpy") + " (" +
                        std::to_string(threads) + (threads == 1 ? " thread)" : " threads)");
        }
        if (team_.size() == 1) break;
      }
    }
    return best;
  }

  void enqueue_copy(void* dst, const void* src, size_t bytes, ssu_stream_t, bool) override {
    std::memmove(dst, src, bytes);
  }

  double time_ops(const Op& op, size_t n, int iters) override { return time_calls(op, n, iters); }

  // The CPU backend is synchronous: the host time of an operation is its time.
  double host_time_ops(const Op& op, size_t n, int iters) override {
    return time_calls(op, n, iters);
  }

  double time_sequence(const Op& op, size_t n, int iters) override {
    if (n == 0) throw std::runtime_error("time_sequence: no operations");
    iters = std::max(iters, 1);
    run_ops(op, n);  // untimed
    std::vector<double> t;
    t.reserve(iters);
    for (int it = 0; it < iters; ++it) {
      const auto t0 = Clock::now();
      for (size_t i = 0; i < n; ++i) op(i, nullptr);
      const auto t1 = Clock::now();
      t.push_back(std::chrono::duration<double>(t1 - t0).count() / double(n));
    }
    return median(t);
  }

  void run_ops(const Op& op, size_t n) override {
    for (size_t i = 0; i < n; ++i) op(i, nullptr);
  }

  // What an engine does on the CPU: one memcpy per row.
  void copy_rows(void* dst, const int32_t* dst_index, const void* src, const int32_t* src_index,
                 size_t row_bytes, int64_t rows, ssu_stream_t) override {
    for (int64_t i = 0; i < rows; ++i) {
      const size_t d = size_t(dst_index ? dst_index[i] : i);
      const size_t s = size_t(src_index ? src_index[i] : i);
      std::memcpy(static_cast<char*>(dst) + d * row_bytes,
                  static_cast<const char*>(src) + s * row_bytes, row_bytes);
    }
  }

 private:
  double time_calls(const Op& op, size_t n, int iters) {
    if (n == 0) throw std::runtime_error("time_ops: no operations");
    iters = std::max(iters, 1);
    // One untimed pass over every operation: warms instruction caches and
    // the thread pool, and leaves the pool in the state the timed calls see.
    for (size_t i = 0; i < n; ++i) op(i, nullptr);
    std::vector<double> t;
    t.reserve(iters);
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      op(size_t(i) % n, nullptr);
      const auto t1 = Clock::now();
      t.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    return median(t);
  }

  // The processor model followed by the context's own description, e.g.
  // "Intel(R) Xeon(R) Processor @ 2.50GHz, cpu (2 threads, avx2)".
  static std::string describe(ssu_context_t ctx) {
    const char* ctx_name = ssu_context_device_name(ctx);
    std::string name = cpu_model_name();
    if (ctx_name && *ctx_name) name += (name.empty() ? "" : ", ") + std::string(ctx_name);
    return name.empty() ? "cpu" : name;
  }

  // Reads a buffer twice the last-level cache, evicting previous copies.
  void sweep_cache() {
    uint64_t acc = 0;
    for (size_t i = 0; i < sweep_.size(); i += 8) acc += sweep_[i];
    sink_ += acc;
  }

  std::string name_;
  Team team_;
  std::vector<uint64_t> sweep_;
  volatile uint64_t sink_ = 0;
};

}  // namespace

std::unique_ptr<BenchDevice> make_cpu_bench_device(ssu_context_t ctx, int threads) {
  return std::unique_ptr<BenchDevice>(new CpuBenchDevice(ctx, threads));
}

}  // namespace ssu_bench
