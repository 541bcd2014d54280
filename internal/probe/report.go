package probe

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Verdict of one check.
type Verdict string

// Verdicts. A finding makes the run exit 1; an inconclusive check, when
// there is no finding, exit 3 (ExitInconclusive) unless inconclusive
// checks are allowed.
const (
	VerdictPass         Verdict = "pass"
	VerdictFinding      Verdict = "FINDING"
	VerdictWarning      Verdict = "warning"
	VerdictInconclusive Verdict = "inconclusive"
	VerdictSkipped      Verdict = "skipped"
)

// Check is the outcome of one check.
type Check struct {
	Name    string  `json:"name"`
	Verdict Verdict `json:"verdict"`
	Summary string  `json:"summary"`
	// Needs says, for an inconclusive check, what it would take to
	// conclude (requests, time, an endpoint property).
	Needs    string         `json:"needs,omitempty"`
	Evidence []string       `json:"evidence,omitempty"`
	Data     map[string]any `json:"data,omitempty"`
}

// inconclusive marks c inconclusive with why, and what it would need.
func (c *Check) inconclusive(summary, needs string) {
	c.Verdict, c.Summary, c.Needs = VerdictInconclusive, summary, needs
}

// maxEvidence bounds the evidence lines kept per check.
const maxEvidence = 20

func (c *Check) evidence(format string, args ...any) {
	if len(c.Evidence) < maxEvidence {
		c.Evidence = append(c.Evidence, fmt.Sprintf(format, args...))
	}
}

// Report is a probe run's result, as written by --report.
type Report struct {
	Target        string    `json:"target"`
	Model         string    `json:"model"`
	ContextLength int       `json:"context_length"`
	ContextSource string    `json:"context_source"`
	Keys          int       `json:"keys"`
	Seed          uint64    `json:"seed"`
	Started       time.Time `json:"started"`
	Duration      float64   `json:"duration_seconds"`
	Requests      int       `json:"requests"`
	// Retries is how many tries were repeated after a transport error or
	// a 429/503 (each counts in Requests).
	Retries int `json:"retries"`
	// Plan is what each check was to spend, printed before the start.
	Plan   []PlanItem `json:"plan"`
	Budget int        `json:"budget"`
	Notes  []string   `json:"notes,omitempty"`
	Checks []Check    `json:"checks"`
}

func (r *Report) add(cs ...Check) {
	for _, c := range cs {
		if c.Name != "" {
			r.Checks = append(r.Checks, c)
		}
	}
}

// Findings lists the checks with a finding.
func (r *Report) Findings() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Verdict == VerdictFinding {
			out = append(out, c)
		}
	}
	return out
}

// Exit codes of a run (2: the probe could not run at all).
const (
	ExitPass         = 0
	ExitFinding      = 1
	ExitCannotRun    = 2
	ExitInconclusive = 3
)

// Inconclusive lists the checks that could not conclude.
func (r *Report) Inconclusive() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Verdict == VerdictInconclusive {
			out = append(out, c)
		}
	}
	return out
}

// ExitCode is ExitFinding with a finding, else ExitInconclusive when a
// check could not conclude (unless allowInconclusive), else ExitPass.
func (r *Report) ExitCode(allowInconclusive bool) int {
	switch {
	case len(r.Findings()) > 0:
		return ExitFinding
	case len(r.Inconclusive()) > 0 && !allowInconclusive:
		return ExitInconclusive
	}
	return ExitPass
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the human summary: a table of checks, then each
// check's evidence.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "warden probe: %s, model %s, context %d tokens (%s), %d key(s), %d requests (%d retried) in %.1fs\n",
		r.Target, r.Model, r.ContextLength, r.ContextSource, r.Keys, r.Requests, r.Retries, r.Duration)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tVERDICT\tSUMMARY")
	for _, c := range r.Checks {
		sum := c.Summary
		if c.Needs != "" {
			sum += " — needs " + c.Needs
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Verdict, sum)
	}
	tw.Flush()
	for _, c := range r.Checks {
		if len(c.Evidence) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n  %s\n", c.Name, strings.Join(c.Evidence, "\n  "))
	}
	names := func(cs []Check) string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = c.Name
		}
		return strings.Join(out, ", ")
	}
	f, inc := r.Findings(), r.Inconclusive()
	switch {
	case len(f) > 0:
		fmt.Fprintf(w, "\nRESULT: %d finding(s): %s\n", len(f), names(f))
	case len(inc) > 0:
		fmt.Fprintf(w, "\nRESULT: INCONCLUSIVE: no finding, but %d check(s) could not conclude: %s\n", len(inc), names(inc))
	default:
		fmt.Fprintln(w, "\nRESULT: no finding; every check concluded")
	}
}

// PlanItem is what one check plans to spend.
type PlanItem struct {
	Check string `json:"check"`
	// MinRequests is what the check spends when its evidence is
	// overwhelming early; MaxRequests its hard bound.
	MinRequests int    `json:"min_requests"`
	MaxRequests int    `json:"max_requests"`
	How         string `json:"how"`
}

// WritePlan writes the plan as a table.
func WritePlan(w io.Writer, plan []PlanItem, budget int, duration time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLAN\tREQUESTS\tHOW")
	lo, hi := 0, 0
	for _, p := range plan {
		fmt.Fprintf(tw, "%s\t%d–%d\t%s\n", p.Check, p.MinRequests, p.MaxRequests, p.How)
		lo += p.MinRequests
		hi += p.MaxRequests
	}
	fmt.Fprintf(tw, "total\t%d–%d\thard bound: %d requests (retries included) or %s, whichever comes first\n", lo, hi, budget, duration)
	tw.Flush()
}
