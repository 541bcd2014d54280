package probe

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// steeringFields are request fields through which some engines let a
// client choose internals: cache salts, KV-transfer routing, disaggregation
// bootstrap, scheduling. Accepting one from an ordinary key is a risk, not
// a proof of a leak: the endpoint may also ignore it.
var steeringFields = map[string]any{
	"cache_salt":         "probe-salt",
	"kv_transfer_params": map[string]any{"do_remote_prefill": true, "remote_host": "127.0.0.1"},
	"bootstrap_room":     1,
	"bootstrap_host":     "127.0.0.1",
	"bootstrap_port":     8998,
	"priority":           1 << 30,
	"request_id":         "probe-request-id",
	"data_parallel_rank": 0,
	"lora_request":       map[string]any{"lora_name": "probe"},
}

// steering sends one small request per client-steered field with key A.
func (r *run) steering(ctx context.Context) Check {
	c := Check{Name: nameSteering, Data: map[string]any{}}
	names := make([]string, 0, len(steeringFields))
	for k := range steeringFields {
		names = append(names, k)
	}
	sort.Strings(names)
	var accepted []string
	for _, name := range names {
		res, _, err := r.send(ctx, r.clients[0], c.Name, "key A, steering field "+name, chatRequest{
			Model: r.model, Prompt: "Say hi.", MaxTokens: 2,
			Extra: map[string]any{name: steeringFields[name]},
		})
		if err != nil {
			c.inconclusive(fmt.Sprintf("stopped at %s: %v", name, err), "an endpoint that stays reachable and a large enough --budget")
			return c
		}
		outcome := fmt.Sprintf("%d %s", res.Status, res.ErrCode)
		c.Data[name] = outcome
		if res.Status == http.StatusOK {
			accepted = append(accepted, name)
			c.evidence("%s: accepted (200): the endpoint may act on it", name)
		}
	}
	if len(accepted) == 0 {
		c.Verdict, c.Summary = VerdictPass, fmt.Sprintf("all %d fields refused", len(names))
		return c
	}
	c.Verdict = VerdictWarning
	c.Summary = fmt.Sprintf("%d of %d accepted from an ordinary key: %s (a risk, not a proof of a leak)",
		len(accepted), len(names), strings.Join(accepted, ", "))
	return c
}
