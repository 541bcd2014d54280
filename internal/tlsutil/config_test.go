package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// handshake runs one TLS connection over loopback: the server completes
// the handshake and writes "ok"; the client reads it. It returns each
// side's error (nil on success).
func handshake(t *testing.T, serverCfg, clientCfg *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		// A safety net against a hung peer, not a timing assertion.
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if err := conn.(*tls.Conn).Handshake(); err != nil {
			done <- err
			return
		}
		_, err = conn.Write([]byte("ok"))
		done <- err
	}()

	clientErr = func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", ln.Addr().String(), clientCfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		// With TLS 1.3 the client finishes first; a server that rejects
		// the client's certificate shows up on the first read.
		buf := make([]byte, 2)
		if _, err := io.ReadFull(conn, buf); err != nil {
			return err
		}
		if string(buf) != "ok" {
			return errors.New("unexpected payload " + string(buf))
		}
		return nil
	}()
	return <-done, clientErr
}

// clusterPKIs returns the dev PKI and a second, unrelated one.
func clusterPKIs(t *testing.T) (PKI, PKI) {
	t.Helper()
	return mustPKI(t, t.TempDir()), mustPKI(t, t.TempDir())
}

func mustServer(t *testing.T, ca, cert, key, allowed string) *tls.Config {
	t.Helper()
	cfg, err := ClusterServerConfig(ca, cert, key, allowed)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func mustClient(t *testing.T, ca, cert, key, expect string) *tls.Config {
	t.Helper()
	cfg, err := ClusterClientConfig(ca, cert, key, expect)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestClusterMTLS(t *testing.T) {
	p, other := clusterPKIs(t)
	// A worker's control endpoint: accepts only the gateway.
	worker := mustServer(t, p.CACert, p.WorkerCert, p.WorkerKey, PeerGateway)

	t.Run("gateway accepted", func(t *testing.T) {
		srvErr, cliErr := handshake(t, worker, mustClient(t, p.CACert, p.GatewayCert, p.GatewayKey, PeerWorker))
		if srvErr != nil || cliErr != nil {
			t.Fatalf("server: %v, client: %v", srvErr, cliErr)
		}
	})
	t.Run("worker accepted by the registry", func(t *testing.T) {
		registry := mustServer(t, p.CACert, p.GatewayCert, p.GatewayKey, PeerWorker)
		srvErr, cliErr := handshake(t, registry, mustClient(t, p.CACert, p.WorkerCert, p.WorkerKey, PeerGateway))
		if srvErr != nil || cliErr != nil {
			t.Fatalf("server: %v, client: %v", srvErr, cliErr)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		srvErr, cliErr := handshake(t, worker, mustClient(t, p.CACert, "", "", PeerWorker))
		if srvErr == nil || cliErr == nil || !strings.Contains(srvErr.Error(), "certificate") {
			t.Fatalf("server: %v, client: %v; want both refused", srvErr, cliErr)
		}
	})
	t.Run("client certificate from another CA", func(t *testing.T) {
		srvErr, cliErr := handshake(t, worker, mustClient(t, p.CACert, other.GatewayCert, other.GatewayKey, PeerWorker))
		var unknown x509.UnknownAuthorityError
		if !errors.As(srvErr, &unknown) || cliErr == nil {
			t.Fatalf("server: %v, client: %v; want unknown authority", srvErr, cliErr)
		}
	})
	t.Run("wrong client identity", func(t *testing.T) {
		// A worker calling another worker's control endpoint.
		srvErr, cliErr := handshake(t, worker, mustClient(t, p.CACert, p.WorkerCert, p.WorkerKey, PeerWorker))
		if !errors.Is(srvErr, ErrPeerIdentity) || cliErr == nil {
			t.Fatalf("server: %v, client: %v; want ErrPeerIdentity", srvErr, cliErr)
		}
	})
	t.Run("wrong server identity", func(t *testing.T) {
		// The gateway expects a worker but reaches something holding the
		// gateway identity.
		impostor := mustServer(t, p.CACert, p.GatewayCert, p.GatewayKey, PeerGateway)
		srvErr, cliErr := handshake(t, impostor, mustClient(t, p.CACert, p.GatewayCert, p.GatewayKey, PeerWorker))
		if !errors.Is(cliErr, ErrPeerIdentity) || srvErr == nil {
			t.Fatalf("server: %v, client: %v; want client ErrPeerIdentity", srvErr, cliErr)
		}
	})
	t.Run("server certificate from another CA", func(t *testing.T) {
		foreign := mustServer(t, p.CACert, other.WorkerCert, other.WorkerKey, PeerGateway)
		srvErr, cliErr := handshake(t, foreign, mustClient(t, p.CACert, p.GatewayCert, p.GatewayKey, PeerWorker))
		var unknown x509.UnknownAuthorityError
		if !errors.As(cliErr, &unknown) || srvErr == nil {
			t.Fatalf("server: %v, client: %v; want client unknown authority", srvErr, cliErr)
		}
	})
	t.Run("hostname is not what is checked", func(t *testing.T) {
		c := mustClient(t, p.CACert, p.GatewayCert, p.GatewayKey, PeerWorker)
		c.ServerName = "not-in-the-certificate.example"
		if srvErr, cliErr := handshake(t, worker, c); srvErr != nil || cliErr != nil {
			t.Fatalf("server: %v, client: %v", srvErr, cliErr)
		}
	})
}

func TestClusterConfigErrors(t *testing.T) {
	p := mustPKI(t, t.TempDir())
	if _, err := ClusterServerConfig(p.CACert, p.WorkerCert, p.WorkerKey, ""); err == nil {
		t.Error("server without an allowed peer accepted")
	}
	if _, err := ClusterClientConfig(p.CACert, "", "", ""); err == nil {
		t.Error("client without an expected peer accepted")
	}
	if _, err := ClusterServerConfig("", p.WorkerCert, p.WorkerKey, PeerGateway); err == nil {
		t.Error("server without a CA accepted")
	}
	if _, err := ClusterServerConfig(p.WorkerKey, p.WorkerCert, p.WorkerKey, PeerGateway); err == nil {
		t.Error("a key file accepted as CA bundle")
	}
	if _, err := ClusterClientConfig(p.CACert, p.WorkerCert, "", PeerGateway); err == nil {
		t.Error("client certificate without a key accepted")
	}
	if _, err := ServerTLSConfig(p.ServerCert, p.WorkerKey); err == nil {
		t.Error("mismatched key accepted")
	}
}

func TestServerTLSConfig(t *testing.T) {
	p := mustPKI(t, t.TempDir())
	srv, err := ServerTLSConfig(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, p.CACert))

	if srvErr, cliErr := handshake(t, srv, &tls.Config{RootCAs: roots, ServerName: "localhost"}); srvErr != nil || cliErr != nil {
		t.Fatalf("server: %v, client: %v", srvErr, cliErr)
	}
	t.Run("TLS 1.1 refused", func(t *testing.T) {
		old := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
		srvErr, cliErr := handshake(t, srv, old)
		if srvErr == nil || cliErr == nil || !strings.Contains(srvErr.Error(), "version") {
			t.Fatalf("server: %v, client: %v; want a protocol version error", srvErr, cliErr)
		}
	})
	t.Run("TLS 1.2 with a weak suite refused", func(t *testing.T) {
		weak := &tls.Config{RootCAs: roots, ServerName: "localhost", MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}}
		if srvErr, cliErr := handshake(t, srv, weak); srvErr == nil || cliErr == nil {
			t.Fatalf("server: %v, client: %v; want refused", srvErr, cliErr)
		}
	})
	t.Run("renewed certificate picked up", func(t *testing.T) {
		mustPKI(t, p.Dir, "renewed.test") // re-issues server.pem with a new SAN
		var seen *x509.Certificate
		cli := &tls.Config{RootCAs: roots, ServerName: "renewed.test",
			VerifyConnection: func(cs tls.ConnectionState) error { seen = cs.PeerCertificates[0]; return nil }}
		if srvErr, cliErr := handshake(t, srv, cli); srvErr != nil || cliErr != nil {
			t.Fatalf("server: %v, client: %v", srvErr, cliErr)
		}
		if !slices.Contains(seen.DNSNames, "renewed.test") {
			t.Errorf("served certificate has %v: not reloaded", seen.DNSNames)
		}
	})
}

// dnsLeaf issues a leaf of p's CA with DNS SANs only (as Helm's
// genSignedCert does) and both key usages, written to dir; it returns
// the certificate and key files.
func dnsLeaf(t *testing.T, p PKI, dir string, names ...string) (cert, key string) {
	t.Helper()
	ca, err := ensureCA(p.CACert, p.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	spec := leafSpec{cn: names[0], usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	certPEM, keyPEM, err := issueLeaf(ca, spec, names, nil, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, names[0]+".pem"), filepath.Join(dir, names[0]+"-key.pem")
	if err := os.WriteFile(cert, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TestClusterMTLSDNSIdentity: a cluster certificate may name its peer
// with the DNS SAN IdentityDNSName instead of the URI SAN (the chart's
// generated certificates); a DNS SAN that is not exactly that name is no
// identity.
func TestClusterMTLSDNSIdentity(t *testing.T) {
	p := mustPKI(t, t.TempDir())
	dir := t.TempDir()
	gwCert, gwKey := dnsLeaf(t, p, dir, IdentityDNSName(PeerGateway), "rel-warden-gateway-0.rel-warden-gateway-headless")
	wkCert, wkKey := dnsLeaf(t, p, dir, IdentityDNSName(PeerWorker))
	worker := mustServer(t, p.CACert, wkCert, wkKey, PeerGateway)

	t.Run("gateway accepted by a worker", func(t *testing.T) {
		srvErr, cliErr := handshake(t, worker, mustClient(t, p.CACert, gwCert, gwKey, PeerWorker))
		if srvErr != nil || cliErr != nil {
			t.Fatalf("server: %v, client: %v", srvErr, cliErr)
		}
	})
	t.Run("worker accepted by the registry, URI and DNS forms mixed", func(t *testing.T) {
		registry := mustServer(t, p.CACert, gwCert, gwKey, PeerWorker)
		srvErr, cliErr := handshake(t, registry, mustClient(t, p.CACert, p.WorkerCert, p.WorkerKey, PeerGateway))
		if srvErr != nil || cliErr != nil {
			t.Fatalf("server: %v, client: %v", srvErr, cliErr)
		}
	})
	t.Run("wrong client identity", func(t *testing.T) {
		srvErr, cliErr := handshake(t, worker, mustClient(t, p.CACert, wkCert, wkKey, PeerWorker))
		if !errors.Is(srvErr, ErrPeerIdentity) || cliErr == nil || !strings.Contains(srvErr.Error(), IdentityDNSName(PeerWorker)) {
			t.Fatalf("server: %v, client: %v; want ErrPeerIdentity naming the certificate's %s", srvErr, cliErr, IdentityDNSName(PeerWorker))
		}
	})
	for _, name := range []string{PeerGateway, "warden-gateway", "gateway.identity.warden", "gateway.identity.warden.invalid.example", "x.gateway.identity.warden.invalid"} {
		t.Run("not an identity: "+name, func(t *testing.T) {
			cert, key := dnsLeaf(t, p, t.TempDir(), name)
			srvErr, cliErr := handshake(t, worker, mustClient(t, p.CACert, cert, key, PeerWorker))
			if !errors.Is(srvErr, ErrPeerIdentity) || cliErr == nil {
				t.Fatalf("server: %v, client: %v; want ErrPeerIdentity", srvErr, cliErr)
			}
		})
	}
}
