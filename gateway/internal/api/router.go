package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warden-ai/warden/internal/constrain"
)

// Defaults for zero Config fields.
const (
	DefaultMaxBodyBytes   = 4 << 20
	DefaultMaxTokensLimit = 1 << 24
	DefaultWriteTimeout   = time.Minute
	// DefaultMaxChoices is the largest n (choices per request) by default.
	DefaultMaxChoices = 8
)

// Config tunes the HTTP layer. The zero value is usable.
type Config struct {
	// MaxBodyBytes caps request bodies (413 above); 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxTokensLimit is the largest max_tokens accepted before the core's
	// own context checks; 0 means DefaultMaxTokensLimit.
	MaxTokensLimit int64
	// MaxChoices is the largest n accepted (400 naming n above it); 0
	// means DefaultMaxChoices.
	MaxChoices int
	// Grammars compiles the requests' structured-output constraints (so
	// one warden cannot enforce is refused, naming the keyword) and keeps
	// them; nil compiles every time.
	Grammars *constrain.Cache
	// WriteTimeout bounds each write to a client; a client that stops
	// reading for longer is dropped and its request aborted. 0 means
	// DefaultWriteTimeout. The http.Server's own WriteTimeout must be 0,
	// since it would cut long streams.
	WriteTimeout time.Duration
	// Ready reports readiness for GET /readyz; nil means always ready.
	Ready func(ctx context.Context) error
	// TrustClientRequestID keeps the client's own request ID
	// (x-client-request-id, else x-request-id) as client_request_id in
	// the access log and GenerateRequest.ClientRequestID. False (the
	// default) ignores it: a tenant could otherwise plant another
	// request's ID in lines attributed to itself.
	TrustClientRequestID bool
	// CORSOrigins are the browser origins allowed to call the API
	// cross-origin ("*": any); empty sends no CORS headers.
	CORSOrigins []string
	// Endpoints are more authenticated POST endpoints with JSON bodies,
	// by path (/tokenize and /detokenize: gateway/internal/tokenize).
	Endpoints map[string]JSONEndpoint
	// TenantRoutes are more authenticated routes the handler of which
	// reads the body itself, under a limit of its own (a tenant's adapter
	// uploads); the caller is PrincipalOf the request's context.
	TenantRoutes []TenantRoute
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Responses keeps stored responses (previous_response_id, GET and
	// DELETE /v1/responses/{id}); nil stores nothing.
	Responses ResponseStore
	// StoreResponsesByDefault stores a response whose request did not
	// send "store" (OpenAI's default is true) when Responses is set.
	StoreResponsesByDefault bool
	// OnError, if set, is told of every API response that carried an
	// error: its status (200 for an error event ending a stream) and
	// reason (the error code, or its type when it has none). Probes and
	// /metrics are not API responses.
	OnError func(status int, reason string)
}

// server holds the handlers' dependencies.
type server struct {
	cfg    Config
	auth   Authenticator
	svc    Service
	logger *slog.Logger
}

func (s *server) now() time.Time { return s.cfg.Now() }

// NewHandler returns the OpenAI-compatible HTTP API: /v1/models,
// /v1/models/{id}, /v1/completions, /v1/chat/completions, /v1/responses,
// Config.Endpoints, /healthz, /readyz (also as vLLM's /health). It never
// serves /metrics: the gateway's metrics name tenants, so they live on
// the admin listener (behind the admin token) and the ops listener. A nil
// logger discards logs.
func NewHandler(cfg Config, auth Authenticator, svc Service, logger *slog.Logger) http.Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxTokensLimit <= 0 {
		cfg.MaxTokensLimit = DefaultMaxTokensLimit
	}
	if cfg.MaxChoices <= 0 {
		cfg.MaxChoices = DefaultMaxChoices
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &server{cfg: cfg, auth: auth, svc: svc, logger: logger}

	r := chi.NewRouter()
	r.Use(s.requestID, s.observe, s.cors, s.finishHeaders)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		writeError(w, notFound(req.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			if r.Match(chi.NewRouteContext(), m, req.URL.Path) {
				w.Header().Add("Allow", m)
			}
		}
		writeError(w, methodNotAllowed(req.Method, req.URL.Path))
	})

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	// vLLM's /health, for clients and load balancers configured for it:
	// 200 while the gateway can serve, 503 otherwise (as /readyz).
	r.Get("/health", s.readyz)
	for _, tr := range cfg.TenantRoutes {
		r.With(s.authenticate, s.limitBodyTo(tr.MaxBodyBytes)).Method(tr.Method, tr.Pattern, tr.Handler)
	}
	r.Group(func(r chi.Router) {
		r.Use(s.limitBodyTo(cfg.MaxBodyBytes), s.authenticate)
		r.Get("/v1/models", s.models)
		r.Get("/v1/models/*", s.model)
		r.With(requireJSON).Post("/v1/chat/completions", s.generate(KindChat))
		r.With(requireJSON).Post("/v1/completions", s.generate(KindCompletion))
		r.With(requireJSON).Post("/v1/responses", s.responses)
		r.Get("/v1/responses/{id}", s.getResponse)
		r.Delete("/v1/responses/{id}", s.deleteResponse)
		r.HandleFunc("/v1/responses/*", notStored)
		for path, fn := range cfg.Endpoints {
			r.With(requireJSON).Post(path, s.jsonEndpoint(fn))
		}
	})
	return r
}

type healthStatus struct {
	Status string `json:"status"`
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, healthStatus{"ok"})
}

func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(r.Context()); err != nil {
			s.logger.DebugContext(r.Context(), "not ready", "request_id", infoFrom(r.Context()).id, "err", err)
			writeJSON(w, http.StatusServiceUnavailable, healthStatus{"not_ready"})
			return
		}
	}
	writeJSON(w, http.StatusOK, healthStatus{"ready"})
}
