// A WebGPU device for node: Dawn (npm webgpu) on the adapter VK_ICD_FILENAMES picks (on a
// machine without a GPU, Chromium's SwiftShader: see web/tests/), or null when there is
// none, with the limits web/page/gpu_device.cjs asks for.
import { createRequire } from 'node:module';
import { create, globals } from 'webgpu';

const { forgeDeviceDescriptor, forgeAdapterName } = createRequire(import.meta.url)('./page/gpu_device.cjs');

// Dawn's instance and adapter must outlive the device: a collected instance takes the
// device down with it (a crash in a later call). Kept here for the process's life.
const keep = [];

export async function gpuDevice() {
  Object.assign(globalThis, globals);
  // FORGE_DAWN_FLAGS: Dawn for Node's flags, ';'-separated (e.g.
  // "enable-dawn-features=disable_robustness,skip_validation"), for experiments.
  const flags = process.env.FORGE_DAWN_FLAGS ? process.env.FORGE_DAWN_FLAGS.split(';') : [];
  const gpu = create(flags);
  keep.push(gpu);
  const adapter = await gpu.requestAdapter();
  if (!adapter) return null;  // no adapter (VK_ICD_FILENAMES names no usable Vulkan driver)
  keep.push(adapter);
  const device = await adapter.requestDevice(forgeDeviceDescriptor(adapter));
  return { device, name: forgeAdapterName(adapter) };
}
