package admin

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/warden-ai/warden/internal/adminclient"
)

func (s *server) workers(w http.ResponseWriter, _ *http.Request) error {
	ws := slices.SortedFunc(slices.Values(s.cluster.Workers()), func(a, b WorkerView) int {
		return strings.Compare(a.ID, b.ID)
	})
	writeJSON(w, http.StatusOK, list(ws))
	return nil
}

// reloadConfig handles POST /reload: 200 with the fields changed, or 409
// with the reason nothing changed (an invalid file, or fields that need a
// restart, named).
func (s *server) reloadConfig(w http.ResponseWriter, _ *http.Request) error {
	if s.reload == nil {
		return apiErr(http.StatusNotFound, adminclient.CodeNotFound, "", "This gateway has no configuration file to reload.")
	}
	changed, err := s.reload()
	if err != nil {
		return apiErr(http.StatusConflict, adminclient.CodeInvalidValue, "", "%s", err.Error())
	}
	writeJSON(w, http.StatusOK, map[string][]string{"changed": append([]string{}, changed...)})
	return nil
}

// cordon handles POST /workers/{id}/cordon, /drain (on) and /uncordon
// (off). Drain is cordon whose answer is read for Idle: the client polls
// until the worker's requests have ended.
func (s *server) cordon(on bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		id := target(r, chi.URLParam(r, "id"))
		v, ok := s.cluster.Cordon(id, on)
		if !ok {
			return apiErr(http.StatusNotFound, adminclient.CodeNotFound, "", "worker %q: not registered here", id)
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	}
}

func (s *server) models(w http.ResponseWriter, _ *http.Request) error {
	ms := slices.SortedFunc(slices.Values(s.cluster.Models()), func(a, b ModelView) int {
		return strings.Compare(a.Name, b.Name)
	})
	writeJSON(w, http.StatusOK, list(ms))
	return nil
}

func (s *server) listRequests(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	tenantID, model := q.Get("tenant"), q.Get("model")
	var out []RequestView
	for _, v := range s.requests.List() {
		if (tenantID == "" || v.Tenant == tenantID) && (model == "" || v.Model == model) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b RequestView) int {
		return cmp.Or(a.Started.Compare(b.Started), strings.Compare(a.ID, b.ID))
	})
	writeJSON(w, http.StatusOK, list(out))
	return nil
}

func (s *server) getRequest(w http.ResponseWriter, r *http.Request) error {
	id := target(r, chi.URLParam(r, "id"))
	v, ok := s.requests.Get(id)
	if !ok {
		return apiErr(http.StatusNotFound, adminclient.CodeNotFound, "", "request %q: not found (unknown, or finished too long ago)", id)
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (s *server) abortRequest(w http.ResponseWriter, r *http.Request) error {
	id := target(r, chi.URLParam(r, "id"))
	if err := s.requests.Abort(r.Context(), id, CauseAdmin); err != nil {
		switch {
		case errors.Is(err, ErrNotFound):
			return apiErr(http.StatusNotFound, adminclient.CodeNotFound, "", "request %q: not found or no longer in flight", id)
		case errors.Is(err, ErrFinished):
			return apiErr(http.StatusConflict, adminclient.CodeRequestFinished, "", "request %q already finished", id)
		}
		return err
	}
	res := adminclient.AbortResult{ID: id, Cause: CauseAdmin}
	if v, ok := s.requests.Get(id); ok {
		res.Request = &v
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
