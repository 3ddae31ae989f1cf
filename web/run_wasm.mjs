// Runs a wasm program of build-wasm/ (the CLI forge.js, or forge_web_op_tests.js) under
// node, with a WebGPU device when Dawn for Node finds an adapter (VK_ICD_FILENAMES names the
// Vulkan driver; without one the program has the CPU alone):
//   node web/run_wasm.mjs build-wasm/forge.js generate --device webgpu ...
// Exits with the program's status.
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { gpuDevice } from './gpu_node.mjs';

const [program, ...args] = process.argv.slice(2);
if (!program) {
  console.error('usage: node web/run_wasm.mjs PROGRAM.js [ARGS...]');
  process.exit(2);
}
const gpu = await gpuDevice();
const createForgeProgram = createRequire(import.meta.url)(resolve(program));
await createForgeProgram({
  arguments: args,
  // The program sees the FORGE_* variables of node's environment (emscripten gives a wasm
  // program an environment of its own).
  preRun: [(mod) => {
    for (const [k, v] of Object.entries(process.env)) if (k.startsWith('FORGE_')) mod.ENV[k] = v;
  }],
  // A build with threads (build-wasm-mt/) makes its workers up front: one per CPU thread
  // besides the caller's.
  forgeWorkers: Math.max(0, (Number(process.env.FORGE_NUM_THREADS) || availableParallelism()) - 1),
  forgeGpuDevice: gpu?.device,
  forgeGpuAdapterName: gpu?.name,
  // The program's exit: the device is destroyed and stdout drained before node exits (an
  // exit with Dawn's threads still running can crash in its teardown, and an exit with
  // output still queued for a pipe loses it).
  onExit: (status) => {
    gpu?.device.destroy();
    process.stdout.write('', () => process.exit(status));
  },
  quit: (status, toThrow) => { throw toThrow; },
});
