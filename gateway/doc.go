// Package gateway is the warden gateway process (`warden gateway`): the
// owner of every request's lifecycle. It wires the OpenAI-compatible API
// (internal/api), the tenant store and its limits (package tenant),
// admission (internal/admission), the fair queue (internal/fairqueue), the
// worker registry (internal/registry), the request state machine
// (internal/lifecycle) and the admin API (internal/admin).
//
// # Use
//
//	g, err := gateway.New(cfg, gateway.WithLogger(logger))
//	// g.Store() creates tenants and keys; g.APIAddr(), g.AdminAddr() and
//	// g.RegistryAddr() are bound already (port 0 works).
//	err = g.Run(ctx) // until ctx ends: aborts requests in flight, closes
//
// `warden up` starts a gateway this way with cfg.Gateway listeners on its
// chosen ports, then its workers with worker.gateways set to
// g.RegistryAddr(), creates tenant "dev" and its key through g.Store(),
// and waits for g.Ready() to return nil (a model is servable) before
// printing the key.
//
// # A request
//
// Generate (the api.Service) runs synchronously until the request is
// admitted, so that every rejection is an ordinary HTTP error and nothing
// reaches a worker before admission (I1):
//
//  1. the request is recorded in the lifecycle table (received), with the
//     gateway's request ID; the client's ID is kept as client_request_id
//     only when gateway.trust_client_request_id is set; a model name that
//     is a LoRA adapter the tenant may use (internal/adapters, after
//     aliases) makes it a request for the base model under the adapter,
//     whose hash joins the KV owner and whose name the usage is recorded
//     under; an adapter the tenant may not use is a model that does not
//     exist;
//  2. it is tokenized with the model's tokenizer, fetched from the first
//     worker that registered for it (ModelAssets): chat messages through
//     the chat template with the generation prompt; a completion prompt as
//     plain text after BOS, when the tokenizer has one and
//     tokenizer_config.json does not set add_bos_token false (what Hugging
//     Face's Llama tokenizers do); the count is exactly what is prefilled;
//  3. admission checks it against the model's effective context (I2):
//     400 context_length_exceeded naming messages/prompt or max_tokens; a
//     missing max_tokens becomes what fits, capped by max_output_tokens;
//  4. the tenant store admits it (priority within the tenant's
//     max_priority, else 403 forbidden; rate limits, budget, concurrency);
//     the lease's quota gives the x-ratelimit-* headers;
//  5. the request is admitted and a driver goroutine takes over.
//
// The driver waits for capacity: the request tries at once when nobody
// waits in the fair queue, and otherwise waits its turn (higher priority
// first, then weighted fair across the tenants of its priority, charging
// a tenant for its requests in flight at other gateway replicas while a
// tenant waiting here is served by this replica alone; counts shared
// through the tenant store every tenants.share_interval), for at
// most gateway.queue.max_wait (429 with retry-after after it, or when
// gateway.queue.max_waiting requests already wait). It routes to the
// least-loaded healthy worker (most free pages for decode and both, least
// work for prefill; an shm decode worker only with a prefill worker on its
// host), then:
//
//   - P/D: Reserve on decode (ResourceExhausted: back to waiting, nothing
//     held), Generate on decode with the ticket and, concurrently, Prefill
//     on prefill; decode's events are relayed. A completed request lets
//     its Prefill call end (prefill still waits for decode's verdict on
//     the transfer) rather than cancel it, which prefill would take for an
//     abort of a transfer decode verified;
//   - single node (role both): Generate with the prompt and no Reserve: a
//     both worker reserves the whole sequence itself, all or nothing, and
//     a Reserve there would make it wait for a KV transfer. A full pool
//     answers ResourceExhausted before anything is held, and the request
//     waits again (the one backward edge of the state machine).
//
// Tokens become text through a streaming UTF-8 decoder (special tokens
// render as nothing) and the stop strings: text that may begin a stop
// string is held back; a match cuts the text, finishes with "stop" and
// tells the worker to stop (abort cause "stop"). Usage is the worker's
// honest count (I7; a finished request's prompt and completion tokens
// as Done reports them, checked against the admitted prompt and the
// tokens received), or, when the gateway stops early, the tokens received.
// The lease is released with the same numbers on every path.
//
// A request ends in exactly one terminal state. Any abort cause — client
// disconnect (Generation.Close), deadline (gateway.request_timeout), worker
// lost (heartbeat timeout), admin, quota (tenant disabled or deleted while
// it runs), shutdown — cancels its streams and sends Abort to every worker
// it involved. A worker failure after the response started is an error
// event without [DONE], never a truncated response that looks complete;
// DataLoss (a transfer that failed verification) and KV owner violations
// are logged at ERROR, counted in warden_integrity_failures_total and
// answered 500.
//
// # Metrics
//
// All on the registry given with WithRegistry (served at /metrics):
// warden_requests_total{model,outcome,code},
// warden_request_duration_seconds{phase=queue|prefill|transfer|decode|total},
// warden_time_to_first_token_seconds, warden_time_per_output_token_seconds,
// warden_tokens_total{kind=prompt|completion,tenant} (tenant values capped
// by observability.metrics.tenant_label_cap, the rest "other"; no tenant
// label when the cap is 0), warden_admission_rejections_total{reason},
// warden_model_context_tokens{model,kind=configured|effective},
// warden_model_context_agreement{model}, warden_workers{role,state},
// warden_aborts_total{stage,cause}, warden_inflight_requests,
// warden_queue_waiting_requests, warden_integrity_failures_total{kind},
// and every registered worker's pool as of its last heartbeat:
// warden_worker_kv_pages{worker,role,state},
// warden_worker_kv_owner_violations{worker,role}. docs/operations.md
// describes each.
//
// # Traces and logs
//
// The tracer provider is WithTracerProvider's, or the one
// observability.tracing describes. Each /v1/ HTTP request is a server span
// (a client's traceparent followed, linked or ignored per
// observability.tracing.incoming) carrying warden.request_id; an admitted
// or rejected generation adds the request span "{operation} {model}"
// (gen_ai.* and warden.* attributes), on which the lifecycle records each
// state transition as an event; calls to workers are gRPC client spans
// under it, and propagate the trace (also in PrefillRequest.traceparent).
// Every log line about a request is written with the request's context,
// so it carries request_id, tenant, trace_id and span_id; no line carries
// prompt or output text.
package gateway
