package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
)

// apiErr builds an error answer; 5xx get type server_error, others
// invalid_request_error.
func apiErr(status int, code, param, format string, args ...any) *adminclient.Error {
	typ := adminclient.TypeInvalidRequest
	if status >= 500 {
		typ = adminclient.TypeServer
	}
	return &adminclient.Error{Status: status, Type: typ, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

// handlerFunc is a route's handler: it writes a success itself and returns
// any failure for handle to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle names the route's action for the audit log and answers the
// handler's error.
func (s *server) handle(action string, h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := auditFrom(r.Context())
		rec.action = action
		if err := h(w, r); err != nil {
			e := s.toAPIError(err)
			if e.Status >= 500 {
				rec.err = err
			}
			writeError(w, e)
		}
	}
}

// toAPIError maps a handler's error to its answer (see the package doc).
func (s *server) toAPIError(err error) *adminclient.Error {
	var e *adminclient.Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, tenant.ErrInvalid):
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, invalidParam(err), "%s", err.Error())
	case errors.Is(err, tenant.ErrNotFound):
		return apiErr(http.StatusNotFound, adminclient.CodeNotFound, "", "%s", err.Error())
	case errors.Is(err, tenant.ErrExists):
		return apiErr(http.StatusConflict, adminclient.CodeAlreadyExists, "", "%s", err.Error())
	case errors.Is(err, tenant.ErrUnavailable):
		return apiErr(http.StatusServiceUnavailable, adminclient.CodeStoreUnavailable, "",
			"The tenant store is unavailable; retry later.")
	default:
		return apiErr(http.StatusInternalServerError, adminclient.CodeInternal, "",
			"The admin API had an internal error; the gateway log has the cause.")
	}
}

// invalidParam extracts the field a tenant.ErrInvalid names. The store's
// messages are "invalid argument: <field> must …" or, for list items,
// "<field>[i]: invalid argument: …" (documented by tenant.Limits.Validate).
func invalidParam(err error) string {
	msg := err.Error()
	marker := tenant.ErrInvalid.Error()
	if i := strings.Index(msg, ": "+marker); i > 0 {
		head := msg[:i]
		if j := strings.LastIndex(head, ": "); j >= 0 {
			head = head[j+2:]
		}
		if isFieldPath(head) {
			return head
		}
	}
	if _, rest, ok := strings.Cut(msg, marker+": "); ok {
		field, _, _ := strings.Cut(rest, " ")
		if isFieldPath(field) {
			return field
		}
	}
	return ""
}

// isFieldPath reports whether s looks like a JSON field path
// ("limits.budget", "allowed_tenants[2]").
func isFieldPath(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("_.[]", c)) {
			return false
		}
	}
	return true
}

// writeError sends e as its JSON envelope.
func writeError(w http.ResponseWriter, e *adminclient.Error) {
	writeJSON(w, e.Status, e.Envelope())
}

// writeJSON sends v with the given status, without HTML escaping (the
// answers are read by people and tools, not browsers).
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only wire types without floats or maps are encoded, so this
		// cannot happen; answer rather than panic if it ever does.
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"message":"The admin API could not encode its answer.","type":"server_error","param":null,"code":"internal_error"}}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
