package engine

import (
	"errors"
	"fmt"
	"math"
)

// Pooling is how an embedding request (Request.Embed) turns its prompt's
// final hidden states into one vector. Both are followed by an L2
// normalisation, as vLLM's embedding pooler does.
type Pooling uint8

// Poolings.
const (
	// PoolingNone: not an embedding request.
	PoolingNone Pooling = iota
	// PoolingLast takes the last position's hidden state: vLLM's default
	// for a decoder-only (causal) model served for embeddings, the only
	// position that has seen the whole input.
	PoolingLast
	// PoolingMean averages the hidden states of every position.
	PoolingMean
)

// String names the pooling as configuration spells it.
func (p Pooling) String() string {
	switch p {
	case PoolingLast:
		return "last"
	case PoolingMean:
		return "mean"
	case PoolingNone:
		return "none"
	}
	return fmt.Sprintf("Pooling(%d)", uint8(p))
}

// ParsePooling reads "last" or "mean" ("" is last, the default).
func ParsePooling(s string) (Pooling, error) {
	switch s {
	case "", "last":
		return PoolingLast, nil
	case "mean":
		return PoolingMean, nil
	}
	return PoolingNone, fmt.Errorf("engine: pooling must be last or mean, got %q", s)
}

// ErrNoEmbeddings: the backend computes no hidden states (it does not
// implement HiddenStates), so embedding requests are refused.
var ErrNoEmbeddings = errors.New("engine: this backend does not compute embeddings")

// HiddenSize is the width of the embeddings the engine computes: the
// backend's hidden size, 0 when it computes no hidden states (embedding
// requests are refused).
func (e *Engine) HiddenSize() int { return e.hidden }

// normEps is the smallest norm an embedding is divided by
// (torch.nn.functional.normalize's eps, which vLLM's pooler uses).
const normEps = 1e-12

// validateEmbed checks an embedding request: prefill of its own prompt
// into its own pages, nothing shared, nothing sampled.
func (e *Engine) validateEmbed(req *Request) error {
	switch {
	case req.Embed != PoolingLast && req.Embed != PoolingMean:
		return fmt.Errorf("%w: unknown pooling %v", ErrBadRequest, req.Embed)
	case e.hidden == 0:
		return ErrNoEmbeddings
	case req.Prefilled || req.PrefillOnly || req.Prefix != nil || req.ReportProgress:
		return fmt.Errorf("%w: an embedding request computes its own prompt and nothing else", ErrBadRequest)
	}
	if have := len(req.Pages) * e.cfg.PageTokens; have < len(req.Prompt) {
		return fmt.Errorf("%w: %d pages hold %d positions, the prompt needs %d", ErrBadRequest, len(req.Pages), have, len(req.Prompt))
	}
	return nil
}

// hiddenRows sets c.Hidden for an embedding sequence's prefill chunk:
// every position's row for mean pooling, the last position's (on the
// prompt's last chunk) for last pooling. at is the first free row of the
// step's scratch; it returns the next one.
func (e *Engine) hiddenRows(s *sequence, c *Chunk, at int) int {
	rows := len(c.Tokens)
	if s.req.Embed == PoolingLast {
		if c.Start+len(c.Tokens) < len(s.req.Prompt) {
			return at
		}
		rows = 1
	}
	h := e.hidden
	if e.hiddenBuf == nil {
		// A step's rows never exceed ChunkTokens: embedding chunks are
		// prefill chunks, which share that budget.
		e.hiddenBuf = make([]float32, e.cfg.ChunkTokens*h)
	}
	c.Hidden = e.hiddenBuf[at*h : (at+rows)*h]
	return at + rows
}

// poolHidden adds a chunk's hidden states to s's pooled vector and, once the
// whole prompt is in, finishes s with its normalised embedding. The sum
// runs in float64 in position order, so it does not depend on how the
// prompt was split into chunks.
func (e *Engine) poolHidden(s *sequence, c Chunk) {
	h := e.hidden
	if s.pooled == nil {
		s.pooled = make([]float64, h)
	}
	for r := 0; r+h <= len(c.Hidden); r += h {
		row := c.Hidden[r : r+h]
		for j, v := range row {
			if s.req.Embed == PoolingMean {
				s.pooled[j] += float64(v)
			} else {
				s.pooled[j] = float64(v)
			}
		}
	}
	if s.pos < len(s.req.Prompt) {
		return
	}
	if s.req.Embed == PoolingMean {
		for j := range s.pooled {
			s.pooled[j] /= float64(len(s.req.Prompt))
		}
	}
	s.embedding = Normalize(s.pooled)
	s.pooled = nil
	e.finish(s, FinishEmbedded, nil)
}

// Normalize returns v divided by its L2 norm (at least 1e-12, as
// torch.nn.functional.normalize), rounded to float32.
func Normalize(v []float64) []float32 {
	var ss float64
	for _, x := range v {
		ss += x * x
	}
	n := max(math.Sqrt(ss), normEps)
	out := make([]float32, len(v))
	for j, x := range v {
		out[j] = float32(x / n)
	}
	return out
}
