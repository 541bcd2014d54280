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

// Verdicts. Only VerdictFinding makes the run fail (exit 1).
const (
	VerdictPass         Verdict = "pass"
	VerdictFinding      Verdict = "FINDING"
	VerdictWarning      Verdict = "warning"
	VerdictInconclusive Verdict = "inconclusive"
	VerdictSkipped      Verdict = "skipped"
)

// Check is the outcome of one check.
type Check struct {
	Name     string         `json:"name"`
	Verdict  Verdict        `json:"verdict"`
	Summary  string         `json:"summary"`
	Evidence []string       `json:"evidence,omitempty"`
	Data     map[string]any `json:"data,omitempty"`
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
	Notes         []string  `json:"notes,omitempty"`
	Checks        []Check   `json:"checks"`
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

// ExitCode is 0 without findings, 1 with.
func (r *Report) ExitCode() int {
	if len(r.Findings()) > 0 {
		return 1
	}
	return 0
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
	fmt.Fprintf(w, "warden probe: %s, model %s, context %d tokens (%s), %d key(s), %d requests in %.1fs\n",
		r.Target, r.Model, r.ContextLength, r.ContextSource, r.Keys, r.Requests, r.Duration)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tVERDICT\tSUMMARY")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Verdict, c.Summary)
	}
	tw.Flush()
	for _, c := range r.Checks {
		if len(c.Evidence) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n  %s\n", c.Name, strings.Join(c.Evidence, "\n  "))
	}
	if f := r.Findings(); len(f) > 0 {
		names := make([]string, len(f))
		for i, c := range f {
			names[i] = c.Name
		}
		fmt.Fprintf(w, "\nRESULT: %d finding(s): %s\n", len(f), strings.Join(names, ", "))
	} else {
		fmt.Fprintln(w, "\nRESULT: no finding")
	}
}
