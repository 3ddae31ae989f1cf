// The NVIDIA driver (libcuda.so.1), loaded at run time and initialised once per process,
// and the GPUs it reports. Nothing here needs CUDA at build time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/driver_api.h"

namespace forge::cuda {

/// The driver's entry points (driver_api.h), resolved from libcuda.so.1.
struct Driver {
  cuInit_t init = nullptr;
  cuDriverGetVersion_t driver_get_version = nullptr;
  cuGetErrorName_t get_error_name = nullptr;
  cuGetErrorString_t get_error_string = nullptr;
  cuDeviceGetCount_t device_get_count = nullptr;
  cuDeviceGet_t device_get = nullptr;
  cuDeviceGetName_t device_get_name = nullptr;
  cuDeviceGetAttribute_t device_get_attribute = nullptr;
  cuDeviceTotalMem_t device_total_mem = nullptr;
  cuDevicePrimaryCtxRetain_t primary_ctx_retain = nullptr;
  cuDevicePrimaryCtxRelease_t primary_ctx_release = nullptr;
  cuCtxSetCurrent_t ctx_set_current = nullptr;
  cuModuleLoadData_t module_load_data = nullptr;
  cuModuleUnload_t module_unload = nullptr;
  cuModuleGetFunction_t module_get_function = nullptr;
  cuMemAlloc_t mem_alloc = nullptr;
  cuMemFree_t mem_free = nullptr;
  cuLaunchKernel_t launch_kernel = nullptr;
  cuLaunchKernelEx_t launch_kernel_ex = nullptr;  // null in drivers older than CUDA 11.8
  cuMemGetInfo_t mem_get_info = nullptr;
  cuMemcpyHtoDAsync_t memcpy_htod_async = nullptr;
  cuMemcpyDtoHAsync_t memcpy_dtoh_async = nullptr;
  cuMemcpyDtoDAsync_t memcpy_dtod_async = nullptr;
  cuMemsetD8Async_t memset_d8_async = nullptr;
  cuMemAllocHost_t mem_alloc_host = nullptr;
  cuMemFreeHost_t mem_free_host = nullptr;
  cuStreamCreate_t stream_create = nullptr;
  cuStreamDestroy_t stream_destroy = nullptr;
  cuStreamSynchronize_t stream_synchronize = nullptr;
  cuEventCreate_t event_create = nullptr;
  cuEventRecord_t event_record = nullptr;
  cuStreamWaitEvent_t stream_wait_event = nullptr;
  cuEventSynchronize_t event_synchronize = nullptr;
  cuEventDestroy_t event_destroy = nullptr;
  cuEventElapsedTime_t event_elapsed_time = nullptr;
  cuStreamBeginCapture_t stream_begin_capture = nullptr;
  cuStreamEndCapture_t stream_end_capture = nullptr;
  cuGraphInstantiate_t graph_instantiate = nullptr;
  cuGraphLaunch_t graph_launch = nullptr;
  cuGraphExecDestroy_t graph_exec_destroy = nullptr;
  cuGraphDestroy_t graph_destroy = nullptr;
  cuFuncSetAttribute_t func_set_attribute = nullptr;
  int version = 0;  // cuDriverGetVersion: 1000 * major + 10 * minor (13000 is CUDA 13.0)
};

/// The loaded and initialised driver. Throws Error(Device) naming the cause: no
/// libcuda.so.1 (no NVIDIA driver), a symbol missing, or cuInit failing (e.g. no device).
/// The first call decides; later calls return the same driver or throw the same error.
const Driver& driver();

/// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)": the driver's own name and
/// text where it is loaded, else the name of a value forge knows, else "CUDA error N".
std::string result_text(CUresult r);

/// Throws Error(Backend) "cuda: <call>: <result_text>" unless r is CUDA_SUCCESS.
void check(CUresult r, const char* call);

/// One GPU as the driver reports it.
struct GpuInfo {
  int ordinal = 0;
  std::string name;
  uint64_t memory_bytes = 0;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
};

/// The GPUs, or none with the reason in `why_none` ("" when there are GPUs). Never throws:
/// `forge devices` lists what there is.
struct GpuList {
  std::vector<GpuInfo> gpus;
  std::string why_none;
};
GpuList list_gpus();

}  // namespace forge::cuda
