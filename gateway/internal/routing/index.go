package routing

import (
	"container/list"
	"sync"

	"github.com/warden-ai/warden/internal/cachekey"
)

// Index is the gateway's view of the prefix pages each worker holds
// sealed, built from the workers' own reports (Apply): per model and per
// worker, the chain hashes of the pages. A chain hash covers the request's
// cache domain, so the index is per domain as well: a request can only
// compute, and so only match, the hashes of its own domain, and the
// index holds no domain or tenant. It is bounded: beyond its capacity the
// least recently reported or matched entries go.
//
// It is keyed by worker, whatever the worker's role: a both worker's, a
// prefill worker's and a decode worker's pages are entries of their own,
// so the routing of a disaggregated request can score both of its
// workers.
type Index struct {
	mu      sync.Mutex
	cap     int
	entries map[indexKey]*list.Element
	lru     *list.List // of indexKey, front = most recent
	evicted uint64     // entries dropped for the bound
}

type indexKey struct {
	model, worker string
	hash          cachekey.Hash
}

// NewIndex returns an index of at most capacity entries (≥ 1).
func NewIndex(capacity int) *Index {
	return &Index{cap: max(capacity, 1), entries: make(map[indexKey]*list.Element), lru: list.New()}
}

// Apply folds a worker's report into the index: after a snapshot the
// worker's previous entries go, then its sealed pages are added and its
// evicted ones removed.
func (ix *Index) Apply(model, worker string, ev Events) {
	if ev.Snapshot {
		ix.Forget(worker)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, h := range ev.Evicted {
		if e, ok := ix.entries[indexKey{model, worker, h}]; ok {
			delete(ix.entries, ix.lru.Remove(e).(indexKey))
		}
	}
	for _, h := range ev.Sealed {
		k := indexKey{model, worker, h}
		if e, ok := ix.entries[k]; ok {
			ix.lru.MoveToFront(e)
			continue
		}
		ix.entries[k] = ix.lru.PushFront(k)
		if ix.lru.Len() > ix.cap {
			delete(ix.entries, ix.lru.Remove(ix.lru.Back()).(indexKey))
			ix.evicted++
		}
	}
}

// Match returns how many leading hashes worker holds for model, and
// marks them recently used.
func (ix *Index) Match(model, worker string, hashes []cachekey.Hash) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i, h := range hashes {
		e, ok := ix.entries[indexKey{model, worker, h}]
		if !ok {
			return i
		}
		ix.lru.MoveToFront(e)
	}
	return len(hashes)
}

// Forget drops every entry of worker (it restarted, re-registered or was
// lost: its cache is gone or will be reported afresh).
func (ix *Index) Forget(worker string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for k, e := range ix.entries {
		if k.worker == worker {
			ix.lru.Remove(e)
			delete(ix.entries, k)
		}
	}
}

// Len is the number of entries, for the index-size metric.
func (ix *Index) Len() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.lru.Len()
}

// Dropped counts the entries dropped for the bound, for the metrics.
func (ix *Index) Dropped() uint64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.evicted
}
