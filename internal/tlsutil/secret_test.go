package tlsutil

import (
	"bytes"
	"context"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// startHealth serves the standard health service on loopback.
func startHealth(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// callHealth makes one unary call and opens one server stream, returning
// the status code of each.
func callHealth(t *testing.T, addr string, opts ...grpc.DialOption) (unary, stream codes.Code) {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := healthpb.NewHealthClient(conn)
	resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	unary = status.Code(err)
	if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check status %v", resp.GetStatus())
	}
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		var first *healthpb.HealthCheckResponse
		first, err = w.Recv()
		if err == nil && first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Watch status %v", first.GetStatus())
		}
	}
	return unary, status.Code(err)
}

func TestSharedSecretInterceptors(t *testing.T) {
	secret := []byte("correct horse battery staple")
	unary, stream := SecretServerInterceptors(secret)
	addr := startHealth(t, grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())

	cases := []struct {
		name string
		opts []grpc.DialOption
		want codes.Code
	}{
		{"right secret", []grpc.DialOption{plain, grpc.WithPerRPCCredentials(NewSecretCredentials(secret, false))}, codes.OK},
		{"wrong secret", []grpc.DialOption{plain, grpc.WithPerRPCCredentials(NewSecretCredentials([]byte("correct horse battery stapler"), false))}, codes.Unauthenticated},
		{"no secret", []grpc.DialOption{plain}, codes.Unauthenticated},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u, s := callHealth(t, addr, tc.opts...)
			if u != tc.want || s != tc.want {
				t.Errorf("unary %v, stream %v; want %v", u, s, tc.want)
			}
		})
	}

	t.Run("raw secret is not the credential", func(t *testing.T) {
		// Even someone who sends the secret itself as the bearer value is
		// refused: only the derived token counts.
		ctx := context.Background()
		conn, err := grpc.NewClient("passthrough:///"+addr, plain)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+string(secret))
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("got %v", err)
		}
	})

	t.Run("credentials that require TLS are not sent in plaintext", func(t *testing.T) {
		conn, err := grpc.NewClient("passthrough:///"+addr, plain, grpc.WithPerRPCCredentials(NewSecretCredentials(secret, true)))
		if err == nil {
			defer conn.Close()
			_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		}
		if err == nil || !strings.Contains(err.Error(), "transport level security") {
			t.Errorf("got %v, want a refusal to send over plaintext", err)
		}
	})
}

func TestGRPCOverClusterMTLS(t *testing.T) {
	p := mustPKI(t, t.TempDir())
	srvCfg := mustServer(t, p.CACert, p.WorkerCert, p.WorkerKey, PeerGateway)
	addr := startHealth(t, grpc.Creds(credentials.NewTLS(srvCfg)))

	good := mustClient(t, p.CACert, p.GatewayCert, p.GatewayKey, PeerWorker)
	if u, s := callHealth(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(good))); u != codes.OK || s != codes.OK {
		t.Errorf("gateway refused: unary %v, stream %v", u, s)
	}
	bad := mustClient(t, p.CACert, p.WorkerCert, p.WorkerKey, PeerWorker)
	if u, s := callHealth(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(bad))); u != codes.Unavailable || s != codes.Unavailable {
		t.Errorf("worker identity: unary %v, stream %v; want Unavailable", u, s)
	}
}

func TestSharedSecretOverTLSWithoutClientCerts(t *testing.T) {
	// cluster.auth shared_secret: server-authenticated TLS plus the secret.
	p := mustPKI(t, t.TempDir())
	secret := []byte("0123456789abcdef")
	srvCfg, err := ServerTLSConfig(p.WorkerCert, p.WorkerKey)
	if err != nil {
		t.Fatal(err)
	}
	unary, stream := SecretServerInterceptors(secret)
	addr := startHealth(t, grpc.Creds(credentials.NewTLS(srvCfg)), grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	cli := mustClient(t, p.CACert, "", "", PeerWorker)
	u, s := callHealth(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(cli)),
		grpc.WithPerRPCCredentials(NewSecretCredentials(secret, true)))
	if u != codes.OK || s != codes.OK {
		t.Errorf("unary %v, stream %v", u, s)
	}
}

func TestProve(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	nonce, err := NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewNonce()
	if bytes.Equal(nonce, other) {
		t.Fatal("two nonces are equal")
	}
	proof := Prove(secret, nonce)
	if !VerifyProof(secret, nonce, proof) {
		t.Fatal("valid proof refused")
	}
	tampered := bytes.Clone(proof)
	tampered[0] ^= 1
	for name, ok := range map[string]bool{
		"wrong secret":   VerifyProof([]byte("0123456789abcdef0124"), nonce, proof),
		"other nonce":    VerifyProof(secret, other, proof),
		"tampered proof": VerifyProof(secret, nonce, tampered),
		"empty proof":    VerifyProof(secret, nonce, nil),
		"short nonce":    VerifyProof(secret, nonce[:8], Prove(secret, nonce[:8])),
	} {
		if ok {
			t.Errorf("%s: accepted", name)
		}
	}
	// A verifier choosing the nonce cannot make a prover reveal the
	// bearer token: the labels separate the two HMACs.
	token, err := base64.RawURLEncoding.DecodeString(bearerToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(token, Prove(secret, []byte(bearerLabel))) {
		t.Error("a proof equals the bearer token")
	}
}

func TestLoadSecretFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("  0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSecretFile(good)
	if err != nil || string(s) != "0123456789abcdef" {
		t.Errorf("got %q, %v", s, err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("tooshort\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSecretFile(short); err == nil {
		t.Error("short secret accepted")
	}
	if _, err := LoadSecretFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}
