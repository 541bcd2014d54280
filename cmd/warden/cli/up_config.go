package cli

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"

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
	// ports holds the picked ports until each process starts (start
	// releases them process by process); release frees what is left.
	ports *portPicker
}

// configPath returns where p's config file is written.
func (pl *upPlan) configPath(p upProcess) string {
	return filepath.Join(pl.stateDir, p.file+".yaml")
}

// logPath returns where p's output goes.
func (pl *upPlan) logPath(p upProcess) string {
	return filepath.Join(pl.stateDir, upLogDir, p.file+".log")
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
	pp := &portPicker{}
	pl = &upPlan{stateDir: stateDir, ports: pp}
	defer func() {
		if err != nil {
			pp.release()
		}
	}()
	gw := &cfg.Gateway
	// Ctrl-C stops the gateway first and kills it after upStopGrace: its
	// drain must end well before, so that what still runs is aborted
	// cleanly (every worker told).
	gw.DrainTimeout = min(gw.DrainTimeout, upStopGrace/2)
	// No load balancer watches its /readyz: Ctrl-C drains at once.
	gw.ShutdownDelay = 0
	if o.listen != "" {
		gw.Listen = o.listen
	} else if !pn.set("gateway", "listen") {
		gw.Listen = upDefaultListen
	}
	// Every pinned address is held first, so that no port picked below
	// is one of them. Worker addresses pinned in the config are the
	// decode (or both) worker's (workerConfig).
	host, port, err := net.SplitHostPort(gw.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", gw.Listen, err)
	}
	if port != "0" {
		if err := pp.hold(gw.Listen, "choose another address for the API with --listen HOST:PORT (port 0 picks a free one)"); err != nil {
			return nil, fmt.Errorf("the API address %w", err)
		}
	}
	for _, a := range []struct {
		addr, field string
		pinned      bool
	}{
		{cfg.Worker.Listen, "worker.listen", pn.set("worker", "listen")},
		{cfg.Worker.Transfer.Listen, "worker.transfer.listen", pn.set("worker", "transfer", "listen")},
	} {
		if a.pinned {
			if _, err := pp.resolve(a.addr, true, a.field); err != nil {
				return nil, err
			}
		}
	}
	pp.owner = "gateway" // the gateway's upProcess file
	if gw.AdminListen, err = pp.resolve(gw.AdminListen, pn.set("gateway", "admin_listen"), "gateway.admin_listen"); err != nil {
		return nil, err
	}
	if gw.RegistryListen, err = pp.resolve(gw.RegistryListen, pn.set("gateway", "registry_listen"), "gateway.registry_listen"); err != nil {
		return nil, err
	}
	if port == "0" {
		if gw.Listen, err = pp.pick(host); err != nil {
			return nil, err
		}
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
		w.Model = modelNameChars.ReplaceAllString(strings.TrimSuffix(filepath.Base(w.ModelDir), model.GGUFExt), "_")
	}
	if err := ensureModelListed(cfg, w.ModelDir); err != nil {
		return nil, err
	}
	servedModelOnly(cfg, pn.set("models"), log)
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
		pp.owner = "worker-" + string(role) // as its upProcess file below
		wc, err := workerConfig(cfg, role, pn, pp, workerPKI)
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
	if w.Listen, err = pp.resolve(w.Listen, keep && pn.set("worker", "listen"), "worker.listen"); err != nil {
		return nil, err
	}
	if w.Transfer.Listen, err = pp.resolve(w.Transfer.Listen, keep && pn.set("worker", "transfer", "listen"), "worker.transfer.listen"); err != nil {
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
