package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"github.com/warden-ai/warden/cmd/warden/bench"
	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/internal/obs"
	"github.com/warden-ai/warden/worker/model"
	"github.com/warden-ai/warden/worker/runtime"
)

func runBench(ctx context.Context, e *env, args []string) error {
	subs := map[string]func(context.Context, *env, []string) error{
		"engine": runBenchEngine, "gateway": runBenchGateway, "tenants": runBenchTenants, "pd": runBenchPD,
		"prefix": runBenchPrefix, "fleet": runBenchFleet, "serve": runBenchServe, "rolling": runBenchRolling,
		"lora": runBenchLoRA,
	}
	if len(args) > 0 {
		if run, ok := subs[args[0]]; ok {
			return run(ctx, e, args[1:])
		}
	}
	fmt.Fprintln(e.stderr, "usage: warden bench engine|gateway|tenants|pd|prefix|fleet|serve|rolling|lora [flags]\n\nRun 'warden bench <benchmark> -h' for its flags.")
	return groupUsageResult(args)
}

// redisOff is the --redis value that skips Redis.
const redisOff = "off"

// defaultRedis is the Redis the benchmarks use unless --redis says
// otherwise: $WARDEN_TEST_REDIS_ADDR, or the default address.
func defaultRedis() string {
	if a := os.Getenv(bench.EnvRedisAddr); a != "" {
		return a
	}
	return bench.DefaultRedisAddr
}

// intsFlag is a comma-separated list of integers.
type intsFlag []int

func (l *intsFlag) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intsFlag) Set(v string) error {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not a comma-separated list of integers", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// benchLogger passes the servers' warnings and errors to stderr.
func benchLogger(e *env) (*slog.Logger, error) { return obs.NewLogger(e.stderr, "warn", "text") }

func runBenchGateway(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench gateway", "bench gateway [--duration 10s] [--concurrency 1,4,16] [--redis ADDR|off] [--threads N] [--max-tokens N]")
	conc := intsFlag(bench.DefaultConcurrency())
	fs.Var(&conc, "concurrency", "requests in flight, comma-separated (1 is always measured)")
	duration := fs.Duration("duration", bench.DefaultDuration, "run time of each path at each concurrency")
	round := fs.Duration("round", bench.DefaultRound, "longest stretch of one path before the next takes its turn")
	redisAddr := fs.String("redis", defaultRedis(), "Redis of the Redis-store gateway ($"+bench.EnvRedisAddr+" sets the default); "+redisOff+" to skip it")
	// The tiny model's steps are too small to gain from more threads; the
	// other cores are left to the gateways, the client and Redis.
	threads := fs.Int("threads", 1, "worker compute threads (0 = every core)")
	maxTokens := fs.Int("max-tokens", bench.DefaultMaxTokens, "max_tokens of every request")
	prompt := fs.String("prompt", bench.DefaultPrompt, "user message of every request")
	if err := parse(fs, args); err != nil {
		return err
	}
	logger, err := benchLogger(e)
	if err != nil {
		return err
	}
	if *redisAddr == redisOff {
		*redisAddr = ""
	}
	o := bench.GatewayOptions{
		Duration: *duration, Round: *round, Concurrency: conc, RedisAddr: *redisAddr,
		Threads: *threads, Prompt: *prompt, MaxTokens: *maxTokens, Logger: logger,
	}
	fmt.Fprintf(e.stderr, "warden bench gateway: %s per path and concurrency…\n", *duration)
	rep, err := bench.RunGateway(ctx, o)
	if err != nil {
		if *redisAddr != "" {
			err = fmt.Errorf("%w (pass --redis %s to skip the Redis-store gateway)", err, redisOff)
		}
		return err
	}
	fmt.Fprintln(e.stdout, "## warden bench gateway")
	fmt.Fprintln(e.stdout)
	return rep.WriteMarkdown(e.stdout)
}

func runBenchTenants(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench tenants", "bench tenants [--redis ADDR] [--iterations N] [--duration 5s] [--concurrency 1,4,16]")
	conc := intsFlag(bench.DefaultConcurrency())
	fs.Var(&conc, "concurrency", "requests in flight, comma-separated (1 is always measured)")
	iterations := fs.Int("iterations", bench.DefaultIterations, "requests timed one at a time on each store")
	duration := fs.Duration("duration", bench.DefaultDuration/2, "run time of each store at each concurrency")
	redisAddr := fs.String("redis", defaultRedis(), "Redis to measure ($"+bench.EnvRedisAddr+" sets the default)")
	if err := parse(fs, args); err != nil {
		return err
	}
	logger, err := benchLogger(e)
	if err != nil {
		return err
	}
	rep, err := bench.RunTenants(ctx, bench.TenantsOptions{
		RedisAddr: *redisAddr, Iterations: *iterations, Duration: *duration, Concurrency: conc, Logger: logger,
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "## warden bench tenants")
	fmt.Fprintln(e.stdout)
	return rep.WriteMarkdown(e.stdout)
}

func runBenchEngine(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench engine", "bench engine [--model-dir DIR] [--dtype auto|f32|f16|bf16] [--quantize q8] [--numerics exact|bf16] [--threads N] [--prompt N] [--decode N] [--batch N]")
	dir := fs.String("model-dir", "", "model directory (default: the small preset, generated into the user cache on first use)")
	threads := fs.Int("threads", goruntime.NumCPU(), "compute threads")
	promptTokens := fs.Int("prompt", 512, "prefill prompt length")
	decode := fs.Int("decode", 32, "tokens generated per decode sequence")
	batch := fs.Int("batch", 8, "larger decode batch")
	bw := fs.Int("bandwidth-bytes", 512<<20, "buffer size of the memory bandwidth probe")
	dtype := fs.String("dtype", "auto", "element type to compute with: f32, f16 or bf16 (with --model-dir the file's matrices are converted at load, as worker.dtype; without, the small preset is generated in it); auto keeps the file's (f32 for the preset)")
	quantize := fs.String("quantize", string(config.WeightsFile), "q8 quantizes the weights at load; file keeps the file's type")
	numerics := fs.String("numerics", string(config.NumericsExact), "how bf16 weights are multiplied: exact, or bf16 (bf16 products, as worker.numerics)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *quantize != string(config.WeightsFile) && *quantize != string(config.WeightsQ8) {
		return fmt.Errorf("bench engine: --quantize %q: want file or q8", *quantize)
	}
	if *numerics != string(config.NumericsExact) && *numerics != string(config.NumericsBF16) {
		return fmt.Errorf("bench engine: --numerics %q: want exact or bf16", *numerics)
	}
	var convert model.DType // at load: a --model-dir converted to --dtype
	if *dtype != string(config.DTypeAuto) {
		dt, err := model.ParseDType(*dtype)
		if err != nil {
			return fmt.Errorf("bench engine: --dtype: %w", err)
		}
		convert = dt
	}
	if *dir == "" {
		var err error
		if *dir, err = cachedPreset(e, model.PresetSmall, cmp.Or(convert, model.F32)); err != nil {
			return err
		}
		convert = ""
	}
	var rep runtime.BenchReport
	err := withRuntime(ctx, runtime.Options{
		ModelDir: *dir, Threads: *threads, PageTokens: 16, Quantize: *quantize == string(config.WeightsQ8), DType: convert,
		BF16Dot:     *numerics == string(config.NumericsBF16),
		KVBytes:     int64(*batch+1) * int64(*promptTokens+*decode+16) * 1 << 17,
		ChunkTokens: *promptTokens, MaxBatch: max(*batch, 1),
	}, func(rt *runtime.Runtime) (err error) {
		rep, err = rt.BenchEngine(ctx, *threads, runtime.BenchOptions{
			PromptTokens: *promptTokens, DecodeTokens: *decode, Batch: *batch, BandwidthBytes: *bw,
		})
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "warden bench engine — model %s\n\n", *dir)
	rep.WriteTable(e.stdout)
	return nil
}

func runBenchLoRA(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench lora", "bench lora [--model-dir DIR] [--threads N] [--adapters 8] [--rank 16] [--adapter-dtype bf16|f32] [--batch 16] [--prompt N] [--decode N] [--rounds N]")
	dir := fs.String("model-dir", "", "model directory (default: the small preset, generated into the user cache on first use)")
	threads := fs.Int("threads", goruntime.NumCPU(), "compute threads")
	o := runtime.LoRABenchOptions{}
	fs.IntVar(&o.Adapters, "adapters", 8, "different adapters in the batch")
	fs.IntVar(&o.Rank, "rank", 16, "rank of every adapter (all seven projections targeted)")
	fs.IntVar(&o.Batch, "batch", 16, "sequences in the batch")
	fs.IntVar(&o.PromptTokens, "prompt", 64, "prompt length of every sequence")
	fs.IntVar(&o.DecodeTokens, "decode", 32, "tokens generated per sequence")
	fs.IntVar(&o.Rounds, "rounds", 3, "base and adapter runs alternate this many times; the best of each counts")
	dtype := fs.String("adapter-dtype", "bf16", "values of the adapters: bf16 (held in bf16, as a bf16-trained PEFT adapter) or f32")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dtype != "bf16" && *dtype != "f32" {
		return fmt.Errorf("bench lora: --adapter-dtype %q: want bf16 or f32", *dtype)
	}
	o.BF16 = *dtype == "bf16"
	if *dir == "" {
		var err error
		if *dir, err = cachedPreset(e, model.PresetSmall, model.F32); err != nil {
			return err
		}
	}
	var rep runtime.LoRABenchReport
	err := withRuntime(ctx, runtime.Options{
		ModelDir: *dir, Threads: *threads, PageTokens: 16,
		KVBytes:     int64(o.Batch+1) * int64(o.PromptTokens+o.DecodeTokens+16) * 1 << 17,
		ChunkTokens: max(o.PromptTokens, 512), MaxBatch: max(o.Batch, 1),
	}, func(rt *runtime.Runtime) (err error) {
		rep, err = rt.BenchLoRA(ctx, o)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "warden bench lora — model %s\n\n", *dir)
	rep.WriteTable(e.stdout)
	return nil
}

// cachedPreset returns a directory holding the named preset with seed 1
// in element type dt, generating it under the user cache directory on
// first use.
func cachedPreset(e *env, preset string, dt model.DType) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	name := preset + "-seed1"
	if dt != model.F32 {
		name += "-" + strings.ToLower(string(dt))
	}
	dir := filepath.Join(base, "warden", "models", name)
	if _, err := os.Stat(filepath.Join(dir, model.ConfigFile)); err == nil {
		return dir, nil
	}
	fmt.Fprintf(e.stderr, "generating the %s model in %s (first use)…\n", preset, dir)
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := model.Init(tmp, preset, 1, dt); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	return dir, nil
}

func runBenchPD(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench pd", "bench pd [--duration 20s] [--round 2s] [--concurrency 4] [--transfer tcp|shm] [--max-tokens 64] [--json]")
	o := bench.PDOptions{}
	fs.DurationVar(&o.Duration, "duration", 20*time.Second, "how long the load runs (in each mode)")
	fs.DurationVar(&o.Round, "round", 2*time.Second, "length of one round before the checks are switched (warden_nochecks build)")
	fs.IntVar(&o.Concurrency, "concurrency", 4, "requests kept in flight")
	transfer := fs.String("transfer", "tcp", "KV transfer backend: tcp or shm")
	fs.IntVar(&o.MaxTokens, "max-tokens", 64, "max_tokens of every request")
	fs.IntVar(&o.Threads, "threads", 1, "compute threads per worker")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	o.Transfer = config.TransferBackend(*transfer)
	rep, err := bench.RunPD(ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(e.stdout).Encode(map[string]any{
			"transfer": rep.Transfer, "on_tokens_per_second": rep.On.TokensPerSecond(),
			"off_tokens_per_second": rep.Off.TokensPerSecond(), "compared": rep.Compared,
		})
	}
	rep.WriteMarkdown(e.stdout)
	return nil
}

// withRuntime opens a runtime with opts, runs its engine while fn uses it,
// then stops and closes it: what every engine benchmark needs around it.
func withRuntime(ctx context.Context, opts runtime.Options, fn func(*runtime.Runtime) error) error {
	rt, err := runtime.Open(opts)
	if err != nil {
		return err
	}
	defer rt.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() { stop(); <-done }()
	return fn(rt)
}
