package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Run serves until ctx is done or a listener fails, then shuts down: it
// turns unready at once but keeps serving for gateway.shutdown_delay
// (every response with Connection: close), then answers new requests
// 503 (retry-after), lets those in
// flight finish for gateway.drain_timeout (AbortNow cuts it short),
// aborts the rest (every worker involved is told), stops the servers and
// closes the worker connections and the tenant store. It returns nil
// after ctx ended. Run may be called once.
func (g *Gateway) Run(ctx context.Context) error {
	err := errors.New("gateway: Run called twice")
	g.runOnce.Do(func() { err = g.run(ctx) })
	return err
}

func (g *Gateway) run(ctx context.Context) error {
	defer g.release()
	regCtx, stopSweeper := context.WithCancel(context.Background())
	defer stopSweeper()
	go g.reg.Run(regCtx)
	var housekeeping sync.WaitGroup
	housekeeping.Go(func() { g.journal.Run(regCtx) })
	if g.fleet != nil {
		// Stopped before the store closes: it withdraws this replica's
		// counts on the way out.
		housekeeping.Go(func() { g.fleet.Run(regCtx) })
	}
	defer func() { stopSweeper(); housekeeping.Wait() }()

	failed := make(chan error, 4)
	var serving sync.WaitGroup
	serveHTTP := func(name string, srv *http.Server, ln net.Listener) {
		if srv == nil {
			return
		}
		serving.Go(func() {
			var err error
			if srv.TLSConfig != nil {
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				failed <- fmt.Errorf("gateway: %s server: %w", name, err)
			}
		})
	}
	g.logServerErrors(g.apiSrv, g.adminSrv)
	serveHTTP("API", g.apiSrv, g.apiLn)
	serveHTTP("admin", g.adminSrv, g.adminLn)
	if g.probe != nil {
		serving.Go(func() {
			if err := g.probe.Err(); err != nil {
				failed <- fmt.Errorf("gateway: metrics server: %w", err)
			}
		})
	}
	serving.Go(func() {
		if err := g.grpcSrv.Serve(g.registryLn); err != nil {
			failed <- fmt.Errorf("gateway: registry server: %w", err)
		}
	})
	attrs := []any{"api", g.apiLn.Addr().String(), "registry", g.registryLn.Addr().String(), "tls", g.apiSrv.TLSConfig != nil}
	if g.adminLn != nil {
		attrs = append(attrs, "admin", g.adminLn.Addr().String())
	}
	g.logger.Info("gateway serving", attrs...)

	var runErr error
	select {
	case <-ctx.Done():
		g.logger.Info("gateway shutting down")
	case runErr = <-failed:
		g.logger.Error("gateway stopping", "err", runErr)
	}
	if runErr != nil {
		g.AbortNow() // a failed listener: no delay, no drain
	}
	g.leave()
	g.shutdown()
	serving.Wait()
	return runErr
}

// shutdown drains the requests in flight (drainRequests), aborts the rest
// everywhere and stops the servers.
func (g *Gateway) shutdown() {
	g.drainRequests()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	g.abortInFlight(ctx)
	for _, srv := range []*http.Server{g.apiSrv, g.adminSrv} {
		if srv != nil {
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
		}
	}
	if g.probe != nil {
		g.probe.Shutdown(ctx)
	}
	stopped := make(chan struct{})
	go func() { g.grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		g.grpcSrv.Stop()
	}
	if err := g.table.Wait(ctx); err != nil {
		g.logger.Warn("shutdown: abort fan-out still running", "err", err)
	}
}

// begin counts a new request driver, unless the gateway is shutting down.
func (g *Gateway) begin() bool {
	g.lifeMu.RLock()
	defer g.lifeMu.RUnlock()
	if g.closing {
		return false
	}
	g.running.Add(1)
	return true
}

// release frees what New opened.
func (g *Gateway) release() {
	if g.probe != nil {
		g.probe.Close()
	}
	for _, ln := range []net.Listener{g.apiLn, g.adminLn, g.registryLn, g.metricsLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
	if g.reg != nil {
		g.reg.Close()
	}
	g.flushJournal()
	if err := g.closeStore(); err != nil {
		g.logger.Warn("closing the tenant store", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.stopTracing(ctx); err != nil {
		g.logger.Warn("flushing traces", "err", err)
	}
}

// flushJournal gives the store a last chance to take the releases that
// failed during an outage before it is closed; what it cannot take returns
// at the leases' expiry.
func (g *Gateway) flushJournal() {
	if g.journal == nil || g.journal.Len() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseReleaseTimeout)
	defer cancel()
	if !g.journal.Flush(ctx) {
		g.logger.Warn("shutdown: tenant store unavailable; lease releases lost, their slots return at the leases' expiry",
			"count", g.journal.Len())
	}
}

// Close frees what New opened, for a Gateway that will not Run (Run frees
// it itself; Close is then a no-op).
func (g *Gateway) Close() error {
	g.runOnce.Do(g.release)
	return nil
}
