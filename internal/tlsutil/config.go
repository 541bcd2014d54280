package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
)

// ErrPeerIdentity reports a cluster peer whose certificate chains to the
// cluster CA but names another identity than the one allowed.
var ErrPeerIdentity = errors.New("tlsutil: cluster peer has the wrong identity")

// modernCipherSuites are the TLS 1.2 suites offered: forward-secret
// ECDHE with AEAD ciphers only. (TLS 1.3 suites are not configurable and
// all modern.)
var modernCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// ServerTLSConfig returns a server configuration presenting the
// certificate in certFile/keyFile: TLS 1.2 or later, modern cipher suites.
// The files are re-read when they change (checked at each handshake), so
// a renewed certificate is picked up without a restart; if the new files
// do not load, the previous certificate stays in use.
func ServerTLSConfig(certFile, keyFile string) (*tls.Config, error) {
	r, err := newCertReloader(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   slices.Clone(modernCipherSuites),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.current(), nil },
	}, nil
}

// ClusterServerConfig returns a server configuration for a cluster
// endpoint (worker control, worker transfer, gateway registry). It
// presents certFile/keyFile and completes a handshake only with a client
// whose certificate chains to the CA in caFile and names allowedPeer
// (the URI SAN IdentityURI or the DNS SAN IdentityDNSName); anyone else
// is refused during the handshake.
func ClusterServerConfig(caFile, certFile, keyFile string, allowedPeer string) (*tls.Config, error) {
	if allowedPeer == "" {
		return nil, errors.New("tlsutil: cluster server needs an allowed peer identity")
	}
	pool, err := loadCAPool(caFile)
	if err != nil {
		return nil, err
	}
	cfg, err := ServerTLSConfig(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = pool
	// The chain has been verified against ClientCAs by now; only the
	// identity remains to check.
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		return checkIdentity(cs.PeerCertificates, allowedPeer)
	}
	return cfg, nil
}

// ClusterClientConfig returns a client configuration for dialling a
// cluster endpoint. It presents certFile/keyFile (both may be empty when
// the cluster uses a shared secret instead of client certificates) and
// accepts only a server whose certificate chains to the CA in caFile and
// names expectPeer (IdentityURI or IdentityDNSName).
//
// The server's hostname is deliberately not checked: peers are
// authorised by identity, and workers are dialled at addresses that
// certificates often do not list.
func ClusterClientConfig(caFile, certFile, keyFile string, expectPeer string) (*tls.Config, error) {
	if expectPeer == "" {
		return nil, errors.New("tlsutil: cluster client needs an expected peer identity")
	}
	pool, err := loadCAPool(caFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: slices.Clone(modernCipherSuites),
		// Standard verification would also demand a hostname match; it
		// is replaced, not skipped: VerifyConnection verifies the chain
		// against the cluster CA and then the identity.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := verifyChain(cs.PeerCertificates, pool); err != nil {
				return err
			}
			return checkIdentity(cs.PeerCertificates, expectPeer)
		},
	}
	if certFile != "" || keyFile != "" {
		r, err := newCertReloader(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return r.current(), nil }
	}
	return cfg, nil
}

// verifyChain verifies a server's chain against the cluster CA.
func verifyChain(certs []*x509.Certificate, roots *x509.CertPool) error {
	if len(certs) == 0 {
		return errors.New("tlsutil: cluster peer sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("tlsutil: cluster peer certificate: %w", err)
	}
	return nil
}

// checkIdentity requires the leaf of certs to name the peer want
// (hasIdentity).
func checkIdentity(certs []*x509.Certificate, want string) error {
	if len(certs) == 0 {
		return errors.New("tlsutil: cluster peer sent no certificate")
	}
	if !hasIdentity(certs[0], want) {
		got := make([]string, 0, len(certs[0].URIs)+len(certs[0].DNSNames))
		for _, u := range certs[0].URIs {
			got = append(got, u.String())
		}
		got = append(got, certs[0].DNSNames...)
		return fmt.Errorf("%w: want %s or %s, certificate has %v", ErrPeerIdentity, IdentityURI(want), IdentityDNSName(want), got)
	}
	return nil
}

// hasIdentity reports whether cert names the cluster peer want by its
// URI SAN (IdentityURI) or its DNS SAN (IdentityDNSName).
func hasIdentity(cert *x509.Certificate, want string) bool {
	uri := IdentityURI(want)
	for _, u := range cert.URIs {
		if u.String() == uri {
			return true
		}
	}
	return slices.Contains(cert.DNSNames, IdentityDNSName(want))
}

// loadCAPool reads a PEM bundle of CA certificates.
func loadCAPool(caFile string) (*x509.CertPool, error) {
	if caFile == "" {
		return nil, errors.New("tlsutil: cluster CA file not set")
	}
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("tlsutil: %s holds no PEM certificate", caFile)
	}
	return pool, nil
}

// certReloader serves a key pair from files and reloads it when either
// file changes (new inode, size or modification time).
type certReloader struct {
	certFile, keyFile string

	mu            sync.Mutex
	cert          *tls.Certificate
	certFI, keyFI os.FileInfo
}

// sameVersion reports whether two stats show the same version of a file.
func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tlsutil: certificate and key files must both be set")
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	certFI, err1 := os.Stat(certFile)
	keyFI, err2 := os.Stat(keyFile)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	if err := r.load(certFI, keyFI); err != nil {
		return nil, err
	}
	return r, nil
}

// load reads the pair and records the stats it was read at; the caller
// holds mu or owns r exclusively.
func (r *certReloader) load(certFI, keyFI os.FileInfo) error {
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tlsutil: load %s: %w", r.certFile, err)
	}
	r.cert, r.certFI, r.keyFI = &pair, certFI, keyFI
	return nil
}

// current returns the key pair, reloading it first if the files changed.
func (r *certReloader) current() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	certFI, err1 := os.Stat(r.certFile)
	keyFI, err2 := os.Stat(r.keyFile)
	if err1 == nil && err2 == nil && (!sameVersion(certFI, r.certFI) || !sameVersion(keyFI, r.keyFI)) {
		// A failed load (files mid-rotation) keeps the old pair; the
		// next handshake tries again.
		_ = r.load(certFI, keyFI)
	}
	return r.cert
}
