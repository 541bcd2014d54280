package probezoo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Leak names one proxy of the zoo.
type Leak string

// The zoo.
const (
	// ExactCache caches answers keyed on the model, the messages and
	// whether the answer streams — not on the API key — and replays the
	// stored bytes to whoever asks the same again.
	ExactCache Leak = "exact-prompt-cache"
	// Prefix64Cache is the same cache keyed on the first 64 characters of
	// the prompt (the messages' text).
	Prefix64Cache Leak = "prefix64-cache"
	// Replay answers 30% of requests with an earlier answer of another
	// API key (a response buffer handed to the wrong connection).
	Replay Leak = "replay-30pct"
	// UsageOffBy2 reports usage.prompt_tokens (and total_tokens) two too
	// high: a billing layer that adds a template's tokens twice.
	UsageOffBy2 Leak = "usage-off-by-2"
	// TimingPrefixCache answers correctly but delays each answer by the
	// prefill time of the prompt's part no one sent before (64-character
	// blocks, shared by every key): a prefix cache in front of a slower
	// model, visible only in the time to first token.
	TimingPrefixCache Leak = "timing-prefix-cache"
	// StreamMux multiplexes every upstream stream onto one queue per model
	// and hands each client the next events from it until it has had one
	// [DONE]: alone a stream is right, concurrent streams get each other's
	// chunks.
	StreamMux Leak = "stream-mux"
)

// All is every proxy of the zoo.
var All = []Leak{ExactCache, Prefix64Cache, Replay, UsageOffBy2, TimingPrefixCache, StreamMux}

// New returns the proxy leak in front of upstream (the API root, without
// /v1), reached with client.
func New(leak Leak, upstream *url.URL, client *http.Client) http.Handler {
	p := &proxy{upstream: upstream, client: client}
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport = client.Transport
	rp.FlushInterval = -1
	p.pass = rp
	switch leak {
	case ExactCache:
		c := &responseCache{proxy: p, entries: map[[32]byte]stored{}, key: func(b body) string { return b.messagesText() }}
		return c
	case Prefix64Cache:
		c := &responseCache{proxy: p, entries: map[[32]byte]stored{}, key: func(b body) string {
			t := b.messagesText()
			return t[:min(64, len(t))]
		}}
		return c
	case Replay:
		return &replay{proxy: p, rng: rand.New(rand.NewPCG(1, 2)), byKey: map[string][]stored{}}
	case UsageOffBy2:
		return &usageOff{proxy: p}
	case TimingPrefixCache:
		return &timingCache{proxy: p, seen: map[[32]byte]bool{}}
	case StreamMux:
		return &mux{proxy: p, queues: map[string]chan []byte{}}
	}
	panic("probezoo: unknown leak " + string(leak))
}

// proxy forwards requests to upstream.
type proxy struct {
	upstream *url.URL
	client   *http.Client
	pass     *httputil.ReverseProxy
}

// body is the part of a request body the proxies read.
type body struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Content any `json:"content"`
	} `json:"messages"`
	Input any `json:"input"`
}

// messagesText is the request's prompt: its messages' text, or the
// Responses API input.
func (b body) messagesText() string {
	var sb strings.Builder
	for _, m := range b.Messages {
		if s, ok := m.Content.(string); ok {
			sb.WriteString(s)
			sb.WriteByte('\n')
		}
	}
	if s, ok := b.Input.(string); ok {
		sb.WriteString(s)
	}
	return sb.String()
}

// readBody reads r's body and leaves a copy in its place.
func readBody(r *http.Request) ([]byte, body) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	r.Body = io.NopCloser(bytes.NewReader(raw))
	var b body
	_ = json.Unmarshal(raw, &b)
	return raw, b
}

// forward sends r upstream with raw as its body.
func (p *proxy) forward(r *http.Request, raw []byte) (*http.Response, error) {
	u := *p.upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + r.URL.Path
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	// The proxies read what comes back: let the transport negotiate (and
	// undo) compression itself.
	req.Header.Del("Accept-Encoding")
	return p.client.Do(req)
}

// stored is an upstream answer as it came.
type stored struct {
	status      int
	contentType string
	body        []byte
	stream      bool
}

func (s stored) write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", s.contentType)
	w.WriteHeader(s.status)
	_, _ = w.Write(s.body)
}

// relay copies an upstream answer to w as it arrives (flushing), and
// returns it whole.
func relay(w http.ResponseWriter, resp *http.Response, stream bool) stored {
	defer resp.Body.Close()
	s := stored{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), stream: stream}
	w.Header().Set("Content-Type", s.contentType)
	w.WriteHeader(resp.StatusCode)
	var buf bytes.Buffer
	chunk := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(chunk)
		if n > 0 {
			buf.Write(chunk[:n])
			_, _ = w.Write(chunk[:n])
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		if err != nil {
			break
		}
	}
	s.body = buf.Bytes()
	return s
}

// complete: a 200 answer that ended (a stream with [DONE]).
func (s stored) complete() bool {
	return s.status == http.StatusOK && (!s.stream || bytes.Contains(s.body, []byte("data: [DONE]")))
}

// isGeneration: a POST of a chat completion, completion or response.
func isGeneration(r *http.Request) bool {
	return r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/chat/completions") ||
		strings.HasSuffix(r.URL.Path, "/completions") || strings.HasSuffix(r.URL.Path, "/responses"))
}

// responseCache caches complete answers under key(body), the model and
// the stream flag — shared by every API key.
type responseCache struct {
	*proxy
	key     func(body) string
	mu      sync.Mutex
	entries map[[32]byte]stored
}

func (c *responseCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isGeneration(r) {
		c.pass.ServeHTTP(w, r)
		return
	}
	raw, b := readBody(r)
	k := sha256.Sum256([]byte(r.URL.Path + "\x00" + b.Model + "\x00" + boolString(b.Stream) + "\x00" + c.key(b)))
	c.mu.Lock()
	hit, ok := c.entries[k]
	c.mu.Unlock()
	if ok {
		hit.write(w)
		return
	}
	resp, err := c.forward(r, raw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if s := relay(w, resp, b.Stream); s.complete() {
		c.mu.Lock()
		c.entries[k] = s
		c.mu.Unlock()
	}
}

func boolString(b bool) string {
	if b {
		return "stream"
	}
	return "plain"
}

// replay keeps each API key's complete answers and, for 30% of requests,
// answers with one of another key's instead of asking upstream.
type replay struct {
	*proxy
	mu    sync.Mutex
	rng   *rand.Rand
	byKey map[string][]stored
}

func (p *replay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isGeneration(r) {
		p.pass.ServeHTTP(w, r)
		return
	}
	raw, b := readBody(r)
	key := r.Header.Get("Authorization")
	p.mu.Lock()
	var other []stored
	for k, answers := range p.byKey {
		if k == key {
			continue
		}
		for _, a := range answers {
			if a.stream == b.Stream {
				other = append(other, a)
			}
		}
	}
	var pick *stored
	if len(other) > 0 && p.rng.Float64() < 0.3 {
		pick = &other[p.rng.IntN(len(other))]
	}
	p.mu.Unlock()
	if pick != nil {
		pick.write(w)
		return
	}
	resp, err := p.forward(r, raw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if s := relay(w, resp, b.Stream); s.complete() {
		p.mu.Lock()
		p.byKey[key] = append(p.byKey[key], s)
		p.mu.Unlock()
	}
}

// usageOff adds two to prompt_tokens and total_tokens of every usage
// object it forwards.
type usageOff struct{ *proxy }

func (p *usageOff) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isGeneration(r) {
		p.pass.ServeHTTP(w, r)
		return
	}
	raw, b := readBody(r)
	resp, err := p.forward(r, raw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	if resp.StatusCode != http.StatusOK || !b.Stream {
		all, _ := io.ReadAll(resp.Body)
		_, _ = w.Write(bumpUsage(all))
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && !bytes.Equal(data, []byte("[DONE]")) {
			line = append([]byte("data: "), bumpUsage(data)...)
		}
		_, _ = w.Write(append(line, '\n'))
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// bumpUsage returns the JSON object doc with its usage's prompt_tokens
// (or input_tokens) and total_tokens two higher; anything else unchanged.
func bumpUsage(doc []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(doc, &m) != nil || len(m["usage"]) == 0 || string(m["usage"]) == "null" {
		return doc
	}
	var u map[string]any
	if json.Unmarshal(m["usage"], &u) != nil {
		return doc
	}
	for _, f := range []string{"prompt_tokens", "input_tokens", "total_tokens"} {
		if v, ok := u[f].(float64); ok {
			u[f] = v + 2
		}
	}
	m["usage"], _ = json.Marshal(u)
	out, err := json.Marshal(m)
	if err != nil {
		return doc
	}
	return out
}

// timingCache: blocks of timingBlock characters of the prompt, chained by
// hash; a block anyone sent before is "cached", every other one costs the
// prefill time of its tokens before the answer starts.
type timingCache struct {
	*proxy
	mu   sync.Mutex
	seen map[[32]byte]bool
}

// The timing cache's model: 64-character blocks, 4 characters a token,
// prefill at 1,000 tokens a second (a large model on a shared GPU).
const (
	timingBlock   = 64
	charsPerToken = 4
	prefillRate   = 1000 // tokens per second
)

func (p *timingCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isGeneration(r) {
		p.pass.ServeHTTP(w, r)
		return
	}
	raw, b := readBody(r)
	text := b.messagesText()
	uncached := 0
	h := sha256.Sum256([]byte(b.Model))
	p.mu.Lock()
	for i := 0; i < len(text); i += timingBlock {
		h = sha256.Sum256(append(h[:], text[i:min(i+timingBlock, len(text))]...))
		if !p.seen[h] {
			p.seen[h] = true
			uncached += min(timingBlock, len(text)-i)
		}
	}
	p.mu.Unlock()
	delay := time.Duration(float64(uncached) / charsPerToken / prefillRate * float64(time.Second))
	select {
	case <-time.After(delay):
	case <-r.Context().Done():
		return
	}
	resp, err := p.forward(r, raw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	relay(w, resp, b.Stream)
}

// mux multiplexes streams: every upstream stream's events go onto its
// model's queue; each client is handed events from the queue until it
// has had one [DONE] (or the queue is idle for muxIdle).
type mux struct {
	*proxy
	mu     sync.Mutex
	queues map[string]chan []byte
}

// muxIdle ends a client's stream when its queue has been quiet this long.
const muxIdle = 2 * time.Second

func (m *mux) queue(model string) chan []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queues[model]
	if q == nil {
		q = make(chan []byte, 4096)
		m.queues[model] = q
	}
	return q
}

func (m *mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isGeneration(r) {
		m.pass.ServeHTTP(w, r)
		return
	}
	raw, b := readBody(r)
	if !b.Stream {
		m.pass.ServeHTTP(w, r)
		return
	}
	resp, err := m.forward(r, raw)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if resp.StatusCode != http.StatusOK {
		relay(w, resp, true)
		return
	}
	q := m.queue(b.Model)
	// The upstream reader pushes onto the shared queue, whoever reads it.
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			if line := sc.Bytes(); bytes.HasPrefix(line, []byte("data: ")) {
				select {
				case q <- append([]byte(nil), line...):
				default: // full: dropped
				}
			}
		}
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	idle := time.NewTimer(muxIdle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle.C:
			return
		case line := <-q:
			_, _ = w.Write(append(line, '\n', '\n'))
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			if bytes.Equal(line, []byte("data: [DONE]")) {
				return
			}
			idle.Reset(muxIdle)
		}
	}
}
