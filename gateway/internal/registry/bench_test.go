package registry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/warden-ai/warden/internal/controlpb"
)

// BenchmarkPlacement measures one placement decision (Pick, Begin and the
// request's done) on 8 workers, with the in-flight budget learned
// ("budget") against the same registry shape with nothing learned, which
// takes the previous path (KV pages only: "pages"), and the fair path
// ("fair": the budget, plus the newcomer check and per-tenant count an
// arriving request of one of 10 tenants makes). All run in every
// iteration; x-pages and fair-x-pages are ratios to "pages".
func BenchmarkPlacement(b *testing.B) {
	build := func(learn bool) *Registry {
		r := New(Config{
			HeartbeatTimeout: time.Hour,
			Dial: func(addr string) (*grpc.ClientConn, error) {
				return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			},
			Accept: func(context.Context, *controlpb.WorkerInfo, controlpb.WorkerClient) error { return nil },
		})
		for i := range 8 {
			id := fmt.Sprintf("w%d", i)
			if _, err := r.Register(context.Background(), &controlpb.RegisterRequest{
				Worker: info(id, controlpb.Role_ROLE_BOTH, "host", "tcp"), Pool: pool(1000, 1000)}); err != nil {
				b.Fatal(err)
			}
			if learn {
				if _, err := r.Heartbeat(context.Background(), &controlpb.HeartbeatRequest{
					WorkerId: id, Pool: pool(1000, 1000), Running: 32, Waiting: 1}); err != nil {
					b.Fatal(err)
				}
			}
		}
		return r
	}
	budget, pages := build(true), build(false)
	tenants := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"}
	defer budget.Close()
	defer pages.Close()
	place := func(r *Registry, tenant string) time.Duration {
		t0 := time.Now()
		rt, err := r.Pick("tiny", 64)
		if err != nil || rt.Busy {
			b.Fatalf("Pick = %+v, %v", rt, err)
		}
		if tenant == "" {
			rt.Decode.Begin(rt.Pages)()
		} else {
			// The fair path: the newcomer check an arriving request makes
			// when others wait, and the per-tenant count.
			rt.Decode.Newcomer(tenant)
			rt.Decode.BeginFor(tenant, rt.Pages)()
		}
		return time.Since(t0)
	}
	var tb, tp, tf time.Duration
	b.ResetTimer()
	for i := range b.N {
		tb += place(budget, "")
		tp += place(pages, "")
		tf += place(budget, tenants[i%len(tenants)])
	}
	b.StopTimer()
	b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N), "budget-ns/op")
	b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "pages-ns/op")
	b.ReportMetric(float64(tf.Nanoseconds())/float64(b.N), "fair-ns/op")
	b.ReportMetric(float64(tb)/float64(tp), "x-pages")
	b.ReportMetric(float64(tf)/float64(tp), "fair-x-pages")
}
