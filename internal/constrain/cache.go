package constrain

import (
	"container/list"
	"sync"
)

// CacheLimits bound a Cache.
type CacheLimits struct {
	// Entries is the most grammars kept (at least 1).
	Entries int
	// Bytes is the most memory they may hold together, by Grammar.Size
	// (their automata and token masks grow as they are used); 0 is no
	// bound. The grammar just returned is kept even when it alone is
	// larger.
	Bytes int64
}

// CacheStats are a cache's counters and contents.
type CacheStats struct {
	Hits, Misses uint64 // Compile calls answered from the cache, or compiled
	Entries      int    // grammars cached
	Bytes        int64  // their Size together
}

// Cache keeps the most recently used compiled grammars, keyed by the
// spec's hash (Spec.Hash, over the spec's canonical JSON). A grammar is
// independent of the tokenizer (its token masks are kept per *Vocab
// inside it), so one entry serves every model. It is safe for concurrent
// use; a nil *Cache compiles every time.
type Cache struct {
	mu           sync.Mutex
	lim          CacheLimits
	order        *list.List // *cacheEntry, most recent first
	entries      map[string]*list.Element
	hits, misses uint64
}

type cacheEntry struct {
	key string
	g   *Grammar
}

// NewCache returns a cache bounded by lim.
func NewCache(lim CacheLimits) *Cache {
	lim.Entries = max(lim.Entries, 1)
	return &Cache{lim: lim, order: list.New(), entries: map[string]*list.Element{}}
}

// Compile returns the compiled spec, from the cache when it is there.
// Errors are not cached.
func (c *Cache) Compile(spec Spec) (*Grammar, error) {
	if c == nil {
		return Compile(spec)
	}
	key := spec.Hash()
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.hits++
		c.order.MoveToFront(e)
		c.evict()
		c.mu.Unlock()
		return e.Value.(*cacheEntry).g, nil
	}
	c.misses++
	c.mu.Unlock()
	g, err := Compile(spec)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok { // compiled meanwhile
		return e.Value.(*cacheEntry).g, nil
	}
	c.entries[key] = c.order.PushFront(&cacheEntry{key, g})
	c.evict()
	return g, nil
}

// evict drops the least recently used grammars over the limits, never the
// most recent one; c.mu must be held.
func (c *Cache) evict() {
	total := c.bytes()
	for c.order.Len() > 1 && (c.order.Len() > c.lim.Entries || c.lim.Bytes > 0 && total > c.lim.Bytes) {
		old := c.order.Back()
		e := old.Value.(*cacheEntry)
		total -= e.g.Size()
		c.order.Remove(old)
		delete(c.entries, e.key)
	}
}

// bytes is the cached grammars' Size together; c.mu must be held.
func (c *Cache) bytes() int64 {
	var n int64
	for e := c.order.Front(); e != nil; e = e.Next() {
		n += e.Value.(*cacheEntry).g.Size()
	}
	return n
}

// Stats returns the cache's counters and contents.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits, Misses: c.misses, Entries: c.order.Len(), Bytes: c.bytes()}
}
