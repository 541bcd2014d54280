package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/warden-ai/warden/config"
)

// pins tells which configuration keys the user set, in the config file or
// as WARDEN_* variables: those are kept as they are, everything else that
// `warden up` needs is chosen by it.
type pins struct {
	file    map[string]any
	environ func(string) (string, bool)
}

// loadPins reads the keys present in the config file at path ("" = none).
func loadPins(path string, lookupEnv func(string) (string, bool)) (pins, error) {
	p := pins{environ: lookupEnv}
	if path == "" {
		return p, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("config: %w", err)
	}
	if err := yaml.Unmarshal(data, &p.file); err != nil {
		return p, fmt.Errorf("config %s: %w", path, err)
	}
	return p, nil
}

// set reports whether the key at path was given.
func (p pins) set(path ...string) bool {
	_, ok := p.value(path...)
	return ok
}

// value returns the value given for the key at path: the environment's
// (a string), else the file's.
func (p pins) value(path ...string) (any, bool) {
	if p.environ != nil {
		if v, ok := p.environ(config.EnvName(path...)); ok {
			return v, true
		}
	}
	var node any = p.file
	for _, k := range path {
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[k]; !ok {
			return nil, false
		}
	}
	return node, node != nil
}

// upKeySecretEnv is how a generated API-key secret reaches config.Load.
var upKeySecretEnv = config.EnvName("tenants", "key_secret_file")

// keySecretFor generates the API-key HMAC secret that a Redis tenant
// store needs when the config names none, and returns the variable that
// points config.Load at it ("" when none is needed). Load validates, and
// would refuse such a config before planUp could fill the secret in.
func keySecretFor(o upOptions, lookupEnv func(string) (string, bool)) (name, value string, err error) {
	path := o.configPath
	if path != "" {
		if path, err = filepath.Abs(path); err != nil {
			return "", "", err
		}
	}
	pn, err := loadPins(path, lookupEnv)
	if err != nil {
		return "", "", err
	}
	if store, _ := pn.value("tenants", "store"); store != string(config.StoreRedis) || pn.set("tenants", "key_secret_file") {
		return "", "", nil
	}
	dir, err := filepath.Abs(o.stateDir)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("state directory: %w", err)
	}
	secret, err := ensureSecretFile(filepath.Join(dir, upKeySecret))
	return upKeySecretEnv, secret, err
}
