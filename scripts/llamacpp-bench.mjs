// llamacpp-bench.mjs runs llama.cpp (the node-llama-cpp package's build,
// whose CPU backend picks the variant for the machine's instruction set)
// on a GGUF file the way `warden bench engine` runs warden: one prefill of
// PROMPT benchmark tokens timed as one batch, then a greedy decode of
// DECODE tokens after the first 16 of them, timed from the first
// generated token to the last. It prints one JSON line:
// {"prefill_tps", "decode_tps", "ids", "cpu"}.
//
//   node scripts/llamacpp-bench.mjs FILE.gguf THREADS [PROMPT] [DECODE]
//
// Run from a folder where node-llama-cpp is installed (see
// scripts/bench-vs-llamacpp.sh). Flash attention is off and the KV cache
// is f32, like warden's attention.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [file, threadsArg, promptArg = "512", decodeArg = "32"] = process.argv.slice(2);
const threads = Number(threadsArg), promptLen = Number(promptArg), decode = Number(decodeArg);

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
const vocab = model.tokens.vocabSize ?? model.fileInfo.metadata.llama.vocab_size;
// warden's BenchPromptIDs: token i is (7919·i + 13) mod vocab.
const prompt = Array.from({ length: promptLen }, (_, i) => (i * 7919 + 13) % vocab);

const newContext = () => model.createContext({
	contextSize: promptLen + decode + 16, batchSize: promptLen, threads, flashAttention: false,
	experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", sequences: 1,
});

let ctx = await newContext();
let seq = ctx.getSequence();
let start = performance.now();
await seq.evaluateWithoutGeneratingNewTokens(prompt);
const prefillTps = promptLen / ((performance.now() - start) / 1000);
await ctx.dispose();

ctx = await newContext();
seq = ctx.getSequence();
const ids = [];
let first = 0;
for await (const id of seq.evaluate(prompt.slice(0, 16), { temperature: 0 })) {
	if (ids.length === 0) first = performance.now();
	ids.push(id);
	if (ids.length === decode) break;
}
const decodeTps = (decode - 1) / ((performance.now() - first) / 1000);
await ctx.dispose();
console.log(JSON.stringify({ prefill_tps: prefillTps, decode_tps: decodeTps, ids, cpu: llama.cpuMathCores ?? null }));
await model.dispose();
