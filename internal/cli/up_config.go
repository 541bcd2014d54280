package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/worker/model"
)

// Files and folders of `warden up`'s state directory.
const (
	upPKIDir        = "pki"
	upModelDir      = "model"
	upLogDir        = "logs"
	upAdminToken    = "admin-token"
	upKeySecret     = "key-secret"
	upClusterSecret = "cluster-secret"
	upGatewayConfig = "gateway.yaml"
)

// Defaults of `warden up` that differ from the config defaults.
const (
	upDefaultListen = "127.0.0.1:8443"
	// upDefaultKV is each worker's KV pool when neither the flags nor the
	// config size it: small enough that two instances fit side by side,
	// and far more than the dev model's context needs.
	upDefaultKV = 256 << 20
)

// upOptions are the flags of `warden up`.
type upOptions struct {
	stateDir   string
	listen     string // "" = from the config, else upDefaultListen
	modelDir   string
	model      string
	configPath string
	transfer   string // "" = from the config
	single     bool
	kvMemory   string // "" = from the config, else upDefaultKV
	threads    int    // 0 = from the config
}

// upProcess is one child process `warden up` runs.
type upProcess struct {
	// name is what messages call it: "gateway", "prefill worker", ...
	name string
	// file is the base name of its config and log files.
	file string
	cfg  *config.Config
}

// upPlan is everything `warden up` decided before starting processes.
type upPlan struct {
	stateDir string
	gateway  upProcess
	workers  []upProcess
	model    string
	// apiURL and adminURL are the gateway's base URLs, with a host to dial.
	apiURL, adminURL string
	// caFile is the dev CA that signs the API certificate; empty when the
	// config brings its own certificate (or serves plain HTTP).
	caFile         string
	adminTokenFile string
}

// configPath returns where p's config file is written.
func (pl *upPlan) configPath(p upProcess) string {
	return filepath.Join(pl.stateDir, p.file+".yaml")
}

// logPath returns where p's output goes.
func (pl *upPlan) logPath(p upProcess) string {
	return filepath.Join(pl.stateDir, upLogDir, p.file+".log")
}

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

// portPicker hands out free loopback ports. It keeps every port it picked
// bound until release, so that no two picks collide; the processes that
// use them bind them right after release.
type portPicker struct {
	held []net.Listener
}

// pick returns host:port with a port that is free on host now.
func (pp *portPicker) pick(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	pp.held = append(pp.held, ln)
	return ln.Addr().String(), nil
}

// resolve returns addr when it is pinned with a port, and otherwise a free
// port: on addr's host when addr names one, else on loopback.
func (pp *portPicker) resolve(addr string, pinned bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if pinned && err == nil && port != "0" {
		return addr, nil
	}
	if !pinned || err != nil || host == "" {
		host = "127.0.0.1"
	}
	return pp.pick(host)
}

// release unbinds every picked port.
func (pp *portPicker) release() {
	for _, ln := range pp.held {
		_ = ln.Close()
	}
	pp.held = nil
}

// dialAddr turns a listen address into one to dial: a wildcard host
// becomes loopback.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port)
}

// modelNameChars are the characters config allows in a model name.
var modelNameChars = regexp.MustCompile(`[^A-Za-z0-9._:/-]`)

// planUp loads the configuration and decides every file, port and
// credential of the processes to run. It writes the state directory (PKI,
// dev model, tokens) but starts nothing. log reports slow steps.
func planUp(o upOptions, lookupEnv func(string) (string, bool), log func(format string, args ...any)) (pl *upPlan, err error) {
	var cfgPath string
	if o.configPath != "" {
		if cfgPath, err = filepath.Abs(o.configPath); err != nil {
			return nil, err
		}
	}
	pn, err := loadPins(cfgPath, lookupEnv)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	if o.transfer != "" {
		cfg.Worker.Transfer.Backend = config.TransferBackend(o.transfer)
		if b := cfg.Worker.Transfer.Backend; b != config.TransferTCP && b != config.TransferSHM {
			return nil, fmt.Errorf("--transfer: want tcp or shm, got %q", o.transfer)
		}
	}
	stateDir, err := filepath.Abs(o.stateDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(stateDir, upLogDir), 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	pl = &upPlan{stateDir: stateDir}

	var pp portPicker
	defer pp.release()
	gw := &cfg.Gateway
	if o.listen != "" {
		gw.Listen = o.listen
	} else if !pn.set("gateway", "listen") {
		gw.Listen = upDefaultListen
	}
	if _, port, err := net.SplitHostPort(gw.Listen); err != nil {
		return nil, fmt.Errorf("--listen %q: %w", gw.Listen, err)
	} else if port == "0" {
		host, _, _ := net.SplitHostPort(gw.Listen)
		if gw.Listen, err = pp.pick(host); err != nil {
			return nil, err
		}
	}
	if gw.AdminListen, err = pp.resolve(gw.AdminListen, pn.set("gateway", "admin_listen")); err != nil {
		return nil, err
	}
	if gw.RegistryListen, err = pp.resolve(gw.RegistryListen, pn.set("gateway", "registry_listen")); err != nil {
		return nil, err
	}

	// The API certificate and the cluster credentials: the config's own,
	// or the dev PKI.
	var pki tlsutil.PKI
	devCluster := cfg.Cluster.CAFile == "" && !cfg.Cluster.InsecurePlaintext
	if (!gw.TLS.Plaintext && gw.TLS.CertFile == "") || devCluster {
		host, _, _ := net.SplitHostPort(gw.Listen)
		var hosts []string
		if ip := net.ParseIP(host); host != "" && host != "localhost" && (ip == nil || !ip.IsUnspecified()) {
			hosts = append(hosts, host)
		}
		if pki, err = tlsutil.EnsureDevPKI(filepath.Join(stateDir, upPKIDir), hosts); err != nil {
			return nil, fmt.Errorf("dev PKI: %w", err)
		}
	}
	if !gw.TLS.Plaintext && gw.TLS.CertFile == "" {
		gw.TLS.CertFile, gw.TLS.KeyFile = pki.ServerCert, pki.ServerKey
		pl.caFile = pki.CACert
	}
	if cfg.Cluster.Auth == config.ClusterSharedSecret && cfg.Cluster.SharedSecretFile == "" {
		if cfg.Cluster.SharedSecretFile, err = ensureSecretFile(filepath.Join(stateDir, upClusterSecret)); err != nil {
			return nil, err
		}
	}

	// The admin token: the config's, or one kept in the state directory.
	switch {
	case gw.AdminTokenFile != "":
		pl.adminTokenFile = gw.AdminTokenFile
	case gw.AdminToken != "":
		pl.adminTokenFile = filepath.Join(stateDir, upAdminToken)
		if err := writeSecret(pl.adminTokenFile, gw.AdminToken); err != nil {
			return nil, err
		}
		gw.AdminToken = ""
	default:
		if pl.adminTokenFile, err = ensureSecretFile(filepath.Join(stateDir, upAdminToken)); err != nil {
			return nil, err
		}
	}
	gw.AdminTokenFile = pl.adminTokenFile

	// The model: --model-dir, worker.model_dir, or the dev model.
	w := &cfg.Worker
	switch {
	case o.modelDir != "":
		if w.ModelDir, err = filepath.Abs(o.modelDir); err != nil {
			return nil, err
		}
	case w.ModelDir == "":
		w.ModelDir = filepath.Join(stateDir, upModelDir)
		if err := ensureDevModel(w.ModelDir, log); err != nil {
			return nil, err
		}
	}
	switch {
	case o.model != "":
		w.Model = o.model
	case !pn.set("worker", "model") && o.modelDir != "":
		w.Model = modelNameChars.ReplaceAllString(filepath.Base(w.ModelDir), "_")
	}
	if err := ensureModelListed(cfg, w.ModelDir); err != nil {
		return nil, err
	}
	pl.model = w.Model
	if o.kvMemory != "" {
		if w.KV.MemoryBytes, err = config.ParseByteSize(o.kvMemory); err != nil {
			return nil, fmt.Errorf("--kv-memory: %w", err)
		}
	} else if !pn.set("worker", "kv", "memory_bytes") && !pn.set("worker", "kv", "memory_fraction") {
		w.KV.MemoryBytes = upDefaultKV
	}
	if o.threads > 0 {
		w.Threads = o.threads
	}
	w.Gateways = []string{dialAddr(gw.RegistryListen)}

	pl.gateway = upProcess{name: "gateway", file: "gateway", cfg: cfg}
	var workerPKI *tlsutil.PKI
	if devCluster {
		setCluster(cfg, pki, tlsutil.PeerGateway)
		workerPKI = &pki
	}
	roles := []config.Role{config.RolePrefill, config.RoleDecode}
	if o.single {
		roles = []config.Role{config.RoleBoth}
	}
	for _, role := range roles {
		wc, err := workerConfig(cfg, role, pn, &pp, workerPKI)
		if err != nil {
			return nil, err
		}
		pl.workers = append(pl.workers, upProcess{name: string(role) + " worker", file: "worker-" + string(role), cfg: wc})
	}

	scheme := "https"
	if gw.TLS.Plaintext {
		scheme = "http"
	}
	pl.apiURL = scheme + "://" + dialAddr(gw.Listen)
	pl.adminURL = scheme + "://" + dialAddr(gw.AdminListen)
	if err := pl.gateway.cfg.ValidateGateway(); err != nil {
		return nil, err
	}
	for _, p := range pl.workers {
		if err := p.cfg.ValidateWorker(); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return pl, nil
}

// workerConfig derives a worker's configuration from the shared one.
// Worker addresses pinned in the config go to the decode (or both)
// worker; the prefill worker, and anything not pinned, gets free ports.
// A non-nil pki gives the worker the dev PKI's cluster identity.
func workerConfig(shared *config.Config, role config.Role, pn pins, pp *portPicker, pki *tlsutil.PKI) (*config.Config, error) {
	cfg := *shared
	cfg.Models = append([]config.Model(nil), shared.Models...)
	cfg.Worker.Gateways = append([]string(nil), shared.Worker.Gateways...)
	w := &cfg.Worker
	w.Role = role
	keep := role != config.RolePrefill
	var err error
	if w.Listen, err = pp.resolve(w.Listen, keep && pn.set("worker", "listen")); err != nil {
		return nil, err
	}
	if w.Transfer.Listen, err = pp.resolve(w.Transfer.Listen, keep && pn.set("worker", "transfer", "listen")); err != nil {
		return nil, err
	}
	if !keep || !pn.set("worker", "advertise_addr") {
		w.AdvertiseAddr = ""
	}
	if !keep || !pn.set("worker", "transfer", "advertise_addr") {
		w.Transfer.AdvertiseAddr = ""
	}
	if !keep || !pn.set("worker", "id") {
		_, port, _ := net.SplitHostPort(w.Listen)
		w.ID = string(role) + "-" + port
	}
	// A metrics listener pinned in the config is the gateway's; each
	// worker gets its own.
	if cfg.Observability.Metrics.Listen, err = pp.pick("127.0.0.1"); err != nil {
		return nil, err
	}
	if pki != nil {
		setCluster(&cfg, *pki, tlsutil.PeerWorker)
	}
	return &cfg, nil
}

// setCluster gives cfg the dev PKI's cluster identity peer.
func setCluster(cfg *config.Config, pki tlsutil.PKI, peer string) {
	c := &cfg.Cluster
	c.CAFile = pki.CACert
	if peer == tlsutil.PeerGateway {
		c.CertFile, c.KeyFile = pki.GatewayCert, pki.GatewayKey
	} else {
		c.CertFile, c.KeyFile = pki.WorkerCert, pki.WorkerKey
	}
}

// ensureDevModel writes the tiny preset into dir unless a model is there.
func ensureDevModel(dir string, log func(string, ...any)) error {
	if _, err := os.Stat(filepath.Join(dir, model.ConfigFile)); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dev model: %w", err)
	}
	log("generating the dev model (preset %s) in %s", model.PresetTiny, dir)
	if err := model.Init(dir, model.PresetTiny, 1, model.F32); err != nil {
		return fmt.Errorf("dev model: %w", err)
	}
	return nil
}

// ensureModelListed adds the served model to cfg.Models when the config
// does not list it, with the context window of its config.json (the KV
// pools may clamp it, I2).
func ensureModelListed(cfg *config.Config, dir string) error {
	for _, m := range cfg.Models {
		if m.Name == cfg.Worker.Model {
			return nil
		}
	}
	mc, err := model.LoadConfig(dir)
	if err != nil {
		return fmt.Errorf("model directory %s: %w", dir, err)
	}
	cfg.Models = append(cfg.Models, config.Model{
		Name: cfg.Worker.Model, ContextLength: mc.MaxPositionEmbeddings, ContextPolicy: config.ContextClamp,
	})
	return nil
}

// ensureSecretFile returns path after creating it, when missing, with a
// random secret (0600).
func ensureSecretFile(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		return path, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	return path, writeSecret(path, hex.EncodeToString(b[:]))
}

// writeSecret writes s to path, readable by the owner only.
func writeSecret(path, s string) error {
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return err
	}
	return os.Chmod(path, 0o600) // an existing file keeps its mode otherwise
}

// writeConfigs writes every process's configuration file (0600: it may
// name secrets).
func (pl *upPlan) writeConfigs() error {
	for _, p := range append([]upProcess{pl.gateway}, pl.workers...) {
		data, err := yaml.Marshal(p.cfg)
		if err != nil {
			return fmt.Errorf("%s config: %w", p.name, err)
		}
		header := "# Written by `warden up` for its " + p.name + "; rewritten at every start.\n"
		if err := os.WriteFile(pl.configPath(p), append([]byte(header), data...), 0o600); err != nil {
			return err
		}
	}
	return nil
}
