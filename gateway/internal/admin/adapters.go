package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/lora"
	"github.com/warden-ai/warden/tenant"
)

// uploadFormBytes is what an upload's form may add to its two files
// (the fields, part headers and boundaries).
const uploadFormBytes = 64 << 10

// maxUploadParts bounds the parts of an upload form.
const maxUploadParts = 64

// createAdapter registers an adapter from a multipart upload: 201 with
// its record.
func (s *server) createAdapter(w http.ResponseWriter, r *http.Request) error {
	maxBytes := s.adapters.MaxBytes()
	u, err := parseUpload(http.MaxBytesReader(w, r.Body, maxBytes+uploadFormBytes), r.Header.Get("Content-Type"), maxBytes, "")
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

// register registers an upload: its base must be a configured model and
// its full name none.
func (s *server) register(r *http.Request, u adapters.Upload) (tenant.Adapter, error) {
	models := s.cluster.Models()
	if !slices.ContainsFunc(models, func(m ModelView) bool { return m.Name == u.Base }) {
		return tenant.Adapter{}, apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, adminclient.AdapterFieldBase,
			"The base model %q is not a configured model.", u.Base)
	}
	// Model names may hold ":": a model's own name is never an adapter's.
	if full := tenant.AdapterName(u.Base, u.Name); slices.ContainsFunc(models, func(m ModelView) bool { return m.Name == full }) {
		return tenant.Adapter{}, apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, adminclient.AdapterFieldName,
			"%q is the name of a configured model.", full)
	}
	a, err := s.adapters.Register(r.Context(), u)
	if err != nil {
		return tenant.Adapter{}, adapterError(err)
	}
	return a, nil
}

// adapterError maps a registration's failure; the store's errors are
// toAPIError's.
func adapterError(err error) error {
	switch {
	case errors.Is(err, lora.ErrInvalid):
		return apiErr(http.StatusBadRequest, adminclient.CodeInvalidAdapter, "", "%s", err.Error())
	case errors.Is(err, adapters.ErrTooLarge):
		return apiErr(http.StatusRequestEntityTooLarge, adminclient.CodeRequestTooLarge, "", "%s", err.Error())
	case errors.Is(err, adapters.ErrBaseUnknown):
		return apiErr(http.StatusServiceUnavailable, adminclient.CodeBaseUnavailable, adminclient.AdapterFieldBase, "%s; retry once one has.", err.Error())
	}
	return err
}

// parseUpload reads an adapter upload: multipart/form-data with the
// fields base, name, owner, shared_with (repeated), pin and the files
// adapter_config.json and adapter_model.safetensors, which together may
// hold at most maxBytes. A tenant's own upload (owner set: the caller)
// carries no owner and no shared_with field. Every failure is a 4xx *adminclient.Error.
func parseUpload(body io.Reader, contentType string, maxBytes int64, owner string) (adapters.Upload, error) {
	u := adapters.Upload{Owner: owner}
	bad := func(param, format string, args ...any) (adapters.Upload, error) {
		return adapters.Upload{}, apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, param, format, args...)
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return bad("", "An adapter is uploaded as multipart/form-data with the fields base, name, owner, shared_with, pin and the files %s and %s.",
			adminclient.AdapterFileConfig, adminclient.AdapterFileWeights)
	}
	mr := multipart.NewReader(body, params["boundary"])
	seen := map[string]bool{}
	left := maxBytes // for the files and the fields together
	for n := 0; ; n++ {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return uploadReadError(err, maxBytes)
		}
		if n == maxUploadParts {
			return bad("", "The upload has more than %d parts.", maxUploadParts)
		}
		name := p.FormName()
		if seen[name] && name != adminclient.AdapterFieldSharedWith {
			return bad(name, "The field %q appears twice.", name)
		}
		seen[name] = true
		data, err := io.ReadAll(io.LimitReader(p, left+1))
		if err != nil {
			return uploadReadError(err, maxBytes)
		}
		if left -= int64(len(data)); left < 0 {
			return adapters.Upload{}, apiErr(http.StatusRequestEntityTooLarge, adminclient.CodeRequestTooLarge, name,
				"The adapter's files are over the limit of %d bytes (adapters.max_bytes).", maxBytes)
		}
		switch name {
		case adminclient.AdapterFileConfig:
			u.ConfigJSON = data
		case adminclient.AdapterFileWeights:
			u.Weights = data
		case adminclient.AdapterFieldBase:
			u.Base = string(data)
		case adminclient.AdapterFieldName:
			u.Name = string(data)
		case adminclient.AdapterFieldOwner:
			if owner != "" {
				return bad(name, "A tenant's upload names no owner: the adapter is the caller's.")
			}
			u.Owner = string(data)
		case adminclient.AdapterFieldSharedWith:
			if owner != "" {
				// Sharing checks that the tenants exist: the platform
				// team's, so a tenant cannot probe other tenants' IDs.
				return bad(name, "A tenant's upload shares with nobody; the platform team shares adapters (PATCH /admin/v1/adapters/{name}).")
			}
			u.SharedWith = append(u.SharedWith, string(data))
		case adminclient.AdapterFieldPin:
			switch string(data) {
			case "true":
				u.Pin = true
			case "false":
			default:
				return bad(name, "pin must be true or false, got %q.", truncate(data))
			}
		default:
			return adapters.Upload{}, apiErr(http.StatusBadRequest, adminclient.CodeUnknownField, name, "Unknown field %q.", truncate([]byte(name)))
		}
	}
	for _, f := range []string{adminclient.AdapterFieldBase, adminclient.AdapterFieldName, adminclient.AdapterFieldOwner,
		adminclient.AdapterFileConfig, adminclient.AdapterFileWeights} {
		if !seen[f] && (f != adminclient.AdapterFieldOwner || owner == "") {
			return adapters.Upload{}, apiErr(http.StatusBadRequest, adminclient.CodeMissingParameter, f, "The upload has no %q.", f)
		}
	}
	return u, nil
}

// uploadReadError answers a body that could not be read as a form.
func uploadReadError(err error, maxBytes int64) (adapters.Upload, error) {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return adapters.Upload{}, apiErr(http.StatusRequestEntityTooLarge, adminclient.CodeRequestTooLarge, "",
			"The upload is over the limit of %d bytes (adapters.max_bytes).", maxBytes)
	}
	return adapters.Upload{}, apiErr(http.StatusBadRequest, adminclient.CodeInvalidValue, "", "The upload is not a valid multipart form: %v.", err)
}

// truncate quotes at most 64 bytes of b in a message.
func truncate(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	return string(bytes.ToValidUTF8(b, []byte("\uFFFD")))
}

func (s *server) listAdapters(w http.ResponseWriter, r *http.Request) error {
	as, err := s.adapters.Store().ListAdapters(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list(as))
	return nil
}

// adapterParam is the adapter the route's {model} names.
func (s *server) adapterParam(r *http.Request) (tenant.Adapter, error) {
	name, err := modelParam(r)
	if err != nil {
		return tenant.Adapter{}, err
	}
	return s.adapters.Store().GetAdapter(r.Context(), name)
}

func (s *server) getAdapter(w http.ResponseWriter, r *http.Request) error {
	a, err := s.adapterParam(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// updateAdapter shares an adapter with other tenants (replacing the
// list) or pins it.
func (s *server) updateAdapter(w http.ResponseWriter, r *http.Request) error {
	var p adminclient.AdapterPatch
	if err := readBody(w, r, &p, false); err != nil {
		return err
	}
	a, err := s.adapterParam(r)
	if err != nil {
		return err
	}
	before := a.Clone()
	if p.SharedWith != nil {
		a.SharedWith = *p.SharedWith
	}
	if p.Pinned != nil {
		a.Pinned = *p.Pinned
	}
	if a, err = s.adapters.Store().UpdateAdapter(r.Context(), a); err != nil {
		return err
	}
	s.evictAdapter(r.Context(), before, a)
	writeJSON(w, http.StatusOK, a)
	return nil
}

// adapterEvictor is a store that evicts a tenant's cache domains under
// an adapter it lost (domainevict.Store).
type adapterEvictor interface {
	EvictAdapter(ctx context.Context, id, adapter string) error
}

// evictAdapter evicts, on every worker, the cache domains under before's
// adapter of each tenant that could use before and cannot use after (a
// zero after: the adapter was deleted). Isolation does not depend on it
// (a later request of such a tenant is refused the adapter); it frees the
// pages and honours the removal.
func (s *server) evictAdapter(ctx context.Context, before, after tenant.Adapter) {
	ev, ok := s.store.(adapterEvictor)
	if !ok {
		return
	}
	for _, id := range append([]string{before.Owner}, before.SharedWith...) {
		if after.MayUse(id) {
			continue
		}
		if err := ev.EvictAdapter(ctx, id, before.Hash); err != nil && !errors.Is(err, tenant.ErrNotFound) {
			s.logger.Warn("evicting the cache domains of a removed adapter failed; they age out instead",
				"tenant", id, "adapter", before.Name, "err", err)
		}
	}
}

func (s *server) deleteAdapter(w http.ResponseWriter, r *http.Request) error {
	a, err := s.adapterParam(r)
	if err != nil {
		return err
	}
	if err := s.adapters.Store().DeleteAdapter(r.Context(), a.Name); err != nil {
		return err
	}
	s.evictAdapter(r.Context(), a, tenant.Adapter{})
	writeJSON(w, http.StatusOK, adminclient.Deleted{ID: a.Name, Deleted: true})
	return nil
}

// adapterTarget reports whether name is a registered adapter (an alias
// may name one).
func (s *server) adapterTarget(r *http.Request, name string) (bool, error) {
	if s.adapters == nil {
		return false, nil
	}
	_, err := s.adapters.Store().GetAdapter(r.Context(), name)
	switch {
	case errors.Is(err, tenant.ErrNotFound), errors.Is(err, tenant.ErrInvalid):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("admin: alias target: %w", err)
	}
	return true, nil
}
