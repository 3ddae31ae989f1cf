#!/usr/bin/env node
// llama.cpp (the prebuilt CPU build shipped by node-llama-cpp, pinned in package.json) as the
// reference side of forge's GGUF interop tests and benchmark. One command per call; the result is
// one JSON line on stdout; failures print `error: ...` on stderr and exit 1. llama.cpp's own log
// lines go to stderr (only warnings and errors unless --verbose).
//
//   node tools/llamacpp/run.mjs greedy   --model F.gguf --ids 1,2,3 --n 32 [--threads 1]
//   node tools/llamacpp/run.mjs tokenize --model F.gguf (--text "..." | --text-file F) [--plain]
//   node tools/llamacpp/run.mjs probs    --model F.gguf --ids 1,2,3 [--top 10] [--of 5,6] [--raw]
//   node tools/llamacpp/run.mjs bench    --model F.gguf --prefill 128 --decode 64 --threads N [--reps 3]
//   node tools/llamacpp/run.mjs parallel --model F.gguf --sequences S --prefill 8 --decode 64 --threads N
//   node tools/llamacpp/run.mjs info     [--model F.gguf]
//
// Common options: --threads N (default 1), --kv-type f16|f32 (KV cache type; llama.cpp's default
// is f16), --flash-attn auto|on|off (default auto, llama.cpp's default: on for the CPU), --exact
// (= --kv-type f32 --flash-attn off: no f16 rounding anywhere in attention; the CPU flash-attention
// kernel works in f16 even with an f32 cache), --verbose (llama.cpp's debug log on stderr).
//
// Everything runs on the CPU: gpu:false, build:"never" (never compiles llama.cpp from source) and
// skipDownload (never fetches anything); only the prebuilt binaries in node_modules are used.

import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

// node-llama-cpp reads these when its config module loads, so set them before importing it.
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD ??= "true";
process.env.NODE_LLAMA_CPP_GPU ??= "false";
process.env.NODE_LLAMA_CPP_POSTINSTALL ??= "skip";

const USAGE = `usage: run.mjs <greedy|tokenize|probs|bench|parallel|info> --model F.gguf [options]
  greedy   --ids 1,2,3 --n 32 [--threads 1]
  tokenize --text "..." | --text-file F [--plain]
  probs    --ids 1,2,3 [--top 10] [--of 5,6] [--raw] [--threads 1]
  bench    --prefill 128 --decode 64 --threads N [--reps 3]
  info     [--model F.gguf]
common: --threads N  --kv-type f16|f32  --flash-attn auto|on|off  --exact  --verbose`;

class UsageError extends Error {}

function parseArgs(argv) {
  const [cmd, ...rest] = argv;
  const flags = new Set(["plain", "verbose", "help", "raw", "exact"]);
  const opts = {};
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    if (!a.startsWith("--")) throw new UsageError(`unexpected argument '${a}'`);
    const eq = a.indexOf("=");
    const key = (eq >= 0 ? a.slice(2, eq) : a.slice(2)).replace(/-/g, "_");
    if (flags.has(key) && eq < 0) { opts[key] = true; continue; }
    if (eq >= 0) { opts[key] = a.slice(eq + 1); continue; }
    if (i + 1 >= rest.length) throw new UsageError(`${a} needs a value`);
    opts[key] = rest[++i];
  }
  return { cmd, opts };
}

function intOpt(opts, key, dflt, { min = 0 } = {}) {
  const v = opts[key];
  if (v === undefined) {
    if (dflt === undefined) throw new UsageError(`--${key.replace(/_/g, "-")} is required`);
    return dflt;
  }
  if (!/^\d+$/.test(String(v)) || Number(v) < min)
    throw new UsageError(`--${key.replace(/_/g, "-")} must be an integer >= ${min}, got '${v}'`);
  return Number(v);
}

function idsOpt(opts, key, { required = true } = {}) {
  const v = opts[key];
  if (v === undefined) {
    if (required) throw new UsageError(`--${key} is required`);
    return null;
  }
  const ids = String(v).split(",").map((s) => s.trim()).filter((s) => s !== "");
  if (ids.length === 0 || !ids.every((s) => /^\d+$/.test(s)))
    throw new UsageError(`--${key} must be a comma-separated list of token ids, got '${v}'`);
  return ids.map(Number);
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

const round = (x, digits = 3) => Number(x.toFixed(digits));

let nlc; // the node-llama-cpp module, imported lazily (after the env defaults above)
let perfLines = null; // while an array, llama_perf_context_print's lines are collected here

// llama.cpp's own timing of the decodes since the last reset (llama_perf_context_print, then reset):
// {prompt_ms, prompt_tokens, eval_ms, eval_runs}.
async function llamaPerf(llama, context) {
  const level = llama.logLevel;
  perfLines = [];
  llama.logLevel = nlc.LlamaLogLevel.info;
  try {
    await context.printTimings(); // prints, resets, and waits a tick for the log lines to arrive
  } finally {
    llama.logLevel = level;
  }
  const text = perfLines.join("");
  perfLines = null;
  const grab = (re) => { const m = text.match(re); return m ? [Number(m[1]), Number(m[2])] : [NaN, NaN]; };
  const [promptMs, promptTokens] = grab(/prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/);
  const [evalMs, evalRuns] = grab(/\beval time =\s*([\d.]+) ms \/\s*(\d+) runs/);
  return { promptMs, promptTokens, evalMs, evalRuns };
}

async function openLlama(opts) {
  nlc = await import("node-llama-cpp");
  const { getLlama, LlamaLogLevel } = nlc;
  const verbose = Boolean(opts.verbose);
  return getLlama({
    gpu: false,
    build: "never",
    usePrebuiltBinaries: true,
    skipDownload: true,
    progressLogs: false,
    maxThreads: 0, // no cap: a context's `threads` is then the exact thread count used
    logLevel: verbose ? LlamaLogLevel.debug : LlamaLogLevel.warn,
    logger: (level, message) => {
      if (perfLines && /llama_perf_context_print/.test(message)) { perfLines.push(message); return; }
      if (!verbose && (level === "info" || level === "debug")) return; // bench raises the level to info
      // node-llama-cpp rounds the context up to a multiple of 256, so a model trained on fewer
      // positions always draws this warning; makeContext() refuses to use more than n_ctx_train.
      if (!verbose && /n_ctx_seq \(\d+\) > n_ctx_train/.test(message)) return;
      process.stderr.write(`[llama.cpp ${level}] ${message.replace(/\n?$/, "\n")}`);
    },
  });
}

async function loadModel(llama, opts, { vocabOnly = false } = {}) {
  if (!opts.model) throw new UsageError("--model is required");
  const t0 = performance.now();
  const model = await llama.loadModel({ modelPath: opts.model, gpuLayers: 0, vocabOnly });
  return { model, loadS: (performance.now() - t0) / 1000 };
}

function vocabSize(model) {
  return model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
}

function checkIds(model, ids, what) {
  const nVocab = vocabSize(model);
  for (const id of ids) if (nVocab != null && id >= nVocab) throw new UsageError(`${what}: token id ${id} >= vocabulary size ${nVocab}`);
}

function trainContext(model) {
  return model.trainContextSize;
}

async function makeContext(model, opts, needed, sequences = 1) { // needed = positions evaluated per sequence
  const nCtxTrain = trainContext(model);
  if (nCtxTrain != null && needed > nCtxTrain)
    throw new UsageError(`needs ${needed} positions but the model's context_length is ${nCtxTrain}`);
  const threads = intOpt(opts, "threads", 1, { min: 1 });
  if (opts.exact) { // everything in f32: llama.cpp's CPU flash attention rounds K/V to f16 even with an f32 cache
    if ((opts.kv_type ?? "f32") !== "f32" || (opts.flash_attn ?? "off") !== "off")
      throw new UsageError("--exact means --kv-type f32 --flash-attn off");
    opts.kv_type = "f32";
    opts.flash_attn = "off";
  }
  const kv = (opts.kv_type ?? "f16").toLowerCase();
  if (!["f16", "f32"].includes(kv)) throw new UsageError(`--kv-type must be f16 or f32, got '${opts.kv_type}'`);
  const fa = (opts.flash_attn ?? "auto").toLowerCase();
  if (!["auto", "on", "off"].includes(fa)) throw new UsageError(`--flash-attn must be auto, on or off, got '${opts.flash_attn}'`);
  // +1: node-llama-cpp shifts the context (erases its first half and re-evaluates the rest) as soon
  // as the sequence is full, even if no further token is asked for; see openSequence().
  const contextSize = (needed + 1) * sequences;
  const context = await model.createContext({
    contextSize,
    batchSize: contextSize, // a whole prompt is one llama_decode batch (n_ubatch = n_batch in node-llama-cpp)
    sequences,
    threads: { ideal: threads, min: threads },
    flashAttention: fa === "auto" ? "auto" : fa === "on",
    experimentalKvCacheKeyType: kv.toUpperCase(),
    experimentalKvCacheValueType: kv.toUpperCase(),
    // hand each batch to llama.cpp at once instead of on the next event-loop turn
    batching: { dispatchSchedule: (dispatch) => dispatch() },
    performanceTracking: true, // llama.cpp's own timings, for bench (llama_perf_context)
  });
  if (context.currentThreads !== undefined && context.currentThreads !== threads)
    process.stderr.write(`warning: context uses ${context.currentThreads} threads, asked for ${threads}\n`);
  return { context, threads };
}

// GPT-2 has learned absolute positions, so a context shift would silently give wrong results:
// make one an error instead (makeContext() sizes the context so that none is needed).
function openSequence(context) {
  return context.getSequence({
    contextShift: { strategy: () => { throw new Error("context full (node-llama-cpp wanted to shift it)"); } },
  });
}

// Plain greedy argmax: temperature 0 selects llama.cpp's greedy sampler, which is then the whole
// sampler chain (top-k/top-p/min-p are only chained for temperature > 0); no repeat penalty, no DRY,
// no token bias, no grammar. yieldEogToken keeps decoding through <|endoftext|> instead of stopping.
const GREEDY = { temperature: 0, yieldEogToken: true };

async function cmdGreedy(llama, opts) {
  const ids = idsOpt(opts, "ids");
  const n = intOpt(opts, "n", 32, { min: 1 });
  const { model } = await loadModel(llama, opts);
  checkIds(model, ids, "--ids");
  const { context } = await makeContext(model, opts, ids.length + n - 1); // the last token is not evaluated
  const seq = openSequence(context);
  const tokens = [];
  for await (const tok of seq.evaluate(ids, GREEDY)) {
    tokens.push(tok);
    if (tokens.length >= n) break;
  }
  if (tokens.length !== n) throw new Error(`generated ${tokens.length} tokens, expected ${n}`);
  return { tokens };
}

async function cmdTokenize(llama, opts) {
  let text;
  if (opts.text !== undefined && opts.text_file !== undefined) throw new UsageError("give --text or --text-file, not both");
  if (opts.text !== undefined) text = String(opts.text);
  else if (opts.text_file !== undefined) text = readFileSync(opts.text_file, "utf8");
  else throw new UsageError("--text or --text-file is required");
  const { model } = await loadModel(llama, opts, { vocabOnly: true });
  // Never adds BOS/EOS: node-llama-cpp calls common_tokenize(vocab, text, add_special=false,
  // parse_special). parse_special is on by default, so "<|endoftext|>" in the text becomes id 50256
  // as in HF's GPT2Tokenizer and forge (all 474 cases of tests/data/tokenizer_golden.json match);
  // --plain tokenizes it as ordinary text.
  const ids = Array.from(model.tokenize(text, !opts.plain));
  return { ids };
}

async function cmdProbs(llama, opts) {
  const ids = idsOpt(opts, "ids");
  const of = idsOpt(opts, "of", { required: false });
  const { model } = await loadModel(llama, opts);
  checkIds(model, ids, "--ids");
  if (of) checkIds(model, of, "--of");
  const nVocab = vocabSize(model);
  const top = Math.min(intOpt(opts, "top", 10, { min: 0 }), nVocab ?? Infinity);
  const { context } = await makeContext(model, opts, ids.length);
  const seq = openSequence(context);
  // With temperature 0 the chain is the greedy sampler alone, which only picks the argmax and leaves
  // the logits as they are; node-llama-cpp then softmaxes the logits of every vocabulary entry
  // (AddonContext.cpp SampleToken): the model's raw distribution at temperature 1.
  let out;
  for await (const r of seq.evaluateWithMetadata(ids, { probabilities: true }, GREEDY)) { out = r; break; }
  if (!out?.probabilities) throw new Error("llama.cpp returned no probabilities");
  const probs = out.probabilities; // Map sorted by probability, highest first
  // node-llama-cpp normalizes with a float32 running sum over the whole vocabulary, which leaves the
  // total off 1 by ~1e-5; dividing by the exact (double) total removes that common factor, leaving
  // each p within float32 rounding of softmax(logits). --raw keeps node-llama-cpp's values as they are.
  let sumRaw = 0;
  for (const p of probs.values()) sumRaw += p;
  const scale = opts.raw ? 1 : 1 / sumRaw;
  const topList = [];
  for (const [id, p] of probs) {
    if (topList.length >= top) break;
    topList.push({ id, p: p * scale });
  }
  const res = { argmax: out.token, n: probs.size, sum_raw: sumRaw, normalized: !opts.raw, top: topList };
  if (of) res.of = of.map((id) => ({ id, p: (probs.get(id) ?? 0) * scale }));
  return res;
}

async function cmdBench(llama, opts) {
  const prefill = intOpt(opts, "prefill", 128, { min: 1 });
  const decode = intOpt(opts, "decode", 64, { min: 1 });
  const reps = intOpt(opts, "reps", 3, { min: 1 });
  const warmup = intOpt(opts, "warmup", 1, { min: 0 });
  const { model, loadS } = await loadModel(llama, opts);
  const nVocab = vocabSize(model);
  const prompt = Array.from({ length: prefill }, (_, i) => (i * 7919) % nVocab);
  const t0 = performance.now();
  const { context, threads } = await makeContext(model, opts, prefill + decode);
  const ctxS = (performance.now() - t0) / 1000;
  const seq = openSequence(context);
  const prefillTokS = [], decodeTokS = [], llamaPrefill = [], llamaDecode = [];
  for (let rep = -warmup; rep < reps; rep++) {
    await seq.clearHistory(); // each rep starts from an empty KV cache
    await llamaPerf(llama, context); // reset llama.cpp's counters
    const gen = seq.evaluate(prompt, GREEDY);
    const a = performance.now();
    let r = await gen.next(); // one llama_decode of the whole prompt + argmax of its last logits
    const b = performance.now();
    if (r.done) throw new Error("no token after prefill");
    for (let i = 0; i < decode; i++) { // `decode` single-token llama_decode calls, each + argmax
      r = await gen.next();
      if (r.done) throw new Error(`decode stopped after ${i} tokens`);
    }
    const c = performance.now();
    await gen.return();
    const perf = await llamaPerf(llama, context);
    if ((perf.promptTokens !== prefill || perf.evalRuns !== decode))
      throw new Error(`llama.cpp counted ${perf.promptTokens} prompt tokens / ${perf.evalRuns} decode runs, expected ${prefill} / ${decode}`);
    if (rep >= 0) {
      prefillTokS.push(round(prefill / ((b - a) / 1000), 2));
      decodeTokS.push(round(decode / ((c - b) / 1000), 2));
      llamaPrefill.push(round(prefill / (perf.promptMs / 1000), 2));
      llamaDecode.push(round(decode / (perf.evalMs / 1000), 2));
    }
  }
  return {
    threads, prefill, decode, reps, warmup,
    prefill_tok_s: prefillTokS, decode_tok_s: decodeTokS,
    median_prefill: median(prefillTokS), median_decode: median(decodeTokS),
    // the same runs as timed by llama.cpp itself (llama_perf_context: llama_decode alone, without
    // node-llama-cpp's JS/addon overhead or the argmax)
    llama_prefill_tok_s: llamaPrefill, llama_decode_tok_s: llamaDecode,
    llama_median_prefill: median(llamaPrefill), llama_median_decode: median(llamaDecode),
    load_s: round(loadS), context_s: round(ctxS),
    model: opts.model, n_vocab: nVocab, kv_type: (opts.kv_type ?? "f16").toLowerCase(),
    flash_attn: (opts.flash_attn ?? "auto").toLowerCase(), llama_cpp: llama.llamaCppRelease?.release,
  };
}

// llama.cpp's own batching of several sequences, as its server's slots use it: S sequences
// in one context, each prefilled with its own prompt and then decoded greedily at the same
// time; node-llama-cpp gathers the sequences' pending tokens into one llama_decode per step.
// Aggregate tok/s = S x decode / wall time of the decode (median of reps, after a warm-up).
async function cmdParallel(llama, opts) {
  const sequences = intOpt(opts, "sequences", 4, { min: 1 });
  const prefill = intOpt(opts, "prefill", 8, { min: 1 });
  const decode = intOpt(opts, "decode", 64, { min: 1 });
  const reps = intOpt(opts, "reps", 3, { min: 1 });
  const { model } = await loadModel(llama, opts);
  const nVocab = vocabSize(model);
  const { context, threads } = await makeContext(model, opts, prefill + decode, sequences);
  const seqs = Array.from({ length: sequences }, () => openSequence(context));
  const tokS = [];
  for (let rep = -1; rep < reps; rep++) {
    await Promise.all(seqs.map((s) => s.clearHistory()));
    const gens = seqs.map((s, k) =>
      s.evaluate(Array.from({ length: prefill }, (_, i) => (i * 7919 + k * 104729) % nVocab), GREEDY));
    await Promise.all(gens.map((g) => g.next())); // the prompts, and each first token
    const a = performance.now();
    await Promise.all(gens.map(async (g) => {
      for (let i = 0; i < decode; i++) if ((await g.next()).done) throw new Error(`decode stopped after ${i} tokens`);
    }));
    const b = performance.now();
    await Promise.all(gens.map((g) => g.return()));
    if (rep >= 0) tokS.push(round((sequences * decode) / ((b - a) / 1000), 2));
  }
  return { threads, sequences, prefill, decode, reps, tok_s: tokS, median_tok_s: median(tokS), model: opts.model };
}

async function cmdInfo(llama, opts) {
  const res = {
    node_llama_cpp: JSON.parse(readFileSync(new URL("./node_modules/node-llama-cpp/package.json", import.meta.url))).version,
    llama_cpp: llama.llamaCppRelease, build_type: llama.buildType, gpu: llama.gpu,
    cpu_math_cores: llama.cpuMathCores, system_info: llama.systemInfo,
  };
  if (opts.model) {
    const { model, loadS } = await loadModel(llama, opts);
    res.model = { path: opts.model, architecture: model.architecture, n_vocab: vocabSize(model),
      n_ctx_train: model.trainContextSize, n_embd: model.embeddingVectorSize,
      n_layer: model.fileInfo.metadata?.[model.architecture]?.block_count,
      file_type: model.fileInfo.metadata?.general?.file_type, size_bytes: model.size,
      bos: model.tokens.bos, eos: model.tokens.eos, load_s: round(loadS) };
  }
  return res;
}

const COMMANDS = { greedy: cmdGreedy, tokenize: cmdTokenize, probs: cmdProbs, bench: cmdBench, parallel: cmdParallel, info: cmdInfo };

async function main() {
  let parsed;
  try {
    parsed = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`error: ${e.message}\n${USAGE}\n`);
    process.exit(1);
  }
  const { cmd, opts } = parsed;
  if (!cmd || cmd === "--help" || cmd === "-h" || opts.help) {
    (cmd ? process.stdout : process.stderr).write(USAGE + "\n");
    process.exit(cmd ? 0 : 1);
  }
  const fn = COMMANDS[cmd];
  if (!fn) {
    process.stderr.write(`error: unknown command '${cmd}'\n${USAGE}\n`);
    process.exit(1);
  }
  let llama;
  try {
    llama = await openLlama(opts);
    const res = await fn(llama, opts);
    process.stdout.write(JSON.stringify(res) + "\n");
    await llama.dispose();
    process.exit(0);
  } catch (e) {
    const msg = (e && e.message) ? e.message : String(e);
    process.stderr.write(`error: ${msg.split("\n")[0]}\n`);
    if (opts.verbose && e?.stack) process.stderr.write(e.stack + "\n");
    process.exit(1);
  }
}

main();
