// Package probe audits an OpenAI-compatible endpoint for cross-tenant
// leakage from the outside, the way the incident that motivates warden was
// found: unique markers in prompts lengthened past the context limit, from
// two tenants at once, with aborts; the same prompt alone and under the
// other tenant's load; the leak classes a cache or proxy creates (identical
// prompts, shared prefixes, multi-turn, n>1, streamed against plain, the
// Responses API, tool results, concurrent streams, cached_tokens); prefix-
// cache timing against a same-key control; admission and usage; and
// whether client-steered internals are accepted. Every answer of every
// check is scanned for the other key's content. It fails closed: a check
// that cannot conclude makes the run exit ExitInconclusive. It needs only
// the endpoint's URL and API keys, so it runs against warden, vLLM, SGLang
// or a hosted API alike (`warden probe`; docs/probe.md).
package probe

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/tokenizer"
)

// Defaults of Config.
const (
	DefaultDuration       = 10 * time.Minute
	DefaultConcurrency    = 4
	DefaultTimingSamples  = 64
	DefaultAlpha          = 0.0001
	DefaultTimingPrefix   = 512
	DefaultLadderRounds   = 2
	defaultMaxTokens      = 16
	consistencyMaxTokens  = 24
	consistencyAloneRuns  = 3
	consistencyLoadedRuns = 4
)

// Config is one probe run.
type Config struct {
	// BaseURL is the API root, with or without the trailing /v1.
	BaseURL string
	// Keys are API keys of distinct tenants: at least one; the
	// cross-tenant checks need two.
	Keys []string
	// Model to probe; empty: the first model the first key lists.
	Model string
	// CACert is a PEM file of extra roots to trust (a dev CA).
	CACert string
	// Tokenizer is a model directory (tokenizer.json,
	// tokenizer_config.json) whose tokenizer the endpoint uses: usage is
	// then compared exactly.
	Tokenizer string
	// Budget bounds the number of requests (0: the plan's maximum, derived
	// from the checks chosen); Duration the wall time.
	Budget   int
	Duration time.Duration
	// Concurrency is the number of requests in flight per key in the
	// marker test.
	Concurrency int
	// LadderRounds is how many times each key climbs the length ladder.
	LadderRounds int
	// AbortRounds is how many aborts before the first token the
	// consistency-after-aborts check lands (0: DefaultAbortRounds; below
	// 0: skip the check).
	AbortRounds int
	// TimingSamples bounds the rounds of the sequential timing test (each
	// a pair of probes per key; 0: DefaultTimingSamples; below 0: skip
	// it).
	TimingSamples int
	// TimingPrefixTokens is the length of the timing test's secret
	// prefixes (at most a third of the context; 0: DefaultTimingPrefix).
	TimingPrefixTokens int
	// Alpha is the error rate, both ways, of the timing test.
	Alpha float64
	// Checks selects the checks to run (see AllChecks); empty: all.
	Checks []string
	// Seed makes the markers and filler reproducible (0: from the clock).
	Seed uint64
	// Progress, when set, receives a line per step.
	Progress func(format string, args ...any)
	// Plan, when set, receives the plan before the checks start.
	Plan func(plan []PlanItem, budget int, duration time.Duration)
}

func (c *Config) defaults() {
	if c.Duration <= 0 {
		c.Duration = DefaultDuration
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.AbortRounds == 0 {
		c.AbortRounds = DefaultAbortRounds
	}
	if c.TimingSamples == 0 {
		c.TimingSamples = DefaultTimingSamples
	}
	if c.LadderRounds <= 0 {
		c.LadderRounds = DefaultLadderRounds
	}
	if c.Alpha <= 0 {
		c.Alpha = DefaultAlpha
	}
	if c.TimingPrefixTokens <= 0 {
		c.TimingPrefixTokens = DefaultTimingPrefix
	}
	if len(c.Checks) == 0 {
		c.Checks = AllChecks
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
	if c.Plan == nil {
		c.Plan = func([]PlanItem, int, time.Duration) {}
	}
}

// The checks Config.Checks selects from. CheckMarkers includes admission
// and usage, which it judges on the same requests, and the consistency
// checks, which run under its load and after aborts. CheckCaches is the
// leak classes of caches and proxies (identical prompts, shared prefixes,
// multi-turn, n>1, streamed against plain, Responses API, tool results,
// cached_tokens); CheckCrossTalk concurrent streams of both keys.
const (
	CheckSteering  = "steering"
	CheckMarkers   = "markers"
	CheckCaches    = "caches"
	CheckCrossTalk = "crosstalk"
	CheckTiming    = "timing"
)

// AllChecks are every check, the default.
var AllChecks = []string{CheckSteering, CheckMarkers, CheckCaches, CheckCrossTalk, CheckTiming}

// ErrCannotRun means the probe could not start (exit code 2).
var ErrCannotRun = errors.New("probe cannot run")

// run is the state of one probe run.
type run struct {
	cfg     Config
	clients []*client
	gen     *textGen
	index   *leakIndex
	tok     *tokenizer.Tokenizer
	model   string
	// ctx is the context length in tokens and how it was learned.
	ctxLen    int
	ctxSource string
	// Tokens per filler word and the fixed overhead of a prompt (template,
	// instruction, markers), from calibration.
	perWord, overhead float64
	report            *Report
	ev                *evidenceLog
	cacheMu           sync.Mutex
	cachePairs        []cachePair
	// usageNote says how usage was cross-checked with admission.
	usageNote string
}

// Run probes the endpoint and returns its report. An error wrapping
// ErrCannotRun means nothing could be judged.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if len(cfg.Keys) == 0 {
		return nil, fmt.Errorf("%w: no API key", ErrCannotRun)
	}
	for _, c := range cfg.Checks {
		if !slices.Contains(AllChecks, c) {
			return nil, fmt.Errorf("%w: unknown check %q (want %s)", ErrCannotRun, c, strings.Join(AllChecks, ", "))
		}
	}
	hc, err := httpClient(cfg.CACert)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCannotRun, err)
	}
	plan := planFor(cfg)
	if cfg.Budget <= 0 {
		for _, p := range plan {
			cfg.Budget += p.MaxRequests
		}
		// Room for retries of transport errors and 429s.
		cfg.Budget += cfg.Budget / 10
	}
	b := &budget{deadline: time.Now().Add(cfg.Duration)}
	b.left.Store(int64(cfg.Budget))
	base := strings.TrimSuffix(strings.TrimSuffix(cfg.BaseURL, "/"), "/v1") + "/v1"
	r := &run{cfg: cfg, gen: newTextGen(cfg.Seed), index: newLeakIndex(), ev: newEvidenceLog()}
	for i, k := range cfg.Keys {
		r.clients = append(r.clients, &client{base: base, key: k, label: string(rune('A' + i)), http: hc, budget: b})
	}
	r.report = &Report{Target: base, Keys: len(cfg.Keys), Seed: cfg.Seed, Started: time.Now().UTC(), Plan: plan, Budget: cfg.Budget}
	if cfg.Tokenizer != "" {
		if r.tok, err = tokenizer.Load(cfg.Tokenizer); err != nil {
			return nil, fmt.Errorf("%w: --tokenizer: %w", ErrCannotRun, err)
		}
	}
	ctx, cancel := context.WithDeadline(ctx, b.deadline.Add(time.Minute))
	defer cancel()
	cfg.Plan(plan, cfg.Budget, cfg.Duration)
	if err := r.setup(ctx); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCannotRun, err)
	}
	r.report.Model, r.report.ContextLength, r.report.ContextSource = r.model, r.ctxLen, r.ctxSource
	has := func(c string) bool { return slices.Contains(cfg.Checks, c) }
	if has(CheckSteering) {
		r.report.add(r.steering(ctx))
	}
	foreign := Check{Name: nameForeign}
	var usage []Check
	if has(CheckMarkers) {
		baseline := r.consistencyAlone(ctx)
		if baseline.nondeterministic {
			r.report.Notes = append(r.report.Notes, "the endpoint is not deterministic at temperature 0 with a seed: the consistency checks cannot run (inconclusive); every other check does not need determinism and ran")
		}
		ladder, loaded := r.markerLadder(ctx, baseline)
		foreign, usage = ladder[0], ladder[1:]
		r.report.add(loaded)
		r.usageNote = r.usageByAdmission(ctx)
		if cfg.AbortRounds > 0 {
			r.report.add(r.abortReuse(ctx, baseline))
		}
	}
	if has(CheckCaches) {
		r.report.add(r.identical(ctx), r.prefixes(ctx), r.multiTurn(ctx), r.choices(ctx), r.streamMix(ctx), r.responsesAPI(ctx), r.tools(ctx), r.cachedAcross())
	}
	if has(CheckCrossTalk) {
		r.report.add(r.crossTalk(ctx))
	}
	if has(CheckTiming) {
		r.report.add(r.timing(ctx))
	}
	r.report.add(r.foreign(foreign))
	r.report.add(r.usageAcross(usage)...)
	r.report.Requests = cfg.Budget - int(max(b.left.Load(), 0))
	r.report.Retries = int(b.retries.Load())
	r.report.Duration = time.Since(r.report.Started).Seconds()
	return r.report, nil
}

// planFor is what each chosen check is to spend, from the fewest
// requests (evidence overwhelming early) to its hard bound.
func planFor(cfg Config) []PlanItem {
	keys := len(cfg.Keys)
	var plan []PlanItem
	add := func(check string, lo, hi int, how string) {
		plan = append(plan, PlanItem{Check: check, MinRequests: lo, MaxRequests: hi, How: how})
	}
	add("set-up", 2+keys, 12+keys, "models, calibration (and context bisection when not advertised)")
	has := func(c string) bool { return slices.Contains(cfg.Checks, c) }
	if has(CheckSteering) {
		add(nameSteering, len(steeringFields), len(steeringFields), "one request per field")
	}
	if has(CheckMarkers) {
		ladder := cfg.LadderRounds * keys * (len(ladderFractions) + len(ladderOver))
		add("markers, admission, usage", ladder, ladder*(1+maxRetries), fmt.Sprintf("%d ladder rounds per key, %d in flight per key", cfg.LadderRounds, cfg.Concurrency))
		add("consistency", consistencyAloneRuns+consistencyLoadedRuns, consistencyAloneRuns+consistencyLoadedRuns, "alone, then under the ladder's load")
		add("usage by admission", 2, 2+bits.Len(uint(8<<20)), "a prompt's length as admission counts it: bisection on max_tokens")
		if cfg.AbortRounds > 0 {
			perRound := 1 + abortFollowers
			if keys > 1 {
				perRound++ // the round's consistency prompt alone, with key B
			}
			add(nameConsAborts, 1+perRound*cfg.AbortRounds, 1+perRound*abortMaxRounds(cfg.AbortRounds),
				fmt.Sprintf("until %d aborts land before the first token (or a difference)", cfg.AbortRounds))
		}
	}
	if has(CheckCaches) && keys > 1 {
		n := 3*identicalRounds + 3*len(prefixChars) + 4*multiTurnRounds + 4 + 4 + 4 + 2
		add("cache leak classes", n, n, "identical prompts, shared prefixes, multi-turn, n>1, stream vs plain, Responses API, tool results, cached_tokens")
	}
	if has(CheckCrossTalk) {
		n := crossTalkStreams * keys
		add(nameCrossTalk, crossTalkWaves*n, crossTalkMaxWaves*n, fmt.Sprintf("%d waves of %d concurrent streams per key (up to %d until streams of both keys overlap)", crossTalkWaves, crossTalkStreams, crossTalkMaxWaves))
	}
	if has(CheckTiming) && cfg.TimingSamples > 0 {
		add(nameTiming, 6*min(timingMinRounds, cfg.TimingSamples), 6*cfg.TimingSamples,
			fmt.Sprintf("sequential sign test, rounds of 6 requests until decided (error rates %g) or %d rounds", cfg.Alpha, cfg.TimingSamples))
	}
	return plan
}

func httpClient(caFile string) (*http.Client, error) {
	tr, err := adminclient.NewTransport(caFile)
	if err != nil {
		return nil, err
	}
	tr.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: tr, Timeout: 5 * time.Minute}, nil
}

// setup picks the model, learns its context length and calibrates how
// many tokens a filler word costs.
func (r *run) setup(ctx context.Context) error {
	a := r.clients[0]
	models, err := a.models(ctx)
	if err != nil {
		return err
	}
	var m *modelInfo
	for i := range models {
		if r.cfg.Model == "" || models[i].ID == r.cfg.Model {
			m = &models[i]
			break
		}
	}
	if m == nil {
		return fmt.Errorf("model %q is not listed for key A", r.cfg.Model)
	}
	r.model = m.ID
	for _, c := range r.clients[1:] {
		if _, err := c.models(ctx); err != nil {
			return err
		}
	}
	if err := r.calibrate(ctx); err != nil {
		return err
	}
	r.cfg.Progress("model %s: %.2f tokens per filler word, %.0f tokens of overhead", r.model, r.perWord, r.overhead)
	if m.ContextLength > 0 {
		r.ctxLen, r.ctxSource = m.ContextLength, "advertised"
	} else if err := r.discoverContext(ctx); err != nil {
		return err
	}
	r.cfg.Progress("context length %d (%s)", r.ctxLen, r.ctxSource)
	return nil
}

// calibrate measures the prompt tokens of two prompts of known word counts.
// The longer one is halved while the endpoint refuses it and took the
// shorter one: random filler words can take more tokens than a small
// model's context holds, and an endpoint without a working context check
// refuses such a prompt with some other error (its admission check says
// so later), so any refusal, not only 400 context_length_exceeded, halves.
func (r *run) calibrate(ctx context.Context) error {
	const w1 = 20
	p1, err := r.promptTokens(ctx, w1)
	if err != nil {
		return err
	}
	w2 := 200
	p2, err := r.promptTokens(ctx, w2)
	for errors.Is(err, errRefused) && w2/2 > w1 {
		if !errors.Is(err, errPastContext) {
			r.report.Notes = append(r.report.Notes, fmt.Sprintf("calibration: %v; not the 400 context_length_exceeded a prompt past the context gets, so the calibration prompt was halved", err))
		}
		w2 /= 2
		p2, err = r.promptTokens(ctx, w2)
	}
	if err != nil {
		return err
	}
	if p1 <= 0 || p2 <= p1 {
		// No usage reported: assume three tokens per word, an
		// overestimate for these syllables in every BPE vocabulary tried.
		r.perWord, r.overhead = 3, 40
		r.report.Notes = append(r.report.Notes, "the endpoint reports no usage: prompt lengths are estimated")
		return nil
	}
	r.perWord = float64(p2-p1) / float64(w2-w1)
	r.overhead = float64(p1) - r.perWord*w1
	return nil
}

var (
	// errRefused: the endpoint answered a prompt with an error status.
	errRefused = errors.New("prompt refused")
	// errPastContext: the endpoint refused a prompt as longer than its
	// context (400 context_length_exceeded); it is also errRefused.
	errPastContext = errors.New("prompt past the context")
)

// promptTokens sends a prompt of w filler words with key A and returns
// its prompt tokens (counted with the endpoint's tokenizer when the probe
// has it).
func (r *run) promptTokens(ctx context.Context, w int) (int, error) {
	mp := r.gen.markedPrompt(w)
	res, _, err := r.send(ctx, r.clients[0], "set-up", fmt.Sprintf("key A, %d-word calibration prompt", w), chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: 1}, mp)
	if err != nil {
		return 0, err
	}
	if res.Status != http.StatusOK {
		err := fmt.Errorf("%w: a %d-word prompt with key A: %d %s %s", errRefused, w, res.Status, res.ErrCode, res.ErrMsg)
		if res.Status == http.StatusBadRequest && res.ErrCode == "context_length_exceeded" {
			err = fmt.Errorf("%w: %w", errPastContext, err)
		}
		return 0, err
	}
	if r.tok != nil {
		return r.exactTokens(mp.Text), nil
	}
	return res.PromptTokens, nil
}

// wordsFor returns the filler words that make a prompt of about n tokens.
func (r *run) wordsFor(n int) int {
	return max(4, int((float64(n)-r.overhead)/r.perWord))
}

// tokensFor estimates the prompt tokens of a prompt of w filler words.
func (r *run) tokensFor(w int) int { return int(r.overhead + r.perWord*float64(w)) }

// exactTokens counts prompt tokens with the endpoint's own tokenizer.
func (r *run) exactTokens(prompt string) int {
	ids, err := r.tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: prompt}}, true)
	if err != nil {
		return -1
	}
	return len(ids)
}

// discoverContext finds the context length by bisection on 400
// context_length_exceeded, when the endpoint does not advertise it.
func (r *run) discoverContext(ctx context.Context) error {
	a := r.clients[0]
	fits := func(words int) (bool, error) {
		mp := r.gen.markedPrompt(words)
		res, _, err := r.send(ctx, a, "set-up", fmt.Sprintf("key A, %d-word context bisection prompt", words), chatRequest{Model: r.model, Prompt: mp.Text, MaxTokens: 1}, mp)
		if err != nil {
			return false, err
		}
		switch {
		case res.Status == http.StatusOK:
			return true, nil
		case res.Status == http.StatusBadRequest:
			return false, nil
		default:
			return false, fmt.Errorf("finding the context length: %d %s %s", res.Status, res.ErrCode, res.ErrMsg)
		}
	}
	lo, hi := 0, 1024
	for {
		ok, err := fits(hi)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		lo = hi
		if hi *= 2; r.tokensFor(hi) > 1<<21 {
			return errors.New("no context limit found below 2M tokens")
		}
	}
	for hi-lo > max(8, lo/64) {
		mid := (lo + hi) / 2
		ok, err := fits(mid)
		if err != nil {
			return err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	r.ctxLen, r.ctxSource = r.tokensFor(lo)+1, "discovered by bisection"
	return nil
}
