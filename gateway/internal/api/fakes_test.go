package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Keys known to fakeAuth.
const (
	goodKey    = "sk-good"
	revokedKey = "sk-revoked"
	brokenKey  = "sk-store-down" // the key store fails
)

type fakeAuth struct{}

var _ Authenticator = fakeAuth{}

func (fakeAuth) Authenticate(_ context.Context, key string) (Principal, error) {
	switch key {
	case goodKey:
		return Principal{Tenant: "acme", KeyID: "key_1"}, nil
	case revokedKey:
		return Principal{}, InvalidAPIKey("This API key has been revoked.")
	case brokenKey:
		return Principal{}, errors.New("redis: connection refused at 10.0.0.7:6379")
	}
	return Principal{}, InvalidAPIKey("Incorrect API key provided.")
}

// The fake's standard output: text split so that a multi-byte character
// and an emoji arrive whole in single deltas.
var (
	fakeDeltas = []string{"Hel", "lo, wörld", " 🌍", "!"}
	fakeText   = strings.Join(fakeDeltas, "")
	fakeUsage  = Usage{PromptTokens: 7, CompletionTokens: 4}
)

// standardEvents is the fake's normal generation.
func standardEvents() []Event {
	evs := make([]Event, 0, len(fakeDeltas)+1)
	for i, d := range fakeDeltas {
		ev := Event{TextDelta: d}
		if i == 0 {
			ev.Headers = http.Header{"X-Ratelimit-Remaining-Requests": {"41"}}
		}
		evs = append(evs, ev)
	}
	u := fakeUsage
	return append(evs, Event{FinishReason: "stop", Usage: &u})
}

// fakeService serves model "tiny" with standardEvents unless gen is set.
type fakeService struct {
	gen func(req *GenerateRequest) (Generation, error)

	mu   sync.Mutex
	last *GenerateRequest
	p    Principal
}

var _ Service = (*fakeService)(nil)

func (s *fakeService) Models(_ context.Context, _ Principal) ([]Model, error) {
	return []Model{{ID: "tiny", Created: 1700000000, OwnedBy: "warden", ContextLength: 2048, ConfiguredContextLength: 4096}}, nil
}

func (s *fakeService) Generate(_ context.Context, p Principal, req *GenerateRequest) (Generation, error) {
	s.mu.Lock()
	s.last = req
	s.p = p
	s.mu.Unlock()
	if s.gen != nil {
		return s.gen(req)
	}
	if req.Model == "panic" {
		panic("fake service exploded")
	}
	if req.Model != "tiny" {
		return nil, ModelNotFound(req.Model)
	}
	return newFakeGen(standardEvents()...), nil
}

func (s *fakeService) lastRequest(t *testing.T) *GenerateRequest {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		t.Fatal("service saw no request")
	}
	return s.last
}

// fakeGen replays events, then ends with EOF, or with err, or by blocking
// until the request context is done (block).
type fakeGen struct {
	events []Event
	err    error
	block  bool
	// panicAfter, if > 0, panics on the call after that many events.
	panicAfter int

	served    int
	blocked   chan struct{} // closed when Next starts blocking
	closed    chan struct{} // closed by Close
	closeOnce sync.Once
	closes    int
}

var _ Generation = (*fakeGen)(nil)

func newFakeGen(events ...Event) *fakeGen {
	return &fakeGen{events: events, blocked: make(chan struct{}), closed: make(chan struct{})}
}

func (g *fakeGen) Next(ctx context.Context) (Event, error) {
	if g.panicAfter > 0 && g.served == g.panicAfter {
		panic("fake generation exploded")
	}
	if g.served < len(g.events) {
		g.served++
		return g.events[g.served-1], nil
	}
	if g.block {
		close(g.blocked)
		<-ctx.Done()
		return Event{}, ctx.Err()
	}
	if g.err != nil {
		return Event{}, g.err
	}
	return Event{}, io.EOF
}

func (g *fakeGen) Close() {
	g.closes++
	g.closeOnce.Do(func() { close(g.closed) })
}

// newTestHandler returns the handler with fakes and a small body limit.
func newTestHandler(svc *fakeService) http.Handler {
	return NewHandler(Config{MaxBodyBytes: 64 << 10}, fakeAuth{}, svc, nil)
}

func newRequest(method, path, body string) *http.Request {
	return httptest.NewRequest(method, path, strings.NewReader(body))
}

func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// do serves one request in process.
func do(h http.Handler, method, path, body string, header http.Header) *httptest.ResponseRecorder {
	req := newRequest(method, path, body)
	for k, vs := range header {
		req.Header[k] = vs
	}
	return serve(h, req)
}

// authJSON is the header set of a well-formed authenticated request.
func authJSON() http.Header {
	return http.Header{"Authorization": {"Bearer " + goodKey}, "Content-Type": {"application/json"}}
}
