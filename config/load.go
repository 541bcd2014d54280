package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"

	"go.yaml.in/yaml/v3"
)

// defaultsYAML is the documented default configuration.
//
//go:embed defaults.yaml
var defaultsYAML []byte

// Default returns the built-in defaults (defaults.yaml in this package).
// They pass Validate.
func Default() *Config {
	cfg := &Config{}
	if err := decodeInto(cfg, defaultsYAML); err != nil {
		// defaults.yaml is compiled in and covered by tests; failing here
		// is a build defect, not bad input.
		panic("config: embedded defaults.yaml is invalid: " + err.Error())
	}
	cfg.normalize()
	return cfg
}

// Load reads the configuration for a process: the defaults, then the YAML
// file at path (none when path is ""), then WARDEN_* variables from the
// process environment (ApplyEnv). Relative file paths inside the file are
// resolved against the file's directory. The result has passed Validate;
// a standalone gateway or worker should also call ValidateGateway or
// ValidateWorker.
func Load(path string) (*Config, error) {
	return load(path, os.Environ())
}

func load(path string, environ []string) (*Config, error) {
	var data []byte
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	cfg, err := LoadBytes(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if path != "" {
		cfg.resolvePaths(filepath.Dir(path))
	}
	if err := cfg.ApplyEnv(environ); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		if path == "" {
			return nil, fmt.Errorf("config: %w", err)
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// LoadBytes merges one YAML document over the defaults. Empty input gives
// the defaults. It rejects unknown keys, duplicate keys, values of the
// wrong type and several documents, reporting every such problem (as a
// *ValidationError) with its field path and line. It neither reads the
// environment nor calls Validate.
func LoadBytes(data []byte) (*Config, error) {
	cfg := Default()
	if err := decodeInto(cfg, data); err != nil {
		return nil, err
	}
	cfg.normalize()
	return cfg, nil
}

// nodeBudget bounds how many YAML nodes one load may visit, counting every
// expansion of an alias, so that alias bombs fail fast instead of
// consuming memory and time.
const nodeBudget = 100_000

// decodeInto overlays one YAML document on cfg.
func decodeInto(cfg *Config, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty document: nothing to overlay
		}
		return fmt.Errorf("invalid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("invalid YAML: the file holds more than one document (---); put the whole configuration in one")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil
		}
		root = root.Content[0]
	}
	c := checker{budget: nodeBudget}
	c.check(root, reflect.TypeFor[Config](), "")
	if len(c.problems) > 0 {
		return &ValidationError{Problems: c.problems}
	}
	if err := root.Decode(cfg); err != nil {
		// The checker accepts only what decodes, so this is defensive.
		return fmt.Errorf("invalid configuration: %w", err)
	}
	return nil
}

// normalize fills defaults that live inside list elements, which the
// defaults file cannot provide.
func (c *Config) normalize() {
	for i := range c.Models {
		if c.Models[i].ContextPolicy == "" {
			c.Models[i].ContextPolicy = ContextClamp
		}
		if len(c.Models[i].Aliases) == 0 {
			c.Models[i].Aliases = nil // "aliases: []" is no aliases, as when left out
		}
	}
}

// resolvePaths makes every non-empty relative path field (tagged
// `warden:"path"`) relative to dir.
func (c *Config) resolvePaths(dir string) {
	forEachField(reflect.ValueOf(c).Elem(), nil, func(_ []string, f reflect.StructField, v reflect.Value) {
		if f.Tag.Get("warden") != "path" || v.String() == "" || filepath.IsAbs(v.String()) {
			return
		}
		v.SetString(filepath.Join(dir, v.String()))
	})
}

// Render returns the configuration as YAML, in the shape Load accepts,
// with secrets (gateway.admin_token, tracing header values) replaced by
// "REDACTED". It is what `warden config print` shows.
func (c *Config) Render() ([]byte, error) {
	out := *c
	out.Models = append([]Model(nil), c.Models...)
	out.Worker.Gateways = append([]string(nil), c.Worker.Gateways...)
	if out.Gateway.AdminToken != "" {
		out.Gateway.AdminToken = redacted
	}
	out.Observability.Tracing.Headers = make(map[string]string, len(c.Observability.Tracing.Headers))
	for k := range c.Observability.Tracing.Headers {
		out.Observability.Tracing.Headers[k] = redacted
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&out); err != nil {
		return nil, fmt.Errorf("config: render: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: render: %w", err)
	}
	return buf.Bytes(), nil
}

// redacted replaces secrets in Render's output.
const redacted = "REDACTED"

// forEachField calls fn for every scalar or list leaf of the struct v,
// with the YAML key path leading to it. It descends into nested structs
// (except ByteSize-like text types) and skips lists of structs and maps,
// whose elements have no fixed path.
func forEachField(v reflect.Value, path []string, fn func(path []string, f reflect.StructField, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		if name == "" {
			continue
		}
		p := append(path[:len(path):len(path)], name)
		fv := v.Field(i)
		switch {
		case f.Type.Kind() == reflect.Struct && !isLeafType(f.Type):
			forEachField(fv, p, fn)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() != reflect.String,
			f.Type.Kind() == reflect.Map:
			continue
		default:
			fn(p, f, fv)
		}
	}
}
