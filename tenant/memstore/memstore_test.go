package memstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
	"github.com/warden-ai/warden/tenant/storetest"
)

var secret = []byte("memstore-test-server-secret")

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) (tenant.Store, tenant.Store) {
		s, err := memstore.New(secret, memstore.WithClock(now), memstore.WithLeaseTTL(storetest.LeaseTTL))
		if err != nil {
			t.Fatal(err)
		}
		return s, s // one process: both "replicas" share the instance
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := memstore.New([]byte("short")); !errors.Is(err, tenant.ErrInvalid) {
		t.Errorf("New with a 5-byte secret: %v, want ErrInvalid", err)
	}
	if _, err := memstore.New(secret, memstore.WithLeaseTTL(0)); !errors.Is(err, tenant.ErrInvalid) {
		t.Errorf("New with lease TTL 0: %v, want ErrInvalid", err)
	}
}
