package obs

import "go.opentelemetry.io/otel/attribute"

// Span attribute keys shared by the gateway and the workers. The gen_ai.*
// keys follow the OpenTelemetry semantic conventions for generative AI;
// the warden.* keys name what only warden knows. Prompts and outputs are
// never attributes.
const (
	// AttrOperation is gen_ai.operation.name: chat or text_completion on
	// the gateway's request span; prefill, transfer or decode on workers.
	AttrOperation = attribute.Key("gen_ai.operation.name")
	// AttrModel is gen_ai.request.model, the model the client asked for.
	AttrModel = attribute.Key("gen_ai.request.model")
	// AttrInputTokens is gen_ai.usage.input_tokens: prompt tokens
	// prefilled (I7).
	AttrInputTokens = attribute.Key("gen_ai.usage.input_tokens")
	// AttrOutputTokens is gen_ai.usage.output_tokens: completion tokens
	// generated (I7).
	AttrOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	// AttrTenant is the tenant the request belongs to.
	AttrTenant = attribute.Key("warden.tenant")
	// AttrRequestID is the gateway-assigned request ID (x-request-id).
	AttrRequestID = attribute.Key("warden.request_id")
	// AttrWorkerID is the worker a span ran on, or was sent to.
	AttrWorkerID = attribute.Key("warden.worker_id")
	// AttrEpoch is the epoch of the request's attempt (KV owner tag).
	AttrEpoch = attribute.Key("warden.epoch")
	// AttrTransferID names a KV transfer.
	AttrTransferID = attribute.Key("warden.transfer_id")
	// AttrBackend is a KV transfer's backend (tcp, shm).
	AttrBackend = attribute.Key("warden.transfer.backend")
	// AttrBytes is the page bytes a KV transfer moved.
	AttrBytes = attribute.Key("warden.transfer.bytes")
	// AttrPages is the pages a KV transfer moved.
	AttrPages = attribute.Key("warden.transfer.pages")
	// AttrCause is why a request was aborted, rejected or failed.
	AttrCause = attribute.Key("warden.cause")
	// AttrStage is the lifecycle state a request was in when it ended.
	AttrStage = attribute.Key("warden.stage")
	// AttrOutcome is a request's terminal state.
	AttrOutcome = attribute.Key("warden.outcome")
)

// Values of AttrOperation.
const (
	OperationChat       = "chat"
	OperationCompletion = "text_completion"
	OperationPrefill    = "prefill"
	OperationTransfer   = "kv_transfer"
	OperationDecode     = "decode"
	OperationGenerate   = "generate"
)

// RequestAttrs are the attributes identifying a request on any span.
func RequestAttrs(requestID, tenant string, epoch uint64) []attribute.KeyValue {
	return []attribute.KeyValue{AttrRequestID.String(requestID), AttrTenant.String(tenant), AttrEpoch.Int64(int64(epoch))}
}
