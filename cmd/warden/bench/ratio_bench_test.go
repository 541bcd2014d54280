package bench

import (
	"testing"
	"time"
)

// BenchmarkGateway alternates one request on each path per iteration —
// direct to the worker, through the memory-store gateway, and through the
// Redis-store gateway when a Redis answers — and reports each path's mean
// time per request and the ratios, measured in the same run. Every answer
// is checked against the reference. Quick run:
//
//	go test -run '^$' -bench Gateway -benchtime 300x ./cmd/warden/bench/
func BenchmarkGateway(b *testing.B) {
	o := GatewayOptions{RedisAddr: testRedis(b), Threads: 1}
	if err := o.defaults(); err != nil {
		b.Fatal(err)
	}
	gb, err := startGatewayBench(b.Context(), o)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := gb.c.close(); err != nil {
			b.Error(err)
		}
	}()
	if err := warmUp(b.Context(), gb.fns); err != nil {
		b.Fatal(err)
	}
	reportAlternating(b, gb.fns, []string{"direct", "memory", "redis"})
}

// BenchmarkTenantStores alternates the tenant work of one request (cached
// auth, Acquire, Release) on the memory store and on Redis per iteration
// and reports the ratio. Quick run:
//
//	go test -run '^$' -bench TenantStores -benchtime 2000x ./cmd/warden/bench/
func BenchmarkTenantStores(b *testing.B) {
	addr := testRedis(b)
	if addr == "" {
		b.Skip("no Redis")
	}
	stores, cleanup, err := startStores(b.Context(), addr, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := cleanup(); err != nil {
			b.Error(err)
		}
	}()
	fns := []request{stores[0].request, stores[1].request}
	if err := warmUp(b.Context(), fns); err != nil {
		b.Fatal(err)
	}
	reportAlternating(b, fns, []string{"memory", "redis"})
}

// reportAlternating runs every function of fns once per iteration and
// reports the mean µs per request of each, named by names, and the ratio
// of each to the first.
func reportAlternating(b *testing.B, fns []request, names []string) {
	total := make([]time.Duration, len(fns))
	ctx := b.Context()
	for b.Loop() {
		for i, fn := range fns {
			start := time.Now()
			if err := fn(ctx); err != nil {
				b.Fatal(err)
			}
			total[i] += time.Since(start)
		}
	}
	n := float64(b.N)
	for i := range fns {
		b.ReportMetric(float64(total[i].Microseconds())/n, names[i]+"-µs/req")
		if i > 0 {
			b.ReportMetric(float64(total[i])/float64(total[0]), names[i]+"/"+names[0])
		}
	}
	if len(fns) == 3 {
		b.ReportMetric(float64(total[2])/float64(total[1]), names[2]+"/"+names[1])
	}
	b.ReportMetric(0, "ns/op") // one op is several requests: not meaningful
}
