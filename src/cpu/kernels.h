#pragma once

#include <cstdint>

#include "ssu_update_params.h"

namespace ssu {
namespace cpu {

// Runs work items [begin, end) of an update (see kernel_impl.h).
using UpdateItemsFn = void (*)(const ssu_update_params& p, int64_t rows_per_item, int64_t begin,
                               int64_t end);
namespace generic {
void update_items(const ssu_update_params& p, int64_t rows_per_item, int64_t begin, int64_t end);
}
namespace avx2 {
void update_items(const ssu_update_params& p, int64_t rows_per_item, int64_t begin, int64_t end);
}

}  // namespace cpu
}  // namespace ssu
