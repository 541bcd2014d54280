package tokenize

import (
	"testing"

	"github.com/warden-ai/warden/gateway/internal/api"
)

// checkErr asserts a decoder's rejection is a 400 in the error envelope.
func checkErr(t *testing.T, e *api.Error) {
	t.Helper()
	if e.Status != 400 || e.Type == "" || e.Message == "" {
		t.Fatalf("rejection %+v", e)
	}
}

func FuzzDecodeTokenize(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hi"}`, `{"model":"m","prompt":["hi"],"add_special_tokens":false}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"add_generation_prompt":false}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"add_special_tokens":true}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"model":"m","prompt":"x","chat_template_kwargs":{}}`, `{"model":"m","prompt":"x","return_token_strs":true}`,
		`{"model":"m","prompt":[1,2]}`, `{"model":"m"}`, `{}`, `[]`, `null`, ``, "{\"model\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		tr, e := decodeTokenize(body)
		if e != nil {
			checkErr(t, e)
			return
		}
		r := tr.req
		if r.Model == "" || (r.Kind == api.KindChat) == (len(r.Messages) == 0) || (r.Kind == api.KindCompletion && r.Prompt == "") {
			t.Fatalf("accepted an incomplete input %+v", r)
		}
		if r.Kind == api.KindChat && tr.special {
			t.Fatal("add_special_tokens accepted with messages")
		}
	})
}

func FuzzDecodeDetokenize(f *testing.F) {
	for _, s := range []string{`{"model":"m","tokens":[1,2,3]}`, `{"model":"m","tokens":[]}`, `{"model":"m","tokens":[-1]}`,
		`{"model":"m","tokens":[1.5]}`, `{"model":"m","tokens":[2147483648]}`, `{"model":"m","tokens":"1"}`, `{"model":1,"tokens":[1]}`,
		`{"tokens":[1]}`, `{"model":"m"}`, `[]`, ``, `{"model":"m","tokens":[1e3]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		model, ids, e := decodeDetokenize(body)
		if e != nil {
			checkErr(t, e)
			return
		}
		if model == "" {
			t.Fatal("accepted without a model")
		}
		for _, id := range ids {
			if id < 0 {
				t.Fatalf("negative id %d accepted", id)
			}
		}
	})
}
