// Package embeddings serves OpenAI's POST /v1/embeddings for the served
// (decoder-only) models, mounted through api.Config.Endpoints, so it is
// authenticated, logged and error-enveloped like every API request.
//
// The request is {model, input, encoding_format, dimensions, user}:
// input is a string, an array of strings, an array of token ids or an
// array of arrays of token ids (OpenAI's four shapes), at most MaxInputs
// inputs, none empty; encoding_format is float (default) or base64 (each
// vector's little-endian float32 bytes, base64-encoded, as OpenAI sends
// them); dimensions is refused (these models' embeddings have one width:
// no Matryoshka truncation, as vLLM refuses it for such models); user is
// accepted and ignored, and so are unknown fields. Strings are tokenized
// as a completion prompt is (BOS as the tokenizer config asks); each
// input must fit the model's context window (400
// context_length_exceeded naming input[i]).
//
// An embedding is the model's final hidden state after its final norm,
// pooled over the input's positions (models[].pooling: last, vLLM's
// default for a decoder-only model served for embeddings, or mean) and
// L2-normalised; workers compute it (engine.Request.Embed). The answer
// is {object: list, data: [{object: embedding, index, embedding}], model,
// usage: {prompt_tokens, total_tokens}}. Admission and billing are a
// generation's with no output: the tenant's request rate, concurrency
// and token limits apply to the inputs' tokens, which are billed as
// prompt tokens.
package embeddings
