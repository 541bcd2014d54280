// Package tokenize serves vLLM's POST /tokenize and POST /detokenize
// beside the OpenAI API (mounted through api.Config.Endpoints, so they
// are authenticated and logged like every API request).
//
// /tokenize takes {model, prompt, add_special_tokens} (a completion's
// input; add_special_tokens defaults to true: BOS as the model's
// tokenizer config asks) or {model, messages, tools, tool_choice,
// add_generation_prompt} (a chat's input, rendered with the model's chat
// template; add_generation_prompt defaults to true) and answers
// {count, max_model_len, tokens}. The tokens are exactly those a
// generation request with the same input is prefilled with: the input is
// decoded by the generation endpoints' own decoder (api.DecodeInput) and
// tokenized by the same gateway code (Models). /detokenize takes
// {model, tokens} and answers {prompt}, special tokens written out.
//
// Each call counts as one request against the tenant's limits (its
// request rate and concurrency; 429 past them) for the model, which must
// be one the tenant may use (404 otherwise, like an unknown model), and
// is billed no tokens. Bad input is a 400 in the API's error envelope
// naming the field: token ids outside the vocabulary, options this server
// cannot honour (chat_template, continue_final_message,
// add_special_tokens with messages, return_token_strs), wrong types.
package tokenize
