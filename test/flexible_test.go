package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/test/harness"
)

// testNoMaxTokens: requests without max_tokens from a tenant whose token
// rate is far below the context, in a burst over both gateways, are
// admitted against what the tenant can still spend: together they never
// use more than the limit (plus what refilled during the burst), each
// admitted answer is the reference model's text cut at its allowance with
// finish_reason "length", and the others wait (429), never 400.
func testNoMaxTokens(t *testing.T, c *harness.Cluster) {
	const tpm, n = 60, 6
	key := newTenant(t, c, 0, "no-max-tokens", 0, tenant.Limits{TokensPerMinute: tpm}).Key
	body := map[string]any{"model": harness.ModelEndless, "prompt": "Hello", "temperature": 0}
	start := time.Now()
	answers := burst(t, c, n, key, "/v1/completions", body)
	span := time.Since(start)
	used, admitted := 0, 0
	for _, a := range answers {
		if a.status != http.StatusOK {
			checkDenied(t, a, http.StatusTooManyRequests, "rate_limit_exceeded")
			continue
		}
		var out completionOut
		if err := json.Unmarshal(a.body, &out); err != nil || len(out.Choices) != 1 {
			t.Fatalf("%v: %v", a, err)
		}
		want, err := reference(t, harness.ModelEndless).Completion(context.Background(), "Hello", out.Usage.CompletionTokens)
		if err != nil {
			t.Fatal(err)
		}
		if out.Choices[0].FinishReason != "length" || out.Choices[0].Text != want.Text || out.Usage.PromptTokens != want.PromptTokens {
			t.Errorf("%v: want the reference's %d tokens %q, finish length", a, out.Usage.CompletionTokens, want.Text)
		}
		used += out.Usage.PromptTokens + out.Usage.CompletionTokens
		admitted++
	}
	refill := int(span.Seconds()*tpm/60) + 1
	if admitted == 0 || used < tpm || used > tpm+refill {
		t.Errorf("%d of %d requests admitted using %d tokens; want at least one, using the %d of the limit (+%d refilled), never more",
			admitted, n, used, tpm, refill)
	}
	t.Logf("tokens per minute %d, %d requests without max_tokens over 2 gateways: %d admitted, %d tokens used in %v",
		tpm, n, admitted, used, span)
}
