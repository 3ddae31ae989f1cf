// forge/device_queue.h over the Backend interface: async reads, recorded steps, waiting,
// profiling, device_info and the settings.
#include "forge/device_queue.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "forge/backend.h"
#include "forge/devices.h"
#include "forge/error.h"

namespace forge {
namespace {

// FORGE_DECODE_GRAPH=0 turns recordings off (to compare, or to time kernels one by one).
bool recordings_enabled() {
  const char* e = std::getenv("FORGE_DECODE_GRAPH");
  return !(e && std::string(e) == "0");
}

}  // namespace

PendingRead& PendingRead::operator=(PendingRead&& o) noexcept {
  if (this != &o) {
    drop();
    device_ = o.device_;
    ticket_ = std::exchange(o.ticket_, 0);
    bytes_ = o.bytes_;
    dtype_ = o.dtype_;
  }
  return *this;
}

PendingRead::~PendingRead() { drop(); }

void PendingRead::drop() noexcept {
  if (ticket_ == 0) return;
  try {
    std::vector<unsigned char> unused(bytes_);
    backend_for(device_).read_wait(std::exchange(ticket_, 0), unused.data(), bytes_);
  } catch (...) {  // a failing device: nothing left to release
  }
}

template <typename T>
std::vector<T> PendingRead::get() {
  if (ticket_ == 0) throw Error(ErrorKind::Backend, "PendingRead::get: no read is pending");
  if (dtype_ != dtype_of<T>())
    throw Error(ErrorKind::DType, std::string("PendingRead::get: the tensor is ") +
                                      dtype_name(dtype_) + ", asked for " +
                                      dtype_name(dtype_of<T>()));
  std::vector<T> out(bytes_ / sizeof(T));
  backend_for(device_).read_wait(std::exchange(ticket_, 0), out.data(), bytes_);
  return out;
}
template std::vector<float> PendingRead::get<float>();
template std::vector<uint32_t> PendingRead::get<uint32_t>();

PendingRead read_async(const Tensor& t) {
  if (!t.defined()) throw Error(ErrorKind::Shape, "read_async: tensor is undefined");
  PendingRead r;
  r.device_ = t.device();
  r.bytes_ = t.nbytes();
  r.dtype_ = t.dtype();
  r.ticket_ = backend_for(r.device_).read_async(*t.storage(), t.byte_offset(), r.bytes_);
  return r;
}

RecordedStep::RecordedStep(Device device, std::function<void()> body)
    : device_(device), body_(std::move(body)) {
  if (!body_) throw Error(ErrorKind::Shape, "RecordedStep: no body");
}

RecordedStep::~RecordedStep() = default;

bool RecordedStep::replays_on(Device device) {
  return backend_for(device).can_capture() && recordings_enabled();
}

void RecordedStep::record() {
  Backend& be = backend_for(device_);
  if (!graph_ && be.can_capture() && recordings_enabled()) {
    be.synchronize();
    be.begin_capture();
    try {
      body_();
      graph_ = be.end_capture();
    } catch (...) {
      be.abort_capture();
      throw;
    }
  }
}

void RecordedStep::run() {
  // The first run records where the device can replay (not while profiling: a later run
  // records once it can again).
  record();
  Backend& be = backend_for(device_);
  if (graph_ && be.can_capture()) {
    be.replay(*graph_);
    return;
  }
  body_();
}

void synchronize(Device device) { backend_for(device).synchronize(); }

DeviceStats device_stats(Device device) { return backend_for(device).stats(); }

void set_profiling(Device device, bool on) { backend_for(device).set_profiling(on); }

std::vector<KernelTime> kernel_times(Device device) { return backend_for(device).kernel_times(); }

DeviceInfo device_info(Device device) { return backend_for(device).info(); }

bool device_runs_weights(Device device, DType dtype) {
  const Backend& be = backend_for(device);
  return be.supports(Op::matmul, dtype_key({DType::F32, dtype, DType::F32})) &&
         be.supports(Op::embedding, dtype_key({DType::U32, dtype}));
}

bool device_runs_op(Device device, Op op) { return backend_for(device).supports(op); }

void set_device_setting(Device device, const std::string& name, const std::string& value) {
  backend_for(device).set_setting(name, value);
}

std::string device_setting(Device device, const std::string& name) {
  return backend_for(device).setting(name);
}

std::vector<std::string> device_setting_names(Device device) {
  return backend_for(device).setting_names();
}

namespace {

bool has_precision_setting(const Backend& be) {
  const std::vector<std::string> names = be.setting_names();
  return std::find(names.begin(), names.end(), "precision") != names.end();
}

}  // namespace

void set_device_precision(Device device, const std::string& precision) {
  if (precision != "fp32" && precision != "tf32" && precision != "bf16")
    throw Error(ErrorKind::Format,
                "precision \"" + precision + "\" is not one of fp32, tf32, bf16");
  Backend& be = backend_for(device);
  if (has_precision_setting(be)) return be.set_setting("precision", precision);
  if (precision != "fp32")
    throw Error(ErrorKind::Unsupported,
                "device " + device.str() + " multiplies in fp32 only: precision " + precision +
                    " needs a device whose products have it (forge devices lists each device's "
                    "matmul arithmetic)");
}

std::string device_precision(Device device) {
  const Backend& be = backend_for(device);
  return has_precision_setting(be) ? be.setting("precision") : "fp32";
}

}  // namespace forge
