// Package model reads and writes model directories of the Llama family
// and its relatives (Mistral; Qwen2/Qwen2.5 with q/k/v biases; Qwen3 with
// per-head q/k norms: see Family) in the Hugging Face layout:
//
//	config.json                      architecture and sizes (Config)
//	generation_config.json           optional; BOS/EOS for generation
//	model.safetensors                weights, or
//	model.safetensors.index.json     a weight_map naming several shards
//	tokenizer.json …                 read by internal/tokenizer, not here
//
// Load memory-maps the safetensors files read-only and checks every tensor
// the engine needs against the config; tensors alias the mapping, so
// loading copies no weight bytes. Init and InitFamily write deterministic
// random models (presets "tiny" and "small", shaped as any family) through
// the same writer and config code, so a generated directory and a real
// checkpoint load the same way.
//
// Safetensors bytes are untrusted input: the header parser bounds the
// header length by the file size before reading it and checks every
// offset, shape and size with overflow-safe arithmetic.
package model
