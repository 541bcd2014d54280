// Package compose_test checks docker-compose.yml against the configs in
// this directory: every long-running service has a health check that
// asks `warden health` for its /readyz (redis: redis-cli ping) on the
// port its config listens on, a stop_grace_period above the drain its
// config sets, and start order by depends_on conditions that cannot
// deadlock (the gateway is healthy only once the workers registered, so
// workers wait for it to start, not to be healthy).
package compose_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/warden-ai/warden/config"
)

// service is the part of a compose service the test reads.
type service struct {
	Command     []string `json:"command"`
	Healthcheck *struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
	StopGracePeriod string                       `json:"stop_grace_period"`
	DependsOn       map[string]map[string]string `json:"depends_on"`
}

func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]service `json:"services"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"redis", "init", "gateway", "prefill", "decode"} {
		if _, ok := file.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %s", name)
		}
	}
	for name, s := range file.Services {
		t.Run(name, func(t *testing.T) {
			for dep, cond := range s.DependsOn {
				want := "service_healthy"
				switch {
				case dep == "init":
					want = "service_completed_successfully"
				case dep == "gateway" && name != "gateway":
					want = "service_started" // its readiness waits for the workers
				}
				if cond["condition"] != want {
					t.Errorf("depends_on %s: condition %q, want %s", dep, cond["condition"], want)
				}
			}
			switch name {
			case "init":
				return
			case "redis":
				if s.Healthcheck == nil || !slices.Equal(s.Healthcheck.Test, []string{"CMD", "redis-cli", "ping"}) {
					t.Errorf("healthcheck %+v, want redis-cli ping", s.Healthcheck)
				}
				return
			}
			cfgFile := strings.TrimPrefix(s.Command[slices.Index(s.Command, "--config")+1], "/etc/warden/")
			cfg, err := config.Load(cfgFile)
			if err != nil {
				t.Fatal(err)
			}
			var url string
			var drain time.Duration
			if s.Command[0] == "gateway" {
				url = fmt.Sprintf("https://127.0.0.1:%s/readyz", port(t, cfg.Gateway.Listen))
				drain = cfg.Gateway.ShutdownDelay + cfg.Gateway.DrainTimeout
				if s.DependsOn["redis"]["condition"] != "service_healthy" {
					t.Errorf("the gateway does not wait for a healthy redis: %v", s.DependsOn)
				}
			} else {
				url = fmt.Sprintf("http://127.0.0.1:%s/readyz", port(t, cfg.Observability.Metrics.Listen))
				drain = cfg.Worker.DrainTimeout
			}
			if s.Healthcheck == nil || len(s.Healthcheck.Test) < 5 ||
				!slices.Equal(s.Healthcheck.Test[:4], []string{"CMD", "warden", "health", "--url"}) || s.Healthcheck.Test[4] != url {
				t.Errorf("healthcheck %+v, want CMD warden health --url %s", s.Healthcheck, url)
			}
			grace, err := time.ParseDuration(s.StopGracePeriod)
			if err != nil || grace <= drain+10*time.Second {
				t.Errorf("stop_grace_period %q, want more than the drain (%s) plus 10s for the shutdown", s.StopGracePeriod, drain)
			}
		})
	}
}

// port is the port of a host:port listen address.
func port(t *testing.T, addr string) string {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	if i < 0 || addr[i+1:] == "" || addr[i+1:] == "0" {
		t.Fatalf("listen address %q has no fixed port", addr)
	}
	return addr[i+1:]
}
