package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEndpoint is a scripted OpenAI-compatible server: it streams
// max_tokens one-word chunks and its usage (prompt tokens = words), fails
// every failEvery-th request with 503 and cuts every cutEvery-th stream
// short, and tallies what it sent.
type fakeEndpoint struct {
	failEvery, cutEvery int

	mu                      sync.Mutex
	n                       int
	failed, cut             int
	promptTokens, outTokens int64
	prompts                 []string
	keys                    map[string]int
}

func (f *fakeEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
		Messages  []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil || !req.Stream || len(req.Messages) != 1 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	words := int64(len(strings.Fields(req.Messages[0].Content)))
	f.mu.Lock()
	f.n++
	n := f.n
	if f.keys == nil {
		f.keys = map[string]int{}
	}
	f.keys[r.Header.Get("Authorization")]++
	f.prompts = append(f.prompts, req.Messages[0].Content)
	fail := f.failEvery > 0 && n%f.failEvery == 0
	cut := !fail && f.cutEvery > 0 && n%f.cutEvery == 0
	switch {
	case fail:
		f.failed++
	case cut:
		f.cut++
	default:
		f.promptTokens += words
		f.outTokens += int64(req.MaxTokens)
	}
	f.mu.Unlock()
	if fail {
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := range req.MaxTokens {
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\" w%d\"}}]}\n\n", i)
		fl.Flush()
		if cut {
			return
		}
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", words, req.MaxTokens)
}

// TestRunCountsWhatTheEndpointSent: two endpoints run interleaved; each
// result's requests, failures by kind, prompt and output tokens equal what
// that endpoint's server tallied, and the report shows the ratios.
func TestRunCountsWhatTheEndpointSent(t *testing.T) {
	fa := &fakeEndpoint{failEvery: 5, cutEvery: 7}
	fb := &fakeEndpoint{}
	a, b := httptest.NewServer(fa), httptest.NewServer(fb)
	defer a.Close()
	defer b.Close()
	o := Options{
		Endpoints: []Endpoint{{Name: "a", URL: a.URL, APIKey: "ka", Model: "m"}, {Name: "b", URL: b.URL + "/v1/", APIKey: "kb", Model: "m"}},
		Clients:   3, Duration: 600 * time.Millisecond, Round: 200 * time.Millisecond,
		PromptWords: Range{5, 9}, OutputTokens: Range{2, 6}, Seed: 7,
	}
	rep, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range []*fakeEndpoint{fa, fb} {
		r := rep.Results[i]
		f.mu.Lock()
		if r.Requests != f.n || r.Errors["http_503"] != f.failed || r.Errors["truncated_stream"] != f.cut ||
			r.PromptTokens != f.promptTokens || r.OutputTokens != f.outTokens {
			t.Errorf("%s: result %d requests, errors %v, tokens %d/%d; server sent %d, %d 503s, %d cut, tokens %d/%d",
				r.Endpoint.Name, r.Requests, r.Errors, r.PromptTokens, r.OutputTokens, f.n, f.failed, f.cut, f.promptTokens, f.outTokens)
		}
		if want := "Bearer " + o.Endpoints[i].APIKey; f.keys[want] != f.n {
			t.Errorf("%s: keys %v, want every request with %q", r.Endpoint.Name, f.keys, want)
		}
		f.mu.Unlock()
		if r.Requests == 0 || r.TTFT.P50 <= 0 || r.Latency.P99 < r.TTFT.P50 || r.OutputTokensPerSecond() <= 0 {
			t.Errorf("%s: implausible figures %+v", r.Endpoint.Name, r)
		}
	}
	if fa.failed == 0 || fa.cut == 0 {
		t.Fatalf("the run was too short to fail (%d) and cut (%d) a request", fa.failed, fa.cut)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| figure | a | b | ratio (first ÷ second) |", "| output tokens/s (sending windows) |", "| output tokens/s (drains included) |", "| TTFT p99 (ms) |", "a: " + fmt.Sprint(rep.Results[0].Failed()) + " failed requests"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown report lacks %q:\n%s", want, md.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), "ka") || strings.Contains(js.String(), "kb") {
		t.Errorf("the JSON report shows an API key:\n%s", js.String())
	}
	var back struct {
		Results []struct {
			Requests     int   `json:"requests"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"results"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Results) != 2 || back.Results[1].OutputTokens != rep.Results[1].OutputTokens {
		t.Errorf("JSON report %v (%v) does not round-trip", back, err)
	}
}

// TestWorkloadSameForEveryEndpoint: a client's prompts in a round depend
// only on the seed, round and client; lengths stay in range; the shared
// prefix opens every prompt.
func TestWorkloadSameForEveryEndpoint(t *testing.T) {
	o := &Options{PromptWords: Range{10, 20}, OutputTokens: Range{3, 4}, SharedPrefix: 0.5, Seed: 3}
	prefix := sharedPrefix(o)
	w1, w2, other := newWorkload(o, prefix, 2, 1), newWorkload(o, prefix, 2, 1), newWorkload(o, prefix, 2, 2)
	opening := strings.Join(prefix[:5], " ")
	differs := false
	for range 50 {
		p1, m1 := w1.next()
		p2, m2 := w2.next()
		p3, _ := other.next()
		if p1 != p2 || m1 != m2 {
			t.Fatalf("same seed, round and client gave %q/%d and %q/%d", p1, m1, p2, m2)
		}
		differs = differs || p1 != p3
		if n := len(strings.Fields(p1)); n < 10 || n > 20 || m1 < 3 || m1 > 4 {
			t.Errorf("prompt of %d words, max_tokens %d: out of range", n, m1)
		}
		if !strings.HasPrefix(p1, opening) || !strings.HasPrefix(p3, opening) {
			t.Errorf("prompt %q does not open with the shared prefix %q", p1, opening)
		}
	}
	if !differs {
		t.Error("two clients got the same prompts")
	}
}

func TestParseRange(t *testing.T) {
	for in, want := range map[string]Range{"64": {64, 64}, "200:240": {200, 240}, " 1 : 2 ": {1, 2}} {
		if got, err := ParseRange(in); err != nil || got != want {
			t.Errorf("ParseRange(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "5:4", "a:b", "-1:3", "1:2:3"} {
		if _, err := ParseRange(in); err == nil {
			t.Errorf("ParseRange(%q) accepted", in)
		}
	}
}

// Throughput counts the output produced within the sending window, each
// request's tokens spread over its lifetime; the drain after the window
// only counts toward the drained figure. Where the text chunks arrived
// does not matter (a server may hold text back and send it in bursts).
func TestThroughputCountsTheSendingWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []sample{
		// 6 tokens, all within the window, its text in one late burst.
		{start: at(0), end: at(1000), res: streamResult{OutputTokens: 6, Arrivals: []time.Time{at(990), at(1000)}}},
		// 4 tokens, half of its life within the window: 2.
		{start: at(1000), end: at(3000), res: streamResult{OutputTokens: 4, Arrivals: []time.Time{at(2900)}}},
		// 3 tokens, all in the drain: none.
		{start: at(2500), end: at(4000), res: streamResult{OutputTokens: 3, Arrivals: []time.Time{at(3000)}}},
		// failed: nothing counts.
		{start: at(0), end: at(1000), err: &statusError{code: 429}},
	}
	var a accumulator
	a.add(samples, 4*time.Second, at(0), at(2000))
	r := a.result(Endpoint{Name: "x"})
	if got := r.OutputTokensPerSecond(); got != 4 {
		t.Errorf("window throughput %v tokens/s, want 4 (8 tokens in 2 s)", got)
	}
	if got := r.DrainedOutputTokensPerSecond(); got != 3.25 {
		t.Errorf("drained throughput %v tokens/s, want 3.25 (13 tokens in 4 s)", got)
	}
}

// oneRequestPerConn serves h for the first request on each connection
// and closes the connection on the second without an answer, as a server
// does that drops a keep-alive connection while the next request is on
// its way.
type oneRequestPerConn struct {
	h http.Handler

	mu      sync.Mutex
	seen    map[string]bool
	dropped int
}

func (o *oneRequestPerConn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	again := o.seen[r.RemoteAddr]
	o.seen[r.RemoteAddr] = true
	if again {
		o.dropped++
	}
	o.mu.Unlock()
	if !again {
		o.h.ServeHTTP(w, r)
		return
	}
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

// TestRequestOnADroppedConnectionIsSentAgain: a request that went out on
// a keep-alive connection the server then closed without answering never
// reached the server's handler; the bench sends it again on a new
// connection instead of counting a failure the server never saw.
func TestRequestOnADroppedConnectionIsSentAgain(t *testing.T) {
	f := &fakeEndpoint{}
	srv := &oneRequestPerConn{h: f, seen: map[string]bool{}}
	s := httptest.NewServer(srv)
	defer s.Close()
	rep, err := Run(t.Context(), Options{
		Endpoints: []Endpoint{{Name: "a", URL: s.URL, Model: "m"}},
		Clients:   2, Duration: 300 * time.Millisecond, Round: 300 * time.Millisecond,
		PromptWords: Range{5, 9}, OutputTokens: Range{2, 4}, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.dropped == 0 {
		t.Fatalf("no request went out on a reused connection in %d requests", r.Requests)
	}
	if r.Failed() != 0 || r.Requests != f.n {
		t.Errorf("%d of %d requests failed (%v); the server dropped %d and answered %d", r.Failed(), r.Requests, r.Errors, srv.dropped, f.n)
	}
}
