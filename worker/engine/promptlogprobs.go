package engine

import "fmt"

// Prompt logprobs (Sampling.PromptLogprobs): the log probability of every
// prompt token after the first given the tokens before it, as vLLM's
// prompt_logprobs and OpenAI's echo with logprobs report them.
//
// Every prefill chunk of such a sequence asks the backend for the logits
// of each of its positions (Chunk.Logits with a row per token); the row of
// position p is the distribution of prompt token p+1, scored with the
// engine's logprobs code (the raw, untempered row: logprob, the top
// alternatives, and the token's rank). The prompt's last row is also the
// one the first token is sampled from, as without prompt logprobs. By the
// backend's chunk and batch invariance the results do not depend on how
// the prompt was split nor on the batch.
//
// The rows cost vocabulary-sized floats each, so a step computes at most
// promptLogprobRows of them over all its sequences: such a sequence
// prefills at most that many positions per step (its chunk shares the
// step's budget like any prompt's). Positions reused from the prefix
// cache have no logits, so such a sequence takes no prefix hit
// (validatePromptLogprobs); it may still seal its pages for others.

// promptLogprobRows bounds the prompt-logprob logits rows of one step.
const promptLogprobRows = 32

// validatePromptLogprobs refuses what cannot give a prompt's logprobs:
// a prompt received through a transfer or reused from the prefix cache.
func validatePromptLogprobs(req *Request) error {
	if !req.Sampling.PromptLogprobs {
		return nil
	}
	if req.Prefilled || (req.Prefix != nil && req.Prefix.Hit > 0) {
		return fmt.Errorf("%w: prompt logprobs need the whole prompt computed here (not transferred, no prefix-cache hit)", ErrBadRequest)
	}
	return nil
}

// promptChunk bounds n, the positions a prefill chunk of s would take, by
// the prompt-logprob rows the step has left (0 when none is).
func (e *Engine) promptChunk(s *sequence, n int) int {
	if !s.req.Sampling.PromptLogprobs || s.generated > 0 {
		return n
	}
	return min(n, promptLogprobRows-e.promptAt)
}

// promptRows gives a prompt-logprobs prefill chunk a logits row per
// position, from the step's scratch.
func (e *Engine) promptRows(c *Chunk) {
	v := len(e.logits[0])
	if e.promptBuf == nil {
		e.promptBuf = make([]float32, promptLogprobRows*v)
	}
	from, to := e.promptAt*v, (e.promptAt+len(c.Tokens))*v
	c.Logits = e.promptBuf[from:to:to]
	e.promptAt += len(c.Tokens)
}

// scorePrompt records the prompt logprobs of a prefill chunk's rows and,
// once the prompt is complete, delivers them all.
func (e *Engine) scorePrompt(s *sequence, c Chunk) {
	p, v := s.req.Prompt, len(e.logits[0])
	if s.promptLps == nil {
		s.promptLps = make([]Logprobs, 0, len(p)-1)
	}
	for i := range c.Tokens {
		next := c.Start + i + 1
		if next >= len(p) {
			break
		}
		row := c.Logits[i*v : (i+1)*v]
		lp := e.lps.logprobs(row, p[next], s.req.Sampling.PromptTopLogprobs)
		lp.Rank = rank(row, p[next])
		s.promptLps = append(s.promptLps, *lp)
	}
	if c.Start+len(c.Tokens) == len(p) {
		s.stream.push(Event{Kind: EventPromptLogprobs, PromptLogprobs: s.promptLps})
		s.promptLps = nil
	}
}
