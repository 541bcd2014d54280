// Package faults is the kvtransfer test-only fault injector. The sender
// consults it at fixed points; rules decide whether a frame is dropped,
// duplicated, corrupted, delayed or rewritten, or whether a writer stalls
// until the test releases it. Only packages under kvtransfer can import it,
// so production code cannot construct one; a nil *Injector injects nothing.
package faults

import (
	"sync"
	"time"

	"github.com/warden-ai/warden/kvtransfer/internal/wire"
)

// Point is where the sender consults the injector.
type Point int

const (
	// SendFrame: before a frame is written to the connection. The header
	// is final except for the MAC, which is computed after Mutate.
	SendFrame Point = iota + 1
	// ShmWrite: inside the shm write section, after the abort check and
	// right before a chunk is copied into shared memory; a Stall here is a
	// one-sided write in flight that the receiver cannot recall.
	ShmWrite
	// ShmPageDone: after a page's checksum and page header were written to
	// shared memory; Corrupt flips a byte of the page there.
	ShmPageDone
)

// Action is what a matching rule does.
type Action int

// Actions. The sender carries out Drop, Duplicate and Corrupt; the injector
// itself carries out Delay, Stall and Mutate before returning.
const (
	None Action = iota
	Drop
	Duplicate
	Corrupt
	Delay
	Stall
	Mutate
)

// Event describes the point being passed.
type Event struct {
	Point Point
	// Header is the frame about to be sent (SendFrame); Mutate edits it.
	Header *wire.Header
	// Page is the page index in the ticket, Offset the byte offset of the
	// chunk (ShmWrite, ShmPageDone).
	Page   int
	Offset int
}

// Rule is one fault.
type Rule struct {
	Point Point
	// Match selects events; nil matches every event at Point.
	Match  func(*Event) bool
	Action Action
	// Delay is the sleep for Action Delay.
	Delay time.Duration
	// Edit rewrites the header for Action Mutate.
	Edit func(*wire.Header)
	// Times is how often the rule fires; 0 means once, -1 always.
	Times int
}

// Injector holds rules. It is safe for concurrent use.
type Injector struct {
	mu        sync.Mutex
	rules     []Rule
	fired     []int
	stalled   chan struct{}
	stallOnce sync.Once
	release   chan struct{}
	relOnce   sync.Once
}

// New returns an injector with rules.
func New(rules ...Rule) *Injector {
	return &Injector{
		rules:   rules,
		fired:   make([]int, len(rules)),
		stalled: make(chan struct{}),
		release: make(chan struct{}),
	}
}

// Hit consults the rules for e and returns the action the caller must
// carry out (Drop, Duplicate, Corrupt) or None. Delay and Stall block here;
// Mutate edits e.Header. A nil injector returns None.
func (in *Injector) Hit(e *Event) Action {
	if in == nil {
		return None
	}
	r, ok := in.match(e)
	if !ok {
		return None
	}
	switch r.Action {
	case Delay:
		time.Sleep(r.Delay)
		return None
	case Stall:
		in.stallOnce.Do(func() { close(in.stalled) })
		<-in.release
		return None
	case Mutate:
		if e.Header != nil && r.Edit != nil {
			r.Edit(e.Header)
		}
		return None
	}
	return r.Action
}

func (in *Injector) match(e *Event) (Rule, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, r := range in.rules {
		if r.Point != e.Point || (r.Match != nil && !r.Match(e)) {
			continue
		}
		limit := r.Times
		if limit == 0 {
			limit = 1
		}
		if limit > 0 && in.fired[i] >= limit {
			continue
		}
		in.fired[i]++
		return r, true
	}
	return Rule{}, false
}

// Stalled is closed once a writer is blocked by a Stall rule.
func (in *Injector) Stalled() <-chan struct{} { return in.stalled }

// Release unblocks every stalled writer, now and later.
func (in *Injector) Release() { in.relOnce.Do(func() { close(in.release) }) }

// Fired reports how often rule i fired.
func (in *Injector) Fired(i int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fired[i]
}
