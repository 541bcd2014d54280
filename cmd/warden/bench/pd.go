package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/isolation"
)

// PDOptions configures RunPD; zero fields take the defaults.
type PDOptions struct {
	// Duration is how long the load runs in each mode.
	Duration time.Duration
	// Round is the longest stretch one mode runs before the other takes
	// its turn (only in a build where the checks can be switched).
	Round time.Duration
	// Concurrency is the number of requests kept in flight.
	Concurrency int
	// Transfer is the KV transfer backend between prefill and decode
	// (default tcp).
	Transfer config.TransferBackend
	// Prompt and MaxTokens shape every request.
	Prompt    string
	MaxTokens int
	// Threads is each worker's compute threads (default 1).
	Threads int
	Logger  *slog.Logger
}

// PDTally is the load one mode carried.
type PDTally struct {
	Requests                       int
	PromptTokens, CompletionTokens int64
	Elapsed                        time.Duration
}

// TokensPerSecond is prompt plus completion tokens processed per second.
func (t PDTally) TokensPerSecond() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.PromptTokens+t.CompletionTokens) / t.Elapsed.Seconds()
}

// PDReport is one end-to-end run through a gateway in front of a prefill
// and a decode worker: with the isolation checks on, and — in the
// benchmark-only warden_nochecks build — with them off, in alternating
// rounds of the same process.
type PDReport struct {
	Transfer config.TransferBackend
	On, Off  PDTally
	// Compared is set when Off was measured.
	Compared bool
}

// RunPD drives Concurrency greedy chat requests at a time through a
// gateway in front of a prefill and a decode worker, and checks that every
// answer equals the first. In a build where isolation.Switchable, rounds
// with the checks on and off alternate, so machine load drifts over both
// alike.
func RunPD(ctx context.Context, o PDOptions) (PDReport, error) {
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
	}
	if o.Round <= 0 {
		o.Round = DefaultRound
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Transfer == "" {
		o.Transfer = config.TransferTCP
	}
	if o.Prompt == "" {
		o.Prompt = DefaultPrompt
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 64
	}
	if o.Threads <= 0 {
		o.Threads = 1
	}
	rep := PDReport{Transfer: o.Transfer, Compared: isolation.Switchable}
	c, err := startCluster(ctx, clusterOptions{threads: o.Threads, logger: o.Logger, transfer: o.Transfer})
	if err != nil {
		return rep, err
	}
	defer c.close()
	defer isolation.SetForBenchmark(true)
	gw := c.gateways[0]
	body := chatBody(o.Prompt, o.MaxTokens)
	want, err := gw.chat(ctx, body)
	if err != nil {
		return rep, err
	}
	for rep.On.Elapsed < o.Duration {
		for _, on := range []bool{true, false} {
			if !on && !rep.Compared {
				continue
			}
			isolation.SetForBenchmark(on)
			tally := &rep.On
			if !on {
				tally = &rep.Off
			}
			if err := pdRound(ctx, gw, body, want, o.Concurrency, min(o.Round, o.Duration-tally.Elapsed), tally); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// pdRound keeps concurrency requests in flight for d and adds what they
// did to t.
func pdRound(ctx context.Context, gw *gatewayNode, body []byte, want chatAnswer, concurrency int, d time.Duration, t *PDTally) error {
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for range concurrency {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				got, err := gw.chat(ctx, body)
				if err == nil && got != want {
					err = fmt.Errorf("bench: answer %+v differs from the first %+v", got, want)
				}
				mu.Lock()
				if err == nil {
					t.Requests++
					t.PromptTokens += got.promptTokens
					t.CompletionTokens += got.completion
				} else if firstErr == nil {
					firstErr = err
				}
				stop := firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
			}
		})
	}
	wg.Wait()
	t.Elapsed += time.Since(start)
	return firstErr
}

// WriteMarkdown prints the run as a table.
func (r PDReport) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "| isolation checks | transfer | requests | tokens/s |\n|---|---|---|---|\n")
	fmt.Fprintf(w, "| on | %s | %d | %.1f |\n", r.Transfer, r.On.Requests, r.On.TokensPerSecond())
	if r.Compared {
		fmt.Fprintf(w, "| off (warden_nochecks build) | %s | %d | %.1f |\n", r.Transfer, r.Off.Requests, r.Off.TokensPerSecond())
		fmt.Fprintf(w, "\nchecks on / off = %.3f\n", r.On.TokensPerSecond()/r.Off.TokensPerSecond())
	}
}
