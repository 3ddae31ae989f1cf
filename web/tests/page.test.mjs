// The page (web/page/, served by web/serve.mjs as scripts/web.sh does) in Debian's Chromium,
// driven by Playwright: WebGPU on Chromium's SwiftShader adapter, and the wasm CPU fallback of
// a browser without WebGPU. The streamed text read from the page's DOM must equal the native
// CLI's output on the same model and settings; the rest is what a person does with the page:
// a second visit (OPFS), Stop, typing while it generates, bad files.
// Run: node --test web/tests/   (after scripts/build_wasm.sh and the native build)
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, copyFileSync, existsSync, ftruncateSync, openSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const nativeCli = process.env.FORGE_NATIVE_BIN ?? join(root, 'build', 'forge');
const chromiumBin = '/usr/bin/chromium';
const shots = join(root, 'build-wasm', 'screenshots');
const golden = join(root, 'tests/data/golden/f16_50257');
const gguf = join(root, 'tests/data/llamacpp/f16_50257.q8_0.gguf');
for (const p of [join(root, 'build-wasm/forge_web.wasm'), nativeCli, chromiumBin, join(root, 'data/gpt2-tokenizer')]) {
  if (!existsSync(p)) throw new Error(`missing ${p} (scripts/build_wasm.sh, the native build, scripts/setup.sh)`);
}

// An HF folder as people have it: the golden model's weights beside GPT-2's tokenizer files.
const work = mkdtempSync(join(tmpdir(), 'forge-page-'));
const model = join(work, 'golden-gpt2');
mkdirSync(model);
for (const f of ['config.json', 'model.safetensors']) symlinkSync(join(golden, f), join(model, f));
for (const f of ['encoder.json', 'vocab.bpe']) symlinkSync(join(root, 'data/gpt2-tokenizer', f), join(model, f));

const PROMPT = 'Hello, my dog is cute';
function native(modelPath, n) {
  const args = ['generate', '-m', modelPath, '-p', PROMPT, '-n', String(n), '--greedy', '--threads', '1'];
  const text = execFileSync(nativeCli, args, { encoding: 'utf8' });
  const ids = JSON.parse(execFileSync(nativeCli, [...args, '--json'], { encoding: 'utf8' })).ids;
  assert.ok(text.endsWith('\n'));
  return { text: text.slice(0, -1), ids };
}

// web/serve.mjs on a free port; resolves to its base URL.
const servers = [];
function serve(modelPath) {
  const child = spawn(process.execPath, [join(root, 'web/serve.mjs'), '--port', '0', ...(modelPath ? ['--model', modelPath] : [])],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  servers.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/forge web: (http:\S+)/);
      if (m) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`web/serve.mjs exited with ${code}`)));
  });
}

let browserGpu, browserCpu;
before(async () => {
  // WebGPU is behind a flag on Linux: with it, SwiftShader's adapter; without it, no adapter
  // (the fallback path a browser without WebGPU takes).
  browserGpu = await chromium.launch({ executablePath: chromiumBin, args: ['--no-sandbox', '--enable-unsafe-webgpu'] });
  browserCpu = await chromium.launch({ executablePath: chromiumBin, args: ['--no-sandbox'] });
  mkdirSync(shots, { recursive: true });
});
after(async () => {
  await browserGpu?.close();
  await browserCpu?.close();
  for (const s of servers) s.kill();
  rmSync(work, { recursive: true, force: true });
});

// Opens the page and waits until the served model has loaded (or an error shows).
async function open(context, url) {
  const page = await context.newPage();
  const modelRequests = [];
  page.on('request', (r) => { if (r.url().includes('/model/files/')) modelRequests.push(r.url()); });
  page.on('pageerror', (e) => { throw e; });
  await page.goto(url);
  await page.waitForFunction(() => window.forge.model || window.forge.errors.length, null, { timeout: 60_000 });
  const errors = await page.evaluate(() => window.forge.errors);
  assert.deepEqual(errors, []);
  return { page, modelRequests };
}

async function generate(page, n, { greedy = true } = {}) {
  await page.fill('#prompt', PROMPT);
  await page.fill('#max-tokens', String(n));
  if (greedy) await page.check('#greedy');
  await page.click('#generate');
  await page.waitForFunction(() => window.forge.lastResult || window.forge.errors.length, null, { timeout: 120_000 });
  assert.deepEqual(await page.evaluate(() => window.forge.errors), []);
  return {
    text: await page.textContent('#output'),
    result: await page.evaluate(() => window.forge.lastResult),
  };
}

test('WebGPU (SwiftShader): the streamed text and tokens are the native CLI\'s, every op on the GPU', async () => {
  const url = await serve(model);
  const context = await browserGpu.newContext();
  const { page } = await open(context, url);
  const device = await page.evaluate(() => window.forge.device);
  assert.match(device, /swiftshader/i, 'the WebGPU adapter (a fallback to the CPU would say "CPU (wasm)")');
  assert.match(await page.textContent('#device'), /^WebGPU: .*swiftshader/i);
  assert.equal(await page.isVisible('#notice'), false);
  assert.match(await page.textContent('#model'), /golden-gpt2: 1\.6M parameters, f32, .*2 layers, context 128/);

  const n = 24;
  const want = native(model, n);
  const { text, result } = await generate(page, n);
  assert.equal(text, want.text);
  assert.deepEqual(result.ids, want.ids);
  // Each forward pass (the prompt's, then one per token) reads back only its token: no
  // kernel's operands go to the host between ops. A GPT-2 block alone is more than 15 ops.
  const passes = result.decode_steps + 1;
  assert.equal(result.device.reads, passes);
  assert.ok(result.device.dispatches >= 15 * passes, `dispatches ${result.device.dispatches}`);
  assert.match(await page.textContent('#stats'), /^24 tokens · [\d.]+ tok\/s/);
  await page.screenshot({ path: join(shots, 'page-webgpu.png'), fullPage: true });
  await context.close();
});

test('WebGPU: a llama.cpp GGUF file (q8_0 weights and its own tokenizer) gives the native tokens', async () => {
  const url = await serve(gguf);
  const context = await browserGpu.newContext();
  const { page } = await open(context, url);
  assert.match(await page.textContent('#model'), /q8_0/);
  const want = native(gguf, 16);
  const { text, result } = await generate(page, 16);
  assert.deepEqual(result.ids, want.ids);
  assert.equal(text, want.text);
  await context.close();
});

// Without WebGPU the page runs on the CPU: on the served page (cross-origin isolated) the
// threads build with ?threads=N workers, and with ?threads=1 the single-threaded build. Both
// must give the native CLI's single-threaded text and ids: forge's CPU results do not depend
// on the thread count.
for (const threads of [2, 1]) {
  test(`no WebGPU: the fallback notice, and the wasm CPU backend on ${threads} thread(s) gives the native text`, async () => {
    const url = await serve(model);
    const context = await browserCpu.newContext();
    const requests = [];
    context.on('request', (r) => requests.push(new URL(r.url()).pathname));
    const { page } = await open(context, `${url}?threads=${threads}`);
    assert.equal(await page.evaluate(() => self.crossOriginIsolated), true);
    assert.equal(await page.textContent('#device'), threads > 1 ? `CPU (wasm, ${threads} threads)` : 'CPU (wasm)');
    assert.equal(await page.evaluate(() => window.forge.model.info.threads), threads);
    // The module that ran: the threads build (with its pthread workers' script) or the other.
    assert.equal(requests.includes('/forge_web_mt.wasm'), threads > 1, requests.join(' '));
    assert.equal(requests.includes('/forge_web_mt.worker.js'), threads > 1, requests.join(' '));
    assert.equal(requests.includes('/forge_web.wasm'), threads === 1, requests.join(' '));
    assert.match(await page.textContent('#notice'), /forge runs on the CPU \(wasm\)/);
    assert.equal(await page.isVisible('#notice'), true);
    const want = native(model, 40);
    const { text, result } = await generate(page, 40);
    assert.equal(text, want.text);
    assert.deepEqual(result.ids, want.ids);
    assert.equal(result.device, undefined);  // the CPU counts no dispatches
    if (threads > 1) await page.screenshot({ path: join(shots, 'page-cpu.png'), fullPage: true });
    await context.close();
  });
}

test('a second visit loads the weights from OPFS: no model file is fetched again', async () => {
  const url = await serve(model);
  const context = await browserCpu.newContext();
  const first = await open(context, url);
  assert.ok(first.modelRequests.length >= 2, `first visit fetched ${first.modelRequests}`);
  assert.equal(await first.page.evaluate(() => window.forge.model.opfs), true);
  await first.page.close();
  const second = await open(context, url);
  assert.deepEqual(second.modelRequests, []);
  assert.equal(await second.page.evaluate(() => window.forge.model.fetched_bytes), 0);
  assert.match(await second.page.textContent('#progress-text'), /from the browser cache/);
  // And it still generates the same text.
  const { text } = await generate(second.page, 12);
  assert.equal(text, native(model, 12).text);
  await context.close();
});

test('Stop ends a stream, and the page answers input while it generates', async () => {
  const url = await serve(model);
  const context = await browserGpu.newContext();
  const { page } = await open(context, url);
  await page.fill('#prompt', PROMPT);
  await page.fill('#max-tokens', '120');
  await page.uncheck('#greedy');
  await page.click('#generate');
  await page.waitForFunction(() => window.forge.tokens >= 3, null, { timeout: 60_000 });
  // The page's thread is free: typing lands, and a frame comes at once.
  const t0 = Date.now();
  await page.fill('#seed', '7');
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(r)));
  const answered = Date.now() - t0;
  assert.equal(await page.inputValue('#seed'), '7');
  assert.equal(await page.evaluate(() => window.forge.generating), true, 'still generating while typing');
  assert.ok(answered < 1000, `the page took ${answered} ms to answer`);
  await page.click('#stop');
  await page.waitForFunction(() => window.forge.lastResult, null, { timeout: 60_000 });
  const r = await page.evaluate(() => window.forge.lastResult);
  assert.equal(r.stop_reason, 'callback');
  assert.ok(r.ids.length < 120, `${r.ids.length} tokens`);
  assert.match(await page.textContent('#stats'), /stopped by Stop/);
  assert.equal(await page.isEnabled('#generate'), true);
  await context.close();
});

test('bad files: the page says which file and what is wrong', async () => {
  const url = await serve(null);
  const context = await browserCpu.newContext();
  const page = await context.newPage();
  await page.goto(url + '?autoload=0');
  await page.waitForFunction(() => window.forge.ready, null, { timeout: 60_000 });
  const errorAfter = async (pick) => {
    await page.evaluate(() => { window.forge.errors = []; });
    await pick();
    await page.waitForFunction(() => window.forge.errors.length, null, { timeout: 60_000 });
    return page.textContent('#error');
  };
  const bad = join(work, 'bad');
  mkdirSync(bad);
  writeFileSync(join(bad, 'broken.gguf'), 'GGUF this is not a GGUF file at all');
  assert.match(await errorAfter(() => page.setInputFiles('#pick-gguf', join(bad, 'broken.gguf'))),
    /^Could not load broken\.gguf: .*\S\.$/);
  // A folder whose weights are cut short.
  const cut = join(work, 'cut-model');
  mkdirSync(cut);
  copyFileSync(join(golden, 'config.json'), join(cut, 'config.json'));  // an upload skips links
  writeFileSync(join(cut, 'model.safetensors'), Buffer.alloc(40, 7));
  assert.match(await errorAfter(() => page.setInputFiles('#pick-folder', cut)), /^Could not load cut-model: .*model\.safetensors/);
  // A folder that is no model at all.
  const notModel = join(work, 'photos');
  mkdirSync(notModel);
  writeFileSync(join(notModel, 'cat.jpg'), 'meow');
  assert.match(await errorAfter(() => page.setInputFiles('#pick-folder', notModel)), /^photos has no config\.json/);
  assert.equal(await page.textContent('#model'), 'none loaded');
  assert.equal(await page.isDisabled('#generate'), true);
  await page.screenshot({ path: join(shots, 'page-error.png') });
  await context.close();
});

test('a model beyond the page\'s limits: the error names the limit, and nothing is downloaded', async () => {
  // A folder whose weights (a sparse file) exceed what wasm32's memory can hold.
  const big = join(work, 'huge-gpt2');
  mkdirSync(big);
  copyFileSync(join(golden, 'config.json'), join(big, 'config.json'));
  const fd = openSync(join(big, 'model.safetensors'), 'w');
  ftruncateSync(fd, 3.75 * 2 ** 30);
  closeSync(fd);
  const url = await serve(big);
  const context = await browserCpu.newContext();
  const page = await context.newPage();
  const fetched = [];
  page.on('request', (r) => { if (r.url().includes('/model/files/')) fetched.push(r.url()); });
  await page.goto(url);
  await page.waitForFunction(() => window.forge.errors.length, null, { timeout: 60_000 });
  assert.equal(await page.textContent('#error'),
    'huge-gpt2 is 3.75 GiB, more than the 3.50 GiB a wasm page can read into its 4 GiB memory.');
  assert.deepEqual(fetched, []);
  assert.equal(await page.textContent('#model'), 'none loaded');
  await context.close();
});
