package admin

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
)

// target records the call's target for the audit log and returns it.
func target(r *http.Request, id string) string {
	auditFrom(r.Context()).target = id
	return id
}

func (s *server) createTenant(w http.ResponseWriter, r *http.Request) error {
	var in adminclient.TenantCreate
	if err := readBody(w, r, &in, false); err != nil {
		return err
	}
	target(r, in.ID)
	if in.ID == "" {
		return apiErr(http.StatusBadRequest, adminclient.CodeMissingParameter, "id", "The tenant id is required.")
	}
	if err := tenant.ValidateID(in.ID); err != nil {
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, "id", "%v", err)
	}
	t, err := s.store.CreateTenant(r.Context(), in.Tenant())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

func (s *server) listTenants(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.store.ListTenants(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list(ts))
	return nil
}

func (s *server) getTenant(w http.ResponseWriter, r *http.Request) error {
	t, err := s.store.GetTenant(r.Context(), target(r, chi.URLParam(r, "id")))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (s *server) updateTenant(w http.ResponseWriter, r *http.Request) error {
	id := target(r, chi.URLParam(r, "id"))
	var p adminclient.TenantPatch
	if err := readBody(w, r, &p, false); err != nil {
		return err
	}
	t, err := s.store.GetTenant(r.Context(), id)
	if err != nil {
		return err
	}
	t, err = s.store.UpdateTenant(r.Context(), p.Apply(t))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (s *server) deleteTenant(w http.ResponseWriter, r *http.Request) error {
	id := target(r, chi.URLParam(r, "id"))
	if err := s.store.DeleteTenant(r.Context(), id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, adminclient.Deleted{ID: id, Deleted: true})
	return nil
}

func (s *server) issueKey(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	target(r, id)
	var in adminclient.KeyCreate
	if err := readBody(w, r, &in, true); err != nil {
		return err
	}
	if err := tenant.ValidateKeyName(in.Name); err != nil {
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, "name", "%v", err)
	}
	key, info, err := s.store.IssueKey(r.Context(), id, in.Name)
	if err != nil {
		return err
	}
	// The audit log names the key by its ID, never the plaintext.
	target(r, id+"/"+info.ID)
	writeJSON(w, http.StatusCreated, adminclient.IssuedKey{Key: key, KeyInfo: info})
	return nil
}

func (s *server) listTenantKeys(w http.ResponseWriter, r *http.Request) error {
	id := target(r, chi.URLParam(r, "id"))
	if _, err := s.store.GetTenant(r.Context(), id); err != nil {
		return err
	}
	keys, err := s.store.ListKeys(r.Context(), tenant.KeyFilter{TenantID: id})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list(keys))
	return nil
}

func (s *server) listKeys(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := tenant.KeyFilter{TenantID: q.Get("tenant"), Prefix: q.Get("prefix")}
	target(r, strings.TrimSpace(f.TenantID+" "+f.Prefix))
	keys, err := s.store.ListKeys(r.Context(), f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list(keys))
	return nil
}

func (s *server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	id := target(r, chi.URLParam(r, "key_id"))
	if err := s.store.RevokeKey(r.Context(), id); err != nil {
		return err
	}
	keys, err := s.store.ListKeys(r.Context(), tenant.KeyFilter{Prefix: tenant.KeyDisplayPrefix(id)})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ID == id {
			writeJSON(w, http.StatusOK, k)
			return nil
		}
	}
	return apiErr(http.StatusNotFound, adminclient.CodeNotFound, "", "key %q: not found", id)
}

// modelParam returns the {model} of a model-limits route. Model names may
// contain "/", so the route matches the rest of the path; an escaped name
// ("a%2Fb") is unescaped once.
func modelParam(r *http.Request) (string, error) {
	model := chi.URLParam(r, "*")
	if r.URL.RawPath != "" {
		m, err := url.PathUnescape(model)
		if err != nil {
			return "", apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, "model", "Model name %q is not properly escaped.", model)
		}
		model = m
	}
	return target(r, model), nil
}

func (s *server) listModelLimits(w http.ResponseWriter, r *http.Request) error {
	ms, err := s.store.ListModelLimits(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list(ms))
	return nil
}

func (s *server) getModelLimits(w http.ResponseWriter, r *http.Request) error {
	model, err := modelParam(r)
	if err != nil {
		return err
	}
	m, err := s.store.GetModelLimits(r.Context(), model)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

func (s *server) setModelLimits(w http.ResponseWriter, r *http.Request) error {
	model, err := modelParam(r)
	if err != nil {
		return err
	}
	var m tenant.ModelLimits
	if err := readBody(w, r, &m, false); err != nil {
		return err
	}
	if m.Model != "" && m.Model != model {
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, "model",
			"The body names model %q but the URL names %q.", m.Model, model)
	}
	m.Model = model
	if m.MaxContext > 0 && m.MaxOutputTokens >= m.MaxContext {
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, "max_output_tokens",
			"max_output_tokens (%d) must be below max_context (%d), or a request could not hold a prompt.", m.MaxOutputTokens, m.MaxContext)
	}
	if err := s.store.SetModelLimits(r.Context(), m); err != nil {
		return err
	}
	m, err = s.store.GetModelLimits(r.Context(), model)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

func (s *server) deleteModelLimits(w http.ResponseWriter, r *http.Request) error {
	model, err := modelParam(r)
	if err != nil {
		return err
	}
	if err := s.store.DeleteModelLimits(r.Context(), model); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, adminclient.Deleted{ID: model, Deleted: true})
	return nil
}

func (s *server) usage(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	id := target(r, q.Get("tenant"))
	if id == "" {
		return apiErr(http.StatusBadRequest, adminclient.CodeMissingParameter, "tenant", "The tenant query parameter is required.")
	}
	today := s.now().UTC().Format(tenant.DayFormat)
	var days [2]time.Time
	for i, name := range []string{"from", "to"} {
		v := q.Get(name)
		if v == "" {
			v = today
		}
		d, err := time.Parse(tenant.DayFormat, v)
		if err != nil {
			return apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, name, "%s must be a date YYYY-MM-DD (got %q).", name, v)
		}
		days[i] = d
	}
	u, err := s.store.Usage(r.Context(), id, days[0], days[1])
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list(u))
	return nil
}

// list wraps items as {"data": [...]}, never null.
func list[T any](items []T) adminclient.List[T] {
	if items == nil {
		items = []T{}
	}
	return adminclient.List[T]{Data: items}
}
