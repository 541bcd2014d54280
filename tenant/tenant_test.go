package tenant

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNormalizeDefaults(t *testing.T) {
	models := []string{"a"}
	got, err := Tenant{ID: "acme", Limits: Limits{AllowedModels: models}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if got.Weight != 1 || got.Limits.BudgetPeriod != PeriodMonth {
		t.Fatalf("defaults not applied: %+v", got)
	}
	models[0] = "changed"
	if got.Limits.AllowedModels[0] != "a" {
		t.Fatal("Normalize shares the caller's slice")
	}
	got, _ = Tenant{ID: "acme", Weight: 3, Limits: Limits{BudgetPeriod: "24h", AllowedModels: []string{}}}.Normalize()
	if got.Weight != 3 || got.Limits.BudgetPeriod != "24h" || got.Limits.AllowedModels != nil {
		t.Fatalf("explicit values changed: %+v", got)
	}
}

func TestAcquireRequestAndConsumedValidate(t *testing.T) {
	if err := (AcquireRequest{Model: "m", Tokens: MaxLimitValue}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []AcquireRequest{{Model: "m", Tokens: MaxLimitValue + 1}, {Model: "m\x00"}, {Model: strings.Repeat("m", 257)}} {
		if err := r.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for _, c := range []Consumed{{PromptTokens: -1}, {CompletionTokens: -1}} {
		if err := c.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestUsageDays(t *testing.T) {
	d := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	days, err := UsageDays("acme", d("2028-02-28T23:00:00Z"), d("2028-03-01T00:00:00Z"))
	if err != nil || !slices.Equal(days, []string{"2028-02-28", "2028-02-29", "2028-03-01"}) {
		t.Fatalf("UsageDays = %v, %v", days, err)
	}
	if _, err := UsageDays("acme", time.Time{}, d("9999-01-01T00:00:00Z")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("huge range: %v", err)
	}
	if days, err := UsageDays("acme", d("2026-01-01T00:00:00Z"), d("2029-01-04T00:00:00Z")); err != nil || len(days) != MaxUsageDays {
		t.Fatalf("maximal range: %d days, %v", len(days), err)
	}
}

// fakeBackend records lease operations and can fail.
type fakeBackend struct {
	released int
	err      error
}

func (f *fakeBackend) ReleaseLease(context.Context, LeaseInfo, Consumed) error {
	if f.err != nil {
		return f.err
	}
	f.released++
	return nil
}

func (f *fakeBackend) RenewLease(context.Context, LeaseInfo) (time.Time, error) {
	return time.Unix(42, 0), f.err
}

func TestLeaseReleaseOnce(t *testing.T) {
	ctx := t.Context()
	b := &fakeBackend{err: ErrUnavailable}
	l := NewLease(LeaseInfo{ID: "l1"}, b)
	if err := l.Release(ctx, Consumed{PromptTokens: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative usage: %v", err)
	}
	if err := l.Release(ctx, Consumed{}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("failing backend: %v", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, ErrUnavailable) || !l.Info().ExpiresAt.IsZero() {
		t.Fatalf("failed renew: %v, expiry %v", err, l.Info().ExpiresAt)
	}
	b.err = nil
	if err := l.Renew(ctx); err != nil || !l.Info().ExpiresAt.Equal(time.Unix(42, 0)) {
		t.Fatalf("renew: %v, expiry %v", err, l.Info().ExpiresAt)
	}
	if err := l.Release(ctx, Consumed{}); err != nil {
		t.Fatalf("retried release: %v", err)
	}
	if err := l.Release(ctx, Consumed{}); !errors.Is(err, ErrLeaseReleased) || b.released != 1 {
		t.Fatalf("second release: %v, backend released %d times", err, b.released)
	}
}
