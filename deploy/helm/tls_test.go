package helm_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/warden-ai/warden/internal/tlsutil"
)

// The Secrets the chart generates without cert-manager (default values).
const (
	genCA      = "Secret/rel-warden-generated-ca"
	genGateway = "Secret/rel-warden-cluster-gateway"
	genWorker  = "Secret/rel-warden-cluster-worker"
	genAPI     = "Secret/rel-warden-api-tls"
	// notAfterKey is the annotation of a generated leaf that records its
	// expiry, for the upgrade that renews it.
	notAfterKey = "warden-ai.github.io/not-after"
)

// fakeCluster answers the chart's lookups as a cluster holding these
// Secrets (by name, in the release's namespace) would: Helm's lookup
// through the SDK's ClientProvider, as `helm upgrade` does.
type fakeCluster map[string]*corev1.Secret

// GetClientFor serves Secrets only: the chart looks up nothing else.
func (f fakeCluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	if apiVersion != "v1" || kind != "Secret" {
		return nil, false, fmt.Errorf("fake cluster: the chart looks up %s %s, which the test does not serve", apiVersion, kind)
	}
	return secretClient{secrets: f}, true, nil
}

// secretClient is the part of a dynamic client that lookup uses
// (Namespace, Get); any other call panics on the nil interface.
type secretClient struct {
	dynamic.NamespaceableResourceInterface
	secrets fakeCluster
	ns      string
}

func (c secretClient) Namespace(ns string) dynamic.ResourceInterface {
	c.ns = ns
	return c
}

func (c secretClient) Get(_ context.Context, name string, _ metav1.GetOptions, _ ...string) (*unstructured.Unstructured, error) {
	s, ok := c.secrets[name]
	if !ok || c.ns != namespace {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// clusterOf returns a fake cluster holding the rendered Secrets that
// keep reports true for.
func clusterOf(objs map[string]object, keep func(id string, s *corev1.Secret) bool) fakeCluster {
	out := fakeCluster{}
	for id, o := range objs {
		if s, ok := o.value.(*corev1.Secret); ok && keep(id, s) {
			out[s.Name] = s
		}
	}
	return out
}

// parsedPair is a generated Secret's certificate, key and CA.
type parsedPair struct {
	cert *x509.Certificate
	pair tls.Certificate
	ca   []byte // ca.crt as rendered
}

// parseSecret parses a rendered kubernetes.io/tls Secret: tls.crt must
// hold one certificate, tls.key its ECDSA P-256 key.
func parseSecret(t *testing.T, objs map[string]object, id string) parsedPair {
	t.Helper()
	s := get[corev1.Secret](t, objs, id)
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("%s: type %q, want %q", id, s.Type, corev1.SecretTypeTLS)
	}
	pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatalf("%s: tls.crt and tls.key: %v", id, err)
	}
	if rest := s.Data["tls.crt"]; strings.Count(string(rest), "BEGIN CERTIFICATE") != 1 {
		t.Errorf("%s: tls.crt holds %d certificates, want 1", id, strings.Count(string(rest), "BEGIN CERTIFICATE"))
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		t.Errorf("%s: key %T, want ECDSA P-256 (as cert-manager's and the dev PKI's)", id, pair.PrivateKey)
	}
	return parsedPair{cert: pair.Leaf, pair: pair, ca: s.Data["ca.crt"]}
}

// checkValidity checks a certificate's lifetime against days.
func checkValidity(t *testing.T, name string, c *x509.Certificate, days int) {
	t.Helper()
	want := time.Duration(days) * 24 * time.Hour
	if got := c.NotAfter.Sub(c.NotBefore); got < want-time.Minute || got > want+time.Minute {
		t.Errorf("%s: valid for %v, want %d days", name, got, days)
	}
}

// gatewayServiceNames returns the DNS names, in every form a client in
// the cluster may use, of the rendered Services in front of the gateways'
// API and admin listeners (not the headless one, which carries the
// registry).
func gatewayServiceNames(t *testing.T, objs map[string]object) []string {
	t.Helper()
	gw := get[appsv1.StatefulSet](t, objs, "StatefulSet/rel-warden-gateway")
	var names []string
	for _, o := range objs {
		s, ok := o.value.(*corev1.Service)
		if !ok || !matches(s.Spec.Selector, gw.Spec.Template.Labels) || s.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		for _, suffix := range []string{"", "." + namespace, "." + namespace + ".svc", "." + namespace + ".svc.cluster.local"} {
			names = append(names, s.Name+suffix)
		}
	}
	if len(names) < 8 {
		t.Fatalf("gateway API and admin Services: found names %v", names)
	}
	return names
}

// writePair writes a parsed Secret's files into dir as the pods mount
// them and returns the paths of tls.crt, tls.key and ca.crt.
func writePair(t *testing.T, objs map[string]object, id string) (cert, key, ca string) {
	t.Helper()
	s := get[corev1.Secret](t, objs, id)
	dir := filepath.Join(t.TempDir(), s.Name)
	writeKeys(t, dir, s.Data, nil)
	return filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
}

// handshake runs one TLS connection in memory and returns each side's
// error; the server writes "ok" after its handshake, which the client
// reads (with TLS 1.3 a refused client certificate shows there).
func handshake(server, client *tls.Config) (serverErr, clientErr error) {
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() {
		defer a.Close()
		s := tls.Server(a, server)
		err := s.Handshake()
		if err == nil {
			_, err = s.Write([]byte("ok"))
		}
		done <- err
	}()
	c := tls.Client(b, client)
	clientErr = c.Handshake()
	if clientErr == nil {
		buf := make([]byte, 2)
		if _, clientErr = io.ReadFull(c, buf); clientErr == nil && string(buf) != "ok" {
			clientErr = fmt.Errorf("read %q", buf)
		}
	}
	b.Close()
	return <-done, clientErr
}

// TestGeneratedTLS renders the defaults (no cert-manager, no Secrets
// named): the chart generates a CA and, signed by it, the cluster pair
// and the API certificate. Each leaf chains to the CA with the key usages
// mTLS needs, names its cluster identity (tlsutil accepts it in real
// handshakes, and refuses the wrong one) or every Service name of the
// gateways' API, and lives as long as the values say.
func TestGeneratedTLS(t *testing.T) {
	file := filepath.Join(chart, "ci", "default-values.yaml")
	objs, vals, notes := renderValues(t, file)
	g := vals["generatedTLS"].(map[string]any)
	caDays, certDays := int(g["caValidityDays"].(float64)), int(g["certValidityDays"].(float64))

	ca := parseSecret(t, objs, genCA)
	if !ca.cert.IsCA || ca.cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("%s: not a CA certificate (IsCA %v, key usage %b)", genCA, ca.cert.IsCA, ca.cert.KeyUsage)
	}
	checkValidity(t, genCA, ca.cert, caDays)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})

	for _, id := range []string{genGateway, genWorker, genAPI} {
		leaf := parseSecret(t, objs, id)
		if string(leaf.ca) != string(caPEM) {
			t.Errorf("%s: ca.crt is not the generated CA", id)
		}
		if leaf.cert.IsCA {
			t.Errorf("%s: a CA certificate", id)
		}
		checkValidity(t, id, leaf.cert, certDays)
		notAfter, err := time.Parse(time.RFC3339, get[corev1.Secret](t, objs, id).Annotations[notAfterKey])
		if d := notAfter.Sub(leaf.cert.NotAfter); err != nil || d < -time.Minute || d > time.Minute {
			t.Errorf("%s: annotation %s = %v (%v), the certificate expires at %v", id, notAfterKey, notAfter, err, leaf.cert.NotAfter)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := leaf.cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s: does not chain to the CA for key usage %v: %v", id, usage, err)
			}
		}
	}
	gw, wk := parseSecret(t, objs, genGateway).cert, parseSecret(t, objs, genWorker).cert
	if !slices.Equal(gw.DNSNames, []string{tlsutil.IdentityDNSName(tlsutil.PeerGateway)}) ||
		!slices.Equal(wk.DNSNames, []string{tlsutil.IdentityDNSName(tlsutil.PeerWorker)}) {
		t.Errorf("cluster identities: gateway %v, worker %v", gw.DNSNames, wk.DNSNames)
	}
	api := parseSecret(t, objs, genAPI).cert
	for _, name := range gatewayServiceNames(t, objs) {
		if err := api.VerifyHostname(name); err != nil {
			t.Errorf("%s: %v", genAPI, err)
		}
	}
	if !strings.Contains(notes, "rel-warden-generated-ca") {
		t.Errorf("NOTES.txt does not tell where the certificates come from:\n%s", notes)
	}

	// The pair as tlsutil loads it from the pods' mounts.
	gwCert, gwKey, gwCA := writePair(t, objs, genGateway)
	wkCert, wkKey, wkCA := writePair(t, objs, genWorker)
	mustTLS := func(cfg *tls.Config, err error) *tls.Config {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	control := mustTLS(tlsutil.ClusterServerConfig(wkCA, wkCert, wkKey, tlsutil.PeerGateway))
	registry := mustTLS(tlsutil.ClusterServerConfig(gwCA, gwCert, gwKey, tlsutil.PeerWorker))
	transfer := mustTLS(tlsutil.ClusterServerConfig(wkCA, wkCert, wkKey, tlsutil.PeerWorker))
	for _, c := range []struct {
		name           string
		server, client *tls.Config
	}{
		{"gateway to worker control", control, mustTLS(tlsutil.ClusterClientConfig(gwCA, gwCert, gwKey, tlsutil.PeerWorker))},
		{"worker to gateway registry", registry, mustTLS(tlsutil.ClusterClientConfig(wkCA, wkCert, wkKey, tlsutil.PeerGateway))},
		{"prefill to decode transfer", transfer, mustTLS(tlsutil.ClusterClientConfig(wkCA, wkCert, wkKey, tlsutil.PeerWorker))},
	} {
		if srvErr, cliErr := handshake(c.server, c.client); srvErr != nil || cliErr != nil {
			t.Errorf("%s: server %v, client %v", c.name, srvErr, cliErr)
		}
	}
	// A worker's certificate does not open a worker's control port.
	srvErr, cliErr := handshake(control, mustTLS(tlsutil.ClusterClientConfig(wkCA, wkCert, wkKey, tlsutil.PeerWorker)))
	if !errors.Is(srvErr, tlsutil.ErrPeerIdentity) || cliErr == nil {
		t.Errorf("worker certificate at a worker's control port: server %v, client %v; want ErrPeerIdentity", srvErr, cliErr)
	}
}

// TestGeneratedTLSValues: what the values choose about the generated
// certificates.
func TestGeneratedTLSValues(t *testing.T) {
	file := filepath.Join(chart, "ci", "default-values.yaml")
	t.Run("validity", func(t *testing.T) {
		objs, _, _ := renderIn(t, file, nil, "generatedTLS.caValidityDays=400", "generatedTLS.certValidityDays=30", "generatedTLS.renewBeforeDays=7")
		checkValidity(t, genCA, parseSecret(t, objs, genCA).cert, 400)
		checkValidity(t, genWorker, parseSecret(t, objs, genWorker).cert, 30)
	})
	t.Run("a certificate outliving its CA is refused", func(t *testing.T) {
		msg := renderFails(t, file, "generatedTLS.caValidityDays=30", "generatedTLS.certValidityDays=31")
		if !strings.Contains(msg, "generatedTLS.certValidityDays (31) exceeds generatedTLS.caValidityDays (30)") {
			t.Errorf("error %q", msg)
		}
	})
	t.Run("renewal window as long as the certificate is refused", func(t *testing.T) {
		msg := renderFails(t, file, "generatedTLS.certValidityDays=30", "generatedTLS.renewBeforeDays=30")
		if !strings.Contains(msg, "generatedTLS.renewBeforeDays (30) must be less than generatedTLS.certValidityDays (30)") {
			t.Errorf("error %q", msg)
		}
	})
	t.Run("one cluster Secret named", func(t *testing.T) {
		msg := renderFails(t, file, "clusterTLS.gatewaySecretName=mine")
		if !strings.Contains(msg, "set both gatewaySecretName and workerSecretName") {
			t.Errorf("error %q", msg)
		}
	})
	t.Run("cluster Secrets named: only the API certificate generated", func(t *testing.T) {
		objs, _, notes := renderIn(t, file, nil, "clusterTLS.gatewaySecretName=gw", "clusterTLS.workerSecretName=wk")
		for _, id := range []string{genGateway, genWorker} {
			if _, ok := objs[id]; ok {
				t.Errorf("%s rendered, the values name Secrets of the operator's", id)
			}
		}
		api := parseSecret(t, objs, genAPI)
		if string(api.ca) != string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: parseSecret(t, objs, genCA).cert.Raw})) {
			t.Errorf("%s: ca.crt is not the generated CA", genAPI)
		}
		if !strings.Contains(notes, "gw (URI SAN spiffe://warden/gateway)") {
			t.Errorf("NOTES.txt does not ask for the named Secrets:\n%s", notes)
		}
	})
	for _, set := range [][]string{{"certManager.enabled=true"}, {"clusterTLS.gatewaySecretName=gw", "clusterTLS.workerSecretName=wk", "gateway.tls.plaintext=true"}} {
		t.Run("nothing generated with "+strings.Join(set, ","), func(t *testing.T) {
			objs, _, _ := renderIn(t, file, nil, set...)
			for id := range objs {
				if strings.HasPrefix(id, "Secret/") && id != "Secret/rel-warden-secrets" {
					t.Errorf("%s rendered", id)
				}
			}
		})
	}
}

// TestGeneratedTLSStable: an upgrade (lookup finds the Secrets of the
// install) renders the same certificates and the same pod checksums, so
// nothing rotates or restarts; without the CA's Secret everything is
// new; without a leaf's Secret (or its key), or near the leaf's expiry,
// that leaf alone is re-issued by the kept CA, and the pods' checksum
// changes.
func TestGeneratedTLSStable(t *testing.T) {
	file := filepath.Join(chart, "ci", "default-values.yaml")
	install, vals, _ := renderValues(t, file)
	all := clusterOf(install, func(string, *corev1.Secret) bool { return true })
	upgrade, _, _ := renderIn(t, file, all)
	for _, id := range []string{genCA, genGateway, genWorker, genAPI} {
		a, b := get[corev1.Secret](t, install, id), get[corev1.Secret](t, upgrade, id)
		for k, v := range a.Data {
			if string(b.Data[k]) != string(v) {
				t.Errorf("%s: %s changed at the upgrade", id, k)
			}
		}
	}
	for _, name := range []string{"rel-warden-gateway", "rel-warden-prefill", "rel-warden-decode"} {
		got, want := workloadByName(t, upgrade, name).template.Annotations["checksum/tls"], workloadByName(t, install, name).template.Annotations["checksum/tls"]
		if got != want || want == "" {
			t.Errorf("%s: checksum/tls %q at install, %q at the upgrade: the upgrade would restart the pods", name, want, got)
		}
	}

	renewed, _, _ := renderIn(t, file, clusterOf(install, func(id string, _ *corev1.Secret) bool { return id != genWorker }))
	if parseSecret(t, renewed, genWorker).cert.Equal(parseSecret(t, install, genWorker).cert) {
		t.Errorf("%s kept although its Secret was gone", genWorker)
	}
	for _, id := range []string{genCA, genGateway, genAPI} {
		if !parseSecret(t, renewed, id).cert.Equal(parseSecret(t, install, id).cert) {
			t.Errorf("%s re-issued when only %s was gone", id, genWorker)
		}
	}
	if a, b := workloadByName(t, install, "rel-warden-decode").template.Annotations["checksum/tls"], workloadByName(t, renewed, "rel-warden-decode").template.Annotations["checksum/tls"]; a == b {
		t.Errorf("checksum/tls unchanged by a renewed certificate: the pods would not roll onto it")
	}
	roots := x509.NewCertPool()
	roots.AddCert(parseSecret(t, install, genCA).cert)
	if _, err := parseSecret(t, renewed, genWorker).cert.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
		t.Errorf("re-issued %s does not chain to the kept CA: %v", genWorker, err)
	}

	// A leaf whose recorded expiry is within renewBeforeDays is renewed by
	// the kept CA; one further away, or without the annotation (a Secret
	// made before it existed), is kept.
	days := vals["generatedTLS"].(map[string]any)["renewBeforeDays"].(float64)
	renewBefore := time.Duration(days) * 24 * time.Hour
	for _, c := range []struct {
		name    string
		expiry  string // the annotation; "" removes it
		renewed bool
	}{
		{"expiring within renewBeforeDays", time.Now().Add(renewBefore - 24*time.Hour).Format(time.RFC3339), true},
		{"expiring later", time.Now().Add(renewBefore + 24*time.Hour).Format(time.RFC3339), false},
		{"expiry unknown", "", false},
		{"expiry unreadable", "soon", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := clusterOf(install, func(string, *corev1.Secret) bool { return true })
			s := cl["rel-warden-cluster-worker"].DeepCopy()
			if c.expiry == "" {
				delete(s.Annotations, notAfterKey)
			} else {
				s.Annotations[notAfterKey] = c.expiry
			}
			cl[s.Name] = s
			up, _, _ := renderIn(t, file, cl)
			if renewed := !parseSecret(t, up, genWorker).cert.Equal(parseSecret(t, install, genWorker).cert); renewed != c.renewed {
				t.Errorf("%s annotated %q: renewed %v, want %v", genWorker, c.expiry, renewed, c.renewed)
			}
			if !parseSecret(t, up, genGateway).cert.Equal(parseSecret(t, install, genGateway).cert) ||
				!parseSecret(t, up, genCA).cert.Equal(parseSecret(t, install, genCA).cert) {
				t.Errorf("the CA or %s changed with %s", genGateway, genWorker)
			}
		})
	}

	// A leaf Secret without its key (damaged by hand) is re-issued, not
	// rendered half.
	damaged := clusterOf(install, func(string, *corev1.Secret) bool { return true })
	keyless := damaged["rel-warden-cluster-gateway"].DeepCopy()
	delete(keyless.Data, "tls.key")
	damaged[keyless.Name] = keyless
	repaired, _, _ := renderIn(t, file, damaged)
	if fixed := parseSecret(t, repaired, genGateway); fixed.cert.Equal(parseSecret(t, install, genGateway).cert) {
		t.Errorf("%s without tls.key kept its certificate", genGateway)
	}

	newCA, _, _ := renderIn(t, file, clusterOf(install, func(id string, _ *corev1.Secret) bool { return id != genCA }))
	for _, id := range []string{genCA, genGateway, genWorker, genAPI} {
		if parseSecret(t, newCA, id).cert.Equal(parseSecret(t, install, id).cert) {
			t.Errorf("%s kept although the CA's Secret was gone (its leaves would chain to no CA the pods trust)", id)
		}
	}
}

// workloadByName returns the rendered workload called name.
func workloadByName(t *testing.T, objs map[string]object, name string) workload {
	t.Helper()
	for _, w := range workloads(objs) {
		if w.name == name {
			return w
		}
	}
	t.Fatalf("no workload %s", name)
	return workload{}
}
