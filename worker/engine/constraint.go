package engine

// Constraint restricts the tokens one sequence may sample (structured
// outputs; internal/constrain implements it). The engine calls it on its
// own goroutine, from the sequence's own state only, so a constrained
// sequence's tokens do not depend on its batch mates.
type Constraint interface {
	// Mask sets to -Inf the logits of the tokens that may not come next;
	// remaining is how many tokens the sequence may still produce, this
	// one included.
	Mask(logits []float32, remaining int)
	// Advance moves past a token the sequence produced (sampled here or,
	// for a decode after a transfer, by the prefill worker).
	Advance(tok int32)
}

// constrain masks logits for sequence s's next token, if constrained.
func (s *sequence) constrain(logits []float32) {
	if s.constraint != nil {
		s.constraint.Mask(logits, s.req.Sampling.MaxTokens-s.generated)
	}
}

// constrained records token tok in the sequence's constraint, if any.
func (s *sequence) constrained(tok int32) {
	if s.constraint != nil {
		s.constraint.Advance(tok)
	}
}
