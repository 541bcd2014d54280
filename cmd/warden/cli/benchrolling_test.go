package cli

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/warden-ai/warden/config"
)

// TestBenchRollingNoHAProxy: a missing haproxy is a clear error before
// anything starts.
func TestBenchRollingNoHAProxy(t *testing.T) {
	var out, errOut strings.Builder
	code := Main(t.Context(), []string{"bench", "rolling", "--haproxy", filepath.Join(t.TempDir(), "haproxy"), "--state-dir", t.TempDir()}, &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "haproxy is not installed") || !strings.Contains(errOut.String(), "apt-get install haproxy") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

// TestPlanRollingFleet: two gateways on ports of their own sharing Redis
// and a key secret, two workers of each role with IDs and ports of their
// own, each registering with both gateways.
func TestPlanRollingFleet(t *testing.T) {
	dir := t.TempDir()
	f, err := planRollingFleet(upOptions{stateDir: dir, listen: "127.0.0.1:0", transfer: "shm", threads: 1}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.useRedis("127.0.0.1:6399"); err != nil {
		t.Fatal(err)
	}
	if len(f.gateways) != 2 || len(f.workers) != 4 {
		t.Fatalf("%d gateways, %d workers", len(f.gateways), len(f.workers))
	}
	addrs := map[string]string{}
	seen := func(what, addr string) {
		if prev, ok := addrs[addr]; ok {
			t.Errorf("%s and %s both on %s", prev, what, addr)
		}
		addrs[addr] = what
	}
	var registries []string
	for _, g := range f.gateways {
		gw := g.cfg.Gateway
		seen(g.name+" api", gw.Listen)
		seen(g.name+" admin", gw.AdminListen)
		seen(g.name+" registry", gw.RegistryListen)
		registries = append(registries, dialAddr(gw.RegistryListen))
		tn := g.cfg.Tenants
		if tn.Store != config.StoreRedis || tn.Redis.Addr != "127.0.0.1:6399" || tn.KeySecretFile != filepath.Join(dir, upKeySecret) ||
			tn.Redis.KeyPrefix != f.gateways[0].cfg.Tenants.Redis.KeyPrefix || gw.ShutdownDelay != benchShutdownDelay {
			t.Errorf("%s: tenants %+v, shutdown_delay %v", g.name, tn, gw.ShutdownDelay)
		}
	}
	roles := map[config.Role]int{}
	ids := map[string]bool{}
	for _, w := range f.workers {
		wc := w.cfg.Worker
		roles[wc.Role]++
		if ids[wc.ID] {
			t.Errorf("worker id %s twice", wc.ID)
		}
		ids[wc.ID] = true
		seen(wc.ID+" control", wc.Listen)
		seen(wc.ID+" transfer", wc.Transfer.Listen)
		if !slices.Equal(wc.Gateways, registries) || wc.Transfer.Backend != config.TransferSHM || wc.Threads != 1 {
			t.Errorf("%s: gateways %v (want %v), transfer %s, threads %d", wc.ID, wc.Gateways, registries, wc.Transfer.Backend, wc.Threads)
		}
		if err := w.cfg.ValidateWorker(); err != nil {
			t.Errorf("%s: %v", wc.ID, err)
		}
	}
	if roles[config.RolePrefill] != 2 || roles[config.RoleDecode] != 2 {
		t.Errorf("roles %v", roles)
	}
}
