// The CPU loops for the baseline instruction set of the target.
#define SSU_CPU_NS generic
#include "cpu/kernel_impl.h"
