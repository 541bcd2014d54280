package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/warden-ai/warden/gateway/internal/admin"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/domainevict"
	"github.com/warden-ai/warden/gateway/internal/embeddings"
	"github.com/warden-ai/warden/gateway/internal/storedresp"
	"github.com/warden-ai/warden/gateway/internal/tokenize"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/internal/health"
	"github.com/warden-ai/warden/internal/listenfd"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/internal/tlsutil"
)

// adminToken reads the admin token from the configuration ("" when none).
func (g *Gateway) adminToken() (string, error) {
	gw := &g.cfg.Gateway
	if gw.AdminTokenFile == "" {
		return gw.AdminToken, nil
	}
	b, err := os.ReadFile(gw.AdminTokenFile)
	if err != nil {
		return "", fmt.Errorf("gateway: gateway.admin_token_file: %w", err)
	}
	return string(bytes.TrimSpace(b)), nil
}

// endpoints merges the JSON endpoints of several packages.
func endpoints(sets ...map[string]api.JSONEndpoint) map[string]api.JSONEndpoint {
	out := make(map[string]api.JSONEndpoint)
	for _, set := range sets {
		maps.Copy(out, set)
	}
	return out
}

// listen binds every listener and builds the servers.
func (g *Gateway) listen(cluster *clusterAuth, tp trace.TracerProvider) error {
	gw := &g.cfg.Gateway
	var serverTLS *tls.Config
	if !gw.TLS.Plaintext {
		var err error
		if serverTLS, err = tlsutil.ServerTLSConfig(gw.TLS.CertFile, gw.TLS.KeyFile); err != nil {
			return fmt.Errorf("gateway: gateway.tls: %w", err)
		}
	}
	// The admin API's store: deletions purge stored responses and evict
	// cache domains (the tenant's own adapter routes share it).
	adminStore := domainevict.Wrap(storedresp.Purging(g.store, g.responses, g.logger), g.evictor)
	var tenantRoutes []api.TenantRoute
	if g.adapters != nil {
		tenantRoutes = admin.TenantAdapterRoutes(admin.TenantAdaptersConfig{Adapters: g.adapters, Store: adminStore, Cluster: clusterView{g}, Logger: g.logger})
	}
	var err error
	if g.apiLn, err = listenfd.Listen(gw.Listen); err != nil {
		return fmt.Errorf("gateway: API listener (gateway.listen): %w", err)
	}
	var h http.Handler = api.NewHandler(api.Config{
		MaxBodyBytes: int64(gw.MaxBodyBytes),
		MaxChoices:   gw.MaxN,
		Grammars:     g.grammars.Cache,
		CORSOrigins:  gw.CORSOrigins,
		Responses:    g.responses,
		// OpenAI stores a response unless its request says otherwise.
		StoreResponsesByDefault: gw.Responses.StoreByDefault,
		Ready:                   func(context.Context) error { return g.Ready() },
		OnError:                 g.metrics.rejected,
		Endpoints:               endpoints(tokenize.Endpoints(tokenizeModels{g}), embeddings.Endpoints(embedService{g})),
		TenantRoutes:            tenantRoutes,
		// Logged as client_request_id only when trusted.
		TrustClientRequestID: gw.TrustClientRequestID,
	}, g.auth, service{g}, g.logger)
	h = g.closeWhenLeaving(h)
	h = otelhttp.NewHandler(h, "warden.api", append(obs.HTTPServerOptions(g.cfg.Observability.Tracing, tp), apiTraceOptions()...)...)
	g.apiSrv = httpServer(h, serverTLS)

	token, err := g.adminToken()
	if err != nil {
		return err
	}
	if token != "" {
		if g.adminLn, err = listenfd.Listen(gw.AdminListen); err != nil {
			return fmt.Errorf("gateway: admin listener (gateway.admin_listen): %w", err)
		}
		g.adminSrv = httpServer(admin.NewHandler(admin.Config{Token: token, Reload: g.adminReload(), Metrics: promhttp.HandlerFor(g.promReg, promhttp.HandlerOpts{}), Aliases: g.aliases, Adapters: g.adapters}, adminStore, clusterView{g}, requestsView{g.table}, g.logger), serverTLS)
	} else {
		g.logger.Warn("no admin token configured: the admin API is not served")
	}

	if g.registryLn, err = listenfd.Listen(gw.RegistryListen); err != nil {
		return fmt.Errorf("gateway: registry listener (gateway.registry_listen): %w", err)
	}
	g.grpcSrv = grpc.NewServer(cluster.server...)
	controlpb.RegisterRegistryServer(g.grpcSrv, g.reg)

	if g.probe != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(g.promReg, promhttp.HandlerOpts{}))
		// Ready last: a probe that sees /readyz 200 finds the API served.
		g.probe.Handle(mux)
		g.probe.SetReady(g.Ready)
	}
	return nil
}

// listenProbe binds the metrics listener, if one is configured, and
// serves /livez on it at once (internal/health), before New connects to
// the tenant store; listen adds /readyz and /metrics.
func (g *Gateway) listenProbe() (err error) {
	addr := g.cfg.Observability.Metrics.Listen
	if addr == "" {
		return nil
	}
	if g.metricsLn, err = listenfd.Listen(addr); err != nil {
		return fmt.Errorf("gateway: metrics listener (observability.metrics.listen): %w", err)
	}
	g.probe = health.Serve(g.metricsLn)
	return nil
}

// httpServer serves h, over TLS when cfg is set (each server gets its own
// copy: serving adds HTTP/2 to it). WriteTimeout stays 0: streams are
// long; the API bounds each write itself.
func httpServer(h http.Handler, cfg *tls.Config) *http.Server {
	if cfg != nil {
		cfg = cfg.Clone()
	}
	return &http.Server{Handler: h, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
}
