// The CUDA driver API as a table of function pointers, loaded at run time
// with dlopen("libcuda.so.1") and resolved through cuGetProcAddress, so that
// neither libssu nor its users link against libcuda. Header-only: the
// library, the GPU tests and ssu-bench each keep their own table.
//
// The few driver types and constants used are declared here (their values
// are part of the driver's stable ABI), so building needs no CUDA header.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ssu_cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using cuuint64_t = uint64_t;
using CUdevice_attribute = int;
using CUfunction_attribute = int;
using CUjit_option = int;
using CUlibraryOption = int;
using CUstreamCaptureMode = int;
using CUdriverProcAddressQueryResult = int;
struct CUctx_st;
struct CUlib_st;
struct CUkern_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;
using CUcontext = CUctx_st*;
using CUlibrary = CUlib_st*;
using CUkernel = CUkern_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUgraph = CUgraph_st*;
using CUgraphExec = CUgraphExec_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81;
constexpr CUdevice_attribute CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr CUfunction_attribute CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9;
constexpr int CU_SHAREDMEM_CARVEOUT_MAX_SHARED = 100;
constexpr cuuint64_t CU_GET_PROC_ADDRESS_DEFAULT = 0;
constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SUCCESS = 0;
constexpr CUdriverProcAddressQueryResult CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1;
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr unsigned CU_EVENT_DEFAULT = 0;
constexpr CUstreamCaptureMode CU_STREAM_CAPTURE_MODE_GLOBAL = 0;

// cuLaunchKernelEx's configuration (cuda.h's layout), for programmatic
// dependent launch: attribute 6, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION.
constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    unsigned programmaticStreamSerializationAllowed;
  } value;
};
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned numAttrs;
};

// X(member, "driver symbol", minimum driver version, required, signature)
// The version is the one passed to cuGetProcAddress: it selects the ABI the
// signature below describes (e.g. cuCtxPushCurrent resolves to its _v2).
#define SSU_CUDA_DRIVER_ENTRIES(X)                                                        \
  X(GetErrorName, "cuGetErrorName", 12000, true, CUresult (*)(CUresult, const char**))    \
  X(GetErrorString, "cuGetErrorString", 12000, true, CUresult (*)(CUresult, const char**)) \
  X(Init, "cuInit", 12000, true, CUresult (*)(unsigned))                                  \
  X(DriverGetVersion, "cuDriverGetVersion", 12000, true, CUresult (*)(int*))              \
  X(DeviceGetCount, "cuDeviceGetCount", 12000, true, CUresult (*)(int*))                  \
  X(DeviceGet, "cuDeviceGet", 12000, true, CUresult (*)(CUdevice*, int))                  \
  X(DeviceGetName, "cuDeviceGetName", 12000, true, CUresult (*)(char*, int, CUdevice))    \
  X(DeviceGetAttribute, "cuDeviceGetAttribute", 12000, true,                              \
    CUresult (*)(int*, CUdevice_attribute, CUdevice))                                     \
  X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 12000, true,                      \
    CUresult (*)(CUcontext*, CUdevice))                                                   \
  X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 12000, true,                    \
    CUresult (*)(CUdevice))                                                               \
  X(CtxGetCurrent, "cuCtxGetCurrent", 12000, true, CUresult (*)(CUcontext*))              \
  X(CtxPushCurrent, "cuCtxPushCurrent", 12000, true, CUresult (*)(CUcontext))             \
  X(CtxPopCurrent, "cuCtxPopCurrent", 12000, true, CUresult (*)(CUcontext*))              \
  X(CtxSynchronize, "cuCtxSynchronize", 12000, true, CUresult (*)(void))                  \
  X(LibraryLoadData, "cuLibraryLoadData", 12000, true,                                    \
    CUresult (*)(CUlibrary*, const void*, CUjit_option*, void**, unsigned,                \
                 CUlibraryOption*, void**, unsigned))                                     \
  X(LibraryUnload, "cuLibraryUnload", 12000, true, CUresult (*)(CUlibrary))               \
  X(LibraryGetKernel, "cuLibraryGetKernel", 12000, true,                                  \
    CUresult (*)(CUkernel*, CUlibrary, const char*))                                      \
  X(KernelGetFunction, "cuKernelGetFunction", 12000, true,                                \
    CUresult (*)(CUfunction*, CUkernel))                                                  \
  X(FuncGetAttribute, "cuFuncGetAttribute", 12000, true,                                  \
    CUresult (*)(int*, CUfunction_attribute, CUfunction))                                 \
  X(FuncSetAttribute, "cuFuncSetAttribute", 12000, true,                                \
    CUresult (*)(CUfunction, CUfunction_attribute, int))                                  \
  X(FuncLoad, "cuFuncLoad", 12040, false, CUresult (*)(CUfunction))                       \
  X(LaunchKernel, "cuLaunchKernel", 12000, true,                                          \
    CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
                 unsigned, CUstream, void**, void**))                                     \
  X(LaunchKernelEx, "cuLaunchKernelEx", 12000, false,                                     \
    CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**))                      \
  /* memory, streams, events and graphs: used by tests and ssu-bench */                  \
  X(MemAlloc, "cuMemAlloc", 12000, true, CUresult (*)(CUdeviceptr*, size_t))              \
  X(MemFree, "cuMemFree", 12000, true, CUresult (*)(CUdeviceptr))                         \
  X(MemcpyHtoD, "cuMemcpyHtoD", 12000, true,                                              \
    CUresult (*)(CUdeviceptr, const void*, size_t))                                       \
  X(MemcpyDtoH, "cuMemcpyDtoH", 12000, true, CUresult (*)(void*, CUdeviceptr, size_t))    \
  X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync", 12000, true,                                    \
    CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))                             \
  X(MemsetD8, "cuMemsetD8", 12000, true, CUresult (*)(CUdeviceptr, unsigned char, size_t)) \
  X(StreamCreate, "cuStreamCreate", 12000, true, CUresult (*)(CUstream*, unsigned))       \
  X(StreamDestroy, "cuStreamDestroy", 12000, true, CUresult (*)(CUstream))                \
  X(StreamSynchronize, "cuStreamSynchronize", 12000, true, CUresult (*)(CUstream))        \
  X(StreamBeginCapture, "cuStreamBeginCapture", 12000, true,                              \
    CUresult (*)(CUstream, CUstreamCaptureMode))                                          \
  X(StreamEndCapture, "cuStreamEndCapture", 12000, true, CUresult (*)(CUstream, CUgraph*)) \
  X(GraphInstantiate, "cuGraphInstantiateWithFlags", 12000, true,                         \
    CUresult (*)(CUgraphExec*, CUgraph, unsigned long long))                              \
  X(GraphLaunch, "cuGraphLaunch", 12000, true, CUresult (*)(CUgraphExec, CUstream))       \
  X(GraphExecDestroy, "cuGraphExecDestroy", 12000, true, CUresult (*)(CUgraphExec))       \
  X(GraphDestroy, "cuGraphDestroy", 12000, true, CUresult (*)(CUgraph))                   \
  X(EventCreate, "cuEventCreate", 12000, true, CUresult (*)(CUevent*, unsigned))          \
  X(EventDestroy, "cuEventDestroy", 12000, true, CUresult (*)(CUevent))                   \
  X(EventRecord, "cuEventRecord", 12000, true, CUresult (*)(CUevent, CUstream))           \
  X(EventSynchronize, "cuEventSynchronize", 12000, true, CUresult (*)(CUevent))           \
  X(EventElapsedTime, "cuEventElapsedTime", 12000, true,                                  \
    CUresult (*)(float*, CUevent, CUevent))

template <typename T>
using fn_t = T;

struct Driver {
#define SSU_CUDA_DRIVER_MEMBER(m, sym, ver, req, sig) fn_t<sig> m = nullptr;
  SSU_CUDA_DRIVER_ENTRIES(SSU_CUDA_DRIVER_MEMBER)
#undef SSU_CUDA_DRIVER_MEMBER
  void* handle = nullptr;
  int version = 0;  // cuDriverGetVersion, e.g. 13000
};

enum class LoadError { none, not_found, too_old, init_failed };

// Opens libcuda.so.1 and resolves every entry. On failure returns the kind
// of failure and sets *message; `init_result` gets cuInit's result when that
// is what failed. The handle stays open for the life of the process (the
// driver cannot be unloaded safely once initialized).
inline LoadError load_driver(Driver& d, std::string* message, CUresult* init_result) {
  d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d.handle) {
    const char* e = dlerror();
    *message = std::string("cannot load the CUDA driver library libcuda.so.1 (") +
               (e ? e : "unknown reason") +
               "); install an NVIDIA driver or use the CPU backend";
    return LoadError::not_found;
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t,
                               CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(d.handle, "cuGetProcAddress_v2"));
  if (!get_proc) {
    *message =
        "the CUDA driver is too old: libcuda.so.1 has no cuGetProcAddress_v2 (driver >= 12.0 "
        "needed)";
    return LoadError::too_old;
  }
#define SSU_CUDA_DRIVER_RESOLVE(m, sym, ver, req, sig)                                     \
  {                                                                                        \
    void* fn = nullptr;                                                                    \
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;               \
    if (get_proc(sym, &fn, ver, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS &&        \
        q == CU_GET_PROC_ADDRESS_SUCCESS && fn) {                                          \
      d.m = reinterpret_cast<sig>(fn);                                                     \
    } else if (req) {                                                                      \
      *message = std::string("the CUDA driver is too old: it lacks ") + sym +              \
                 " (driver >= " #ver " needed)";                                           \
      return LoadError::too_old;                                                           \
    }                                                                                      \
  }
  SSU_CUDA_DRIVER_ENTRIES(SSU_CUDA_DRIVER_RESOLVE)
#undef SSU_CUDA_DRIVER_RESOLVE
  const CUresult r = d.Init(0);
  if (r != CUDA_SUCCESS) {
    *init_result = r;
    const char* name = nullptr;
    if (d.GetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown error";
    *message = std::string("cuInit failed: ") + name;
    return LoadError::init_failed;
  }
  d.DriverGetVersion(&d.version);
  return LoadError::none;
}

// "cuFoo failed: CUDA_ERROR_BAR (description)".
inline std::string describe(const Driver& d, const char* call, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (!d.GetErrorName || d.GetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown";
  if (!d.GetErrorString || d.GetErrorString(r, &text) != CUDA_SUCCESS || !text) text = "";
  std::string s = std::string(call) + " failed: " + name;
  if (*text) s += std::string(" (") + text + ")";
  return s;
}

}  // namespace ssu_cuda
