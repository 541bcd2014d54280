package memstore

import (
	"context"
	"maps"

	"github.com/warden-ai/warden/tenant"
)

// inFlightReport is one replica's last tenant.InFlightReport.
type inFlightReport struct {
	inFlight map[string]int64
	expires  int64 // Unix microseconds
}

// ShareInFlight implements tenant.InFlightSharer.
func (s *Store) ShareInFlight(_ context.Context, r tenant.InFlightReport) (map[string]int64, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nowUS := s.now().UnixMicro()
	maps.DeleteFunc(s.reports, func(_ string, rep inFlightReport) bool { return rep.expires <= nowUS })
	s.reports[r.Replica] = inFlightReport{inFlight: maps.Clone(r.InFlight), expires: nowUS + r.TTL.Microseconds()}
	fleet := make(map[string]int64)
	for _, rep := range s.reports {
		for id, n := range rep.inFlight {
			if n > 0 {
				fleet[id] += n
			}
		}
	}
	return fleet, nil
}
