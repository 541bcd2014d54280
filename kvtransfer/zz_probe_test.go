package kvtransfer

import (
	"context"
	"sort"
	"testing"
	"time"
)

func TestZZProbe(t *testing.T) {
	for _, c := range []struct{ pages, pb int }{{256, 8 << 10}, {64, 64 << 10}, {1024, 64 << 10}} {
		pages := c.pages
		h := newHarness(t, SHM, pages, c.pb, harnessOpts{segPath: benchSegPath(t)})
		src := h.randomPages(pages)
		tk := h.ticket(int64(pages)*16, 16, 0)
		var op, push, comp []time.Duration
		for range 30 {
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
		t.Logf("pages %d x %d: open %v push %v complete %v tail %d/%d sleeps %d empty %d slept %v hash %v", pages, c.pb, med(op), med(push), med(comp), zzTail.Swap(0), zzTotal.Swap(0), zzSleeps.Swap(0), zzEmpty.Swap(0), time.Duration(zzSlept.Swap(0)), time.Duration(zzHashNs.Swap(0)))
	}
}

func TestZZProbe4(t *testing.T) {
	pages := 256
	h := newHarness(t, SHM, pages, 8<<10, harnessOpts{segPath: benchSegPath(t)})
	src := h.randomPages(pages)
	tk := h.ticket(int64(pages)*16, 16, 0)
	for range 200 {
		timedTransfer2(t, h, tk, src)
	}
	zzMu.Lock()
	names := []string{}
	for k := range zzEv { names = append(names, k) }
	sort.Strings(names)
	for _, k := range names {
		d := zzEv[k][50:]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		t.Logf("%-22s %v", k, d[len(d)/2])
	}
	zzMu.Unlock()
}

func timedTransfer2(t *testing.T, h *harness, tk *Ticket, src [][]byte) {
	next := *tk
	next.TransferID = NewTransferID()
	h.sink.add(&next)
	ctx := context.Background()
	st, err := h.send.Open(ctx, &next)
	if err != nil { t.Fatal(err) }
	for i, p := range src { if err := st.Push(ctx, i, 0, p); err != nil { t.Fatal(err) } }
	if _, err := st.Complete(ctx, next.PromptTokens, 0); err != nil { t.Fatal(err) }
	<-h.sink.outcomes
}
