#include "backend/cuda/driver.h"

#include <exception>
#include <memory>
#include <string>

#include "backend/cuda/shared_library.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {

// The driver, or why there is none: decided once, on first use.
struct Loaded {
  std::unique_ptr<SharedLibrary> library;  // kept open for the process's life
  Driver api;
  std::string error;
};

Loaded load() {
  Loaded out;
  try {
    // Never the unversioned libcuda.so: in a toolkit that is a stub for linking.
    out.library = std::make_unique<SharedLibrary>(
        SharedLibrary::open_first({"libcuda.so.1"}, "the NVIDIA driver (libcuda.so.1)"));
    const SharedLibrary& lib = *out.library;
    Driver& d = out.api;
    d.init = lib.get<cuInit_t>("cuInit");
    d.driver_get_version = lib.get<cuDriverGetVersion_t>("cuDriverGetVersion");
    d.get_error_name = lib.get<cuGetErrorName_t>("cuGetErrorName");
    d.get_error_string = lib.get<cuGetErrorString_t>("cuGetErrorString");
    d.device_get_count = lib.get<cuDeviceGetCount_t>("cuDeviceGetCount");
    d.device_get = lib.get<cuDeviceGet_t>("cuDeviceGet");
    d.device_get_name = lib.get<cuDeviceGetName_t>("cuDeviceGetName");
    d.device_get_attribute = lib.get<cuDeviceGetAttribute_t>("cuDeviceGetAttribute");
    d.device_total_mem = lib.get<cuDeviceTotalMem_t>("cuDeviceTotalMem_v2");
    d.primary_ctx_retain = lib.get<cuDevicePrimaryCtxRetain_t>("cuDevicePrimaryCtxRetain");
    d.primary_ctx_release = lib.get<cuDevicePrimaryCtxRelease_t>("cuDevicePrimaryCtxRelease_v2");
    d.ctx_set_current = lib.get<cuCtxSetCurrent_t>("cuCtxSetCurrent");
    d.module_load_data = lib.get<cuModuleLoadData_t>("cuModuleLoadData");
    d.module_unload = lib.get<cuModuleUnload_t>("cuModuleUnload");
    d.module_get_function = lib.get<cuModuleGetFunction_t>("cuModuleGetFunction");
    d.mem_alloc = lib.get<cuMemAlloc_t>("cuMemAlloc_v2");
    d.mem_free = lib.get<cuMemFree_t>("cuMemFree_v2");
    d.launch_kernel = lib.get<cuLaunchKernel_t>("cuLaunchKernel");
    d.launch_kernel_ex = reinterpret_cast<cuLaunchKernelEx_t>(lib.find("cuLaunchKernelEx"));
    d.mem_get_info = lib.get<cuMemGetInfo_t>("cuMemGetInfo_v2");
    d.memcpy_htod_async = lib.get<cuMemcpyHtoDAsync_t>("cuMemcpyHtoDAsync_v2");
    d.memcpy_dtoh_async = lib.get<cuMemcpyDtoHAsync_t>("cuMemcpyDtoHAsync_v2");
    d.memcpy_dtod_async = lib.get<cuMemcpyDtoDAsync_t>("cuMemcpyDtoDAsync_v2");
    d.memset_d8_async = lib.get<cuMemsetD8Async_t>("cuMemsetD8Async");
    d.mem_alloc_host = lib.get<cuMemAllocHost_t>("cuMemAllocHost_v2");
    d.mem_free_host = lib.get<cuMemFreeHost_t>("cuMemFreeHost");
    d.stream_create = lib.get<cuStreamCreate_t>("cuStreamCreate");
    d.stream_destroy = lib.get<cuStreamDestroy_t>("cuStreamDestroy_v2");
    d.stream_synchronize = lib.get<cuStreamSynchronize_t>("cuStreamSynchronize");
    d.event_create = lib.get<cuEventCreate_t>("cuEventCreate");
    d.event_record = lib.get<cuEventRecord_t>("cuEventRecord");
    d.stream_wait_event = lib.get<cuStreamWaitEvent_t>("cuStreamWaitEvent");
    d.event_synchronize = lib.get<cuEventSynchronize_t>("cuEventSynchronize");
    d.event_destroy = lib.get<cuEventDestroy_t>("cuEventDestroy_v2");
    // _v2 since CUDA 12.8 (the same signature); older drivers have only the first.
    d.event_elapsed_time =
        reinterpret_cast<cuEventElapsedTime_t>(lib.find("cuEventElapsedTime_v2"));
    if (!d.event_elapsed_time)
      d.event_elapsed_time = lib.get<cuEventElapsedTime_t>("cuEventElapsedTime");
    d.func_set_attribute = lib.get<cuFuncSetAttribute_t>("cuFuncSetAttribute");
    d.stream_begin_capture = lib.get<cuStreamBeginCapture_t>("cuStreamBeginCapture_v2");
    d.stream_end_capture = lib.get<cuStreamEndCapture_t>("cuStreamEndCapture");
    d.graph_instantiate = lib.get<cuGraphInstantiate_t>("cuGraphInstantiateWithFlags");
    d.graph_launch = lib.get<cuGraphLaunch_t>("cuGraphLaunch");
    d.graph_exec_destroy = lib.get<cuGraphExecDestroy_t>("cuGraphExecDestroy");
    d.graph_destroy = lib.get<cuGraphDestroy_t>("cuGraphDestroy");
    const CUresult r = d.init(0);
    if (r != CUDA_SUCCESS) {
      std::string text = "CUDA error " + std::to_string(r);
      const char* name = nullptr;
      const char* what = nullptr;
      if (d.get_error_name(r, &name) == CUDA_SUCCESS && name) text = name;
      if (d.get_error_string(r, &what) == CUDA_SUCCESS && what)
        text += std::string(" (") + what + ")";
      throw Error(ErrorKind::Device, "the NVIDIA driver did not start: cuInit: " + text);
    }
    if (d.driver_get_version(&d.version) != CUDA_SUCCESS) d.version = 0;
  } catch (const Error& e) {
    out.error = e.what();
    out.library.reset();
  }
  return out;
}

const Loaded& loaded() {
  // Never destroyed: the driver stays loaded until exit (its threads and allocations outlive
  // static destructors).
  static const Loaded& l = *new Loaded(load());
  return l;
}

const char* known_name(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    default: return nullptr;
  }
}

}  // namespace

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.library) throw Error(ErrorKind::Device, "cuda: " + l.error);
  return l.api;
}

std::string result_text(CUresult r) {
  const Loaded& l = loaded();
  if (l.library) {
    const char* name = nullptr;
    const char* what = nullptr;
    if (l.api.get_error_name(r, &name) == CUDA_SUCCESS && name) {
      std::string text = name;
      if (l.api.get_error_string(r, &what) == CUDA_SUCCESS && what)
        text += std::string(" (") + what + ")";
      return text;
    }
  }
  if (const char* name = known_name(r)) return name;
  return "CUDA error " + std::to_string(r);
}

void check(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS)
    throw Error(ErrorKind::Backend, std::string("cuda: ") + call + ": " + result_text(r));
}

GpuList list_gpus() {
  GpuList out;
  try {
    const Driver& d = driver();
    int count = 0;
    check(d.device_get_count(&count), "cuDeviceGetCount");
    for (int i = 0; i < count; ++i) {
      CUdevice dev = 0;
      check(d.device_get(&dev, i), "cuDeviceGet");
      GpuInfo g;
      g.ordinal = i;
      char name[256] = {};
      check(d.device_get_name(name, sizeof name - 1, dev), "cuDeviceGetName");
      g.name = name;
      size_t bytes = 0;
      check(d.device_total_mem(&bytes, dev), "cuDeviceTotalMem_v2");
      g.memory_bytes = bytes;
      check(d.device_get_attribute(&g.compute_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                   dev),
            "cuDeviceGetAttribute");
      check(d.device_get_attribute(&g.compute_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                   dev),
            "cuDeviceGetAttribute");
      check(
          d.device_get_attribute(&g.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
          "cuDeviceGetAttribute");
      out.gpus.push_back(std::move(g));
    }
    if (out.gpus.empty()) out.why_none = "cuda: the NVIDIA driver reports no GPU";
  } catch (const Error& e) {
    out.gpus.clear();
    out.why_none = e.what();
  }
  return out;
}

}  // namespace forge::cuda
