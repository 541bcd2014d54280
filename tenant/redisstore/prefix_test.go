package redisstore_test

import (
	"fmt"
	"testing"

	"github.com/warden-ai/warden/internal/redistest"
	"github.com/warden-ai/warden/tenant/redisstore"
)

// TestDeletePrefix deletes more keys than one DEL batch holds, and only
// those under the prefix.
func TestDeletePrefix(t *testing.T) {
	addr := redistest.Addr(t)
	c := redistest.NewClient(t, addr)
	ctx := t.Context()
	drop, keep := redistest.Prefix(t, addr), redistest.Prefix(t, addr)
	p := c.Pipeline()
	for i := range 1200 {
		p.Set(ctx, fmt.Sprintf("%sk%d", drop, i), i, 0)
	}
	p.Set(ctx, keep+"k", 1, 0)
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := redisstore.DeletePrefix(ctx, c, drop); err != nil {
		t.Fatal(err)
	}
	if keys, err := c.Keys(ctx, drop+"*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("keys under the deleted prefix: %d, %v", len(keys), err)
	}
	if n, err := c.Exists(ctx, keep+"k").Result(); err != nil || n != 1 {
		t.Errorf("key under another prefix: exists %d, %v", n, err)
	}
}
