package tenant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeAuth answers from a map, or fails with err when set.
type fakeAuth struct {
	mu    sync.Mutex
	keys  map[string]Principal
	err   error
	calls atomic.Int64
	gate  chan struct{} // when set, each call waits for it
}

func (f *fakeAuth) Authenticate(ctx context.Context, key string) (Principal, error) {
	f.calls.Add(1)
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return Principal{}, f.err
	}
	p, ok := f.keys[key]
	if !ok {
		return Principal{}, ErrUnauthenticated
	}
	return p, nil
}

func (f *fakeAuth) set(key string, p *Principal, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == nil {
		delete(f.keys, key)
	} else {
		f.keys[key] = *p
	}
	f.err = err
}

type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newKey(t *testing.T) string {
	t.Helper()
	k, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestAuthCacheTTL(t *testing.T) {
	key := newKey(t)
	p := Principal{Tenant: Tenant{ID: "acme"}, KeyID: key[4:12]}
	f := &fakeAuth{keys: map[string]Principal{key: p}}
	clock := &manualClock{now: time.Unix(100, 0)}
	c := NewAuthCache(f, AuthCacheConfig{Now: clock.Now})
	ctx := t.Context()
	for range 3 {
		if got, err := c.Authenticate(ctx, key); err != nil || got.Tenant.ID != "acme" {
			t.Fatalf("Authenticate = %+v, %v", got, err)
		}
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("%d store calls within the TTL, want 1", n)
	}
	f.set(key, nil, nil) // revoked
	clock.Advance(DefaultAuthTTL - time.Nanosecond)
	if _, err := c.Authenticate(ctx, key); err != nil {
		t.Fatalf("within TTL: %v", err)
	}
	clock.Advance(time.Nanosecond)
	if _, err := c.Authenticate(ctx, key); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("revoked key after TTL: %v", err)
	}
	// Failures are not cached: a re-issued key works at once.
	f.set(key, &p, nil)
	if _, err := c.Authenticate(ctx, key); err != nil {
		t.Fatalf("after re-adding: %v", err)
	}
	// Strings that cannot be keys never reach the store.
	calls := f.calls.Load()
	for _, bad := range []string{"", "Bearer x", key + "x"} {
		if _, err := c.Authenticate(ctx, bad); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("Authenticate(%q) = %v", bad, err)
		}
	}
	if f.calls.Load() != calls {
		t.Fatal("malformed keys reached the store")
	}
}

func TestAuthCacheGrace(t *testing.T) {
	key, other := newKey(t), newKey(t)
	p := Principal{Tenant: Tenant{ID: "acme"}}
	f := &fakeAuth{keys: map[string]Principal{key: p, other: p}}
	clock := &manualClock{now: time.Unix(100, 0)}
	quiet := slog.New(slog.DiscardHandler)
	c := NewAuthCache(f, AuthCacheConfig{Now: clock.Now, Grace: 10 * time.Second, Logger: quiet})
	ctx := t.Context()
	if _, err := c.Authenticate(ctx, key); err != nil {
		t.Fatal(err)
	}
	outage := fmt.Errorf("dial: %w", ErrUnavailable)
	f.set(key, &p, outage)
	clock.Advance(9 * time.Second)
	if _, err := c.Authenticate(ctx, key); err != nil {
		t.Fatalf("within grace: %v", err)
	}
	if _, err := c.Authenticate(ctx, other); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("unverified key during outage: %v, want ErrUnavailable", err)
	}
	clock.Advance(time.Second)
	if _, err := c.Authenticate(ctx, key); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after grace: %v, want ErrUnavailable", err)
	}
	// Other errors (bugs, corrupt data) are never papered over.
	f.set(key, &p, nil)
	if _, err := c.Authenticate(ctx, key); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	f.set(key, &p, errors.New("corrupt record"))
	if _, err := c.Authenticate(ctx, key); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("non-outage error: %v", err)
	}

	noGrace := NewAuthCache(f, AuthCacheConfig{Now: clock.Now, Grace: -1, Logger: quiet})
	f.set(key, &p, nil)
	if _, err := noGrace.Authenticate(ctx, key); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	f.set(key, &p, outage)
	if _, err := noGrace.Authenticate(ctx, key); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("grace disabled: %v", err)
	}
}

func TestAuthCacheCollapsesConcurrentLookups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		key := newKey(t)
		f := &fakeAuth{keys: map[string]Principal{key: {KeyID: "x"}}, gate: make(chan struct{})}
		c := NewAuthCache(f, AuthCacheConfig{})
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for range 20 {
			wg.Go(func() {
				_, err := c.Authenticate(t.Context(), key)
				errs <- err
			})
		}
		synctest.Wait() // all 20 blocked: one in the store, the rest waiting for it
		close(f.gate)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := f.calls.Load(); n != 1 {
			t.Fatalf("%d store calls for 20 concurrent lookups, want 1", n)
		}
	})
}

// TestAuthCacheEntryAgesFromItsLookup: a caller that joins a lookup in
// progress caches the answer as of when the store was asked, so a change
// to the tenant made meanwhile shows TTL after the lookup began, not TTL
// after the late caller arrived.
func TestAuthCacheEntryAgesFromItsLookup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		key := newKey(t)
		f := &fakeAuth{keys: map[string]Principal{key: {KeyID: "x"}}, gate: make(chan struct{})}
		c := NewAuthCache(f, AuthCacheConfig{})
		first, cancel := context.WithCancel(t.Context())
		go func() { _, _ = c.Authenticate(first, key) }() // cancelled below: it caches nothing
		synctest.Wait()                                   // the lookup is in the store
		time.Sleep(DefaultAuthTTL / 2)
		late := make(chan error, 1)
		go func() {
			_, err := c.Authenticate(t.Context(), key)
			late <- err
		}()
		synctest.Wait()
		cancel() // only the late caller stores the answer
		synctest.Wait()
		close(f.gate) // and every later lookup passes
		if err := <-late; err != nil {
			t.Fatal(err)
		}
		time.Sleep(DefaultAuthTTL / 2)
		if _, err := c.Authenticate(t.Context(), key); err != nil {
			t.Fatal(err)
		}
		if n := f.calls.Load(); n != 2 {
			t.Fatalf("%d store calls, want 2: the entry must expire TTL after its lookup began", n)
		}
	})
}

func TestAuthCacheCancel(t *testing.T) {
	key := newKey(t)
	f := &fakeAuth{keys: map[string]Principal{key: {}}, gate: make(chan struct{})}
	defer close(f.gate)
	c := NewAuthCache(f, AuthCacheConfig{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Authenticate(ctx, key); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled lookup: %v", err)
	}
}

func TestAuthCacheBounded(t *testing.T) {
	f := &fakeAuth{keys: map[string]Principal{}}
	var keys []string
	for range 50 {
		k := newKey(t)
		f.keys[k] = Principal{KeyID: k[4:12]}
		keys = append(keys, k)
	}
	c := NewAuthCache(f, AuthCacheConfig{MaxEntries: 10})
	for _, k := range keys {
		if p, err := c.Authenticate(t.Context(), k); err != nil || p.KeyID != k[4:12] {
			t.Fatalf("Authenticate = %+v, %v", p, err)
		}
		c.mu.Lock()
		n := len(c.entries)
		c.mu.Unlock()
		if n > 10 {
			t.Fatalf("cache holds %d entries, max 10", n)
		}
	}
}
