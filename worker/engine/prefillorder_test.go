package engine_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/kvpool"
)

// TestShortPromptNotBlockedByLongPrefill: a short prompt arriving while a
// long one prefills gets its chunk in the next step (shortest remaining
// first), finishing its prefill long before the long prompt's;
// with worker.prefill_order arrival it waits for the whole long prefill.
// Both produce exactly their tokens run alone either way.
func TestShortPromptNotBlockedByLongPrefill(t *testing.T) {
	for _, arrival := range []bool{false, true} {
		t.Run(fmt.Sprint("arrival=", arrival), func(t *testing.T) {
			shortDone, longDone := prefillOrder(t, arrival, 200, 9)
			if !arrival && (shortDone != 1 || longDone <= shortDone) {
				t.Fatalf("the short prompt's prefill ended in step %d, the long one's in step %d: want the short one in step 1, the next after its arrival", shortDone, longDone)
			}
			if arrival && shortDone < longDone {
				t.Fatalf("in arrival order the short prompt's prefill ended in step %d, before the long one's in step %d", shortDone, longDone)
			}
		})
	}
}

// TestPromptUnderWayBeforeNewcomer: a prompt whose prefill is under way
// finishes before an equal prompt arriving meanwhile starts taking the
// budget, so the engine keeps the order the gateway's fair queue admitted
// them in.
func TestPromptUnderWayBeforeNewcomer(t *testing.T) {
	newDone, firstDone := prefillOrder(t, false, 40, 40)
	if firstDone != 1 || newDone <= firstDone {
		t.Fatalf("the first prompt's prefill ended in step %d, the newcomer's in step %d: want the first in step 1", firstDone, newDone)
	}
}

// prefillOrder runs a prompt of first tokens, then one of second tokens
// submitted during the first one's first step, with a 32-token chunk
// budget, and returns the steps in which each prompt's prefill ended.
func prefillOrder(t *testing.T, arrival bool, first, second int) (shortDone, longDone int) {
	firstStep := newHold(func([]engine.Chunk) bool { return true })
	rec := &recordingBackend{holds: []*hold{firstStep}}
	r := newRig(t, rigOptions{threads: 1, chunk: 32, maxBatch: 4, arrival: arrival, wrap: func(b engine.Backend) engine.Backend {
		rec.Backend = b
		return rec
	}})
	vocab := r.m.Config.VocabSize
	long, short := prompt(71, first, vocab), prompt(72, second, vocab)
	longOwner := kvpool.Owner{Tenant: "long", Request: "l", Epoch: 1}
	shortOwner := kvpool.Owner{Tenant: "short", Request: "s", Epoch: 1}

	ls := r.submit(t, longOwner, long, greedy(3))
	<-firstStep.reached // the long prompt's first chunk is in the backend
	ss := r.submit(t, shortOwner, short, greedy(3))
	close(firstStep.release)
	lo, so := collect(t, ls), collect(t, ss)

	shortDone, longDone = -1, -1
	for i, st := range rec.spans() {
		for _, c := range st {
			if c.tenant == "short" && c.end == len(short) && shortDone < 0 {
				shortDone = i
			}
			if c.tenant == "long" && c.end == len(long) && longDone < 0 {
				longDone = i
			}
		}
	}

	alone := newRig(t, rigOptions{threads: 1, chunk: 32, maxBatch: 4})
	for _, c := range []struct {
		name   string
		o      kvpool.Owner
		prompt []int32
		got    outcome
	}{{"long", longOwner, long, lo}, {"short", shortOwner, short, so}} {
		if want := alone.run(t, c.o, c.prompt, greedy(3)); !slices.Equal(c.got.tokens, want.tokens) {
			t.Errorf("%s: %v, alone %v", c.name, c.got.tokens, want.tokens)
		}
	}
	return shortDone, longDone
}
