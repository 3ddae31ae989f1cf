// The defaults of Backend's optional methods (forge/backend.h): no profiling, no settings,
// no capture, reads at once; and the kernel table.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include "forge/backend.h"
#include "forge/error.h"

namespace forge {

void Backend::set_profiling(bool) {
  throw Error(ErrorKind::Unsupported,
              "device " + info().device.str() + " has no device timers (profiling)");
}

std::vector<KernelTime> Backend::kernel_times() {
  throw Error(ErrorKind::Unsupported,
              "device " + info().device.str() + " has no device timers (profiling)");
}

void Backend::set_setting(const std::string& name, const std::string&) {
  throw Error(ErrorKind::Unsupported, "device " + info().device.str() + " has no setting \"" +
                                          name + "\" (its backend has no settings)");
}

std::string Backend::setting(const std::string& name) const {
  throw Error(ErrorKind::Unsupported, "device " + info().device.str() + " has no setting \"" +
                                          name + "\" (its backend has no settings)");
}

void Backend::set_host_timing(bool on) {
  std::lock_guard<std::mutex> lock(host_times_mutex_);
  host_timing_ = on;
  if (on) host_times_.clear();  // a fresh span
}

void Backend::add_host_time(Op op, double ms) {
  std::lock_guard<std::mutex> lock(host_times_mutex_);
  KernelTime& t = host_times_[op];
  if (t.kernel.empty()) t.kernel = op_info(op).name;
  ++t.dispatches;
  t.ms += ms;
}

std::vector<KernelTime> Backend::kernel_times_on_host() {
  std::lock_guard<std::mutex> lock(host_times_mutex_);
  std::vector<KernelTime> out;
  for (const auto& [op, t] : host_times_) out.push_back(t);
  std::sort(out.begin(), out.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return out;
}

namespace {
[[noreturn]] void no_capture(const Backend& b) {
  throw Error(ErrorKind::Unsupported,
              "device " + b.info().device.str() + " cannot capture graphs of kernels");
}
}  // namespace

void Backend::add_kernel(Op op, Kernel kernel, Accepts accepts) {
  add_kernel(op, table_key(op), kernel, accepts);
}

void Backend::add_kernel(Op op, DTypeKey key, Kernel kernel, Accepts accepts) {
  if (accepts && op_info(op).kind != OpKind::fused)
    throw Error(ErrorKind::Backend, "add_kernel: " + op_info(op).name +
                                        " is not a fused op: its kernel may not decline calls");
  for (KernelEntry& e : kernels_[static_cast<size_t>(op)])
    if (e.key == key) {
      e = {key, kernel, accepts};
      return;
    }
  kernels_[static_cast<size_t>(op)].push_back({key, kernel, accepts});
}

const KernelEntry* Backend::find_kernel(Op op, DTypeKey key) const {
  for (const KernelEntry& e : kernels_[static_cast<size_t>(op)])
    if (e.key == key) return &e;
  return nullptr;
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

}  // namespace forge
