// Package engine schedules sequences onto a compute Backend with
// continuous batching, samples tokens, and enforces the KV ownership check
// (DESIGN I3) before every forward step.
//
// The engine never reserves or releases KV pages: the worker does, because
// only the worker knows whether a release must wait for a transfer to drain
// (I5). The engine's promise is narrower and absolute: it reads a page only
// after the pool has confirmed, in the same step, that the page belongs to
// the sequence and that every slot read was written for it — or, for a
// shared prefix page, that it is sealed with exactly the tag the engine
// computed from the sequence's own prompt and cache domain (prefix.go);
// and once a stream's final event is delivered it no longer touches the
// sequence's pages.
//
// Speculative decoding (speculate.go) verifies tokens proposed from a
// sequence's own text in one step and emits the ones the model samples
// too; it changes no output, and marks written only the positions whose
// input it accepted.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/warden-ai/warden/worker/kvpool"
)

// Errors a sequence can finish with.
var (
	// ErrAborted: the request's context ended or its stream was closed.
	ErrAborted = errors.New("engine: sequence aborted")
	// ErrStopped: the engine stopped while the sequence was running.
	ErrStopped = errors.New("engine: engine stopped")
	// ErrBadRequest: the request is inconsistent (pages too few, bad
	// prompt, bad sampling).
	ErrBadRequest = errors.New("engine: bad request")
)

// Config tunes the scheduler.
type Config struct {
	// PageTokens is the KV pool's page size in tokens.
	PageTokens int
	// ChunkTokens bounds the prompt tokens one step prefills across all
	// sequences (chunked prefill).
	ChunkTokens int
	// DecodingChunkTokens, if in (0, ChunkTokens), bounds the prompt
	// tokens of a step that also decodes: every decoding sequence waits
	// for the whole step, so it bounds their inter-token latency. Such a
	// step still takes a quarter of the prompt tokens waiting times the
	// waiting sequences' share of the batch when that is more (up to
	// ChunkTokens), so a backlog of prompts clears.
	DecodingChunkTokens int
	// ArrivalOrder gives ChunkTokens to prompts in admission order; by
	// default the shortest left to compute go first (step).
	ArrivalOrder bool
	// MaxBatch bounds the sequences running at once.
	MaxBatch int
	// EOS lists the model's end-of-sequence token ids.
	EOS []int32
	// VocabSize bounds valid token ids in prompts.
	VocabSize int
	// Speculation configures n-gram speculative decoding (speculate.go).
	Speculation Speculation
}

// Request is one sequence to run. The caller has reserved Pages for it.
type Request struct {
	Owner kvpool.Owner
	// Weight is the owner's tenant's fair-scheduling weight (0 means 1);
	// see admit for how the engine uses Owner.Tenant and Weight.
	Weight int
	// Pages must cover len(Prompt)+Sampling.MaxTokens-1 positions
	// (len(Prompt) for PrefillOnly).
	Pages  []kvpool.PageID
	Prompt []int32
	// Prefilled, when true, says the whole prompt is already in Pages
	// (decode after a verified transfer) and FirstToken was sampled by the
	// prefill worker.
	Prefilled  bool
	FirstToken int32
	Sampling   Sampling
	// FirstTokens is, for a Prefilled request of several choices
	// (SubmitChoices), the first token the prefill worker sampled for each
	// choice, in choice order (FirstToken is then ignored).
	FirstTokens []int32
	// PrefillOnly stops after the prompt is in the cache and the first
	// token is sampled (the prefill role).
	PrefillOnly bool
	// ReportProgress asks for EventProgress after every prefill chunk (so
	// a prefill worker can start sending finished pages).
	ReportProgress bool
	// Prefix, when set, reuses and publishes sealed prefix pages; see
	// Prefix.
	Prefix *Prefix
	// Adapter is the LoRA adapter the request runs under, nil for the
	// base model; its Hash must equal Owner.Adapter. The caller keeps it
	// loaded until the request's stream ends.
	Adapter Adapter
	// Embed, when not PoolingNone, makes this an embedding request
	// (embed.go): the prompt is prefilled into Pages (which need hold
	// only the prompt), nothing is sampled (Sampling is ignored), and the
	// sequence finishes with FinishEmbedded and the pooled, normalised
	// final hidden state in Result.Embedding. The backend must implement
	// HiddenStates.
	Embed Pooling
}

// Stats are cumulative engine counters.
type Stats struct {
	Steps, PrefillTokens, DecodeTokens uint64
	// CachedTokens counts prompt positions reused from sealed prefix
	// pages instead of prefilled.
	CachedTokens uint64
	// Prefills counts prompts whose prefill completed here (one per
	// request, whatever its number of choices).
	Prefills uint64
	// ForkTokens counts prompt positions the other choices of an n > 1
	// request recomputed (the prompt's partial last page, into each
	// choice's own page); PrefillTokens counts the prompt once.
	ForkTokens uint64
	// Preemptions counts sequences paused for a tenant running nothing
	// (admit).
	Preemptions uint64
	// SpecProposed counts tokens proposed by speculative decoding and
	// SpecAccepted those of them the model sampled too (emitted without a
	// step of their own).
	SpecProposed, SpecAccepted uint64
	// Running counts the sequences that hold a batch slot, including those
	// submitted since the last step that the next step admits into a free
	// one; Waiting those beyond MaxBatch. A Waiting above 0 thus means the
	// batch is full (the gateway learns a worker's batch size from it),
	// never merely that a request arrived during a step.
	Running, Waiting int
}

// Engine runs sequences. Create it with New, start Run in a goroutine, and
// Submit requests.
type Engine struct {
	cfg     Config
	backend Backend
	pool    *kvpool.Pool
	log     *slog.Logger

	mu      sync.Mutex
	pending []*sequence
	stopped bool
	wake    chan struct{}

	// Owned by the Run goroutine.
	running []*sequence
	batch   []Chunk
	members []*sequence
	// prefilling collects a step's sequences still in their prompt;
	// hiddenAt is the step's next free row of hidden-state scratch
	// (embedding requests, embed.go).
	prefilling []*sequence
	hiddenAt   int
	// promptAt is the step's next free row of promptBuf, the logits rows
	// of prompt-logprobs chunks (promptlogprobs.go).
	promptAt  int
	promptBuf []float32
	logits    [][]float32
	sampler   sampler
	lps       logprobScratch

	steps, prefillTokens, decodeTokens atomic.Uint64
	cachedTokens                       atomic.Uint64
	prefills, forkTokens               atomic.Uint64
	preemptions                        atomic.Uint64
	specProposed, specAccepted         atomic.Uint64
	// specLogits holds the logits rows of the step's speculative chunks.
	specLogits []float32
	// hidden is the backend's hidden-state width (HiddenStates), 0 when
	// it computes none; hiddenBuf holds the step's Chunk.Hidden rows.
	hidden    int
	hiddenBuf []float32
	// masked is the scratch copy of a logits row a constrained sequence
	// masks and samples from (pick).
	masked             []float32
	nRunning, nWaiting atomic.Int64
}

type sequence struct {
	req    Request
	ctx    context.Context
	stream *Stream

	pos       int      // positions in the KV cache
	generated int      // tokens sampled
	next      [1]int32 // decode input token (an array, so a step allocates nothing)
	first     int32
	prompt    int  // prompt positions in the cache, for usage
	started   bool // admitted once; a preempted sequence resumes from pos
	// constraint is the sequence's own structured-output state, if any.
	constraint Constraint
	// out holds the tokens generated so far when the sampling's penalties
	// read them (Sampling.usesHistory).
	out []int32

	// The prefix cache (prefix.go): the chain tags of the prompt's full
	// pages, how many leading pages are shared sealed pages, and how many
	// prompt positions were reused rather than computed.
	tags   []kvpool.Tag
	shared int
	cached int

	// Choices of one request (choices.go): the first choice holds the
	// others in forks until its prompt is prefilled; until then they are
	// awaiting (running, but not stepped).
	forks    []*sequence
	awaiting bool
	// choice marks every sequence of an n > 1 request: admitted
	// together, never preempted (admit, preempt).
	choice bool

	// Speculative decoding (speculate.go), nil without it: hist holds the
	// prompt and the tokens emitted so far, in the step's input (the last
	// token, then the drafts tokens proposed for this step).
	hist   []int32
	in     []int32
	drafts int
	// specSkip is how many more decode steps go without a proposal, and
	// specBackoff the current length of such a pause (backOff).
	specSkip, specBackoff int

	// Embedding requests (embed.go): the running sum (mean) or the last
	// row (last) of the prompt's hidden states, then the result.
	pooled    []float64
	embedding []float32

	// promptLps collects the prompt's logprobs (Sampling.PromptLogprobs)
	// until its prefill completes.
	promptLps []Logprobs
}

// New creates an engine over backend and pool.
func New(cfg Config, backend Backend, pool *kvpool.Pool, logger *slog.Logger) (*Engine, error) {
	if cfg.PageTokens <= 0 || cfg.ChunkTokens <= 0 || cfg.MaxBatch <= 0 {
		return nil, fmt.Errorf("engine: PageTokens, ChunkTokens and MaxBatch must be > 0 (got %d, %d, %d)",
			cfg.PageTokens, cfg.ChunkTokens, cfg.MaxBatch)
	}
	if max := backend.MaxBatchTokens(); cfg.ChunkTokens+cfg.MaxBatch > max {
		return nil, fmt.Errorf("engine: ChunkTokens+MaxBatch = %d exceeds the backend's %d tokens per step",
			cfg.ChunkTokens+cfg.MaxBatch, max)
	}
	if cfg.VocabSize == 0 {
		cfg.VocabSize = backend.VocabSize()
	}
	sp, err := cfg.Speculation.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Speculation = sp
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{
		cfg:     cfg,
		backend: backend,
		pool:    pool,
		log:     logger,
		wake:    make(chan struct{}, 1),
		logits:  make([][]float32, cfg.MaxBatch),
	}
	for i := range e.logits {
		e.logits[i] = make([]float32, backend.VocabSize())
	}
	if hs, ok := backend.(HiddenStates); ok {
		e.hidden = hs.HiddenSize()
	}
	return e, nil
}

// Submit queues a request. The returned stream delivers its events;
// cancelling ctx or closing the stream aborts it.
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) {
	if err := e.validate(&req); err != nil {
		return nil, err
	}
	s := e.newSequence(ctx, req)
	st := s.stream
	if err := e.startPrefix(s); err != nil {
		return nil, err
	}
	if err := e.enqueue(s); err != nil {
		return nil, err
	}
	// Not s.stream: the engine may already have finished the sequence
	// and cleared it.
	return st, nil
}

// newSequence creates a validated request's sequence and its stream.
func (e *Engine) newSequence(ctx context.Context, req Request) *sequence {
	s := &sequence{req: req, ctx: ctx, stream: newStream(), first: -1}
	if req.Sampling.Constraint != nil {
		s.constraint = req.Sampling.Constraint()
	}
	if req.Prefilled {
		s.pos = len(req.Prompt)
		s.prompt = len(req.Prompt)
	}
	e.startSpeculation(s)
	return s
}

// enqueue queues s, with its forks, for admission.
func (e *Engine) enqueue(s *sequence) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return ErrStopped
	}
	e.pending = append(e.pending, s)
	e.nWaiting.Add(int64(1 + len(s.forks)))
	e.signal()
	return nil
}

func (e *Engine) validate(req *Request) error {
	if len(req.Prompt) == 0 {
		return fmt.Errorf("%w: empty prompt", ErrBadRequest)
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= e.cfg.VocabSize {
			return fmt.Errorf("%w: prompt token %d at position %d is outside the vocabulary (%d)", ErrBadRequest, t, i, e.cfg.VocabSize)
		}
	}
	if h := adapterHash(req.Adapter); h != req.Owner.Adapter {
		return fmt.Errorf("%w: the request runs under adapter %q but its KV owner names adapter %q", ErrBadRequest, h, req.Owner.Adapter)
	}
	if _, ok := e.backend.(AdapterBackend); req.Adapter != nil && !ok {
		return fmt.Errorf("%w: the backend does not serve LoRA adapters", ErrBadRequest)
	}
	if req.Embed != PoolingNone {
		return e.validateEmbed(req)
	}
	if err := req.Sampling.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := validatePromptLogprobs(req); err != nil {
		return err
	}
	if lb := req.Sampling.LogitBias; len(lb) > 0 && int(lb[len(lb)-1].Token) >= e.cfg.VocabSize {
		return fmt.Errorf("%w: logit_bias token %d is outside the vocabulary (%d)", ErrBadRequest, lb[len(lb)-1].Token, e.cfg.VocabSize)
	}
	if req.Prefilled && (req.PrefillOnly || req.FirstToken < 0 || int(req.FirstToken) >= e.cfg.VocabSize) {
		return fmt.Errorf("%w: a prefilled request needs a valid first token and cannot be prefill-only", ErrBadRequest)
	}
	need := len(req.Prompt) + req.Sampling.MaxTokens - 1
	if req.PrefillOnly {
		need = len(req.Prompt)
	}
	if have := len(req.Pages) * e.cfg.PageTokens; have < need {
		return fmt.Errorf("%w: %d pages hold %d positions, the sequence needs %d", ErrBadRequest, len(req.Pages), have, need)
	}
	return nil
}

// Stats returns cumulative counters and the current load.
func (e *Engine) Stats() Stats {
	// Admission runs at the start of a step: a sequence submitted during a
	// step (hundreds of milliseconds for a prefill chunk) is pending until
	// then although a slot is free for it.
	queued := int(e.nRunning.Load() + e.nWaiting.Load())
	running := min(queued, e.cfg.MaxBatch)
	return Stats{
		Steps:         e.steps.Load(),
		PrefillTokens: e.prefillTokens.Load(),
		DecodeTokens:  e.decodeTokens.Load(),
		CachedTokens:  e.cachedTokens.Load(),
		Prefills:      e.prefills.Load(),
		ForkTokens:    e.forkTokens.Load(),
		Preemptions:   e.preemptions.Load(),
		SpecProposed:  e.specProposed.Load(),
		SpecAccepted:  e.specAccepted.Load(),
		Running:       running,
		Waiting:       queued - running,
	}
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run drives the engine until ctx is done. Sequences still running then
// finish with ErrStopped.
func (e *Engine) Run(ctx context.Context) error {
	defer e.shutdown()
	for {
		e.admit()
		if len(e.running) == 0 {
			select {
			case <-e.wake:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		e.step(ctx)
		// The streams of the step's tokens became runnable on this
		// goroutine's processor: let them deliver before the next step
		// rather than when the scheduler preempts the step (after 10ms).
		runtime.Gosched()
	}
}

func (e *Engine) shutdown() {
	e.mu.Lock()
	e.stopped = true
	pending := e.pending
	e.pending = nil
	e.mu.Unlock()
	for _, s := range append(e.running, pending...) {
		e.finish(s, FinishError, ErrStopped)
	}
	e.running = nil
	e.nRunning.Store(0)
	e.nWaiting.Store(0)
}

// admit moves pending sequences into the running set, up to MaxBatch,
// fairly between tenants (Owner.Tenant, weighted by Request.Weight):
//
//   - a free slot goes to the pending sequence whose tenant runs the fewest
//     sequences per weight, the earliest among equals (first in, first out
//     within a tenant and between equally served tenants);
//   - when the batch is full, a pending sequence of a tenant that runs
//     nothing preempts one of a tenant that runs two or more, if that
//     tenant still runs at least as many per weight afterwards ((n-1)/w_u
//     >= 1/w_s); the victim is the most recently admitted sequence of the
//     tenant running the most per weight.
//     The preempted sequence keeps its pages and position and waits at
//     the front of the pending list; it resumes where it stopped.
//
// So a tenant never waits for a slot behind another tenant's second
// sequence, and no tenant is ever preempted down to nothing: every tenant
// that has a sequence running keeps one. Preemption changes no output: a
// sequence's tokens do not depend on the batch it runs in (determinism).
func (e *Engine) admit() {
	e.mu.Lock()
	var gone []*sequence
	e.pending = slices.DeleteFunc(e.pending, func(s *sequence) bool {
		if s.ctx.Err() != nil || s.stream.isClosed() {
			gone = append(gone, s)
			return true
		}
		return false
	})
	var admitted []*sequence
	for len(e.pending) > 0 {
		i := e.nextPending()
		s := e.pending[i]
		// A request's choices are admitted together (they share its
		// prefill) and are never preempted: preemption frees one slot, so
		// it only makes room for a single sequence.
		if need := 1 + len(s.forks); len(e.running)+need > e.cfg.MaxBatch {
			if need > 1 || !e.preempt(s) {
				break
			}
			i++ // preempt put the paused sequence in front
		}
		e.pending = slices.Delete(e.pending, i, i+1)
		e.running = append(e.running, s)
		e.running = append(e.running, s.forks...)
		if !s.started {
			s.started = true
			admitted = append(admitted, s)
		}
	}
	waiting := 0
	for _, s := range e.pending {
		waiting += 1 + len(s.forks)
	}
	e.nWaiting.Store(int64(waiting))
	e.nRunning.Store(int64(len(e.running)))
	e.mu.Unlock()
	for _, s := range gone {
		e.finish(s, FinishError, ErrAborted)
	}
	for _, s := range admitted {
		if !s.req.Prefilled {
			continue
		}
		// The prefill worker sampled the first token from its own cache.
		// Deliver it only if the transferred prompt is verifiably this
		// sequence's, then decode from it.
		if err := e.verify(s, s.pos); err != nil {
			e.violation(s, err)
			continue
		}
		// Verified (and the transfer before it): its full prompt pages
		// may now serve later requests of the domain.
		e.sealPrompt(s)
		if s.forks != nil {
			e.fork(s, func(f *sequence) (int32, *Logprobs) { return f.req.FirstToken, nil })
		}
		e.emit(s, s.req.FirstToken, nil)
	}
	e.compact()
}

// weightOf is a sequence's tenant weight, at least 1.
func weightOf(s *sequence) int64 { return int64(max(s.req.Weight, 1)) }

// runningOf counts the running sequences of tenant.
func (e *Engine) runningOf(tenant string) int64 {
	var n int64
	for _, s := range e.running {
		if s.req.Owner.Tenant == tenant {
			n++
		}
	}
	return n
}

// nextPending is the index of the pending sequence admit takes next: the
// earliest of a tenant running the fewest sequences per weight. Called
// with e.mu held and e.pending not empty.
func (e *Engine) nextPending() int {
	best, bestRun, bestW := 0, int64(-1), int64(1)
	for i, s := range e.pending {
		r, w := e.runningOf(s.req.Owner.Tenant), weightOf(s)
		if bestRun < 0 || r*bestW < bestRun*w {
			best, bestRun, bestW = i, r, w
			if r == 0 {
				break
			}
		}
	}
	return best
}

// preempt makes room in the full running set for s, when its tenant runs
// nothing and another tenant runs two or more sequences, and at least as
// many per weight without one as s's tenant would with s: the latest
// admitted sequence of the tenant running the most per weight goes to the
// front of the pending list, keeping its pages and position. It reports
// whether it did. Called with e.mu held.
func (e *Engine) preempt(s *sequence) bool {
	if e.runningOf(s.req.Owner.Tenant) > 0 {
		return false
	}
	victim, vRun, vW, ws := -1, int64(1), int64(1), weightOf(s)
	for i, r := range e.running {
		if r.choice {
			continue // a choice of an n > 1 request: admitted with the others
		}
		n, w := e.runningOf(r.req.Owner.Tenant), weightOf(r)
		if w > ws*(n-1) {
			// After the swap s's tenant would run more per weight than
			// r's (1/ws > (n-1)/w); n < 2 always lands here.
			continue
		}
		// Later sequences of the same tenant replace earlier ones: the
		// most recently admitted is the victim.
		if victim < 0 || n*vW > vRun*w || (n*vW == vRun*w && r.req.Owner.Tenant == e.running[victim].req.Owner.Tenant) {
			victim, vRun, vW = i, n, w
		}
	}
	if victim < 0 {
		return false
	}
	v := e.running[victim]
	e.running = slices.Delete(e.running, victim, victim+1)
	e.pending = slices.Insert(e.pending, 0, v)
	e.preemptions.Add(1)
	e.log.Debug("preempted a sequence for a tenant running nothing",
		"request_id", v.req.Owner.Request, "tenant", v.req.Owner.Tenant, "for_tenant", s.req.Owner.Tenant)
	return true
}

// backlogSteps: a step that decodes prefills at least this fraction of
// the prompt tokens waiting, scaled by the waiting sequences' share of
// the batch (step).
const backlogSteps = 4

// fcfsEvery: one step in fcfsEvery gives the chunk budget in admission
// order rather than shortest first (step).
const fcfsEvery = 4

// step builds one batch — every decoding sequence contributes one token,
// prompts share the chunk budget shortest left first (prefill) — checks
// ownership, runs the backend and samples.
func (e *Engine) step(ctx context.Context) {
	e.batch = e.batch[:0]
	e.members = e.members[:0]
	e.prefilling = e.prefilling[:0]
	e.hiddenAt, e.promptAt = 0, 0
	for _, s := range e.running {
		if s.ctx.Err() != nil || s.stream.isClosed() {
			e.finish(s, FinishError, ErrAborted)
			continue
		}
		if s.awaiting {
			continue
		}
		if s.pos < len(s.req.Prompt) {
			e.prefilling = append(e.prefilling, s)
			continue
		}
		e.add(s, Chunk{Tokens: s.next[:], Start: s.pos})
	}
	// The prompt with the fewest positions left to compute per tenant
	// weight goes first (shortest remaining first; admission order among
	// equals): a short prompt arriving behind a long one gets its chunk at
	// once rather than after the long one's whole prefill, and a prompt
	// already under way finishes before an equal newcomer starts. Outputs
	// do not depend on how a prompt is split (chunk invariance). Every
	// fcfsEvery-th step keeps admission order, so a long prompt progresses
	// under a stream of short ones.
	if !e.cfg.ArrivalOrder && e.steps.Load()%fcfsEvery != fcfsEvery-1 {
		slices.SortStableFunc(e.prefilling, func(a, b *sequence) int {
			return cmp.Compare(int64(len(a.req.Prompt)-a.pos)*weightOf(b), int64(len(b.req.Prompt)-b.pos)*weightOf(a))
		})
	}
	budget := e.cfg.ChunkTokens
	// A step that decodes holds back every decoding sequence's next token
	// for its whole length: a smaller budget bounds inter-token latency.
	// It still takes a backlogSteps-th of the prompt tokens waiting,
	// scaled by the waiting sequences' share of the batch, so that
	// prompts arriving faster than the small budget prefills them do not
	// queue without bound (their first token matters too), while a few
	// waiting prompts do not stall many decoding sequences.
	if decoding := len(e.batch); decoding > 0 && e.cfg.DecodingChunkTokens > 0 {
		backlog, waiting := 0, len(e.prefilling)
		for _, s := range e.prefilling {
			backlog += len(s.req.Prompt) - s.pos
		}
		budget = min(budget, max(e.cfg.DecodingChunkTokens, backlog*waiting/(backlogSteps*(waiting+decoding))))
	}
	for _, s := range e.prefilling {
		if budget == 0 {
			break
		}
		n := e.promptChunk(s, min(len(s.req.Prompt)-s.pos, budget))
		if n == 0 {
			continue
		}
		budget -= n
		e.add(s, Chunk{Tokens: s.req.Prompt[s.pos : s.pos+n], Start: s.pos})
	}
	e.compact()
	e.speculate(budget)
	if len(e.batch) == 0 {
		return
	}
	e.steps.Add(1)
	if err := e.backend.Forward(ctx, e.batch); err != nil {
		e.forwardFailed(err)
		return
	}
	for i, s := range e.members {
		if s.drafts > 0 {
			e.verifyDrafts(s, e.batch[i])
			continue
		}
		e.advance(s, e.batch[i])
	}
	e.compact()
}

// add puts s's chunk c into the step's batch once its pages pass the
// ownership check, with a logits row when the chunk ends the prompt or
// decodes (hidden-state rows for an embedding request, a row per position
// for a prompt whose logprobs are asked for).
func (e *Engine) add(s *sequence, c Chunk) {
	c.Owner, c.Pages, c.Shared, c.Adapter = s.req.Owner, s.req.Pages, s.tags[:s.shared], s.req.Adapter
	if err := e.checkPages(s, c); err != nil {
		e.violation(s, err)
		return
	}
	switch {
	case s.req.Embed != PoolingNone:
		e.hiddenAt = e.hiddenRows(s, &c, e.hiddenAt)
	case s.req.Sampling.PromptLogprobs && c.Start < len(s.req.Prompt) && s.generated == 0:
		e.promptRows(&c)
	case (c.Start+len(c.Tokens) == len(s.req.Prompt) && s.generated == 0) || c.Start >= len(s.req.Prompt):
		c.Logits = e.logits[len(e.batch)]
	}
	e.batch = append(e.batch, c)
	e.members = append(e.members, s)
}

// forwardFailed handles a step the backend did not complete. A refusal by
// the backend's own page check (ErrOwnerViolation: the cuda device check)
// counts like a refused Verify, so the violation alert fires. When the
// refusal names the sequence it refused (ViolationError.Want), only that
// owner's sequences end; the others run the step again on the next turn:
// nothing of theirs advanced (no slot marked written, no token sampled),
// the refused step wrote their K/V only with the values it will write
// again, and their tokens do not depend on the batch (determinism). Any
// other failure ends every sequence of the step.
func (e *Engine) forwardFailed(err error) {
	var v *kvpool.ViolationError
	if errors.Is(err, kvpool.ErrOwnerViolation) {
		e.pool.RecordViolation()
		if errors.As(err, &v) && v.Want != (kvpool.Owner{}) &&
			slices.ContainsFunc(e.members, func(s *sequence) bool { return s.req.Owner == v.Want }) {
			for _, s := range e.members {
				if s.req.Owner == v.Want {
					e.violation(s, err)
				}
			}
			e.compact()
			return
		}
		e.log.Error("backend KV ownership check failed without naming a sequence; the step's sequences end without output",
			"sequences", len(e.members), "err", err)
	}
	for _, s := range e.members {
		e.finish(s, FinishError, fmt.Errorf("engine: forward step: %w", err))
	}
	e.compact()
}

// checkPages is the I3 gate: every page of the sequence's table must be
// tagged with its owner (the pages this chunk writes included), and the
// positions the chunk reads ([0, Start)) must have been written for it.
func (e *Engine) checkPages(s *sequence, c Chunk) error {
	return e.verify(s, c.Start)
}

// violation ends a sequence whose ownership check failed, loudly. The
// pool counts the violation (warden_kv_owner_violations_total).
func (e *Engine) violation(s *sequence, err error) {
	e.log.Error("KV ownership check failed; aborting sequence without output",
		"request_id", s.req.Owner.Request, "tenant", s.req.Owner.Tenant,
		"epoch", s.req.Owner.Epoch, "err", err)
	e.finish(s, FinishError, err)
}

// advance records what a chunk wrote and samples if it produced logits.
func (e *Engine) advance(s *sequence, c Chunk) {
	end := c.Start + len(c.Tokens)
	// Shared sealed pages are read-only and complete: only the owned rest
	// of the table is marked.
	skip := s.shared * e.cfg.PageTokens
	if err := e.pool.MarkTokensWritten(s.req.Owner, c.Pages[s.shared:], end-skip); err != nil {
		e.finish(s, FinishError, err)
		return
	}
	prefill := c.Start < len(s.req.Prompt)
	s.pos = end
	if prefill && s.generated == 0 && s.req.Sampling.PromptLogprobs {
		e.scorePrompt(s, c)
	}
	if prefill && s.generated > 0 {
		// A choice recomputing the prompt's partial last page (fork).
		e.forkTokens.Add(uint64(len(c.Tokens)))
	} else if prefill {
		e.prefillTokens.Add(uint64(len(c.Tokens)))
		s.prompt = s.pos
		if s.pos == len(s.req.Prompt) {
			e.prefills.Add(1)
			e.cachedTokens.Add(uint64(s.cached))
			e.sealPrompt(s)
		}
		if s.req.ReportProgress {
			s.stream.push(Event{Kind: EventProgress, Positions: s.pos})
		}
	} else {
		e.decodeTokens.Add(1)
	}
	if s.req.Embed != PoolingNone {
		e.poolHidden(s, c)
		return
	}
	if c.Logits == nil || s.pos < len(s.req.Prompt) {
		return
	}
	// The position's row: the last one of a prompt-logprobs chunk.
	row := c.Logits[len(c.Logits)-len(e.logits[0]):]
	if s.forks != nil {
		e.fork(s, func(f *sequence) (int32, *Logprobs) { return e.pick(f, row) })
	}
	tok, lp := e.pick(s, row)
	e.emit(s, tok, lp)
}

// pick samples sequence s's next token from a logits row and, when the
// request asks for them, computes its logprobs. The row is left as it is:
// a constrained sequence masks and samples from its own copy, so the
// logprobs (and the other choices of a fork, sampled from the same row)
// see the raw distribution, before any mask, while the sampled token obeys
// the mask.
func (e *Engine) pick(s *sequence, logits []float32) (int32, *Logprobs) {
	masked := logits
	if s.constraint != nil {
		e.masked = append(e.masked[:0], logits...)
		masked = e.masked
		s.constrain(masked)
	}
	tok := e.sampler.sample(masked, s.req.Sampling, s.history(), s.generated)
	if !s.req.Sampling.Logprobs {
		return tok, nil
	}
	return tok, e.lps.logprobs(logits, tok, s.req.Sampling.TopLogprobs)
}

// emit handles a newly sampled token (with its logprobs, when asked
// for): stop checks, the event, and what the sequence does next.
func (e *Engine) emit(s *sequence, tok int32, lp *Logprobs) {
	s.generated++
	s.constrained(tok)
	if s.hist != nil {
		s.hist = append(s.hist, tok)
	}
	if s.req.Sampling.usesHistory() {
		s.out = append(s.out, tok)
	}
	if s.first < 0 {
		s.first = tok
	}
	if e.isStop(s, tok) {
		e.finish(s, FinishStop, nil)
		return
	}
	s.stream.push(Event{Kind: EventToken, Token: tok, Logprobs: lp})
	switch {
	case s.req.PrefillOnly:
		e.finish(s, FinishPrefilled, nil)
	case s.generated >= s.req.Sampling.MaxTokens:
		e.finish(s, FinishLength, nil)
	default:
		s.next[0] = tok
	}
}

// history is what s's penalties read at its next position.
func (s *sequence) history() History {
	return History{Prompt: s.req.Prompt, Output: s.out}
}

func (e *Engine) isStop(s *sequence, tok int32) bool {
	if slices.Contains(s.req.Sampling.StopTokens, tok) {
		return true
	}
	return !s.req.Sampling.IgnoreEOS && slices.Contains(e.cfg.EOS, tok)
}

// finish delivers the final event; the sequence leaves the running set at
// the next compact.
func (e *Engine) finish(s *sequence, reason FinishReason, err error) {
	if s.stream == nil {
		return
	}
	// Choices still waiting for this one's prefill end with it.
	for _, f := range s.forks {
		e.finish(f, FinishError, cmp.Or(err, ErrAborted))
	}
	s.forks = nil
	s.stream.push(Event{Kind: EventDone, Result: &Result{
		Finish:           reason,
		PromptTokens:     s.prompt,
		CachedTokens:     min(s.cached, s.prompt),
		CompletionTokens: s.generated,
		FirstToken:       s.first,
		Embedding:        s.embedding,
		Err:              err,
	}})
	s.stream = nil
}

// compact drops finished sequences from the running set.
func (e *Engine) compact() {
	before := len(e.running)
	e.running = slices.DeleteFunc(e.running, func(s *sequence) bool { return s.stream == nil })
	if d := before - len(e.running); d > 0 {
		e.nRunning.Add(int64(-d))
		e.signal()
	}
	e.members = slices.DeleteFunc(e.members, func(s *sequence) bool { return s.stream == nil })
}
