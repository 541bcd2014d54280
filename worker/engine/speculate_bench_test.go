package engine_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/warden-ai/warden/worker/engine"
)

// decodeRun is one timed sequence: its tokens and the time from its first
// token to its end (decode only; the prefill is not timed), in wall-clock
// time and in CPU time of the process (every thread; less disturbed by
// other processes on a busy host).
type decodeRun struct {
	tokens      int
	decode, cpu time.Duration
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timedRun runs one greedy request to the end and times its decode.
func (r *rig) timedRun(b *testing.B, name string, p []int32, n int, speculate bool) decodeRun {
	b.Helper()
	o := owner(name)
	pages, err := r.pool.Reserve(o, len(p)+n)
	if err != nil {
		b.Fatal(err)
	}
	defer r.pool.Release(o)
	st, err := r.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: p, Sampling: engine.Sampling{MaxTokens: n, IgnoreEOS: true, Speculate: &speculate}})
	if err != nil {
		b.Fatal(err)
	}
	var first time.Time
	var firstCPU time.Duration
	var run decodeRun
	for {
		ev, err := st.Next(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		switch ev.Kind {
		case engine.EventToken:
			if run.tokens == 0 {
				first, firstCPU = time.Now(), cpuTime(b)
			}
			run.tokens++
		case engine.EventDone:
			if ev.Result.Err != nil || run.tokens != n {
				b.Fatalf("%s: %d tokens, %v", name, run.tokens, ev.Result.Err)
			}
			run.decode, run.cpu = time.Since(first), cpuTime(b)-firstCPU
			return run
		}
	}
}

// BenchmarkSpeculativeDecodeSmall measures n-gram speculation on the
// small model (768 hidden, 12 layers, 32000-token vocabulary), batch 1,
// greedy, as ratios of decode tokens/s with speculation on to off,
// measured in the same run: each iteration decodes the workload once
// with speculation and once without, in alternating order, and
// speedup-median is the median over iterations of the pair's decode time
// ratio (robust to a busy host), speedup-total the ratio of the totals,
// and speedup-cpu-* the same for the process's CPU time (on a host shared
// with other work, wall-clock time also measures them):
//
//   - copy: a prompt whose text the output repeats — the model's weights
//     edited by quietAttention(0) so its output continues the walk its
//     prompt already took (a stand-in for quoting a file from the prompt;
//     each forward costs the same as the unedited model's). Goal ≥ 1.5.
//   - random: the unedited model on a random prompt; nothing to copy.
//     Goal ≥ 0.97 (at most 3% slower).
//   - rejected: the worst case, the copying model on a prompt where every
//     pair of tokens it will produce occurs followed by a wrong token, so
//     proposals are made at most steps and (nearly) all fail: the cost of
//     verifying in vain.
//
// WARDEN_SPEC_K and WARDEN_SPEC_NGRAM_MIN override the default
// Speculation (K, NgramMin).
// Run with: go test -run '^$' -bench SpeculativeDecodeSmall -benchtime 15x ./worker/engine/
func BenchmarkSpeculativeDecodeSmall(b *testing.B) {
	m := smallModel(b)
	sp := engine.Speculation{}
	if k, err := strconv.Atoi(os.Getenv("WARDEN_SPEC_K")); err == nil {
		sp.K = k
	}
	if n, err := strconv.Atoi(os.Getenv("WARDEN_SPEC_NGRAM_MIN")); err == nil {
		sp.NgramMin = n
	}
	const tokens = 32
	copyRig := newRig(b, rigOptions{model: m, threads: 2, chunk: 256, maxBatch: 1, pages: 128, spec: sp, edit: quietAttention(0)})
	plainRig := newRig(b, rigOptions{model: m, threads: 2, chunk: 256, maxBatch: 1, pages: 128, spec: sp})
	copyPrompt := prompt(7, 16, m.Config.VocabSize)
	copyPrompt = append(copyPrompt, copyRig.run(b, owner("seed"), copyPrompt, greedy(240)).tokens...)
	randomPrompt := prompt(8, 256, m.Config.VocabSize)
	// Every pair of consecutive tokens of the walk the copying model takes
	// from a head, each followed by a random token: every proposal is made
	// and fails at its first token.
	head := prompt(9, 16, m.Config.VocabSize)
	walk := append(head[len(head)-1:], copyRig.run(b, owner("walk"), head, greedy(tokens+1)).tokens...)
	noise := prompt(10, len(walk), m.Config.VocabSize)
	rejectPrompt := slices.Clone(head)
	for i := range len(walk) - 2 {
		rejectPrompt = append(rejectPrompt, walk[i], walk[i+1], noise[i])
	}
	rejectPrompt = append(rejectPrompt, head...)
	for _, w := range []struct {
		name string
		r    *rig
		p    []int32
	}{{"copy", copyRig, copyPrompt}, {"random", plainRig, randomPrompt}, {"rejected", copyRig, rejectPrompt}} {
		b.Run(w.name, func(b *testing.B) {
			var on, off decodeRun
			var ratios, cpuRatios []float64
			before := w.r.eng.Stats()
			i := 0
			for b.Loop() {
				i++
				var pair [2]decodeRun // off, on
				for _, speculate := range []bool{i%2 == 0, i%2 != 0} {
					run := w.r.timedRun(b, fmt.Sprint(w.name, i, speculate), w.p, tokens, speculate)
					run.tokens-- // the first token is the prefill's
					if speculate {
						pair[1] = run
					} else {
						pair[0] = run
					}
				}
				on.tokens, on.decode, on.cpu = on.tokens+pair[1].tokens, on.decode+pair[1].decode, on.cpu+pair[1].cpu
				off.tokens, off.decode, off.cpu = off.tokens+pair[0].tokens, off.decode+pair[0].decode, off.cpu+pair[0].cpu
				ratios = append(ratios, pair[0].decode.Seconds()/pair[1].decode.Seconds())
				cpuRatios = append(cpuRatios, pair[0].cpu.Seconds()/pair[1].cpu.Seconds())
			}
			after := w.r.eng.Stats()
			tps := func(d decodeRun) float64 { return float64(d.tokens) / d.decode.Seconds() }
			slices.Sort(ratios)
			slices.Sort(cpuRatios)
			b.ReportMetric(tps(off), "tok/s-off")
			b.ReportMetric(tps(on), "tok/s-on")
			b.ReportMetric(ratios[len(ratios)/2], "speedup-median")
			b.ReportMetric(tps(on)/tps(off), "speedup-total")
			b.ReportMetric(cpuRatios[len(cpuRatios)/2], "speedup-cpu-median")
			b.ReportMetric(off.cpu.Seconds()/on.cpu.Seconds(), "speedup-cpu-total")
			proposed, accepted := after.SpecProposed-before.SpecProposed, after.SpecAccepted-before.SpecAccepted
			b.ReportMetric(float64(proposed)/float64(on.tokens), "proposed/token")
			b.ReportMetric(float64(accepted)/float64(on.tokens), "accepted/token")
		})
	}
}

// BenchmarkSpeculativeDecodeSmallBatch is BenchmarkSpeculativeDecodeSmall
// with 4 sequences decoding together (4 prompts of a workload, 48 tokens
// each), in CPU time of the whole requests (prefill included, the same
// with and without speculation, so the ratios understate decode's): the
// proposals' verification rows now share each step with other sequences.
// Run with: go test -run '^$' -bench SpeculativeDecodeSmallBatch -benchtime 8x -timeout 30m ./worker/engine/
func BenchmarkSpeculativeDecodeSmallBatch(b *testing.B) {
	m := smallModel(b)
	const tokens, batch = 48, 4
	copyRig := newRig(b, rigOptions{model: m, threads: 2, chunk: 256, maxBatch: batch, pages: 256, edit: quietAttention(0)})
	plainRig := newRig(b, rigOptions{model: m, threads: 2, chunk: 256, maxBatch: batch, pages: 256})
	var copyPrompts, randomPrompts, rejectPrompts [][]int32
	for i := range batch {
		head := prompt(uint64(20+i), 16, m.Config.VocabSize)
		walk := copyRig.run(b, owner(fmt.Sprint("walk", i)), head, greedy(tokens+2)).tokens
		// The head, the walk from it, and the head's last token again: the
		// output retraces the walk, quoting the prompt.
		cp := append(slices.Clone(head), walk...)
		copyPrompts = append(copyPrompts, append(cp, head[len(head)-1]))
		randomPrompts = append(randomPrompts, prompt(uint64(30+i), 64, m.Config.VocabSize))
		walk = append(head[len(head)-1:len(head):len(head)], walk...)
		noise := prompt(uint64(40+i), len(walk), m.Config.VocabSize)
		rej := slices.Clone(head)
		for j := range len(walk) - 2 {
			rej = append(rej, walk[j], walk[j+1], noise[j])
		}
		rejectPrompts = append(rejectPrompts, append(rej, head...))
	}
	for _, w := range []struct {
		name    string
		r       *rig
		prompts [][]int32
	}{{"copy", copyRig, copyPrompts}, {"random", plainRig, randomPrompts}, {"rejected", copyRig, rejectPrompts}} {
		b.Run(w.name, func(b *testing.B) {
			var ratios []float64
			var total [2]time.Duration // off, on
			before := w.r.eng.Stats()
			i := 0
			for b.Loop() {
				i++
				var pair [2]time.Duration
				for _, speculate := range []bool{i%2 == 0, i%2 != 0} {
					start := cpuTime(b)
					var sts []*engine.Stream
					for k, p := range w.prompts {
						o := owner(fmt.Sprint(w.name, i, speculate, k))
						pages, err := w.r.pool.Reserve(o, len(p)+tokens)
						if err != nil {
							b.Fatal(err)
						}
						st, err := w.r.eng.Submit(context.Background(), engine.Request{Owner: o, Pages: pages, Prompt: p,
							Sampling: engine.Sampling{MaxTokens: tokens, IgnoreEOS: true, Speculate: &speculate}})
						if err != nil {
							b.Fatal(err)
						}
						sts = append(sts, st)
					}
					for k, st := range sts {
						if out := collect(b, st); len(out.tokens) != tokens {
							b.Fatalf("%d tokens: %v", len(out.tokens), out.res.Err)
						}
						w.r.pool.Release(owner(fmt.Sprint(w.name, i, speculate, k)))
					}
					at := 0
					if speculate {
						at = 1
					}
					pair[at] = cpuTime(b) - start
					total[at] += pair[at]
				}
				ratios = append(ratios, pair[0].Seconds()/pair[1].Seconds())
			}
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "speedup-cpu-median")
			b.ReportMetric(total[0].Seconds()/total[1].Seconds(), "speedup-cpu-total")
			after, out := w.r.eng.Stats(), float64(i*len(w.prompts)*tokens)
			b.ReportMetric(float64(after.SpecProposed-before.SpecProposed)/out, "proposed/token")
			b.ReportMetric(float64(after.SpecAccepted-before.SpecAccepted)/out, "accepted/token")
		})
	}
}
