// Client conformance: drives warden with the official OpenAI Node SDK and
// the Vercel AI SDK (default provider, so the Responses API), greedy, and
// checks that every client sees the same text as a plain chat request.
// Run by test/clients_test.go with WARDEN_BASE_URL, WARDEN_API_KEY,
// WARDEN_MODEL and NODE_EXTRA_CA_CERTS set; prints one "ok <scenario>" line
// per scenario and exits non-zero on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";

const baseURL = process.env.WARDEN_BASE_URL;
const apiKey = process.env.WARDEN_API_KEY;
const model = process.env.WARDEN_MODEL;
const prompt = "Tell me a story.";
const max = 12;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const ok = (name) => console.log(`ok ${name}`);

// The reference: a plain chat completion, greedy.
const chat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: prompt }], max_tokens: max, temperature: 0,
});
const want = chat.choices[0].message.content;
assert.equal(want, process.env.WARDEN_WANT, "chat answer differs from the reference model's");
assert.equal(chat.usage.prompt_tokens_details.cached_tokens, 0);
ok("node chat");

// logprobs: the engine's own values (WARDEN_WANT_LOGPROBS, from the
// in-process reference), whole and streamed, alternatives sorted.
const wantLogprobs = JSON.parse(process.env.WARDEN_WANT_LOGPROBS);
const lpParams = { model, messages: [{ role: "user", content: prompt }], max_tokens: max, temperature: 0, logprobs: true, top_logprobs: 3 };
const checkLogprobs = (content, what) => {
  assert.deepEqual(content.map((c) => c.logprob), wantLogprobs, `${what}: logprobs differ from the engine's`);
  for (const c of content) {
    assert.equal(c.top_logprobs.length, 3, what);
    for (let i = 1; i < 3; i++) assert.ok(c.top_logprobs[i - 1].logprob >= c.top_logprobs[i].logprob, `${what}: alternatives not sorted`);
    assert.equal(c.top_logprobs[0].logprob, c.logprob, `${what}: greedy picks the most likely token`);
  }
  // (The tokens' bytes need not spell the text: special tokens render as nothing.)
};
const lp = await client.chat.completions.create(lpParams);
assert.equal(lp.choices[0].message.content, want);
checkLogprobs(lp.choices[0].logprobs.content, "chat");
const lpStream = await client.chat.completions.create({ ...lpParams, stream: true });
const streamed = [];
for await (const chunk of lpStream) for (const c of chunk.choices) if (c.logprobs) streamed.push(...c.logprobs.content);
checkLogprobs(streamed, "chat stream");
ok("node logprobs");

// n: 3 at temperature 0 on a single worker (WARDEN_SINGLE_*): three
// choices, each the greedy answer, the prompt counted once; streamed
// chunks name their choice. Separate prefill and decode workers refuse it
// naming n.
const single = new OpenAI({ baseURL: process.env.WARDEN_SINGLE_BASE_URL, apiKey: process.env.WARDEN_SINGLE_API_KEY, maxRetries: 0 });
const nParams = { model, messages: [{ role: "user", content: prompt }], max_tokens: max, temperature: 0, n: 3 };
const three = await single.chat.completions.create(nParams);
assert.equal(three.choices.length, 3);
three.choices.forEach((c, i) => {
  assert.equal(c.index, i);
  assert.equal(c.message.content, want, `choice ${i} differs from the greedy answer`);
});
assert.equal(three.usage.prompt_tokens, chat.usage.prompt_tokens, "n: 3 counts the prompt once");
assert.equal(three.usage.completion_tokens, 3 * chat.usage.completion_tokens);
const texts = ["", "", ""];
for await (const chunk of await single.chat.completions.create({ ...nParams, stream: true })) {
  for (const c of chunk.choices) texts[c.index] += c.delta.content ?? "";
}
assert.deepEqual(texts, [want, want, want], "streamed choices differ from the greedy answer");
await assert.rejects(client.chat.completions.create(nParams), (e) => e instanceof OpenAI.BadRequestError && e.param === "n");
ok("node n: 3");

// models.retrieve, and its typed 404.
const m = await client.models.retrieve(model);
assert.equal(m.id, model);
assert.ok(m.context_length > 0);
await assert.rejects(client.models.retrieve("no-such-model"), (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
ok("node models.retrieve");

// Typed errors: a bad key, an unsupported parameter.
const bad = new OpenAI({ baseURL, apiKey: "wdn_bad_key", maxRetries: 0 });
await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.code === "invalid_api_key");
await assert.rejects(
  client.responses.create({ model, input: prompt, previous_response_id: "resp_x" }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "previous_response_id",
);
// Tools are not served yet: refused naming the field, never ignored.
await assert.rejects(
  client.chat.completions.create({
    model, messages: [{ role: "user", content: prompt }],
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }],
  }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "tools" && e.code === "unsupported_parameter",
);
ok("node typed errors");

// responses.create, not streamed and streamed.
const resp = await client.responses.create({ model, input: prompt, max_output_tokens: max, temperature: 0 });
assert.equal(resp.output_text, want);
assert.equal(resp.usage.input_tokens, chat.usage.prompt_tokens);
assert.equal(resp.usage.output_tokens, chat.usage.completion_tokens);
ok("node responses.create");

const stream = await client.responses.create({ model, input: prompt, max_output_tokens: max, temperature: 0, stream: true });
let deltas = "";
let final;
for await (const ev of stream) {
  if (ev.type === "response.output_text.delta") deltas += ev.delta;
  if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
}
assert.equal(deltas, want);
assert.equal(final.output[0].content[0].text, want);
ok("node responses.create stream");

// The Vercel AI SDK's default provider calls /v1/responses.
const openai = createOpenAI({ baseURL, apiKey });
const gen = await generateText({ model: openai(model), prompt, maxOutputTokens: max, temperature: 0, maxRetries: 0 });
assert.equal(gen.text, want);
assert.equal(gen.usage.inputTokens, chat.usage.prompt_tokens);
ok("ai-sdk generateText");

const st = streamText({ model: openai(model), prompt, maxOutputTokens: max, temperature: 0, maxRetries: 0, onError: ({ error }) => { throw error; } });
let text = "";
for await (const part of st.textStream) text += part;
assert.equal(text, want);
assert.ok(["length", "stop"].includes(await st.finishReason));
ok("ai-sdk streamText");
