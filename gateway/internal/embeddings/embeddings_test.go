package embeddings

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/warden-ai/warden/gateway/internal/api"
)

// TestDecodeShapes: OpenAI's four shapes of input, the options, and the
// rejections, each naming its field.
func TestDecodeShapes(t *testing.T) {
	for body, want := range map[string]*Request{
		`{"model":"m","input":"hi"}`:                                     {Model: "m", Inputs: []Input{{Text: "hi"}}},
		`{"model":"m","input":["a","b"],"encoding_format":"base64"}`:     {Model: "m", Inputs: []Input{{Text: "a"}, {Text: "b"}}, Base64: true},
		`{"model":"m","input":[1, 2 ,3],"encoding_format":"float"}`:      {Model: "m", Inputs: []Input{{Tokens: []int32{1, 2, 3}}}},
		`{"model":"m","input":[[1],[2,3]],"user":"u","dimensions":null}`: {Model: "m", Inputs: []Input{{Tokens: []int32{1}}, {Tokens: []int32{2, 3}}}},
		`{"model":"m","input":"x","extra":{"ignored":true}}`:             {Model: "m", Inputs: []Input{{Text: "x"}}},
	} {
		got, e := Decode([]byte(body))
		if e != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, %v; want %+v", body, got, e, want)
		}
	}
	for body, param := range map[string]string{
		`{"model":"m"}`:                                 "input",
		`{"input":"x"}`:                                 "model",
		`{"model":"m","input":""}`:                      "input",
		`{"model":"m","input":[]}`:                      "input",
		`{"model":"m","input":[[]]}`:                    "input[0]",
		`{"model":"m","input":["a",1]}`:                 "input[1]",
		`{"model":"m","input":[[1],2]}`:                 "input[1]",
		`{"model":"m","input":[1,-1]}`:                  "input[1]",
		`{"model":"m","input":[1,2147483648]}`:          "input[1]",
		`{"model":"m","input":[1.5]}`:                   "input[0]",
		`{"model":"m","input":{"a":1}}`:                 "input",
		`{"model":"m","input":"x","encoding_format":1}`: "encoding_format",
		`{"model":"m","input":"x","dimensions":"8"}`:    "dimensions",
		`{"model":"m","input":"x","dimensions":0}`:      "dimensions",
		`{"model":"m","input":"x","dimensions":64}`:     "dimensions",
		`{"model":"m","input":"x","user":5}`:            "user",
		`[]`:                                            "",
	} {
		_, e := Decode([]byte(body))
		if e == nil || e.Status != 400 || e.Param != param {
			t.Errorf("%s: %+v, want a 400 naming %q", body, e, param)
		}
	}
}

// fakeService answers every input with a vector of its index.
type fakeService struct{}

func (fakeService) Embed(_ context.Context, _ api.Principal, _ string, req *Request) (*Result, error) {
	r := &Result{Model: req.Model}
	for i := range req.Inputs {
		r.Vectors = append(r.Vectors, []float32{float32(i), -0.1, float32(math.Pi)})
		r.PromptTokens += 2
	}
	return r, nil
}

// TestAnswer: the answer in OpenAI's shape, base64 the little-endian
// float32 bytes of the same vector.
func TestAnswer(t *testing.T) {
	ep := Endpoints(fakeService{})[Path]
	for _, format := range []string{"float", "base64"} {
		out, err := ep(context.Background(), api.Principal{Tenant: "t"}, []byte(`{"model":"m","input":["a","b"],"encoding_format":"`+format+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(out)
		var got struct {
			Object string `json:"object"`
			Model  string `json:"model"`
			Data   []struct {
				Object    string          `json:"object"`
				Index     int             `json:"index"`
				Embedding json.RawMessage `json:"embedding"`
			} `json:"data"`
			Usage map[string]int64 `json:"usage"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Object != "list" || got.Model != "m" || len(got.Data) != 2 || got.Usage["prompt_tokens"] != 4 || got.Usage["total_tokens"] != 4 {
			t.Fatalf("%s: %s", format, b)
		}
		for i, d := range got.Data {
			want := []float32{float32(i), -0.1, float32(math.Pi)}
			var v []float32
			if format == "float" {
				if err := json.Unmarshal(d.Embedding, &v); err != nil {
					t.Fatal(err)
				}
			} else {
				var s string
				if err := json.Unmarshal(d.Embedding, &s); err != nil {
					t.Fatal(err)
				}
				raw, _ := base64.StdEncoding.DecodeString(s)
				for j := 0; j+4 <= len(raw); j += 4 {
					v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(raw[j:])))
				}
			}
			if d.Object != "embedding" || d.Index != i || !reflect.DeepEqual(v, want) {
				t.Fatalf("%s data[%d]: %s %d %v, want %v", format, i, d.Object, d.Index, v, want)
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`, `{"model":"m","input":["a","b"],"encoding_format":"base64"}`,
		`{"model":"m","input":[1,2,3]}`, `{"model":"m","input":[[1],[2,3]],"dimensions":4}`,
		`{"model":"m","input":[[1],"a"]}`, `{"model":"m","input":[null]}`, `{"model":"m","input":[" "]}`,
		`{"model":"m","input":[1e2]}`, `{"model":"m","input":"x","user":"u"}`, `{}`, `[]`, `null`, ``,
		"{\"model\":\"m\",\"input\":\"\xff\"}", `{"model":"m","input":[ [ 1 ] ]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := Decode(body)
		if e != nil {
			if e.Status != 400 || e.Type == "" || e.Message == "" {
				t.Fatalf("rejection %+v", e)
			}
			return
		}
		if req.Model == "" || len(req.Inputs) == 0 || len(req.Inputs) > MaxInputs {
			t.Fatalf("accepted %+v", req)
		}
		for i, in := range req.Inputs {
			if (in.Text == "") == (len(in.Tokens) == 0) {
				t.Fatalf("input %d is empty or both text and tokens: %+v", i, in)
			}
			for _, id := range in.Tokens {
				if id < 0 {
					t.Fatalf("negative token %d", id)
				}
			}
		}
	})
}
