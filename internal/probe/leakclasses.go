package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The checks of the leak classes a cache or proxy in front of an engine
// creates. Each has key A ask something, then key B ask something sharing
// part of it, and reads B's answer for A's: its response id (a replayed
// answer), its markers or words, its usage (B billed A's prompt length)
// and cached_tokens (B served from A's cached prefix). run.send scans
// every answer; these checks choose what to ask.
const (
	nameForeign    = "foreign content in any answer"
	nameIdentical  = "identical prompts across keys"
	namePrefixes   = "shared prefixes across keys"
	nameMultiTurn  = "multi-turn across keys"
	nameChoices    = "n>1 across keys"
	nameStreamMix  = "stream vs non-stream across keys"
	nameResponses  = "Responses API across keys"
	nameTools      = "tool results across keys"
	nameCrossTalk  = "concurrent streams (cross-talk)"
	nameCached     = "cached_tokens across keys"
	nameTiming     = "prefix-cache timing"
	nameUsage      = "usage prompt tokens"
	nameAdmission  = "admission past the context"
	nameSteering   = "client-steered fields"
	nameConsLoaded = "consistency under load"
	nameConsAborts = "consistency after aborts"
)

// Sizes of the leak-class checks.
const (
	identicalRounds   = 3
	multiTurnRounds   = 2
	crossTalkWaves    = 2
	crossTalkMaxWaves = 6
	crossTalkStreams  = 4 // per key and wave
	crossTalkTokens   = 32
	cacheCheckWords   = 48
)

// prefixChars are the shared prefix lengths, in characters, as far as
// the prompts fit in half the context: a cache keyed on a prompt's first k
// characters (or tokens, or blocks) serves B A's answer from one of them
// on. The shortest fit in one cache block.
var prefixChars = []int{16, 64, 256, 1024, 4096}

// needTwoKeys is the inconclusive verdict of a cross-key check with one
// key.
func needTwoKeys(c *Check) {
	c.inconclusive("one key: nothing to compare across keys", "a second tenant's key (--key twice)")
}

// pair is A's and B's answers to one round of a cross-key check.
type pair struct {
	a, b     chatResult
	aW, bW   int // filler words of each prompt (for the usage comparison)
	ctrlB    chatResult
	hasCtrlB bool
}

// ask sends one request on behalf of check and says whether it was
// answered; budget or context exhaustion ends the check (false, with c
// inconclusive).
func (r *run) ask(ctx context.Context, c *Check, k *client, label string, req chatRequest, prompts ...markedPrompt) (chatResult, bool) {
	req.Model = r.model
	if req.MaxTokens == 0 {
		req.MaxTokens = defaultMaxTokens
	}
	res, _, err := r.send(ctx, k, c.Name, label, req, prompts...)
	switch {
	case errors.Is(err, errBudget) || ctx.Err() != nil:
		c.inconclusive("stopped: request budget or duration spent", "a larger --budget or --duration")
		return res, false
	case err != nil:
		c.inconclusive(fmt.Sprintf("key %s: %v (after %d retries)", k.label, err, maxRetries), "an endpoint that stays reachable")
		return res, false
	case res.Status != http.StatusOK && !req.AnyStatus:
		c.inconclusive(fmt.Sprintf("key %s [%s]: %d %s %s", k.label, label, res.Status, res.ErrCode, res.ErrMsg), "an endpoint that answers these requests with 200")
		return res, false
	}
	return res, true
}

// compareUsage records B billed for A's prompt: the two prompts differ
// in length by at least minWordGap filler words, yet report the same
// prompt_tokens, which only A's answer replayed to B explains. It also
// keeps the cached_tokens comparison.
func (r *run) compareUsage(c *Check, p pair) {
	const minWordGap = 6
	gap := p.bW - p.aW
	if gap < 0 {
		gap = -gap
	}
	if gap >= minWordGap && p.a.PromptTokens > 0 && p.a.PromptTokens == p.b.PromptTokens && r.tokensFor(p.bW)-r.tokensFor(p.aW) != 0 {
		c.evidence("B's answer reports prompt_tokens %d, exactly A's, though B's prompt is %d filler words longer or shorter", p.b.PromptTokens, gap)
		r.ev.usage("%s: key B billed key A's prompt length (%d tokens; B's prompt differs by %d words)", c.Name, p.b.PromptTokens, gap)
	}
	if p.hasCtrlB {
		r.cacheMu.Lock()
		r.cachePairs = append(r.cachePairs, cachePair{check: c.Name, control: p.ctrlB.CachedTokens, cross: p.b.CachedTokens})
		r.cacheMu.Unlock()
	}
}

// identical: A asks a marked prompt, B asks the very same one. A
// full-response cache shared across keys hands B A's answer (its id,
// usage and text). Before each, B asks a fresh prompt of the same shape:
// the control for cached_tokens.
func (r *run) identical(ctx context.Context) Check {
	c := Check{Name: nameIdentical}
	if len(r.clients) < 2 {
		needTwoKeys(&c)
		return c
	}
	a, b := r.clients[0], r.clients[1]
	for round := range identicalRounds {
		ctrl := r.gen.markedPrompt(cacheCheckWords)
		mp := r.gen.markedPrompt(cacheCheckWords)
		var p pair
		var ok bool
		if p.ctrlB, ok = r.ask(ctx, &c, b, fmt.Sprintf("key B, control prompt of identical round %d", round+1), chatRequest{Prompt: ctrl.Text}, ctrl); !ok {
			return c
		}
		if p.a, ok = r.ask(ctx, &c, a, fmt.Sprintf("key A, identical round %d, markers %s", round+1, mp.Markers[0]), chatRequest{Prompt: mp.Text}, mp); !ok {
			return c
		}
		if p.b, ok = r.ask(ctx, &c, b, fmt.Sprintf("key B, A's prompt of identical round %d", round+1), chatRequest{Prompt: mp.Text}, mp); !ok {
			return c
		}
		p.hasCtrlB = true
		if p.a.PromptTokens >= 0 && p.b.PromptTokens >= 0 && p.a.PromptTokens != p.b.PromptTokens {
			r.ev.usage("%s round %d: the same prompt billed %d prompt tokens to key A and %d to key B", c.Name, round+1, p.a.PromptTokens, p.b.PromptTokens)
		}
		r.compareUsage(&c, p)
	}
	r.leakVerdict(&c, fmt.Sprintf("%d prompts asked by A, then by B: B got answers of its own (own response ids, no foreign content)", identicalRounds))
	return c
}

// prefixes: for each length in prefixChars, A and B ask prompts that
// share their first so many characters and differ after (B's tail is
// longer, so its usage differs). A cache keyed on a prefix of the prompt
// (characters, tokens or blocks) without the key hands B A's answer.
func (r *run) prefixes(ctx context.Context) Check {
	c := Check{Name: namePrefixes}
	if len(r.clients) < 2 {
		needTwoKeys(&c)
		return c
	}
	a, b := r.clients[0], r.clients[1]
	tested := 0
	for _, n := range prefixChars {
		prefix := r.gen.chars(n)
		// Both prompts stay within half the context.
		if r.tokensFor(len(strings.Fields(prefix))+24) > r.ctxLen/2 {
			break
		}
		ma, mb := r.gen.markedPrompt(8), r.gen.markedPrompt(24)
		ctrl := r.gen.markedPrompt(24)
		ctrl.Text = r.gen.chars(n) + " " + ctrl.Text
		ma.Text, mb.Text = prefix+" "+ma.Text, prefix+" "+mb.Text
		var p pair
		var ok bool
		if p.ctrlB, ok = r.ask(ctx, &c, b, fmt.Sprintf("key B, control for the %d-character prefix", n), chatRequest{Prompt: ctrl.Text}, ctrl); !ok {
			return c
		}
		if p.a, ok = r.ask(ctx, &c, a, fmt.Sprintf("key A, %d-character shared prefix, markers %s", n, ma.Markers[0]), chatRequest{Prompt: ma.Text}, ma); !ok {
			return c
		}
		if p.b, ok = r.ask(ctx, &c, b, fmt.Sprintf("key B, A's %d-character prefix, markers %s", n, mb.Markers[0]), chatRequest{Prompt: mb.Text}, mb); !ok {
			return c
		}
		p.aW, p.bW, p.hasCtrlB = 8, 24, true
		r.compareUsage(&c, p)
		tested++
	}
	if c.Verdict == "" && len(c.Evidence) > 0 {
		c.Verdict, c.Summary = VerdictFinding, "key B was billed key A's prompt: A's answer was served for B's prompt sharing A's prefix"
	}
	r.leakVerdict(&c, fmt.Sprintf("%d prefix lengths (%v characters): B's answers are its own", tested, prefixChars[:tested]))
	return c
}

// multiTurn: conversations that share all but one message. A cache keyed
// on the last user message (or on the history without the system
// message) hands B A's answer.
func (r *run) multiTurn(ctx context.Context) Check {
	c := Check{Name: nameMultiTurn}
	if len(r.clients) < 2 {
		needTwoKeys(&c)
		return c
	}
	a, b := r.clients[0], r.clients[1]
	for round := range multiTurnRounds {
		sa, sb := r.gen.markedPrompt(12), r.gen.markedPrompt(30)
		q := "Answer in one word: " + r.gen.words(6)
		conv := func(system string) []map[string]any {
			return []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": q}}
		}
		var p pair
		var ok bool
		if p.a, ok = r.ask(ctx, &c, a, fmt.Sprintf("key A, conversation %d (system %s)", round+1, sa.Markers[0]), chatRequest{Messages: conv(sa.Text)}, sa); !ok {
			return c
		}
		if p.b, ok = r.ask(ctx, &c, b, fmt.Sprintf("key B, conversation %d, same last message (system %s)", round+1, sb.Markers[0]), chatRequest{Messages: conv(sb.Text)}, sb); !ok {
			return c
		}
		p.aW, p.bW = 12, 30
		r.compareUsage(&c, p)
		// Shared history, different last turn.
		h1, h2 := r.gen.markedPrompt(16), r.gen.words(12)
		la, lb := r.gen.markedPrompt(6), r.gen.markedPrompt(24)
		hist := func(last string) []map[string]any {
			return []map[string]any{{"role": "user", "content": h1.Text}, {"role": "assistant", "content": h2}, {"role": "user", "content": last}}
		}
		if p.a, ok = r.ask(ctx, &c, a, fmt.Sprintf("key A, history %d, last turn %s", round+1, la.Markers[0]), chatRequest{Messages: hist(la.Text)}, h1, la); !ok {
			return c
		}
		if p.b, ok = r.ask(ctx, &c, b, fmt.Sprintf("key B, A's history %d, last turn %s", round+1, lb.Markers[0]), chatRequest{Messages: hist(lb.Text)}, h1, lb); !ok {
			return c
		}
		p.aW, p.bW = 6, 24
		r.compareUsage(&c, p)
	}
	if c.Verdict == "" && len(c.Evidence) > 0 {
		c.Verdict, c.Summary = VerdictFinding, "key B was billed key A's conversation: A's answer was served to B"
	}
	r.leakVerdict(&c, fmt.Sprintf("%d rounds of conversations sharing the last message or the history: B's answers are its own", multiTurnRounds))
	return c
}

// choices: A and B ask the same prompt with n=2 at once, streamed and not.
// A proxy that fans n>1 out into separate requests, or caches per
// choice, mixes the keys' choices.
func (r *run) choices(ctx context.Context) Check {
	c := Check{Name: nameChoices}
	if len(r.clients) < 2 {
		needTwoKeys(&c)
		return c
	}
	for _, plain := range []bool{false, true} {
		mp := r.gen.markedPrompt(cacheCheckWords)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, k := range r.clients[:2] {
			wg.Go(func() {
				cc := Check{Name: c.Name}
				label := fmt.Sprintf("key %s, n=2 (plain %v), markers %s", k.label, plain, mp.Markers[0])
				if _, ok := r.ask(ctx, &cc, k, label, chatRequest{Prompt: mp.Text, N: 2, Plain: plain}, mp); !ok {
					mu.Lock()
					c.Verdict, c.Summary, c.Needs = cc.Verdict, cc.Summary, cc.Needs
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if c.Verdict != "" {
			return c
		}
	}
	r.leakVerdict(&c, "the same prompt with n=2 from both keys at once, streamed and not: each key's choices are its own")
	return c
}

// streamMix: one key asks plainly, the other streamed, the same prompt,
// both ways round. A cache that stores one form and serves it (converted)
// as the other crosses keys here.
func (r *run) streamMix(ctx context.Context) Check {
	c := Check{Name: nameStreamMix}
	if len(r.clients) < 2 {
		needTwoKeys(&c)
		return c
	}
	a, b := r.clients[0], r.clients[1]
	for _, aPlain := range []bool{true, false} {
		mp := r.gen.markedPrompt(cacheCheckWords)
		if _, ok := r.ask(ctx, &c, a, fmt.Sprintf("key A (plain %v), markers %s", aPlain, mp.Markers[0]), chatRequest{Prompt: mp.Text, Plain: aPlain}, mp); !ok {
			return c
		}
		if _, ok := r.ask(ctx, &c, b, fmt.Sprintf("key B (plain %v), A's prompt", !aPlain), chatRequest{Prompt: mp.Text, Plain: !aPlain}, mp); !ok {
			return c
		}
	}
	r.leakVerdict(&c, "the same prompt plain from one key and streamed from the other, both ways: B's answers are its own")
	return c
}

// responsesAPI: A and B ask the same input of /v1/responses; then B asks
// for A's response by id, and to continue it (previous_response_id).
// Either answered with A's content, or accepted, is a finding.
func (r *run) responsesAPI(ctx context.Context) Check {
	c := Check{Name: nameResponses}
	if len(r.clients) < 2 {
		needTwoKeys(&c)
		return c
	}
	a, b := r.clients[0], r.clients[1]
	mp := r.gen.markedPrompt(cacheCheckWords)
	ra, ok := r.ask(ctx, &c, a, fmt.Sprintf("key A, Responses API, markers %s", mp.Markers[0]), chatRequest{Prompt: mp.Text, Responses: true, AnyStatus: true}, mp)
	if !ok {
		return c
	}
	if ra.Status == http.StatusNotFound || ra.Status == http.StatusMethodNotAllowed {
		c.Verdict, c.Summary = VerdictPass, fmt.Sprintf("no Responses API (%d): nothing to leak through it", ra.Status)
		return c
	}
	if ra.Status != http.StatusOK || ra.ID == "" {
		c.inconclusive(fmt.Sprintf("key A's Responses API request: %d %s %s", ra.Status, ra.ErrCode, ra.ErrMsg), "a working /v1/responses")
		return c
	}
	if _, ok := r.ask(ctx, &c, b, "key B, Responses API, A's input", chatRequest{Prompt: mp.Text, Responses: true}, mp); !ok {
		return c
	}
	st, body, err := b.get(ctx, "/responses/"+ra.ID)
	switch {
	case errors.Is(err, errBudget):
		c.inconclusive("stopped: request budget or duration spent", "a larger --budget")
		return c
	case err != nil:
		c.inconclusive("GET /responses/{A's id} with key B: "+err.Error(), "an endpoint that stays reachable")
		return c
	case st == http.StatusOK:
		c.evidence("GET /v1/responses/%s (key A's response) with key B: 200: %.200s", ra.ID, body)
		r.ev.mu.Lock()
		r.ev.byCheck[c.Name]++
		r.ev.lines = append(r.ev.lines, fmt.Sprintf("%s: LEAK: key B read key A's stored response %s", c.Name, ra.ID))
		r.ev.mu.Unlock()
	}
	cont, ok := r.ask(ctx, &c, b, "key B, continuing A's response", chatRequest{Prompt: "Go on.", Responses: true, AnyStatus: true, Extra: map[string]any{"previous_response_id": ra.ID}})
	if !ok {
		return c
	}
	if cont.Status == http.StatusOK {
		c.evidence("key B's request with previous_response_id %s (key A's) was answered 200: B continued A's conversation", ra.ID)
		r.ev.mu.Lock()
		r.ev.byCheck[c.Name]++
		r.ev.mu.Unlock()
	}
	r.leakVerdict(&c, fmt.Sprintf("the same input from both keys: own answers; A's response %s refused to B by id (%d) and as previous_response_id (%d)", ra.ID, st, cont.Status))
	return c
}

// tools: both keys send a conversation with the same tool call (same id,
// function and arguments) whose result carries their own markers. A cache
// of tool results, or of answers keyed on the call, crosses keys here.
func (r *run) tools(ctx context.Context) Check {
	c := Check{Name: nameTools}
	if len(r.clients) < 2 {
		needTwoKeys(&c)
		return c
	}
	tool := []map[string]any{{"type": "function", "function": map[string]any{
		"name": "lookup", "description": "Look up a record.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "string"}}},
	}}}
	q := "Look up record " + r.gen.words(2) + " and repeat it."
	for i, k := range r.clients[:2] {
		secret := r.gen.markedPrompt(12 + 12*i)
		msgs := []map[string]any{
			{"role": "user", "content": q},
			{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "lookup", "arguments": `{"id":"1"}`}}}},
			{"role": "tool", "tool_call_id": "call_1", "content": secret.Text},
		}
		res, ok := r.ask(ctx, &c, k, fmt.Sprintf("key %s, tool result with markers %s", k.label, secret.Markers[0]),
			chatRequest{Messages: msgs, AnyStatus: true, Extra: map[string]any{"tools": tool}}, secret)
		if !ok {
			return c
		}
		if res.Status != http.StatusOK {
			c.inconclusive(fmt.Sprintf("key %s's request with a tool result: %d %s %s", k.label, res.Status, res.ErrCode, res.ErrMsg), "an endpoint that takes tool results")
			return c
		}
	}
	r.leakVerdict(&c, "the same tool call from both keys with their own results: no foreign result in the answers")
	return c
}

// crossTalk: both keys open crossTalkStreams streams at once, in waves.
// A stream multiplexer that routes chunks by anything but the request
// mixes them: a chunk with another response's id, or another prompt's
// text. It can only mix streams that flow at the same time, and on a
// loaded endpoint (or probe machine) a wave's streams may run one after
// another: after crossTalkWaves waves the check goes on, up to
// crossTalkMaxWaves, until some wave had streams of both keys streaming
// at once.
func (r *run) crossTalk(ctx context.Context) Check {
	c := Check{Name: nameCrossTalk}
	var mu sync.Mutex
	done, overlapped, wave := 0, 0, 0
	for ; wave < crossTalkMaxWaves && (wave < crossTalkWaves || overlapped == 0); wave++ {
		var wg sync.WaitGroup
		var flows []streamFlow
		for ki, k := range r.clients {
			for s := range crossTalkStreams {
				mp := r.gen.markedPrompt(cacheCheckWords + 8*s)
				wg.Go(func() {
					cc := Check{Name: c.Name}
					sent := time.Now()
					res, ok := r.ask(ctx, &cc, k, fmt.Sprintf("key %s, stream %d of wave %d, markers %s", k.label, s+1, wave+1, mp.Markers[0]),
						chatRequest{Prompt: mp.Text, MaxTokens: crossTalkTokens}, mp)
					ended := time.Now()
					mu.Lock()
					defer mu.Unlock()
					if !ok && c.Verdict == "" {
						c.Verdict, c.Summary, c.Needs = cc.Verdict, cc.Summary, cc.Needs
					}
					if ok && res.Complete {
						done++
						flows = append(flows, streamFlow{key: ki, first: sent.Add(res.TTFT), end: ended})
					}
				})
			}
		}
		wg.Wait()
		if c.Verdict != "" {
			break
		}
		overlapped += overlappingPairs(flows)
	}
	c.Data = map[string]any{"waves": wave, "completed": done, "overlapping_pairs": overlapped}
	if c.Verdict == "" && done == 0 {
		c.inconclusive("no stream completed", "an endpoint that streams")
	}
	who := "both keys"
	if len(r.clients) < 2 {
		who = "one key (cross-tenant cross-talk not tested)"
	}
	pass := fmt.Sprintf("%d concurrent streams from %s completed in %d waves, %d pairs of them streaming at the same time: every chunk belonged to its own stream", done, who, wave, overlapped)
	if overlapped == 0 {
		pass = fmt.Sprintf("%d streams from %s completed in %d waves: every chunk belonged to its own stream, but no two streamed at the same time (the endpoint ran them one after another)", done, who, wave)
	}
	r.leakVerdict(&c, pass)
	return c
}

// streamFlow is when one stream's content flowed: from its first content
// to its end.
type streamFlow struct {
	key        int
	first, end time.Time
}

// overlappingPairs counts the pairs of flows of different keys (of any
// two flows with one key) whose content flowed at the same time.
func overlappingPairs(flows []streamFlow) int {
	keys := map[int]bool{}
	for _, f := range flows {
		keys[f.key] = true
	}
	n := 0
	for i, a := range flows {
		for _, b := range flows[i+1:] {
			if (a.key != b.key || len(keys) == 1) && a.first.Before(b.end) && b.first.Before(a.end) {
				n++
			}
		}
	}
	return n
}

// cachePair is B's cached_tokens for a prompt sharing A's text (cross)
// and for a fresh prompt of the same shape (control).
type cachePair struct {
	check          string
	control, cross int
}

// cachedBlock is the least extra cached_tokens read as a hit on A's
// text: one block of a paged KV cache.
const cachedBlock = 16

// cachedAcross judges the cached_tokens B's answers reported, from the
// pairs the identical-prompt and shared-prefix checks collected.
func (r *run) cachedAcross() Check {
	c := Check{Name: nameCached}
	if len(r.clients) < 2 {
		needTwoKeys(&c)
		return c
	}
	r.cacheMu.Lock()
	pairs := append([]cachePair(nil), r.cachePairs...)
	r.cacheMu.Unlock()
	var reported, hits int
	for _, p := range pairs {
		if p.cross < 0 || p.control < 0 {
			continue
		}
		reported++
		if p.cross >= p.control+cachedBlock {
			hits++
			c.evidence("%s: key B's answer on key A's text reports %d cached tokens, a fresh prompt of B's %d", p.check, p.cross, p.control)
		}
	}
	c.Data = map[string]any{"pairs": len(pairs), "reported": reported, "hits": hits}
	switch {
	case len(pairs) == 0:
		c.inconclusive("no pair of answers to compare (the identical-prompt and shared-prefix checks did not run)", "--checks caches")
	case hits > 0:
		c.Verdict = VerdictFinding
		c.Summary = fmt.Sprintf("%d of %d answers to key B on key A's text report cached tokens a fresh prompt does not: B was served from A's cache", hits, reported)
	case reported == 0:
		c.Verdict, c.Summary = VerdictPass, "the endpoint reports no cached_tokens: no channel through it"
	default:
		c.Verdict = VerdictPass
		c.Summary = fmt.Sprintf("%d answers to key B on key A's text report no more cached tokens than a fresh prompt of B's", reported)
	}
	return c
}

// get sends a GET with c's key and returns the status and (the start of)
// the body.
func (c *client) get(ctx context.Context, path string) (int, string, error) {
	resp, err := c.do(ctx, path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	_, _ = io.Copy(&sb, io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, sb.String(), nil
}
