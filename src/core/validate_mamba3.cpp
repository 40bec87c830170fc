#include "core/validate_mamba3.h"

#include <cstring>

#include "core/error.h"
#include "core/validate_update.h"

namespace ssu {

ssu_mamba3_params normalize_mamba3_step(const ssu_mamba3_step_args_t* args) {
  if (!args) fail(SSU_ERROR_NULL_POINTER, "args is NULL");
  fail(SSU_ERROR_NOT_SUPPORTED, "the Mamba-3 step is not implemented yet");
}

void check_fits_plan(const ssu_mamba3_params&, const ssu_mamba3_params&) {}

ssu_rotary_params normalize_mamba3_rotary(const ssu_mamba3_rotary_args_t* args) {
  if (!args) fail(SSU_ERROR_NULL_POINTER, "args is NULL");
  fail(SSU_ERROR_NOT_SUPPORTED, "the Mamba-3 rotary step is not implemented yet");
}

void check_fits_plan(const ssu_rotary_params&, const ssu_rotary_params&) {}

}  // namespace ssu
