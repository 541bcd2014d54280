package worker

import (
	"errors"
	"testing"
	"time"
)

// TestTombstones: a tombstone refuses its epoch and older ones, not newer
// ones; the newest epoch wins; tombstones expire and are capped.
func TestTombstones(t *testing.T) {
	now := time.Now()
	ts := newTombstones(0)
	if ts.ttl != tombstoneMinTTL {
		t.Fatalf("ttl %s, want the minimum %s", ts.ttl, tombstoneMinTTL)
	}
	k := reqKey{"acme", "r"}
	aborted, failed := errors.New("aborted"), errors.New("failed")
	ts.add(k, 3, aborted, now)
	for epoch, want := range map[uint64]error{2: aborted, 3: aborted, 4: nil} {
		if got := ts.check(k, epoch); got != want {
			t.Errorf("epoch %d: %v, want %v", epoch, got, want)
		}
	}
	ts.add(k, 1, failed, now) // older: ignored
	if got := ts.check(k, 3); got != aborted {
		t.Errorf("after an older tombstone: %v", got)
	}
	ts.add(k, 5, failed, now)
	if got := ts.check(k, 4); got != failed {
		t.Errorf("after a newer tombstone: %v", got)
	}
	if got := ts.check(reqKey{"acme", "other"}, 1); got != nil {
		t.Errorf("unrelated request: %v", got)
	}

	// Expiry: a later add forgets what is older than ttl.
	ts.add(reqKey{"acme", "late"}, 1, aborted, now.Add(2*tombstoneMinTTL))
	if _, ok := ts.m[k]; ok {
		t.Errorf("expired tombstone kept")
	}

	// Cap: the oldest go first.
	ts = newTombstones(time.Hour)
	for i := range tombstoneCap + 10 {
		ts.add(reqKey{"t", string(rune('a'+i%26)) + time.Duration(i).String()}, 1, aborted, now)
	}
	if len(ts.m) > tombstoneCap || len(ts.order)-ts.head > tombstoneCap {
		t.Errorf("%d tombstones (%d in order), cap %d", len(ts.m), len(ts.order)-ts.head, tombstoneCap)
	}
}
