package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/controlpb"
)

// TestProbeListener: the metrics listener (the chart's probe port)
// answers /livez 200 whatever the readiness, /readyz as the gateway's
// readiness (503 while starting, 200 once its workers registered) and
// serves /metrics.
func TestProbeListener(t *testing.T) {
	cfg := testConfig()
	cfg.Observability.Metrics.Listen = "127.0.0.1:0"
	tg := startGateway(t, cfg)
	base := "http://" + tg.metricsLn.Addr().String()
	get := func(path string) (int, string) {
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
	if code, body := get("/livez"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/livez while starting: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Errorf("/readyz while starting: %d %q, want 503 starting", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "warden_") {
		t.Errorf("/metrics: %d %q", code, body)
	}
	fab := &fabric{}
	newFake(tg, controlpb.Role_ROLE_PREFILL, 256, fab).start()
	newFake(tg, controlpb.Role_ROLE_DECODE, 256, fab).start()
	waitFor(t, "/readyz 200 on the probe listener once both roles registered", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
	if code, _ := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez once ready: %d", code)
	}
}

// TestStartingGatewayNotReady: a gateway whose workers have not all
// registered is unready and answers API requests 503 not_ready with
// retry-after (not model_unavailable: the model is not gone, this
// gateway is starting), with one role registered as with none. Once a
// prefill and a decode worker registered (tokenizer loaded), /readyz is
// 200 and requests are served with the worker's content. A gateway that
// was ready and then lost every worker says model_unavailable.
func TestStartingGatewayNotReady(t *testing.T) {
	t.Parallel() // waits on timers, failovers and heartbeats: it overlaps with the others
	tg := startGateway(t, testConfig())
	starting := func(when string) {
		t.Helper()
		if code, body := tg.get("/readyz"); code != http.StatusServiceUnavailable {
			t.Fatalf("%s: /readyz %d %s, want 503", when, code, body)
		}
		code, h, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
		e := decodeEnvelope(t, body)
		if code != http.StatusServiceUnavailable || str(e.Error.Code) != "not_ready" || str(e.Error.Param) != "model" ||
			h.Get("Retry-After") != "1" || !strings.Contains(e.Error.Message, "starting") {
			t.Fatalf("%s: request answered %d retry-after %q %s, want 503 not_ready with retry-after 1", when, code, h.Get("Retry-After"), body)
		}
	}
	starting("no worker registered")

	fab := &fabric{}
	prefill := newFake(tg, controlpb.Role_ROLE_PREFILL, 256, fab).start()
	starting("only a prefill worker registered")
	decode := newFake(tg, controlpb.Role_ROLE_DECODE, 256, fab).start()
	waitFor(t, "/readyz 200 once both roles registered", func() bool { code, _ := tg.get("/readyz"); return code == http.StatusOK })
	resp, err := tg.api().chat(context.Background(), chatParams(50))
	if err != nil || len(resp.Choices) != 1 || resp.Choices[0].Message.Content != decode.reply {
		t.Fatalf("served request: %+v, %v; want %q", resp, err, decode.reply)
	}

	// Started, then every worker lost: the model is gone, not starting.
	prefill.kill()
	decode.kill()
	waitFor(t, "/readyz 503 once no model is served", func() bool {
		code, _ := tg.get("/readyz")
		return code == http.StatusServiceUnavailable
	})
	code, h, body := tg.post("/v1/completions", map[string]any{"model": "tiny", "prompt": "hi", "max_tokens": 5})
	if e := decodeEnvelope(t, body); code != http.StatusServiceUnavailable || str(e.Error.Code) != "model_unavailable" || h.Get("Retry-After") != "1" {
		t.Fatalf("after losing every worker: %d %s, want 503 model_unavailable", code, body)
	}
}

// TestShutdownDelayKeepsServing: on SIGTERM a gateway with a shutdown
// delay turns unready at once but keeps serving: a new request is served
// with its whole content and Connection: close (HTTP/1.1), an HTTP/2
// client is sent away from its connection (GOAWAY), and a stream in
// flight at SIGTERM completes. When the delay has passed, new requests
// get 503 shutting_down, and a stream still in flight is drained to its
// end before Run returns.
func TestShutdownDelayKeepsServing(t *testing.T) {
	cfg := testConfig()
	cfg.Gateway.ShutdownDelay = 10 * time.Minute // the subtests end it with AbortNow or a short delay
	cfg.Gateway.DrainTimeout = 10 * time.Minute  // only the requests' end stops the drain
	for _, phase := range []string{"delay", "drain"} {
		t.Run(phase, func(t *testing.T) {
			if phase == "drain" {
				cfg.Gateway.ShutdownDelay = time.Millisecond
			}
			tg := startGateway(t, cfg)
			t.Cleanup(tg.AbortNow) // a failed test does not wait out the delay
			w := newFake(tg, controlpb.Role_ROLE_BOTH, 256, nil).start()
			waitFor(t, "the gateway to be ready", func() bool { code, _ := tg.get("/readyz"); return code == http.StatusOK })
			h1 := httpsClient(t)
			h1.Transport.(*http.Transport).ForceAttemptHTTP2 = false

			// The first request (the stream) is held once decode is
			// ready, until release is closed.
			release := make(chan struct{})
			var first atomic.Bool
			hold := func(ctx context.Context) {
				if first.CompareAndSwap(false, true) {
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
			}
			tg.hooks.afterReady.Store(&hold)
			stream := tg.api().chatStream(context.Background(), chatParams(50))
			if !stream.Next() {
				t.Fatalf("no first chunk: %v", stream.Err())
			}
			var text strings.Builder
			collect := func(c chatChunk) {
				if len(c.Choices) > 0 {
					text.WriteString(c.Choices[0].Delta.Content)
				}
			}
			collect(stream.Current())
			s := tg.only()
			if _, _, closing, _ := postWith(t, h1, tg, params50Body()); closing {
				t.Fatal("Connection: close before SIGTERM")
			}
			tg.stop() // what SIGTERM does
			waitFor(t, "readiness to turn false", func() bool { code, _ := tg.get("/readyz"); return code == http.StatusServiceUnavailable })

			if phase == "delay" {
				code, _, closing, body := postWith(t, h1, tg, params50Body())
				if code != http.StatusOK || !closing || chatContent(t, body) != w.reply {
					t.Fatalf("during the delay (HTTP/1.1): %d Connection: close %v %s; want 200 with %q and Connection: close", code, closing, body, w.reply)
				}
				// HTTP/2 has no Connection header: the server sends a GOAWAY,
				// and the client's next request takes a new connection.
				waitFor(t, "the HTTP/2 client to leave its connection", func() bool {
					reused, proto := true, ""
					trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
					req := chatRequest(t, tg, params50Body()).WithContext(httptrace.WithClientTrace(context.Background(), trace))
					resp, err := tg.http.Do(req)
					if err != nil {
						t.Fatalf("HTTP/2 request during the delay: %v", err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					proto = resp.Proto
					if resp.StatusCode != http.StatusOK || proto != "HTTP/2.0" || chatContent(t, body) != w.reply {
						t.Fatalf("during the delay (HTTP/2): %s %d %s", proto, resp.StatusCode, body)
					}
					return !reused
				})
				close(release)
				for stream.Next() {
					collect(stream.Current())
				}
				if err := stream.Err(); err != nil || text.String() != w.reply || tg.finished(s.ID).State != lifecycle.Completed {
					t.Fatalf("stream in flight at SIGTERM: %q, %v; want %q completed", text.String(), err, w.reply)
				}
				tg.AbortNow() // end the delay
			} else {
				// The delay passed: the drain refuses new requests and lets
				// the stream finish.
				waitFor(t, "the drain to refuse new requests", func() bool {
					code, h, closing, body := postWith(t, h1, tg, params50Body())
					if code == http.StatusOK {
						return false
					}
					if e := decodeEnvelope(t, body); code != http.StatusServiceUnavailable || str(e.Error.Code) != "shutting_down" ||
						h.Get("Retry-After") == "" || !closing {
						t.Fatalf("during the drain: %d Connection: close %v %s; want 503 shutting_down with Connection: close", code, closing, body)
					}
					return true
				})
				if st, ok := tg.table.Get(s.ID); !ok || st.State.Terminal() {
					t.Fatalf("the stream ended before the drain: %+v", st)
				}
				close(release)
				for stream.Next() {
					collect(stream.Current())
				}
				if err := stream.Err(); err != nil || text.String() != w.reply || tg.finished(s.ID).State != lifecycle.Completed {
					t.Fatalf("stream drained: %q, %v; want %q completed", text.String(), err, w.reply)
				}
			}
			if err := <-tg.result; err != nil {
				t.Fatalf("Run: %v", err)
			}
			close(tg.result) // shutdown (cleanup) reads no second result
		})
	}
}

// params50Body is chatParams(50) as a JSON request body.
func params50Body() []byte {
	b, _ := json.Marshal(chatParams(50))
	return b
}

// chatRequest is an authenticated POST of body to /v1/chat/completions.
func chatRequest(t *testing.T, tg *testGateway, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tg.base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tg.key)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// postWith sends body to /v1/chat/completions with client c; closing
// reports an HTTP/1.1 response with Connection: close (the client takes
// the header out of resp.Header into resp.Close).
func postWith(t *testing.T, c *http.Client, tg *testGateway, body []byte) (code int, h http.Header, closing bool, out []byte) {
	t.Helper()
	resp, err := c.Do(chatRequest(t, tg, body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ = io.ReadAll(resp.Body)
	if resp.ProtoMajor != 1 {
		t.Fatalf("want an HTTP/1.1 response, got %s", resp.Proto)
	}
	return resp.StatusCode, resp.Header, resp.Close, out
}

// chatContent is the first choice's message content of a chat response.
func chatContent(t *testing.T, body []byte) string {
	t.Helper()
	var resp chatCompletion
	if err := json.Unmarshal(body, &resp); err != nil || len(resp.Choices) == 0 {
		return ""
	}
	return resp.Choices[0].Message.Content
}
