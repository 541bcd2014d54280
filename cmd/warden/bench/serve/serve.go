package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Endpoint is an OpenAI-compatible server to drive.
type Endpoint struct {
	// Name labels the endpoint in the report (default: its URL).
	Name string `json:"name"`
	// URL is the server's base URL, with or without the /v1 suffix.
	URL string `json:"url"`
	// APIKey is sent as a bearer token when set; never reported.
	APIKey string `json:"-"`
	// Model is the request's model.
	Model string `json:"model"`
}

// chatURL is the endpoint's chat completions URL.
func (e Endpoint) chatURL() string {
	base := strings.TrimSuffix(e.URL, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	return base + "/chat/completions"
}

// Options configure a run.
type Options struct {
	// Endpoints are the servers: one, or two to compare.
	Endpoints []Endpoint `json:"endpoints"`
	// Clients is the number of streaming clients per endpoint.
	Clients int `json:"clients"`
	// Duration is each endpoint's measured time, split into rounds of at
	// most Round that alternate between the endpoints.
	Duration time.Duration `json:"duration_ns"`
	Round    time.Duration `json:"round_ns"`
	// PromptWords and OutputTokens are the ranges each request's prompt
	// length (words) and max_tokens are drawn from, uniformly.
	PromptWords  Range `json:"prompt_words"`
	OutputTokens Range `json:"output_tokens"`
	// SharedPrefix is the fraction (0 to 1) of every prompt that is a
	// prefix common to all requests, like a shared system prompt.
	SharedPrefix float64 `json:"shared_prefix"`
	// Temperature of every request.
	Temperature float64 `json:"temperature"`
	// IgnoreEOS asks the server to generate max_tokens whatever the model
	// says (vLLM's and llama-server's ignore_eos; warden refuses it).
	IgnoreEOS bool `json:"ignore_eos"`
	// Seed seeds the prompts; both endpoints get the same sequence.
	Seed uint64 `json:"seed"`
	// Warmup is the number of requests each client sends to each endpoint
	// before the measurement (connections, caches, JIT).
	Warmup int `json:"warmup"`
	// RequestTimeout bounds one request (default 5m).
	RequestTimeout time.Duration `json:"request_timeout_ns"`
	// HTTPClient sends the requests (default: one with a connection per
	// client kept alive).
	HTTPClient *http.Client `json:"-"`
}

func (o *Options) validate() error {
	switch {
	case len(o.Endpoints) < 1 || len(o.Endpoints) > 2:
		return errors.New("serve: one or two endpoints")
	case o.Clients < 1:
		return errors.New("serve: clients must be at least 1")
	case o.Duration <= 0 || o.Round <= 0:
		return errors.New("serve: duration and round must be positive")
	case o.PromptWords.Min < 1 || o.PromptWords.Max < o.PromptWords.Min,
		o.OutputTokens.Min < 1 || o.OutputTokens.Max < o.OutputTokens.Min:
		return errors.New("serve: prompt and output ranges must be positive, MIN ≤ MAX")
	case o.SharedPrefix < 0 || o.SharedPrefix > 1:
		return errors.New("serve: shared prefix must be within [0, 1]")
	}
	for _, e := range o.Endpoints {
		if e.URL == "" || e.Model == "" {
			return errors.New("serve: every endpoint needs a URL and a model")
		}
	}
	return nil
}

// sample is one finished request.
type sample struct {
	err        error
	start, end time.Time
	res        streamResult
}

// Run drives the endpoints and reports their figures. It fails only for
// bad options or a cancelled ctx; failed requests are counted.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.validate(); err != nil {
		return Report{}, err
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Minute
	}
	if o.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = o.Clients
		o.HTTPClient = &http.Client{Transport: tr}
	}
	for i := range o.Endpoints {
		if o.Endpoints[i].Name == "" {
			o.Endpoints[i].Name = o.Endpoints[i].URL
		}
	}
	prefix := sharedPrefix(&o)
	for _, e := range o.Endpoints {
		// Warm-up prompts come from a round no measurement uses.
		runRound(ctx, &o, e, prefix, -1, 0, o.Warmup)
	}
	rounds := max(1, int((o.Duration+o.Round-1)/o.Round))
	slice := o.Duration / time.Duration(rounds)
	acc := make([]accumulator, len(o.Endpoints))
	for r := range rounds {
		for k := range o.Endpoints {
			i := (k + r) % len(o.Endpoints) // rotate who goes first
			samples, start, elapsed := runRound(ctx, &o, o.Endpoints[i], prefix, r, slice, 0)
			acc[i].add(samples, elapsed, start, start.Add(slice))
		}
		if err := ctx.Err(); err != nil {
			return Report{}, err
		}
	}
	rep := Report{Options: o}
	for i, e := range o.Endpoints {
		rep.Results = append(rep.Results, acc[i].result(e))
	}
	return rep, nil
}

// runRound runs o.Clients clients against e: each sends requests until d
// has passed (or, with d = 0, exactly count requests), and the round ends
// when the last one finishes. It returns every request, the round's start
// and its elapsed time.
func runRound(ctx context.Context, o *Options, e Endpoint, prefix []string, round int, d time.Duration, count int) ([]sample, time.Time, time.Duration) {
	// Connections left idle through the other endpoint's round may have
	// been closed by the server meanwhile (llama-server closes idle ones):
	// a POST sent on one fails, and net/http does not retry a POST.
	o.HTTPClient.CloseIdleConnections()
	var mu sync.Mutex
	var all []sample
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for c := range o.Clients {
		wg.Go(func() {
			w := newWorkload(o, prefix, round, c)
			var mine []sample
			for n := 0; ctx.Err() == nil; n++ {
				if (d > 0 && !time.Now().Before(end)) || (d == 0 && n == count) {
					break
				}
				prompt, maxTokens := w.next()
				mine = append(mine, send(ctx, o, e, prompt, maxTokens))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return all, start, time.Since(start)
}

// send runs one streamed chat completion.
func send(ctx context.Context, o *Options, e Endpoint, prompt string, maxTokens int) sample {
	ctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
	defer cancel()
	body := map[string]any{
		"model":          e.Model,
		"messages":       []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens":     maxTokens,
		"temperature":    o.Temperature,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	}
	if o.IgnoreEOS {
		body["ignore_eos"] = true
	}
	b, err := json.Marshal(body)
	s := sample{start: time.Now()}
	if err != nil {
		s.err, s.end = err, time.Now()
		return s
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.chatURL(), bytes.NewReader(b))
	if err != nil {
		s.err, s.end = err, time.Now()
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	// A server may close an idle keep-alive connection just as a request
	// goes out on it (llama-server does, between a client's requests); the
	// request never reached the server, and without this the transport
	// does not resend a POST and the run counts a failure the server never
	// saw. The nil value marks the request replayable and is not sent.
	req.Header["X-Idempotency-Key"] = nil
	if e.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.APIKey)
	}
	s.start = time.Now()
	resp, err := o.HTTPClient.Do(req)
	if err != nil {
		s.err, s.end = &transportError{err}, time.Now()
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		s.err, s.end = &statusError{resp.StatusCode, strings.TrimSpace(string(msg))}, time.Now()
		return s
	}
	s.res, s.err = readStream(resp.Body, time.Now)
	s.end = time.Now()
	var ne net.Error
	if s.err != nil && errors.As(s.err, &ne) {
		s.err = &transportError{s.err}
	}
	return s
}

// transportError is a failure to reach the endpoint or to read its answer.
type transportError struct{ err error }

func (e *transportError) Error() string { return "transport: " + e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// statusError is an answer with a non-2xx status.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

// errorKind names the class of a failed request in the report.
func errorKind(err error) string {
	var se *statusError
	var te *transportError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("http_%d", se.code)
	case errors.As(err, &te):
		return "transport"
	case errors.Is(err, errNoDone):
		return "truncated_stream"
	default:
		return "bad_stream"
	}
}
