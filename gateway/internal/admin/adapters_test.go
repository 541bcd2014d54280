package admin_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/admin"
	"github.com/warden-ai/warden/gateway/internal/admin/admintest"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/worker/model"
)

// tinyShape is the shape of model "tiny" in the adapter tests.
var tinyShape = &model.Config{NumHiddenLayers: 2, HiddenSize: 64, IntermediateSize: 128, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16}

// adapterFixture is an admin handler with an adapter registry over the
// fixture's store, whose tiny workers reported tinyShape.
func adapterFixture(t *testing.T, maxBytes int64) *fixture {
	f := newFixture(t)
	reg := adapters.New(f.store, func(base string) (*model.Config, bool) { return tinyShape, base == "tiny" }, maxBytes)
	cluster := admintest.NewCluster()
	cluster.ModelViews = append(cluster.ModelViews, admin.ModelView{Name: "tiny:ft"}) // model names may hold ":"
	f.handler = admin.NewHandler(admin.Config{Token: token, Adapters: reg}, f.store, cluster, f.requests, nil)
	for _, id := range []string{"acme", "beta"} {
		if _, err := f.store.CreateTenant(t.Context(), tenant.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// form is an upload form: fields in order, then files.
type form struct {
	fields [][2]string
	files  map[string][]byte
}

func (fm form) encode(t *testing.T) (body []byte, contentType string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, kv := range fm.fields {
		if err := mw.WriteField(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{adminclient.AdapterFileConfig, adminclient.AdapterFileWeights} {
		if b, ok := fm.files[name]; ok {
			w, _ := mw.CreateFormFile(name, name)
			w.Write(b)
		}
	}
	mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

func (f *fixture) upload(fm form) (int, []byte) {
	f.t.Helper()
	body, ct := fm.encode(f.t)
	req := httptest.NewRequest(http.MethodPost, "/admin/v1/adapters", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", ct)
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

func validForm(t *testing.T) form {
	cfg, w, err := lora.Random(tinyShape, lora.Config{Rank: 4, Alpha: 8, Targets: []lora.Module{lora.Q, lora.Down}}, 0.01, 7)
	if err != nil {
		t.Fatal(err)
	}
	return form{fields: [][2]string{{"base", "tiny"}, {"name", "ad"}, {"owner", "acme"}, {"shared_with", "beta"}, {"pin", "true"}},
		files: map[string][]byte{adminclient.AdapterFileConfig: cfg, adminclient.AdapterFileWeights: w}}
}

// TestAdapterUpload: a valid upload is registered (201, its record);
// list, get, share and delete work on it.
func TestAdapterUpload(t *testing.T) {
	f := adapterFixture(t, 1<<20)
	fm := validForm(t)
	status, body := f.upload(fm)
	var a tenant.Adapter
	if err := json.Unmarshal(body, &a); status != http.StatusCreated || err != nil {
		t.Fatalf("upload: %d %s", status, body)
	}
	cfg, w := fm.files[adminclient.AdapterFileConfig], fm.files[adminclient.AdapterFileWeights]
	want := tenant.Adapter{Name: "tiny:ad", BaseModel: "tiny", Owner: "acme", SharedWith: []string{"beta"}, Hash: lora.Hash(cfg, w),
		Bytes: 2 * 4 * (4*64 + 64*4 + 4*128 + 64*4), Rank: 4, Targets: []string{"q_proj", "down_proj"}, Pinned: true, CreatedAt: epoch}
	if !sameJSON(t, a, want) {
		t.Fatalf("registered %+v\nwant %+v", a, want)
	}
	if gc, gw, err := f.store.AdapterFiles(t.Context(), a.Hash); err != nil || !bytes.Equal(gc, cfg) || !bytes.Equal(gw, w) {
		t.Fatalf("stored files differ from the upload: %v", err)
	}
	f.fail(http.MethodPost, "/admin/v1/adapters", "", http.StatusBadRequest, adminclient.CodeInvalidValue, "")
	if s, b := f.upload(fm); s != http.StatusConflict || !strings.Contains(string(b), "tiny:ad") {
		t.Fatalf("second upload of tiny:ad: %d %s", s, b)
	}
	var l adminclient.List[tenant.Adapter]
	f.ok(http.MethodGet, "/admin/v1/adapters", "", http.StatusOK, &l)
	if len(l.Data) != 1 || !sameJSON(t, l.Data[0], want) {
		t.Fatalf("list %+v", l.Data)
	}
	var got tenant.Adapter
	f.ok(http.MethodPatch, "/admin/v1/adapters/tiny:ad", `{"shared_with":[],"pinned":false}`, http.StatusOK, &got)
	if len(got.SharedWith) != 0 || got.Pinned {
		t.Fatalf("after PATCH: %+v", got)
	}
	f.fail(http.MethodPatch, "/admin/v1/adapters/tiny:ad", `{"shared_with":["ghost"]}`, http.StatusNotFound, adminclient.CodeNotFound, "")
	f.fail(http.MethodPatch, "/admin/v1/adapters/tiny:ad", `{"owner":"beta"}`, http.StatusBadRequest, adminclient.CodeUnknownField, "owner")
	f.ok(http.MethodGet, "/admin/v1/adapters/tiny:ad", "", http.StatusOK, &got)
	f.ok(http.MethodDelete, "/admin/v1/adapters/tiny:ad", "", http.StatusOK, nil)
	f.fail(http.MethodGet, "/admin/v1/adapters/tiny:ad", "", http.StatusNotFound, adminclient.CodeNotFound, "")
}

// TestAdapterUploadRefused: what cannot be served is a 4xx in the
// envelope; bad adapter files name lora's reason.
func TestAdapterUploadRefused(t *testing.T) {
	f := adapterFixture(t, 1<<20)
	with := func(edit func(fm *form)) form {
		fm := validForm(t)
		edit(&fm)
		return fm
	}
	rank0 := `{"peft_type":"LORA","r":0,"lora_alpha":8,"target_modules":["q_proj"]}`
	for _, c := range []struct {
		name        string
		fm          form
		status      int
		code, param string
		mention     string
	}{
		{"rank 0", with(func(fm *form) { fm.files[adminclient.AdapterFileConfig] = []byte(rank0) }),
			400, adminclient.CodeInvalidAdapter, "", "invalid LoRA adapter: r must be between 1 and 1024"},
		{"weights of another model", with(func(fm *form) {
			other := *tinyShape
			other.HiddenSize = 32
			_, w, _ := lora.Random(&other, lora.Config{Rank: 4, Alpha: 8, Targets: []lora.Module{lora.Q, lora.Down}}, 0.01, 7)
			fm.files[adminclient.AdapterFileWeights] = w
		}), 400, adminclient.CodeInvalidAdapter, "", "lora_B.weight has shape [32 4], want [64 4]"},
		{"truncated weights", with(func(fm *form) {
			w := fm.files[adminclient.AdapterFileWeights]
			fm.files[adminclient.AdapterFileWeights] = w[:len(w)-3]
		}), 400, adminclient.CodeInvalidAdapter, "", "adapter_model.safetensors"},
		{"no weights", with(func(fm *form) { delete(fm.files, adminclient.AdapterFileWeights) }),
			400, adminclient.CodeMissingParameter, adminclient.AdapterFileWeights, ""},
		{"no owner", with(func(fm *form) { fm.fields = fm.fields[:2] }), 400, adminclient.CodeMissingParameter, "owner", ""},
		{"unknown field", with(func(fm *form) { fm.fields = append(fm.fields, [2]string{"color", "red"}) }),
			400, adminclient.CodeUnknownField, "color", ""},
		{"pin not a boolean", with(func(fm *form) { fm.fields[4][1] = "yes" }), 400, adminclient.CodeInvalidValue, "pin", `"yes"`},
		{"unknown base", with(func(fm *form) { fm.fields[0][1] = "nope" }), 400, adminclient.CodeInvalidValue, "base", `"nope" is not a configured model`},
		{"base without workers", with(func(fm *form) { fm.fields[0][1] = "big/model" }), 503, adminclient.CodeBaseUnavailable, "base", `no worker serving "big/model"`},
		{"missing owner tenant", with(func(fm *form) { fm.fields[2][1] = "ghost" }), 404, adminclient.CodeNotFound, "", `"ghost"`},
		{"bad name", with(func(fm *form) { fm.fields[1][1] = "a b" }), 400, adminclient.CodeInvalidValue, "-", "spaces"},
		{"a model's name", with(func(fm *form) { fm.fields[1][1] = "ft" }), 400, adminclient.CodeInvalidValue, "name", `"tiny:ft" is the name of a configured model`},
	} {
		status, body := f.upload(c.fm)
		msg := checkError(t, c.name, status, body, c.status, c.code, c.param)
		if !strings.Contains(msg, c.mention) {
			t.Errorf("%s: message %q does not mention %q", c.name, msg, c.mention)
		}
	}
	small := adapterFixture(t, 2000)
	status, body := small.upload(validForm(t))
	checkError(t, "upload over adapters.max_bytes", status, body, 413, adminclient.CodeRequestTooLarge, "-")
	if l, _ := f.store.ListAdapters(t.Context()); len(l) != 0 {
		t.Fatalf("refused uploads stored %+v", l)
	}
}
