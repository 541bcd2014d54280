package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// mapStore is a ResponseStore in a map keyed by tenant and ID.
type mapStore struct {
	mu sync.Mutex
	m  map[string]*StoredResponse
}

func (s *mapStore) Put(_ context.Context, p Principal, r *StoredResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*StoredResponse{}
	}
	s.m[p.Tenant+"/"+r.ID] = r
	return nil
}

func (s *mapStore) Get(_ context.Context, p Principal, id string) (*StoredResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.m[p.Tenant+"/"+id]; ok {
		return r, nil
	}
	return nil, ErrResponseNotFound
}

func (s *mapStore) Delete(ctx context.Context, p Principal, id string) error {
	if _, err := s.Get(ctx, p, id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, p.Tenant+"/"+id)
	return nil
}

// TestStoredResponsesChain: a stored response (streamed or not) is
// returned by GET as it was answered; previous_response_id hands the core
// the stored conversation — the earlier input and output, without the
// earlier instructions — after the new instructions and before the new
// input; store: false stores nothing; DELETE removes it.
func TestStoredResponsesChain(t *testing.T) {
	svc := &fakeService{}
	store := &mapStore{}
	h := NewHandler(Config{Responses: store, StoreResponsesByDefault: true}, fakeAuth{}, svc, nil)
	post := func(body string) map[string]any {
		t.Helper()
		rec := do(h, "POST", "/v1/responses", body, authJSON())
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", body, rec.Code, rec.Body.String())
		}
		if strings.Contains(body, `"stream":true`) {
			// The last event carries the whole response.
			i := strings.LastIndex(rec.Body.String(), "data: ")
			var ev struct{ Response map[string]any }
			if err := json.Unmarshal([]byte(strings.TrimSpace(rec.Body.String()[i+6:])), &ev); err != nil {
				t.Fatalf("last event: %v", err)
			}
			return ev.Response
		}
		var obj map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &obj); err != nil {
			t.Fatal(err)
		}
		return obj
	}
	first := post(`{"model":"tiny","instructions":"be brief","input":"first question"}`)
	id, _ := first["id"].(string)
	if first["store"] != true || !validResponseID(id) {
		t.Fatalf("first response: store %v, id %q", first["store"], id)
	}
	rec := do(h, "GET", "/v1/responses/"+id, "", authJSON())
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); rec.Code != 200 || err != nil || !reflect.DeepEqual(got, first) {
		t.Errorf("GET %s: %d %s\nwant %v", id, rec.Code, rec.Body.String(), first)
	}

	second := post(`{"model":"tiny","instructions":"be kind","input":"second question","previous_response_id":"` + id + `","stream":true}`)
	wantMsgs := []Message{
		{Role: "system", Content: "be kind"},
		{Role: "user", Content: "first question"},
		{Role: "assistant", Content: fakeText},
		{Role: "user", Content: "second question"},
	}
	if !reflect.DeepEqual(svc.last.Messages, wantMsgs) {
		t.Errorf("continuation messages %+v\nwant %+v", svc.last.Messages, wantMsgs)
	}
	if second["store"] != true || second["previous_response_id"] != id {
		t.Errorf("second (streamed) response: store %v, previous_response_id %v", second["store"], second["previous_response_id"])
	}
	third := post(`{"model":"tiny","input":"third","previous_response_id":"` + second["id"].(string) + `","store":false}`)
	if third["store"] != false {
		t.Errorf("store: false answered store %v", third["store"])
	}
	if rec := do(h, "GET", "/v1/responses/"+third["id"].(string), "", authJSON()); rec.Code != 404 {
		t.Errorf("GET of a response sent with store: false: %d %s", rec.Code, rec.Body.String())
	}
	if n := len(svc.last.Messages); n != 5 || svc.last.Messages[4].Content != "third" || svc.last.Messages[0].Content != "first question" {
		t.Errorf("third request's messages %+v", svc.last.Messages)
	}

	// An item_reference stands for the stored output item it names.
	msgID := "msg_" + strings.TrimPrefix(id, "resp_")
	post(`{"model":"tiny","input":[{"role":"user","content":"q"},{"type":"item_reference","id":"` + msgID + `"},{"role":"user","content":"next"}],"store":false}`)
	wantRef := []Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: fakeText}, {Role: "user", Content: "next"}}
	if !reflect.DeepEqual(svc.last.Messages, wantRef) {
		t.Errorf("item_reference resolved to %+v\nwant %+v", svc.last.Messages, wantRef)
	}
	for _, ref := range []string{msgID + "_9", "fc_" + strings.TrimPrefix(id, "resp_") + "_0", "msg_ffff", "rs_1"} {
		rec := do(h, "POST", "/v1/responses", `{"model":"tiny","input":[{"type":"item_reference","id":"`+ref+`"}]}`, authJSON())
		if _, code, param, _ := decodeEnvelope(t, rec.Body.Bytes()); rec.Code != 404 || code != CodeNotFound || param != "input[0].id" {
			t.Errorf("item_reference %s: %d %s", ref, rec.Code, rec.Body.String())
		}
	}

	rec = do(h, "DELETE", "/v1/responses/"+id, "", authJSON())
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"deleted":true`) {
		t.Errorf("DELETE: %d %s", rec.Code, rec.Body.String())
	}
	for _, m := range []string{"GET", "DELETE"} {
		if rec := do(h, m, "/v1/responses/"+id, "", authJSON()); rec.Code != 404 {
			t.Errorf("%s after DELETE: %d %s", m, rec.Code, rec.Body.String())
		}
	}
	rec = do(h, "POST", "/v1/responses", `{"model":"tiny","input":"x","previous_response_id":"`+id+`"}`, authJSON())
	if _, code, _, _ := decodeEnvelope(t, rec.Body.Bytes()); rec.Code != 404 || code != "previous_response_not_found" {
		t.Errorf("continuing a deleted response: %d %s", rec.Code, rec.Body.String())
	}
}

// brokenStore fails every call as an unreachable backend does.
type brokenStore struct{}

func (brokenStore) Put(context.Context, Principal, *StoredResponse) error {
	return fmt.Errorf("redis: dial tcp: %w", ErrResponseStoreUnavailable)
}
func (brokenStore) Get(context.Context, Principal, string) (*StoredResponse, error) {
	return nil, fmt.Errorf("redis: dial tcp: %w", ErrResponseStoreUnavailable)
}
func (brokenStore) Delete(context.Context, Principal, string) error {
	return fmt.Errorf("redis: dial tcp: %w", ErrResponseStoreUnavailable)
}

// TestStoredResponsesStoreDown: with the store unreachable, lookups are
// 503 with retry-after (never a 404 that would look like a lost
// response, nor a 500), and a new response is still answered, saying it
// was not stored.
func TestStoredResponsesStoreDown(t *testing.T) {
	h := NewHandler(Config{Responses: brokenStore{}, StoreResponsesByDefault: true}, fakeAuth{}, &fakeService{}, nil)
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v1/responses/resp_1", ""},
		{"DELETE", "/v1/responses/resp_1", ""},
		{"POST", "/v1/responses", `{"model":"tiny","input":"x","previous_response_id":"resp_1"}`},
		{"POST", "/v1/responses", `{"model":"tiny","input":[{"type":"item_reference","id":"msg_1"}]}`},
	} {
		rec := do(h, tc.method, tc.path, tc.body, authJSON())
		if _, code, _, _ := decodeEnvelope(t, rec.Body.Bytes()); rec.Code != 503 || code != "service_unavailable" || rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s %s %s: %d %s", tc.method, tc.path, tc.body, rec.Code, rec.Body.String())
		}
	}
	rec := do(h, "POST", "/v1/responses", `{"model":"tiny","input":"x"}`, authJSON())
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"store":false`) || !strings.Contains(rec.Body.String(), fakeText) {
		t.Errorf("a response while the store is down: %d %s", rec.Code, rec.Body.String())
	}
}
