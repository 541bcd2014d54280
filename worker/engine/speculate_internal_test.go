package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestProposeLongestLatestMatch(t *testing.T) {
	for _, c := range []struct {
		name     string
		hist     []int32
		min, max int
		k        int
		want     []int32
	}{
		// The 3-gram 1 2 3 occurred once (followed by 9 9); the 1-gram 3
		// more recently (followed by 7): the longer suffix wins.
		{"longest first", []int32{1, 2, 3, 9, 9, 3, 7, 5, 1, 2, 3}, 1, 3, 4, []int32{9, 9, 3, 7}},
		// Two occurrences of 4 5: the latest one's continuation.
		{"latest occurrence", []int32{4, 5, 1, 1, 4, 5, 2, 2, 0, 4, 5}, 2, 2, 2, []int32{2, 2}},
		// A continuation running into the end of the history is cut there.
		{"cut at the end", []int32{8, 6, 8}, 1, 2, 4, []int32{6, 8}},
		// ngram_min 2: a lone repeated token proposes nothing.
		{"below ngram_min", []int32{3, 1, 2, 3}, 2, 3, 4, nil},
		{"no match", []int32{1, 2, 3, 4}, 1, 3, 4, nil},
		{"one token", []int32{1}, 1, 3, 4, nil},
		{"k of 1", []int32{1, 2, 3, 1, 2}, 1, 3, 1, []int32{3}},
	} {
		got := propose(c.hist, c.min, c.max, make([]int32, 0, c.k))
		if !slices.Equal(got, c.want) && (len(got) != 0 || len(c.want) != 0) {
			t.Errorf("%s: propose(%v) = %v, want %v", c.name, c.hist, got, c.want)
		}
	}
}

func TestSpeculationDefaultsAndRanges(t *testing.T) {
	sp, err := Speculation{}.withDefaults()
	if err != nil || sp.K != DefaultSpecK || sp.NgramMax != DefaultNgramMax || sp.NgramMin != DefaultNgramMin {
		t.Fatalf("defaults: %+v, %v", sp, err)
	}
	if sp, err := (Speculation{NgramMax: 1}).withDefaults(); err != nil || sp.NgramMin != 1 {
		t.Fatalf("ngram_max 1: %+v, %v", sp, err)
	}
	for _, bad := range []Speculation{{K: -1}, {K: maxSpecK + 1}, {NgramMin: 3, NgramMax: 2}, {NgramMax: maxNgram + 1}, {NgramMin: -1}} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// BenchmarkProposeNoMatch is the lookup a speculating sequence pays every
// decode step when nothing repeats (the nothing-to-copy workload): the
// default suffix lengths scanned over a history of random tokens from a
// 32000-token vocabulary.
func BenchmarkProposeNoMatch(b *testing.B) {
	for _, n := range []int{512, 4096} {
		b.Run(map[int]string{512: "hist512", 4096: "hist4096"}[n], func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			hist := make([]int32, n)
			for i := range hist {
				hist[i] = int32(r.IntN(32000))
			}
			dst := make([]int32, 0, DefaultSpecK)
			for b.Loop() {
				dst = propose(hist, DefaultNgramMin, DefaultNgramMax, dst)
			}
		})
	}
}

func TestBackOffAfterFailedProposals(t *testing.T) {
	var s sequence
	var skips []int
	for range 6 {
		s.backOff(0)
		skips = append(skips, s.specSkip)
	}
	if want := []int{1, 3, 7, 15, 16, 16}; !slices.Equal(skips, want) {
		t.Fatalf("pauses after failed proposals %v, want %v", skips, want)
	}
	s.specSkip = 0
	s.backOff(2)
	s.backOff(0)
	if s.specSkip != 1 {
		t.Fatalf("an accepted proposal did not reset the pause: %d", s.specSkip)
	}
}
