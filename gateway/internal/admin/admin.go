package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/internal/adminclient"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/tenant"
)

// MaxBodyBytes caps an admin request body (413 above).
const MaxBodyBytes = 1 << 20

// Config configures the admin handler.
type Config struct {
	// Token is the admin bearer token. Empty refuses every request.
	Token string
	// Reload, if set, serves POST /reload: it reloads the gateway's
	// configuration file and returns the fields it changed, or why it
	// changed nothing.
	Reload func() ([]string, error)
	// Now is the clock (default day of /usage); nil means time.Now.
	Now func() time.Time
	// Metrics, if set, is served at GET /metrics behind the admin token:
	// the gateway's metrics name tenants, so they are never served where
	// strangers can read them.
	Metrics http.Handler
	// Aliases serves the model aliases in effect; nil answers their
	// routes 404.
	Aliases Aliases
	// Adapters is the LoRA adapter registry; nil answers its routes 404.
	Adapters *adapters.Registry
}

// Cluster is the gateway's view of its workers and models.
type Cluster interface {
	// Workers returns the registered workers.
	Workers() []WorkerView
	// Models returns every configured model with its context agreement.
	Models() []ModelView
	// Cordon stops (on) or resumes new placements on worker id and
	// returns its state; false for an unknown worker.
	Cordon(id string, on bool) (WorkerView, bool)
}

// Requests is the gateway's table of requests.
type Requests interface {
	// List returns the requests in flight.
	List() []RequestView
	// Get returns a request in flight or recently finished.
	Get(id string) (RequestView, bool)
	// Abort aborts a request in flight with cause: ErrNotFound when it is
	// unknown, ErrFinished (optional) when it already ended.
	Abort(ctx context.Context, id, cause string) error
}

// Wire types shared with the client; see internal/adminclient.
type (
	// WorkerView is one registered worker.
	WorkerView = adminclient.WorkerView
	// PoolView is a worker's KV pool accounting.
	PoolView = adminclient.PoolView
	// ModelView is one model's configured and effective context.
	ModelView = adminclient.ModelView
	// WorkerCapacity is one serving worker's pool size in tokens.
	WorkerCapacity = adminclient.WorkerCapacity
	// MemoryPlan is how a worker sized its KV pool.
	MemoryPlan = adminclient.MemoryPlan
	// LayoutRefusal is a worker refused at registration (I11).
	LayoutRefusal = adminclient.LayoutRefusal
	// RequestView is one request, in flight or recently finished.
	RequestView = adminclient.RequestView
)

// Verdicts of ModelView.Verdict.
const (
	VerdictAgree     = adminclient.VerdictAgree
	VerdictClamped   = adminclient.VerdictClamped
	VerdictRefused   = adminclient.VerdictRefused
	VerdictNoWorkers = adminclient.VerdictNoWorkers
)

// CauseAdmin is the abort cause of POST /requests/{id}/abort.
const CauseAdmin = "admin"

var (
	// ErrNotFound is returned by Requests when a request is unknown [404].
	ErrNotFound = errors.New("admin: request not found")
	// ErrFinished may be returned by Requests.Abort for a request that
	// already reached a terminal state [409].
	ErrFinished = errors.New("admin: request already finished")
)

// server holds the handlers' dependencies.
type server struct {
	tokenSum [sha256.Size]byte
	hasToken bool
	now      func() time.Time
	store    tenant.Store
	cluster  Cluster
	requests Requests
	logger   *slog.Logger
	reload   func() ([]string, error)
	aliases  Aliases
	adapters *adapters.Registry
}

// NewHandler returns the admin API (see the package comment for routes and
// behaviour). A nil logger discards logs.
func NewHandler(cfg Config, store tenant.Store, cluster Cluster, requests Requests, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &server{
		tokenSum: sha256.Sum256([]byte(cfg.Token)),
		hasToken: cfg.Token != "",
		now:      cfg.Now,
		store:    store,
		cluster:  cluster,
		requests: requests,
		logger:   logger,
		reload:   cfg.Reload,
		aliases:  cfg.Aliases,
		adapters: cfg.Adapters,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if !s.hasToken {
		logger.Warn("admin API has no token: every request will be refused")
	}

	r := chi.NewRouter()
	r.Use(s.audit, s.authenticate)
	r.NotFound(s.handle("route.unknown", func(_ http.ResponseWriter, r *http.Request) error {
		return apiErr(http.StatusNotFound, adminclient.CodeNotFound, "", "Unknown admin route: %s.", r.URL.Path)
	}))
	r.MethodNotAllowed(s.handle("route.method", func(_ http.ResponseWriter, r *http.Request) error {
		return apiErr(http.StatusMethodNotAllowed, adminclient.CodeMethodNotAllowed, "", "Method %s is not allowed for %s.", r.Method, r.URL.Path)
	}))
	if cfg.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", cfg.Metrics)
	}
	r.Route("/admin/v1", func(r chi.Router) {
		r.Post("/tenants", s.handle("tenant.create", s.createTenant))
		r.Get("/tenants", s.handle("tenant.list", s.listTenants))
		r.Get("/tenants/{id}", s.handle("tenant.get", s.getTenant))
		r.Patch("/tenants/{id}", s.handle("tenant.update", s.updateTenant))
		r.Delete("/tenants/{id}", s.handle("tenant.delete", s.deleteTenant))
		r.Post("/tenants/{id}/keys", s.handle("key.issue", s.issueKey))
		r.Get("/tenants/{id}/keys", s.handle("key.list", s.listTenantKeys))
		r.Get("/keys", s.handle("key.list", s.listKeys))
		r.Delete("/keys/{key_id}", s.handle("key.revoke", s.revokeKey))

		r.Get("/model-limits", s.handle("model_limits.list", s.listModelLimits))
		r.Get("/model-limits/*", s.handle("model_limits.get", s.getModelLimits))
		r.Put("/model-limits/*", s.handle("model_limits.set", s.setModelLimits))
		r.Delete("/model-limits/*", s.handle("model_limits.delete", s.deleteModelLimits))

		if s.aliases != nil {
			r.Get("/aliases", s.handle("alias.list", s.listAliases))
			r.Get("/aliases/*", s.handle("alias.get", s.getAlias))
			r.Put("/aliases/*", s.handle("alias.set", s.setAlias))
			r.Delete("/aliases/*", s.handle("alias.delete", s.deleteAlias))
		}

		if s.adapters != nil {
			r.Post("/adapters", s.handle("adapter.create", s.createAdapter))
			r.Get("/adapters", s.handle("adapter.list", s.listAdapters))
			r.Get("/adapters/*", s.handle("adapter.get", s.getAdapter))
			r.Patch("/adapters/*", s.handle("adapter.update", s.updateAdapter))
			r.Delete("/adapters/*", s.handle("adapter.delete", s.deleteAdapter))
		}

		r.Get("/usage", s.handle("usage.get", s.usage))

		r.Post("/reload", s.handle("config.reload", s.reloadConfig))
		r.Get("/workers", s.handle("worker.list", s.workers))
		r.Post("/workers/{id}/cordon", s.handle("worker.cordon", s.cordon(true)))
		r.Post("/workers/{id}/drain", s.handle("worker.drain", s.cordon(true)))
		r.Post("/workers/{id}/uncordon", s.handle("worker.uncordon", s.cordon(false)))
		r.Get("/models", s.handle("model.list", s.models))
		r.Get("/requests", s.handle("request.list", s.listRequests))
		r.Get("/requests/{id}", s.handle("request.get", s.getRequest))
		r.Post("/requests/{id}/abort", s.handle("request.abort", s.abortRequest))
	})
	return r
}

// authenticate admits only requests carrying the admin token.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.tokenOK(r.Header.Get("Authorization")) {
			auditFrom(r.Context()).action = "auth"
			w.Header().Set("WWW-Authenticate", `Bearer realm="warden-admin"`)
			writeError(w, apiErr(http.StatusUnauthorized, adminclient.CodeInvalidToken, "",
				"Missing or invalid admin token: send Authorization: Bearer <admin token>."))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tokenOK compares the presented token with the admin token in constant
// time. Both are hashed first, so the comparison is over equal lengths and
// reveals nothing about the token's length either.
func (s *server) tokenOK(header string) bool {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) == 1 && s.hasToken
}

// auditRecord is what the audit log says about one call; handlers fill in
// the action and target, the error mapping the cause of a failure.
type auditRecord struct {
	action string
	target string
	err    error // cause of a 5xx, logged only
}

type auditKey struct{}

func auditFrom(ctx context.Context) *auditRecord {
	if a, ok := ctx.Value(auditKey{}).(*auditRecord); ok {
		return a
	}
	return &auditRecord{}
}

// audit logs every call once it is answered.
func (s *server) audit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.now()
		rec := &auditRecord{}
		sw := &obs.StatusRecorder{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), auditKey{}, rec)))

		status := sw.Status
		level, outcome := slog.LevelInfo, "ok"
		switch {
		case status == http.StatusUnauthorized:
			level, outcome = slog.LevelWarn, "denied"
		case status >= 500:
			level, outcome = slog.LevelError, "failed"
		case status >= 400:
			outcome = "rejected"
		case r.Method == http.MethodGet:
			level = slog.LevelDebug
		}
		attrs := []slog.Attr{
			slog.String("action", rec.action),
			slog.String("target", rec.target),
			slog.String("outcome", outcome),
			slog.Int("status", status),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.String("remote", r.RemoteAddr),
			slog.Duration("duration", s.now().Sub(start)),
		}
		if rec.err != nil {
			attrs = append(attrs, slog.String("err", rec.err.Error()))
		}
		s.logger.LogAttrs(r.Context(), level, "admin", attrs...)
	})
}
