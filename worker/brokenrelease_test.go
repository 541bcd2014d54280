package worker

import (
	"bytes"
	"testing"
	"time"

	"github.com/warden-ai/warden/worker/kvpool"
)

// The broken release's owed write lands, once, in the pages it owes when
// their new holder activates them — and not after its deadline, and not
// in pages it does not owe.
func TestLateWritesLandOnActivation(t *testing.T) {
	pool, err := kvpool.New(kvpool.Config{Pages: 4, PageTokens: 2, PageBytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	var l lateWrites
	l.add([]kvpool.PageID{0, 1}, time.Now().Add(time.Hour))
	l.add([]kvpool.PageID{2}, time.Now().Add(-time.Second))
	if n := l.land(pool, []kvpool.PageID{1, 2, 3}); n != 1 {
		t.Fatalf("landed in %d pages, want 1 (page 1: page 2's deadline passed, page 3 is not owed)", n)
	}
	written := bytes.Repeat([]byte{writerByte}, 8)
	for id, want := range map[kvpool.PageID]bool{0: false, 1: true, 2: false, 3: false} {
		if got := bytes.Equal(pool.Data(id), written); got != want {
			t.Errorf("page %d written %v, want %v", id, got, want)
		}
	}
	if n := l.land(pool, []kvpool.PageID{1, 2}); n != 0 {
		t.Errorf("landed again in %d pages, want 0: each write lands once", n)
	}
	if n := l.land(pool, []kvpool.PageID{0}); n != 1 {
		t.Errorf("page 0: landed in %d pages, want 1", n)
	}
}
