// Package lora reads LoRA adapters in the PEFT layout (adapter_config.json
// and adapter_model.safetensors) and names them by content: Hash is the
// identity the gateway's adapter registry, the worker's adapter memory,
// every KV page's owner and every cache key use, so two adapters with the
// same name but different bytes never share state.
//
// Parse checks an adapter against the base model it is registered for:
// every tensor is a lora_A ([r, in]) or lora_B ([out, r]) of a supported
// projection (q, k, v, o, gate, up, down) of an existing layer, in pairs,
// with the shapes the base model's projection has. What PEFT can express
// but warden does not compute (DoRA, trained biases, modules_to_save,
// fan_in_fan_out, per-module alpha) is refused with a clear error rather
// than served wrong.
package lora
