package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// checkOtherField decides about one top-level field. The policy:
//
//   - Fields the decoder reads are validated there.
//   - Standard fields (and common engine extensions) that would change the
//     output are accepted at their default value only, and otherwise
//     answered 400 unsupported_parameter: silently ignoring, say,
//     "echo": true or "top_k": 5 would return something the client
//     did not ask for.
//   - Engine and routing internals (cache salts, transfer parameters,
//     worker choice, request IDs, any "warden…" field) are never
//     client-steerable (I8): always 400 unsupported_parameter. (priority
//     is not among them: the decoder reads it, and the core holds it to
//     the tenant's max_priority.)
//   - vLLM's output-changing extensions (guided_json, guided_choice,
//     structured_outputs, chat_template_kwargs, add_generation_prompt,
//     continue_final_message, bad_words, skip_special_tokens, ...) follow
//     the same rule: see vllmFieldDefaults.
//   - Every other field is ignored, like OpenAI-compatible servers commonly
//     do, so newer SDKs keep working. This covers standard fields with no
//     effect on the generated text (store, metadata, service_tier,
//     safety_identifier, prompt_cache_key, ...).
func checkOtherField(name string, raw json.RawMessage) *Error {
	if isNull(raw) {
		return nil // null means absent, for every field
	}
	if isInternalField(name) {
		return InvalidRequest(name, CodeUnsupportedParameter,
			fmt.Sprintf("Unsupported parameter: '%s' is controlled by the gateway and cannot be set by clients.", name))
	}
	defaults, semantic := fieldDefaults(name)
	switch {
	case semantic && defaults == nil:
		return InvalidRequest(name, CodeUnsupportedParameter,
			fmt.Sprintf("Unsupported parameter: '%s' would change the output and is not supported by this server.", name))
	case semantic && !isDefault(raw, defaults...):
		return InvalidRequest(name, CodeUnsupportedParameter,
			fmt.Sprintf("Unsupported parameter: '%s' is only accepted at its default value by this server.", name))
	}
	return nil
}

func isInternalField(name string) bool {
	switch name {
	case "cache_salt", "kv_transfer_params", "transfer_params",
		"request_id", "tenant", "tenant_id", "worker", "worker_id", "worker_address",
		"prefill_worker", "decode_worker", "page_ids", "epoch", "data_parallel_rank",
		"bootstrap_host", "bootstrap_port", "bootstrap_room":
		return true
	}
	return strings.HasPrefix(strings.ToLower(name), "warden")
}

// fieldDefaults returns the values besides null at which a semantic field
// is a no-op, and whether name is such a field. Values are as
// encoding/json decodes them into any.
func fieldDefaults(name string) ([]any, bool) {
	switch name {
	case "presence_penalty", "frequency_penalty", "min_p", "min_tokens":
		return []any{0.0}, true
	case "logit_bias":
		return []any{map[string]any{}}, true
	case "echo", "ignore_eos":
		return []any{false}, true
	case "suffix":
		return []any{""}, true
	case "best_of", "repetition_penalty":
		return []any{1.0}, true
	case "lora_request", "lora_name":
		return nil, true
	case "top_k":
		return []any{0.0, -1.0}, true
	case "tools", "functions", "stop_token_ids":
		return []any{[]any{}}, true
	case "tool_choice", "function_call":
		return []any{"none", "auto"}, true
	case "response_format":
		return []any{map[string]any{"type": "text"}}, true
	case "modalities":
		return []any{[]any{"text"}}, true
	case "audio", "prediction", "web_search_options":
		return nil, true
	}
	return vllmFieldDefaults(name)
}

// vllmFieldDefaults covers the extensions of vLLM and similar engines
// that change the output; like the standard fields above they are accepted
// at their default value only.
func vllmFieldDefaults(name string) ([]any, bool) {
	switch name {
	case "guided_json", "guided_choice", "guided_regex", "guided_grammar", "guided_decoding_backend",
		"guided_whitespace_pattern", "structured_outputs", "chat_template", "logits_processors",
		"allowed_token_ids", "truncate_prompt_tokens", "mm_processor_kwargs", "vllm_xargs", "add_special_tokens":
		return nil, true
	case "chat_template_kwargs":
		return []any{map[string]any{}}, true
	case "bad_words":
		return []any{[]any{}}, true
	case "add_generation_prompt", "skip_special_tokens", "spaces_between_special_tokens":
		return []any{true}, true
	case "continue_final_message", "include_stop_str_in_output", "use_beam_search", "return_tokens_as_token_ids":
		return []any{false}, true
	case "prompt_logprobs":
		return []any{0.0}, true
	case "length_penalty":
		return []any{1.0}, true
	}
	return nil, false
}

// isDefault reports whether raw equals one of defaults.
func isDefault(raw json.RawMessage, defaults ...any) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	for _, d := range defaults {
		if reflect.DeepEqual(v, d) {
			return true
		}
	}
	return false
}
