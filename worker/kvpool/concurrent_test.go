package kvpool_test

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warden-ai/warden/worker/kvpool"
)

const slotBytes = 8 // bytes per token slot in the stress pools

// stamp is the content owner o writes into position pos: if any other data
// ends up in a slot o reads after Verify, the stress test sees it.
func stamp(o kvpool.Owner, pos int) []byte {
	h := fnv.New64a()
	fmt.Fprintf(h, "%v#%d", o, pos)
	return h.Sum(nil)
}

// target is an (owner, page) a stale or foreign writer attacks.
type target struct {
	owner kvpool.Owner
	page  kvpool.PageID
}

// targets is the shared list of recently seen page assignments.
type targets struct {
	mu   sync.Mutex
	list []target
}

func (ts *targets) add(o kvpool.Owner, pages []kvpool.PageID) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, id := range pages {
		ts.list = append(ts.list, target{o, id})
	}
	if len(ts.list) > 256 {
		ts.list = append(ts.list[:0], ts.list[len(ts.list)-128:]...)
	}
}

func (ts *targets) pick(r *rand.Rand) (target, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.list) == 0 {
		return target{}, false
	}
	return ts.list[r.IntN(len(ts.list))], true
}

// TestConcurrentIsolation runs owners through the whole life cycle while
// attackers write with stale and foreign owners, a late writer races each
// Release, and a watcher checks accounting. Every read after a successful
// Verify must see only the reader's own stamps; every attack must be fenced.
// Run it with -race.
func TestConcurrentIsolation(t *testing.T) {
	for _, poison := range []bool{false, true} {
		t.Run(fmt.Sprintf("poison=%v", poison), func(t *testing.T) { stress(t, poison) })
	}
}

func stress(t *testing.T, poison bool) {
	const (
		owners     = 4
		attackers  = 2
		pageTokens = 4
		maxTokens  = 6 * pageTokens
	)
	iters := 200
	if testing.Short() {
		iters = 50
	}
	p := newPool(t, kvpool.Config{Pages: owners*6 + 8, PageTokens: pageTokens, PageBytes: pageTokens * slotBytes, PoisonOnReserve: poison})
	var (
		stale, live targets
		done        atomic.Bool
		attacks     atomic.Int64
		wg, bg      sync.WaitGroup
	)

	for g := range owners {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			tenant := fmt.Sprintf("tenant%d", g)
			for it := range iters {
				if t.Failed() {
					return
				}
				o := kvpool.Owner{Tenant: tenant, Request: fmt.Sprintf("r%d", it), Epoch: 1}
				tokens := 1 + r.IntN(maxTokens)
				pages, err := p.Reserve(o, tokens)
				if err != nil { // the pool holds every owner's maximum at once
					t.Errorf("Reserve(%v, %d): %v", o, tokens, err)
					return
				}
				live.add(kvpool.Owner{Tenant: "intruder", Request: o.Request, Epoch: 1}, pages)
				live.add(kvpool.Owner{Tenant: tenant, Request: "other", Epoch: 1}, pages)
				if err := p.Activate(o); err != nil {
					t.Error(err)
					return
				}
				written := r.IntN(tokens + 1)
				for pos := range written {
					if err := p.WritePage(o, pages[pos/pageTokens], pos%pageTokens*slotBytes, stamp(o, pos), pos%pageTokens+1); err != nil {
						t.Errorf("WritePage(%v, pos %d): %v", o, pos, err)
						return
					}
				}
				if err := p.Verify(o, pages, written); err != nil {
					t.Errorf("Verify(%v, %d): %v", o, written, err)
					return
				}
				for pos := range written {
					slot := p.Data(pages[pos/pageTokens])[pos%pageTokens*slotBytes:][:slotBytes]
					if want := stamp(o, pos); string(slot) != string(want) {
						t.Errorf("%v position %d holds % x, wrote % x", o, pos, slot, want)
						return
					}
				}
				if written < tokens {
					if err := p.Verify(o, pages, written+1); !errors.Is(err, kvpool.ErrOwnerViolation) {
						t.Errorf("Verify of unwritten position %d of %v = %v", written, o, err)
						return
					}
				}

				// A late writer for o races the end of o's life.
				late := make(chan error, 1)
				go func() {
					late <- p.WritePage(o, pages[0], 0, stamp(o, 999), 1)
				}()
				switch r.IntN(3) {
				case 0:
					_, err = p.Release(o)
				case 1:
					var o2 kvpool.Owner
					if o2, err = p.BumpEpoch(o); err == nil {
						if err := p.Verify(o, pages, 0); !errors.Is(err, kvpool.ErrOwnerViolation) {
							t.Errorf("Verify with the fenced epoch = %v", err)
						}
						_, err = p.Release(o2)
					}
				case 2:
					if _, err = p.Quarantine(o); err == nil {
						stale.add(o, pages) // attacked while quarantined
						_, err = p.ReleaseQuarantined(o)
					}
				}
				if err != nil {
					t.Errorf("ending %v: %v", o, err)
					return
				}
				if err := <-late; err != nil && !errors.Is(err, kvpool.ErrFenced) {
					t.Errorf("late write: %v", err)
				}
				stale.add(o, pages)
			}
		})
	}
	for a := range attackers {
		bg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(a), 2))
			junk := make([]byte, pageTokens*slotBytes)
			for i := range junk {
				junk[i] = 0xEE
			}
			for !done.Load() {
				list := &stale
				if r.IntN(2) == 0 {
					list = &live
				}
				tg, ok := list.pick(r)
				if !ok {
					continue
				}
				attacks.Add(1)
				var err error
				switch r.IntN(3) {
				case 0:
					err = p.WritePage(tg.owner, tg.page, 0, junk, pageTokens)
				case 1:
					err = p.MarkWritten(tg.owner, tg.page, pageTokens)
				case 2:
					err = p.CheckWrite(tg.owner, tg.page)
				}
				runtime.Gosched() // leave the owners room on small machines
				if !errors.Is(err, kvpool.ErrFenced) {
					t.Errorf("attack on page %d as %v = %v, want fenced", tg.page, tg.owner, err)
					return
				}
			}
		})
	}
	bg.Go(func() {
		for !done.Load() {
			checkAccounting(t, p)
			runtime.Gosched()
		}
	})
	wg.Wait()
	done.Store(true)
	bg.Wait()

	s := checkAccounting(t, p)
	if s.Free != s.Total || len(p.Holdings()) != 0 {
		t.Errorf("pages leaked: %+v, holdings %+v", s, p.Holdings())
	}
	if s.FenceRejections < uint64(attacks.Load()) {
		t.Errorf("FenceRejections = %d, fewer than the %d attacks", s.FenceRejections, attacks.Load())
	}
	if s.Violations == 0 {
		t.Error("no violation counted, though unwritten and fenced reads were attempted")
	}
}

// fullStamp fills a page of n bytes with o's stamp.
func fullStamp(o kvpool.Owner, n int) []byte {
	b := make([]byte, 0, n+slotBytes)
	for len(b) < n {
		b = append(b, stamp(o, 0)...)
	}
	return b[:n]
}

// TestLateCopyNeverLandsAfterFence races a writer that keeps copying junk
// with whatever owner it last saw against an owner that fences (BumpEpoch)
// or releases and immediately reuses the pool's only page. After the fence
// the reader writes its own stamp and must read back exactly that: a copy
// that passed the fence check before the fence may finish, but never after
// it. Run it with -race, which also flags a copy not ordered before the
// fence.
func TestLateCopyNeverLandsAfterFence(t *testing.T) {
	const pageBytes = 4096
	iters := 300
	if testing.Short() {
		iters = 60
	}
	p := newPool(t, kvpool.Config{Pages: 1, PageTokens: 1, PageBytes: pageBytes})
	var (
		current  atomic.Pointer[kvpool.Owner] // the owner the late writer acts for
		attempts atomic.Int64
		done     atomic.Bool
		wg       sync.WaitGroup
	)
	current.Store(&kvpool.Owner{Tenant: "t", Request: "none", Epoch: 1})
	wg.Go(func() {
		junk := make([]byte, pageBytes)
		for i := range junk {
			junk[i] = 0xEE
		}
		var fenced *kvpool.Owner
		for !done.Load() {
			o := current.Load()
			if o == fenced { // idle until there is a new owner to act for
				runtime.Gosched()
				continue
			}
			err := p.WritePage(*o, 0, 0, junk, 1)
			if errors.Is(err, kvpool.ErrFenced) {
				fenced = o
			} else if err != nil {
				t.Errorf("late write: %v", err)
				return
			}
			attempts.Add(1)
		}
	})
	defer func() { done.Store(true); wg.Wait() }()

	for i := range iters {
		o := kvpool.Owner{Tenant: "t", Request: fmt.Sprintf("r%d", i), Epoch: 1}
		if _, err := p.Reserve(o, 1); err != nil {
			t.Fatal(err)
		}
		current.Store(&o)
		// Two finished attempts later the writer is surely writing as o.
		for n := attempts.Load(); attempts.Load() < n+2 && !t.Failed(); {
			runtime.Gosched()
		}
		// reader owns the page next; the late writer never learns it.
		var reader kvpool.Owner
		if i%2 == 0 {
			var err error
			if reader, err = p.BumpEpoch(o); err != nil {
				t.Fatal(err)
			}
		} else {
			if _, err := p.Release(o); err != nil {
				t.Fatal(err)
			}
			reader = kvpool.Owner{Tenant: "u", Request: o.Request, Epoch: 1}
			if _, err := p.Reserve(reader, 1); err != nil {
				t.Fatal(err)
			}
		}
		want := fullStamp(reader, pageBytes)
		if err := p.WritePage(reader, 0, 0, want, 1); err != nil {
			t.Fatal(err)
		}
		if err := p.Verify(reader, []kvpool.PageID{0}, 1); err != nil {
			t.Fatal(err)
		}
		if got := p.Data(0); string(got) != string(want) {
			t.Fatalf("iteration %d: %v's page was overwritten after the fence", i, reader)
		}
		if _, err := p.Release(reader); err != nil {
			t.Fatal(err)
		}
	}
}
