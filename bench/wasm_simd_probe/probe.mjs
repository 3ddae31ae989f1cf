// Times probe.wasm (build.sh) in node and in Chromium (Playwright, Debian's /usr/bin/chromium):
// the best of 7 runs of 2e7 iterations, as GFLOP/s of f32x4 mul + add on one thread.
//   bash bench/wasm_simd_probe/build.sh /tmp && node bench/wasm_simd_probe/probe.mjs /tmp/probe.wasm
import { readFileSync } from 'node:fs';
import { chromium } from '../../web/node_modules/playwright-core/index.mjs';

const wasmPath = process.argv[2] ?? new URL('./probe.wasm', import.meta.url).pathname;
const bytes = readFileSync(wasmPath);

// The same function runs in both engines (it is serialized into the page).
async function measure(b64) {
  const raw = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const { instance } = await WebAssembly.instantiate(raw, {});
  const { probe, flops_per_iteration } = instance.exports;
  const iterations = 2e7;
  probe(1e6);  // tiered up before timing
  let best = Infinity;
  for (let r = 0; r < 7; r++) {
    const t0 = performance.now();
    probe(iterations);
    best = Math.min(best, performance.now() - t0);
  }
  return flops_per_iteration() * iterations / (best / 1e3) / 1e9;
}

const b64 = bytes.toString('base64');
const node = await measure(b64);
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
const page = await browser.newPage();
const inChromium = await page.evaluate(`(${measure.toString()})(${JSON.stringify(b64)})`);
console.log(JSON.stringify({ node: process.version, chromium: browser.version(), node_gflops: node, chromium_gflops: inChromium }));
await browser.close();
