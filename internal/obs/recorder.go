package obs

import "net/http"

// StatusRecorder wraps an http.ResponseWriter and records the status and
// body size of the response, for access logs and audit records.
type StatusRecorder struct {
	http.ResponseWriter
	// Status is the response's final status code; 0 until the handler
	// wrote a header or a byte (informational 1xx headers do not count).
	Status int
	// Bytes is how many body bytes were written.
	Bytes int64
	// ErrorCode is the code (or, without one, the type) of the error the
	// response carried, in its body or as a stream's last event; empty
	// for none. The handler that wrote the error sets it.
	ErrorCode string
}

// WriteHeader records the first final status code and passes it on.
func (w *StatusRecorder) WriteHeader(code int) {
	if w.Status == 0 && code >= 200 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write counts b, recording 200 when no status was written before it, as
// net/http does.
func (w *StatusRecorder) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.Bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and write deadlines.
func (w *StatusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
