package serve

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Range is an inclusive range of lengths; Min == Max for a fixed length.
type Range struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// ParseRange parses "N" or "MIN:MAX" (0 < MIN ≤ MAX).
func ParseRange(s string) (Range, error) {
	lo, hi, found := strings.Cut(s, ":")
	if !found {
		hi = lo
	}
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil || a < 1 || b < a {
		return Range{}, fmt.Errorf("%q: want N or MIN:MAX with 0 < MIN ≤ MAX", s)
	}
	return Range{a, b}, nil
}

// String formats r as ParseRange reads it.
func (r Range) String() string {
	if r.Min == r.Max {
		return strconv.Itoa(r.Min)
	}
	return fmt.Sprintf("%d:%d", r.Min, r.Max)
}

func (r Range) draw(rng *rand.Rand) int { return r.Min + rng.IntN(r.Max-r.Min+1) }

// words are common English words that are one token each, with their
// leading space, in the Llama 3, Qwen 2/3 and Mistral (Tekken) vocabularies.
var words = strings.Fields(`the of and to in is was for on that with as by at from his her
it an be this which or are had not but have they one all were their there been has when
who will more no if out so said what up its about into than them can only other new some
time could these two may then do first any my now such like our over man me even most
made after also did many before must through back years where much your way well down
should because each just those people how too little state good very make world still own
see men work long get here between both life being under never day same another know
while last might us great old year off come since against go came right used take three
house use during without again place around however home small found thought went say part
once general high upon school every does got united left number course war until
always away something fact though water less public put think almost hand enough far took
head yet government system better set told nothing night end why called find look
asked later knew point next program city business give group toward young days let room
president side social given present several order national possible rather second face per
among form important often things looked early white case john become large big need four
within felt along children saw best church ever least power development light thing family
interest want members mind country area others done turned although open god service certain
kind problem began different door thus help sense means whole matter perhaps itself york
times law human line above name example action company hands local show whether five history
gave today either act feet across taken past quite anything seen having death experience body
word half really field am car words already themselves information tell together college shall
money period held keep sure real probably free seems political cannot behind miss question
air office making brought whose special heard major problems ago became federal moment study
available known result street economic boy position reason change south board individual job
society areas west close turn love community true court force full seem art policy`)

// workload draws the prompts and output lengths of one client in one
// round; the same seed gives every endpoint the same sequence.
type workload struct {
	rng    *rand.Rand
	prompt Range
	output Range
	prefix []string // shared by every prompt of the run
	share  float64
}

// newWorkload is client c's workload in round r of a run seeded seed.
func newWorkload(o *Options, prefix []string, r, c int) *workload {
	return &workload{
		rng:    rand.New(rand.NewPCG(o.Seed, uint64(r)<<32|uint64(c))),
		prompt: o.PromptWords, output: o.OutputTokens, prefix: prefix, share: o.SharedPrefix,
	}
}

// sharedPrefix is the run's shared prefix: as many words as the longest
// prompt's share.
func sharedPrefix(o *Options) []string {
	n := int(o.SharedPrefix * float64(o.PromptWords.Max))
	rng := rand.New(rand.NewPCG(o.Seed, ^uint64(0)))
	out := make([]string, n)
	for i := range out {
		out[i] = words[rng.IntN(len(words))]
	}
	return out
}

// next returns the next prompt and its max_tokens.
func (w *workload) next() (string, int) {
	n := w.prompt.draw(w.rng)
	shared := min(int(w.share*float64(n)), len(w.prefix))
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		if i < shared {
			b.WriteString(w.prefix[i])
		} else {
			b.WriteString(words[w.rng.IntN(len(words))])
		}
	}
	return b.String(), w.output.draw(w.rng)
}
