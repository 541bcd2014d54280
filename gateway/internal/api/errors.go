package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/warden-ai/warden/internal/errenvelope"
	"github.com/warden-ai/warden/internal/obs"
)

// Error types, as in OpenAI's error envelope.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
)

// Error codes. Validation codes follow the names OpenAI uses for the same
// failures, so client code that branches on them keeps working.
const (
	CodeInvalidJSON          = "invalid_json"
	CodeInvalidEncoding      = "invalid_encoding"
	CodeInvalidType          = "invalid_type"
	CodeInvalidValue         = "invalid_value"
	CodeMissingParameter     = "missing_required_parameter"
	CodeEmptyArray           = "empty_array"
	CodeArrayTooLong         = "array_above_max_length"
	CodeIntegerTooSmall      = "integer_below_min_value"
	CodeIntegerTooLarge      = "integer_above_max_value"
	CodeDecimalTooSmall      = "decimal_below_min_value"
	CodeDecimalTooLarge      = "decimal_above_max_value"
	CodeUnsupportedValue     = "unsupported_value"
	CodeUnsupportedParameter = "unsupported_parameter"
	CodeContextLength        = "context_length_exceeded"
	CodeInvalidAPIKey        = "invalid_api_key"
	CodeModelNotFound        = "model_not_found"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeRequestTooLarge      = "request_too_large"
	CodeUnsupportedMedia     = "unsupported_media_type"
	CodeRateLimit            = "rate_limit_exceeded"
	CodeModelUnavailable     = "model_unavailable"
	CodeNotReady             = "not_ready"
	CodeInternal             = "internal_error"
)

// Error is an error with its HTTP answer. Services and authenticators return
// it for every failure the client should see as-is; any other error becomes
// a generic 500.
type Error struct {
	Status  int    // HTTP status
	Type    string // error.type
	Code    string // error.code; empty is sent as null
	Param   string // error.param; empty is sent as null
	Message string // error.message, shown to the client
	// Headers are added to the response (retry-after, x-ratelimit-*).
	Headers http.Header
}

// Error implements error.
func (e *Error) Error() string {
	s := fmt.Sprintf("api: %d %s", e.Status, e.Type)
	if e.Code != "" {
		s += "/" + e.Code
	}
	if e.Param != "" {
		s += " (param " + e.Param + ")"
	}
	return s + ": " + e.Message
}

// InvalidRequest is a 400 invalid_request_error about one parameter.
func InvalidRequest(param, code, message string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: code, Param: param, Message: message}
}

// ContextLengthExceeded is the 400 for a request that can never fit: limit
// is the model's effective context, prompt and completion the token counts
// requested.
func ContextLengthExceeded(param string, limit, prompt, completion int64) *Error {
	return InvalidRequest(param, CodeContextLength, fmt.Sprintf(
		"This model's maximum context length is %d tokens, but %d tokens were requested (%d in the prompt, %d for the completion). Shorten the prompt or lower max_tokens.",
		limit, prompt+completion, prompt, completion))
}

// InvalidAPIKey is the 401 for a missing, unknown, wrong or revoked key.
// The message must not echo the key.
func InvalidAPIKey(message string) *Error {
	return &Error{Status: http.StatusUnauthorized, Type: TypeInvalidRequest, Code: CodeInvalidAPIKey, Message: message}
}

// ModelNotFound is the 404 for a model that does not exist or that the
// principal may not use (the two are not distinguished).
func ModelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: CodeModelNotFound, Param: "model",
		Message: fmt.Sprintf("The model %q does not exist or you do not have access to it.", model)}
}

// RequestTooLarge is the 413 for a body over limit bytes.
func RequestTooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: CodeRequestTooLarge,
		Message: fmt.Sprintf("Request body is larger than the limit of %d bytes.", limit)}
}

// RateLimited is the 429 for a tenant over a limit. retryAfter (rounded up
// to whole seconds, at least 1) becomes the retry-after header; headers
// (x-ratelimit-*) are added as given.
func RateLimited(message string, retryAfter time.Duration, headers http.Header) *Error {
	h := headers.Clone()
	if h == nil {
		h = http.Header{}
	}
	secs := int64((retryAfter + time.Second - 1) / time.Second)
	h.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: CodeRateLimit, Message: message, Headers: h}
}

// ModelUnavailable is the 503 for a model that exists but cannot be served
// now (no healthy worker, context policy "refuse", draining), with
// retry-after. reason is shown to API customers: it must name no worker,
// address or pool size (those go to logs and the admin API).
func ModelUnavailable(model, reason string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: CodeModelUnavailable, Param: "model",
		Message: fmt.Sprintf("The model %q cannot be served right now: %s; retry shortly.", model, reason),
		Headers: http.Header{"Retry-After": {"1"}}}
}

// NotReady is the 503 for a model the gateway will serve but cannot yet:
// the gateway is starting and the model's workers have not all registered
// (or its tokenizer is not loaded), with retry-after. Unlike
// model_unavailable, it says nothing about the model: another gateway may
// serve it now.
func NotReady(model string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Code: CodeNotReady, Param: "model",
		Message: fmt.Sprintf("This gateway is starting and cannot serve the model %q yet; retry shortly.", model),
		Headers: http.Header{"Retry-After": {"1"}}}
}

// Internal is the generic 500. It says nothing about the cause; log that
// separately with the request ID.
func Internal() *Error {
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Code: CodeInternal,
		Message: "The server had an error while processing your request. Quote the x-request-id response header if you report it."}
}

func unsupportedParameter(param string) *Error {
	return InvalidRequest(param, CodeUnsupportedParameter, fmt.Sprintf("Unsupported parameter: %q is not supported by this server.", param))
}

func notFound(path string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: CodeNotFound,
		Message: fmt.Sprintf("Unknown request URL: %s.", path)}
}

func methodNotAllowed(method, path string) *Error {
	return &Error{Status: http.StatusMethodNotAllowed, Type: TypeInvalidRequest, Code: CodeMethodNotAllowed,
		Message: fmt.Sprintf("Method %s is not allowed for %s.", method, path)}
}

func unsupportedMediaType(got string) *Error {
	return &Error{Status: http.StatusUnsupportedMediaType, Type: TypeInvalidRequest, Code: CodeUnsupportedMedia,
		Message: fmt.Sprintf("Content-Type %q is not supported; send application/json.", got)}
}

// envelope is e's JSON body.
func (e *Error) envelope() errenvelope.Envelope {
	return errenvelope.New(e.Message, e.Type, e.Param, e.Code)
}

// isReservedHeader reports the headers this package owns, never taken from
// an *Error or an Event.
func isReservedHeader(canonical string) bool {
	switch canonical {
	case "Content-Type", "Content-Length", "Transfer-Encoding", "X-Request-Id":
		return true
	}
	return false
}

// copyHeaders adds src to dst, skipping the headers this package owns.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		k = http.CanonicalHeaderKey(k)
		if isReservedHeader(k) {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
}

// writeError sends e as a JSON error response.
func writeError(w http.ResponseWriter, e *Error) {
	noteError(w, e)
	copyHeaders(w.Header(), e.Headers)
	writeJSON(w, e.Status, e.envelope())
}

// noteError records e's code on the response for the access log and the
// rejection metric (observe), through any writers wrapped around the
// recorder (gzip, processing time).
func noteError(w http.ResponseWriter, e *Error) {
	for {
		if rec, ok := w.(*obs.StatusRecorder); ok {
			rec.ErrorCode = e.reason()
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// reason is the error's code, or its type when it has no code: the
// label of warden_requests_rejected_total and the access log's
// error_code.
func (e *Error) reason() string {
	if e.Code != "" {
		return e.Code
	}
	return e.Type
}

// marshal encodes one of this package's wire types, which cannot fail,
// without escaping <, > and & (clients read the messages).
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("api: marshal %T: %v", v, err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// writeJSON sends v with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b := append(marshal(v), '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
