package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/warden-ai/warden/internal/adminclient"
)

// runHealth checks a health endpoint, such as a gateway's or worker's
// /readyz, for container health checks in an image without curl: exit 0
// when it answers 2xx, 1 otherwise (with the status and the start of the
// body on stderr), 2 for a usage error.
func runHealth(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "health", "health --url URL [--cacert FILE] [--timeout D]")
	target := fs.String("url", "", "the endpoint, e.g. https://127.0.0.1:8443/readyz or http://127.0.0.1:9201/readyz (required)")
	caFile := fs.String("cacert", "", "PEM CA certificate to trust besides the system roots, e.g. the dev CA")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if err := parse(fs, args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(e.stderr, "warden health: --url %q: want http(s)://host:port/path\n", *target)
		fs.Usage()
		return errUsage
	}
	tr, err := adminclient.NewTransport(*caFile)
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return exitError{code: 1, msg: fmt.Sprintf("health %s: %s %s", u, resp.Status, strings.TrimSpace(string(body)))}
	}
	fmt.Fprintf(e.stdout, "%s %s\n", resp.Status, strings.TrimSpace(string(body)))
	return nil
}
