// Package admission decides, per model, which context window the gateway
// advertises and enforces (invariant I2), and, per request, whether it fits
// (invariant I1).
//
// # Effective context (I2)
//
// A model's configured context is models[].context_length, lowered by the
// tenant store's per-model MaxContext when that is set. Its effective
// context is the smaller of the configured context and the capacity of
// every healthy worker that may serve it, prefill, decode and both alike,
// where a worker's capacity is its KV pool's capacity_tokens (the most
// tokens one request can ever hold there), lowered by the model's
// max_position_embeddings when the worker reports it. When they disagree,
// policy clamp advertises and enforces the smaller window (the change is
// reported to Config.OnChange, which logs a warning and sets a metric);
// policy refuse stops serving the model (503) until they agree. A model is
// servable when it has a healthy both worker, or a healthy prefill worker
// and a healthy decode worker.
//
// # Capacity truth (I12)
//
// The effective context is then lowered to what the pools can hold now,
// net of quarantined pages (WorkerCapacity.UnusableTokens): the best
// decode (or both) worker, paired with the smallest prefill pool. When
// that lowers it, the state is Degraded (an event, a metric and an alert
// for the gateway); with no usable page left the model is not served.
// Recheck applies the current state again to a request that waited, so
// the queue never holds one that can no longer run.
//
// The state is recomputed on every change of the serving workers
// (SetWorkers, called by the registry's change feed on registration,
// capacity change and loss) and when the per-model limits change.
//
// # Requests (I1)
//
// Admit checks a request's exact prompt token count and max_tokens against
// the effective context before anything is reserved anywhere: a request
// that can never fit is a 400 (context_length_exceeded, or max_tokens above
// the model's output cap), never a 429 or 5xx. Without max_tokens the
// request gets what fits: the effective context minus the prompt, capped
// by the model's max_output_tokens.
package admission

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/brokenmode"
	"github.com/warden-ai/warden/tenant"
)

// Worker roles, as registered.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
	RoleBoth    = "both"
)

// Verdict says how a model's configured context relates to its workers.
type Verdict string

// Verdicts.
const (
	// VerdictAgree: every serving worker holds the configured context.
	VerdictAgree Verdict = "agree"
	// VerdictClamped: a pool is smaller; the smaller window is enforced.
	VerdictClamped Verdict = "clamped"
	// VerdictRefused: a pool is smaller and the policy is refuse.
	VerdictRefused Verdict = "refused"
	// VerdictNoWorkers: the model has no serving worker set.
	VerdictNoWorkers Verdict = "no_workers"
)

// Model is the configured serving policy of one model.
type Model struct {
	Name            string
	ContextLength   int64
	Policy          config.ContextPolicy
	MaxOutputTokens int64 // 0: no cap beyond the context
}

// ModelsFromConfig converts the configuration's models.
func ModelsFromConfig(ms []config.Model) []Model {
	out := make([]Model, len(ms))
	for i, m := range ms {
		p := m.ContextPolicy
		if p == "" {
			p = config.ContextClamp
		}
		out[i] = Model{Name: m.Name, ContextLength: int64(m.ContextLength), Policy: p, MaxOutputTokens: int64(m.MaxOutputTokens)}
	}
	return out
}

// WorkerCapacity is what one healthy worker can hold for one request.
type WorkerCapacity struct {
	ID   string
	Role string
	// CapacityTokens is the KV pool's capacity_tokens.
	CapacityTokens int64
	// UnusableTokens is the part of the capacity that the pool cannot
	// hand out now: its quarantined pages, in tokens (CapacityTokens −
	// registry.Pool.UsableTokens). 0: all of it is usable.
	UnusableTokens int64
	// MaxPositions is the model's max_position_embeddings as the worker
	// loaded it; 0 when unknown.
	MaxPositions int64
}

// limit is the most tokens the worker can serve for one request once
// nothing is quarantined.
func (w WorkerCapacity) limit() int64 {
	if w.MaxPositions > 0 && w.MaxPositions < w.CapacityTokens {
		return w.MaxPositions
	}
	return w.CapacityTokens
}

// usableLimit is the most tokens the worker can serve for one request now.
func (w WorkerCapacity) usableLimit() int64 {
	return max(min(w.limit(), w.CapacityTokens-w.UnusableTokens), 0)
}

// usableNow is the largest request the model's workers can hold now: the
// best both worker, or the best decode worker paired with a prefill
// worker (routing picks among decode workers, so the best one counts;
// any prefill worker may be paired, so the smallest one counts).
func usableNow(ws []WorkerCapacity) int64 {
	var best, bestDecode int64
	prefill := int64(-1)
	for _, w := range ws {
		switch u := w.usableLimit(); w.Role {
		case RoleBoth:
			best = max(best, u)
		case RoleDecode:
			bestDecode = max(bestDecode, u)
		case RolePrefill:
			if prefill < 0 || u < prefill {
				prefill = u
			}
		}
	}
	if prefill >= 0 {
		best = max(best, min(bestDecode, prefill))
	}
	return best
}

// State is a model's current context agreement.
type State struct {
	Model string
	// Configured is the configured context, lowered by the tenant store's
	// MaxContext for the model when set.
	Configured int64
	// Effective is the window advertised and enforced; 0 when the model is
	// not served.
	Effective int64
	Policy    config.ContextPolicy
	// Serving is true when requests for the model are admitted.
	Serving bool
	Verdict Verdict
	// Reason says why the model is not served (or why it is clamped).
	Reason string
	// Workers are the healthy workers serving the model, by ID.
	Workers []WorkerCapacity
	// MaxOutputTokens is the output cap (configuration and tenant store,
	// the smaller); 0 means none.
	MaxOutputTokens int64
	// Degraded is set when quarantined KV pages lower Effective below
	// what the pools hold once nothing is quarantined (I12); Reason says
	// by how much.
	Degraded bool
	// Usable is the largest request the workers can hold now, net of
	// quarantined pages (0 without workers).
	Usable int64
}

// PublicReason says why a model is not served in words fit for API
// customers: no worker IDs, addresses or pool sizes (Reason has those,
// for logs and the admin API).
func (st State) PublicReason() string {
	switch {
	case st.Verdict == VerdictNoWorkers:
		return "no healthy worker serves it"
	case st.Verdict == VerdictRefused:
		return "its configured context does not fit its workers' KV pools (context_policy refuse)"
	case st.Degraded:
		return "its workers' KV pools are out of usable pages"
	}
	return "it is not being served"
}

// Compute derives a model's state from its policy, its per-model limits
// from the tenant store and its healthy workers.
func Compute(m Model, limits tenant.ModelLimits, workers []WorkerCapacity) State {
	st := State{Model: m.Name, Configured: m.ContextLength, Policy: m.Policy, MaxOutputTokens: m.MaxOutputTokens}
	if limits.MaxContext > 0 && limits.MaxContext < st.Configured {
		st.Configured = limits.MaxContext
	}
	if o := limits.MaxOutputTokens; o > 0 && (st.MaxOutputTokens == 0 || o < st.MaxOutputTokens) {
		st.MaxOutputTokens = o
	}
	st.Workers = append([]WorkerCapacity(nil), workers...)
	sort.Slice(st.Workers, func(i, j int) bool { return st.Workers[i].ID < st.Workers[j].ID })

	var both, prefill, decode bool
	var smallest *WorkerCapacity
	for i := range st.Workers {
		w := &st.Workers[i]
		switch w.Role {
		case RoleBoth:
			both = true
		case RolePrefill:
			prefill = true
		case RoleDecode:
			decode = true
		}
		if smallest == nil || w.limit() < smallest.limit() {
			smallest = w
		}
	}
	switch {
	case !both && !(prefill && decode):
		st.Verdict = VerdictNoWorkers
		st.Reason = "no healthy worker serves it"
		if prefill {
			st.Reason = "no healthy decode or both worker serves it"
		} else if decode {
			st.Reason = "no healthy prefill or both worker serves it"
		}
		return st
	case smallest.limit() >= st.Configured:
		st.Verdict, st.Serving, st.Effective = VerdictAgree, true, st.Configured
		st.degrade()
		return st
	}
	what := fmt.Sprintf("KV pool capacity %d", smallest.CapacityTokens)
	if smallest.limit() < smallest.CapacityTokens {
		what = fmt.Sprintf("maximum position count %d", smallest.MaxPositions)
	}
	if m.Policy == config.ContextRefuse {
		st.Verdict = VerdictRefused
		st.Reason = fmt.Sprintf("model %s not served: configured context %d exceeds %s of worker %s (context_policy refuse)",
			m.Name, st.Configured, what, smallest.ID)
		return st
	}
	st.Verdict, st.Serving, st.Effective = VerdictClamped, true, smallest.limit()
	st.Reason = fmt.Sprintf("configured context %d exceeds %s of worker %s; clamped to %d",
		st.Configured, what, smallest.ID, st.Effective)
	if st.MaxOutputTokens >= st.Effective {
		// Keep room for at least one prompt token.
		st.MaxOutputTokens = st.Effective - 1
	}
	st.degrade()
	return st
}

// degrade lowers the effective context of a served model to what its
// pools can hold now, net of quarantined pages (I12), and keeps the output
// cap below it.
func (st *State) degrade() {
	now := usableNow(st.Workers)
	st.Usable = now
	if now < st.Effective {
		st.Degraded = true
		st.Reason = strings.TrimPrefix(st.Reason+fmt.Sprintf(
			"; quarantined KV pages lower the effective context from %d to %d", st.Effective, now), "; ")
		st.Effective = now
		if now < 2 {
			// Not even one prompt and one output token fit.
			st.Serving, st.Effective = false, 0
		}
	}
	if st.Degraded && st.MaxOutputTokens >= st.Effective {
		// Keep room for at least one prompt token.
		st.MaxOutputTokens = max(st.Effective-1, 0)
	}
}

// LimitsSource serves the tenant store's per-model limits
// (tenant.ModelLimitsCache).
type LimitsSource interface {
	Get(ctx context.Context, model string) (tenant.ModelLimits, bool, error)
}

var _ LimitsSource = (*tenant.ModelLimitsCache)(nil)

// Config configures a Controller.
type Config struct {
	Models []Model
	// Limits, if set, supplies per-model limits from the tenant store.
	Limits LimitsSource
	// OnChange, if set, is called (outside the controller's lock, in
	// order) whenever a model's state changes, and once per model at
	// creation.
	OnChange func(prev, cur State)
}

// Controller holds every configured model's state.
type Controller struct {
	cfg    Config
	models map[string]Model
	order  []string

	notify sync.Mutex // serialises OnChange calls in state order
	mu     sync.Mutex
	states map[string]State
	caps   map[string][]WorkerCapacity
	limits map[string]tenant.ModelLimits
}

// NewController returns a controller whose models have no workers yet.
func NewController(cfg Config) *Controller {
	c := &Controller{
		cfg:    cfg,
		models: make(map[string]Model, len(cfg.Models)),
		states: make(map[string]State, len(cfg.Models)),
		caps:   make(map[string][]WorkerCapacity),
		limits: make(map[string]tenant.ModelLimits),
	}
	for _, m := range cfg.Models {
		c.models[m.Name] = m
		c.order = append(c.order, m.Name)
	}
	sort.Strings(c.order)
	for _, name := range c.order {
		c.update(name, func() {})
	}
	return c
}

// Has reports whether model is configured.
func (c *Controller) Has(model string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.models[model]
	return ok
}

// SetModel replaces the configuration (context length, policy, output
// cap) of the configured model m.Name and recomputes its state at once (a
// configuration reload). It reports false, changing nothing, for a model
// that is not configured: models are added or removed only by a restart.
func (c *Controller) SetModel(m Model) bool {
	if !c.Has(m.Name) {
		return false
	}
	c.update(m.Name, func() { c.models[m.Name] = m })
	return true
}

// SetWorkers replaces the healthy workers of model and recomputes its
// state at once. Unknown models are ignored.
func (c *Controller) SetWorkers(model string, workers []WorkerCapacity) {
	if !c.Has(model) {
		return
	}
	ws := append([]WorkerCapacity(nil), workers...)
	c.update(model, func() { c.caps[model] = ws })
}

// update applies change under the lock, recomputes model's state and
// reports a change.
func (c *Controller) update(model string, change func()) {
	c.notify.Lock()
	defer c.notify.Unlock()
	c.mu.Lock()
	change()
	prev, had := c.states[model]
	cur := Compute(c.models[model], c.limits[model], c.caps[model])
	c.states[model] = cur
	c.mu.Unlock()
	if c.cfg.OnChange != nil && (!had || !sameState(prev, cur)) {
		c.cfg.OnChange(prev, cur)
	}
}

func sameState(a, b State) bool {
	if a.Configured != b.Configured || a.Effective != b.Effective || a.Serving != b.Serving ||
		a.Verdict != b.Verdict || a.Reason != b.Reason || a.MaxOutputTokens != b.MaxOutputTokens || a.Degraded != b.Degraded || a.Usable != b.Usable ||
		len(a.Workers) != len(b.Workers) {
		return false
	}
	for i := range a.Workers {
		if a.Workers[i] != b.Workers[i] {
			return false
		}
	}
	return true
}

// State returns model's current state, first refreshing its per-model
// limits from the tenant store. ok is false for an unconfigured model.
func (c *Controller) State(ctx context.Context, model string) (State, bool, error) {
	if !c.Has(model) {
		return State{}, false, nil
	}
	if c.cfg.Limits != nil {
		lim, found, err := c.cfg.Limits.Get(ctx, model)
		if err != nil {
			return State{}, true, fmt.Errorf("admission: model limits of %s: %w", model, err)
		}
		if !found {
			lim = tenant.ModelLimits{}
		}
		c.mu.Lock()
		changed := !sameLimits(c.limits[model], lim)
		c.mu.Unlock()
		if changed {
			c.update(model, func() { c.limits[model] = lim })
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.states[model], true, nil
}

func sameLimits(a, b tenant.ModelLimits) bool {
	return a.MaxContext == b.MaxContext && a.MaxOutputTokens == b.MaxOutputTokens
}

// Current returns model's state as last computed, without refreshing its
// limits; ok is false for an unconfigured model.
func (c *Controller) Current(model string) (State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.states[model]
	return st, ok
}

// Recheck decides again, against the model's current state, whether an
// admitted request of prompt + output tokens can still run: capacity may
// have shrunk (quarantine, a lost worker) while it waited. The rejection
// is the 400 (or 503) Admit would give now; nil when it still fits.
func (c *Controller) Recheck(model string, prompt, output int64, promptParam string) error {
	st, ok := c.Current(model)
	if err := unserved(model, st, ok); err != nil {
		return err
	}
	return st.exceeded(prompt, output, promptParam)
}

// unserved is the rejection of a request for model whose state is st (ok
// false: the model is not configured): 404 or 503; nil when it is served.
func unserved(model string, st State, ok bool) error {
	switch {
	case !ok:
		return api.ModelNotFound(model)
	case !st.Serving:
		return api.ModelUnavailable(model, st.PublicReason())
	}
	return nil
}

// exceeded is the 400 for prompt + output tokens beyond the context
// requests are checked against, naming the prompt's parameter when the
// prompt alone reaches it and max_tokens otherwise; nil when they fit.
func (st State) exceeded(prompt, output int64, promptParam string) error {
	limit := st.limit()
	if prompt+output <= limit {
		return nil
	}
	param := "max_tokens"
	if prompt >= limit {
		param = promptParam
	}
	return api.ContextLengthExceeded(param, limit, prompt, output)
}

// limit is the context requests are checked against: the effective one
// (I1, I2), in every build but the probe's deliberately broken one.
func (st State) limit() int64 {
	if brokenmode.On(brokenmode.Admission) {
		return math.MaxInt32 // test-only build: see internal/brokenmode
	}
	return st.Effective
}

// States returns every configured model's state, by name, without
// refreshing limits.
func (c *Controller) States() []State {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]State, 0, len(c.order))
	for _, name := range c.order {
		out = append(out, c.states[name])
	}
	return out
}

// Request is what admission needs to know about a request.
type Request struct {
	Model string
	// PromptTokens is the exact number of tokens that will be prefilled.
	PromptTokens int64
	// MaxTokens is the client's max_tokens; nil lets admission choose.
	MaxTokens *int64
	// PromptParam names the prompt in errors: "messages" or "prompt".
	PromptParam string
}

// Decision is an admitted request's resolved limits.
type Decision struct {
	// MaxTokens is the output budget: the client's, or what fits.
	MaxTokens int64
	// Limit is the effective context the request was checked against.
	Limit int64
	State State
}

// Admit decides whether req fits its model. Rejections are *api.Error
// values (404 unknown model, 503 model not served, 400 for a request that
// can never fit); other errors come from the tenant store's limits.
func (c *Controller) Admit(ctx context.Context, req Request) (Decision, error) {
	st, ok, err := c.State(ctx, req.Model)
	if ok && err != nil {
		return Decision{}, err
	}
	if err := unserved(req.Model, st, ok); err != nil {
		return Decision{}, err
	}
	if req.PromptTokens <= 0 {
		return Decision{}, api.InvalidRequest(req.PromptParam, api.CodeInvalidValue,
			"The prompt is empty: it must hold at least one token.")
	}
	limit, prompt := st.limit(), req.PromptTokens
	d := Decision{Limit: limit, State: st}
	if req.MaxTokens != nil {
		want := *req.MaxTokens
		if st.MaxOutputTokens > 0 && want > st.MaxOutputTokens {
			return Decision{}, api.InvalidRequest("max_tokens", api.CodeIntegerTooLarge, fmt.Sprintf(
				"max_tokens is too large: %d. This model supports at most %d completion tokens.", want, st.MaxOutputTokens))
		}
		if err := st.exceeded(prompt, want, req.PromptParam); err != nil {
			return Decision{}, err
		}
		d.MaxTokens = want
		return d, nil
	}
	// At least one output token is always needed.
	if err := st.exceeded(prompt, 1, req.PromptParam); err != nil {
		return Decision{}, err
	}
	d.MaxTokens = limit - prompt
	if st.MaxOutputTokens > 0 {
		d.MaxTokens = min(d.MaxTokens, st.MaxOutputTokens)
	}
	return d, nil
}
