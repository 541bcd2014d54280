package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warden-ai/warden/internal/obs"
)

// requestInfo is the per-request state the middleware shares with the
// handlers. It is only touched by the goroutine serving the request.
type requestInfo struct {
	id        string
	clientID  string
	start     time.Time
	principal Principal // set by authenticate
}

type infoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(infoKey{}).(*requestInfo)
	return info
}

// newRequestID returns "req_" and 24 hex digits (96 random bits).
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	return "req_" + hex.EncodeToString(b[:])
}

// clientRequestID returns the client's own request ID if it is short,
// printable ASCII; anything else is dropped rather than logged.
func clientRequestID(h http.Header) string {
	for _, name := range []string{"X-Client-Request-Id", "X-Request-Id"} {
		v := h.Get(name)
		if v == "" || len(v) > 128 {
			continue
		}
		ok := true
		for i := 0; i < len(v) && ok; i++ {
			ok = v[i] > ' ' && v[i] < 0x7f
		}
		if ok {
			return v
		}
	}
	return ""
}

// requestID assigns the request ID and sets x-request-id before anything
// else runs, so every response (404, 405, 413, panics) carries it.
func (s *server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := &requestInfo{id: newRequestID(), start: s.now()}
		if s.cfg.TrustClientRequestID {
			info.clientID = clientRequestID(r.Header)
		}
		w.Header().Set("X-Request-Id", info.id)
		// The HTTP server span (when traced) is found by the request ID too.
		trace.SpanFromContext(r.Context()).SetAttributes(obs.AttrRequestID.String(info.id))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), infoKey{}, info)))
	})
}

// observe recovers panics into a 500 envelope and writes one access-log
// line per request. It never logs bodies.
func (s *server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := infoFrom(r.Context())
		sw := &obs.StatusRecorder{ResponseWriter: w}
		defer func() {
			v := recover()
			if v != nil && v != http.ErrAbortHandler {
				s.logger.ErrorContext(r.Context(), "panic while serving request",
					"request_id", info.id, "panic", v, "stack", string(debug.Stack()))
				if sw.Status == 0 {
					writeError(sw, Internal())
				} else {
					// The status line is gone: abort the connection so the
					// client sees a truncated response, never a complete one.
					v = http.ErrAbortHandler
				}
			}
			s.logAccess(r, info, sw)
			if v == http.ErrAbortHandler {
				panic(v)
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

func (s *server) logAccess(r *http.Request, info *requestInfo, sw *obs.StatusRecorder) {
	status := sw.Status
	switch {
	case status == 0 && r.Context().Err() != nil:
		status = 499 // client closed the request before an answer
	case status == 0:
		status = http.StatusOK
	}
	level := slog.LevelInfo
	api := strings.HasPrefix(r.URL.Path, "/v1/")
	if !api {
		level = slog.LevelDebug // probes and scrapes
	}
	attrs := []slog.Attr{
		slog.String("request_id", info.id),
		slog.String("tenant", info.principal.Tenant),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Int64("bytes", sw.Bytes),
		slog.Duration("duration", s.now().Sub(info.start)),
	}
	if sw.ErrorCode != "" {
		attrs = append(attrs, slog.String("error_code", sw.ErrorCode))
	}
	if info.clientID != "" {
		attrs = append(attrs, slog.String("client_request_id", info.clientID))
	}
	s.logger.LogAttrs(r.Context(), level, "http request", attrs...)
	if s.cfg.OnError != nil && sw.ErrorCode != "" && (api || status >= 400) {
		s.cfg.OnError(status, sw.ErrorCode)
	}
}

// limitBodyTo answers 413 for a declared length over the limit and caps the
// body reader for the rest (chunked bodies).
func (s *server) limitBodyTo(limit int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > limit {
				writeError(w, RequestTooLarge(limit))
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			next.ServeHTTP(w, r)
		})
	}
}

// requireJSON answers 415 unless the body is declared JSON. A missing
// Content-Type is accepted: the body is parsed as JSON and errors there.
func requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "" {
			mt, params, err := mime.ParseMediaType(ct)
			cs, hasCharset := params["charset"]
			if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) ||
				(hasCharset && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8")) {
				writeError(w, unsupportedMediaType(ct))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// bearerKey extracts the key from "Authorization: Bearer <key>".
func bearerKey(header string) (string, *Error) {
	if header == "" {
		return "", InvalidAPIKey("Missing API key. Send it in the Authorization header as 'Bearer <key>'.")
	}
	scheme, key, _ := strings.Cut(header, " ")
	key = strings.TrimSpace(key)
	malformed := !strings.EqualFold(scheme, "Bearer") || key == "" || len(key) > 256
	for i := 0; i < len(key) && !malformed; i++ {
		malformed = key[i] <= ' ' || key[i] >= 0x7f
	}
	if malformed {
		return "", InvalidAPIKey("Malformed Authorization header. Send the key as 'Bearer <key>'.")
	}
	return key, nil
}

// authenticate resolves the API key to a Principal for the handlers.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, e := bearerKey(r.Header.Get("Authorization"))
		if e != nil {
			writeError(w, e)
			return
		}
		p, err := s.auth.Authenticate(r.Context(), key)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		infoFrom(r.Context()).principal = p
		next.ServeHTTP(w, r)
	})
}

// fail answers err: an *Error as it is, anything else as a generic 500
// whose cause goes to the log only. Nothing is written once the client has
// gone.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	writeError(w, s.toError(r, err))
}

// toError maps err to the *Error the client sees, logging internal causes.
func (s *server) toError(r *http.Request, err error) *Error {
	var e *Error
	if errors.As(err, &e) && e != nil && e.Status >= 400 && e.Status <= 599 && e.Type != "" {
		return e
	}
	info := infoFrom(r.Context())
	s.logger.ErrorContext(r.Context(), "request failed", "request_id", info.id,
		"tenant", info.principal.Tenant, "err", err)
	return Internal()
}
