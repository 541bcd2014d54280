package admin

import (
	"context"
	"net/http"

	"github.com/warden-ai/warden/gateway/internal/aliases"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
)

// Aliases is the gateway's view of the model aliases in effect.
type Aliases interface {
	// List returns every alias in effect, sorted by name.
	List(ctx context.Context) []aliases.Entry
	// Invalidate makes the gateway see a change of the store's aliases at
	// once (other replicas see it within their refresh interval).
	Invalidate()
}

var _ Aliases = (*aliases.Resolver)(nil)

func (s *server) listAliases(w http.ResponseWriter, r *http.Request) error {
	es := s.aliases.List(r.Context())
	out := make([]adminclient.Alias, len(es))
	for i, e := range es {
		out[i] = adminclient.Alias(e)
	}
	writeJSON(w, http.StatusOK, list(out))
	return nil
}

// alias returns the alias in effect named by the route, or 404.
func (s *server) alias(r *http.Request) (adminclient.Alias, error) {
	name, err := modelParam(r)
	if err != nil {
		return adminclient.Alias{}, err
	}
	for _, e := range s.aliases.List(r.Context()) {
		if e.Name == name {
			return adminclient.Alias(e), nil
		}
	}
	return adminclient.Alias{}, apiErr(http.StatusNotFound, adminclient.CodeNotFound, "", "alias %q: not found", name)
}

func (s *server) getAlias(w http.ResponseWriter, r *http.Request) error {
	a, err := s.alias(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// setAlias creates an alias or repoints it. Its target must be a
// configured model, and its name none.
func (s *server) setAlias(w http.ResponseWriter, r *http.Request) error {
	name, err := modelParam(r)
	if err != nil {
		return err
	}
	var body adminclient.AliasSet
	if err := readBody(w, r, &body, false); err != nil {
		return err
	}
	models := make(map[string]bool)
	for _, m := range s.cluster.Models() {
		models[m.Name] = true
	}
	isAdapter, err := s.adapterTarget(r, body.Target)
	if err != nil {
		return err
	}
	switch {
	case body.Target == "":
		return apiErr(http.StatusBadRequest, adminclient.CodeMissingParameter, "target", "The body must name the alias's target model.")
	case !models[body.Target] && !isAdapter:
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, "target",
			"The target %q is not a configured model or a registered adapter (an alias points at a model or an adapter, never at another alias).", body.Target)
	case models[name]:
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, "name", "%q is the name of a configured model.", name)
	}
	if err := s.store.SetAlias(r.Context(), tenant.Alias{Name: name, Target: body.Target}); err != nil {
		return err
	}
	s.aliases.Invalidate()
	writeJSON(w, http.StatusOK, adminclient.Alias{Name: name, Target: body.Target, Source: aliases.FromAdmin})
	return nil
}

// deleteAlias removes an alias set through this API (a configured one
// stays until the configuration changes: 404 for it).
func (s *server) deleteAlias(w http.ResponseWriter, r *http.Request) error {
	name, err := modelParam(r)
	if err != nil {
		return err
	}
	if err := s.store.DeleteAlias(r.Context(), name); err != nil {
		return err
	}
	s.aliases.Invalidate()
	writeJSON(w, http.StatusOK, adminclient.Deleted{ID: name, Deleted: true})
	return nil
}
