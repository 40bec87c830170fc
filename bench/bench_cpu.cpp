// The CPU side of ssu-bench: host memory, a copy ceiling, per-row memcpy
// gathers and wall-clock timing of synchronous library calls.
//
// The copy ceiling is the fastest of memcpy and a streaming-store copy loop,
// each on one thread and split over the context's worker count. Like the
// update calls, which rotate through a state pool of cpu_rotation_bytes(),
// the copies rotate through buffer pairs of about that many bytes in all, so
// each copy finds its source and destination in memory, not in cache.
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
#include <unordered_map>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

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

size_t cpu_rotation_bytes() { return 4 * last_level_cache_bytes(); }

namespace {

#if defined(__x86_64__) || defined(_M_X64)
// One 64-byte line: four 16-byte loads and four non-temporal stores (d is
// 16-byte aligned).
inline void stream_line(char* d, const char* s) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
  const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
  _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
  _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
}
#endif

// ssu-bench's own copy loop: 16-byte loads and non-temporal 16-byte stores
// (SSE2, part of every x86-64 processor), which write whole lines without
// first reading the destination into the cache as plain stores do; a
// memcpy may or may not stream, depending on the C library and the size.
// It copies four 4 KiB pages at a time, a line of each in turn, as glibc's
// memcpy does past its non-temporal threshold: one stream of lines left
// DRAM bandwidth unused. On a 2-vCPU Xeon VM, at 4-257 MiB on two threads,
// one stream copied 23-25 GB/s and four 30-32 GB/s, which glibc's memcpy
// reached only at 257 MiB. Elsewhere a plain memcpy.
void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__) || defined(_M_X64)
  constexpr size_t kPage = 4096, kStreams = 4;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + kStreams * kPage <= bytes; i += kStreams * kPage)
    for (size_t line = 0; line < kPage; line += 64)
      for (size_t p = 0; p < kStreams; ++p)
        stream_line(d + i + p * kPage + line, s + i + p * kPage + line);
  for (; i + 64 <= bytes; i += 64) stream_line(d + i, s + i);
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();  // the streamed lines are in memory before the clock stops
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Page-aligned, resident, zeroed host memory whose released blocks serve
// later requests. A batch row builds a state pool of cpu_rotation_bytes()
// (over a GiB where the last-level cache is hundreds of MiB), and in a
// virtual machine a first touch costs microseconds per 4 KiB page: faulting
// a fresh pool in for every row took longer than timing the row. A released
// block serves a request of up to its size (and at least half of it), or
// grows with mremap, which keeps its resident pages, so that only the new
// tail is faulted in. No huge pages are asked for: the pages are those an
// ordinary allocation of that size gets.
class HostMemory {
 public:
  HostMemory() : page_(page_size()) {}
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;
  ~HostMemory() {
    for (const auto& b : live_) munmap(b.first, b.second);
    for (const Block& b : free_) munmap(b.ptr, b.bytes);
  }

  void* get(size_t bytes) {
    const size_t want = (std::max<size_t>(bytes, 1) + page_ - 1) / page_ * page_;
    Block b = take(want);
    std::memset(b.ptr, 0, want);  // faults in what is new, clears what is reused
    live_[b.ptr] = b.bytes;
    return b.ptr;
  }

  void put(void* p) {
    if (!p) return;
    const auto it = live_.find(p);
    if (it == live_.end()) throw std::logic_error("HostMemory::put: not a live block");
    free_.push_back({p, it->second});
    live_.erase(it);
  }

 private:
  struct Block {
    void* ptr;
    size_t bytes;
  };

  static size_t page_size() {
    const long n = sysconf(_SC_PAGESIZE);
    return n > 0 ? size_t(n) : 4096;
  }

  // A block of at least `want` bytes: the smallest released one that fits
  // without wasting more than half of it, else the largest smaller one
  // grown, else a new mapping.
  Block take(size_t want) {
    size_t fit = free_.size();
    [[maybe_unused]] size_t grow = free_.size();  // (read where mremap exists)
    for (size_t i = 0; i < free_.size(); ++i) {
      const size_t n = free_[i].bytes;
      if (n >= want && n / 2 <= want) {
        if (fit == free_.size() || n < free_[fit].bytes) fit = i;
      } else if (n < want) {
        if (grow == free_.size() || n > free_[grow].bytes) grow = i;
      }
    }
    if (fit != free_.size()) return pop(fit);
#if defined(__linux__)
    if (grow != free_.size()) {
      Block b = pop(grow);
      void* p = mremap(b.ptr, b.bytes, want, MREMAP_MAYMOVE);
      if (p != MAP_FAILED) return {p, want};
      free_.push_back(b);  // keep it; a new mapping instead
    }
#endif  // (elsewhere, no mremap: a new mapping)
    void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return {p, want};
  }

  Block pop(size_t i) {
    const Block b = free_[i];
    free_[i] = free_.back();
    free_.pop_back();
    return b;
  }

  size_t page_;
  std::vector<Block> free_;
  std::unordered_map<void*, size_t> live_;
};

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

// About the seconds of timed copying per copy ceiling (all four copies, every
// round; more where kMinCopiesPerMedian copies take longer), so that rows of
// hundreds of MiB take a few copies each rather than a fixed count.
constexpr double kCopyBudgetSeconds = 0.25;
// Each median takes between these many copies (at most the caller's count).
constexpr int kMinCopiesPerMedian = 3, kMaxCopiesPerMedian = 51;

class CpuBenchDevice final : public BenchDevice {
 public:
  CpuBenchDevice(ssu_context_t ctx, int threads)
      : name_(describe(ctx)), team_(resolve_threads(threads)) {}

  std::string name() const override { return name_; }

  // Page-aligned and touched (HostMemory), so that page faults are not timed.
  void* alloc(size_t bytes) override { return memory_.get(bytes); }
  void release(void* p) override { memory_.put(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }

  void download(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }

  // Every pair in the arena, which is faulted in once for the whole run.
  CopyTiming time_copy(size_t bytes, int iters) override {
    const size_t stride = page_round(bytes), pairs = rotation_pairs(bytes);
    char* arena = rotation_arena(pairs * 2 * stride);
    std::vector<char*> to;
    std::vector<const char*> from;
    for (size_t k = 0; k < pairs; ++k) {
      from.push_back(arena + 2 * k * stride);
      to.push_back(arena + (2 * k + 1) * stride);
    }
    return time_rotation(to, from, bytes, iters);
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

  // Pairs lie whole pages apart, as separate allocations would.
  static size_t page_round(size_t bytes) {
    return (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  }

  // Buffer pairs for copies of `bytes` bytes: about cpu_rotation_bytes() in
  // all, and at least two, so that a pair comes round again only after
  // more than the last-level cache of other copies.
  static size_t rotation_pairs(size_t bytes) {
    return std::max<size_t>(2, cpu_rotation_bytes() / (2 * page_round(bytes)));
  }

  // The four copies (memcpy and the streaming loop, each on one thread and
  // on the team) in kCpuCopyRounds rounds; a round times each copy as the
  // median of k copies, interleaved so that a burst of other work on the
  // machine spoils one round of every copy rather than all rounds of one.
  // Each copy's time is its best round. Consecutive copies use consecutive
  // pairs of (to, from), so that each finds its buffers out of cache.
  CopyTiming time_rotation(const std::vector<char*>& to, const std::vector<const char*>& from,
                           size_t bytes, int iters) {
    const size_t pairs = to.size();
    size_t next = 0;  // the pair the next copy uses
    struct Variant {
      bool streaming;
      int threads;
      double best_s;  // the best round's median so far (0: none yet)
    };
    std::vector<Variant> variants;
    for (const bool streaming : {false, true}) {
      variants.push_back({streaming, 1, 0.0});
      if (team_.size() > 1) variants.push_back({streaming, team_.size(), 0.0});
    }
    auto copy_once = [&](const Variant& v) {
      const size_t p = next++ % pairs;
      const auto t0 = Clock::now();
      copy(v.streaming, v.threads, to[p], from[p], bytes);
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };

    // One untimed copy of each wakes the team and sizes the medians.
    double slowest = 0.0;
    for (const Variant& v : variants) slowest = std::max(slowest, copy_once(v));
    const double per_round = double(variants.size() * kCpuCopyRounds) * std::max(slowest, 1e-9);
    const int cap = std::max(kMinCopiesPerMedian, std::min(iters, kMaxCopiesPerMedian));
    const int k = std::max(kMinCopiesPerMedian,
                           std::min(cap, static_cast<int>(kCopyBudgetSeconds / per_round)));

    std::vector<double> t(static_cast<size_t>(k));
    for (int round = 0; round < kCpuCopyRounds; ++round) {
      for (Variant& v : variants) {
        for (double& s : t) s = copy_once(v);
        const double m = median(t);
        if (v.best_s == 0.0 || m < v.best_s) v.best_s = m;
      }
    }

    CopyTiming best;
    for (const Variant& v : variants) {
      double& own = v.streaming ? best.kernel_s : best.memcpy_s;
      if (own == 0.0 || v.best_s < own) own = v.best_s;
      if (best.best_s == 0.0 || v.best_s < best.best_s) {
        best.best_s = v.best_s;
        best.winner = std::string(v.streaming ? "streaming copy" : "memcpy") + " (" +
                      std::to_string(v.threads) + (v.threads == 1 ? " thread)" : " threads)");
      }
    }
    return best;
  }

  // One copy of `bytes` bytes, on one thread or split over the team in
  // cache-line-aligned chunks.
  void copy(bool streaming, int threads, char* dst, const char* src, size_t bytes) {
    void (*const fn)(void*, const void*, size_t) =
        streaming ? stream_copy : [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); };
    if (threads == 1) {
      fn(dst, src, bytes);
      return;
    }
    const size_t chunk = (bytes / size_t(threads) + 63) / 64 * 64;
    team_.run([&](int w) {
      const size_t begin = std::min(bytes, chunk * size_t(w));
      const size_t end = std::min(bytes, begin + chunk);
      fn(dst + begin, src + begin, end - begin);
    });
  }

  // At least `bytes` bytes for the copy rotation, kept from row to row
  // (grown when a row needs more).
  char* rotation_arena(size_t bytes) {
    if (arena_bytes_ < bytes) {
      memory_.put(arena_);
      arena_ = nullptr;
      arena_bytes_ = 0;
      arena_ = static_cast<char*>(memory_.get(bytes));
      arena_bytes_ = bytes;
    }
    return arena_;
  }

  std::string name_;
  HostMemory memory_;  // before team_ and arena_: outlives their use
  Team team_;
  char* arena_ = nullptr;
  size_t arena_bytes_ = 0;
};

}  // namespace

std::unique_ptr<BenchDevice> make_cpu_bench_device(ssu_context_t ctx, int threads) {
  return std::unique_ptr<BenchDevice>(new CpuBenchDevice(ctx, threads));
}

}  // namespace ssu_bench
