#include "io/tensor_io.h"

#include <algorithm>
#include <vector>

namespace forge::io {
namespace {

class MappedStorage final : public Storage {
 public:
  MappedStorage(std::shared_ptr<MappedFile> map, std::byte* ptr, size_t bytes)
      : Storage(Device::cpu(), bytes), map_(std::move(map)), ptr_(ptr) {}
  void* host_ptr() override { return ptr_; }

 private:
  std::shared_ptr<MappedFile> map_;
  std::byte* ptr_;
};

}  // namespace

std::shared_ptr<Storage> mapped_storage(std::shared_ptr<MappedFile> map, std::byte* ptr,
                                        size_t bytes) {
  return std::make_shared<MappedStorage>(std::move(map), ptr, bytes);
}

void write_tensor(AtomicFile& out, const Tensor& t) {
  const size_t bytes = t.nbytes();
  if (bytes == 0) return;
  const size_t start = t.byte_offset();
  if (t.device().is_cpu()) {
    out.write(static_cast<const char*>(t.storage()->host_ptr()) + start, bytes);
    return;
  }
  constexpr size_t kChunk = size_t{64} << 20;
  std::vector<char> stage(std::min(bytes, kChunk));
  DeviceMemory& mem = device_memory(t.device());
  for (size_t done = 0; done < bytes; done += stage.size()) {
    const size_t n = std::min(stage.size(), bytes - done);
    mem.read(*t.storage(), start + done, stage.data(), n);
    out.write(stage.data(), n);
  }
}

}  // namespace forge::io
