package clitest

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/cmd/warden/cli"
	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/admin"
	"github.com/warden-ai/warden/gateway/internal/admin/admintest"
	"github.com/warden-ai/warden/gateway/internal/aliases"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
	"github.com/warden-ai/warden/worker/model"
)

const token = "cli-test-admin-token-42"

// gateway is an admin API served over TLS by httptest.
type gateway struct {
	url       string
	caFile    string
	tokenFile string
	store     *memstore.Store
	requests  *admintest.Requests
}

func startGateway(t *testing.T, cluster *admintest.Cluster) *gateway {
	t.Helper()
	// The tests pass every connection setting explicitly.
	for _, v := range []string{"WARDEN_ADMIN_URL", "WARDEN_ADMIN_TOKEN", "WARDEN_CACERT", "WARDEN_GATEWAY_ADMIN_TOKEN"} {
		t.Setenv(v, "")
	}
	store, err := memstore.New([]byte("cli-test-secret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{store: store, requests: admintest.NewRequests()}
	al := aliases.New(store, aliases.Config{Static: map[string]string{"fast": "tiny"}})
	reg := adapters.New(store, func(base string) (*model.Config, bool) { return tinyShape, base == "tiny" }, 1<<20)
	srv := httptest.NewUnstartedServer(admin.NewHandler(admin.Config{Token: token, Aliases: al, Adapters: reg}, store, cluster, g.requests, nil))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes refused on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	g.url = srv.URL

	dir := t.TempDir()
	g.caFile = filepath.Join(dir, "ca.pem")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(g.caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	g.tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(g.tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return g
}

// run runs warden with args and returns its exit code and output.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// admin runs `warden admin` against g with its connection flags.
func (g *gateway) admin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	full := append([]string{"admin", "--url", g.url, "--token-file", g.tokenFile, "--cacert", g.caFile}, args...)
	return run(t, full...)
}

// ok runs an admin command that must succeed and returns its stdout.
func (g *gateway) ok(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := g.admin(t, args...)
	if code != 0 {
		t.Fatalf("warden admin %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// rows splits a table into its rows of fields.
func rows(out string) [][]string {
	var rs [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rs = append(rs, strings.Fields(line))
	}
	return rs
}

// field returns the value of "name:" in key-value output.
func field(t *testing.T, out, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `:\s+(.*?)\s*$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q in output:\n%s", name, out)
	}
	return m[1]
}

func TestAdminTenantsAndLimits(t *testing.T) {
	g := startGateway(t, admintest.NewCluster())
	ctx := context.Background()

	out := g.ok(t, "tenants", "create", "acme", "--name", "Acme Corp", "--weight", "2", "--requests-per-minute", "60", "--allowed-models", "tiny, small")
	if field(t, out, "id") != "acme" || field(t, out, "name") != "Acme Corp" || field(t, out, "weight") != "2" ||
		field(t, out, "requests_per_minute") != "60" || field(t, out, "tokens_per_minute") != "unlimited" || field(t, out, "allowed_models") != "tiny,small" ||
		field(t, out, "max_priority") != "0" { // the default: priority 0 only, not unlimited
		t.Fatalf("create output:\n%s", out)
	}
	// Connection flags may also come after the command's own arguments.
	code, _, errOut := run(t, "admin", "tenants", "create", "globex", "--url", g.url, "--token", token, "--cacert", g.caFile, "--disabled")
	if code != 0 {
		t.Fatalf("create globex: %d %s", code, errOut)
	}

	out = g.ok(t, "tenants", "list")
	rs := rows(out)
	if len(rs) != 3 || rs[0][0] != "ID" || rs[1][0] != "acme" || rs[2][0] != "globex" {
		t.Fatalf("tenants list:\n%s", out)
	}
	// Columns line up: every row's second field starts at the same offset.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := strings.Index(lines[0], "NAME")
	for _, l := range lines[1:] {
		if l[col-1] != ' ' || l[col] == ' ' {
			t.Fatalf("table not aligned at column %d:\n%s", col, out)
		}
	}

	out = g.ok(t, "limits", "set", "acme", "--tokens-per-minute", "1000", "--budget", "500000", "--budget-period", "day")
	if field(t, out, "tokens_per_minute") != "1000" || field(t, out, "budget") != "500000/day" || field(t, out, "requests_per_minute") != "60" {
		t.Fatalf("limits set kept the other limits? output:\n%s", out)
	}
	got, err := g.store.GetTenant(ctx, "acme")
	if err != nil || got.Limits.TokensPerMinute != 1000 || got.Limits.RequestsPerMinute != 60 || got.Limits.BudgetPeriod != tenant.PeriodDay {
		t.Fatalf("store after limits set: %+v %v", got, err)
	}
	out = g.ok(t, "limits", "get", "acme")
	if field(t, out, "budget") != "500000/day" || field(t, out, "max_priority") != "0" {
		t.Fatalf("limits get:\n%s", out)
	}
	out = g.ok(t, "limits", "set", "acme", "--max-priority", "3")
	if field(t, out, "max_priority") != "3" || field(t, out, "tokens_per_minute") != "1000" {
		t.Fatalf("limits set --max-priority:\n%s", out)
	}
	if got, err := g.store.GetTenant(ctx, "acme"); err != nil || got.Limits.MaxPriority != 3 {
		t.Fatalf("store after --max-priority: %+v %v", got.Limits, err)
	}
	if code, _, errOut := run(t, "admin", "limits", "set", "acme", "--max-priority", "1001", "--url", g.url, "--token", token, "--cacert", g.caFile); code == 0 ||
		!strings.Contains(errOut, "max_priority") {
		t.Fatalf("--max-priority 1001: exit %d, %s", code, errOut)
	}

	out = g.ok(t, "tenants", "update", "acme", "--disabled=true", "--weight", "7")
	if field(t, out, "disabled") != "true" || field(t, out, "weight") != "7" || field(t, out, "tokens_per_minute") != "1000" {
		t.Fatalf("update:\n%s", out)
	}

	out = g.ok(t, "--json", "tenants", "get", "acme")
	var tj tenant.Tenant
	if err := json.Unmarshal([]byte(out), &tj); err != nil || tj.ID != "acme" || tj.Weight != 7 || !tj.Disabled {
		t.Fatalf("--json get: %v\n%s", err, out)
	}

	out = g.ok(t, "tenants", "delete", "globex")
	if !strings.Contains(out, "deleted tenant globex") {
		t.Fatalf("delete:\n%s", out)
	}
	if _, err := g.store.GetTenant(ctx, "globex"); err == nil {
		t.Fatal("globex still exists")
	}
}

func TestAdminErrors(t *testing.T) {
	g := startGateway(t, admintest.NewCluster())
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		inError []string
	}{
		{"unknown tenant", []string{"tenants", "get", "nobody"}, 1, []string{`tenant "nobody"`, "not found", "404"}},
		{"limits of unknown tenant", []string{"limits", "set", "nobody", "--max-concurrent", "1"}, 1, []string{`tenant "nobody"`, "404"}},
		{"bad tenant id", []string{"tenants", "create", "Bad Id"}, 1, []string{"tenant id", "400", "param id"}},
		{"missing argument", []string{"tenants", "get"}, 2, []string{"want <id>"}},
		{"extra argument", []string{"tenants", "list", "x"}, 2, []string{"unexpected arguments: x"}},
		{"unknown command", []string{"tenants", "frobnicate"}, 2, []string{`unknown command "tenants frobnicate"`}},
		{"unknown flag", []string{"tenants", "list", "--bogus"}, 2, []string{"bogus"}},
		{"nothing to set", []string{"limits", "set", "acme"}, 2, []string{"at least one limit flag"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := g.admin(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errOut)
			}
			for _, s := range tc.inError {
				if !strings.Contains(errOut, s) {
					t.Fatalf("stderr lacks %q:\n%s", s, errOut)
				}
			}
		})
	}
	g.ok(t, "tenants", "create", "acme")
	code, _, errOut := g.admin(t, "limits", "set", "acme", "--max-concurrent", "-1")
	if code != 1 || !strings.Contains(errOut, "limits.max_concurrent must be >= 0") {
		t.Fatalf("negative limit on a real tenant: %d %s", code, errOut)
	}

	// Wrong token: the server's message, exit 1.
	code, _, errOut = run(t, "admin", "--url", g.url, "--token", "wrong", "--cacert", g.caFile, "tenants", "list")
	if code != 1 || !strings.Contains(errOut, "invalid_admin_token") || !strings.Contains(errOut, "401") {
		t.Fatalf("wrong token: %d %s", code, errOut)
	}
	// No token at all: a usage error.
	code, _, errOut = run(t, "admin", "--url", g.url, "--cacert", g.caFile, "tenants", "list")
	if code != 2 || !strings.Contains(errOut, "no admin token") {
		t.Fatalf("no token: %d %s", code, errOut)
	}
	// The token from the environment works.
	t.Setenv("WARDEN_ADMIN_TOKEN", token)
	t.Setenv("WARDEN_ADMIN_URL", g.url)
	t.Setenv("WARDEN_CACERT", g.caFile)
	if code, out, errOut := run(t, "admin", "tenants", "list"); code != 0 || !strings.Contains(out, "acme") {
		t.Fatalf("env settings: %d %s %s", code, out, errOut)
	}
	// Without the CA the server is not trusted.
	code, _, errOut = run(t, "admin", "--cacert", "", "tenants", "list")
	if code != 1 || !strings.Contains(errOut, "certificate") {
		t.Fatalf("untrusted server: %d %s", code, errOut)
	}
}

func TestAdminKeys(t *testing.T) {
	g := startGateway(t, admintest.NewCluster())
	ctx := context.Background()
	g.ok(t, "tenants", "create", "acme")

	code, out, errOut := g.admin(t, "keys", "issue", "acme", "--name", "ci")
	if code != 0 {
		t.Fatalf("issue: %d %s", code, errOut)
	}
	key := strings.TrimSpace(out)
	if !strings.HasPrefix(key, tenant.KeyPrefix) || len(key) != tenant.KeyLen || !strings.Contains(errOut, "cannot be shown again") {
		t.Fatalf("issue printed %q / %q", out, errOut)
	}
	p, err := g.store.Authenticate(ctx, key)
	if err != nil || p.Tenant.ID != "acme" {
		t.Fatalf("printed key does not authenticate: %v", err)
	}

	out = g.ok(t, "keys", "list", "--tenant", "acme")
	rs := rows(out)
	if len(rs) != 2 || rs[1][0] != p.KeyID || rs[1][1] != "acme" || rs[1][3] != "ci" || rs[1][5] != "-" {
		t.Fatalf("keys list:\n%s", out)
	}
	if strings.Contains(out, key) || strings.Contains(out, key[len(tenant.KeyDisplayPrefix(p.KeyID)):]) {
		t.Fatal("keys list shows the secret")
	}
	out = g.ok(t, "--json", "keys", "list", "--prefix", tenant.KeyDisplayPrefix(p.KeyID))
	var infos []tenant.KeyInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil || len(infos) != 1 || infos[0].ID != p.KeyID {
		t.Fatalf("--json keys list: %v\n%s", err, out)
	}

	// Revoke by the display prefix.
	out = g.ok(t, "keys", "revoke", tenant.KeyDisplayPrefix(p.KeyID))
	if !strings.Contains(out, "revoked key "+p.KeyID+" of tenant acme") {
		t.Fatalf("revoke:\n%s", out)
	}
	if _, err := g.store.Authenticate(ctx, key); err == nil {
		t.Fatal("revoked key still authenticates")
	}
	out = g.ok(t, "keys", "list")
	if rows(out)[1][5] == "-" {
		t.Fatalf("revoked key listed as not revoked:\n%s", out)
	}
	if code, _, errOut := g.admin(t, "keys", "issue", "nobody"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("issue for unknown tenant: %d %s", code, errOut)
	}
}

func TestAdminModelLimitsAndUsage(t *testing.T) {
	g := startGateway(t, admintest.NewCluster())
	ctx := context.Background()

	// meta/llama-3 is not among the cluster's models: set refuses it,
	// naming those it serves, unless --force.
	if code, _, errOut := g.admin(t, "model-limits", "set", "meta/llama-3", "--max-context", "4096"); code != 1 ||
		!strings.Contains(errOut, `model "meta/llama-3" is not served by this gateway (it serves: big/model, tiny)`) || !strings.Contains(errOut, "--force") {
		t.Fatalf("set for a model not served: %d %s", code, errOut)
	}
	out := g.ok(t, "model-limits", "set", "meta/llama-3", "--max-context", "4096", "--allowed-tenants", "acme,globex", "--force")
	if rs := rows(out); len(rs) != 2 || rs[1][0] != "meta/llama-3" || rs[1][1] != "4096" || rs[1][2] != "unlimited" || rs[1][3] != "acme,globex" {
		t.Fatalf("set:\n%s", out)
	}
	// Flags not given keep their value.
	out = g.ok(t, "model-limits", "set", "meta/llama-3", "--max-output-tokens", "512", "--force")
	if rs := rows(out); rs[1][1] != "4096" || rs[1][2] != "512" || rs[1][3] != "acme,globex" {
		t.Fatalf("second set:\n%s", out)
	}
	m, err := g.store.GetModelLimits(ctx, "meta/llama-3")
	if err != nil || m.MaxContext != 4096 || m.MaxOutputTokens != 512 {
		t.Fatalf("store: %+v %v", m, err)
	}
	out = g.ok(t, "model-limits", "get", "meta/llama-3")
	if !strings.Contains(out, "meta/llama-3") || !strings.Contains(out, "512") {
		t.Fatalf("get:\n%s", out)
	}
	g.ok(t, "model-limits", "set", "tiny", "--max-output-tokens", "100")
	if rs := rows(g.ok(t, "model-limits", "list")); len(rs) != 3 || rs[1][0] != "meta/llama-3" || rs[2][0] != "tiny" {
		t.Fatalf("list: %v", rs)
	}
	if code, _, errOut := g.admin(t, "model-limits", "set", "tiny", "--max-context", "100", "--max-output-tokens", "200"); code != 1 ||
		!strings.Contains(errOut, "max_output_tokens") {
		t.Fatalf("output above context: %d %s", code, errOut)
	}
	g.ok(t, "model-limits", "delete", "meta/llama-3")
	if code, _, errOut := g.admin(t, "model-limits", "get", "meta/llama-3"); code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("get deleted: %d %s", code, errOut)
	}

	g.ok(t, "tenants", "create", "acme")
	lease, err := g.store.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "tiny", Tokens: 50})
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx, tenant.Consumed{PromptTokens: 30, CompletionTokens: 12}); err != nil {
		t.Fatal(err)
	}
	today := time.Now().UTC().Format(tenant.DayFormat)
	out = g.ok(t, "usage", "acme")
	rs := rows(out)
	if len(rs) != 3 || rs[1][0] != today || rs[1][1] != "tiny" || rs[1][2] != "1" || rs[1][3] != "30" || rs[1][4] != "12" || rs[1][5] != "42" ||
		rs[2][0] != "total" || rs[2][4] != "42" {
		t.Fatalf("usage:\n%s", out)
	}
	if code, _, errOut := g.admin(t, "usage", "acme", "--from", "yesterday"); code != 1 || !strings.Contains(errOut, "param from") {
		t.Fatalf("bad date: %d %s", code, errOut)
	}
}

func TestAdminWorkersModelsRequests(t *testing.T) {
	g := startGateway(t, admintest.NewCluster())
	out := g.ok(t, "workers")
	rs := rows(out)
	if len(rs) != 3 || rs[1][0] != "w-decode" || rs[1][4] != "4096" || rs[1][14] != "tcp://127.0.0.1:9102" || rs[2][0] != "w-prefill" || rs[2][4] != "2048" {
		t.Fatalf("workers:\n%s", out)
	}
	out = g.ok(t, "models")
	rs = rows(out)
	if len(rs) != 3 || rs[2][0] != "tiny" || rs[2][2] != "8192" || rs[2][3] != "2048" || rs[2][4] != "clamped" ||
		!strings.Contains(rs[2][6], "w-prefill(prefill)=2048") {
		t.Fatalf("models:\n%s", out)
	}

	out = g.ok(t, "requests", "list")
	rs = rows(out)
	if len(rs) != 3 || rs[1][0] != "req_a" || rs[2][0] != "req_b" || rs[2][3] != "decoding" {
		t.Fatalf("requests list:\n%s", out)
	}
	if rs := rows(g.ok(t, "requests", "list", "--tenant", "globex")); len(rs) != 2 || rs[1][0] != "req_a" {
		t.Fatalf("filtered list: %v", rs)
	}
	out = g.ok(t, "requests", "get", "req_done")
	if field(t, out, "state") != "completed" || field(t, out, "completion_tokens") != "7" {
		t.Fatalf("requests get:\n%s", out)
	}
	out = g.ok(t, "requests", "abort", "req_b")
	if !strings.Contains(out, "aborted request req_b (cause admin)") || field(t, out, "state") != "aborted" {
		t.Fatalf("abort:\n%s", out)
	}
	if got := strings.Join(g.requests.Aborts(), ","); got != "req_b:admin" {
		t.Fatalf("aborts: %s", got)
	}
	if code, _, errOut := g.admin(t, "requests", "abort", "req_b"); code != 1 || !strings.Contains(errOut, "already finished") {
		t.Fatalf("second abort: %d %s", code, errOut)
	}
	out = g.ok(t, "--json", "requests", "get", "req_b")
	var rv adminclient.RequestView
	if err := json.Unmarshal([]byte(out), &rv); err != nil || rv.State != "aborted" || rv.Cause != "admin" {
		t.Fatalf("--json get: %v\n%s", err, out)
	}
}

// writeConfig writes a config file pointing `warden check` at g. The CA
// is found as in a dev PKI: ca.pem next to gateway.tls.cert_file.
func writeConfig(t *testing.T, g *gateway, models string) string {
	t.Helper()
	listen := strings.TrimPrefix(g.url, "https://")
	pki := filepath.Dir(g.caFile)
	path := filepath.Join(t.TempDir(), "warden.yaml")
	cfg := "gateway:\n  admin_listen: \"" + listen + "\"\n  admin_token_file: \"" + g.tokenFile + "\"\n" +
		"  tls:\n    cert_file: \"" + filepath.Join(pki, "server.pem") + "\"\n    key_file: \"" + filepath.Join(pki, "server-key.pem") + "\"\n" +
		models
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheck(t *testing.T) {
	t.Run("violation exits 1 naming the model", func(t *testing.T) {
		g := startGateway(t, admintest.NewCluster())
		cfg := writeConfig(t, g, "models:\n  - name: tiny\n    context_length: 8192\n  - name: big/model\n    context_length: 1024\n")
		code, out, errOut := run(t, "check", "--config", cfg)
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
		}
		for _, s := range []string{
			`FAIL  model "tiny": configured context 8192 exceeds effective context 2048: w-prefill (prefill) holds 2048 tokens`,
			"policy clamp", "w-decode", "4096", "verdict clamped",
			// The memory each worker planned its pool within, and its weights.
			"WEIGHTS", "KV BUDGET", "MEMORY LIMIT (source)",
			"f16  ", "536.9 MB", "4.3 GB (cgroup v2, headroom 268.4 MB)",
			"bf16  ", "31.1 GB", "64.4 GB (meminfo)",
			// Adapter memory: the decode worker's, none on prefill.
			"ADAPTERS (used/capacity)", "314.6 MB/1.1 GB, 2 loaded (1 pinned)",
		} {
			if !strings.Contains(out, s) {
				t.Fatalf("output lacks %q:\n%s", s, out)
			}
		}
		if strings.Contains(out, `FAIL  model "big/model"`) || !strings.Contains(errOut, "tiny") {
			t.Fatalf("wrong model blamed:\n%s\n%s", out, errOut)
		}
	})
	t.Run("agreement exits 0", func(t *testing.T) {
		c := admintest.NewCluster()
		c.ModelViews = c.ModelViews[1:] // big/model only, which agrees
		g := startGateway(t, c)
		code, out, errOut := run(t, "check", "--url", g.url, "--token-file", g.tokenFile, "--cacert", g.caFile)
		if code != 0 || !strings.Contains(out, "OK") || !strings.Contains(out, "big/model") || strings.Contains(out, "FAIL") {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
	})
	t.Run("json", func(t *testing.T) {
		g := startGateway(t, admintest.NewCluster())
		cfg := writeConfig(t, g, "models:\n  - name: tiny\n    context_length: 4096\n  - name: gone\n    context_length: 100\n")
		code, out, _ := run(t, "check", "--config", cfg, "--json")
		var rep struct {
			Models     []adminclient.ModelView `json:"models"`
			Violations []string                `json:"violations"`
			Warnings   []string                `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
			t.Fatalf("exit %d, %v:\n%s", code, err, out)
		}
		if len(rep.Models) != 2 || len(rep.Violations) != 1 || rep.Violations[0] != "tiny" || len(rep.Warnings) != 2 ||
			!strings.Contains(rep.Warnings[0], "configures context 4096 but the gateway runs with 8192") ||
			!strings.Contains(rep.Warnings[1], `"gone"`) {
			t.Fatalf("report %+v", rep)
		}
	})
	t.Run("unreachable exits 2", func(t *testing.T) {
		g := startGateway(t, admintest.NewCluster())
		dead := httptest.NewServer(nil)
		deadURL := dead.URL
		dead.Close()
		code, out, errOut := run(t, "check", "--url", deadURL, "--token-file", g.tokenFile)
		if code != 2 || !strings.Contains(errOut, "cannot reach the gateway") || out != "" {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
	})
	t.Run("refused exits 2", func(t *testing.T) {
		g := startGateway(t, admintest.NewCluster())
		code, _, errOut := run(t, "check", "--url", g.url, "--token", "wrong", "--cacert", g.caFile)
		if code != 2 || !strings.Contains(errOut, "refused") || !strings.Contains(errOut, "invalid_admin_token") {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
	})
	t.Run("no token exits 2", func(t *testing.T) {
		g := startGateway(t, admintest.NewCluster())
		code, _, errOut := run(t, "check", "--url", g.url, "--cacert", g.caFile)
		if code != 2 || !strings.Contains(errOut, "no admin token") {
			t.Fatalf("exit %d\n%s", code, errOut)
		}
	})
}

// TestAliases: `warden admin aliases` sets, repoints, lists and deletes
// model aliases; a target that is no model is refused naming it.
func TestAliases(t *testing.T) {
	g := startGateway(t, admintest.NewCluster())
	if rs := rows(g.ok(t, "aliases", "set", "default", "tiny")); len(rs) != 2 || strings.Join(rs[1], " ") != "default tiny admin" {
		t.Fatalf("set: %v", rs)
	}
	g.ok(t, "aliases", "set", "default", "big/model")
	rs := rows(g.ok(t, "aliases", "list"))
	if len(rs) != 3 || strings.Join(rs[1], " ") != "default big/model admin" || strings.Join(rs[2], " ") != "fast tiny config" {
		t.Fatalf("list: %v", rs)
	}
	if code, _, errOut := g.admin(t, "aliases", "set", "x", "nope"); code != 1 || !strings.Contains(errOut, "not a configured model") {
		t.Fatalf("unknown target: %d %s", code, errOut)
	}
	g.ok(t, "aliases", "delete", "default")
	if code, _, errOut := g.admin(t, "aliases", "delete", "default"); code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("second delete: %d %s", code, errOut)
	}
	if rs := rows(g.ok(t, "aliases", "list")); len(rs) != 2 {
		t.Fatalf("list after delete: %v", rs)
	}
}
