// Maps devices to their backends. Backends are created lazily, once, and live until exit.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "forge/backend.h"
#include "forge/error.h"
#ifdef FORGE_HAVE_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

namespace forge {

void Backend::set_profiling(bool) {
  throw Error(ErrorKind::Unsupported,
              "device " + info().device.str() + " has no device timers (profiling)");
}

std::vector<KernelTime> Backend::kernel_times() {
  throw Error(ErrorKind::Unsupported,
              "device " + info().device.str() + " has no device timers (profiling)");
}

namespace {
[[noreturn]] void no_capture(const Backend& b) {
  throw Error(ErrorKind::Unsupported,
              "device " + b.info().device.str() + " cannot capture graphs of kernels");
}
}  // namespace

void Backend::layernorm_matmul(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                               const Tensor& w, const Tensor& bias, const MatmulSpec& spec,
                               Tensor& out) {
  Tensor h = Tensor::empty(x.shape(), DType::F32, x.device());
  layernorm(x, gamma, beta, eps, h);
  matmul(h, w, bias, spec, /*accumulate=*/false, out);
}

void Backend::matmul_add_layernorm_matmul(const Tensor& x, const Tensor& a, const Tensor& w1,
                                          const Tensor& b1, const Tensor& gamma, const Tensor& beta,
                                          float eps, const Tensor& w2, const Tensor& b2,
                                          const MatmulSpec& spec2, Tensor& x_new, Tensor& out) {
  const size_t bytes = static_cast<size_t>(x.numel()) * sizeof(float);
  copy(*x.storage(), x.offset() * sizeof(float), *x_new.storage(), x_new.offset() * sizeof(float),
       bytes);
  matmul(a, w1, b1, {}, /*accumulate=*/true, x_new);
  layernorm_matmul(x_new, gamma, beta, eps, w2, b2, spec2, out);
}

uint64_t Backend::read_async(const Storage& src, size_t offset, size_t bytes) {
  std::vector<unsigned char> data(bytes);
  read(src, offset, data.data(), bytes);
  std::lock_guard<std::mutex> lock(early_mutex_);
  early_reads_.emplace(++last_ticket_, std::move(data));
  return last_ticket_;
}

void Backend::read_wait(uint64_t ticket, void* dst, size_t bytes) {
  std::lock_guard<std::mutex> lock(early_mutex_);
  auto it = early_reads_.find(ticket);
  if (it == early_reads_.end() || it->second.size() != bytes)
    throw Error(ErrorKind::Backend,
                "read_wait of ticket " + std::to_string(ticket) +
                    (it == early_reads_.end() ? ", which is not pending" : " with another size"));
  std::copy(it->second.begin(), it->second.end(), static_cast<unsigned char*>(dst));
  early_reads_.erase(it);
}

void Backend::begin_capture() { no_capture(*this); }
std::shared_ptr<Graph> Backend::end_capture() { no_capture(*this); }
void Backend::abort_capture() { no_capture(*this); }
void Backend::replay(const Graph&) { no_capture(*this); }

Backend& backend_for(Device device) {
  switch (device.kind) {
    case DeviceKind::Cpu: {
      static cpu::CpuBackend cpu_backend;
      return cpu_backend;
    }
    case DeviceKind::Vulkan:
#ifdef FORGE_HAVE_VULKAN
      return vk::backend(device.index);
#else
      throw Error(ErrorKind::Device,
                  "device " + device.str() + ": this build of forge has no Vulkan backend");
#endif
    case DeviceKind::Cuda:
      throw Error(ErrorKind::Device,
                  "device " + device.str() + ": this build of forge has no CUDA backend");
  }
  throw Error(ErrorKind::Device, "device: unknown kind");
}

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> list = {backend_for(Device::cpu()).info()};
#ifdef FORGE_HAVE_VULKAN
  for (DeviceInfo& d : vk::device_infos()) list.push_back(std::move(d));
#endif
  return list;
}

int default_vulkan_index() {
#ifdef FORGE_HAVE_VULKAN
  return vk::default_index();
#else
  return 0;
#endif
}

}  // namespace forge
