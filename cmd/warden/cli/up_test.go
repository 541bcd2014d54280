package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
)

func noEnv(string) (string, bool) { return "", false }

func quiet(string, ...any) {}

// planIn plans `warden up` with a state dir under t's temp dir.
func planIn(t *testing.T, o upOptions, env func(string) (string, bool)) *upPlan {
	t.Helper()
	if o.stateDir == "" {
		o.stateDir = filepath.Join(t.TempDir(), "state")
	}
	pl, err := planUp(o, env, quiet)
	if err != nil {
		t.Fatal(err)
	}
	pl.ports.release() // the tests start no process
	if err := pl.writeConfigs(); err != nil {
		t.Fatal(err)
	}
	return pl
}

// TestPlanUpDefaults: without a config, `warden up` generates the PKI, the
// dev model and the admin token, listens on the default API address,
// picks distinct free ports for everything else, gives each process its
// cluster identity and writes configs that load and validate.
func TestPlanUpDefaults(t *testing.T) {
	pl := planIn(t, upOptions{}, noEnv)
	gw := pl.gateway.cfg
	if gw.Gateway.Listen != upDefaultListen || pl.apiURL != "https://"+upDefaultListen {
		t.Errorf("API %s (%s), want %s", gw.Gateway.Listen, pl.apiURL, upDefaultListen)
	}
	if len(pl.workers) != 2 || pl.workers[0].cfg.Worker.Role != config.RolePrefill || pl.workers[1].cfg.Worker.Role != config.RoleDecode {
		t.Fatalf("workers %+v, want prefill and decode", pl.workers)
	}
	addrs := []string{gw.Gateway.AdminListen, gw.Gateway.RegistryListen}
	for _, p := range pl.workers {
		w := p.cfg.Worker
		addrs = append(addrs, w.Listen, w.Transfer.Listen, p.cfg.Observability.Metrics.Listen)
		if !slices.Equal(w.Gateways, []string{gw.Gateway.RegistryListen}) {
			t.Errorf("%s registers with %v, want %s", p.name, w.Gateways, gw.Gateway.RegistryListen)
		}
		if w.ModelDir != filepath.Join(pl.stateDir, upModelDir) || w.Model != "tiny" || w.KV.MemoryBytes != upDefaultKV {
			t.Errorf("%s: model %s in %s, KV %v", p.name, w.Model, w.ModelDir, w.KV.MemoryBytes)
		}
		if !strings.HasSuffix(p.cfg.Cluster.CertFile, "worker.pem") {
			t.Errorf("%s cluster cert %s", p.name, p.cfg.Cluster.CertFile)
		}
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" || port == "0" || seen[a] || a == gw.Gateway.Listen {
			t.Errorf("address %q: not a distinct free loopback port (%v)", a, err)
		}
		seen[a] = true
	}
	if !strings.HasSuffix(gw.Cluster.CertFile, "gateway.pem") || pl.caFile != filepath.Join(pl.stateDir, upPKIDir, "ca.pem") {
		t.Errorf("gateway cluster cert %s, CA %s", gw.Cluster.CertFile, pl.caFile)
	}
	st, err := os.Stat(pl.adminTokenFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("admin token file: %v, mode %v", err, st.Mode())
	}
	if _, err := os.Stat(filepath.Join(pl.stateDir, upModelDir, "model.safetensors")); err != nil {
		t.Errorf("dev model: %v", err)
	}
	loaded, err := config.Load(pl.configPath(pl.gateway))
	if err != nil {
		t.Fatal(err)
	}
	if err := loaded.ValidateGateway(); err != nil || loaded.Gateway.AdminListen != gw.Gateway.AdminListen {
		t.Errorf("gateway config does not round-trip: %v", err)
	}
	for _, p := range pl.workers {
		loaded, err := config.Load(pl.configPath(p))
		if err != nil {
			t.Fatal(err)
		}
		if err := loaded.ValidateWorker(); err != nil || loaded.Worker.ID != p.cfg.Worker.ID {
			t.Errorf("%s config does not round-trip: %v", p.name, err)
		}
	}

	// A second start reuses the token and the model.
	token, _ := os.ReadFile(pl.adminTokenFile)
	again := planIn(t, upOptions{stateDir: pl.stateDir, single: true}, noEnv)
	token2, _ := os.ReadFile(again.adminTokenFile)
	if string(token) != string(token2) {
		t.Error("the admin token changed between starts")
	}
	if len(again.workers) != 1 || again.workers[0].cfg.Worker.Role != config.RoleBoth {
		t.Errorf("--single: workers %+v", again.workers)
	}
}

// TestPlanUpPinned: addresses and sizes the config file or environment
// sets are kept (worker addresses for the decode worker), the rest is
// chosen by `warden up`; --listen and --model win over the config.
func TestPlanUpPinned(t *testing.T) {
	dir := t.TempDir()
	ports := &portPicker{}
	admin, _ := ports.pick("127.0.0.1")
	decode, _ := ports.pick("127.0.0.1")
	ports.release()
	cfgFile := filepath.Join(dir, "up.yaml")
	yaml := "gateway:\n  admin_listen: \"" + admin + "\"\n" +
		"models:\n  - name: mine\n    context_length: 1024\n" +
		"worker:\n  model: mine\n  listen: \"" + decode + "\"\n  kv:\n    memory_bytes: 64MiB\n"
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WARDEN_GATEWAY_REGISTRY_LISTEN", "127.0.0.1:0")
	pl := planIn(t, upOptions{configPath: cfgFile, listen: "127.0.0.1:0"}, os.LookupEnv)
	gw := pl.gateway.cfg.Gateway
	if gw.AdminListen != admin {
		t.Errorf("admin_listen %s, want the pinned %s", gw.AdminListen, admin)
	}
	if strings.HasSuffix(gw.Listen, ":0") || strings.HasSuffix(gw.RegistryListen, ":0") || gw.RegistryListen == "127.0.0.1:8445" {
		t.Errorf("port 0 was not replaced by a free port: %s, %s", gw.Listen, gw.RegistryListen)
	}
	pre, dec := pl.workers[0].cfg.Worker, pl.workers[1].cfg.Worker
	if dec.Listen != decode || pre.Listen == decode {
		t.Errorf("worker.listen: decode %s, prefill %s; want the pinned %s on decode only", dec.Listen, pre.Listen, decode)
	}
	if pl.model != "mine" || dec.KV.MemoryBytes != 64<<20 {
		t.Errorf("model %s, KV %v; want the config's", pl.model, dec.KV.MemoryBytes)
	}
}

// TestPlanUpModelDir: a model directory not listed in the config is served
// under its directory's name with the context of its config.json.
func TestPlanUpModelDir(t *testing.T) {
	first := planIn(t, upOptions{}, noEnv) // generates a model to point at
	dir := filepath.Join(t.TempDir(), "Llama-3.2-1B")
	if err := os.CopyFS(dir, os.DirFS(first.workers[0].cfg.Worker.ModelDir)); err != nil {
		t.Fatal(err)
	}
	pl := planIn(t, upOptions{modelDir: dir}, noEnv)
	if pl.model != "Llama-3.2-1B" {
		t.Errorf("model %q", pl.model)
	}
	found := false
	for _, m := range pl.gateway.cfg.Models {
		found = found || (m.Name == pl.model && m.ContextLength == 16384)
	}
	if !found {
		t.Errorf("models %+v do not list %s with its 16384 positions", pl.gateway.cfg.Models, pl.model)
	}
}

// TestChildEnv: config variables stay with `warden up` (they are in the
// written configs); everything else reaches the children.
func TestChildEnv(t *testing.T) {
	t.Setenv("WARDEN_WORKER_LISTEN", "127.0.0.1:1")
	t.Setenv("WARDEN_ADMIN_TOKEN", "kept")
	env := childEnv()
	if slices.Contains(env, "WARDEN_WORKER_LISTEN=127.0.0.1:1") || !slices.Contains(env, "WARDEN_ADMIN_TOKEN=kept") {
		t.Errorf("child environment: %v", env)
	}
}

// TestCrashExcerpt: a Go panic is shown from its first line, other logs by
// their last lines.
func TestCrashExcerpt(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	panicked := write("panic.log", "a\nb\npanic: boom\n\ngoroutine 1 [running]:\nmain.main()\nc\n")
	if got := crashExcerpt(panicked, 3); !slices.Equal(got, []string{"panic: boom", "", "goroutine 1 [running]:"}) {
		t.Errorf("panic excerpt %q", got)
	}
	plain := write("plain.log", "1\n2\n3\n4\n")
	if got := crashExcerpt(plain, 2); !slices.Equal(got, []string{"3", "4"}) {
		t.Errorf("tail %q", got)
	}
	if got := crashExcerpt(filepath.Join(dir, "missing"), 2); got != nil {
		t.Errorf("missing log: %q", got)
	}
}

// TestShellQuote: paths print as they are unless a shell needs quotes.
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/.warden/pki/ca.pem": "/tmp/.warden/pki/ca.pem",
		"/tmp/my dir/ca.pem":      "'/tmp/my dir/ca.pem'",
		"it's":                    `'it'\''s'`,
		"":                        "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestLockStateDir: the state directory has one owner at a time; a second
// lock names the holder's pid and writes nothing, and the lock is free
// again once released.
func TestLockStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	unlock, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(dir, upLockFile)
	held, err := os.ReadFile(lockPath)
	if err != nil || strings.TrimSpace(string(held)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q (%v), want this pid %d", held, err, os.Getpid())
	}
	_, err = lockStateDir(dir)
	if !errors.Is(err, errStateDirBusy) || !strings.Contains(err.Error(), fmt.Sprintf("another warden up (pid %d) uses %s", os.Getpid(), dir)) {
		t.Fatalf("second lock: %v, want %v naming pid %d and %s", err, errStateDirBusy, os.Getpid(), dir)
	}
	if again, _ := os.ReadFile(lockPath); string(again) != string(held) {
		t.Errorf("the refused lock rewrote the lock file: %q, was %q", again, held)
	}
	unlock()
	unlock2, err := lockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}

// TestVersion: `warden --version` and `warden version` print the version,
// commit, Go version and build tags.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out, errOut strings.Builder
		if code := Main(t.Context(), args, &out, &errOut); code != 0 {
			t.Fatalf("warden %v: exit %d: %s", args, code, errOut.String())
		}
		for _, want := range []string{"warden ", "\n  commit ", "\n  commit date ", "\n  go          " + runtime.Version(), "\n  build tags  "} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("warden %v printed %q, missing %q", args, out.String(), want)
			}
		}
	}
}

// TestHelpEverywhere: -h on every command at every level (top-level
// commands, groups, and each admin, model and bench subcommand) prints a
// usage and exits 0.
func TestHelpEverywhere(t *testing.T) {
	var paths [][]string
	for _, c := range commands() {
		paths = append(paths, []string{c.name})
	}
	groups := map[string]bool{}
	for _, c := range adminCommands() {
		words := strings.Fields(c.path)
		paths = append(paths, append([]string{"admin"}, words...))
		if len(words) > 1 && !groups[words[0]] {
			groups[words[0]] = true
			paths = append(paths, []string{"admin", words[0]})
		}
	}
	for _, sub := range []string{"init", "export-gguf"} {
		paths = append(paths, []string{"model", sub})
	}
	paths = append(paths, []string{"config", "print"})
	for _, sub := range []string{"engine", "gateway", "tenants", "pd", "prefix", "fleet", "serve", "lora"} {
		paths = append(paths, []string{"bench", sub})
	}
	for _, p := range paths {
		var out, errOut strings.Builder
		args := append(slices.Clone(p), "-h")
		if code := Main(t.Context(), args, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "usage: warden") {
			t.Errorf("warden %s: exit %d, want 0 with a usage:\n%s", strings.Join(args, " "), code, errOut.String())
		}
	}
}

// TestConfigPrint: `warden config print` shows the file's values over the
// defaults, with the admin token redacted.
func TestConfigPrint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("gateway:\n  listen: \"127.0.0.1:9999\"\n  admin_token: \"s3cret-token-value\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	if code := Main(t.Context(), []string{"config", "print", "--config", path}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "127.0.0.1:9999") || strings.Contains(out.String(), "s3cret-token-value") || !strings.Contains(out.String(), "REDACTED") {
		t.Errorf("config print:\n%s", out.String())
	}
}

// TestServedModelOnly: the gateway of `warden up` advertises only the
// model its workers serve (it is ready only when every advertised model
// has workers); a model the config file listed is reported when left out.
func TestServedModelOnly(t *testing.T) {
	for _, pinned := range []bool{false, true} {
		cfg := config.Default()
		cfg.Worker.Model = "llama"
		cfg.Models = append(cfg.Models, config.Model{Name: "llama", ContextLength: 4096})
		var logged []string
		servedModelOnly(cfg, pinned, func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) })
		if len(cfg.Models) != 1 || cfg.Models[0].Name != "llama" {
			t.Errorf("pinned %v: models %+v, want llama alone", pinned, cfg.Models)
		}
		if wantLog := pinned; (len(logged) == 1 && strings.Contains(logged[0], "not serving tiny")) != wantLog {
			t.Errorf("pinned %v: logged %q", pinned, logged)
		}
	}
}
