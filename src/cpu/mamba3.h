// The CPU loops of the Mamba-3 decode step and rotary step.
#pragma once

#include "cpu/thread_pool.h"
#include "ssu_mamba3_params.h"

namespace ssu {
namespace cpu {

// Both check every slot index first (Error(SSU_ERROR_INDEX_OUT_OF_RANGE),
// nothing written), then run over (sequence, head) items on `pool`.
void mamba3_step(const ssu_mamba3_params& p, ThreadPool& pool);
void mamba3_rotary(const ssu_rotary_params& p, ThreadPool& pool);

}  // namespace cpu
}  // namespace ssu
