package kvpool_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/warden-ai/warden/worker/kvpool"
)

// Two LoRA adapters' content hashes (the form of lora.Hash).
const (
	adapterA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	adapterB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// TestOwnedPagesArePerAdapter (DESIGN I8a): pages written for a request
// under adapter A are refused to the same tenant, request and epoch under
// adapter B or the base model, for reads (Verify, VerifyPrefix of owned
// pages: foreign_adapter), writes (the fence) and every life-cycle call
// (ErrNotHeld); under A they are the request's own.
func TestOwnedPagesArePerAdapter(t *testing.T) {
	p := small(t)
	underA := kvpool.Owner{Tenant: "alice", Request: "r1", Epoch: 1, Adapter: adapterA}
	pages := reserve(t, p, underA, 8)
	mustMark(t, p, underA, pages, 8)
	if err := p.Verify(underA, pages, 8); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{adapterB, ""} {
		o := underA
		o.Adapter = other
		want := kvpool.ViolationError{Page: pages[0], Want: o, Got: underA, State: kvpool.Reserved, Written: 4, Needed: 4, Reason: kvpool.ReasonForeignAdapter}
		wantViolation(t, p.Verify(o, pages, 8), want)
		wantViolation(t, p.VerifyPrefix(o, pages, 8, nil), want)
		var fe *kvpool.FenceError
		if err := p.WritePage(o, pages[1], 0, []byte{1}, 0); !errors.As(err, &fe) || fe.Reason != kvpool.ReasonForeignAdapter {
			t.Fatalf("write under adapter %q into adapter A's page: %v", other, err)
		}
		for name, call := range map[string]func() error{
			"Activate":   func() error { return p.Activate(o) },
			"BumpEpoch":  func() error { return second(p.BumpEpoch(o)) },
			"Release":    func() error { return second(p.Release(o)) },
			"Quarantine": func() error { return second(p.Quarantine(o)) },
			"Seal":       func() error { return second(p.Seal(o, nil)) },
		} {
			if err := call(); !errors.Is(err, kvpool.ErrNotHeld) {
				t.Fatalf("%s under adapter %q of adapter A's holding: %v", name, other, err)
			}
		}
	}
	if got := p.Stats().Violations; got != 4 {
		t.Fatalf("%d violations counted, want 4", got)
	}
	// Nothing above touched A's pages.
	if err := p.Verify(underA, pages, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Release(underA); err != nil {
		t.Fatal(err)
	}
	checkAccounting(t, p)
}

// TestSealedPagesArePerAdapter (DESIGN I8a): a caller that passes one
// tenant's domain for requests under adapter A, adapter B and the base
// model (as a gateway that forgot the adapter in the domain would) still
// shares nothing across them: the chain tags cover the adapter, so
// ReservePrefix finds no hit, each seals its own copy, and presenting
// another adapter's tags for a page is refused.
func TestSealedPagesArePerAdapter(t *testing.T) {
	p := small(t) // 8 pages × 4 tokens
	d := domain(t, "alice")
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	var sealed [][]kvpool.PageID
	var tags [][]kvpool.Tag
	for i, ad := range []string{adapterA, adapterB, ""} {
		o := kvpool.Owner{Tenant: "alice", Request: fmt.Sprint("r", i), Epoch: 1, Adapter: ad}
		tg := kvpool.Tags(d, 1, ad, prompt, 4)
		for _, prev := range tags {
			if tg[0] == prev[0] || tg[1] == prev[1] {
				t.Fatalf("adapter %d's tags equal another adapter's", i)
			}
		}
		pages, hit := prefixOwner(t, p, o, 12, tg, byte(0xA0+i))
		if hit != 0 {
			t.Fatalf("request under adapter %q hit %d pages sealed under another adapter", ad, hit)
		}
		if n, err := p.Seal(o, tg); err != nil || n != 2 {
			t.Fatalf("Seal under adapter %q = %d, %v", ad, n, err)
		}
		if _, err := p.Release(o); err != nil {
			t.Fatal(err)
		}
		sealed, tags = append(sealed, pages[:2]), append(tags, tg)
	}
	if s := checkAccounting(t, p); s.Cached != 6 || s.Seals != 6 || s.Hits != 0 {
		t.Fatalf("want three sealed copies of 2 pages and no hit: %+v", s)
	}
	// Each adapter finds exactly its own pages.
	for i := range tags {
		o := kvpool.Owner{Tenant: "alice", Request: "again", Epoch: 1, Adapter: []string{adapterA, adapterB, ""}[i]}
		pages, hit := prefixOwner(t, p, o, 12, tags[i], 0xEE)
		if hit != 2 || pages[0] != sealed[i][0] || pages[1] != sealed[i][1] {
			t.Fatalf("adapter %d: hit %d, table %v; want its own pages %v", i, hit, pages, sealed[i])
		}
		// The same table presented with another adapter's tags: refused.
		wrong := tags[(i+1)%len(tags)]
		wantReason(t, p.VerifyPrefix(o, pages, 9, wrong[:2]), kvpool.ReasonTagMismatch)
		if err := p.VerifyPrefix(o, pages, 9, tags[i][:2]); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Release(o); err != nil {
			t.Fatal(err)
		}
	}
	// Adapter A's pages spliced into a base-model request's table, which
	// presents its own (base) tags: refused.
	base := kvpool.Owner{Tenant: "alice", Request: "splice", Epoch: 1}
	own := reserve(t, p, base, 4)
	mustMark(t, p, base, own, 4)
	wantReason(t, p.VerifyPrefix(base, append([]kvpool.PageID{sealed[0][0]}, own...), 5, tags[2][:1]), kvpool.ReasonTagMismatch)
	checkAccounting(t, p)
}
