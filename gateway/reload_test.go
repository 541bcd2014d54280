package gateway

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/admission"
	"github.com/warden-ai/warden/internal/obs"
)

// TestReload: a reload applies the log level and the queue's size, and
// refuses a configuration that changes anything else, naming every such
// field, or that is invalid; either refusal leaves the running
// configuration untouched. The admin API's POST /reload does the same.
func TestReload(t *testing.T) {
	valid, source, edit := reloadSource()
	var level slog.LevelVar
	tg := startGatewayWith(t, valid(), WithLogLevel(&level), WithConfigSource(source))

	if changed, err := tg.ReloadFromSource(); err != nil || len(changed) != 0 {
		t.Fatalf("reload of the same configuration: %v, %v; want nothing changed", changed, err)
	}
	edit(func(c *config.Config) {
		c.Observability.LogLevel = "debug"
		c.Gateway.Queue.MaxWaiting = 1
	})
	changed, err := tg.ReloadFromSource()
	if err != nil || !slices.Equal(changed, []string{"gateway.queue.max_waiting", "observability.log_level"}) ||
		level.Level() != slog.LevelDebug {
		t.Fatalf("reload: %v, %v, level %v; want log level and queue size applied", changed, err, level.Level())
	}

	// Fields that need a restart: refused whole, every one named.
	edit(func(c *config.Config) {
		c.Observability.LogLevel = "error"
		c.Gateway.Listen = "127.0.0.1:1"
		c.Gateway.RequestTimeout = time.Hour
	})
	_, err = tg.ReloadFromSource()
	if !errors.Is(err, ErrReloadRefused) || !strings.Contains(err.Error(), "gateway.listen") ||
		!strings.Contains(err.Error(), "gateway.request_timeout") || strings.Contains(err.Error(), "log_level") {
		t.Fatalf("reload changing listen and request_timeout: %v; want refused naming both (and not the log level)", err)
	}
	// An invalid file: refused too.
	edit(func(c *config.Config) {
		c.Observability.LogLevel = "error"
		c.Gateway.HeartbeatTimeout = 0
	})
	if _, err = tg.ReloadFromSource(); err == nil || !strings.Contains(err.Error(), "gateway.heartbeat_timeout") {
		t.Fatalf("reload of an invalid configuration: %v", err)
	}
	if level.Level() != slog.LevelDebug {
		t.Fatalf("log level %v after refused reloads, want debug still", level.Level())
	}

	// The admin call.
	edit(func(c *config.Config) { c.Observability.LogLevel = "warn" })
	code, body := tg.admin(http.MethodPost, "/admin/v1/reload")
	var out struct{ Changed []string }
	if err := json.Unmarshal(body, &out); code != http.StatusOK || err != nil || !slices.Equal(out.Changed, []string{"gateway.queue.max_waiting", "observability.log_level"}) {
		t.Fatalf("POST /reload: %d %s", code, body)
	}
	if level.Level() != slog.LevelWarn {
		t.Fatalf("log level %v after POST /reload, want warn", level.Level())
	}
	edit(func(c *config.Config) { c.Gateway.AdminListen = "127.0.0.1:2" })
	if code, body = tg.admin(http.MethodPost, "/admin/v1/reload"); code != http.StatusConflict || !strings.Contains(string(body), "gateway.admin_listen") {
		t.Fatalf("POST /reload changing admin_listen: %d %s, want 409 naming it", code, body)
	}
}

// TestReloadLimits: a reload applies each model's context length, context
// policy and output cap (admission's state follows at once), the queue's
// longest wait and the trace sample ratio; renaming a model is refused.
func TestReloadLimits(t *testing.T) {
	valid, source, edit := reloadSource()
	ratio := obs.NewLiveRatio(1)
	tg := startGatewayWith(t, valid(), WithConfigSource(source), WithSampleRatio(ratio))

	edit(func(c *config.Config) {
		c.Models[0].ContextLength = 1024
		c.Models[0].ContextPolicy = config.ContextRefuse
		c.Models[0].MaxOutputTokens = 100
		c.Gateway.Queue.MaxWait = 3 * time.Second
		c.Observability.Tracing.SampleRatio = 0.25
	})
	changed, err := tg.ReloadFromSource()
	want := []string{"gateway.queue.max_wait", "models[0].context_length", "models[0].context_policy",
		"models[0].max_output_tokens", "observability.tracing.sample_ratio"}
	if err != nil || !slices.Equal(changed, want) {
		t.Fatalf("reload: %v, %v; want %v", changed, err, want)
	}
	var st admission.State
	for _, s := range tg.admission.States() {
		if s.Model == "tiny" {
			st = s
		}
	}
	if st.Configured != 1024 || st.Policy != config.ContextRefuse || st.MaxOutputTokens != 100 {
		t.Errorf("admission after the reload: %+v", st)
	}
	if d := tg.queue.MaxWait(); d != 3*time.Second {
		t.Errorf("queue max wait %v after the reload, want 3s", d)
	}
	if d := ratio.Description(); !strings.Contains(d, "0.25") {
		t.Errorf("sampler %s after the reload, want ratio 0.25", d)
	}

	edit(func(c *config.Config) { c.Models[0].Name = "other" })
	if _, err := tg.ReloadFromSource(); !errors.Is(err, ErrReloadRefused) || !strings.Contains(err.Error(), "models[0].name") {
		t.Fatalf("reload renaming a model: %v, want refused naming models[0].name", err)
	}
}

// reloadSource is a configuration source for reload tests: valid returns
// testConfig with what ValidateGateway also asks of it, source is what the
// gateway reloads from, and edit replaces its next answer with a valid
// configuration changed by f.
func reloadSource() (valid func() *config.Config, source func() (*config.Config, error), edit func(f func(*config.Config))) {
	valid = func() *config.Config {
		c := testConfig()
		c.Worker.HeartbeatInterval = time.Second
		return c
	}
	var mu sync.Mutex
	next := valid()
	source = func() (*config.Config, error) {
		mu.Lock()
		defer mu.Unlock()
		c := *next
		c.Models = slices.Clone(next.Models)
		return &c, nil
	}
	edit = func(f func(*config.Config)) {
		mu.Lock()
		defer mu.Unlock()
		next = valid()
		f(next)
	}
	return valid, source, edit
}
