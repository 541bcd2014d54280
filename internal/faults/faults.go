// Package faults is warden's test-only fault injector for the KV data plane.
// kvtransfer's Sender and Receiver consult an *Injector at fixed points
// (SenderConfig.Faults, ReceiverConfig.Faults); rules decide whether a frame
// is dropped, duplicated, corrupted, delayed or rewritten, or whether a
// writer stalls until the test releases it. Tests in any package of the
// module (kvtransfer, worker, the end-to-end tests) build one with New and
// hand it to the config.
//
// Production code never constructs an Injector: the fields that take one
// are nil outside tests, and a nil *Injector is inert (Hit returns None
// without looking at anything), so the hooks cost one nil check.
package faults

import (
	"sync"
	"time"
)

// Point is where the data plane consults the injector.
type Point int

// Points. Sender side unless marked.
const (
	// SendFrame: before a frame is written to the connection. Event.Frame
	// is final except for the sequence number and MAC, which are computed
	// after Mutate. Drop loses the frame (its sequence number is used),
	// Duplicate writes it twice, Corrupt flips a byte of a DATA payload.
	SendFrame Point = iota + 1
	// ShmWrite: inside the shm write section, after the abort check and
	// right before a chunk (at most 256 KiB) is copied into decode's shared
	// memory. A Stall here is a one-sided write in flight that decode cannot
	// recall: once released, the chunk lands even if the transfer was
	// aborted meanwhile. Event.Bytes is what the stream wrote before it.
	ShmWrite
	// ShmPageDone: after a page's data and header are in shared memory;
	// Corrupt flips a byte of the page there (after its checksum was
	// taken).
	ShmPageDone
	// Opened: the receiver accepted the handshake and Open is about to
	// return; nothing has been written yet. Stall here, cancel Open's
	// context, then Release to abort at that stage: the stream drains
	// without writing a byte.
	Opened
	// RecvFrame (receiver): an authenticated frame of a transfer is about
	// to be handled. Drop ignores it, Delay and Stall hold the receiver.
	RecvFrame
	// SendResult (receiver): decode is about to write its verdict
	// (RESULT) for a transfer. Drop loses it; Delay and Stall hold it.
	SendResult
)

// Action is what a matching rule does.
type Action int

// Actions. The caller carries out Drop, Duplicate and Corrupt; the
// injector itself carries out Delay, Stall and Mutate before Hit returns.
const (
	None Action = iota
	Drop
	Duplicate
	Corrupt
	Delay
	Stall
	Mutate
)

// Frame is a frame header as the injector sees it (SendFrame, RecvFrame).
type Frame struct {
	// Type is the frame type's protocol name: "DATA", "COMPLETE",
	// "DRAIN_ACK", "RESULT", "ABORT".
	Type       string
	TransferID [16]byte
	Epoch      uint64
	PageIndex  uint32
	PageID     int32
	Offset     uint32
	Checksum   uint64
}

// Event describes the point being passed.
type Event struct {
	Point Point
	// Transfer and Epoch name the transfer.
	Transfer [16]byte
	Epoch    uint64
	// Frame is the frame being sent or received (SendFrame, RecvFrame,
	// SendResult); Mutate edits it.
	Frame *Frame
	// Page is the page index in the ticket, Offset the byte offset of the
	// chunk in the page (SendFrame for DATA, ShmWrite, ShmPageDone).
	Page   int
	Offset int
	// Bytes is how many page bytes the stream wrote or sent before this
	// event (sender points).
	Bytes int64
}

// Rule is one fault.
type Rule struct {
	Point Point
	// Match selects events; nil matches every event at Point.
	Match  func(*Event) bool
	Action Action
	// Delay is the sleep for Action Delay.
	Delay time.Duration
	// Edit rewrites the frame for Action Mutate.
	Edit func(*Frame)
	// Times is how often the rule fires; 0 means once, -1 always.
	Times int
}

// Injector holds rules. It is safe for concurrent use.
type Injector struct {
	rules []Rule

	mu      sync.Mutex
	fired   []int
	any     *gate   // stalled: any Stall rule fired
	stalls  []*gate // per rule
	release chan struct{}
	relOnce sync.Once
}

// gate is a channel closed once.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate                { return &gate{ch: make(chan struct{})} }
func (g *gate) close()              { g.once.Do(func() { close(g.ch) }) }
func (g *gate) done() chan struct{} { return g.ch }

// New returns an injector with rules.
func New(rules ...Rule) *Injector {
	in := &Injector{
		rules:   rules,
		fired:   make([]int, len(rules)),
		any:     newGate(),
		stalls:  make([]*gate, len(rules)),
		release: make(chan struct{}),
	}
	for i := range in.stalls {
		in.stalls[i] = newGate()
	}
	return in
}

// Hit consults the rules for e and returns the action the caller must
// carry out (Drop, Duplicate, Corrupt) or None. Delay and Stall block here;
// Mutate edits e.Frame. A nil injector returns None.
func (in *Injector) Hit(e *Event) Action {
	if in == nil {
		return None
	}
	i, ok := in.match(e)
	if !ok {
		return None
	}
	r := in.rules[i]
	switch r.Action {
	case Delay:
		time.Sleep(r.Delay)
		return None
	case Stall:
		in.stalls[i].close()
		in.any.close()
		<-in.release
		return None
	case Mutate:
		if e.Frame != nil && r.Edit != nil {
			r.Edit(e.Frame)
		}
		return None
	}
	return r.Action
}

func (in *Injector) match(e *Event) (int, bool) {
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
		return i, true
	}
	return 0, false
}

// Stalled is closed once any writer is blocked by a Stall rule.
func (in *Injector) Stalled() <-chan struct{} { return in.any.done() }

// StalledOn is closed once rule i (a Stall rule) blocked a caller.
func (in *Injector) StalledOn(i int) <-chan struct{} { return in.stalls[i].done() }

// Release unblocks every stalled caller, now and later.
func (in *Injector) Release() { in.relOnce.Do(func() { close(in.release) }) }

// Fired reports how often rule i fired.
func (in *Injector) Fired(i int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fired[i]
}

// StallShmAfter returns a rule that stalls the first shm writer to have
// written at least n bytes of its transfer, inside the write section: its
// next chunk lands only after Release, whatever happened to the transfer
// meanwhile (the "late write" of an aborted one-sided writer).
func StallShmAfter(n int64) Rule {
	return Rule{Point: ShmWrite, Action: Stall, Match: func(e *Event) bool { return e.Bytes >= n }}
}

// StallFrame returns a rule that holds the first frame of type typ (for
// example "DRAIN_ACK") that a sender is about to write, until Release.
func StallFrame(typ string) Rule {
	return Rule{Point: SendFrame, Action: Stall, Match: func(e *Event) bool { return e.Frame != nil && e.Frame.Type == typ }}
}
