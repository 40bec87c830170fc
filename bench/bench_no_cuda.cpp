// Built when libssu is configured without the CUDA backend: ssu-bench then
// has no way to time a CUDA context and says so.
#include "bench_device.h"

namespace ssu_bench {

std::unique_ptr<BenchDevice> make_cuda_bench_device(ssu_context_t) { return nullptr; }

}  // namespace ssu_bench
