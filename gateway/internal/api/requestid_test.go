package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var requestIDPattern = regexp.MustCompile(`^req_[0-9a-f]{24}$`)

func TestRequestIDOnEveryResponse(t *testing.T) {
	h := newTestHandler(&fakeService{})
	wrongKey := http.Header{"Authorization": {"Bearer sk-wrong"}}
	cases := []struct {
		name, method, path, body string
		header                   http.Header
		status                   int
	}{
		{"200", "POST", "/v1/chat/completions", goodChat, authJSON(), 200},
		{"200 stream", "POST", "/v1/chat/completions", streamBody(""), authJSON(), 200},
		{"200 health", "GET", "/healthz", "", nil, 200},
		{"400", "POST", "/v1/chat/completions", "{", authJSON(), 400},
		{"401", "GET", "/v1/models", "", wrongKey, 401},
		{"404", "GET", "/nowhere", "", nil, 404},
		{"405", "PATCH", "/healthz", "", nil, 405},
		{"413", "POST", "/v1/completions", strings.Repeat(" ", 65<<10), authJSON(), 413},
		{"415", "POST", "/v1/completions", "{}", http.Header{"Authorization": {"Bearer " + goodKey}, "Content-Type": {"text/csv"}}, 415},
		{"500 panic", "POST", "/v1/chat/completions", `{"model":"panic","messages":[{"role":"user","content":"x"}]}`, authJSON(), 500},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		header := tc.header.Clone()
		if header == nil {
			header = http.Header{}
		}
		header.Set("X-Request-Id", "client-chosen")
		rec := do(h, tc.method, tc.path, tc.body, header)
		id := rec.Header().Get("X-Request-Id")
		if rec.Code != tc.status || !requestIDPattern.MatchString(id) || seen[id] {
			t.Errorf("%s: status %d, x-request-id %q (want %d and a fresh req_ ID)", tc.name, rec.Code, id, tc.status)
		}
		seen[id] = true
		if tc.status == 500 {
			if _, code, _, msg := decodeEnvelope(t, rec.Body.Bytes()); code != CodeInternal || strings.Contains(msg, "exploded") {
				t.Errorf("panic answer: %s", rec.Body)
			}
		}
	}
}

func TestClientRequestIDKeptSeparately(t *testing.T) {
	for _, tc := range []struct {
		header, value, want string
		trusted             bool
	}{
		{"X-Request-Id", "trace-42", "trace-42", true},
		{"X-Client-Request-Id", "abc", "abc", true},
		{"X-Request-Id", "has space", "", true},
		{"X-Request-Id", strings.Repeat("a", 129), "", true},
		// Untrusted (the default): neither kept nor logged.
		{"X-Request-Id", "trace-42", "", false},
		{"X-Client-Request-Id", "abc", "", false},
	} {
		svc := &fakeService{}
		var logs bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		h := NewHandler(Config{MaxBodyBytes: 64 << 10, TrustClientRequestID: tc.trusted}, fakeAuth{}, svc, logger)
		header := authJSON()
		header.Set(tc.header, tc.value)
		rec := do(h, "POST", "/v1/chat/completions", goodChat, header)
		req := svc.lastRequest(t)
		if req.ClientRequestID != tc.want || req.RequestID != rec.Header().Get("X-Request-Id") || req.RequestID == tc.value {
			t.Errorf("%s=%q: client id %q, request id %q, header %q", tc.header, tc.value, req.ClientRequestID, req.RequestID, rec.Header().Get("X-Request-Id"))
		}
		if logged := strings.Contains(logs.String(), "client_request_id"); logged != (tc.want != "") {
			t.Errorf("%s=%q trusted=%v: client_request_id logged %v:\n%s", tc.header, tc.value, tc.trusted, logged, logs.String())
		}
	}
}

// The access log has the fields operators need and never the prompt or
// the output.
func TestAccessLog(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	type answer struct {
		status int
		reason string
	}
	var errs []answer
	h := NewHandler(Config{OnError: func(status int, reason string) { errs = append(errs, answer{status, reason}) }},
		fakeAuth{}, &fakeService{}, logger)
	const secret = "my-secret-prompt-text"
	rec := do(h, "POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"`+secret+`"}]}`, authJSON())
	do(h, "POST", "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"`+secret+`"}],"n":"x"}`, authJSON())
	do(h, "POST", "/v1/chat/completions", goodChat, http.Header{"Authorization": {"Bearer " + brokenKey}})

	logs := buf.String()
	if strings.Contains(logs, secret) || strings.Contains(logs, fakeText) || strings.Contains(logs, goodKey) {
		t.Fatalf("log leaks request or response content:\n%s", logs)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] == "http request" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("%d access lines, want 3:\n%s", len(lines), logs)
	}
	first := lines[0]
	if first["request_id"] != rec.Header().Get("X-Request-Id") || first["tenant"] != "acme" || first["method"] != "POST" ||
		first["path"] != "/v1/chat/completions" || first["status"] != 200.0 || first["duration"] == nil {
		t.Errorf("access line %v", first)
	}
	if lines[1]["status"] != 400.0 || lines[2]["status"] != 500.0 {
		t.Errorf("statuses %v, %v", lines[1]["status"], lines[2]["status"])
	}
	// The error code is in the access line and counted (OnError).
	if _, ok := first["error_code"]; ok || lines[1]["error_code"] != CodeInvalidType || lines[2]["error_code"] != CodeInternal {
		t.Errorf("error codes %v, %v, %v", first["error_code"], lines[1]["error_code"], lines[2]["error_code"])
	}
	if want := []answer{{400, CodeInvalidType}, {500, CodeInternal}}; !slices.Equal(errs, want) {
		t.Errorf("OnError saw %v, want %v", errs, want)
	}
	if !strings.Contains(logs, "connection refused") {
		t.Errorf("internal cause of the 500 not logged:\n%s", logs)
	}
}

// TestHealthReadyNoMetrics: /healthz and /readyz answer without
// authentication; /metrics is not on the public API at all (it names
// tenants: the admin and ops listeners serve it).
func TestHealthReadyNoMetrics(t *testing.T) {
	ready := errors.New("no worker registered")
	cfg := Config{
		Ready: func(context.Context) error { return ready },
	}
	h := NewHandler(cfg, fakeAuth{}, &fakeService{}, nil)
	check := func(path string, status int, body string) {
		t.Helper()
		rec := do(h, "GET", path, "", nil)
		if rec.Code != status || strings.TrimSpace(rec.Body.String()) != body {
			t.Errorf("%s: %d %q, want %d %q", path, rec.Code, rec.Body, status, body)
		}
	}
	check("/healthz", 200, `{"status":"ok"}`)
	check("/readyz", 503, `{"status":"not_ready"}`)
	check("/health", 503, `{"status":"not_ready"}`)
	ready = nil
	check("/readyz", 200, `{"status":"ready"}`)
	check("/health", 200, `{"status":"ready"}`)
	if rec := do(h, "GET", "/metrics", "", nil); rec.Code != http.StatusNotFound || strings.Contains(rec.Body.String(), "warden_") {
		t.Errorf("unauthenticated /metrics on the public API: %d %s", rec.Code, rec.Body)
	}
}
