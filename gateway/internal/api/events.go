package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// errBrokenContract marks a Generation that broke the Event contract; the
// client gets a generic 500 or error event, the log gets the detail.
var errBrokenContract = errors.New("api: generation broke the Event contract")

// tracker checks a Generation's events against the Event contract and
// keeps the finish reason and usage.
type tracker struct {
	// finish is every choice's finish reason ("" until it came).
	finish []string
	usage  *Usage
	calls  [][]ToolCall // every choice's tool calls so far, put together from their deltas
}

// newTracker tracks a generation of n choices.
func newTracker(n int) *tracker {
	return &tracker{finish: make([]string, max(n, 1)), calls: make([][]ToolCall, max(n, 1))}
}

func (t *tracker) observe(ev Event) error {
	switch {
	case ev.Choice < 0 || ev.Choice >= len(t.finish):
		return fmt.Errorf("%w: event of choice %d of %d", errBrokenContract, ev.Choice, len(t.finish))
	case !utf8.ValidString(ev.TextDelta) || !utf8.ValidString(ev.ReasoningDelta):
		return fmt.Errorf("%w: text delta is not valid UTF-8", errBrokenContract)
	case t.finish[ev.Choice] != "" && (ev.TextDelta != "" || ev.ReasoningDelta != "" || ev.FinishReason != "" || len(ev.Logprobs) > 0 || len(ev.ToolCalls) > 0):
		return fmt.Errorf("%w: event after the finish reason", errBrokenContract)
	case ev.Usage != nil && (ev.Usage.PromptTokens < 0 || ev.Usage.CompletionTokens < 0 ||
		ev.Usage.CachedTokens < 0 || ev.Usage.CachedTokens > ev.Usage.PromptTokens):
		return fmt.Errorf("%w: negative usage %+v", errBrokenContract, *ev.Usage)
	}
	for _, d := range ev.ToolCalls {
		if err := t.addCall(ev.Choice, d); err != nil {
			return err
		}
	}
	if ev.FinishReason != "" {
		t.finish[ev.Choice] = ev.FinishReason
	}
	if ev.Usage != nil {
		u := *ev.Usage
		t.usage = &u
	}
	return nil
}

// next reads the next event and checks it against the contract. done is
// true once the generation ended complete; err is set if it failed or
// broke the contract.
func (t *tracker) next(ctx context.Context, gen Generation) (ev Event, done bool, err error) {
	ev, err = gen.Next(ctx)
	switch {
	case errors.Is(err, io.EOF):
		return Event{}, true, t.end()
	case err != nil:
		return Event{}, false, err
	}
	return ev, false, t.observe(ev)
}

// end checks the generation is complete once Next returned io.EOF.
func (t *tracker) end() error {
	switch {
	case slices.Contains(t.finish, ""):
		return fmt.Errorf("%w: ended without a finish reason", errBrokenContract)
	case t.usage == nil:
		return fmt.Errorf("%w: ended without usage", errBrokenContract)
	}
	return nil
}

// addCall puts one tool-call delta into choice k's calls: a new call
// (index len(calls), with ID and name) or arguments of the last one.
func (t *tracker) addCall(k int, d ToolCallDelta) error {
	calls := t.calls[k]
	switch n := len(calls); {
	case !utf8.ValidString(d.Arguments) || !utf8.ValidString(d.Name) || !utf8.ValidString(d.ID):
		return fmt.Errorf("%w: tool call delta is not valid UTF-8", errBrokenContract)
	case d.Index == n && d.ID != "" && d.Name != "":
		t.calls[k] = append(calls, ToolCall{ID: d.ID, Name: d.Name, Arguments: d.Arguments})
	case d.Index == n-1 && d.ID == "" && d.Name == "":
		calls[n-1].Arguments += d.Arguments
	default:
		return fmt.Errorf("%w: tool call delta %+v after %d calls", errBrokenContract, d, n)
	}
	return nil
}
