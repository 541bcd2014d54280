package admin

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/tenant"
)

// TenantAdaptersConfig configures TenantAdapterRoutes.
type TenantAdaptersConfig struct {
	Adapters *adapters.Registry
	// Store is the admin API's store (a deletion evicts the adapter's
	// cache domains through it, as the admin API's does).
	Store   tenant.Store
	Cluster Cluster
	Logger  *slog.Logger
}

// TenantAdapterRoutes are the public API's routes for a tenant's own LoRA
// adapters, allowed by its policy (tenant.Limits.MaxAdapters):
//
//   - POST /v1/adapters registers one: the admin upload's form without
//     "owner" (the caller owns it), refused with 403 once the tenant owns
//     MaxAdapters (0, the default: a tenant registers none; the platform
//     team registers for it through the admin API);
//   - GET /v1/adapters lists the adapters the caller owns;
//   - DELETE /v1/adapters/{base:adapter} deletes one it owns; another's
//     is the 404 of a missing one.
//
// Errors use the API's envelope with the admin API's codes.
func TenantAdapterRoutes(cfg TenantAdaptersConfig) []api.TenantRoute {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{store: cfg.Store, cluster: cfg.Cluster, adapters: cfg.Adapters, logger: cfg.Logger}
	serve := func(h func(w http.ResponseWriter, r *http.Request, caller string) error) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, ok := api.PrincipalOf(r.Context())
			if !ok {
				writeError(w, apiErr(http.StatusUnauthorized, adminclient.CodeInvalidToken, "", "No API key."))
				return
			}
			if err := h(w, r, p.Tenant); err != nil {
				writeError(w, s.toAPIError(err))
			}
		})
	}
	maxBody := cfg.Adapters.MaxBytes() + uploadFormBytes
	return []api.TenantRoute{
		{Method: http.MethodPost, Pattern: "/v1/adapters", MaxBodyBytes: maxBody, Handler: serve(s.createOwnAdapter)},
		{Method: http.MethodGet, Pattern: "/v1/adapters", Handler: serve(s.listOwnAdapters)},
		{Method: http.MethodDelete, Pattern: "/v1/adapters/*", Handler: serve(s.deleteOwnAdapter)},
	}
}

// createOwnAdapter registers the caller's upload within its policy.
func (s *server) createOwnAdapter(w http.ResponseWriter, r *http.Request, caller string) error {
	t, err := s.store.GetTenant(r.Context(), caller)
	if err != nil {
		return err
	}
	owned, err := s.owned(r, caller)
	if err != nil {
		return err
	}
	if int64(len(owned)) >= t.Limits.MaxAdapters {
		return apiErr(http.StatusForbidden, adminclient.CodeForbidden, "",
			"Your tenant may register %d LoRA adapters itself and owns %d; ask the platform team for more (limits.max_adapters).",
			t.Limits.MaxAdapters, len(owned))
	}
	maxBytes := s.adapters.MaxBytes()
	u, err := parseUpload(r.Body, r.Header.Get("Content-Type"), maxBytes, caller)
	if err != nil {
		return err
	}
	a, err := s.register(r, u)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, a)
	return nil
}

// owned lists the adapters caller owns.
func (s *server) owned(r *http.Request, caller string) ([]tenant.Adapter, error) {
	all, err := s.adapters.Store().ListAdapters(r.Context())
	if err != nil {
		return nil, err
	}
	var out []tenant.Adapter
	for _, a := range all {
		if a.Owner == caller {
			out = append(out, a)
		}
	}
	return out, nil
}

func (s *server) listOwnAdapters(w http.ResponseWriter, r *http.Request, caller string) error {
	owned, err := s.owned(r, caller)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list(owned))
	return nil
}

// deleteOwnAdapter deletes an adapter the caller owns.
func (s *server) deleteOwnAdapter(w http.ResponseWriter, r *http.Request, caller string) error {
	name, err := modelParam(r)
	if err != nil {
		return err
	}
	a, err := s.adapters.Store().GetAdapter(r.Context(), name)
	if err == nil && a.Owner != caller {
		err = tenant.ErrNotFound // another's adapter does not exist for the caller
	}
	if err != nil {
		return s.notFoundAs(err, name)
	}
	if err := s.adapters.Store().DeleteAdapter(r.Context(), a.Name); err != nil {
		return err
	}
	s.evictAdapter(r.Context(), a, tenant.Adapter{})
	writeJSON(w, http.StatusOK, adminclient.Deleted{ID: a.Name, Deleted: true})
	return nil
}

// notFoundAs answers a missing adapter with one message whoever owns it.
func (s *server) notFoundAs(err error, name string) error {
	if errors.Is(err, tenant.ErrNotFound) {
		return apiErr(http.StatusNotFound, adminclient.CodeNotFound, "", "adapter %q: not found", name)
	}
	return err
}
