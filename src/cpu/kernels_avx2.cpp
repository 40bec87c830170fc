// The CPU loops for x86-64 with AVX2, FMA and F16C (selected at run time).
#define SSU_CPU_NS avx2
#include "cpu/kernel_impl.h"
