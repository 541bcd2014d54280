package kvpool

import (
	"errors"
	"runtime"
	"testing"
)

// TestTransitionsWaitForInFlightCopy stands in for a WritePage copy that is
// between its two critical sections (pinned, mutex free) and checks that
// Release, BumpEpoch and Quarantine wait for it, refuse new copies meanwhile,
// and complete once it ends.
func TestTransitionsWaitForInFlightCopy(t *testing.T) {
	owner := Owner{Tenant: "alice", Request: "r1", Epoch: 4}
	for name, op := range map[string]func(p *Pool) (State, error){
		"Release": func(p *Pool) (State, error) {
			_, err := p.Release(owner)
			return Free, err
		},
		"BumpEpoch": func(p *Pool) (State, error) {
			_, err := p.BumpEpoch(owner)
			return Reserved, err
		},
		"Quarantine": func(p *Pool) (State, error) {
			_, err := p.Quarantine(owner)
			return Quarantined, err
		},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := New(Config{Pages: 2, PageTokens: 4, PageBytes: 8})
			if err != nil {
				t.Fatal(err)
			}
			pages, err := p.Reserve(owner, 4)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.MarkWritten(owner, pages[0], 4); err != nil {
				t.Fatal(err)
			}
			p.mu.Lock()
			h := p.holders[owner.key()]
			h.pins++ // a copy is in flight
			p.mu.Unlock()

			done := make(chan State, 1)
			go func() {
				st, err := op(p)
				if err != nil {
					t.Error(err)
				}
				done <- st
			}()
			// Wait (without a clock) until the transition is parked.
			for {
				p.mu.Lock()
				w := h.waiters
				p.mu.Unlock()
				if w > 0 {
					break
				}
				runtime.Gosched()
			}
			var f *FenceError
			if err := p.WritePage(owner, pages[0], 0, []byte{1}, 1); !errors.As(err, &f) || f.Reason != ReasonFencing {
				t.Errorf("WritePage during a pending %s = %v, want ReasonFencing", name, err)
			}
			if err := p.Verify(owner, pages, 4); err != nil {
				t.Errorf("Verify while the copy is in flight: %v", err)
			}
			select {
			case <-done:
				t.Fatalf("%s finished while a copy was in flight", name)
			default:
			}

			p.mu.Lock() // the copy ends, as in WritePage
			h.pins--
			p.drained.Broadcast()
			p.mu.Unlock()

			want := <-done
			info, _ := p.Page(pages[0])
			if info.State != want {
				t.Errorf("page state after %s = %v, want %v", name, info.State, want)
			}
			if s := p.Stats(); s.Free+s.Reserved+s.InUse+s.Cached+s.Quarantined != s.Total || h.waiters != 0 {
				t.Errorf("after %s: %+v, waiters %d", name, s, h.waiters)
			}
		})
	}
}
