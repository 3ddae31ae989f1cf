// Runs a wasm test program of build-wasm/ (forge_web_op_tests) under node with a WebGPU
// device: node web/run_wasm_tests.mjs build-wasm/forge_web_op_tests.js [--gtest_filter=...]
// Exits with the program's status.
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { gpuDevice } from './gpu_node.mjs';

const [program, ...args] = process.argv.slice(2);
const { device, name } = await gpuDevice();
const createForgeProgram = createRequire(import.meta.url)(resolve(program));
await createForgeProgram({
  arguments: args,
  forgeGpuDevice: device,
  forgeGpuAdapterName: name,
  // The program's exit: the device is destroyed and stdout drained before node exits (an
  // exit with Dawn's threads still running can crash in its teardown, and an exit with
  // output still queued for a pipe loses it).
  onExit: (status) => {
    device.destroy();
    process.stdout.write('', () => process.exit(status));
  },
  quit: (status, toThrow) => { throw toThrow; },
});
