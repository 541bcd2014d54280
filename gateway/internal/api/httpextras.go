package api

import (
	"compress/gzip"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// gzipMinBytes is the smallest JSON body compressed: below it the gzip
// header costs more than it saves.
const gzipMinBytes = 512

// corsExposed are the response headers a browser app may read.
const corsExposed = "X-Request-Id, Openai-Processing-Ms, Retry-After, " +
	"X-Ratelimit-Limit-Requests, X-Ratelimit-Remaining-Requests, X-Ratelimit-Reset-Requests, " +
	"X-Ratelimit-Limit-Tokens, X-Ratelimit-Remaining-Tokens, X-Ratelimit-Reset-Tokens"

// cors answers preflight requests and marks responses readable by the
// configured origins (Config.CORSOrigins). Without an allowed Origin it
// adds nothing, so browsers keep refusing cross-origin calls.
func (s *server) cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		h := w.Header()
		if len(s.cfg.CORSOrigins) > 0 {
			h.Add("Vary", "Origin")
		}
		allowed := origin != "" && (slices.Contains(s.cfg.CORSOrigins, "*") || slices.Contains(s.cfg.CORSOrigins, origin))
		if !allowed {
			next.ServeHTTP(w, r)
			return
		}
		if slices.Contains(s.cfg.CORSOrigins, "*") {
			h.Set("Access-Control-Allow-Origin", "*")
		} else {
			h.Set("Access-Control-Allow-Origin", origin)
		}
		h.Set("Access-Control-Expose-Headers", corsExposed)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			}
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// finishHeaders sets openai-processing-ms (time from arrival to the first
// byte of the answer) on every response, and compresses JSON answers with
// gzip when the client accepts it. Event streams are never compressed:
// each event must reach the client when it is written.
func (s *server) finishHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw := &finishWriter{ResponseWriter: w, start: infoFrom(r.Context()).start, now: s.now,
			gzipOK: acceptsGzip(r.Header.Get("Accept-Encoding"))}
		defer fw.close()
		next.ServeHTTP(fw, r)
	})
}

// acceptsGzip reports whether an Accept-Encoding value admits gzip.
func acceptsGzip(v string) bool {
	for part := range strings.SplitSeq(v, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
		if !ok {
			return true
		}
		f, err := strconv.ParseFloat(q, 64)
		return err == nil && f > 0
	}
	return false
}

// finishWriter is the ResponseWriter of finishHeaders.
type finishWriter struct {
	http.ResponseWriter
	start       time.Time
	now         func() time.Time
	gzipOK      bool
	wroteHeader bool
	gz          *gzip.Writer
}

// WriteHeader adds the processing time and decides on compression.
func (w *finishWriter) WriteHeader(code int) {
	if w.wroteHeader || code < 200 {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.wroteHeader = true
	h := w.Header()
	h.Set("Openai-Processing-Ms", strconv.FormatInt(w.now().Sub(w.start).Milliseconds(), 10))
	if w.gzipOK && strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		h.Add("Vary", "Accept-Encoding")
		if n, err := strconv.Atoi(h.Get("Content-Length")); err == nil && n >= gzipMinBytes {
			h.Del("Content-Length")
			h.Set("Content-Encoding", "gzip")
			w.gz = gzip.NewWriter(w.ResponseWriter)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes b, compressed when so decided.
func (w *finishWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.gz != nil {
		return w.gz.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes the compressor, if any, then the connection.
func (w *finishWriter) Flush() {
	if w.gz != nil {
		_ = w.gz.Flush()
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach write deadlines.
func (w *finishWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *finishWriter) close() {
	if w.gz != nil {
		_ = w.gz.Close()
	}
}
