package helm_test

import (
	"path/filepath"
	"testing"
)

func TestTmpNotes(t *testing.T) {
	for _, f := range []string{"default-values.yaml", "production-values.yaml", "gpu-values.yaml", "external-redis-values.yaml"} {
		_, _, notes := renderValues(t, filepath.Join(chart, "ci", f))
		t.Logf("==== %s\n%s", f, notes)
	}
	files, _, _ := renderChart(filepath.Join(chart, "ci", "default-values.yaml"))
	t.Logf("%s", files["warden/templates/tls-generated.yaml"][:1500])
}
