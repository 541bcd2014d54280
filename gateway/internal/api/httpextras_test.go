package api

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func TestCORS(t *testing.T) {
	body := `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`
	preflight := http.Header{"Origin": {"https://app.example.com"}, "Access-Control-Request-Method": {"POST"},
		"Access-Control-Request-Headers": {"authorization, content-type, x-stainless-os"}}

	// Off by default: no CORS headers, and a preflight is not answered.
	off := newTestHandler(&fakeService{})
	rec := do(off, "OPTIONS", "/v1/chat/completions", "", preflight)
	if rec.Code == http.StatusNoContent || rec.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS off: preflight answered %d %v", rec.Code, rec.Header())
	}

	h := NewHandler(Config{CORSOrigins: []string{"https://app.example.com"}}, fakeAuth{}, &fakeService{}, nil)
	rec = do(h, "OPTIONS", "/v1/chat/completions", "", preflight)
	if rec.Code != http.StatusNoContent || rec.Header().Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(rec.Header().Get("Access-Control-Allow-Methods"), "POST") ||
		rec.Header().Get("Access-Control-Allow-Headers") != "authorization, content-type, x-stainless-os" {
		t.Errorf("preflight: %d %v", rec.Code, rec.Header())
	}
	hdr := authJSON()
	hdr.Set("Origin", "https://app.example.com")
	rec = do(h, "POST", "/v1/chat/completions", body, hdr)
	if rec.Code != 200 || rec.Header().Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(rec.Header().Get("Access-Control-Expose-Headers"), "X-Request-Id") {
		t.Errorf("allowed origin: %d %v", rec.Code, rec.Header())
	}
	hdr.Set("Origin", "https://evil.example.com")
	rec = do(h, "POST", "/v1/chat/completions", body, hdr)
	if rec.Header().Get("Access-Control-Allow-Origin") != "" || rec.Header().Get("Vary") != "Origin" {
		t.Errorf("other origin: %v", rec.Header())
	}

	any := NewHandler(Config{CORSOrigins: []string{"*"}}, fakeAuth{}, &fakeService{}, nil)
	if rec := do(any, "GET", "/healthz", "", http.Header{"Origin": {"null"}}); rec.Header().Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf(`origins "*": %v`, rec.Header())
	}
}

func TestGzipAndProcessingTime(t *testing.T) {
	long := strings.Repeat("long text ", 200)
	u := fakeUsage
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) {
		return newFakeGen(Event{TextDelta: long}, Event{FinishReason: "stop", Usage: &u}), nil
	}}
	h := newTestHandler(svc)
	body := `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`
	hdr := authJSON()
	hdr.Set("Accept-Encoding", "br;q=1, gzip;q=0.5")
	rec := do(h, "POST", "/v1/chat/completions", body, hdr)
	if rec.Code != 200 || rec.Header().Get("Content-Encoding") != "gzip" || rec.Header().Get("Content-Length") != "" {
		t.Fatalf("gzip asked: %d %v", rec.Code, rec.Header())
	}
	if ms, err := strconv.Atoi(rec.Header().Get("Openai-Processing-Ms")); err != nil || ms < 0 {
		t.Errorf("openai-processing-ms = %q", rec.Header().Get("Openai-Processing-Ms"))
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal(plain, &resp); err != nil || len(resp.Choices) != 1 || resp.Choices[0].Message.Content != long {
		t.Fatalf("decompressed body %q: %v", plain, err)
	}

	// Not asked, refused with q=0, small bodies and streams: plain.
	for _, tc := range []struct{ enc, body string }{
		{"", body},
		{"gzip;q=0", body},
		{"gzip", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true}`},
	} {
		hdr.Set("Accept-Encoding", tc.enc)
		rec := do(h, "POST", "/v1/chat/completions", tc.body, hdr)
		if rec.Header().Get("Content-Encoding") != "" || !strings.Contains(rec.Body.String(), "long text") {
			t.Errorf("Accept-Encoding %q, body %s: compressed %v", tc.enc, tc.body, rec.Header())
		}
	}
	hdr.Set("Accept-Encoding", "gzip")
	if rec := do(h, "GET", "/v1/models", "", hdr); rec.Header().Get("Content-Encoding") != "" ||
		rec.Header().Get("Openai-Processing-Ms") == "" {
		t.Errorf("small body: %v", rec.Header())
	}
}
