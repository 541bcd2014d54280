package rolling

import (
	"errors"
	"strings"
	"testing"
)

func TestTallyCounts(t *testing.T) {
	tl := newTally([]Answer{{Text: "a", Finish: "stop"}, {Text: "b", Finish: "length"}})
	tl.add(Outcome{Prompt: 0, Text: "a", Finish: "stop"})
	tl.add(Outcome{Prompt: 1, Text: "b", Finish: "length", Retries: []string{"not_ready", "connection closed"}})
	tl.add(Outcome{Prompt: 1, Text: "b", Finish: "stop"}) // finish differs
	tl.add(Outcome{Prompt: 0, Text: "x", Finish: "stop"}) // text differs
	tl.add(Outcome{Prompt: 0, Cut: true, Retries: []string{"not_ready"}})
	tl.add(Outcome{Prompt: 1, Error: "503 worker_unavailable"})
	tl.add(Outcome{Prompt: 1, Error: "503 worker_unavailable"})
	tl.add(Outcome{Prompt: 0, Error: "transport"})
	tl.restarted("prefill")
	tl.restarted("gateway")
	tl.restarted("gateway")
	r := tl.report()
	if r.Requests != 8 || r.Attempts != 11 || r.Completed != 4 || r.Lost != 4 || r.Cut != 1 || r.Compared != 4 || r.Mismatched != 2 {
		t.Errorf("requests %d attempts %d completed %d lost %d cut %d compared %d mismatched %d, want 8 11 4 4 1 4 2",
			r.Requests, r.Attempts, r.Completed, r.Lost, r.Cut, r.Compared, r.Mismatched)
	}
	if r.Retries["not_ready"] != 2 || r.Retries["connection closed"] != 1 || len(r.Retries) != 2 {
		t.Errorf("retries %v", r.Retries)
	}
	if r.Errors["503 worker_unavailable"] != 2 || r.Errors["transport"] != 1 || len(r.Errors) != 2 {
		t.Errorf("errors %v", r.Errors)
	}
	if r.Restarts["gateway"] != 2 || r.Restarts["prefill"] != 1 {
		t.Errorf("restarts %v", r.Restarts)
	}
	if len(r.Mismatches) != 2 || !strings.Contains(r.Mismatches[1], `"x"`) {
		t.Errorf("mismatches %q", r.Mismatches)
	}
	if err := r.OK(); !errors.Is(err, ErrLost) {
		t.Errorf("OK() = %v, want ErrLost", err)
	}
	var b strings.Builder
	r.WriteText(&b)
	for _, want := range []string{"requests:    8 (11 attempts sent)", "retries:     3 (connection closed 1, not_ready 2)",
		"errors:      3 (503 worker_unavailable 2, transport 1)", "cut:         1", "lost:        4",
		"compared:    4 with the reference, 2 mismatched", "restarts:    3 (gateway 2, prefill 1)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	// The copy is the caller's: counting on does not change it.
	tl.add(Outcome{Prompt: 0, Error: "transport"})
	if r.Errors["transport"] != 1 {
		t.Error("report shares its maps with the tally")
	}
}

func TestReportOK(t *testing.T) {
	tl := newTally([]Answer{{Text: "a", Finish: "stop"}})
	tl.add(Outcome{Prompt: 0, Text: "a", Finish: "stop", Retries: []string{"shutting_down"}})
	if r := tl.report(); r.OK() != nil || r.Lost != 0 {
		t.Errorf("OK() = %v, lost %d: a retried request that completed is not lost", r.OK(), r.Lost)
	}
	for _, o := range []Outcome{{Cut: true}, {Error: "429 rate_limited"}, {Text: "b", Finish: "stop"}} {
		tl := newTally([]Answer{{Text: "a", Finish: "stop"}})
		tl.add(o)
		if r := tl.report(); r.OK() == nil {
			t.Errorf("OK() = nil after %+v", o)
		}
	}
}
