package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Dist is the median and 99th percentile (nearest rank) of a set of
// durations.
type Dist struct {
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
}

// distOf returns d's percentiles; it sorts d.
func distOf(d []time.Duration) Dist {
	if len(d) == 0 {
		return Dist{}
	}
	slices.Sort(d)
	at := func(p int) time.Duration { return d[max((p*len(d)+99)/100, 1)-1] }
	return Dist{P50: at(50), P99: at(99)}
}

// Result is one endpoint's figures over every measured round.
type Result struct {
	Endpoint Endpoint `json:"endpoint"`
	// Requests counts every request sent, failed ones included.
	Requests int `json:"requests"`
	// Errors counts failed requests by kind: http_<status>, transport,
	// truncated_stream, bad_stream.
	Errors map[string]int `json:"errors,omitempty"`
	// ErrorSamples are the first few failures' messages.
	ErrorSamples []string `json:"error_samples,omitempty"`
	// PromptTokens and OutputTokens sum the endpoint's usage over the
	// successful requests.
	PromptTokens int64 `json:"prompt_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// Elapsed sums the rounds' wall times, each until its last request
	// ended (the drain after the clients stopped sending included).
	Elapsed time.Duration `json:"elapsed_ns"`
	// Window sums the rounds' sending windows: the time the clients kept
	// every request slot busy, drains left out.
	Window time.Duration `json:"window_ns"`
	// WindowOutputTokens are the successful requests' output tokens, each
	// request's spread evenly over its lifetime (sent to ended) and counted
	// for the part of it inside its round's window. Text chunk arrival
	// times cannot place them: a server holds back text until it decodes
	// to whole characters, and a model that emits many partial byte tokens
	// streams its text in a few bursts.
	WindowOutputTokens float64 `json:"window_output_tokens"`
	// TTFT is the time from sending a request to its first generated
	// text; ITL the gaps between successive text chunks (a chunk may
	// carry several tokens); TPOT each request's time per output token
	// after the first; Latency the whole request's.
	TTFT    Dist `json:"ttft"`
	ITL     Dist `json:"itl"`
	TPOT    Dist `json:"tpot"`
	Latency Dist `json:"latency"`
}

// Failed is the number of failed requests.
func (r Result) Failed() int {
	n := 0
	for _, v := range r.Errors {
		n += v
	}
	return n
}

// OutputTokensPerSecond is the steady-state output throughput: the tokens
// produced within the sending windows over the windows' time. Each round
// ends with a drain at falling concurrency, as long as the slowest
// request the round left running: counting it measures how a round ends,
// not the load the clients keep up.
func (r Result) OutputTokensPerSecond() float64 {
	if r.Window <= 0 {
		return 0
	}
	return r.WindowOutputTokens / r.Window.Seconds()
}

// DrainedOutputTokensPerSecond is the output of every successful request
// over the rounds' whole wall time, drains included.
func (r Result) DrainedOutputTokensPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OutputTokens) / r.Elapsed.Seconds()
}

// perRequest is n over the successful requests.
func (r Result) perRequest(n int64) float64 {
	ok := r.Requests - r.Failed()
	if ok == 0 {
		return 0
	}
	return float64(n) / float64(ok)
}

// maxErrorSamples bounds Result.ErrorSamples.
const maxErrorSamples = 5

// accumulator gathers one endpoint's samples over the rounds.
type accumulator struct {
	r                        Result
	ttft, itl, tpot, latency []time.Duration
}

// add counts one round: its samples, its wall time, and its sending
// window, from start to end.
func (a *accumulator) add(samples []sample, elapsed time.Duration, start, end time.Time) {
	a.r.Elapsed += elapsed
	a.r.Window += end.Sub(start)
	for _, s := range samples {
		a.r.Requests++
		if s.err != nil {
			if a.r.Errors == nil {
				a.r.Errors = map[string]int{}
			}
			a.r.Errors[errorKind(s.err)]++
			if len(a.r.ErrorSamples) < maxErrorSamples {
				a.r.ErrorSamples = append(a.r.ErrorSamples, s.err.Error())
			}
			continue
		}
		out := s.res.OutputTokens
		if out == 0 { // no usage: count the text chunks
			out = int64(len(s.res.Arrivals))
		}
		a.r.PromptTokens += s.res.PromptTokens
		a.r.OutputTokens += out
		a.latency = append(a.latency, s.end.Sub(s.start))
		if from, to := later(s.start, start), earlier(s.end, end); to.After(from) {
			a.r.WindowOutputTokens += float64(out) * to.Sub(from).Seconds() / s.end.Sub(s.start).Seconds()
		}
		arr := s.res.Arrivals
		if len(arr) == 0 {
			continue
		}
		a.ttft = append(a.ttft, arr[0].Sub(s.start))
		for i := 1; i < len(arr); i++ {
			a.itl = append(a.itl, arr[i].Sub(arr[i-1]))
		}
		if out > 1 {
			a.tpot = append(a.tpot, arr[len(arr)-1].Sub(arr[0])/time.Duration(out-1))
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (a *accumulator) result(e Endpoint) Result {
	r := a.r
	r.Endpoint = e
	r.TTFT, r.ITL, r.TPOT, r.Latency = distOf(a.ttft), distOf(a.itl), distOf(a.tpot), distOf(a.latency)
	return r
}

// Report is a run's options and each endpoint's result, in the order of
// Options.Endpoints.
type Report struct {
	Options Options
	Results []Result
}

// WriteMarkdown writes the report as a table, with a ratio column (first
// endpoint ÷ second) when two endpoints ran, followed by any errors.
func (rep Report) WriteMarkdown(w io.Writer) error {
	o := rep.Options
	var b strings.Builder
	fmt.Fprintf(&b, "%d streaming clients per endpoint, %s each in rounds of ≤ %s; prompts of %s words (%.0f%% shared prefix), max_tokens %s, temperature %g, seed %d\n\n",
		o.Clients, o.Duration, o.Round, o.PromptWords, o.SharedPrefix*100, o.OutputTokens, o.Temperature, o.Seed)
	two := len(rep.Results) == 2
	b.WriteString("| figure |")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, " %s |", r.Endpoint.Name)
	}
	if two {
		b.WriteString(" ratio (first ÷ second) |")
	}
	columns := len(rep.Results)
	if two {
		columns++
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", columns) + "\n")
	row := func(name string, f func(Result) float64, format string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, r := range rep.Results {
			fmt.Fprintf(&b, " "+format+" |", f(r))
		}
		if two {
			if d := f(rep.Results[1]); d != 0 {
				fmt.Fprintf(&b, " %.2f |", f(rep.Results[0])/d)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	row("output tokens/s (sending windows)", Result.OutputTokensPerSecond, "%.1f")
	row("output tokens/s (drains included)", Result.DrainedOutputTokensPerSecond, "%.1f")
	row("TTFT p50 (ms)", func(r Result) float64 { return ms(r.TTFT.P50) }, "%.1f")
	row("TTFT p99 (ms)", func(r Result) float64 { return ms(r.TTFT.P99) }, "%.1f")
	row("inter-token latency p50 (ms)", func(r Result) float64 { return ms(r.ITL.P50) }, "%.1f")
	row("inter-token latency p99 (ms)", func(r Result) float64 { return ms(r.ITL.P99) }, "%.1f")
	row("time per output token p50 (ms)", func(r Result) float64 { return ms(r.TPOT.P50) }, "%.1f")
	row("request latency p50 (ms)", func(r Result) float64 { return ms(r.Latency.P50) }, "%.1f")
	row("request latency p99 (ms)", func(r Result) float64 { return ms(r.Latency.P99) }, "%.1f")
	row("requests", func(r Result) float64 { return float64(r.Requests) }, "%.0f")
	row("failed requests", func(r Result) float64 { return float64(r.Failed()) }, "%.0f")
	row("prompt tokens per request (usage)", func(r Result) float64 { return r.perRequest(r.PromptTokens) }, "%.1f")
	row("output tokens per request (usage)", func(r Result) float64 { return r.perRequest(r.OutputTokens) }, "%.1f")
	for _, r := range rep.Results {
		if r.Failed() == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s: %d failed requests %v; first: %s\n", r.Endpoint.Name, r.Failed(), r.Errors, strings.Join(r.ErrorSamples, " | "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as one JSON object: the options (without
// API keys) and, per endpoint, its figures with durations in nanoseconds
// and output_tokens_per_second.
func (rep Report) WriteJSON(w io.Writer) error {
	type result struct {
		Result
		OutputTokensPerSecond        float64 `json:"output_tokens_per_second"`
		DrainedOutputTokensPerSecond float64 `json:"drained_output_tokens_per_second"`
		Failed                       int     `json:"failed"`
	}
	out := struct {
		Options Options  `json:"options"`
		Results []result `json:"results"`
	}{Options: rep.Options}
	for _, r := range rep.Results {
		out.Results = append(out.Results, result{r, r.OutputTokensPerSecond(), r.DrainedOutputTokensPerSecond(), r.Failed()})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
