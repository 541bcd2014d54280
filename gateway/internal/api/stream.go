package api

import (
	"errors"
	"net/http"
	"time"
)

// sseWriter writes server-sent events, one flushed write per event, each
// under a fresh write deadline so a client that stops reading is dropped.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	now     func() time.Time
	started bool
}

// start sends the status line and headers.
func (s *sseWriter) start() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // keep reverse proxies from buffering the stream
	s.w.WriteHeader(http.StatusOK)
	s.started = true
}

// data sends one "data: <json>" event.
func (s *sseWriter) data(v any) error {
	return s.raw(marshal(v))
}

// named sends one event with an event name: "event: <name>", then
// "data: <json>".
func (s *sseWriter) named(name string, v any) error {
	return s.write(name, marshal(v))
}

func (s *sseWriter) raw(payload []byte) error { return s.write("", payload) }

func (s *sseWriter) write(name string, payload []byte) error {
	buf := make([]byte, 0, len(payload)+len(name)+16)
	if name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, name...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, payload...)
	buf = append(buf, "\n\n"...)
	if err := s.rc.SetWriteDeadline(s.now().Add(s.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// stream relays a generation as server-sent events.
//
// Headers are written when the first event arrives, so a failure before it
// is still a plain HTTP error. A failure after it is sent as one
// `data: {"error": {...}}` event and the stream ends without `data: [DONE]`:
// a truncated stream never looks complete. If the client goes away, the
// handler returns and Generation.Close aborts the request.
func (s *server) stream(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, gen Generation, sh shape, n int, includeUsage bool) {
	sse := &sseWriter{w: w, rc: rc, timeout: s.cfg.WriteTimeout, now: s.now}
	t := newTracker(n)
	for {
		ev, done, err := t.next(r.Context(), gen)
		if err != nil {
			if !sse.started {
				s.fail(w, r, err)
			} else if r.Context().Err() == nil {
				e := s.toError(r, err)
				noteError(w, e)
				_ = sse.data(e.envelope())
			}
			return
		}
		if done {
			break
		}
		if !sse.started {
			copyHeaders(w.Header(), ev.Headers)
			sse.start()
			for k := 0; k < n && err == nil; k++ {
				if first := sh.first(k); first != nil {
					err = sse.data(first)
				}
			}
		}
		if c := sh.reasoningDelta(ev.Choice, ev.ReasoningDelta); err == nil && ev.ReasoningDelta != "" && c != nil {
			err = sse.data(c)
		}
		if err == nil && (ev.TextDelta != "" || len(ev.Logprobs) > 0) {
			err = sse.data(sh.delta(ev.Choice, ev.TextDelta, ev.Logprobs))
		}
		for _, d := range ev.ToolCalls {
			if c := sh.toolDelta(ev.Choice, d); err == nil && c != nil {
				err = sse.data(c)
			}
		}
		if err == nil && ev.FinishReason != "" {
			err = sse.data(sh.finish(ev.Choice, ev.FinishReason))
		}
		if err != nil {
			return // the client is gone or stalled
		}
	}
	if includeUsage {
		if sse.data(sh.usage(*t.usage)) != nil {
			return
		}
	}
	_ = sse.raw([]byte("[DONE]"))
}
