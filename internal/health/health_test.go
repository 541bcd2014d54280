package health_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/warden-ai/warden/internal/health"
)

// get returns the status and body of GET base+path.
func get(t *testing.T, base, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestLifecycle: /livez is 200 from Serve on; /readyz and every other
// path are 503 "starting" until the process sets them, then follow what
// it set; Shutdown stops the server with no error.
func TestLifecycle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := health.Serve(ln)
	base := "http://" + ln.Addr().String()
	check := func(path string, wantCode int, wantBody string) {
		t.Helper()
		if code, body := get(t, base, path); code != wantCode || body != wantBody {
			t.Errorf("GET %s: %d %q, want %d %q", path, code, body, wantCode, wantBody)
		}
	}
	check("/livez", 200, "ok\n")
	check("/readyz", 503, "starting\n")
	check("/metrics", 503, "starting\n")

	s.SetReady(func() error { return errors.New("draining") })
	check("/readyz", 503, "draining\n")
	s.SetReady(func() error { return nil })
	check("/readyz", 200, "ok\n")

	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "m 1\n") })
	s.Handle(mux)
	check("/metrics", 200, "m 1\n")
	check("/livez", 200, "ok\n")
	check("/nothing", 404, "404 page not found\n")

	s.Shutdown(context.Background())
	if err := s.Err(); err != nil {
		t.Errorf("Err after Shutdown: %v", err)
	}
	if _, err := http.Get(base + "/livez"); err == nil {
		t.Error("still serving after Shutdown")
	}
}

// TestListenerFailure: a listener that fails ends the server with its
// error (the process treats it as a failed listener).
func TestListenerFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := health.Serve(ln)
	ln.Close()
	<-s.Done()
	if err := s.Err(); err == nil {
		t.Error("Err after the listener closed under the server: nil")
	}
}
