package helm_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// renderFails renders the chart with a values file ("" for none) and
// --set values (renderChart), which must fail, and returns the error.
func renderFails(t *testing.T, file string, set ...string) string {
	t.Helper()
	if _, _, err := renderChart(file, set...); err != nil {
		return err.Error()
	}
	t.Fatalf("rendering with %q %v succeeded, want an error", file, set)
	return ""
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
			out := renderFails(t, defaults, tc.set)
			if !strings.Contains(out, tc.want) {
				t.Errorf("--set %s: %s\nwant %q", tc.set, out, tc.want)
			}
		})
	}
	out := renderFails(t, "")
	if !strings.Contains(out, "secrets.existingSecret") || !strings.Contains(out, "secrets.seed") {
		t.Errorf("rendering without secrets: %s\nwant the two ways to give them", out)
	}
}

// TestSchemaCoversEveryValue: every key of values.yaml, at every depth,
// is a property of values.schema.json, down to the values that are
// Kubernetes or warden objects passed through as they are (an object
// schema without properties); every object of the schema refuses unknown
// keys except those; and README.md documents every value.
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
	var leaves []string
	// leaf: path is documented as one value, its keys, if any, are not.
	var walk func(path string, v any, s map[string]any, leaf bool)
	walk = func(path string, v any, s map[string]any, leaf bool) {
		if ref, ok := s["$ref"].(string); ok {
			s, _ = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
			if !leaf {
				leaves = append(leaves, strings.TrimPrefix(path, "."))
			}
			leaf = true // a shared type (resources), documented as a whole
		}
		props, hasProps := s["properties"].(map[string]any)
		m, isMap := v.(map[string]any)
		if !isMap || !hasProps || len(m) == 0 {
			if !leaf {
				leaves = append(leaves, strings.TrimPrefix(path, "."))
			}
			return // a scalar, a list, an empty object, or an object passed through
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
			walk(path+"."+k, m[k], ps, leaf)
		}
	}
	walk("", values, schema, false)

	// README.md documents every value, by its path in code.
	readme, err := os.ReadFile(filepath.Join(chart, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leaves {
		if !bytes.Contains(readme, []byte("`"+l+"`")) {
			t.Errorf("README.md does not document `%s`", l)
		}
	}
	if len(leaves) < 80 {
		t.Errorf("found %d values; the walk is broken", len(leaves))
	}
}
