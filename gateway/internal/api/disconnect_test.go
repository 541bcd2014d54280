package api

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// await fails the test if ch is not closed within a generous bound; it
// guards against hangs and measures nothing.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// checkNoLeak waits for the goroutine count to return to its baseline.
func checkNoLeak(t *testing.T, baseline int) {
	t.Helper()
	for range 3000 {
		if runtime.NumGoroutine() <= baseline {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
	t.Fatalf("%d goroutines, baseline %d", runtime.NumGoroutine(), baseline)
}

// disconnectRig serves a generation that sends events, then blocks
// until the request context ends.
type disconnectRig struct {
	srv         *httptest.Server
	gens        chan *fakeGen
	handlerDone chan struct{}
}

func newDisconnectRig(events ...Event) *disconnectRig {
	rig := &disconnectRig{gens: make(chan *fakeGen, 1), handlerDone: make(chan struct{})}
	svc := &fakeService{gen: func(*GenerateRequest) (Generation, error) {
		g := newFakeGen(events...)
		g.block = true
		rig.gens <- g
		return g, nil
	}}
	h := newTestHandler(svc)
	rig.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(rig.handlerDone)
		h.ServeHTTP(w, r)
	}))
	return rig
}

func (rig *disconnectRig) send(ctx context.Context, t *testing.T, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", rig.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = authJSON()
	return rig.srv.Client().Do(req)
}

// finish checks the generation was closed exactly once and the handler
// returned, then shuts down and checks for leaks.
func (rig *disconnectRig) finish(t *testing.T, g *fakeGen, baseline int) {
	t.Helper()
	await(t, g.closed, "Generation.Close")
	await(t, rig.handlerDone, "the handler to return")
	if g.closes != 1 {
		t.Errorf("Close called %d times, want 1", g.closes)
	}
	rig.srv.Close()
	checkNoLeak(t, baseline)
}

func TestDisconnectWhileStreaming(t *testing.T) {
	baseline := runtime.NumGoroutine()
	rig := newDisconnectRig(Event{TextDelta: "Hel"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := rig.send(ctx, t, streamBody(""))
	if err != nil {
		t.Fatal(err)
	}
	// Read until the text arrived, so the stream has really started.
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before the first text: %v", err)
		}
		if strings.Contains(line, `"content":"Hel"`) {
			break
		}
	}
	g := <-rig.gens
	await(t, g.blocked, "Next to block")
	cancel()
	_ = resp.Body.Close()
	rig.finish(t, g, baseline)
}

func TestDisconnectWhileWaiting(t *testing.T) {
	baseline := runtime.NumGoroutine()
	rig := newDisconnectRig()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		resp, err := rig.send(ctx, t, goodChat)
		if err == nil {
			_ = resp.Body.Close()
		}
		errc <- err
	}()
	g := <-rig.gens
	await(t, g.blocked, "Next to block")
	cancel()
	if err := <-errc; err == nil {
		t.Error("request succeeded after cancel")
	}
	rig.finish(t, g, baseline)
}
