package cli

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHealth: `warden health` exits 0 on a 2xx answer over HTTPS with the
// CA it is given, 1 on a 503 (with the status and body on stderr) and on
// a certificate it cannot verify, and 2 without a usable --url.
func TestHealth(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if !ready.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), append([]string{"health"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, out, errOut := run("--url", srv.URL+"/readyz", "--cacert", ca); code != 0 || out != "200 OK ok\n" {
		t.Errorf("ready: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	ready.Store(false)
	if code, _, errOut := run("--url", srv.URL+"/readyz", "--cacert", ca); code != 1 || !strings.Contains(errOut, "503 Service Unavailable starting") {
		t.Errorf("starting: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run("--url", srv.URL+"/readyz"); code != 1 || !strings.Contains(errOut, "certificate") {
		t.Errorf("unknown CA: exit %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{{}, {"--url", "127.0.0.1:1/readyz"}, {"--url", "ftp://x/readyz"}} {
		if code, _, errOut := run(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage); stderr %q", args, code, errOut)
		}
	}
}
