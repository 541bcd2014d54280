// Package rolling is `warden bench rolling`: a rolling restart of a whole
// multi-process fleet — gateways with a shared Redis tenant store, prefill
// and decode workers — behind a real HAProxy (internal/haproxyrun), under
// streaming clients, for as long as asked.
//
// Run starts the processes it is given (the caller builds them: real
// child processes of the warden binary), puts HAProxy in front of the
// gateways, takes a reference answer for each prompt from a first
// unloaded request (at temperature 0 every answer to the same prompt is
// the same), then runs the clients through HAProxy while it restarts
// every process one at a time, in rounds, until the duration has passed:
// each worker is cordoned on every gateway, drained, stopped with
// SIGTERM, started again and uncordoned once every gateway has it back
// (docs/operations.md); then each gateway gets SIGTERM (it fails /readyz
// and keeps serving for gateway.shutdown_delay, so HAProxy takes it out
// first), is started again, and the next one waits until HAProxy has it
// back.
//
// The clients follow the documented retry rules and nothing more: they
// retry a 503 with retry-after whose code says the request was never
// admitted, a refused connection, and a reused connection closed before
// any byte of the answer; a stream cut after it started is counted as
// cut, never retried. The Report counts requests, retries by reason,
// errors by HTTP status and code, cut streams, answers compared with the
// reference and mismatches, and restarts by role; OK fails when anything
// was lost, cut or mismatched.
package rolling
