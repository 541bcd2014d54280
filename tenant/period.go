package tenant

import (
	"fmt"
	"time"
)

// BudgetPeriod is the period over which Limits.Budget applies: "day" (UTC
// calendar day), "month" (UTC calendar month) or a Go duration such as
// "168h", a whole number of seconds between 1m and 8784h, whose periods are
// aligned to the Unix epoch.
type BudgetPeriod string

// Calendar budget periods.
const (
	PeriodDay   BudgetPeriod = "day"
	PeriodMonth BudgetPeriod = "month"
)

const (
	minPeriod = time.Minute
	maxPeriod = 366 * 24 * time.Hour
)

// Validate reports whether p is "day", "month" or a valid duration; the
// error wraps ErrInvalid.
func (p BudgetPeriod) Validate() error {
	_, err := p.parse()
	return err
}

// Duration returns the length of a fixed-length period and true, or false for
// the calendar periods "day" and "month" (and the empty default, "month").
func (p BudgetPeriod) Duration() (time.Duration, bool) {
	d, err := p.parse()
	return d, err == nil && d > 0
}

func (p BudgetPeriod) parse() (time.Duration, error) {
	switch p {
	case PeriodDay, PeriodMonth, "":
		return 0, nil
	}
	d, err := time.ParseDuration(string(p))
	if err != nil || d < minPeriod || d > maxPeriod || d%time.Second != 0 {
		return 0, fmt.Errorf(`%w: limits.budget_period %q must be "day", "month" or a whole-second duration between %v and %v`,
			ErrInvalid, string(p), minPeriod, maxPeriod)
	}
	return d, nil
}

// Window returns the period containing now, as [start, end) in UTC. An
// invalid period is treated as PeriodMonth.
func (p BudgetPeriod) Window(now time.Time) (start, end time.Time) {
	now = now.UTC()
	if d, ok := p.Duration(); ok {
		n := now.UnixMicro() / d.Microseconds()
		if now.UnixMicro()%d.Microseconds() < 0 {
			n-- // floor division for instants before 1970
		}
		start = time.UnixMicro(n * d.Microseconds()).UTC()
		return start, start.Add(d)
	}
	y, m, day := now.Date()
	if p == PeriodDay {
		start = time.Date(y, m, day, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 0, 1)
	}
	start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 1, 0)
}
