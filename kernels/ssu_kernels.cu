// The one translation unit nvcc compiles into libssu's fatbin: every kernel
// of the library, each an extern "C" entry point with a stable name.
//
// Compiled with -fmad=false: a multiply followed by an add rounds twice
// unless the source asks for a fused multiply-add (fmaf), exactly as the
// CPU backend does (-ffp-contract=off), so both backends store the same
// state bits (see ssu_math.h).
#include "ssu_update.cu"
#include "ssu_pipelined.cu"
#include "ssu_direct.cu"
#include "ssu_mamba1.cu"
#include "ssu_mamba3.cu"
#include "ssu_mamba3_pipe.cu"
#include "ssu_replay.cu"

// *seed += increment, in stream order (one thread): lets a captured CUDA
// graph draw fresh stochastic-rounding bits on every replay.
extern "C" __global__ void ssu_advance_seed(unsigned long long* seed, unsigned long long increment) {
  *seed += increment;
}
