package helm_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/tlsutil"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
)

// runValues are the values files TestRun runs: the chart's defaults and
// a production install.
var runValues = []string{"default-values.yaml", "production-values.yaml"}

// Waits of TestRun: limits on hangs, generous for a loaded machine, never
// performance assertions.
const (
	// livenessWait bounds the wait for a worker's liveness probe to
	// answer while its weights cannot finish loading.
	livenessWait = 30 * time.Second
	// readyWait bounds the wait for every pod to be ready.
	readyWait = 90 * time.Second
)

// TestRun renders the chart and runs what it renders as local processes
// (localCluster: the pods' commands, arguments, environments and mounted
// files as rendered, Service names resolved to local addresses; with the
// default values the mTLS pair and the API certificate are the ones the
// chart generates, with production-values.yaml the operator's), then
// checks the probes against the processes and drives traffic through the
// rendered gateway Service: a chat and a stream of two tenants, created
// through the rendered admin Service with the rendered admin token, each
// compared with the model run in this process.
func TestRun(t *testing.T) {
	for _, f := range runValues {
		t.Run(f, func(t *testing.T) { runRelease(t, filepath.Join(chart, "ci", f)) })
	}
}

func runRelease(t *testing.T, file string) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		// scripts/test.sh installs it; CI must not skip.
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is not installed and CI=true: %v", err)
		}
		t.Skipf("redis-server is not installed: %v", err)
	}
	objs, vals, notes := renderValues(t, file)
	c := newLocalCluster(t, objs)
	var hosts []string
	for name := range c.names {
		hosts = append(hosts, name)
	}
	pki, err := tlsutil.EnsureDevPKI(t.TempDir(), hosts)
	if err != nil {
		t.Fatal(err)
	}
	c.layout(operatorSecrets(t, c, vals, notes, pki))
	c.start()

	checkStartProbes(t, c)
	if err := c.waitFor(readyWait, func() error {
		for _, p := range c.pods {
			ctr := p.w.template.Spec.Containers[0]
			for name, pr := range map[string]*corev1.Probe{"startup": ctr.StartupProbe, "readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe} {
				if err := c.probe(p, ctr, pr); err != nil && err != errNoProbe {
					return fmt.Errorf("pod %s: %s probe: %w", p.name, name, err)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("waiting for every pod's probes to pass: %v", err)
	}

	api, admin := gatewayServices(t, c)
	transport := c.transport(t)
	token, err := tlsutil.LoadSecretFile(gatewayPod(t, c).config.Gateway.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	// Every gateway replica serves the model before traffic goes through
	// the Service, which picks any of them.
	model := workerModel(t, c)
	for _, p := range c.pods {
		if p.wardenRole != "gateway" {
			continue
		}
		pa := adminAt(t, scheme(p)+"://"+net.JoinHostPort(p.ip, port(p.config.Gateway.AdminListen)), string(token), transport, admin.host)
		if err := c.waitFor(readyWait, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ms, err := pa.Models(ctx)
			if err != nil {
				return err
			}
			for _, m := range ms {
				if m.Name == model && m.Serving {
					return nil
				}
			}
			return fmt.Errorf("gateway %s: model %s not served: %+v", p.name, model, ms)
		}); err != nil {
			t.Fatal(err)
		}
	}

	ac := adminAt(t, admin.url, string(token), transport, "")
	ref, err := harness.NewReference(env.Models[harness.ModelTiny])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), readyWait)
	defer cancel()
	for i, tenant := range []string{"acme", "globex"} {
		if _, err := ac.CreateTenant(ctx, adminclient.TenantCreate{ID: tenant}); err != nil {
			t.Fatalf("creating tenant %s through Service %s: %v", tenant, admin.host, err)
		}
		key, err := ac.IssueKey(ctx, tenant, "chart-test")
		if err != nil {
			t.Fatal(err)
		}
		client := openai.NewClient(option.WithBaseURL(api.url+"/v1/"), option.WithAPIKey(key.Key),
			option.WithHTTPClient(&http.Client{Transport: transport}), option.WithMaxRetries(0))
		msgs := []tokenizer.Message{{Role: "user", Content: fmt.Sprintf("Hello from tenant %d of the chart", i)}}
		want, err := ref.Chat(ctx, msgs, 12)
		if err != nil {
			t.Fatal(err)
		}
		params := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(msgs[0].Content)},
			MaxTokens: openai.Int(12), Temperature: openai.Float(0)}
		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("tenant %s: chat through Service %s: %v", tenant, api.host, err)
		}
		if got := resp.Choices[0].Message.Content; got != want.Text || resp.Usage.CompletionTokens != int64(want.CompletionTokens) {
			t.Errorf("tenant %s: chat = %q (%d tokens), the model alone %q (%d)", tenant, got, resp.Usage.CompletionTokens, want.Text, want.CompletionTokens)
		}
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var got string
		for stream.Next() {
			for _, ch := range stream.Current().Choices {
				got += ch.Delta.Content
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("tenant %s: stream: %v", tenant, err)
		}
		if got != want.Text {
			t.Errorf("tenant %s: stream = %q, the model alone %q", tenant, got, want.Text)
		}
	}
}

// operatorSecrets returns the Secrets the values name for the operator to
// create (externalSecrets): the admin token and key secret, the API
// certificate, the cluster mTLS certificates, the Redis password; and
// those rendered cert-manager Certificates make. An
// external Redis (redis.enabled false) is started here too, with that
// password, at the address its host name resolves to.
func operatorSecrets(t *testing.T, c *localCluster, vals map[string]any, notes string, pki tlsutil.PKI) map[string]map[string][]byte {
	t.Helper()
	read := func(f string) []byte {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tlsSecret := func(cert, key string) map[string][]byte {
		return map[string][]byte{"tls.crt": read(cert), "tls.key": read(key), "ca.crt": read(pki.CACert)}
	}
	redisValues, _ := vals["redis"].(map[string]any)
	ext, _ := redisValues["external"].(map[string]any)
	password := randomString(t)
	out := map[string]map[string][]byte{}
	for name, path := range externalSecrets(vals, notes, c.objs) {
		switch path {
		case "secrets.existingSecret":
			out[name] = map[string][]byte{"admin-token": []byte(randomString(t)), "key-secret": []byte(randomString(t))}
		case "gateway.tls.secretName":
			out[name] = tlsSecret(pki.ServerCert, pki.ServerKey)
		case "clusterTLS.gatewaySecretName":
			out[name] = tlsSecret(pki.GatewayCert, pki.GatewayKey)
		case "clusterTLS.workerSecretName":
			out[name] = tlsSecret(pki.WorkerCert, pki.WorkerKey)
		case "redis.external.passwordSecret":
			out[name] = map[string][]byte{fmt.Sprint(ext["passwordKey"]): []byte(password)}
		case "NOTES.txt":
			out[name] = secretByUse(t, c.objs, name, pki, tlsSecret)
		}
	}
	// cert-manager's: by the Certificate's URI SAN, a cluster identity or
	// the API's certificate (whose names are every Service's).
	for name, uris := range certificateSecrets(c.objs) {
		switch {
		case slices.Contains(uris, tlsutil.IdentityURI(tlsutil.PeerGateway)):
			out[name] = tlsSecret(pki.GatewayCert, pki.GatewayKey)
		case slices.Contains(uris, tlsutil.IdentityURI(tlsutil.PeerWorker)):
			out[name] = tlsSecret(pki.WorkerCert, pki.WorkerKey)
		default:
			out[name] = tlsSecret(pki.ServerCert, pki.ServerKey)
		}
	}
	if enabled, _ := redisValues["enabled"].(bool); !enabled {
		if user, _ := ext["username"].(string); ext["cluster"] == true || ext["tls"] == true || user != "" {
			t.Fatalf("the test stands in for an external Redis without cluster, tls or username, not %v", ext)
		}
		host, p, err := net.SplitHostPort(fmt.Sprint(ext["addr"]))
		if err != nil {
			t.Fatal(err)
		}
		ip := c.externalHost(host)
		args := []string{"--bind", ip, "--port", p, "--save", "", "--appendonly", "no", "--dir", t.TempDir()}
		if secret, _ := ext["passwordSecret"].(string); secret != "" {
			args = append(args, "--requirepass", password)
		}
		redis := env.NewProcess("external-redis", filepath.Join(t.TempDir(), "redis.log"), args...)
		if redis.Bin, err = exec.LookPath("redis-server"); err != nil {
			t.Fatal(err)
		}
		if err := redis.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = redis.Stop(harness.StopGrace) })
	}
	return out
}

// secretByUse makes a Secret that NOTES.txt tells the operator to create,
// from what the pods read in it: the certificate of the API or of a
// cluster identity when a warden config names a certificate in it.
func secretByUse(t *testing.T, objs map[string]object, name string, pki tlsutil.PKI,
	tlsSecret func(cert, key string) map[string][]byte) map[string][]byte {
	t.Helper()
	for _, w := range workloads(objs) {
		cfg := wardenConfig(t, w, objs)
		if cfg == nil {
			continue
		}
		for _, m := range w.template.Spec.Containers[0].VolumeMounts {
			if !slices.ContainsFunc(w.template.Spec.Volumes, func(v corev1.Volume) bool {
				return v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == name
			}) {
				continue
			}
			under := func(f string) bool { return strings.HasPrefix(f, m.MountPath+"/") }
			switch gateway := w.template.Spec.Containers[0].Args[0] == "gateway"; {
			case gateway && under(cfg.Gateway.TLS.CertFile):
				return tlsSecret(pki.ServerCert, pki.ServerKey)
			case under(cfg.Cluster.CertFile) && gateway:
				return tlsSecret(pki.GatewayCert, pki.GatewayKey)
			case under(cfg.Cluster.CertFile):
				return tlsSecret(pki.WorkerCert, pki.WorkerKey)
			}
		}
	}
	t.Fatalf("NOTES.txt names Secret %s, which no warden config reads a certificate from", name)
	return nil
}

// checkStartProbes holds every worker in its weight loading and checks
// that its liveness probe answers meanwhile (a model that loads longer
// than the liveness budget must not be killed in a loop) and its
// readiness probe does not; then lets the workers load.
func checkStartProbes(t *testing.T, c *localCluster) {
	t.Helper()
	var wg sync.WaitGroup
	for _, p := range c.pods {
		if p.gate == nil {
			continue
		}
		wg.Go(func() {
			defer p.gate.release()
			ctr := p.w.template.Spec.Containers[0]
			if ctr.LivenessProbe == nil {
				t.Errorf("pod %s: no liveness probe", p.name)
				return
			}
			if err := c.waitFor(livenessWait, func() error { return c.probe(p, ctr, ctr.LivenessProbe) }); err != nil {
				t.Errorf("CHART FIX NEEDED (probes): pod %s: the liveness probe does not answer while the worker loads its weights: %v", p.name, err)
				return
			}
			if err := c.probe(p, ctr, ctr.ReadinessProbe); err == nil {
				t.Errorf("pod %s: the readiness probe passes before the worker has loaded its weights", p.name)
			}
		})
	}
	wg.Wait()
}

// svcURL is a Service port as an in-cluster client reaches it.
type svcURL struct {
	host string // the Service's DNS name
	url  string
}

// gatewayServices returns the rendered ClusterIP Services in front of the
// gateways' API and admin listeners.
func gatewayServices(t *testing.T, c *localCluster) (api, admin svcURL) {
	t.Helper()
	g := gatewayPod(t, c)
	for _, s := range c.services {
		if s.ip == "" || !matches(s.svc.Spec.Selector, g.w.template.Labels) {
			continue
		}
		for _, sp := range s.svc.Spec.Ports {
			tp := sp.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(sp.Port)
			}
			cp, _ := containerPort(g.w.template.Spec.Containers[0], tp)
			host := s.svc.Name + "." + namespace + ".svc"
			u := svcURL{host: host, url: scheme(g) + "://" + net.JoinHostPort(host, strconv.Itoa(int(sp.Port)))}
			switch strconv.Itoa(int(cp)) {
			case port(g.config.Gateway.Listen):
				api = u
			case port(g.config.Gateway.AdminListen):
				admin = u
			}
		}
	}
	if api.url == "" || admin.url == "" {
		t.Fatalf("no ClusterIP Service in front of the gateways' API (%q) and admin (%q) listeners", api.url, admin.url)
	}
	return api, admin
}

// gatewayPod returns the first gateway pod.
func gatewayPod(t *testing.T, c *localCluster) *localPod {
	t.Helper()
	for _, p := range c.pods {
		if p.wardenRole == "gateway" {
			return p
		}
	}
	t.Fatal("no gateway pod rendered")
	return nil
}

// workerModel returns the model the workers serve.
func workerModel(t *testing.T, c *localCluster) string {
	t.Helper()
	for _, p := range c.pods {
		if p.wardenRole == "worker" {
			return p.config.Worker.Model
		}
	}
	t.Fatal("no worker pod rendered")
	return ""
}

// transport is an in-cluster client's: cluster DNS, and trust in the CA
// of the gateways' API certificate: the ca.crt of its Secret (the
// chart's generated CA, cert-manager's, or the operator's).
func (c *localCluster) transport(t *testing.T) *http.Transport {
	t.Helper()
	pool := x509.NewCertPool()
	if cert := gatewayPod(t, c).config.Gateway.TLS.CertFile; cert != "" {
		ca := filepath.Join(filepath.Dir(cert), "ca.crt")
		pem, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			t.Fatalf("%s holds no certificate", ca)
		}
	}
	return &http.Transport{DialContext: c.dial, ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
}

// adminAt returns an admin API client for url; serverName, when set, is
// the name the certificate is checked for (a pod reached by address).
func adminAt(t *testing.T, url, token string, tr *http.Transport, serverName string) *adminclient.Client {
	t.Helper()
	if serverName != "" {
		tr = tr.Clone()
		tr.TLSClientConfig.ServerName = serverName
	}
	ac, err := adminclient.New(adminclient.Config{URL: url, Token: token, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	return ac
}

// scheme is a gateway's URL scheme.
func scheme(g *localPod) string {
	if g.config.Gateway.TLS.Plaintext {
		return "http"
	}
	return "https"
}

// port returns the port of a host:port.
func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func randomString(t *testing.T) string {
	t.Helper()
	return rand.Text() + rand.Text()
}
