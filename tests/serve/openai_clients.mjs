// forge serve through OpenAI's official npm client: completions and chat, whole and
// streamed, and an error. Prints one JSON object of what came back; the C++ test
// (tests/test_serve_http.cpp) checks it against forge's own generation.
//   node tests/serve/openai_clients.mjs BASE_URL PROMPT MAX_TOKENS
import OpenAI from 'openai';

const [baseURL, prompt, maxTokensText] = process.argv.slice(2);
const max_tokens = Number(maxTokensText);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const out = {};

const c = await client.completions.create({ model: 'forge', prompt, max_tokens, temperature: 0 });
out.completion = { text: c.choices[0].text, finish_reason: c.choices[0].finish_reason, usage: c.usage, object: c.object };

let text = '';
let finish = null;
for await (const chunk of await client.completions.create({ model: 'forge', prompt, max_tokens, temperature: 0, stream: true })) {
  text += chunk.choices[0]?.text ?? '';
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
out.completion_stream = { text, finish_reason: finish };

const messages = [{ role: 'user', content: prompt }];
const chat = await client.chat.completions.create({ model: 'forge', messages, max_tokens, temperature: 0 });
out.chat = { text: chat.choices[0].message.content, role: chat.choices[0].message.role, usage: chat.usage, object: chat.object };

text = '';
let usage = null;
for await (const chunk of await client.chat.completions.create({
  model: 'forge', messages, max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true },
})) {
  text += chunk.choices[0]?.delta?.content ?? '';
  usage = chunk.usage ?? usage;
}
out.chat_stream = { text, usage };

try {
  await client.completions.create({ model: 'forge', prompt, max_tokens, temperature: 7 });
  out.error = { status: 0 };
} catch (err) {
  out.error = { status: err.status, message: err.error?.message ?? String(err), param: err.error?.param ?? err.param };
}

const models = await client.models.list();
out.models = models.data.map((m) => m.id);
console.log(JSON.stringify(out));
