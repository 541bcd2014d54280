// Package health serves a process's probe listener from the moment the
// process binds it, before the slow part of its start (loading weights,
// connecting to the tenant store), so that each Kubernetes probe means
// what its name says:
//
//	GET /livez    200 from the start: the process runs and answers.
//	GET /readyz   the process's readiness (SetReady): 503 "starting" until
//	              the process says how it is ready, then 200 or 503 with
//	              the reason.
//	anything else the handler the process installs once it has one
//	              (Handle: its /metrics), 503 "starting" until then.
//
// Both warden processes serve it on their observability.metrics.listen
// address (the chart's metrics port).
package health
