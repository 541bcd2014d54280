package kvtransfer

import (
	"context"
	"testing"
	"time"
	"sort"
)

func TestZZProbe3(t *testing.T) {
	pages := 256
	h := newHarness(t, SHM, pages, 8192, harnessOpts{segPath: benchSegPath(t)})
	src := h.randomPages(pages)
	tk := h.ticket(int64(pages)*16, 16, 0)
	var op, push, comp []time.Duration
	for range 2000 {
		next := *tk
		next.TransferID = NewTransferID()
		h.sink.add(&next)
		ctx := context.Background()
		t0 := time.Now()
		st, err := h.send.Open(ctx, &next)
		if err != nil { t.Fatal(err) }
		t1 := time.Now()
		for i, p := range src { if err := st.Push(ctx, i, 0, p); err != nil { t.Fatal(err) } }
		t2 := time.Now()
		if _, err := st.Complete(ctx, next.PromptTokens, 0); err != nil { t.Fatal(err) }
		t3 := time.Now()
		<-h.sink.outcomes
		op, push, comp = append(op, t1.Sub(t0)), append(push, t2.Sub(t1)), append(comp, t3.Sub(t2))
	}
	med := func(d []time.Duration) time.Duration { sort.Slice(d, func(i, j int) bool { return d[i] < d[j] }); return d[len(d)/2] }
	t.Logf("pages %d: open %v push %v complete %v", pages, med(op), med(push), med(comp))
}
