package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/warden-ai/warden/tenant"
)

// ShareInFlight implements tenant.InFlightSharer with one script run.
func (s *Store) ShareInFlight(ctx context.Context, r tenant.InFlightReport) (map[string]int64, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	args := []any{s.now(), r.Replica, r.TTL.Microseconds(), s.key("fl", "")}
	for id, n := range r.InFlight {
		if n > 0 {
			args = append(args, id, n)
		}
	}
	res, err := s.sc.shareInFlight.Run(ctx, s.rdb, []string{s.key("fr"), s.key("fl", r.Replica)}, args...).StringSlice()
	if err != nil {
		return nil, s.fail(ctx, "share in-flight", err)
	}
	s.ok()
	if len(res)%2 != 0 {
		return nil, fmt.Errorf("redisstore: share in-flight: unexpected reply of %d values", len(res))
	}
	fleet := make(map[string]int64, len(res)/2)
	for i := 0; i < len(res); i += 2 {
		n, err := strconv.ParseInt(res[i+1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisstore: share in-flight: count of %q: %w", res[i], err)
		}
		if n > 0 {
			fleet[res[i]] = n
		}
	}
	return fleet, nil
}

// Replicas returns the number of gateway replicas whose in-flight report
// had not expired at the last report (each report forgets the expired
// ones): the fleet a gateway divides its tenants' limits by while the
// store is unavailable.
func (s *Store) Replicas(ctx context.Context) (int, error) {
	n, err := s.rdb.ZCard(ctx, s.key("fr")).Result()
	if err != nil {
		return 0, s.fail(ctx, "replicas", err)
	}
	s.ok()
	return int(n), nil
}
