package worker

import (
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/tlsutil"
)

// clusterAuth is the worker's side of cluster authentication (I10): who
// may call its control server, how it proves itself to gateways, and the
// TLS of the KV data plane.
type clusterAuth struct {
	// control: server options that refuse any caller but the gateway.
	control []grpc.ServerOption
	// registry: dial options for the gateways' registries.
	registry []grpc.DialOption
	// transferServer and transferClient wrap KV transfer connections
	// (nil with insecure_plaintext; the transfer handshake authenticates
	// both ends with the ticket's token either way).
	transferServer, transferClient *tls.Config
}

// newClusterAuth builds the credentials cl names:
//   - mtls: the control server completes a TLS handshake only with a client
//     certificate carrying the gateway identity; the worker presents its
//     worker certificate to gateways and to decode workers;
//   - shared_secret: every control call must carry the cluster secret
//     (checked before the handler runs); the channel is TLS with the
//     worker's certificate unless insecure_plaintext.
//
// countUnary and countStream (the metrics) run outermost, so calls the
// secret check refuses are counted too.
func newClusterAuth(cl *config.Cluster, countUnary grpc.UnaryServerInterceptor, countStream grpc.StreamServerInterceptor) (*clusterAuth, error) {
	a := &clusterAuth{}
	unary := []grpc.UnaryServerInterceptor{countUnary}
	stream := []grpc.StreamServerInterceptor{countStream}
	switch cl.Auth {
	case config.ClusterMTLS:
		srv, err := tlsutil.ClusterServerConfig(cl.CAFile, cl.CertFile, cl.KeyFile, tlsutil.PeerGateway)
		if err != nil {
			return nil, fmt.Errorf("worker: control server TLS: %w", err)
		}
		cli, err := tlsutil.ClusterClientConfig(cl.CAFile, cl.CertFile, cl.KeyFile, tlsutil.PeerGateway)
		if err != nil {
			return nil, fmt.Errorf("worker: registry client TLS: %w", err)
		}
		a.control = append(a.control, grpc.Creds(credentials.NewTLS(srv)))
		a.registry = append(a.registry, grpc.WithTransportCredentials(credentials.NewTLS(cli)))
		if a.transferServer, err = tlsutil.ClusterServerConfig(cl.CAFile, cl.CertFile, cl.KeyFile, tlsutil.PeerWorker); err != nil {
			return nil, fmt.Errorf("worker: transfer server TLS: %w", err)
		}
		if a.transferClient, err = tlsutil.ClusterClientConfig(cl.CAFile, cl.CertFile, cl.KeyFile, tlsutil.PeerWorker); err != nil {
			return nil, fmt.Errorf("worker: transfer client TLS: %w", err)
		}
	case config.ClusterSharedSecret:
		secret, err := tlsutil.LoadSecretFile(cl.SharedSecretFile)
		if err != nil {
			return nil, fmt.Errorf("worker: cluster secret: %w", err)
		}
		checkUnary, checkStream := tlsutil.SecretServerInterceptors(secret)
		unary = append(unary, checkUnary)
		stream = append(stream, checkStream)
		a.registry = append(a.registry, grpc.WithPerRPCCredentials(tlsutil.NewSecretCredentials(secret, !cl.InsecurePlaintext)))
		if cl.InsecurePlaintext {
			a.registry = append(a.registry, grpc.WithTransportCredentials(insecure.NewCredentials()))
			break
		}
		srv, err := tlsutil.ServerTLSConfig(cl.CertFile, cl.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("worker: control server TLS: %w", err)
		}
		cli, err := tlsutil.ClusterClientConfig(cl.CAFile, "", "", tlsutil.PeerGateway)
		if err != nil {
			return nil, fmt.Errorf("worker: registry client TLS: %w", err)
		}
		a.control = append(a.control, grpc.Creds(credentials.NewTLS(srv)))
		a.registry = append(a.registry, grpc.WithTransportCredentials(credentials.NewTLS(cli)))
		a.transferServer = srv
		if a.transferClient, err = tlsutil.ClusterClientConfig(cl.CAFile, "", "", tlsutil.PeerWorker); err != nil {
			return nil, fmt.Errorf("worker: transfer client TLS: %w", err)
		}
	default:
		return nil, fmt.Errorf("worker: unknown cluster.auth %q", cl.Auth)
	}
	a.control = append(a.control, grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	return a, nil
}
