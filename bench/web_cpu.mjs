// The wasm CPU backend in Chromium against native forge on the CPU, same thread count T
// (T > 1: the page's threads build, on a cross-origin isolated page), GPT-2 124M's shapes with
// random weights: prefill of P tokens and greedy decode of N, R alternating runs each, medians.
//   node bench/web_cpu.mjs [--prompt 128] [--decode 32] [--runs 3] [--preset gpt2] [--threads 1]
// Needs build-wasm/forge_web.* and build-wasm-mt/forge_web_mt.* (scripts/build_wasm.sh),
// build/forge, web/node_modules (scripts/setup_web.sh) and /usr/bin/chromium. Prints one JSON
// line per run, then a summary.
import { execFileSync, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from '../web/node_modules/playwright-core/index.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const opt = { prompt: 128, decode: 32, runs: 3, preset: 'gpt2', threads: 1 };
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i].replace(/^--/, '');
  if (!(k in opt) || process.argv[i + 1] === undefined) throw new Error(`usage: node bench/web_cpu.mjs [--prompt P] [--decode N] [--runs R] [--preset NAME] [--threads T]`);
  opt[k] = k === 'preset' ? process.argv[i + 1] : Number(process.argv[i + 1]);
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const server = spawn(process.execPath, [join(root, 'web/serve.mjs'), '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise((resolve) => {
  let out = '';
  server.stdout.on('data', (d) => { out += d; const m = out.match(/forge web: (http:\S+)/); if (m) resolve(m[1]); });
});
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
const page = await browser.newPage();
await page.goto(url + '?autoload=0');
console.log(JSON.stringify({ chromium: browser.version(), cpu: execFileSync('sh', ['-c', "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"]).toString().trim() }));

// A worker of the page's own (worker.js) on the CPU, with the preset's random model.
const threads = await page.evaluate(async ([preset, threads]) => {
  const w = new Worker('worker.js');
  const next = (type) => new Promise((resolve, reject) => {
    w.onmessage = (e) => {
      if (e.data.type === type) resolve(e.data);
      else if (e.data.type === 'error') reject(new Error(e.data.message));
    };
  });
  w.postMessage({ type: 'start', device: 'cpu', threads });
  const ready = await next('ready');
  w.postMessage({ type: 'load-preset', name: preset, seed: 1 });
  await next('loaded');
  window.benchRun = async (ids, n) => {
    w.postMessage({ type: 'generate', prompt: '', options: { prompt_ids: ids, max_tokens: n, greedy: true, ignore_eos: true } });
    return (await next('done')).result;
  };
  return ready.threads;
}, [opt.preset, opt.threads]);
if (threads !== opt.threads) throw new Error(`the page runs ${threads} thread(s), not ${opt.threads} (is build-wasm-mt/ built?)`);

const ids = Array.from({ length: opt.prompt }, (_, i) => (i * 7919 + 13) % 50257);
const rows = { wasm: { prefill: [], decode: [] }, native: { prefill: [], decode: [] } };
for (let r = 0; r < opt.runs; r++) {
  const w = await page.evaluate(([ids, n]) => window.benchRun(ids, n), [ids, opt.decode]);
  const wasm = { run: r, build: 'wasm-chromium', prefill_tok_s: w.prompt_tokens / w.prefill_seconds, decode_tok_s: w.decode_steps / w.decode_seconds };
  console.log(JSON.stringify(wasm));
  const n = JSON.parse(execFileSync(join(root, 'build/forge'), ['--threads', String(opt.threads), 'bench', '--preset', opt.preset, '--prompt-tokens',
    String(opt.prompt), '--decode-tokens', String(opt.decode), '--train-steps', '0', '--json'], { encoding: 'utf8' }));
  const native = { run: r, build: 'native', prefill_tok_s: n.prefill_tok_s, decode_tok_s: n.decode_tok_s };
  console.log(JSON.stringify(native));
  for (const [k, v] of [['wasm', wasm], ['native', native]]) {
    rows[k].prefill.push(v.prefill_tok_s);
    rows[k].decode.push(v.decode_tok_s);
  }
}
const m = (k, f) => median(rows[k][f]);
console.log(JSON.stringify({
  summary: `${opt.preset}, prompt ${opt.prompt}, decode ${opt.decode}, ${opt.threads} thread(s), medians of ${opt.runs}`,
  wasm_prefill_tok_s: m('wasm', 'prefill'), native_prefill_tok_s: m('native', 'prefill'),
  prefill_ratio: m('wasm', 'prefill') / m('native', 'prefill'),
  wasm_decode_tok_s: m('wasm', 'decode'), native_decode_tok_s: m('native', 'decode'),
  decode_ratio: m('wasm', 'decode') / m('native', 'decode'),
}));
await browser.close();
server.kill();
