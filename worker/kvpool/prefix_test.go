package kvpool_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/worker/kvpool"
)

var testSecret = bytes.Repeat([]byte("s"), cachekey.MinSecretBytes)

func domain(t testing.TB, tenant string) cachekey.Domain {
	t.Helper()
	d, ok := cachekey.Derive(testSecret, cachekey.ModeTenant, cachekey.Scope{Tenant: tenant, Incarnation: "i1"})
	if !ok {
		t.Fatal("no domain")
	}
	return d
}

// prefixOwner reserves tokens with prefix tags, writes every slot of its
// own pages (content: fill) and marks them written.
func prefixOwner(t testing.TB, p *kvpool.Pool, o kvpool.Owner, tokens int, tags []kvpool.Tag, fill byte) ([]kvpool.PageID, int) {
	t.Helper()
	pages, hit, err := p.ReservePrefix(o, tokens, tags)
	if err != nil {
		t.Fatalf("ReservePrefix(%v): %v", o, err)
	}
	pt := p.Capacity().PageTokens
	for _, id := range pages[hit:] {
		if err := p.WritePage(o, id, 0, bytes.Repeat([]byte{fill}, p.Capacity().PageBytes), pt); err != nil {
			t.Fatal(err)
		}
	}
	return pages, hit
}

func wantReason(t *testing.T, err error, r kvpool.Reason) {
	t.Helper()
	var v *kvpool.ViolationError
	if !errors.As(err, &v) || v.Reason != r {
		t.Fatalf("got %v, want an owner violation %s", err, r)
	}
}

func TestSealedPagesAreSharedWithinADomainOnly(t *testing.T) {
	p := small(t) // 8 pages × 4 tokens
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	tagsA := kvpool.Tags(domain(t, "a"), 1, "", prompt, 4)
	a1 := kvpool.Owner{Tenant: "a", Request: "1", Epoch: 1}
	pages, hit := prefixOwner(t, p, a1, 12, tagsA, 0xA1)
	if hit != 0 {
		t.Fatalf("hit %d in an empty pool", hit)
	}
	if n, err := p.Seal(a1, tagsA); err != nil || n != 2 {
		t.Fatalf("Seal = %d, %v; want 2 pages sealed", n, err)
	}
	// The sealer reads its sealed pages by presenting the tags.
	if err := p.VerifyPrefix(a1, pages, 12, tagsA); err != nil {
		t.Fatal(err)
	}
	// Reading them as owned pages is refused.
	wantReason(t, p.Verify(a1, pages, 12), kvpool.ReasonSealed)
	// Nobody writes a sealed page.
	var fe *kvpool.FenceError
	if err := p.WritePage(a1, pages[0], 0, []byte{0}, 0); !errors.As(err, &fe) || fe.Reason != kvpool.ReasonSealed {
		t.Fatalf("write into a sealed page: %v", err)
	}
	if _, err := p.Release(a1); err != nil {
		t.Fatal(err)
	}
	s := checkAccounting(t, p)
	if s.Cached != 2 || s.Free != 6 || s.AvailableNow() != 8 {
		t.Fatalf("after release: %+v", s)
	}

	// Same tenant, same prefix: both pages are reused, not copied.
	a2 := kvpool.Owner{Tenant: "a", Request: "2", Epoch: 1}
	pa2, hit := prefixOwner(t, p, a2, 12, tagsA, 0xA2)
	if hit != 2 || pa2[0] != pages[0] || pa2[1] != pages[1] {
		t.Fatalf("hit %d, table %v; want pages %v shared", hit, pa2, pages[:2])
	}
	if err := p.VerifyPrefix(a2, pa2, 9, tagsA[:2]); err != nil {
		t.Fatal(err)
	}
	if s := checkAccounting(t, p); s.Cached != 0 || s.Shared != 2 || s.Hits != 2 {
		t.Fatalf("after hit: %+v", s)
	}

	// Another tenant with the same tokens gets its own copy.
	tagsB := kvpool.Tags(domain(t, "b"), 1, "", prompt, 4)
	b1 := kvpool.Owner{Tenant: "b", Request: "1", Epoch: 1}
	pb, hit := prefixOwner(t, p, b1, 12, tagsB, 0xB1)
	if hit != 0 {
		t.Fatalf("tenant b hit %d pages of tenant a", hit)
	}
	if _, err := p.Seal(b1, tagsB); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if pb[i] == pa2[i] {
			t.Fatalf("page %d shared across tenants", pb[i])
		}
	}
	// b presenting a's tags for its own pages, or a's pages with its own
	// tags: refused.
	wantReason(t, p.VerifyPrefix(b1, pa2, 9, tagsB[:2]), kvpool.ReasonForeignDomain)
	wantReason(t, p.VerifyPrefix(b1, pb, 9, tagsA[:2]), kvpool.ReasonForeignDomain)
	if p.Lookup(tagsB) != 2 || p.Lookup(tagsA) != 2 {
		t.Fatal("each domain should see its own two pages")
	}
	checkAccounting(t, p)
}

func TestTamperedTagsAreOwnerViolations(t *testing.T) {
	p := small(t)
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	tags := kvpool.Tags(domain(t, "a"), 7, "", prompt, 4)
	o := kvpool.Owner{Tenant: "a", Request: "1", Epoch: 1}
	pages, _ := prefixOwner(t, p, o, 12, tags, 1)
	if _, err := p.Seal(o, tags); err != nil {
		t.Fatal(err)
	}
	before := p.Stats().Violations
	flip := func(f func(*kvpool.Tag)) []kvpool.Tag {
		c := append([]kvpool.Tag(nil), tags...)
		f(&c[1])
		return c
	}
	wantReason(t, p.VerifyPrefix(o, pages, 8, flip(func(t *kvpool.Tag) { t.Domain[5] ^= 0x10 })), kvpool.ReasonForeignDomain)
	wantReason(t, p.VerifyPrefix(o, pages, 8, flip(func(t *kvpool.Tag) { t.Hash[0] ^= 1 })), kvpool.ReasonTagMismatch)
	wantReason(t, p.VerifyPrefix(o, pages, 8, flip(func(t *kvpool.Tag) { t.Version++ })), kvpool.ReasonTagMismatch)
	// A tag presented for the owner's unsealed third page.
	more := append(append([]kvpool.Tag(nil), tags...), tags[0])
	wantReason(t, p.VerifyPrefix(o, pages, 8, more), kvpool.ReasonNotSealed)
	// Pages swapped in the table: each is sealed, but not with that tag.
	swapped := []kvpool.PageID{pages[1], pages[0], pages[2]}
	wantReason(t, p.VerifyPrefix(o, swapped, 8, tags), kvpool.ReasonTagMismatch)
	// A reader that does not hold the pages (another request of the
	// domain presenting the right tags) is refused: the pages could be
	// evicted under it.
	o2 := kvpool.Owner{Tenant: "a", Request: "2", Epoch: 1}
	own := reserve(t, p, o2, 4)
	wantReason(t, p.VerifyPrefix(o2, append(pages[:2:2], own...), 8, tags), kvpool.ReasonUnshared)
	// A stale epoch of the holder, after BumpEpoch.
	o1, err := p.BumpEpoch(o)
	if err != nil {
		t.Fatal(err)
	}
	wantReason(t, p.VerifyPrefix(o, pages, 8, tags), kvpool.ReasonUnshared)
	if err := p.VerifyPrefix(o1, pages, 8, tags); err != nil {
		t.Fatalf("the new epoch still shares the sealed pages: %v", err)
	}
	if got := p.Stats().Violations - before; got != 7 {
		t.Fatalf("%d violations counted, want 7", got)
	}
}

func TestSealOnlyCompletePages(t *testing.T) {
	p := small(t)
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	tags := kvpool.Tags(domain(t, "a"), 1, "", prompt, 4)
	o := kvpool.Owner{Tenant: "a", Request: "1", Epoch: 1}
	pages := reserve(t, p, o, 8)
	if err := p.MarkTokensWritten(o, pages, 6); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Seal(o, tags); err != nil || n != 1 {
		t.Fatalf("Seal = %d, %v; want only the complete first page", n, err)
	}
	// A second writer of the same prefix cannot seal a duplicate.
	o2 := kvpool.Owner{Tenant: "a", Request: "2", Epoch: 1}
	p2 := reserve(t, p, o2, 8)
	if err := p.MarkTokensWritten(o2, p2, 8); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Seal(o2, tags); err != nil || n != 0 {
		t.Fatalf("duplicate Seal = %d, %v", n, err)
	}
	if _, err := p.Quarantine(o); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Seal(o, tags); !errors.Is(err, kvpool.ErrState) {
		t.Fatalf("Seal of quarantined pages: %v", err)
	}
	// Quarantine let go of the shared page: it is cached, not quarantined.
	if s := checkAccounting(t, p); s.Cached != 1 || s.Quarantined != 1 {
		t.Fatalf("%+v", s)
	}
}

func TestEvictionLeastRecentlyUsedPoisonsAndZeroes(t *testing.T) {
	for _, zero := range []bool{false, true} {
		t.Run(fmt.Sprintf("zero=%v", zero), func(t *testing.T) {
			p := newPool(t, kvpool.Config{Pages: 4, PageTokens: 4, PageBytes: 16, ZeroOnRelease: zero, PoisonOnReserve: !zero})
			d := domain(t, "a")
			var sealedPages [][]kvpool.PageID
			for i := range 3 {
				prompt := []int32{int32(i), 1, 2, 3}
				tags := kvpool.Tags(d, 1, "", prompt, 4)
				o := kvpool.Owner{Tenant: "a", Request: fmt.Sprint(i), Epoch: 1}
				pages, _ := prefixOwner(t, p, o, 4, tags, byte(0x10+i))
				if n, err := p.Seal(o, tags); n != 1 || err != nil {
					t.Fatal(n, err)
				}
				if _, err := p.Release(o); err != nil {
					t.Fatal(err)
				}
				sealedPages = append(sealedPages, pages)
			}
			// Touch prompt 0 again, so prompt 1 is now the oldest.
			t0 := kvpool.Tags(d, 1, "", []int32{0, 1, 2, 3}, 4)
			r := kvpool.Owner{Tenant: "a", Request: "r", Epoch: 1}
			if _, hit := prefixOwner(t, p, r, 4, t0, 0); hit != 1 {
				t.Fatal("no hit")
			}
			if _, err := p.Release(r); err != nil {
				t.Fatal(err)
			}
			// 1 free + 3 cached: 3 pages evict the two oldest (1, 2).
			big := kvpool.Owner{Tenant: "b", Request: "big", Epoch: 1}
			got := reserve(t, p, big, 12)
			s := checkAccounting(t, p)
			if s.Evictions != 2 || s.Cached != 1 || s.Reserved != 3 {
				t.Fatalf("%+v", s)
			}
			if p.Lookup(t0) != 1 || p.Lookup(kvpool.Tags(d, 1, "", []int32{1, 1, 2, 3}, 4)) != 0 {
				t.Fatal("eviction was not least recently used first")
			}
			for _, id := range got {
				b := p.Data(id)
				if zero && id == sealedPages[1][0] && !bytes.Equal(b, make([]byte, 16)) {
					t.Fatalf("evicted page %d not zeroed: %x", id, b)
				}
				if !zero && !bytes.Equal(b[:4], []byte{0xAD, 0xDE, 0xC0, 0x7F}) {
					t.Fatalf("reserved page %d not poisoned: %x", id, b)
				}
			}
			// Admission counts cached pages as available; a reservation
			// beyond free+cached is refused without evicting anything.
			if _, err := p.Reserve(kvpool.Owner{Tenant: "c", Request: "x", Epoch: 1}, 8); !errors.Is(err, kvpool.ErrNoSpace) {
				t.Fatalf("over-reservation: %v", err)
			}
			if s := checkAccounting(t, p); s.Cached != 1 || s.AvailableNow() != 1 {
				t.Fatalf("%+v", s)
			}
		})
	}
}

// TestPrefixStress runs writers that share prefixes in two domains while
// aborts, epoch bumps, quarantines and evictions happen at every stage.
// Every read that passes VerifyPrefix must see its own domain's content
// for its prefix, and the pool identity must hold at the end with no
// holding left.
func TestPrefixStress(t *testing.T) {
	const pt, pageBytes = 4, 4 * slotBytes
	p := newPool(t, kvpool.Config{Pages: 24, PageTokens: pt, PageBytes: pageBytes, PoisonOnReserve: true})
	doms := []string{"x", "y"}
	content := func(tag kvpool.Tag) []byte { return bytes.Repeat(tag.Hash[:pageBytes/4], 4)[:pageBytes] }
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 99))
			for i := range 400 {
				ten := doms[r.IntN(2)]
				d, _ := cachekey.Derive(testSecret, cachekey.ModeTenant, cachekey.Scope{Tenant: ten, Incarnation: "i1"})
				// Prompts from a small family so prefixes recur.
				prompt := make([]int32, 1+r.IntN(3*pt+2))
				for j := range prompt {
					prompt[j] = int32(j/pt + r.IntN(2)*(j/(2*pt)))
				}
				tags := kvpool.Tags(d, 1, "", prompt, pt)
				o := kvpool.Owner{Tenant: ten, Request: fmt.Sprintf("%d-%d", g, i), Epoch: 1}
				pages, hit, err := p.ReservePrefix(o, len(prompt)+pt, tags[:min(len(tags), (len(prompt)-1)/pt)])
				if errors.Is(err, kvpool.ErrNoSpace) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				for k := hit; k < len(tags); k++ {
					if err := p.WritePage(o, pages[k], 0, content(tags[k]), pt); err != nil {
						errs <- err
						return
					}
				}
				switch r.IntN(5) {
				case 0: // abort before sealing
					_, err = p.Release(o)
				case 1: // fence, then quarantine (a one-sided writer may still write)
					if o, err = p.BumpEpoch(o); err == nil {
						if _, err = p.Quarantine(o); err == nil {
							_, err = p.ReleaseQuarantined(o)
						}
					}
				default:
					n, serr := p.Seal(o, tags)
					if serr != nil {
						errs <- serr
						return
					}
					if err := p.VerifyPrefix(o, pages, hit*pt, tags[:n]); err != nil {
						errs <- fmt.Errorf("verify of own shared prefix: %w", err)
						return
					}
					for k := range min(n, hit) {
						if !bytes.Equal(p.Data(pages[k]), content(tags[k])) {
							errs <- fmt.Errorf("%v read foreign content in shared page %d", o, pages[k])
							return
						}
					}
					_, err = p.Release(o)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := checkAccounting(t, p)
	if s.Reserved+s.InUse+s.Quarantined+s.Shared != 0 || len(p.Holdings()) != 0 || s.Violations != 0 {
		t.Fatalf("after stress: %+v", s)
	}
	if s.Hits == 0 || s.Evictions == 0 {
		t.Fatalf("stress exercised no hit or no eviction: %+v", s)
	}
	t.Logf("%+v", s)
}

// TestPrefixStressKilledWriters extends TestPrefixStress with eviction
// under pressure (a pool too small for the working set), aborts at every
// stage of a writer's life, and killed writers of both kinds: a fenced
// writer (tcp: the receiver writes through the fence) whose late writes
// must all be refused, and a one-sided writer (shm) killed mid-transfer
// whose late bytes keep landing in its pages after it was quarantined,
// until its drain is confirmed and the pages are released. Readers hit
// shared pages while others are evicted. Throughout, a watcher checks the
// pool identity, every hit a reservation gets is a sealed page with
// exactly the tag asked for, and every read that passed VerifyPrefix sees
// its own domain's content: no unsealed, foreign or overwritten page is
// ever exposed.
func TestPrefixStressKilledWriters(t *testing.T) {
	const pt, pageBytes = 4, 4 * slotBytes
	p := newPool(t, kvpool.Config{Pages: 20, PageTokens: pt, PageBytes: pageBytes, PoisonOnReserve: true, ZeroOnRelease: true})
	doms := []string{"x", "y"}
	content := func(tag kvpool.Tag) []byte { return bytes.Repeat(tag.Hash[:pageBytes/4], 4)[:pageBytes] }
	garbage := bytes.Repeat([]byte{0xEE}, pageBytes)
	stop := make(chan struct{})
	var watch sync.WaitGroup
	errs := make(chan error, 16)
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if s := p.Stats(); s.Free+s.Reserved+s.InUse+s.Cached+s.Quarantined != s.Total || s.Shared > s.InUse {
				errs <- fmt.Errorf("pool identity broken: %+v", s)
				return
			}
			runtime.Gosched()
		}
	})
	var zombies sync.WaitGroup
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range 300 {
				ten := doms[r.IntN(2)]
				d, _ := cachekey.Derive(testSecret, cachekey.ModeTenant, cachekey.Scope{Tenant: ten, Incarnation: "i1"})
				prompt := make([]int32, 1+r.IntN(4*pt+2))
				for j := range prompt {
					prompt[j] = int32(j/pt + r.IntN(2)*(j/(2*pt)) + 7*r.IntN(2)*(j/(3*pt)))
				}
				tags := kvpool.Tags(d, 1, "", prompt, pt)
				o := kvpool.Owner{Tenant: ten, Request: fmt.Sprintf("%d-%d", g, i), Epoch: 1}
				pages, hit, err := p.ReservePrefix(o, len(prompt)+pt, tags[:min(len(tags), len(prompt)/pt)])
				if errors.Is(err, kvpool.ErrNoSpace) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				for k := range hit {
					if info, _ := p.Page(pages[k]); info.State != kvpool.Sealed || info.Tag != tags[k] {
						errs <- fmt.Errorf("%v got hit page %d in state %v with tag %v", o, pages[k], info.State, info.Tag == tags[k])
						return
					}
				}
				if err := p.VerifyPrefix(o, pages, hit*pt, tags[:hit]); err != nil {
					errs <- fmt.Errorf("verify of hit prefix: %w", err)
					return
				}
				for k := range hit {
					if !bytes.Equal(p.Data(pages[k]), content(tags[k])) {
						errs <- fmt.Errorf("%v read foreign or overwritten content in shared page %d", o, pages[k])
						return
					}
				}
				stage := r.IntN(7)
				written := len(tags)
				if stage <= 2 {
					written = hit + r.IntN(len(tags)-hit+1) // aborted part-way
				}
				for k := hit; k < written; k++ {
					if err := p.WritePage(o, pages[k], 0, content(tags[k]), pt); err != nil {
						errs <- err
						return
					}
				}
				switch stage {
				case 0: // aborted mid-write
					_, err = p.Release(o)
				case 1: // fenced writer (tcp): its late writes are all refused
					var fenced kvpool.Owner
					if fenced, err = p.BumpEpoch(o); err == nil {
						_, err = p.Release(fenced)
					}
					for _, id := range pages[hit:] {
						if werr := p.WritePage(o, id, 0, garbage, pt); !errors.Is(werr, kvpool.ErrFenced) {
							errs <- fmt.Errorf("late write of fenced %v to page %d: %v", o, id, werr)
							return
						}
					}
				case 2: // one-sided writer (shm) killed: quarantined, late bytes, then drained
					var fenced kvpool.Owner
					if fenced, err = p.BumpEpoch(o); err == nil {
						if _, err = p.Quarantine(fenced); err == nil {
							own := slices.Clone(pages[hit:])
							zombies.Go(func() {
								for range 3 {
									for _, id := range own {
										copy(p.Data(id), garbage) // no fence: one-sided
									}
									runtime.Gosched()
								}
								// The writer's drain is confirmed: nothing more lands.
								if _, err := p.ReleaseQuarantined(fenced); err != nil {
									errs <- err
								}
							})
						}
					}
				case 3: // fully written, fenced before it could seal: nothing seals
					var fenced kvpool.Owner
					if fenced, err = p.BumpEpoch(o); err == nil {
						n, serr := p.Seal(fenced, tags)
						if serr != nil || n != hit {
							errs <- fmt.Errorf("seal after fence sealed %d pages (hit %d): %v", n, hit, serr)
							return
						}
						_, err = p.Release(fenced)
					}
				default:
					n, serr := p.Seal(o, tags)
					if serr != nil {
						errs <- serr
						return
					}
					if err := p.VerifyPrefix(o, pages, n*pt, tags[:n]); n > 0 && err != nil {
						errs <- fmt.Errorf("verify of own sealed prefix: %w", err)
						return
					}
					for k := range n {
						if !bytes.Equal(p.Data(pages[k]), content(tags[k])) {
							errs <- fmt.Errorf("%v read foreign content in sealed page %d", o, pages[k])
							return
						}
					}
					_, err = p.Release(o)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	zombies.Wait()
	close(stop)
	watch.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := checkAccounting(t, p)
	if s.Reserved+s.InUse+s.Quarantined+s.Shared != 0 || len(p.Holdings()) != 0 {
		t.Fatalf("after stress: %+v", s)
	}
	if s.Hits == 0 || s.Evictions == 0 || s.Violations != 0 {
		t.Fatalf("stress exercised no hit or no eviction, or saw a violation: %+v", s)
	}
	t.Logf("%+v", s)
}
