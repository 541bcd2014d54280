package tenant

import (
	"errors"
	"testing"
	"time"
)

func TestBudgetPeriodWindow(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		p               BudgetPeriod
		now, start, end string
	}{
		{PeriodDay, "2026-03-10T22:00:00Z", "2026-03-10T00:00:00Z", "2026-03-11T00:00:00Z"},
		{PeriodDay, "2026-03-10T01:00:00+02:00", "2026-03-09T00:00:00Z", "2026-03-10T00:00:00Z"},
		{PeriodMonth, "2028-02-29T23:59:59Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z"},
		{PeriodMonth, "2026-12-31T23:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
		{"", "2026-04-15T00:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z"},
		{"1h", "2026-03-10T10:30:00Z", "2026-03-10T10:00:00Z", "2026-03-10T11:00:00Z"},
		{"168h", "2028-02-28T23:30:00Z", "2028-02-24T00:00:00Z", "2028-03-02T00:00:00Z"}, // Thursdays
		{"1h", "1969-12-31T23:30:00Z", "1969-12-31T23:00:00Z", "1970-01-01T00:00:00Z"},
	} {
		start, end := c.p.Window(at(c.now))
		if !start.Equal(at(c.start)) || !end.Equal(at(c.end)) {
			t.Errorf("%q.Window(%s) = [%v, %v), want [%s, %s)", c.p, c.now, start, end, c.start, c.end)
		}
	}
}

func TestBudgetPeriodValidate(t *testing.T) {
	for _, ok := range []BudgetPeriod{"", PeriodDay, PeriodMonth, "1m", "90m", "24h", "8784h"} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []BudgetPeriod{"week", "Day", "59s", "8785h", "1m30.5s", "-1h", "0", "1e3h"} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
	if d, ok := BudgetPeriod("2h").Duration(); !ok || d != 2*time.Hour {
		t.Errorf("Duration of 2h = %v, %v", d, ok)
	}
	if _, ok := PeriodDay.Duration(); ok {
		t.Error("day has a fixed duration")
	}
}

// FuzzBudgetPeriod checks that admin input never panics and that every
// accepted period yields a non-empty window containing the instant.
func FuzzBudgetPeriod(f *testing.F) {
	for _, s := range []string{"", "day", "month", "1h", "168h", "59s", "9999999999h", "1h1m1s"} {
		f.Add(s, int64(1_780_000_000))
	}
	f.Fuzz(func(t *testing.T, s string, unix int64) {
		p := BudgetPeriod(s)
		if p.Validate() != nil {
			return
		}
		now := time.Unix(unix%(1<<37), 0) // years 1 to 6325
		start, end := p.Window(now)
		if start.After(now) || !end.After(now) {
			t.Fatalf("%q.Window(%v) = [%v, %v)", s, now, start, end)
		}
	})
}
