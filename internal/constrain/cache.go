package constrain

import (
	"container/list"
	"sync"
)

// Cache keeps the most recently used compiled grammars, keyed by the
// spec's hash; each grammar keeps its token masks per *Vocab (so masks are
// keyed by spec and vocabulary). It is safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	max     int
	order   *list.List // *cacheEntry, most recent first
	entries map[string]*list.Element
}

type cacheEntry struct {
	key string
	g   *Grammar
}

// NewCache returns a cache of at most size grammars (at least 1).
func NewCache(size int) *Cache {
	return &Cache{max: max(size, 1), order: list.New(), entries: map[string]*list.Element{}}
}

// Compile returns the compiled spec, from the cache when it is there.
// Errors are not cached.
func (c *Cache) Compile(spec Spec) (*Grammar, error) {
	key := spec.Hash()
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.order.MoveToFront(e)
		c.mu.Unlock()
		return e.Value.(*cacheEntry).g, nil
	}
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
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.entries, old.Value.(*cacheEntry).key)
	}
	return g, nil
}

// Len is the number of cached grammars.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
