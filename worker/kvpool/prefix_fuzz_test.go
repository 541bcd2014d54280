package kvpool_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/worker/kvpool"
)

// prefixActor is one fuzzed owner: its tenant, prompt tags and table.
type prefixActor struct {
	owner  kvpool.Owner
	prompt []int32
	tags   []kvpool.Tag
	pages  []kvpool.PageID
	held   bool
}

// FuzzPrefixPool drives the prefix cache with arbitrary sequences of
// reservations with prefixes, writes, seals, releases, epoch bumps,
// quarantines and domain evictions (for good or not) by owners of two
// tenants, one of whose requests runs under a LoRA adapter in the same
// domain as its base-model ones, and after every operation checks
// the accounting identity, that every shared page carries exactly the tag
// its holder computed from its own tokens, domain and adapter (so never
// another domain's or another adapter's page), that reference counts
// match the holdings, that a reader presenting another domain or another
// adapter's tags is refused, and that nothing of a domain evicted for
// good is in the cache any more.
func FuzzPrefixPool(f *testing.F) {
	f.Add([]byte{0, 1, 3, 2, 1, 0, 3, 0, 1, 2, 4, 9, 7, 0, 0, 5, 2, 6, 3, 8})
	f.Add([]byte{0, 0, 2, 1, 0, 2, 0, 2, 0, 3, 0, 0, 1, 2, 1, 2, 3, 0, 4, 2, 5, 1, 6, 2, 7, 0})
	// a and a reader of its pages seal, then a's domain is evicted (not
	// for good, then for good) while the reader holds them.
	f.Add([]byte{0, 20, 1, 20, 2, 20, 0, 22, 3, 20, 7, 16, 0, 20, 1, 20, 2, 20, 7, 20, 3, 22, 3, 20, 0, 20, 1, 20, 2, 20})
	f.Fuzz(func(t *testing.T, data []byte) {
		const pt = 2
		p := newPool(t, kvpool.Config{Pages: 6, PageTokens: pt, PageBytes: 8, PoisonOnReserve: true})
		doms := map[string]kvpool.Tag{}
		for _, ten := range []string{"a", "b"} {
			doms[ten] = kvpool.Tag{Domain: domain(t, ten)}
		}
		actors := make([]*prefixActor, 4)
		for i := range actors {
			actors[i] = &prefixActor{owner: kvpool.Owner{Tenant: []string{"a", "b"}[i%2], Request: fmt.Sprint(i), Epoch: 1}}
		}
		actors[2].owner.Adapter = adapterA // tenant a's domain, under an adapter
		gone := map[string]bool{}          // tenants whose domain was evicted for good
		for len(data) >= 2 {
			op, arg := data[0]%9, data[1]
			data = data[2:]
			a := actors[int(arg)%len(actors)]
			var err error
			switch op {
			case 0: // reserve with the prefix of a prompt from a small family
				if a.held {
					continue
				}
				prompt := make([]int32, 1+int(arg>>2)%6)
				for j := range prompt {
					prompt[j] = int32(j + int(arg>>5)*(j/3))
				}
				a.prompt = prompt
				a.tags = kvpool.Tags(doms[a.owner.Tenant].Domain, 1, a.owner.Adapter, prompt, pt)
				var hit int
				a.pages, hit, err = p.ReservePrefix(a.owner, len(prompt)+1, a.tags[:min(len(a.tags), (len(prompt)-1)/pt)])
				if errors.Is(err, kvpool.ErrNoSpace) {
					err = nil
					continue
				}
				a.held = err == nil
				if hit > len(a.tags) {
					t.Fatalf("hit %d with %d tags", hit, len(a.tags))
				}
			case 1: // write every owned page completely
				if !a.held {
					continue
				}
				for _, id := range a.pages[shared(p, a):] {
					if werr := p.WritePage(a.owner, id, 0, make([]byte, 8), pt); werr != nil && !errors.Is(werr, kvpool.ErrFenced) {
						err = werr
					}
				}
			case 2:
				if a.held {
					_, err = p.Seal(a.owner, a.tags)
					if errors.Is(err, kvpool.ErrState) {
						err = nil
					}
				}
			case 3, 6:
				if a.held {
					if _, err = p.Release(a.owner); errors.Is(err, kvpool.ErrState) {
						_, err = p.ReleaseQuarantined(a.owner)
					}
					a.held = false
				}
			case 4:
				if a.held {
					var o kvpool.Owner
					if o, err = p.BumpEpoch(a.owner); err == nil {
						a.owner = o
					} else if errors.Is(err, kvpool.ErrState) {
						err = nil
					}
				}
			case 5:
				if a.held {
					_, err = p.Quarantine(a.owner)
				}
			case 7: // evict the actor's domain, for good when arg has bit 2
				final := arg&4 != 0
				if ev := p.EvictDomains([]cachekey.Domain{doms[a.owner.Tenant].Domain}, final); len(ev.Hashes) != ev.Freed+ev.Retired {
					t.Fatalf("EvictDomains = %+v", ev)
				}
				gone[a.owner.Tenant] = gone[a.owner.Tenant] || final
				for _, c := range actors {
					if c.owner.Tenant == a.owner.Tenant && p.Lookup(c.tags) != 0 {
						t.Fatalf("%v's tags still hit after its domain's eviction", c.owner)
					}
				}
			default: // a reader of the other domain, or of another adapter, presents its tags
				if a.held && shared(p, a) > 0 {
					other := a.tags[0]
					other.Domain = doms[map[string]string{"a": "b", "b": "a"}[a.owner.Tenant]].Domain
					wantReason(t, p.VerifyPrefix(a.owner, a.pages, pt, []kvpool.Tag{other}), kvpool.ReasonForeignDomain)
					otherAdapter := map[string]string{"": adapterA, adapterA: ""}[a.owner.Adapter]
					wrong := kvpool.Tags(a.tags[0].Domain, 1, otherAdapter, a.prompt[:pt], pt)
					wantReason(t, p.VerifyPrefix(a.owner, a.pages, pt, wrong), kvpool.ReasonTagMismatch)
				}
			}
			if err != nil {
				t.Fatalf("op %d on %v: %v", op, a.owner, err)
			}
			checkPrefixInvariants(t, p, actors)
			for _, c := range actors {
				if gone[c.owner.Tenant] && p.Lookup(c.tags) != 0 {
					t.Fatalf("%v's domain was evicted for good, its tags hit again", c.owner)
				}
			}
		}
		for _, a := range actors {
			if a.held {
				if _, err := p.Release(a.owner); errors.Is(err, kvpool.ErrState) {
					p.ReleaseQuarantined(a.owner)
				}
			}
		}
		if s := checkAccounting(t, p); s.AvailableNow() != s.Total || s.Shared != 0 {
			t.Fatalf("after releasing everything: %+v", s)
		}
	})
}

// shared is how many leading pages of a's table the pool says a shares.
func shared(p *kvpool.Pool, a *prefixActor) int {
	for _, h := range p.Holdings() {
		if h.Owner.Tenant == a.owner.Tenant && h.Owner.Request == a.owner.Request {
			return h.Shared
		}
	}
	return 0
}

func checkPrefixInvariants(t *testing.T, p *kvpool.Pool, actors []*prefixActor) {
	t.Helper()
	s := checkAccounting(t, p)
	refs := map[kvpool.PageID]int{}
	for _, h := range p.Holdings() {
		var a *prefixActor
		for _, c := range actors {
			if c.owner.Tenant == h.Owner.Tenant && c.owner.Request == h.Owner.Request {
				a = c
			}
		}
		for i, id := range h.Pages[:h.Shared] {
			info, _ := p.Page(id)
			if info.State != kvpool.Sealed || info.Tag != a.tags[i] {
				t.Fatalf("%v shares page %d (%+v), its own tag for page %d is %x", h.Owner, id, info, i, a.tags[i].Hash[:4])
			}
			refs[id]++
		}
		if h.Shared > 0 && h.State != kvpool.Quarantined {
			if err := p.VerifyPrefix(h.Owner, h.Pages, h.Shared*s.PageTokens, a.tags[:h.Shared]); err != nil {
				t.Fatalf("holder cannot read its shared pages: %v", err)
			}
		}
	}
	cached := 0
	for id := range s.Total {
		info, _ := p.Page(kvpool.PageID(id))
		if info.State != kvpool.Sealed {
			continue
		}
		if info.Refs != refs[kvpool.PageID(id)] {
			t.Fatalf("page %d has %d refs, holdings reference it %d times", id, info.Refs, refs[kvpool.PageID(id)])
		}
		if info.Refs == 0 {
			cached++
		}
	}
	if cached != s.Cached || len(refs) != s.Shared {
		t.Fatalf("stats %+v, counted %d cached and %d shared", s, cached, len(refs))
	}
}
