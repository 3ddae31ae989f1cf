// The devices of this build: what `forge devices` lists, what `--device` accepts. Each
// backend registers itself (forge/backend.h, BackendRegistration); nothing here names one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "forge/device.h"
#include "forge/dtype.h"
#include "forge/op_table.h"

namespace forge {

/// What a device can do, for `forge devices` and for code that must split buffers.
struct DeviceInfo {
  Device device;
  std::string name;                // "cpu (AMD EPYC, avx512)", "llvmpipe (LLVM 15.0.6, 256 bits)"
  std::string kind;                // "cpu", "integrated-gpu", "discrete-gpu", "virtual-gpu", ...
  int threads = 0;                 // worker threads (CPU)
  uint64_t memory_bytes = 0;       // total device memory (CPU: physical RAM)
  uint64_t max_binding_bytes = 0;  // largest buffer one kernel may bind (CPU: unlimited = 0)
  std::string simd;                // CPU: "avx512", "avx2", "portable"
  /// Further limits worth showing, as (name, value) lines (a GPU's: storage buffer range,
  /// offset alignment, shared memory, workgroup size/count, subgroup size, memory heaps).
  std::vector<std::pair<std::string, std::string>> limits;
};

/// Every device of every registered backend, in registration order (the CPU first).
std::vector<DeviceInfo> list_devices();

/// What `device` is and can do (its limits, its memory); Error(Device) if it does not exist.
DeviceInfo device_info(Device device);

/// "cpu", "NAME" or "NAME:N" for a registered backend NAME; "NAME" alone is that backend's
/// default device (a GPU backend's: its first discrete GPU). Error(Format) naming the registered
/// backends for anything else. The device need not exist: using it reports why not.
Device parse_device(const std::string& text);

/// What `--device` accepts, for help texts: "cpu, NAME, NAME:N" for each registered backend.
std::string device_choices();

/// A backend's named switch, e.g. a GPU's set_device_setting(gpu, "matmul_tile", "64x64"): the
/// experiment and test switches of docs/ARCHITECTURE.md (each in its backend's folder),
/// also set from the environment (FORGE_<BACKEND>_MATMUL_TILE). A backend's
/// settings hold for all its devices. Change them between calls, not while another thread
/// runs ops. Error(Format) for a bad value, Error(Unsupported) for a name the backend lacks
/// or one read only when the device is created.
void set_device_setting(Device device, const std::string& name, const std::string& value);
/// The current value of a setting, as set_device_setting takes it.
std::string device_setting(Device device, const std::string& name);
/// The names of a device's settings (none on the CPU).
std::vector<std::string> device_setting_names(Device device);

/// The arithmetic of `device`'s matrix products, as `forge train --precision` takes it:
/// "fp32" (every device), or "tf32" / "bf16" (tensor cores on fp32 tensors, where the
/// device's backend has the "precision" setting). Error(Unsupported) naming the device and
/// what it has for a precision it lacks; Error(Format) for another name.
void set_device_precision(Device device, const std::string& precision);
/// The arithmetic of `device`'s matrix products now, as set_device_precision takes it.
std::string device_precision(Device device);

/// Whether `device` multiplies by weights of `dtype` and gathers rows from them (matmul with
/// such a b, embedding with such a table): always for F32; the CPU for every weight dtype.
/// Error(Device) if the device does not exist.
bool device_runs_weights(Device device, DType dtype);

/// Whether `device` has a kernel for `op` with the op table's dtypes (forge/op_table.def); a
/// GPU may lack one where its limits are too small (a Vulkan device binding too few buffers
/// has no attention_at). Error(Device) if the device does not exist.
bool device_runs_op(Device device, Op op);

/// The registered backends' names, in registration order.
std::vector<std::string> backend_names();

}  // namespace forge
