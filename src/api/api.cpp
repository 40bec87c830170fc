// The C entry points: argument checks on handles, exception barrier, the
// thread-local message. Everything else lives in src/core and the backends.
#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "core/backend.h"
#include "core/error.h"
#include "core/validate_mamba3.h"
#include "core/validate_replay.h"
#include "core/validate_update.h"
#include "ssu.h"

#define SSU_STR2_(x) #x
#define SSU_STR_(x) SSU_STR2_(x)

struct ssu_context_s {
  uint64_t magic;
  std::unique_ptr<ssu::Backend> backend;
};

struct ssu_plan_s {
  enum Op { kUpdate, kMamba3Step, kMamba3Rotary, kReplay };
  uint64_t magic;
  ssu::Backend* backend;
  Op op;
  // The validated problem seen at plan time (the member of `op`).
  ssu_update_params proto;
  ssu_mamba3_params m3_proto;
  ssu_rotary_params rot_proto;
  ssu_replay_params replay_proto;
  ssu_algorithm_t algorithm;
  uint32_t flags;  // SSU_PLAN_* of its options
};

namespace {

constexpr uint64_t kContextMagic = 0x5353552d43545821ull;  // "SSU-CTX!"
constexpr uint64_t kPlanMagic = 0x5353552d504c4e21ull;     // "SSU-PLN!"

// The calling thread's last message. A plain array, not a std::string: a
// thread's thread_local objects are destroyed before the static objects of
// the program, so a libssu call from a static destructor or an atexit
// handler (a global plan or context released at exit) would otherwise use a
// destroyed string. Messages are far shorter than this; a longer one is cut.
thread_local char t_message[2048];

ssu_status_t set_error(ssu_status_t status, const char* message) {
  std::snprintf(t_message, sizeof t_message, "%s", message);
  return status;
}

// Runs body, turning every exception into a status and the thread's message.
template <typename F>
ssu_status_t guarded(F&& body) noexcept {
  try {
    t_message[0] = '\0';
    body();
    return SSU_SUCCESS;
  } catch (const ssu::Error& e) {
    return set_error(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    return set_error(SSU_ERROR_OUT_OF_MEMORY, "a host allocation failed");
  } catch (const std::exception& e) {
    return set_error(SSU_ERROR_INTERNAL, e.what());
  } catch (...) {
    return set_error(SSU_ERROR_INTERNAL, "unknown internal error");
  }
}

ssu_context_s* context_from(ssu_context_t c, const char* name) {
  if (!c) ssu::fail(SSU_ERROR_BAD_HANDLE, "%s is NULL", name);
  if (c->magic != kContextMagic)
    ssu::fail(SSU_ERROR_BAD_HANDLE, "%s does not point to a live ssu context", name);
  return c;
}

ssu_plan_s* plan_from(ssu_plan_t p) {
  if (!p) ssu::fail(SSU_ERROR_BAD_HANDLE, "plan is NULL");
  if (p->magic != kPlanMagic) ssu::fail(SSU_ERROR_BAD_HANDLE, "plan does not point to a live ssu plan");
  return p;
}

template <typename T>
T read_versioned(const T* in, const char* name, const char* init_macro) {
  T v;
  std::memset(&v, 0, sizeof v);
  if (in->struct_size < sizeof(T))
    ssu::fail(SSU_ERROR_STRUCT_SIZE, "%s->struct_size=%u is smaller than %zu; initialize it with %s",
              name, in->struct_size, sizeof(T), init_macro);
  std::memcpy(&v, in, sizeof v);
  return v;
}

// algorithm_name's text for a value ssu.h does not define; compared by
// address to tell unknown values apart.
constexpr char kUnknownAlgorithm[] = "unknown";

ssu_plan_options_t plan_options(const ssu_plan_options_t* options) {
  ssu_plan_options_t o;
  std::memset(&o, 0, sizeof o);
  if (options) {
    // 0.3's options ended before `flags`: that size still reads, flags 0.
    // Between the two layouts only that size: any other ends inside `flags`.
    constexpr uint32_t kOldSize = offsetof(ssu_plan_options_t, flags);
    if (options->struct_size < kOldSize)
      ssu::fail(SSU_ERROR_STRUCT_SIZE, "options->struct_size=%u is smaller than %u; initialize "
                "it with SSU_PLAN_OPTIONS_INIT", options->struct_size, kOldSize);
    if (options->struct_size < sizeof o && options->struct_size != kOldSize)
      ssu::fail(SSU_ERROR_STRUCT_SIZE, "options->struct_size=%u is neither the 0.3 layout's %u "
                "nor at least %zu; initialize it with SSU_PLAN_OPTIONS_INIT",
                options->struct_size, kOldSize, sizeof o);
    std::memcpy(&o, options, std::min<size_t>(options->struct_size, sizeof o));
  }
  if (o.flags & ~uint32_t(SSU_PLAN_PDL))
    ssu::fail(SSU_ERROR_UNKNOWN_FLAG, "options->flags=0x%x has unknown bits 0x%x", o.flags,
              o.flags & ~uint32_t(SSU_PLAN_PDL));
  // Unknown values (among them 3, the cuda_tma that 0.2 reserved) are
  // refused here, before any backend sees them, so that every backend and
  // operation refuses them with the same status and message.
  if (ssu::algorithm_name(o.algorithm) == kUnknownAlgorithm)
    ssu::fail(SSU_ERROR_ALGORITHM_UNAVAILABLE,
              "options->algorithm=%d is not an algorithm of this libssu (%s); use "
              "SSU_ALGORITHM_AUTO or one of the SSU_ALGORITHM_* values of its ssu.h",
              o.algorithm, ssu_version_string());
  return o;
}

std::unique_ptr<ssu_plan_s> new_plan(ssu_context_s* c, ssu_plan_s::Op op) {
  auto plan = std::make_unique<ssu_plan_s>();
  std::memset(&plan->proto, 0, sizeof plan->proto);
  std::memset(&plan->m3_proto, 0, sizeof plan->m3_proto);
  std::memset(&plan->rot_proto, 0, sizeof plan->rot_proto);
  std::memset(&plan->replay_proto, 0, sizeof plan->replay_proto);
  plan->magic = kPlanMagic;
  plan->backend = c->backend.get();
  plan->op = op;
  return plan;
}

const char* op_name(ssu_plan_s::Op op) {
  switch (op) {
    case ssu_plan_s::kUpdate: return "a selective state update";
    case ssu_plan_s::kMamba3Step: return "a Mamba-3 step";
    case ssu_plan_s::kMamba3Rotary: return "a Mamba-3 rotary step";
    case ssu_plan_s::kReplay: return "a replay step";
  }
  return "?";
}

void require_op(const ssu_plan_s* p, ssu_plan_s::Op op, const char* fn) {
  if (p->op != op)
    ssu::fail(SSU_ERROR_PLAN_MISMATCH, "%s was given a plan for %s", fn, op_name(p->op));
}

}  // namespace

namespace ssu {
const char* algorithm_name(ssu_algorithm_t a) {
  switch (a) {
    case SSU_ALGORITHM_AUTO: return "auto";
    case SSU_ALGORITHM_CPU_ROWS: return "cpu_rows";
    case SSU_ALGORITHM_CUDA_SIMPLE: return "cuda_simple";
    case SSU_ALGORITHM_CUDA_PIPELINED: return "cuda_pipelined";
    case SSU_ALGORITHM_CUDA_REPLAY: return "cuda_replay";
    default: return kUnknownAlgorithm;
  }
}
}  // namespace ssu

extern "C" {

uint32_t ssu_version(void) { return SSU_VERSION; }

const char* ssu_version_string(void) {
  return SSU_STR_(SSU_VERSION_MAJOR) "." SSU_STR_(SSU_VERSION_MINOR) "." SSU_STR_(SSU_VERSION_PATCH);
}

const char* ssu_status_string(ssu_status_t s) {
  switch (s) {
    case SSU_SUCCESS: return "success";
    case SSU_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case SSU_ERROR_NULL_POINTER: return "required pointer is NULL";
    case SSU_ERROR_BAD_RANK: return "tensor has the wrong number of dimensions";
    case SSU_ERROR_BAD_SHAPE: return "tensor shape does not match";
    case SSU_ERROR_BAD_STRIDE: return "tensor stride is not allowed";
    case SSU_ERROR_BAD_DTYPE: return "dtype is not allowed here";
    case SSU_ERROR_DTYPE_MISMATCH: return "dtypes that must match differ";
    case SSU_ERROR_INDEX_OUT_OF_RANGE: return "index out of range";
    case SSU_ERROR_SEQLEN_OUT_OF_RANGE: return "sequence length exceeds max_tokens";
    case SSU_ERROR_INCOMPATIBLE_OPTIONS: return "options exclude each other";
    case SSU_ERROR_UNKNOWN_FLAG: return "unknown flag";
    case SSU_ERROR_STRUCT_SIZE: return "struct_size too small";
    case SSU_ERROR_PLAN_MISMATCH: return "arguments do not fit the plan";
    case SSU_ERROR_BAD_HANDLE: return "invalid handle";
    case SSU_ERROR_NOT_SUPPORTED: return "not supported";
    case SSU_ERROR_BACKEND_UNAVAILABLE: return "backend not available";
    case SSU_ERROR_ALGORITHM_UNAVAILABLE: return "algorithm not available";
    case SSU_ERROR_DRIVER_NOT_FOUND: return "CUDA driver not found";
    case SSU_ERROR_DRIVER_TOO_OLD: return "CUDA driver too old";
    case SSU_ERROR_NO_DEVICE: return "no such CUDA device";
    case SSU_ERROR_DEVICE_UNSUPPORTED: return "device architecture not supported";
    case SSU_ERROR_CUDA: return "CUDA driver call failed";
    case SSU_ERROR_OUT_OF_MEMORY: return "out of host memory";
    case SSU_ERROR_RESOURCES: return "out of resources";
    case SSU_ERROR_INTERNAL: return "internal error";
    case SSU_ERROR_VERSION: return "incompatible version";
    default: return "unknown status";
  }
}

const char* ssu_last_error_message(void) { return t_message; }

size_t ssu_dtype_size(ssu_dtype_t d) {
  switch (d) {
    case SSU_DTYPE_F32: return 4;
    case SSU_DTYPE_F16: return 2;
    case SSU_DTYPE_BF16: return 2;
    case SSU_DTYPE_I16: return 2;
    case SSU_DTYPE_I32: return 4;
    case SSU_DTYPE_I64: return 8;
    case SSU_DTYPE_I8: return 1;
    case SSU_DTYPE_F8E4M3: return 1;
    default: return 0;
  }
}

const char* ssu_dtype_name(ssu_dtype_t d) {
  switch (d) {
    case SSU_DTYPE_F32: return "f32";
    case SSU_DTYPE_F16: return "f16";
    case SSU_DTYPE_BF16: return "bf16";
    case SSU_DTYPE_I16: return "i16";
    case SSU_DTYPE_I32: return "i32";
    case SSU_DTYPE_I64: return "i64";
    case SSU_DTYPE_I8: return "i8";
    case SSU_DTYPE_F8E4M3: return "f8e4m3";
    default: return "invalid";
  }
}

size_t ssu_struct_size(int32_t id) {
  switch (id) {
    case SSU_STRUCT_TENSOR: return sizeof(ssu_tensor_t);
    case SSU_STRUCT_STATE_POOL: return sizeof(ssu_state_pool_t);
    case SSU_STRUCT_CONTEXT_OPTIONS: return sizeof(ssu_context_options_t);
    case SSU_STRUCT_PLAN_OPTIONS: return sizeof(ssu_plan_options_t);
    case SSU_STRUCT_PLAN_INFO: return sizeof(ssu_plan_info_t);
    case SSU_STRUCT_UPDATE_ARGS: return sizeof(ssu_update_args_t);
    case SSU_STRUCT_MAMBA3_STEP_ARGS: return sizeof(ssu_mamba3_step_args_t);
    case SSU_STRUCT_MAMBA3_ROTARY_ARGS: return sizeof(ssu_mamba3_rotary_args_t);
    case SSU_STRUCT_REPLAY_RING: return sizeof(ssu_replay_ring_t);
    case SSU_STRUCT_REPLAY_ARGS: return sizeof(ssu_replay_args_t);
    case SSU_STRUCT_REPLAY_FLUSH_ARGS: return sizeof(ssu_replay_flush_args_t);
    default: return 0;
  }
}

const char* ssu_backend_name(ssu_backend_t b) {
  switch (b) {
    case SSU_BACKEND_AUTO: return "auto";
    case SSU_BACKEND_CPU: return "cpu";
    case SSU_BACKEND_CUDA: return "cuda";
    default: return "invalid";
  }
}

ssu_status_t ssu_context_create(const ssu_context_options_t* options, ssu_context_t* out) {
  return guarded([&] {
    if (!out) ssu::fail(SSU_ERROR_NULL_POINTER, "out_context is NULL");
    ssu_context_options_t o;
    std::memset(&o, 0, sizeof o);
    if (options) o = read_versioned(options, "options", "SSU_CONTEXT_OPTIONS_INIT");
    auto ctx = std::make_unique<ssu_context_s>();
    ctx->magic = kContextMagic;
    switch (o.backend) {
      case SSU_BACKEND_CPU:
        if (o.device_ordinal != 0)
          ssu::fail(SSU_ERROR_NO_DEVICE, "options->device_ordinal=%d but the CPU backend has only "
                    "device 0", o.device_ordinal);
        ctx->backend = ssu::make_cpu_backend(o.num_threads);
        break;
      case SSU_BACKEND_CUDA:
        ctx->backend = ssu::make_cuda_backend(o.device_ordinal);
        break;
      case SSU_BACKEND_AUTO:
        try {
          ctx->backend = ssu::make_cuda_backend(o.device_ordinal);
        } catch (const ssu::Error&) {
          ctx->backend = ssu::make_cpu_backend(o.num_threads);
        }
        break;
      default:
        ssu::fail(SSU_ERROR_INVALID_ARGUMENT, "options->backend=%d is not an SSU_BACKEND_* value",
                  o.backend);
    }
    *out = ctx.release();
  });
}

ssu_status_t ssu_context_destroy(ssu_context_t context) {
  return guarded([&] {
    if (!context) return;
    ssu_context_s* c = context_from(context, "context");
    c->magic = 0;
    delete c;
  });
}

ssu_status_t ssu_context_get_backend(ssu_context_t context, ssu_backend_t* out) {
  return guarded([&] {
    ssu_context_s* c = context_from(context, "context");
    if (!out) ssu::fail(SSU_ERROR_NULL_POINTER, "out_backend is NULL");
    *out = c->backend->kind();
  });
}

const char* ssu_context_device_name(ssu_context_t context) {
  if (!context || context->magic != kContextMagic) return "invalid context";
  return context->backend->device_name();
}

ssu_status_t ssu_plan_create_update(ssu_context_t context, const ssu_update_args_t* args,
                                    const ssu_plan_options_t* options, ssu_plan_t* out) {
  return guarded([&] {
    ssu_context_s* c = context_from(context, "context");
    if (!out) ssu::fail(SSU_ERROR_NULL_POINTER, "out_plan is NULL");
    const ssu_plan_options_t o = plan_options(options);
    auto plan = new_plan(c, ssu_plan_s::kUpdate);
    plan->proto = ssu::normalize_update(args);
    plan->algorithm = c->backend->plan_update(plan->proto, o.algorithm);
    plan->flags = o.flags;
    *out = plan.release();
  });
}

ssu_status_t ssu_plan_create_mamba3_step(ssu_context_t context, const ssu_mamba3_step_args_t* args,
                                         const ssu_plan_options_t* options, ssu_plan_t* out) {
  return guarded([&] {
    ssu_context_s* c = context_from(context, "context");
    if (!out) ssu::fail(SSU_ERROR_NULL_POINTER, "out_plan is NULL");
    const ssu_plan_options_t o = plan_options(options);
    auto plan = new_plan(c, ssu_plan_s::kMamba3Step);
    plan->m3_proto = ssu::normalize_mamba3_step(args);
    if (o.flags & SSU_PLAN_PDL)
      ssu::fail(SSU_ERROR_NOT_SUPPORTED, "options->flags has SSU_PLAN_PDL, which Mamba-3 plans do "
                "not take (update and replay plans do)");
    plan->algorithm = c->backend->plan_mamba3_step(plan->m3_proto, o.algorithm);
    *out = plan.release();
  });
}

ssu_status_t ssu_plan_create_mamba3_rotary(ssu_context_t context,
                                           const ssu_mamba3_rotary_args_t* args,
                                           const ssu_plan_options_t* options, ssu_plan_t* out) {
  return guarded([&] {
    ssu_context_s* c = context_from(context, "context");
    if (!out) ssu::fail(SSU_ERROR_NULL_POINTER, "out_plan is NULL");
    const ssu_plan_options_t o = plan_options(options);
    auto plan = new_plan(c, ssu_plan_s::kMamba3Rotary);
    plan->rot_proto = ssu::normalize_mamba3_rotary(args);
    if (o.flags & SSU_PLAN_PDL)
      ssu::fail(SSU_ERROR_NOT_SUPPORTED, "options->flags has SSU_PLAN_PDL, which Mamba-3 plans do "
                "not take (update and replay plans do)");
    plan->algorithm = c->backend->plan_mamba3_rotary(plan->rot_proto, o.algorithm);
    *out = plan.release();
  });
}

ssu_status_t ssu_plan_create_replay(ssu_context_t context, const ssu_replay_args_t* args,
                                    const ssu_plan_options_t* options, ssu_plan_t* out) {
  return guarded([&] {
    ssu_context_s* c = context_from(context, "context");
    if (!out) ssu::fail(SSU_ERROR_NULL_POINTER, "out_plan is NULL");
    const ssu_plan_options_t o = plan_options(options);
    auto plan = new_plan(c, ssu_plan_s::kReplay);
    plan->replay_proto = ssu::normalize_replay(args);
    plan->algorithm = c->backend->plan_replay(plan->replay_proto, o.algorithm);
    plan->flags = o.flags;
    *out = plan.release();
  });
}

ssu_status_t ssu_plan_destroy(ssu_plan_t plan) {
  return guarded([&] {
    if (!plan) return;
    ssu_plan_s* p = plan_from(plan);
    p->magic = 0;
    delete p;
  });
}

ssu_status_t ssu_plan_get_info(ssu_plan_t plan, ssu_plan_info_t* info) {
  return guarded([&] {
    ssu_plan_s* p = plan_from(plan);
    if (!info) ssu::fail(SSU_ERROR_NULL_POINTER, "info is NULL");
    if (info->struct_size < sizeof(ssu_plan_info_t))
      ssu::fail(SSU_ERROR_STRUCT_SIZE, "info->struct_size=%u is smaller than %zu; initialize it "
                "with SSU_PLAN_INFO_INIT", info->struct_size, sizeof(ssu_plan_info_t));
    info->backend = p->backend->kind();
    info->algorithm = p->algorithm;
    info->reserved0 = 0;
    info->algorithm_name = ssu::algorithm_name(p->algorithm);
  });
}

ssu_status_t ssu_plan_execute_update(ssu_plan_t plan, const ssu_update_args_t* args,
                                     ssu_stream_t stream) {
  return guarded([&] {
    ssu_plan_s* p = plan_from(plan);
    require_op(p, ssu_plan_s::kUpdate, "ssu_plan_execute_update");
    ssu_update_params params = ssu::normalize_update(args);
    ssu::check_fits_plan(p->proto, params);
    if (params.batch == 0) return;
    if (p->flags & SSU_PLAN_PDL) params.features |= SSU_F_LAUNCH_PDL;
    p->backend->execute_update(params, p->algorithm, stream);
  });
}

ssu_status_t ssu_plan_execute_mamba3_step(ssu_plan_t plan, const ssu_mamba3_step_args_t* args,
                                          ssu_stream_t stream) {
  return guarded([&] {
    ssu_plan_s* p = plan_from(plan);
    require_op(p, ssu_plan_s::kMamba3Step, "ssu_plan_execute_mamba3_step");
    const ssu_mamba3_params params = ssu::normalize_mamba3_step(args);
    ssu::check_fits_plan(p->m3_proto, params);
    if (params.batch == 0) return;
    p->backend->execute_mamba3_step(params, p->algorithm, stream);
  });
}

ssu_status_t ssu_plan_execute_mamba3_rotary(ssu_plan_t plan, const ssu_mamba3_rotary_args_t* args,
                                            ssu_stream_t stream) {
  return guarded([&] {
    ssu_plan_s* p = plan_from(plan);
    require_op(p, ssu_plan_s::kMamba3Rotary, "ssu_plan_execute_mamba3_rotary");
    const ssu_rotary_params params = ssu::normalize_mamba3_rotary(args);
    ssu::check_fits_plan(p->rot_proto, params);
    if (params.batch == 0) return;
    p->backend->execute_mamba3_rotary(params, p->algorithm, stream);
  });
}

ssu_status_t ssu_plan_execute_replay(ssu_plan_t plan, const ssu_replay_args_t* args,
                                     ssu_stream_t stream) {
  return guarded([&] {
    ssu_plan_s* p = plan_from(plan);
    require_op(p, ssu_plan_s::kReplay, "ssu_plan_execute_replay");
    ssu_replay_params params = ssu::normalize_replay(args);
    ssu::check_fits_replay_plan(p->replay_proto, params);
    if (params.u.batch == 0) return;
    if (p->flags & SSU_PLAN_PDL) params.u.features |= SSU_F_LAUNCH_PDL;
    p->backend->execute_replay(params, p->algorithm, stream);
  });
}

ssu_status_t ssu_plan_execute_replay_flush(ssu_plan_t plan, const ssu_replay_flush_args_t* args,
                                           ssu_stream_t stream) {
  return guarded([&] {
    ssu_plan_s* p = plan_from(plan);
    require_op(p, ssu_plan_s::kReplay, "ssu_plan_execute_replay_flush");
    ssu_replay_params params = ssu::normalize_replay_flush(args, p->replay_proto);
    if (params.u.batch == 0) return;
    if (p->flags & SSU_PLAN_PDL) params.u.features |= SSU_F_LAUNCH_PDL;
    p->backend->execute_replay(params, p->algorithm, stream);
  });
}

ssu_status_t ssu_advance_seed(ssu_context_t context, uint64_t* seed, uint64_t increment,
                              ssu_stream_t stream) {
  return guarded([&] {
    ssu_context_s* c = context_from(context, "context");
    if (!seed) ssu::fail(SSU_ERROR_NULL_POINTER, "seed is NULL");
    c->backend->advance_seed(seed, increment, stream);
  });
}

}  // extern "C"
