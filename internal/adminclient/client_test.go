package adminclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-ai/warden/tenant"
)

func TestNewRejectsBadConfig(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8444", "ftp://host", "https://", "https://host/?q=1", "://x"} {
		if _, err := New(Config{URL: u}); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ca := range []string{notPEM, filepath.Join(dir, "missing.pem")} {
		if _, err := New(Config{URL: "https://127.0.0.1:8444", CAFile: ca}); err == nil {
			t.Errorf("CA file %s accepted", ca)
		}
	}
}

func TestRequestsAndErrors(t *testing.T) {
	type seen struct{ method, rawPath, query, auth, body string }
	var got seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 512)
		n, _ := r.Body.Read(b)
		got = seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization"), string(b[:n])}
		switch {
		case strings.HasSuffix(r.URL.Path, "/proxy"):
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("<html>bad gateway</html>"))
		case r.Method == http.MethodPut:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"model":"meta/llama-3","max_context":10}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"tenant \"x\": not found","type":"invalid_request_error","param":null,"code":"not_found"}}`))
		}
	}))
	defer srv.Close()
	c, err := New(Config{URL: srv.URL + "/", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	m, err := c.SetModelLimits(ctx, tenant.ModelLimits{Model: "meta/llama-3"})
	if err != nil || m.MaxContext != 10 {
		t.Fatalf("set: %+v %v", m, err)
	}
	if got.method != "PUT" || got.rawPath != "/admin/v1/model-limits/meta%2Fllama-3" || got.auth != "Bearer tok" ||
		!strings.Contains(got.body, `"model":"meta/llama-3"`) {
		t.Fatalf("request %+v", got)
	}

	_, err = c.GetTenant(ctx, "x")
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != CodeNotFound || apiErr.Param != "" || !IsNotFound(err) {
		t.Fatalf("404: %#v", err)
	}
	if err.Error() != `tenant "x": not found (HTTP 404 not_found)` {
		t.Fatalf("message %q", err.Error())
	}

	if _, err := c.Usage(ctx, "acme", "2026-01-01", ""); err == nil || got.query != "from=2026-01-01&tenant=acme" {
		t.Fatalf("usage query %q (%v)", got.query, err)
	}

	// A non-envelope error (a proxy's page) still becomes an *Error.
	err = c.do(ctx, http.MethodGet, "/proxy", nil, nil, nil)
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadGateway || apiErr.Message != "<html>bad gateway</html>" {
		t.Fatalf("proxy error: %#v", err)
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(nil)
	url := srv.URL
	srv.Close()
	c, err := New(Config{URL: url, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Models(context.Background())
	var apiErr *Error
	if err == nil || errors.As(err, &apiErr) || !strings.Contains(err.Error(), "unreachable") || strings.Count(err.Error(), url) != 1 {
		t.Fatalf("err %v", err)
	}
}
