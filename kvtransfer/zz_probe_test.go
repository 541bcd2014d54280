package kvtransfer

import (
	"context"
	"sort"
	"testing"
	"time"
)

func TestZZProbe(t *testing.T) {
	for _, c := range []struct{ pages, pb int }{{256, 8 << 10}, {64, 64 << 10}, {1024, 64 << 10}, {256, 384 << 10}} {
		pages := c.pages
		h := newHarness(t, SHM, pages, c.pb, harnessOpts{segPath: benchSegPath(t)})
		src := h.randomPages(pages)
		dst := make([]byte, pages*c.pb)
		tk := h.ticket(int64(pages)*16, 16, 0)
		var op, push, comp, mc []time.Duration
		for range 30 {
			t00 := time.Now()
			for i, p := range src {
				copy(dst[i*c.pb:], p)
			}
			mc = append(mc, time.Since(t00))
			next := *tk
			next.TransferID = NewTransferID()
			h.sink.add(&next)
			ctx := context.Background()
			t0 := time.Now()
			st, err := h.send.Open(ctx, &next)
			if err != nil {
				t.Fatal(err)
			}
			t1 := time.Now()
			for i, p := range src {
				if err := st.Push(ctx, i, 0, p); err != nil {
					t.Fatal(err)
				}
			}
			t2 := time.Now()
			if _, err := st.Complete(ctx, next.PromptTokens, 0); err != nil {
				t.Fatal(err)
			}
			t3 := time.Now()
			<-h.sink.outcomes
			op, push, comp = append(op, t1.Sub(t0)), append(push, t2.Sub(t1)), append(comp, t3.Sub(t2))
		}
		med := func(d []time.Duration) time.Duration {
			sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
			return d[len(d)/2]
		}
		t.Logf("%4d x %6d: memcpy %v | open %v push %v complete %v", pages, c.pb, med(mc), med(op), med(push), med(comp))
	}
}
