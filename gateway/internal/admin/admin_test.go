package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warden-ai/warden/gateway/internal/admin"
	"github.com/warden-ai/warden/gateway/internal/admin/admintest"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
	"github.com/warden-ai/warden/tenant/memstore"
)

const token = "test-admin-token-0123456789"

var epoch = admintest.Epoch()

// fixture is an admin handler over a memstore with a manual clock.
type fixture struct {
	t        *testing.T
	store    *memstore.Store
	requests *admintest.Requests
	handler  http.Handler
	logs     *bytes.Buffer
	now      time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, requests: admintest.NewRequests(), logs: &bytes.Buffer{}, now: epoch}
	store, err := memstore.New([]byte("0123456789abcdef0123"), memstore.WithClock(func() time.Time { return f.now }))
	if err != nil {
		t.Fatal(err)
	}
	f.store = store
	logger := slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.handler = admin.NewHandler(admin.Config{Token: token, Now: func() time.Time { return f.now }}, store, admintest.NewCluster(), f.requests, logger)
	return f
}

// call sends one request with the admin token and returns the status and
// body.
func (f *fixture) call(method, path, body string) (int, []byte) {
	return f.callWith(method, path, body, "Bearer "+token)
}

func (f *fixture) callWith(method, path, body, auth string) (int, []byte) {
	f.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		f.t.Fatalf("%s %s: Content-Type %q", method, path, ct)
	}
	return rec.Code, rec.Body.Bytes()
}

// ok sends a request that must succeed with want and decodes its answer.
func (f *fixture) ok(method, path, body string, want int, out any) {
	f.t.Helper()
	status, data := f.call(method, path, body)
	if status != want {
		f.t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, data)
	}
	if out != nil {
		reflect.ValueOf(out).Elem().SetZero() // fields the answer omits must read as zero
		if err := json.Unmarshal(data, out); err != nil {
			f.t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
}

// fail sends a request that must fail with status and code (and param,
// when not "-") and returns the error message.
func (f *fixture) fail(method, path, body string, status int, code, param string) string {
	f.t.Helper()
	got, data := f.call(method, path, body)
	return checkError(f.t, method+" "+path, got, data, status, code, param)
}

func checkError(t *testing.T, what string, got int, data []byte, status int, code, param string) string {
	t.Helper()
	var env struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatalf("%s: not an error envelope: %s", what, data)
	}
	e := env.Error
	gotCode, gotParam := "", ""
	if e.Code != nil {
		gotCode = *e.Code
	}
	if e.Param != nil {
		gotParam = *e.Param
	}
	if got != status || gotCode != code || (param != "-" && gotParam != param) || e.Message == "" || e.Type == "" {
		t.Fatalf("%s: got %d code=%q param=%q type=%q message=%q; want %d code=%q param=%q",
			what, got, gotCode, gotParam, e.Type, e.Message, status, code, param)
	}
	return e.Message
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ name, path, auth string }{
		{"missing", "/admin/v1/tenants", ""},
		{"wrong token", "/admin/v1/tenants", "Bearer not-the-token"},
		{"prefix of token", "/admin/v1/tenants", "Bearer " + token[:len(token)-1]},
		{"token plus more", "/admin/v1/tenants", "Bearer " + token + "x"},
		{"basic scheme", "/admin/v1/tenants", "Basic " + token},
		{"no scheme", "/admin/v1/tenants", token},
		{"unknown route", "/admin/v1/nope", ""},
		{"outside the API", "/", "Bearer wrong"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			f.handler.ServeHTTP(rec, req)
			checkError(t, tc.name, rec.Code, rec.Body.Bytes(), http.StatusUnauthorized, adminclient.CodeInvalidToken, "")
			if got := rec.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Fatalf("WWW-Authenticate %q", got)
			}
		})
	}
	// The scheme is case-insensitive.
	status, _ := f.callWith(http.MethodGet, "/admin/v1/tenants", "", "bearer "+token)
	if status != http.StatusOK {
		t.Fatalf("lower-case scheme: %d", status)
	}

	// No configured token: nothing is accepted, not even an empty bearer.
	h := admin.NewHandler(admin.Config{}, f.store, admintest.NewCluster(), f.requests, nil)
	for _, auth := range []string{"", "Bearer ", "Bearer x"} {
		req := httptest.NewRequest(http.MethodGet, "/admin/v1/tenants", nil)
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("no configured token, auth %q: %d", auth, rec.Code)
		}
	}
}

func TestTenantCRUD(t *testing.T) {
	f := newFixture(t)
	var created tenant.Tenant
	f.ok(http.MethodPost, "/admin/v1/tenants",
		`{"id":"acme","name":"Acme Corp","limits":{"requests_per_minute":60,"tokens_per_minute":1000,"allowed_models":["tiny"]}}`,
		http.StatusCreated, &created)
	if created.ID != "acme" || created.Name != "Acme Corp" || created.Weight != 1 || created.Limits.RequestsPerMinute != 60 ||
		created.Limits.BudgetPeriod != tenant.PeriodMonth || !created.CreatedAt.Equal(epoch) || created.Disabled {
		t.Fatalf("created %+v", created)
	}
	f.ok(http.MethodPost, "/admin/v1/tenants", `{"id":"globex","weight":3,"disabled":true}`, http.StatusCreated, nil)
	msg := f.fail(http.MethodPost, "/admin/v1/tenants", `{"id":"acme"}`, http.StatusConflict, adminclient.CodeAlreadyExists, "")
	if !strings.Contains(msg, "acme") {
		t.Fatalf("conflict message %q does not name the tenant", msg)
	}

	var all adminclient.List[tenant.Tenant]
	f.ok(http.MethodGet, "/admin/v1/tenants", "", http.StatusOK, &all)
	if len(all.Data) != 2 || all.Data[0].ID != "acme" || all.Data[1].ID != "globex" || all.Data[1].Weight != 3 || !all.Data[1].Disabled {
		t.Fatalf("list %+v", all.Data)
	}

	var got tenant.Tenant
	f.ok(http.MethodGet, "/admin/v1/tenants/acme", "", http.StatusOK, &got)
	if got.Name != "Acme Corp" || len(got.Limits.AllowedModels) != 1 {
		t.Fatalf("get %+v", got)
	}

	// PATCH changes only what it names, limits field by field.
	var patched tenant.Tenant
	f.ok(http.MethodPatch, "/admin/v1/tenants/acme", `{"weight":5,"limits":{"tokens_per_minute":0,"max_concurrent":4,"budget_period":"day"}}`,
		http.StatusOK, &patched)
	want := created
	want.Weight = 5
	want.Limits.TokensPerMinute = 0
	want.Limits.MaxConcurrent = 4
	want.Limits.BudgetPeriod = tenant.PeriodDay
	if !sameJSON(t, patched, want) {
		t.Fatalf("patched %+v, want %+v", patched, want)
	}
	f.ok(http.MethodPatch, "/admin/v1/tenants/acme", `{"name":"Acme","disabled":true,"limits":{"allowed_models":[]}}`, http.StatusOK, &patched)
	if patched.Name != "Acme" || !patched.Disabled || patched.Limits.AllowedModels != nil || patched.Limits.MaxConcurrent != 4 {
		t.Fatalf("second patch %+v", patched)
	}
	if stored, _ := f.store.GetTenant(context.Background(), "acme"); !sameJSON(t, stored, patched) {
		t.Fatalf("store has %+v, answer was %+v", stored, patched)
	}

	var del adminclient.Deleted
	f.ok(http.MethodDelete, "/admin/v1/tenants/acme", "", http.StatusOK, &del)
	if del != (adminclient.Deleted{ID: "acme", Deleted: true}) {
		t.Fatalf("delete answer %+v", del)
	}
	f.fail(http.MethodGet, "/admin/v1/tenants/acme", "", http.StatusNotFound, adminclient.CodeNotFound, "")
	f.fail(http.MethodDelete, "/admin/v1/tenants/acme", "", http.StatusNotFound, adminclient.CodeNotFound, "")
}

func sameJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return bytes.Equal(ja, jb)
}

func TestKeys(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.ok(http.MethodPost, "/admin/v1/tenants", `{"id":"acme"}`, http.StatusCreated, nil)
	f.ok(http.MethodPost, "/admin/v1/tenants", `{"id":"globex"}`, http.StatusCreated, nil)

	status, raw := f.call(http.MethodPost, "/admin/v1/tenants/acme/keys", `{"name":"ci"}`)
	if status != http.StatusCreated {
		t.Fatalf("issue: %d %s", status, raw)
	}
	var issued adminclient.IssuedKey
	if err := json.Unmarshal(raw, &issued); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(issued.Key, tenant.KeyPrefix+issued.ID+"_") || len(issued.Key) != tenant.KeyLen ||
		issued.TenantID != "acme" || issued.Name != "ci" || issued.Prefix != tenant.KeyDisplayPrefix(issued.ID) || issued.RevokedAt != nil {
		t.Fatalf("issued %+v", issued)
	}
	p, err := f.store.Authenticate(ctx, issued.Key)
	if err != nil || p.Tenant.ID != "acme" || p.KeyID != issued.ID {
		t.Fatalf("issued key does not authenticate: %+v %v", p, err)
	}
	// An empty body is allowed.
	var second adminclient.IssuedKey
	f.ok(http.MethodPost, "/admin/v1/tenants/globex/keys", "", http.StatusCreated, &second)
	if second.TenantID != "globex" || second.Key == "" {
		t.Fatalf("second key %+v", second)
	}

	secret := issued.Key[len(tenant.KeyDisplayPrefix(issued.ID))+1:]
	for _, path := range []string{"/admin/v1/tenants/acme/keys", "/admin/v1/keys", "/admin/v1/keys?prefix=" + issued.Prefix} {
		status, data := f.call(http.MethodGet, path, "")
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", path, status, data)
		}
		if bytes.Contains(data, []byte(secret)) || bytes.Contains(data, []byte(`"key"`)) {
			t.Fatalf("%s shows the key's secret: %s", path, data)
		}
	}
	var keys adminclient.List[tenant.KeyInfo]
	f.ok(http.MethodGet, "/admin/v1/tenants/acme/keys", "", http.StatusOK, &keys)
	if len(keys.Data) != 1 || keys.Data[0].ID != issued.ID {
		t.Fatalf("acme keys %+v", keys.Data)
	}
	f.ok(http.MethodGet, "/admin/v1/keys", "", http.StatusOK, &keys)
	if len(keys.Data) != 2 {
		t.Fatalf("all keys %+v", keys.Data)
	}
	f.ok(http.MethodGet, "/admin/v1/keys?tenant=globex", "", http.StatusOK, &keys)
	if len(keys.Data) != 1 || keys.Data[0].ID != second.ID {
		t.Fatalf("globex keys %+v", keys.Data)
	}
	f.ok(http.MethodGet, "/admin/v1/keys?prefix="+issued.Prefix, "", http.StatusOK, &keys)
	if len(keys.Data) != 1 || keys.Data[0].ID != issued.ID {
		t.Fatalf("keys by prefix %+v", keys.Data)
	}

	f.now = epoch.Add(time.Hour)
	var revoked tenant.KeyInfo
	f.ok(http.MethodDelete, "/admin/v1/keys/"+issued.ID, "", http.StatusOK, &revoked)
	if revoked.ID != issued.ID || revoked.RevokedAt == nil || !revoked.RevokedAt.Equal(f.now) {
		t.Fatalf("revoked %+v", revoked)
	}
	if _, err := f.store.Authenticate(ctx, issued.Key); !errors.Is(err, tenant.ErrUnauthenticated) {
		t.Fatalf("revoked key still authenticates: %v", err)
	}

	f.fail(http.MethodPost, "/admin/v1/tenants/nobody/keys", "", http.StatusNotFound, adminclient.CodeNotFound, "")
	f.fail(http.MethodGet, "/admin/v1/tenants/nobody/keys", "", http.StatusNotFound, adminclient.CodeNotFound, "")
	f.fail(http.MethodDelete, "/admin/v1/keys/aaaaaaaa", "", http.StatusNotFound, adminclient.CodeNotFound, "")
	f.fail(http.MethodDelete, "/admin/v1/keys/NOT-AN-ID", "", http.StatusBadRequest, adminclient.CodeInvalidValue, "-")
	f.fail(http.MethodPost, "/admin/v1/tenants/acme/keys", `{"name":"bad\u0007name"}`, http.StatusBadRequest, adminclient.CodeInvalidValue, "name")
	f.fail(http.MethodGet, "/admin/v1/keys?tenant=Bad%20Tenant", "", http.StatusBadRequest, adminclient.CodeInvalidValue, "-")
}

func TestModelLimits(t *testing.T) {
	f := newFixture(t)
	var m tenant.ModelLimits
	f.ok(http.MethodPut, "/admin/v1/model-limits/tiny", `{"max_context":4096,"max_output_tokens":512,"allowed_tenants":["acme"]}`, http.StatusOK, &m)
	if m.Model != "tiny" || m.MaxContext != 4096 || m.MaxOutputTokens != 512 || len(m.AllowedTenants) != 1 {
		t.Fatalf("set %+v", m)
	}
	// A name with a slash, escaped; the body may repeat the name.
	f.ok(http.MethodPut, "/admin/v1/model-limits/meta%2Fllama-3", `{"model":"meta/llama-3","max_output_tokens":100}`, http.StatusOK, &m)
	if m.Model != "meta/llama-3" {
		t.Fatalf("slash model %+v", m)
	}
	f.ok(http.MethodGet, "/admin/v1/model-limits/meta%2Fllama-3", "", http.StatusOK, &m)
	if m.MaxOutputTokens != 100 {
		t.Fatalf("get slash model %+v", m)
	}
	var all adminclient.List[tenant.ModelLimits]
	f.ok(http.MethodGet, "/admin/v1/model-limits", "", http.StatusOK, &all)
	if len(all.Data) != 2 || all.Data[0].Model != "meta/llama-3" || all.Data[1].Model != "tiny" {
		t.Fatalf("list %+v", all.Data)
	}
	// PUT replaces.
	f.ok(http.MethodPut, "/admin/v1/model-limits/tiny", `{"max_context":2048}`, http.StatusOK, &m)
	if m.MaxContext != 2048 || m.MaxOutputTokens != 0 || m.AllowedTenants != nil {
		t.Fatalf("replace %+v", m)
	}

	f.fail(http.MethodPut, "/admin/v1/model-limits/tiny", `{"model":"other"}`, http.StatusBadRequest, adminclient.CodeInvalidValue, "model")
	f.fail(http.MethodPut, "/admin/v1/model-limits/tiny", `{"max_context":-1}`, http.StatusBadRequest, adminclient.CodeInvalidValue, "max_context")
	f.fail(http.MethodPut, "/admin/v1/model-limits/tiny", `{"max_context":100,"max_output_tokens":100}`, http.StatusBadRequest, adminclient.CodeInvalidValue, "max_output_tokens")
	f.fail(http.MethodPut, "/admin/v1/model-limits/tiny", `{"allowed_tenants":["ok","Not OK"]}`, http.StatusBadRequest, adminclient.CodeInvalidValue, "allowed_tenants[1]")
	f.fail(http.MethodPut, "/admin/v1/model-limits/tiny", `{"max_ctx":1}`, http.StatusBadRequest, adminclient.CodeUnknownField, "max_ctx")

	var del adminclient.Deleted
	f.ok(http.MethodDelete, "/admin/v1/model-limits/meta%2Fllama-3", "", http.StatusOK, &del)
	if del.ID != "meta/llama-3" || !del.Deleted {
		t.Fatalf("delete %+v", del)
	}
	f.fail(http.MethodGet, "/admin/v1/model-limits/meta%2Fllama-3", "", http.StatusNotFound, adminclient.CodeNotFound, "")
	f.fail(http.MethodDelete, "/admin/v1/model-limits/nope", "", http.StatusNotFound, adminclient.CodeNotFound, "")
}

func TestUsage(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.ok(http.MethodPost, "/admin/v1/tenants", `{"id":"acme"}`, http.StatusCreated, nil)
	for i, day := range []time.Time{epoch.AddDate(0, 0, -1), epoch} {
		f.now = day
		lease, err := f.store.Acquire(ctx, "acme", tenant.AcquireRequest{Model: "tiny", Tokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx, tenant.Consumed{PromptTokens: int64(10 + i), CompletionTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	var u adminclient.List[tenant.Usage]
	f.ok(http.MethodGet, "/admin/v1/usage?tenant=acme", "", http.StatusOK, &u)
	if len(u.Data) != 1 || u.Data[0].Day != "2026-03-14" || u.Data[0].PromptTokens != 11 || u.Data[0].Requests != 1 {
		t.Fatalf("today's usage %+v", u.Data)
	}
	f.ok(http.MethodGet, "/admin/v1/usage?tenant=acme&from=2026-03-01&to=2026-03-31", "", http.StatusOK, &u)
	if len(u.Data) != 2 || u.Data[0].Day != "2026-03-13" || u.Data[0].PromptTokens != 10 || u.Data[1].CompletionTokens != 5 {
		t.Fatalf("month usage %+v", u.Data)
	}
	f.ok(http.MethodGet, "/admin/v1/usage?tenant=nobody", "", http.StatusOK, &u)
	if u.Data == nil || len(u.Data) != 0 {
		t.Fatalf("unknown tenant usage %+v", u.Data)
	}
	f.fail(http.MethodGet, "/admin/v1/usage", "", http.StatusBadRequest, adminclient.CodeMissingParameter, "tenant")
	f.fail(http.MethodGet, "/admin/v1/usage?tenant=acme&from=14.03.2026", "", http.StatusBadRequest, adminclient.CodeInvalidValue, "from")
	f.fail(http.MethodGet, "/admin/v1/usage?tenant=acme&from=2026-03-14&to=2026-03-01", "", http.StatusBadRequest, adminclient.CodeInvalidValue, "-")
}

func TestClusterAndRequests(t *testing.T) {
	f := newFixture(t)
	status, raw := f.call(http.MethodGet, "/admin/v1/workers", "")
	if status != http.StatusOK {
		t.Fatalf("workers: %d", status)
	}
	for _, key := range []string{`"control_addr":"127.0.0.1:9002"`, `"transfer_backend":"tcp"`, `"last_heartbeat":"2026-03-14T15:09:26Z"`,
		`"capacity_tokens":4096`, `"quarantined_pages":0`, `"in_use_pages":2`, `"owner_violations":0`, `"running":1`} {
		if !bytes.Contains(raw, []byte(key)) {
			t.Errorf("workers JSON lacks %s: %s", key, raw)
		}
	}
	var ws adminclient.List[admin.WorkerView]
	f.ok(http.MethodGet, "/admin/v1/workers", "", http.StatusOK, &ws)
	if len(ws.Data) != 2 || ws.Data[0].ID != "w-decode" || ws.Data[1].ID != "w-prefill" || ws.Data[1].Pool.CapacityTokens != 2048 {
		t.Fatalf("workers %+v", ws.Data)
	}

	var ms adminclient.List[admin.ModelView]
	f.ok(http.MethodGet, "/admin/v1/models", "", http.StatusOK, &ms)
	if len(ms.Data) != 2 || ms.Data[0].Name != "big/model" || ms.Data[1].Verdict != "clamped" ||
		ms.Data[1].ConfiguredContext != 8192 || ms.Data[1].EffectiveContext != 2048 || len(ms.Data[1].Workers) != 2 {
		t.Fatalf("models %+v", ms.Data)
	}

	var rs adminclient.List[admin.RequestView]
	f.ok(http.MethodGet, "/admin/v1/requests", "", http.StatusOK, &rs)
	if len(rs.Data) != 2 || rs.Data[0].ID != "req_a" || rs.Data[1].ID != "req_b" || rs.Data[0].ClientRequestID != "client-1" {
		t.Fatalf("requests %+v", rs.Data)
	}
	f.ok(http.MethodGet, "/admin/v1/requests?tenant=acme", "", http.StatusOK, &rs)
	if len(rs.Data) != 1 || rs.Data[0].ID != "req_b" {
		t.Fatalf("acme requests %+v", rs.Data)
	}
	var r admin.RequestView
	f.ok(http.MethodGet, "/admin/v1/requests/req_done", "", http.StatusOK, &r)
	if r.State != "completed" || r.CompletionTokens != 7 || r.Finished.IsZero() {
		t.Fatalf("finished request %+v", r)
	}
	f.fail(http.MethodGet, "/admin/v1/requests/req_zzz", "", http.StatusNotFound, adminclient.CodeNotFound, "")

	var res adminclient.AbortResult
	f.ok(http.MethodPost, "/admin/v1/requests/req_b/abort", "", http.StatusOK, &res)
	if res.ID != "req_b" || res.Cause != "admin" || res.Request == nil || res.Request.State != "aborted" || res.Request.Cause != "admin" {
		t.Fatalf("abort %+v", res)
	}
	f.fail(http.MethodPost, "/admin/v1/requests/req_zzz/abort", "", http.StatusNotFound, adminclient.CodeNotFound, "")
	f.fail(http.MethodPost, "/admin/v1/requests/req_done/abort", "", http.StatusConflict, adminclient.CodeRequestFinished, "")
	if got := strings.Join(f.requests.Aborts(), ","); got != "req_b:admin,req_zzz:admin,req_done:admin" {
		t.Fatalf("aborts sent: %s", got)
	}
}

func TestBadInputs(t *testing.T) {
	f := newFixture(t)
	f.ok(http.MethodPost, "/admin/v1/tenants", `{"id":"acme"}`, http.StatusCreated, nil)
	big := `{"id":"x","name":"` + strings.Repeat("a", admin.MaxBodyBytes) + `"}`
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code, param              string
	}{
		{"malformed JSON", "POST", "/admin/v1/tenants", `{"id":`, 400, adminclient.CodeInvalidJSON, ""},
		{"trailing data", "POST", "/admin/v1/tenants", `{"id":"a"} {}`, 400, adminclient.CodeInvalidJSON, ""},
		{"empty body", "POST", "/admin/v1/tenants", ``, 400, adminclient.CodeInvalidJSON, ""},
		{"array body", "POST", "/admin/v1/tenants", `[{"id":"a"}]`, 400, adminclient.CodeInvalidJSON, ""},
		{"null body", "POST", "/admin/v1/tenants", `null`, 400, adminclient.CodeInvalidJSON, ""},
		{"not UTF-8", "POST", "/admin/v1/tenants", "{\"id\":\"a\xff\"}", 400, adminclient.CodeInvalidEncoding, ""},
		{"too large", "POST", "/admin/v1/tenants", big, 413, adminclient.CodeRequestTooLarge, ""},
		{"unknown field", "POST", "/admin/v1/tenants", `{"id":"a","bogus":1}`, 400, adminclient.CodeUnknownField, "bogus"},
		{"unknown nested field", "POST", "/admin/v1/tenants", `{"id":"a","limits":{"rpm":5}}`, 400, adminclient.CodeUnknownField, "limits.rpm"},
		{"field in wrong case", "POST", "/admin/v1/tenants", `{"ID":"a"}`, 400, adminclient.CodeUnknownField, "ID"},
		{"client cache salt", "POST", "/admin/v1/tenants", `{"id":"a","cache_salt":"x"}`, 400, adminclient.CodeUnknownField, "cache_salt"},
		{"wrong type", "POST", "/admin/v1/tenants", `{"id":"a","weight":"heavy"}`, 400, adminclient.CodeInvalidType, "weight"},
		{"fractional limit", "POST", "/admin/v1/tenants", `{"id":"a","limits":{"budget":1.5}}`, 400, adminclient.CodeInvalidType, "limits.budget"},
		{"overflowing limit", "POST", "/admin/v1/tenants", `{"id":"a","limits":{"budget":1e30}}`, 400, adminclient.CodeInvalidType, "limits.budget"},
		{"missing id", "POST", "/admin/v1/tenants", `{"name":"x"}`, 400, adminclient.CodeMissingParameter, "id"},
		{"bad id", "POST", "/admin/v1/tenants", `{"id":"Not Valid"}`, 400, adminclient.CodeInvalidValue, "id"},
		{"negative weight", "POST", "/admin/v1/tenants", `{"id":"a","weight":-1}`, 400, adminclient.CodeInvalidValue, "weight"},
		{"negative limit", "POST", "/admin/v1/tenants", `{"id":"a","limits":{"requests_per_minute":-5}}`, 400, adminclient.CodeInvalidValue, "limits.requests_per_minute"},
		{"huge limit", "POST", "/admin/v1/tenants", `{"id":"a","limits":{"tokens_per_minute":9000000000000000000}}`, 400, adminclient.CodeInvalidValue, "limits.tokens_per_minute"},
		{"bad budget period", "POST", "/admin/v1/tenants", `{"id":"a","limits":{"budget_period":"fortnight"}}`, 400, adminclient.CodeInvalidValue, "limits.budget_period"},
		{"bad allowed model", "POST", "/admin/v1/tenants", `{"id":"a","limits":{"allowed_models":["ok","not ok"]}}`, 400, adminclient.CodeInvalidValue, "limits.allowed_models[1]"},
		{"patch unknown tenant", "PATCH", "/admin/v1/tenants/nobody", `{"name":"x"}`, 404, adminclient.CodeNotFound, ""},
		{"patch negative limit", "PATCH", "/admin/v1/tenants/acme", `{"limits":{"max_concurrent":-1}}`, 400, adminclient.CodeInvalidValue, "limits.max_concurrent"},
		{"patch unknown field", "PATCH", "/admin/v1/tenants/acme", `{"limits":{"max_concurrency":1}}`, 400, adminclient.CodeUnknownField, "limits.max_concurrency"},
		{"patch id", "PATCH", "/admin/v1/tenants/acme", `{"id":"other"}`, 400, adminclient.CodeUnknownField, "id"},
		{"get unknown tenant", "GET", "/admin/v1/tenants/nobody", ``, 404, adminclient.CodeNotFound, ""},
		{"delete unknown tenant", "DELETE", "/admin/v1/tenants/nobody", ``, 404, adminclient.CodeNotFound, ""},
		{"unknown route", "GET", "/admin/v1/nothing", ``, 404, adminclient.CodeNotFound, ""},
		{"wrong method", "PUT", "/admin/v1/tenants", `{}`, 405, adminclient.CodeMethodNotAllowed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.fail(tc.method, tc.path, tc.body, tc.status, tc.code, tc.param)
		})
	}
	// Nothing above changed the store.
	ts, _ := f.store.ListTenants(context.Background())
	if len(ts) != 1 || ts[0].ID != "acme" || ts[0].Limits.MaxConcurrent != 0 {
		t.Fatalf("store changed by bad input: %+v", ts)
	}
}

// brokenStore fails like a store whose backend is down, or broken.
type brokenStore struct {
	tenant.Store
	err error
}

func (b brokenStore) ListTenants(context.Context) ([]tenant.Tenant, error) { return nil, b.err }

func TestStoreFailures(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("dial tcp 10.0.0.1:6379: %w", tenant.ErrUnavailable), 503, adminclient.CodeStoreUnavailable},
		{errors.New("secret internal detail"), 500, adminclient.CodeInternal},
	} {
		logs := &bytes.Buffer{}
		h := admin.NewHandler(admin.Config{Token: token}, brokenStore{f.store, tc.err}, admintest.NewCluster(), f.requests,
			slog.New(slog.NewJSONHandler(logs, nil)))
		req := httptest.NewRequest(http.MethodGet, "/admin/v1/tenants", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		msg := checkError(t, tc.code, rec.Code, rec.Body.Bytes(), tc.status, tc.code, "")
		if strings.Contains(msg, "secret internal detail") || strings.Contains(msg, "10.0.0.1") {
			t.Fatalf("answer leaks the cause: %q", msg)
		}
		if !strings.Contains(logs.String(), tc.err.Error()) || !strings.Contains(logs.String(), `"outcome":"failed"`) {
			t.Fatalf("log lacks the cause: %s", logs)
		}
	}
}

func TestAuditLog(t *testing.T) {
	f := newFixture(t)
	f.ok(http.MethodPost, "/admin/v1/tenants", `{"id":"acme"}`, http.StatusCreated, nil)
	var issued adminclient.IssuedKey
	f.ok(http.MethodPost, "/admin/v1/tenants/acme/keys", `{"name":"ci"}`, http.StatusCreated, &issued)
	f.fail(http.MethodPatch, "/admin/v1/tenants/acme", `{"weight":-3}`, 400, adminclient.CodeInvalidValue, "weight")
	f.callWith(http.MethodDelete, "/admin/v1/tenants/acme", "", "Bearer wrong")
	f.ok(http.MethodGet, "/admin/v1/tenants", "", http.StatusOK, nil)

	type line struct {
		Level   string `json:"level"`
		Msg     string `json:"msg"`
		Action  string `json:"action"`
		Target  string `json:"target"`
		Outcome string `json:"outcome"`
		Status  int    `json:"status"`
	}
	var lines []line
	for _, l := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var ln line
		if err := json.Unmarshal([]byte(l), &ln); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, ln)
	}
	want := []line{
		{"INFO", "admin", "tenant.create", "acme", "ok", 201},
		{"INFO", "admin", "key.issue", "acme/" + issued.ID, "ok", 201},
		{"INFO", "admin", "tenant.update", "acme", "rejected", 400},
		{"WARN", "admin", "auth", "", "denied", 401},
		{"DEBUG", "admin", "tenant.list", "", "ok", 200},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), f.logs)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("log line %d = %+v, want %+v", i, lines[i], want[i])
		}
	}
	secret := issued.Key[len(issued.Prefix)+1:]
	if strings.Contains(f.logs.String(), secret) {
		t.Fatal("the plaintext key reached the log")
	}
}
