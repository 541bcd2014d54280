package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/warden-ai/warden/cmd/warden/bench/serve"
	"github.com/warden-ai/warden/internal/adminclient"
)

// runBenchServe drives one OpenAI-compatible endpoint, or two in one
// interleaved run, with streaming clients.
func runBenchServe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench serve", "bench serve --url URL --model M [--key K] [--compare URL --compare-model M --compare-key K] [--clients 8] [--duration 60s] [--prompt-words 200:240] [--output-tokens 64] [--shared-prefix 0] [--json]")
	var a, b serve.Endpoint
	fs.StringVar(&a.URL, "url", "", "base URL of the endpoint, e.g. https://127.0.0.1:8443/v1 (required)")
	fs.StringVar(&a.Model, "model", "", "model of every request to --url (required)")
	fs.StringVar(&a.APIKey, "key", os.Getenv("OPENAI_API_KEY"), "API key for --url (default $OPENAI_API_KEY)")
	fs.StringVar(&a.Name, "name", "", "name of --url in the report (default its URL)")
	fs.StringVar(&b.URL, "compare", "", "base URL of a second endpoint, run interleaved with the first; the report adds first ÷ second")
	fs.StringVar(&b.Model, "compare-model", "", "model of the second endpoint (default --model)")
	fs.StringVar(&b.APIKey, "compare-key", "", "API key of the second endpoint (default --key)")
	fs.StringVar(&b.Name, "compare-name", "", "name of the second endpoint in the report")
	o := serve.Options{}
	fs.IntVar(&o.Clients, "clients", 8, "streaming clients per endpoint, each sending its next request when the last ends")
	fs.DurationVar(&o.Duration, "duration", time.Minute, "measured time per endpoint")
	fs.DurationVar(&o.Round, "round", 10*time.Second, "longest stretch of one endpoint before the other takes its turn")
	prompt := fs.String("prompt-words", "200:240", "prompt length in words (one token each in common vocabularies): N or MIN:MAX, uniform")
	output := fs.String("output-tokens", "64", "max_tokens: N or MIN:MAX, uniform")
	fs.Float64Var(&o.SharedPrefix, "shared-prefix", 0, "fraction of every prompt that is a prefix shared by all requests (0–1)")
	fs.Float64Var(&o.Temperature, "temperature", 0, "sampling temperature")
	fs.BoolVar(&o.IgnoreEOS, "ignore-eos", false, "send ignore_eos (vLLM, llama-server) so every answer is max_tokens long; warden refuses it")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the prompts (both endpoints get the same ones)")
	fs.IntVar(&o.Warmup, "warmup", 2, "unmeasured requests per client and endpoint first")
	ca := fs.String("ca", "", "PEM file of a CA to trust besides the system's (warden up prints its CA)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if a.URL == "" || a.Model == "" {
		fmt.Fprintln(e.stderr, "bench serve: --url and --model are required")
		fs.Usage()
		return errUsage
	}
	var err error
	if o.PromptWords, err = serve.ParseRange(*prompt); err != nil {
		return fmt.Errorf("bench serve: --prompt-words %w", err)
	}
	if o.OutputTokens, err = serve.ParseRange(*output); err != nil {
		return fmt.Errorf("bench serve: --output-tokens %w", err)
	}
	o.Endpoints = []serve.Endpoint{a}
	if b.URL != "" {
		if b.Model == "" {
			b.Model = a.Model
		}
		if b.APIKey == "" {
			b.APIKey = a.APIKey
		}
		o.Endpoints = append(o.Endpoints, b)
	}
	if *ca != "" {
		if o.HTTPClient, err = clientTrusting(*ca, o.Clients*len(o.Endpoints)); err != nil {
			return fmt.Errorf("bench serve: %w", err)
		}
	}
	fmt.Fprintf(e.stderr, "warden bench serve: %d clients, %s per endpoint…\n", o.Clients, o.Duration)
	rep, err := serve.Run(ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return rep.WriteJSON(e.stdout)
	}
	fmt.Fprintln(e.stdout, "## warden bench serve")
	fmt.Fprintln(e.stdout)
	return rep.WriteMarkdown(e.stdout)
}

// clientTrusting is an HTTP client that also trusts the CA in caFile and
// keeps up to conns idle connections per host.
func clientTrusting(caFile string, conns int) (*http.Client, error) {
	tr, err := adminclient.NewTransport(caFile)
	if err != nil {
		return nil, err
	}
	tr.MaxIdleConnsPerHost = conns
	return &http.Client{Transport: tr}, nil
}
