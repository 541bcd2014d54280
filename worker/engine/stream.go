package engine

import (
	"context"
	"io"
	"sync"
)

// EventKind says what an Event carries.
type EventKind uint8

const (
	// EventProgress reports that the first Positions prompt positions are
	// in the KV cache (only when Request.ReportProgress is set).
	EventProgress EventKind = iota + 1
	// EventToken carries one generated token (stop tokens are not sent as
	// EventToken; they count in Result.CompletionTokens).
	EventToken
	// EventDone is the last event of a stream and carries the Result.
	EventDone
	// EventPromptLogprobs carries the prompt's logprobs
	// (Sampling.PromptLogprobs) once the whole prompt is in the KV cache,
	// before that EventProgress and before the first token.
	EventPromptLogprobs
)

// FinishReason says why a sequence ended.
type FinishReason string

const (
	// FinishStop: a stop or EOS token was sampled.
	FinishStop FinishReason = "stop"
	// FinishLength: MaxTokens were generated.
	FinishLength FinishReason = "length"
	// FinishPrefilled: a PrefillOnly request finished its prompt and
	// sampled its first token.
	FinishPrefilled FinishReason = "prefilled"
	// FinishEmbedded: an embedding request (Request.Embed) pooled its
	// prompt's hidden states; Result.Embedding holds the vector.
	FinishEmbedded FinishReason = "embedded"
	// FinishError: the sequence failed or was aborted; Result.Err says why.
	FinishError FinishReason = "error"
)

// Event is one step of a sequence's output.
type Event struct {
	Kind      EventKind
	Token     int32
	Positions int
	Result    *Result
	// Logprobs comes with an EventToken when the request asked for them
	// (Sampling.Logprobs); nil for the first token of a Prefilled request,
	// whose logits only the prefill worker had.
	Logprobs *Logprobs
	// PromptLogprobs comes with EventPromptLogprobs: entry i is prompt
	// token i+1's (Token, Logprob, Rank and its PromptTopLogprobs most
	// likely alternatives), one fewer than the prompt's tokens.
	PromptLogprobs []Logprobs
}

// Result is a finished sequence's outcome.
type Result struct {
	Finish FinishReason
	// PromptTokens is the number of prompt positions that were actually in
	// the KV cache (computed here or received through a verified transfer).
	PromptTokens int
	// CachedTokens is how many of PromptTokens were reused from sealed
	// prefix pages rather than computed.
	CachedTokens int
	// CompletionTokens is the number of tokens actually sampled, including
	// a final stop token.
	CompletionTokens int
	// FirstToken is the first sampled token (-1 if none was sampled).
	FirstToken int32
	// Embedding is, for FinishEmbedded, the pooled and L2-normalised
	// final hidden state (Request.Embed).
	Embedding []float32
	// Err is set when Finish is FinishError.
	Err error
}

// Stream delivers a sequence's events in order. The engine never blocks on
// a slow reader: events are buffered.
type Stream struct {
	mu       sync.Mutex
	events   []Event // pending events are events[head:]
	head     int
	finished bool
	signal   chan struct{}

	closeOnce sync.Once
	closed    chan struct{}
}

func newStream() *Stream {
	return &Stream{signal: make(chan struct{}, 1), closed: make(chan struct{})}
}

// Next returns the next event, blocking until one is available or ctx is
// done. After the EventDone event it returns io.EOF.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if s.head < len(s.events) {
			ev := s.events[s.head]
			s.events[s.head] = Event{}
			s.head++
			if s.head == len(s.events) {
				// Drained: reuse the buffer from the start.
				s.events, s.head = s.events[:0], 0
			}
			s.mu.Unlock()
			return ev, nil
		}
		if s.finished {
			s.mu.Unlock()
			return Event{}, io.EOF
		}
		s.mu.Unlock()
		select {
		case <-s.signal:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close asks the engine to abort the sequence if it has not finished. The
// sequence's final event still arrives; after it the engine no longer
// touches the sequence's pages.
func (s *Stream) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

func (s *Stream) push(ev Event) {
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		return
	}
	s.events = append(s.events, ev)
	if ev.Kind == EventDone {
		s.finished = true
	}
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

func (s *Stream) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}
