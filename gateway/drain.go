package gateway

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/warden-ai/warden/gateway/internal/lifecycle"
)

// errDraining is Ready's answer once the gateway is stopping.
var errDraining = errors.New("gateway: shutting down (draining requests in flight)")

// drainState is how a stopping gateway lets its requests finish: a first
// stop (Run's context ends) drains for gateway.drain_timeout, AbortNow
// cuts the drain short.
type drainState struct {
	once  sync.Once
	abort chan struct{} // closed by AbortNow
}

func (d *drainState) ch() chan struct{} {
	d.once.Do(func() { d.abort = make(chan struct{}) })
	return d.abort
}

// AbortNow ends a drain at once: the requests still in flight are aborted
// (cause shutdown) without waiting for gateway.drain_timeout. The CLI
// calls it on a second SIGTERM or Ctrl-C. Calling it before Run's
// context ends makes the coming shutdown abort at once; it is safe to
// call more than once and from any goroutine.
func (g *Gateway) AbortNow() {
	ch := g.drain.ch()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// leave begins a stop: readiness fails at once (load balancers take the
// gateway out of rotation at their next health check) while requests are
// still admitted for gateway.shutdown_delay, every response with
// Connection: close (closeWhenLeaving), so that no client keeps a
// connection the drain will close. AbortNow cuts the delay short.
func (g *Gateway) leave() {
	g.leaving.Store(true)
	delay := g.cfg.Gateway.ShutdownDelay
	if delay <= 0 {
		return
	}
	g.logger.Info("gateway leaving: unready, still serving (Connection: close) until the shutdown delay passes",
		"shutdown_delay", delay)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-g.drain.ch():
		g.logger.Warn("shutdown delay cut short (second signal)")
	}
}

// closeWhenLeaving marks every API response Connection: close once the
// gateway is stopping: HTTP/1.1 clients then open a new connection (to
// another gateway) for their next request instead of reusing this one,
// and Go's HTTP/2 server turns the header into a GOAWAY.
func (g *Gateway) closeWhenLeaving(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.leaving.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// stopping reports whether the gateway began shutting down.
func (g *Gateway) stopping() bool {
	g.lifeMu.RLock()
	defer g.lifeMu.RUnlock()
	return g.closing
}

// drainRequests turns the gateway unready and closed to new requests
// (they get 503 shutting_down with retry-after), then waits until every
// request in flight finished, the drain timeout passed or AbortNow was
// called. It returns how many requests were still running.
func (g *Gateway) drainRequests() int {
	g.lifeMu.Lock()
	g.closing = true
	g.lifeMu.Unlock()
	timeout := g.cfg.Gateway.DrainTimeout
	n := g.table.InFlight()
	if n == 0 || timeout <= 0 {
		return n
	}
	g.logger.Info("gateway draining: unready, new requests get 503; waiting for the requests in flight",
		"in_flight", n, "drain_timeout", timeout)
	drained := make(chan struct{})
	go func() { g.running.Wait(); close(drained) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	start := time.Now()
	select {
	case <-drained:
		g.logger.Info("gateway drained: every request in flight finished", "duration", time.Since(start))
		return 0
	case <-timer.C:
		n = g.table.InFlight()
		g.logger.Warn("drain timeout passed: aborting the requests still in flight", "in_flight", n, "drain_timeout", timeout)
	case <-g.drain.ch():
		n = g.table.InFlight()
		g.logger.Warn("drain cut short (second signal): aborting the requests still in flight", "in_flight", n)
	}
	return n
}

// abortInFlight aborts every request still in flight (cause shutdown:
// the client gets 503 shutting_down, or the stream's error event) and
// waits for their drivers until ctx ends.
func (g *Gateway) abortInFlight(ctx context.Context) {
	if n := g.table.AbortAll(lifecycle.CauseShutdown); n > 0 {
		g.logger.Info("aborting requests in flight", "count", n)
	}
	drivers := make(chan struct{})
	go func() { g.running.Wait(); close(drivers) }()
	select {
	case <-drivers:
	case <-ctx.Done():
	}
}

// logServerErrors sends the HTTP servers' own errors (TLS handshakes,
// bad requests the server answers itself) through the gateway's slog
// logger instead of the standard log package.
func (g *Gateway) logServerErrors(srvs ...*http.Server) {
	l := log.New(serverLogWriter{g.logger}, "", 0)
	for _, srv := range srvs {
		if srv != nil {
			srv.ErrorLog = l
		}
	}
}

// serverLogWriter turns net/http's log lines into structured records.
type serverLogWriter struct{ logger *slog.Logger }

// tlsHandshakePrefix starts net/http's line for a failed TLS handshake.
const tlsHandshakePrefix = "http: TLS handshake error from "

// Write implements io.Writer for log.Logger: one call per line.
func (w serverLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(line, tlsHandshakePrefix); ok {
		remote, err, _ := strings.Cut(rest, ": ")
		// Scanners and clients that distrust the certificate cause these:
		// worth seeing, not worth a warning each.
		w.logger.Info("TLS handshake failed", "component", "http_server", "remote", remote, "err", err)
		return len(p), nil
	}
	w.logger.Warn(strings.TrimPrefix(line, "http: "), "component", "http_server")
	return len(p), nil
}
