// forge's page server (scripts/web.sh runs it): the page (web/page/), the browser module
// (build-wasm/forge_web.js + .wasm, and its threads build build-wasm-mt/forge_web_mt.js +
// .wasm + .worker.js where it exists) and, with --model, one model's files, on 127.0.0.1 with
// the cross-origin isolation headers (COOP/COEP) that wasm threads need.
//
//   node web/serve.mjs [--model DIR|FILE.gguf] [--port 8080] [--host 127.0.0.1] [--build DIR]
//
// --build DIR names the single-threaded build; the threads build is DIR-mt beside it.
// Routes: /  /app.js  /worker.js ... (the page); /forge_web.js, /forge_web.wasm,
// /forge_web_mt.js, /forge_web_mt.wasm, /forge_web_mt.worker.js (404 without the threads build);
// /model/manifest.json ({name, kind: "folder"|"gguf", version, files: [{name, size}]}, 404
// without --model); /model/files/NAME (only the manifest's files). Prints the URL once
// listening ("forge web: http://HOST:PORT/"); --port 0 picks a free port.
import { createReadStream, existsSync, readdirSync, statSync } from 'node:fs';
import { createHash } from 'node:crypto';
import http from 'node:http';
import { basename, dirname, extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const die = (what) => { console.error(`error: ${what}`); process.exit(1); };

function parseArgs(argv) {
  const a = { model: '', port: 8080, host: '127.0.0.1', build: join(here, '..', 'build-wasm') };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i], value = argv[i + 1];
    const need = () => { if (value === undefined) die(`${flag} needs a value`); i++; return value; };
    if (flag === '-m' || flag === '--model') a.model = need();
    else if (flag === '--port') a.port = Number(need());
    else if (flag === '--host') a.host = need();
    else if (flag === '--build') a.build = need();
    else die(`unknown option ${flag} (usage: node web/serve.mjs [--model DIR|FILE.gguf] [--port N] [--host H] [--build DIR])`);
  }
  if (!Number.isInteger(a.port) || a.port < 0 || a.port > 65535) die(`--port must be 0-65535, not ${a.port}`);
  return a;
}

// The files of a model a page needs: an HF folder's JSON, safetensors and tokenizer files, or
// one .gguf file.
const MODEL_FILE = /(\.json|\.safetensors|^merges\.txt|^vocab\.bpe)$/;
function modelManifest(path) {
  let st;
  try { st = statSync(path); } catch (e) { die(`model '${path}' does not exist`); }
  let kind, files;
  if (st.isFile()) {
    if (extname(path) !== '.gguf') die(`model '${path}' is a file but not a .gguf file`);
    kind = 'gguf';
    files = [{ name: basename(path), path, st }];
  } else {
    kind = 'folder';
    files = readdirSync(path).filter((n) => MODEL_FILE.test(n)).map((n) => ({ name: n, path: join(path, n) }))
      .map((f) => ({ ...f, st: statSync(f.path) })).filter((f) => f.st.isFile());
    if (!files.some((f) => f.name === 'config.json')) die(`model folder '${path}' has no config.json`);
  }
  const version = createHash('sha256').update(files.map((f) => `${f.name}:${f.st.size}:${f.st.mtimeMs}`).join('\n'))
    .digest('hex').slice(0, 16);
  return {
    manifest: { name: basename(resolve(path)), kind, version, files: files.map((f) => ({ name: f.name, size: f.st.size })) },
    paths: new Map(files.map((f) => [f.name, f.path])),
  };
}

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.cjs': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm', '.json': 'application/json' };

const args = parseArgs(process.argv.slice(2));
const page = join(here, 'page');
const statics = new Map();
for (const name of readdirSync(page)) statics.set('/' + name, join(page, name));
statics.set('/', join(page, 'index.html'));
for (const name of ['forge_web.js', 'forge_web.wasm']) {
  const p = join(args.build, name);
  if (!existsSync(p)) die(`${p} is missing: build it with bash scripts/build_wasm.sh`);
  statics.set('/' + name, p);
}
// Without the threads build the page runs on one CPU thread (its worker falls back).
const threadsBuild = `${args.build.replace(/\/+$/, '')}-mt`;
for (const name of ['forge_web_mt.js', 'forge_web_mt.wasm', 'forge_web_mt.worker.js']) {
  const p = join(threadsBuild, name);
  if (existsSync(p)) statics.set('/' + name, p);
}
const model = args.model ? modelManifest(args.model) : null;

function send(res, status, headers, body) {
  res.writeHead(status, {
    // Cross-origin isolation: SharedArrayBuffer (wasm threads) needs both.
    'Cross-Origin-Opener-Policy': 'same-origin',
    'Cross-Origin-Embedder-Policy': 'require-corp',
    'Cross-Origin-Resource-Policy': 'same-origin',
    'Cache-Control': 'no-cache',
    ...headers,
  });
  if (body === undefined) res.end(); else if (typeof body === 'string' || Buffer.isBuffer(body)) res.end(body); else body.pipe(res);
}

function sendFile(req, res, path, type) {
  const size = statSync(path).size;
  const headers = { 'Content-Type': type || TYPES[extname(path)] || 'application/octet-stream', 'Content-Length': size };
  send(res, 200, headers, req.method === 'HEAD' ? undefined : createReadStream(path));
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const path = decodeURIComponent(url.pathname);
  if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, { Allow: 'GET, HEAD' }, 'method not allowed\n');
  if (statics.has(path)) return sendFile(req, res, statics.get(path));
  if (path === '/model/manifest.json') {
    if (!model) return send(res, 404, { 'Content-Type': 'application/json' }, '{"error":"no model is served (web.sh -m MODEL)"}\n');
    return send(res, 200, { 'Content-Type': 'application/json' }, req.method === 'HEAD' ? undefined : JSON.stringify(model.manifest));
  }
  if (model && path.startsWith('/model/files/') && model.paths.has(path.slice('/model/files/'.length))) {
    return sendFile(req, res, model.paths.get(path.slice('/model/files/'.length)), 'application/octet-stream');
  }
  send(res, 404, { 'Content-Type': 'text/plain' }, 'not found\n');
});
server.on('error', (e) => die(`cannot listen on ${args.host}:${args.port}: ${e.message}`));
server.listen(args.port, args.host, () => {
  const { port } = server.address();
  console.log(`forge web: http://${args.host}:${port}/` + (model ? ` (model ${model.manifest.name}, ${model.manifest.files.length} files)` : ''));
});
const stop = () => { server.close(() => process.exit(0)); server.closeAllConnections(); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
