// forge's Web Worker: it owns the wasm module and the GPU device, loads models and generates,
// so the page's thread never waits on either. The module is forge_web.js, or on the CPU of a
// cross-origin isolated page its threads build forge_web_mt.js (shared memory, and a pool of
// Web Workers of its own). Messages in (from app.js):
//   {type: 'start', device: 'auto' | 'cpu', threads}  threads: the CPU's (default: the
//                                                  browser's hardwareConcurrency; 1 without
//                                                  cross-origin isolation)
//   {type: 'load-served'}                          the model scripts/web.sh -m serves
//   {type: 'load-files', files: [File]}            an HF folder's files or one .gguf file
//   {type: 'load-preset', name, seed}              a random model of a preset's shapes (bench/)
//   {type: 'generate', prompt, options}            options as forge_web.cpp parses them
//   {type: 'stop'}
// Messages out: ready, progress, loaded, token, text, done, error (each with its fields).
'use strict';
importScripts('gpu_device.cjs', 'model_cache.js');

let forge = null;   // the module
let onGpu = false;  // the model runs on WebGPU (else the wasm CPU backend)
let busy = false;   // a load or a generation is running
let decoder = null; // the running generation's UTF-8 decoder (text may split a character)
const MOUNT = '/model';
// wasm32 addresses 4 GiB; the files are read into it, with room left for the KV cache and
// the activations.
const WASM_FILE_LIMIT = 3.5 * 2 ** 30;

const post = (type, data = {}) => postMessage({ type, ...data });
const gib = (n) => (n / 2 ** 30).toFixed(2) + ' GiB';

// The best GPU device, or a sentence saying why there is none.
async function gpuDevice() {
  if (!self.navigator.gpu) return { notice: 'This browser has no WebGPU, so forge runs on the CPU (wasm), which is slower.' };
  let adapter;
  try {
    adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
  } catch (e) {
    adapter = null;
  }
  if (!adapter) return { notice: 'WebGPU found no usable GPU, so forge runs on the CPU (wasm), which is slower.' };
  try {
    const device = await adapter.requestDevice(forgeDeviceDescriptor(adapter));
    device.lost.then((info) => {
      if (info.reason !== 'destroyed') post('error', { message: `The GPU device was lost (${info.message || info.reason}). Reload the page.` });
    });
    return { device, name: forgeAdapterName(adapter) };
  } catch (e) {
    return { notice: `WebGPU could not open the GPU (${e.message}), so forge runs on the CPU (wasm), which is slower.` };
  }
}

// The CPU threads to run on: shared memory, which threads need, exists only in a
// cross-origin isolated page (scripts/web.sh's server sends the COOP/COEP headers).
function cpuThreads(asked) {
  if (!self.crossOriginIsolated) return 1;
  const n = Number.isInteger(asked) && asked > 0 ? asked : navigator.hardwareConcurrency || 1;
  return Math.min(n, 64);
}

// The module to run: the threads build for more than one CPU thread, where the server has it
// (a 404 makes importScripts throw), else the single-threaded one. Returns
// {create, threads, extra} with extra the threads build's own settings.
function pickModule(gpu, threads) {
  if (!gpu.device && threads > 1) {
    try {
      importScripts('forge_web_mt.js');
      return {
        create: createForgeWebThreads,
        threads,
        extra: {
          // Its workers load this script by URL (a worker's own location is worker.js's).
          mainScriptUrlOrBlob: new URL('forge_web_mt.js', self.location.href).href,
          forgeWorkers: threads - 1,
          preRun: [(mod) => { mod.ENV.FORGE_NUM_THREADS = String(threads); }],
        },
      };
    } catch (e) {
      console.warn(`forge: no threads build (${e.message}); running on one CPU thread`);
    }
  }
  importScripts('forge_web.js');
  return { create: createForgeWeb, threads: 1, extra: {} };
}

async function start(msg) {
  const gpu = msg.device === 'cpu' ? { notice: '' } : await gpuDevice();
  const picked = pickModule(gpu, cpuThreads(msg.threads));
  forge = await picked.create({
    ...picked.extra,
    forgeGpuDevice: gpu.device,
    forgeGpuAdapterName: gpu.name,
    onForgeToken: (id) => post('token', { id }),
    onForgeText: (bytes) => {
      const text = decoder.decode(bytes, { stream: true });
      if (text) post('text', { text });
    },
    print: (s) => console.log(s),
    printErr: (s) => console.warn(s),
  });
  forge.forgeStopRequested = false;
  onGpu = Boolean(gpu.device);
  const limits = onGpu ? { maxBufferSize: gpu.device.limits.maxBufferSize,
    maxStorageBufferBindingSize: gpu.device.limits.maxStorageBufferBindingSize } : null;
  const cpu = picked.threads > 1 ? `CPU (wasm, ${picked.threads} threads)` : 'CPU (wasm)';
  post('ready', { gpu: onGpu, device: onGpu ? gpu.name : cpu, threads: picked.threads, notice: gpu.notice || '', limits });
}

// The last path component of a picked file (a folder pick names files "folder/file").
const baseName = (f) => (f.webkitRelativePath || f.name).split('/').pop();

// What to load from picked files: one .gguf file, or a folder's files. Throws a sentence.
function pickedModel(files) {
  if (!files.length) throw new Error('No file was picked.');
  const ggufs = files.filter((f) => baseName(f).endsWith('.gguf'));
  if (ggufs.length > 1) throw new Error(`Pick one .gguf file, not ${ggufs.length}.`);
  if (ggufs.length === 1) return { kind: 'gguf', name: baseName(ggufs[0]), entries: [{ name: baseName(ggufs[0]), blob: ggufs[0] }] };
  const entries = files.map((f) => ({ name: baseName(f), blob: f }));
  const names = new Set(entries.map((e) => e.name));
  const folder = (files[0].webkitRelativePath || '').split('/')[0] || 'the picked files';
  if (!names.has('config.json')) {
    throw new Error(`${folder} has no config.json: pick a Hugging Face GPT-2 folder (config.json, model.safetensors and tokenizer files) or a .gguf file.`);
  }
  if (![...names].some((n) => n.endsWith('.safetensors'))) {
    throw new Error(`${folder} has no .safetensors weights (forge reads model.safetensors, or a sharded model.safetensors.index.json).`);
  }
  return { kind: 'folder', name: folder, entries };
}

function mount(entries) {
  try { forge.FS.unmount(MOUNT); } catch (e) { /* nothing mounted yet */ }
  try { forge.FS.mkdir(MOUNT); } catch (e) { /* exists */ }
  forge.FS.mount(forge.FS.filesystems.WORKERFS, { blobs: entries.map((e) => ({ name: e.name, data: e.blob })) }, MOUNT);
}

// forge's message for a failed load, as a sentence that names the file.
function loadError(model, message) {
  const text = message.replaceAll(MOUNT + '/', '').replace(/\.?$/, '.');
  return `Could not load ${model.name}: ${text}`;
}

// A model's files must fit wasm32's memory: refused before anything is read or downloaded.
function checkSize(name, bytes) {
  if (bytes > WASM_FILE_LIMIT) {
    throw new Error(`${name} is ${gib(bytes)}, more than the ${gib(WASM_FILE_LIMIT)} a wasm page can read into its 4 GiB memory.`);
  }
}

async function load(model, transfer) {
  const bytes = model.entries.reduce((n, e) => n + e.blob.size, 0);
  checkSize(model.name, bytes);
  mount(model.entries);
  const path = model.kind === 'gguf' ? `${MOUNT}/${model.entries[0].name}` : MOUNT;
  const t0 = performance.now();
  const rc = await forge.ccall('forge_web_load', 'number', ['string', 'string'], [path, onGpu ? 'webgpu' : 'cpu'], { async: true });
  if (rc !== 0) throw new Error(loadError(model, forge.ccall('forge_web_error', 'string', [], [])));
  const info = JSON.parse(forge.ccall('forge_web_info', 'string', [], []));
  post('loaded', { name: model.name, info, file_bytes: bytes, load_seconds: (performance.now() - t0) / 1000, ...transfer });
}

async function loadServed() {
  const response = await fetch('model/manifest.json');
  if (response.status === 404) throw new Error('The server has no model: start it with bash scripts/web.sh -m MODEL, or pick a model from disk.');
  if (!response.ok) throw new Error(`The server answered ${response.status} for the model's manifest.`);
  const manifest = await response.json();
  checkSize(manifest.name, manifest.files.reduce((n, f) => n + f.size, 0));
  const got = await ModelCache.files(manifest, (done, total) => post('progress', { done, total }));
  await load({ kind: manifest.kind, name: manifest.name, entries: got.files }, { fetched_bytes: got.fetched, opfs: got.cached });
}

async function loadPreset(msg) {
  const t0 = performance.now();
  const rc = await forge.ccall('forge_web_load_preset', 'number', ['string', 'number', 'string'],
    [msg.name, msg.seed || 0, onGpu ? 'webgpu' : 'cpu'], { async: true });
  if (rc !== 0) throw new Error(forge.ccall('forge_web_error', 'string', [], []));
  const info = JSON.parse(forge.ccall('forge_web_info', 'string', [], []));
  post('loaded', { name: msg.name, info, file_bytes: 0, load_seconds: (performance.now() - t0) / 1000, fetched_bytes: 0, opfs: false });
}

async function generate(msg) {
  forge.forgeStopRequested = false;
  decoder = new TextDecoder();
  const rc = await forge.ccall('forge_web_generate', 'number', ['string', 'string'],
    [msg.prompt, JSON.stringify(msg.options)], { async: true });
  const rest = decoder.decode();
  if (rest) post('text', { text: rest });
  if (rc !== 0) throw new Error(forge.ccall('forge_web_error', 'string', [], []).replace(/\.?$/, '.'));
  post('done', { result: JSON.parse(forge.ccall('forge_web_result', 'string', [], [])) });
}

// One load or generation at a time; stop is the only message handled while one runs.
onmessage = async (e) => {
  const msg = e.data;
  if (msg.type === 'stop') {
    if (forge) forge.forgeStopRequested = true;
    return;
  }
  if (busy) {
    post('error', { message: 'forge is busy: wait for the current work to end, or press Stop.' });
    return;
  }
  busy = true;
  try {
    if (msg.type === 'start') await start(msg);
    else if (msg.type === 'load-served') await loadServed();
    else if (msg.type === 'load-files') await load(pickedModel(msg.files), { fetched_bytes: 0, opfs: false });
    else if (msg.type === 'load-preset') await loadPreset(msg);
    else if (msg.type === 'generate') await generate(msg);
    else throw new Error(`unknown message ${msg.type}`);
  } catch (err) {
    post('error', { message: err.message || String(err), during: msg.type });
  } finally {
    busy = false;
  }
};
