package kvpool

import "github.com/warden-ai/warden/internal/cachekey"

// MaxCacheEvents bounds the prefix-cache events the pool keeps between two
// drains, and the hashes one CacheSnapshot lists: 4096 hashes of 32 bytes
// are 128 KiB per report.
const MaxCacheEvents = 4096

// CacheEvents is a batch of prefix-cache changes for the gateway's
// cache-aware routing: the chain hashes of pages sealed and evicted since
// the previous batch, each hash at most once (its latest event). Reset
// says the receiver must forget what it knew of this pool first: the
// batch is a snapshot, or events were dropped because more pages changed
// than MaxCacheEvents.
type CacheEvents struct {
	Sealed, Evicted []cachekey.Hash
	Reset           bool
}

// cacheLog is the pool's pending events: the latest event of each hash
// (true sealed, false evicted). Guarded by Pool.mu.
type cacheLog struct {
	latest   map[cachekey.Hash]bool
	overflow bool
	// ready, once CacheEventsReady made it, gets a value whenever an
	// event is noted.
	ready chan struct{}
}

// note records that the page of h was sealed (true) or evicted. Past
// MaxCacheEvents distinct hashes it gives up and marks the log
// overflowed: the next drain is a snapshot. Called with mu held.
func (l *cacheLog) note(h cachekey.Hash, sealed bool) {
	select {
	case l.ready <- struct{}{}:
	default:
	}
	if l.overflow {
		return
	}
	if _, ok := l.latest[h]; !ok && len(l.latest) >= MaxCacheEvents {
		l.overflow, l.latest = true, nil
		return
	}
	if l.latest == nil {
		l.latest = make(map[cachekey.Hash]bool)
	}
	l.latest[h] = sealed
}

// DrainCacheEvents returns the prefix-cache events since the previous
// drain (or snapshot) and clears them. After an overflow it returns a
// snapshot instead (CacheSnapshot).
func (p *Pool) DrainCacheEvents() CacheEvents {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.events.overflow {
		return p.snapshotLocked()
	}
	var ev CacheEvents
	for h, sealed := range p.events.latest {
		if sealed {
			ev.Sealed = append(ev.Sealed, h)
		} else {
			ev.Evicted = append(ev.Evicted, h)
		}
	}
	p.events.latest = nil
	return ev
}

// CacheSnapshot returns the chain hashes of (at most MaxCacheEvents) pages
// sealed in the pool now, with Reset set, and clears the pending events:
// what a worker sends when it registers.
func (p *Pool) CacheSnapshot() CacheEvents {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshotLocked()
}

// snapshotLocked is CacheSnapshot. Called with mu held.
func (p *Pool) snapshotLocked() CacheEvents {
	ev := CacheEvents{Reset: true}
	for t := range p.index {
		if len(ev.Sealed) == MaxCacheEvents {
			break
		}
		ev.Sealed = append(ev.Sealed, t.Hash)
	}
	p.events = cacheLog{ready: p.events.ready}
	return ev
}

// CacheEventsReady returns a channel that receives a value when events
// were noted since it last did, so that a reporter can send them early.
func (p *Pool) CacheEventsReady() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.events.ready == nil {
		p.events.ready = make(chan struct{}, 1)
	}
	return p.events.ready
}
