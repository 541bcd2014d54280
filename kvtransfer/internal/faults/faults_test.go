package faults

import (
	"testing"
	"time"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

func TestRules(t *testing.T) {
	in := New(
		Rule{Point: SendFrame, Action: Drop, Match: func(e *Event) bool { return e.Page == 1 }},
		Rule{Point: SendFrame, Action: Mutate, Times: -1, Edit: func(h *wire.Header) { h.Epoch = 99 }},
		Rule{Point: ShmWrite, Action: Stall},
		Rule{Point: ShmPageDone, Action: Delay, Delay: time.Millisecond},
	)
	if got := in.Hit(&Event{Point: ShmPageDone}); got != None || in.Fired(3) != 1 {
		t.Errorf("delay returned %v, fired %d", got, in.Fired(3))
	}
	if got := in.Hit(&Event{Point: SendFrame, Page: 1, Header: &wire.Header{}}); got != Drop {
		t.Errorf("first hit %v, want Drop", got)
	}
	for range 3 {
		h := wire.Header{Epoch: 1}
		if got := in.Hit(&Event{Point: SendFrame, Page: 1, Header: &h}); got != None || h.Epoch != 99 {
			t.Errorf("later hit %v epoch %d: the once-only Drop fired again or Mutate did not", got, h.Epoch)
		}
	}
	if in.Fired(0) != 1 || in.Fired(1) != 3 {
		t.Errorf("fired %d, %d", in.Fired(0), in.Fired(1))
	}
	done := make(chan Action)
	go func() { done <- in.Hit(&Event{Point: ShmWrite}) }()
	<-in.Stalled()
	select {
	case <-done:
		t.Fatal("stalled writer returned before Release")
	default:
	}
	in.Release()
	if a := <-done; a != None {
		t.Errorf("stall returned %v", a)
	}
	var nilInj *Injector
	if nilInj.Hit(&Event{Point: SendFrame}) != None {
		t.Error("nil injector injected")
	}
}
