package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// ErrStarting is the readiness of a process that has not yet said how it
// is ready (SetReady).
var ErrStarting = errors.New("starting")

// Server is a probe listener being served. Its methods are safe for
// concurrent use.
type Server struct {
	srv   *http.Server
	ready atomic.Pointer[func() error]
	next  atomic.Pointer[http.Handler]
	done  chan struct{}
	err   error // set before done closes
}

// Serve serves ln in a goroutine until Shutdown or Close.
func Serve(ln net.Listener) *Server {
	s := &Server{done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.readiness(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h := s.next.Load()
		if h == nil {
			http.Error(w, ErrStarting.Error(), http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, r)
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.err = err
		close(s.done)
	}()
	return s
}

func (s *Server) readiness() error {
	f := s.ready.Load()
	if f == nil {
		return ErrStarting
	}
	return (*f)()
}

// SetReady makes ready the answer of /readyz: nil is 200, an error 503
// with its text.
func (s *Server) SetReady(ready func() error) { s.ready.Store(&ready) }

// Handle serves every path but /livez and /readyz with h from now on.
func (s *Server) Handle(h http.Handler) { s.next.Store(&h) }

// Done is closed when the server has stopped serving.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is why the server stopped: nil after Shutdown or Close, the
// listener's error otherwise. Call it once Done is closed.
func (s *Server) Err() error {
	<-s.done
	return s.err
}

// Shutdown stops the server gracefully, bounded by ctx, then closes what
// is left.
func (s *Server) Shutdown(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}

// Close stops the server at once.
func (s *Server) Close() {
	_ = s.srv.Close()
	<-s.done
}
