package api

import "testing"

// FuzzDecodeResponsesRequest: the /v1/responses decoder keeps the same
// contract as the others (exactly one of a valid chat request and a 400)
// on any body, and its params agree with the request.
func FuzzDecodeResponsesRequest(f *testing.F) {
	for _, s := range append(fuzzSeeds(),
		`{"model":"tiny","input":"hi","instructions":"be brief","max_output_tokens":5,"stream":true,"store":true}`,
		`{"model":"tiny","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"message","role":"assistant","content":"b"}]}`,
		`{"model":"tiny","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`,
		`{"model":"tiny","input":[{"role":"assistant","content":"a"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}],"tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"}}`,
		`{"model":"tiny","input":"hi","previous_response_id":"resp_1","text":{"format":{"type":"json_schema"}}}`,
		`{"model":"tiny","input":"hi","text":{"format":{"type":"text"},"verbosity":"medium"},"reasoning":{},"include":[]}`,
		`{"model":"tiny","input":"hi","include":["message.output_text.logprobs"],"top_logprobs":4}`,
		`{"model":"tiny","input":"hi","include":["reasoning.encrypted_content"]}`,
		`{"model":"tiny","input":"hi","previous_response_id":"resp_abc-1_2","store":false}`,
		`{"model":"tiny","input":"hi","previous_response_id":"resp_","store":null}`,
		`{"model":"tiny","input":"hi","reasoning":{"effort":"low","summary":"auto"}}`,
	) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, p, e := decodeResponsesRequest(body, DefaultMaxTokensLimit, nil, nil)
		checkDecodeResult(t, KindChat, req, e)
		if (p == nil) != (req == nil) {
			t.Fatalf("params %v with request %v", p, req)
		}
		if req != nil && (req.MaxTokens != p.maxOutput || req.IncludeUsage) {
			t.Fatalf("request %+v, params %+v", req, p)
		}
		if p != nil && p.previousID != "" && !validResponseID(p.previousID) {
			t.Fatalf("accepted previous_response_id %q", p.previousID)
		}
	})
}
