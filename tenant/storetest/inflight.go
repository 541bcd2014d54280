package storetest

import (
	"maps"
	"time"

	"github.com/warden-ai/warden/tenant"
)

// testInFlightShares: each replica's report replaces its previous one, the
// fleet's sums cover every replica whose report has not expired (whichever
// store handle a replica reports through), and a replica that stops
// reporting drops out after its TTL.
func testInFlightShares(e *env) {
	const ttl = 10 * time.Second
	share := func(s tenant.Store, replica string, inFlight map[string]int64, want map[string]int64) {
		e.t.Helper()
		got, err := s.ShareInFlight(e.ctx, tenant.InFlightReport{Replica: replica, InFlight: inFlight, TTL: ttl})
		if err != nil {
			e.t.Fatalf("ShareInFlight(%s, %v): %v", replica, inFlight, err)
		}
		if !maps.Equal(got, want) {
			e.t.Fatalf("ShareInFlight(%s, %v) = %v, want %v", replica, inFlight, got, want)
		}
	}
	share(e.a, "gw-a", map[string]int64{"acme": 2, "beta": 1, "idle": 0}, map[string]int64{"acme": 2, "beta": 1})
	share(e.b, "gw-b.example_1", map[string]int64{"acme": 3}, map[string]int64{"acme": 5, "beta": 1})
	share(e.a, "gw-a", map[string]int64{"beta": 4}, map[string]int64{"acme": 3, "beta": 4})
	e.clock.Advance(ttl / 2)
	share(e.b, "gw-b.example_1", map[string]int64{"acme": 1}, map[string]int64{"acme": 1, "beta": 4})
	e.clock.Advance(ttl / 2) // gw-a's last report has expired
	share(e.b, "gw-b.example_1", map[string]int64{"acme": 1}, map[string]int64{"acme": 1})
	share(e.a, "gw-a", nil, map[string]int64{"acme": 1})
	e.clock.Advance(ttl)
	share(e.a, "gw-c", map[string]int64{"beta": 7}, map[string]int64{"beta": 7})

	for name, r := range map[string]tenant.InFlightReport{
		"empty replica":    {TTL: ttl},
		"replica with ':'": {Replica: "gw:a", TTL: ttl},
		"zero TTL":         {Replica: "gw-a"},
		"bad tenant":       {Replica: "gw-a", TTL: ttl, InFlight: map[string]int64{"Acme!": 1}},
		"negative count":   {Replica: "gw-a", TTL: ttl, InFlight: map[string]int64{"acme": -1}},
	} {
		_, err := e.a.ShareInFlight(e.ctx, r)
		wantErr(e.t, name, err, tenant.ErrInvalid)
	}
	share(e.b, "gw-c", map[string]int64{"beta": 7}, map[string]int64{"beta": 7}) // the invalid reports changed nothing
}
