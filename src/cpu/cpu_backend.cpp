// The CPU backend: checks what only the data can tell (slot ranges, varlen
// lengths) before anything is written, then runs the update loops over the
// context's threads.
#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>

#include "core/backend.h"
#include "core/error.h"
#include "cpu/kernels.h"
#include "cpu/mamba3.h"
#include "cpu/replay.h"
#include "cpu/sequence.h"
#include "cpu/thread_pool.h"

namespace ssu {
namespace {

using cpu::is_pad;
using cpu::load_index;

void check_slot(const ssu_update_params& p, int64_t slot, int64_t bound, const char* what,
                int64_t b, int64_t t) {
  if (slot >= bound && !is_pad(p, slot)) {
    if (t >= 0)
      fail(SSU_ERROR_INDEX_OUT_OF_RANGE,
           "%s[%" PRId64 ", %" PRId64 "]=%" PRId64 " but the pool has %" PRId64 " slots", what, b,
           t, slot, bound);
    fail(SSU_ERROR_INDEX_OUT_OF_RANGE, "%s[%" PRId64 "]=%" PRId64 " but the pool has %" PRId64
         " slots", what, b, slot, bound);
  }
}

// Everything the data can get wrong, checked before the first write.
void check_data(const ssu_update_params& p) {
  const uint32_t f = p.features;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t len = p.ntokens, tok0 = 0;
    if (f & SSU_F_VARLEN) {
      tok0 = load_index(p.cu_seqlens, p.seqlen_dtype, b * p.cu_seqlens_stride);
      const int64_t tok1 = load_index(p.cu_seqlens, p.seqlen_dtype, (b + 1) * p.cu_seqlens_stride);
      len = cpu::sequence_length(tok0, tok1);
      if (len > p.ntokens)
        fail(SSU_ERROR_SEQLEN_OUT_OF_RANGE,
             "cu_seqlens gives sequence %" PRId64 " %" PRId64 " tokens (cu_seqlens[%" PRId64
             "]=%" PRId64 ", cu_seqlens[%" PRId64 "]=%" PRId64 ") but max_tokens=%" PRId64,
             b, len, b, tok0, b + 1, tok1, p.ntokens);
      if (len > 0 && (tok0 < 0 || tok1 > p.total_tokens))
        fail(SSU_ERROR_INDEX_OUT_OF_RANGE,
             "cu_seqlens gives sequence %" PRId64 " tokens [%" PRId64 ", %" PRId64
             ") but x holds %" PRId64 " packed tokens",
             b, tok0, tok1, p.total_tokens);
      if (len <= 0) continue;
    }
    if (f & SSU_F_HAS_ACCEPTED) {
      const int64_t acc = load_index(p.num_accepted, p.accepted_dtype, b * p.num_accepted_stride);
      if (acc > p.ntokens)
        fail(SSU_ERROR_INDEX_OUT_OF_RANGE,
             "num_accepted_tokens[%" PRId64 "]=%" PRId64 " but T=%" PRId64, b, acc, p.ntokens);
    }
    const cpu::Sequence s = cpu::resolve_sequence(p, b);
    if (s.pad) continue;
    if (f & SSU_F_HAS_SRC)
      check_slot(p, s.src, p.nslots, "src_index", b, (p.src_stride_t || s.init_col) ? s.init_col : -1);
    else if (b >= p.nslots)
      fail(SSU_ERROR_INDEX_OUT_OF_RANGE,
           "no src_index is given, so sequence %" PRId64 " uses slot %" PRId64
           ", but the pool has %" PRId64 " slots",
           b, b, p.nslots);
    if (f & SSU_F_HAS_DST) check_slot(p, cpu::dst_slot(p, b, 0), p.nslots, "dst_index", b, -1);
    if (f & SSU_F_DST_PER_TOKEN)
      for (int64_t t = 0; t < len; ++t)
        check_slot(p, cpu::dst_slot(p, b, t), p.nslots, "dst_index", b, t);
    if (f & SSU_F_HAS_INTER) {
      const int64_t i = cpu::intermediate_slot(p, b, s);
      if (i >= p.n_intermediate && !is_pad(p, i))
        fail(SSU_ERROR_INDEX_OUT_OF_RANGE,
             "%s %" PRId64 " of sequence %" PRId64 " is outside intermediate_states (%" PRId64
             " entries)",
             (f & SSU_F_HAS_INTER_INDEX) ? "intermediate_index" : "the intermediate slot (its src slot)",
             i, b, p.n_intermediate);
    }
  }
}

// SSU_CPU_ISA=generic forces the baseline loops (so they can be tested on
// machines that would pick the AVX2 ones).
bool cpu_has_avx2() {
#if defined(__x86_64__) && defined(SSU_CPU_HAVE_AVX2)
  const char* isa = std::getenv("SSU_CPU_ISA");
  if (isa && std::strcmp(isa, "generic") == 0) return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads)
      : pool_(num_threads),
        items_(cpu_has_avx2() ? cpu_avx2_items() : &cpu::generic::update_items) {
    name_ = format("cpu (%d thread%s, %s)", pool_.size(), pool_.size() == 1 ? "" : "s",
                   items_ == &cpu::generic::update_items ? "generic" : "avx2");
  }

  ssu_backend_t kind() const override { return SSU_BACKEND_CPU; }
  const char* device_name() const override { return name_.c_str(); }

  ssu_algorithm_t plan_update(const ssu_update_params&, ssu_algorithm_t requested) override {
    if (requested != SSU_ALGORITHM_AUTO && requested != SSU_ALGORITHM_CPU_ROWS)
      fail(SSU_ERROR_ALGORITHM_UNAVAILABLE, "algorithm %d (%s) does not run on the CPU backend",
           requested, algorithm_name(requested));
    return SSU_ALGORITHM_CPU_ROWS;
  }

  ssu_algorithm_t plan_mamba3_step(const ssu_mamba3_params&, ssu_algorithm_t requested) override {
    return plan_update(ssu_update_params{}, requested);
  }
  void execute_mamba3_step(const ssu_mamba3_params& p, ssu_algorithm_t, ssu_stream_t) override {
    cpu::mamba3_step(p, pool_);
  }
  ssu_algorithm_t plan_mamba3_rotary(const ssu_rotary_params&,
                                     ssu_algorithm_t requested) override {
    return plan_update(ssu_update_params{}, requested);
  }
  void execute_mamba3_rotary(const ssu_rotary_params& p, ssu_algorithm_t, ssu_stream_t) override {
    cpu::mamba3_rotary(p, pool_);
  }

  ssu_algorithm_t plan_replay(const ssu_replay_params&, ssu_algorithm_t requested) override {
    return plan_update(ssu_update_params{}, requested);
  }
  // Slot ranges and varlen lengths are the update's checks; cpu::replay
  // checks the counters and num_accepted, all before anything is written.
  void execute_replay(const ssu_replay_params& p, ssu_algorithm_t, ssu_stream_t) override {
    check_data(p.u);
    cpu::replay(p, pool_);
  }

  void advance_seed(uint64_t* seed, uint64_t increment, ssu_stream_t) override {
    *seed += increment;
  }

  void execute_update(const ssu_update_params& p, ssu_algorithm_t, ssu_stream_t) override {
    check_data(p);
    // Row blocks small enough for an L1-resident fp32 tile.
    // (at most 256 rows: kMaxRows in kernel_impl.h).
    const int64_t rows =
        std::max<int64_t>(1, std::min<int64_t>(p.dim, std::min<int64_t>(256, 4096 / p.dstate)));
    const int64_t blocks = (p.dim + rows - 1) / rows;
    const int64_t items = p.batch * p.nheads * blocks;
    // Aim for ~64 KiB of state per chunk so small calls stay on one thread.
    const int64_t item_bytes = rows * p.dstate * 4;
    const int64_t grain = std::max<int64_t>(1, (64 << 10) / item_bytes);
    Job job{&p, rows, items_};
    pool_.parallel_for(items, std::min<int64_t>(grain, std::max<int64_t>(1, items / (4 * pool_.size()))),
                       &run, &job);
  }

 private:
  struct Job {
    const ssu_update_params* p;
    int64_t rows;
    cpu::UpdateItemsFn fn;
  };
  static void run(void* ctx, int64_t begin, int64_t end) {
    const Job& j = *static_cast<const Job*>(ctx);
    j.fn(*j.p, j.rows, begin, end);
  }
  static cpu::UpdateItemsFn cpu_avx2_items() {
#if defined(SSU_CPU_HAVE_AVX2)
    return &cpu::avx2::update_items;
#else
    return &cpu::generic::update_items;
#endif
  }

  ThreadPool pool_;
  cpu::UpdateItemsFn items_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  if (num_threads < 0)
    fail(SSU_ERROR_INVALID_ARGUMENT, "options->num_threads=%d is negative", num_threads);
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  try {
    return std::make_unique<CpuBackend>(num_threads);
  } catch (const std::system_error& e) {
    fail(SSU_ERROR_RESOURCES, "could not start %d CPU worker threads: %s", num_threads, e.what());
  }
}

}  // namespace ssu
