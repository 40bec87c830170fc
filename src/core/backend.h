// The interface between the device-independent core and a backend.
#pragma once

#include <cstdint>
#include <memory>

#include "core/error.h"
#include "ssu.h"
#include "ssu_mamba3_params.h"
#include "ssu_replay_params.h"
#include "ssu_update_params.h"

namespace ssu {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual ssu_backend_t kind() const = 0;
  // Static for the backend's lifetime, e.g. "cpu (2 threads)".
  virtual const char* device_name() const = 0;

  // Chooses the algorithm for an update plan whose fixed part is `proto`
  // (a fully validated problem; its pointers are the ones seen at plan time
  // and must not be dereferenced). `requested` is SSU_ALGORITHM_AUTO or a
  // pinned algorithm that ssu.h defines (the API refuses other values before
  // a backend sees them). Returns the algorithm; throws Error if it cannot
  // run.
  virtual ssu_algorithm_t plan_update(const ssu_update_params& proto,
                                      ssu_algorithm_t requested) = 0;

  // Runs a validated problem. Throws Error on failure, having written
  // nothing (CPU) or launched nothing (CUDA).
  virtual void execute_update(const ssu_update_params& params,
                              ssu_algorithm_t algorithm,
                              ssu_stream_t stream) = 0;

  // The same pair for the Mamba-3 step and rotary step. A backend that
  // lacks them refuses at plan time.
  virtual ssu_algorithm_t plan_mamba3_step(const ssu_mamba3_params& /*proto*/,
                                           ssu_algorithm_t /*requested*/) {
    fail(SSU_ERROR_NOT_SUPPORTED, "this backend has no Mamba-3 step");
  }
  virtual void execute_mamba3_step(const ssu_mamba3_params& /*params*/,
                                   ssu_algorithm_t /*algorithm*/, ssu_stream_t /*stream*/) {
    fail(SSU_ERROR_INTERNAL, "a Mamba-3 step ran on a backend that cannot plan it");
  }
  virtual ssu_algorithm_t plan_mamba3_rotary(const ssu_rotary_params& /*proto*/,
                                             ssu_algorithm_t /*requested*/) {
    fail(SSU_ERROR_NOT_SUPPORTED, "this backend has no Mamba-3 rotary step");
  }
  virtual void execute_mamba3_rotary(const ssu_rotary_params& /*params*/,
                                     ssu_algorithm_t /*algorithm*/, ssu_stream_t /*stream*/) {
    fail(SSU_ERROR_INTERNAL, "a Mamba-3 rotary step ran on a backend that cannot plan it");
  }

  // Replay steps and the replay flush op (SSU_RF_FLUSH_OP in rflags), one
  // plan for both. A backend that lacks them refuses at plan time.
  virtual ssu_algorithm_t plan_replay(const ssu_replay_params& /*proto*/,
                                      ssu_algorithm_t /*requested*/) {
    fail(SSU_ERROR_NOT_SUPPORTED, "this backend has no replay step");
  }
  virtual void execute_replay(const ssu_replay_params& /*params*/, ssu_algorithm_t /*algorithm*/,
                              ssu_stream_t /*stream*/) {
    fail(SSU_ERROR_INTERNAL, "a replay step ran on a backend that cannot plan it");
  }

  // *seed += increment in stream order (device memory for CUDA, host memory
  // for the CPU, where it happens before returning).
  virtual void advance_seed(uint64_t* seed, uint64_t increment, ssu_stream_t stream) = 0;
};

// Factories. Each throws Error when the backend cannot run here.
std::unique_ptr<Backend> make_cpu_backend(int num_threads);
// Defined in src/cuda when the CUDA backend is built, else by a stub that
// throws SSU_ERROR_BACKEND_UNAVAILABLE.
std::unique_ptr<Backend> make_cuda_backend(int device_ordinal);

// Static name of an algorithm ("cpu_rows", ...; "unknown" otherwise).
const char* algorithm_name(ssu_algorithm_t algorithm);

}  // namespace ssu
