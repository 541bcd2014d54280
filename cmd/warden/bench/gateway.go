package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/tokenizer"
)

// Defaults of GatewayOptions.
const (
	DefaultDuration  = 10 * time.Second
	DefaultRound     = 2 * time.Second
	DefaultPrompt    = "Tell me a story about a tiny model."
	DefaultMaxTokens = 4
)

// DefaultConcurrency returns the default concurrency sweep.
func DefaultConcurrency() []int { return []int{1, 4, 16} }

// GatewayOptions configures RunGateway; zero fields take the defaults.
type GatewayOptions struct {
	// Duration is how long each path runs at each concurrency.
	Duration time.Duration
	// Round is the longest stretch one path runs before the next takes
	// its turn.
	Round time.Duration
	// Concurrency is the sweep of requests kept in flight; 1 is always
	// included (the latency figures are taken there).
	Concurrency []int
	// RedisAddr is the Redis of the second gateway; empty runs the
	// memory-store gateway only.
	RedisAddr string
	// Threads is the worker's compute threads; 0 uses every core.
	Threads int
	// Prompt is the user message of every request.
	Prompt string
	// MaxTokens is every request's max_tokens: small, so that the engine's
	// time is small and the gateway's own cost shows.
	MaxTokens int
	// Logger receives the servers' logs; nil discards them.
	Logger *slog.Logger
}

func (o *GatewayOptions) defaults() error {
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.Round <= 0 {
		o.Round = DefaultRound
	}
	conc, err := sweep(o.Concurrency)
	if err != nil {
		return err
	}
	o.Concurrency = conc
	if o.Threads < 0 {
		return fmt.Errorf("bench: threads must be >= 0, got %d", o.Threads)
	}
	if o.Prompt == "" {
		o.Prompt = DefaultPrompt
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.MaxTokens < 1 || o.MaxTokens > 1024 {
		return fmt.Errorf("bench: max tokens must be in 1..1024, got %d", o.MaxTokens)
	}
	return nil
}

// sweep returns the concurrency levels sorted, without duplicates, with 1.
func sweep(levels []int) ([]int, error) {
	if len(levels) == 0 {
		levels = DefaultConcurrency()
	}
	out := []int{1}
	for _, c := range levels {
		if c < 1 || c > 1024 {
			return nil, fmt.Errorf("bench: concurrency must be in 1..1024, got %d", c)
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Answer is the reference answer every request must get: the first
// direct Generate, decoded as the gateway decodes.
type Answer struct {
	// IDs are the generated token IDs.
	IDs []int32
	// Text is IDs as text (special tokens render as nothing).
	Text         string
	FinishReason string
	// PromptTokens is the prompt after the chat template.
	PromptTokens     int64
	CompletionTokens int64
}

// checkDirect compares a direct answer with the reference.
func (r *Answer) checkDirect(a directAnswer) error {
	if !slices.Equal(a.ids, r.IDs) || a.finish != r.FinishReason || a.promptTokens != r.PromptTokens || a.completion != r.CompletionTokens {
		return fmt.Errorf("bench: direct answer %v/%s (usage %d/%d) differs from the reference %v/%s (%d/%d)",
			a.ids, a.finish, a.promptTokens, a.completion, r.IDs, r.FinishReason, r.PromptTokens, r.CompletionTokens)
	}
	return nil
}

// checkChat compares a gateway's answer with the reference.
func (r *Answer) checkChat(a chatAnswer) error {
	if a.content != r.Text || a.finish != r.FinishReason || a.promptTokens != r.PromptTokens || a.completion != r.CompletionTokens {
		return fmt.Errorf("bench: gateway answer %q/%s (usage %d/%d) differs from the reference %q/%s (%d/%d)",
			a.content, a.finish, a.promptTokens, a.completion, r.Text, r.FinishReason, r.PromptTokens, r.CompletionTokens)
	}
	return nil
}

// reference makes the first direct call and checks that it is a useful
// reference: the prompt counted as sent, and some text generated.
func reference(ctx context.Context, c *cluster, tok *tokenizer.Tokenizer, prompt []int32, maxTokens int) (*Answer, error) {
	a, err := c.generate(ctx, prompt, maxTokens)
	if err != nil {
		return nil, err
	}
	dec := tokenizer.NewStreamDecoder(tok)
	var b strings.Builder
	for _, id := range a.ids {
		if tok.IsSpecial(id) {
			continue
		}
		s, err := dec.Add(id)
		if err != nil {
			return nil, fmt.Errorf("bench: decoding the reference: %w", err)
		}
		b.WriteString(s)
	}
	b.WriteString(dec.Flush())
	ref := &Answer{IDs: a.ids, Text: b.String(), FinishReason: a.finish, PromptTokens: a.promptTokens, CompletionTokens: a.completion}
	switch {
	case ref.PromptTokens != int64(len(prompt)):
		return nil, fmt.Errorf("bench: the worker counted %d prompt tokens for a prompt of %d", ref.PromptTokens, len(prompt))
	case ref.CompletionTokens != int64(len(ref.IDs)) || ref.CompletionTokens == 0:
		return nil, fmt.Errorf("bench: the worker reported %d completion tokens and sent %d", ref.CompletionTokens, len(ref.IDs))
	case ref.Text == "":
		return nil, errors.New("bench: the prompt yields no text to compare; choose another prompt")
	}
	return ref, nil
}

// Path is the measurements of one way of sending the request.
type Path struct {
	// Name says how requests were sent.
	Name string
	// Runs has one entry per GatewayOptions.Concurrency.
	Runs []Throughput
	// Checked is how many answers were compared with the reference (all
	// matched: a mismatch ends the run with an error).
	Checked int64
}

// maxRPS is the best requests/s of the sweep.
func (p Path) maxRPS() float64 {
	best := 0.0
	for _, r := range p.Runs {
		best = max(best, r.RPS())
	}
	return best
}

// GatewayReport is the result of RunGateway.
type GatewayReport struct {
	Machine Machine
	// Options are the options used, defaults filled in.
	Options   GatewayOptions
	Reference Answer
	// Paths are direct, then the memory-store gateway, then the
	// Redis-store gateway when there is one.
	Paths []Path
}

// gatewayBench is a started cluster with one request function per path.
type gatewayBench struct {
	c       *cluster
	ref     *Answer
	names   []string
	fns     []request
	checked []atomic.Int64 // answers checked, per path
}

// startGatewayBench starts the cluster, takes the reference answer and
// builds the request of each path.
func startGatewayBench(ctx context.Context, o GatewayOptions) (gb *gatewayBench, err error) {
	c, err := startCluster(ctx, clusterOptions{redisAddr: o.RedisAddr, threads: o.Threads, logger: o.Logger})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.close())
		}
	}()
	tok, err := c.loadTokenizer()
	if err != nil {
		return nil, err
	}
	// The token IDs the gateway sends for this chat request.
	prompt, err := tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: o.Prompt}}, true)
	if err != nil {
		return nil, fmt.Errorf("bench: chat template: %w", err)
	}
	ref, err := reference(ctx, c, tok, prompt, o.MaxTokens)
	if err != nil {
		return nil, err
	}
	gb = &gatewayBench{c: c, ref: ref, checked: make([]atomic.Int64, 1+len(c.gateways))}
	gb.names = append(gb.names, "direct (gRPC to the worker)")
	gb.fns = append(gb.fns, func(ctx context.Context) error {
		a, err := c.generate(ctx, prompt, o.MaxTokens)
		if err != nil {
			return err
		}
		gb.checked[0].Add(1)
		return ref.checkDirect(a)
	})
	body := chatBody(o.Prompt, o.MaxTokens)
	for i, n := range c.gateways {
		store := "memory"
		if n.store == string(config.StoreRedis) {
			store = "Redis"
		}
		gb.names = append(gb.names, "gateway, "+store+" store (HTTPS)")
		gb.fns = append(gb.fns, func(ctx context.Context) error {
			a, err := n.chat(ctx, body)
			if err != nil {
				return err
			}
			gb.checked[i+1].Add(1)
			return ref.checkChat(a)
		})
	}
	return gb, nil
}

// RunGateway measures the gateway's added latency and its requests/s
// against calling the worker directly; see the package documentation.
func RunGateway(ctx context.Context, o GatewayOptions) (rep *GatewayReport, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	rep = &GatewayReport{Machine: currentMachine(), Options: o}
	gb, err := startGatewayBench(ctx, o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := gb.c.close(); cerr != nil && err == nil {
			rep, err = nil, cerr
		}
	}()
	rep.Reference = *gb.ref
	if err := warmUp(ctx, gb.fns); err != nil {
		return nil, err
	}
	rep.Paths = make([]Path, len(gb.fns))
	for i := range gb.fns {
		rep.Paths[i].Name = gb.names[i]
	}
	for _, conc := range o.Concurrency {
		runs, err := alternate(ctx, conc, o.Duration, o.Round, gb.fns)
		if err != nil {
			return nil, err
		}
		for i, r := range runs {
			rep.Paths[i].Runs = append(rep.Paths[i].Runs, r)
		}
	}
	for i := range rep.Paths {
		rep.Paths[i].Checked = gb.checked[i].Load()
	}
	if err := gb.c.waitQuiet(ctx); err != nil {
		return nil, err
	}
	rep.Machine.finish()
	return rep, nil
}

// WriteMarkdown writes the report as Markdown tables.
func (r *GatewayReport) WriteMarkdown(w io.Writer) error {
	p := &printer{w: w}
	o := r.Options
	p.f("Machine: %s.\n\n", r.Machine)
	p.f("Model tiny, worker role both with %s, prompt %d tokens, max_tokens %d; %s per path and concurrency, in rounds of at most %s taken in turn.\n\n",
		threads(o.Threads), r.Reference.PromptTokens, o.MaxTokens, o.Duration, o.Round)
	if len(r.Paths) == 0 || len(r.Paths[0].Runs) == 0 {
		return p.err
	}
	direct := r.Paths[0]
	d1 := direct.Runs[0].Latency
	p.f("Latency at concurrency 1:\n\n")
	p.f("| path | p50 | p99 | p50 / direct | p99 / direct | added p50 |\n|---|---|---|---|---|---|\n")
	for _, path := range r.Paths {
		l := path.Runs[0].Latency
		added := "—"
		if path.Name != direct.Name {
			added = fmt.Sprintf("%+.3f ms", float64(l.P50-d1.P50)/float64(time.Millisecond))
		}
		p.f("| %s | %s | %s | %s | %s | %s |\n", path.Name, ms(l.P50), ms(l.P99), ratio(l.P50, d1.P50), ratio(l.P99, d1.P99), added)
	}
	if len(r.Paths) == 3 {
		m, rd := r.Paths[1].Runs[0].Latency, r.Paths[2].Runs[0].Latency
		p.f("\nRedis-store gateway / memory-store gateway: p50 %s, p99 %s (the Redis store adds %s at p50).\n",
			ratio(rd.P50, m.P50), ratio(rd.P99, m.P99), ms(rd.P50-m.P50))
	}
	p.f("\nRequests/s by concurrency (ratios against direct at the same concurrency):\n\n")
	head := "| concurrency | direct |"
	rule := "|---|---|"
	for _, path := range r.Paths[1:] {
		head += " " + strings.TrimSuffix(path.Name, " (HTTPS)") + " | / direct |"
		rule += "---|---|"
	}
	if len(r.Paths) == 3 {
		head += " Redis / memory |"
		rule += "---|"
	}
	p.f("%s\n%s\n", head, rule)
	row := func(label string, rps func(Path) float64) {
		line := fmt.Sprintf("| %s | %.0f |", label, rps(direct))
		for _, path := range r.Paths[1:] {
			line += fmt.Sprintf(" %.0f | %s |", rps(path), ratioF(rps(path), rps(direct)))
		}
		if len(r.Paths) == 3 {
			line += fmt.Sprintf(" %s |", ratioF(rps(r.Paths[2]), rps(r.Paths[1])))
		}
		p.f("%s\n", line)
	}
	for i, conc := range o.Concurrency {
		row(fmt.Sprint(conc), func(path Path) float64 { return path.Runs[i].RPS() })
	}
	row("**max**", Path.maxRPS)
	p.f("\nAnswers checked against the reference (%d prompt + %d completion tokens, %q), all identical:",
		r.Reference.PromptTokens, r.Reference.CompletionTokens, r.Reference.Text)
	for i, path := range r.Paths {
		sep := ";"
		if i == len(r.Paths)-1 {
			sep = "."
		}
		p.f(" %s: %d%s", strings.TrimSuffix(path.Name, " (HTTPS)"), path.Checked, sep)
	}
	p.f("\n")
	return p.err
}

// printer writes formatted text and keeps the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

// µs formats a duration in microseconds.
func µs(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

// ratio formats a/b as a factor.
func ratio(a, b time.Duration) string { return ratioF(float64(a), float64(b)) }

func ratioF(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func threads(n int) string {
	if n == 0 {
		return "every core"
	}
	if n == 1 {
		return "1 thread"
	}
	return fmt.Sprintf("%d threads", n)
}
