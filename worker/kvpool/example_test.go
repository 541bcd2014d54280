package kvpool_test

import (
	"errors"
	"fmt"

	"github.com/warden-ai/warden/worker/kvpool"
)

// A decode worker's view of one request: reserve, receive the transfer,
// verify before each step, then an abort fences and frees the pages.
func Example() {
	pool, err := kvpool.New(kvpool.Config{Pages: 256, PageTokens: 16, PageBytes: 8192})
	if err != nil {
		panic(err)
	}
	fmt.Println(pool.Capacity())

	owner := kvpool.Owner{Tenant: "acme", Request: "req-1", Epoch: 1}
	pages, _ := pool.Reserve(owner, 40) // 40 tokens: 3 pages
	fmt.Println("pages:", pages)

	// The transfer receiver copies the prompt's KV in, page by page.
	for i, id := range pages {
		slots := min(16, 40-16*i)
		if err := pool.WritePage(owner, id, 0, make([]byte, 8192), slots); err != nil {
			panic(err)
		}
	}
	_ = pool.Activate(owner)
	fmt.Println("verify 40:", pool.Verify(owner, pages, 40))
	fmt.Println("verify 41 is a violation:", errors.Is(pool.Verify(owner, pages, 41), kvpool.ErrOwnerViolation))

	// Abort: fence the old epoch, then free.
	fenced, _ := pool.BumpEpoch(owner)
	err = pool.WritePage(owner, pages[0], 0, []byte{1}, 1) // a late frame
	fmt.Println("late frame:", err)
	n, _ := pool.Release(fenced)
	fmt.Println("released:", n)
	s := pool.Stats()
	fmt.Printf("free %d/%d, violations %d, fence rejections %d\n", s.Free, s.Total, s.Violations, s.FenceRejections)
	// Output:
	// KV pool: 256 pages × 16 tokens = 4096 tokens (2.0 MiB)
	// pages: [0 1 2]
	// verify 40: <nil>
	// verify 41 is a violation: true
	// late frame: kvpool: write fenced on page 0 for acme/req-1@1: stale_epoch (page owner acme/req-1@2, in_use)
	// released: 3
	// free 256/256, violations 1, fence rejections 1
}
