package kvpool

import "github.com/warden-ai/warden/internal/cachekey"

// MaxCacheEvents bounds the prefix-cache events the pool's log keeps, and
// so the hashes one batch lists: 4096 hashes of 32 bytes are 128 KiB per
// report.
const MaxCacheEvents = 4096

// CacheEvents is a batch of prefix-cache changes for the gateway's
// cache-aware routing: the chain hashes of pages sealed and evicted since
// the reader's cursor, each hash at most once (its latest event). Reset
// says the receiver must forget what it knew of this pool first: the
// batch is a snapshot (of at most MaxCacheEvents sealed pages), because
// the reader had no cursor yet or the log moved past it.
type CacheEvents struct {
	Sealed, Evicted []cachekey.Hash
	Reset           bool
}

// CacheCursor is one reader's place in the pool's prefix-cache event log:
// the sequence number of the next event it has not read. Every reader (a
// worker reports to each of its gateways) keeps its own, so each sees
// every event; the zero cursor reads a snapshot.
type CacheCursor uint64

// cacheEvent is one seal (sealed true) or eviction.
type cacheEvent struct {
	hash   cachekey.Hash
	sealed bool
}

// cacheLog is the pool's recent events: a ring of the last MaxCacheEvents,
// the newest numbered next-1 (the first is 1). Guarded by Pool.mu.
type cacheLog struct {
	ring []cacheEvent
	next uint64
	// changed, once a reader waits (CacheChanged), is closed at the next
	// event.
	changed chan struct{}
}

// note records that the page of h was sealed (true) or evicted. Called
// with mu held.
func (l *cacheLog) note(h cachekey.Hash, sealed bool) {
	if l.next == 0 {
		l.next = 1
	}
	if l.ring == nil {
		l.ring = make([]cacheEvent, MaxCacheEvents)
	}
	l.ring[l.next%MaxCacheEvents] = cacheEvent{h, sealed}
	l.next++
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// head is the cursor after the newest event. Called with mu held.
func (l *cacheLog) head() CacheCursor { return CacheCursor(max(l.next, 1)) }

// CacheEventsSince returns the prefix-cache events after cursor c and the
// cursor after them. For the zero cursor, or one more than MaxCacheEvents
// events behind (they are gone from the log), it returns a snapshot
// instead (CacheSnapshot).
func (p *Pool) CacheEventsSince(c CacheCursor) (CacheEvents, CacheCursor) {
	p.mu.Lock()
	defer p.mu.Unlock()
	head := p.events.head()
	if c == 0 || c > head || uint64(head-c) > MaxCacheEvents {
		return p.snapshotLocked(), head
	}
	latest := make(map[cachekey.Hash]bool, head-c)
	var order []cachekey.Hash
	for seq := uint64(c); seq < uint64(head); seq++ {
		e := p.events.ring[seq%MaxCacheEvents]
		if _, ok := latest[e.hash]; !ok {
			order = append(order, e.hash)
		}
		latest[e.hash] = e.sealed
	}
	var ev CacheEvents
	for _, h := range order {
		if latest[h] {
			ev.Sealed = append(ev.Sealed, h)
		} else {
			ev.Evicted = append(ev.Evicted, h)
		}
	}
	return ev, head
}

// CacheSnapshot returns the chain hashes of (at most MaxCacheEvents) pages
// sealed in the pool now, with Reset set, and the cursor of the events
// after it: what a worker sends when it registers.
func (p *Pool) CacheSnapshot() (CacheEvents, CacheCursor) {
	return p.CacheEventsSince(0)
}

// snapshotLocked is CacheSnapshot's batch. Called with mu held.
func (p *Pool) snapshotLocked() CacheEvents {
	ev := CacheEvents{Reset: true}
	for t := range p.index {
		if len(ev.Sealed) == MaxCacheEvents {
			break
		}
		ev.Sealed = append(ev.Sealed, t.Hash)
	}
	return ev
}

// CacheChanged returns a channel that is closed once the log holds events
// after cursor c (at once if it does now), so that a reporter can send
// them early.
func (p *Pool) CacheChanged(c CacheCursor) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c < p.events.head() {
		done := make(chan struct{})
		close(done)
		return done
	}
	if p.events.changed == nil {
		p.events.changed = make(chan struct{})
	}
	return p.events.changed
}
