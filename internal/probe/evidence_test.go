package probe

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A dropped connection is retried after a backoff and counted, not the
// end of the check: the first try's connection is closed before any
// answer (EOF), the second is answered.
func TestTransportErrorIsRetried(t *testing.T) {
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tries.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"id\":\"x1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()
	b := &budget{}
	b.left.Store(10)
	c := &client{base: srv.URL + "/v1", key: "k", label: "A", http: srv.Client(), budget: b}
	res, err := c.chat(context.Background(), chatRequest{Model: "m", Prompt: "p", MaxTokens: 1})
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if res.Text != "hi" || res.ID != "x1" || !res.Complete {
		t.Errorf("result %+v, want the second try's answer", res)
	}
	if got := b.retries.Load(); got != 1 || tries.Load() != 2 {
		t.Errorf("%d retries counted, %d tries, want 1 and 2", got, tries.Load())
	}
	if left := b.left.Load(); left != 8 {
		t.Errorf("budget left %d, want 8: each try spends one", left)
	}
}

// The run-wide scan finds a response id another key got first (a
// replayed answer) and chunks of another response inside a stream, and
// charges them to the check that sent the request; a key's own repeated
// id is not a cross-key finding.
func TestScanFindsReplayedAndMixedAnswers(t *testing.T) {
	r := &run{index: newLeakIndex(), ev: newEvidenceLog(), gen: newTextGen(1)}
	a, b := &client{label: "A"}, &client{label: "B"}
	r.scan("x", "key A, first", a, chatResult{Status: 200, ID: "resp-1", Text: "one"})
	r.scan("x", "key A, again", a, chatResult{Status: 200, ID: "resp-1", Text: "one"})
	if n := r.ev.count("x"); n != 0 {
		t.Fatalf("%d leaks for a key's own id, want 0", n)
	}
	if l := r.scan("y", "key B, replayed", b, chatResult{Status: 200, ID: "resp-1", Text: "one"}); len(l) != 1 || !strings.Contains(l[0].Evidence, "replayed") {
		t.Errorf("B given A's response id: %+v, want one replay", l)
	}
	if l := r.scan("z", "key B, mixed", b, chatResult{Status: 200, ID: "resp-2", OtherIDs: []string{"resp-1"}}); len(l) != 1 || l[0].Source != "key A, first" {
		t.Errorf("B's stream holding chunks of A's response: %+v, want one naming A's request", l)
	}
	if r.ev.count("y") != 1 || r.ev.count("z") != 1 {
		t.Errorf("leaks per check: y %d, z %d, want 1 and 1", r.ev.count("y"), r.ev.count("z"))
	}
	c := r.foreign(Check{Name: nameForeign})
	if c.Verdict != VerdictFinding || len(c.Evidence) != 2 {
		t.Errorf("foreign check: %s %q %q, want a finding with two lines", c.Verdict, c.Summary, c.Evidence)
	}
}

// A stream carrying chunks of two responses is read as one answer with
// the other id noted.
func TestStreamNotesForeignChunkIDs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, id := range []string{"own", "own", "theirs", "own"} {
			_, _ = w.Write([]byte("data: {\"id\":\"" + id + "\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + id + " \"}}]}\n\n"))
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}))
	defer srv.Close()
	b := &budget{}
	b.left.Store(1)
	c := &client{base: srv.URL + "/v1", key: "k", label: "A", http: srv.Client(), budget: b}
	res, err := c.chat(context.Background(), chatRequest{Model: "m", Prompt: "p", MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != "own" || len(res.OtherIDs) != 1 || res.OtherIDs[0] != "theirs" {
		t.Errorf("id %q, others %q; want own and [theirs]", res.ID, res.OtherIDs)
	}
}

// Fail closed: an inconclusive check makes the run exit 3 unless allowed;
// a finding exits 1 whatever else.
func TestExitCodes(t *testing.T) {
	pass := Check{Name: "a", Verdict: VerdictPass}
	inc := Check{Name: "b", Verdict: VerdictInconclusive, Needs: "more"}
	fin := Check{Name: "c", Verdict: VerdictFinding}
	for _, tc := range []struct {
		checks []Check
		allow  bool
		want   int
	}{
		{[]Check{pass}, false, ExitPass},
		{[]Check{pass, inc}, false, ExitInconclusive},
		{[]Check{pass, inc}, true, ExitPass},
		{[]Check{inc, fin}, false, ExitFinding},
		{[]Check{inc, fin}, true, ExitFinding},
	} {
		r := &Report{Checks: tc.checks}
		if got := r.ExitCode(tc.allow); got != tc.want {
			t.Errorf("%v (allow %v): exit %d, want %d", tc.checks, tc.allow, got, tc.want)
		}
	}
	var sb strings.Builder
	(&Report{Checks: []Check{pass, inc}}).WriteText(&sb)
	if !strings.Contains(sb.String(), "INCONCLUSIVE") || !strings.Contains(sb.String(), "needs more") {
		t.Errorf("the text report does not say the run is inconclusive and what it needs:\n%s", sb.String())
	}
}

// readPlain decodes whatever an endpoint sends without panicking.
func FuzzReadPlain(f *testing.F) {
	f.Add([]byte(`{"id":"chatcmpl-1","choices":[{"index":0,"message":{"content":"hi"}},{"index":1,"message":{"content":"yo"}}],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}`), false)
	f.Add([]byte(`{"id":"resp_1","output":[{"content":[{"text":"hi"}]}],"usage":{"input_tokens":5,"output_tokens":1,"input_tokens_details":{"cached_tokens":0}}}`), true)
	f.Add([]byte(`{"choices":[{"index":-7}]}`), false)
	f.Add([]byte("\x1f\x8b"), false)
	f.Fuzz(func(t *testing.T, body []byte, responses bool) {
		res, err := readPlain(strings.NewReader(string(body)), responses, time.Now(), chatResult{})
		if err == nil && !res.Complete {
			t.Errorf("decoded without error but not complete: %+v", res)
		}
	})
}

// bodyTransport answers every request with 200 and body.
type bodyTransport []byte

func (b bodyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(b)), Request: r}, nil
}

// The stream reader takes whatever an endpoint streams without
// panicking, and calls a stream complete only when it ended with [DONE].
func FuzzStream(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"id\":\"a\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"id\":\"a\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\"x\"}}]}\ndata: {\"id\":\"b\",\"choices\":[{\"index\":0}]}\n"))
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\",\"code\":\"x\"}}\n"))
	f.Add([]byte("data: not json\n: comment\ndata:[DONE]\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		b := &budget{}
		b.left.Store(1)
		c := &client{base: "http://fuzz/v1", key: "k", label: "A", http: &http.Client{Transport: bodyTransport(body)}, budget: b}
		res, err := c.chat(context.Background(), chatRequest{Model: "m", Prompt: "p", MaxTokens: 1})
		if err == nil && res.Complete && !bytes.Contains(body, []byte("[DONE]")) {
			t.Errorf("complete without [DONE]: %+v", res)
		}
	})
}
