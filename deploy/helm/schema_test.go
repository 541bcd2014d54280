package helm_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// helmFails runs helm with args, which must fail, and returns its output.
func helmFails(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err == nil {
		t.Fatalf("helm %s succeeded, want an error:\n%s", strings.Join(args, " "), out.Bytes())
	}
	return out.String()
}

// TestSchemaRefusesMistakes: values.schema.json refuses a misspelt key at
// any depth and a value of the wrong kind, and the chart refuses to render
// without a source for its secrets, each with a message that names it.
func TestSchemaRefusesMistakes(t *testing.T) {
	defaults := filepath.Join(chart, "ci", "default-values.yaml")
	for _, tc := range []struct{ set, want string }{
		{"gateway.replica=5", "additional properties 'replica' not allowed"},
		{"worker.decode.replica=2", "additional properties 'replica' not allowed"},
		{"metrics.serviceMonitor.enable=true", "additional properties 'enable' not allowed"},
		{"networkpolicy.enabled=false", "additional properties 'networkpolicy' not allowed"},
		{"gateway.replicas=two", "/gateway/replicas"},
		{"worker.backend=tpu", "/worker/backend"},
		{"secrets.seed=short", "/secrets/seed"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			out := helmFails(t, "template", "rel", chart, "-f", defaults, "--set", tc.set)
			if !strings.Contains(out, tc.want) {
				t.Errorf("--set %s: %s\nwant %q", tc.set, out, tc.want)
			}
		})
	}
	out := helmFails(t, "template", "rel", chart)
	if !strings.Contains(out, "secrets.existingSecret") || !strings.Contains(out, "secrets.seed") {
		t.Errorf("rendering without secrets: %s\nwant the two ways to give them", out)
	}
}

// TestSchemaCoversEveryValue: every key of values.yaml, at every depth,
// is a property of values.schema.json, down to the values that are
// Kubernetes or warden objects passed through as they are (an object
// schema without properties); and every object of the schema refuses
// unknown keys except those.
func TestSchemaCoversEveryValue(t *testing.T) {
	var values map[string]any
	b, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if b, err = os.ReadFile(filepath.Join(chart, "values.schema.json")); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	defs, _ := schema["$defs"].(map[string]any)
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		if ref, ok := s["$ref"].(string); ok {
			s, _ = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		}
		props, hasProps := s["properties"].(map[string]any)
		m, isMap := v.(map[string]any)
		if !isMap || !hasProps {
			return // a scalar, a list, or an object passed through
		}
		if s["additionalProperties"] != false {
			t.Errorf("%s: the schema accepts unknown keys", path)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ps, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s.%s: in values.yaml, not in values.schema.json", path, k)
				continue
			}
			walk(path+"."+k, m[k], ps)
		}
	}
	walk("", values, schema)
}
