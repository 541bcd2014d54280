package tlsutil

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func mustPKI(t *testing.T, dir string, hosts ...string) PKI {
	t.Helper()
	p, err := EnsureDevPKI(dir, hosts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshot returns the content of every PKI file.
func snapshot(t *testing.T, p PKI) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, f := range []string{p.CACert, p.CAKey, p.ServerCert, p.ServerKey, p.GatewayCert, p.GatewayKey, p.WorkerCert, p.WorkerKey} {
		out[filepath.Base(f)] = readFile(t, f)
	}
	return out
}

func TestEnsureDevPKICreates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	p := mustPKI(t, dir, "warden.test", "10.1.2.3")

	ca := readCert(t, p.CACert)
	if !ca.IsCA || ca.Subject.CommonName != DevCAName {
		t.Errorf("CA: IsCA=%v CN=%q", ca.IsCA, ca.Subject.CommonName)
	}
	if k, ok := ca.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", ca.PublicKey)
	}
	if life := ca.NotAfter.Sub(ca.NotBefore); life < 9*365*24*time.Hour {
		t.Errorf("CA lifetime %v, want about 10 years", life)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	for _, tc := range []struct {
		cert, identity string
		usage          x509.ExtKeyUsage
	}{
		{p.ServerCert, "", x509.ExtKeyUsageServerAuth},
		{p.GatewayCert, "spiffe://warden/gateway", x509.ExtKeyUsageClientAuth},
		{p.GatewayCert, "spiffe://warden/gateway", x509.ExtKeyUsageServerAuth},
		{p.WorkerCert, "spiffe://warden/worker", x509.ExtKeyUsageClientAuth},
		{p.WorkerCert, "spiffe://warden/worker", x509.ExtKeyUsageServerAuth},
	} {
		leaf := readCert(t, tc.cert)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("%s does not verify for %v: %v", tc.cert, tc.usage, err)
		}
		if want := []string{"localhost", "warden.test"}; !slices.Equal(leaf.DNSNames, want) {
			t.Errorf("%s DNS SANs %v, want %v", tc.cert, leaf.DNSNames, want)
		}
		for _, ip := range []string{"127.0.0.1", "::1", "10.1.2.3"} {
			if !slices.ContainsFunc(leaf.IPAddresses, net.ParseIP(ip).Equal) {
				t.Errorf("%s lacks IP SAN %s (has %v)", tc.cert, ip, leaf.IPAddresses)
			}
		}
		var uris []string
		for _, u := range leaf.URIs {
			uris = append(uris, u.String())
		}
		if tc.identity == "" && len(uris) != 0 || tc.identity != "" && !slices.Equal(uris, []string{tc.identity}) {
			t.Errorf("%s URI SANs %v, want %q", tc.cert, uris, tc.identity)
		}
	}

	for _, key := range []string{p.CAKey, p.ServerKey, p.GatewayKey, p.WorkerKey} {
		fi, err := os.Stat(key)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", key, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", fi.Mode().Perm())
	}
	if _, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey); err != nil {
		t.Errorf("server pair: %v", err)
	}
}

func TestEnsureDevPKIReuses(t *testing.T) {
	dir := t.TempDir()
	before := snapshot(t, mustPKI(t, dir, "a.test"))
	// Same hosts, given differently: still nothing to do.
	after := snapshot(t, mustPKI(t, dir, "A.test", "", "127.0.0.1"))
	for name, b := range before {
		if !bytes.Equal(b, after[name]) {
			t.Errorf("%s was rewritten", name)
		}
	}
}

func TestEnsureDevPKIAddsRequestedHost(t *testing.T) {
	dir := t.TempDir()
	p := mustPKI(t, dir)
	before := snapshot(t, p)
	mustPKI(t, dir, "new.test")
	after := snapshot(t, p)
	if !bytes.Equal(before["ca.pem"], after["ca.pem"]) || !bytes.Equal(before["ca-key.pem"], after["ca-key.pem"]) {
		t.Error("the CA changed")
	}
	for _, f := range []string{p.ServerCert, p.GatewayCert, p.WorkerCert} {
		if !slices.Contains(readCert(t, f).DNSNames, "new.test") {
			t.Errorf("%s was not re-issued with the new host", f)
		}
	}
}

func TestEnsureDevPKIReissuesBadLeaves(t *testing.T) {
	dir := t.TempDir()
	p := mustPKI(t, dir)
	ca, err := ensureCA(p.CACert, p.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	names, ips, _ := sanHosts(nil)

	// worker: expires in a day.
	certPEM, keyPEM, err := issueLeaf(ca, devLeaves[2], names, ips, time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.WorkerCert, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.WorkerKey, keyPEM, 0o644); err != nil { // also too open
		t.Fatal(err)
	}
	// gateway: signed by another CA.
	other := mustPKI(t, t.TempDir())
	if err := os.WriteFile(p.GatewayCert, readFile(t, other.GatewayCert), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.GatewayKey, readFile(t, other.GatewayKey), 0o600); err != nil {
		t.Fatal(err)
	}
	// server: key does not match the certificate.
	if err := os.WriteFile(p.ServerKey, readFile(t, other.ServerKey), 0o600); err != nil {
		t.Fatal(err)
	}
	caBefore := readFile(t, p.CACert)

	mustPKI(t, dir)

	if !bytes.Equal(caBefore, readFile(t, p.CACert)) {
		t.Error("the CA changed")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	for _, pair := range [][2]string{{p.ServerCert, p.ServerKey}, {p.GatewayCert, p.GatewayKey}, {p.WorkerCert, p.WorkerKey}} {
		kp, err := tls.LoadX509KeyPair(pair[0], pair[1])
		if err != nil {
			t.Errorf("%s: %v", pair[0], err)
			continue
		}
		if _, err := kp.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s not signed by the dev CA: %v", pair[0], err)
		}
		if time.Until(kp.Leaf.NotAfter) < 300*24*time.Hour {
			t.Errorf("%s expires %v: not re-issued", pair[0], kp.Leaf.NotAfter)
		}
	}
	if fi, _ := os.Stat(p.WorkerKey); fi.Mode().Perm() != 0o600 {
		t.Errorf("worker key mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestEnsureDevPKINeverReplacesTheCA(t *testing.T) {
	t.Run("corrupt", func(t *testing.T) {
		dir := t.TempDir()
		p := mustPKI(t, dir)
		if err := os.WriteFile(p.CACert, []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := EnsureDevPKI(dir, nil); !errors.Is(err, ErrCA) {
			t.Fatalf("got %v, want ErrCA", err)
		}
		if string(readFile(t, p.CACert)) != "garbage" {
			t.Error("the CA file was replaced")
		}
	})
	t.Run("half present", func(t *testing.T) {
		dir := t.TempDir()
		p := mustPKI(t, dir)
		if err := os.Remove(p.CAKey); err != nil {
			t.Fatal(err)
		}
		if _, err := EnsureDevPKI(dir, nil); !errors.Is(err, ErrCA) {
			t.Fatalf("got %v, want ErrCA", err)
		}
		if _, err := os.Stat(p.CAKey); !errors.Is(err, os.ErrNotExist) {
			t.Error("a CA key was created")
		}
	})
	t.Run("expired", func(t *testing.T) {
		dir := t.TempDir()
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		serial, err := newSerial()
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial, Subject: pkix.Name{CommonName: DevCAName},
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour),
			KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, _ := encodeKey(key)
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		if err := os.WriteFile(filepath.Join(dir, "ca.pem"), certPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ca-key.pem"), keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := EnsureDevPKI(dir, nil); !errors.Is(err, ErrCA) {
			t.Fatalf("got %v, want ErrCA", err)
		}
		if !bytes.Equal(readFile(t, filepath.Join(dir, "ca.pem")), certPEM) {
			t.Error("the expired CA was replaced")
		}
	})
}

func TestEnsureDevPKIRejectsBadHost(t *testing.T) {
	if _, err := EnsureDevPKI(t.TempDir(), []string{"host:8443"}); err == nil {
		t.Error("a host with a port was accepted")
	}
}
