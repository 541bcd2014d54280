// Package obstest holds test helpers for warden's observability: linting
// a Prometheus exposition with promtool and checking that every warden_
// metric is documented in docs/operations.md.
package obstest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Promtool returns the path of promtool. Without it the test is skipped,
// unless the environment variable CI is "true" (scripts/test.sh installs
// it there), where its absence fails the test.
func Promtool(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("promtool not found (CI=true): install Debian's prometheus package: %v", err)
	}
	t.Skipf("promtool not found; install it (Debian: apt-get install prometheus) to lint metrics and alert rules: %v", err)
	return ""
}

// Exposition renders g's metrics in the Prometheus text format, as
// /metrics serves them.
func Exposition(t testing.TB, g prometheus.Gatherer) []byte {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatalf("encoding %s: %v", mf.GetName(), err)
		}
	}
	return b.Bytes()
}

// CheckMetrics runs `promtool check metrics` on an exposition and fails
// the test with promtool's findings (missing HELP, bad names or units,
// counters without _total, …).
func CheckMetrics(t testing.TB, what string, exposition []byte) {
	t.Helper()
	cmd := exec.Command(Promtool(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics rejects the %s metrics (%v):\n%s", what, err, out)
	}
}

// familyRE finds metric family names in an exposition's HELP lines.
var familyRE = regexp.MustCompile(`(?m)^# HELP (warden_[a-z0-9_]+) `)

// Families returns the warden_ metric families of an exposition, sorted.
func Families(exposition []byte) []string {
	var out []string
	for _, m := range familyRE.FindAllSubmatch(exposition, -1) {
		out = append(out, string(m[1]))
	}
	sort.Strings(out)
	return out
}

// CheckDocumented fails the test for every warden_ family of the
// exposition that docs/operations.md does not name.
func CheckDocumented(t testing.TB, what string, exposition []byte) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(RepoRoot(t), "docs", "operations.md"))
	if err != nil {
		t.Fatalf("reading the operations guide: %v", err)
	}
	for _, f := range Families(exposition) {
		if !strings.Contains(string(doc), "`"+f+"`") {
			t.Errorf("%s metric %s is not documented in docs/operations.md", what, f)
		}
	}
}

// RepoRoot is the module's root directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the source tree")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}
