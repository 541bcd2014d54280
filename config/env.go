package config

import (
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts every configuration environment variable.
const EnvPrefix = "WARDEN_"

// envField is one field settable from the environment.
type envField struct {
	value reflect.Value
	typ   reflect.Type
}

// envFields maps each environment variable name to its field in c.
func (c *Config) envFields() map[string]envField {
	out := make(map[string]envField)
	forEachField(reflect.ValueOf(c).Elem(), nil, func(path []string, f reflect.StructField, v reflect.Value) {
		out[EnvName(path...)] = envField{value: v, typ: f.Type}
	})
	return out
}

// EnvName returns the environment variable for a YAML key path:
// EnvPrefix followed by the keys upper-cased and joined with "_", e.g.
// EnvName("tenants", "redis", "addr") == "WARDEN_TENANTS_REDIS_ADDR".
func EnvName(path ...string) string {
	return EnvPrefix + strings.ToUpper(strings.Join(path, "_"))
}

// ApplyEnv overrides fields from environ (os.Environ's "NAME=value" form).
//
// The rule: every scalar field, and worker.gateways, can be set as
// EnvName(path), WARDEN_ plus its YAML path upper-cased with dots
// replaced by "_" (WARDEN_GATEWAY_LISTEN, WARDEN_WORKER_KV_PAGE_TOKENS,
// WARDEN_OBSERVABILITY_TRACING_SAMPLE_RATIO). Values are parsed as in
// YAML (durations "30s", byte sizes "512MiB", booleans true/false);
// string fields take the value verbatim, including the empty string.
// worker.gateways takes a comma-separated list. models and
// observability.tracing.headers are file-only.
//
// A variable that starts with WARDEN_ and a section name (GATEWAY_,
// CLUSTER_, TENANTS_, MODELS_, WORKER_, OBSERVABILITY_) but names no
// field is an error, so that a typo is not silently ignored; other
// WARDEN_ variables are left to the CLI. Every problem is reported at
// once as a *ValidationError whose paths are the variable names.
func (c *Config) ApplyEnv(environ []string) error {
	fields := c.envFields()
	var sections []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		sections = append(sections, EnvName(yamlName(f))+"_")
	}
	var problems []Problem
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		f, known := fields[name]
		if !known {
			for _, s := range sections {
				if strings.HasPrefix(name, s) {
					problems = append(problems, Problem{Path: name, Reason: "unknown configuration variable" + suggest(name, keys(fields))})
					break
				}
			}
			continue
		}
		if err := setFromEnv(f, val); err != nil {
			problems = append(problems, Problem{Path: name, Reason: err.Error()})
		}
	}
	if len(problems) > 0 {
		return &ValidationError{Problems: problems}
	}
	return nil
}

// setFromEnv parses val with the same rules as a YAML scalar of f's type.
func setFromEnv(f envField, val string) error {
	if f.typ.Kind() == reflect.Slice {
		var list []string
		for _, s := range strings.Split(val, ",") {
			if s = strings.TrimSpace(s); s != "" {
				list = append(list, s)
			}
		}
		f.value.Set(reflect.ValueOf(list).Convert(f.typ))
		return nil
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: val}
	if f.typ.Kind() == reflect.String {
		n.Tag = "!!str" // verbatim: "null", "~" or "" stay what they say
	}
	if err := decodeScalar(n, f.typ); err != nil {
		return err
	}
	return n.Decode(f.value.Addr().Interface())
}
