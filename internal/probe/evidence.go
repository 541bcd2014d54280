package probe

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Every answer is evidence: each request a check sends goes through
// run.send, which indexes the prompts it carries and scans the answer for
// other requests' markers and word n-grams, for the response id of an
// answer another key got (a replayed response), and for chunks of another
// response in one stream. What it finds counts against the check that
// sent the request and against the run-wide foreign-content check.

// idOwner is who first got a response id.
type idOwner struct {
	key, label string
}

// evidenceLog collects what run.send found, per check.
type evidenceLog struct {
	mu       sync.Mutex
	answers  int
	byCheck  map[string]int
	lines    []string
	ids      map[string]idOwner
	usageBad []string
}

func newEvidenceLog() *evidenceLog {
	return &evidenceLog{byCheck: map[string]int{}, ids: map[string]idOwner{}}
}

// count returns the leaks found in answers to check's requests.
func (e *evidenceLog) count(check string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.byCheck[check]
}

// usage records a usage figure that does not add up across keys; the
// usage check reports them.
func (e *evidenceLog) usage(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.usageBad = append(e.usageBad, fmt.Sprintf(format, args...))
}

// send sends req with c on behalf of check, after indexing prompts under
// label, and scans the answer (scan).
func (r *run) send(ctx context.Context, c *client, check, label string, req chatRequest, prompts ...markedPrompt) (chatResult, []leak, error) {
	for _, p := range prompts {
		r.index.add(label, p)
	}
	res, err := c.chat(ctx, req)
	return res, r.scan(check, label, c, res), err
}

// scan looks for foreign content in res, the answer to request label sent
// with c on behalf of check, and records it.
func (r *run) scan(check, label string, c *client, res chatResult) []leak {
	leaks := r.index.check(label, res.Text)
	e := r.ev
	e.mu.Lock()
	defer e.mu.Unlock()
	if res.Status != 0 {
		e.answers++
	}
	if res.ID != "" {
		if o, ok := e.ids[res.ID]; ok && o.key != c.label {
			leaks = append(leaks, leak{Source: o.label, Evidence: fmt.Sprintf("response id %s, first sent to key %s: a replayed answer", res.ID, o.key)})
		} else if !ok {
			e.ids[res.ID] = idOwner{key: c.label, label: label}
		}
	}
	for _, id := range res.OtherIDs {
		src := "another stream"
		if o, ok := e.ids[id]; ok {
			src = o.label
		}
		leaks = append(leaks, leak{Source: src, Evidence: fmt.Sprintf("chunks of response %s inside stream %s", id, res.ID)})
	}
	for _, l := range leaks {
		e.byCheck[check]++
		if len(e.lines) < 4*maxEvidence {
			e.lines = append(e.lines, fmt.Sprintf("%s: LEAK in response to [%s]: %s from [%s]", check, label, l.Evidence, l.Source))
		}
	}
	return leaks
}

// foreign is the run-wide check: every answer of every check, scanned.
func (r *run) foreign(c Check) Check {
	e := r.ev
	e.mu.Lock()
	defer e.mu.Unlock()
	total := 0
	var checks []string
	for name, n := range e.byCheck {
		total += n
		checks = append(checks, fmt.Sprintf("%s: %d", name, n))
	}
	sort.Strings(checks)
	if c.Data == nil {
		c.Data = map[string]any{}
	}
	c.Data["answers_scanned"], c.Data["leaks"] = e.answers, total
	for _, l := range e.lines {
		c.evidence("%s", l)
	}
	switch {
	case total > 0:
		c.Verdict = VerdictFinding
		c.Summary = fmt.Sprintf("%d of %d answers hold another request's markers, text, response id or stream chunks (%v)", total, e.answers, checks)
	case e.answers == 0:
		c.inconclusive("no answer to scan", "an endpoint that answers")
	case c.Verdict == VerdictInconclusive:
		c.Summary = fmt.Sprintf("no foreign content in %d answers, but %s", e.answers, c.Summary)
	default:
		c.Verdict = VerdictPass
		c.Summary = fmt.Sprintf("%d answers of every check scanned: no foreign marker, text, response id or stream chunk", e.answers)
	}
	return c
}

// leakVerdict sets c from the leaks found in its own answers, else pass.
func (r *run) leakVerdict(c *Check, pass string) {
	if n := r.ev.count(c.Name); n > 0 {
		c.Verdict, c.Summary = VerdictFinding, fmt.Sprintf("%d answer(s) hold another key's content or response (see %q)", n, nameForeign)
		r.ev.mu.Lock()
		for _, l := range r.ev.lines {
			if len(l) > len(c.Name) && l[:len(c.Name)] == c.Name {
				c.evidence("%s", l[len(c.Name)+2:])
			}
		}
		r.ev.mu.Unlock()
		return
	}
	if c.Verdict == "" {
		c.Verdict, c.Summary = VerdictPass, pass
	}
}

// usageAcross adds to the ladder's checks (admission, usage) the usage
// figures that did not add up across keys; without the ladder they make a
// usage check of their own.
func (r *run) usageAcross(checks []Check) []Check {
	r.ev.mu.Lock()
	bad := append([]string(nil), r.ev.usageBad...)
	r.ev.mu.Unlock()
	i := slices.IndexFunc(checks, func(c Check) bool { return c.Name == nameUsage })
	if i < 0 {
		if len(bad) == 0 {
			return checks
		}
		checks = append(checks, Check{Name: nameUsage})
		i = len(checks) - 1
	}
	u := &checks[i]
	for _, b := range bad {
		u.evidence("%s", b)
	}
	if r.usageNote != "" && u.Verdict == VerdictPass {
		u.Summary += "; " + r.usageNote
	}
	if len(bad) > 0 {
		prefix := ""
		if u.Verdict == VerdictFinding {
			prefix = u.Summary + "; "
		}
		u.Verdict, u.Summary = VerdictFinding, prefix+fmt.Sprintf("%d usage figure(s) that do not add up (across keys, or against the length admission counts)", len(bad))
	}
	return checks
}
