// Concurrent executes (ssu.h: contexts and plans are immutable after creation
// and may be used from any thread at once). Eight threads each advance their
// own sequences, in their own slots of one shared state pool, for many steps:
// with a context and a plan each, sharing one context, and sharing one plan.
// Every output of every step and the final pool must be bit-identical to the
// same work done by one thread. Public API only, so that the test builds
// alone under ThreadSanitizer (.ci/run).
#include <doctest/doctest.h>

#include <ssu.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 8;
constexpr int kSeqs = 4;  // sequences per thread
constexpr int kSpare = 3;  // slots nobody names
constexpr int kSlots = kThreads * kSeqs + kSpare;
constexpr int H = 4, P = 16, N = 32, G = 2;
constexpr int kSteps = 200;

// A deterministic value in [lo, hi) for (stream, index).
float uniform(uint64_t stream, uint64_t i, float lo, float hi) {
  uint64_t z = stream * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return lo + (hi - lo) * static_cast<float>(z >> 40) / static_cast<float>(1 << 24);
}

ssu_tensor_t dense(void* data, ssu_dtype_t dtype, std::initializer_list<int64_t> shape) {
  ssu_tensor_t t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  int64_t stride = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    t.strides[k] = stride;
    stride *= t.shape[k];
  }
  return t;
}

// One thread's sequences: their inputs (refilled every step), slots and
// outputs, and the update arguments over them.
struct Worker {
  int id = 0;
  std::vector<float> x, z, out, B, C, dt;
  std::vector<int32_t> slots;
  std::vector<uint64_t> out_hashes;  // FNV-1a of every step's outputs
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;

  void init(int id_, float* state, const float* A, const float* D, const float* dt_bias) {
    id = id_;
    x.assign(kSeqs * H * P, 0.f);
    z.assign(kSeqs * H * P, 0.f);
    out.assign(kSeqs * H * P, 0.f);
    B.assign(kSeqs * G * N, 0.f);
    C.assign(kSeqs * G * N, 0.f);
    dt.assign(kSeqs * H, 0.f);
    slots.assign(kSeqs, 0);
    out_hashes.clear();
    pool = SSU_STATE_POOL_INIT;
    pool.state = dense(state, SSU_DTYPE_F32, {kSlots, H, P, N});
    args = SSU_UPDATE_ARGS_INIT;
    args.flags = SSU_UPDATE_DT_SOFTPLUS;
    args.pool = &pool;
    args.x = dense(x.data(), SSU_DTYPE_F32, {kSeqs, H, P});
    args.z = dense(z.data(), SSU_DTYPE_F32, {kSeqs, H, P});
    args.out = dense(out.data(), SSU_DTYPE_F32, {kSeqs, H, P});
    args.B = dense(B.data(), SSU_DTYPE_F32, {kSeqs, G, N});
    args.C = dense(C.data(), SSU_DTYPE_F32, {kSeqs, G, N});
    args.dt = dense(dt.data(), SSU_DTYPE_F32, {kSeqs, H});
    args.A = dense(const_cast<float*>(A), SSU_DTYPE_F32, {H});
    args.D = dense(const_cast<float*>(D), SSU_DTYPE_F32, {H});
    args.dt_bias = dense(const_cast<float*>(dt_bias), SSU_DTYPE_F32, {H});
    args.src_index = dense(slots.data(), SSU_DTYPE_I32, {kSeqs});
  }

  // Step s's inputs; the sequences move between this worker's own slots.
  void fill(int s) {
    const uint64_t base = (static_cast<uint64_t>(id) << 32) | static_cast<uint64_t>(s) << 8;
    for (size_t i = 0; i < x.size(); ++i) x[i] = uniform(base | 1, i, -1.f, 1.f);
    for (size_t i = 0; i < z.size(); ++i) z[i] = uniform(base | 2, i, -2.f, 2.f);
    for (size_t i = 0; i < B.size(); ++i) B[i] = uniform(base | 3, i, -1.f, 1.f);
    for (size_t i = 0; i < C.size(); ++i) C[i] = uniform(base | 4, i, -1.f, 1.f);
    for (size_t i = 0; i < dt.size(); ++i) dt[i] = uniform(base | 5, i, -2.f, 1.f);
    for (int b = 0; b < kSeqs; ++b) slots[size_t(b)] = id * kSeqs + (b + s) % kSeqs;
    std::memset(out.data(), 0xff, out.size() * sizeof(float));  // NaN poison
  }

  void record() {
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char* p = reinterpret_cast<const unsigned char*>(out.data());
    for (size_t i = 0; i < out.size() * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
    out_hashes.push_back(h);
  }
};

struct Run {
  std::vector<float> state;
  std::vector<Worker> workers;
  std::vector<std::string> errors;
  float A[H], D[H], dt_bias[H];

  Run() : state(size_t(kSlots) * H * P * N), workers(kThreads), errors(kThreads) {
    for (size_t i = 0; i < state.size(); ++i) state[i] = uniform(77, i, -1.f, 1.f);
    for (int h = 0; h < H; ++h) {
      A[h] = -0.5f - float(h);
      D[h] = 0.25f * float(h);
      dt_bias[h] = -1.f + 0.1f * float(h);
    }
    for (int t = 0; t < kThreads; ++t) workers[size_t(t)].init(t, state.data(), A, D, dt_bias);
  }

  // Worker t's steps on `plan` (its own, or shared).
  void steps(int t, ssu_plan_t plan) {
    Worker& w = workers[size_t(t)];
    for (int s = 0; s < kSteps; ++s) {
      w.fill(s);
      if (ssu_plan_execute_update(plan, &w.args, nullptr) != SSU_SUCCESS) {
        errors[size_t(t)] = ssu_last_error_message();
        return;
      }
      w.record();
    }
  }
};

ssu_context_t cpu_context(int threads) {
  ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
  o.backend = SSU_BACKEND_CPU;
  o.num_threads = threads;
  ssu_context_t ctx = nullptr;
  REQUIRE_MESSAGE(ssu_context_create(&o, &ctx) == SSU_SUCCESS, std::string(ssu_last_error_message()));
  return ctx;
}

ssu_plan_t plan_for(ssu_context_t ctx, const Worker& w) {
  ssu_plan_t plan = nullptr;
  REQUIRE_MESSAGE(ssu_plan_create_update(ctx, &w.args, nullptr, &plan) == SSU_SUCCESS,
                  std::string(ssu_last_error_message()));
  return plan;
}

// The same work on one thread: worker 0's step 0, worker 1's step 0, ...
Run& reference() {
  static Run ref;
  static bool done = false;
  if (!done) {
    ssu_context_t ctx = cpu_context(1);
    std::vector<ssu_plan_t> plans;
    for (const Worker& w : ref.workers) plans.push_back(plan_for(ctx, w));
    for (int s = 0; s < kSteps; ++s)
      for (int t = 0; t < kThreads; ++t) {
        Worker& w = ref.workers[size_t(t)];
        w.fill(s);
        REQUIRE(ssu_plan_execute_update(plans[size_t(t)], &w.args, nullptr) == SSU_SUCCESS);
        w.record();
      }
    for (ssu_plan_t p : plans) ssu_plan_destroy(p);
    ssu_context_destroy(ctx);
    // Not vacuous: the named slots moved and the last outputs are numbers.
    for (const Worker& w : ref.workers)
      for (float v : w.out) REQUIRE(v == v);
    size_t changed = 0;
    for (size_t i = 0; i < size_t(kThreads) * kSeqs * H * P * N; ++i)
      changed += ref.state[i] != uniform(77, i, -1.f, 1.f);
    REQUIRE(changed > size_t(kThreads) * kSeqs * H * P * N / 2);
    done = true;
  }
  return ref;
}

void check_against_reference(const Run& run) {
  const Run& ref = reference();
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK_MESSAGE(run.errors[size_t(t)].empty(), run.errors[size_t(t)]);
    CHECK(run.workers[size_t(t)].out_hashes == ref.workers[size_t(t)].out_hashes);
  }
  CHECK(std::memcmp(run.state.data(), ref.state.data(), run.state.size() * sizeof(float)) == 0);
  // The spare slots were never named: still their first values.
  const size_t slot_elems = size_t(H) * P * N;
  for (size_t i = size_t(kThreads) * kSeqs * slot_elems; i < run.state.size(); ++i)
    if (run.state[i] != uniform(77, i, -1.f, 1.f)) {
      FAIL_CHECK("spare slot element " << i << " changed");
      break;
    }
}

}  // namespace

TEST_CASE("concurrency: eight threads, a context and a plan each") {
  Run run;
  std::vector<ssu_context_t> ctxs;
  std::vector<ssu_plan_t> plans;
  for (const Worker& w : run.workers) {
    ctxs.push_back(cpu_context(2));
    plans.push_back(plan_for(ctxs.back(), w));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { run.steps(t, plans[size_t(t)]); });
  for (std::thread& th : threads) th.join();
  check_against_reference(run);
  for (ssu_plan_t p : plans) ssu_plan_destroy(p);
  for (ssu_context_t c : ctxs) ssu_context_destroy(c);
}

TEST_CASE("concurrency: eight threads share one context (and its workers), a plan each") {
  for (int workers : {1, 2, 0}) {
    CAPTURE(workers);
    Run run;
    ssu_context_t ctx = cpu_context(workers);
    std::vector<ssu_plan_t> plans;
    for (const Worker& w : run.workers) plans.push_back(plan_for(ctx, w));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { run.steps(t, plans[size_t(t)]); });
    for (std::thread& th : threads) th.join();
    check_against_reference(run);
    for (ssu_plan_t p : plans) ssu_plan_destroy(p);
    ssu_context_destroy(ctx);
  }
}

TEST_CASE("concurrency: eight threads share one context and one plan") {
  Run run;
  ssu_context_t ctx = cpu_context(2);
  ssu_plan_t plan = plan_for(ctx, run.workers[0]);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { run.steps(t, plan); });
  for (std::thread& th : threads) th.join();
  check_against_reference(run);
  ssu_plan_destroy(plan);
  ssu_context_destroy(ctx);
}
