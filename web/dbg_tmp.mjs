import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { gpuDevice } from './gpu_node.mjs';
const [program, ...args] = process.argv.slice(2);
const gpu = await gpuDevice();
const f = createRequire(import.meta.url)(resolve(program));
await f({ arguments: args, forgeGpuDevice: gpu?.device, forgeGpuAdapterName: gpu?.name,
  onExit: (status) => { console.error('ONEXIT', status, new Error().stack.split('\n').slice(1,6).join(' | ')); gpu?.device.destroy(); process.stdout.write('', () => process.exit(status)); },
  onAbort: (w) => console.error('ABORT', w), printErr: (s) => console.error('ERR', s), quit: (status, toThrow) => { console.error('QUIT', status, String(toThrow).slice(0, 300), toThrow?.stack?.split('\n').slice(0, 8).join(' / ')); throw toThrow; } });
console.error('factory resolved');
