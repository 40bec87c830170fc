// ssu-bench's own CUDA kernel: the row gather/scatter an engine runs around a
// dense step (copy the batch's rows of a slot pool into a dense buffer, and
// back). Compiled into a fatbin embedded in ssu-bench and launched through
// the driver API; not part of libssu.
#include <stdint.h>

#include "../kernels/ssu_cuda_launch.h"

// Row i (blockIdx.y) of the copy: dst row (dst_index ? dst_index[i] : i) <-
// src row (src_index ? src_index[i] : i), rows row_bytes apart, row_bytes a
// multiple of 16. The blocks of one row (gridDim.x) split it into 16-byte
// words; each thread loads up to four words before storing them.
extern "C" __global__ void __launch_bounds__(256)
    ssu_bench_copy_rows(char* __restrict__ dst, const int32_t* __restrict__ dst_index,
                        const char* __restrict__ src, const int32_t* __restrict__ src_index,
                        unsigned long long row_bytes) {
  const long long i = blockIdx.y;
  const long long d = dst_index ? dst_index[i] : i;
  const long long s = src_index ? src_index[i] : i;
  const uint4* __restrict__ from = reinterpret_cast<const uint4*>(src + s * row_bytes);
  uint4* __restrict__ to = reinterpret_cast<uint4*>(dst + d * row_bytes);
  const unsigned long long n = row_bytes / 16;
  const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; k + 3 * step < n; k += 4 * step) {
    const uint4 a = from[k], b = from[k + step], c = from[k + 2 * step], e = from[k + 3 * step];
    to[k] = a;
    to[k + step] = b;
    to[k + 2 * step] = c;
    to[k + 3 * step] = e;
  }
  for (; k < n; k += step) to[k] = from[k];
}

// Does nothing with a parameter block the size of the pipelined update
// kernels' (ssu_cuda_pipe_launch): ssu-bench times its cuLaunchKernel as the
// floor under the host time of one execute call.
extern "C" __global__ void ssu_bench_empty(const __grid_constant__ ssu_cuda_pipe_launch L) {
  if (L.items < 0) __trap();
}
// The same with an 8-byte parameter block: what the parameter size costs.
extern "C" __global__ void ssu_bench_empty_small(long long v) {
  if (v < 0) __trap();
}
