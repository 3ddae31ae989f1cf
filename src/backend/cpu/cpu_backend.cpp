// CPU storage (64-byte aligned host memory from host_memory.h) and device info.
#include "backend/cpu/cpu_backend.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "backend/cpu/host_memory.h"
#include "backend/cpu/simd.h"
#include "forge/error.h"
#include "forge/threads.h"

namespace forge::cpu {
namespace {

class HostStorage final : public Storage {
 public:
  HostStorage(size_t bytes, bool zero) : Storage(Device::cpu(), bytes) {
    ptr_ = host_alloc(bytes, zero);
    if (!ptr_)
      throw Error(ErrorKind::Backend,
                  "cpu: out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  ~HostStorage() override { host_free(ptr_, bytes()); }
  void* host_ptr() override { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

unsigned char* bytes_of(const Storage& s) {
  return static_cast<unsigned char*>(const_cast<Storage&>(s).host_ptr());
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown cpu";
}

}  // namespace

DeviceInfo CpuBackend::info() const {
  DeviceInfo d;
  d.device = Device::cpu();
  d.simd = simd_level_name(simd_level());
  d.name = cpu_model_name();
  d.kind = "cpu";
  d.threads = num_threads();
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  d.memory_bytes = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
  d.max_binding_bytes = 0;
  return d;
}

std::shared_ptr<Storage> CpuBackend::allocate(size_t bytes) {
  return std::make_shared<HostStorage>(bytes, false);
}

std::shared_ptr<Storage> CpuBackend::allocate_zeros(size_t bytes) {
  return std::make_shared<HostStorage>(bytes, true);
}

void CpuBackend::write(Storage& dst, size_t dst_offset, const void* src, size_t bytes) {
  std::memcpy(bytes_of(dst) + dst_offset, src, bytes);
}

void CpuBackend::read(const Storage& src, size_t src_offset, void* dst, size_t bytes) {
  std::memcpy(dst, bytes_of(src) + src_offset, bytes);
}

void CpuBackend::copy(const Storage& src, size_t src_offset, Storage& dst, size_t dst_offset,
                      size_t bytes) {
  std::memmove(bytes_of(dst) + dst_offset, bytes_of(src) + src_offset, bytes);
}

}  // namespace forge::cpu

namespace forge {

BackendRegistration cpu_backend_registration() {
  BackendRegistration r;
  r.name = "cpu";
  r.open = [](int) -> Backend& {
    static cpu::CpuBackend backend;
    return backend;
  };
  r.devices = [open = r.open] { return std::vector<DeviceInfo>{open(0).info()}; };
  return r;
}

}  // namespace forge
