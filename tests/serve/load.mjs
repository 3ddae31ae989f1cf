// A bounded load test of forge serve: CLIENTS concurrent streaming clients (OpenAI's npm
// client) send greedy completions for SECONDS, each checked against the text it must give.
// Prints {"requests", "failures", "mismatches", "errors"} as JSON and stops by itself.
//   node tests/serve/load.mjs BASE_URL CLIENTS SECONDS EXPECTED_JSON
// EXPECTED_JSON: [{"prompt": "...", "max_tokens": n, "text": "..."}, ...]
import fs from 'node:fs';
import OpenAI from 'openai';

const [baseURL, clientsText, secondsText, expectedFile] = process.argv.slice(2);
const expected = JSON.parse(fs.readFileSync(expectedFile, 'utf8'));
const deadline = Date.now() + Number(secondsText) * 1000;
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
let requests = 0;
let failures = 0;
let mismatches = 0;
const errors = [];

async function run(i) {
  for (let k = i; Date.now() < deadline; ++k) {
    const e = expected[k % expected.length];
    try {
      let text = '';
      let finish = null;
      const stream = await client.completions.create({
        model: 'forge', prompt: e.prompt, max_tokens: e.max_tokens, temperature: 0, stream: true,
      });
      for await (const chunk of stream) {
        text += chunk.choices[0]?.text ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      ++requests;
      if (text !== e.text || finish === null) {
        ++mismatches;
        if (errors.length < 5) errors.push(`prompt ${JSON.stringify(e.prompt)}: got ${JSON.stringify(text)}`);
      }
    } catch (err) {
      ++failures;
      if (errors.length < 5) errors.push(String(err));
    }
  }
}

await Promise.all(Array.from({ length: Number(clientsText) }, (_, i) => run(i)));
console.log(JSON.stringify({ requests, failures, mismatches, errors }));
