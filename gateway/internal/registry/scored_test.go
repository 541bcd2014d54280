package registry

import (
	"context"
	"testing"

	"github.com/warden-ai/warden/internal/controlpb"
)

// TestPickScored: the score ranks first; equal scores fall back to Pick's
// order (most free pages).
func TestPickScored(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, info("b1", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(100, 90))
	h.register(t, info("b2", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(100, 40))
	var seen []Candidate
	rt, err := h.PickScored("tiny", 10, func(c Candidate) float64 {
		seen = append(seen, c)
		if c.ID == "b2" {
			return 1
		}
		return 0
	})
	if err != nil || rt.Decode.ID() != "b2" {
		t.Fatalf("PickScored = %+v, %v; want b2 (scored higher despite fewer free pages)", rt, err)
	}
	for _, c := range seen {
		if c.TotalPages != 100 || c.PageTokens != 16 || (c.ID == "b2" && c.FreePages != 40) {
			t.Fatalf("candidate %+v", c)
		}
	}
	rt, err = h.PickScored("tiny", 10, func(Candidate) float64 { return 0.5 })
	if err != nil || rt.Decode.ID() != "b1" {
		t.Fatalf("equal scores chose %+v, %v; want Pick's choice b1", rt, err)
	}
}

// TestPickScoredRanksPrefillWorkers: a decode worker's prefill workers
// are ranked by the score too; without one, the least loaded (then the
// smaller ID) wins as in Pick.
func TestPickScoredRanksPrefillWorkers(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, info("d", controlpb.Role_ROLE_DECODE, "h", "tcp"), pool(100, 100))
	h.register(t, info("p1", controlpb.Role_ROLE_PREFILL, "h", "tcp"), pool(100, 100))
	h.register(t, info("p2", controlpb.Role_ROLE_PREFILL, "h", "tcp"), pool(100, 100))
	roles := map[string]controlpb.Role{}
	rt, err := h.PickScored("tiny", 10, func(c Candidate) float64 {
		roles[c.ID] = c.Role
		if c.ID == "p2" {
			return 1
		}
		return 0
	})
	if err != nil || rt.Decode.ID() != "d" || rt.Prefill.ID() != "p2" {
		t.Fatalf("PickScored = %+v, %v; want decode d with prefill p2 (scored higher)", rt, err)
	}
	if roles["p1"] != controlpb.Role_ROLE_PREFILL || roles["p2"] != controlpb.Role_ROLE_PREFILL {
		t.Fatalf("candidate roles %v", roles)
	}
	if rt, err := h.Pick("tiny", 10); err != nil || rt.Prefill.ID() != "p1" {
		t.Fatalf("Pick = %+v, %v; want prefill p1", rt, err)
	}
}

// TestPrefixCacheReportsArePassedOn: a registration's report reaches
// Config.PrefixCache after its Registered change, a heartbeat's too; a
// heartbeat of an unknown worker's is not passed on.
func TestPrefixCacheReportsArePassedOn(t *testing.T) {
	h := newHarness(t, nil)
	type got struct {
		worker, model string
		report        *controlpb.PrefixCacheReport
		changes       int
	}
	var reports []got
	h.cfg.PrefixCache = func(worker, model string, r *controlpb.PrefixCacheReport) {
		reports = append(reports, got{worker, model, r, len(h.kinds())})
	}
	snap := &controlpb.PrefixCacheReport{Sealed: [][]byte{make([]byte, 32)}, Snapshot: true}
	if _, err := h.Register(context.Background(), &controlpb.RegisterRequest{
		Worker: info("b", controlpb.Role_ROLE_BOTH, "h", "tcp"), Pool: pool(100, 100), PrefixCache: snap}); err != nil {
		t.Fatal(err)
	}
	ev := &controlpb.PrefixCacheReport{Evicted: [][]byte{make([]byte, 32)}}
	for _, id := range []string{"b", "unknown"} {
		if _, err := h.Heartbeat(context.Background(), &controlpb.HeartbeatRequest{WorkerId: id, Pool: pool(100, 100), PrefixCache: ev}); err != nil {
			t.Fatal(err)
		}
	}
	if len(reports) != 2 || reports[0].worker != "b" || reports[0].model != "tiny" || reports[0].report != snap ||
		reports[0].changes != 1 || reports[1].report != ev {
		t.Fatalf("reports %+v", reports)
	}
}

// TestPickScoredWeighsRoom: with a score, a worker whose in-flight budget
// is used up still wins when it scores higher (the router decided to wait
// for it: the route says Busy, and the candidate shows the budget); room
// only breaks ties between equal scores.
func TestPickScoredWeighsRoom(t *testing.T) {
	h := newHarness(t, nil)
	h.register(t, info("full", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(100, 100))
	h.register(t, info("free", controlpb.Role_ROLE_BOTH, "h", "tcp"), pool(100, 50))
	if _, err := h.Heartbeat(context.Background(), &controlpb.HeartbeatRequest{
		WorkerId: "full", Pool: pool(100, 100), Running: 4, Waiting: 2}); err != nil {
		t.Fatal(err)
	}
	full, _ := h.Get("full")
	for range 4 { // the budget of 4 slots (no slack below 8) is used up
		defer full.Begin(0)()
	}
	if c := full.Candidate(); c.Room() || c.Slots != 4 || c.Budget != 4 || c.InFlight != 4 {
		t.Fatalf("saturated candidate %+v", c)
	}
	prefer := func(id string) func(Candidate) float64 {
		return func(c Candidate) float64 {
			if c.ID == id {
				return 1
			}
			return 0
		}
	}
	if rt, err := h.PickScored("tiny", 10, prefer("full")); err != nil || rt.Decode.ID() != "full" || !rt.Busy {
		t.Fatalf("PickScored = %s busy %v, %v; want the saturated, higher-scored worker, busy", rt.Decode.ID(), rt.Busy, err)
	}
	if rt, err := h.PickScored("tiny", 10, func(Candidate) float64 { return 0 }); err != nil || rt.Decode.ID() != "free" || rt.Busy {
		t.Fatalf("equal scores chose %s busy %v, %v; want the worker with room", rt.Decode.ID(), rt.Busy, err)
	}
}

// TestPickPrefillerUnderAdapter: for the base model the least loaded
// worker that prefills wins; under an adapter one holding it wins over
// less loaded ones, and without a holder the least loaded with room for
// it; when none has room, the least loaded of all (its load then says
// whether it has room after all).
func TestPickPrefillerUnderAdapter(t *testing.T) {
	h := newHarness(t, nil)
	mem := map[string]*controlpb.AdapterMemory{
		"p1": nil, // has not reported adapter memory
		"p2": {CapacityBytes: 100, UsedBytes: 100, Loaded: []string{"other"}, Pinned: []string{"other"}},
		"p3": {CapacityBytes: 100, UsedBytes: 50, Loaded: []string{"ad"}, Pinned: []string{"ad"}},
		"p4": {CapacityBytes: 100},
	}
	free := map[string]int64{"p1": 100, "p2": 90, "p3": 60, "p4": 70}
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		if _, err := h.Register(context.Background(), &controlpb.RegisterRequest{
			Worker: info(id, controlpb.Role_ROLE_PREFILL, "h", "tcp"), Pool: pool(100, free[id])}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Heartbeat(context.Background(), &controlpb.HeartbeatRequest{WorkerId: id, Pool: pool(100, free[id]), Adapters: mem[id]}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		adapter string
		bytes   int64
		want    string
	}{
		{"", 0, "p1"},       // the base model: the least loaded
		{"ad", 60, "p3"},    // the holder
		{"new", 60, "p4"},   // the only one with room
		{"new", 200, "p1"},  // none has room: the least loaded
		{"other", 10, "p2"}, // the holder, though full
	} {
		w, err := h.PickPrefiller("tiny", 10, c.adapter, c.bytes)
		if err != nil || w.ID() != c.want {
			t.Errorf("adapter %q of %d bytes: %v, %v; want %s", c.adapter, c.bytes, w, err, c.want)
		}
	}
}
