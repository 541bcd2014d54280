// Package serve drives OpenAI-compatible endpoints — warden or any other
// server (vLLM, llama-server, SGLang) — the way users load them: N
// streaming chat clients, each sending its next request as soon as its
// last one ended, with prompt and output lengths drawn from ranges and an
// optional prefix shared by every prompt. It reports output throughput,
// time to first token, inter-token latency, request latency and errors.
//
// A round ends with a drain: the clients stop sending, and the round
// lasts until its slowest request ends, at falling concurrency. The
// throughput that compares endpoints counts the output produced within
// the sending windows (each request's tokens spread over its life) over
// the windows' time: the steady load the clients keep up. The figure with
// the drains included is reported beside it.
//
// With two endpoints the run is interleaved: rounds of each endpoint take
// turns (who goes first rotates), both replay the same seeded sequence of
// prompts, and the report gives the first endpoint's figures divided by
// the second's, so that a drift in the machine's load affects both alike
// and the ratios are the result (DESIGN §8).
//
// Lengths are in words of a fixed list of common English words, each of
// which is one token in the byte-pair vocabularies of the Llama 3, Qwen
// and Mistral families; the report states the prompt and output tokens
// the endpoint itself counted (usage), so a tokenizer that splits words
// differently shows in the figures rather than skewing them silently.
//
// A request that fails — transport error, non-2xx status, an error event
// or a stream that ends without its final [DONE] — is counted by kind and
// does not stop the run; its first messages are kept for the report.
package serve
