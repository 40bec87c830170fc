// Replay (checkpointed decode) descriptors -> validated, normalized problem.
#pragma once

#include "ssu.h"
#include "ssu_replay_params.h"

namespace ssu {

// Validates every argument of a replay step (the update's checks for the
// per-token tensors and the pool, then the ring, its counters, num_accepted
// and T <= L; no tensor data is read). Throws Error naming the argument.
ssu_replay_params normalize_replay(const ssu_replay_args_t* args);

// Validates a flush call against the replay plan `plan` (pool, ring and A
// must have the plan's shapes, dtypes and layouts) and returns the flush
// problem: u.batch = K slots, u.ntokens = 0, SSU_RF_FLUSH_OP set.
ssu_replay_params normalize_replay_flush(const ssu_replay_flush_args_t* args,
                                         const ssu_replay_params& plan);

// Throws Error(SSU_ERROR_PLAN_MISMATCH) unless `p` has the fixed part of
// `plan`: the update's (check_fits_plan) plus L, the dt ring's form and the
// presence and dtype of num_accepted.
void check_fits_replay_plan(const ssu_replay_params& plan, const ssu_replay_params& p);

}  // namespace ssu
