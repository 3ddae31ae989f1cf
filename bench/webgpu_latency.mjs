// What a WebGPU decode step pays before any arithmetic, on the adapter Dawn for Node finds:
//   1. a read's round trip: copy 4 bytes to a staging buffer, submit, mapAsync, unmap;
//   2. the same after N dependent dispatches of a 1-workgroup shader in one compute pass
//      (each reads the previous one's output), N = 1, 10, 100, 400: the slope is the cost of
//      a dispatch and its barrier.
// Medians of 50 runs each. FORGE_DAWN_FLAGS passes Dawn flags (web/gpu_node.mjs).
//   node bench/webgpu_latency.mjs
import { gpuDevice } from '../web/gpu_node.mjs';

const gpu = await gpuDevice();
if (!gpu) throw new Error('no WebGPU adapter (VK_ICD_FILENAMES)');
const { device, name } = gpu;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const data = device.createBuffer({ size: 256, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
const module = device.createShaderModule({ code: `
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(local_invocation_index) i: u32) {
  x[i] = x[i] * 0.5 + 1.0;
}` });
const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
const bind = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: data } }] });

async function step(dispatches) {
  const staging = device.createBuffer({ size: 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const t0 = performance.now();
  const enc = device.createCommandEncoder();
  if (dispatches > 0) {
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bind);
    for (let i = 0; i < dispatches; i++) pass.dispatchWorkgroups(1);
    pass.end();
  }
  enc.copyBufferToBuffer(data, 0, staging, 0, 4);
  device.queue.submit([enc.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const ms = performance.now() - t0;
  staging.unmap();
  staging.destroy();
  return ms;
}

const out = { adapter: name, flags: process.env.FORGE_DAWN_FLAGS ?? '' };
for (const n of [0, 1, 10, 100, 400]) {
  for (let i = 0; i < 5; i++) await step(n);  // warm
  const times = [];
  for (let i = 0; i < 50; i++) times.push(await step(n));
  out[`ms_${n}_dispatches`] = Number(median(times).toFixed(4));
}
out.us_per_dispatch = Number(((out.ms_400_dispatches - out.ms_100_dispatches) / 300 * 1000).toFixed(2));
console.log(JSON.stringify(out));
device.destroy();
process.exit(0);
