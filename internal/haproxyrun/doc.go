// Package haproxyrun runs HAProxy (Debian's package) as a child process in
// front of warden gateways, the way an operator's load balancer would: TCP
// mode, so TLS goes through to the gateways and their Connection: close
// reaches the client, and each gateway checked with GET /readyz over TLS.
// The end-to-end rolling-restart test and `warden bench rolling` both use
// it.
package haproxyrun
