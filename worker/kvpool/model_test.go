package kvpool_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/warden-ai/warden/worker/kvpool"
)

// The property test drives a pool and a deliberately naive model of it with
// the same operations, decoded from bytes (random in TestPoolMatchesModel,
// fuzzed in FuzzPoolMatchesModel), and after every operation compares
// outcomes, accounting, holdings, every page's metadata and every byte of
// the slab.

// mpage is the model of one page.
type mpage struct {
	owner   kvpool.Owner
	state   kvpool.State
	written int
}

type model struct {
	cfg    kvpool.Config
	pages  []mpage
	data   [][]byte
	free   []kvpool.PageID               // FIFO: take from the front, return at the back
	tables map[[2]string][]kvpool.PageID // page table per (tenant, request)

	violations, fences uint64
}

func newModel(cfg kvpool.Config) *model {
	m := &model{cfg: cfg, pages: make([]mpage, cfg.Pages), data: make([][]byte, cfg.Pages), tables: map[[2]string][]kvpool.PageID{}}
	for i := range m.pages {
		m.data[i] = slices.Clone(cfg.Storage[i*cfg.PageBytes : (i+1)*cfg.PageBytes])
		m.free = append(m.free, kvpool.PageID(i))
	}
	return m
}

func key(o kvpool.Owner) [2]string { return [2]string{o.Tenant, o.Request} }

// held returns o's page table, or the outcome of a failed lookup.
func (m *model) held(o kvpool.Owner) ([]kvpool.PageID, string) {
	t, ok := m.tables[key(o)]
	switch {
	case !ok, m.pages[t[0]].owner.Adapter != o.Adapter:
		return nil, "not_held"
	case m.pages[t[0]].owner.Epoch != o.Epoch:
		return nil, "stale_epoch"
	}
	return t, "ok"
}

func (m *model) setState(t []kvpool.PageID, s kvpool.State) {
	for _, id := range t {
		m.pages[id].state = s
	}
}

// release frees o's table; quarantined pages are zeroed whatever the
// configuration (ReleaseQuarantined).
func (m *model) release(o kvpool.Owner, t []kvpool.PageID) {
	for _, id := range t {
		quarantined := m.pages[id].state == kvpool.Quarantined
		m.pages[id] = mpage{}
		if m.cfg.ZeroOnRelease || quarantined {
			clear(m.data[id])
		}
	}
	m.free = append(m.free, t...)
	delete(m.tables, key(o))
}

func (m *model) inPool(id kvpool.PageID) bool { return id >= 0 && int(id) < len(m.pages) }

func (m *model) fault(o kvpool.Owner, id kvpool.PageID) string {
	pg := m.pages[id]
	switch {
	case pg.state == kvpool.Free:
		return "free"
	case pg.state == kvpool.Quarantined:
		return "quarantined"
	case pg.owner.Tenant != o.Tenant:
		return "foreign_tenant"
	case pg.owner.Request != o.Request:
		return "foreign_request"
	case pg.owner.Adapter != o.Adapter:
		return "foreign_adapter"
	case pg.owner.Epoch != o.Epoch:
		return "stale_epoch"
	}
	return ""
}

// fence returns "ok" or the counted refusal for a write of page id by o.
func (m *model) fence(o kvpool.Owner, id kvpool.PageID) string {
	r := "no_such_page"
	if m.inPool(id) {
		r = m.fault(o, id)
	}
	if r == "" {
		return "ok"
	}
	m.fences++
	return fmt.Sprintf("fenced:%s:%d", r, id)
}

func (m *model) pagesFor(tokens int) int {
	return (tokens + m.cfg.PageTokens - 1) / m.cfg.PageTokens
}

func (m *model) verify(o kvpool.Owner, pages []kvpool.PageID, tokens int) string {
	pt := m.cfg.PageTokens
	if tokens < 0 {
		return "invalid"
	}
	r := func() string {
		if m.pagesFor(tokens) > len(pages) {
			return "violation:short_table:-1"
		}
		for i, id := range pages {
			if !m.inPool(id) {
				return fmt.Sprintf("violation:no_such_page:%d", id)
			}
			if f := m.fault(o, id); f != "" {
				return fmt.Sprintf("violation:%s:%d", f, id)
			}
			if need := min(pt, tokens-i*pt); need > m.pages[id].written {
				return fmt.Sprintf("violation:unwritten:%d", id)
			}
		}
		return "ok"
	}()
	if r != "ok" {
		m.violations++
	}
	return r
}

// outcome renders an error of the pool the way the model names outcomes.
func outcome(err error) string {
	var v *kvpool.ViolationError
	var f *kvpool.FenceError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &v):
		return fmt.Sprintf("violation:%s:%d", v.Reason, v.Page)
	case errors.As(err, &f):
		return fmt.Sprintf("fenced:%s:%d", f.Reason, f.Page)
	}
	for _, s := range []struct {
		err  error
		name string
	}{
		{kvpool.ErrInvalid, "invalid"}, {kvpool.ErrNeverFits, "never_fits"}, {kvpool.ErrNoSpace, "no_space"},
		{kvpool.ErrOwnerExists, "exists"}, {kvpool.ErrNotHeld, "not_held"}, {kvpool.ErrStaleEpoch, "stale_epoch"},
		{kvpool.ErrState, "state"},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "unexpected: " + err.Error()
}

// source hands out the fuzz or random bytes; zeros once exhausted.
type source struct {
	b []byte
	i int
}

func (s *source) more() bool { return s.i < len(s.b) }

func (s *source) intn(n int) int {
	var b byte
	if s.i < len(s.b) {
		b = s.b[s.i]
		s.i++
	}
	return int(b) % n
}

var (
	tenants  = []string{"a", "b"}
	requests = []string{"r1", "r2", "r3"}
	// adapters: the base model and two LoRA adapters' content hashes.
	adapters = []string{"", "aaaa", "bbbb"}
)

// owner picks an owner: mostly a current or nearly current epoch of one of
// six (tenant, request) pairs, under the adapter it holds pages with or,
// now and then, another one, sometimes an invalid owner.
func (m *model) owner(s *source) kvpool.Owner {
	k := s.intn(7)
	if k == 6 {
		return kvpool.Owner{Request: "r1", Epoch: 1}
	}
	o := kvpool.Owner{Tenant: tenants[k/3], Request: requests[k%3], Epoch: uint64(s.intn(3)), Adapter: adapters[s.intn(len(adapters))]}
	if t, ok := m.tables[key(o)]; ok {
		held := m.pages[t[0]].owner
		o.Epoch = []uint64{held.Epoch, held.Epoch, held.Epoch, held.Epoch + 1, held.Epoch + 2}[s.intn(5)]
		if s.intn(4) != 0 {
			o.Adapter = held.Adapter
		}
	}
	return o
}

// page picks a page: usually one of o's, sometimes any ID in or just
// outside the pool.
func (m *model) page(s *source, o kvpool.Owner) kvpool.PageID {
	if t := m.tables[key(o)]; len(t) > 0 && s.intn(4) != 0 {
		return t[s.intn(len(t))]
	}
	return kvpool.PageID(s.intn(len(m.pages)+2) - 1)
}

// table picks a page table: usually o's, possibly tampered with.
func (m *model) table(s *source, o kvpool.Owner) []kvpool.PageID {
	t := slices.Clone(m.tables[key(o)])
	switch s.intn(6) {
	case 0:
		t = t[:s.intn(len(t)+1)]
	case 1:
		if len(t) > 0 {
			t[s.intn(len(t))] = m.page(s, m.owner(s))
		}
	case 2:
		t = append(t, m.page(s, m.owner(s)))
	}
	return t
}

func runModel(t *testing.T, in []byte) {
	s := &source{b: in}
	cfg := kvpool.Config{Pages: 1 + s.intn(6), PageTokens: 1 + s.intn(4), PageBytes: 1 + s.intn(8)}
	flags := s.intn(4)
	cfg.ZeroOnRelease, cfg.PoisonOnReserve = flags&1 != 0, flags&2 != 0
	cfg.Storage = make([]byte, cfg.Pages*cfg.PageBytes)
	for i := range cfg.Storage {
		cfg.Storage[i] = byte(i*7 + 1) // stale "previous tenant" bytes
	}
	m := newModel(cfg)
	p, err := kvpool.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	poison := make([]byte, cfg.PageBytes+4)
	for i := 0; i < len(poison)-3; i += 4 {
		binary.LittleEndian.PutUint32(poison[i:], kvpool.PoisonWord)
	}
	pt, pb := cfg.PageTokens, cfg.PageBytes

	for step := 0; s.more(); step++ {
		o := m.owner(s)
		before := slices.Clone(m.pages)
		version := p.Version()
		var desc, got, want string
		switch op := s.intn(11); op {
		case 0:
			tokens := s.intn(cfg.Pages*pt + 3)
			desc = fmt.Sprintf("Reserve(%v, %d)", o, tokens)
			pages, err := p.Reserve(o, tokens)
			got = fmt.Sprint(outcome(err), pages)
			res, tbl := func() (string, []kvpool.PageID) {
				n := m.pagesFor(tokens)
				switch {
				case !(o.Tenant != "" && o.Request != "") || tokens < 1:
					return "invalid", nil
				case n > cfg.Pages:
					return "never_fits", nil
				case m.tables[key(o)] != nil:
					return "exists", nil
				case n > len(m.free):
					return "no_space", nil
				}
				tbl := slices.Clone(m.free[:n])
				m.free = m.free[n:]
				for _, id := range tbl {
					m.pages[id] = mpage{owner: o, state: kvpool.Reserved}
					if cfg.PoisonOnReserve {
						copy(m.data[id], poison)
					}
				}
				m.tables[key(o)] = tbl
				return "ok", tbl
			}()
			want = fmt.Sprint(res, tbl)
		case 1:
			desc = fmt.Sprintf("Activate(%v)", o)
			got = outcome(p.Activate(o))
			tbl, r := m.held(o)
			switch {
			case r != "ok":
			case m.pages[tbl[0]].state == kvpool.Quarantined:
				r = "state"
			default:
				m.setState(tbl, kvpool.InUse)
			}
			want = r
		case 2, 3, 4:
			id := m.page(s, o)
			switch op {
			case 2:
				slots := s.intn(pt + 2)
				desc = fmt.Sprintf("MarkWritten(%v, %d, %d)", o, id, slots)
				got = outcome(p.MarkWritten(o, id, slots))
				if want = "invalid"; slots >= 1 && slots <= pt {
					if want = m.fence(o, id); want == "ok" {
						m.pages[id].written = max(m.pages[id].written, slots)
					}
				}
			case 3:
				desc = fmt.Sprintf("CheckWrite(%v, %d)", o, id)
				got = outcome(p.CheckWrite(o, id))
				want = m.fence(o, id)
			case 4:
				off, n, fill, slots := s.intn(pb+2), s.intn(pb+1), byte(s.intn(256)), s.intn(pt+3)-1
				src := bytes.Repeat([]byte{fill}, n)
				desc = fmt.Sprintf("WritePage(%v, %d, off %d, %d bytes, %d slots)", o, id, off, n, slots)
				got = outcome(p.WritePage(o, id, off, src, slots))
				if want = "invalid"; off <= pb && n <= pb-off && slots >= 0 && slots <= pt {
					if want = m.fence(o, id); want == "ok" {
						copy(m.data[id][off:], src)
						m.pages[id].written = max(m.pages[id].written, slots)
					}
				}
			}
		case 5:
			tbl := m.table(s, o)
			tokens := s.intn(len(tbl)*pt+3) - 1
			desc = fmt.Sprintf("Verify(%v, %v, %d)", o, tbl, tokens)
			got = outcome(p.Verify(o, tbl, tokens))
			want = m.verify(o, tbl, tokens)
		case 6:
			tbl := m.table(s, o)
			tokens := s.intn(len(tbl)*pt+3) - 1
			desc = fmt.Sprintf("MarkTokensWritten(%v, %v, %d)", o, tbl, tokens)
			got = outcome(p.MarkTokensWritten(o, tbl, tokens))
			want = func() string {
				n := m.pagesFor(tokens)
				if tokens < 0 || n > len(tbl) {
					return "invalid"
				}
				for _, id := range tbl[:n] {
					if r := m.fence(o, id); r != "ok" {
						return r
					}
				}
				for i, id := range tbl[:n] {
					m.pages[id].written = max(m.pages[id].written, min(pt, tokens-i*pt))
				}
				return "ok"
			}()
		case 7:
			desc = fmt.Sprintf("BumpEpoch(%v)", o)
			no, err := p.BumpEpoch(o)
			got = fmt.Sprint(outcome(err), no)
			tbl, r := m.held(o)
			var bumped kvpool.Owner
			switch {
			case r != "ok":
			case m.pages[tbl[0]].state == kvpool.Quarantined:
				r = "state"
			default:
				bumped = o
				bumped.Epoch++
				for _, id := range tbl {
					m.pages[id].owner, m.pages[id].written = bumped, 0
				}
			}
			want = fmt.Sprint(r, bumped)
		case 8, 9, 10:
			n, err := 0, error(nil)
			switch op {
			case 8:
				desc = fmt.Sprintf("Release(%v)", o)
				n, err = p.Release(o)
			case 9:
				desc = fmt.Sprintf("Quarantine(%v)", o)
				n, err = p.Quarantine(o)
			case 10:
				desc = fmt.Sprintf("ReleaseQuarantined(%v)", o)
				n, err = p.ReleaseQuarantined(o)
			}
			got = fmt.Sprint(outcome(err), n)
			tbl, r := m.held(o)
			quarantined := r == "ok" && m.pages[tbl[0]].state == kvpool.Quarantined
			switch {
			case r != "ok":
			case op == 8 && quarantined, op == 10 && !quarantined:
				r = "state"
			case op == 9:
				m.setState(tbl, kvpool.Quarantined)
			default:
				m.release(o, tbl)
			}
			if r != "ok" {
				tbl = nil
			}
			want = fmt.Sprint(r, len(tbl))
		}
		if got != want {
			t.Fatalf("step %d %s = %s, model says %s", step, desc, got, want)
		}
		m.compare(t, p, step, desc)
		if changed := !slices.EqualFunc(before, m.pages, func(a, b mpage) bool {
			return a.owner == b.owner && a.state == b.state
		}); changed != (p.Version() != version) {
			t.Fatalf("step %d %s: pages changed %v, version %d → %d", step, desc, changed, version, p.Version())
		}
	}
}

// compare checks everything observable in p against the model.
func (m *model) compare(t *testing.T, p *kvpool.Pool, step int, desc string) {
	t.Helper()
	want := kvpool.Stats{Total: len(m.pages), Free: len(m.free), PageTokens: m.cfg.PageTokens, Violations: m.violations, FenceRejections: m.fences}
	for _, pg := range m.pages {
		switch pg.state {
		case kvpool.Reserved:
			want.Reserved++
		case kvpool.InUse:
			want.InUse++
		case kvpool.Quarantined:
			want.Quarantined++
		}
	}
	s := p.Stats()
	if s != want || s.Free+s.Reserved+s.InUse+s.Cached+s.Quarantined != s.Total {
		t.Fatalf("step %d %s: Stats = %+v, model %+v", step, desc, s, want)
	}
	h := p.Holdings()
	if len(h) != len(m.tables) {
		t.Fatalf("step %d %s: %d holdings, model %d", step, desc, len(h), len(m.tables))
	}
	for i, hd := range h {
		tbl := m.tables[key(hd.Owner)]
		if tbl == nil || !slices.Equal(tbl, hd.Pages) || m.pages[tbl[0]].owner != hd.Owner || m.pages[tbl[0]].state != hd.State ||
			(i > 0 && fmt.Sprint(key(h[i-1].Owner)) >= fmt.Sprint(key(hd.Owner))) {
			t.Fatalf("step %d %s: holding %+v, model table %v", step, desc, hd, tbl)
		}
	}
	for i, pg := range m.pages {
		id := kvpool.PageID(i)
		info, ok := p.Page(id)
		if !ok || info != (kvpool.PageInfo{Owner: pg.owner, State: pg.state, Written: pg.written}) {
			t.Fatalf("step %d %s: page %d = %+v, model %+v", step, desc, i, info, pg)
		}
		if !bytes.Equal(p.Data(id), m.data[i]) {
			t.Fatalf("step %d %s: page %d data % x, model % x", step, desc, i, p.Data(id), m.data[i])
		}
	}
}

func TestPoolMatchesModel(t *testing.T) {
	runs := 300
	if testing.Short() {
		runs = 30
	}
	for seed := range uint64(runs) {
		r := rand.New(rand.NewPCG(seed, 0x6b76706f6f6c))
		in := make([]byte, 600)
		for i := range in {
			in[i] = byte(r.Uint32())
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, in) })
	}
}

func FuzzPoolMatchesModel(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 3, 7, 0, 0, 0, 7, 1, 0, 0, 2, 5, 0, 0, 0, 3, 0, 4, 0, 0, 8})
	f.Add(bytes.Repeat([]byte{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233}, 20))
	f.Fuzz(runModel)
}
