package obs

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestStatusRecorder(t *testing.T) {
	body := httptest.NewRecorder()
	w := &StatusRecorder{ResponseWriter: body}
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	w.WriteHeader(http.StatusTeapot) // too late: the status line is gone
	if w.Status != http.StatusOK || w.Bytes != 5 {
		t.Errorf("after a bare write: status %d, bytes %d; want 200, 5", w.Status, w.Bytes)
	}

	w = &StatusRecorder{ResponseWriter: httptest.NewRecorder()}
	w.WriteHeader(http.StatusEarlyHints)
	w.WriteHeader(http.StatusCreated)
	if w.Status != http.StatusCreated {
		t.Errorf("status %d after 103 then 201, want 201", w.Status)
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		t.Errorf("Flush through the recorder: %v", err)
	}
}
