package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warden-ai/warden/internal/obs"
)

// TestProgressFromLog: the start-up steps children log, in either log
// format, become progress lines with sizes and times; other lines do not.
func TestProgressFromLog(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		log, err := obs.NewLogger(&buf, "info", format)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("startup step", "step", "weights", "bytes", int64(66_100_000), "duration", 310*time.Millisecond, "kv_bytes", int64(256<<20))
		log.Info("worker serving", "control", "127.0.0.1:1")
		log.Info("startup step", "step", "assets", "bytes", int64(9_135_431), "duration", 12*time.Millisecond)
		log.Info("model tokenizer loaded", "model", "m", "bytes", 9_084_490, "duration", 1500*time.Millisecond)
		var got []string
		for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			if p, ok := progressFromLog(string(line)); ok {
				got = append(got, p)
			}
		}
		want := []string{
			"loaded the model weights (66.1 MB) in 310ms, KV pool 268.4 MB",
			"read the tokenizer files (9.1 MB) in 12ms",
			"loaded the model's tokenizer (9.1 MB) in 1.5s",
		}
		if len(got) != len(want) {
			t.Fatalf("%s: progress %q, want %q", format, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: line %d = %q, want %q", format, i, got[i], want[i])
			}
		}
	}
}

// TestLogFollower: only complete lines come back, each once.
func TestLogFollower(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	f := &logFollower{path: path}
	if got := f.lines(); got != nil {
		t.Fatalf("no file: %q", got)
	}
	if err := os.WriteFile(path, []byte("one\ntw"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := f.lines(); len(got) != 1 || got[0] != "one" {
		t.Fatalf("first read: %q", got)
	}
	file, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	file.WriteString("o\nthree\n")
	file.Close()
	if got := f.lines(); len(got) != 2 || got[0] != "two" || got[1] != "three" {
		t.Fatalf("second read: %q", got)
	}
}

// TestNoProgressOffTerminal: a pipe or buffer is not a terminal, so
// neither `warden up` nor `warden worker` print progress lines there.
func TestNoProgressOffTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(w) || isTerminal(&bytes.Buffer{}) {
		t.Fatal("a pipe or buffer counts as a terminal")
	}
}
