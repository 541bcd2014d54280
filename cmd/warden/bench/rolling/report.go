package rolling

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Outcome is how one client request ended, after its retries.
type Outcome struct {
	// Retries are the reasons of the attempts sent again, one a retry.
	Retries []string
	// Error is the final failure, "" when the stream completed: an HTTP
	// status and error code ("503 worker_unavailable"), or a transport
	// failure ("transport"), or "retries exhausted".
	Error string
	// Cut: the stream started and then broke (or carried an error
	// event); it is not retried.
	Cut bool
	// Prompt indexes the prompt sent; Text and Finish are the answer of
	// a completed stream.
	Prompt       int
	Text, Finish string
}

// Answer is a reference answer: the text and finish reason of a prompt.
type Answer struct {
	Text, Finish string
}

// Report is what a run counted.
type Report struct {
	// Elapsed is how long the clients ran; Clients how many there were.
	Elapsed time.Duration `json:"elapsed_ns"`
	Clients int
	// Rounds is the number of restart rounds completed.
	Rounds int
	// Restarts counts restarted processes by role: prefill, decode,
	// gateway.
	Restarts map[string]int
	// Requests counts client requests (one each, however many attempts);
	// Attempts counts every request sent, retries included.
	Requests, Attempts int64
	// Lost counts requests that did not complete: Requests - Completed.
	Lost int64
	// Completed streams ended with [DONE].
	Completed int64
	// Retries counts retried attempts by reason (an error code, or
	// "connection refused", "connection closed").
	Retries map[string]int64
	// Errors counts requests that failed without a stream, by HTTP
	// status and error code (or "transport").
	Errors map[string]int64
	// Cut counts streams that broke after they started.
	Cut int64
	// Compared counts completed answers compared with the reference;
	// Mismatched those that differed from it.
	Compared, Mismatched int64
	// Mismatches holds the first few mismatched answers, for the
	// report.
	Mismatches []string
}

// maxMismatches bounds Report.Mismatches.
const maxMismatches = 5

// ErrLost is wrapped by OK when a request was lost, cut or answered
// differently from the reference.
var ErrLost = errors.New("rolling restart was not free")

// OK returns nil when every request completed and equalled its reference.
func (r *Report) OK() error {
	if r.Lost == 0 && r.Cut == 0 && r.Mismatched == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d lost (%d cut mid-stream), %d of %d answers differ from the reference",
		ErrLost, r.Lost, r.Cut, r.Mismatched, r.Compared)
}

// tally counts outcomes from every client at once.
type tally struct {
	mu  sync.Mutex
	rep Report
	ref []Answer
}

func newTally(ref []Answer) *tally {
	return &tally{ref: ref, rep: Report{Restarts: map[string]int{}, Retries: map[string]int64{}, Errors: map[string]int64{}}}
}

// add counts one request's outcome.
func (t *tally) add(o Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &t.rep
	r.Requests++
	r.Attempts += int64(1 + len(o.Retries))
	for _, why := range o.Retries {
		r.Retries[why]++
	}
	switch {
	case o.Cut:
		r.Cut++
	case o.Error != "":
		r.Errors[o.Error]++
	default:
		r.Completed++
		r.Compared++
		if want := t.ref[o.Prompt]; o.Text != want.Text || o.Finish != want.Finish {
			r.Mismatched++
			if len(r.Mismatches) < maxMismatches {
				r.Mismatches = append(r.Mismatches, fmt.Sprintf("prompt %d: %q (%s), want %q (%s)", o.Prompt, o.Text, o.Finish, want.Text, want.Finish))
			}
		}
	}
}

// restarted counts one restart of a process of role.
func (t *tally) restarted(role string) {
	t.mu.Lock()
	t.rep.Restarts[role]++
	t.mu.Unlock()
}

// completed returns how many streams completed so far.
func (t *tally) completed() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rep.Completed
}

// report returns a copy of the counts.
func (t *tally) report() Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rep
	r.Lost = r.Requests - r.Completed
	r.Restarts, r.Retries, r.Errors = maps.Clone(r.Restarts), maps.Clone(r.Retries), maps.Clone(r.Errors)
	r.Mismatches = slices.Clone(r.Mismatches)
	return r
}

// WriteText writes the report for a person.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "clients:     %d for %v, %d restart round(s)\n", r.Clients, r.Elapsed.Round(time.Second), r.Rounds)
	fmt.Fprintf(w, "restarts:    %s\n", counts(r.Restarts))
	fmt.Fprintf(w, "requests:    %d (%d attempts sent)\n", r.Requests, r.Attempts)
	fmt.Fprintf(w, "completed:   %d\n", r.Completed)
	fmt.Fprintf(w, "retries:     %s\n", counts(r.Retries))
	fmt.Fprintf(w, "errors:      %s\n", counts(r.Errors))
	fmt.Fprintf(w, "cut:         %d\n", r.Cut)
	fmt.Fprintf(w, "lost:        %d\n", r.Lost)
	fmt.Fprintf(w, "compared:    %d with the reference, %d mismatched\n", r.Compared, r.Mismatched)
	for _, m := range r.Mismatches {
		fmt.Fprintf(w, "  mismatch:  %s\n", m)
	}
}

// counts formats a count map as "total (key n, key n)", keys sorted.
func counts[V int | int64](m map[string]V) string {
	var total V
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		total += m[k]
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}
