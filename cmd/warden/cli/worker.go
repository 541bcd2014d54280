package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/worker"
)

// workerFlag is a `warden worker` flag that overrides one config field
// when given.
type workerFlag struct {
	name, usage string
	set         func(c *config.Config, v string) error
}

var workerFlags = []workerFlag{
	{"role", "both, prefill or decode (worker.role)",
		func(c *config.Config, v string) error { c.Worker.Role = config.Role(v); return nil }},
	{"model", "served model name, listed in models (worker.model)",
		func(c *config.Config, v string) error { c.Worker.Model = v; return nil }},
	{"model-dir", "Hugging Face model directory, or a .gguf file (worker.model_dir)",
		func(c *config.Config, v string) error { c.Worker.ModelDir = v; return nil }},
	{"listen", "gRPC control listener host:port (worker.listen)",
		func(c *config.Config, v string) error { c.Worker.Listen = v; return nil }},
	{"transfer-listen", "KV transfer listener host:port of decode and both workers (worker.transfer.listen)",
		func(c *config.Config, v string) error { c.Worker.Transfer.Listen = v; return nil }},
	{"transfer-backend", "tcp or shm (worker.transfer.backend)",
		func(c *config.Config, v string) error {
			c.Worker.Transfer.Backend = config.TransferBackend(v)
			return nil
		}},
	{"kv-memory", "KV pool budget such as 512MiB; 0 = a fraction of free memory, within the cgroup limit (worker.kv.memory_bytes)",
		func(c *config.Config, v string) (err error) {
			c.Worker.KV.MemoryBytes, err = config.ParseByteSize(v)
			return err
		}},
	{"quantize", "q8 quantizes the weights at load; file keeps the file's type (worker.weights)",
		func(c *config.Config, v string) error { c.Worker.Weights = config.WeightFormat(v); return nil }},
	{"dtype", "element type to compute with: auto (the checkpoint's), f32, f16, bf16 (converted at load) or q8 (worker.dtype)",
		func(c *config.Config, v string) error { c.Worker.DType = config.DType(v); return nil }},
	{"numerics", "how bf16 weights are multiplied: exact, or bf16 (activations rounded to bf16, AVX512-BF16) (worker.numerics)",
		func(c *config.Config, v string) error { c.Worker.Numerics = config.Numerics(v); return nil }},
	{"id", "worker ID in the registry, logs and metrics (worker.id)",
		func(c *config.Config, v string) error { c.Worker.ID = v; return nil }},
}

// runWorker runs `warden worker` until the context ends (Ctrl-C or
// SIGTERM), then drains (worker.drain_timeout; a second signal aborts at
// once) and shuts down cleanly.
func runWorker(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "worker", "worker [--config FILE] [--role prefill|decode|both] [--model-dir DIR] [flags]")
	cfgPath := fs.String("config", "", "YAML configuration file (the defaults and WARDEN_* variables apply either way)")
	var gateways listFlag
	fs.Var(&gateways, "gateway", "gateway registry host:port; repeat for several (replaces worker.gateways)")
	exitOnRefusal := fs.Bool("exit-on-refusal", false, "exit with the gateway's cause when a gateway refuses the registration, instead of retrying")
	for _, f := range workerFlags {
		fs.String(f.name, "", f.usage)
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	var ferr error
	fs.Visit(func(fl *flag.Flag) {
		for _, f := range workerFlags {
			if f.name == fl.Name && ferr == nil {
				ferr = f.set(cfg, fl.Value.String())
			}
		}
	})
	if ferr != nil {
		return ferr
	}
	if len(gateways) > 0 {
		cfg.Worker.Gateways = gateways
	}
	if err := cfg.ValidateWorker(); err != nil {
		return err
	}
	logger, err := obs.NewLogger(e.stderr, cfg.Observability.LogLevel, string(cfg.Observability.LogFormat))
	if err != nil {
		return err
	}
	opts := []worker.Option{worker.WithLogger(logger), worker.WithVersion(Version)}
	if *exitOnRefusal {
		opts = append(opts, worker.WithExitOnRefusal())
	}
	if isTerminal(e.stderr) {
		opts = append(opts, worker.WithProgress(func(s worker.Step) { fmt.Fprintf(e.stderr, "warden worker: %s\n", stepLine(s)) }))
	}
	fopts, err := testFaults(logger)
	if err != nil {
		return err
	}
	w, err := worker.New(cfg, append(opts, fopts...)...)
	if err != nil {
		return err
	}
	defer onSecondSignal(w.AbortNow)()
	return w.Run(ctx)
}

// listFlag is a repeatable string flag.
type listFlag []string

// String joins the values with commas.
func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Set appends one value.
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}
