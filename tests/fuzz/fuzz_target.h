// The fuzz target of tests/fuzz: LLVMFuzzerTestOneInput decodes its bytes
// into one call of the public API (an update, a Mamba-3 step or rotary step,
// or a replay decode loop with its flush op) on the CPU backend, with or
// without a fault: a bad descriptor, a bad struct, a bad slot index or
// length, a bad handle. It aborts with a reproducer description when the
// library breaks its contract:
//  - a call that succeeds must leave every buffer equal to the float64
//    reference within the tolerances of SPEC.md section 6 (the check of the
//    test harnesses, which also requires every byte the call may not write
//    to be unchanged);
//  - a call that fails must return a status with a non-empty message, leave
//    the out-plan untouched and every buffer byte-identical to before;
//  - a call whose arguments break a documented rule must fail, and a call
//    that breaks none must succeed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace ssufuzz {

// What the inputs run so far ended in.
struct Stats {
  int64_t inputs = 0;
  int64_t succeeded = 0;      // ran and matched the reference
  int64_t plan_only = 0;      // plan creation only (descriptors no real buffer fits)
  int64_t not_applicable = 0; // a replay fault that had no live sequence to hit
  std::map<int32_t, int64_t> refused;  // status -> count
  std::map<int, int64_t> by_operation; // Operation -> count
  // The update's and replay's inputs by state dtype (a new format shows
  // whether it is drawn and how often it gets as far as the reference).
  struct PerState {
    int64_t inputs = 0;
    int64_t succeeded = 0;
  };
  std::map<int32_t, PerState> by_state;  // ssu_dtype_t -> counts
};
const Stats& stats();

// Operation names for the summary (index = the operation's number).
const char* operation_name(int operation);
constexpr int kOperations = 5;

// Prints every input's description before it runs (for reproducing).
void set_verbose(bool verbose);

}  // namespace ssufuzz
