package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/test/harness"
)

// TestPrefillKilledMidShmTransfer (issue 16, I5 and I12, real processes):
// a prefill worker is killed with SIGKILL in the middle of an shm
// transfer. Its pages in decode's pool stay quarantined (nothing can vouch
// that the dead writer stopped), and the gateway tells the truth about
// what is left: /v1/models advertises the smaller context, the admin view
// says degraded with the reason, warden_model_context_degraded is 1 and
// warden_model_usable_context_tokens the usable tokens; a request that
// fitted before but no longer fits gets 400 context_length_exceeded at
// once (never a wait and 429), while one that fits is served with the
// reference text and /readyz stays ready.
//
// The kill lands mid-transfer by construction: the prefill runs a binary
// built with -tags warden_faults whose first shm writer stalls for good
// after its first bytes (WARDEN_TEST_FAULTS=stall-shm-after=1) and logs
// it; the test kills it once that line is in its log.
func TestPrefillKilledMidShmTransfer(t *testing.T) {
	faulty := filepath.Join(t.TempDir(), "warden-faults")
	build := exec.Command("go", "build", "-tags", "warden_faults", "-o", faulty, "github.com/warden-ai/warden/cmd/warden")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the fault-injecting warden: %v\n%s", err, out)
	}
	const poolBytes = 1 << 20 // 128 pages of 16 tokens of the tiny model: 2048 tokens
	small := func(c *config.Config) {
		c.Worker.KV.MemoryBytes = poolBytes
		c.Worker.Transfer.DrainTimeout = 200 * time.Millisecond
	}
	specs := []harness.WorkerSpec{
		{Role: config.RolePrefill, Model: harness.ModelTiny, Transfer: config.TransferSHM, Edit: small},
		{Role: config.RoleDecode, Model: harness.ModelTiny, Transfer: config.TransferSHM, Edit: small},
	}
	c := harness.New(t, env, harness.Options{Workers: specs})
	prefill, decode := c.Workers[0], c.Workers[1]
	prefill.Bin = faulty
	prefill.Env = append(os.Environ(), "WARDEN_TEST_FAULTS=stall-shm-after=1")
	c.Run(t)
	c.WaitReady(t)
	g := c.Gateway()
	key := c.NewKey(t, "quarantine")
	if got := advertisedContext(t, g, key); got != 2048 {
		t.Fatalf("advertised context %d before the kill, want the pool's 2048", got)
	}

	// A prompt of about 1200 tokens plus 300 output tokens: 94 of the 128
	// pages, which the kill leaves quarantined.
	ref := reference(t, harness.ModelTiny)
	long := promptOf(t, ref, 1200)
	first := make(chan int, 1)
	go func() {
		resp, err := g.Post(context.Background(), key, "/v1/completions",
			map[string]any{"model": harness.ModelTiny, "prompt": long, "max_tokens": 300, "temperature": 0})
		if err != nil {
			first <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	waitUntil(t, "the prefill's shm writer to stall", func() error {
		if !strings.Contains(prefill.Log(), "test fault: shm writer stalled") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if err := prefill.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := <-first; code != http.StatusServiceUnavailable {
		t.Errorf("the request whose prefill was killed: %d, want 503", code)
	}

	// The quarantine reaches the gateway with decode's next heartbeat.
	v := c.WaitWorker(t, decode.ID, "holding quarantined pages", func(v adminclient.WorkerView, _ bool) bool {
		return v.Pool.QuarantinedPages > 0
	})
	usable := (v.Pool.TotalPages - v.Pool.QuarantinedPages) * v.Pool.PageTokens
	t.Logf("decode pool after the kill: %+v; usable %d tokens", v.Pool, usable)
	if usable >= 2048 || usable < 64 {
		t.Fatalf("usable context %d after the kill: the test needs a partial quarantine", usable)
	}
	// Serving again with a healthy prefill (the ordinary binary), once the
	// gateway saw the killed one go.
	waitDown(t, c, prefill)
	prefill.Bin, prefill.Env = "", nil
	c.RestartWorker(t, prefill)
	if got := advertisedContext(t, g, key); got != usable {
		t.Errorf("/v1/models context_length %d after the kill, want the usable %d", got, usable)
	}
	models, err := g.Admin.Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models {
		if m.Name == harness.ModelTiny && (!m.Degraded || m.UsableContext != usable || !strings.Contains(m.Reason, "quarantined")) {
			t.Errorf("admin view of %s: %+v, want degraded to %d with the reason", m.Name, m, usable)
		}
	}
	metrics := adminMetrics(t, c)
	for _, want := range []string{
		`warden_model_context_degraded{model="tiny"} 1`,
		fmt.Sprintf(`warden_model_usable_context_tokens{model="tiny"} %d`, usable),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("admin /metrics lacks %q", want)
		}
	}

	// The request that fitted before no longer can: 400 at once.
	resp, err := g.Post(context.Background(), key, "/v1/completions",
		map[string]any{"model": harness.ModelTiny, "prompt": long, "max_tokens": 300, "temperature": 0})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "context_length_exceeded") ||
		!strings.Contains(string(body), strconv.FormatInt(usable, 10)) {
		t.Errorf("a request beyond the usable context: %s %s, want 400 context_length_exceeded naming %d", resp.Status, body, usable)
	}
	// One that fits is served, equal to the reference; /readyz is ready.
	want, err := ref.Completion(context.Background(), "Once upon a time", 16)
	if err != nil {
		t.Fatal(err)
	}
	text, finish, err := completeOn(g, key, map[string]any{"model": harness.ModelTiny, "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0})
	if err != nil || text != want.Text || finish != want.Finish {
		t.Errorf("a request that fits: %q (%s) %v, want the reference %q (%s)", text, finish, err, want.Text, want.Finish)
	}
	rz, err := g.HTTP.Get(g.APIURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	rz.Body.Close()
	if rz.StatusCode != http.StatusOK {
		t.Errorf("/readyz %s while the model serves a smaller context", rz.Status)
	}
}

// advertisedContext is the tiny model's context_length in /v1/models.
func advertisedContext(t *testing.T, g *harness.Gateway, key string) int64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.APIURL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := g.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			ID            string `json:"id"`
			ContextLength int64  `json:"context_length"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Data {
		if m.ID == harness.ModelTiny {
			return m.ContextLength
		}
	}
	t.Fatalf("/v1/models does not list %s", harness.ModelTiny)
	return 0
}

// adminMetrics scrapes the first gateway's /metrics on its admin listener.
func adminMetrics(t *testing.T, c *harness.Cluster) string {
	t.Helper()
	g := c.Gateway()
	req, _ := http.NewRequest(http.MethodGet, g.AdminURL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+c.AdminToken)
	resp, err := g.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// wordRun matches one word and its trailing space.
var wordRun = regexp.MustCompile(`\S+\s*`)

// promptOf returns a completion prompt of about n tokens of the tiny
// model (at most n).
func promptOf(t *testing.T, ref *harness.Reference, n int) string {
	t.Helper()
	base := strings.Repeat("the quick brown fox jumps over the lazy dog ", n/4+1)
	words := wordRun.FindAllString(base, -1)
	lo, hi := 1, len(words)
	for lo < hi { // the longest prefix of words with at most n tokens
		mid := (lo + hi + 1) / 2
		ids, err := ref.CompletionPrompt(strings.Join(words[:mid], ""))
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) <= n {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return strings.Join(words[:lo], "")
}
