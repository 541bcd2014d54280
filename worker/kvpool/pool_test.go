package kvpool_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/warden-ai/warden/worker/kvpool"
)

var (
	alice1 = kvpool.Owner{Tenant: "alice", Request: "r1", Epoch: 1}
	alice2 = kvpool.Owner{Tenant: "alice", Request: "r2", Epoch: 1}
	bob1   = kvpool.Owner{Tenant: "bob", Request: "r1", Epoch: 1}
)

func newPool(t testing.TB, cfg kvpool.Config) *kvpool.Pool {
	t.Helper()
	p, err := kvpool.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return p
}

// small is a pool of 8 pages × 4 tokens × 16 bytes (4 bytes per slot).
func small(t testing.TB) *kvpool.Pool {
	return newPool(t, kvpool.Config{Pages: 8, PageTokens: 4, PageBytes: 16})
}

func reserve(t testing.TB, p *kvpool.Pool, o kvpool.Owner, tokens int) []kvpool.PageID {
	t.Helper()
	pages, err := p.Reserve(o, tokens)
	if err != nil {
		t.Fatalf("Reserve(%v, %d): %v", o, tokens, err)
	}
	return pages
}

func checkAccounting(t testing.TB, p *kvpool.Pool) kvpool.Stats {
	t.Helper()
	s := p.Stats()
	if s.Free+s.Reserved+s.InUse+s.Cached+s.Quarantined != s.Total {
		t.Fatalf("accounting broken: %+v", s)
	}
	return s
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []kvpool.Config{
		{Pages: 0, PageTokens: 16, PageBytes: 64},
		{Pages: -1, PageTokens: 16, PageBytes: 64},
		{Pages: 4, PageTokens: 0, PageBytes: 64},
		{Pages: 4, PageTokens: 16, PageBytes: 0},
		{Pages: 1 << 30, PageTokens: 16, PageBytes: 1 << 40},
		{Pages: 4, PageTokens: 16, PageBytes: 64, Storage: make([]byte, 255)},
	} {
		if _, err := kvpool.New(cfg); !errors.Is(err, kvpool.ErrInvalid) {
			t.Errorf("New(Pages=%d PageTokens=%d PageBytes=%d len(Storage)=%d) = %v, want ErrInvalid",
				cfg.Pages, cfg.PageTokens, cfg.PageBytes, len(cfg.Storage), err)
		}
	}
}

func TestCapacity(t *testing.T) {
	p := newPool(t, kvpool.Config{Pages: 256, PageTokens: 16, PageBytes: 8192})
	c := p.Capacity()
	want := kvpool.Capacity{Pages: 256, PageTokens: 16, PageBytes: 8192, Tokens: 4096, Bytes: 2 << 20}
	if c != want {
		t.Fatalf("Capacity() = %+v, want %+v", c, want)
	}
	if got, w := c.String(), "KV pool: 256 pages × 16 tokens = 4096 tokens (2.0 MiB)"; got != w {
		t.Errorf("String() = %q, want %q", got, w)
	}
	for _, tc := range []struct {
		c    kvpool.Capacity
		want string
	}{
		{kvpool.Capacity{Pages: 3, PageTokens: 1, Tokens: 3, Bytes: 600}, "KV pool: 3 pages × 1 tokens = 3 tokens (600 B)"},
		{kvpool.Capacity{Pages: 42580, PageTokens: 16, Tokens: 681280, Bytes: 3 << 30}, "KV pool: 42580 pages × 16 tokens = 681280 tokens (3.0 GiB)"},
		{kvpool.Capacity{Pages: 1, PageTokens: 1, Tokens: 1, Bytes: 1536}, "KV pool: 1 pages × 1 tokens = 1 tokens (1.5 KiB)"},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestPagesForBudget(t *testing.T) {
	for _, tc := range []struct {
		budget int64
		page   int
		want   int
	}{
		{2 << 20, 8192, 256},
		{2<<20 + 8191, 8192, 256},
		{8191, 8192, 0},
		{0, 8192, 0},
		{-5, 8192, 0},
		{1 << 20, 0, 0},
		{1 << 62, 1, kvpool.MaxPages},
	} {
		if got := kvpool.PagesForBudget(tc.budget, tc.page); got != tc.want {
			t.Errorf("PagesForBudget(%d, %d) = %d, want %d", tc.budget, tc.page, got, tc.want)
		}
	}
}

func TestReserve(t *testing.T) {
	p := small(t)
	if got := reserve(t, p, alice1, 9); !slices.Equal(got, []kvpool.PageID{0, 1, 2}) {
		t.Fatalf("first Reserve = %v, want [0 1 2]", got)
	}
	if got := reserve(t, p, bob1, 4); !slices.Equal(got, []kvpool.PageID{3}) {
		t.Fatalf("second Reserve = %v, want [3]", got)
	}
	for id := range kvpool.PageID(3) {
		info, _ := p.Page(id)
		if info != (kvpool.PageInfo{Owner: alice1, State: kvpool.Reserved}) {
			t.Errorf("page %d = %+v, want reserved for alice1 with nothing written", id, info)
		}
	}

	_, err := p.Reserve(alice2, 33)
	if !errors.Is(err, kvpool.ErrNeverFits) || !strings.Contains(err.Error(), "33 tokens need 9 pages") ||
		!strings.Contains(err.Error(), "8 pages (32 tokens)") {
		t.Errorf("Reserve(33 tokens) = %v, want ErrNeverFits with the numbers", err)
	}
	_, err = p.Reserve(alice2, 17)
	if !errors.Is(err, kvpool.ErrNoSpace) || !strings.Contains(err.Error(), "4 of 8 free") {
		t.Errorf("Reserve(17 tokens) = %v, want ErrNoSpace with the numbers", err)
	}
	// Same tenant and request at another epoch still holds the pages.
	_, err = p.Reserve(kvpool.Owner{Tenant: "alice", Request: "r1", Epoch: 7}, 1)
	if !errors.Is(err, kvpool.ErrOwnerExists) {
		t.Errorf("Reserve by existing owner = %v, want ErrOwnerExists", err)
	}
	for _, tc := range []struct {
		o      kvpool.Owner
		tokens int
	}{{alice2, 0}, {alice2, -1}, {kvpool.Owner{Request: "x"}, 1}, {kvpool.Owner{Tenant: "x"}, 1}} {
		if _, err := p.Reserve(tc.o, tc.tokens); !errors.Is(err, kvpool.ErrInvalid) {
			t.Errorf("Reserve(%v, %d) = %v, want ErrInvalid", tc.o, tc.tokens, err)
		}
	}
	// Failed reservations took nothing.
	if s := checkAccounting(t, p); s.Free != 4 || s.Reserved != 4 {
		t.Errorf("after refusals: %+v, want 4 free and 4 reserved", s)
	}
	if got := reserve(t, p, alice2, 16); !slices.Equal(got, []kvpool.PageID{4, 5, 6, 7}) {
		t.Errorf("Reserve of the rest = %v", got)
	}
}

func TestFreePagesReusedOldestFirst(t *testing.T) {
	p := small(t)
	reserve(t, p, alice1, 8) // 0 1
	reserve(t, p, alice2, 8) // 2 3
	if _, err := p.Release(alice1); err != nil {
		t.Fatal(err)
	}
	// Free order now: 4 5 6 7 0 1.
	if got := reserve(t, p, bob1, 24); !slices.Equal(got, []kvpool.PageID{4, 5, 6, 7, 0, 1}) {
		t.Errorf("Reserve after release = %v, want [4 5 6 7 0 1]", got)
	}
}

func TestLifecycle(t *testing.T) {
	p := small(t)
	v0 := p.Version()
	pages := reserve(t, p, alice1, 6)
	if p.Version() == v0 {
		t.Error("Version unchanged by Reserve")
	}
	if err := p.Activate(alice1); err != nil {
		t.Fatal(err)
	}
	if err := p.Activate(alice1); err != nil {
		t.Fatalf("second Activate: %v", err)
	}
	if s := checkAccounting(t, p); s.InUse != 2 || s.Reserved != 0 || s.Free != 6 {
		t.Fatalf("after Activate: %+v", s)
	}
	if err := p.MarkTokensWritten(alice1, pages, 6); err != nil {
		t.Fatal(err)
	}

	alice1b, err := p.BumpEpoch(alice1)
	if err != nil {
		t.Fatal(err)
	}
	if want := (kvpool.Owner{Tenant: "alice", Request: "r1", Epoch: 2}); alice1b != want {
		t.Fatalf("BumpEpoch = %v, want %v", alice1b, want)
	}
	for _, id := range pages {
		if info, _ := p.Page(id); info != (kvpool.PageInfo{Owner: alice1b, State: kvpool.InUse}) {
			t.Errorf("page %d after bump = %+v, want in use by %v with nothing written", id, info, alice1b)
		}
	}
	// Everything keyed on the old epoch is refused and changes nothing.
	for name, err := range map[string]error{
		"Activate":           p.Activate(alice1),
		"Release":            second(p.Release(alice1)),
		"BumpEpoch":          second(p.BumpEpoch(alice1)),
		"Quarantine":         second(p.Quarantine(alice1)),
		"ReleaseQuarantined": second(p.ReleaseQuarantined(alice1)),
	} {
		if !errors.Is(err, kvpool.ErrStaleEpoch) {
			t.Errorf("%s(old epoch) = %v, want ErrStaleEpoch", name, err)
		}
	}

	if n, err := p.Quarantine(alice1b); n != 2 || err != nil {
		t.Fatalf("Quarantine = %d, %v", n, err)
	}
	if n, err := p.Quarantine(alice1b); n != 2 || err != nil {
		t.Fatalf("second Quarantine = %d, %v", n, err)
	}
	if s := checkAccounting(t, p); s.Quarantined != 2 || s.InUse != 0 {
		t.Fatalf("after Quarantine: %+v", s)
	}
	for name, err := range map[string]error{
		"Activate":  p.Activate(alice1b),
		"Release":   second(p.Release(alice1b)),
		"BumpEpoch": second(p.BumpEpoch(alice1b)),
	} {
		if !errors.Is(err, kvpool.ErrState) {
			t.Errorf("%s(quarantined) = %v, want ErrState", name, err)
		}
	}
	// Quarantined pages are never handed out.
	if _, err := p.Reserve(bob1, 25); !errors.Is(err, kvpool.ErrNoSpace) {
		t.Errorf("Reserve over quarantined pages = %v, want ErrNoSpace", err)
	}
	if h := p.Holdings(); len(h) != 1 || h[0].Owner != alice1b || h[0].State != kvpool.Quarantined || !slices.Equal(h[0].Pages, pages) {
		t.Errorf("Holdings = %+v", h)
	}

	if n, err := p.ReleaseQuarantined(alice1b); n != 2 || err != nil {
		t.Fatalf("ReleaseQuarantined = %d, %v", n, err)
	}
	if s := checkAccounting(t, p); s.Free != 8 {
		t.Fatalf("after ReleaseQuarantined: %+v", s)
	}
	for name, err := range map[string]error{
		"Activate":           p.Activate(alice1b),
		"Release":            second(p.Release(alice1b)),
		"BumpEpoch":          second(p.BumpEpoch(alice1b)),
		"Quarantine":         second(p.Quarantine(alice1b)),
		"ReleaseQuarantined": second(p.ReleaseQuarantined(alice1b)),
	} {
		if !errors.Is(err, kvpool.ErrNotHeld) {
			t.Errorf("%s(released) = %v, want ErrNotHeld", name, err)
		}
	}

	reserve(t, p, bob1, 1)
	if _, err := p.ReleaseQuarantined(bob1); !errors.Is(err, kvpool.ErrState) {
		t.Errorf("ReleaseQuarantined(reserved) = %v, want ErrState", err)
	}
	if n, err := p.Release(bob1); n != 1 || err != nil {
		t.Errorf("Release = %d, %v", n, err)
	}
	if h := p.Holdings(); len(h) != 0 {
		t.Errorf("Holdings after releasing everything = %+v", h)
	}
}

func second[T any](_ T, err error) error { return err }

func TestHoldingsSorted(t *testing.T) {
	p := small(t)
	reserve(t, p, bob1, 1)
	reserve(t, p, alice2, 5)
	reserve(t, p, alice1, 1)
	if err := p.Activate(alice2); err != nil {
		t.Fatal(err)
	}
	got := p.Holdings()
	want := []kvpool.Holding{
		{Owner: alice1, State: kvpool.Reserved, Pages: []kvpool.PageID{3}},
		{Owner: alice2, State: kvpool.InUse, Pages: []kvpool.PageID{1, 2}},
		{Owner: bob1, State: kvpool.Reserved, Pages: []kvpool.PageID{0}},
	}
	if len(got) != len(want) {
		t.Fatalf("Holdings = %+v", got)
	}
	for i := range want {
		if got[i].Owner != want[i].Owner || got[i].State != want[i].State || !slices.Equal(got[i].Pages, want[i].Pages) {
			t.Errorf("Holdings[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	got[1].Pages[0] = 7 // a copy: the pool is unaffected
	if h := p.Holdings(); h[1].Pages[0] != 1 {
		t.Error("Holdings returned the pool's own slice")
	}
}

func TestSuppliedStorageUsedInPlace(t *testing.T) {
	slab := make([]byte, 4*16+5) // larger than needed, like a page-aligned mapping
	p := newPool(t, kvpool.Config{Pages: 4, PageTokens: 4, PageBytes: 16, Storage: slab})
	if &p.Data(0)[0] != &slab[0] || &p.Data(3)[15] != &slab[63] {
		t.Fatal("Data does not alias the supplied slab")
	}
	pages := reserve(t, p, alice1, 4)
	if err := p.WritePage(alice1, pages[0], 4, []byte{1, 2, 3, 4}, 2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(slab[4:8], []byte{1, 2, 3, 4}) {
		t.Errorf("slab[4:8] = %v after WritePage", slab[4:8])
	}
	if d := p.Data(1); len(d) != 16 || cap(d) != 16 {
		t.Errorf("Data(1) has len %d cap %d, want 16 16", len(d), cap(d))
	}
}

func TestPoisonOnReserve(t *testing.T) {
	slab := bytes.Repeat([]byte{0x11}, 4*10)
	p := newPool(t, kvpool.Config{Pages: 4, PageTokens: 2, PageBytes: 10, Storage: slab, PoisonOnReserve: true})
	pages := reserve(t, p, alice1, 3)
	want := make([]byte, 12)
	for i := 0; i < len(want); i += 4 {
		binary.LittleEndian.PutUint32(want[i:], kvpool.PoisonWord)
	}
	for _, id := range pages {
		if got := p.Data(id); !bytes.Equal(got, want[:10]) {
			t.Errorf("page %d = % x, want poison % x", id, got, want[:10])
		}
	}
	for _, id := range []kvpool.PageID{2, 3} {
		if got := p.Data(id); !bytes.Equal(got, bytes.Repeat([]byte{0x11}, 10)) {
			t.Errorf("unreserved page %d = % x, want untouched", id, got)
		}
	}
	if !bytes.Equal(want[:4], []byte{0xAD, 0xDE, 0xC0, 0x7F}) {
		t.Errorf("poison bytes % x", want[:4])
	}
}

func TestZeroOnRelease(t *testing.T) {
	for _, zero := range []bool{false, true} {
		p := newPool(t, kvpool.Config{Pages: 4, PageTokens: 2, PageBytes: 8, ZeroOnRelease: zero})
		pages := reserve(t, p, alice1, 4)
		quarantined := reserve(t, p, alice2, 1)
		for _, id := range append(pages, quarantined...) {
			p.Data(id)[3] = 0xCC
		}
		if _, err := p.Release(alice1); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Quarantine(alice2); err != nil {
			t.Fatal(err)
		}
		if got := p.Data(quarantined[0])[3]; got != 0xCC {
			t.Errorf("zero=%v: quarantined page cleared before release: %x", zero, got)
		}
		if _, err := p.ReleaseQuarantined(alice2); err != nil {
			t.Fatal(err)
		}
		want := byte(0xCC)
		if zero {
			want = 0
		}
		for _, id := range pages {
			if got := p.Data(id)[3]; got != want {
				t.Errorf("zero=%v: released page %d byte = %x, want %x", zero, id, got, want)
			}
		}
		// A quarantined page may hold a killed writer's late bytes: it
		// is zeroed whatever the configuration.
		if got := p.Data(quarantined[0])[3]; got != 0 {
			t.Errorf("zero=%v: released quarantined page byte = %x, want 0", zero, got)
		}
	}
}

// ReleaseReuseFirst (the broken release of brokenmode.ReleaseWithoutDrain)
// frees pages in any state, quarantined too, and the next reservation
// takes them first, in their table order.
func TestReleaseReuseFirst(t *testing.T) {
	p := small(t)
	reserve(t, p, alice1, 4) // page 0
	a := reserve(t, p, alice2, 12)
	if _, err := p.Quarantine(alice2); err != nil {
		t.Fatal(err)
	}
	freed, err := p.ReleaseReuseFirst(alice2)
	if err != nil || !slices.Equal(freed, a) {
		t.Fatalf("ReleaseReuseFirst: %v, %v; want %v", freed, err, a)
	}
	checkAccounting(t, p)
	if got := reserve(t, p, bob1, 8); !slices.Equal(got, a[:2]) {
		t.Errorf("next reservation got %v, want the freed pages first %v", got, a[:2])
	}
	if _, err := p.ReleaseReuseFirst(alice2); !errors.Is(err, kvpool.ErrNotHeld) {
		t.Errorf("second release: %v, want ErrNotHeld", err)
	}
}
