// Package prometheus_test checks the monitoring assets in deploy/: the
// alert rules (promtool check rules, and promtool test rules against
// alerts_test.yml), the example scrape configuration (promtool check
// config), and the Grafana dashboard (valid JSON whose every query parses
// as PromQL). Every warden_ metric the rules and dashboard use must be
// documented in docs/operations.md, which lists what the processes export
// (the gateway and worker tests check that side).
package prometheus_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/obs/obstest"
)

// promtool runs promtool in this directory and fails the test with its
// output if it fails.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(obstest.Promtool(t), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestAlertRules(t *testing.T) {
	promtool(t, "check", "rules", "alerts.yml")
	promtool(t, "test", "rules", "alerts_test.yml")
	checkDocumented(t, "alerts.yml")
}

func TestScrapeConfig(t *testing.T) {
	promtool(t, "check", "config", "prometheus.yml")
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	UID    string `json:"uid"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaVars stand in for the dashboard's variables when its queries are
// parsed by Prometheus' own parser.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$model", ".*", "$tenant", ".*")

func TestDashboard(t *testing.T) {
	path := filepath.Join("..", "grafana", "warden.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no uid or no panels", path)
	}
	// promtool parses each query as a recording rule's expression.
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			n++
			expr, _ := json.Marshal(grafanaVars.Replace(tg.Expr)) // a JSON string is a YAML string
			fmt.Fprintf(&rules, "      - record: dashboard:query%d\n        expr: %s\n", n, expr)
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", file)
	checkDocumented(t, path)
}

var metricRE = regexp.MustCompile(`warden_[a-z0-9_]+`)

// checkDocumented fails for every warden_ metric file names that the
// operations guide does not (histogram series by their family name).
func checkDocumented(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(obstest.RepoRoot(t), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range metricRE.FindAllString(string(b), -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			m = strings.TrimSuffix(m, suffix)
		}
		if seen[m] {
			continue
		}
		seen[m] = true
		if !strings.Contains(string(doc), "`"+m+"`") {
			t.Errorf("%s uses %s, which docs/operations.md does not document", file, m)
		}
	}
}
