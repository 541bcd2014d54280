package errenvelope

import (
	"encoding/json"
	"testing"
)

func TestNewSendsNullForEmptyParamAndCode(t *testing.T) {
	b, err := json.Marshal(New("no such model", "invalid_request_error", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"error":{"message":"no such model","type":"invalid_request_error","param":null,"code":null}}`
	if string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	body, err := Decode(b)
	if err != nil || body.CodeOrEmpty() != "" || body.ParamOrEmpty() != "" || body.Message != "no such model" {
		t.Fatalf("Decode: %+v, %v", body, err)
	}
}

func TestRoundTrip(t *testing.T) {
	b, _ := json.Marshal(New("too long", "invalid_request_error", "messages", "context_length_exceeded"))
	body, err := Decode(b)
	if err != nil || body.CodeOrEmpty() != "context_length_exceeded" || body.ParamOrEmpty() != "messages" || body.Type != "invalid_request_error" {
		t.Fatalf("Decode: %+v, %v", body, err)
	}
}

func TestDecodeRefusesWhatIsNotAnEnvelope(t *testing.T) {
	for _, in := range []string{``, `null`, `{}`, `{"error": null}`, `{"error": "x"}`, `[1]`, `<html>`} {
		if b, err := Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%q) = %+v, want an error", in, b)
		}
	}
}

// FuzzDecode: Decode never panics, and what it accepts survives a
// re-encoding unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"error":{"message":"m","type":"t","param":null,"code":"c"}}`, `{"error":{}}`, `{"error":{"code":1}}`, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Decode(data)
		if err != nil {
			return
		}
		out, err := json.Marshal(New(b.Message, b.Type, b.ParamOrEmpty(), b.CodeOrEmpty()))
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(out)
		if err != nil || again.Message != b.Message || again.Type != b.Type || again.CodeOrEmpty() != b.CodeOrEmpty() || again.ParamOrEmpty() != b.ParamOrEmpty() {
			t.Fatalf("re-encoded %s decodes to %+v, %v", out, again, err)
		}
	})
}
