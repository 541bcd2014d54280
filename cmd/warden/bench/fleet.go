package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warden-ai/warden/config"
)

// FleetOptions configures RunFleet; zero fields take the defaults.
type FleetOptions struct {
	// Prefill and Decode are the fleet's workers (default 2 and 2); with
	// Both > 0 the fleet is that many both workers instead.
	Prefill, Decode, Both int
	// Conversations run at once, each Turns turns of about TurnWords new
	// user words, answered with AnswerTokens tokens.
	Conversations, Turns, TurnWords, AnswerTokens int
	// Threads is each worker's compute threads (default 1).
	Threads int
	Logger  *slog.Logger
}

// FleetTally is what one routing policy did with the conversations.
type FleetTally struct {
	Routing config.Routing
	// Requests, and their prompt and cached (usage cached_tokens) tokens.
	Requests             int
	PromptTokens, Cached int64
	// TTFT is the mean time to first token over all turns after the
	// first (the turns a cache can serve), LastTTFT over the last turns.
	TTFT, LastTTFT time.Duration
	// Load is the requests each worker served (Generate on decode and
	// both workers, Prefill on prefill workers), by worker ID.
	Load map[string]int64
}

// HitRatio is Cached / PromptTokens.
func (t FleetTally) HitRatio() float64 {
	if t.PromptTokens == 0 {
		return 0
	}
	return float64(t.Cached) / float64(t.PromptTokens)
}

// Spread is the largest max/min load among workers of one role (role
// named by the worker ID), 0 when a worker served nothing.
func (t FleetTally) Spread() float64 {
	byRole := map[string][]int64{}
	for id, n := range t.Load {
		role := id[:strings.LastIndex(id, "-")]
		byRole[role] = append(byRole[role], n)
	}
	worst := 1.0
	for _, ns := range byRole {
		lo, hi := slices.Min(ns), slices.Max(ns)
		if lo == 0 {
			return 0
		}
		worst = max(worst, float64(hi)/float64(lo))
	}
	return worst
}

// FleetReport compares cache-aware routing with round robin on the same
// conversations, each on a fresh fleet.
type FleetReport struct {
	Options         FleetOptions
	Aware, RoundRob FleetTally
}

// WriteTable prints the report as a Markdown table.
func (r FleetReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| routing | requests | prompt tokens | cached | hit ratio | mean TTFT (turns 2+) | mean TTFT (last turn) | load by worker | max/min |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range []FleetTally{r.Aware, r.RoundRob} {
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range t.Load {
				if !yield(id) {
					return
				}
			}
		})
		var load []string
		for _, id := range ids {
			load = append(load, fmt.Sprintf("%s %d", strings.TrimPrefix(id, workerID+"-"), t.Load[id]))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.1f%% | %s | %s | %s | %.2f |\n", t.Routing, t.Requests, t.PromptTokens, t.Cached,
			100*t.HitRatio(), ms(t.TTFT), ms(t.LastTTFT), strings.Join(load, ", "), t.Spread())
	}
}

// RunFleet runs the same multi-turn conversations on a fresh fleet under
// each routing policy (cache_aware, then round_robin) and reports hit
// ratio, time to first token and the load of each worker. Every
// conversation's answers must be identical under both policies (greedy
// decoding; the cache does not change a token).
func RunFleet(ctx context.Context, o FleetOptions) (FleetReport, error) {
	if o.Both == 0 && o.Prefill == 0 && o.Decode == 0 {
		o.Prefill, o.Decode = 2, 2
	}
	if o.Conversations <= 0 {
		o.Conversations = 8
	}
	if o.Turns <= 0 {
		o.Turns = 8
	}
	if o.TurnWords <= 0 {
		o.TurnWords = 60
	}
	if o.AnswerTokens <= 0 {
		o.AnswerTokens = 8
	}
	if o.Threads <= 0 {
		o.Threads = 1
	}
	rep := FleetReport{Options: o}
	var roles []config.Role
	for range o.Both {
		roles = append(roles, config.RoleBoth)
	}
	if o.Both == 0 {
		for range o.Prefill {
			roles = append(roles, config.RolePrefill)
		}
		for range o.Decode {
			roles = append(roles, config.RoleDecode)
		}
	}
	var answers [][]string
	for _, policy := range []config.Routing{config.RoutingCacheAware, config.RoutingRoundRobin} {
		t, got, err := runFleet(ctx, o, roles, policy)
		if err != nil {
			return rep, fmt.Errorf("bench: fleet, %s routing: %w", policy, err)
		}
		if answers != nil && !slices.EqualFunc(answers, got, slices.Equal) {
			return rep, fmt.Errorf("bench: fleet: the answers differ between cache-aware and round-robin routing")
		}
		answers = got
		if policy == config.RoutingCacheAware {
			rep.Aware = t
		} else {
			rep.RoundRob = t
		}
	}
	return rep, nil
}

// runFleet starts a fleet with routing policy, runs the conversations
// concurrently and returns the tally and every conversation's answers.
func runFleet(ctx context.Context, o FleetOptions, roles []config.Role, policy config.Routing) (FleetTally, [][]string, error) {
	t := FleetTally{Routing: policy, Load: map[string]int64{}}
	transfer := config.TransferBackend("")
	if o.Both == 0 {
		transfer = config.TransferTCP
	}
	c, err := startCluster(ctx, clusterOptions{threads: o.Threads, logger: o.Logger, transfer: transfer, roles: roles, routing: policy})
	if err != nil {
		return t, nil, err
	}
	defer c.close()
	gw := c.gateways[0]
	answers := make([][]string, o.Conversations)
	turns := make([][]fleetTurn, o.Conversations)
	errs := make([]error, o.Conversations)
	var wg sync.WaitGroup
	for i := range o.Conversations {
		wg.Go(func() { turns[i], answers[i], errs[i] = converse(ctx, gw, i, o) })
	}
	wg.Wait()
	var sum, last time.Duration
	var nSum int
	for i, ts := range turns {
		if errs[i] != nil {
			return t, nil, errs[i]
		}
		for j, tr := range ts {
			t.Requests++
			t.PromptTokens += tr.prompt
			t.Cached += tr.cached
			if j > 0 {
				sum += tr.ttft
				nSum++
			}
			if j == len(ts)-1 {
				last += tr.ttft
			}
		}
	}
	if nSum > 0 {
		t.TTFT = sum / time.Duration(nSum)
	}
	t.LastTTFT = last / time.Duration(o.Conversations)
	for id, reg := range c.workerMetrics {
		fams, err := reg.Gather()
		if err != nil {
			return t, nil, err
		}
		for _, f := range fams {
			if f.GetName() != "warden_worker_requests_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "rpc" && (strings.HasSuffix(l.GetValue(), "Generate") || strings.HasSuffix(l.GetValue(), "Prefill")) {
						t.Load[id] += int64(m.GetCounter().GetValue())
					}
				}
			}
		}
	}
	return t, answers, nil
}

// fleetTurn is one measured turn.
type fleetTurn struct {
	ttft           time.Duration
	prompt, cached int64
}

// fleetWords are the words the conversations are made of.
var fleetWords = strings.Fields("the a quick brown fox jumps over lazy dog pack my box with five dozen liquor jugs " +
	"how vexingly daft zebras sphinx of black quartz judge vow waltz bad nymph for jived rock")

// converse runs conversation i: every turn adds about TurnWords user
// words (seeded by i) and re-sends the whole conversation, streaming.
func converse(ctx context.Context, gw *gatewayNode, i int, o FleetOptions) ([]fleetTurn, []string, error) {
	src := rand.New(rand.NewPCG(uint64(i), 42))
	var msgs []map[string]string
	var turns []fleetTurn
	var answers []string
	for range o.Turns {
		words := make([]string, o.TurnWords)
		for k := range words {
			words[k] = fleetWords[src.IntN(len(fleetWords))]
		}
		msgs = append(msgs, map[string]string{"role": "user", "content": strings.Join(words, " ")})
		body, _ := json.Marshal(map[string]any{
			"model": modelName, "messages": msgs, "max_tokens": o.AnswerTokens, "temperature": 0,
			"stream": true, "stream_options": map[string]any{"include_usage": true},
		})
		tr, answer, err := gw.streamChat(ctx, body)
		if err != nil {
			return nil, nil, err
		}
		turns = append(turns, tr)
		answers = append(answers, answer)
		msgs = append(msgs, map[string]string{"role": "assistant", "content": answer})
	}
	return turns, answers, nil
}

// streamChat posts a streaming chat completion and returns its time to
// first token (the first content or finish chunk), usage and text.
func (n *gatewayNode) streamChat(ctx context.Context, body []byte) (fleetTurn, string, error) {
	var tr fleetTurn
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return tr, "", err
	}
	req.Header.Set("Authorization", "Bearer "+n.key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := n.http.Do(req)
	if err != nil {
		return tr, "", fmt.Errorf("bench: gateway: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return tr, "", fmt.Errorf("bench: gateway: HTTP %d: %.300s", resp.StatusCode, data)
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxAnswerBytes)
	done := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int64 `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return tr, "", fmt.Errorf("bench: decoding a chunk: %w", err)
		}
		if ch.Error != nil {
			return tr, "", fmt.Errorf("bench: the stream failed: %s", ch.Error)
		}
		for _, c := range ch.Choices {
			if tr.ttft == 0 && (c.Delta.Content != "" || c.FinishReason != nil) {
				tr.ttft = time.Since(start)
			}
			text.WriteString(c.Delta.Content)
		}
		if ch.Usage != nil {
			tr.prompt, tr.cached = ch.Usage.PromptTokens, ch.Usage.PromptTokensDetails.CachedTokens
		}
	}
	if err := sc.Err(); err != nil || !done {
		return tr, "", fmt.Errorf("bench: the stream ended early: %v", err)
	}
	return tr, text.String(), nil
}
