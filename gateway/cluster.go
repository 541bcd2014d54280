package gateway

import (
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/tlsutil"
)

// clusterAuth holds the gateway's side of cluster authentication (I10):
// the registry server accepts only workers, and the gateway dials workers
// expecting the worker identity and proving its own.
type clusterAuth struct {
	server []grpc.ServerOption // registry server
	dial   []grpc.DialOption   // worker control clients
}

// newClusterAuth builds the credentials cl names:
//   - mtls: the registry completes a handshake only with a certificate
//     carrying spiffe://warden/worker; the gateway presents its gateway
//     certificate to workers and checks theirs;
//   - shared_secret: every call carries the cluster secret (checked before
//     the handler runs), over TLS with the gateway's certificate unless
//     insecure_plaintext.
func newClusterAuth(cl *config.Cluster) (*clusterAuth, error) {
	a := &clusterAuth{}
	switch cl.Auth {
	case config.ClusterMTLS:
		srv, err := tlsutil.ClusterServerConfig(cl.CAFile, cl.CertFile, cl.KeyFile, tlsutil.PeerWorker)
		if err != nil {
			return nil, fmt.Errorf("gateway: registry TLS: %w", err)
		}
		cli, err := tlsutil.ClusterClientConfig(cl.CAFile, cl.CertFile, cl.KeyFile, tlsutil.PeerWorker)
		if err != nil {
			return nil, fmt.Errorf("gateway: worker client TLS: %w", err)
		}
		a.server = append(a.server, grpc.Creds(credentials.NewTLS(srv)))
		a.dial = append(a.dial, grpc.WithTransportCredentials(credentials.NewTLS(cli)))
	case config.ClusterSharedSecret:
		secret, err := tlsutil.LoadSecretFile(cl.SharedSecretFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: cluster secret: %w", err)
		}
		unary, stream := tlsutil.SecretServerInterceptors(secret)
		a.server = append(a.server, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
		a.dial = append(a.dial, grpc.WithPerRPCCredentials(tlsutil.NewSecretCredentials(secret, !cl.InsecurePlaintext)))
		if cl.InsecurePlaintext {
			a.dial = append(a.dial, grpc.WithTransportCredentials(insecure.NewCredentials()))
			break
		}
		srv, err := tlsutil.ServerTLSConfig(cl.CertFile, cl.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: registry TLS: %w", err)
		}
		cli, err := tlsutil.ClusterClientConfig(cl.CAFile, "", "", tlsutil.PeerWorker)
		if err != nil {
			return nil, fmt.Errorf("gateway: worker client TLS: %w", err)
		}
		a.server = append(a.server, grpc.Creds(credentials.NewTLS(srv)))
		a.dial = append(a.dial, grpc.WithTransportCredentials(credentials.NewTLS(cli)))
	default:
		return nil, fmt.Errorf("gateway: unknown cluster.auth %q", cl.Auth)
	}
	a.server = append(a.server,
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	// Keepalives notice a worker that vanished without closing its
	// connection (a killed host) while a stream is open.
	a.dial = append(a.dial, grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}))
	return a, nil
}
