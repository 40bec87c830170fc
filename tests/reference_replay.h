// Float64 reference of the checkpointed (replay) decode, SPEC.md section 7.
//
// Written from the specification alone: it shares no code with the library.
// Per slot it keeps what the specification defines: the checkpoint ckpt[s],
// a ring of L entries (x, B and the step size delta after bias and softplus)
// and the two counters committed[s] and pending[s]; the logical state is the
// checkpoint advanced in order by ring entries 0 .. committed-1. Everything
// is float64; inputs are the values the library reads (already rounded to
// their dtypes by the caller).
//
// A replay step of one sequence is split in two so that a caller can put the
// checkpoint the library actually stored in place once the step is done (a
// 16-bit or block-scaled (int16, int8, e4m3) checkpoint is rounded when it
// is stored; later steps start from the stored values):
//   begin_step   step 1 (commit) and step 2 (flush decision and the logical
//                state to store);
//   finish_step  step 3 (outputs, from the logical state as computed: the
//                state is never rounded on the way to the outputs, like the
//                plain update's) and step 4 (append);
//   set_checkpoint  optional: the values the library stored.
// outputs_without_update gives the outputs of a step run with
// disable_state_update (nothing changes). flush_op is the flush operation.
//
// plain_update_f64 runs SPEC sections 1 and 2 (through reference.h) over a
// pool, for round trips against the plain update.
#pragma once

#include <cstdint>
#include <vector>

#include "reference.h"

namespace ssutest {

// The fixed part of a layer, every parameter expanded to per channel.
struct ReplayModel {
  int64_t H = 0, P = 0, N = 0, G = 0;
  int64_t L = 0;  // ring capacity
  bool softplus = false, has_D = false, has_dt_bias = false, has_z = false;
  std::vector<double> A;        // (H, P, N)
  std::vector<double> D;        // (H, P), when has_D
  std::vector<double> dt_bias;  // (H, P), when has_dt_bias
};

// One token of one sequence, dense, values as the library reads them.
struct ReplayToken {
  std::vector<double> x;   // (H, P)
  std::vector<double> dt;  // (H, P): the raw dt, expanded over P when per head
  std::vector<double> B;   // (G, N)
  std::vector<double> C;   // (G, N)
  std::vector<double> z;   // (H, P), empty without z
};

// What the specification keeps per slot.
struct ReplaySlotState {
  std::vector<double> ckpt;     // (H, P, N) the checkpoint's values
  int64_t committed = 0, pending = 0;
  std::vector<double> ring_x;      // (L, H, P)
  std::vector<double> ring_B;      // (L, G, N)
  std::vector<double> ring_delta;  // (L, H, P) delta after bias and softplus
  // The checkpoint advanced by the first cached_count entries (a cache:
  // entries below committed + pending never change until the next store).
  std::vector<double> cached;
  int64_t cached_count = -1;
};

// Result of steps 1 and 2 for one sequence.
struct ReplayCommit {
  bool flushed = false;        // the logical state was stored to ckpt
  std::vector<double> stored;  // (H, P, N) the logical state stored, when flushed
};

class ReplayReference {
 public:
  ReplayReference(ReplayModel model, int64_t slots, const std::vector<double>& initial_ckpt);

  const ReplayModel& model() const { return m_; }
  int64_t slots() const { return int64_t(slot_.size()); }
  const ReplaySlotState& slot(int64_t s) const { return slot_[size_t(s)]; }
  // Direct access for a warm start (counters and ring entries set by hand).
  ReplaySlotState& mutable_slot(int64_t s) {
    slot_[size_t(s)].cached_count = -1;
    return slot_[size_t(s)];
  }

  // delta = dt + dt_bias, then softplus20 when the model has softplus.
  double delta(double dt, int64_t h, int64_t p) const;
  // The logical state of slot s: ckpt advanced by ring entries 0 .. count-1
  // (count < 0: committed[s]).
  std::vector<double> logical_state(int64_t s, int64_t count = -1) const;

  // Steps 1 and 2 for slot s with a call of `tokens` tokens. accepted < 0:
  // num_accepted absent (commit everything pending). Throws std::logic_error
  // for accepted > pending (callers build valid steps only).
  ReplayCommit begin_step(int64_t s, int64_t accepted, int64_t tokens);
  // Replaces the checkpoint of s with the values the library stored.
  void set_checkpoint(int64_t s, const std::vector<double>& values);
  // Steps 3 and 4: the outputs (tokens.size(), H, P), then the append.
  // Returns the ring entry the first token went to in *first_entry.
  std::vector<double> finish_step(int64_t s, const std::vector<ReplayToken>& tokens,
                                  int64_t* first_entry);
  // The outputs of a step with disable_state_update: computed from the
  // logical state after a commit of `accepted` (< 0: all pending) tokens;
  // nothing of the slot changes.
  std::vector<double> outputs_without_update(int64_t s, int64_t accepted,
                                             const std::vector<ReplayToken>& tokens) const;
  // The outputs (tokens.size(), H, P) of `tokens` run from `state` (H, P, N).
  std::vector<double> outputs_from(const std::vector<double>& state,
                                   const std::vector<ReplayToken>& tokens) const {
    return run_tokens(state, tokens);
  }
  // The flush op for slot s: commit, store the logical state when
  // committed > 0, counters to 0.
  ReplayCommit flush_op(int64_t s, int64_t accepted);

 private:
  // Advances h (H, P, N) by one token; `delta` is (H, P).
  void advance(std::vector<double>& h, const double* x, const double* delta,
               const double* B) const;
  // The outputs (H, P) of a token for the state h already advanced by it.
  void token_output(const std::vector<double>& h, const ReplayToken& tok, double* out) const;
  std::vector<double> run_tokens(std::vector<double> h, const std::vector<ReplayToken>& tokens) const;

  ReplayModel m_;
  mutable std::vector<ReplaySlotState> slot_;
};

// SPEC sections 1 and 2 in float64 over a pool (S, H, P, N): for every entry
// i, slot slots[i] (padding when negative) is advanced by tokens[i] (in order,
// state kept in float64 between tokens) and stored back. Runs the update
// reference of reference.h (varlen form, one sequence per entry); outputs
// are discarded. `pool` is updated in place.
void plain_update_f64(const ReplayModel& model, int64_t slots, std::vector<double>& pool,
                      const std::vector<int64_t>& slot_of_entry,
                      const std::vector<std::vector<ReplayToken>>& tokens);

}  // namespace ssutest
