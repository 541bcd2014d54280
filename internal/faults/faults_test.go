package faults

import (
	"testing"
	"time"
)

func TestRules(t *testing.T) {
	in := New(
		Rule{Point: SendFrame, Action: Drop, Match: func(e *Event) bool { return e.Page == 1 }},
		Rule{Point: SendFrame, Action: Mutate, Times: -1, Edit: func(f *Frame) { f.Epoch = 99 }},
		Rule{Point: ShmWrite, Action: Stall},
		Rule{Point: ShmPageDone, Action: Delay, Delay: time.Millisecond},
	)
	if got := in.Hit(&Event{Point: ShmPageDone}); got != None || in.Fired(3) != 1 {
		t.Errorf("delay returned %v, fired %d", got, in.Fired(3))
	}
	if got := in.Hit(&Event{Point: SendFrame, Page: 1, Frame: &Frame{}}); got != Drop {
		t.Errorf("first hit %v, want Drop", got)
	}
	for range 3 {
		f := Frame{Epoch: 1}
		if got := in.Hit(&Event{Point: SendFrame, Page: 1, Frame: &f}); got != None || f.Epoch != 99 {
			t.Errorf("later hit %v epoch %d: the once-only Drop fired again or Mutate did not", got, f.Epoch)
		}
	}
	if in.Fired(0) != 1 || in.Fired(1) != 3 {
		t.Errorf("fired %d, %d", in.Fired(0), in.Fired(1))
	}
	done := make(chan Action)
	go func() { done <- in.Hit(&Event{Point: ShmWrite}) }()
	<-in.Stalled()
	<-in.StalledOn(2)
	select {
	case <-done:
		t.Fatal("stalled writer returned before Release")
	default:
	}
	in.Release()
	if a := <-done; a != None {
		t.Errorf("stall returned %v", a)
	}
	if a := in.Hit(&Event{Point: ShmWrite}); a != None || in.Fired(2) != 1 {
		t.Errorf("once-only stall fired again: %v, %d", a, in.Fired(2))
	}
	var nilInj *Injector
	if nilInj.Hit(&Event{Point: SendFrame}) != None {
		t.Error("nil injector injected")
	}
}

func TestHelpers(t *testing.T) {
	in := New(StallShmAfter(1000), StallFrame("DRAIN_ACK"))
	if a := in.Hit(&Event{Point: ShmWrite, Bytes: 999}); a != None || in.Fired(0) != 0 {
		t.Fatalf("stalled before n bytes: %v", a)
	}
	if a := in.Hit(&Event{Point: SendFrame, Frame: &Frame{Type: "COMPLETE"}}); a != None || in.Fired(1) != 0 {
		t.Fatalf("stalled another frame type: %v", a)
	}
	stalled := make(chan struct{})
	go func() {
		in.Hit(&Event{Point: ShmWrite, Bytes: 1000})
		in.Hit(&Event{Point: SendFrame, Frame: &Frame{Type: "DRAIN_ACK"}})
		close(stalled)
	}()
	<-in.StalledOn(0)
	select {
	case <-in.StalledOn(1):
		t.Fatal("second rule stalled before the first was released")
	default:
	}
	in.Release()
	<-stalled
	if in.Fired(0) != 1 || in.Fired(1) != 1 {
		t.Errorf("fired %d, %d", in.Fired(0), in.Fired(1))
	}
}
