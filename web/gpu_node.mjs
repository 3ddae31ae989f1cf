// A WebGPU device for node: Dawn (npm webgpu) on the adapter VK_ICD_FILENAMES picks (on a
// machine without a GPU, Chromium's SwiftShader: see web/tests/), or null when there is
// none. The largest bindings and buffers the adapter allows are requested: the defaults
// (128 MiB bindings) are smaller than GPT-2's embedding table.
import { create, globals } from 'webgpu';

// Dawn's instance and adapter must outlive the device: a collected instance takes the
// device down with it (a crash in a later call). Kept here for the process's life.
const keep = [];

export async function gpuDevice() {
  Object.assign(globalThis, globals);
  const gpu = create([]);
  keep.push(gpu);
  const adapter = await gpu.requestAdapter();
  if (!adapter) return null;  // no adapter (VK_ICD_FILENAMES names no usable Vulkan driver)
  keep.push(adapter);
  const L = adapter.limits;
  const device = await adapter.requestDevice({
    requiredLimits: {
      maxStorageBufferBindingSize: L.maxStorageBufferBindingSize,
      maxBufferSize: L.maxBufferSize,
      maxStorageBuffersPerShaderStage: L.maxStorageBuffersPerShaderStage,
      maxComputeWorkgroupStorageSize: L.maxComputeWorkgroupStorageSize,
    },
  });
  const info = adapter.info ?? {};
  const name = [info.vendor, info.architecture, info.device, info.description].filter(Boolean).join(' ') || 'WebGPU';
  return { device, name };
}
