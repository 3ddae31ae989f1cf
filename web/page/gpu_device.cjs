// What forge asks of a WebGPU adapter, shared by the page's worker (importScripts) and the
// node tests (web/gpu_node.mjs, through require): the adapter's largest bindings and buffers
// (the defaults, 128 MiB bindings, are smaller than GPT-2's embedding table), and a name for
// the adapter.
'use strict';

function forgeDeviceDescriptor(adapter) {
  const L = adapter.limits;
  return {
    requiredLimits: {
      maxStorageBufferBindingSize: L.maxStorageBufferBindingSize,
      maxBufferSize: L.maxBufferSize,
      maxStorageBuffersPerShaderStage: L.maxStorageBuffersPerShaderStage,
      maxComputeWorkgroupStorageSize: L.maxComputeWorkgroupStorageSize,
    },
  };
}

function forgeAdapterName(adapter) {
  const i = adapter.info || {};
  return [i.vendor, i.architecture, i.device, i.description].filter(Boolean).join(' ') || 'WebGPU';
}

if (typeof module !== 'undefined') module.exports = { forgeDeviceDescriptor, forgeAdapterName };
