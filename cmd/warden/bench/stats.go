package bench

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Latency is the median and 99th percentile of a set of latencies.
type Latency struct {
	P50, P99 time.Duration
}

// summarize returns the percentiles of d (nearest rank); it sorts d.
func summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	return Latency{P50: percentile(d, 50), P99: percentile(d, 99)}
}

// percentile returns the p-th percentile of sorted by nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

// Throughput is the outcome of a load run at one concurrency.
type Throughput struct {
	// Concurrency is the number of requests kept in flight.
	Concurrency int
	// Requests is the number of requests completed.
	Requests int
	// Elapsed is the time the requests took, summed over the rounds.
	Elapsed time.Duration
	// Latency is over every request of the run.
	Latency Latency
}

// RPS is requests per second.
func (t Throughput) RPS() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Requests) / t.Elapsed.Seconds()
}

// request sends one request and checks its answer; a failed or wrong
// answer is an error, which ends the run.
type request func(ctx context.Context) error

// load keeps conc requests in flight until d has passed: each of conc
// loops starts no request after d, and the run ends when the last one
// finishes. It returns the latency of every request and the elapsed time.
func load(ctx context.Context, conc int, d time.Duration, fn request) ([]time.Duration, time.Duration, error) {
	var (
		mu  sync.Mutex
		all []time.Duration
	)
	g, ctx := errgroup.WithContext(ctx)
	start := time.Now()
	end := start.Add(d)
	for range conc {
		g.Go(func() error {
			var lat []time.Duration
			defer func() {
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			}()
			for t := time.Now(); t.Before(end); {
				if err := fn(ctx); err != nil {
					return err
				}
				now := time.Now()
				lat = append(lat, now.Sub(t))
				t = now
			}
			return nil
		})
	}
	err := g.Wait()
	return all, time.Since(start), err
}

// alternate runs each of fns for d at concurrency conc, in rounds of at
// most round each, taking turns, so that a change in the machine's load
// during the run affects every one of them alike.
func alternate(ctx context.Context, conc int, d, round time.Duration, fns []request) ([]Throughput, error) {
	rounds := max(1, int((d+round-1)/round))
	slice := d / time.Duration(rounds)
	lats := make([][]time.Duration, len(fns))
	out := make([]Throughput, len(fns))
	for r := range rounds {
		for k := range fns {
			i := (k + r) % len(fns) // rotate who goes first
			lat, elapsed, err := load(ctx, conc, slice, fns[i])
			if err != nil {
				return nil, err
			}
			lats[i] = append(lats[i], lat...)
			out[i].Requests += len(lat)
			out[i].Elapsed += elapsed
		}
	}
	for i := range out {
		out[i].Concurrency = conc
		out[i].Latency = summarize(lats[i])
	}
	return out, nil
}

// warmUpRequests is how many requests each function sends before a
// measurement: connections, TLS sessions, caches and scripts get ready.
const warmUpRequests = 20

// warmUp runs every function of fns warmUpRequests times.
func warmUp(ctx context.Context, fns []request) error {
	for _, fn := range fns {
		for range warmUpRequests {
			if err := fn(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}
