package harness

import (
	"cmp"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
)

// build writes every config file and creates the processes.
func (c *Cluster) build(o Options) error {
	n := c.env.next()
	tokenFile := filepath.Join(c.Dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(c.AdminToken+"\n"), 0o600); err != nil {
		return err
	}
	secretFile := filepath.Join(c.Dir, "key-secret")
	if err := os.WriteFile(secretFile, []byte(randomHex(32)+"\n"), 0o600); err != nil {
		return err
	}
	ports := &freePorts{}
	defer ports.release()
	pki := c.env.PKI
	var registries []string
	for i := range o.Gateways {
		cfg := config.Default()
		cfg.Models = append([]config.Model(nil), o.Models...)
		gw := &cfg.Gateway
		gw.Listen, gw.AdminListen, gw.RegistryListen = ports.take(), ports.take(), ports.take()
		gw.TLS.CertFile, gw.TLS.KeyFile = pki.ServerCert, pki.ServerKey
		gw.AdminTokenFile = tokenFile
		gw.HeartbeatTimeout = o.HeartbeatTimeout
		// Stop (SIGTERM) aborts the requests in flight at once; a test of
		// the delay or the drain sets them with EditGateway.
		gw.ShutdownDelay, gw.DrainTimeout = 0, 0
		cfg.Worker.HeartbeatInterval = o.HeartbeatTimeout / 4
		cfg.Cluster = config.Cluster{Auth: config.ClusterMTLS, CAFile: pki.CACert, CertFile: pki.GatewayCert, KeyFile: pki.GatewayKey}
		if o.Redis {
			cfg.Tenants.Store = config.StoreRedis
			cfg.Tenants.Redis.Addr = o.RedisAddr
			cfg.Tenants.Redis.Cluster = o.RedisCluster
			// A hash tag, as a Redis Cluster requires.
			cfg.Tenants.Redis.KeyPrefix = cmp.Or(o.redisPrefix, fmt.Sprintf("warden:{e2e-%s}:", randomHex(6)))
			cfg.Tenants.KeySecretFile = secretFile
		}
		if i > 0 && o.Redis {
			cfg.Tenants.Redis.KeyPrefix = c.Gateways[0].Config.Tenants.Redis.KeyPrefix
		}
		if o.EditGateway != nil {
			o.EditGateway(i, cfg)
		}
		if err := ports.err; err != nil {
			return err
		}
		g := &Gateway{Config: cfg, ConfigPath: filepath.Join(c.Dir, fmt.Sprintf("gateway-%d.yaml", i))}
		if err := writeConfig(g.ConfigPath, cfg, cfg.ValidateGateway); err != nil {
			return err
		}
		g.Process = c.env.NewProcess(fmt.Sprintf("gateway-%d", i), filepath.Join(c.Dir, fmt.Sprintf("gateway-%d.log", i)),
			"gateway", "--config", g.ConfigPath)
		g.APIURL = "https://" + gw.Listen
		g.AdminURL = "https://" + gw.AdminListen
		var err error
		if g.HTTP, err = httpClient(pki.CACert); err != nil {
			return err
		}
		g.HTTP.Transport = &errorScan{next: g.HTTP.Transport}
		if g.Admin, err = adminclient.New(adminclient.Config{URL: g.AdminURL, Token: c.AdminToken, Transport: g.HTTP.Transport}); err != nil {
			return err
		}
		c.Gateways = append(c.Gateways, g)
		registries = append(registries, gw.RegistryListen)
	}
	for i, spec := range o.Workers {
		if spec.Model == "" {
			spec.Model = ModelTiny
		}
		if spec.Transfer == "" {
			spec.Transfer = config.TransferTCP
		}
		dir := spec.ModelDir
		if dir == "" {
			var ok bool
			if dir, ok = c.env.Models[spec.Model]; !ok {
				return fmt.Errorf("harness: worker %d: no directory for model %q", i, spec.Model)
			}
		}
		cfg := config.Default()
		cfg.Models = append([]config.Model(nil), o.Models...)
		w := &cfg.Worker
		w.Role, w.Model, w.ModelDir, w.Threads = spec.Role, spec.Model, dir, 1
		w.Listen, w.Transfer.Listen = ports.take(), ports.take()
		w.ID = fmt.Sprintf("%s-%s-c%d-%d", spec.Role, spec.Model, n, i)
		w.Gateways = registries
		w.HeartbeatInterval = o.HeartbeatTimeout / 4
		// Stop (SIGTERM) aborts at once, as for gateways; a test of the
		// worker's drain sets worker.drain_timeout in its Edit.
		w.DrainTimeout = 0
		cfg.Gateway.HeartbeatTimeout = o.HeartbeatTimeout
		w.KV.MemoryBytes = DefaultKVBytes
		w.KV.PoisonOnReserve = true
		w.MaxBatch = 8
		w.Transfer.Backend = spec.Transfer
		w.Transfer.SHMDir = c.env.ShmDir
		cfg.Observability.Metrics.Listen = ports.take()
		cfg.Cluster = config.Cluster{Auth: config.ClusterMTLS, CAFile: pki.CACert, CertFile: pki.WorkerCert, KeyFile: pki.WorkerKey}
		if spec.Edit != nil {
			spec.Edit(cfg)
		}
		if err := ports.err; err != nil {
			return err
		}
		wk := &Worker{ID: w.ID, Role: w.Role, Model: w.Model, Config: cfg,
			ConfigPath: filepath.Join(c.Dir, w.ID+".yaml"), MetricsURL: "http://" + cfg.Observability.Metrics.Listen + "/metrics"}
		if err := writeConfig(wk.ConfigPath, cfg, cfg.ValidateWorker); err != nil {
			return err
		}
		wk.Process = c.env.NewProcess(w.ID, filepath.Join(c.Dir, w.ID+".log"), "worker", "--config", wk.ConfigPath)
		c.Workers = append(c.Workers, wk)
	}
	return nil
}

// writeConfig validates cfg and writes it as YAML.
func writeConfig(path string, cfg *config.Config, validate func() error) error {
	if err := validate(); err != nil {
		return fmt.Errorf("harness: %s: %w", filepath.Base(path), err)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// freePorts hands out loopback addresses with distinct free ports; the
// ports stay bound until release, just before the processes start.
type freePorts struct {
	held []net.Listener
	err  error
}

func (f *freePorts) take() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.err = err
		return "127.0.0.1:0"
	}
	f.held = append(f.held, ln)
	return ln.Addr().String()
}

func (f *freePorts) release() {
	for _, ln := range f.held {
		_ = ln.Close()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// httpClient returns a client trusting the PEM CA in caFile.
// HTTP1Client returns a client that trusts the cluster's CA and speaks
// HTTP/1.1 only (to see Connection headers, which HTTP/2 has not).
func (c *Cluster) HTTP1Client() (*http.Client, error) {
	hc, err := httpClient(c.env.PKI.CACert)
	if err != nil {
		return nil, err
	}
	tr := hc.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = false
	tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	return hc, nil
}

func httpClient(caFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("harness: no certificate in %s", caFile)
	}
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}}, nil
}
