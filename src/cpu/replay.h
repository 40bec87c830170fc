// The CPU loops of the replay (checkpointed decode) step and flush op.
#pragma once

#include "cpu/thread_pool.h"
#include "ssu_replay_params.h"

namespace ssu {
namespace cpu {

// Runs a replay step, or the flush op when SSU_RF_FLUSH_OP is set. Checks
// the ring counters and num_accepted of every sequence first
// (Error(SSU_ERROR_INVALID_ARGUMENT), nothing written); slot ranges and
// varlen lengths are the caller's to check (they are the update's checks).
// Then runs over (sequence, head, row block) items on `pool`.
void replay(const ssu_replay_params& p, ThreadPool& pool);

}  // namespace cpu
}  // namespace ssu
