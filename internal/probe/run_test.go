package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeEndpoint is a small OpenAI-compatible endpoint with no leak: a
// "model" whose answer is a function of the prompt (plus, when noisy, a
// random word: not deterministic at temperature 0), one token per filler
// word plus a template's five, a context of fakeContext tokens, a prefill
// time proportional to the prompt, no cache, every client-steered field
// refused, nothing stored. Every dropEvery-th request loses its
// connection before any answer.
type fakeEndpoint struct {
	noisy bool
	// overBill is added to every prompt_tokens billed.
	overBill  int
	dropEvery int64
	// context, when not 0, replaces fakeContext; noContextCheck answers
	// a prompt past it 503 model_unavailable, as a gateway without its
	// context check does when no worker can hold the prompt.
	context        int
	noContextCheck bool
	// reuseAfterAbort: a request aborted in its prefill leaves its memory
	// owed to a late writer, which changes the answer of the next prompt
	// computed into it — one its key has not sent before (a repeated
	// prompt comes from the key's prefix cache).
	reuseAfterAbort bool
	owed            bool
	seen            map[string]bool // key and prompt
	requests        atomic.Int64
	ids             atomic.Int64
	mu              sync.Mutex
	rng             *rand.Rand
}

const fakeContext = 2048

func (f *fakeEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if n := f.requests.Add(1); f.dropEvery > 0 && n%f.dropEvery == 0 {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	fail := func(status int, code string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error","code":%q}}`, code, code)
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"fake","context_length":%d}]}`, f.contextLength())
		return
	case r.Method != http.MethodPost:
		fail(http.StatusNotFound, "not_found")
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		fail(http.StatusBadRequest, "invalid_json")
		return
	}
	for k := range steeringFields {
		if _, ok := body[k]; ok {
			fail(http.StatusBadRequest, "unsupported_parameter")
			return
		}
	}
	if _, ok := body["previous_response_id"]; ok {
		fail(http.StatusBadRequest, "not_stored")
		return
	}
	var text strings.Builder
	if in, ok := body["input"].(string); ok {
		text.WriteString(in)
	}
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		if c, ok := m.(map[string]any)["content"].(string); ok {
			text.WriteString(c + "\n")
		}
	}
	maxTokens := 16
	for _, k := range []string{"max_tokens", "max_output_tokens"} {
		if v, ok := body[k].(float64); ok {
			maxTokens = int(v)
		}
	}
	prompt := len(strings.Fields(text.String())) + 5
	if prompt+maxTokens > f.contextLength() {
		if f.noContextCheck {
			fail(http.StatusServiceUnavailable, "model_unavailable")
		} else {
			fail(http.StatusBadRequest, "context_length_exceeded")
		}
		return
	}
	select { // the prefill
	case <-time.After(time.Duration(prompt) * 5 * time.Microsecond):
	case <-r.Context().Done():
		f.mu.Lock()
		f.owed = f.owed || f.reuseAfterAbort
		f.mu.Unlock()
		return
	}
	h := fnv.New64a()
	h.Write([]byte(text.String()))
	answer := []string{fmt.Sprintf("w%x", h.Sum64()%9973), fmt.Sprintf("v%x", h.Sum64()%7919)}
	if f.reuseAfterAbort {
		f.mu.Lock()
		if seen := r.Header.Get("Authorization") + "\n" + text.String(); !f.seen[seen] {
			f.seen[seen] = true
			if f.owed {
				answer[1], f.owed = "overwritten", false
			}
		}
		f.mu.Unlock()
	}
	if f.noisy {
		f.mu.Lock()
		answer = append(answer, fmt.Sprintf("n%d", f.rng.IntN(1000)))
		f.mu.Unlock()
	}
	answer = answer[:min(len(answer), maxTokens)]
	n := 1
	if v, ok := body["n"].(float64); ok {
		n = int(v)
	}
	id := fmt.Sprintf("fake-%d", f.ids.Add(1))
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}`, prompt+f.overBill, len(answer))
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasSuffix(r.URL.Path, "/responses"):
		fmt.Fprintf(w, `{"id":%q,"output":[{"content":[{"text":%q}]}],"usage":{"input_tokens":%d,"output_tokens":%d}}`, id, strings.Join(answer, " "), prompt, len(answer))
	case body["stream"] == true:
		w.Header().Set("Content-Type", "text/event-stream")
		for _, word := range answer {
			for c := range n {
				fmt.Fprintf(w, "data: {\"id\":%q,\"choices\":[{\"index\":%d,\"delta\":{\"content\":%q}}]}\n\n", id, c, word+" ")
			}
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "data: {\"id\":%q,\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n", id, usage)
	default:
		var choices []string
		for c := range n {
			choices = append(choices, fmt.Sprintf(`{"index":%d,"message":{"content":%q}}`, c, strings.Join(answer, " ")))
		}
		fmt.Fprintf(w, `{"id":%q,"choices":[%s],"usage":%s}`, id, strings.Join(choices, ","), usage)
	}
}

func (f *fakeEndpoint) contextLength() int {
	if f.context != 0 {
		return f.context
	}
	return fakeContext
}

// probeFake runs the probe with its defaults against f.
func probeFake(t *testing.T, f *fakeEndpoint) *Report {
	t.Helper()
	f.rng = rand.New(rand.NewPCG(3, 4))
	srv := httptest.NewServer(f)
	defer srv.Close()
	rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Keys: []string{"a", "b"}, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.WriteText(&sb)
	t.Logf("%s", sb.String())
	return rep
}

// Against an endpoint without a leak, the probe's defaults conclude every
// check with a pass (exit 0) — though every 25th request loses its
// connection: each is retried and counted, none ends a check.
func TestRunConcludesOnAHealthyEndpoint(t *testing.T) {
	rep := probeFake(t, &fakeEndpoint{dropEvery: 25})
	if code := rep.ExitCode(false); code != ExitPass {
		t.Errorf("exit %d, want 0", code)
	}
	for _, c := range rep.Checks {
		if c.Verdict != VerdictPass {
			t.Errorf("%s: %s (%s), want pass", c.Name, c.Verdict, c.Summary)
		}
	}
	if len(rep.Checks) < 16 || rep.Retries == 0 || rep.Requests > rep.Budget {
		t.Errorf("%d checks, %d retries, %d of %d requests; want every check, the dropped connections retried, within the budget", len(rep.Checks), rep.Retries, rep.Requests, rep.Budget)
	}
}

// An endpoint that is not deterministic at temperature 0 gets the two
// consistency checks inconclusive, saying why and what they need, and
// every other check run to a pass; the run exits 3 (0 when allowed).
func TestRunOnANondeterministicEndpoint(t *testing.T) {
	rep := probeFake(t, &fakeEndpoint{noisy: true})
	for _, c := range rep.Checks {
		want := VerdictPass
		if c.Name == nameConsLoaded || c.Name == nameConsAborts {
			want = VerdictInconclusive
			if !strings.Contains(c.Summary, "not deterministic") || !strings.Contains(c.Needs, "deterministic") {
				t.Errorf("%s: %q, needs %q: want why and what it needs", c.Name, c.Summary, c.Needs)
			}
		}
		if c.Verdict != want {
			t.Errorf("%s: %s (%s), want %s", c.Name, c.Verdict, c.Summary, want)
		}
	}
	if rep.ExitCode(false) != ExitInconclusive || rep.ExitCode(true) != ExitPass {
		t.Errorf("exit %d (allowed: %d), want 3 (0)", rep.ExitCode(false), rep.ExitCode(true))
	}
	if len(rep.Notes) == 0 {
		t.Error("no note says the endpoint is not deterministic")
	}
}

// Memory of an aborted prefill reused while a late writer still writes it
// changes only what is computed into it: a prompt the key sends for the
// first time. The abort check is found with fresh consistency prompts,
// learnt from the other key, where the one repeated prompt (cached after
// the baseline) would never change.
func TestRunFindsReuseAfterAbortBehindThePrefixCache(t *testing.T) {
	rep := probeFake(t, &fakeEndpoint{reuseAfterAbort: true, seen: map[string]bool{}})
	for _, c := range rep.Checks {
		if c.Name == nameConsAborts && c.Verdict != VerdictFinding {
			t.Errorf("%s: %s (%s), want a finding", c.Name, c.Verdict, c.Summary)
		}
	}
	if rep.ExitCode(false) != ExitFinding {
		t.Errorf("exit %d, want 1", rep.ExitCode(false))
	}
}

// Usage two tokens too high is found without the endpoint's tokenizer:
// admission counts the prompt two tokens shorter than the bill.
func TestRunFindsOverBillingWithoutATokenizer(t *testing.T) {
	rep := probeFake(t, &fakeEndpoint{overBill: 2})
	for _, c := range rep.Checks {
		want := VerdictPass
		if c.Name == nameUsage {
			want = VerdictFinding
		}
		if c.Verdict != want {
			t.Errorf("%s: %s (%s), want %s", c.Name, c.Verdict, c.Summary, want)
		}
	}
	if rep.ExitCode(false) != ExitFinding {
		t.Errorf("exit %d, want 1", rep.ExitCode(false))
	}
}

// An endpoint without a context check, whose context is shorter than the
// 200-word calibration prompt, refuses that prompt with a 503: the probe
// halves the prompt as it does on a 400 context_length_exceeded, says so
// in a note, runs, and its admission check names the missing check.
func TestRunFindsAMissingContextCheck(t *testing.T) {
	rep := probeFake(t, &fakeEndpoint{context: 150, noContextCheck: true})
	if rep.ExitCode(false) != ExitFinding {
		t.Errorf("exit %d, want 1", rep.ExitCode(false))
	}
	found := false
	for _, c := range rep.Checks {
		found = found || (c.Name == nameAdmission && c.Verdict == VerdictFinding)
	}
	if !found {
		t.Errorf("%s is not a finding", nameAdmission)
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "calibration prompt was halved") }) {
		t.Errorf("no note says the calibration prompt was halved: %q", rep.Notes)
	}
}
