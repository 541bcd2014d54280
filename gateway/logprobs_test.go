package gateway

import (
	"strings"
	"testing"

	"github.com/warden-ai/warden/internal/controlpb"
)

// TestTokenLogprobs: token texts (bytes: for a partial character), the
// P/D first token's entry put first, and the worker's entries checked.
func TestTokenLogprobs(t *testing.T) {
	tok := presetTokenizer(t)
	ids := byteTokens("é!") // 0xc3 0xa9 '!'
	entry := func(lp float64, top ...int32) *controlpb.LogprobsToken {
		e := &controlpb.LogprobsToken{Logprob: lp, TopIds: top}
		for range top {
			e.TopLogprobs = append(e.TopLogprobs, lp)
		}
		return e
	}
	got, err := tokenLogprobs(tok, ids, []*controlpb.LogprobsToken{entry(-2, 0xa9), entry(-3)}, entry(-1, 0xc3, '!'), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Token != `bytes:\xc3` || got[0].Logprob != -1 || len(got[0].Top) != 2 ||
		got[0].Top[1].Token != "!" || got[1].Token != `bytes:\xa9` || string(got[1].Bytes) != "\xa9" || got[2].Token != "!" {
		t.Fatalf("got %+v", got)
	}
	for _, tc := range []struct {
		name string
		lps  []*controlpb.LogprobsToken
		top  int
		want string
	}{
		{"one entry missing", []*controlpb.LogprobsToken{entry(-1), entry(-1)}, 0, "2 logprobs for 3 tokens"},
		{"positive", []*controlpb.LogprobsToken{entry(-1), entry(0.5), entry(-1)}, 0, "logprob 0.5"},
		{"too many alternatives", []*controlpb.LogprobsToken{entry(-1, 1, 2), entry(-1), entry(-1)}, 1, "2 alternatives"},
		{"unknown alternative", []*controlpb.LogprobsToken{entry(-1, 99999), entry(-1), entry(-1)}, 1, "unknown token"},
	} {
		if _, err := tokenLogprobs(tok, ids, tc.lps, nil, tc.top); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}
