// Package api is warden's OpenAI-compatible HTTP API: it turns requests
// into calls on a Service and an Authenticator (implemented by the gateway
// core) and their results back into OpenAI's wire format.
//
// # Request path
//
// Every request gets a gateway-assigned ID ("req_" and 24 hex digits) in
// the x-request-id response header, whatever the outcome (404, 405, 413,
// panics included); a client's own x-client-request-id or x-request-id is
// kept only as GenerateRequest.ClientRequestID. Then: panic recovery and
// one access-log line (request_id, tenant, method, path, status, bytes,
// duration; never prompt or output text), the body limit (413), routing
// (404/405 in the error envelope), "Authorization: Bearer <key>" (401),
// Content-Type (415 unless JSON), decoding and validation (400 naming the
// param), Service.Generate, and the response.
//
// # Decoding policy
//
// The body must be valid UTF-8 (checked before parsing, because
// encoding/json would silently replace bad bytes) holding one JSON object.
// An explicit null is the same as an omitted field. Supported fields are
// validated strictly; n must be 1; priority is an integer from 0 to
// MaxPriority (whether the tenant may ask for it is the core's to check:
// its max_priority, invariant I8). The sampling controls (penalties,
// logit_bias, top_k, min_p) and completions' echo are read in
// decode_sampling.go with vLLM's semantics. Standard fields that would
// change the output and are not implemented are accepted only at their
// default value (suffix: "", functions: [], ...), and otherwise refused
// with 400 unsupported_parameter. Tools (tools, tool_choice, parallel_tool_calls,
// tool calls and tool messages in the history) are decoded in tools.go;
// the core renders them and parses the output into ToolCallDelta events. Fields that would steer gateway or engine
// internals (cache salts, KV-transfer parameters, worker choice, request
// IDs, anything named warden…) are always refused (invariant I8). Other
// unknown fields are ignored. See checkOtherField.
//
// # Responses and streaming
//
// Non-streaming responses are chat.completion and text_completion objects
// as OpenAI shapes them, with ids "chatcmpl-…" and "cmpl-…" derived from
// the request ID. Streams are text/event-stream: for chat, a first chunk
// with the assistant role, one chunk per text delta and per tool-call
// delta, a chunk with the finish reason, with stream_options.include_usage a chunk with empty
// choices and the usage, then "data: [DONE]"; each event is flushed.
//
// The status line and headers are written when the first Event arrives, so
// a failure before that (admission, rate limits) is an ordinary HTTP error
// with its headers. A failure after that is sent as one event
//
//	data: {"error":{"message":…,"type":…,"param":…,"code":…}}
//
// and the stream ends without "data: [DONE]", so a truncated stream never
// looks complete (the official clients report it as an error). A panic
// after the first byte aborts the connection for the same reason.
//
// # Errors
//
// Failures the client should see are *Error values (see the constructors);
// any other error is answered 500 internal_error with a generic message and
// logged with the request ID. A Generation that breaks the Event contract
// (invalid UTF-8, no finish reason, no usage, text after the finish) is
// such an internal error.
//
// # Disconnects
//
// Generation.Next gets the request's context, cancelled when the client
// goes away; the handler then returns and calls Generation.Close, which
// aborts the request in the core. Writes to a client carry a deadline
// (Config.WriteTimeout), so a client that stops reading is dropped the
// same way. The http.Server serving this handler must leave WriteTimeout
// at 0, or long streams would be cut.
package api
