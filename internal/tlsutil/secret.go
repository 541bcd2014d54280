package tlsutil

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MinSecretLen is the shortest accepted cluster secret, in bytes.
const MinSecretLen = 16

// NonceLen is the length of nonces from NewNonce, and the shortest nonce
// VerifyProof accepts.
const NonceLen = 32

// Domain-separation labels: the bearer token and challenge proofs are
// both HMACs under the cluster secret, so each gets a distinct prefix;
// otherwise a peer choosing the nonce "bearer label" could make a prover
// reveal the bearer token.
const (
	bearerLabel = "warden cluster bearer v1"
	proofLabel  = "warden cluster proof v1\x00"
)

// authMetadataKey carries the bearer token in gRPC metadata.
const authMetadataKey = "authorization"

// LoadSecretFile reads a cluster secret: the file's content without
// surrounding whitespace, at least MinSecretLen bytes.
func LoadSecretFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: %w", err)
	}
	secret := bytes.TrimSpace(data)
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("tlsutil: secret in %s is %d bytes; need at least %d", path, len(secret), MinSecretLen)
	}
	return secret, nil
}

// bearerToken derives what travels in metadata from the secret, so that
// the secret itself is never sent (not even over insecure_plaintext).
func bearerToken(secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(bearerLabel))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// secretCredentials sends the bearer token with every RPC.
type secretCredentials struct {
	header     string
	requireTLS bool
}

var _ credentials.PerRPCCredentials = (*secretCredentials)(nil)

// NewSecretCredentials returns gRPC per-RPC credentials that prove
// knowledge of the cluster secret (use with grpc.WithPerRPCCredentials).
// With requireTLS, gRPC refuses to send them over a plaintext connection;
// pass false only for cluster.insecure_plaintext.
func NewSecretCredentials(secret []byte, requireTLS bool) credentials.PerRPCCredentials {
	return &secretCredentials{header: "Bearer " + bearerToken(secret), requireTLS: requireTLS}
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (c *secretCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{authMetadataKey: c.header}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (c *secretCredentials) RequireTransportSecurity() bool { return c.requireTLS }

// SecretServerInterceptors returns the unary and stream server
// interceptors that admit only calls carrying the bearer token of
// NewSecretCredentials for the same secret; any other call fails with
// codes.Unauthenticated before its handler runs. The comparison takes
// constant time.
func SecretServerInterceptors(secret []byte) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	want := []byte("Bearer " + bearerToken(secret))
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		got := md.Get(authMetadataKey)
		if len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), want) != 1 {
			return status.Error(codes.Unauthenticated, "cluster secret missing or wrong")
		}
		return nil
	}
	unary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(ctx); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := check(ss.Context()); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}

// NewNonce returns NonceLen random bytes for a challenge.
func NewNonce() ([]byte, error) {
	n := make([]byte, NonceLen)
	if _, err := rand.Read(n); err != nil {
		return nil, fmt.Errorf("tlsutil: nonce: %w", err)
	}
	return n, nil
}

// Prove answers a challenge: HMAC-SHA-256 under secret of a fixed label
// and nonce. A verifier sends a fresh nonce (NewNonce) and checks the
// answer with VerifyProof.
//
// For mutual authentication each side must challenge the other with its
// own nonce, and the nonces should be bound to the direction (for
// example prefixed with the prover's role), so that a peer cannot reflect
// one side's challenge back at it.
func Prove(secret, nonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(proofLabel))
	m.Write(nonce)
	return m.Sum(nil)
}

// VerifyProof reports, in constant time, whether proof is Prove(secret,
// nonce). Nonces shorter than NonceLen are refused, as they could be
// replayed.
func VerifyProof(secret, nonce, proof []byte) bool {
	if len(nonce) < NonceLen {
		return false
	}
	return hmac.Equal(Prove(secret, nonce), proof)
}
