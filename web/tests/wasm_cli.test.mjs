// The wasm build of the CLI (build-wasm/forge.js, under node) against independent references:
// HF's tokenizer ids on the tokenizer golden strings, HF transformers' greedy tokens of the
// golden models, and the native CLI's output on the same inputs.
// Run: node --test web/tests/   (after scripts/build_wasm.sh and the native build)
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const wasmCli = join(root, 'build-wasm', 'forge.js');
const runner = join(root, 'web', 'run_wasm.mjs');
const icd = '/usr/lib/chromium/vk_swiftshader_icd.json';
const nativeCli = process.env.FORGE_NATIVE_BIN ?? join(root, 'build', 'forge');
const tokenizer = join(root, 'data', 'gpt2-tokenizer');

for (const [what, path] of [['the wasm CLI (bash scripts/build_wasm.sh)', wasmCli],
  ['the native CLI (cmake --build build)', nativeCli],
  ['the tokenizer files (bash scripts/fetch_tokenizer.sh)', tokenizer]]) {
  if (!existsSync(path)) throw new Error(`missing ${what}: ${path}`);
}

// The wasm CLI; with gpu, on Chromium's SwiftShader WebGPU adapter through Dawn for Node.
function wasm(args, input, gpu = false) {
  const env = { ...process.env };
  if (gpu) env.VK_ICD_FILENAMES = icd; else env.VK_ICD_FILENAMES = '/nonexistent.json';
  return execFileSync(process.execPath, ['--no-experimental-fetch', runner, wasmCli, ...args],
    { encoding: 'utf8', maxBuffer: 1 << 26, input, env });
}
function native(args) {
  return execFileSync(nativeCli, args, { encoding: 'utf8', maxBuffer: 1 << 26 });
}

test('tokenizer golden strings: the wasm ids are HF\'s', () => {
  // Every 8th string: a process per string costs 0.3 s (the scanner itself is checked against
  // PCRE2 on all of them natively, tests/test_pretokenizer_scan.cpp).
  const cases = JSON.parse(readFileSync(join(root, 'tests/data/tokenizer_golden.json'), 'utf8'))
    .filter((_, i) => i % 8 === 0);
  assert.ok(cases.length >= 50);
  for (const { text, ids } of cases) {
    const got = JSON.parse(wasm(['tokenize', '-m', tokenizer, '--json'], text)).ids;
    assert.deepEqual(got, ids, `text ${JSON.stringify(text)}`);
  }
});

test('greedy tokens of a golden model: HF\'s, and the native CLI\'s output byte for byte', () => {
  const model = join(root, 'tests/data/golden/f16_50257');
  const golden = JSON.parse(readFileSync(join(model, 'golden.json'), 'utf8'));
  const cases = typeof golden.greedy === 'string' ? JSON.parse(golden.greedy.replaceAll("'", '"')) : golden.greedy;
  assert.ok(cases.length >= 1);
  for (const { prompt, tokens } of cases) {
    const args = ['--threads', '1', 'generate', '-m', model, '--prompt-ids', prompt.join(','),
      '-n', String(tokens.length), '--greedy', '--ignore-eos', '--json'];
    const out = JSON.parse(wasm(args));
    assert.deepEqual(out.ids, tokens, `prompt ${prompt}`);
    assert.deepEqual(out.ids, JSON.parse(native(args)).ids);
  }
  // Text in, text out (tokenizer and streaming decoder too).
  const args = ['--threads', '1', 'generate', '-m', model, '--tokenizer', tokenizer,
    '-p', 'Hello, my dog is cute', '-n', '24', '--greedy'];
  assert.equal(wasm(args), native(args));
});

test('a GGUF file written by llama.cpp (q8_0 weights, its own tokenizer)', () => {
  const model = join(root, 'tests/data/llamacpp/f16_50257.q8_0.gguf');
  const args = ['--threads', '1', 'generate', '-m', model, '--tokenizer', tokenizer, '-p', 'The quick brown fox', '-n', '16',
    '--greedy', '--ignore-eos', '--json'];
  const got = JSON.parse(wasm(args));
  const want = JSON.parse(native(args));
  assert.equal(got.ids.length, 16);
  assert.deepEqual(got.ids, want.ids);
  assert.equal(got.text, want.text);
});

test('bad input: the same error line and exit status 1', () => {
  const args = ['generate', '-m', join(root, 'tests/data/tokenizer_golden.json'), '-p', 'x'];
  for (const run of [wasm, native]) {
    assert.throws(() => run(args), (e) => e.status === 1 && /^error: /m.test(e.stderr));
  }
});

test('greedy decoding on WebGPU: the native CPU\'s tokens', () => {
  for (const model of [join(root, 'tests/data/golden/f16_50257'),
    join(root, 'tests/data/llamacpp/f16_50257.q8_0.gguf')]) {
    const args = ['generate', '-m', model, '--tokenizer', tokenizer, '-p', 'The quick brown fox',
      '-n', '12', '--greedy', '--ignore-eos', '--json'];
    const want = JSON.parse(native(['--threads', '1', ...args]));
    const got = JSON.parse(wasm([...args, '--device', 'webgpu'], undefined, true));
    assert.deepEqual(got.ids, want.ids, model);
    assert.equal(got.text, want.text);
  }
});

test('a WebGPU decode step: every op dispatched on the GPU, one 4-byte read (the token)', () => {
  const out = JSON.parse(wasm(['bench', '--model', join(root, 'tests/data/golden/f16_50257'),
    '--device', 'webgpu', '--prompt-tokens', '4', '--decode-tokens', '8', '--train-steps', '0',
    '--json'], undefined, true));
  assert.equal(out.device, 'webgpu:0');
  const step = out.decode_step_device;
  assert.ok(step, 'the WebGPU device keeps counts');
  // 2 layers: per layer ln, qkv, kv_write + attention, proj, ln, fc, proj (+ adds); then ln_f,
  // the LM head and argmax. A fallback to the CPU would dispatch nothing.
  assert.ok(step.dispatches >= 15, `${step.dispatches} dispatches per step`);
  assert.equal(step.reads, 1, 'reads per step: only the token, no operand between ops');
  assert.ok(step.submits <= 2, `${step.submits} submits per step`);
  assert.equal(step.allocations, 0, 'pooled buffers: no allocation per step');
});

test('devices: the WebGPU adapter is listed, and none without one', () => {
  const listed = JSON.parse(wasm(['devices', '--json'], undefined, true)).devices;
  const gpu = listed.find((d) => d.device.startsWith('webgpu'));
  assert.ok(gpu, JSON.stringify(listed));
  assert.match(gpu.name, /swiftshader/i);
  const cpuOnly = JSON.parse(wasm(['devices', '--json'])).devices;
  assert.deepEqual(cpuOnly.map((d) => d.device), ['cpu']);
});
