package e2e

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/test/harness"
)

// TestBusyPort: a process whose listen address is taken exits with status
// 1 and an error naming the setting, not a crash.
func TestBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	cases := []struct {
		name, setting string
		opts          harness.Options
		process       func(c *harness.Cluster) *harness.Process
	}{
		{"gateway admin", "gateway.admin_listen",
			harness.Options{EditGateway: func(_ int, cfg *config.Config) { cfg.Gateway.AdminListen = busy }},
			func(c *harness.Cluster) *harness.Process { return c.Gateway().Process }},
		{"gateway API", "gateway.listen",
			harness.Options{EditGateway: func(_ int, cfg *config.Config) { cfg.Gateway.Listen = busy }},
			func(c *harness.Cluster) *harness.Process { return c.Gateway().Process }},
		{"worker control", "worker.listen",
			harness.Options{Workers: []harness.WorkerSpec{{Role: config.RoleBoth, Edit: func(cfg *config.Config) { cfg.Worker.Listen = busy }}}},
			func(c *harness.Cluster) *harness.Process { return c.Workers[0].Process }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := harness.New(t, env, tc.opts)
			p := tc.process(c)
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(harness.WaitTimeout):
				t.Fatalf("%s still runs on a busy port", p.Name)
			}
			log := p.Log()
			if strings.Contains(log, "panic:") {
				t.Errorf("%s crashed instead of reporting the busy port:\n%s", p.Name, p.LogTail(20))
			}
			if code := exitCode(p.ExitErr()); code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			if !strings.Contains(log, tc.setting) || !strings.Contains(log, "address already in use") {
				t.Errorf("the error does not name %s and the cause:\n%s", tc.setting, p.LogTail(5))
			}
		})
	}
}
