// Load generator for forge serve's benchmark (bench/serve_bench.sh): CLIENTS clients, each
// sending streamed completions one after another for SECONDS (no dependencies: fetch and a
// small server-sent-event reader). Prints JSON: requests, completion tokens, aggregate
// tokens/s over the wall time, and time to first token (p50, p99, ms).
//   node bench/serve_load.mjs BASE_URL CLIENTS SECONDS MAX_TOKENS
const [base, clientsText, secondsText, maxText] = process.argv.slice(2);
const clients = Number(clientsText);
const deadline = Date.now() + Number(secondsText) * 1000;
const prompts = ['The State of the Union', 'Our economy is', 'We the people', 'In the year of our Lord'];
const ttft = [];
let tokens = 0;
let requests = 0;
let failures = 0;

async function one(prompt) {
  const t0 = performance.now();
  const res = await fetch(`${base}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: Number(maxText), temperature: 0, ignore_eos: true, stream: true,
                           stream_options: { include_usage: true } }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let pending = '';
  let first = true;
  for await (const bytes of res.body) {
    pending += decoder.decode(bytes, { stream: true });
    let cut;
    while ((cut = pending.indexOf('\n\n')) >= 0) {
      const event = pending.slice(0, cut);
      pending = pending.slice(cut + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const chunk = JSON.parse(event.slice(6));
      if (first && chunk.choices?.length) {
        ttft.push(performance.now() - t0);
        first = false;
      }
      if (chunk.usage) tokens += chunk.usage.completion_tokens;
    }
  }
  ++requests;
}

const start = performance.now();
await Promise.all(Array.from({ length: clients }, async (_, i) => {
  for (let k = i; Date.now() < deadline; ++k) {
    try {
      await one(prompts[k % prompts.length]);
    } catch (err) {
      ++failures;
      console.error(String(err));
    }
  }
}));
const wall = (performance.now() - start) / 1000;
ttft.sort((a, b) => a - b);
const pct = (p) => (ttft.length ? ttft[Math.min(ttft.length - 1, Math.floor((p / 100) * ttft.length))] : null);
console.log(JSON.stringify({ clients, requests, failures, tokens, wall_s: wall, tok_s: tokens / wall,
                             ttft_p50_ms: pct(50), ttft_p99_ms: pct(99) }));
