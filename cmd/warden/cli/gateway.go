package cli

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway"
	"github.com/warden-ai/warden/internal/obs"
)

// gatewayFlags are the command-line overrides of `warden gateway`; each,
// when given, replaces the configuration field it names.
type gatewayFlags struct {
	listen, adminListen, registryListen string
	tlsCert, tlsKey                     string
	plaintext                           bool
	adminTokenFile                      string
	redis                               string
	heartbeatTimeout, requestTimeout    time.Duration
	logLevel, logFormat                 string
}

func (f *gatewayFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "", "host:port of the OpenAI-compatible API (gateway.listen)")
	fs.StringVar(&f.adminListen, "admin-listen", "", "host:port of the admin API (gateway.admin_listen)")
	fs.StringVar(&f.registryListen, "registry-listen", "", "host:port of the worker registry (gateway.registry_listen)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate of the API and admin listeners (gateway.tls.cert_file)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert (gateway.tls.key_file)")
	fs.BoolVar(&f.plaintext, "plaintext", false, "serve the API and admin over plain HTTP (gateway.tls.plaintext)")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "file holding the admin token (gateway.admin_token_file)")
	fs.StringVar(&f.redis, "redis", "", "host:port of Redis: use the Redis tenant store (tenants.store redis, tenants.redis.addr)")
	fs.DurationVar(&f.heartbeatTimeout, "heartbeat-timeout", 0, "silence after which a worker is lost, e.g. 6s (gateway.heartbeat_timeout)")
	fs.DurationVar(&f.requestTimeout, "request-timeout", 0, "whole-request deadline, e.g. 10m (gateway.request_timeout)")
	fs.StringVar(&f.logLevel, "log-level", "", "debug, info, warn or error (observability.log_level)")
	fs.StringVar(&f.logFormat, "log-format", "", "json or text (observability.log_format)")
}

// apply writes the flags that were given into cfg.
func (f *gatewayFlags) apply(fs *flag.FlagSet, cfg *config.Config) {
	fs.Visit(func(fl *flag.Flag) {
		g := &cfg.Gateway
		switch fl.Name {
		case "listen":
			g.Listen = f.listen
		case "admin-listen":
			g.AdminListen = f.adminListen
		case "registry-listen":
			g.RegistryListen = f.registryListen
		case "tls-cert":
			g.TLS.CertFile = f.tlsCert
		case "tls-key":
			g.TLS.KeyFile = f.tlsKey
		case "plaintext":
			g.TLS.Plaintext = f.plaintext
		case "admin-token-file":
			g.AdminTokenFile, g.AdminToken = f.adminTokenFile, ""
		case "redis":
			cfg.Tenants.Store, cfg.Tenants.Redis.Addr = config.StoreRedis, f.redis
		case "heartbeat-timeout":
			g.HeartbeatTimeout = f.heartbeatTimeout
		case "request-timeout":
			g.RequestTimeout = f.requestTimeout
		case "log-level":
			cfg.Observability.LogLevel = f.logLevel
		case "log-format":
			cfg.Observability.LogFormat = config.LogFormat(f.logFormat)
		}
	})
}

// runGateway runs a standalone gateway until the context ends (Ctrl-C).
func runGateway(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "gateway", "gateway --config FILE [flags]")
	configPath := fs.String("config", "", "YAML configuration file (defaults apply to what it leaves out)")
	var f gatewayFlags
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		return err
	}
	f.apply(fs, cfg)
	if err := cfg.ValidateGateway(); err != nil {
		return err
	}
	lvl, err := obs.ParseLevel(cfg.Observability.LogLevel)
	if err != nil {
		return err
	}
	var level slog.LevelVar
	level.Set(lvl)
	logger, err := obs.NewLoggerVar(e.stderr, &level, string(cfg.Observability.LogFormat))
	if err != nil {
		return err
	}
	ratio := obs.NewLiveRatio(cfg.Observability.Tracing.SampleRatio)
	tp, shutdownTracing, err := obs.SetupTracing(ctx, cfg.Observability.Tracing, "warden-gateway",
		obs.WithServiceVersion(Version), obs.WithLiveRatio(ratio))
	if err != nil {
		return err
	}
	defer func() {
		if err := shutdownTracing(context.Background()); err != nil {
			logger.Warn("flushing traces", "err", err)
		}
	}()
	// A reload reads the file again, with the same flags on top.
	source := func() (*config.Config, error) {
		next, err := config.Load(*configPath)
		if err != nil {
			return nil, err
		}
		f.apply(fs, next)
		return next, nil
	}
	g, err := gateway.New(cfg, gateway.WithLogger(logger), gateway.WithTracerProvider(tp),
		gateway.WithLogLevel(&level), gateway.WithSampleRatio(ratio), gateway.WithConfigSource(source))
	if err != nil {
		return err
	}
	defer onSecondSignal(g.AbortNow)()
	defer onHangup(func() { _, _ = g.ReloadFromSource() })()
	return g.Run(ctx)
}

// onHangup calls reload at every SIGHUP and returns the function that
// stops watching.
func onHangup(reload func()) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				reload()
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(hup); close(done) }
}

// onSecondSignal calls abort when a second SIGTERM or Ctrl-C arrives (the
// first ends the context and starts the drain) and returns the function
// that stops watching.
func onSecondSignal(abort func()) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for n := 0; ; {
			select {
			case <-sigs:
				if n++; n == 2 {
					abort()
					return
				}
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}
