package gateway

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/admission"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/gateway/internal/registry"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/tenant"
)

// authenticator adapts the tenant store's authentication to the HTTP
// layer, and remembers each tenant's scheduling weight and model list as
// of its last authentication.
type authenticator struct {
	next tenant.Authenticator

	mu      sync.Mutex
	tenants map[string]tenantInfo
}

type tenantInfo struct {
	weight  int
	allowed tenant.Limits
	cache   cachekey.Mode // the tenant's prefix-cache setting
	// cachedRate bills the tenant's cached prompt tokens
	// (tenant.Tenant.CachedRate).
	cachedRate float64
}

var _ api.Authenticator = (*authenticator)(nil)

// Authenticate implements api.Authenticator.
func (a *authenticator) Authenticate(ctx context.Context, key string) (api.Principal, error) {
	p, err := a.next.Authenticate(ctx, key)
	switch {
	case errors.Is(err, tenant.ErrUnauthenticated):
		return api.Principal{}, api.InvalidAPIKey(invalidKeyMessage)
	case errors.Is(err, tenant.ErrUnavailable):
		return api.Principal{}, storeUnavailable()
	case err != nil:
		return api.Principal{}, err
	}
	a.mu.Lock()
	a.tenants[p.Tenant.ID] = tenantInfo{weight: p.Tenant.Weight, allowed: p.Tenant.Limits, cache: p.Tenant.PrefixCache,
		cachedRate: p.Tenant.CachedRate()}
	a.mu.Unlock()
	return api.Principal{Tenant: p.Tenant.ID, KeyID: p.KeyID, Incarnation: p.Tenant.Incarnation}, nil
}

func (a *authenticator) info(tenantID string) tenantInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tenants[tenantID]
}

// cachedRate is the rate tenantID's cached prompt tokens are billed at:
// its setting as of its last authentication, 1 (full price) if unknown.
func (a *authenticator) cachedRate(tenantID string) float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i, ok := a.tenants[tenantID]; ok {
		return i.cachedRate
	}
	return 1
}

func storeUnavailable() *api.Error {
	return &api.Error{Status: http.StatusServiceUnavailable, Type: api.TypeServer, Code: "service_unavailable",
		Message: "The tenant store is unavailable; retry shortly.", Headers: http.Header{"Retry-After": {"1"}}}
}

// invalidKeyMessage answers every rejected key alike: the store does not
// say which check failed, so the message names every possibility.
const invalidKeyMessage = "Incorrect API key provided, or the key was revoked, or its tenant is disabled."

// service implements api.Service on the gateway.
type service struct{ g *Gateway }

var _ api.Service = service{}

// Models implements api.Service: the models the tenant may use that are
// being served, with their effective context. Models not served now
// (no workers, or policy refuse) are left out.
func (s service) Models(ctx context.Context, p api.Principal) ([]api.Model, error) {
	g := s.g
	limits := g.auth.info(p.Tenant).allowed
	var out []api.Model
	for _, st := range g.admission.States() {
		if !limits.Allows(st.Model) {
			continue
		}
		cur, _, err := g.admission.State(ctx, st.Model)
		if err != nil {
			return nil, s.storeError(err)
		}
		if !cur.Serving {
			continue
		}
		if ml, found, err := g.modelLimits.Get(ctx, st.Model); err != nil {
			return nil, s.storeError(err)
		} else if found && !ml.Allows(p.Tenant) {
			continue
		}
		out = append(out, api.Model{ID: cur.Model, Created: g.started.Unix(), OwnedBy: "warden",
			ContextLength: cur.Effective, ConfiguredContextLength: cur.Configured, DType: weightsDTypes(g.reg.Healthy(cur.Model))})
	}
	out, err := s.withAdapters(ctx, p.Tenant, out)
	if err != nil {
		return nil, err
	}
	return s.withAliases(ctx, out), nil
}

// withAdapters adds to models, the models a tenant may use, the LoRA
// adapters it may use on them: like their base's entry but for the ID
// and parent (the base), as vLLM lists LoRA modules.
func (s service) withAdapters(ctx context.Context, tenantID string, models []api.Model) ([]api.Model, error) {
	if s.g.adapters == nil {
		return models, nil
	}
	as, err := s.g.adapters.Usable(ctx, tenantID)
	if err != nil {
		return nil, s.storeError(err)
	}
	n := len(models)
	for _, a := range as {
		if i := slices.IndexFunc(models[:n], func(m api.Model) bool { return m.ID == a.BaseModel }); i >= 0 {
			m := models[i]
			m.ID, m.Parent = a.Name, a.BaseModel
			models = append(models, m)
		}
	}
	return models, nil
}

// withAliases adds to models, the models a tenant may use, an entry for
// each alias of one of them, like its target's but for its ID and
// metadata.alias_for.
func (s service) withAliases(ctx context.Context, models []api.Model) []api.Model {
	as := s.g.aliases.List(ctx)
	byID := make(map[string]api.Model, len(models))
	for _, m := range models {
		byID[m.ID] = m
	}
	for _, a := range as {
		if m, ok := byID[a.Target]; ok && !s.g.admission.Has(a.Name) {
			m.ID, m.AliasFor = a.Name, a.Target
			models = append(models, m)
		}
	}
	return models
}

// resolveAlias points req at its model when it names an alias: the
// request is then served as one to the target in every respect (limits,
// usage, metrics, the model its response names). A model's own name is
// never an alias (an admin alias set before a model of that name was
// configured does not hide it).
func (s service) resolveAlias(ctx context.Context, req *api.GenerateRequest) {
	if s.g.admission.Has(req.Model) {
		return
	}
	if target, ok := s.g.aliases.Resolve(ctx, req.Model); ok {
		req.Model = target
	}
}

// weightsDTypes names the element types the workers compute with, sorted
// and joined by ","; workers that do not say are left out.
func weightsDTypes(ws []registry.Snapshot) string {
	var ds []string
	for _, w := range ws {
		if w.WeightsDType != "" && !slices.Contains(ds, w.WeightsDType) {
			ds = append(ds, w.WeightsDType)
		}
	}
	slices.Sort(ds)
	return strings.Join(ds, ",")
}

func (s service) storeError(err error) error {
	if errors.Is(err, tenant.ErrUnavailable) {
		return storeUnavailable()
	}
	return err
}

// Generate implements api.Service: it records the request, tokenizes it,
// admits it (context window, then tenant limits) and starts its driver.
// Every rejection happens here, before any worker is contacted (I1).
func (s service) Generate(ctx context.Context, p api.Principal, req *api.GenerateRequest) (api.Generation, error) {
	g := s.g
	s.resolveAlias(ctx, req)
	// A LoRA adapter's request runs on its base model under the adapter;
	// the response and the usage name the adapter (req.Model).
	ad, adErr := s.resolveAdapter(ctx, p.Tenant, req.Model)
	info := lifecycle.Info{ID: req.RequestID, Tenant: p.Tenant, Model: req.Model, Priority: req.Priority, Received: req.ReceivedAt}
	if ad != nil {
		info.Model, info.Adapter = ad.BaseModel, ad.Hash
	}
	if !info.Received.IsZero() {
		info.Deadline = info.Received.Add(g.cfg.Gateway.RequestTimeout)
	}
	if g.cfg.Gateway.TrustClientRequestID {
		info.ClientRequestID = req.ClientRequestID
	}
	ctx = obs.WithRequest(ctx, req.RequestID, p.Tenant)
	ctx, span := g.startRequestSpan(ctx, req, p.Tenant)
	r, err := g.table.Start(ctx, info)
	if err != nil {
		span.End()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	var d *driver
	if g.begin() {
		if adErr != nil {
			err = adErr
		} else if d, err = s.admit(ctx, r, p, req, ad); err != nil {
			g.running.Done()
		}
	} else {
		err = abortedError(lifecycle.CauseShutdown, 0)
	}
	if err != nil {
		state, cause, clientErr := lifecycle.Rejected, "", (*api.Error)(nil)
		if errors.As(err, &clientErr) {
			cause = clientErr.Code
		} else {
			state, cause, clientErr = lifecycle.Failed, lifecycle.CauseInternal, api.Internal()
			g.logger.ErrorContext(ctx, "admitting request", "err", err)
		}
		_ = r.Finish(state, cause)
		snap := r.Snapshot()
		g.metrics.finished(snap, clientErr.Status, time.Time{}, time.Time{})
		endRequestSpan(span, snap)
		return nil, clientErr
	}
	d.span = span
	go d.run()
	return d.gen, nil
}

// resolveAdapter returns the LoRA adapter a request for model names, nil
// for a model (or a name nothing serves: admission answers it 404). An
// adapter the tenant may not use, or whose base model is not configured,
// is nil too: the same 404 as for a model that does not exist.
func (s service) resolveAdapter(ctx context.Context, tenantID, model string) (*tenant.Adapter, error) {
	g := s.g
	if g.adapters == nil || g.admission.Has(model) {
		return nil, nil
	}
	a, err := g.adapters.Resolve(ctx, tenantID, model)
	switch {
	case errors.Is(err, adapters.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, s.storeError(err)
	case !g.admission.Has(a.BaseModel):
		return nil, nil
	}
	return &a, nil
}

// admit checks req and returns its driver, or the rejection. ad is the
// LoRA adapter req runs under (nil: none): then the model served is its
// base, whose limits and capacity apply, and usage is recorded under
// req.Model.
func (s service) admit(ctx context.Context, r *lifecycle.Request, p api.Principal, req *api.GenerateRequest, ad *tenant.Adapter) (*driver, error) {
	g := s.g
	model := r.Info().Model
	for _, stop := range req.Stop {
		if len(stop) > maxStopBytes {
			return nil, api.InvalidRequest("stop", api.CodeInvalidValue,
				fmt.Sprintf("Stop sequences are limited to %d bytes.", maxStopBytes))
		}
	}
	if !g.admission.Has(model) {
		return nil, api.ModelNotFound(req.Model)
	}
	if err := g.startingError(model); err != nil {
		return nil, err
	}
	mt := g.tokenizers.get(model)
	if mt == nil {
		return nil, api.ModelUnavailable(model, "no worker serving it has registered yet")
	}
	prompt, err := mt.encodePrompt(req)
	if err != nil {
		return nil, err
	}
	if lb := req.LogitBias; len(lb) > 0 && int(lb[len(lb)-1].Token) >= mt.tok.VocabSize() {
		return nil, api.InvalidRequest("logit_bias", api.CodeInvalidValue, fmt.Sprintf(
			"Invalid 'logit_bias': token %d is outside the vocabulary of model %q (%d tokens).", lb[len(lb)-1].Token, req.Model, mt.tok.VocabSize()))
	}
	constraint, constraintParam := req.Constraint, req.ConstraintParam
	if tc, err := toolConstraint(req, mt.tools, g.grammars.Cache); err != nil {
		return nil, err
	} else if tc != "" {
		constraint, constraintParam = tc, "tools"
	}
	// Every worker that may serve the model accepts the constraint (the
	// check each runs, against the smallest limits they advertised): one
	// over a limit is a 400 naming it, before anything is reserved.
	if constraint != "" {
		if _, err := g.reg.ConstraintLimits(model).Accept(g.grammars.Cache, constraint); err != nil {
			return nil, api.ConstraintError(constraintParam, err)
		}
	}
	param := "prompt"
	if req.Kind == api.KindChat {
		param = "messages"
	}
	dec, err := g.admission.Admit(ctx, admission.Request{
		Model: model, PromptTokens: int64(len(prompt)), MaxTokens: req.MaxTokens, PromptParam: param,
	})
	if err != nil {
		return nil, s.storeError(err)
	}
	// The store holds the priority to the tenant's max_priority (I8): one
	// above it is a 403 here, before any worker is contacted.
	// n choices share one prefill: the prompt counts once, the output
	// n times.
	n := int64(max(req.N, 1))
	ar := tenant.AcquireRequest{Model: model, Tokens: int64(len(prompt)) + n*dec.MaxTokens, Priority: req.Priority}
	if ad != nil {
		ar.UsageModel = req.Model
	}
	if req.MaxTokens == nil {
		// No max_tokens: the output gets what the tenant can still spend
		// (token rate, budget), at least one token a choice; it ends
		// with "length".
		ar.MinTokens = int64(len(prompt)) + n
	}
	lease, err := g.store.Acquire(ctx, p.Tenant, ar)
	if err != nil {
		maxParam := "max_tokens"
		if req.MaxTokens == nil {
			maxParam = param
		}
		return nil, limitError(req.Model, ar, maxParam, err)
	}
	if held := lease.Info().HeldTokens; ar.MinTokens > 0 && !lease.Info().Degraded && held < ar.Tokens {
		dec.MaxTokens = (held - int64(len(prompt))) / n
	}
	if err := r.Advance(lifecycle.Admitted); err != nil {
		g.releaseLease(lease, req.RequestID, tenant.Consumed{})
		return nil, err
	}
	d := &driver{
		g: g, req: r, lease: lease, weight: g.auth.info(p.Tenant).weight, priority: lease.Info().Priority, tok: mt,
		log:             g.logger.With("model", req.Model),
		adapter:         ad,
		prompt:          prompt,
		promptParam:     param,
		maxTokens:       dec.MaxTokens,
		n:               int(n),
		sampling:        sampling(req, constraint, dec.MaxTokens),
		constraintParam: constraintParam,
		stops:           req.Stop,
		tools:           mt.toolParsers(req),
		reason:          mt.reasoningParsers(req, prompt, constraint != "" && !thinkingAllowed(req, constraint, constraintParam)),
		gen:             &generation{req: r, events: make(chan api.Event)},
	}
	d.markers = mt.keptMarkers(d.tools != nil, d.reason != nil)
	d.domain, d.cacheOn = g.domains.of(p, g.auth.info(p.Tenant).cache, r.Info().Adapter)
	// Prompt logprobs need every prompt position computed: no cache
	// domain, so no worker takes a prefix hit (nor seals for others).
	d.cacheOn = d.cacheOn && d.sampling.PromptLogprobs == nil
	return d, nil
}

// sampling converts the request's parameters: OpenAI's defaults
// (temperature 1, top_p 1), a random seed when none is given, the
// sampling controls, and the output constraint (structured output or
// tool calls; "" for none).
func sampling(req *api.GenerateRequest, constraint string, maxTokens int64) *controlpb.SamplingParams {
	sp := &controlpb.SamplingParams{Temperature: 1, TopP: 1, MaxTokens: int32(min(maxTokens, 1<<31-1)),
		Constraint: constraint,
		Logprobs:   req.Logprobs, TopLogprobs: int32(req.TopLogprobs),
		TopK: int32(req.TopK), MinP: float32(req.MinP),
		PresencePenalty: float32(req.PresencePenalty), FrequencyPenalty: float32(req.FrequencyPenalty),
		RepetitionPenalty: float32(req.RepetitionPenalty), Speculative: req.Speculative}
	if top, ok := req.PromptScoring(); ok {
		k := int32(top)
		sp.PromptLogprobs = &k
	}
	for _, b := range req.LogitBias {
		sp.LogitBias = append(sp.LogitBias, &controlpb.LogitBias{Token: b.Token, Bias: float32(b.Bias)})
	}
	if req.N > 1 {
		sp.N = int32(req.N)
	}
	if req.Temperature != nil {
		sp.Temperature = float32(*req.Temperature)
	}
	if req.TopP != nil {
		sp.TopP = float32(*req.TopP)
	}
	if req.Seed != nil {
		sp.Seed = uint64(*req.Seed)
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		sp.Seed = binary.LittleEndian.Uint64(b[:])
	}
	return sp
}

// limitError maps a tenant store denial of ar to the client's error.
// maxParam names the field that set the output budget: "max_tokens", or
// the prompt's param when the client sent none (then only the prompt and
// one output token were asked for).
func limitError(model string, ar tenant.AcquireRequest, maxParam string, err error) error {
	var le *tenant.LimitError
	errors.As(err, &le)
	var h http.Header
	if le != nil {
		h = rateLimitHeaders(le.Quota)
	}
	asked := ar.Tokens
	what := fmt.Sprintf("the prompt plus max_tokens (%d tokens)", asked)
	if ar.MinTokens > 0 {
		asked = ar.MinTokens
		what = fmt.Sprintf("the prompt plus one output token (%d tokens)", asked)
	}
	switch {
	case errors.Is(err, tenant.ErrModelNotAllowed):
		return api.ModelNotFound(model)
	case errors.Is(err, tenant.ErrRequestTooLarge):
		limit := "per-minute token limit"
		if le.Kind == tenant.KindBudget {
			limit = "whole token budget"
		}
		return api.InvalidRequest(maxParam, "request_too_large", fmt.Sprintf(
			"This request can never be admitted: %s exceeds your tenant's %s of %d tokens.", what, limit, le.Limit))
	case errors.Is(err, tenant.ErrInsufficientQuota):
		e := api.RateLimited(fmt.Sprintf(
			"Your tenant's token budget for this period has %d of %d tokens left, fewer than this request may use: %s. Lower max_tokens, or retry when the period resets.",
			le.Remaining, le.Limit, what), le.RetryAfter, h)
		e.Code = "insufficient_quota"
		return e
	case errors.Is(err, tenant.ErrRateLimited):
		var msg string
		switch le.Kind {
		case tenant.KindTokens:
			msg = fmt.Sprintf("Rate limit reached for tokens per minute: limit %d, %d left, this request needs %s.", le.Limit, le.Remaining, what)
		case tenant.KindConcurrency:
			msg = fmt.Sprintf("Rate limit reached for concurrency: your tenant may run %d requests at once.", le.Limit)
		default:
			msg = fmt.Sprintf("Rate limit reached for requests per minute: limit %d.", le.Limit)
		}
		return api.RateLimited(msg+" Retry after the time in the retry-after header.", le.RetryAfter, h)
	case errors.Is(err, tenant.ErrForbidden) && le != nil && le.Kind == tenant.KindPriority:
		// Not a rate limit: retrying the same request can never succeed,
		// so no retry-after.
		return &api.Error{Status: http.StatusForbidden, Type: api.TypeInvalidRequest, Code: "forbidden", Param: "priority",
			Message: fmt.Sprintf("The requested priority is above the maximum your tenant may use (%d); send a priority from 0 to %d, or ask the operator to raise the tenant's max_priority.", le.Limit, le.Limit)}
	case errors.Is(err, tenant.ErrForbidden):
		return &api.Error{Status: http.StatusForbidden, Type: api.TypeInvalidRequest, Code: "forbidden",
			Message: "Your tenant is disabled; ask the operator to enable it."}
	case errors.Is(err, tenant.ErrNotFound), errors.Is(err, tenant.ErrUnauthenticated):
		return api.InvalidAPIKey(invalidKeyMessage)
	case errors.Is(err, tenant.ErrUnavailable):
		return storeUnavailable()
	}
	return err
}

// releaseLease releases a lease with the request's actual usage. It tries
// once on the caller's path — so a healthy store has reconciled the
// tenant's tokens before the response ends, and the client's next request
// sees the refund — and, if the store is unavailable, hands the release to
// the journal, which retries it until the store is back, so that an outage
// never holds up responses and the tenant's concurrency slot returns within
// a second of the store's recovery, not at the lease's TTL.
func (g *Gateway) releaseLease(l *tenant.Lease, requestID string, used tenant.Consumed) {
	ctx, cancel := context.WithTimeout(context.Background(), leaseReleaseTimeout)
	defer cancel()
	err := l.Release(ctx, used)
	if errors.Is(err, tenant.ErrUnavailable) {
		g.journal.Add(l, used, requestID)
		return
	}
	g.leaseReleased(requestID, err)
}

func (g *Gateway) leaseReleased(requestID string, err error) {
	if err != nil {
		g.logger.Warn("releasing tenant lease", slog.String(obs.KeyRequestID, requestID), "err", err)
	}
}
