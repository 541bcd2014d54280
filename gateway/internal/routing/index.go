package routing

import (
	"container/list"
	"sync"

	"github.com/warden-ai/warden/internal/cachekey"
)

// Index records which chain hashes (of which model) the gateway routed to
// which worker, bounded: beyond its capacity the least recently used
// entries go. Hashes cover the cache domain, so one domain's entries can
// never match another's request.
type Index struct {
	mu      sync.Mutex
	cap     int
	entries map[indexKey]*list.Element
	lru     *list.List // of indexKey, front = most recent
}

type indexKey struct {
	model, worker string
	hash          cachekey.Hash
}

// NewIndex returns an index of at most capacity entries (≥ 1).
func NewIndex(capacity int) *Index {
	return &Index{cap: max(capacity, 1), entries: make(map[indexKey]*list.Element), lru: list.New()}
}

// Record notes that worker holds the pages of hashes for model.
func (ix *Index) Record(model, worker string, hashes []cachekey.Hash) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, h := range hashes {
		k := indexKey{model, worker, h}
		if e, ok := ix.entries[k]; ok {
			ix.lru.MoveToFront(e)
			continue
		}
		ix.entries[k] = ix.lru.PushFront(k)
		if ix.lru.Len() > ix.cap {
			delete(ix.entries, ix.lru.Remove(ix.lru.Back()).(indexKey))
		}
	}
}

// Match returns how many leading hashes worker is recorded to hold.
func (ix *Index) Match(model, worker string, hashes []cachekey.Hash) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i, h := range hashes {
		if _, ok := ix.entries[indexKey{model, worker, h}]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Forget drops every entry of worker (it restarted or left).
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
