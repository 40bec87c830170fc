// Caller descriptors -> validated, normalized Mamba-3 problems
// (ssu_mamba3_params, ssu_rotary_params; see kernels/ssu_mamba3_params.h).
#pragma once

#include "ssu.h"
#include "ssu_mamba3_params.h"

namespace ssu {

// Validates every argument of a Mamba-3 step (shapes, dtypes, strides,
// flags; no tensor data is read) and returns the normalized problem.
// Throws Error naming the offending argument.
ssu_mamba3_params normalize_mamba3_step(const ssu_mamba3_step_args_t* args);
// Throws Error(SSU_ERROR_PLAN_MISMATCH) unless `p` has the fixed part of
// `plan`: everything but pointers, strides, batch, pool size and pad id.
void check_fits_plan(const ssu_mamba3_params& plan, const ssu_mamba3_params& p);

ssu_rotary_params normalize_mamba3_rotary(const ssu_mamba3_rotary_args_t* args);
void check_fits_plan(const ssu_rotary_params& plan, const ssu_rotary_params& p);

}  // namespace ssu
