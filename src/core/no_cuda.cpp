// Built when the library is configured without the CUDA backend.
#include "core/backend.h"
#include "core/error.h"

namespace ssu {

std::unique_ptr<Backend> make_cuda_backend(int) {
  fail(SSU_ERROR_BACKEND_UNAVAILABLE,
       "this libssu was built without the CUDA backend (-Dcuda=disabled or no nvcc)");
}

}  // namespace ssu
