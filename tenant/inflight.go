package tenant

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// InFlightSharer holds each gateway replica's count of requests in flight
// per tenant, next to the tenants' concurrency leases, so that every replica's
// fair queue can weigh a tenant by its requests in flight across the fleet
// (FleetInFlight). Both stores implement it.
type InFlightSharer interface {
	// ShareInFlight replaces r.Replica's report with r, which counts until
	// r.TTL has passed on the store's clock unless replaced again, and
	// returns the fleet's requests in flight per tenant: the sum over every
	// replica whose report has not expired, r included. Tenants with none
	// are left out. ErrInvalid, ErrUnavailable.
	ShareInFlight(ctx context.Context, r InFlightReport) (map[string]int64, error)
}

// InFlightReport is one gateway replica's requests in flight on workers,
// by tenant.
type InFlightReport struct {
	// Replica identifies the reporting gateway process; a restarted
	// gateway reports under a new one, and its old report expires.
	Replica string
	// InFlight is the replica's requests in flight by tenant ID; tenants
	// with none may be left out.
	InFlight map[string]int64
	// TTL is how long the report counts: a replica that stops reporting
	// (it died, or lost the store) drops out of the fleet's sums after it.
	TTL time.Duration
}

var replicaPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Validate checks the report; the error wraps ErrInvalid.
func (r InFlightReport) Validate() error {
	if !replicaPattern.MatchString(r.Replica) {
		return fmt.Errorf("%w: replica %q must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}", ErrInvalid, r.Replica)
	}
	if r.TTL < time.Millisecond {
		return fmt.Errorf("%w: in-flight report TTL must be at least 1ms, got %v", ErrInvalid, r.TTL)
	}
	for id, n := range r.InFlight {
		if err := ValidateID(id); err != nil {
			return err
		}
		if err := validateCount("requests in flight", n); err != nil {
			return err
		}
	}
	return nil
}
