// Client conformance: drives warden with the official OpenAI Node SDK,
// the Vercel AI SDK (default provider, so the Responses API) and LangChain
// JS, greedy, and checks that every client sees the same text as a plain
// chat request; then tool calls (forced, so that a random-weight model is
// guaranteed to make one: the arguments are constrained to the schema and
// validated here with zod) and structured output. Run by
// test/clients_test.go with WARDEN_BASE_URL, WARDEN_API_KEY, WARDEN_MODEL
// and NODE_EXTRA_CA_CERTS set; prints one "ok <scenario>" line per
// scenario, and "render <json>" lines for the Go side to compare with the
// Python jinja2 reference, and exits non-zero on the first failure.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { embedMany, generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { ChatOpenAI } from "@langchain/openai";
import { tool as lcTool } from "@langchain/core/tools";
import { z } from "zod";

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

// /tokenize gives the ids the chat request was prefilled with (the
// reference's render, WARDEN_WANT_PROMPT), /detokenize their text; both
// with plain fetch, as vLLM clients call them.
const post = async (path, body) => {
  const r = await fetch(new URL(path, baseURL), {
    method: "POST", headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" }, body: JSON.stringify(body),
  });
  return [r.status, await r.json()];
};
const [tokStatus, tok] = await post("/tokenize", { model, messages: [{ role: "user", content: prompt }] });
assert.equal(tokStatus, 200, JSON.stringify(tok));
assert.deepEqual(tok.tokens, JSON.parse(process.env.WARDEN_WANT_PROMPT), "tokenize differs from the reference render");
assert.equal(tok.count, chat.usage.prompt_tokens, "tokenize counts other tokens than the chat request prefilled");
assert.ok(tok.max_model_len > tok.count);
const [detokStatus, detok] = await post("/detokenize", { model, tokens: tok.tokens });
assert.equal(detokStatus, 200, JSON.stringify(detok));
assert.ok(detok.prompt.includes(prompt), `detokenize: ${detok.prompt}`);
const [badStatus, badIds] = await post("/detokenize", { model, tokens: [-1] });
assert.equal(badStatus, 400);
assert.equal(badIds.error.param, "tokens[0]");
ok("node tokenize");

// Embeddings: the Node SDK asks for base64 unless told otherwise and
// decodes it; the vectors are the float answer's (float32 values), the
// prompt's is the float64 reference's (WARDEN_WANT_EMBEDDING: the last
// position's normalised final hidden state), and usage counts the inputs
// as /tokenize counts completion prompts.
const embInputs = [prompt, "x"];
const emb = await client.embeddings.create({ model, input: embInputs });
const embFloat = await client.embeddings.create({ model, input: embInputs, encoding_format: "float" });
let embTokens = 0;
for (const input of embInputs) {
  const [s, t] = await post("/tokenize", { model, prompt: input });
  assert.equal(s, 200, JSON.stringify(t));
  embTokens += t.count;
}
assert.equal(emb.usage.prompt_tokens, embTokens);
assert.equal(emb.usage.total_tokens, embTokens);
assert.equal(emb.data.length, 2);
const wantEmb = JSON.parse(process.env.WARDEN_WANT_EMBEDDING);
const checkEmbedding = (got, what) => {
  assert.equal(got.length, wantEmb.length, `${what}: dimensions`);
  let dot = 0, gg = 0, ww = 0, maxDiff = 0;
  got.forEach((v, j) => {
    dot += v * wantEmb[j]; gg += v * v; ww += wantEmb[j] * wantEmb[j];
    maxDiff = Math.max(maxDiff, Math.abs(v - wantEmb[j]));
  });
  assert.ok(dot / Math.sqrt(gg * ww) > 0.9999 && maxDiff < 1e-4, `${what}: cosine ${dot / Math.sqrt(gg * ww)}, max error ${maxDiff}`);
};
emb.data.forEach((d, i) => {
  assert.equal(d.index, i);
  assert.deepEqual(Array.from(d.embedding), embFloat.data[i].embedding.map(Math.fround), `embedding ${i}: base64 and float differ`);
});
checkEmbedding(Array.from(emb.data[0].embedding), "node embeddings");
ok("node embeddings");

// Sampling controls: logit_bias forces a token (WARDEN_FORCED_TOKEN, whose
// text is WARDEN_FORCED_TEXT), and greedy output with frequency and
// presence penalties and vLLM's extensions is the reference engine's
// (WARDEN_WANT_PENALIZED).
const biased = await client.chat.completions.create({
  model, messages: [{ role: "user", content: prompt }], max_tokens: 4, temperature: 1, seed: 3,
  logit_bias: { [process.env.WARDEN_FORCED_TOKEN]: 100 },
});
assert.equal(biased.choices[0].message.content, process.env.WARDEN_FORCED_TEXT.repeat(4), "logit_bias did not force its token");
const penalized = await client.chat.completions.create({
  model, messages: [{ role: "user", content: prompt }], max_tokens: max, temperature: 0,
  frequency_penalty: 1.5, presence_penalty: 0.5, repetition_penalty: 1.2, top_k: 40, min_p: 0.05,
});
assert.equal(penalized.choices[0].message.content, process.env.WARDEN_WANT_PENALIZED, "penalized answer differs from the reference engine's");
assert.notEqual(penalized.choices[0].message.content, want, "the penalties changed nothing");
ok("node sampling controls");

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

// n: 3 at temperature 0 on the P/D workers and on a single worker
// (WARDEN_SINGLE_*): three choices, each the greedy answer, the prompt
// counted once; streamed chunks name their choice.
const single = new OpenAI({ baseURL: process.env.WARDEN_SINGLE_BASE_URL, apiKey: process.env.WARDEN_SINGLE_API_KEY, maxRetries: 0 });
const nParams = { model, messages: [{ role: "user", content: prompt }], max_tokens: max, temperature: 0, n: 3 };
for (const [where, c3] of [["P/D", client], ["single", single]]) {
  const three = await c3.chat.completions.create(nParams);
  assert.equal(three.choices.length, 3, where);
  three.choices.forEach((c, i) => {
    assert.equal(c.index, i, where);
    assert.equal(c.message.content, want, `${where}: choice ${i} differs from the greedy answer`);
  });
  assert.equal(three.usage.prompt_tokens, chat.usage.prompt_tokens, `${where}: n: 3 counts the prompt once`);
  assert.equal(three.usage.completion_tokens, 3 * chat.usage.completion_tokens, where);
  const texts = ["", "", ""];
  for await (const chunk of await c3.chat.completions.create({ ...nParams, stream: true })) {
    for (const c of chunk.choices) texts[c.index] += c.delta.content ?? "";
  }
  assert.deepEqual(texts, [want, want, want], `${where}: streamed choices differ from the greedy answer`);
}
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
  (e) => e instanceof OpenAI.NotFoundError && e.param === "previous_response_id" && e.code === "previous_response_not_found",
);
// A tool choice naming no offered tool: refused naming the field.
await assert.rejects(
  client.chat.completions.create({
    model, messages: [{ role: "user", content: prompt }],
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }],
    tool_choice: { type: "function", function: { name: "g" } },
  }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice.function.name" && e.code === "invalid_value",
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

// Stored responses: previous_response_id continues a response exactly as
// a chat of the whole conversation would; retrieve returns it; delete
// removes it.
const followUp = "Go on.";
const whole = await client.chat.completions.create({
  model, max_tokens: max, temperature: 0,
  messages: [{ role: "user", content: prompt }, { role: "assistant", content: want }, { role: "user", content: followUp }],
});
const next = await client.responses.create({ model, input: followUp, previous_response_id: resp.id, max_output_tokens: max, temperature: 0 });
assert.equal(next.previous_response_id, resp.id);
assert.equal(next.store, true);
assert.equal(next.output_text, whole.choices[0].message.content, "a continued response differs from the chat of the whole conversation");
assert.equal(next.usage.input_tokens, whole.usage.prompt_tokens);
const got = await client.responses.retrieve(next.id);
assert.equal(got.output_text, next.output_text);
await client.responses.delete(next.id);
await assert.rejects(client.responses.retrieve(next.id), (e) => e instanceof OpenAI.NotFoundError);
ok("node responses chained");

// The Vercel AI SDK's default provider calls /v1/responses.
const openai = createOpenAI({ baseURL, apiKey });

// The AI SDK's embedMany (float on the wire) gets the same vectors.
const many = await embedMany({ model: openai.embedding(model), values: embInputs, maxRetries: 0 });
assert.equal(many.embeddings.length, 2);
many.embeddings.forEach((e, i) => assert.deepEqual(e.map(Math.fround), Array.from(emb.data[i].embedding), `ai-sdk embedding ${i}`));
assert.equal(many.usage.tokens, embTokens);
ok("ai-sdk embedMany");
const gen = await generateText({ model: openai(model), prompt, maxOutputTokens: max, temperature: 0, maxRetries: 0 });
assert.equal(gen.text, want);
assert.equal(gen.usage.inputTokens, chat.usage.prompt_tokens);
ok("ai-sdk generateText");

// ...and chains responses with previousResponseId...
const gen2 = await generateText({
  model: openai(model), prompt: followUp, maxOutputTokens: max, temperature: 0, maxRetries: 0,
  providerOptions: { openai: { previousResponseId: gen.providerMetadata.openai.responseId } },
});
assert.equal(gen2.text, whole.choices[0].message.content, "the AI SDK's continued response differs from the chat of the whole conversation");
assert.equal(gen2.usage.inputTokens, whole.usage.prompt_tokens);
// ...and, with store on, sends an earlier answer back as an item_reference.
const refBodies = [];
const referencing = createOpenAI({ baseURL, apiKey, fetch: async (url, init) => { refBodies.push(String(init.body)); return fetch(url, init); } });
const gen3 = await generateText({
  model: referencing(model), maxOutputTokens: max, temperature: 0, maxRetries: 0,
  messages: [{ role: "user", content: prompt }, ...gen.response.messages, { role: "user", content: followUp }],
});
assert.ok(JSON.parse(refBodies[0]).input.some((item) => item.type === "item_reference"), refBodies[0]);
assert.equal(gen3.text, whole.choices[0].message.content, "a conversation with an item_reference differs from the chat of the whole conversation");
assert.equal(gen3.usage.inputTokens, whole.usage.prompt_tokens);
ok("ai-sdk previousResponseId");

const st = streamText({ model: openai(model), prompt, maxOutputTokens: max, temperature: 0, maxRetries: 0, onError: ({ error }) => { throw error; } });
let text = "";
for await (const part of st.textStream) text += part;
assert.equal(text, want);
assert.ok(["length", "stop"].includes(await st.finishReason));
ok("ai-sdk streamText");

// AI SDK reasoning: the dev model's template reasons in <think> (parsed as
// Qwen3's); vLLM's structured_outputs regex, added to the body by fetch,
// makes the random-weight model think first. The SDK reads the reasoning
// item's summary (reasoningSummary), whole and streamed.
const thinking = createOpenAI({ baseURL, apiKey, fetch: async (url, init) => {
  const body = JSON.parse(String(init.body));
  body.structured_outputs = { regex: "<think>[a-z]{3,8}</think>[a-z]{2,6}" };
  return fetch(url, { ...init, body: JSON.stringify(body) });
} });
const reasoningOptions = { openai: { forceReasoning: true, reasoningSummary: "auto", store: false } };
const rg = await generateText({ model: thinking(model), prompt: "Think, then answer.", maxOutputTokens: 32, maxRetries: 0, providerOptions: reasoningOptions });
assert.match(rg.reasoningText ?? "", /^[a-z]{3,8}$/, JSON.stringify(rg.reasoning));
assert.match(rg.text, /^[a-z]{2,6}$/);
const rs = streamText({ model: thinking(model), prompt: "Think, then answer.", maxOutputTokens: 32, maxRetries: 0, providerOptions: reasoningOptions,
  onError: ({ error }) => { throw error; } });
let streamedReasoning = "", streamedText = "";
for await (const part of rs.fullStream) {
  if (part.type === "reasoning-delta") streamedReasoning += part.text;
  if (part.type === "text-delta") streamedText += part.text;
}
assert.match(streamedReasoning, /^[a-z]{3,8}$/);
assert.match(streamedText, /^[a-z]{2,6}$/);
ok("ai-sdk reasoning");

// --- Tools and structured output ---

const toolMax = 256;
const weatherSchema = z.object({ city: z.string().max(12), unit: z.enum(["c", "f"]) }).strict();
const weatherParams = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, unit: { type: "string", enum: ["c", "f"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const tools = [{ type: "function", function: { name: "get_weather", description: "Current weather in a city.", parameters: weatherParams, strict: true } }];
const question = { role: "user", content: "What is the weather in Bern?" };
const weatherResult = { temperature: 21, sky: "clear" };

// Node SDK: a forced call, streamed and not, then its result round-trips.
const forced = { model, messages: [question], tools, tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: toolMax, temperature: 0 };
const c1 = await client.chat.completions.create(forced);
assert.equal(c1.choices[0].finish_reason, "tool_calls");
assert.equal(c1.choices[0].message.tool_calls.length, 1);
const call = c1.choices[0].message.tool_calls[0];
assert.equal(call.type, "function");
assert.equal(call.function.name, "get_weather");
assert.match(call.id, /^call_/);
weatherSchema.parse(JSON.parse(call.function.arguments));

const s1 = await client.chat.completions.create({ ...forced, stream: true });
const streamedCalls = [];
let streamFinish;
for await (const chunk of s1) {
  for (const ch of chunk.choices) {
    for (const d of ch.delta.tool_calls ?? []) {
      if (d.id) {
        assert.equal(d.type, "function");
        streamedCalls[d.index] = { name: d.function.name, arguments: d.function.arguments ?? "" };
      } else {
        assert.equal(d.function.name, undefined);
        streamedCalls[d.index].arguments += d.function.arguments;
      }
    }
    if (ch.finish_reason) streamFinish = ch.finish_reason;
  }
}
assert.equal(streamFinish, "tool_calls");
assert.deepEqual(streamedCalls, [{ name: "get_weather", arguments: call.function.arguments }]);

const c2 = await client.chat.completions.create({
  model, tools, max_tokens: 4, temperature: 0,
  messages: [question, c1.choices[0].message, { role: "tool", tool_call_id: call.id, content: JSON.stringify(weatherResult) }],
});
assert.ok(c2.usage.prompt_tokens > c1.usage.prompt_tokens);
// The conversation as a chat template sees it, for the Go side's reference render.
const asTemplate = (calls) => calls.map((c) => ({ id: c.id, type: "function", function: { name: c.function.name, arguments: JSON.parse(c.function.arguments) } }));
console.log("render " + JSON.stringify({
  name: "node chat with tools",
  messages: [question, { role: "assistant", content: "", tool_calls: asTemplate([call]) },
    { role: "tool", content: JSON.stringify(weatherResult), tool_call_id: call.id }],
  tools: tools.map((t) => ({ type: "function", function: { name: t.function.name, description: t.function.description, parameters: t.function.parameters } })),
  prompt_tokens: c2.usage.prompt_tokens,
}));
ok("node chat with tools");

const stepInputs = [];
// AI SDK generateText: a forced call executed by the SDK, its result sent
// back in the second step (the Responses API's function_call_output),
// with store off and on (the SDK's default).
for (const store of [false, true]) {
  const bodies = [];
  const recording = createOpenAI({ baseURL, apiKey, fetch: async (url, init) => { bodies.push(String(init.body)); return fetch(url, init); } });
  const gt = await generateText({
    model: recording(model), prompt: question.content, maxOutputTokens: toolMax, temperature: 0, maxRetries: 0,
    tools: { get_weather: tool({ description: "Current weather in a city.", inputSchema: weatherSchema, execute: async () => weatherResult }) },
    toolChoice: { type: "tool", toolName: "get_weather" },
    stopWhen: stepCountIs(2),
    providerOptions: { openai: { store } },
  });
  assert.equal(gt.steps.length, 2);
  assert.equal(gt.steps[0].toolCalls.length, 1);
  assert.equal(gt.steps[0].toolCalls[0].toolName, "get_weather");
  weatherSchema.parse(gt.steps[0].toolCalls[0].input);
  assert.deepEqual(gt.steps[0].toolResults[0].output, weatherResult);
  assert.equal(bodies.length, 2);
  const step2 = JSON.parse(bodies[1]).input;
  const output = step2.find((item) => item.type === "function_call_output");
  assert.ok(output && output.call_id === gt.steps[0].toolCalls[0].toolCallId, bodies[1]);
  assert.deepEqual(JSON.parse(output.output), weatherResult);
  assert.ok(gt.steps[1].usage.inputTokens > gt.steps[0].usage.inputTokens);
  stepInputs.push(gt.steps[1].usage.inputTokens);
}
// The call sent whole and the call referenced make the same prompt.
assert.equal(stepInputs[0], stepInputs[1]);
ok("ai-sdk generateText tools");

// AI SDK generateObject: text.format json_schema, constrained.
const person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(120), tags: z.array(z.enum(["a", "b"])).max(3) });
const obj = await generateObject({ model: openai(model), schema: person, prompt: "Describe a person.", maxOutputTokens: toolMax, temperature: 0, maxRetries: 0 });
person.parse(obj.object);
ok("ai-sdk generateObject");

// LangChain: bindTools with a forced call, the tool's result round-trips;
// withStructuredOutput.
const lc = new ChatOpenAI({ model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens: toolMax, maxRetries: 0 });
const lcWeather = lcTool(async () => JSON.stringify(weatherResult), { name: "get_weather", description: "Current weather in a city.", schema: weatherSchema });
const lcCall = await lc.bindTools([lcWeather], { tool_choice: "get_weather" }).invoke([["user", question.content]]);
assert.equal(lcCall.tool_calls.length, 1);
assert.equal(lcCall.tool_calls[0].name, "get_weather");
weatherSchema.parse(lcCall.tool_calls[0].args);
const lcResult = await lcWeather.invoke(lcCall.tool_calls[0]);
const lcNext = await lc.bindTools([lcWeather]).invoke([["user", question.content], lcCall, lcResult]);
assert.ok(lcNext.usage_metadata.input_tokens > lcCall.usage_metadata.input_tokens);
ok("langchain bindTools");

const answer = z.object({ answer: z.string().max(10), confidence: z.number().min(0).max(1) });
const so = await lc.withStructuredOutput(answer, { name: "Answer" }).invoke("Answer briefly: is water wet?");
answer.parse(so);
ok("langchain withStructuredOutput");
