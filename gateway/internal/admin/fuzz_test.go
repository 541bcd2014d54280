package admin

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
)

// FuzzDecodeJSON feeds arbitrary bytes to the strict decoder of every
// admin request body. It must never panic; it either fails with a 4xx
// envelope or yields a value that survives a round trip unchanged and
// whose JSON has no member the decoder would have refused.
func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `"x"`, `{"id":"acme"}`,
		`{"id":"acme","name":"Acme","weight":3,"disabled":true,"limits":{"requests_per_minute":60,"allowed_models":["tiny"],"budget_period":"day"}}`,
		`{"name":null,"weight":2,"limits":{"max_concurrent":0,"allowed_models":[]}}`,
		`{"model":"tiny","max_context":4096,"max_output_tokens":512,"allowed_tenants":["a","b"]}`,
		`{"limits":{"rpm":1}}`, `{"ID":"x"}`, `{"id":1}`, `{"weight":1e400}`, `{"id":"a"} {}`,
		"{\"id\":\"\xff\"}", `{"limits":[{"x":1}]}`, `{"allowed_tenants":[{"a":1}]}`, `{"a":{"b":{"c":[1,2,{"d":null}]}}}`,
		`{"name":"\u0000\ud800"}`, `  {"id" : "x" }  `, `{"target":"tiny"}`, `{"target":["x"]}`,
	} {
		f.Add([]byte(seed))
	}
	targets := []func() any{
		func() any { return new(adminclient.TenantCreate) },
		func() any { return new(adminclient.TenantPatch) },
		func() any { return new(adminclient.KeyCreate) },
		func() any { return new(tenant.ModelLimits) },
		func() any { return new(adminclient.AliasSet) },
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, newTarget := range targets {
			for _, allowEmpty := range []bool{false, true} {
				v := newTarget()
				e := decodeJSON(data, v, allowEmpty)
				if e != nil {
					if e.Status != http.StatusBadRequest || e.Code == "" || e.Message == "" || !utf8.ValidString(e.Message) {
						t.Fatalf("%T: bad error %+v for %q", v, e, data)
					}
					if e.Code == adminclient.CodeUnknownField && e.Param == "" {
						t.Fatalf("%T: unknown field without its name for %q", v, data)
					}
					continue
				}
				// Accepted: the value re-encodes into a body the decoder
				// accepts, and from there round trips unchanged (the first
				// trip may normalise, e.g. [] into an omitted field).
				enc := roundTrip(t, v, newTarget)
				if enc2 := roundTrip(t, decodeAgain(t, enc, newTarget), newTarget); !bytes.Equal(enc, enc2) {
					t.Fatalf("%T: round trip changed %s into %s", v, enc, enc2)
				}
			}
		}
	})
}

// roundTrip encodes v, decodes it into a fresh value and returns that
// value's encoding.
func roundTrip(t *testing.T, v any, newTarget func() any) []byte {
	t.Helper()
	enc, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%T: marshal accepted value: %v", v, err)
	}
	out, err := json.Marshal(decodeAgain(t, enc, newTarget))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decodeAgain(t *testing.T, enc []byte, newTarget func() any) any {
	t.Helper()
	v := newTarget()
	if e := decodeJSON(enc, v, false); e != nil {
		t.Fatalf("%T: re-decoding %s failed: %+v", v, enc, e)
	}
	return v
}

func TestUnknownFieldPaths(t *testing.T) {
	for _, tc := range []struct {
		body string
		v    any
		want string
	}{
		{`{"id":"a","limits":{"budget":1,"zzz":2}}`, new(adminclient.TenantCreate), "limits.zzz"},
		{`{"limits":{"allowed_models":["a"]},"x":1}`, new(adminclient.TenantPatch), "x"},
		{`{"b":1,"a":2}`, new(adminclient.KeyCreate), "b"}, // document order, not sorted
		{`{"allowed_tenants":["a"],"model":"m"}`, new(tenant.ModelLimits), ""},
		{`{"id":"a","limits":null}`, new(adminclient.TenantCreate), ""},
	} {
		if got := unknownField([]byte(tc.body), reflect.TypeOf(tc.v)); got != tc.want {
			t.Errorf("%s into %T: %q, want %q", tc.body, tc.v, got, tc.want)
		}
	}
}

// FuzzParseUpload feeds arbitrary bytes to the adapter upload reader as a
// multipart body. It must never panic; it either refuses with a 4xx
// envelope or yields an upload with every required part, within the
// bound.
func FuzzParseUpload(f *testing.F) {
	const boundary = "b0undary"
	part := func(name, data string) string {
		return "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + data + "\r\n"
	}
	valid := part("base", "tiny") + part("name", "ad") + part("owner", "acme") + part("shared_with", "beta") + part("pin", "true") +
		part("adapter_config.json", `{"r":1}`) + part("adapter_model.safetensors", "\x08\x00") + "--" + boundary + "--\r\n"
	for _, seed := range []string{"", valid, valid[:len(valid)/2], part("base", "x") + part("base", "y"), "--" + boundary + "--",
		part("pin", "maybe"), part("\xff", "x"), strings.Repeat(part("shared_with", "t"), 70)} {
		f.Add([]byte(seed))
	}
	const maxBytes = 256
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := parseUpload(bytes.NewReader(data), "multipart/form-data; boundary="+boundary, maxBytes, "")
		if err != nil {
			e, ok := err.(*adminclient.Error)
			if !ok || e.Status/100 != 4 || e.Code == "" || e.Message == "" || !utf8.ValidString(e.Message) {
				t.Fatalf("bad refusal %#v for %q", err, data)
			}
			return
		}
		if u.ConfigJSON == nil || u.Weights == nil {
			t.Fatalf("accepted an upload without its parts: %q", data)
		}
		if n := len(u.Base) + len(u.Name) + len(u.Owner) + len(u.ConfigJSON) + len(u.Weights); n > maxBytes {
			t.Fatalf("accepted %d bytes over the bound %d", n, maxBytes)
		}
	})
}
