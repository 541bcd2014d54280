package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/gateway/internal/admission"
	"github.com/warden-ai/warden/internal/obs"
)

// ErrReloadRefused is wrapped by Reload's error when the new configuration
// changes fields that only a restart applies; the message names them.
var ErrReloadRefused = errors.New("gateway: configuration reload refused")

// reloadable lists the fields Reload applies to a running gateway ("[*]"
// stands for any index of a list whose length is unchanged). The TLS key
// pair of gateway.tls is not among them because it needs no reload: its
// files are read again at the first handshake after they change.
var reloadable = []string{
	"observability.log_level", "observability.tracing.sample_ratio",
	"gateway.queue.max_waiting", "gateway.queue.max_wait",
	"models[*].context_length", "models[*].context_policy", "models[*].max_output_tokens",
}

// reloadState is what Reload needs: the configuration now in effect, the
// logger's level and the tracer's sampler.
type reloadState struct {
	mu     sync.Mutex
	live   *config.Config // nil until the first Reload: the one New got
	level  *slog.LevelVar // nil: the log level is not reloadable
	ratio  *obs.LiveRatio // nil: the sample ratio is not reloadable
	source func() (*config.Config, error)
}

// WithSampleRatio lets Reload change the ratio of new traces the
// gateway's tracer provider records; the provider must have been built
// with obs.WithLiveRatio(ratio).
func WithSampleRatio(ratio *obs.LiveRatio) Option { return func(o *options) { o.ratio = ratio } }

// WithConfigSource names where ReloadFromSource (SIGHUP, the admin API's
// POST /admin/v1/reload) reads the new configuration: load reads the file again
// with the same flags and environment applied.
func WithConfigSource(load func() (*config.Config, error)) Option {
	return func(o *options) { o.source = load }
}

// ReloadFromSource loads the configuration from the source given to New
// (WithConfigSource) and applies it with Reload. A file that does not
// load leaves the running configuration untouched.
func (g *Gateway) ReloadFromSource() ([]string, error) {
	if g.reload.source == nil {
		return nil, errors.New("gateway: reload: no configuration source")
	}
	next, err := g.reload.source()
	if err != nil {
		g.logger.Error("configuration reload failed: nothing changed", "err", err)
		return nil, fmt.Errorf("gateway: reload: %w; nothing changed", err)
	}
	changed, err := g.Reload(next)
	if err != nil {
		g.logger.Error("configuration reload refused: nothing changed", "err", err)
	}
	return changed, err
}

// WithLogLevel lets Reload change the level of the gateway's logger, which
// must have been built on level (obs.NewLoggerVar).
func WithLogLevel(level *slog.LevelVar) Option { return func(o *options) { o.level = level } }

// Reload applies a new configuration to the running gateway (SIGHUP, or
// the admin API's POST /admin/v1/reload): the log level, the trace sample
// ratio, the queue's size and longest wait, and each model's context
// length, context policy and output cap (admission and /v1/models follow
// at once; requests already admitted keep their limits). It
// validates next first and refuses it whole, naming the fields, when it
// changes anything else (those need a restart); in either failure the
// running configuration is untouched. It returns the fields it changed.
func (g *Gateway) Reload(next *config.Config) ([]string, error) {
	if err := next.ValidateGateway(); err != nil {
		return nil, fmt.Errorf("gateway: reload: the new configuration is invalid, nothing changed: %w", err)
	}
	rs := &g.reload
	rs.mu.Lock()
	defer rs.mu.Unlock()
	cur := rs.live
	if cur == nil {
		cur = g.cfg
	}
	changed := diffConfig(cur, next)
	var refused, applied []string
	for _, path := range changed {
		if !isReloadable(path) || (path == "observability.log_level" && rs.level == nil) ||
			(path == "observability.tracing.sample_ratio" && rs.ratio == nil) {
			refused = append(refused, path)
		} else {
			applied = append(applied, path)
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("%w: %s only change with a restart; nothing changed", ErrReloadRefused, strings.Join(refused, ", "))
	}
	lvl, err := obs.ParseLevel(next.Observability.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("gateway: reload: %w", err)
	}
	if rs.level != nil {
		rs.level.Set(lvl)
	}
	if rs.ratio != nil {
		rs.ratio.Set(next.Observability.Tracing.SampleRatio)
	}
	g.queue.SetMaxWaiting(next.Gateway.Queue.MaxWaiting)
	g.queue.SetMaxWait(next.Gateway.Queue.MaxWait)
	for _, m := range admission.ModelsFromConfig(next.Models) {
		g.admission.SetModel(m)
	}
	rs.live = next
	g.logger.Info("configuration reloaded", "changed", applied)
	return applied, nil
}

// adminReload is the admin API's POST /reload; nil without a source.
func (g *Gateway) adminReload() func() ([]string, error) {
	if g.reload.source == nil {
		return nil
	}
	return g.ReloadFromSource
}

// listIndex matches the index of a list element in a field's path.
var listIndex = regexp.MustCompile(`\[[0-9]+\]`)

func isReloadable(path string) bool {
	return slices.Contains(reloadable, listIndex.ReplaceAllString(path, "[*]"))
}

// diffConfig returns the paths (by YAML name, e.g. "gateway.listen",
// "models[0].context_length") of the fields that differ between a and b.
func diffConfig(a, b *config.Config) []string {
	var out []string
	diffValue("", reflect.ValueOf(*a), reflect.ValueOf(*b), &out)
	return out
}

func diffValue(path string, a, b reflect.Value, out *[]string) {
	switch a.Kind() {
	case reflect.Struct:
		t := a.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if path != "" {
				name = path + "." + name
			}
			diffValue(name, a.Field(i), b.Field(i), out)
		}
	case reflect.Slice:
		if a.Len() != b.Len() {
			*out = append(*out, path)
			return
		}
		for i := range a.Len() {
			diffValue(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i), out)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
	}
}
