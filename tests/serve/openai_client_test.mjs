// OpenAI's official client (`openai` from npm, installed by openai_client_test.sh) against
// `seqtape serve`:
//
//   node tests/serve/openai_client_test.mjs NPM_DIR BASE_URL EXPECTED_JSONL MODE
//
// EXPECTED_JSONL holds `seqtape generate --json --max-new 8` of 我爱 and 我 (greedy) and of 学习
// (--sample --temperature 0.8 --seed 7). The client's completions, streamed and not, must give
// the same texts, with finish_reason and usage as OpenAI's API reference has them. MODE "keys":
// the server takes the key sk-seqtape-test, and the client's wrong key must get a 401.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import assert from "node:assert/strict";

const [npmDir, baseURL, expectedPath, mode] = process.argv.slice(2);
const OpenAI = createRequire(npmDir + "/")("openai").default;
const expected = readFileSync(expectedPath, "utf8").trim().split("\n").map((l) => JSON.parse(l));
const client = new OpenAI({ baseURL, apiKey: "sk-seqtape-test", maxRetries: 0, timeout: 20000 });

const models = await client.models.list();
const model = models.data[0].id;
assert.equal(models.data.length, 1);
assert.equal(model, "checkpoint.bin");

// Not streamed: one prompt, then a list of prompts (choice i is prompt i).
const one = await client.completions.create({ model, prompt: "我爱", max_tokens: 8, temperature: 0 });
assert.equal(one.object, "text_completion");
assert.equal(one.choices.length, 1);
assert.equal(one.choices[0].text, expected[0].text);
assert.equal(one.choices[0].finish_reason, expected[0].stop_reason === "length" ? "length" : "stop");
assert.equal(one.usage.prompt_tokens, 2);
assert.equal(one.usage.completion_tokens, expected[0].tokens.length);
assert.equal(one.usage.total_tokens, one.usage.prompt_tokens + one.usage.completion_tokens);

const two = await client.completions.create({ model, prompt: ["我爱", "我"], max_tokens: 8, temperature: 0 });
assert.deepEqual(two.choices.map((c) => [c.index, c.text]), [[0, expected[0].text], [1, expected[1].text]]);

const sampled = await client.completions.create({
  model, prompt: "学习", max_tokens: 8, temperature: 0.8, seed: 7,
});
assert.equal(sampled.choices[0].text, expected[2].text);

// Streamed: the chunks' texts concatenate to the same text; the last choice chunk has the
// finish_reason; with include_usage a last chunk carries the usage.
const stream = await client.completions.create({
  model, prompt: "我爱", max_tokens: 8, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
let text = "", finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  ++chunks;
  for (const c of chunk.choices) {
    text += c.text;
    if (c.finish_reason) finish = c.finish_reason;
  }
  if (chunk.usage) usage = chunk.usage;
}
assert.equal(text, expected[0].text);
assert.ok(chunks >= 3, `only ${chunks} chunks`);
assert.equal(finish, one.choices[0].finish_reason);
assert.deepEqual(usage, one.usage);

// A bad request is the client's BadRequestError naming the parameter.
await assert.rejects(
  client.completions.create({ model, prompt: "我爱", max_tokens: 0 }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "max_tokens",
);

if (mode === "keys") {
  const wrong = new OpenAI({ baseURL, apiKey: "sk-wrong", maxRetries: 0, timeout: 20000 });
  await assert.rejects(wrong.completions.create({ model, prompt: "我爱", max_tokens: 8 }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(wrong.models.list(), (e) => e.status === 401);
}
console.log(`PASS: openai client ${mode}: ${one.choices[0].text} / ${text}`);
