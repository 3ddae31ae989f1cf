// The page's thread: controls and display only. Models load and generate in worker.js.
// window.forge holds what the page knows (device, model, the last result), for people
// poking at it in the console and for web/tests/page.test.mjs.
// URL options: ?device=cpu (the wasm CPU backend even with WebGPU), ?threads=N (the CPU's
// threads; default: all the browser reports, where the page is cross-origin isolated),
// ?autoload=0 (do not load the served model on opening).
'use strict';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const state = window.forge = { ready: false, device: '', gpu: false, notice: '', model: null, busy: false,
  generating: false, tokens: 0, firstTokenAt: 0, startedAt: 0, lastResult: null, errors: [] };
const worker = new Worker('worker.js');

const mib = (n) => (n / 2 ** 20).toFixed(n < 10 * 2 ** 20 ? 1 : 0) + ' MiB';
const count = (n) => n >= 1e6 ? (n / 1e6).toFixed(1) + 'M' : n >= 1e3 ? (n / 1e3).toFixed(1) + 'k' : String(n);

function showError(message) {
  state.errors.push(message);
  $('error').textContent = message;
  $('error').hidden = false;
}
function clearError() { $('error').hidden = true; $('error').textContent = ''; }

function setBusy(busy, generating = false) {
  state.busy = busy;
  state.generating = generating;
  $('generate').disabled = busy || !state.model;
  $('stop').disabled = !generating;
  for (const id of ['load-served', 'pick-folder', 'pick-gguf']) $(id).disabled = busy;
}

function options() {
  const num = (id) => Number($(id).value);
  const o = { greedy: $('greedy').checked, temperature: num('temperature'), top_k: num('top-k'),
    top_p: num('top-p'), max_tokens: num('max-tokens'), seed: num('seed') };
  const bad = (what) => { throw new Error(what); };
  if (!(o.temperature >= 0)) bad('The temperature must be 0 or more (0 is greedy).');
  if (!Number.isInteger(o.top_k) || o.top_k < 0) bad('top-k must be a whole number, 0 or more (0 keeps every token).');
  if (!(o.top_p > 0 && o.top_p <= 1)) bad('top-p must be more than 0 and at most 1.');
  if (!Number.isInteger(o.max_tokens) || o.max_tokens < 1 || o.max_tokens > 4096) bad('The number of tokens must be a whole number from 1 to 4096.');
  if (!Number.isInteger(o.seed) || o.seed < 0) bad('The seed must be a whole number, 0 or more.');
  return o;
}

function showStats(final) {
  const r = state.lastResult;
  if (final && r) {
    const decode = r.decode_steps > 0 && r.decode_seconds > 0 ? r.decode_steps / r.decode_seconds : null;
    const prefill = r.prefill_seconds > 0 ? r.prompt_tokens / r.prefill_seconds : null;
    const parts = [`${r.ids.length} tokens`];
    if (decode !== null) parts.push(`${decode.toFixed(1)} tok/s`);
    if (prefill !== null) parts.push(`prompt ${r.prompt_tokens} tokens at ${prefill.toFixed(0)} tok/s`);
    const why = { length: 'the token limit', eos: 'end of text', stop: 'a stop string', context: 'the end of the context', callback: 'Stop' }[r.stop_reason];
    if (why) parts.push(`stopped by ${why}`);
    $('stats').textContent = parts.join(' · ');
    return;
  }
  const secs = (performance.now() - state.firstTokenAt) / 1000;
  const rate = state.tokens > 1 && secs > 0 ? ` · ${((state.tokens - 1) / secs).toFixed(1)} tok/s` : '';
  $('stats').textContent = `${state.tokens} tokens${rate}`;
}

worker.onmessage = (e) => {
  const m = e.data;
  switch (m.type) {
    case 'ready':
      Object.assign(state, { ready: true, device: m.device, gpu: m.gpu, notice: m.notice, limits: m.limits, threads: m.threads });
      $('device').textContent = m.gpu ? `WebGPU: ${m.device}` : m.device;
      if (m.notice) { $('notice').textContent = m.notice; $('notice').hidden = false; }
      setBusy(false);
      fetch('model/manifest.json', { method: 'HEAD' }).then((r) => {
        if (!r.ok) return;
        $('load-served').hidden = false;
        if (params.get('autoload') !== '0') loadServed();
      }).catch(() => {});
      break;
    case 'progress':
      $('progress').hidden = false;
      $('progress').max = m.total || 1;
      $('progress').value = m.done;
      $('progress-text').textContent = `${mib(m.done)} of ${mib(m.total)}`;
      break;
    case 'loaded': {
      const i = m.info;
      state.model = { ...m };
      $('progress').hidden = true;
      const from = m.opfs && m.fetched_bytes === 0 ? ' (from the browser cache)' : '';
      $('progress-text').textContent = `loaded in ${m.load_seconds.toFixed(1)} s${from}`;
      $('model').textContent = `${m.name}: ${count(i.parameters)} parameters, ${i.dtype}, ${mib(i.weight_bytes)} of weights, ` +
        `${i.n_layer} layers, context ${i.n_ctx}` + (i.tokenizer ? '' : ' (no tokenizer files: it cannot take text)');
      setBusy(false);
      break;
    }
    case 'token':
      if (state.tokens === 0) state.firstTokenAt = performance.now();
      state.tokens++;
      showStats(false);
      break;
    case 'text':
      $('output').textContent += m.text;
      break;
    case 'done':
      state.lastResult = m.result;
      showStats(true);
      setBusy(false);
      break;
    case 'error':
      $('progress').hidden = true;
      showError(m.message);
      if (m.during === 'load-served' || m.during === 'load-files') {
        state.model = null;
        $('model').textContent = 'none loaded';
      }
      setBusy(false);
      break;
  }
};
worker.onerror = (e) => { showError(`The engine failed to start: ${e.message || 'the worker script could not run'}.`); };

function loadServed() {
  clearError();
  setBusy(true);
  $('progress-text').textContent = 'loading…';
  worker.postMessage({ type: 'load-served' });
}

function loadFiles(input) {
  const files = [...input.files];
  input.value = '';
  if (!files.length) return;
  clearError();
  setBusy(true);
  $('progress-text').textContent = 'loading…';
  worker.postMessage({ type: 'load-files', files });
}

$('load-served').onclick = loadServed;
$('pick-folder').onchange = () => loadFiles($('pick-folder'));
$('pick-gguf').onchange = () => loadFiles($('pick-gguf'));
$('greedy').onchange = () => {
  for (const id of ['temperature', 'top-k', 'top-p', 'seed']) $(id).disabled = $('greedy').checked;
};
$('generate').onclick = () => {
  clearError();
  let o;
  try { o = options(); } catch (err) { showError(err.message); return; }
  const prompt = $('prompt').value;
  if (!prompt) { showError('Type a prompt first.'); return; }
  $('shown-prompt').textContent = prompt;
  $('output').textContent = '';
  Object.assign(state, { tokens: 0, lastResult: null, startedAt: performance.now() });
  $('stats').textContent = '';
  setBusy(true, true);
  worker.postMessage({ type: 'generate', prompt, options: o });
};
$('stop').onclick = () => worker.postMessage({ type: 'stop' });
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey) && !$('generate').disabled) $('generate').click();
});

worker.postMessage({ type: 'start', device: params.get('device') === 'cpu' ? 'cpu' : 'auto',
  threads: params.has('threads') ? Number(params.get('threads')) : undefined });
