package harness

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// errorScan is a RoundTripper that keeps the body of every error answer
// of the public API (/v1/…), so that a cluster can check, when its test
// ends, that none names a worker, an address or a pool size: those are
// for logs, traces and the admin API only (docs/api.md).
type errorScan struct {
	next http.RoundTripper

	mu     sync.Mutex
	bodies []string
}

// RoundTrip implements http.RoundTripper.
func (s *errorScan) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 || !strings.HasPrefix(req.URL.Path, "/v1/") {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, nil // the caller sees a short body; nothing to scan
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, string(body))
	s.mu.Unlock()
	return resp, nil
}

// checkErrorBodies fails t if an API error body seen by any gateway's
// client names one of the cluster's workers or addresses, or a pool size.
func (c *Cluster) checkErrorBodies(t testing.TB) {
	var internals []string
	for _, w := range c.Workers {
		internals = append(internals, w.ID, w.Config.Worker.Listen, w.Config.Worker.Transfer.Listen)
	}
	internals = append(internals, "KV pool capacity", "free_pages", "quarantined")
	for _, g := range c.Gateways {
		s, ok := g.HTTP.Transport.(*errorScan)
		if !ok {
			continue
		}
		s.mu.Lock()
		for _, b := range s.bodies {
			for _, x := range internals {
				if x != "" && strings.Contains(b, x) {
					t.Errorf("an API error body names %q (internal): %s", x, b)
				}
			}
		}
		s.mu.Unlock()
	}
}
