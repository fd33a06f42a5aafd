// The official OpenAI Node SDK (npm `openai`, pinned in package.json)
// reading log-probabilities, echo and n: 2 from kvcanary's router, streamed
// and not, as a client would. Run by scripts/openai_sdk_check.sh against
// `kvcanary-engine up`:
//   node openai_sdk_check.mjs ROUTER_URL API_KEY TRANSCRIPT_OUT
// Exits 1 naming the first check that failed. Writes every request the SDK
// sent (method, path, the SDK's own headers, body) and the status it got to
// TRANSCRIPT_OUT: tests/sdk/transcript.json is one such recording, which
// tests/integration/openai_sdk_transcript_test.cc replays where the SDK
// cannot be installed.
import OpenAI from "openai";
import { writeFileSync } from "node:fs";

const [router, apiKey, transcriptPath] = process.argv.slice(2);
const transcript = [];

// Records each request as the SDK made it; the key is not recorded.
async function recordingFetch(url, init) {
  const headers = Object.fromEntries(new Headers(init.headers).entries());
  delete headers.authorization;
  const res = await fetch(url, init);
  transcript.push({
    method: init.method,
    path: new URL(url).pathname,
    headers: Object.fromEntries(
      Object.entries(headers).filter(([k]) =>
        ["content-type", "accept", "user-agent"].includes(k) ||
        k.startsWith("x-stainless-package") || k === "x-stainless-lang"),
    ),
    body: init.body ? JSON.parse(init.body) : null,
    status: res.status,
  });
  return res;
}

const client = new OpenAI({
  baseURL: `${router}/v1`,
  apiKey,
  fetch: recordingFetch,
  maxRetries: 0,
});

function check(ok, what) {
  if (!ok) {
    console.error(`openai_sdk_check: FAILED: ${what}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const model = (await client.models.list()).data[0].id;
check(typeof model === "string", `models: serves ${model}`);

const isLogprob = (x) => typeof x === "number" && Number.isFinite(x) && x <= 0;
const prompt = "Once upon a time";

// Completions, logprobs: 3.
const c = await client.completions.create({
  model, prompt, max_tokens: 6, temperature: 0, logprobs: 3,
});
const clp = c.choices[0].logprobs;
check(clp.tokens.length === c.usage.completion_tokens &&
      clp.token_logprobs.every(isLogprob) &&
      clp.top_logprobs.every((t) => Object.keys(t).length <= 4) &&
      clp.tokens.join("") === c.choices[0].text &&
      clp.text_offset[0] === 0,
      "completions: logprobs, top_logprobs, text_offset");

// Echo with logprobs.
const e = await client.completions.create({
  model, prompt, max_tokens: 4, temperature: 0, logprobs: 2, echo: true,
});
const elp = e.choices[0].logprobs;
check(e.choices[0].text.startsWith(prompt) &&
      elp.tokens.length ===
          e.usage.prompt_tokens - 1 + e.usage.completion_tokens &&
      elp.token_logprobs.every(isLogprob),
      "completions: echo with logprobs covers the prompt's tokens");

// Completions streamed: the chunks' token_logprobs are the whole answer's.
const cs = await client.completions.create({
  model, prompt, max_tokens: 6, temperature: 0, logprobs: 3, stream: true,
});
const streamed = [];
for await (const chunk of cs) {
  for (const x of chunk.choices[0]?.logprobs?.token_logprobs ?? []) streamed.push(x);
}
check(JSON.stringify(streamed) === JSON.stringify(clp.token_logprobs),
      "completions streamed: chunk logprobs add up to the whole answer's");

// Chat, logprobs + top_logprobs.
const messages = [{ role: "user", content: prompt }];
const ch = await client.chat.completions.create({
  model, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
});
const content = ch.choices[0].logprobs.content;
check(content.length === ch.usage.completion_tokens &&
      content.every((t) => isLogprob(t.logprob) && t.top_logprobs.length === 3 &&
                           Buffer.from(t.bytes).toString() === t.token) &&
      content.map((t) => t.token).join("") === ch.choices[0].message.content,
      "chat: logprobs.content with top_logprobs and bytes");

// Chat streamed.
const chs = await client.chat.completions.create({
  model, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
  stream: true,
});
const chatStreamed = [];
for await (const chunk of chs) {
  for (const x of chunk.choices[0]?.logprobs?.content ?? []) chatStreamed.push(x);
}
check(JSON.stringify(chatStreamed) === JSON.stringify(content),
      "chat streamed: chunk logprobs add up to the whole answer's");

// n: 2, whole and streamed, completions and chat.
const n2 = await client.completions.create({
  model, prompt, max_tokens: 5, temperature: 1, seed: 3, n: 2,
});
check(n2.choices.length === 2 && n2.choices[0].index === 0 &&
      n2.choices[1].index === 1,
      "completions: n: 2 gives choices 0 and 1");
const n2c = await client.chat.completions.create({
  model, messages, max_tokens: 5, temperature: 1, seed: 3, n: 2,
});
check(n2c.choices.length === 2 && n2c.choices[1].index === 1,
      "chat: n: 2 gives choices 0 and 1");
const n2s = await client.chat.completions.create({
  model, messages, max_tokens: 5, temperature: 1, seed: 3, n: 2, stream: true,
  stream_options: { include_usage: true },
});
const texts = ["", ""];
let usage = null;
for await (const chunk of n2s) {
  for (const choice of chunk.choices) texts[choice.index] += choice.delta.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
check(texts[0] === n2c.choices[0].message.content &&
      texts[1] === n2c.choices[1].message.content &&
      usage?.completion_tokens === n2c.usage.completion_tokens,
      "chat streamed: n: 2 interleaves both choices, then the usage");

writeFileSync(transcriptPath, JSON.stringify(transcript, null, 1) + "\n");
console.log(`openai_sdk_check: all checks passed (${transcript.length} requests)`);
