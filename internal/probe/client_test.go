package probe

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// abortAfterDelay sends the whole body, then hangs up while the server is
// still working on it (before any streamed event): the server sees the
// complete request and then the client gone, and the probe records an
// abort, not an error. The delay (half a second) is far longer than
// writing a small body over loopback.
func TestAbortAfterDelayHangsUpAfterTheWholeBody(t *testing.T) {
	got := make(chan int, 1)
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- len(b)
		<-r.Context().Done() // "computing the prompt" until the client leaves
		close(gone)
	}))
	defer srv.Close()
	b := &budget{}
	b.left.Store(1)
	c := &client{base: srv.URL + "/v1", key: "k", label: "A", http: srv.Client(), budget: b}
	req := chatRequest{Model: "m", Prompt: "a long prompt", MaxTokens: 4, Abort: abortAfterDelay, AbortDelay: 500 * time.Millisecond}
	want, err := c.body(req)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.chat(context.Background(), req)
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if !res.Aborted || res.Complete || res.Text != "" {
		t.Errorf("result %+v, want aborted before any text", res)
	}
	if n := <-got; n != len(want) {
		t.Errorf("server read %d bytes of the body, want all %d", n, len(want))
	}
	<-gone
}
