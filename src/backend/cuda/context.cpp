#include "backend/cuda/context.h"

#include <cstdlib>
#include <string>

#include "forge/error.h"

namespace forge::cuda {

Context::Context(int ordinal) : ordinal_(ordinal) {
  const Driver& d = driver();
  int count = 0;
  check(d.device_get_count(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    throw Error(ErrorKind::Device, "cuda:" + std::to_string(ordinal) +
                                       ": no such GPU (the driver reports " +
                                       std::to_string(count) + ")");
  check(d.device_get(&device_, ordinal), "cuDeviceGet");
  int major = 0, minor = 0;
  check(d.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_),
        "cuDeviceGetAttribute");
  check(d.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_),
        "cuDeviceGetAttribute");
  arch_ = "sm_" + std::to_string(major) + std::to_string(minor);
  const char* early = std::getenv("FORGE_CUDA_EARLY_LAUNCH");
  early_launch_ =
      major >= 9 && d.launch_kernel_ex != nullptr && !(early && std::string(early) == "0");
  check(d.primary_ctx_retain(&context_, device_), "cuDevicePrimaryCtxRetain");
  make_current();
  const CUresult r = d.stream_create(&stream_, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    d.primary_ctx_release(device_);
    check(r, "cuStreamCreate");
  }
  profiler_ = std::make_unique<Profiler>(*this);
}

Context::~Context() {
  const Driver& d = driver();
  d.ctx_set_current(context_);
  d.stream_synchronize(stream_);
  profiler_.reset();
  d.stream_destroy(stream_);
  d.primary_ctx_release(device_);
}

void Context::make_current() const { check(driver().ctx_set_current(context_), "cuCtxSetCurrent"); }

void Context::synchronize() const {
  make_current();
  check(driver().stream_synchronize(stream_), "cuStreamSynchronize");
}

DeviceBuffer::DeviceBuffer(const Context& context, size_t bytes)
    : context_(context), bytes_(bytes) {
  context_.make_current();
  check(driver().mem_alloc(&ptr_, bytes == 0 ? 1 : bytes), "cuMemAlloc_v2");
}

DeviceBuffer::~DeviceBuffer() {
  context_.make_current();
  driver().stream_synchronize(context_.stream());  // no queued kernel may still use it
  driver().mem_free(ptr_);
}

void DeviceBuffer::upload(const void* src, size_t bytes) {
  if (bytes > bytes_)
    throw Error(ErrorKind::Backend, "cuda: an upload of " + std::to_string(bytes) +
                                        " bytes into a buffer of " + std::to_string(bytes_));
  context_.make_current();
  check(driver().memcpy_htod_async(ptr_, src, bytes, context_.stream()), "cuMemcpyHtoDAsync_v2");
  context_.synchronize();
}

void DeviceBuffer::download(void* dst, size_t bytes) const {
  if (bytes > bytes_)
    throw Error(ErrorKind::Backend, "cuda: a download of " + std::to_string(bytes) +
                                        " bytes from a buffer of " + std::to_string(bytes_));
  context_.make_current();
  check(driver().memcpy_dtoh_async(dst, ptr_, bytes, context_.stream()), "cuMemcpyDtoHAsync_v2");
  context_.synchronize();
}

Module::Module(const Context& context, const std::vector<char>& image) : context_(context) {
  context_.make_current();
  check(driver().module_load_data(&module_, image.data()), "cuModuleLoadData");
}

Module::~Module() {
  context_.make_current();
  driver().module_unload(module_);
}

CUfunction Module::function(const char* name) const {
  CUfunction fn = nullptr;
  const CUresult r = driver().module_get_function(&fn, module_, name);
  if (r != CUDA_SUCCESS)
    throw Error(ErrorKind::Backend,
                std::string("cuda: the module has no kernel ") + name + ": " + result_text(r));
  return fn;
}

void launch(const Context& context, CUfunction fn, Dim3 grid, Dim3 block, size_t shared_bytes,
            void** params, bool early) {
  context.make_current();
  if (early && context.early_launch()) {
    CUlaunchAttribute attr;
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmatic_stream_serialization_allowed = 1;
    CUlaunchConfig config;
    config.grid_x = grid.x;
    config.grid_y = grid.y;
    config.grid_z = grid.z;
    config.block_x = block.x;
    config.block_y = block.y;
    config.block_z = block.z;
    config.shared_bytes = static_cast<unsigned>(shared_bytes);
    config.stream = context.stream();
    config.attrs = &attr;
    config.num_attrs = 1;
    check(driver().launch_kernel_ex(&config, fn, params, nullptr), "cuLaunchKernelEx");
    return;
  }
  check(driver().launch_kernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                               static_cast<unsigned>(shared_bytes), context.stream(), params,
                               nullptr),
        "cuLaunchKernel");
}

}  // namespace forge::cuda
