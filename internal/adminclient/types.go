package adminclient

import (
	"fmt"
	"time"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/errenvelope"
	"github.com/warden-ai/warden/tenant"
)

// Verdicts of ModelView.Verdict: how a model's configured context compares
// with the KV pools of the workers that serve it (invariant I2).
const (
	// VerdictAgree: every serving worker's pool holds the configured context.
	VerdictAgree = "agree"
	// VerdictClamped: some pool is smaller; policy clamp serves the smaller
	// (effective) window.
	VerdictClamped = "clamped"
	// VerdictRefused: some pool is smaller; policy refuse does not serve
	// the model until they agree.
	VerdictRefused = "refused"
	// VerdictNoWorkers: no healthy worker serves the model.
	VerdictNoWorkers = "no_workers"
)

// WorkerView is one registered worker as the admin API shows it.
type WorkerView struct {
	ID              string    `json:"id"`
	Role            string    `json:"role"`
	Model           string    `json:"model"`
	ControlAddr     string    `json:"control_addr"`
	TransferAddr    string    `json:"transfer_addr,omitempty"`
	TransferBackend string    `json:"transfer_backend,omitempty"`
	Healthy         bool      `json:"healthy"`
	LastHeartbeat   time.Time `json:"last_heartbeat,omitzero"`
	Pool            PoolView  `json:"pool"`
	// Running and Waiting are the worker's sequences in its batch and
	// waiting for one.
	Running int `json:"running"`
	Waiting int `json:"waiting"`
	// InFlightBudget is the most requests this gateway places on the
	// worker at once, learned from its batch size (0: not learned yet,
	// no bound); the rest wait in the gateway's fair queue.
	InFlightBudget int64 `json:"in_flight_budget"`
	// Cordoned: this gateway places no new request on the worker
	// (workers cordon or drain); requests already there run to their end.
	Cordoned bool `json:"cordoned"`
	// Draining: the worker is shutting down (SIGTERM) and told the
	// gateway; no new request is placed there, those in flight run on.
	Draining bool `json:"draining"`
	// Assigned is how many requests this gateway placed on the worker
	// that have not ended.
	Assigned int64 `json:"assigned"`
	// Idle: no request of this gateway is assigned to the worker and its
	// last heartbeat showed nothing running or waiting. A cordoned idle
	// worker is drained: it may be stopped.
	Idle bool `json:"idle"`
	// Adapters is the worker's LoRA adapter memory; nil if it reports
	// none (it serves no adapters).
	Adapters *AdapterMemoryView `json:"adapters,omitempty"`
}

// AdapterMemoryView is a worker's LoRA adapter memory as last reported.
type AdapterMemoryView struct {
	CapacityBytes int64 `json:"capacity_bytes"`
	UsedBytes     int64 `json:"used_bytes"`
	// Loaded and Pinned are content hashes of the adapters it holds.
	Loaded []string `json:"loaded"`
	Pinned []string `json:"pinned"`
}

// PoolView is a worker's KV pool accounting, as last reported. At a quiet
// moment FreePages + ReservedPages + InUsePages + QuarantinedPages ==
// TotalPages.
type PoolView struct {
	TotalPages       int64 `json:"total_pages"`
	FreePages        int64 `json:"free_pages"`
	ReservedPages    int64 `json:"reserved_pages"`
	InUsePages       int64 `json:"in_use_pages"`
	QuarantinedPages int64 `json:"quarantined_pages"`
	PageTokens       int64 `json:"page_tokens"`
	// CapacityTokens is TotalPages * PageTokens: the longest sequence the
	// pool can hold.
	CapacityTokens  int64 `json:"capacity_tokens"`
	OwnerViolations int64 `json:"owner_violations"`
	// CachedPages is the part of FreePages that is sealed prefix-cache
	// pages no request holds: reusable by a cache hit of their domain,
	// evicted when a reservation needs the room or their domain is
	// evicted (tenant deleted or disabled, key revoked, prefix_cache
	// changed).
	CachedPages int64 `json:"cached_pages"`
}

// ModelView is one configured model: its configured and effective context
// and the pools that decide the latter (invariant I2).
type ModelView struct {
	Name              string `json:"name"`
	ConfiguredContext int64  `json:"configured_context"`
	EffectiveContext  int64  `json:"effective_context"`
	// Policy is the context policy, "clamp" or "refuse".
	Policy  string `json:"policy"`
	Serving bool   `json:"serving"`
	// Verdict is one of the Verdict constants.
	Verdict string `json:"verdict"`
	// Workers are the workers that may serve the model, with their pools.
	Workers         []WorkerCapacity `json:"workers"`
	MaxOutputTokens int64            `json:"max_output_tokens,omitempty"`
	// Reason explains a verdict other than agree, or a degraded context.
	Reason string `json:"reason,omitempty"`
	// Degraded is set while quarantined KV pages lower the effective
	// context (I12); UsableContext is the largest request the workers can
	// hold now.
	Degraded      bool  `json:"degraded,omitempty"`
	UsableContext int64 `json:"usable_context"`
	// Refused lists workers of the model whose registration was refused
	// because they disagree with a registered worker (I11).
	Refused []LayoutRefusal `json:"refused_workers,omitempty"`
}

// WorkerCapacity is one serving worker's KV pool size in tokens.
type WorkerCapacity struct {
	ID             string `json:"id"`
	Role           string `json:"role"`
	CapacityTokens int64  `json:"capacity_tokens"`
	// UsableTokens is what the pool can hold now, net of quarantine.
	UsableTokens int64 `json:"usable_tokens"`
	// WeightsDType is the element type the worker computes with (the
	// checkpoint's, or worker.dtype's conversion); "" if it does not say.
	WeightsDType string `json:"weights_dtype,omitempty"`
	// Memory is how the worker sized its KV pool; nil if it does not say.
	Memory *MemoryPlan `json:"memory,omitempty"`
	// Adapters is its LoRA adapter memory, as in WorkerView.
	Adapters *AdapterMemoryView `json:"adapters,omitempty"`
}

// MemoryPlan is how a worker chose its KV pool's budget.
type MemoryPlan struct {
	// Source is "cgroup v2", "cgroup v1" (the worker's cgroup memory
	// limit), "meminfo" (the host's MemAvailable), "cuda" (the device's
	// free memory) or "configured" (worker.kv.memory_bytes).
	Source string `json:"source"`
	// LimitBytes is the bound used: the cgroup limit, MemAvailable or the
	// device's free memory; 0 when configured.
	LimitBytes int64 `json:"limit_bytes"`
	// AvailableBytes is what the weights and the pool had to fit in (for
	// a cgroup: limit − usage − headroom).
	AvailableBytes int64 `json:"available_bytes"`
	// HeadroomBytes is what was left for the process under a cgroup limit
	// (worker.kv.memory_headroom).
	HeadroomBytes int64 `json:"headroom_bytes"`
	// WeightsBytes is the weights as held in memory.
	WeightsBytes int64 `json:"weights_bytes"`
	// BudgetBytes is the KV pool's budget.
	BudgetBytes int64 `json:"budget_bytes"`
}

// LayoutRefusal is a worker refused at registration because it disagrees
// with a registered worker of its model on Field (page_tokens, kv_dtype,
// kv_layout, weights_sha256 or tokenizer_sha256).
type LayoutRefusal struct {
	Worker string `json:"worker"`
	Role   string `json:"role"`
	// Conflicts is the registered worker it disagrees with.
	Conflicts string    `json:"conflicts_with"`
	Field     string    `json:"field"`
	Message   string    `json:"message"`
	At        time.Time `json:"at"`
	// Attempts counts its refused registrations.
	Attempts int64 `json:"attempts"`
}

// RequestView is one request, in flight or recently finished.
type RequestView struct {
	ID              string `json:"id"`
	ClientRequestID string `json:"client_request_id,omitempty"`
	Tenant          string `json:"tenant"`
	Model           string `json:"model"`
	// Priority is the scheduling priority the request asked for.
	Priority int `json:"priority"`
	// State is the lifecycle state (received ... completed, rejected,
	// aborted, failed).
	State string `json:"state"`
	// Cause says why a request was aborted, rejected or failed.
	Cause            string    `json:"cause,omitempty"`
	PrefillWorker    string    `json:"prefill_worker,omitempty"`
	DecodeWorker     string    `json:"decode_worker,omitempty"`
	PromptTokens     int64     `json:"prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens"`
	Started          time.Time `json:"started"`
	Finished         time.Time `json:"finished,omitzero"`
}

// TenantCreate is the body of POST /admin/v1/tenants.
type TenantCreate struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Weight is the fair-scheduling weight; 0 means 1.
	Weight   int           `json:"weight,omitempty"`
	Limits   tenant.Limits `json:"limits,omitzero"`
	Disabled bool          `json:"disabled,omitempty"`
	// PrefixCache is tenant (default), key or off; see tenant.Tenant.
	PrefixCache cachekey.Mode `json:"prefix_cache,omitempty"`
	// CachedTokenRate bills prompt tokens served from the prefix cache
	// at this fraction of an uncached one, in [0, 1]; absent means 1.
	CachedTokenRate *float64 `json:"cached_token_rate,omitempty"`
}

// Tenant returns the tenant to create.
func (c TenantCreate) Tenant() tenant.Tenant {
	return tenant.Tenant{ID: c.ID, Name: c.Name, Weight: c.Weight, Limits: c.Limits, Disabled: c.Disabled, PrefixCache: c.PrefixCache,
		CachedTokenRate: c.CachedTokenRate}
}

// TenantPatch is the body of PATCH /admin/v1/tenants/{id}: absent (or
// null) fields keep their value.
type TenantPatch struct {
	Name     *string      `json:"name,omitempty"`
	Weight   *int         `json:"weight,omitempty"`
	Limits   *LimitsPatch `json:"limits,omitempty"`
	Disabled *bool        `json:"disabled,omitempty"`
	// PrefixCache, when set, replaces the tenant's prefix-cache scope.
	PrefixCache *cachekey.Mode `json:"prefix_cache,omitempty"`
	// CachedTokenRate, when set, replaces the tenant's cached-token rate.
	CachedTokenRate *float64 `json:"cached_token_rate,omitempty"`
}

// Apply returns t with the patch applied.
func (p TenantPatch) Apply(t tenant.Tenant) tenant.Tenant {
	setIf(&t.Name, p.Name)
	setIf(&t.Weight, p.Weight)
	setIf(&t.Disabled, p.Disabled)
	setIf(&t.PrefixCache, p.PrefixCache)
	if p.CachedTokenRate != nil {
		r := *p.CachedTokenRate
		t.CachedTokenRate = &r
	}
	if p.Limits != nil {
		t.Limits = p.Limits.Apply(t.Limits)
	}
	return t
}

// LimitsPatch changes some of a tenant's limits: absent (or null) fields
// keep their value; 0 sets a limit to unlimited and an empty
// allowed_models list allows every model.
type LimitsPatch struct {
	RequestsPerMinute *int64               `json:"requests_per_minute,omitempty"`
	TokensPerMinute   *int64               `json:"tokens_per_minute,omitempty"`
	MaxConcurrent     *int64               `json:"max_concurrent,omitempty"`
	Budget            *int64               `json:"budget,omitempty"`
	BudgetPeriod      *tenant.BudgetPeriod `json:"budget_period,omitempty"`
	AllowedModels     *[]string            `json:"allowed_models,omitempty"`
	MaxPriority       *int                 `json:"max_priority,omitempty"`
	MaxAdapters       *int64               `json:"max_adapters,omitempty"`
}

// Apply returns l with the patch applied.
func (p LimitsPatch) Apply(l tenant.Limits) tenant.Limits {
	setIf(&l.RequestsPerMinute, p.RequestsPerMinute)
	setIf(&l.TokensPerMinute, p.TokensPerMinute)
	setIf(&l.MaxConcurrent, p.MaxConcurrent)
	setIf(&l.Budget, p.Budget)
	setIf(&l.BudgetPeriod, p.BudgetPeriod)
	setIf(&l.MaxPriority, p.MaxPriority)
	setIf(&l.MaxAdapters, p.MaxAdapters)
	if p.AllowedModels != nil {
		l.AllowedModels = append([]string(nil), (*p.AllowedModels)...)
	}
	return l
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// KeyCreate is the body of POST /admin/v1/tenants/{id}/keys (optional).
type KeyCreate struct {
	// Name is an optional label for the key.
	Name string `json:"name,omitempty"`
}

// IssuedKey is the answer to issuing a key: the plaintext key, shown this
// once and never again, and its description.
type IssuedKey struct {
	Key string `json:"key"`
	tenant.KeyInfo
}

// AbortResult is the answer to POST /admin/v1/requests/{id}/abort.
type AbortResult struct {
	ID    string `json:"id"`
	Cause string `json:"cause"`
	// Request is the request after the abort, when it is still known.
	Request *RequestView `json:"request,omitempty"`
}

// Deleted is the answer to a DELETE.
type Deleted struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

// List is the answer to every listing: {"data": [...]}.
type List[T any] struct {
	Data []T `json:"data"`
}

// Error types and codes of the admin API's error envelope.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServer         = "server_error"

	CodeInvalidToken     = "invalid_admin_token"
	CodeInvalidJSON      = "invalid_json"
	CodeInvalidEncoding  = "invalid_encoding"
	CodeInvalidType      = "invalid_type"
	CodeUnknownField     = "unknown_field"
	CodeInvalidValue     = "invalid_value"
	CodeMissingParameter = "missing_required_parameter"
	CodeNotFound         = "not_found"
	CodeAlreadyExists    = "already_exists"
	CodeRequestFinished  = "request_finished"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeRequestTooLarge  = "request_too_large"
	CodeStoreUnavailable = "store_unavailable"
	CodeInvalidAdapter   = "invalid_adapter"
	CodeForbidden        = "permission_denied"
	CodeBaseUnavailable  = "base_model_unavailable"
	CodeInternal         = "internal_error"
)

// Error is an error answer of the admin API, in the envelope the public
// API uses: {"error":{"message","type","param","code"}}.
type Error struct {
	Status  int    // HTTP status
	Type    string // error.type
	Code    string // error.code; empty is sent as null
	Param   string // error.param; empty is sent as null
	Message string // error.message
}

// Error implements error: the server's message with status and code.
func (e *Error) Error() string {
	s := fmt.Sprintf("%s (HTTP %d", e.Message, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Param != "" {
		s += ", param " + e.Param
	}
	return s + ")"
}

// Envelope returns e's JSON body.
func (e *Error) Envelope() errenvelope.Envelope {
	return errenvelope.New(e.Message, e.Type, e.Param, e.Code)
}

// Alias is one model alias in effect (GET/PUT /admin/v1/aliases/{name}):
// requests naming Name are served by model Target. Source is "config"
// (models[].aliases) or "admin" (set through this API, kept in the
// tenant store; it overrides a configured alias of the same name).
type Alias struct {
	Name   string `json:"name"`
	Target string `json:"target"`
	Source string `json:"source"`
}

// AdapterPatch is the body of PATCH /admin/v1/adapters/{name}: omitted
// fields keep their value.
type AdapterPatch struct {
	// SharedWith replaces the tenants the adapter is shared with.
	SharedWith *[]string `json:"shared_with,omitempty"`
	Pinned     *bool     `json:"pinned,omitempty"`
}

// Adapter upload form (POST /admin/v1/adapters, multipart/form-data):
// the fields and the two files.
const (
	AdapterFieldBase       = "base"
	AdapterFieldName       = "name"
	AdapterFieldOwner      = "owner"
	AdapterFieldSharedWith = "shared_with" // repeated, one tenant each
	AdapterFieldPin        = "pin"         // "true" or "false"
	AdapterFileConfig      = "adapter_config.json"
	AdapterFileWeights     = "adapter_model.safetensors"
)

// AliasSet is the body of PUT /admin/v1/aliases/{name}.
type AliasSet struct {
	Target string `json:"target"`
}
