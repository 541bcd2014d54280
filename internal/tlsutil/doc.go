// Package tlsutil provides warden's TLS: a development PKI, server
// configurations for the public API, mutual TLS for the cluster, and a
// shared-secret alternative for deployments that cannot issue client
// certificates (invariant I10: worker endpoints accept only authenticated
// peers, refused before they can read or write).
//
// # Cluster identities
//
// A cluster certificate names its holder with a URI SAN:
// spiffe://warden/gateway or spiffe://warden/worker (IdentityURI). Peers
// are authorised by that identity, never by hostname or CN: workers are
// dialled at addresses that are often unknown when certificates are
// issued, and the CN is deprecated for identity and ambiguous. A server
// built with ClusterServerConfig accepts only clients whose certificate
// chains to the cluster CA and carries the allowed identity; a client
// built with ClusterClientConfig accepts only a server that does the same
// for the expected identity. Operators using their own CA issue
// certificates with these URI SANs and both client and server key usage.
//
// A CA that can issue only DNS and IP SANs (Helm's genSignedCert, which
// the chart uses when cert-manager is not there) names the peer with the
// DNS SAN gateway.identity.warden.invalid or worker.identity.warden.invalid
// (IdentityDNSName) instead. Either form is an identity, not a host: the
// reserved .invalid domain never resolves and no public CA issues it, and
// the cluster CA alone decides who holds it.
//
// Who accepts whom:
//
//	worker control server   ClusterServerConfig(..., PeerGateway)
//	gateway registry        ClusterServerConfig(..., PeerWorker)
//	decode transfer server  ClusterServerConfig(..., PeerWorker)  (prefill pushes)
//	gateway -> worker       ClusterClientConfig(..., PeerWorker)
//	worker -> gateway       ClusterClientConfig(..., PeerGateway)
//	prefill -> decode       ClusterClientConfig(..., PeerWorker)
//
// # Shared secret
//
// With cluster.auth shared_secret, servers use ServerTLSConfig with their
// cluster certificate (or no TLS with insecure_plaintext), clients use
// ClusterClientConfig without a client certificate, and every gRPC call
// carries NewSecretCredentials, checked by SecretServerInterceptors.
// Non-gRPC channels (the KV transfer handshake) use Prove and VerifyProof
// on a fresh nonce. Neither sends the secret itself.
//
// # Development PKI
//
// EnsureDevPKI keeps a CA and three leaves in one directory for
// `warden up` and tests:
//
//	ca.pem, ca-key.pem            warden dev CA (ECDSA P-256, 10 years)
//	server.pem, server-key.pem    API listeners: localhost, 127.0.0.1, ::1 + hosts
//	gateway.pem, gateway-key.pem  cluster identity gateway (client and server)
//	worker.pem, worker-key.pem    cluster identity worker (client and server)
//
// Keys are written 0600 and the directory 0700.
package tlsutil
