// Caller descriptors -> validated, normalized problem (ssu_update_params).
#pragma once

#include "ssu.h"
#include "ssu_update_params.h"

namespace ssu {

// Reads a caller's pool descriptor (min(struct_size, known size); fields
// past the caller's struct_size are zero) and checks struct_size and
// reserved0. Throws Error.
ssu_state_pool_t read_state_pool(const ssu_state_pool_t* pool);

// Validates every argument of an update call (shapes, dtypes, strides,
// flags, option combinations; no tensor data is read) and returns the
// normalized problem. Throws Error naming the offending argument.
ssu_update_params normalize_update(const ssu_update_args_t* args);

// Throws Error(SSU_ERROR_PLAN_MISMATCH) unless `p` has the fixed part of
// `plan` (see ssu_plan_create_update): everything but pointers, strides,
// batch, packed token count, pool size, intermediate count and pad id.
void check_fits_plan(const ssu_update_params& plan, const ssu_update_params& p);

}  // namespace ssu
