package probe

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
)

// markerPrefix starts every marker, so markers are easy to find in any
// response and unlikely to be produced by chance.
const markerPrefix = "QZX"

// ngram is the length, in words, of the sequences compared between a
// response and other requests' prompts.
const ngram = 4

// syllables build the filler words: pronounceable, varied, and drawn at
// random per request, so any 4-word run of one prompt is, with
// overwhelming probability, in no other prompt.
var syllables = []string{
	"ba", "ke", "lo", "mi", "nu", "pa", "re", "si", "to", "vu",
	"da", "fe", "gi", "ho", "ju", "ka", "le", "mo", "ni", "po",
	"ra", "se", "ti", "wo", "ya", "zu", "cha", "sho", "tri", "bel",
}

// textGen makes markers and filler text from one seeded source.
type textGen struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newTextGen(seed uint64) *textGen {
	return &textGen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// marker returns a fresh marker: markerPrefix and 12 random letters.
func (g *textGen) marker() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var b strings.Builder
	b.WriteString(markerPrefix)
	for range 12 {
		b.WriteByte(byte('A' + g.rng.IntN(26)))
	}
	return b.String()
}

// words returns n random filler words separated by spaces.
func (g *textGen) words(n int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		k := 2 + g.rng.IntN(2)
		for range k {
			b.WriteString(syllables[g.rng.IntN(len(syllables))])
		}
	}
	return b.String()
}

// chars returns random filler words cut to exactly n characters.
func (g *textGen) chars(n int) string {
	s := g.words(n/2 + 1)
	for len(s) < n {
		s += " " + g.words(n/2+1)
	}
	return s[:n]
}

// intn returns a random int in [0, n).
func (g *textGen) intn(n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rng.IntN(n)
}

// markedPrompt is a prompt with markers at its start, middle and end.
type markedPrompt struct {
	Text    string
	Markers []string
}

// markedPrompt builds a prompt of about words filler words, with markers
// at the start, the middle and the end, and an instruction to repeat them
// (a model that copies its context then shows whose context it reads).
func (g *textGen) markedPrompt(words int) markedPrompt {
	m := []string{g.marker(), g.marker(), g.marker()}
	half := words / 2
	text := fmt.Sprintf("%s %s %s %s %s\nRepeat every code that starts with %s above.",
		m[0], g.words(half), m[1], g.words(words-half), m[2], markerPrefix)
	return markedPrompt{Text: text, Markers: m}
}

// leakIndex remembers every prompt sent during a run, to say whose text a
// response contains.
type leakIndex struct {
	mu      sync.Mutex
	markers map[string]string          // marker -> request label
	grams   map[string]map[string]bool // n-gram -> request labels
}

func newLeakIndex() *leakIndex {
	return &leakIndex{markers: map[string]string{}, grams: map[string]map[string]bool{}}
}

// add records the prompt of request label.
func (x *leakIndex) add(label string, p markedPrompt) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, m := range p.Markers {
		x.markers[m] = label
	}
	for _, g := range wordGrams(p.Text) {
		if x.grams[g] == nil {
			x.grams[g] = map[string]bool{}
		}
		x.grams[g][label] = true
	}
}

// leak is text of one request found in another's response.
type leak struct {
	// Source is the request whose prompt the text came from.
	Source string
	// Evidence is the marker, or the overlapping words.
	Evidence string
}

// minForeignGrams and minForeignShare decide when n-gram overlap is a
// leak: a few shared 4-grams of random words are already far beyond
// chance, and a share of the response guards against long outputs.
const (
	minForeignGrams = 3
	minForeignShare = 0.2
)

// check returns the foreign text in response, which was produced for
// request label: markers of other requests, or a run of n-grams of
// another request's prompt.
func (x *leakIndex) check(label, response string) []leak {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []leak
	for _, tok := range strings.FieldsFunc(response, func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		i := strings.Index(tok, markerPrefix)
		if i < 0 || len(tok)-i < len(markerPrefix)+12 {
			continue
		}
		m := tok[i : i+len(markerPrefix)+12]
		if src, ok := x.markers[m]; ok && src != label {
			out = append(out, leak{Source: src, Evidence: "marker " + m})
		}
	}
	grams := wordGrams(response)
	if len(grams) == 0 {
		return out
	}
	counts := map[string]int{}
	examples := map[string]string{}
	for _, g := range grams {
		owners := x.grams[g]
		if owners[label] {
			continue
		}
		for src := range owners {
			counts[src]++
			if examples[src] == "" {
				examples[src] = g
			}
		}
	}
	for src, n := range counts {
		if n >= minForeignGrams && float64(n)/float64(len(grams)) >= minForeignShare {
			out = append(out, leak{Source: src, Evidence: fmt.Sprintf("%d of %d word %d-grams of its prompt, e.g. %q", n, len(grams), ngram, examples[src])})
		}
	}
	return out
}

// wordGrams returns the word n-grams of text, lower-cased.
func wordGrams(text string) []string {
	w := strings.Fields(strings.ToLower(text))
	if len(w) < ngram {
		return nil
	}
	out := make([]string, 0, len(w)-ngram+1)
	for i := 0; i+ngram <= len(w); i++ {
		out = append(out, strings.Join(w[i:i+ngram], " "))
	}
	return out
}
