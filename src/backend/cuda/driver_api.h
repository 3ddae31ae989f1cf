// The part of the CUDA driver API (cuda.h) that forge calls, declared here so that forge
// builds without CUDA's headers: opaque handles, int enums and the exported symbols'
// signatures. Values are NVIDIA's (cuda.h of CUDA 12.6 and 13.0; docs/CUDA_PLAN.md). The
// symbols are looked up by their exported names, which carry a version suffix where cuda.h
// maps a name to a newer entry point (cuDeviceTotalMem -> cuDeviceTotalMem_v2).
#pragma once

#include <cstddef>

namespace forge::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;

// CUresult values named in forge's messages (cuGetErrorName names the rest).
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803;
inline constexpr CUresult CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804;

// CUdevice_attribute values.
inline constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
inline constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
inline constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

// Flags and attributes.
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 2;
inline constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
// CUstreamCaptureMode: relaxed lets the capturing thread allocate (a cache miss mid-step).
inline constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;

// Exported entry points (name in the comment where it differs from the type's).
using cuInit_t = CUresult (*)(unsigned flags);
using cuDriverGetVersion_t = CUresult (*)(int* version);
using cuGetErrorName_t = CUresult (*)(CUresult, const char** name);
using cuGetErrorString_t = CUresult (*)(CUresult, const char** text);
using cuDeviceGetCount_t = CUresult (*)(int* count);
using cuDeviceGet_t = CUresult (*)(CUdevice* device, int ordinal);
using cuDeviceGetName_t = CUresult (*)(char* name, int length, CUdevice);
using cuDeviceGetAttribute_t = CUresult (*)(int* value, int attribute, CUdevice);
using cuDeviceTotalMem_t = CUresult (*)(size_t* bytes, CUdevice);  // cuDeviceTotalMem_v2
using cuDevicePrimaryCtxRetain_t = CUresult (*)(CUcontext*, CUdevice);
using cuDevicePrimaryCtxRelease_t = CUresult (*)(CUdevice);  // cuDevicePrimaryCtxRelease_v2
using cuCtxSetCurrent_t = CUresult (*)(CUcontext);
using cuModuleLoadData_t = CUresult (*)(CUmodule*, const void* image);
using cuModuleUnload_t = CUresult (*)(CUmodule);
using cuModuleGetFunction_t = CUresult (*)(CUfunction*, CUmodule, const char* name);
using cuMemAlloc_t = CUresult (*)(CUdeviceptr*, size_t bytes);     // cuMemAlloc_v2
using cuMemFree_t = CUresult (*)(CUdeviceptr);                     // cuMemFree_v2
using cuMemGetInfo_t = CUresult (*)(size_t* free, size_t* total);  // cuMemGetInfo_v2
using cuMemcpyHtoDAsync_t = CUresult (*)(CUdeviceptr, const void*, size_t,
                                         CUstream);  // cuMemcpyHtoDAsync_v2
using cuMemcpyDtoHAsync_t = CUresult (*)(void*, CUdeviceptr, size_t,
                                         CUstream);  // cuMemcpyDtoHAsync_v2
using cuMemcpyDtoDAsync_t = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t,
                                         CUstream);  // cuMemcpyDtoDAsync_v2
using cuMemsetD8Async_t = CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream);
using cuMemAllocHost_t = CUresult (*)(void** host, size_t bytes);  // cuMemAllocHost_v2
using cuMemFreeHost_t = CUresult (*)(void* host);
using cuStreamCreate_t = CUresult (*)(CUstream*, unsigned flags);
using cuStreamDestroy_t = CUresult (*)(CUstream);  // cuStreamDestroy_v2
using cuStreamSynchronize_t = CUresult (*)(CUstream);
using cuEventCreate_t = CUresult (*)(CUevent*, unsigned flags);
using cuEventRecord_t = CUresult (*)(CUevent, CUstream);
using cuStreamWaitEvent_t = CUresult (*)(CUstream, CUevent, unsigned flags);
using cuEventSynchronize_t = CUresult (*)(CUevent);
using cuEventDestroy_t = CUresult (*)(CUevent);                   // cuEventDestroy_v2
using cuStreamBeginCapture_t = CUresult (*)(CUstream, int mode);  // cuStreamBeginCapture_v2
using cuStreamEndCapture_t = CUresult (*)(CUstream, CUgraph*);
using cuGraphInstantiate_t = CUresult (*)(CUgraphExec*, CUgraph,
                                          unsigned long long flags);  // ...WithFlags
using cuGraphLaunch_t = CUresult (*)(CUgraphExec, CUstream);
using cuGraphExecDestroy_t = CUresult (*)(CUgraphExec);
using cuGraphDestroy_t = CUresult (*)(CUgraph);
using cuEventElapsedTime_t = CUresult (*)(float* ms, CUevent start, CUevent end);
using cuFuncSetAttribute_t = CUresult (*)(CUfunction, int attribute, int value);
using cuLaunchKernel_t = CUresult (*)(CUfunction, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                      unsigned block_x, unsigned block_y, unsigned block_z,
                                      unsigned shared_bytes, CUstream, void** params, void** extra);

// cuLaunchKernelEx (CUDA 11.8+) and its configuration, laid out as cuda.h's CUlaunchConfig
// and CUlaunchAttribute (an id, padding to 8 bytes, a 64-byte value union). forge sets one
// attribute: programmatic stream serialization, which lets the kernel start while the one
// before it on the stream finishes (it waits with griddepcontrol.wait before reading what
// that one wrote).
inline constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
struct CUlaunchAttribute {
  int id = 0;
  char pad[4] = {};
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
  } value = {};
};
static_assert(sizeof(CUlaunchAttribute) == 72, "cuda.h's CUlaunchAttribute is 72 bytes");
struct CUlaunchConfig {
  unsigned grid_x = 1, grid_y = 1, grid_z = 1, block_x = 1, block_y = 1, block_z = 1;
  unsigned shared_bytes = 0;
  CUstream stream = nullptr;
  CUlaunchAttribute* attrs = nullptr;
  unsigned num_attrs = 0;
};
using cuLaunchKernelEx_t = CUresult (*)(const CUlaunchConfig*, CUfunction, void** params,
                                        void** extra);

}  // namespace forge::cuda
