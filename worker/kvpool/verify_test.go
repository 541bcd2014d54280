package kvpool_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/warden-ai/warden/worker/kvpool"
)

// wantViolation checks err is a *ViolationError with the given fields.
func wantViolation(t *testing.T, err error, want kvpool.ViolationError) {
	t.Helper()
	var v *kvpool.ViolationError
	if !errors.As(err, &v) || !errors.Is(err, kvpool.ErrOwnerViolation) {
		t.Fatalf("got %v, want a violation %+v", err, want)
	}
	if *v != want {
		t.Fatalf("violation = %+v\n          want %+v", *v, want)
	}
}

func TestVerifyRefusesForeignStaleUnwrittenFreeQuarantined(t *testing.T) {
	alice1b := kvpool.Owner{Tenant: "alice", Request: "r1", Epoch: 2}
	carol := kvpool.Owner{Tenant: "carol", Request: "r1", Epoch: 1}
	for _, tc := range []struct {
		name string
		// setup returns the reader, its page table and the tokens to read.
		setup func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int)
		want  kvpool.ViolationError
	}{{
		name: "other tenant's page",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 8) // 0 1
			b := reserve(t, p, bob1, 4)   // 2
			mustMark(t, p, alice1, a, 8)
			mustMark(t, p, bob1, b, 4)
			return bob1, []kvpool.PageID{b[0], a[1]}, 6
		},
		want: kvpool.ViolationError{Page: 1, Want: bob1, Got: alice1, State: kvpool.Reserved, Written: 4, Needed: 2, Reason: kvpool.ReasonForeignTenant},
	}, {
		name: "same tenant, other request",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 4) // 0
			reserve(t, p, alice2, 4)      // 1
			mustMark(t, p, alice1, a, 4)
			return alice2, a, 3
		},
		want: kvpool.ViolationError{Page: 0, Want: alice2, Got: alice1, State: kvpool.Reserved, Written: 4, Needed: 3, Reason: kvpool.ReasonForeignRequest},
	}, {
		name: "old epoch after BumpEpoch",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 4)
			mustMark(t, p, alice1, a, 4)
			if _, err := p.BumpEpoch(alice1); err != nil {
				t.Fatal(err)
			}
			return alice1, a, 4
		},
		want: kvpool.ViolationError{Page: 0, Want: alice1, Got: alice1b, State: kvpool.Reserved, Written: 0, Needed: 4, Reason: kvpool.ReasonStaleEpoch},
	}, {
		name: "new epoch, nothing rewritten yet",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 4)
			mustMark(t, p, alice1, a, 4)
			if _, err := p.BumpEpoch(alice1); err != nil {
				t.Fatal(err)
			}
			return alice1b, a, 1
		},
		want: kvpool.ViolationError{Page: 0, Want: alice1b, Got: alice1b, State: kvpool.Reserved, Written: 0, Needed: 1, Reason: kvpool.ReasonUnwritten},
	}, {
		name: "unwritten slot",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 12) // 0 1 2
			if err := p.Activate(alice1); err != nil {
				t.Fatal(err)
			}
			mustMark(t, p, alice1, a, 6) // page 1 has 2 slots
			return alice1, a, 7
		},
		want: kvpool.ViolationError{Page: 1, Want: alice1, Got: alice1, State: kvpool.InUse, Written: 2, Needed: 3, Reason: kvpool.ReasonUnwritten},
	}, {
		name: "free page",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 4) // 0
			mustMark(t, p, alice1, a, 4)
			return alice1, []kvpool.PageID{a[0], 5}, 5
		},
		want: kvpool.ViolationError{Page: 5, Want: alice1, Needed: 1, Reason: kvpool.ReasonFree},
	}, {
		name: "released page reused by another tenant",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			reserve(t, p, bob1, 28)       // 0..6: only page 7 is left
			a := reserve(t, p, alice1, 4) // 7
			mustMark(t, p, alice1, a, 4)
			if _, err := p.Release(alice1); err != nil {
				t.Fatal(err)
			}
			c := reserve(t, p, carol, 4)
			mustMark(t, p, carol, c, 4)
			return alice1, a, 4
		},
		want: kvpool.ViolationError{Page: 7, Want: alice1, Got: carol, State: kvpool.Reserved, Written: 4, Needed: 4, Reason: kvpool.ReasonForeignTenant},
	}, {
		name: "quarantined page",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 4)
			mustMark(t, p, alice1, a, 4)
			if _, err := p.Quarantine(alice1); err != nil {
				t.Fatal(err)
			}
			return alice1, a, 4
		},
		want: kvpool.ViolationError{Page: 0, Want: alice1, Got: alice1, State: kvpool.Quarantined, Written: 4, Needed: 4, Reason: kvpool.ReasonQuarantined},
	}, {
		name: "page table too short",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 8)
			mustMark(t, p, alice1, a, 8)
			return alice1, a, 9
		},
		want: kvpool.ViolationError{Page: kvpool.NoPage, Want: alice1, Written: 8, Needed: 9, Reason: kvpool.ReasonShortTable},
	}, {
		name: "page outside the pool",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 4)
			mustMark(t, p, alice1, a, 4)
			return alice1, []kvpool.PageID{a[0], 8}, 4
		},
		want: kvpool.ViolationError{Page: 8, Want: alice1, Reason: kvpool.ReasonNoSuchPage},
	}, {
		name: "foreign page past the tokens read",
		setup: func(t *testing.T, p *kvpool.Pool) (kvpool.Owner, []kvpool.PageID, int) {
			a := reserve(t, p, alice1, 4)
			b := reserve(t, p, bob1, 4)
			mustMark(t, p, alice1, a, 4)
			return alice1, []kvpool.PageID{a[0], b[0]}, 4
		},
		want: kvpool.ViolationError{Page: 1, Want: alice1, Got: bob1, State: kvpool.Reserved, Reason: kvpool.ReasonForeignTenant},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := small(t)
			owner, pages, tokens := tc.setup(t, p)
			before := p.Stats().Violations
			wantViolation(t, p.Verify(owner, pages, tokens), tc.want)
			if got := p.Stats().Violations; got != before+1 {
				t.Errorf("Violations = %d, want %d", got, before+1)
			}
			checkAccounting(t, p)
		})
	}
}

func mustMark(t *testing.T, p *kvpool.Pool, o kvpool.Owner, pages []kvpool.PageID, tokens int) {
	t.Helper()
	if err := p.MarkTokensWritten(o, pages, tokens); err != nil {
		t.Fatalf("MarkTokensWritten(%v, %v, %d): %v", o, pages, tokens, err)
	}
}

func TestVerifyAccepts(t *testing.T) {
	p := small(t)
	pages := reserve(t, p, alice1, 16) // 4 pages, read 0..tokens-1
	mustMark(t, p, alice1, pages, 6)
	for _, tokens := range []int{0, 1, 5, 6} {
		if err := p.Verify(alice1, pages, tokens); err != nil {
			t.Errorf("Verify(%d tokens): %v", tokens, err)
		}
	}
	if err := p.Verify(alice1, pages[:2], 6); err != nil {
		t.Errorf("Verify with the covering prefix of the table: %v", err)
	}
	if err := p.Verify(alice1, nil, 0); err != nil {
		t.Errorf("Verify of nothing: %v", err)
	}
	if err := p.Verify(alice1, pages, -1); !errors.Is(err, kvpool.ErrInvalid) {
		t.Errorf("Verify(-1) = %v, want ErrInvalid", err)
	}
	if s := p.Stats(); s.Violations != 0 {
		t.Errorf("Violations = %d after valid reads", s.Violations)
	}
	// Written only grows: marking fewer slots keeps what was recorded.
	if err := p.MarkWritten(alice1, pages[1], 1); err != nil {
		t.Fatal(err)
	}
	if info, _ := p.Page(pages[1]); info.Written != 2 {
		t.Errorf("Written = %d after a smaller mark, want 2", info.Written)
	}
}

func TestFenceRefusesStaleAndForeignWrites(t *testing.T) {
	p := small(t)
	a := reserve(t, p, alice1, 8) // 0 1
	b := reserve(t, p, alice2, 4) // 2
	q := reserve(t, p, bob1, 4)   // 3
	if _, err := p.Quarantine(bob1); err != nil {
		t.Fatal(err)
	}
	alice1b, err := p.BumpEpoch(alice1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		copy(p.Data(kvpool.PageID(i)), bytes.Repeat([]byte{byte(0xA0 + i)}, 16))
	}
	for _, tc := range []struct {
		name  string
		owner kvpool.Owner
		page  kvpool.PageID
		want  kvpool.FenceError
	}{
		{"old epoch", alice1, a[0], kvpool.FenceError{Page: a[0], Want: alice1, Got: alice1b, State: kvpool.Reserved, Reason: kvpool.ReasonStaleEpoch}},
		{"future epoch", kvpool.Owner{Tenant: "alice", Request: "r1", Epoch: 3}, a[1], kvpool.FenceError{Page: a[1], Want: kvpool.Owner{Tenant: "alice", Request: "r1", Epoch: 3}, Got: alice1b, State: kvpool.Reserved, Reason: kvpool.ReasonStaleEpoch}},
		{"other request", alice1b, b[0], kvpool.FenceError{Page: b[0], Want: alice1b, Got: alice2, State: kvpool.Reserved, Reason: kvpool.ReasonForeignRequest}},
		{"other tenant", bob1, b[0], kvpool.FenceError{Page: b[0], Want: bob1, Got: alice2, State: kvpool.Reserved, Reason: kvpool.ReasonForeignTenant}},
		{"quarantined", bob1, q[0], kvpool.FenceError{Page: q[0], Want: bob1, Got: bob1, State: kvpool.Quarantined, Reason: kvpool.ReasonQuarantined}},
		{"free", alice1b, 4, kvpool.FenceError{Page: 4, Want: alice1b, Reason: kvpool.ReasonFree}},
		{"outside the pool", alice1b, -1, kvpool.FenceError{Page: -1, Want: alice1b, Reason: kvpool.ReasonNoSuchPage}},
		{"outside the pool, high", alice1b, 8, kvpool.FenceError{Page: 8, Want: alice1b, Reason: kvpool.ReasonNoSuchPage}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.Stats().FenceRejections
			writes := map[string]error{
				"CheckWrite":        p.CheckWrite(tc.owner, tc.page),
				"MarkWritten":       p.MarkWritten(tc.owner, tc.page, 4),
				"MarkTokensWritten": p.MarkTokensWritten(tc.owner, []kvpool.PageID{tc.page}, 4),
				"WritePage":         p.WritePage(tc.owner, tc.page, 0, bytes.Repeat([]byte{0xEE}, 16), 4),
			}
			for name, err := range writes {
				var f *kvpool.FenceError
				if !errors.As(err, &f) || !errors.Is(err, kvpool.ErrFenced) || *f != tc.want {
					t.Errorf("%s = %v, want fence error %+v", name, err, tc.want)
				}
			}
			if got := p.Stats().FenceRejections; got != before+uint64(len(writes)) {
				t.Errorf("FenceRejections = %d, want %d", got, before+uint64(len(writes)))
			}
		})
	}
	// No refused write touched data or metadata.
	for i := range 5 {
		id := kvpool.PageID(i)
		if got := p.Data(id); !bytes.Equal(got, bytes.Repeat([]byte{byte(0xA0 + i)}, 16)) {
			t.Errorf("page %d data changed by a refused write: % x", i, got)
		}
		if info, _ := p.Page(id); info.Written != 0 {
			t.Errorf("page %d Written = %d after refused writes", i, info.Written)
		}
	}
	if s := p.Stats(); s.Violations != 0 {
		t.Errorf("fence rejections counted as violations: %+v", s)
	}
}

func TestWriteArgumentsChecked(t *testing.T) {
	p := small(t)
	pages := reserve(t, p, alice1, 4)
	for name, err := range map[string]error{
		"MarkWritten 0 slots":         p.MarkWritten(alice1, pages[0], 0),
		"MarkWritten 5 slots":         p.MarkWritten(alice1, pages[0], 5),
		"WritePage -1 slots":          p.WritePage(alice1, pages[0], 0, nil, -1),
		"WritePage 5 slots":           p.WritePage(alice1, pages[0], 0, nil, 5),
		"WritePage negative offset":   p.WritePage(alice1, pages[0], -1, []byte{1}, 1),
		"WritePage past the end":      p.WritePage(alice1, pages[0], 15, []byte{1, 2}, 1),
		"WritePage offset past end":   p.WritePage(alice1, pages[0], 17, nil, 1),
		"MarkTokensWritten too many":  p.MarkTokensWritten(alice1, pages, 5),
		"MarkTokensWritten negative":  p.MarkTokensWritten(alice1, pages, -1),
		"Verify negative token count": p.Verify(alice1, pages, -1),
	} {
		if !errors.Is(err, kvpool.ErrInvalid) {
			t.Errorf("%s = %v, want ErrInvalid", name, err)
		}
	}
	if s := p.Stats(); s.FenceRejections != 0 || s.Violations != 0 {
		t.Errorf("invalid arguments were counted: %+v", s)
	}
	if info, _ := p.Page(pages[0]); info.Written != 0 {
		t.Errorf("Written = %d after refused calls", info.Written)
	}
	// The edges are accepted.
	if err := p.WritePage(alice1, pages[0], 16, nil, 0); err != nil {
		t.Errorf("empty write at the end: %v", err)
	}
	if err := p.WritePage(alice1, pages[0], 0, bytes.Repeat([]byte{7}, 16), 4); err != nil {
		t.Errorf("whole-page write: %v", err)
	}
	if err := p.Verify(alice1, pages, 4); err != nil {
		t.Errorf("Verify after whole-page write: %v", err)
	}
}

func TestVerifyDoesNotAllocate(t *testing.T) {
	p := newPool(t, kvpool.Config{Pages: 64, PageTokens: 16, PageBytes: 64})
	pages := reserve(t, p, alice1, 64*16)
	mustMark(t, p, alice1, pages, 64*16)
	allocs := testing.AllocsPerRun(100, func() {
		if err := p.Verify(alice1, pages, 64*16); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Verify allocates %.1f times per call", allocs)
	}
}

func TestErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&kvpool.ViolationError{Page: 3, Want: alice1, Got: bob1, State: kvpool.InUse, Written: 4, Needed: 2, Reason: kvpool.ReasonForeignTenant},
			"kvpool: owner violation on page 3 for alice/r1@1: foreign_tenant (page owner bob/r1@1, in_use, 4 slots written, 2 needed)"},
		{&kvpool.ViolationError{Page: 5, Want: alice1, Needed: 1, Reason: kvpool.ReasonFree},
			"kvpool: owner violation on page 5 for alice/r1@1: free (page owner none, free, 0 slots written, 1 needed)"},
		{&kvpool.ViolationError{Page: kvpool.NoPage, Want: alice1, Written: 32, Needed: 33, Reason: kvpool.ReasonShortTable},
			"kvpool: owner violation for alice/r1@1: short_table: page table covers 32 token slots, 33 needed"},
		{&kvpool.FenceError{Page: 9, Want: alice1, Got: alice2, State: kvpool.Reserved, Reason: kvpool.ReasonForeignRequest},
			"kvpool: write fenced on page 9 for alice/r1@1: foreign_request (page owner alice/r2@1, reserved)"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q\n        want %q", got, tc.want)
		}
	}
	if got := kvpool.Reason(99).String(); got != "Reason(99)" {
		t.Errorf("unknown reason = %q", got)
	}
	if got := kvpool.State(9).String(); got != "State(9)" {
		t.Errorf("unknown state = %q", got)
	}
}
