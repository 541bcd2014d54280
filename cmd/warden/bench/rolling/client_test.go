package rolling

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// sse is a complete stream answering "Hi there" (stop).
const sse = `data: {"choices":[{"delta":{"content":"Hi"}}]}

data: {"choices":[{"delta":{"content":" there"},"finish_reason":"stop"}]}

data: [DONE]

`

func TestReadStream(t *testing.T) {
	text, finish, err := readStream(strings.NewReader(sse))
	if err != nil || text != "Hi there" || finish != "stop" {
		t.Fatalf("readStream = %q, %q, %v", text, finish, err)
	}
	for name, in := range map[string]string{
		"cut":         sse[:strings.Index(sse, "data: [DONE]")],
		"error event": `data: {"choices":[{"delta":{"content":"Hi"}}]}` + "\n\n" + `data: {"error":{"code":"worker_unavailable","message":"gone"}}` + "\n\n",
		"bad json":    "data: {\n\n",
		"empty":       "",
	} {
		if _, _, err := readStream(strings.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func FuzzReadStream(f *testing.F) {
	f.Add(sse)
	f.Add("data: [DONE]\n")
	f.Add(`data: {"error":{"code":"x"}}` + "\n")
	f.Add("data: {\"choices\":[{\"finish_reason\":null}]}\ndata: [DONE]\n")
	f.Fuzz(func(t *testing.T, in string) {
		text, _, err := readStream(strings.NewReader(in))
		if err != nil && text != "" {
			t.Errorf("text %q with error %v", text, err)
		}
	})
}

// TestStreamRetryRules checks which answers Stream retries: a 503 with
// retry-after and a never-admitted code, a refused connection; and which
// it counts: any other error, a cut stream.
func TestStreamRetryRules(t *testing.T) {
	var n atomic.Int64
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) { // retried
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"not_ready"}}`)
		},
		func(w http.ResponseWriter) { io.WriteString(w, sse) },
		func(w http.ResponseWriter) { // no retry-after: an error
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"shutting_down"}}`)
		},
		func(w http.ResponseWriter) { // not a never-admitted code
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"code":"rate_limited"}}`)
		},
		func(w http.ResponseWriter) { // cut after it started
			io.WriteString(w, sse[:20])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			t.Errorf("authorization %q", r.Header.Get("Authorization"))
		}
		answers[n.Add(1)-1](w)
	}))
	defer srv.Close()
	ctx := context.Background()
	body := ChatBody("m", "p", 4)
	if o := Stream(ctx, srv.Client(), srv.URL, "k", body); o.Error != "" || o.Cut || o.Text != "Hi there" || fmt.Sprint(o.Retries) != "[not_ready]" {
		t.Errorf("503 not_ready then OK: %+v", o)
	}
	if o := Stream(ctx, srv.Client(), srv.URL, "k", body); o.Error != "503 shutting_down" || len(o.Retries) != 0 {
		t.Errorf("503 without retry-after: %+v", o)
	}
	if o := Stream(ctx, srv.Client(), srv.URL, "k", body); o.Error != "429 rate_limited" || len(o.Retries) != 0 {
		t.Errorf("429: %+v", o)
	}
	if o := Stream(ctx, srv.Client(), srv.URL, "k", body); !o.Cut || len(o.Retries) != 0 {
		t.Errorf("cut stream: %+v", o)
	}

	// A refused connection is retried, up to maxRetries.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	o := Stream(ctx, http.DefaultClient, "http://"+addr, "k", body)
	if o.Error != "retries exhausted" || len(o.Retries) != maxRetries || o.Retries[0] != "connection refused" {
		t.Errorf("refused: %+v", o)
	}
}
