package tlsutil

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// PKI holds the paths of a development PKI's files.
type PKI struct {
	// Dir is the directory holding every file below.
	Dir string
	// CACert is the dev CA certificate: trust it in clients.
	CACert string
	// CAKey is the dev CA private key, kept to re-issue leaves.
	CAKey string
	// ServerCert and ServerKey serve the public API and admin listeners.
	ServerCert, ServerKey string
	// GatewayCert and GatewayKey carry the cluster identity "gateway".
	GatewayCert, GatewayKey string
	// WorkerCert and WorkerKey carry the cluster identity "worker".
	WorkerCert, WorkerKey string
}

// Cluster peer names, for ClusterServerConfig and ClusterClientConfig.
const (
	PeerGateway = "gateway"
	PeerWorker  = "worker"
)

// IdentityURI returns the URI SAN naming a cluster peer:
// "spiffe://warden/" + name.
func IdentityURI(name string) string {
	return "spiffe://warden/" + name
}

// IdentityDNSName returns the DNS SAN that names a cluster peer as
// IdentityURI does, for CAs that can issue only DNS and IP SANs (Helm's
// genSignedCert, which the chart uses without cert-manager):
// name + ".identity.warden.invalid". The ".invalid" top-level domain is
// reserved (RFC 6761): the name never resolves and no public CA issues
// it, so it cannot be a host that a peer is dialled at.
func IdentityDNSName(name string) string {
	return name + ".identity.warden.invalid"
}

// DevCAName is the common name of the development CA.
const DevCAName = "warden dev CA"

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 397 * 24 * time.Hour
	// renewBefore: a leaf closer than this to expiry is re-issued.
	renewBefore = 30 * 24 * time.Hour
	// backdate absorbs clock skew between the machines of a cluster.
	backdate = time.Hour
)

// ErrCA reports a development CA that exists but cannot be used.
// EnsureDevPKI never replaces a CA by itself: clients may already trust it.
var ErrCA = errors.New("tlsutil: development CA unusable")

// leafSpec describes one leaf certificate of the dev PKI.
type leafSpec struct {
	file     string // base name: file+".pem", file+"-key.pem"
	cn       string
	identity string // peer name for the URI SAN; "" for none
	usage    []x509.ExtKeyUsage
}

var devLeaves = []leafSpec{
	{file: "server", cn: "warden API (dev)", usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
	{file: "gateway", cn: PeerGateway, identity: PeerGateway, usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
	{file: "worker", cn: PeerWorker, identity: PeerWorker, usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
}

// EnsureDevPKI creates or reuses a development PKI in dir (see the
// package comment for its files). Every leaf carries the SANs localhost,
// 127.0.0.1 and ::1 plus hosts (DNS names or IP addresses).
//
// On later runs it reuses what is valid and re-issues a leaf that is
// missing, unreadable, not signed by the CA, within 30 days of expiry, or
// lacking a requested host. It never replaces the CA: a CA that is
// expired, unreadable or half present is an ErrCA error naming what to
// delete. Concurrent first runs on one directory are not coordinated;
// run it once before starting processes that share the directory.
func EnsureDevPKI(dir string, hosts []string) (PKI, error) {
	names, ips, err := sanHosts(hosts)
	if err != nil {
		return PKI{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return PKI{}, fmt.Errorf("tlsutil: %w", err)
	}
	p := PKI{
		Dir:    dir,
		CACert: filepath.Join(dir, "ca.pem"), CAKey: filepath.Join(dir, "ca-key.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		GatewayCert: filepath.Join(dir, "gateway.pem"), GatewayKey: filepath.Join(dir, "gateway-key.pem"),
		WorkerCert: filepath.Join(dir, "worker.pem"), WorkerKey: filepath.Join(dir, "worker-key.pem"),
	}
	ca, err := ensureCA(p.CACert, p.CAKey)
	if err != nil {
		return PKI{}, err
	}
	now := time.Now()
	for _, spec := range devLeaves {
		certFile, keyFile := filepath.Join(dir, spec.file+".pem"), filepath.Join(dir, spec.file+"-key.pem")
		if leafUsable(certFile, keyFile, ca, spec, names, ips, now) {
			if err := os.Chmod(keyFile, 0o600); err != nil {
				return PKI{}, fmt.Errorf("tlsutil: %w", err)
			}
			continue
		}
		certPEM, keyPEM, err := issueLeaf(ca, spec, names, ips, now, leafValidity)
		if err != nil {
			return PKI{}, err
		}
		// Key first: a crash between the writes leaves a mismatched pair,
		// which the next run detects and re-issues.
		if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
			return PKI{}, err
		}
		if err := writeFileAtomic(certFile, certPEM, 0o644); err != nil {
			return PKI{}, err
		}
	}
	return p, nil
}

// sanHosts splits hosts into DNS names and IPs, always including the
// loopback names, deduplicated in a stable order.
func sanHosts(hosts []string) ([]string, []net.IP, error) {
	names := []string{"localhost"}
	ips := []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
			continue
		}
		if strings.ContainsAny(h, ":/ \t") {
			return nil, nil, fmt.Errorf("tlsutil: %q is not a host name or IP address", h)
		}
		if h = strings.ToLower(h); !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	return names, ips, nil
}

// devCA is a loaded CA.
type devCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// ensureCA loads the CA, or creates it when neither file exists.
func ensureCA(certFile, keyFile string) (*devCA, error) {
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return createCA(certFile, keyFile)
	case errors.Is(certErr, fs.ErrNotExist) || errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: only one of %s and %s exists; delete %s to start a new dev PKI (clients must then trust the new CA)",
			ErrCA, certFile, keyFile, filepath.Dir(certFile))
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; delete %s to start a new dev PKI", ErrCA, err, filepath.Dir(certFile))
	}
	cert := pair.Leaf
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%w: %s is not a CA certificate", ErrCA, certFile)
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("%w: %s expired on %s; delete %s to start a new dev PKI",
			ErrCA, certFile, cert.NotAfter.Format(time.DateOnly), filepath.Dir(certFile))
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: %s holds an unsupported key type", ErrCA, keyFile)
	}
	if err := os.Chmod(keyFile, 0o600); err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	return &devCA{cert: cert, key: signer}, nil
}

func createCA(certFile, keyFile string) (*devCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: DevCAName, Organization: []string{"warden"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: create CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	return &devCA{cert: cert, key: key}, nil
}

// leafUsable reports whether an existing leaf can be kept.
func leafUsable(certFile, keyFile string, ca *devCA, spec leafSpec, names []string, ips []net.IP, now time.Time) bool {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return false // missing, unreadable or mismatched
	}
	leaf := pair.Leaf
	if leaf.NotAfter.Sub(now) < renewBefore && leaf.NotAfter.Before(ca.cert.NotAfter) {
		return false // near expiry, and a new leaf would live longer
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: spec.usage}); err != nil {
		return false
	}
	for _, n := range names {
		if !slices.Contains(leaf.DNSNames, n) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	return spec.identity == "" || hasIdentity(leaf, spec.identity)
}

// issueLeaf creates a key and a certificate signed by ca.
func issueLeaf(ca *devCA, spec leafSpec, names []string, ips []net.IP, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter // a leaf cannot outlive its CA
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.cn, Organization: []string{"warden"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  spec.usage,
		DNSNames:     names,
		IPAddresses:  ips,
	}
	if spec.identity != "" {
		u, err := url.Parse(IdentityURI(spec.identity))
		if err != nil {
			return nil, nil, fmt.Errorf("tlsutil: identity: %w", err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: issue %s certificate: %w", spec.file, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("tlsutil: serial number: %w", err)
	}
	return serial, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writeFileAtomic writes data to path through a temporary file and a
// rename, so that readers never see a half-written file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("tlsutil: %w", err)
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("tlsutil: write %s: %w", path, err)
	}
	return nil
}
