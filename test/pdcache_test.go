package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/internal/tokenizer"
	"github.com/warden-ai/warden/test/harness"
)

// cacheRequest is one request of the P/D cache test: chat messages or a
// completion prompt.
type cacheRequest struct {
	msgs   []tokenizer.Message
	prompt string
}

// cacheRequests builds the test's requests for one tenant: a four-turn
// conversation (each turn re-sends the history with the answers the
// cluster gave), questions behind a shared system prompt, and completion
// prompts that are prefixes of one text ending one token before, at and
// one after page boundaries. ask runs one request and returns its text.
func cacheRequests(t *testing.T, ref *harness.Reference, ask func(cacheRequest) string) (n int) {
	t.Helper()
	system := "You are a terse assistant for a shipping company. Answer in one short sentence, quoting the tracking rules when asked."
	conv := []tokenizer.Message{{Role: "system", Content: system}}
	for i, q := range []string{"Where is parcel 17?", "And parcel 18, sent the same day?", "Why the delay?", "Thanks. Anything else?"} {
		conv = append(conv, tokenizer.Message{Role: "user", Content: q})
		answer := ask(cacheRequest{msgs: append([]tokenizer.Message(nil), conv...)})
		conv = append(conv, tokenizer.Message{Role: "assistant", Content: answer})
		n = i + 1
	}
	shared := "Rules: parcels ship on weekdays; tracking updates every four hours; delays over two days are refunded."
	for _, q := range []string{"Can I ship on Sunday?", "How often is tracking updated?", "When am I refunded?"} {
		ask(cacheRequest{msgs: []tokenizer.Message{{Role: "system", Content: shared}, {Role: "user", Content: q}}})
		n++
	}
	base := strings.Repeat("the quick brown fox jumps over the lazy dog and keeps running ", 6)
	for _, want := range []int{2*16 - 1, 2 * 16, 2*16 + 1, 3 * 16, 3*16 + 1, 3 * 16} {
		text := ""
		for end := 1; end <= len(base); end++ {
			ids, err := ref.CompletionPrompt(base[:end])
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) == want {
				text = base[:end]
				break
			}
		}
		if text == "" {
			t.Fatalf("no prefix of the base text is %d tokens", want)
		}
		ask(cacheRequest{prompt: text})
		n++
	}
	return n
}

// TestPrefillDecodePrefixCache: over P/D with tcp and with shm, a tenant's
// multi-turn conversation, shared system prompts and prompts ending at
// page boundaries ±1 get exactly the engine's answers (text, finish,
// usage) with the decode worker's cache hits; decode receives only the
// pages it lacked (received bytes = (prompt pages − held pages) × page
// size, below a tenant with the cache off, which transfers every page);
// a second tenant sending the same requests gets the same number of hits
// (its own earlier prompts only: nothing of the first tenant's) and the
// pool then holds two copies of every cached page.
func TestPrefillDecodePrefixCache(t *testing.T) {
	tiny := env.Models[harness.ModelTiny]
	models, workers := harness.PDOverTCPAndSHM(harness.ModelTiny, modelShm, tiny)
	c := harness.Start(t, env, harness.Options{Workers: workers, Models: models})
	ref := reference(t, harness.ModelTiny)
	ctx, cancel := context.WithTimeout(context.Background(), harness.WaitTimeout)
	defer cancel()
	if _, err := c.Gateway().Admin.CreateTenant(ctx, adminclient.TenantCreate{ID: "nocache", PrefixCache: cachekey.ModeOff}); err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{harness.ModelTiny, modelShm} {
		t.Run(model, func(t *testing.T) {
			decode := c.Worker(config.RoleDecode, model)
			type pass struct{ hits, received, cached, pages float64 }
			run := func(tenantID string) pass {
				client := c.Gateway().OpenAI(c.NewKey(t, tenantID))
				before := scrape(t, decode.MetricsURL)
				var pages float64
				cacheRequests(t, ref, func(r cacheRequest) string {
					var (
						want  harness.Output
						text  string
						usage openai.CompletionUsage
						fin   string
						err   error
						what  string
					)
					if r.msgs != nil {
						what = fmt.Sprintf("%s chat of %d messages", tenantID, len(r.msgs))
						if want, err = ref.Chat(ctx, r.msgs, refMaxTokens); err != nil {
							t.Fatal(err)
						}
						var ms []openai.ChatCompletionMessageParamUnion
						for _, m := range r.msgs {
							switch m.Role {
							case "system":
								ms = append(ms, openai.SystemMessage(m.Content))
							case "user":
								ms = append(ms, openai.UserMessage(m.Content))
							default:
								ms = append(ms, openai.AssistantMessage(m.Content))
							}
						}
						resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
							Model: model, Messages: ms, MaxTokens: openai.Int(refMaxTokens), Temperature: openai.Float(0),
						})
						if err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						text, fin, usage = resp.Choices[0].Message.Content, string(resp.Choices[0].FinishReason), resp.Usage
					} else {
						what = fmt.Sprintf("%s completion of %q", tenantID, r.prompt)
						if want, err = ref.Completion(ctx, r.prompt, refMaxTokens); err != nil {
							t.Fatal(err)
						}
						resp, err := client.Completions.New(ctx, openai.CompletionNewParams{
							Model: openai.CompletionNewParamsModel(model), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(r.prompt)},
							MaxTokens: openai.Int(refMaxTokens), Temperature: openai.Float(0),
						})
						if err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						text, fin, usage = resp.Choices[0].Text, string(resp.Choices[0].FinishReason), resp.Usage
					}
					checkOutput(t, what, 0, text, fin, usage, want)
					pages += float64((want.PromptTokens + 15) / 16)
					return text
				})
				c.WaitPoolsFree(t)
				after := scrape(t, decode.MetricsURL)
				return pass{
					hits:     after["warden_kv_prefix_hit_pages_total"] - before["warden_kv_prefix_hit_pages_total"],
					received: after[`warden_transfer_bytes_total{direction="received"}`] - before[`warden_transfer_bytes_total{direction="received"}`],
					cached:   after[`warden_kv_pages{state="cached"}`],
					pages:    pages,
				}
			}
			off := run("nocache")
			if off.hits != 0 || off.cached != 0 || off.received == 0 {
				t.Fatalf("tenant with the cache off: %+v, want no hit, nothing cached", off)
			}
			pageBytes := off.received / off.pages
			a := run("cache-a")
			b := run("cache-b")
			t.Logf("%s: %.0f prompt pages per pass; cache off: %.0f pages received; tenant a: %.0f held, %.0f received; tenant b: %.0f held, %.0f received; %.0f pages cached",
				model, off.pages, off.received/pageBytes, a.hits, a.received/pageBytes, b.hits, b.received/pageBytes, b.cached)
			if a.hits == 0 || a.received >= off.received || a.received != (a.pages-a.hits)*pageBytes {
				t.Errorf("tenant a: %+v; want hits and only the pages decode lacked received (%.0f bytes a page)", a, pageBytes)
			}
			if b.hits != a.hits || b.received != a.received || b.pages != a.pages {
				t.Errorf("tenant b: %+v, tenant a %+v: the second tenant must hit only its own pages", b, a)
			}
			if a.cached == 0 || b.cached != 2*a.cached {
				t.Errorf("cached pages %.0f after tenant a, %.0f after tenant b: want a copy per tenant", a.cached, b.cached)
			}
		})
	}
}

// scrape reads a worker's Prometheus text metrics: series (name and
// labels as printed) → value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
