// Package bench measures the gateway and the tenant stores against their
// baselines, in one run on one machine (DESIGN §8): the figures it reports
// are ratios, with the absolute numbers beside them only as context.
//
// RunGateway starts, in this process, a real worker (role both, the tiny
// model) and one or two real gateways in front of it (tenant store in
// memory, and in Redis when an address is given), all over mTLS with a
// dev PKI in a temporary directory. It then drives the same chat request
// three ways — straight to the worker over gRPC with the token IDs the
// gateway would send, and over HTTPS through each gateway with a real API
// key — and reports latency at concurrency 1 and requests/s over a
// concurrency sweep. Every answer is checked against the first direct
// one: same tokens, same text, same usage.
//
// RunTenants measures the tenant work of one request (authenticate,
// acquire, release) against the in-memory and the Redis store directly.
//
// Runs of the paths being compared alternate in short rounds, so that the
// load of a shared machine drifts over all of them alike. Nothing is left
// behind: the servers stop, the temporary directory is removed, and every
// Redis key is written under a unique prefix that is deleted at the end.
package bench
